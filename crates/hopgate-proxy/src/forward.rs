//! The per-request path: one snapshot load, access check, route, node pick,
//! forward through the node's pool, respond, log.
//!
//! Owns [`Forwarder`] (shared by every connection of every listener),
//! [`ClientConn`] (one per client connection: where a request starts), the
//! shape of a request's future (everything before the first attempt runs
//! synchronously; the rest is one boxed future per request), and the
//! driver of that future, `Forwarder::forward`, the one place where a
//! request waits (for its body, for each send). The steps it calls are
//! plain functions, each phase of `docs/request-lifecycle.md` in a file
//! named after it:
//!
//! - `plan`: limits, access, route, select, hash key, session
//!   stickiness, the upgrade hand-off, the upstream request (phases 4–11);
//! - `replay`: how the body is taken and the copy it is replayed from
//!   (phase 12);
//! - `attempt`: choose a node, admit it, spend the budget, build the
//!   attempt, record its outcome on the node (phase 13.1–13.5);
//! - `failure`: what a failed attempt leads to: one decision and one
//!   order of steps for every failure class (phase 13.6);
//! - `answer`: a backend's answer on its way to the client (phase 13.7);
//! - `grpc`: gRPC deadlines and UNAVAILABLE answers;
//! - `done`: the end of every request: error answers, counters, access
//!   log (phases 15–16).
//!
//! Must not touch: the control plane (the snapshot is only loaded, never
//! stored, here), or a lock: everything on this path is an atomic load or a
//! lock-free queue.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response};
use http_body_util::BodyExt;

use crate::upstream::{SharedSnapshot, Snapshot};
use hopgate_core::config::UpstreamProtocol;
use hopgate_core::error::ErrorKind;
use hopgate_core::maintenance::Notification;
use hopgate_core::node::{ms_at, now_ms};
use hopgate_core::retry;
use hopgate_core::session::HopReason;

use crate::body::{ClientBody, ProxyBody};
use crate::canary::CanarySlot;
use crate::h1::RequestBody;
use crate::headers::{
    new_request_id, scan_request, valid_request_id, RequestFacts, RequestId, X_REQUEST_ID,
};
use crate::metrics::METRICS;
use crate::session::Sessions;

mod answer;
mod attempt;
mod done;
mod failure;
mod grpc;
mod logged;
mod plan;
mod replay;

use attempt::{Attempted, Choice, Tried};
use done::{Done, Outcome};
use failure::{AfterFailure, Failed};
pub(crate) use logged::LoggedBody;
use plan::{begin_hop_if_bound, Plan};
use replay::{Capture, Replay};

