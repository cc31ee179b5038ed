//! `POST /admin/v1/maintenance` with `{"service","node","kind","seq","to","in"}`:
//! a notification to the intake (trusted), then published to the fleet
//! through etcd when there is one.
//!
//! Must not touch: node state (the intake, [`Maintenance`], applies).

use std::sync::Arc;

use http::{Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::respond::{error_response, errors_response, json_response, ok, AdminResponse};
use super::Admin;
use crate::maintenance::{Maintenance, Refused};

/// The largest body taken.
const MAX_BODY: usize = 64 << 10;

/// `POST /admin/v1/maintenance`.
pub(super) async fn post(admin: &Admin, req: Request<Incoming>) -> AdminResponse {
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                "",
                "body unreadable or larger than 64 KiB",
            )
        }
    };
    let Some(m) = admin.maintenance() else {
        return error_response(StatusCode::NOT_FOUND, "", "maintenance intake not running");
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, "", &format!("not JSON: {e}")),
    };
    intake(admin, m, &v).await
}

/// The notification `v` through the intake, and to the fleet once applied.
async fn intake(admin: &Admin, m: &Arc<Maintenance>, v: &Value) -> AdminResponse {
    let n = match crate::maintenance::notice::parse(v) {
        Ok(n) => n,
        Err(errors) => return errors_response(StatusCode::BAD_REQUEST, &errors),
    };
    let (service, node, seq) = (n.service.clone(), n.node.clone(), n.seq);
    match m.intake(n) {
        Ok(applied) => {
            // Fleet mode: publish it once applied here; every replica's
            // watch feeds it to its intake, and this one drops it (same seq).
            let mut body = json!({ "applied": applied, "fleet": admin.fleet_etcd().is_some() });
            if let Some(etcd) = admin.fleet_etcd() {
                if let Err(e) = etcd.post_maintenance(&service, &node, seq, v).await {
                    tracing::warn!(service, node, error = %e, "maintenance notice not published to the fleet; applied on this replica only");
                    body["fleet"] = json!("not_shared");
                    body["message"] = json!(format!(
                        "applied on this replica only; the fleet did not get it: {e}. A notice is not published later: post it to each replica, or again once etcd answers"
                    ));
                }
            }
            ok(&body)
        }
        Err(Refused::Invalid(msg)) => error_response(StatusCode::BAD_REQUEST, "", &msg),
        Err(Refused::UnknownNode) => error_response(
            StatusCode::NOT_FOUND,
            "node",
            "no such node in that service",
        ),
        Err(r @ Refused::Duplicate { .. }) => json_response(
            StatusCode::CONFLICT,
            &json!({ "errors": [{ "path": "seq", "message": "duplicate: sequence number already seen for this node" }], "refused": r }),
        ),
        Err(r) => json_response(
            StatusCode::CONFLICT,
            &json!({ "errors": [{ "path": "", "message": format!("not applied: {}", r.label()) }], "refused": r }),
        ),
    }
}
