//! Phase 13, steps 1 to 5: one attempt. Choose a node (the bound one,
//! the balancer's, or a last resort), admit it (breaker), spend the retry
//! budget, build the request for the node, its send settings and its pool;
//! and, once it answered or failed, record the outcome on the node
//! ([`account`]).
//!
//! Owns [`Tried`], [`choose`], [`spend`], [`for_node`] / `retarget`,
//! [`settings`], [`pool_of`] (the one place that finds a node's pool);
//! the outlier accounting is [`crate::outcome`]'s. Must not touch: the send itself (the driver
//! awaits it), what a failure leads to (`failure`), the answer (`answer`),
//! the session store.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{HeaderName, HeaderValue, HOST};
use http::uri::{PathAndQuery, Scheme};
use http::{Request, Uri, Version};

use crate::upstream::{CompiledNode, CompiledService, Snapshot};
use hopgate_core::config::UpstreamProtocol;
use hopgate_core::node::Observation;

use super::plan::{Flight, PendingHop};
use crate::body::ProxyBody;
use crate::headers::{SetLines, HOP_SESSION_CONTEXT, X_HOP_FROM};
use crate::metrics::METRICS;
use crate::outcome::account;
use crate::pool::{Pool, PoolSettings};
use crate::session;
use hopgate_core::session::SessionKeys;

/// Most nodes one request remembers having tried (`retries.attempts` is at
/// most 10).
pub(super) const MAX_TRACKED: usize = 16;

/// The nodes a request has tried, in a fixed array (no allocation).
pub(super) struct Tried {
    nodes: [usize; MAX_TRACKED],
    len: usize,
}

impl Default for Tried {
    fn default() -> Tried {
        Tried {
            nodes: [usize::MAX; MAX_TRACKED],
            len: 0,
        }
    }
}

impl Tried {
    fn as_slice(&self) -> &[usize] {
        &self.nodes[..self.len]
    }

    fn note(&mut self, node: usize) {
        if self.len < MAX_TRACKED && !self.as_slice().contains(&node) {
            self.nodes[self.len] = node;
            self.len += 1;
        }
    }
}

/// The node of an attempt.
pub(super) enum Choice {
    /// Send to this node (`last_resort`: picked past passive verdicts, so
    /// its breaker was not asked).
    Node { idx: usize, last_resort: bool },
    /// This node's breaker turned the attempt away (it counts as tried).
    Refused(usize),
    /// No node is left to try.
    Nothing,
}

/// Steps 1 and 2: the bound node on the first attempt, else the
/// balancer's choice, unless it can only offer nodes this request already
/// tried; then, as a last resort, a node that only passive verdicts
/// (ejection, open breaker) keep out. The breaker admits all but a last
/// resort.
#[inline]
pub(super) fn choose(
    svc: &CompiledService,
    flight: &Flight,
    sticky: &mut Option<usize>,
    tried: &mut Tried,
    now: u64,
) -> Choice {
    let group = flight.selection.group;
    let mut last_resort = false;
    let idx = match sticky.take() {
        Some(i) => i,
        None => match svc.pick(group, now, flight.hash, tried.as_slice()) {
            Some(i) if !tried.as_slice().contains(&i) => i,
            picked => match svc.pick_last_resort(group, tried.as_slice(), fastrand::usize(..)) {
                Some(i) => {
                    last_resort = true;
                    i
                }
                None => match picked {
                    Some(i) => i,
                    None => return Choice::Nothing,
                },
            },
        },
    };
    tried.note(idx);
    if !last_resort && !svc.nodes[idx].state.try_acquire(now) {
        return Choice::Refused(idx);
    }
    Choice::Node { idx, last_resort }
}

/// Step 3: every attempt after the first withdraws a token from the
/// service's retry budget; false when it is empty. Counts retries and
/// last-resort picks.
#[inline]
pub(super) fn spend(svc: &CompiledService, sent: usize, last_resort: bool) -> bool {
    if sent > 0 && !svc.retry_budget.try_withdraw() {
        tracing::warn!(service = %svc.name, "retry budget exhausted; not retrying");
        return false;
    }
    if sent > 0 {
        METRICS.retries.fetch_add(1, Ordering::Relaxed);
    }
    if last_resort {
        METRICS.last_resort_picks.fetch_add(1, Ordering::Relaxed);
    }
    true
}

