//! Phase 13, steps 6 and 7, for an attempt that was answered: the
//! backend's answer on its way to the client.
//!
//! Owns the node's verdict on an answer (success or server error, the
//! latency sample, recovery of a last resort), `Hop-Maintenance` answers
//! handed to the control plane's intake, hop-by-hop stripping, the session
//! settled by the answer ([`settle_session`]: context, binding, hop log,
//! token), the upgrade's tunnel, the gRPC stream guard and the debug
//! headers. Must not touch: retries (an answer, 5xx included, is never
//! retried here), error answers (`done`), the node choice.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::{HeaderMap, HeaderValue};
use http::Response;
use http_body::Body as _;

use crate::upstream::{CompiledNode, CompiledService};
use hopgate_core::config::{CookieSecure, SessionsConfig};
use hopgate_core::limit::Held;
use hopgate_core::node::Observation;
use hopgate_core::session::SessionId;
use hopgate_store::Binding;

use super::attempt::Attempted;
use super::done::Outcome;
use super::grpc;
use super::plan::{PendingHop, Upgrade};
use super::{Forwarder, Req};
use crate::body::ProxyBody;
use crate::h1::response_head::materialize;
use crate::headers::{
    passes_raw, scan_response, strip_response, HOP_MAINTENANCE, HOP_SESSION_CONTEXT,
    X_ROUTE_RULE_ID, X_UPSTREAM_ADDR,
};
use crate::metrics::{HopRecord, METRICS};
use crate::send_watch::SendWatch;
use crate::session::{self, ClientSession, Sessions};
use crate::tunnel;

/// The backend's answer, readied for the client (5xx answers too: they
/// are passed on, not retried), step by step: the node's verdict, the raw
/// head kept or not, `Hop-Maintenance`, hop-by-hop headers, the session,
/// then the tunnel of an upgrade or the answer's stream. The common case:
/// inline in the driver.
#[inline]
pub(super) fn answer(
    mut resp: Box<Response<ProxyBody>>,
    req: Req<'_>,
    at: &Attempted<'_>,
    hop: Option<&PendingHop>,
    upgrade: Option<(Upgrade, &mut Option<Held>)>,
    out: &mut Outcome,
) -> Box<Response<ProxyBody>> {
    let (fwd, flight) = (&req.conn.forwarder, req.flight);
    let (svc, node) = (at.svc, at.node);
    let status = resp.status().as_u16();
    observe(at, status);
    let edits = super::filters::of(req.snap, flight.route).filter(|f| !f.response.is_empty());
    // A head kept raw stays so only when nothing below has to change it.
    if let Some(raw) = resp.body().raw_head() {
        let taken: [&[u8]; 3] = [
            req.snap.config.sessions.header.as_str().as_bytes(),
            X_ROUTE_RULE_ID.as_str().as_bytes(),
            X_UPSTREAM_ADDR.as_str().as_bytes(),
        ];
        if status == 101 || edits.is_some() || !passes_raw(raw.lines(), &taken) {
            materialize(&mut resp);
        }
    }
    let rf = scan_response(resp.headers());
    if rf.maintenance {
        if let Some(v) = resp.headers_mut().remove(&HOP_MAINTENANCE) {
            fwd.maintenance_header(svc, node, &v, flight.carried_maintenance);
        }
    }
    let on_upstream =
        (status == 101 && upgrade.is_some()).then(|| tunnel::upstream_upgrade(&mut resp));
    strip_response(resp.headers_mut(), &rf);
    if let Some(f) = edits {
        let id = &req.snap.routes[flight.route].id;
        super::filters::on_response(f, resp.headers_mut(), id, flight.https);
    }
    out.hopped = hop.is_some_and(|h| *h.from != *node.id) && status < 500;
    session_step(resp.headers_mut(), req, at, hop, (status, rf.context()));
    out.status = status;
    if let (Some(on_upstream), Some((upgrade, held))) = (on_upstream, upgrade) {
        tunnelled(
            resp.headers_mut(),
            req,
            at,
            (upgrade, held.take()),
            on_upstream,
        );
        return resp;
    }
    streamed(resp, req, at, rf.grpc)
}

/// The node's verdict on an answer: a server error, or a success (the
/// latency sample, and recovery of a last resort).
#[inline]
fn observe(at: &Attempted<'_>, status: u16) {
    let seen = if status >= 500 {
        Observation::ServerError
    } else {
        at.node.state.observe_latency_us(at.took.as_micros() as u64);
        if at.last_resort {
            at.node.state.recover();
        }
        Observation::Success
    };
    at.account(seen);
}

