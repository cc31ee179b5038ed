//! Phases 12 and 13 as the driver sees them: the request's state from its
//! plan to its answer ([`Trip`]) and the attempt loop's ([`Tries`]), with
//! the plain steps `Forwarder::forward` calls around its waits.
//!
//! Owns phase 12's first step ([`Trip::capture`]: the budget's deposit,
//! how the body is taken) and the order of an attempt's steps:
//! [`Tries::prepare`] (choose a node, admit it, spend the budget, build
//! the request for it, its settings: phase 13.1–13.4) and
//! [`Attempt::send`] (its pool, the send: 13.5) before the wait, and
//! [`Tries::settle`] (time the attempt, then the failure step or the
//! answer step: 13.6–13.7) after it. Must not touch: the waits (the driver
//! owns every `.await`), the decisions themselves (`attempt::choose`,
//! `failure::decide`), the pool's internals, the session store.

use std::future::Future;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use http::{Request, Response};

use crate::upstream::{CompiledNode, CompiledService, Snapshot};
use hopgate_core::config::route_policy::EffectivePolicy;
use hopgate_core::config::UpstreamProtocol;
use hopgate_core::error::ErrorKind;
use hopgate_core::node::{ms_at, now_ms, InFlight};
use hopgate_core::session::HopReason;
use hopgate_store::Binding;

use super::attempt::{self, Attempted, Choice, Tried};
use super::done::Done;
use super::failure::{self, AfterFailure, Failed};
use super::mirror::{self, Mirroring};
use super::plan::{self, begin_hop_if_bound, Flight, PendingHop, Upgrade};
use super::replay::{self, Capture, Replay, Taken};
use super::{answer, grpc, ClientConn, Req};
use crate::body::RequestBody;
use crate::body::{ClientBody, ProxyBody};
use crate::h1::HeadFor;
use crate::headers::{MadeId, RequestId, SetLines};
use crate::pool::{PoolSettings, SendFailure};

/// Where one send goes and what it sends: the node's address (or its
/// moved-to address) and the request.
pub(super) type Upstream = (SocketAddr, Box<Request<ProxyBody>>);

/// What a request ends with: an answer, or the gateway's error answer.
pub(super) type Ending = Result<Box<Response<ProxyBody>>, ErrorKind>;

/// A request's state from its arrival to its answer: what the attempts
/// keep from the plan, and what they change (the stickiness, a hop, the
/// lines the gateway sets, the outcome). Made blank in its place in the
/// request's future ([`Trip::arriving`]) and filled in there by
/// `ClientConn::begin` and the plan: built apart and moved in, its parts
/// were copied three or four times on the way (~300 instructions per
/// request).
pub(super) struct Trip {
    /// The end of the request ([`Done::finish`]), with its outcome.
    pub(super) done: Done,
    pub(super) flight: Flight,
    /// The bound node, for the first attempt.
    pub(super) sticky: Option<usize>,
    pub(super) hop: Option<PendingHop>,
    pub(super) upgrade: Option<Upgrade>,
    /// The lines the gateway sets beside the request's header map.
    pub(super) set: SetLines,
    /// [`hopgate_core::node::now_ms`] on arrival (the first attempt's clock).
    pub(super) arrived_ms: u64,
    /// The request waited for something (the shared store, its body)
    /// before its first send.
    pub(super) waited: bool,
    /// A gRPC call (`content-type: application/grpc…`, phase 3).
    pub(super) grpc: bool,
    /// The route's mirror copies this request (decided in [`Trip::capture`]).
    mirror: Mirroring,
    /// The request's place in its rate limit's `max_in_flight`: given to
    /// a tunnel, or to the answer's body when the request ends.
    pub(super) held: Option<hopgate_core::limit::Held>,
}

impl Trip {
    /// A request that arrived at `started`, nothing decided yet: written
    /// where the request's future keeps it, then filled in there
    /// (`ClientConn::begin`, `Forwarder::plan`). A request turned away
    /// before its plan ends with what `begin` set.
    #[inline(always)]
    pub(super) fn arriving(started: Instant) -> Trip {
        Trip {
            done: Done {
                method: http::Method::GET,
                request_id: RequestId::Made(MadeId::BLANK),
                started,
                grpc: false,
                out: super::done::Outcome::default(),
                access: None,
            },
            flight: Flight::unplanned(),
            sticky: None,
            hop: None,
            upgrade: None,
            set: SetLines::default(),
            arrived_ms: 0,
            waited: false,
            grpc: false,
            mirror: Mirroring::Off,
            held: None,
        }
    }

