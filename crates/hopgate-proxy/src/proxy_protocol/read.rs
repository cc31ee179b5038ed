//! Reading one PROXY protocol header off a freshly accepted socket, and
//! not a byte more: the bytes after it (an HTTP request, a TLS
//! ClientHello) stay in the socket for whoever serves the connection.
//!
//! The socket is peeked, the header's length found from what arrived
//! (v1: up to CRLF, at most 107 bytes; v2: 16 bytes plus the length they
//! give), and exactly that much is read. A header split across segments
//! is consumed as far as it arrived (every one of those bytes belongs to
//! it), so the next peek waits for new data instead of spinning. Parsing
//! is `ppp`'s.
//!
//! Must not touch: the deadline (the caller's), counters.

use std::net::SocketAddr;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::metrics::Outcome;

/// The v2 signature.
const V2_SIG: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// What a v1 header starts with.
const V1_SIG: &[u8; 6] = b"PROXY ";
/// A v1 header's longest form (the spec's bound, CRLF included).
const V1_MAX: usize = 107;
/// The largest v2 header taken: 16 bytes and its addresses and TLVs (the
/// balancers' TLVs, such as AWS's VPC endpoint id, are tens of bytes).
const V2_MAX: usize = 4096;

/// The versions a listener accepts.
#[derive(Clone, Copy, Debug)]
pub(super) struct Accepts {
    pub(super) v1: bool,
    pub(super) v2: bool,
}

/// How far the bytes so far go.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Extent {
    /// A whole header of this many bytes, of version 1 or 2.
    Header(usize, u8),
    /// A header so far; more must arrive.
    More,
    /// Not a header, or one too long.
    Bad,
}

/// Where the header in `b` (the connection's first bytes) ends.
pub(super) fn extent(b: &[u8]) -> Extent {
    let n = b.len();
    if n > 0 && V2_SIG[..n.min(12)] == b[..n.min(12)] {
        if n < 16 {
            return Extent::More;
        }
        let total = 16 + usize::from(u16::from_be_bytes([b[14], b[15]]));
        return match total {
            t if t > V2_MAX => Extent::Bad,
            t if n >= t => Extent::Header(t, 2),
            _ => Extent::More,
        };
    }
    if n > 0 && V1_SIG[..n.min(6)] == b[..n.min(6)] {
        let window = &b[..n.min(V1_MAX)];
        return match memchr::memmem::find(window, b"\r\n") {
            Some(i) => Extent::Header(i + 2, 1),
            None if n >= V1_MAX => Extent::Bad,
            None => Extent::More,
        };
    }
    if n == 0 {
        Extent::More
    } else {
        Extent::Bad
    }
}

/// What a whole header says: `Some(client)` for an address it carries,
/// `None` for one to be ignored (v2 `LOCAL`, v1 `UNKNOWN`, a v2 header
/// of the `UNSPEC` or Unix family).
pub(super) fn parse(h: &[u8], accepts: Accepts) -> Result<Option<SocketAddr>, Outcome> {
    match ppp::HeaderResult::parse(h) {
        ppp::HeaderResult::V1(Ok(h)) => {
            if !accepts.v1 {
                return Err(Outcome::Version);
            }
            Ok(match h.addresses {
                ppp::v1::Addresses::Tcp4(a) => {
                    Some(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                ppp::v1::Addresses::Tcp6(a) => {
                    Some(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                ppp::v1::Addresses::Unknown => None,
            })
        }
        ppp::HeaderResult::V2(Ok(h)) => {
            if !accepts.v2 {
                return Err(Outcome::Version);
            }
            if h.command == ppp::v2::Command::Local {
                return Ok(None);
            }
            Ok(match h.addresses {
                ppp::v2::Addresses::IPv4(a) => {
                    Some(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                ppp::v2::Addresses::IPv6(a) => {
                    Some(SocketAddr::new(a.source_address.into(), a.source_port))
                }
                ppp::v2::Addresses::Unspecified | ppp::v2::Addresses::Unix(_) => None,
            })
        }
        ppp::HeaderResult::V1(Err(_)) | ppp::HeaderResult::V2(Err(_)) => Err(Outcome::Malformed),
    }
}

/// Reads the header off `stream` (no deadline here: the caller's).
pub(super) async fn header(
    stream: &mut TcpStream,
    accepts: Accepts,
) -> Result<Option<SocketAddr>, Outcome> {
    let mut head: Vec<u8> = Vec::with_capacity(64);
    let mut scratch = vec![0u8; 512];
    loop {
        let n = match stream.peek(&mut scratch).await {
            Ok(0) | Err(_) => return Err(Outcome::Closed),
            Ok(n) => n,
        };
        let before = head.len();
        head.extend_from_slice(&scratch[..n]);
        match extent(&head) {
            Extent::Bad => {
                // A version refused by its signature alone reads better
                // than "malformed".
                let v2 = head.starts_with(&V2_SIG[..head.len().min(12)]);
                let v1 = head.starts_with(&V1_SIG[..head.len().min(6)]);
                return Err(if (v2 && !accepts.v2) || (v1 && !accepts.v1) {
                    Outcome::Version
                } else {
                    Outcome::Malformed
                });
            }
            Extent::More => {
                // Everything that arrived belongs to the header: take it,
                // so the next peek waits for more.
                stream
                    .read_exact(&mut scratch[..n])
                    .await
                    .map_err(|_| Outcome::Closed)?;
                if head.len() > V2_MAX {
                    return Err(Outcome::Malformed);
                }
            }
            Extent::Header(len, _) => {
                let take = len - before;
                stream
                    .read_exact(&mut scratch[..take])
                    .await
                    .map_err(|_| Outcome::Closed)?;
                head.truncate(len);
                return parse(&head, accepts);
            }
        }
    }
}