/// The session's step, when sessions are on ([`settle_session`]); with
/// them off, a `Hop-Session-Context` the backend sent (`context`) is
/// removed: only the gateway keeps contexts, and it never leaks one.
#[inline]
fn session_step(
    headers: &mut HeaderMap,
    req: Req<'_>,
    at: &Attempted<'_>,
    hop: Option<&PendingHop>,
    (status, context): (u16, bool),
) {
    let (snap, flight) = (req.snap, req.flight);
    let sessions = req.conn.forwarder.sessions.as_deref();
    let sessions = sessions.filter(|_| flight.sessions_on);
    if sessions.is_none() && context {
        headers.remove(&HOP_SESSION_CONTEXT);
    }
    if let (Some(s), Some(cs), Some(k)) = (sessions, &flight.client_session, &flight.key) {
        let cfg = &snap.config.sessions;
        let outcome = SessionOutcome {
            sessions: s,
            cfg,
            svc: at.svc,
            node: at.node,
            key: k,
            client: cs,
            prior: flight.prior.as_ref(),
            hinted: flight.hinted,
            hop,
            status,
            now_unix: flight.now_unix,
            secure: match cfg.secure {
                CookieSecure::Auto => flight.https,
                CookieSecure::Always => true,
                CookieSecure::Never => false,
            },
        };
        settle_session(outcome, headers);
    }
}

/// A 101 to an upgrade: its headers put back, and both sides joined on a
/// task of their own ([`tunnel::spawn`]), which holds the node's in-flight
/// count until it ends.
#[cold]
fn tunnelled(
    headers: &mut HeaderMap,
    req: Req<'_>,
    at: &Attempted<'_>,
    ((proto, on_client), held): (Upgrade, Option<Held>),
    on_upstream: tunnel::UpstreamUpgrade,
) {
    tunnel::restore_upgrade_headers(headers, &proto);
    let websocket = proto.as_bytes().eq_ignore_ascii_case(b"websocket");
    tunnel::spawn(
        on_client,
        on_upstream,
        tunnel::TunnelCtx {
            websocket,
            idle: req.snap.routes[req.flight.route].policy.idle,
            node: Arc::clone(&at.node.state),
            drain_deadline: at.svc.drain.deadline,
            stopping: req.conn.forwarder.stopping.clone(),
            _inflight: at.node.state.begin_request(),
            _held: held,
        },
    );
}

/// The answer's stream on its way: the gRPC guard (`grpc`: a gRPC
/// answer), the HTTP/2 send-stall watch, and the debug headers.
#[inline]
fn streamed(
    mut resp: Box<Response<ProxyBody>>,
    req: Req<'_>,
    at: &Attempted<'_>,
    grpc: bool,
) -> Box<Response<ProxyBody>> {
    let Req {
        conn, snap, flight, ..
    } = req;
    if grpc {
        resp = grpc::guard(resp, at.svc, at.node, flight.grpc_deadline);
    }
    if conn.http2.load(Ordering::Relaxed) && !resp.body().is_end_stream() {
        // A stream the client never grants window must not pin its
        // upstream: cut it at the send stall limit.
        let stall = snap.routes[flight.route].policy.idle;
        ProxyBody::wrap_in(&mut resp, |b| {
            ProxyBody::SendWatched(Box::new(SendWatch::new(b, stall, conn.send_watches())))
        });
    }
    if conn.ctx.debug_headers {
        let h = resp.headers_mut();
        h.insert(
            X_ROUTE_RULE_ID.clone(),
            snap.routes[flight.route].id_header.clone(),
        );
        h.insert(X_UPSTREAM_ADDR.clone(), at.node.address_header.clone());
    }
    resp
}