    /// Where the plan writes what the attempts keep ([`plan::Planned`]).
    #[inline(always)]
    pub(super) fn planned(&mut self) -> plan::Planned<'_> {
        plan::Planned {
            flight: &mut self.flight,
            sticky: &mut self.sticky,
            hop: &mut self.hop,
            upgrade: &mut self.upgrade,
            set: &mut self.set,
            held: &mut self.held,
            out: &mut self.done.out,
            arrived_ms: &mut self.arrived_ms,
            waited: &mut self.waited,
        }
    }

    /// The request's route's timeouts, retries and limits, every inherited
    /// value resolved when the snapshot was compiled.
    #[inline]
    pub(super) fn policy<'s>(&self, snap: &'s Snapshot) -> &'s EffectivePolicy {
        &snap.routes[self.flight.route].policy
    }

    /// The route's request body limit.
    #[inline]
    pub(super) fn max_body(&self, snap: &Snapshot) -> u64 {
        self.policy(snap).max_body_bytes
    }

    /// A binding the shared store answered: followed as if it had been
    /// known locally ([`plan::adopt_fetched`]).
    #[inline]
    pub(super) fn adopt_fetched(&mut self, snap: &Snapshot, binding: Binding) {
        let (flight, now) = (&mut self.flight, self.arrived_ms);
        plan::adopt_fetched(snap, flight, &mut self.sticky, &mut self.hop, binding, now);
    }

    /// Phase 12's first step: the request's deposit into its service's
    /// retry budget (its route's share), and how its body is taken ([`replay::capture`]), with
    /// whether the request is replay-safe and whether its copy is kept
    /// whatever the method (the service retries "not processed" answers
    /// for every method). The request and its body are handed back:
    /// borrowed in the driver, they would keep room in the request's
    /// future across every send.
    #[inline]
    pub(super) fn capture(
        &mut self,
        snap: &Snapshot,
        request: Box<Request<ProxyBody>>,
        body: RequestBody,
    ) -> (Capture, (bool, bool), Box<Request<ProxyBody>>, RequestBody) {
        let svc = &snap.services[self.flight.selection.service];
        let policy = self.policy(snap);
        svc.retry_budget.deposit(policy.budget);
        let replay_safe = hopgate_core::retry::replay_safe(request.method(), request.headers());
        let keep_unsafe = !policy.retry_on.any.is_empty();
        let how = replay::capture(
            &body,
            request.headers(),
            replay_safe,
            keep_unsafe,
            snap.config.retries.buffer_body,
            svc.protocol,
            self.upgrade.is_some(),
            self.grpc,
        );
        self.mirror = mirror::sample(snap, self.flight.route, self.upgrade.is_some());
        if matches!(how, Capture::Buffer | Capture::Arrived { .. }) {
            self.waited = true;
        }
        (how, (replay_safe, keep_unsafe), request, body)
    }

    /// Once the body is taken (in [`Tries::new`], a plain function, so
    /// nothing of it stays in the request's future): the copy of a request
    /// the route's mirror sampled ([`mirror::launch`]); nothing otherwise.
    #[inline]
    pub(super) fn mirror(
        &self,
        snap: &Snapshot,
        request: &Request<ProxyBody>,
        taken: &mut Taken,
        peer: SocketAddr,
    ) {
        if self.mirror != Mirroring::Off {
            mirror::launch(snap, self.flight.route, request, &self.set, taken, peer);
        }
    }
}

