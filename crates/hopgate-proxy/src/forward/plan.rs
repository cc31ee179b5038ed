//! Phases 4 to 11: everything about a request decided before its first
//! attempt, synchronously, in [`Forwarder::plan`], which calls one plain
//! function per phase, each in a file named after it:
//!
//! - `limits`: the limits hyper does not enforce (phase 4; the declared
//!   body size once the route, whose limit it is, is known);
//! - the client IP and access check (phase 5) are two calls, made here;
//! - `route`: host, path, route lookup, version group, hash key (6–8);
//! - `stickiness`: the session, its binding and whether it hops (9);
//! - the route's rate limit (9½, [`crate::limit::admit`]);
//! - `build`: the upgrade hand-off and the upstream request head, built
//!   once (10–11).
//!
//! Owns [`Plan`] (what the driver awaits or takes apart), [`Planned`] and
//! [`Flight`] (what the attempts keep, written in place into the
//! request's state, which waits blank in the request's future) and
//! the hop a session may start ([`PendingHop`], [`begin_hop_if_bound`],
//! [`adopt_fetched`]). Must not touch: the body (phase 12), node choice and
//! sends, anything `async`: a request turned away here never gets a
//! future.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::HeaderValue;
use http::Request;

use crate::upstream::Snapshot;
use hopgate_core::config::auth::AuthKind;
use hopgate_core::error::ErrorKind;
use hopgate_core::node::ms_at;
use hopgate_core::session::{HopReason, SessionId};
use hopgate_core::snapshot::Selection;
use hopgate_store::{Binding, FetchFuture};

use super::done::Outcome;
use super::{grpc, ClientConn, Forwarder};
use crate::body::ProxyBody;
use crate::body::RequestBody;
use crate::headers::{RequestFacts, SetLines};
use crate::session::{self, ClientSession, Stickiness};
use crate::tunnel;

mod build;
mod limits;
mod route;
// Shared with the filters' rewrites.
pub(super) use route::with_path;
mod stickiness;

pub(super) use limits::content_length;

/// The client side of an HTTP/1.1 upgrade: the protocol asked for, and the
/// client connection once its server (hyper or hopgate's own) hands it
/// over.
pub(super) type Upgrade = (HeaderValue, tunnel::ClientUpgrade);

/// A hop decided for this request, completed when a new node answers.
pub(super) struct PendingHop {
    pub(super) from: Arc<str>,
    pub(super) reason: HopReason,
    pub(super) started: Instant,
}

/// Starts a hop away from `node` (its shared id) when the session is
/// bound to it and no hop is pending yet: its breaker refused the
/// attempt, or the attempt failed.
#[inline]
pub(super) fn begin_hop_if_bound(
    hop: &mut Option<PendingHop>,
    prior: Option<&Binding>,
    node: &Arc<str>,
    reason: HopReason,
) {
    if hop.is_none() && prior.is_some_and(|b| *b.node == **node) {
        *hop = Some(PendingHop {
            from: Arc::clone(node),
            reason,
            started: Instant::now(),
        });
    }
}

/// What a request keeps from its plan for every attempt and the answer.
pub(super) struct Flight {
    pub(super) route: usize,
    pub(super) selection: Selection,
    pub(super) hash: Option<u64>,
    pub(super) grpc_deadline: Option<Instant>,
    /// Sessions are on for this request.
    pub(super) sessions_on: bool,
    pub(super) client_session: Option<ClientSession>,
    pub(super) key: Option<SessionId>,
    pub(super) now_unix: u64,
    /// The session's binding in this service, if it had one.
    pub(super) prior: Option<Binding>,
    /// `prior` is not stored: it was made from the token's node hint, and
    /// the answer stores it.
    pub(super) hinted: bool,
    /// The client's request came over TLS, or a trusted proxy said so
    /// (`X-Forwarded-Proto: https`).
    pub(super) https: bool,
    /// The client sent `Hop-Maintenance` (stripped): a `Hop-Maintenance`
    /// in the answer may be its reflection and is never acted on.
    pub(super) carried_maintenance: bool,
}

