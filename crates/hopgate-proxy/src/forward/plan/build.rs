//! Phases 10 and 11: the upstream request, built once (the attempts only
//! re-target it). The upgrade hand-off, the path in normal form, the
//! hop-by-hop headers out, the session's token in, and the lines the
//! gateway sets beside the header map ([`SetLines`]): `X-Forwarded-For`,
//! `X-Forwarded-Proto`, `X-Route-Rule-Id`, `traceparent`.
//!
//! Owns [`upgrade`], [`upstream_request`], [`trace`] and [`fill_host`]. Must not touch: routing and
//! sessions (decided before), the per-attempt lines (`X-Upstream-Addr`,
//! `X-Hop-From`: `attempt::for_node`), the body.

use http::header::{HeaderValue, HOST};
use http::Request;

use crate::upstream::Snapshot;
use hopgate_core::error::ErrorKind;

use super::super::done::Outcome;
use super::super::ClientConn;
use super::route::with_path;
use super::Upgrade;
use crate::body::ProxyBody;
use crate::headers::{
    append_forwarded_for, strip_request, RequestFacts, SetLines, X_FORWARDED_PROTO,
    X_ROUTE_RULE_ID, X_UPSTREAM_ADDR,
};
use crate::session::ClientSession;
use crate::tunnel;

/// Phase 10: an HTTP/1.1 Upgrade (WebSocket): the protocol asked for, and
/// the client side's upgrade, taken from the request. It is forwarded with
/// its upgrade headers, then tunnelled as bytes once the backend says 101.
/// Always inlined (as [`upstream_request`]): one caller, and a plain
/// request pays one test here.
#[inline(always)]
pub(super) fn upgrade(req: &mut Request<ProxyBody>, facts: &RequestFacts) -> Option<Upgrade> {
    facts
        .may_upgrade()
        .then(|| tunnel::upgrade_request(req))
        .flatten()
        .map(|proto| (proto, tunnel::client_upgrade(req)))
}

/// Phase 11, in place: the path in normal form (`normal`), hop-by-hop
/// headers out (the upgrade's put back), the session's token, and the
/// lines the gateway sets (into `set`, in its place in the request's
/// state); a client's own line of such a name is taken out (looked up
/// only when the scan saw it). Returns whether the client's request came
/// over HTTPS (this hop's TLS, or a trusted proxy's `X-Forwarded-Proto:
/// https`). Always inlined into the plan (its one caller): called, its
/// lines were returned and copied into the plan, ~140 instructions per
/// request.
#[inline(always)]
pub(super) fn upstream_request(
    snap: &Snapshot,
    req: &mut Request<ProxyBody>,
    conn: &ClientConn,
    facts: &RequestFacts,
    (route, normal): (usize, Option<&str>),
    (upgrade, session): (Option<&Upgrade>, Option<&ClientSession>),
    set: &mut SetLines,
) -> Result<bool, ErrorKind> {
    if let Some(path) = normal {
        let uri = with_path(req.uri(), path).ok_or(ErrorKind::BadRequest)?;
        *req.uri_mut() = uri;
    }
    strip_request(req.headers_mut(), facts);
    if let Some((proto, _)) = upgrade {
        tunnel::restore_upgrade_headers(req.headers_mut(), proto);
    }
    if let Some(cs) = session {
        req.headers_mut()
            .insert(snap.config.sessions.header.clone(), cs.token.clone());
    }
    if facts.forwarded_for {
        append_forwarded_for(req.headers_mut(), conn.peer.ip());
    } else {
        set.forwarded_for = Some(conn.forwarded_for.clone());
    }
    let https = forwarded_proto(snap, req, conn, facts, set);
    if facts.route_rule_id() {
        req.headers_mut().remove(&X_ROUTE_RULE_ID);
    }
    set.route_rule_id = Some(snap.routes[route].id_header.clone());
    if facts.upstream_addr() {
        req.headers_mut().remove(&X_UPSTREAM_ADDR);
    }
    Ok(https)
}

/// `Host` from the URI's authority for a client that sent none (HTTP/2).
#[inline]
pub(super) fn fill_host(req: &mut Request<ProxyBody>, facts: &RequestFacts) {
    if facts.hosts == 0 {
        let authority = req.uri().authority();
        if let Some(v) = authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
            req.headers_mut().insert(HOST, v);
        }
    }
}

/// Whether the client reached the edge over HTTPS, as the upstream
/// request will say: a trusted proxy's `X-Forwarded-Proto` (`http` or
/// `https`), else this hop's connection (the forward-auth check's
/// `X-Forwarded-Proto`, built before the upstream request).
pub(in crate::forward) fn client_https(
    snap: &Snapshot,
    req: &Request<ProxyBody>,
    conn: &ClientConn,
) -> bool {
    match req
        .headers()
        .get(&X_FORWARDED_PROTO)
        .filter(|_| snap.access.trusts(conn.peer.ip()))
        .map(|v| v.as_bytes())
    {
        Some(b"https") => true,
        Some(b"http") => false,
        _ => conn.ctx.tls,
    }
}

/// A trusted proxy's `X-Forwarded-Proto` (`http` or `https`) is kept;
/// anyone else's is replaced by what this hop saw. True for HTTPS.
#[inline]
fn forwarded_proto(
    snap: &Snapshot,
    req: &mut Request<ProxyBody>,
    conn: &ClientConn,
    facts: &RequestFacts,
    set: &mut SetLines,
) -> bool {
    match facts
        .forwarded_proto()
        .then(|| req.headers().get(&X_FORWARDED_PROTO))
        .flatten()
        .filter(|_| snap.access.trusts(conn.peer.ip()))
        .map(|v| v.as_bytes())
    {
        Some(b"https") => true,
        Some(b"http") => false,
        _ => {
            if facts.forwarded_proto() {
                req.headers_mut().remove(&X_FORWARDED_PROTO);
            }
            let tls = conn.ctx.tls;
            set.forwarded_proto = Some(if tls { "https" } else { "http" });
            tls
        }
    }
}

/// `traceparent` beside the map, the trace id for the access log, and the
/// request's span while span export is on and samples it (one branch while
/// it is off).
#[inline]
pub(super) fn trace(
    snap: &Snapshot,
    conn: &ClientConn,
    req: &mut Request<ProxyBody>,
    facts: &RequestFacts,
    https: bool,
    set: &mut SetLines,
    out: &mut Outcome,
) {
    let otlp = &snap.config.tracing.otlp;
    let sampler = (otlp.enabled && conn.forwarder.otlp.is_some())
        .then(|| crate::trace::Sampler::new(otlp.sample_ratio));
    let (trace, traceparent) = crate::trace::propagate_beside(
        req.headers_mut(),
        facts.traceparent(),
        facts.tracestate(),
        sampler,
    );
    set.traceparent = Some(traceparent);
    out.trace_id = trace.trace_id;
    if sampler.is_some() && trace.sampled() {
        let host = req.headers().get(HOST).cloned();
        let span = crate::otlp::Span::new(&trace, req.uri().clone(), host, https);
        out.span = Some(Box::new(span));
    }
}