/// The attempt loop's state (phase 13), made once the body is taken.
pub(super) struct Tries {
    /// The request for the next attempt (taken by each send; a resend or
    /// a replay puts one back).
    upstream: Option<Box<Request<ProxyBody>>>,
    /// The copy the request can be replayed from (phase 12).
    replay: Option<Replay>,
    /// What the client's streamed body did, when it is streamed.
    client_body: Option<Arc<ClientBody>>,
    /// The form an HTTP/1.1 answer's head is handed on in: the backend's
    /// bytes, a map, or a map for an HTTP/2 client.
    pub(super) head_for: HeadFor,
    /// The route retries "not processed" answers (`routes[].retries`,
    /// else `services[].retries`), and whether this request is replay-safe
    /// (for `on_status_idempotent`): `None` when it retries none.
    retry_on: Option<bool>,
    /// The route's `retries.attempts` (else the global one), at most
    /// [`attempt::MAX_TRACKED`].
    attempts: usize,
    tried: Tried,
    /// Picks turned away by an open breaker.
    refused: usize,
    /// Attempts sent so far.
    sent: usize,
    /// Why the last attempt failed: the answer when none is left.
    pub(super) last: failure::Last,
    /// The clock read on arrival, for the first attempt.
    clock: Option<u64>,
}

/// One attempt on its way: the node, the send's settings and pool, and
/// the node's in-flight count, held until the send ends.
pub(super) struct Attempt<'s> {
    svc: &'s CompiledService,
    node: &'s CompiledNode,
    idx: usize,
    last_resort: bool,
    settings: PoolSettings,
    sent_at: Instant,
    inflight: InFlight,
}

impl Attempt<'_> {
    /// The send ([`Pool::send`], its named future) to `addr` (the node's,
    /// or its moved-to address), through the node's pool.
    #[inline(always)]
    pub(super) fn send<'a>(
        &'a self,
        (addr, request): Upstream,
        set: &'a SetLines,
        head_for: HeadFor,
    ) -> impl Future<Output = Result<Box<Response<ProxyBody>>, SendFailure>> + 'a {
        let s = &self.settings;
        let pool = attempt::pool_of(self.node, s.max_idle);
        pool.send(addr, request, set, s, self.sent_at, head_for)
    }
}

impl Tries {
    /// The attempts' state once the body is `taken`: the request with its
    /// body, the replay copy (the head is copied only when the send will
    /// not hand it back: HTTP/2, gRPC), and whether an answer's head may
    /// stay raw (hopgate's own HTTP/1.1 server writes it as it is). A body
    /// that could not be taken leaves no attempt: its error ends the
    /// request.
    #[inline]
    pub(super) fn new(
        trip: &Trip,
        conn: &ClientConn,
        snap: &Snapshot,
        mut request: Box<Request<ProxyBody>>,
        taken: Result<Taken, ErrorKind>,
    ) -> Tries {
        let mut taken = match taken {
            Ok(taken) => taken,
            Err(kind) => return Tries::none(kind),
        };
        // A sampled copy for the route's mirror, on a task of its own.
        trip.mirror(snap, &request, &mut taken, conn.peer);
        let svc = &snap.services[trip.flight.selection.service];
        let policy = trip.policy(snap);
        let grpc = trip.grpc;
        // A "not processed" answer hands no head back: such a route's
        // copy keeps one (only gRPC, upgrades and these routes pay for
        // the copied head).
        let retry_on = (!policy.retry_on.is_empty() && !grpc && trip.upgrade.is_none())
            .then(|| hopgate_core::retry::replay_safe(request.method(), request.headers()));
        let handed_back = (svc.protocol == UpstreamProtocol::Http1 || trip.upgrade.is_some())
            && !grpc
            && retry_on.is_none();
        let replay = taken.kept.map(|(b, after_sent)| {
            if handed_back {
                Replay::handed_back(b, after_sent)
            } else {
                Replay::new(&request, b, after_sent)
            }
        });
        // An upgrade reads its 101's lines; gRPC on an HTTP/1.1 client
        // connection is looked at by the answer step.
        let head_for = if trip.upgrade.is_some() {
            HeadFor::Map
        } else if conn.http2.load(Ordering::Relaxed) {
            HeadFor::H2
        } else if grpc {
            HeadFor::Map
        } else {
            HeadFor::Raw
        };
        crate::body::ProxyBody::put_into(request.body_mut(), taken.body);
        let attempts = policy.attempts as usize;
        Tries {
            upstream: Some(request),
            replay,
            client_body: taken.watch,
            head_for,
            retry_on,
            attempts: attempts.min(attempt::MAX_TRACKED),
            tried: Tried::default(),
            refused: 0,
            sent: 0,
            last: failure::Last::new(ErrorKind::NoLiveNode),
            clock: Some(trip.arrived_ms),
        }
    }

