//! Phases 6 to 8: where a request goes. The host, the path in normal
//! form, the route ([`hopgate_core::route::Router::lookup`]), the version
//! group (`Snapshot::select`), and the consistent-hashing key.
//!
//! Owns [`route`] (and the `warn`s of a gRPC request routed to an HTTP/1.1
//! service and of a version group falling back), [`hash_of`], the host
//! rules (one `Host` line) and the path put back into the upstream URI
//! ([`with_path`]). Must not touch: sessions, the upstream request's
//! headers, node state beyond what `select` reads.

use std::borrow::Cow;
use std::net::IpAddr;

use http::header::HOST;
use http::{Request, Version};

use crate::upstream::Snapshot;
use hopgate_core::balance::hash_key;
use hopgate_core::config::{HashOn, UpstreamProtocol};
use hopgate_core::error::ErrorKind;
use hopgate_core::route::{normalize_path, RequestView};
use hopgate_core::snapshot::Selection;

use super::super::done::Outcome;
use super::super::grpc;
use crate::headers::RequestFacts;

/// Where [`route`] sends a request.
pub(super) struct Routed {
    pub(super) route: usize,
    pub(super) selection: Selection,
    /// The path in normal form, when it differs from the request's.
    pub(super) normal: Option<String>,
}

/// Host, path, route lookup (**400** for a bad host or path, **404** for
/// no route), then the version group; a gRPC request to a service without
/// `protocol: http2` is refused here (`GrpcNeedsHttp2`). Records the route
/// and the service in `out`. `now`: the request's clock in milliseconds.
/// `None` for a route that answers itself (its filters end in a redirect
/// or a direct response): it has no service to select.
#[inline]
pub(super) fn route<B>(
    snap: &Snapshot,
    req: &Request<B>,
    facts: &RequestFacts,
    normalize: bool,
    client_ip: IpAddr,
    now: u64,
    out: &mut Outcome,
) -> Result<Option<Routed>, ErrorKind> {
    let host = host(req, facts)?;
    // Routes see the path in normal form (and the backend gets it, so both
    // read the same path); an already normal path costs one scan.
    let normal = match normalize.then(|| normalize_path(req.uri().path())) {
        None | Some(Ok(Cow::Borrowed(_))) => None,
        Some(Ok(Cow::Owned(p))) => Some(p),
        Some(Err(_)) => return Err(ErrorKind::BadRequest),
    };
    let view = RequestView {
        host,
        path: normal.as_deref().unwrap_or(req.uri().path()),
        query: req.uri().query(),
        method: req.method(),
        headers: req.headers(),
        source_ip: client_ip,
    };
    let Some(route) = snap.router.lookup(&view) else {
        return Err(ErrorKind::NoRoute);
    };
    out.route = Some(route);
    if snap.routes[route]
        .filters
        .as_ref()
        .is_some_and(|f| f.is_local())
    {
        return Ok(None);
    }
    let selection = snap.select(route, fastrand::u32(..), now);
    out.service = Some(selection.service);
    let grpc_to_http1 = facts.grpc
        && snap.services[selection.service].protocol == UpstreamProtocol::Http1
        && !grpc::is_grpc_web(req);
    if grpc_to_http1 || selection.fell_back {
        warn_of(snap, route, &selection, grpc_to_http1, now);
    }
    if grpc_to_http1 {
        return Err(ErrorKind::GrpcNeedsHttp2);
    }
    Ok(Some(Routed {
        route,
        selection,
        normal,
    }))
}

/// The host: the `Host` header, else the URI's authority (HTTP/2
/// `:authority`); `""` for an HTTP/1.0 request without one. More than one
/// `Host` line, even identical ones (RFC 9112 §3.2), is refused: front
/// ends and backends may pick different ones.
fn host<'r, B>(req: &'r Request<B>, facts: &RequestFacts) -> Result<&'r str, ErrorKind> {
    let host = match req.headers().get(HOST) {
        Some(h) => h.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    };
    match host {
        Some(_) if facts.hosts > 1 => Err(ErrorKind::BadRequest),
        Some(h) => Ok(h),
        None if req.version() == Version::HTTP_10 => Ok(""),
        None => Err(ErrorKind::BadRequest),
    }
}

/// The `warn`s of a routed request, each at most once every 10 s per
/// route: gRPC needs HTTP/2 end to end (trailers; sent over HTTP/1.1 it
/// fails at the backend as "an invalid response"; gRPC-Web is not gRPC's
/// wire format and goes through), and a version group with no live node.
/// Called only when there may be one to write.
#[cold]
fn warn_of(snap: &Snapshot, route: usize, selection: &Selection, grpc_to_http1: bool, now: u64) {
    let (route, svc) = (&snap.routes[route], &snap.services[selection.service]);
    if grpc_to_http1 {
        if route.should_log_protocol(now) {
            tracing::warn!(
                route = %route.id,
                service = %svc.name,
                "gRPC request routed to a service without protocol: http2; answering grpc-status 13"
            );
        }
        return;
    }
    if selection.fell_back && route.should_log_fallback(now) {
        tracing::warn!(
            route = %route.id,
            service = %svc.name,
            "version has no live node; falling back to the service's other versions"
        );
    }
}

/// Phase 8: the consistent-hashing key of a request, if it carries one.
pub(super) fn hash_of<B>(on: &HashOn, req: &Request<B>, client_ip: IpAddr) -> Option<u64> {
    match on {
        HashOn::Header(name) => req.headers().get(name).map(|v| hash_key(v.as_bytes())),
        HashOn::Cookie(name) => {
            hopgate_core::cookie::value(req.headers(), name).map(|v| hash_key(v.as_bytes()))
        }
        HashOn::SourceIp => Some(match client_ip {
            IpAddr::V4(a) => hash_key(&a.octets()),
            IpAddr::V6(a) => hash_key(&a.octets()),
        }),
    }
}

/// `uri` with its path replaced (the query kept).
pub(in crate::forward) fn with_path(uri: &http::Uri, path: &str) -> Option<http::Uri> {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}
