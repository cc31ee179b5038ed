//! Route filters on the request path: the route's compiled program
//! ([`hopgate_core::filter::RouteFilters`]) applied to one request.
//!
//! - [`on_request`]: the request-side steps in the order written (header
//!   edits, URL rewrites), on the planned upstream request, once, before
//!   the first attempt: every attempt, retry and replay sends the
//!   rewritten request. A rewritten path or host leaves the original in
//!   `X-Forwarded-Prefix` (the replaced prefix) and `X-Forwarded-Host`.
//! - [`on_response`]: the response-side header edits on a backend's
//!   answer head.
//! - [`local_answer`]: the answer of a route that answers itself (a
//!   redirect or a direct response), with its response-side edits.
//!
//! Called only for a route that has filters: a route without any pays the
//! test of one pointer at each of the three places. Must not touch: the
//! route choice, the body, node state, the lines the gateway sets beside
//! the map (`SetLines`; validation keeps filters off their names).

use std::sync::Arc;

use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, HOST, LOCATION};
use http::{HeaderMap, HeaderName, Request, Response, StatusCode};

use crate::upstream::Snapshot;
use hopgate_core::filter::{Local, PathRewrite, RequestStep, RouteFilters, UrlRewrite, Vars};

use super::done::AccessFacts;
use super::plan::with_path;
use super::ClientConn;
use crate::body::ProxyBody;
use crate::headers::{RequestId, X_FORWARDED_PROTO, X_REQUEST_ID};

/// `X-Forwarded-Host`: the host the client asked for, when a filter
/// rewrote it.
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
/// `X-Forwarded-Prefix`: the path prefix a filter replaced.
static X_FORWARDED_PREFIX: HeaderName = HeaderName::from_static("x-forwarded-prefix");

/// The request-side steps of `f` on the planned request `req` of route
/// `route` (`https`: the client's request came over HTTPS), in order.
/// The access line (`access`, while the log is on) and the span (`span`,
/// for a sampled trace) learn the rewritten path.
pub(super) fn on_request(
    (f, snap): (&RouteFilters, &Snapshot),
    (req, route, https): (&mut Request<ProxyBody>, usize, bool),
    conn: &ClientConn,
    request_id: &RequestId,
    (access, span): (Option<&mut AccessFacts>, Option<&mut crate::otlp::Span>),
) {
    let route = &snap.routes[route];
    let host = host_of(req).to_owned();
    let client_ip = snap.access.client_ip(conn.peer.ip(), req.headers());
    let vars = Vars {
        client_ip,
        request_id: request_id.as_str(),
        route_id: &route.id,
        host: &host,
        https,
    };
    let mut rewritten = false;
    for step in &f.request {
        match step {
            RequestStep::Headers(edits) => edits.apply(req.headers_mut(), &vars),
            RequestStep::Rewrite(rw) => rewritten |= rewrite(req, rw, &host),
        }
    }
    if !rewritten {
        return;
    }
    if let Some(a) = access {
        a.upstream_path = Some(req.uri().path().into());
    }
    if let Some(s) = span {
        s.rewritten_path = Some(req.uri().path().into());
    }
}

/// One `url_rewrite`; true when the path changed.
fn rewrite(req: &mut Request<ProxyBody>, rw: &UrlRewrite, original_host: &str) -> bool {
    let mut changed = false;
    if let Some(path) = &rw.path {
        if let Some(new) = path.apply(req.uri().path()) {
            if let PathRewrite::ReplacePrefix { prefix, .. } = path {
                if let Ok(v) = HeaderValue::from_str(if prefix.is_empty() { "/" } else { prefix }) {
                    req.headers_mut().insert(X_FORWARDED_PREFIX.clone(), v);
                }
            }
            if let Some(uri) = with_path(req.uri(), &new) {
                *req.uri_mut() = uri;
                changed = true;
            }
        }
    }
    if let Some(h) = &rw.host {
        if let Ok(v) = HeaderValue::from_str(original_host) {
            req.headers_mut().insert(X_FORWARDED_HOST.clone(), v);
        }
        req.headers_mut().insert(HOST, h.clone());
    }
    changed
}

/// The host the client asked for: `Host`, else the URI's authority.
fn host_of<B>(req: &Request<B>) -> &str {
    match req.headers().get(HOST) {
        Some(h) => h.to_str().unwrap_or(""),
        None => req.uri().authority().map_or("", |a| a.as_str()),
    }
}

/// The response-side edits of `f` on an answer's head.
pub(super) fn on_response(f: &RouteFilters, headers: &mut HeaderMap, route_id: &str, https: bool) {
    let vars = response_vars(route_id, https);
    for edits in &f.response {
        edits.apply(headers, &vars);
    }
}

/// Response headers may use `${route_id}` and `${scheme}` (validation
/// refuses the others there).
fn response_vars(route_id: &str, https: bool) -> Vars<'_> {
    Vars {
        client_ip: std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        request_id: "",
        route_id,
        host: "",
        https,
    }
}

/// The answer of route `route`, which answers itself: its redirect or
/// direct response, then its response-side edits.
pub(super) fn local_answer(
    snap: &Snapshot,
    route: usize,
    req: &Request<ProxyBody>,
    conn: &ClientConn,
    request_id: &RequestId,
) -> Box<Response<ProxyBody>> {
    let r = &snap.routes[route];
    let Some(f) = r.filters.as_deref() else {
        return Box::new(crate::respond::error_response(
            hopgate_core::error::ErrorKind::NoRoute,
            Some(&request_id.to_value()),
        ));
    };
    let https = came_over_https(snap, req, conn);
    let mut resp = match &f.local {
        Some(Local::Redirect(rd)) => {
            let loc = rd.location(https, host_of(req), req.uri().path(), req.uri().query());
            let mut resp = Response::new(ProxyBody::Empty);
            *resp.status_mut() = StatusCode::from_u16(rd.status).unwrap_or(StatusCode::FOUND);
            if let Ok(v) = HeaderValue::from_str(&loc) {
                resp.headers_mut().insert(LOCATION, v);
            }
            resp.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
            resp
        }
        Some(Local::Direct(d)) => {
            let mut resp = Response::new(ProxyBody::full(d.body.clone()));
            *resp.status_mut() = StatusCode::from_u16(d.status).unwrap_or(StatusCode::OK);
            if let Some(ct) = &d.content_type {
                resp.headers_mut().insert(CONTENT_TYPE, ct.clone());
            }
            resp
        }
        None => Response::new(ProxyBody::Empty),
    };
    resp.headers_mut()
        .insert(X_REQUEST_ID.clone(), request_id.to_value());
    on_response(f, resp.headers_mut(), &r.id, https);
    Box::new(resp)
}

/// The client reached the gateway over TLS, or a trusted proxy says it
/// did (`X-Forwarded-Proto: https`).
fn came_over_https(snap: &Snapshot, req: &Request<ProxyBody>, conn: &ClientConn) -> bool {
    conn.ctx.tls
        || (snap.access.trusts(conn.peer.ip())
            && req
                .headers()
                .get(&X_FORWARDED_PROTO)
                .is_some_and(|v| v.as_bytes() == b"https"))
}

/// The route's filters, when it has any (one pointer test).
#[inline(always)]
pub(super) fn of(snap: &Snapshot, route: usize) -> Option<&Arc<RouteFilters>> {
    snap.routes[route].filters.as_ref()
}
