//! The per-request path: one snapshot load, access check, route, node pick,
//! forward through the node's pool, respond, log.
//!
//! Owns [`Forwarder`] (shared by every connection of every listener),
//! [`ClientConn`] (one per client connection: where a request starts), the
//! shape of a request's future (everything before the first attempt runs
//! synchronously; the rest is one boxed future per request), and the
//! driver of that future, `Forwarder::forward`, the one place where a
//! request waits (for the shared store, its body, each send): a loop
//! around one `.await`, the send, between `Tries::prepare` and
//! `Tries::settle`. The steps it calls are plain functions, each phase of
//! `docs/request-lifecycle.md` in a file named after it:
//!
//! - `plan`: phases 4–11, one function per phase: `plan/limits`,
//!   `plan/route` (host, path, route, version group, hash key),
//!   `plan/stickiness` (the session), `plan/build` (the upgrade hand-off,
//!   the upstream request);
//! - `replay`: how the body is taken and the copy it is replayed from
//!   (phase 12);
//! - `tries`: the request's state from its plan to its answer (`Trip`) and
//!   the attempt loop's (`Tries`): the order of an attempt's steps before
//!   and after its send (phase 13);
//! - `attempt`: choose a node, admit it, spend the budget, build the
//!   attempt, record its outcome on the node (phase 13.1–13.5);
//! - `failure`: what a failed attempt leads to: one decision and one
//!   order of steps for every failure class (phase 13.6);
//! - `answer`: a backend's answer on its way to the client (phase 13.7);
//! - `grpc`: gRPC deadlines and UNAVAILABLE answers;
//! - `mirror`: a route's sampled copies to another service (after phase
//!   12, on a task of their own);
//! - `done`: the end of every request: error answers, counters, access
//!   log (phases 15–16).
//!
//! Must not touch: the control plane (the snapshot is only loaded, never
//! stored, here), or a lock: everything on this path is an atomic load or a
//! lock-free queue.

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use http::{Request, Response};

use crate::upstream::{SharedSnapshot, Snapshot};
use hopgate_core::error::ErrorKind;
use hopgate_core::maintenance::Notification;

use crate::body::{ClientBody, ProxyBody, RequestBody};
use crate::canary::CanarySlot;
use crate::headers::{new_request_id, scan_request, valid_request_id, RequestId, X_REQUEST_ID};
use crate::metrics::METRICS;
use crate::session::Sessions;

mod answer;
mod attempt;
mod done;
mod failure;
mod filters;
mod grpc;
mod logged;
mod mirror;
mod plan;
mod replay;
mod tries;

