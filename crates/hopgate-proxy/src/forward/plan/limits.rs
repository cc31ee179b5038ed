//! Phase 4: the request limits the servers (hopgate's HTTP/1.1 codec,
//! hyper's HTTP/2) do not enforce on their own, checked on the request as
//! the client sent it.
//!
//! Owns the refusal of `TRACE`, the URI, header-count, head-size and
//! declared body-size limits, and [`content_length`]. The body limit is a
//! route's (`routes[].limits.max_body_bytes`, else the global one), so
//! [`body`] is called once the route is known. Must not touch: the
//! request (it is only read), bodies as they stream (their limit is
//! counted by `ProxyBody`).

use http::header::HeaderMap;
use http::{Method, Request};

use hopgate_core::config::Limits;
use hopgate_core::error::ErrorKind;

use crate::headers::RequestFacts;

/// `TRACE` (it would echo cookies and credentials back: **405**), then
/// the URI (**414**), the header count and head size (**431**).
/// Allocates nothing.
#[inline]
pub(super) fn check<B>(
    req: &Request<B>,
    facts: &RequestFacts,
    limits: &Limits,
) -> Result<(), ErrorKind> {
    if req.method() == Method::TRACE {
        return Err(ErrorKind::MethodNotAllowed);
    }
    let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > limits.max_uri_bytes {
        return Err(ErrorKind::UriTooLong);
    }
    if facts.count > limits.max_headers || head_bytes(req, facts) > limits.max_header_bytes {
        return Err(ErrorKind::HeadersTooLarge);
    }
    Ok(())
}

/// A declared `Content-Length` above `max_body` (the route's limit):
/// **413** (looked up only when the scan saw one).
#[inline]
pub(super) fn body<B>(
    req: &Request<B>,
    facts: &RequestFacts,
    max_body: u64,
) -> Result<(), ErrorKind> {
    match facts
        .content_length
        .then(|| content_length(req.headers()))
        .flatten()
    {
        Some(len) if len > max_body => Err(ErrorKind::BodyTooLarge),
        _ => Ok(()),
    }
}

/// Size of a request head as sent: request line and `name: value` lines
/// (counted by [`crate::headers::scan_request`]).
fn head_bytes<B>(req: &Request<B>, facts: &RequestFacts) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + 12;
    line + facts.header_bytes
}

/// The declared `Content-Length`, if it is a number.
pub(in crate::forward) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Phase 9½: the route's rate limit (`routes[].rate_limit`), keyed by
/// what its policy names: `who` is the client's address and its session
/// id when known. Over the limit the refusal is kept in `out` for the
/// answer's headers. `None` without a limit or without `max_in_flight`.
#[inline]
pub(super) fn rate<B>(
    route: &hopgate_core::snapshot::CompiledRoute,
    index: usize,
    req: &Request<B>,
    (client_ip, session): (std::net::IpAddr, Option<&[u8]>),
    started: std::time::Instant,
    out: &mut super::super::done::Outcome,
) -> Result<Option<hopgate_core::limit::Held>, ErrorKind> {
    crate::limit::admit(route, index, client_ip, req.headers(), session, started).map_err(
        |refused| {
            out.limited = Some(refused);
            ErrorKind::RateLimited
        },
    )
}
