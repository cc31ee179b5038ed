//! The PROXY protocol (HAProxy's v1 text and v2 binary headers) on both
//! sides of the gateway.
//!
//! Owns, for listeners with `proxy_protocol`: the trusted-source check at
//! accept ([`Inbound::trusts`]), reading the header with its deadline
//! before anything else of the connection, TLS included ([`Inbound::read`]
//! in [`read`]), and the address it carries, which the listener hands to
//! the connection in place of the socket's peer, so every later use (access
//! rules, route CIDRs, hashing, canary stickiness, `X-Forwarded-For`, the
//! access log, spans) sees it. For services with `proxy_protocol`: the
//! header written first on each new upstream connection ([`header_for`]).
//! And the `hopgate_proxy_protocol_total{listener,result}` counters
//! ([`metrics`]).
//!
//! Must not touch: HTTP, routing, the pool's connection reuse (the pool
//! decides which connection may carry which client; this module only
//! renders the bytes).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use hopgate_core::access::CidrSet;
use hopgate_core::config::{ListenerProxyProtocol, ProxyProtocolVersion};

pub(crate) mod metrics;
mod read;
#[cfg(test)]
mod tests;

pub use metrics::ProxyProtocolCollector;
use metrics::{Counters, Outcome};

/// A listener's compiled `proxy_protocol` block. Compared by its
/// configuration (a reload that keeps it keeps the listener's settings).
#[derive(Debug)]
pub struct Inbound {
    cfg: ListenerProxyProtocol,
    trusted: CidrSet,
    counters: Arc<Counters>,
}

impl PartialEq for Inbound {
    fn eq(&self, other: &Inbound) -> bool {
        self.cfg == other.cfg
    }
}

impl Eq for Inbound {}

impl Inbound {
    /// The block of listener `listener`, with that listener's counters.
    pub fn new(listener: &str, cfg: &ListenerProxyProtocol) -> Inbound {
        Inbound {
            cfg: cfg.clone(),
            trusted: CidrSet::new(&cfg.trusted_cidrs),
            counters: metrics::counters(listener),
        }
    }

    /// Whether `peer` may connect at all: with the PROXY protocol on, only
    /// the trusted balancers may (HAProxy's `accept-proxy`). A refusal is
    /// counted (`untrusted`).
    pub(crate) fn trusts(&self, peer: IpAddr) -> bool {
        let ok = self.trusted.contains(peer);
        if !ok {
            self.counters.add(Outcome::Untrusted);
        }
        ok
    }

    /// Reads the connection's header within the timeout and gives the
    /// client's address it carries (the socket's `peer` for a v2 `LOCAL`
    /// or a v1 `UNKNOWN` header, a balancer's own health check). `None`:
    /// the connection is to be closed (timeout, closed, malformed, a
    /// version not accepted); counted and logged at debug.
    pub(crate) async fn read(
        &self,
        stream: &mut tokio::net::TcpStream,
        peer: SocketAddr,
    ) -> Option<SocketAddr> {
        let accepts = read::Accepts {
            v1: self.cfg.v1,
            v2: self.cfg.v2,
        };
        let outcome =
            match tokio::time::timeout(self.cfg.timeout, read::header(stream, accepts)).await {
                Err(_) => Err(Outcome::Timeout),
                Ok(r) => r,
            };
        match outcome {
            Ok(Some(client)) => {
                self.counters.add(Outcome::Ok);
                Some(SocketAddr::new(client.ip().to_canonical(), client.port()))
            }
            Ok(None) => {
                self.counters.add(Outcome::Local);
                Some(peer)
            }
            Err(why) => {
                self.counters.add(why);
                tracing::debug!(%peer, result = why.label(), "PROXY protocol header refused; connection closed");
                None
            }
        }
    }
}

/// The header a service with `proxy_protocol` writes first on a new
/// connection to `node`, carrying `client` (the address after the
/// listener's own PROXY protocol). `None` as the client: a connection
/// opened for no client (a health check, a pre-dialled one), sent as v2
/// `LOCAL` or v1 `UNKNOWN`, which the node answers with its socket's view.
pub fn header_for(
    version: ProxyProtocolVersion,
    client: Option<SocketAddr>,
    node: SocketAddr,
) -> Vec<u8> {
    // Both addresses in one family: an IPv4 one becomes IPv4-mapped beside
    // an IPv6 one.
    let pair = client.map(|c| match (c, node) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => {
            (c, node)
        }
        _ => (v6(c), v6(node)),
    });
    match version {
        ProxyProtocolVersion::V1 => match pair {
            Some(pair) => ppp::v1::Addresses::from(pair).to_string().into_bytes(),
            None => b"PROXY UNKNOWN\r\n".to_vec(),
        },
        ProxyProtocolVersion::V2 => {
            use ppp::v2::{Addresses, Builder, Command, Protocol, Version};
            let (command, addresses) = match pair {
                Some(pair) => (Command::Proxy, Addresses::from(pair)),
                None => (Command::Local, Addresses::Unspecified),
            };
            let proto = match addresses {
                Addresses::Unspecified => Protocol::Unspecified,
                _ => Protocol::Stream,
            };
            // Building into a vector cannot fail; an empty header would be
            // refused by the node, never misread.
            Builder::with_addresses(Version::Two | command, proto, addresses)
                .build()
                .unwrap_or_default()
        }
    }
}

/// What the fuzz target drives: where the header at the start of `b`
/// ends (`(length, version)`, `None` for not a header or more needed) and
/// what the whole header says (`Err` for refused: malformed).
#[cfg(feature = "fuzzing")]
pub fn fuzz_read(b: &[u8]) -> (Option<(usize, u8)>, Option<Result<Option<SocketAddr>, ()>>) {
    let all = read::Accepts { v1: true, v2: true };
    match read::extent(b) {
        read::Extent::Header(len, v) => (
            Some((len, v)),
            Some(read::parse(&b[..len.min(b.len())], all).map_err(|_| ())),
        ),
        read::Extent::More | read::Extent::Bad => (None, None),
    }
}

fn v6(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) => SocketAddr::new(IpAddr::V6(v4.ip().to_ipv6_mapped()), v4.port()),
        v6 => v6,
    }
}

/// What a service with `proxy_protocol` puts first on a new upstream
/// connection: the version, and the client it names (`None`: a
/// connection opened for no client, which a client's request never
/// reuses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendProxy {
    pub version: ProxyProtocolVersion,
    pub client: Option<SocketAddr>,
}

impl SendProxy {
    pub fn without_client(version: ProxyProtocolVersion) -> SendProxy {
        SendProxy {
            version,
            client: None,
        }
    }
}

/// The client address a pooled connection must have been opened for to
/// serve a request under these settings (`None` without the PROXY
/// protocol, or for no client). Connections are matched by IP: the
/// header's source port is that of the client connection that opened it.
pub(crate) fn client_ip(p: Option<SendProxy>) -> Option<IpAddr> {
    p.and_then(|p| p.client).map(|c| c.ip())
}

/// Writes `p`'s header to a freshly dialled `node` (before TLS).
pub(crate) async fn send(
    tcp: &mut tokio::net::TcpStream,
    p: SendProxy,
    node: SocketAddr,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    tcp.write_all(&header_for(p.version, p.client, node)).await
}
