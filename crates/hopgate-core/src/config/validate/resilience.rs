//! Validation of the resilience sections: `services[].health`,
//! `services[].outlier`, `services[].circuit`, `retries`, `sessions`,
//! `store`, `maintenance` and `sources`. Same contract
//! as the parent module: every error with its path, never a silent default
//! for a present value, no I/O, no panic.

use std::time::Duration;

use super::routes::check_path;
use super::values::{int_in, is_env_name, is_tchar, parse_header_name, positive_duration, size_in};
use super::Validator;
use crate::config::raw::{
    RawCircuit, RawDrain, RawEtcdSource, RawHealth, RawMaintenance, RawOutlier, RawRetries,
    RawSecure, RawSessions, RawSources, RawStore, Text,
};
use crate::config::{
    CircuitConfig, CookieSecure, DrainConfig, DrainMode, EtcdSourceConfig, Health, HealthConfig,
    MaintenanceConfig, MaintenanceMode, OutlierConfig, RedisStoreConfig, RedisTarget, RetryConfig,
    SessionsConfig, SourcesConfig, StoreConfig, DEFAULT_ETCD_PREFIX,
};
use crate::units;

impl Validator {
    fn int_or(&mut self, p: String, t: Option<&Text>, min: i64, max: i64, default: u32) -> u32 {
        match t {
            None => default,
            Some(t) => self
                .check(p, int_in(t, min, max))
                .map_or(default, |n| n as u32),
        }
    }

    pub(super) fn duration_or(
        &mut self,
        p: String,
        t: Option<&Text>,
        max: Duration,
        default: Duration,
    ) -> Duration {
        match t {
            None => default,
            Some(t) => {
                let r = positive_duration(t).and_then(|d| {
                    if d > max {
                        Err(format!(
                            "duration {:?} is too long: at most {}",
                            t.0,
                            units::format_duration(max)
                        ))
                    } else {
                        Ok(d)
                    }
                });
                self.check(p, r).unwrap_or(default)
            }
        }
    }

    pub(super) fn health(&mut self, p: &str, h: &RawHealth) -> HealthConfig {
        let path = match &h.path {
            None => "/health".to_owned(),
            Some(s) => self
                .check(format!("{p}.path"), check_path(s))
                .unwrap_or_default(),
        };
        let hour = Duration::from_secs(3600);
        let interval = self.duration_or(
            format!("{p}.interval"),
            h.interval.as_ref(),
            hour,
            Duration::from_secs(2),
        );
        let timeout = self.duration_or(
            format!("{p}.timeout"),
            h.timeout.as_ref(),
            hour,
            Duration::from_secs(1),
        );
        if h.timeout.is_some() && h.interval.is_some() && timeout > interval {
            self.err(
                format!("{p}.timeout"),
                format!(
                    "timeout {} is longer than the interval {}",
                    units::format_duration(timeout),
                    units::format_duration(interval)
                ),
            );
        }
        let rise = self.int_or(format!("{p}.rise"), h.rise.as_ref(), 1, 100, 2);
        let fall = self.int_or(format!("{p}.fall"), h.fall.as_ref(), 1, 100, 2);
        let expect_status = match &h.expect_status {
            None => (200, 299),
            Some(t) => self
                .check(format!("{p}.expect_status"), parse_status_range(&t.0))
                .unwrap_or((200, 299)),
        };
        let initial = match h.initial.as_deref() {
            None | Some("unknown") => Health::Unknown,
            Some("healthy") => Health::Healthy,
            Some(other) => {
                self.err(
                    format!("{p}.initial"),
                    format!("unknown initial state {other:?}: expected \"unknown\" or \"healthy\""),
                );
                Health::Unknown
            }
        };
        HealthConfig {
            path,
            interval,
            timeout,
            rise,
            fall,
            expect_status,
            initial,
        }
    }

