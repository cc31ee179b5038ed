//! The bearer-token check every endpoint but the dashboard goes through
//! (the event stream also takes a ticket): constant-time comparison.
//!
//! Must not touch: what a request may do once admitted.

use http::header::AUTHORIZATION;
use http::Request;

use super::Admin;

/// Whether `req` may use the API: no token configured, or it carries it.
pub(super) fn bearer_ok<B>(admin: &Admin, req: &Request<B>) -> bool {
    admin.token.as_ref().is_none_or(|token| {
        req.headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()))
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