impl Forwarder {
    /// A backend announced maintenance in a response header: unless the
    /// service does not take in-band notices (`maintenance.in_band`, off by
    /// default) or the request itself carried `Hop-Maintenance` (the answer
    /// may be a reflection of it), parse it and hand it to the control
    /// plane's intake, which applies the service's `seq` and `to=` bounds.
    /// Never blocks; an ignored, malformed or undeliverable notification is
    /// counted and dropped whole.
    fn maintenance_header(
        &self,
        svc: &CompiledService,
        node: &CompiledNode,
        value: &HeaderValue,
        carried: bool,
    ) {
        if !svc.maintenance.in_band {
            METRICS
                .maintenance_in_band_off
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(service = %svc.name, node = %node.id, "Hop-Maintenance ignored: the service does not take in-band notices (maintenance.in_band)");
            return;
        }
        if carried {
            METRICS
                .maintenance_request_carried
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(service = %svc.name, node = %node.id, "Hop-Maintenance ignored: the request carried one too (a reflection is never trusted)");
            return;
        }
        let parsed = value
            .to_str()
            .map_err(|_| "not text".to_owned())
            .and_then(|v| hopgate_core::maintenance::parse_header(&svc.name, &node.id, v));
        match (parsed, &self.maintenance) {
            (Ok(n), Some(tx)) => {
                if tx.try_send(n).is_err() {
                    METRICS.maintenance_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            (Ok(_), None) => {}
            (Err(e), _) => {
                METRICS
                    .maintenance_malformed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service = %svc.name, node = %node.id, error = %e, "malformed Hop-Maintenance header ignored");
            }
        }
    }
}

/// Everything [`settle_session`] needs about an answered request.
struct SessionOutcome<'a> {
    sessions: &'a Sessions,
    cfg: &'a SessionsConfig,
    svc: &'a CompiledService,
    node: &'a CompiledNode,
    key: &'a SessionId,
    client: &'a ClientSession,
    prior: Option<&'a Binding>,
    /// `prior` came from the token's node hint, not from the store.
    hinted: bool,
    hop: Option<&'a PendingHop>,
    status: u16,
    now_unix: u64,
    /// The cookie carries `Secure` (`sessions.secure`).
    secure: bool,
}

/// A hop completed (its new node answered below 500): logged, and
/// recorded in the hop counters, the histogram and the recent-hops ring
/// (the short `METRICS` mutex).
#[cold]
fn record_hop(o: &SessionOutcome<'_>, h: &PendingHop) {
    let duration_us = h.started.elapsed().as_micros() as u64;
    tracing::info!(
        "hop session={} from={} to={} reason={}",
        o.client.id,
        h.from,
        o.node.id,
        h.reason.label()
    );
    METRICS.hop(HopRecord {
        at: o.now_unix,
        session: o.client.id.to_string(),
        service: o.svc.name.clone(),
        from: h.from.to_string(),
        to: o.node.id.clone(),
        reason: h.reason.label(),
        duration_us,
        context_bytes: o.prior.map_or(0, |p| p.context_len()),
    });
}

/// After a backend answered: keep the context it sent (and hide it from
/// the client), bind or rebind the session, complete a hop (log, count,
/// time), and hand the client its token when it needs one.
fn settle_session(o: SessionOutcome<'_>, headers: &mut HeaderMap) {
    let mut context = None;
    if let Some(v) = headers.remove(&HOP_SESSION_CONTEXT) {
        if v.len() <= o.cfg.context_max {
            context = Some(Arc::<[u8]>::from(v.as_bytes()));
            METRICS.contexts_stored.fetch_add(1, Ordering::Relaxed);
        } else {
            METRICS.contexts_oversized.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(service = %o.svc.name, node = %o.node.id, bytes = v.len(), limit = o.cfg.context_max, "Hop-Session-Context too large; not stored");
        }
    }
    let moved = o.prior.is_none_or(|b| *b.node != *o.node.id);
    let ttl = o.cfg.ttl.as_secs();
    let stale = o
        .prior
        .is_some_and(|b| b.expires_at.saturating_sub(o.now_unix) < ttl / 2);
    // Lazy binding: a session new with this request is stored only when
    // its client comes back with the token (which names this node), or
    // when the backend gave it a context to keep. A client that never
    // returns a token costs the store nothing.
    let lazy = !o.client.known && context.is_none();
    if o.status < 500
        && !lazy
        && (moved || context.is_some() || stale || o.client.issue || o.hinted)
    {
        let mut b = Binding::new(
            Arc::clone(&o.svc.shared_name),
            Arc::clone(&o.node.shared_id),
            if moved {
                o.now_unix
            } else {
                o.prior.map_or(o.now_unix, |b| b.bound_at)
            },
            o.now_unix + ttl,
        );
        b.hops = o.prior.map_or(0, |p| p.hops) + u32::from(moved && o.prior.is_some());
        b.context = context.or_else(|| o.prior.and_then(|p| p.context.clone()));
        o.sessions.store.put(*o.key, b);
    }
    if let (Some(h), true) = (o.hop, moved && o.status < 500) {
        record_hop(&o, h);
    }
    if o.client.issue {
        // A new session's token names the node that answered (the token
        // that node was sent), so the client's next request comes back to
        // it (and binds there, if it is not bound yet).
        let hinted_token = (!o.client.known).then(|| {
            session::first_token(
                &o.sessions.keys,
                o.client,
                o.now_unix,
                &o.svc.name,
                &o.node.id,
            )
        });
        let token = hinted_token.as_ref().unwrap_or(&o.client.token);
        if let Some(c) = session::set_cookie(o.cfg, token, o.secure) {
            headers.append(http::header::SET_COOKIE, c);
        }
        headers.insert(o.cfg.header.clone(), token.clone());
    }
}