    pub(super) fn outlier(&mut self, p: &str, o: Option<&RawOutlier>) -> OutlierConfig {
        let d = OutlierConfig::default();
        let Some(o) = o else { return d };
        let day = Duration::from_secs(86_400);
        let base = self.duration_or(
            format!("{p}.base_ejection"),
            o.base_ejection.as_ref(),
            day,
            d.base_ejection,
        );
        let max = self.duration_or(
            format!("{p}.max_ejection"),
            o.max_ejection.as_ref(),
            day,
            d.max_ejection.max(base),
        );
        if o.max_ejection.is_some() && max < base {
            self.err(
                format!("{p}.max_ejection"),
                format!(
                    "max_ejection {} is shorter than base_ejection {}",
                    units::format_duration(max),
                    units::format_duration(base)
                ),
            );
        }
        OutlierConfig {
            consecutive_5xx: self.int_or(
                format!("{p}.consecutive_5xx"),
                o.consecutive_5xx.as_ref(),
                0,
                1000,
                d.consecutive_5xx,
            ),
            consecutive_failures: self.int_or(
                format!("{p}.consecutive_failures"),
                o.consecutive_failures.as_ref(),
                0,
                1000,
                d.consecutive_failures,
            ),
            base_ejection: base,
            max_ejection: max,
            max_ejected_percent: self.int_or(
                format!("{p}.max_ejected_percent"),
                o.max_ejected_percent.as_ref(),
                0,
                100,
                u32::from(d.max_ejected_percent),
            ) as u8,
        }
    }

    pub(super) fn circuit(&mut self, p: &str, c: Option<&RawCircuit>) -> CircuitConfig {
        let d = CircuitConfig::default();
        let Some(c) = c else { return d };
        CircuitConfig {
            enabled: c.enabled.unwrap_or(true),
            failure_threshold: self.int_or(
                format!("{p}.failure_threshold"),
                c.failure_threshold.as_ref(),
                1,
                1000,
                d.failure_threshold,
            ),
            reset_timeout: self.duration_or(
                format!("{p}.reset_timeout"),
                c.reset_timeout.as_ref(),
                Duration::from_secs(86_400),
                d.reset_timeout,
            ),
            max_requests: self.int_or(
                format!("{p}.max_requests"),
                c.max_requests.as_ref(),
                1,
                1000,
                d.max_requests,
            ),
        }
    }

    pub(super) fn retries(&mut self, r: Option<&RawRetries>) -> RetryConfig {
        let d = RetryConfig::default();
        let Some(r) = r else { return d };
        let budget = match &r.budget {
            None => d.budget,
            Some(t) => match t.0.trim().parse::<f64>() {
                Ok(b) if (0.0..=1.0).contains(&b) => b,
                _ => {
                    self.err(
                        "retries.budget",
                        format!("{:?} is not a share from 0 to 1 (like 0.2)", t.0),
                    );
                    d.budget
                }
            },
        };
        RetryConfig {
            attempts: self.int_or(
                "retries.attempts".into(),
                r.attempts.as_ref(),
                1,
                10,
                d.attempts,
            ),
            budget,
            buffer_body: match &r.buffer_body {
                None => d.buffer_body,
                Some(t) => self
                    .check("retries.buffer_body", size_in(t, 0, 16 << 20, "0", "16MiB"))
                    .unwrap_or(d.buffer_body),
            },
        }
    }
}

impl Validator {
    pub(super) fn sources(&mut self, r: Option<&RawSources>) -> SourcesConfig {
        let d = SourcesConfig::default();
        let Some(r) = r else { return d };
        let (file_watch, file_interval) = match r.file.as_ref() {
            None => (d.file_watch, d.file_interval),
            Some(f) => (
                f.watch.unwrap_or(d.file_watch),
                self.duration_or(
                    "sources.file.interval".into(),
                    f.interval.as_ref(),
                    Duration::from_secs(3600),
                    d.file_interval,
                ),
            ),
        };
        SourcesConfig {
            file_watch,
            file_interval,
            etcd: r.etcd.as_ref().map(|e| self.etcd(e)),
        }
    }

    fn etcd(&mut self, e: &RawEtcdSource) -> EtcdSourceConfig {
        if e.endpoints.is_empty() {
            self.err(
                "sources.etcd.endpoints",
                "at least one endpoint is needed, like \"http://127.0.0.1:2379\"",
            );
        }
        for (i, ep) in e.endpoints.iter().enumerate() {
            if let Err(m) = check_etcd_endpoint(ep) {
                self.err(format!("sources.etcd.endpoints[{i}]"), m);
            }
        }
        let prefix = match e.prefix.as_deref() {
            None => DEFAULT_ETCD_PREFIX.to_owned(),
            Some(p) if p.is_empty() || !p.ends_with('/') => {
                self.err(
                    "sources.etcd.prefix",
                    format!("{p:?} must be non-empty and end with '/' (like \"/hopgate/prod/\")"),
                );
                DEFAULT_ETCD_PREFIX.to_owned()
            }
            Some(p) if p.chars().any(|c| c.is_whitespace() || c.is_control()) => {
                self.err(
                    "sources.etcd.prefix",
                    format!("{p:?} must not contain whitespace or control characters"),
                );
                DEFAULT_ETCD_PREFIX.to_owned()
            }
            Some(p) => p.to_owned(),
        };
        let cache = match e.cache.as_deref() {
            None => None,
            Some("") => {
                self.err(
                    "sources.etcd.cache",
                    "must not be empty (leave it out for hopgate-etcd-cache.json next to the \
                     config file)",
                );
                None
            }
            Some(c) => Some(std::path::PathBuf::from(c)),
        };
        EtcdSourceConfig {
            endpoints: e.endpoints.clone(),
            prefix,
            cache,
        }
    }
}