/// Step 4: the upstream request for one attempt on `node`: re-targeted,
/// with `X-Upstream-Addr` for a moved node (`moved`: its moved-to address,
/// read once per attempt, the one the send goes to), `X-Hop-From` /
/// `Hop-Session-Context` when the session hops to it, and for a session
/// new with this request (`sessions`: its keys and header) the token that
/// names `node`, the one the client gets if `node` answers. The request
/// and the lines the gateway sets beside its map (`X-Upstream-Addr`) come
/// as a pair: edited where they lie, so the request's future never holds a
/// borrowed copy across the send.
pub(super) fn for_node(
    (request, set): (&mut Request<ProxyBody>, &mut SetLines),
    node: &CompiledNode,
    svc: &CompiledService,
    flight: &Flight,
    hop: Option<&PendingHop>,
    moved: Option<SocketAddr>,
    sessions: Option<(&SessionKeys, &HeaderName)>,
) {
    retarget(request, node, svc);
    set.upstream_addr = Some(node.address_header.clone());
    if let (Some((keys, header)), Some(cs)) = (sessions, &flight.client_session) {
        if !cs.known {
            request.headers_mut().insert(
                header.clone(),
                session::first_token(keys, cs, flight.now_unix, &svc.name, &node.id),
            );
        }
    }
    if let Some(moved) = moved {
        if let Ok(v) = HeaderValue::from_str(&moved.to_string()) {
            set.upstream_addr = Some(v);
        }
    }
    if let Some(h) = hop.filter(|h| *h.from != *node.id) {
        let headers = request.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&h.from) {
            headers.insert(X_HOP_FROM.clone(), v);
        }
        if let Some(ctx) = flight.prior.as_ref().and_then(|b| b.context.as_deref()) {
            if let Ok(v) = HeaderValue::from_bytes(ctx) {
                headers.insert(HOP_SESSION_CONTEXT.clone(), v);
                METRICS.contexts_delivered.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Points the upstream request at `node`: URI form for the protocol
/// (also a mirror's copy, `mirror`).
pub(super) fn retarget(req: &mut Request<ProxyBody>, node: &CompiledNode, svc: &CompiledService) {
    // Copied only where the URI is rebuilt (an origin-form HTTP/1.1
    // request keeps its URI).
    let pq = |req: &Request<ProxyBody>| {
        req.uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"))
    };
    match svc.protocol {
        UpstreamProtocol::Http1 => {
            *req.version_mut() = Version::HTTP_11;
            if req.uri().scheme().is_some() || req.uri().authority().is_some() {
                *req.uri_mut() = Uri::from(pq(req));
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
            p.path_and_query = Some(pq(req));
            if let Ok(u) = Uri::from_parts(p) {
                *req.uri_mut() = u;
            }
            req.headers_mut().remove(HOST);
        }
    }
}

/// Step 4: the send's settings: the snapshot's with the route's bound of
/// one attempt (`attempt`: `routes[].timeouts.attempt`, else the global
/// `timeouts.request`), raised while the node is relaxed (maintenance),
/// HTTP/1.1 for an upgrade, bounded by `deadline` (the nearer of a gRPC
/// client's deadline and the route's whole-request one) counted from
/// `sent_at` (where the send's own bound starts), and naming the client
/// (`peer`) for a service that sends the PROXY protocol.
#[inline]
pub(super) fn settings(
    snap: &Snapshot,
    svc: &CompiledService,
    node: &CompiledNode,
    now: u64,
    upgrade: bool,
    (attempt, deadline, sent_at): (Duration, Option<Instant>, Instant),
    peer: std::net::SocketAddr,
) -> PoolSettings {
    let mut settings = PoolSettings::of(snap, svc);
    settings.request_timeout = attempt;
    if let Some(p) = &mut settings.proxy_protocol {
        p.client = Some(peer);
    }
    if node.state.is_relaxed(now) {
        // Maintenance: slow answers are not failures.
        settings = settings.relaxed(snap.config.maintenance.relaxed_timeout);
    }
    if upgrade {
        // Upgrades need a connection of their own, spoken in HTTP/1.1.
        settings.protocol = UpstreamProtocol::Http1;
    }
    if let Some(t) = deadline {
        // A deadline bounds the wait for an answer too.
        settings.request_timeout = settings
            .request_timeout
            .min(t.saturating_duration_since(sent_at));
    }
    settings
}

/// Step 5: the node's pool, created on its first use.
#[inline]
pub(super) fn pool_of(node: &CompiledNode, max_idle: usize) -> &Arc<Pool> {
    node.upstream.pool(max_idle)
}

/// One sent attempt, as the steps after it see it.
pub(super) struct Attempted<'a> {
    pub(super) svc: &'a CompiledService,
    pub(super) node: &'a CompiledNode,
    /// 1 for the first attempt.
    pub(super) number: usize,
    /// Another attempt may follow this one (`retries.attempts`).
    pub(super) attempts_left: bool,
    pub(super) last_resort: bool,
    /// From the send to the answer (or the failure).
    pub(super) took: Duration,
    /// `answered`, in [`hopgate_core::node::now_ms`] milliseconds.
    pub(super) answered_ms: u64,
}

impl Attempted<'_> {
    /// Records the attempt's outcome on its node.
    pub(super) fn account(&self, seen: Observation) {
        account(self.svc, self.node, seen, self.answered_ms);
    }
}
