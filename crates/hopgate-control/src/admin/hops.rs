//! `GET /admin/v1/hops?limit=N`: the most recent hops, newest first (100
//! unless `limit` says otherwise, at most the data plane's ring).
//!
//! Must not touch: the hop ring (read through the proxy's telemetry).

use http::Uri;
use serde_json::json;

use hopgate_proxy::telemetry::{recent_hops, RECENT_HOPS};

use super::query::Query;
use super::respond::{ok, AdminResponse};

/// `GET /admin/v1/hops`.
pub(super) fn recent(uri: &Uri) -> AdminResponse {
    let limit = Query::of(uri)
        .first("limit")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(100)
        .min(RECENT_HOPS);
    ok(&json!({ "hops": recent_hops(limit) }))
}