/// An etcd client URL: `http://host:port` (or `https://`), nothing after
/// the port.
fn check_etcd_endpoint(ep: &str) -> Result<(), String> {
    let rest = ep
        .strip_prefix("http://")
        .or_else(|| ep.strip_prefix("https://"))
        .ok_or_else(|| format!("{ep:?} needs a scheme: \"http://host:port\""))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(format!(
            "{ep:?} needs a port, like \"http://127.0.0.1:2379\""
        ));
    };
    if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
        return Err(format!("{ep:?} has no valid host"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("{ep:?} has an invalid port {port:?}")),
    }
}

impl Validator {
    pub(super) fn drain(&mut self, p: &str, d: Option<&RawDrain>) -> DrainConfig {
        let def = DrainConfig::default();
        let Some(d) = d else { return def };
        let mode = match d.mode.as_deref() {
            None | Some("migrate") => DrainMode::Migrate,
            Some("finish") => DrainMode::Finish,
            Some(other) => {
                self.err(
                    format!("{p}.mode"),
                    format!("unknown drain mode {other:?}: expected \"migrate\" or \"finish\""),
                );
                DrainMode::Migrate
            }
        };
        DrainConfig {
            mode,
            deadline: self.duration_or(
                format!("{p}.deadline"),
                d.deadline.as_ref(),
                Duration::from_secs(86_400),
                def.deadline,
            ),
        }
    }

    pub(super) fn sessions(&mut self, r: Option<&RawSessions>) -> SessionsConfig {
        let d = SessionsConfig::default();
        let Some(r) = r else { return d };
        let cookie = match &r.cookie {
            None => d.cookie.clone(),
            Some(c) if !c.is_empty() && c.bytes().all(is_tchar) => c.clone(),
            Some(c) => {
                self.err(
                    "sessions.cookie",
                    format!("invalid cookie name {c:?}: use letters, digits and -_."),
                );
                d.cookie.clone()
            }
        };
        let header = match &r.header {
            None => d.header.clone(),
            Some(h) => self
                .check("sessions.header", parse_header_name(h))
                .unwrap_or(d.header.clone()),
        };
        let env = |v: &mut Validator, path: &str, name: &Option<String>| -> Option<String> {
            let n = name.as_ref()?;
            if is_env_name(n) {
                Some(n.clone())
            } else {
                v.err(path, format!("invalid environment variable name {n:?}"));
                None
            }
        };
        let secret_env =
            env(self, "sessions.secret_env", &r.secret_env).unwrap_or(d.secret_env.clone());
        let previous_secrets_env = env(
            self,
            "sessions.previous_secrets_env",
            &r.previous_secrets_env,
        );
        SessionsConfig {
            enabled: r.enabled.unwrap_or(true),
            cookie,
            header,
            ttl: self.duration_or(
                "sessions.ttl".into(),
                r.ttl.as_ref(),
                Duration::from_secs(365 * 86_400),
                d.ttl,
            ),
            secret_env,
            previous_secrets_env,
            context_max: match &r.context_max {
                None => d.context_max,
                Some(t) => self
                    .check(
                        "sessions.context_max",
                        size_in(t, 1, 64 << 10, "1", "64KiB"),
                    )
                    .map_or(d.context_max, |n| n as usize),
            },
            secure: match &r.secure {
                None => d.secure,
                Some(RawSecure::Bool(true)) => CookieSecure::Always,
                Some(RawSecure::Bool(false)) => CookieSecure::Never,
                Some(RawSecure::Word(w)) if w == "auto" => CookieSecure::Auto,
                Some(RawSecure::Word(w)) => {
                    self.err(
                        "sessions.secure",
                        format!("expected auto, true or false, not {w:?}"),
                    );
                    d.secure
                }
            },
        }
    }

