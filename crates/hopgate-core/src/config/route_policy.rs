//! Per-route policy: what a route sets (`routes[].timeouts`, `.retries`,
//! `.limits`: [`RoutePolicy`], every value optional) and what applies to
//! the route once the unset values are inherited ([`EffectivePolicy`]),
//! resolved once per config when the snapshot is compiled, so a request
//! reads resolved values and pays nothing for the inheritance.
//!
//! The inheritance order, per value (first set wins):
//!
//! | effective value | route | service | global |
//! | --- | --- | --- | --- |
//! | `request` (whole request) | `timeouts.request` | — | none: no bound across attempts |
//! | `attempt` (one attempt) | `timeouts.attempt`, else `timeouts.request` | — | `timeouts.request` |
//! | `idle` (streams) | `timeouts.idle` | — | `timeouts.idle` |
//! | `attempts` | `retries.attempts` | — | `retries.attempts` |
//! | `on_status`, `on_status_idempotent` | `retries.…` | `services[].retries.…` | none |
//! | `budget` | `retries.budget` | — | `retries.budget` |
//! | `max_body_bytes` | `limits.max_body_bytes` | — | `limits.max_body_bytes` |
//!
//! Owns the order and the origin of every effective value ([`Origin`]).
//! Must not touch: parsing (validation does it), requests.

use std::time::Duration;

use crate::retry::{RetryOnStatus, StatusSet};

use super::{Config, ServiceConfig};

/// A route's own policy as validated: `None` inherits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoutePolicy {
    /// `timeouts.request`: the whole request, every attempt.
    pub request: Option<Duration>,
    /// `timeouts.attempt`: one attempt.
    pub attempt: Option<Duration>,
    /// `timeouts.idle`: tunnels and HTTP/2 send stalls.
    pub idle: Option<Duration>,
    /// `retries.attempts`, 1..=10.
    pub attempts: Option<u32>,
    /// `retries.on_status`.
    pub on_status: Option<StatusSet>,
    /// `retries.on_status_idempotent`.
    pub on_status_idempotent: Option<StatusSet>,
    /// `retries.budget`, 0..=1.
    pub budget: Option<f64>,
    /// `limits.max_body_bytes`.
    pub max_body_bytes: Option<u64>,
}

/// Where an effective value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Route,
    Service,
    Global,
}

impl Origin {
    /// `route`, `service` or `global` (the admin API's word).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Route => "route",
            Origin::Service => "service",
            Origin::Global => "global",
        }
    }
}

/// The origin of each [`EffectivePolicy`] value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origins {
    pub request: Origin,
    pub attempt: Origin,
    pub idle: Origin,
    pub attempts: Origin,
    pub on_status: Origin,
    pub on_status_idempotent: Origin,
    pub budget: Origin,
    pub max_body_bytes: Origin,
}

/// The policy that applies to one route, every value resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EffectivePolicy {
    /// Bound of one attempt, until the answer's head.
    pub attempt: Duration,
    /// Bound of the whole request, every attempt, until the answer's head
    /// (from its arrival); `None`: only each attempt is bounded.
    pub request: Option<Duration>,
    /// Idle limit of the route's streams.
    pub idle: Duration,
    /// Most attempts, the first included.
    pub attempts: u32,
    /// "Not processed" answers retried on another node.
    pub retry_on: RetryOnStatus,
    /// Share of a retry each request adds to its service's budget.
    pub budget: f64,
    /// Largest request body.
    pub max_body_bytes: u64,
    pub from: Origins,
}

