//! The per-request path: one snapshot load, access check, route, node pick,
//! forward through the node's pool, respond, log.
//!
//! Owns [`Forwarder`] (shared by every connection of every listener),
//! [`ClientConn`] (one per client connection: where a request starts), the
//! shape of a request's future (everything before the first attempt runs
//! synchronously; the rest is one boxed future per request), and the
//! attempt loop with its retry rules. Must not touch:
//! the control plane (the snapshot is only loaded, never stored, here), or
//! a lock: everything on this path is an atomic load or a lock-free queue.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, HOST};
use http::uri::{PathAndQuery, Scheme};
use http::{Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use hopgate_core::balance::hash_key;
use hopgate_core::config::{HashOn, SessionsConfig, UpstreamProtocol};
use hopgate_core::error::{ErrorKind, ProxyError};
use hopgate_core::maintenance::Notification;
use hopgate_core::node::{ms_at, now_ms, Observation, Verdict};
use hopgate_core::retry;
use hopgate_core::route::RequestView;
use hopgate_core::session::{HopReason, SessionId};
use hopgate_core::snapshot::{CompiledNode, CompiledService, Snapshot};
use hopgate_store::Binding;

use crate::body::ProxyBody;
use crate::headers::{
    append_forwarded_for, new_request_id, scan_request, scan_response, strip_request,
    strip_response, RequestFacts, GRPC_TIMEOUT, HOP_MAINTENANCE, HOP_SESSION_CONTEXT,
    X_FORWARDED_FOR, X_FORWARDED_PROTO, X_HOP_FROM, X_REQUEST_ID, X_ROUTE_RULE_ID, X_UPSTREAM_ADDR,
};
use crate::metrics::{HopRecord, METRICS};
use crate::pool::{Pool, PoolSettings, SendFailure};
use crate::respond::{error_response, grpc_error_response};
use crate::session::{self, ClientSession, Sessions, Stickiness};
use crate::tunnel;

/// The snapshot pointer the control plane writes and the data plane loads.
pub type SharedSnapshot = Arc<ArcSwap<Snapshot>>;

/// How long a gRPC request's body may take to arrive before it is streamed
/// without a replay copy (a unary call's body arrives with its headers; a
/// client-streaming call starts at most this much later).
const GRPC_BODY_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Most nodes one request remembers having tried (`retries.attempts` is at
/// most 10).
const MAX_TRACKED: usize = 16;

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
    sessions: Option<Arc<Sessions>>,
    /// Turns true when the gateway shuts down (long-lived streams end).
    stopping: tokio::sync::watch::Receiver<bool>,
    /// Where `Hop-Maintenance` headers from backends go (the control
    /// plane's intake).
    maintenance: Option<tokio::sync::mpsc::Sender<Notification>>,
}

/// A hop decided for this request, completed when a new node answers.
struct PendingHop {
    from: Arc<str>,
    reason: HopReason,
    started: Instant,
}

/// What [`Forwarder::plan`] decided.
struct Plan {
    route: usize,
    selection: hopgate_core::snapshot::Selection,
    hash: Option<u64>,
    grpc_deadline: Option<Instant>,
    /// Sessions are on for this request.
    sessions_on: bool,
    client_session: Option<ClientSession>,
    key: Option<SessionId>,
    now_unix: u64,
    /// [`now_ms`] when the request arrived (the first attempt's clock).
    now: u64,
    /// The bound node, when the session stays on it.
    sticky: Option<usize>,
    prior: Option<Binding>,
    hop: Option<PendingHop>,
    upgrade: Option<(HeaderValue, hyper::upgrade::OnUpgrade)>,
    parts: http::request::Parts,
    body: Incoming,
}

struct Outcome {
    status: u16,
    route: Option<usize>,
    service: Option<usize>,
    node: Option<usize>,
    attempts: usize,
    error: Option<ErrorKind>,
    /// The session hopped to another node on this request.
    hopped: bool,
}

impl Forwarder {
    /// `sessions`: keys and store when the gateway mints sessions
    /// (`sessions.enabled` in the running config still decides per request).
    pub fn new(snapshot: SharedSnapshot, sessions: Option<Arc<Sessions>>) -> Forwarder {
        Forwarder {
            snapshot,
            sessions,
            stopping: tokio::sync::watch::channel(false).1,
            maintenance: None,
        }
    }

    /// `Hop-Maintenance` response headers are parsed and sent to `intake`.
    pub fn with_maintenance(
        mut self,
        intake: tokio::sync::mpsc::Sender<Notification>,
    ) -> Forwarder {
        self.maintenance = Some(intake);
        self
    }

    /// Long-lived streams (tunnels) end when `stopping` turns true.
    pub fn with_stopping(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Forwarder {
        self.stopping = stopping;
        self
    }

    pub fn sessions(&self) -> Option<&Arc<Sessions>> {
        self.sessions.as_ref()
    }

    pub fn snapshot(&self) -> &SharedSnapshot {
        &self.snapshot
    }

    /// A backend announced maintenance in a response header: parse it and
    /// hand it to the control plane's intake (never blocks; a malformed or
    /// undeliverable notification is counted and dropped whole).
    fn maintenance_header(&self, svc: &CompiledService, node: &CompiledNode, value: &HeaderValue) {
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

    /// Everything about a request decided before its first attempt:
    /// limits, access, route, service and group, session binding, and the
    /// upstream head. Synchronous, so none of its temporaries end up in the
    /// request's future (which is moved, whole, on every poll path).
    fn plan(
        &self,
        snap: &Snapshot,
        req: Request<Incoming>,
        conn: &ClientConn,
        facts: &RequestFacts,
        started: Instant,
        out: &mut Outcome,
    ) -> Result<Plan, ErrorKind> {
        let peer = conn.peer;
        let ctx = &*conn.ctx;
        let limits = &snap.config.limits;

        // Limits the HTTP parser does not enforce itself.
        let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > limits.max_uri_bytes {
            return Err(ErrorKind::UriTooLong);
        }
        if facts.count > limits.max_headers || head_bytes(&req, facts) > limits.max_header_bytes {
            return Err(ErrorKind::HeadersTooLarge);
        }
        if let Some(len) = content_length(&req) {
            if len > limits.max_body_bytes {
                return Err(ErrorKind::BodyTooLarge);
            }
        }

        let client_ip = snap.access.client_ip(peer.ip(), req.headers());
        if !snap.access.permits(client_ip) {
            return Err(ErrorKind::Forbidden);
        }

        let host = match host_of(&req) {
            Some(h) => h,
            None if req.version() == Version::HTTP_10 => "",
            None => return Err(ErrorKind::BadRequest),
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
            return Err(ErrorKind::NoRoute);
        };
        out.route = Some(route_idx);
        let route = &snap.routes[route_idx];
        let now = ms_at(started);
        let selection = snap.select(route_idx, fastrand::u32(..), now);
        let svc = &snap.services[selection.service];
        out.service = Some(selection.service);
        if selection.fell_back && route.should_log_fallback(now) {
            tracing::warn!(
                route = %route.id,
                service = %svc.name,
                "version has no live node; falling back to the service's other versions"
            );
        }

        let hash = svc
            .hash_on
            .as_ref()
            .and_then(|h| hash_of(h, &req, client_ip));
        // gRPC: `grpc-timeout` is an upper bound for the whole call.
        let grpc_deadline = facts
            .grpc_timeout
            .then(|| req.headers().get(&GRPC_TIMEOUT))
            .flatten()
            .and_then(|v| parse_grpc_timeout(v.as_bytes()))
            .map(|d| Instant::now() + d);
        // Sessions: who is this, where is it bound, must it hop?
        let scfg = &snap.config.sessions;
        let sessions = self.sessions.as_deref().filter(|_| scfg.enabled);
        // Wall-clock seconds only matter to sessions (token and binding
        // times).
        let now_unix = if sessions.is_some() {
            session::unix_now()
        } else {
            0
        };
        let client_session = sessions.map(|s| session::identify(s, scfg, req.headers(), now_unix));
        let key = client_session
            .as_ref()
            .map(|cs| session::binding_key(&cs.id, &svc.name));
        let stick = match (sessions, &key) {
            (Some(s), Some(k)) => {
                session::stickiness(snap, route_idx, svc, s.store.get(k, now_unix), now)
            }
            _ => Stickiness::Unbound,
        };
        let (sticky, prior, hop) = match stick {
            Stickiness::Unbound => (None, None, None),
            Stickiness::Stay { node, binding } => (Some(node), Some(binding), None),
            Stickiness::Hop { binding, reason } => {
                let from = Arc::clone(&binding.node);
                (
                    None,
                    Some(binding),
                    Some(PendingHop {
                        from,
                        reason,
                        started: Instant::now(),
                    }),
                )
            }
        };
        // An HTTP/1.1 Upgrade (WebSocket): forwarded with its upgrade
        // headers, then tunnelled as bytes once the backend says 101.
        let mut req = req;
        let upgrade =
            tunnel::upgrade_request(&req).map(|proto| (proto, hyper::upgrade::on(&mut req)));
        // Build the upstream request once; retries re-target it.
        let (mut parts, body) = req.into_parts();
        strip_request(&mut parts.headers, facts);
        if let Some((proto, _)) = &upgrade {
            tunnel::restore_upgrade_headers(&mut parts.headers, proto);
        }
        if let Some(cs) = &client_session {
            parts.headers.insert(scfg.header.clone(), cs.token.clone());
        }
        if facts.forwarded_for {
            append_forwarded_for(&mut parts.headers, peer.ip());
        } else {
            parts
                .headers
                .insert(X_FORWARDED_FOR.clone(), conn.forwarded_for.clone());
        }
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
        Ok(Plan {
            route: route_idx,
            selection,
            hash,
            grpc_deadline,
            sessions_on: sessions.is_some(),
            client_session,
            key,
            now_unix,
            now,
            sticky,
            prior,
            hop,
            upgrade,
            parts,
            body,
        })
    }

    /// The attempts of a planned request: body handling, node picks,
    /// retries, the response. Returns the request's whole future (boxed
    /// once by the caller): the plan is taken apart here, before the
    /// `async` block, so each part is stored in the future exactly once.
    fn forward(
        conn: Arc<ClientConn>,
        snap: Arc<Snapshot>,
        plan: Plan,
        facts: RequestFacts,
        done: Done,
    ) -> impl std::future::Future<Output = Response<ProxyBody>> + Send + 'static {
        let Plan {
            route: route_idx,
            selection,
            hash,
            grpc_deadline,
            sessions_on,
            client_session,
            key,
            now_unix,
            now: arrived_ms,
            sticky,
            prior,
            hop,
            upgrade,
            parts,
            body,
        } = plan;
        let mut done = done;
        async move {
            let fwd = &conn.forwarder;
            let ctx = &*conn.ctx;
            let out = &mut done.out;
            let mut sticky = sticky;
            let mut hop = hop;
            let route = &snap.routes[route_idx];
            let svc = &snap.services[selection.service];
            let limits = &snap.config.limits;
            let scfg = &snap.config.sessions;
            let sessions = fwd.sessions.as_deref().filter(|_| sessions_on);
            let result: Result<Response<ProxyBody>, ErrorKind> = 'forward: {
                let policy = &snap.config.retries;
                svc.retry_budget.deposit(policy.budget);
                // A request that may have reached a backend can be replayed only if
                // it is replay-safe and its body is small enough to keep.
                let replay_safe = retry::replay_safe(&parts.method, &parts.headers);
                let mut refused_copy: Option<Bytes> = None;
                let (body, kept) = if body_is_empty(&body) {
                    (ProxyBody::Empty, replay_safe.then(Bytes::new))
                } else if replay_safe
                    && content_length_of(&parts.headers).is_some_and(|n| n <= policy.buffer_body)
                {
                    match Box::pin(ProxyBody::limited(body, policy.buffer_body).collect()).await {
                        Ok(b) => {
                            let b = b.to_bytes();
                            (ProxyBody::full(b.clone()), Some(b))
                        }
                        Err(_) => break 'forward Err(ErrorKind::BadRequest),
                    }
                } else if svc.protocol == UpstreamProtocol::Http2 && upgrade.is_none() {
                    // An HTTP/2 backend may refuse a stream it never processed
                    // (GOAWAY races). Keep a copy when the whole body has already
                    // arrived — without waiting for it: a streaming client must not
                    // be held up — so a refused stream can be replayed elsewhere.
                    let wait = if facts.grpc {
                        GRPC_BODY_WAIT
                    } else {
                        std::time::Duration::ZERO
                    };
                    let (body, whole) = Box::pin(take_arrived(
                        body,
                        policy.buffer_body,
                        limits.max_body_bytes,
                        wait,
                    ))
                    .await;
                    refused_copy = whole;
                    (body, None)
                } else {
                    (ProxyBody::limited(body, limits.max_body_bytes), None)
                };
                let replay = match (kept, refused_copy) {
                    (Some(body), _) => Some(Replay::new(&parts, body, true)),
                    (None, Some(body)) => Some(Replay::new(&parts, body, false)),
                    (None, None) => None,
                };
                let mut upstream = Some(Request::from_parts(parts, body));

                let attempts = (policy.attempts as usize).min(MAX_TRACKED);
                let mut tried = [usize::MAX; MAX_TRACKED];
                let mut n_tried = 0;
                let mut refused = 0; // picks turned away by an open breaker
                let mut last = ErrorKind::NoLiveNode;
                let mut sent_attempts = 0;
                let mut clock = Some(arrived_ms);
                while sent_attempts < attempts {
                    // The first attempt uses the clock read on arrival.
                    let now = clock.take().unwrap_or_else(now_ms);
                    // The balancer's choice, unless it can only offer nodes this
                    // request already tried; then, as a last resort, a node that only
                    // passive verdicts (ejection, open breaker) keep out.
                    let mut last_resort = false;
                    let node_idx = match sticky.take() {
                        Some(i) => i,
                        None => match svc.pick(selection.group, now, hash, &tried[..n_tried]) {
                            Some(i) if !tried[..n_tried].contains(&i) => i,
                            picked => match svc.pick_last_resort(
                                selection.group,
                                &tried[..n_tried],
                                fastrand::usize(..),
                            ) {
                                Some(i) => {
                                    last_resort = true;
                                    i
                                }
                                None => match picked {
                                    Some(i) => i,
                                    None => break,
                                },
                            },
                        },
                    };
                    let node = &svc.nodes[node_idx];
                    if n_tried < MAX_TRACKED && !tried[..n_tried].contains(&node_idx) {
                        tried[n_tried] = node_idx;
                        n_tried += 1;
                    }
                    if !last_resort && !node.state.try_acquire(now) {
                        if hop.is_none() && prior.as_ref().is_some_and(|b| *b.node == *node.id) {
                            hop = Some(PendingHop {
                                from: Arc::clone(&node.shared_id),
                                reason: HopReason::CircuitOpen,
                                started: Instant::now(),
                            });
                        }
                        refused += 1;
                        if refused > svc.nodes.len() {
                            break;
                        }
                        continue;
                    }
                    if sent_attempts > 0 && !svc.retry_budget.try_withdraw() {
                        tracing::warn!(service = %svc.name, "retry budget exhausted; not retrying");
                        break;
                    }
                    sent_attempts += 1;
                    if sent_attempts > 1 {
                        METRICS.retries.fetch_add(1, Ordering::Relaxed);
                    }
                    if last_resort {
                        METRICS.last_resort_picks.fetch_add(1, Ordering::Relaxed);
                    }
                    out.attempts = sent_attempts;
                    out.node = Some(node_idx);
                    let Some(request) = upstream.take() else {
                        break;
                    };
                    let request = for_node(request, node, svc, hop.as_ref(), prior.as_ref());
                    let mut settings = pool_settings(&snap, svc);
                    if node.state.is_relaxed(now) {
                        // Maintenance: slow answers are not failures.
                        let relaxed = snap.config.maintenance.relaxed_timeout;
                        settings.request_timeout = settings.request_timeout.max(relaxed);
                        settings.connect_timeout = settings.connect_timeout.max(relaxed);
                        settings.idle_timeout = settings.idle_timeout.max(relaxed);
                    }
                    if upgrade.is_some() {
                        // Upgrades need a connection of their own, spoken in HTTP/1.1.
                        settings.protocol = UpstreamProtocol::Http1;
                    }
                    if let Some(t) = grpc_deadline {
                        // The client's deadline bounds the wait for an answer too.
                        settings.request_timeout = settings
                            .request_timeout
                            .min(t.saturating_duration_since(Instant::now()));
                    }
                    let pool = node
                        .state
                        .extension(|| Arc::new(Pool::new(settings.max_idle)))
                        .expect("the node extension slot holds the pool");
                    let inflight = node.state.begin_request();
                    let sent_at = Instant::now();
                    let addr = node.state.moved_to().unwrap_or(node.address);
                    let result = pool.send(addr, request, &settings, sent_at).await;
                    drop(inflight);
                    let answered = Instant::now();
                    let answered_ms = ms_at(answered);
                    match result {
                        // A gRPC backend that answers UNAVAILABLE before any
                        // response byte (a trailers-only response) has not processed
                        // the call: like a refused stream, replay it elsewhere when a
                        // copy exists (SPEC §4).
                        Ok(resp)
                            if sent_attempts < attempts
                                && svc.retry_budget.available() > 0
                                && facts.grpc
                                && grpc_unavailable_at_once(&resp) =>
                        {
                            match &replay {
                                Some(copy) => {
                                    tracing::warn!(service = %svc.name, node = %node.id, "gRPC UNAVAILABLE before any response byte; retrying elsewhere");
                                    account(svc, node, Observation::Failure, answered_ms);
                                    last = ErrorKind::ConnectionLost;
                                    upstream = Some(copy.request());
                                    drop(resp);
                                    continue;
                                }
                                None => {
                                    out.status = resp.status().as_u16();
                                    break 'forward Ok(resp);
                                }
                            }
                        }
                        Ok(mut resp) => {
                            let status = resp.status().as_u16();
                            let seen = if status >= 500 {
                                Observation::ServerError
                            } else {
                                node.state.observe_latency_us(
                                    answered.saturating_duration_since(sent_at).as_micros() as u64,
                                );
                                if last_resort {
                                    node.state.recover();
                                }
                                Observation::Success
                            };
                            account(svc, node, seen, answered_ms);
                            let rf = scan_response(resp.headers());
                            if rf.maintenance {
                                if let Some(v) = resp.headers_mut().remove(&HOP_MAINTENANCE) {
                                    fwd.maintenance_header(svc, node, &v);
                                }
                            }
                            let on_upstream = (status == 101 && upgrade.is_some())
                                .then(|| hyper::upgrade::on(&mut resp));
                            strip_response(resp.headers_mut(), &rf);
                            out.hopped =
                                hop.as_ref().is_some_and(|h| *h.from != *node.id) && status < 500;
                            if sessions.is_none() && rf.context() {
                                // Only the gateway keeps contexts; never leak one.
                                resp.headers_mut().remove(&HOP_SESSION_CONTEXT);
                            }
                            if let (Some(s), Some(cs), Some(k)) = (sessions, &client_session, &key)
                            {
                                settle_session(
                                    SessionOutcome {
                                        sessions: s,
                                        cfg: scfg,
                                        svc,
                                        node,
                                        key: k,
                                        client: cs,
                                        prior: prior.as_ref(),
                                        hop: hop.as_ref(),
                                        status,
                                        now_unix,
                                        tls: ctx.tls,
                                    },
                                    resp.headers_mut(),
                                );
                            }
                            if let (Some(on_upstream), Some((proto, on_client))) =
                                (on_upstream, upgrade)
                            {
                                tunnel::restore_upgrade_headers(resp.headers_mut(), &proto);
                                let websocket = proto.as_bytes().eq_ignore_ascii_case(b"websocket");
                                tunnel::spawn(
                                    on_client,
                                    on_upstream,
                                    tunnel::TunnelCtx {
                                        websocket,
                                        idle: snap.config.timeouts.idle,
                                        node: Arc::clone(&node.state),
                                        drain_deadline: svc.drain.deadline,
                                        stopping: fwd.stopping.clone(),
                                        inflight: node.state.begin_request(),
                                    },
                                );
                                out.status = status;
                                break 'forward Ok(resp);
                            }
                            if rf.grpc {
                                let (parts, body) = resp.into_parts();
                                let body = ProxyBody::guarded(
                                    body,
                                    Arc::clone(&node.state),
                                    svc.drain.deadline,
                                    grpc_deadline.map(tokio::time::Instant::from_std),
                                );
                                resp = Response::from_parts(parts, body);
                            }
                            if ctx.debug_headers {
                                let h = resp.headers_mut();
                                h.insert(X_ROUTE_RULE_ID.clone(), route.id_header.clone());
                                h.insert(X_UPSTREAM_ADDR.clone(), node.address_header.clone());
                            }
                            out.status = status;
                            break 'forward Ok(resp);
                        }
                        Err(SendFailure::NotSent { request, error }) => {
                            if hop.is_none() && prior.as_ref().is_some_and(|b| *b.node == *node.id)
                            {
                                hop = Some(PendingHop {
                                    from: Arc::clone(&node.shared_id),
                                    reason: HopReason::Unhealthy,
                                    started: Instant::now(),
                                });
                            }
                            account(svc, node, Observation::Failure, answered_ms);
                            log_upstream_failure(&svc.name, node, &error, sent_attempts, true);
                            last = error.kind;
                            upstream = Some(*request);
                        }
                        Err(SendFailure::Refused(error)) => {
                            // Never processed: replay from a copy, whatever the method.
                            if hop.is_none() && prior.as_ref().is_some_and(|b| *b.node == *node.id)
                            {
                                hop = Some(PendingHop {
                                    from: Arc::clone(&node.shared_id),
                                    reason: HopReason::Unhealthy,
                                    started: Instant::now(),
                                });
                            }
                            log_upstream_failure(&svc.name, node, &error, sent_attempts, true);
                            last = error.kind;
                            account(svc, node, Observation::Failure, answered_ms);
                            match &replay {
                                Some(copy) => upstream = Some(copy.request()),
                                None => break 'forward Err(error.kind),
                            }
                        }
                        Err(SendFailure::Sent(error)) => {
                            log_upstream_failure(&svc.name, node, &error, sent_attempts, false);
                            last = error.kind;
                            if error.kind == ErrorKind::BodyTooLarge {
                                break 'forward Err(error.kind);
                            }
                            account(svc, node, Observation::Failure, answered_ms);
                            if hop.is_none() && prior.as_ref().is_some_and(|b| *b.node == *node.id)
                            {
                                hop = Some(PendingHop {
                                    from: Arc::clone(&node.shared_id),
                                    reason: HopReason::Unhealthy,
                                    started: Instant::now(),
                                });
                            }
                            match replay.as_ref().filter(|r| r.after_sent) {
                                // Replay-safe with its body kept: send a copy elsewhere.
                                Some(copy) => upstream = Some(copy.request()),
                                // May have run on the backend; never send it twice.
                                None => break 'forward Err(error.kind),
                            }
                        }
                    }
                }
                Err(last)
            };
            done.finish(&snap, &conn, result)
        }
    }
}

/// One client connection's share of the gateway: the request handler and
/// the facts about the connection, computed once when it is accepted.
#[derive(Debug)]
pub struct ClientConn {
    pub forwarder: Forwarder,
    pub peer: SocketAddr,
    /// `X-Forwarded-For` for a client that sent none: the peer's address.
    pub forwarded_for: HeaderValue,
    pub ctx: Arc<RequestCtx>,
}

/// The future of one request (what hyper's service call returns).
pub type ResponseFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Response<ProxyBody>> + Send>>;

impl ClientConn {
    pub fn new(forwarder: Forwarder, peer: SocketAddr, ctx: Arc<RequestCtx>) -> ClientConn {
        ClientConn {
            forwarder,
            peer,
            forwarded_for: crate::headers::peer_header(peer.ip()),
            ctx,
        }
    }

    /// Handles one client request end to end. Never fails: every problem
    /// becomes a response from [`error_response`]. Everything up to the
    /// first attempt runs synchronously here; a request turned away
    /// before that (limits, access, no route) costs no future at all.
    pub fn serve(self: &Arc<Self>, req: Request<Incoming>) -> ResponseFuture {
        let started = Instant::now();
        let fwd = &self.forwarder;
        let snap = fwd.snapshot.load_full();
        let method = req.method().clone();
        let mut req = req;
        // Counted before the gateway adds anything.
        let facts = scan_request(req.headers());
        // Room for the headers the gateway adds, so the map grows once.
        req.headers_mut().reserve(6);
        let request_id = match facts
            .request_id
            .then(|| req.headers().get(&X_REQUEST_ID))
            .flatten()
        {
            Some(v) => v.clone(),
            None => {
                let id = new_request_id();
                req.headers_mut().insert(X_REQUEST_ID.clone(), id.clone());
                id
            }
        };
        METRICS.requests.fetch_add(1, Ordering::Relaxed);
        let mut done = Done {
            method,
            request_id,
            started,
            grpc: facts.grpc,
            out: Outcome {
                status: 0,
                route: None,
                service: None,
                node: None,
                attempts: 0,
                error: None,
                hopped: false,
            },
        };
        match fwd.plan(&snap, req, self, &facts, started, &mut done.out) {
            Ok(plan) => Box::pin(Forwarder::forward(
                Arc::clone(self),
                snap,
                plan,
                facts,
                done,
            )),
            Err(kind) => {
                let resp = done.finish(&snap, self, Err(kind));
                Box::pin(std::future::ready(resp))
            }
        }
    }
}

/// What the end of a request needs from its start: the answer's form, the
/// access log line, the counters.
struct Done {
    method: Method,
    request_id: HeaderValue,
    started: Instant,
    grpc: bool,
    out: Outcome,
}

impl Done {
    /// The response to the client (an error becomes the gateway's own
    /// answer), counted and logged.
    fn finish(
        self,
        snap: &Snapshot,
        conn: &ClientConn,
        result: Result<Response<ProxyBody>, ErrorKind>,
    ) -> Response<ProxyBody> {
        let mut out = self.out;
        let resp = match result {
            Ok(r) => r,
            Err(kind) => {
                out.status = kind.status();
                out.error = Some(kind);
                METRICS.error(kind);
                if self.grpc {
                    grpc_error_response(kind, Some(&self.request_id))
                } else {
                    error_response(kind, Some(&self.request_id))
                }
            }
        };
        // A gRPC error travels as HTTP 200 with a `grpc-status`; it is
        // counted (like the access log shows it) by the gateway's status.
        METRICS.response(if out.error.is_some() {
            out.status
        } else {
            resp.status().as_u16()
        });
        log_access(
            snap,
            &self.method,
            &self.request_id,
            &out,
            self.started,
            conn.peer,
            &conn.ctx,
        );
        resp
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
    hop: Option<&'a PendingHop>,
    status: u16,
    now_unix: u64,
    tls: bool,
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
    if o.status < 500 && (moved || context.is_some() || stale || o.client.issue) {
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
        });
    }
    if o.client.issue {
        if let Some(c) = session::set_cookie(o.cfg, &o.client.token, o.tls) {
            headers.append(http::header::SET_COOKIE, c);
        }
        headers.insert(o.cfg.header.clone(), o.client.token.clone());
    }
}

