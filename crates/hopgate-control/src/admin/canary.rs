//! `/admin/v1/config/canary`: the baking (or last decided) canary's status
//! (`GET`), and a decision by hand (`POST …/promote`, `POST …/abort`),
//! through etcd when the canary bakes across the fleet.
//!
//! Must not touch: the judge and the snapshot (`crate::canary` decides).

use http::StatusCode;

use super::respond::{coded_errors, error_response, ok, AdminResponse};
use super::Admin;

/// `GET /admin/v1/config/canary`.
pub(super) fn status(admin: &Admin) -> AdminResponse {
    match crate::control::canary::status_json(admin.control()) {
        Some(v) => ok(&v),
        None => error_response(StatusCode::NOT_FOUND, "canary", "no canary"),
    }
}

/// `POST /admin/v1/config/canary/{promote|abort}`.
pub(super) async fn decide(admin: &Admin, action: &str) -> AdminResponse {
    let control = admin.control();
    let promote = action == "promote";
    if let (Some(etcd), Some(_)) = (admin.fleet_etcd(), control.canary.baking_fleet()) {
        return match crate::control::canary::fleet::decide_from_admin(control, etcd, promote).await
        {
            Ok(v) => ok(&v),
            Err((status, errors)) => coded_errors(status, StatusCode::CONFLICT, &errors),
        };
    }
    match crate::control::canary::decide_from_admin(control, promote).await {
        Some(v) => ok(&v),
        None => error_response(StatusCode::CONFLICT, "canary", "no canary is baking"),
    }
}
