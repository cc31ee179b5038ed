//! `/admin/v1/nodes`: every node's live state (`GET`), and drain or
//! undrain by hand (`POST …/{service}/{node}/{drain|undrain}`), published
//! to the fleet through etcd when there is one.
//!
//! Must not touch: node state other than the drain flag.

use http::StatusCode;
use serde_json::{json, Value};

use hopgate_store::Sessions;

use super::respond::{error_response, ok, AdminResponse};
use super::Admin;
use crate::control::Control;

/// `GET /admin/v1/nodes`.
pub(super) fn list(admin: &Admin) -> AdminResponse {
    ok(&nodes_json(admin.control(), admin.sessions()))
}

/// `POST /admin/v1/nodes/{service}/{node}/{drain|undrain}`.
pub(super) async fn drain(admin: &Admin, service: &str, node: &str, action: &str) -> AdminResponse {
    let snap = admin.control().snapshot().load();
    let found = snap
        .services
        .iter()
        .find(|s| s.name == service)
        .and_then(|s| s.nodes.iter().find(|n| n.id == node));
    let Some(n) = found else {
        return error_response(
            StatusCode::NOT_FOUND,
            "node",
            &format!("no node {node:?} in service {service:?}"),
        );
    };
    let drain = action == "drain";
    n.state.set_draining(drain);
    tracing::info!(service, node, drain, "node drain state changed by admin");
    let state = n.state.clone();
    drop(snap);
    // Fleet mode: every replica (this one too) applies it from its etcd
    // watch; the local change above makes this replica's answer true at
    // once.
    let mut body = json!({ "service": service, "node": node, "draining": state.is_draining(), "fleet": admin.fleet_etcd().is_some() });
    if let Some(etcd) = admin.fleet_etcd() {
        if let Err(e) = etcd.post_drain(service, node, drain).await {
            tracing::warn!(service, node, error = %e, "drain not published to the fleet; applied on this replica only");
            body["fleet"] = json!("not_shared");
            body["message"] = json!(format!(
                "applied on this replica only; the fleet did not get it: {e}. It is published to the fleet when this replica reaches etcd again"
            ));
        }
    }
    ok(&body)
}

fn nodes_json(control: &Control, sessions: Option<&Sessions>) -> Value {
    let snap = control.snapshot().load();
    let now = hopgate_core::node::now_ms();
    let nodes: Vec<Value> = snap
        .services
        .iter()
        .flat_map(|svc| {
            svc.nodes.iter().enumerate().map(move |(i, n)| {
                let s = &n.state;
                json!({
                    "service": svc.name,
                    "id": n.id,
                    "address": n.address.to_string(),
                    "version": n.version,
                    "weight": n.weight,
                    // Member i of `all` is node i; 100 when warm or off.
                    "slow_start_percent": svc.all.balancer.ramp_of(i, now) / 10,
                    "health": s.health(),
                    "draining": s.is_draining(),
                    "ejected": s.is_ejected(now),
                    "available": s.is_available(now),
                    "circuit": s.circuit(),
                    "circuit_opened": s.circuit_opened(),
                    "ejections": s.ejected_total(),
                    "in_flight": s.in_flight(),
                    "requests": s.requests(),
                    "failures": s.failures(),
                    "latency_ewma_us": s.ewma_us(),
                    "pool": n.upstream.pool_if_set().map(|p| p.stats()),
                    "sessions_bound": sessions.map_or(0, |x| x.store.bindings_to(&svc.name, &n.id)),
                    "maintenance": {
                        "relaxed": s.is_relaxed(now),
                        "moved_to": s.moved_to().map(|a| a.to_string()),
                        "unreachable": s.is_unreachable(),
                    },
                })
            })
        })
        .collect();
    json!({ "version": snap.version, "nodes": nodes, "dns": crate::dns::admin_json(control) })
}
