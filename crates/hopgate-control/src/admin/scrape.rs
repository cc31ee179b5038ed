//! `GET /metrics`: the one `/metrics` registry (built at the first
//! scrape, `crate::metrics::registry`) encoded in the format the
//! `Accept` header asks for.
//!
//! Must not touch: metric names and values (`crate::metrics`,
//! `crate::exposition`).

use std::sync::Arc;

use http::HeaderMap;

use super::respond::AdminResponse;
use super::Admin;

/// `GET /metrics`.
pub(super) fn metrics(admin: &Admin, headers: &HeaderMap) -> AdminResponse {
    let registry = admin.metrics.get_or_init(|| {
        crate::metrics::registry(
            Arc::clone(&admin.control),
            admin.sessions.clone(),
            admin.maintenance.clone(),
            Arc::clone(&admin.fleet),
        )
    });
    crate::exposition::respond(registry, headers)
}