    /// No attempt: the request ends with `kind`.
    #[cold]
    fn none(kind: ErrorKind) -> Tries {
        Tries {
            upstream: None,
            replay: None,
            client_body: None,
            head_for: HeadFor::Map,
            retry_on: None,
            attempts: 0,
            tried: Tried::default(),
            refused: 0,
            sent: 0,
            last: failure::Last::new(kind),
            clock: None,
        }
    }

    /// Steps 1 to 5 of the next attempt: a node (picks an open breaker
    /// refuses are passed over here), the budget, the request for the
    /// node, the send's settings, the node's in-flight count; its pool is
    /// found by [`Attempt::send`]. `None` when no attempt is left (the
    /// request ends with [`Tries::last`]), or the route's whole-request
    /// deadline (`routes[].timeouts.request`) has passed (it ends 504).
    #[inline]
    pub(super) fn prepare<'s>(
        &mut self,
        trip: &mut Trip,
        conn: &ClientConn,
        snap: &'s Snapshot,
    ) -> Option<(Attempt<'s>, Upstream)> {
        let policy = trip.policy(snap);
        // From the request's arrival; none for a route without one.
        let deadline = policy.request.map(|d| trip.done.started + d);
        if deadline.is_some_and(|d| Instant::now() >= d) {
            self.last.kind = ErrorKind::UpstreamTimeout;
            return None;
        }
        let svc = &snap.services[trip.flight.selection.service];
        let (idx, last_resort, now) = self.choose(trip, svc)?;
        if !attempt::spend(svc, self.sent, last_resort) {
            return None;
        }
        self.sent += 1;
        let out = &mut trip.done.out;
        out.attempts = self.sent;
        out.node = Some(idx);
        // Edited where it lies, then handed to the send.
        let request = self.upstream.as_mut()?;
        crate::otlp::before_attempt(out.span.as_deref_mut(), self.sent, &mut trip.set);
        let node = &svc.nodes[idx];
        // A MOVING node's new address, read once for the header and the
        // send.
        let moved = node.state.moved_to();
        let sessions = conn.forwarder.sessions.as_deref();
        let sessions = sessions.filter(|_| trip.flight.sessions_on);
        let keys = sessions.map(|s| (&s.keys, &snap.config.sessions.header));
        let (flight, hop) = (&trip.flight, trip.hop.as_ref());
        attempt::for_node(
            (request, &mut trip.set),
            node,
            svc,
            flight,
            hop,
            moved,
            keys,
        );
        let upgrade = trip.upgrade.is_some();
        // The first attempt of a request that waited for nothing since it
        // arrived is sent at its arrival.
        let sent_at = if self.sent == 1 && !trip.waited {
            trip.done.started
        } else {
            Instant::now()
        };
        let bound = (
            policy.attempt,
            nearer(flight.grpc_deadline, deadline),
            sent_at,
        );
        let settings = attempt::settings(snap, svc, node, now, upgrade, bound, conn.peer);
        let inflight = node.state.begin_request();
        let addr = moved.unwrap_or(node.address);
        let request = self.upstream.take()?;
        let at = Attempt {
            svc,
            node,
            idx,
            last_resort,
            settings,
            sent_at,
            inflight,
        };
        Some((at, (addr, request)))
    }

    /// Steps 1 and 2: the next node an attempt may go to, with whether it
    /// is a last resort and the clock of its attempt; a node whose breaker
    /// refuses counts as tried (and starts a hop if the session was bound
    /// to it). `None` when no attempt is left, nothing is left to try, or
    /// more picks were refused than the service has nodes.
    #[inline]
    fn choose(&mut self, trip: &mut Trip, svc: &CompiledService) -> Option<(usize, bool, u64)> {
        while self.sent < self.attempts {
            // The first attempt uses the clock read on arrival.
            let now = self.clock.take().unwrap_or_else(now_ms);
            match attempt::choose(svc, &trip.flight, &mut trip.sticky, &mut self.tried, now) {
                Choice::Node { idx, last_resort } => return Some((idx, last_resort, now)),
                Choice::Refused(idx) => {
                    let node = &svc.nodes[idx].shared_id;
                    let prior = trip.flight.prior.as_ref();
                    begin_hop_if_bound(&mut trip.hop, prior, node, HopReason::CircuitOpen);
                    self.refused += 1;
                    if self.refused > svc.nodes.len() {
                        return None;
                    }
                }
                Choice::Nothing => return None,
            }
        }
        None
    }

    /// Steps 6 and 7, once the send ended: the attempt timed and recorded,
    /// then a failure's step ([`failure::on_failure`]: resend, replay or
    /// end) or the answer's ([`answer::answer`]). `Continue` for another
    /// attempt.
    #[inline]
    pub(super) fn settle(
        &mut self,
        trip: &mut Trip,
        conn: &ClientConn,
        snap: &Snapshot,
        at: Attempt<'_>,
        result: Result<Box<Response<ProxyBody>>, SendFailure>,
    ) -> ControlFlow<Ending> {
        let at = self.timed(trip, snap, at, &result);
        let req = Req {
            conn,
            snap,
            flight: &trip.flight,
            client_body: self.client_body.as_deref(),
        };
        let resp = match result {
            // The common case: an answer, handled in place.
            Ok(resp)
                if !(trip.grpc && grpc::unavailable_at_once(&resp)
                    || self.not_processed(snap, trip.flight.route, &resp)) =>
            {
                resp
            }
            failed => {
                let (replay, last) = (self.replay.as_ref(), &mut self.last);
                // An answer here is a gRPC UNAVAILABLE before any byte, or
                // a "not processed" one (never both: gRPC calls retry on
                // no status).
                let failed = match failed {
                    Ok(resp) if trip.grpc => Failed::GrpcUnavailable(resp),
                    Ok(resp) => Failed::NotProcessed(resp),
                    Err(f) => Failed::Send(f),
                };
                let out = &mut trip.done.out;
                match failure::on_failure(failed, req, &at, &mut trip.hop, replay, last, out) {
                    AfterFailure::Next(request) => {
                        self.upstream = Some(request);
                        return ControlFlow::Continue(());
                    }
                    AfterFailure::End(result) => return ControlFlow::Break(result),
                    AfterFailure::Deliver(resp) => resp,
                }
            }
        };
        let (hop, upgrade) = (trip.hop.as_ref(), trip.upgrade.take());
        let (out, held) = (&mut trip.done.out, &mut trip.held);
        let upgrade = upgrade.map(|u| (u, held));
        ControlFlow::Break(Ok(answer::answer(resp, req, &at, hop, upgrade, out)))
    }

    /// Is `resp` one of the route's "not processed" answers for this
    /// request (`routes[].retries`, else `services[].retries`)? One branch
    /// for a route without.
    #[inline]
    fn not_processed(&self, snap: &Snapshot, route: usize, resp: &Response<ProxyBody>) -> bool {
        self.retry_on.is_some_and(|safe| {
            let on = &snap.routes[route].policy.retry_on;
            on.retries(resp.status().as_u16(), safe)
        })
    }

    /// The attempt's times, once its send ended (the node's in-flight
    /// count first): its span, the request's length so far, the route's
    /// upstream histogram and the span export.
    #[inline]
    fn timed<'s>(
        &self,
        trip: &mut Trip,
        snap: &Snapshot,
        at: Attempt<'s>,
        result: &Result<Box<Response<ProxyBody>>, SendFailure>,
    ) -> Attempted<'s> {
        drop(at.inflight);
        let answered = Instant::now();
        let (sent_at, started) = (at.sent_at, trip.done.started);
        let took = answered.saturating_duration_since(sent_at);
        // Since arrival: the same span when the attempt was sent at
        // arrival (the common case), and the clock in milliseconds follows
        // from it.
        let (since_arrival, answered_ms) = if sent_at == started {
            (took, trip.arrived_ms + took.as_millis() as u64)
        } else {
            let d = answered.saturating_duration_since(started);
            (d, ms_at(answered))
        };
        let out = &mut trip.done.out;
        out.took = Some(since_arrival);
        if let Some(s) = out.span.as_deref_mut() {
            let o = crate::otlp::outcome_of(result);
            s.after_attempt(at.idx, self.sent, sent_at, answered, o);
        }
        snap.routes[trip.flight.route].stats.upstream.observe(took);
        Attempted {
            svc: at.svc,
            node: at.node,
            number: self.sent,
            attempts_left: self.sent < self.attempts,
            last_resort: at.last_resort,
            took,
            answered_ms,
        }
    }
}

/// The nearer of two deadlines, either of which may be absent.
#[inline]
fn nearer(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