pub(crate) use logged::{AccessLine, LoggedBody};
use replay::Capture;
use tries::{Tries, Trip};

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
    /// The keys and users of routes with `auth` ([`crate::auth`]).
    auth: Arc<crate::auth::AuthKeys>,
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
            auth: Arc::default(),
        }
    }

    /// Routes with `auth` check against `keys` (installed by the control
    /// plane).
    pub fn with_auth(mut self, keys: Arc<crate::auth::AuthKeys>) -> Forwarder {
        self.auth = keys;
        self
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
    /// plan, or the answer of a request turned away), the waits before the
    /// first attempt (the shared store's binding, the body), and then a
    /// loop around one `.await`, the send: [`Tries::prepare`] → send →
    /// [`Tries::settle`], the failure's retryability decided by
    /// `failure::decide`. Returns the request's whole future; its caller
    /// keeps it in one place (a box, or the HTTP/1.1 server's block per
    /// connection). Only the connection, the request's box and its body
    /// are captured: the plan is made in the future's first poll. Every
    /// step is a plain function; only the waits happen here, so none of a
    /// step's temporaries end up in the future, and the attempts' state
    /// ([`Tries`]) exists only while they run.
    async fn forward(
        conn: Arc<ClientConn>,
        req: Box<Request<ProxyBody>>,
        body: RequestBody,
    ) -> Box<Response<ProxyBody>> {
        // The request's state, blank, in its place in the future: `begin`
        // and the plan fill it in there (made apart and moved in, its
        // parts were copied three or four times on the way).
        let mut trip = Trip::arriving(Instant::now());
        let Begun(snap, fetch, mut request, body, auth) = match conn.begin(&mut trip, req, body) {
            Ok(begun) => begun,
            Err(resp) => return resp,
        };
        if let Some(wait) = auth {
            // A basic-auth password checked off the event loop, or the
            // authorization service asked (its headers set when it allows).
            match wait.await {
                Ok(grant) => crate::auth::grant(request.headers_mut(), grant.as_ref()),
                Err(refused) => {
                    trip.done.out.status = refused.status().as_u16();
                    return trip.done.finish(&snap, &conn, Ok(refused));
                }
            }
        }
        if let Some(fetch) = fetch {
            // A known session bound on another replica: follow the shared
            // store's binding (bounded by the store's timeout).
            if let Some(binding) = fetch.await {
                trip.adopt_fetched(&snap, binding);
            }
        }
        // Phase 12: the body, and the copy it can be replayed from.
        let (how, (replay_safe, keep_unsafe), request, body) = trip.capture(&snap, request, body);
        let taken = match how {
            Capture::Empty => Ok(replay::empty(body, replay_safe, keep_unsafe)),
            Capture::Buffer => Box::pin(replay::buffer(body, &snap.config, replay_safe)).await,
            Capture::Arrived { wait } => {
                let arrived = replay::arrived(body, &snap.config, trip.max_body(&snap), wait);
                Ok(Box::pin(arrived).await)
            }
            Capture::Stream => Ok(replay::streamed(body, trip.max_body(&snap))),
        };
        // Phase 13: the attempts, one send each (none when the body could
        // not be taken: its error is the answer).
        let mut tries = Tries::new(&trip, &conn, &snap, request, taken);
        let result = loop {
            let Some((at, to)) = tries.prepare(&mut trip, &conn, &snap) else {
                let kind = tries.last.kind;
                break tries.last.end(kind, &mut trip.done.out);
            };
            let sent = at.send(to, &trip.set, tries.head_for).await;
            if let ControlFlow::Break(end) = tries.settle(&mut trip, &conn, &snap, at, sent) {
                break end;
            }
        };
        let held = trip.held.take();
        let mut resp = trip.done.finish(&snap, &conn, result);
        if let Some(held) = held {
            crate::limit::hold(&mut resp, held);
        }
        resp
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
    /// The listener's (one pointer: every connection holds a
    /// `ClientConn`, idle ones too).
    pub forwarder: Arc<Forwarder>,
    pub peer: SocketAddr,
    /// The peer as the access log writes it, formatted once per connection
    /// (formatting a `SocketAddr` per request line cost ~1.3 k
    /// instructions).
    pub peer_text: Box<str>,
    /// `X-Forwarded-For` for a client that sent none: the peer's address.
    pub forwarded_for: HeaderValue,
    pub ctx: Arc<RequestCtx>,
    /// The connection speaks HTTP/2 (seen on its requests). Otherwise it
    /// is served by hopgate's own HTTP/1.1 server, which writes a
    /// backend's raw head ([`crate::h1::RawHead`]) as it is.
    pub(crate) http2: std::sync::atomic::AtomicBool,
    /// The HTTP/2 response bodies under the send stall limit
    /// ([`crate::send_watch`]); the listener's connection task runs their
    /// sweep and closes the connection when one stalls. Made by the first
    /// that needs it (an HTTP/2 connection's task), so an HTTP/1.1
    /// connection holds none ([`ClientConn::send_watches`]).
    send_watches: std::sync::OnceLock<Arc<crate::send_watch::SendWatches<ProxyBody>>>,
}

/// The future of one request (what hyper's HTTP/2 service call returns).
pub(crate) type ResponseFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Box<Response<ProxyBody>>> + Send>>;

impl ClientConn {
    pub(crate) fn new(
        forwarder: Arc<Forwarder>,
        peer: SocketAddr,
        ctx: Arc<RequestCtx>,
    ) -> ClientConn {
        ClientConn {
            forwarder,
            peer,
            peer_text: peer.to_string().into_boxed_str(),
            forwarded_for: crate::headers::peer_header(peer.ip()),
            ctx,
            http2: std::sync::atomic::AtomicBool::new(false),
            send_watches: std::sync::OnceLock::new(),
        }
    }

    /// The connection's HTTP/2 send-stall registry, made on first use.
    pub(crate) fn send_watches(&self) -> &Arc<crate::send_watch::SendWatches<ProxyBody>> {
        self.send_watches.get_or_init(Arc::default)
    }

    /// Handles one client request from hyper's HTTP/2 server end to end.
    /// Never fails: every problem becomes a response from
    /// [`crate::respond::error_response`]. Everything up to the first
    /// attempt runs synchronously in the future's first poll
    /// ([`Forwarder::forward`]).
    pub(crate) fn serve(self: &Arc<Self>, req: Request<RequestBody>) -> ResponseFuture {
        let (parts, body) = req.into_parts();
        let head = Box::new(Request::from_parts(parts, ProxyBody::Empty));
        Box::pin(Forwarder::forward(Arc::clone(self), head, body))
    }

    /// Everything up to the first attempt: the plan to forward, or the
    /// answer to a request turned away. Called in the request future's
    /// first poll ([`Forwarder::forward`]) with the request's state
    /// (`trip`, blank but for its arrival time), which it fills in where
    /// the future keeps it. `req` is the request's head (its body an
    /// empty placeholder), `body` its body.
    fn begin(
        self: &Arc<Self>,
        trip: &mut Trip,
        mut req: Box<Request<ProxyBody>>,
        body: RequestBody,
    ) -> Result<Begun, Box<Response<ProxyBody>>> {
        let started = trip.done.started;
        let fwd = &self.forwarder;
        let mut snap = fwd.snapshot.load_full();
        trip.done.method = req.method().clone();
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
        trip.done.request_id = match facts
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
                let id = new_request_id();
                trip.set.request_id = Some(id);
                RequestId::Made(id)
            }
        };
        METRICS.requests.fetch_add(1, Ordering::Relaxed);
        trip.done.access = done::AccessFacts::of(&snap, &req, &facts);
        trip.done.grpc = facts.grpc;
        trip.grpc = facts.grpc;
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
        match fwd.plan(&snap, req, self, &facts, arrival, trip.planned()) {
            Ok(mut plan) => {
                if let Some(f) = filters::of(&snap, trip.flight.route) {
                    let (done, flight) = (&mut trip.done, &trip.flight);
                    let seen = (done.access.as_deref_mut(), done.out.span.as_deref_mut());
                    let req = (&mut *plan.request, flight.route, flight.https);
                    filters::on_request((f, &snap), req, self, &done.request_id, seen);
                }
                Ok(Begun(snap, plan.fetch, plan.request, plan.body, plan.auth))
            }
            Err(plan::Stop::Refused(kind)) => Err(trip.done.finish(&snap, self, Err(kind))),
            Err(plan::Stop::Answer(resp)) => {
                trip.done.out.status = resp.status().as_u16();
                Err(trip.done.finish(&snap, self, Ok(resp)))
            }
            Err(plan::Stop::Local(route, req)) => {
                let done = &mut trip.done;
                let resp = filters::local_answer(&snap, route, &req, self, &done.request_id);
                Err(done.finish(&snap, self, Ok(resp)))
            }
        }
    }
}