    pub(super) fn store(&mut self, r: Option<&RawStore>) -> StoreConfig {
        let d = StoreConfig::default();
        let Some(r) = r else { return d };
        let redis = match r.kind.as_deref() {
            None | Some("memory") => {
                for (field, set) in [
                    ("url", r.url.is_some()),
                    ("sentinel", r.sentinel.is_some()),
                    ("cluster", r.cluster.is_some()),
                    ("prefix", r.prefix.is_some()),
                    ("max_queue", r.max_queue.is_some()),
                ] {
                    if set {
                        self.err(
                            format!("store.{field}"),
                            "only for kind: redis (the store kind is memory)",
                        );
                    }
                }
                false
            }
            Some("redis") => true,
            Some(other) => {
                self.err(
                    "store.kind",
                    format!("unknown store kind {other:?}: expected \"memory\" or \"redis\""),
                );
                false
            }
        };
        let path = match r.path.as_deref() {
            None => None,
            Some(_) if redis => {
                self.err(
                    "store.path",
                    "persistence is a memory-store feature; the redis store keeps bindings in Redis",
                );
                None
            }
            Some("") => {
                self.err(
                    "store.path",
                    "must not be empty (leave it out to keep sessions in memory only)",
                );
                None
            }
            Some(p) => Some(std::path::PathBuf::from(p)),
        };
        let redis = redis.then(|| self.redis_store(r));
        StoreConfig {
            path,
            redis,
            max_sessions: self.int_or(
                "store.max_sessions".into(),
                r.max_sessions.as_ref(),
                1,
                100_000_000,
                d.max_sessions as u32,
            ) as usize,
            persist_interval: self.duration_or(
                "store.persist_interval".into(),
                r.persist_interval.as_ref(),
                Duration::from_secs(86_400),
                d.persist_interval,
            ),
        }
    }

    fn redis_store(&mut self, r: &RawStore) -> RedisStoreConfig {
        let target = self.redis_target(r);
        let prefix = match r.prefix.as_deref() {
            None => RedisStoreConfig::DEFAULT_PREFIX.to_owned(),
            Some(p) if p.is_empty() || p.len() > 64 || p.chars().any(|c| c.is_whitespace()) => {
                self.err(
                    "store.prefix",
                    format!(
                        "prefix {p:?} must be 1 to 64 characters without spaces, like \"hopgate:\""
                    ),
                );
                RedisStoreConfig::DEFAULT_PREFIX.to_owned()
            }
            Some(p) => p.to_owned(),
        };
        RedisStoreConfig {
            target,
            prefix,
            max_queue: self.int_or(
                "store.max_queue".into(),
                r.max_queue.as_ref(),
                1,
                10_000_000,
                RedisStoreConfig::DEFAULT_MAX_QUEUE as u32,
            ) as usize,
        }
    }
}

impl Validator {
    /// Exactly one of `store.url`, `store.sentinel`, `store.cluster`.
    fn redis_target(&mut self, r: &RawStore) -> RedisTarget {
        let given = [r.url.is_some(), r.sentinel.is_some(), r.cluster.is_some()];
        if given.iter().filter(|g| **g).count() > 1 {
            self.err(
                "store",
                "kind: redis takes exactly one of url, sentinel and cluster",
            );
        }
        if let Some(s) = &r.sentinel {
            let master_name = match s.master_name.as_deref() {
                Some(n) if !n.is_empty() && !n.chars().any(char::is_whitespace) => n.to_owned(),
                _ => {
                    self.err(
                        "store.sentinel.master_name",
                        "the name the sentinels monitor the master under is required, like mymaster",
                    );
                    String::new()
                }
            };
            let endpoints = self.redis_endpoints("store.sentinel.endpoints", &s.endpoints);
            return RedisTarget::Sentinel {
                master_name,
                endpoints,
            };
        }
        if let Some(c) = &r.cluster {
            let endpoints = self.redis_endpoints("store.cluster.endpoints", &c.endpoints);
            return RedisTarget::Cluster { endpoints };
        }
        match r.url.as_deref() {
            None => {
                self.err(
                    "store.url",
                    "kind: redis needs a url (like redis://127.0.0.1:6379/0), a sentinel or a cluster",
                );
                RedisTarget::Url(String::new())
            }
            Some(u) => {
                self.check("store.url", check_redis_url(u));
                RedisTarget::Url(u.to_owned())
            }
        }
    }