/// Per-listener facts a request needs.
#[derive(Debug, Clone)]
pub struct RequestCtx {
    pub listener: Arc<str>,
    pub debug_headers: bool,
    /// Route on (and forward) the path in normal form.
    pub normalize_path: bool,
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
    /// A config canary, while one bakes ([`crate::canary`]).
    canary: CanarySlot,
    /// Where sampled requests' spans go while `tracing.otlp` is on.
    otlp: Option<Arc<crate::otlp::Exporter>>,
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
            canary: CanarySlot::default(),
            otlp: None,
        }
    }

    /// Sampled requests hand their spans to `exporter` while
    /// `tracing.otlp.enabled` is true ([`crate::otlp::start`]).
    pub fn with_otlp(mut self, exporter: Arc<crate::otlp::Exporter>) -> Forwarder {
        self.otlp = Some(exporter);
        self
    }

    /// Requests consult `slot` for a running config canary.
    pub fn with_canary(mut self, slot: CanarySlot) -> Forwarder {
        self.canary = slot;
        self
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

    /// A request from its head to its answer: [`ClientConn::begin`] (the
    /// plan, or the answer of a request turned away) and then the attempts
    /// (body handling, node picks, retries, the response). Returns the
    /// request's whole future; its caller keeps it in one place (a box, or
    /// the HTTP/1.1 server's block per connection). Only the connection,
    /// the request's box and its body are captured: the plan is made in the
    /// future's first poll and taken apart there, so its parts are written
    /// into the future once, not moved through `begin`'s result, a `Begun`
    /// and the future's arguments first (each move a copy of ~900 bytes).
    /// Every step is a plain function; only the waits (the body, the send)
    /// happen here, so none of a step's temporaries end up in the future.
    async fn forward(
        conn: Arc<ClientConn>,
        req: Box<Request<ProxyBody>>,
        body: RequestBody,
    ) -> Box<Response<ProxyBody>> {
        // Taken apart in the pattern: no binding holds the whole plan
        // (a moved-from binding would still get room in the future).
        let Begun(
            snap,
            Plan {
                fetch,
                mut flight,
                now: arrived_ms,
                mut sticky,
                mut hop,
                upgrade,
                mut request,
                mut set,
                body,
            },
            facts,
            mut done,
        ) = match conn.begin(req, body) {
            Ok(begun) => begun,
            Err(resp) => return resp,
        };
        let out = &mut done.out;
        // Whether the request waited for anything (the shared store,
        // its body) before its first send.
        let mut waited = fetch.is_some();
        if let Some(fetch) = fetch {
            // A known session bound on another replica: follow the
            // shared store's binding (bounded by the store's timeout).
            if let Some(b) = fetch.await {
                plan::adopt_fetched(&snap, &mut flight, &mut sticky, &mut hop, b, arrived_ms);
            }
        }
        let svc = &snap.services[flight.selection.service];
        let result: Result<Box<Response<ProxyBody>>, ErrorKind> = 'forward: {
            let policy = &snap.config.retries;
            svc.retry_budget.deposit(policy.budget);
            // Phase 12: the body, and the copy it can be replayed from.
            let replay_safe = retry::replay_safe(request.method(), request.headers());
            let capture = replay::capture(
                &body,
                request.headers(),
                replay_safe,
                policy.buffer_body,
                svc.protocol,
                upgrade.is_some(),
                facts.grpc,
            );
            let max_body = snap.config.limits.max_body_bytes;
            // A streamed body records what the client does, so that a
            // failed send can be told the client's fault (phase 13.6).
            let mut client_body = None;
            let (body, kept) = match capture {
                Capture::Empty => (ProxyBody::Empty, replay_safe.then(|| (Bytes::new(), true))),
                Capture::Buffer => {
                    waited = true;
                    let read = ProxyBody::limited(body, policy.buffer_body).collect();
                    let bound = snap.config.timeouts.request;
                    match Box::pin(tokio::time::timeout(bound, read)).await {
                        Ok(Ok(b)) => {
                            let b = b.to_bytes();
                            (ProxyBody::full(b.clone()), Some((b, true)))
                        }
                        Ok(Err(e)) => break 'forward Err(crate::body::read_error(&e)),
                        Err(_) => break 'forward Err(ErrorKind::ClientTimeout),
                    }
                }
                Capture::Arrived { wait } => {
                    waited = true;
                    let watch = client_body.insert(Arc::default());
                    let (body, whole) = Box::pin(replay::take_arrived(
                        body,
                        policy.buffer_body,
                        max_body,
                        wait,
                        Arc::clone(watch),
                    ))
                    .await;
                    (body, whole.map(|b| (b, false)))
                }
                Capture::Stream => {
                    let watch = client_body.insert(Arc::default());
                    (ProxyBody::watched(body, max_body, Arc::clone(watch)), None)
                }
            };
            // An HTTP/1.1 send hands its head back when it fails: the
            // copy needs only the body.
            let handed_back =
                (svc.protocol == UpstreamProtocol::Http1 || upgrade.is_some()) && !facts.grpc;
            let replay = kept.map(|(b, after_sent)| {
                if handed_back {
                    Replay::handed_back(b, after_sent)
                } else {
                    Replay::new(&request, b, after_sent)
                }
            });
            // An answer's head may stay as the backend's bytes for
            // hopgate's own HTTP/1.1 server, which writes it as it is.
            let raw_head =
                conn.native_h1.load(Ordering::Relaxed) && !facts.grpc && upgrade.is_none();
            *request.body_mut() = body;
            let mut upstream = Some(request);

            // Phase 13: the attempts.
            let attempts = (policy.attempts as usize).min(attempt::MAX_TRACKED);
            let mut tried = Tried::default();
            let mut refused = 0; // picks turned away by an open breaker
            let mut last = ErrorKind::NoLiveNode;
            let mut sent = 0;
            let mut clock = Some(arrived_ms);
            while sent < attempts {
                // The first attempt uses the clock read on arrival.
                let now = clock.take().unwrap_or_else(now_ms);
                let (node_idx, last_resort) =
                    match attempt::choose(svc, &flight, &mut sticky, &mut tried, now) {
                        Choice::Node { idx, last_resort } => (idx, last_resort),
                        Choice::Refused(idx) => {
                            let node = &svc.nodes[idx].shared_id;
                            let reason = HopReason::CircuitOpen;
                            begin_hop_if_bound(&mut hop, flight.prior.as_ref(), node, reason);
                            refused += 1;
                            if refused > svc.nodes.len() {
                                break;
                            }
                            continue;
                        }
                        Choice::Nothing => break,
                    };
                if !attempt::spend(svc, sent, last_resort) {
                    break;
                }
                sent += 1;
                out.attempts = sent;
                out.node = Some(node_idx);
                // Edited where it lies: a borrowed local would be kept
                // in the request's future across the send.
                let Some(request) = upstream.as_mut() else {
                    break;
                };
                crate::otlp::before_attempt(out.span.as_deref_mut(), sent, &mut set);

                let node = &svc.nodes[node_idx];
                // A MOVING node's new address, read once for the header
                // and the send.
                let moved = node.state.moved_to();
                attempt::for_node(
                    (&mut **request, &mut set),
                    node,
                    svc,
                    &flight,
                    hop.as_ref(),
                    moved,
                    conn.forwarder
                        .sessions
                        .as_deref()
                        .filter(|_| flight.sessions_on)
                        .map(|s| (&s.keys, &snap.config.sessions.header)),
                );
                let settings = attempt::settings(
                    &snap,
                    svc,
                    node,
                    now,
                    upgrade.is_some(),
                    flight.grpc_deadline,
                    conn.peer,
                );
                let pool = attempt::pool_of(node, settings.max_idle);
                let inflight = node.state.begin_request();
                // The first attempt of a request that waited for
                // nothing since it arrived is sent at its arrival.
                let sent_at = if sent == 1 && !waited {
                    done.started
                } else {
                    Instant::now()
                };
                let addr = moved.unwrap_or(node.address);
                let Some(request) = upstream.take() else {
                    break;
                };
                let result = pool
                    .send(addr, request, &set, &settings, sent_at, raw_head)
                    .await;
                drop(inflight);
                let answered = Instant::now();
                let took = answered.saturating_duration_since(sent_at);
                // Since arrival: the same span when the attempt was
                // sent at arrival (the common case), and the clock in
                // milliseconds follows from it.
                let (since_arrival, answered_ms) = if sent_at == done.started {
                    (took, arrived_ms + took.as_millis() as u64)
                } else {
                    let d = answered.saturating_duration_since(done.started);
                    (d, ms_at(answered))
                };
                out.took = Some(since_arrival);
                if let Some(s) = out.span.as_deref_mut() {
                    let o = crate::otlp::outcome_of(&result);
                    s.after_attempt(node_idx, sent, sent_at, answered, o);
                }
                snap.routes[flight.route].stats.upstream.observe(took);
                let at = Attempted {
                    svc,
                    node,
                    number: sent,
                    attempts_left: sent < attempts,
                    last_resort,
                    took,
                    answered_ms,
                };
                let req = Req {
                    conn: &conn,
                    snap: &snap,
                    flight: &flight,
                    client_body: client_body.as_deref(),
                };
                let resp = match result {
                    // The common case: an answer, handled in place.
                    Ok(resp) if !(facts.grpc && grpc::unavailable_at_once(&resp)) => resp,
                    failed => {
                        match failure::on_failure(
                            Failed::from(failed),
                            req,
                            &at,
                            &mut hop,
                            replay.as_ref(),
                            &mut last,
                            out,
                        ) {
                            AfterFailure::Next(request) => {
                                upstream = Some(request);
                                continue;
                            }
                            AfterFailure::End(result) => break 'forward result,
                            AfterFailure::Deliver(resp) => resp,
                        }
                    }
                };
                break 'forward Ok(answer::answer(resp, req, &at, hop.as_ref(), upgrade, out));
            }
            Err(last)
        };
        done.finish(&snap, &conn, result)
    }
}

