//! The snapshot: the immutable, precompiled runtime form of one config.
//!
//! Owns the compiled types, their compilation ([`Snapshot::compile`], in
//! `snapshot/compile.rs`, one step per service and per route) and the
//! per-request target selection that needs nothing but the snapshot and
//! node state ([`Snapshot::select`]). A request loads one snapshot and keeps it until it
//! ends, so everything it needs — routes, services, balancers, CIDR sets,
//! prebuilt header values — lives here, behind one atomic pointer held by
//! the control plane.
//!
//! Compiling is pure with respect to running nodes: it reads node state
//! (to carry balancer counters over) and may create state for a node seen
//! for the first time, but writes nothing into a node any running snapshot
//! refers to. The parts of the config that live in node state (breaker
//! parameters, a health check's initial health) are pushed by
//! [`Snapshot::configure_nodes`], which the single writer calls when it
//! swaps the snapshot in. So a compile whose snapshot is thrown away (a
//! dry run, a benchmark) changes nothing a request can see. Creating state
//! for new nodes is allowed because nothing running can see it: only this
//! snapshot refers to it, and the writer's next `NodeRegistry::retain`
//! forgets it if that snapshot is never swapped in.
//!
//! The type parameter `U` is the data plane's per-node upstream handle
//! (`hopgate-proxy`'s `Upstream`: the node's connection pool), carried
//! from the [`NodeRegistry`](crate::node::NodeRegistry) into every
//! [`CompiledNode`] so the request path reaches it through a field; core
//! never looks inside it. The default `()` serves core's tests and
//! benchmarks.
//!
//! Must not touch: I/O, the swap itself (the control plane owns the single
//! writer), live state other than through [`NodeState`], and live state of
//! existing nodes at all while compiling.

mod compile;

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderValue;

use crate::access::AccessControl;
use crate::balance::{Balancer, PickCtx};
use crate::config::route_policy::EffectivePolicy;
use crate::config::{
    CircuitConfig, Config, DrainConfig, HashOn, HealthConfig, OutlierConfig, PoolConfig,
    ServiceMaintenance, UpstreamProtocol,
};
use crate::limit::RateLimiter;
use crate::node::{Health, NodeState};
use crate::retry::RetryBudget;
use crate::route::Router;
use crate::stats::RouteStats;

/// The one pointer to the running snapshot. The control plane's single
/// writer stores into it; the data plane loads it once per request.
pub type SharedSnapshot<U = ()> = Arc<arc_swap::ArcSwap<Snapshot<U>>>;

/// Compiled form of a whole configuration.
#[derive(Debug)]
pub struct Snapshot<U = ()> {
    /// Monotonic version assigned by the control plane.
    pub version: u64,
    pub config: Arc<Config>,
    pub router: Router,
    /// Indexed like `config.routes` (and the router's rule indices).
    pub routes: Vec<CompiledRoute>,
    pub services: Vec<CompiledService<U>>,
    pub access: AccessControl,
    /// One limiter per `rate_limits[]` policy, indexed like
    /// `config.rate_limits`; carried from the previous snapshot when the
    /// policy is unchanged ([`RateLimiter::carry`]).
    pub limiters: Vec<Arc<RateLimiter>>,
    /// `limits.max_connections_per_client`: open connections per client
    /// address (a limiter keyed by `client_ip` with only an in-flight
    /// bound, held for a connection's life); carried while the bound is
    /// unchanged.
    pub connections: Option<Arc<RateLimiter>>,
    /// Policies whose previous limiter was replaced (parameters changed):
    /// their buckets start afresh. The writer logs them at the swap.
    pub limits_reset: Vec<String>,
}

#[derive(Debug)]
pub struct CompiledRoute {
    pub id: String,
    /// `id` as a header value, built once.
    pub id_header: HeaderValue,
    pub service: usize,
    pub target: CompiledTarget,
    pub strict_version: bool,
    /// Timeouts, retries and limits of the route, every inherited value
    /// resolved ([`EffectivePolicy::resolve`]): the request path reads
    /// them as they are.
    pub policy: EffectivePolicy,
    /// `routes[].rate_limit`: the policy's limiter (one of
    /// [`Snapshot::limiters`]).
    pub rate_limit: Option<Arc<RateLimiter>>,
    /// The route's filters ([`crate::filter`]); `None` without any.
    pub filters: Option<Arc<crate::filter::RouteFilters>>,
    /// Responses and durations; shared with the same route id in the
    /// previous snapshot.
    pub stats: Arc<RouteStats>,
    /// When the version-fallback warning was last logged (rate limit).
    fallback_logged_ms: std::sync::atomic::AtomicU64,
    /// When the gRPC-over-HTTP/1.1 warning was last logged (rate limit).
    protocol_logged_ms: std::sync::atomic::AtomicU64,
}

impl CompiledRoute {
    /// True at most once every 10 s: the version-fallback warning would
    /// otherwise be logged on every request.
    pub fn should_log_fallback(&self, now_ms: u64) -> bool {
        once_per_10s(&self.fallback_logged_ms, now_ms)
    }

