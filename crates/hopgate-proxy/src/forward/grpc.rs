//! gRPC on the request path: the client's deadline (`grpc-timeout`), the
//! wait for a call's body, an UNAVAILABLE answer given before any response
//! byte, and the guard on a gRPC answer's stream.
//!
//! Owns what hopgate reads from gRPC headers and how a gRPC answer's body
//! is wrapped. Must not touch: retry decisions (`failure` decides what an
//! UNAVAILABLE answer leads to), gRPC error answers (`respond`), the
//! upstream connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderMap;
use http::Response;

use crate::upstream::{CompiledNode, CompiledService};

use crate::body::ProxyBody;
use crate::headers::{RequestFacts, GRPC_TIMEOUT};

/// How long a gRPC request's body may take to arrive before it is streamed
/// without a replay copy (a unary call's body arrives with its headers; a
/// client-streaming call starts at most this much later).
pub(super) const GRPC_BODY_WAIT: Duration = Duration::from_millis(50);

/// The client's deadline: `grpc-timeout` (looked up only when the scan saw
/// one) is an upper bound for the whole call, from now.
#[inline]
pub(super) fn deadline<B>(req: &http::Request<B>, facts: &RequestFacts) -> Option<Instant> {
    facts
        .grpc_timeout
        .then(|| req.headers().get(&GRPC_TIMEOUT))
        .flatten()
        .and_then(|v| parse_timeout(v.as_bytes()))
        .map(|d| Instant::now() + d)
}

/// `grpc-timeout` (`<1-8 digits><H|M|S|m|u|n>`, gRPC over HTTP/2 spec).
pub(super) fn parse_timeout(v: &[u8]) -> Option<Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// A trailers-only gRPC answer with `grpc-status: 14` (UNAVAILABLE): the
/// backend refused the call before producing any response byte.
pub(super) fn unavailable_at_once(resp: &Response<ProxyBody>) -> bool {
    use http_body::Body;
    is_grpc(resp.headers())
        && resp.headers().get("grpc-status").is_some_and(|v| v == "14")
        && resp.body().is_end_stream()
}

/// A gRPC-Web request (`application/grpc-web…`): it works over HTTP/1.1,
/// unlike gRPC itself.
pub(super) fn is_grpc_web<B>(req: &http::Request<B>) -> bool {
    req.headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc-web"))
}

/// A gRPC response (its stream gets a drain deadline).
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// A gRPC answer's stream ends with `grpc-status: 14` at its node's drain
/// deadline, and with DEADLINE_EXCEEDED at the client's deadline.
pub(super) fn guard(
    mut resp: Box<Response<ProxyBody>>,
    svc: &CompiledService,
    node: &CompiledNode,
    deadline: Option<Instant>,
) -> Box<Response<ProxyBody>> {
    let body = std::mem::replace(resp.body_mut(), ProxyBody::Empty);
    *resp.body_mut() = ProxyBody::guarded(
        body,
        Arc::clone(&node.state),
        svc.drain.deadline,
        deadline.map(tokio::time::Instant::from_std),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts() {
        assert_eq!(parse_timeout(b"300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"m", b"123456789m", b"12x", b"-1S", b"1.5S"] {
            assert_eq!(parse_timeout(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn unavailable_before_any_byte() {
        let answer = |ct: &str, status: Option<&str>, body: ProxyBody| {
            let mut r = Response::new(body);
            r.headers_mut().insert("content-type", ct.parse().unwrap());
            if let Some(s) = status {
                r.headers_mut().insert("grpc-status", s.parse().unwrap());
            }
            r
        };
        let empty = || ProxyBody::Empty;
        assert!(unavailable_at_once(&answer(
            "application/grpc",
            Some("14"),
            empty()
        )));
        assert!(unavailable_at_once(&answer(
            "application/grpc+proto",
            Some("14"),
            empty()
        )));
        assert!(!unavailable_at_once(&answer(
            "application/grpc",
            Some("13"),
            empty()
        )));
        assert!(!unavailable_at_once(&answer(
            "application/grpc",
            None,
            empty()
        )));
        assert!(!unavailable_at_once(&answer(
            "text/plain",
            Some("14"),
            empty()
        )));
        let data = ProxyBody::full(bytes::Bytes::from_static(b"\0\0\0\0\0"));
        assert!(!unavailable_at_once(&answer(
            "application/grpc",
            Some("14"),
            data
        )));
    }
}
