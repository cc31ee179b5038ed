//! `GET /livez` (the process answers) and `GET /readyz` (503 once shutdown
//! has begun).
//!
//! Must not touch: anything but the ready flag.

use http::StatusCode;

use super::respond::{text_response, AdminResponse};
use super::Admin;

/// `GET /livez`.
pub(super) fn livez() -> AdminResponse {
    text_response(StatusCode::OK, "ok\n")
}

/// `GET /readyz`.
pub(super) fn readyz(admin: &Admin) -> AdminResponse {
    if admin.is_ready() {
        text_response(StatusCode::OK, "ready\n")
    } else {
        text_response(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
    }
}
