//! Stage two: check a [`RawConfig`] and produce the typed [`Config`].
//!
//! Owns every rule a document must satisfy beyond its shape: addresses,
//! names and references, ranges, units, CIDRs, regexes and the combinations
//! of fields that make sense together. Every check records its problem under
//! the field path it concerns (`routes[2].service`,
//! `services[0].nodes[1].address`) and carries on, so one run reports every
//! error of a document. A missing optional value takes its default; a value
//! that is present but wrong is always an error, never quietly replaced.
//!
//! Must not touch: I/O of any kind. In particular no DNS: node and listener
//! addresses are IP addresses or `localhost`. Must never panic, whatever the
//! input (the admin API feeds it untrusted documents).
//!
//! This file holds the entry point and the [`Validator`] that collects
//! errors; each section is checked in a submodule: `edge` (listeners,
//! admin, access, timeouts, limits), `services`, `routes`, `resilience`
//! (health, outlier, circuit, retries, sessions, store, maintenance,
//! sources) and `values` (the shared value checkers).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::{Config, ConfigError, RawConfig};

mod access_log;
mod auth;
mod canary;
mod discovery;
mod edge;
mod filters;
mod forward_auth;
mod http1;
mod maintenance_guard;
mod pool_limits;
mod proxy_protocol;
mod rate_limits;
mod resilience;
mod route_policy;
mod routes;
mod services;
#[cfg(test)]
mod tests;
mod tls;
mod tracing;
mod upgrade;
mod values;

use values::check_label;

/// Stands in for a value that failed validation; never reaches a caller,
/// because any error makes [`validate`] return `Err`.
pub(super) const PLACEHOLDER_ADDR: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

pub(super) const MAX_WEIGHT: i64 = 10_000;

/// Validates a raw document, returning every problem found, each with its
/// field path.
pub fn validate(raw: &RawConfig) -> Result<Config, Vec<ConfigError>> {
    let mut v = Validator::default();
    let listeners = v.listeners(&raw.listeners);
    let admin = v.admin(raw.admin.as_ref(), &listeners);
    // Services need the idle timeout (pool default) before timeouts are
    // reached in document order; check them aside and report them in place.
    let mut tv = Validator::default();
    let timeouts = tv.timeouts(raw.timeouts.as_ref());
    let fleet = raw.sources.as_ref().is_some_and(|s| s.etcd.is_some());
    let replica_id = raw.replica_id.as_ref().and_then(|r| {
        v.check("replica_id", check_label("replica_id", r))
            .map(|()| r.clone())
    });
    let services = v.services(&raw.services, timeouts.idle, fleet);
    let mut routes = v.routes(&raw.routes, &raw.services);
    let rate_limits = v.rate_limits(&raw.rate_limits);
    v.route_rate_limits(&raw.routes, &rate_limits, &mut routes);
    let access = v.access(raw.access.as_ref());
    v.errors.append(&mut tv.errors);
    let limits = v.limits(raw.limits.as_ref());
    let retries = v.retries(raw.retries.as_ref());
    let sources = v.sources(raw.sources.as_ref());
    let sessions = v.sessions(raw.sessions.as_ref());
    let store = v.store(raw.store.as_ref());
    v.fleet_rate_limits(&rate_limits, store.redis.is_some());
    let maintenance = v.maintenance(raw.maintenance.as_ref());
    let access_log = v.access_log(raw.access_log.as_ref());
    let upgrade = v.upgrade(raw.upgrade.as_ref());
    let canary = v.canary(raw.canary.as_ref());
    let tracing = v.tracing(raw.tracing.as_ref());
    let state_dir = raw
        .state_dir
        .as_ref()
        .and_then(|d| v.check("state_dir", check_state_dir(d)).map(|()| d.clone()));
    if !v.errors.is_empty() {
        return Err(v.errors);
    }
    Ok(Config {
        raw: raw.clone(),
        replica_id,
        listeners: listeners.into_iter().map(|(l, _)| l).collect(),
        admin,
        services,
        routes,
        rate_limits,
        access,
        timeouts,
        limits,
        retries,
        sources,
        sessions,
        store,
        maintenance,
        access_log,
        upgrade,
        canary,
        tracing,
        state_dir,
    })
}

/// `state_dir`: a directory path (it is created at start when missing).
fn check_state_dir(d: &std::path::Path) -> Result<(), String> {
    if d.as_os_str().is_empty() {
        return Err("an empty path: name a directory, or leave state_dir out".into());
    }
    if d.to_str().is_some_and(|s| s.contains('\0')) {
        return Err("a path with a NUL byte".into());
    }
    Ok(())
}

#[derive(Default)]
struct Validator {
    errors: Vec<ConfigError>,
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::new(path, message));
    }

    /// Records `r`'s error under `path`; the value when there is none.
    fn check<T>(&mut self, path: impl Into<String>, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(t) => Some(t),
            Err(m) => {
                self.err(path, m);
                None
            }
        }
    }

    // ----- listeners and admin -----
}