/// Points `snap` at the canary's snapshot when this client is on its
/// side: decided by the session id when sessions are on (a new session's
/// freshly minted id, so its later requests, which carry it, stay on the
/// same side), else by the client address. Returns the session it
/// identified, so that its token is verified once per request.
#[cold]
fn canary_side(
    fwd: &Forwarder,
    arm: &crate::canary::CanaryArm,
    snap: &mut Arc<Snapshot>,
    req: &Request<ProxyBody>,
    conn: &ClientConn,
) -> Option<crate::session::ClientSession> {
    if snap.version != arm.baseline_version {
        return None;
    }
    let scfg = &snap.config.sessions;
    let known = fwd
        .sessions
        .as_deref()
        .filter(|_| scfg.enabled)
        .map(|s| crate::session::identify(s, scfg, req.headers(), crate::session::unix_now()));
    let takes = match &known {
        Some(cs) => arm.takes(cs.id.as_bytes()),
        None => match snap.access.client_ip(conn.peer.ip(), req.headers()) {
            std::net::IpAddr::V4(a) => arm.takes(&a.octets()),
            std::net::IpAddr::V6(a) => arm.takes(&a.octets()),
        },
    };
    if takes {
        *snap = Arc::clone(&arm.snapshot);
    }
    known
}

/// The request as the steps after its plan see it: borrowed, and built
/// where a step is called, so it is never stored in the request's future.
#[derive(Clone, Copy)]
struct Req<'a> {
    conn: &'a ClientConn,
    snap: &'a Snapshot,
    flight: &'a plan::Flight,
    /// What the client's streamed body did, when it is streamed.
    client_body: Option<&'a ClientBody>,
}

