//! `GET /admin/v1/limits?top=N`: every rate-limit policy of the running
//! config with its parameters, the routes that use it, its counters, and
//! its `N` fullest keys (10 unless `top` says otherwise, at most 100):
//! the keys with the fewest tokens left, then the most requests in
//! flight. A key shows the client address and the route when it holds
//! them; a key holding a header, a cookie or a session id shows only an
//! 8-hex-digit prefix of its keyed hash (the values may be credentials).
//! A `scope: fleet` policy also shows its share state (`fleet`, as in
//! `GET /admin/v1/fleet`).
//!
//! Must not touch: the limiters (read only).

use std::time::Instant;

use http::Uri;
use serde_json::{json, Value};

use hopgate_core::config::{LimitKey, LimitMode, LimitScope, RateLimitConfig};
use hopgate_core::limit::{ns_at, FleetView, KeyFill, RateLimiter, MAX_KEYS};

use super::query::Query;
use super::respond::{ok, AdminResponse};
use super::Admin;

/// `GET /admin/v1/limits`.
pub(super) fn list(admin: &Admin, uri: &Uri) -> AdminResponse {
    let top = Query::of(uri)
        .first("top")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(10)
        .min(100);
    let snap = admin.control().snapshot().load();
    let now = ns_at(Instant::now());
    let policies: Vec<Value> = snap
        .limiters
        .iter()
        .map(|l| {
            let routes: Vec<&str> = snap
                .routes
                .iter()
                .filter(|r| {
                    r.rate_limit
                        .as_ref()
                        .is_some_and(|x| std::sync::Arc::ptr_eq(x, l))
                })
                .map(|r| r.id.as_str())
                .collect();
            let keys: Vec<Value> = l
                .fullest(top, now)
                .iter()
                .map(|k| key_json(l, k, &snap))
                .collect();
            let mut p = policy_json(&l.config);
            p["routes"] = json!(routes);
            p["counters"] = counters_json(l);
            p["max_keys"] = json!(MAX_KEYS);
            p["keys"] = json!(keys);
            if let Some(f) = l.fleet() {
                p["fleet"] = fleet_json(f);
            }
            p
        })
        .collect();
    ok(&json!({ "version": snap.version, "policies": policies }))
}

/// A policy's parameters as written.
fn policy_json(c: &RateLimitConfig) -> Value {
    let key: Vec<Value> = c
        .key
        .iter()
        .map(|k| match k {
            LimitKey::ClientIp => json!("client_ip"),
            LimitKey::Session => json!("session"),
            LimitKey::Route => json!("route"),
            LimitKey::Header(h) => json!({ "header": h.as_str() }),
            LimitKey::Cookie(n) => json!({ "cookie": n }),
        })
        .collect();
    let rate = c.rate.map(|r| {
        let unit = match r.per.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        };
        format!("{}/{unit}", r.tokens)
    });
    json!({
        "name": c.name,
        "key": key,
        "rate": rate,
        "burst": c.rate.map(|r| r.burst),
        "scope": match c.scope { LimitScope::Local => "local", LimitScope::Fleet => "fleet" },
        "mode": match c.mode { LimitMode::Enforce => "enforce", LimitMode::Log => "log" },
        "max_in_flight": c.max_in_flight,
    })
}

/// A fleet policy's share state: `shared` (through Redis), `fallback`
/// (Redis away: `rate ÷ live_replicas` here) or `starting` (no sync yet).
pub(super) fn fleet_json(f: FleetView) -> Value {
    let state = match (f.shared, f.fallback) {
        (true, _) => "shared",
        (_, true) => "fallback",
        _ => "starting",
    };
    json!({
        "state": state,
        "live_replicas": f.live,
        "hot_keys": f.hot_keys,
        "fallbacks": f.fallbacks,
        "sync_errors": f.sync_errors,
    })
}

fn counters_json(l: &RateLimiter) -> Value {
    use std::sync::atomic::Ordering::Relaxed;
    let c = &l.counters;
    json!({
        "limited": c.limited.load(Relaxed),
        "in_flight_limited": c.in_flight_limited.load(Relaxed),
        "logged": c.logged.load(Relaxed),
        "in_flight_logged": c.in_flight_logged.load(Relaxed),
        "overflow": c.overflow.load(Relaxed),
    })
}

/// One key: what it may show, its bucket here (`burst`, or a fleet
/// policy's share of it), its tokens used and left, its fill (used ÷
/// bucket, 0 to 1), its requests in flight.
fn key_json(l: &RateLimiter, k: &KeyFill, snap: &hopgate_proxy::Snapshot) -> Value {
    let burst = k.burst;
    let secret = l.config.key.iter().any(LimitKey::is_secret);
    let route = k
        .route
        .and_then(|r| snap.routes.get(r))
        .map(|r| r.id.as_str());
    json!({
        "client_ip": k.ip.map(|ip| ip.to_string()),
        "route": route,
        "hash": secret.then(|| format!("{:08x}", k.key >> 32)),
        "overflow": k.overflow,
        "bucket": burst,
        "used": k.used,
        "remaining": burst.saturating_sub(k.used),
        "fill": if burst == 0 { 0.0 } else { f64::from(k.used) / f64::from(burst) },
        "in_flight": k.in_flight,
    })
}