/// A connection on hopgate's own HTTP/1.1 server: its requests' futures
/// ([`Forwarder::forward`], unboxed: the server keeps one block per
/// connection for them), its refusals, its close at a handover.
impl crate::h1::Handler for Arc<ClientConn> {
    type Body = ProxyBody;

    fn call(
        &self,
        req: Box<Request<ProxyBody>>,
        body: Option<Box<crate::h1::ServerBody>>,
    ) -> impl std::future::Future<Output = Box<Response<ProxyBody>>> + Send + 'static {
        let body = body.map_or(RequestBody::Empty, RequestBody::Native);
        Forwarder::forward(Arc::clone(self), req, body)
    }

    fn refusal(&self, kind: ErrorKind) -> Box<Response<ProxyBody>> {
        Box::new(crate::respond::error_response(kind, None))
    }

    fn closing(&self) -> bool {
        crate::handover::handing_over()
    }

    fn peer(&self) -> SocketAddr {
        self.peer
    }
}

/// A request planned and ready to forward ([`ClientConn::begin`]): what
/// it hands the request's future beside the request's state (written in
/// place, [`Trip`]): the snapshot, the shared store's lookup, the
/// request, its body, and a password being checked.
struct Begun(
    Arc<Snapshot>,
    Option<hopgate_store::FetchFuture>,
    Box<Request<ProxyBody>>,
    RequestBody,
    Option<crate::auth::AuthWait>,
);

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
    /// future's first poll, the request's box and body captured instead;
    /// 1,816 with a basic-auth password check awaited before the first
    /// attempt, 16 bytes, `None` on every other request; 1,856 once route
    /// policy (the whole-request deadline), rate limits (the in-flight
    /// guard), auth and the kept "not processed" answer met in one
    /// future: measured on each branch alone, 40 bytes together).
    #[test]
    fn request_future_stays_small() {
        let size = output_size(&Forwarder::forward);
        assert!(size <= 1856, "the request future is {size} bytes");
    }
}