    /// A non-empty list of `redis://` URLs.
    fn redis_endpoints(&mut self, path: &str, endpoints: &[String]) -> Vec<String> {
        if endpoints.is_empty() {
            self.err(path, "at least one endpoint, like redis://127.0.0.1:26379");
        }
        for (i, ep) in endpoints.iter().enumerate() {
            self.check(format!("{path}[{i}]"), check_redis_url(ep));
        }
        endpoints.to_vec()
    }
}

/// Checks the shape of `redis://[user:password@]host[:port][/db]` (no
/// lookup: validation does no I/O).
fn check_redis_url(u: &str) -> Result<(), String> {
    let example = "like redis://127.0.0.1:6379/0";
    let Some(rest) = u.strip_prefix("redis://") else {
        return Err(format!("url {u:?} must start with redis:// ({example})"));
    };
    let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("url {u:?}: unclosed IPv6 bracket"))?;
        (h, after.strip_prefix(':'))
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(format!("url {u:?} has no host ({example})"));
    }
    if let Some(p) = port {
        if !p.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(format!("url {u:?}: port {p:?} is not 1-65535"));
        }
    }
    if !db.is_empty() && db.parse::<u16>().is_err() {
        return Err(format!("url {u:?}: database {db:?} is not a number"));
    }
    Ok(())
}

impl Validator {
    pub(super) fn maintenance(&mut self, r: Option<&RawMaintenance>) -> MaintenanceConfig {
        let d = MaintenanceConfig::default();
        let Some(r) = r else { return d };
        let mode = match r.mode.as_deref() {
            None | Some("auto") => MaintenanceMode::Auto,
            Some("enabled") => MaintenanceMode::Enabled,
            Some("disabled") => MaintenanceMode::Disabled,
            Some(other) => {
                self.err(
                    "maintenance.mode",
                    format!(
                        "unknown mode {other:?}: expected \"auto\", \"enabled\" or \"disabled\""
                    ),
                );
                d.mode
            }
        };
        let day = Duration::from_secs(86_400);
        let relaxed_timeout = self.duration_or(
            "maintenance.relaxed_timeout".into(),
            r.relaxed_timeout.as_ref(),
            Duration::from_secs(3600),
            d.relaxed_timeout,
        );
        MaintenanceConfig {
            mode,
            relaxed_timeout,
            max_relaxed: self.duration_or(
                "maintenance.max_relaxed".into(),
                r.max_relaxed.as_ref(),
                day,
                d.max_relaxed,
            ),
            // Default: twice the relaxed timeout.
            post_handoff_relaxed: self.duration_or(
                "maintenance.post_handoff_relaxed".into(),
                r.post_handoff_relaxed.as_ref(),
                day,
                relaxed_timeout * 2,
            ),
            handoff_timeout: self.duration_or(
                "maintenance.handoff_timeout".into(),
                r.handoff_timeout.as_ref(),
                Duration::from_secs(3600),
                d.handoff_timeout,
            ),
            max_handoff_retries: self.int_or(
                "maintenance.max_handoff_retries".into(),
                r.max_handoff_retries.as_ref(),
                1,
                10,
                d.max_handoff_retries,
            ),
            workers: self.int_or("maintenance.workers".into(), r.workers.as_ref(), 0, 1024, 0)
                as usize,
            queue: self.int_or(
                "maintenance.queue".into(),
                r.queue.as_ref(),
                0,
                1_000_000,
                0,
            ) as usize,
            breaker_failures: self.int_or(
                "maintenance.breaker_failures".into(),
                r.breaker_failures.as_ref(),
                1,
                1000,
                d.breaker_failures,
            ),
            breaker_reset: self.duration_or(
                "maintenance.breaker_reset".into(),
                r.breaker_reset.as_ref(),
                day,
                d.breaker_reset,
            ),
        }
    }
}

/// `200`, `2xx`, or `200-399`.
fn parse_status_range(s: &str) -> Result<(u16, u16), String> {
    let s = s.trim();
    let bad = || {
        format!("invalid status {s:?}: expected a code like 200, a class like 2xx, or a range like 200-399")
    };
    let code = |t: &str| -> Result<u16, String> {
        match t.parse::<u16>() {
            Ok(n) if (100..=599).contains(&n) => Ok(n),
            _ => Err(bad()),
        }
    };
    if let Some(class) = s.strip_suffix("xx") {
        let c = code(&format!("{class}00"))?;
        return Ok((c, c + 99));
    }
    if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (code(a.trim())?, code(b.trim())?);
        if a > b {
            return Err(bad());
        }
        return Ok((a, b));
    }
    let c = code(s)?;
    Ok((c, c))
}

