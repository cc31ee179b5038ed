//! Validation of a route's own policy: `routes[].timeouts`, `.retries` and
//! `.limits` ([`RoutePolicy`]). Durations must be above zero and at most a
//! day; an `attempt` bound longer than the route's `request` bound is an
//! error (an attempt could never use it); `attempts` is 1..=10, `budget`
//! a share from 0 to 1, statuses 400..=599 and in one list only; a body
//! limit at least one byte. Same contract as the parent module: every
//! error with its path, no I/O, no panic.

use std::time::Duration;

use super::values::{int_in, positive_duration, size_in};
use super::Validator;
use crate::config::raw::{
    RawRoute, RawRouteLimits, RawRouteRetries, RawRouteTimeouts, RawServiceRetries, Text,
};
use crate::config::route_policy::RoutePolicy;
use crate::units::format_duration;

/// The longest route timeout accepted (a typo guard: `120000s`).
const MAX_ROUTE_TIMEOUT: Duration = Duration::from_secs(86_400);

impl Validator {
    /// Route `p`'s policy (`p` is `routes[i]`).
    pub(super) fn route_policy(&mut self, p: &str, r: &RawRoute) -> RoutePolicy {
        let mut policy = RoutePolicy::default();
        if let Some(t) = &r.timeouts {
            self.route_timeouts(&format!("{p}.timeouts"), t, &mut policy);
        }
        if let Some(rt) = &r.retries {
            self.route_retries(&format!("{p}.retries"), rt, &mut policy);
        }
        if let Some(l) = &r.limits {
            self.route_limits(&format!("{p}.limits"), l, &mut policy);
        }
        policy
    }

    fn route_timeouts(&mut self, p: &str, t: &RawRouteTimeouts, out: &mut RoutePolicy) {
        out.request = self.route_duration(format!("{p}.request"), t.request.as_ref());
        out.attempt = self.route_duration(format!("{p}.attempt"), t.attempt.as_ref());
        out.idle = self.route_duration(format!("{p}.idle"), t.idle.as_ref());
        if let (Some(attempt), Some(request)) = (out.attempt, out.request) {
            if attempt > request {
                self.err(
                    format!("{p}.attempt"),
                    format!(
                        "{} is longer than this route's timeouts.request ({}): an attempt never \
                         outlives its request; lower attempt or leave it out",
                        format_duration(attempt),
                        format_duration(request)
                    ),
                );
            }
        }
    }

    fn route_duration(&mut self, p: String, t: Option<&Text>) -> Option<Duration> {
        let r = positive_duration(t?).and_then(|d| {
            if d > MAX_ROUTE_TIMEOUT {
                Err(format!(
                    "duration {:?} is too long: at most {}",
                    t.map_or("", |t| t.0.as_str()),
                    format_duration(MAX_ROUTE_TIMEOUT)
                ))
            } else {
                Ok(d)
            }
        });
        self.check(p, r)
    }

    fn route_retries(&mut self, p: &str, r: &RawRouteRetries, out: &mut RoutePolicy) {
        if let Some(t) = &r.attempts {
            out.attempts = self
                .check(format!("{p}.attempts"), int_in(t, 1, 10))
                .map(|n| n as u32);
        }
        if let Some(t) = &r.budget {
            let share = match t.0.trim().parse::<f64>() {
                Ok(b) if (0.0..=1.0).contains(&b) => Ok(b),
                _ => Err(format!("{:?} is not a share from 0 to 1 (like 0.2)", t.0)),
            };
            out.budget = self.check(format!("{p}.budget"), share);
        }
        // The same checks as a service's lists (statuses 400–599, none in
        // both); a list the route does not write inherits the service's.
        let lists = RawServiceRetries {
            on_status: r.on_status.clone(),
            on_status_idempotent: r.on_status_idempotent.clone(),
        };
        let set = self.retry_on(p, &lists);
        out.on_status = r.on_status.as_ref().map(|_| set.any);
        out.on_status_idempotent = r.on_status_idempotent.as_ref().map(|_| set.idempotent);
    }