    /// True at most once every 10 s: the warning that a gRPC request was
    /// routed to a service without `protocol: http2`.
    pub fn should_log_protocol(&self, now_ms: u64) -> bool {
        once_per_10s(&self.protocol_logged_ms, now_ms)
    }
}

/// One compare-and-swap on `last_ms` (milliseconds; 0 for never): true
/// when 10 s have passed since the last time it was true.
fn once_per_10s(last_ms: &std::sync::atomic::AtomicU64, now_ms: u64) -> bool {
    use std::sync::atomic::Ordering;
    let last = last_ms.load(Ordering::Relaxed);
    (last == 0 || now_ms >= last + 10_000)
        && last_ms
            .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
}

/// A rule's target, resolved to group indices of its service.
#[derive(Debug)]
pub enum CompiledTarget {
    /// The service's `all` group.
    All,
    /// One version group.
    Version(usize),
    /// Weighted version groups: `(group, cumulative weight)`; `total` is the sum.
    Split { arms: Vec<(usize, u32)>, total: u32 },
}

#[derive(Debug)]
pub struct CompiledService<U = ()> {
    pub name: String,
    /// `name`, shared (session bindings hold it without copying).
    pub shared_name: Arc<str>,
    pub protocol: UpstreamProtocol,
    pub pool: PoolConfig,
    pub hash_on: Option<HashOn>,
    pub health: Option<HealthConfig>,
    pub outlier: OutlierConfig,
    pub circuit: CircuitConfig,
    pub drain: DrainConfig,
    /// `Hop-Maintenance` from this service's backends.
    pub maintenance: ServiceMaintenance,
    /// The PROXY protocol header its new connections start with.
    pub proxy_protocol: Option<crate::config::ProxyProtocolVersion>,
    /// Shared with the same service in the previous snapshot.
    pub retry_budget: Arc<RetryBudget>,
    /// `services[].retries`: answers retried on another node.
    pub retry_on: crate::retry::RetryOnStatus,
    pub nodes: Vec<CompiledNode<U>>,
    /// Every node of the service.
    pub all: Group,
    /// One group per distinct version, in first-seen order.
    pub versions: Vec<Group>,
}

/// A set of nodes balanced together.
#[derive(Debug)]
pub struct Group {
    /// The version name (empty for `all`).
    pub name: String,
    /// Member `i` of the balancer is `nodes[i]` of the service.
    pub nodes: Vec<usize>,
    pub balancer: Balancer,
}

#[derive(Debug)]
pub struct CompiledNode<U = ()> {
    pub id: String,
    /// `id`, shared (session bindings hold it without copying).
    pub shared_id: Arc<str>,
    pub address: SocketAddr,
    /// `address` as a header value (`X-Upstream-Addr`), built once.
    pub address_header: HeaderValue,
    /// `address` as an URI authority, built once.
    pub authority: http::uri::Authority,
    pub version: String,
    pub weight: u32,
    pub state: Arc<NodeState>,
    /// The data plane's handle on the node's upstream (its pool), shared
    /// with the registry and every snapshot that keeps the node.
    pub upstream: Arc<U>,
}

/// The outcome of [`Snapshot::select`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Selection {
    pub service: usize,
    pub group: GroupRef,
    /// True when the rule's version had no live node and the service's other
    /// versions were used instead.
    pub fell_back: bool,
}

/// Which group of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupRef {
    All,
    Version(usize),
}

impl<U> CompiledService<U> {
    pub fn group(&self, g: GroupRef) -> &Group {
        match g {
            GroupRef::All => &self.all,
            GroupRef::Version(i) => &self.versions[i],
        }
    }

    /// Picks a node of group `g`, returning the service-level node index.
    /// `exclude` holds service-level node indices already tried.
    pub fn pick(
        &self,
        g: GroupRef,
        now_ms: u64,
        hash: Option<u64>,
        exclude: &[usize],
    ) -> Option<usize> {
        let group = self.group(g);
        // Translate service-level exclusions into group member indices
        // without allocating: groups rarely exceed a few dozen nodes.
        let mut local = [0usize; 16];
        let mut n = 0;
        for &e in exclude {
            if let Some(pos) = group.nodes.iter().position(|&x| x == e) {
                if n < local.len() {
                    local[n] = pos;
                    n += 1;
                }
            }
        }
        let ctx = PickCtx {
            now_ms,
            hash,
            exclude: &local[..n],
        };
        group.balancer.pick(&ctx).map(|m| group.nodes[m])
    }
}

impl<U> CompiledService<U> {
    /// When no available node is left: a node of group `g`, not in
    /// `exclude`, that only passive verdicts keep out (ejected, breaker
    /// open) — see [`NodeState::last_resort_ok`]. Starts at a random member
    /// so last-resort traffic spreads.
    pub fn pick_last_resort(&self, g: GroupRef, exclude: &[usize], roll: usize) -> Option<usize> {
        let group = self.group(g);
        let n = group.nodes.len();
        (0..n)
            .map(|k| group.nodes[(roll + k) % n.max(1)])
            .find(|i| !exclude.contains(i) && self.nodes[*i].state.last_resort_ok())
    }
}