#[cfg(test)]
mod tests {
    use super::parse_status_range;
    use crate::config::{load, Format};

    #[test]
    fn status_ranges() {
        assert_eq!(parse_status_range("200"), Ok((200, 200)));
        assert_eq!(parse_status_range("2xx"), Ok((200, 299)));
        assert_eq!(parse_status_range("200-399"), Ok((200, 399)));
        assert!(parse_status_range("7xx").is_err());
        assert!(parse_status_range("399-200").is_err());
        assert!(parse_status_range("ok").is_err());
    }

    const BASE: &str = "listeners: [ { name: p, address: 127.0.0.1:0 } ]\nadmin: { address: 127.0.0.1:0 }\nroutes: [ { id: r, service: s } ]\n";

    fn errors(services: &str, extra: &str) -> Vec<String> {
        let doc = format!("{BASE}services:\n{services}{extra}");
        match load(&doc, Format::Yaml) {
            Ok(_) => vec![],
            Err(e) => e.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn defaults_apply_and_values_parse() {
        let doc = format!(
            "{BASE}services:\n  - name: s\n    health: {{ path: /hz, interval: 3s, timeout: 500ms, rise: 3, fall: 1, expect_status: 204, initial: healthy }}\n    outlier: {{ consecutive_5xx: 0, base_ejection: 1s, max_ejection: 10s }}\n    circuit: {{ failure_threshold: 2, reset_timeout: 5s, max_requests: 1 }}\n    nodes: [ {{ id: n, address: 127.0.0.1:1 }} ]\nretries: {{ attempts: 5, budget: 0.5, buffer_body: 1MiB }}\n"
        );
        let c = load(&doc, Format::Yaml).unwrap();
        let s = &c.services[0];
        let h = s.health.as_ref().unwrap();
        assert_eq!(
            (h.path.as_str(), h.rise, h.fall, h.expect_status),
            ("/hz", 3, 1, (204, 204))
        );
        assert_eq!(h.initial, crate::node::Health::Healthy);
        assert_eq!(s.outlier.consecutive_5xx, 0);
        assert_eq!(s.outlier.consecutive_failures, 1);
        assert_eq!(s.circuit.failure_threshold, 2);
        assert_eq!(c.retries.attempts, 5);
        assert_eq!(c.retries.buffer_body, 1 << 20);
        let plain = load(
            &format!(
                "{BASE}services: [ {{ name: s, nodes: [ {{ id: n, address: 127.0.0.1:1 }} ] }} ]\n"
            ),
            Format::Yaml,
        )
        .unwrap();
        assert!(plain.services[0].health.is_none());
        assert_eq!(plain.services[0].circuit.max_requests, 3);
        assert_eq!(plain.retries.attempts, 3);
    }

    #[test]
    fn every_bad_value_is_named() {
        let errs = errors(
            "  - name: s\n    health: { path: hz, interval: 0s, timeout: x, rise: 0, fall: 101, expect_status: 7xx, initial: sick }\n    outlier: { consecutive_5xx: -1, base_ejection: 10s, max_ejection: 1s, max_ejected_percent: 101 }\n    circuit: { failure_threshold: 0, reset_timeout: 2, max_requests: 0 }\n    nodes: [ { id: n, address: 127.0.0.1:1 } ]\n",
            "retries: { attempts: 11, budget: 1.5, buffer_body: 1GiB }\nmaintenance: { mode: sometimes, relaxed_timeout: 0s, max_handoff_retries: 11, workers: -1 }\n",
        );
        for path in [
            "services[0].health.path",
            "services[0].health.interval",
            "services[0].health.timeout",
            "services[0].health.rise",
            "services[0].health.fall",
            "services[0].health.expect_status",
            "services[0].health.initial",
            "services[0].outlier.consecutive_5xx",
            "services[0].outlier.max_ejection",
            "services[0].outlier.max_ejected_percent",
            "services[0].circuit.failure_threshold",
            "services[0].circuit.reset_timeout",
            "services[0].circuit.max_requests",
            "retries.attempts",
            "retries.budget",
            "retries.buffer_body",
            "maintenance.mode",
            "maintenance.relaxed_timeout",
            "maintenance.max_handoff_retries",
            "maintenance.workers",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(&format!("{path}:"))),
                "{path} missing in {errs:#?}"
            );
        }
    }
}
