//! `GET /admin/v1/fleet`: this replica's view of the fleet (replica id,
//! Redis and etcd states, config version), all `off` outside fleet mode,
//! and the share state of each `scope: fleet` rate limit (`rate_limits`).
//!
//! Must not touch: the fleet's state (read only).

use serde_json::json;

use super::respond::{ok, AdminResponse};
use super::Admin;

/// `GET /admin/v1/fleet`.
pub(super) fn get(admin: &Admin) -> AdminResponse {
    let snap = admin.control().snapshot().load();
    let version = snap.version;
    let limits: Vec<_> = snap
        .limiters
        .iter()
        .filter_map(|l| {
            let mut v = super::limits::fleet_json(l.fleet()?);
            v["policy"] = json!(l.config.name);
            Some(v)
        })
        .collect();
    let mut body = match admin.fleet() {
        Some(f) => f.json(version),
        None => json!({
            "replica_id": null,
            "redis": { "state": "off" },
            "etcd": { "state": "off" },
            "config_version": version,
        }),
    };
    body["rate_limits"] = json!(limits);
    ok(&body)
}
