//! The per-request path: one snapshot load, access check, route, node pick,
//! forward through the node's pool, respond, log.
//!
//! Owns [`Forwarder`] (shared by every connection of every listener) and the
//! retry loop for requests that never reached a backend. Must not touch:
//! the control plane (the snapshot is only loaded, never stored, here), or
//! a lock: everything on this path is an atomic load or a lock-free queue.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use http::header::{HeaderValue, HOST};
use http::uri::{PathAndQuery, Scheme};
use http::{Method, Request, Response, Uri, Version};
use hyper::body::Incoming;

use hopgate_core::config::UpstreamProtocol;
use hopgate_core::error::{ErrorKind, ProxyError};
use hopgate_core::node::now_ms;
use hopgate_core::route::RequestView;
use hopgate_core::snapshot::{CompiledNode, CompiledService, Snapshot};

use crate::body::ProxyBody;
use crate::headers::{
    append_forwarded_for, new_request_id, strip_hop_by_hop, X_FORWARDED_PROTO, X_REQUEST_ID,
    X_ROUTE_RULE_ID, X_UPSTREAM_ADDR,
};
use crate::pool::{Pool, PoolSettings, SendFailure};
use crate::respond::error_response;

/// The snapshot pointer the control plane writes and the data plane loads.
pub type SharedSnapshot = Arc<ArcSwap<Snapshot>>;

/// Most attempts a request makes when its earlier attempts never reached a
/// backend (connect refused, pooled connection dead).
pub const MAX_ATTEMPTS: usize = 3;

/// Per-listener facts a request needs.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub listener: Arc<str>,
    pub debug_headers: bool,
    pub tls: bool,
}

/// The request handler shared by all listeners.
#[derive(Debug, Clone)]
pub struct Forwarder {
    snapshot: SharedSnapshot,
}

struct Outcome {
    status: u16,
    route: Option<usize>,
    service: Option<usize>,
    node: Option<usize>,
    attempts: usize,
    error: Option<ErrorKind>,
}

impl Forwarder {
    pub fn new(snapshot: SharedSnapshot) -> Forwarder {
        Forwarder { snapshot }
    }

    pub fn snapshot(&self) -> &SharedSnapshot {
        &self.snapshot
    }

    /// Handles one client request end to end. Never fails: every problem
    /// becomes a response from [`error_response`].
    pub async fn handle(
        &self,
        req: Request<Incoming>,
        peer: SocketAddr,
        ctx: &RequestCtx,
    ) -> Response<ProxyBody> {
        let started = Instant::now();
        let snap = self.snapshot.load_full();
        let method = req.method().clone();
        let mut req = req;
        let request_id = match req.headers().get(&X_REQUEST_ID) {
            Some(v) => v.clone(),
            None => {
                let id = new_request_id();
                req.headers_mut().insert(X_REQUEST_ID.clone(), id.clone());
                id
            }
        };
        let (resp, outcome) = self.route_and_forward(&snap, req, peer, ctx).await;
        let resp = match resp {
            Ok(r) => r,
            Err(kind) => error_response(kind, Some(&request_id)),
        };
        log_access(&snap, &method, &request_id, &outcome, started, peer, ctx);
        resp
    }

    async fn route_and_forward(
        &self,
        snap: &Arc<Snapshot>,
        req: Request<Incoming>,
        peer: SocketAddr,
        ctx: &RequestCtx,
    ) -> (Result<Response<ProxyBody>, ErrorKind>, Outcome) {
        let mut out = Outcome {
            status: 0,
            route: None,
            service: None,
            node: None,
            attempts: 0,
            error: None,
        };
        let fail = |mut out: Outcome, kind: ErrorKind| {
            out.status = kind.status();
            out.error = Some(kind);
            (Err(kind), out)
        };
        let limits = &snap.config.limits;

        // Limits the HTTP parser does not enforce itself.
        let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > limits.max_uri_bytes {
            return fail(out, ErrorKind::UriTooLong);
        }
        if req.headers().len() > limits.max_headers {
            return fail(out, ErrorKind::HeadersTooLarge);
        }
        if let Some(len) = content_length(&req) {
            if len > limits.max_body_bytes {
                return fail(out, ErrorKind::BodyTooLarge);
            }
        }

        let client_ip = snap.access.client_ip(peer.ip(), req.headers());
        if !snap.access.permits(client_ip) {
            return fail(out, ErrorKind::Forbidden);
        }

        let host = match host_of(&req) {
            Some(h) => h,
            None if req.version() == Version::HTTP_10 => "",
            None => return fail(out, ErrorKind::BadRequest),
        };
        let view = RequestView {
            host,
            path: req.uri().path(),
            query: req.uri().query(),
            method: req.method(),
            headers: req.headers(),
            source_ip: client_ip,
        };
        let Some(route_idx) = snap.router.lookup(&view) else {
            return fail(out, ErrorKind::NoRoute);
        };
        out.route = Some(route_idx);
        let route = &snap.routes[route_idx];
        let now = now_ms();
        let selection = snap.select(route_idx, fastrand::u32(..), now);
        let svc = &snap.services[selection.service];
        out.service = Some(selection.service);
        if selection.fell_back {
            tracing::warn!(
                route = %route.id,
                service = %svc.name,
                "version has no live node; falling back to the service's other versions"
            );
        }

        // Build the upstream request once; retries re-target it.
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers, true);
        append_forwarded_for(&mut parts.headers, peer.ip());
        parts.headers.insert(
            X_FORWARDED_PROTO.clone(),
            HeaderValue::from_static(if ctx.tls { "https" } else { "http" }),
        );
        parts
            .headers
            .insert(X_ROUTE_RULE_ID.clone(), route.id_header.clone());
        if !parts.headers.contains_key(HOST) {
            if let Some(a) = parts.uri.authority() {
                if let Ok(v) = HeaderValue::from_str(a.as_str()) {
                    parts.headers.insert(HOST, v);
                }
            }
        }
        let body = if body_is_empty(&body) {
            ProxyBody::Empty
        } else {
            ProxyBody::limited(body, limits.max_body_bytes)
        };
        let mut upstream = Request::from_parts(parts, body);

