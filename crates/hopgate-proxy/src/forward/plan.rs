//! Phases 4 to 11: everything about a request decided before its first
//! attempt, synchronously, in [`Forwarder::plan`].
//!
//! Owns the limits hyper does not enforce, the client IP and access check,
//! the host and route lookup, the version group (`Snapshot::select`), the
//! hash key, the session's stickiness (and the hop it may start:
//! [`PendingHop`], [`begin_hop_if_bound`]), the upgrade hand-off and the
//! upstream request head, built once. Must not touch: the body (phase 12),
//! node choice and sends, anything `async`: a request turned away here
//! never gets a future.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use http::header::{HeaderMap, HeaderValue, HOST};
use http::{Method, Request, Version};

use crate::upstream::Snapshot;
use hopgate_core::balance::hash_key;
use hopgate_core::config::{HashOn, UpstreamProtocol};
use hopgate_core::error::ErrorKind;
use hopgate_core::node::ms_at;
use hopgate_core::route::{normalize_path, RequestView};
use hopgate_core::session::{HopReason, SessionId};
use hopgate_core::snapshot::Selection;
use hopgate_store::{Binding, FetchFuture};

use super::done::Outcome;
use super::{grpc, ClientConn, Forwarder};
use crate::body::ProxyBody;
use crate::body::RequestBody;
use crate::headers::{
    append_forwarded_for, strip_request, RequestFacts, SetLines, GRPC_TIMEOUT, X_FORWARDED_PROTO,
    X_ROUTE_RULE_ID, X_UPSTREAM_ADDR,
};
use crate::session::{self, ClientSession, Stickiness};
use crate::tunnel;

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

/// When a request arrived, its session if the canary's side choice
/// identified it already (a token is verified once per request), and its
/// body (beside its boxed head until the first attempt).
pub(super) struct Arrival {
    pub(super) started: Instant,
    pub(super) known: Option<ClientSession>,
    pub(super) body: RequestBody,
}

/// What [`Forwarder::plan`] decided.
pub(super) struct Plan {
    /// The shared store's answer for a known session this replica holds no
    /// binding for; awaited before the first attempt ([`adopt_fetched`]).
    pub(super) fetch: Option<FetchFuture>,
    pub(super) flight: Flight,
    /// [`hopgate_core::node::now_ms`] when the request arrived (the first
    /// attempt's clock).
    pub(super) now: u64,
    /// The bound node, when the session stays on it.
    pub(super) sticky: Option<usize>,
    pub(super) hop: Option<PendingHop>,
    pub(super) upgrade: Option<Upgrade>,
    /// The request as it goes upstream, its body apart (`body`) until
    /// the first attempt decides how to send it. Boxed from its parse on:
    /// it moves as a pointer.
    pub(super) request: Box<Request<ProxyBody>>,
    /// The lines the gateway sets, beside `request`'s header map.
    pub(super) set: SetLines,
    pub(super) body: RequestBody,
}