impl<U> Snapshot<U> {
    /// May a session bound to node `node` of the route's service stay there
    /// under the route's version rules? (Any node of any group the rule can
    /// send to; for a split, any arm — a bound session keeps its version.)
    pub fn route_allows_node(&self, route: usize, node: usize) -> bool {
        let r = &self.routes[route];
        let svc = &self.services[r.service];
        match &r.target {
            CompiledTarget::All => true,
            CompiledTarget::Version(g) => svc.versions[*g].nodes.contains(&node),
            CompiledTarget::Split { arms, .. } => arms
                .iter()
                .any(|(g, _)| svc.versions[*g].nodes.contains(&node)),
        }
    }

    /// Pushes the parts of the config that live in node state into the
    /// nodes of this snapshot: each service's breaker parameters, and a
    /// health check's initial `healthy` for a node not checked yet. The
    /// single writer calls it when it swaps this snapshot in; compiling
    /// never does (see the module doc).
    pub fn configure_nodes(&self) {
        for svc in &self.services {
            for node in &svc.nodes {
                node.state.configure(&svc.circuit);
                if let Some(h) = &svc.health {
                    if h.initial == Health::Healthy && node.state.health() == Health::Unknown {
                        node.state.set_health(Health::Healthy);
                    }
                }
            }
        }
    }
}

impl<U> Snapshot<U> {
    /// Resolves a matched route to the group to balance over. `roll` is a
    /// uniformly random number used for weighted splits. When the chosen
    /// version group has no available node and the rule is not
    /// `strict_version`, the service's `all` group is used (`fell_back`).
    pub fn select(&self, route: usize, roll: u32, now_ms: u64) -> Selection {
        let r = &self.routes[route];
        let svc = &self.services[r.service];
        let wanted = match &r.target {
            CompiledTarget::All => GroupRef::All,
            CompiledTarget::Version(g) => GroupRef::Version(*g),
            CompiledTarget::Split { arms, total } => {
                if *total == 0 || arms.is_empty() {
                    GroupRef::All
                } else {
                    let x = roll % *total;
                    let g = arms
                        .iter()
                        .find(|(_, cum)| x < *cum)
                        .map_or(arms[0].0, |a| a.0);
                    GroupRef::Version(g)
                }
            }
        };
        let fell_back = wanted != GroupRef::All
            && !r.strict_version
            && !svc.group(wanted).balancer.has_available(now_ms);
        Selection {
            service: r.service,
            group: if fell_back { GroupRef::All } else { wanted },
            fell_back,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{self, Format};
    use crate::node::NodeRegistry;

    fn config(threshold: u32, nodes: &[&str]) -> Arc<Config> {
        let nodes: Vec<String> = nodes
            .iter()
            .enumerate()
            .map(|(i, id)| format!("{{ id: {id}, address: 127.0.0.1:{} }}", 9000 + i))
            .collect();
        let text = format!(
            "listeners: [ {{ name: p, address: 127.0.0.1:0 }} ]\n\
             admin: {{ address: 127.0.0.1:0 }}\n\
             services:\n  - name: s\n    health: {{ initial: healthy }}\n    \
             circuit: {{ failure_threshold: {threshold}, reset_timeout: 7s }}\n    \
             nodes: [ {} ]\n\
             routes: [ {{ id: r, service: s }} ]\n",
            nodes.join(", ")
        );
        Arc::new(config::load(&text, Format::Yaml).expect("a valid test config"))
    }

    #[test]
    fn compiling_alone_leaves_node_state_untouched() {
        let registry = NodeRegistry::new();
        let running = Snapshot::compile(config(2, &["a"]), 1, &registry, None);
        let a = Arc::clone(&running.services[0].nodes[0].state);
        assert_eq!(a.health(), Health::Unknown, "compile set no health");
        assert_eq!(
            a.circuit_params(),
            CircuitConfig::default(),
            "compile pushed no breaker parameters"
        );
        // The writer swaps it in.
        running.configure_nodes();
        let tuned = a.circuit_params();
        assert_eq!(tuned.failure_threshold, 2);
        assert_eq!(a.health(), Health::Healthy);
        a.set_health(Health::Unhealthy);

        // A compile whose snapshot is never swapped in (a dry run).
        let dry = Snapshot::compile(config(9, &["a", "b"]), 2, &registry, Some(&running));
        assert!(
            Arc::ptr_eq(&dry.services[0].nodes[0].state, &a),
            "same live node"
        );
        assert_eq!(
            a.circuit_params(),
            tuned,
            "the running node keeps its breaker"
        );
        assert_eq!(a.health(), Health::Unhealthy);
        let b = &dry.services[0].nodes[1].state;
        assert_eq!(b.health(), Health::Unknown);
        assert_eq!(b.circuit_params(), CircuitConfig::default());

        // Swapped in, it applies.
        dry.configure_nodes();
        assert_eq!(a.circuit_params().failure_threshold, 9);
        assert_eq!(a.health(), Health::Unhealthy, "checked health is kept");
        assert_eq!(b.health(), Health::Healthy);
    }
}