impl EffectivePolicy {
    /// Resolves `route` (the policy route `routes[i]` sets) against its
    /// service and the global sections, in the order of the module's table.
    pub fn resolve(route: &RoutePolicy, service: Option<&ServiceConfig>, config: &Config) -> Self {
        let attempt_set = route.attempt.or(route.request);
        // A route that answers itself has no service: no statuses to inherit.
        let svc = service.map(|s| s.retry_on).unwrap_or_default();
        EffectivePolicy {
            attempt: attempt_set.unwrap_or(config.timeouts.request),
            request: route.request,
            idle: route.idle.unwrap_or(config.timeouts.idle),
            attempts: route.attempts.unwrap_or(config.retries.attempts),
            retry_on: RetryOnStatus {
                any: route.on_status.unwrap_or(svc.any),
                idempotent: route.on_status_idempotent.unwrap_or(svc.idempotent),
            },
            budget: route.budget.unwrap_or(config.retries.budget),
            max_body_bytes: route.max_body_bytes.unwrap_or(config.limits.max_body_bytes),
            from: Origins {
                request: set_or(route.request.is_some(), Origin::Global),
                attempt: set_or(attempt_set.is_some(), Origin::Global),
                idle: set_or(route.idle.is_some(), Origin::Global),
                attempts: set_or(route.attempts.is_some(), Origin::Global),
                on_status: set_or(route.on_status.is_some(), Origin::Service),
                on_status_idempotent: set_or(route.on_status_idempotent.is_some(), Origin::Service),
                budget: set_or(route.budget.is_some(), Origin::Global),
                max_body_bytes: set_or(route.max_body_bytes.is_some(), Origin::Global),
            },
        }
    }
}

/// `Route` when the route set the value, else `inherited`.
fn set_or(set: bool, inherited: Origin) -> Origin {
    if set {
        Origin::Route
    } else {
        inherited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(yaml: &str) -> Config {
        crate::config::load(yaml, crate::config::Format::Yaml).expect("a valid config")
    }

    const BASE: &str = "
listeners: [ { name: p, address: 127.0.0.1:0 } ]
timeouts: { request: 30s, idle: 60s }
retries: { attempts: 3, budget: 0.2 }
limits: { max_body_bytes: 10MiB }
services:
  - name: s
    retries: { on_status: [503], on_status_idempotent: [502] }
    nodes: [ { id: n, address: 127.0.0.1:1 } ]
routes:
";

    fn effective(route: &str) -> EffectivePolicy {
        let c = config(&format!("{BASE}{route}"));
        let r = &c.routes[0];
        EffectivePolicy::resolve(&r.policy, c.services.get(r.service), &c)
    }

    /// A route without policy inherits every value, from the service for
    /// the statuses and from the global sections for the rest.
    #[test]
    fn unset_inherits_everything() {
        let e = effective("  - { id: r, match: { path_prefix: / }, service: s }\n");
        assert_eq!(e.attempt, Duration::from_secs(30));
        assert_eq!(e.request, None);
        assert_eq!(e.idle, Duration::from_secs(60));
        assert_eq!((e.attempts, e.budget), (3, 0.2));
        assert!(e.retry_on.any.contains(503) && e.retry_on.idempotent.contains(502));
        assert_eq!(e.max_body_bytes, 10 << 20);
        let f = e.from;
        assert_eq!(f.on_status, Origin::Service);
        for o in [
            f.request,
            f.attempt,
            f.idle,
            f.attempts,
            f.budget,
            f.max_body_bytes,
        ] {
            assert_eq!(o, Origin::Global);
        }
    }

    /// Every value a route sets wins, and an empty status list turns the
    /// service's off on this route.
    #[test]
    fn route_values_override() {
        let e = effective(
            "  - id: r
    match: { path_prefix: / }
    service: s
    timeouts: { request: 120s, attempt: 40s, idle: 300s }
    retries: { attempts: 1, on_status: [], budget: 0.5 }
    limits: { max_body_bytes: 100MiB }
",
        );
        assert_eq!(e.request, Some(Duration::from_secs(120)));
        assert_eq!(e.attempt, Duration::from_secs(40));
        assert_eq!(e.idle, Duration::from_secs(300));
        assert_eq!((e.attempts, e.budget), (1, 0.5));
        assert!(e.retry_on.any.is_empty() && e.retry_on.idempotent.contains(502));
        assert_eq!(e.max_body_bytes, 100 << 20);
        assert_eq!(e.from.on_status, Origin::Route);
        assert_eq!(e.from.on_status_idempotent, Origin::Service);
        assert_eq!(e.from.max_body_bytes, Origin::Route);
    }

    /// A route's whole-request bound also bounds its attempts when it sets
    /// no attempt bound: one long route is one line.
    #[test]
    fn request_alone_bounds_attempts_too() {
        let e = effective(
            "  - { id: r, match: { path_prefix: / }, service: s, timeouts: { request: 120s } }\n",
        );
        assert_eq!(e.attempt, Duration::from_secs(120));
        assert_eq!(
            (e.from.attempt, e.from.request),
            (Origin::Route, Origin::Route)
        );
    }
}