impl Flight {
    /// Before the plan: no route chosen yet (the request's state is made
    /// blank in its future, then planned in place).
    #[inline(always)]
    pub(super) fn unplanned() -> Flight {
        Flight {
            route: 0,
            selection: Selection {
                service: 0,
                group: hopgate_core::snapshot::GroupRef::All,
                fell_back: false,
            },
            hash: None,
            grpc_deadline: None,
            sessions_on: false,
            client_session: None,
            key: None,
            now_unix: 0,
            prior: None,
            hinted: false,
            https: false,
            carried_maintenance: false,
        }
    }
}

/// When a request arrived, its session if the canary's side choice
/// identified it already (a token is verified once per request), and its
/// body (beside its boxed head until the first attempt).
pub(super) struct Arrival {
    pub(super) started: Instant,
    pub(super) known: Option<ClientSession>,
    pub(super) body: RequestBody,
}

/// Why [`Forwarder::plan`] stops before any attempt.
pub(super) enum Stop {
    /// Turned away with an error.
    Refused(ErrorKind),
    /// Turned away with an answer made already (an auth refusal, with its
    /// challenge).
    Answer(Box<http::Response<ProxyBody>>),
    /// Route `.0` answers itself (a filter's redirect or direct response):
    /// the request's head is handed back for the answer.
    Local(usize, Box<Request<ProxyBody>>),
}

impl From<ErrorKind> for Stop {
    fn from(kind: ErrorKind) -> Stop {
        Stop::Refused(kind)
    }
}

/// Where [`Forwarder::plan`] writes what the attempts keep: the fields of
/// the request's state (`Trip::planned`), in their place in the request's
/// future (returned in a plan and moved there, they were copied three or
/// four times).
pub(super) struct Planned<'t> {
    pub(super) flight: &'t mut Flight,
    pub(super) sticky: &'t mut Option<usize>,
    pub(super) hop: &'t mut Option<PendingHop>,
    pub(super) upgrade: &'t mut Option<Upgrade>,
    pub(super) set: &'t mut SetLines,
    pub(super) held: &'t mut Option<hopgate_core::limit::Held>,
    pub(super) out: &'t mut Outcome,
    /// [`hopgate_core::node::now_ms`] on arrival.
    pub(super) arrived_ms: &'t mut u64,
    /// The request waits for the shared store before its first send.
    pub(super) waited: &'t mut bool,
}

/// What [`Forwarder::plan`] hands back beside what it wrote in place
/// ([`Planned`]): what the driver awaits or takes apart before the first
/// attempt.
pub(super) struct Plan {
    /// A basic-auth password being checked; awaited before anything else.
    pub(super) auth: Option<crate::auth::AuthWait>,
    /// The shared store's answer for a known session this replica holds no
    /// binding for; awaited before the first attempt ([`adopt_fetched`]).
    pub(super) fetch: Option<FetchFuture>,
    /// The request as it goes upstream, its body apart (`body`) until
    /// the first attempt decides how to send it. Boxed from its parse on:
    /// it moves as a pointer.
    pub(super) request: Box<Request<ProxyBody>>,
    pub(super) body: RequestBody,
}

