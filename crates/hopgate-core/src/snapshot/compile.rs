//! Compiling a validated [`Config`] into a [`Snapshot`], one step per
//! part: each service ([`compile_service`]) with its nodes and balancer
//! groups, each route ([`compile_route`]) with its target, then the router
//! and the access sets.
//!
//! Owns the translation from config to compiled form (a route's policy
//! resolved against its service and the global sections here, once), and
//! what is carried
//! over from the previous snapshot: balancer counters of groups whose
//! membership did not change, a service's retry budget, a route's stats,
//! a rate-limit policy's limiter (same name and parameters).
//!
//! Must not touch: live state of existing nodes (node states and upstream
//! handles come from the [`NodeRegistry`]; the writer pushes config into
//! them later with [`Snapshot::configure_nodes`]), I/O.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use http::HeaderValue;

use super::{CompiledNode, CompiledRoute, CompiledService, CompiledTarget, Group, Snapshot};
use crate::access::AccessControl;
use crate::balance::{Balancer, Member};
use crate::config::route_policy::EffectivePolicy;
use crate::config::{
    Config, LimitKey, LimitMode, LimitScope, NodeConfig, RateLimitConfig, RouteConfig,
    ServiceConfig, Target,
};
use crate::limit::RateLimiter;
use crate::node::NodeRegistry;
use crate::route::{Router, RuleSpec};
use crate::stats::RouteStats;

impl<U: Default> Snapshot<U> {
    /// Compiles a validated config. Node states and upstream handles come
    /// from `registry` (so they outlive this snapshot); balancer counters
    /// are carried over from `previous` for groups whose membership did not
    /// change. Writes no live state (see the module doc); the writer calls
    /// [`Snapshot::configure_nodes`] when it swaps the result in.
    pub fn compile(
        config: Arc<Config>,
        version: u64,
        registry: &NodeRegistry<U>,
        previous: Option<&Snapshot<U>>,
    ) -> Snapshot<U> {
        let services: Vec<CompiledService<U>> = config
            .services
            .iter()
            .map(|svc| {
                let prev = previous.and_then(|p| p.services.iter().find(|s| s.name == svc.name));
                compile_service(svc, registry, prev)
            })
            .collect();

        let (limiters, limits_reset) = compile_limiters(&config, previous);
        let connections = compile_connections(&config, previous);
        let prev_route_stats: HashMap<&str, &Arc<RouteStats>> = previous
            .map(|p| p.routes.iter().map(|r| (r.id.as_str(), &r.stats)).collect())
            .unwrap_or_default();
        let routes = config
            .routes
            .iter()
            .map(|r| {
                let stats = prev_route_stats.get(r.id.as_str()).copied();
                let policy =
                    EffectivePolicy::resolve(&r.policy, config.services.get(r.service), &config);
                let limiter = r.rate_limit.and_then(|i| limiters.get(i)).cloned();
                compile_route(r, services.get(r.service), policy, stats, limiter)
            })
            .collect();

        let router = compile_router(&config.routes);
        let access = AccessControl::new(
            &config.access.allow,
            &config.access.deny,
            &config.access.trusted_proxies,
        );
        Snapshot {
            version,
            config,
            router,
            routes,
            services,
            access,
            limiters,
            connections,
            limits_reset,
        }
    }
}

/// The limiter of `limits.max_connections_per_client`: the previous
/// snapshot's while the bound is unchanged (its counts carry on).
fn compile_connections<U>(
    config: &Config,
    previous: Option<&Snapshot<U>>,
) -> Option<Arc<RateLimiter>> {
    let max = config.limits.max_connections_per_client?;
    let policy = RateLimitConfig {
        name: "limits.max_connections_per_client".to_owned(),
        key: vec![LimitKey::ClientIp],
        rate: None,
        mode: LimitMode::Enforce,
        scope: LimitScope::Local,
        max_in_flight: Some(max),
    };
    let prev = previous.and_then(|s| s.connections.as_ref());
    Some(RateLimiter::carry(&policy, prev).0)
}

/// One limiter per policy: the previous snapshot's when the policy is
/// unchanged, else a new one (named in the second list when it replaces
/// one of the same name).
fn compile_limiters<U>(
    config: &Config,
    previous: Option<&Snapshot<U>>,
) -> (Vec<Arc<RateLimiter>>, Vec<String>) {
    let mut reset = Vec::new();
    let limiters = config
        .rate_limits
        .iter()
        .map(|p| {
            let prev = previous.and_then(|s| s.limiters.iter().find(|l| l.config.name == p.name));
            let (limiter, replaced) = RateLimiter::carry(p, prev);
            if replaced {
                reset.push(p.name.clone());
            }
            limiter
        })
        .collect();
    (limiters, reset)
}