/// One client connection's share of the gateway: the request handler and
/// the facts about the connection, computed once when it is accepted.
#[derive(Debug)]
pub(crate) struct ClientConn {
    pub forwarder: Forwarder,
    pub peer: SocketAddr,
    /// The peer as the access log writes it, formatted once per connection
    /// (formatting a `SocketAddr` per request line cost ~1.3 k
    /// instructions).
    pub peer_text: Box<str>,
    /// `X-Forwarded-For` for a client that sent none: the peer's address.
    pub forwarded_for: HeaderValue,
    pub ctx: Arc<RequestCtx>,
    /// The connection speaks HTTP/2 (seen on its requests).
    pub(crate) http2: std::sync::atomic::AtomicBool,
    /// The connection is served by hopgate's own HTTP/1.1 server (set
    /// when it starts), which writes a backend's raw head
    /// ([`crate::h1::response_head::RawHead`]) as it is.
    pub(crate) native_h1: std::sync::atomic::AtomicBool,
    /// Closes the connection: an HTTP/2 stream stalled past the send limit
    /// ([`crate::send_watch`]). The listener's connection task waits on it.
    pub(crate) close: Arc<tokio::sync::Notify>,
}

/// The future of one request (what hyper's service call returns).
pub(crate) type ResponseFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Box<Response<ProxyBody>>> + Send>>;