impl Forwarder {
    /// Everything about a request decided before its first attempt, phase
    /// by phase: limits, access, route, service and group, hash key,
    /// session binding, upgrade, and the upstream head. Synchronous, so
    /// none of its temporaries end up in the request's future (which is
    /// moved, whole, on every poll path). What the attempts keep is
    /// written through `to`, in its place in the request's future, field
    /// by field. Inlined into its one caller, [`ClientConn::begin`],
    /// whatever unit the build puts it in.
    #[inline]
    pub(super) fn plan(
        &self,
        snap: &Snapshot,
        mut req: Box<Request<ProxyBody>>,
        conn: &ClientConn,
        facts: &RequestFacts,
        arrival: Arrival,
        to: Planned<'_>,
    ) -> Result<Plan, Stop> {
        let Arrival {
            started,
            known,
            body,
        } = arrival;
        let now = ms_at(started);
        let out = to.out;
        let (client_ip, routed) = front(snap, &req, conn, facts, now, out)?;
        let Some(routed) = routed else {
            return Err(Stop::Local(out.route.unwrap_or_default(), req));
        };
        let auth = self.admit(snap, routed.route, &mut req, facts, (conn, client_ip))?;
        let svc = &snap.services[routed.selection.service];
        let hash = (svc.hash_on.as_ref()).and_then(|h| route::hash_of(h, &req, client_ip));
        let grpc_deadline = grpc::deadline(&req, facts);
        let session = stickiness::of(
            snap,
            self.sessions.as_deref(),
            req.headers(),
            known,
            (routed.route, svc),
            now,
        );
        *to.held = rate_limit(snap, routed.route, &req, client_ip, &session, started, out)?;
        (*to.sticky, to.flight.prior, *to.hop) = stuck(session.stick);
        *to.upgrade = build::upgrade(&mut req, facts);
        let https = build::upstream_request(
            snap,
            &mut req,
            conn,
            facts,
            (routed.route, routed.normal.as_deref()),
            (to.upgrade.as_ref(), session.client.as_ref()),
            to.set,
        )?;
        build::trace(snap, conn, &mut req, facts, https, to.set, out);
        build::fill_host(&mut req, facts);
        let flight = to.flight;
        flight.route = routed.route;
        flight.selection = routed.selection;
        flight.hash = hash;
        flight.grpc_deadline = grpc_deadline;
        flight.sessions_on = session.on;
        flight.client_session = session.client;
        flight.key = session.key;
        flight.now_unix = session.now_unix;
        flight.hinted = session.hinted;
        flight.https = https;
        flight.carried_maintenance = facts.carries_maintenance();
        *to.arrived_ms = now;
        *to.waited = session.fetch.is_some();
        Ok(Plan {
            auth,
            fetch: session.fetch,
            request: req,
            body,
        })
    }
}

/// Phases 4–7: the head's limits, the client's address and the access
/// lists, then the route (`None`: no route, or one that answers itself).
#[inline]
fn front(
    snap: &Snapshot,
    req: &Request<ProxyBody>,
    conn: &ClientConn,
    facts: &RequestFacts,
    now: u64,
    out: &mut Outcome,
) -> Result<(IpAddr, Option<route::Routed>), Stop> {
    limits::check(req, facts, &snap.config.limits)?;
    // Phase 5: the client's address, and the access lists.
    let client_ip = snap.access.client_ip(conn.peer.ip(), req.headers());
    if !snap.access.permits(client_ip) {
        return Err(Stop::Refused(ErrorKind::Forbidden));
    }
    let normalize = conn.ctx.normalize_path;
    let routed = route::route(snap, req, facts, normalize, client_ip, now, out)?;
    Ok((client_ip, routed))
}

/// Phase 9½: the route's rate limit, keyed by what it names (the session
/// only when the client's token is known).
#[inline]
fn rate_limit(
    snap: &Snapshot,
    route: usize,
    req: &Request<ProxyBody>,
    client_ip: IpAddr,
    session: &stickiness::Session,
    started: Instant,
    out: &mut Outcome,
) -> Result<Option<hopgate_core::limit::Held>, Stop> {
    let known = session.client.as_ref().filter(|c| c.known);
    let who = (client_ip, known.map(|c| &c.id.as_bytes()[..]));
    Ok(limits::rate(
        &snap.routes[route],
        route,
        req,
        who,
        started,
        out,
    )?)
}

