//! Validation of `canary:`, the thresholds a config canary is judged by
//! (`min_requests`, `interval`, `window`, `max_error_ratio`,
//! `min_error_delta`, `max_p99_ratio`, `min_p99_delta`). Same contract as
//! the parent module: every error with its path, never a silent default for
//! a present value, no I/O, no panic.

use std::time::Duration;

use super::super::raw::{RawCanary, Text};
use super::super::CanaryConfig;
use super::values::{int_in, positive_duration};
use super::Validator;
use crate::units;

/// Upper bound of `min_requests`.
const MAX_MIN_REQUESTS: i64 = 1_000_000_000;
/// Upper bound of `interval`, `window` and `min_p99_delta`.
const MAX_DURATION: Duration = Duration::from_secs(3600);
/// Upper bound of the two ratios.
const MAX_RATIO: f64 = 1000.0;

/// A decimal number from `min` to `max` inclusive.
fn number_in(t: &Text, min: f64, max: f64) -> Result<f64, String> {
    match t.0.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && (min..=max).contains(&n) => Ok(n),
        Ok(_) => Err(format!(
            "{:?} is out of range: expected a number from {min} to {max}",
            t.0
        )),
        Err(_) => Err(format!(
            "{:?} is not a number: expected a number from {min} to {max}",
            t.0
        )),
    }
}

/// A duration of at most [`MAX_DURATION`]; zero allowed when `zero_ok`.
fn duration_upto(t: &Text, zero_ok: bool) -> Result<Duration, String> {
    let d = if zero_ok {
        units::parse_duration(&t.0)?
    } else {
        positive_duration(t)?
    };
    if d > MAX_DURATION {
        return Err(format!(
            "duration {:?} is too long: at most {}",
            t.0,
            units::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}

impl Validator {
    /// `canary:`; defaults for the fields left out.
    pub(super) fn canary(&mut self, raw: Option<&RawCanary>) -> CanaryConfig {
        let mut c = CanaryConfig::default();
        let Some(raw) = raw else {
            return c;
        };
        if let Some(t) = &raw.min_requests {
            if let Some(n) = self.check("canary.min_requests", int_in(t, 1, MAX_MIN_REQUESTS)) {
                c.min_requests = n.unsigned_abs();
            }
        }
        if let Some(t) = &raw.interval {
            if let Some(d) = self.check("canary.interval", duration_upto(t, false)) {
                c.interval = d;
            }
        }
        if let Some(t) = &raw.window {
            if let Some(d) = self.check("canary.window", duration_upto(t, false)) {
                c.window = d;
            }
        }
        if let Some(t) = &raw.max_error_ratio {
            if let Some(n) = self.check("canary.max_error_ratio", number_in(t, 1.0, MAX_RATIO)) {
                c.max_error_ratio = n;
            }
        }
        if let Some(t) = &raw.min_error_delta {
            if let Some(n) = self.check("canary.min_error_delta", number_in(t, 0.0, 1.0)) {
                c.min_error_delta = n;
            }
        }
        if let Some(t) = &raw.max_p99_ratio {
            if let Some(n) = self.check("canary.max_p99_ratio", number_in(t, 1.0, MAX_RATIO)) {
                c.max_p99_ratio = n;
            }
        }
        if let Some(t) = &raw.min_p99_delta {
            if let Some(d) = self.check("canary.min_p99_delta", duration_upto(t, true)) {
                c.min_p99_delta = d;
            }
        }
        // Judged over a window shorter than its interval, some requests
        // would never be looked at.
        if (raw.window.is_some() || raw.interval.is_some()) && c.window < c.interval {
            self.err(
                "canary.window",
                format!(
                    "window {} is shorter than interval {}: every request must fall in a judged window",
                    units::format_duration(c.window),
                    units::format_duration(c.interval)
                ),
            );
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{load, CanaryConfig, Format};
    use std::time::Duration;

    fn doc(canary: &str) -> String {
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:8080 }}\nservices:\n  - name: api\n    nodes:\n      - {{ id: a, address: 127.0.0.1:8081 }}\nroutes:\n  - {{ id: default, service: api }}\ncanary: {canary}\n"
        )
    }

    fn canary(c: &str) -> CanaryConfig {
        match load(&doc(c), Format::Yaml) {
            Ok(cfg) => cfg.canary,
            Err(e) => panic!("{c}: {e:?}"),
        }
    }

    fn error(c: &str) -> (String, String) {
        match load(&doc(c), Format::Yaml) {
            Ok(_) => panic!("{c} validated"),
            Err(e) => {
                assert_eq!(e.len(), 1, "{e:?}");
                (e[0].path.clone(), e[0].message.clone())
            }
        }
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(canary("{}"), CanaryConfig::default());
        let c = canary(
            "{ min_requests: 20, interval: 1s, window: 10s, max_error_ratio: 3, min_error_delta: 0.05, max_p99_ratio: 1.5, min_p99_delta: 0ms }",
        );
        assert_eq!(c.min_requests, 20);
        assert_eq!(c.interval, Duration::from_secs(1));
        assert_eq!(c.window, Duration::from_secs(10));
        assert!((c.max_error_ratio - 3.0).abs() < 1e-9);
        assert!((c.min_error_delta - 0.05).abs() < 1e-9);
        assert!((c.max_p99_ratio - 1.5).abs() < 1e-9);
        assert_eq!(c.min_p99_delta, Duration::ZERO);
    }

    #[test]
    fn every_error_names_its_field() {
        let cases = [
            ("{ min_requests: 0 }", "canary.min_requests", "out of range"),
            ("{ interval: 0s }", "canary.interval", "greater than 0"),
            ("{ window: 2h }", "canary.window", "too long"),
            (
                "{ max_error_ratio: 0.5 }",
                "canary.max_error_ratio",
                "out of range",
            ),
            (
                "{ min_error_delta: lots }",
                "canary.min_error_delta",
                "not a number",
            ),
            (
                "{ max_p99_ratio: NaN }",
                "canary.max_p99_ratio",
                "out of range",
            ),
            ("{ min_p99_delta: soon }", "canary.min_p99_delta", ""),
            (
                "{ interval: 10s, window: 5s }",
                "canary.window",
                "shorter than interval",
            ),
        ];
        for (c, path, msg) in cases {
            let (p, m) = error(c);
            assert_eq!(p, path, "{c}: {m}");
            assert!(m.contains(msg), "{c}: {m}");
        }
    }
}
