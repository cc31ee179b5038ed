//! `GET /admin/v1/sessions/{id}`: a session's bindings (one per service it
//! talked to), by session id (32 hex digits) or token.
//!
//! Must not touch: the bindings (read only).

use http::StatusCode;
use serde_json::{json, Value};

use hopgate_core::session::{binding_key, unix_now, SessionId};

use super::respond::{error_response, ok, AdminResponse};
use super::Admin;

/// `GET /admin/v1/sessions/{id}`.
pub(super) fn get(admin: &Admin, id: &str) -> AdminResponse {
    let Some(sessions) = admin.sessions() else {
        return error_response(
            StatusCode::NOT_FOUND,
            "sessions",
            "sessions are not enabled",
        );
    };
    let parsed = SessionId::parse_hex(id).ok().or_else(|| {
        let snap = admin.control().snapshot().load();
        hopgate_core::session::verify(
            &sessions.keys,
            id,
            unix_now(),
            snap.config.sessions.ttl.as_secs(),
        )
        .ok()
        .map(|t| t.id)
    });
    let Some(sid) = parsed else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "id",
            "not a session id (32 hex digits) or a valid token",
        );
    };
    let snap = admin.control().snapshot().load();
    let now = unix_now();
    let bindings: Vec<Value> = snap
        .services
        .iter()
        .filter_map(|svc| {
            let b = sessions.store.get(&binding_key(&sid, &svc.name), now)?;
            Some(json!({
                "service": &*b.service,
                "node": &*b.node,
                "bound_at": b.bound_at,
                "hops": b.hops,
                "context_bytes": b.context_len(),
                "expires_at": b.expires_at,
            }))
        })
        .collect();
    if bindings.is_empty() {
        return error_response(StatusCode::NOT_FOUND, "id", "no binding for this session");
    }
    ok(&json!({ "session": sid.to_string(), "bindings": bindings }))
}
