//! `GET /admin/v1/routes`: every route of the running config, in document
//! order, with its match, service and target, whether it is enabled, and
//! its effective policy: each timeout, retry and limit value with where it
//! came from (`route`, `service` or `global`), as the running snapshot
//! resolved it ([`EffectivePolicy`]).
//!
//! Must not touch: the snapshot's routes (read only), the request path.

use serde_json::{json, Value};

use hopgate_core::config::route_policy::{EffectivePolicy, Origin};
use hopgate_core::config::{RouteConfig, Target};
use hopgate_core::retry::StatusSet;
use hopgate_core::units::format_duration;

use super::respond::{ok, AdminResponse};
use super::Admin;

/// `GET /admin/v1/routes`.
pub(super) fn list(admin: &Admin) -> AdminResponse {
    let snap = admin.control().snapshot().load();
    let config = &snap.config;
    let routes: Vec<Value> = config
        .routes
        .iter()
        .zip(&config.raw.routes)
        .zip(&snap.routes)
        .map(|((route, raw), compiled)| {
            let service = config.services.get(route.service).map(|s| s.name.as_str());
            json!({
                "id": route.id,
                "enabled": route.enabled,
                "priority": route.priority,
                "match": raw.matches,
                "service": service,
                "target": target_json(route),
                "policy": policy_json(&compiled.policy),
            })
        })
        .collect();
    ok(&json!({ "version": snap.version, "routes": routes }))
}

/// Where the route sends: the whole service, one version, or a split.
fn target_json(route: &RouteConfig) -> Value {
    let split = |arms: &[(String, u32)]| -> Vec<Value> {
        arms.iter()
            .map(|(v, w)| json!({ "version": v, "weight": w }))
            .collect()
    };
    match &route.target {
        Target::Service => json!({ "kind": "service" }),
        Target::Version(v) => {
            json!({ "kind": "version", "version": v, "strict": route.strict_version })
        }
        Target::Split(arms) => {
            json!({ "kind": "split", "split": split(arms), "strict": route.strict_version })
        }
    }
}

/// One effective value and its origin.
fn valued(value: Value, from: Origin) -> Value {
    json!({ "value": value, "from": from.as_str() })
}

fn statuses(set: StatusSet) -> Value {
    json!(set.iter().collect::<Vec<u16>>())
}

/// The route's effective timeouts, retries and limits (durations as
/// config files write them; `request: null`: no bound across attempts).
fn policy_json(p: &EffectivePolicy) -> Value {
    let f = &p.from;
    json!({
        "timeouts": {
            "request": valued(json!(p.request.map(format_duration)), f.request),
            "attempt": valued(json!(format_duration(p.attempt)), f.attempt),
            "idle": valued(json!(format_duration(p.idle)), f.idle),
        },
        "retries": {
            "attempts": valued(json!(p.attempts), f.attempts),
            "on_status": valued(statuses(p.retry_on.any), f.on_status),
            "on_status_idempotent": valued(statuses(p.retry_on.idempotent), f.on_status_idempotent),
            "budget": valued(json!(p.budget), f.budget),
        },
        "limits": {
            "max_body_bytes": valued(json!(p.max_body_bytes), f.max_body_bytes),
        },
    })
}