impl ClientConn {
    pub(crate) fn new(forwarder: Forwarder, peer: SocketAddr, ctx: Arc<RequestCtx>) -> ClientConn {
        ClientConn {
            forwarder,
            peer,
            peer_text: peer.to_string().into_boxed_str(),
            forwarded_for: crate::headers::peer_header(peer.ip()),
            ctx,
            http2: std::sync::atomic::AtomicBool::new(false),
            native_h1: std::sync::atomic::AtomicBool::new(false),
            close: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Handles one client request end to end. Never fails: every problem
    /// becomes a response from [`crate::respond::error_response`].
    /// Everything up to the first attempt runs synchronously in the
    /// future's first poll ([`Forwarder::forward`]).
    pub(crate) fn serve(self: &Arc<Self>, req: Request<RequestBody>) -> ResponseFuture {
        let (parts, body) = req.into_parts();
        let head = Box::new(Request::from_parts(parts, ProxyBody::Empty));
        Box::pin(Forwarder::forward(Arc::clone(self), head, body))
    }

    /// The request's future ([`Forwarder::forward`]) for a caller that keeps
    /// it somewhere of its own (hopgate's HTTP/1.1 server reuses one block
    /// per connection for it). `req` is the request's head (its body an
    /// empty placeholder), `body` its body.
    pub(crate) fn request(
        self: &Arc<Self>,
        req: Box<Request<ProxyBody>>,
        body: RequestBody,
    ) -> impl std::future::Future<Output = Box<Response<ProxyBody>>> + Send + 'static {
        Forwarder::forward(Arc::clone(self), req, body)
    }

    /// Everything up to the first attempt: the plan to forward, or the
    /// answer to a request turned away. Called in the request future's
    /// first poll ([`Forwarder::forward`]). `req` is the request's head (its
    /// body an empty placeholder), `body` its body.
    fn begin(
        self: &Arc<Self>,
        mut req: Box<Request<ProxyBody>>,
        body: RequestBody,
    ) -> Result<Begun, Box<Response<ProxyBody>>> {
        let started = Instant::now();
        let fwd = &self.forwarder;
        let mut snap = fwd.snapshot.load_full();
        let method = req.method().clone();
        if req.version() == http::Version::HTTP_2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        // Counted before the gateway adds anything.
        let facts = scan_request(req.headers());
        // Room for the header the gateway adds to the map (the session
        // header), so the map grows at most once.
        req.headers_mut().reserve(1);
        // A client's id is kept only when it is safe to echo into logs and
        // error bodies; any other is replaced. A new id goes upstream as a
        // set line (`SetLines::request_id`), not into the map.
        let request_id = match facts
            .request_id
            .then(|| req.headers().get(&X_REQUEST_ID))
            .flatten()
            .filter(|v| valid_request_id(v))
        {
            Some(v) => RequestId::Client(v.clone()),
            None => {
                if facts.request_id {
                    req.headers_mut().remove(&X_REQUEST_ID);
                }
                RequestId::Made(new_request_id())
            }
        };
        METRICS.requests.fetch_add(1, Ordering::Relaxed);
        let access = done::AccessFacts::of(&snap, &req, &facts);
        let mut done = Done {
            method,
            request_id,
            started,
            grpc: facts.grpc,
            out: Outcome::default(),
            access,
        };
        // A baking config canary: this client's side (its session, checked
        // here once and handed to the plan, or its address).
        let known = fwd
            .canary
            .with_arm(|arm| canary_side(fwd, arm, &mut snap, &req, self))
            .flatten();
        let arrival = plan::Arrival {
            started,
            known,
            body,
        };
        match fwd.plan(&snap, req, self, &facts, arrival, &mut done.out) {
            Ok(mut plan) => {
                if let RequestId::Made(id) = done.request_id {
                    plan.set.request_id = Some(id);
                }
                Ok(Begun(snap, plan, facts, done))
            }
            Err(kind) => Err(done.finish(&snap, self, Err(kind))),
        }
    }
}

/// A request planned and ready to forward ([`ClientConn::begin`]).
struct Begun(Arc<Snapshot>, Plan, RequestFacts, Done);

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `F` returns, without calling it.
    fn output_size<F, A, B, C, R>(_: &F) -> usize
    where
        F: FnOnce(A, B, C) -> R,
    {
        std::mem::size_of::<R>()
    }

    /// Every request's future is boxed, moved and polled whole: it must
    /// not grow. The bound is its size on 2026-11-30, the same in the test
    /// and the release build (2,904 bytes before the steps became plain
    /// functions in `forward/`; 2,840 after; 2,848 with the shared store's
    /// miss lookup, whose boxed future the request holds while it waits;
    /// 2,856 with the client-body fault flag; 2,864 with the node hint of
    /// a session's token, 8 bytes in `ClientSession`; 2,896 with the
    /// pool's admission limits in `PoolSettings`; 2,400 once bodies larger
    /// than a streamed request body were boxed (`ProxyBody` 192 → 64
    /// bytes); 2,752 with the lines the gateway sets beside the header map,
    /// `SetLines`; 2,432 with the HTTP/1.1 exchange inline in it (608
    /// bytes, a named future that holds the request once, instead of a
    /// boxed 1,632-byte one), the replay copy's head boxed and no
    /// captured value stored twice; 2,472 with a new request id among the
    /// set lines instead of in the map; 1,712 with the request and its
    /// answer boxed, moved as pointers; 1,800 with the plan made in the
    /// future's first poll, the request's box and body captured instead).
    #[test]
    fn request_future_stays_small() {
        let size = output_size(&Forwarder::forward);
        assert!(size <= 1800, "the request future is {size} bytes");
    }
}