/// Records an attempt's outcome on the node; ejects it when the outlier
/// detector asks and the service's ejection cap allows (the panic
/// threshold: never eject so much that the service has nowhere to go).
fn account(svc: &CompiledService, node: &CompiledNode, seen: Observation, now: u64) {
    let verdict = node.state.observe(seen, now, &svc.outlier);
    if node.state.is_relaxed(now) {
        // Under maintenance passive ejection is suspended.
        return;
    }
    if let Verdict::Eject(time) = verdict {
        let total = svc.nodes.len();
        let ejected = svc.nodes.iter().filter(|n| n.state.is_ejected(now)).count();
        if (ejected + 1) * 100 <= total * usize::from(svc.outlier.max_ejected_percent) {
            node.state.eject_for(time, now);
        } else {
            tracing::debug!(
                service = %svc.name,
                node = %node.id,
                ejected,
                total,
                "not ejecting: the service's max_ejected_percent is reached"
            );
        }
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

/// A copy of a request kept so that it can be sent again elsewhere.
struct Replay {
    head: http::request::Parts,
    body: Bytes,
    /// Replay-safe: may be sent again even after a send that may have
    /// reached a backend. Otherwise only after the backend refused it
    /// unprocessed.
    after_sent: bool,
}

impl Replay {
    fn new(head: &http::request::Parts, body: Bytes, after_sent: bool) -> Replay {
        Replay {
            head: copy_head(head),
            body,
            after_sent,
        }
    }

    fn request(&self) -> Request<ProxyBody> {
        let body = if self.body.is_empty() {
            ProxyBody::Empty
        } else {
            ProxyBody::full(self.body.clone())
        };
        Request::from_parts(copy_head(&self.head), body)
    }
}

/// The upstream request for one attempt on `node`: re-targeted, with
/// `X-Upstream-Addr` for a moved node and `X-Hop-From` /
/// `Hop-Session-Context` when the session hops to it. By value in and out,
/// so the request's future never holds a borrowed copy across the send.
fn for_node(
    mut request: Request<ProxyBody>,
    node: &CompiledNode,
    svc: &CompiledService,
    hop: Option<&PendingHop>,
    prior: Option<&Binding>,
) -> Request<ProxyBody> {
    retarget(&mut request, node, svc);
    if let Some(moved) = node.state.moved_to() {
        if let Ok(v) = HeaderValue::from_str(&moved.to_string()) {
            request.headers_mut().insert(X_UPSTREAM_ADDR.clone(), v);
        }
    }
    if let Some(h) = hop.filter(|h| *h.from != *node.id) {
        let headers = request.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&h.from) {
            headers.insert(X_HOP_FROM.clone(), v);
        }
        if let Some(ctx) = prior.and_then(|b| b.context.as_deref()) {
            if let Ok(v) = HeaderValue::from_bytes(ctx) {
                headers.insert(HOP_SESSION_CONTEXT.clone(), v);
                METRICS.contexts_delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    request
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

/// The consistent-hashing key of a request, if it carries one.
fn hash_of<B>(on: &HashOn, req: &Request<B>, client_ip: std::net::IpAddr) -> Option<u64> {
    match on {
        HashOn::Header(name) => req.headers().get(name).map(|v| hash_key(v.as_bytes())),
        HashOn::Cookie(name) => req
            .headers()
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| {
                let (k, v) = c.trim().split_once('=')?;
                (k == name).then(|| hash_key(v.as_bytes()))
            }),
        HashOn::SourceIp => Some(match client_ip {
            std::net::IpAddr::V4(a) => hash_key(&a.octets()),
            std::net::IpAddr::V6(a) => hash_key(&a.octets()),
        }),
    }
}

/// Reads the request body frames that have already arrived, waiting at
/// most `wait` for more (a unary gRPC call's DATA frame typically trails its
/// HEADERS by microseconds; a streaming client is never held up longer).
/// Returns the body to send and, when the whole body (at most `keep` bytes,
/// data frames only) arrived in time, a copy of it.
async fn take_arrived(
    mut body: Incoming,
    keep: u64,
    limit: u64,
    wait: std::time::Duration,
) -> (ProxyBody, Option<Bytes>) {
    let mut got = bytes::BytesMut::new();
    let until = tokio::time::Instant::now() + wait;
    loop {
        let next = match tokio::time::timeout_at(until, body.frame()).await {
            Ok(f) => f,
            Err(_) => return (prefixed(got.freeze(), None, body, limit), None),
        };
        match next {
            // The body is complete.
            None => {
                let b = got.freeze();
                return (ProxyBody::full(b.clone()), Some(b));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) if (got.len() + d.len()) as u64 <= keep => got.extend_from_slice(&d),
                Ok(d) => {
                    got.extend_from_slice(&d);
                    return (prefixed(got.freeze(), None, body, limit), None);
                }
                // Request trailers: passed on; no copy is kept.
                Err(frame) => {
                    return (
                        prefixed(got.freeze(), frame.into_trailers().ok(), body, limit),
                        None,
                    )
                }
            },
            // An error: stream what we have and let the send fail.
            Some(Err(_)) => return (prefixed(got.freeze(), None, body, limit), None),
        }
    }
}

fn prefixed(head: Bytes, trailers: Option<HeaderMap>, rest: Incoming, limit: u64) -> ProxyBody {
    let rest = ProxyBody::limited(rest, limit.saturating_sub(head.len() as u64));
    if head.is_empty() && trailers.is_none() {
        rest
    } else {
        ProxyBody::Prefixed {
            head: (!head.is_empty()).then_some(head),
            trailers,
            rest: Box::new(rest),
        }
    }
}

/// `grpc-timeout` (`<1-8 digits><H|M|S|m|u|n>`, gRPC over HTTP/2 spec).
fn parse_grpc_timeout(v: &[u8]) -> Option<std::time::Duration> {
    let (unit, digits) = v.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    use std::time::Duration as D;
    Some(match unit {
        b'H' => D::from_secs(n * 3600),
        b'M' => D::from_secs(n * 60),
        b'S' => D::from_secs(n),
        b'm' => D::from_millis(n),
        b'u' => D::from_micros(n),
        b'n' => D::from_nanos(n),
        _ => return None,
    })
}

/// Size of a request head as sent: request line and `name: value` lines
/// (counted by [`scan_request`]).
fn head_bytes<B>(req: &Request<B>, facts: &RequestFacts) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + 12;
    line + facts.header_bytes
}

/// A copy of a request head for replays: method, URI, version and headers
/// (not the extensions, which hold per-connection state and cost a clone
/// each).
fn copy_head(p: &http::request::Parts) -> http::request::Parts {
    let mut r = Request::new(());
    *r.method_mut() = p.method.clone();
    *r.uri_mut() = p.uri.clone();
    *r.version_mut() = p.version;
    *r.headers_mut() = p.headers.clone();
    r.into_parts().0
}

/// A trailers-only gRPC answer with `grpc-status: 14` (UNAVAILABLE): the
/// backend refused the call before producing any response byte.
fn grpc_unavailable_at_once(resp: &Response<ProxyBody>) -> bool {
    use http_body::Body;
    is_grpc(resp.headers())
        && resp.headers().get("grpc-status").is_some_and(|v| v == "14")
        && resp.body().is_end_stream()
}

/// A gRPC response (its stream gets a drain deadline).
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

fn host_of<B>(req: &Request<B>) -> Option<&str> {
    match req.headers().get(HOST) {
        Some(h) => h.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    }
}

fn content_length<B>(req: &Request<B>) -> Option<u64> {
    content_length_of(req.headers())
}

fn content_length_of(headers: &HeaderMap) -> Option<u64> {
    headers
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
        attempt,
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
        hops = u8::from(out.hopped),
        status = out.status,
        error = out.error.map(|e| e.label()).unwrap_or("-"),
        latency_us = started.elapsed().as_micros() as u64,
        "access"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The size of what `F` returns, without calling it.
    fn output_size<F, A, B, C, D, E, R>(_: &F) -> usize
    where
        F: FnOnce(A, B, C, D, E) -> R,
    {
        std::mem::size_of::<R>()
    }

    /// Every request's future is boxed, moved and polled whole: it must
    /// not grow. The bound is its size on 2026-11-30, in the test build and
    /// in the release build alike (`-Zprint-type-sizes`).
    #[test]
    fn request_future_stays_small() {
        let size = output_size(&Forwarder::forward);
        assert!(size <= 2904, "the request future is {size} bytes");
    }

    #[test]
    fn grpc_timeouts() {
        assert_eq!(
            parse_grpc_timeout(b"300m"),
            Some(Duration::from_millis(300))
        );
        assert_eq!(parse_grpc_timeout(b"2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout(b"1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_grpc_timeout(b"99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in [&b""[..], b"m", b"123456789m", b"12x", b"-1S", b"1.5S"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