impl Forwarder {
    /// Phase 8½: who may use the route (its `auth`), before anything else
    /// it does; then the declared body against the route's limit (its
    /// own, or the global one it inherits). `from`: the client's
    /// connection and address (what forward auth tells its service).
    #[inline]
    fn admit(
        &self,
        snap: &Snapshot,
        route: usize,
        req: &mut Request<ProxyBody>,
        facts: &RequestFacts,
        from: (&ClientConn, std::net::IpAddr),
    ) -> Result<Option<crate::auth::AuthWait>, Stop> {
        let auth = match &snap.config.routes[route].auth {
            None => None,
            Some(a) => self.authenticate(snap, route, a, req, from)?,
        };
        limits::body(req, facts, snap.routes[route].policy.max_body_bytes)?;
        Ok(auth)
    }

    /// The route's `auth` (`crate::auth`): the request goes on,
    /// waits for a password check or the authorization service, or is
    /// answered (`401`, or the service's refusal).
    #[cold]
    fn authenticate(
        &self,
        snap: &Snapshot,
        route: usize,
        auth: &hopgate_core::config::auth::RouteAuth,
        req: &mut Request<ProxyBody>,
        (conn, client_ip): (&ClientConn, std::net::IpAddr),
    ) -> Result<Option<crate::auth::AuthWait>, Stop> {
        let id = &snap.routes[route].id;
        let checked = if let AuthKind::Forward(_) = &auth.kind {
            let origin = crate::auth::Origin {
                client_ip,
                https: build::client_https(snap, req, conn),
                snapshot: &self.snapshot,
            };
            self.auth.forward(id, auth, req, origin)
        } else {
            self.auth.check(id, auth, req.headers_mut())
        };
        match checked {
            crate::auth::Checked::Pass => Ok(None),
            crate::auth::Checked::Wait(w) => Ok(Some(w)),
            crate::auth::Checked::Refuse(resp) => Err(Stop::Answer(resp)),
        }
    }
}

/// A binding decision as the attempts use it: the node to stay on, the
/// binding it came from, and the hop it starts (inlined: its result,
/// ~100 bytes, is written where the plan keeps it, not copied there).
#[inline]
fn stuck(stick: Stickiness) -> (Option<usize>, Option<Binding>, Option<PendingHop>) {
    match stick {
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
    }
}

/// A binding the shared store answered for a session the plan found
/// unbound: the request follows it as if it had been known locally (stay,
/// or hop if its node cannot serve).
pub(super) fn adopt_fetched(
    snap: &Snapshot,
    flight: &mut Flight,
    sticky: &mut Option<usize>,
    hop: &mut Option<PendingHop>,
    binding: Binding,
    now: u64,
) {
    let svc = &snap.services[flight.selection.service];
    let stick = session::stickiness(snap, flight.route, svc, Some(binding), now);
    let (s, prior, h) = stuck(stick);
    *sticky = s;
    flight.prior = prior;
    flight.hinted = false;
    *hop = h;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound_to(node: &str) -> Binding {
        Binding::new("svc", node, 0, 100)
    }

    /// A hop starts only from the bound node, and only once.
    #[test]
    fn a_hop_starts_from_the_bound_node_once() {
        let node: Arc<str> = Arc::from("a");
        // (binding, a hop already pending, hop after the call)
        let cases: [(Option<Binding>, bool, Option<&str>); 4] = [
            (None, false, None),
            (Some(bound_to("b")), false, None),
            (Some(bound_to("a")), false, Some("a")),
            (Some(bound_to("a")), true, Some("earlier")),
        ];
        for (prior, pending, want) in cases {
            let mut hop = pending.then(|| PendingHop {
                from: Arc::from("earlier"),
                reason: HopReason::Removed,
                started: Instant::now(),
            });
            begin_hop_if_bound(&mut hop, prior.as_ref(), &node, HopReason::CircuitOpen);
            assert_eq!(hop.as_ref().map(|h| &*h.from), want, "{prior:?} {pending}");
        }
    }
}