impl Forwarder {
    /// Everything about a request decided before its first attempt:
    /// limits, access, route, service and group, session binding, and the
    /// upstream head. Synchronous, so none of its temporaries end up in the
    /// request's future (which is moved, whole, on every poll path).
    pub(super) fn plan(
        &self,
        snap: &Snapshot,
        mut req: Box<Request<ProxyBody>>,
        conn: &ClientConn,
        facts: &RequestFacts,
        arrival: Arrival,
        out: &mut Outcome,
    ) -> Result<Plan, ErrorKind> {
        let Arrival {
            started,
            known,
            body,
        } = arrival;
        let peer = conn.peer;
        let ctx = &*conn.ctx;
        let limits = &snap.config.limits;

        // TRACE would echo the request (cookies, credentials) back: refused.
        if req.method() == Method::TRACE {
            return Err(ErrorKind::MethodNotAllowed);
        }
        // Limits the HTTP parser does not enforce itself.
        let uri_len = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
        if uri_len > limits.max_uri_bytes {
            return Err(ErrorKind::UriTooLong);
        }
        if facts.count > limits.max_headers || head_bytes(&req, facts) > limits.max_header_bytes {
            return Err(ErrorKind::HeadersTooLarge);
        }
        if let Some(len) = facts
            .content_length
            .then(|| content_length(req.headers()))
            .flatten()
        {
            if len > limits.max_body_bytes {
                return Err(ErrorKind::BodyTooLarge);
            }
        }

        let client_ip = snap.access.client_ip(peer.ip(), req.headers());
        if !snap.access.permits(client_ip) {
            return Err(ErrorKind::Forbidden);
        }

        let host = match host_of(&req) {
            // More than one `Host` line, even identical ones (RFC 9112
            // §3.2): front ends and backends may pick different ones.
            Some(_) if facts.hosts > 1 => return Err(ErrorKind::BadRequest),
            Some(h) => h,
            None if req.version() == Version::HTTP_10 => "",
            None => return Err(ErrorKind::BadRequest),
        };
        // Routes see the path in normal form (and the backend gets it, so
        // both read the same path); an already normal path costs one scan.
        let normal = if ctx.normalize_path {
            match normalize_path(req.uri().path()) {
                Ok(Cow::Borrowed(_)) => None,
                Ok(Cow::Owned(p)) => Some(p),
                Err(_) => return Err(ErrorKind::BadRequest),
            }
        } else {
            None
        };
        let view = RequestView {
            host,
            path: normal.as_deref().unwrap_or(req.uri().path()),
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
        // gRPC needs HTTP/2 end to end (trailers); sent over HTTP/1.1 it
        // fails at the backend as "an invalid response". gRPC-Web is not
        // gRPC's wire format and goes through.
        if facts.grpc && svc.protocol == UpstreamProtocol::Http1 && !grpc::is_grpc_web(&req) {
            if route.should_log_protocol(now) {
                tracing::warn!(
                    route = %route.id,
                    service = %svc.name,
                    "gRPC request routed to a service without protocol: http2; answering grpc-status 13"
                );
            }
            return Err(ErrorKind::GrpcNeedsHttp2);
        }
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
            .and_then(|v| grpc::parse_timeout(v.as_bytes()))
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
        // The canary's side choice may have identified the session already.
        let client_session = sessions
            .map(|s| known.unwrap_or_else(|| session::identify(s, scfg, req.headers(), now_unix)));
        let key = client_session
            .as_ref()
            .map(|cs| session::binding_key(&cs.id, &svc.name));
        let mut fetch = None;
        let mut hinted = false;
        let stick = match (sessions, &key) {
            (Some(s), Some(k)) => match s.store.get(k, now_unix) {
                Some(b) => session::stickiness(snap, route_idx, svc, Some(b), now),
                None => {
                    // A session this replica does not know, with a valid
                    // token: a shared store may hold its binding (minted on
                    // another replica, not propagated yet). Asked before the
                    // first attempt; a fresh session has nothing to find.
                    let cs = client_session.as_ref().filter(|c| c.known);
                    if cs.is_some() {
                        fetch = s.store.fetch(k);
                    }
                    // Not bound yet (bindings are made when a client comes
                    // back): its token names the node of its first answer.
                    match cs
                        .and_then(|c| session::hinted_binding(svc, c, now_unix, scfg.ttl.as_secs()))
                    {
                        Some(b) => {
                            hinted = true;
                            session::stickiness(snap, route_idx, svc, Some(b), now)
                        }
                        None => Stickiness::Unbound,
                    }
                }
            },
            _ => Stickiness::Unbound,
        };
        let (sticky, prior, hop) = stuck(stick);
        // An HTTP/1.1 Upgrade (WebSocket): forwarded with its upgrade
        // headers, then tunnelled as bytes once the backend says 101.
        let upgrade = facts
            .may_upgrade()
            .then(|| tunnel::upgrade_request(&req))
            .flatten()
            .map(|proto| (proto, tunnel::client_upgrade(&mut req)));
        // Build the upstream request once; retries re-target it.
        if let Some(path) = &normal {
            let uri = with_path(req.uri(), path).ok_or(ErrorKind::BadRequest)?;
            *req.uri_mut() = uri;
        }
        strip_request(req.headers_mut(), facts);
        if let Some((proto, _)) = &upgrade {
            tunnel::restore_upgrade_headers(req.headers_mut(), proto);
        }
        if let Some(cs) = &client_session {
            req.headers_mut()
                .insert(scfg.header.clone(), cs.token.clone());
        }
        // The lines the gateway sets go beside the map; a client's own
        // line of such a name is taken out (looked up only when sent).
        let mut set = SetLines::default();
        if facts.forwarded_for {
            append_forwarded_for(req.headers_mut(), peer.ip());
        } else {
            set.forwarded_for = Some(conn.forwarded_for.clone());
        }
        // A trusted proxy's `X-Forwarded-Proto` (`http` or `https`) is
        // kept; anyone else's is replaced by what this hop saw.
        let https = match facts
            .forwarded_proto()
            .then(|| req.headers().get(&X_FORWARDED_PROTO))
            .flatten()
            .filter(|_| snap.access.trusts(peer.ip()))
            .map(|v| v.as_bytes())
        {
            Some(b"https") => true,
            Some(b"http") => false,
            _ => {
                if facts.forwarded_proto() {
                    req.headers_mut().remove(&X_FORWARDED_PROTO);
                }
                set.forwarded_proto = Some(if ctx.tls { "https" } else { "http" });
                ctx.tls
            }
        };
        if facts.route_rule_id() {
            req.headers_mut().remove(&X_ROUTE_RULE_ID);
        }
        set.route_rule_id = Some(route.id_header.clone());
        if facts.upstream_addr() {
            req.headers_mut().remove(&X_UPSTREAM_ADDR);
        }
        // Span export: one branch while it is off.
        let otlp = &snap.config.tracing.otlp;
        let sampler = (otlp.enabled && self.otlp.is_some())
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
        if facts.hosts == 0 {
            let authority = req.uri().authority();
            if let Some(v) = authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
                req.headers_mut().insert(HOST, v);
            }
        }
        Ok(Plan {
            fetch,
            flight: Flight {
                route: route_idx,
                selection,
                hash,
                grpc_deadline,
                sessions_on: sessions.is_some(),
                client_session,
                key,
                now_unix,
                prior,
                hinted,
                https,
                carried_maintenance: facts.carries_maintenance(),
            },
            now,
            sticky,
            hop,
            upgrade,
            request: req,
            set,
            body,
        })
    }
}

/// A binding decision as the attempts use it: the node to stay on, the
/// binding it came from, and the hop it starts.
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

/// The consistent-hashing key of a request, if it carries one.
fn hash_of<B>(on: &HashOn, req: &Request<B>, client_ip: IpAddr) -> Option<u64> {
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
            IpAddr::V4(a) => hash_key(&a.octets()),
            IpAddr::V6(a) => hash_key(&a.octets()),
        }),
    }
}

/// Size of a request head as sent: request line and `name: value` lines
/// (counted by [`crate::headers::scan_request`]).
fn head_bytes<B>(req: &Request<B>, facts: &RequestFacts) -> usize {
    let line = req.method().as_str().len()
        + req.uri().path_and_query().map_or(1, |p| p.as_str().len())
        + 12;
    line + facts.header_bytes
}

/// `uri` with its path replaced (the query kept).
fn with_path(uri: &http::Uri, path: &str) -> Option<http::Uri> {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

fn host_of<B>(req: &Request<B>) -> Option<&str> {
    match req.headers().get(HOST) {
        Some(h) => h.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    }
}

/// The declared `Content-Length`, if it is a number.
pub(super) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
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
