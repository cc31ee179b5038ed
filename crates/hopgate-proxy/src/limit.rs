//! Phase 9½: the route's rate limit (`routes[].rate_limit`), and what it
//! leaves behind: the 429's headers and the in-flight guard a request
//! carries to its end.
//!
//! Owns [`admit`] (the key's parts from the request, the limiter's
//! decision), [`refusal_headers`] (`Retry-After` and the IETF
//! `RateLimit-Policy`/`RateLimit` fields, draft-ietf-httpapi-ratelimit-
//! headers-09) and [`hold`] (the guard rides in the answer's body until
//! it ends); also [`admit_connection`], a client's place among its open
//! connections (`limits.max_connections_per_client`). Must not touch:
//! the buckets (`hopgate_core::limit` owns them), the snapshot beyond the
//! route's and the connections' limiters, a lock.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::Response;

use hopgate_core::limit::{ns_at, Decision, Held, RateLimiter, Who};
use hopgate_core::snapshot::CompiledRoute;

use crate::body::ProxyBody;

static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// A request the limit refused: seconds until a token is there (0 when
/// `max_in_flight` refused it: no quota to announce).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Refused {
    pub(crate) retry_after: u32,
}

/// The route's limiter's decision for this request: through (with the
/// in-flight guard of a policy with `max_in_flight`), or refused.
/// `session`: the id of a session the client came with.
#[inline]
pub(crate) fn admit(
    route: &CompiledRoute,
    index: usize,
    client_ip: IpAddr,
    headers: &HeaderMap,
    session: Option<&[u8]>,
    started: Instant,
) -> Result<Option<Held>, Refused> {
    let Some(limiter) = &route.rate_limit else {
        return Ok(None);
    };
    let who = Who {
        client_ip,
        route_id: &route.id,
        route: index,
        headers,
        session,
    };
    match limiter.admit(&who, ns_at(started)) {
        Decision::Pass(held) => Ok(held),
        Decision::Limited { retry_after } => Err(Refused {
            retry_after: u32::try_from(retry_after).unwrap_or(u32::MAX),
        }),
        Decision::TooManyInFlight => Err(Refused { retry_after: 0 }),
    }
}

/// The headers of a 429: `Retry-After` (seconds; 1 for an in-flight
/// refusal), and for a refusal by rate `RateLimit-Policy: "name";q=B;w=W`
/// (the bucket's size and window) and `RateLimit: "name";r=0;t=S`.
pub(crate) fn refusal_headers(h: &mut HeaderMap, limiter: &RateLimiter, refused: Refused) {
    h.insert(RETRY_AFTER, HeaderValue::from(refused.retry_after.max(1)));
    let Some((q, w)) = limiter.quota().filter(|_| refused.retry_after > 0) else {
        return;
    };
    let name = &limiter.config.name;
    if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";q={q};w={w}")) {
        h.insert(RATELIMIT_POLICY.clone(), v);
    }
    let t = refused.retry_after;
    if let Ok(v) = HeaderValue::from_str(&format!("\"{name}\";r=0;t={t}")) {
        h.insert(RATELIMIT.clone(), v);
    }
}

/// Keeps `held` until the answer's body ends (at once for an answer
/// without one).
pub(crate) fn hold(resp: &mut Response<ProxyBody>, held: Held) {
    use http_body::Body as _;
    if resp.body().is_end_stream() {
        return;
    }
    ProxyBody::wrap_in(resp, |inner| ProxyBody::held(inner, held));
}

/// `limits.max_connections_per_client`: the client's place among its open
/// connections, held until the connection ends (`Some(None)` without the
/// bound); `None` when it has as many open as allowed: the connection is
/// closed, counted (`hopgate_client_connections_refused_total`).
pub(crate) fn admit_connection(
    limiter: Option<&std::sync::Arc<RateLimiter>>,
    client: SocketAddr,
) -> Option<Option<Held>> {
    let Some(limiter) = limiter else {
        return Some(None);
    };
    let headers = HeaderMap::new();
    let who = Who {
        client_ip: client.ip(),
        route_id: "",
        route: 0,
        headers: &headers,
        session: None,
    };
    match limiter.admit(&who, ns_at(Instant::now())) {
        Decision::Pass(held) => Some(held),
        Decision::Limited { .. } | Decision::TooManyInFlight => {
            tracing::debug!(%client, "limits.max_connections_per_client reached; connection closed");
            None
        }
    }
}