/// One service: its nodes (state and upstream from `registry`), its `all`
/// group and one group per version, in first-seen order. `prev` is the
/// same service in the previous snapshot, if any.
fn compile_service<U: Default>(
    svc: &ServiceConfig,
    registry: &NodeRegistry<U>,
    prev: Option<&CompiledService<U>>,
) -> CompiledService<U> {
    let nodes: Vec<CompiledNode<U>> = svc
        .nodes
        .iter()
        .map(|n| compile_node(&svc.name, n, registry))
        .collect();
    let all = compile_group(
        svc,
        &nodes,
        "",
        (0..nodes.len()).collect(),
        prev.map(|p| &p.all),
    );
    let versions = version_names(svc)
        .into_iter()
        .map(|v| {
            let idx = (0..nodes.len())
                .filter(|&i| nodes[i].version == v)
                .collect();
            let pg = prev.and_then(|p| p.versions.iter().find(|g| g.name == v));
            compile_group(svc, &nodes, v, idx, pg)
        })
        .collect();
    CompiledService {
        name: svc.name.clone(),
        shared_name: Arc::from(svc.name.as_str()),
        protocol: svc.protocol,
        pool: svc.pool,
        hash_on: svc.hash_on.clone(),
        health: svc.health.clone(),
        outlier: svc.outlier,
        circuit: svc.circuit,
        drain: svc.drain,
        maintenance: svc.maintenance.clone(),
        proxy_protocol: svc.proxy_protocol,
        retry_budget: prev.map_or_else(Default::default, |p| Arc::clone(&p.retry_budget)),
        retry_on: svc.retry_on,
        nodes,
        all,
        versions,
    }
}

/// One node of service `service`, with its live state and upstream handle
/// from `registry` (created there if the node is new).
fn compile_node<U: Default>(
    service: &str,
    n: &NodeConfig,
    registry: &NodeRegistry<U>,
) -> CompiledNode<U> {
    let addr = n.address.to_string();
    let live = registry.live(service, &n.id);
    CompiledNode {
        id: n.id.clone(),
        shared_id: Arc::from(n.id.as_str()),
        address: n.address,
        address_header: HeaderValue::from_str(&addr)
            .expect("a socket address is a valid header value"),
        authority: addr.parse().expect("a socket address is a valid authority"),
        version: n.version.clone(),
        weight: n.weight,
        state: live.state,
        upstream: live.upstream,
    }
}

/// The distinct non-empty versions of a service's nodes, in first-seen order.
fn version_names(svc: &ServiceConfig) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for n in &svc.nodes {
        if !n.version.is_empty() && !names.contains(&n.version.as_str()) {
            names.push(&n.version);
        }
    }
    names
}

/// The group `name` over `nodes[i]` for each `i` of `idx`. Its balancer
/// keeps the counters of `prev_group` when that group has the same members
/// (same live states, same weights, same order); it balances by the
/// service's `lb` and ramps warming nodes over its `slow_start`.
fn compile_group<U>(
    svc: &ServiceConfig,
    nodes: &[CompiledNode<U>],
    name: &str,
    idx: Vec<usize>,
    prev_group: Option<&Group>,
) -> Group {
    let members: Vec<Member> = idx
        .iter()
        .map(|&i| Member {
            state: Arc::clone(&nodes[i].state),
            weight: nodes[i].weight,
        })
        .collect();
    let same = prev_group.filter(|g| {
        g.balancer.members().len() == members.len()
            && g.balancer
                .members()
                .iter()
                .zip(&members)
                .all(|(a, b)| Arc::ptr_eq(&a.state, &b.state) && a.weight == b.weight)
    });
    Group {
        name: name.to_owned(),
        balancer: Balancer::build(svc.lb, members, same.map(|g| &g.balancer))
            .with_slow_start(svc.slow_start),
        nodes: idx,
    }
}

/// One route of service `svc` (`None` for a route that answers itself),
/// with its resolved `policy`. `stats` are the same route id's in the
/// previous snapshot, if any.
fn compile_route<U>(
    r: &RouteConfig,
    svc: Option<&CompiledService<U>>,
    policy: EffectivePolicy,
    stats: Option<&Arc<RouteStats>>,
    rate_limit: Option<Arc<RateLimiter>>,
) -> CompiledRoute {
    CompiledRoute {
        id: r.id.clone(),
        id_header: HeaderValue::from_str(&r.id)
            .unwrap_or_else(|_| HeaderValue::from_static("invalid")),
        service: r.service,
        target: svc.map_or(CompiledTarget::All, |svc| compile_target(&r.target, svc)),
        filters: r.filters.clone(),
        strict_version: r.strict_version,
        policy,
        rate_limit,
        stats: stats.map_or_else(Default::default, Arc::clone),
        fallback_logged_ms: AtomicU64::new(0),
        protocol_logged_ms: AtomicU64::new(0),
    }
}

/// A route's target, resolved to group indices of `svc`. A version the
/// service lacks (validation rules it out) falls back to `all`, or is left
/// out of a split.
fn compile_target<U>(target: &Target, svc: &CompiledService<U>) -> CompiledTarget {
    let group_of = |v: &str| svc.versions.iter().position(|g| g.name == v);
    match target {
        Target::Service => CompiledTarget::All,
        Target::Version(v) => group_of(v).map_or(CompiledTarget::All, CompiledTarget::Version),
        Target::Split(arms) => {
            let mut total = 0u32;
            let arms = arms
                .iter()
                .filter_map(|(v, w)| {
                    total += *w;
                    group_of(v).map(|g| (g, total))
                })
                .collect();
            CompiledTarget::Split { arms, total }
        }
    }
}

/// The router over every route, rule `i` being route `i`.
fn compile_router(routes: &[RouteConfig]) -> Router {
    Router::build(
        routes
            .iter()
            .map(|r| RuleSpec {
                matcher: r.matcher.clone(),
                priority: r.priority,
                enabled: r.enabled,
            })
            .collect(),
    )
}