        let mut tried = [usize::MAX; MAX_ATTEMPTS];
        let mut last = ErrorKind::NoLiveNode;
        for attempt in 0..MAX_ATTEMPTS {
            let Some(node_idx) = svc.pick(selection.group, now_ms(), None, &tried[..attempt])
            else {
                break;
            };
            tried[attempt] = node_idx;
            out.attempts = attempt + 1;
            out.node = Some(node_idx);
            let node = &svc.nodes[node_idx];
            retarget(&mut upstream, node, svc);
            let settings = pool_settings(snap, svc);
            let pool = node
                .state
                .extension(|| Arc::new(Pool::new(settings.max_idle)))
                .expect("the node extension slot holds the pool");
            let inflight = node.state.begin_request();
            let sent_at = Instant::now();
            match pool.send(node.address, upstream, &settings).await {
                Ok(mut resp) => {
                    node.state
                        .observe_latency_us(sent_at.elapsed().as_micros() as u64);
                    drop(inflight);
                    strip_hop_by_hop(resp.headers_mut(), false);
                    if ctx.debug_headers {
                        let h = resp.headers_mut();
                        h.insert(X_ROUTE_RULE_ID.clone(), route.id_header.clone());
                        h.insert(X_UPSTREAM_ADDR.clone(), node.address_header.clone());
                    }
                    out.status = resp.status().as_u16();
                    return (Ok(resp), out);
                }
                Err(SendFailure::NotSent { request, error }) => {
                    drop(inflight);
                    node.state.record_failure();
                    log_upstream_failure(&svc.name, node, &error, attempt, true);
                    last = error.kind;
                    upstream = *request;
                }
                Err(SendFailure::Sent(error)) => {
                    drop(inflight);
                    node.state.record_failure();
                    log_upstream_failure(&svc.name, node, &error, attempt, false);
                    return fail(out, error.kind);
                }
            }
        }
        fail(out, last)
    }
}

fn pool_settings(snap: &Snapshot, svc: &CompiledService) -> PoolSettings {
    let t = &snap.config.timeouts;
    PoolSettings {
        protocol: svc.protocol,
        max_idle: svc.pool.max_idle,
        idle_timeout: svc.pool.idle_timeout,
        connect_timeout: t.connect,
        request_timeout: t.request,
    }
}

/// Points the upstream request at `node`: URI form for the protocol,
/// `X-Upstream-Addr`.
fn retarget(req: &mut Request<ProxyBody>, node: &CompiledNode, svc: &CompiledService) {
    let pq = req
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    match svc.protocol {
        UpstreamProtocol::Http1 => {
            *req.version_mut() = Version::HTTP_11;
            if req.uri().scheme().is_some() || req.uri().authority().is_some() {
                *req.uri_mut() = Uri::from(pq);
            }
        }
        UpstreamProtocol::Http2 => {
            *req.version_mut() = Version::HTTP_2;
            // :authority carries the client's host so virtual hosting works.
            let authority = req
                .headers()
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .and_then(|h| h.parse().ok())
                .unwrap_or_else(|| node.authority.clone());
            let mut p = http::uri::Parts::default();
            p.scheme = Some(Scheme::HTTP);
            p.authority = Some(authority);
            p.path_and_query = Some(pq);
            if let Ok(u) = Uri::from_parts(p) {
                *req.uri_mut() = u;
            }
            req.headers_mut().remove(HOST);
        }
    }
    req.headers_mut()
        .insert(X_UPSTREAM_ADDR.clone(), node.address_header.clone());
}

fn host_of<B>(req: &Request<B>) -> Option<&str> {
    match req.headers().get(HOST) {
        Some(h) => h.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    }
}

fn content_length<B>(req: &Request<B>) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

fn body_is_empty(b: &Incoming) -> bool {
    use http_body::Body;
    b.is_end_stream()
}

fn log_upstream_failure(
    service: &str,
    node: &CompiledNode,
    error: &ProxyError,
    attempt: usize,
    not_sent: bool,
) {
    tracing::warn!(
        service,
        node = %node.id,
        addr = %node.address,
        attempt = attempt + 1,
        not_sent,
        error = %error,
        "upstream attempt failed"
    );
}

fn log_access(
    snap: &Snapshot,
    method: &Method,
    request_id: &HeaderValue,
    out: &Outcome,
    started: Instant,
    peer: SocketAddr,
    ctx: &RequestCtx,
) {
    if !tracing::enabled!(target: "hopgate::access", tracing::Level::INFO) {
        return;
    }
    let route = out.route.map(|r| snap.routes[r].id.as_str()).unwrap_or("-");
    let (service, node) = match (out.service, out.node) {
        (Some(s), Some(n)) => (
            snap.services[s].name.as_str(),
            snap.services[s].nodes[n].id.as_str(),
        ),
        (Some(s), None) => (snap.services[s].name.as_str(), "-"),
        _ => ("-", "-"),
    };
    tracing::info!(
        target: "hopgate::access",
        listener = %ctx.listener,
        peer = %peer,
        method = %method,
        request_id = request_id.to_str().unwrap_or("-"),
        rule = route,
        service,
        node,
        retries = out.attempts.saturating_sub(1),
        hops = 0,
        status = out.status,
        error = out.error.map(|e| e.label()).unwrap_or("-"),
        latency_us = started.elapsed().as_micros() as u64,
        "access"
    );
}
