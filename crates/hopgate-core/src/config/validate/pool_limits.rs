//! Validation of a service's admission limits: `services[].pool`'s
//! `max_connections`, `max_pending` and `queue_timeout`. Same contract as
//! the parent module: every error with its path, never a silent default for
//! a present value, no I/O, no panic.

use std::time::Duration;

use super::super::raw::RawPool;
use super::super::PoolLimits;
use super::values::{int_in, positive_duration, to_usize};
use super::Validator;
use crate::units;

/// Upper bound of `max_connections` (far above any file-descriptor limit).
const MAX_CONNECTIONS: i64 = 1_000_000;
/// Upper bound of `max_pending`.
const MAX_PENDING: i64 = 1_000_000;
/// Upper bound of `queue_timeout`: a queue is for seconds, not hours.
const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(3600);

impl Validator {
    /// The limits of `services[i].pool` at path `p`; defaults for the
    /// fields left out.
    pub(super) fn pool_limits(&mut self, p: &str, raw: &RawPool) -> PoolLimits {
        let mut limits = PoolLimits::default();
        if let Some(t) = &raw.max_connections {
            let path = format!("{p}.max_connections");
            if let Some(n) = self.check(path, int_in(t, 1, MAX_CONNECTIONS)) {
                limits.max_connections = to_usize(n);
            }
        }
        if let Some(t) = &raw.max_pending {
            let path = format!("{p}.max_pending");
            if let Some(n) = self.check(path, int_in(t, 0, MAX_PENDING)) {
                limits.max_pending = to_usize(n);
            }
        }
        if let Some(t) = &raw.queue_timeout {
            let r = positive_duration(t).and_then(|d| {
                if d > MAX_QUEUE_TIMEOUT {
                    Err(format!(
                        "duration {:?} is too long: at most {}",
                        t.0,
                        units::format_duration(MAX_QUEUE_TIMEOUT)
                    ))
                } else {
                    Ok(d)
                }
            });
            if let Some(d) = self.check(format!("{p}.queue_timeout"), r) {
                limits.queue_timeout = d;
            }
        }
        limits
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load, Format, PoolLimits};
    use std::time::Duration;

    fn doc(pool: &str) -> String {
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:8080 }}\nservices:\n  - name: api\n    pool: {pool}\n    nodes:\n      - {{ id: a, address: 127.0.0.1:8081 }}\nroutes:\n  - {{ id: default, service: api }}\n"
        )
    }

    fn limits(pool: &str) -> PoolLimits {
        match load(&doc(pool), Format::Yaml) {
            Ok(c) => c.services[0].pool.limits,
            Err(e) => panic!("{pool}: {e:?}"),
        }
    }

    /// The one error of a pool section: its path and message.
    fn error(pool: &str) -> (String, String) {
        match load(&doc(pool), Format::Yaml) {
            Ok(_) => panic!("{pool} validated"),
            Err(e) => {
                assert_eq!(e.len(), 1, "{e:?}");
                (e[0].path.clone(), e[0].message.clone())
            }
        }
    }

    #[test]
    fn absent_limits_take_the_defaults() {
        assert_eq!(limits("{ max_idle: 4 }"), PoolLimits::default());
        let d = PoolLimits::default();
        assert_eq!(
            (d.max_connections, d.max_pending, d.queue_timeout),
            (1024, 1024, Duration::from_secs(5))
        );
    }

    #[test]
    fn present_limits_are_read() {
        let l = limits("{ max_connections: 4, max_pending: 0, queue_timeout: 250ms }");
        assert_eq!(
            l,
            PoolLimits {
                max_connections: 4,
                max_pending: 0,
                queue_timeout: Duration::from_millis(250),
            }
        );
    }

    #[test]
    fn bad_limits_name_their_field() {
        for (pool, path, needle) in [
            (
                "{ max_connections: 0 }",
                "services[0].pool.max_connections",
                "expected an integer from 1 to 1000000",
            ),
            (
                "{ max_connections: lots }",
                "services[0].pool.max_connections",
                "is not an integer",
            ),
            (
                "{ max_pending: -1 }",
                "services[0].pool.max_pending",
                "expected an integer from 0 to 1000000",
            ),
            (
                "{ queue_timeout: 0s }",
                "services[0].pool.queue_timeout",
                "must be greater than 0",
            ),
            (
                "{ queue_timeout: 2h }",
                "services[0].pool.queue_timeout",
                "too long",
            ),
            (
                "{ queue_timeout: soon }",
                "services[0].pool.queue_timeout",
                "soon",
            ),
        ] {
            let (p, m) = error(pool);
            assert_eq!(p, path, "{pool}");
            assert!(m.contains(needle), "{pool}: {m}");
        }
    }
}