    fn route_limits(&mut self, p: &str, l: &RawRouteLimits, out: &mut RoutePolicy) {
        if let Some(t) = &l.max_body_bytes {
            let r = size_in(t, 1, u64::MAX, "1", "");
            out.max_body_bytes = self.check(format!("{p}.max_body_bytes"), r);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load, ConfigError, Format};

    const BASE: &str = "
listeners: [ { name: p, address: 127.0.0.1:0 } ]
services: [ { name: s, nodes: [ { id: n, address: 127.0.0.1:1 } ] } ]
routes:
  - id: r
    match: { path_prefix: / }
    service: s
";

    fn errors(policy: &str) -> Vec<ConfigError> {
        load(&format!("{BASE}{policy}"), Format::Yaml).expect_err("refused")
    }

    fn paths(policy: &str) -> Vec<String> {
        errors(policy).into_iter().map(|e| e.path).collect()
    }

    /// Each bad value is refused under its own field path.
    #[test]
    fn each_bad_value_names_its_path() {
        let cases = [
            (
                "    timeouts: { request: 0s }\n",
                "routes[0].timeouts.request",
            ),
            (
                "    timeouts: { attempt: -1s }\n",
                "routes[0].timeouts.attempt",
            ),
            ("    timeouts: { idle: soon }\n", "routes[0].timeouts.idle"),
            (
                "    timeouts: { request: 30h }\n",
                "routes[0].timeouts.request",
            ),
            (
                "    timeouts: { request: 2s, attempt: 5s }\n",
                "routes[0].timeouts.attempt",
            ),
            (
                "    retries: { attempts: 0 }\n",
                "routes[0].retries.attempts",
            ),
            (
                "    retries: { attempts: 11 }\n",
                "routes[0].retries.attempts",
            ),
            ("    retries: { budget: 1.5 }\n", "routes[0].retries.budget"),
            (
                "    retries: { on_status: [200] }\n",
                "routes[0].retries.on_status[0]",
            ),
            (
                "    retries: { on_status: [503], on_status_idempotent: [503] }\n",
                "routes[0].retries.on_status_idempotent[0]",
            ),
            (
                "    limits: { max_body_bytes: 0 }\n",
                "routes[0].limits.max_body_bytes",
            ),
            (
                "    limits: { max_body_bytes: lots }\n",
                "routes[0].limits.max_body_bytes",
            ),
            ("    timeouts: { total: 2s }\n", "routes[0].timeouts.total"),
            ("    retries: { tries: 2 }\n", "routes[0].retries.tries"),
            (
                "    limits: { max_header_bytes: 1KiB }\n",
                "routes[0].limits.max_header_bytes",
            ),
        ];
        for (policy, path) in cases {
            assert_eq!(paths(policy), [path], "{policy}");
        }
    }

    /// The attempt bound's error says why, with both values.
    #[test]
    fn attempt_past_request_explains() {
        let e = errors("    timeouts: { request: 2s, attempt: 5s }\n");
        assert!(
            e[0].message.contains("5s") && e[0].message.contains("2s"),
            "{e:?}"
        );
    }

    /// Every field at once, valid, loads.
    #[test]
    fn a_full_policy_loads() {
        let c = load(
            &format!(
                "{BASE}    timeouts: {{ request: 120s, attempt: 30s, idle: 300s }}\n    retries: {{ attempts: 2, on_status: [503], on_status_idempotent: [502, 504], budget: 0.1 }}\n    limits: {{ max_body_bytes: 100MiB }}\n"
            ),
            Format::Yaml,
        )
        .expect("valid");
        let p = c.routes[0].policy;
        assert_eq!(p.attempts, Some(2));
        assert_eq!(p.max_body_bytes, Some(100 << 20));
        assert!(p.on_status_idempotent.is_some_and(|s| s.contains(504)));
    }
}
