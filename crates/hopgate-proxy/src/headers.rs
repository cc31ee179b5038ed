//! Header rewriting between client and backend.
//!
//! Owns hop-by-hop stripping (RFC 9110 §7.6.1, plus every header named in
//! `Connection`), the forwarding headers hopgate adds, and request ids.
//! Must not touch: routing or bodies.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
pub static X_ROUTE_RULE_ID: HeaderName = HeaderName::from_static("x-route-rule-id");
pub static X_UPSTREAM_ADDR: HeaderName = HeaderName::from_static("x-upstream-addr");
pub static X_HOP_FROM: HeaderName = HeaderName::from_static("x-hop-from");
pub static HOP_SESSION_CONTEXT: HeaderName = HeaderName::from_static("hop-session-context");
pub static HOP_MAINTENANCE: HeaderName = HeaderName::from_static("hop-maintenance");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Does `name` need attention from [`strip_hop_by_hop`]?
fn special(name: &HeaderName) -> bool {
    *name == header::CONNECTION
        || *name == header::TRANSFER_ENCODING
        || *name == header::UPGRADE
        || *name == header::TRAILER
        || *name == header::PROXY_AUTHENTICATE
        || *name == header::PROXY_AUTHORIZATION
        || *name == header::EXPECT
        || *name == header::TE
        || *name == KEEP_ALIVE
        || *name == PROXY_CONNECTION
        || *name == X_HOP_FROM
        || *name == HOP_SESSION_CONTEXT
}

/// Removes hop-by-hop headers. `TE: trailers` is kept on requests (gRPC
/// needs it); everything named in `Connection` goes too. On requests the
/// headers only the gateway may send to backends (`X-Hop-From`,
/// `Hop-Session-Context`) are removed as well.
///
/// One pass over the header names finds whether there is anything to do at
/// all (usually not), instead of hashing a dozen names for every request.
pub fn strip_hop_by_hop(headers: &mut HeaderMap, is_request: bool) {
    if !headers.keys().any(special) {
        return;
    }
    if let Some(conn) = headers.get(header::CONNECTION) {
        // Rare: only a client or backend that names extra headers pays this.
        let named: Vec<HeaderName> = conn
            .to_str()
            .unwrap_or("")
            .split(',')
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for n in named {
            if n != header::TE || !is_request {
                headers.remove(&n);
            }
        }
        headers.remove(header::CONNECTION);
    }
    headers.remove(&KEEP_ALIVE);
    headers.remove(&PROXY_CONNECTION);
    headers.remove(header::TRANSFER_ENCODING);
    headers.remove(header::UPGRADE);
    headers.remove(header::TRAILER);
    headers.remove(header::PROXY_AUTHENTICATE);
    headers.remove(header::PROXY_AUTHORIZATION);
    if is_request {
        // hopgate answers `Expect: 100-continue` itself (hyper sends the 100
        // when the body is first read).
        headers.remove(header::EXPECT);
        if let Some(te) = headers.get(header::TE) {
            if !te.as_bytes().eq_ignore_ascii_case(b"trailers") {
                headers.remove(header::TE);
            }
        }
        headers.remove(&X_HOP_FROM);
        headers.remove(&HOP_SESSION_CONTEXT);
    } else {
        headers.remove(header::TE);
    }
}

/// Appends the peer to `X-Forwarded-For` (like nginx's
/// `$proxy_add_x_forwarded_for`).
pub fn append_forwarded_for(headers: &mut HeaderMap, peer: IpAddr) {
    let mut buf = String::with_capacity(48);
    if let Some(prev) = headers.get(&X_FORWARDED_FOR).and_then(|v| v.to_str().ok()) {
        buf.push_str(prev);
        buf.push_str(", ");
    }
    use std::fmt::Write;
    let _ = write!(buf, "{peer}");
    if let Ok(v) = HeaderValue::from_str(&buf) {
        headers.insert(X_FORWARDED_FOR.clone(), v);
    }
}

/// A new request id: a per-process random prefix and a counter, 32 hex
/// digits, unique across processes with overwhelming probability.
pub fn new_request_id() -> HeaderValue {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| fastrand::u64(..));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 32];
    hex(prefix, &mut buf[..16]);
    hex(n, &mut buf[16..]);
    HeaderValue::from_bytes(&buf).expect("hex digits are a valid header value")
}

fn hex(mut v: u64, out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(v & 0xf) as usize];
        v >>= 4;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_hop_by_hop_and_named() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert(header::TE, HeaderValue::from_static("trailers"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert("x-keep", HeaderValue::from_static("yes"));
        strip_hop_by_hop(&mut h, true);
        assert!(h.get("x-secret").is_none());
        assert!(h.get("keep-alive").is_none());
        assert!(h.get(header::CONNECTION).is_none());
        assert!(h.get(header::UPGRADE).is_none());
        assert_eq!(h.get(header::TE).unwrap(), "trailers");
        assert_eq!(h.get("x-keep").unwrap(), "yes");
        // Clients cannot forge the gateway's own headers.
        h.insert("x-hop-from", HeaderValue::from_static("n1"));
        h.insert("hop-session-context", HeaderValue::from_static("x"));
        strip_hop_by_hop(&mut h, true);
        assert!(h.get("x-hop-from").is_none() && h.get("hop-session-context").is_none());
        // Nothing special: nothing touched.
        let mut plain = HeaderMap::new();
        plain.insert("accept", HeaderValue::from_static("*/*"));
        strip_hop_by_hop(&mut plain, true);
        assert_eq!(plain.len(), 1);
        h.insert(header::TE, HeaderValue::from_static("gzip"));
        strip_hop_by_hop(&mut h, true);
        assert!(h.get(header::TE).is_none());
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        append_forwarded_for(&mut h, "10.0.0.1".parse().unwrap());
        assert_eq!(h.get(&X_FORWARDED_FOR).unwrap(), "10.0.0.1");
        append_forwarded_for(&mut h, "::1".parse().unwrap());
        assert_eq!(h.get(&X_FORWARDED_FOR).unwrap(), "10.0.0.1, ::1");
    }

    #[test]
    fn request_ids_are_unique_hex() {
        let a = new_request_id();
        let b = new_request_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.as_bytes().iter().all(|c| c.is_ascii_hexdigit()));
    }
}
