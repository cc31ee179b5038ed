//! `GET /admin/v1/fleet`: this replica's view of the fleet (replica id,
//! Redis and etcd states, config version), all `off` outside fleet mode.
//!
//! Must not touch: the fleet's state (read only).

use serde_json::json;

use super::respond::{ok, AdminResponse};
use super::Admin;

/// `GET /admin/v1/fleet`.
pub(super) fn get(admin: &Admin) -> AdminResponse {
    let version = admin.control().snapshot().load().version;
    let body = match admin.fleet() {
        Some(f) => f.json(version),
        None => json!({
            "replica_id": null,
            "redis": { "state": "off" },
            "etcd": { "state": "off" },
            "config_version": version,
        }),
    };
    ok(&body)
}
