//! The validated form of `rate_limits[]` (see [`crate::limit`] for the
//! buckets themselves). Two policies with the same name and equal
//! parameters are the same policy: a reload keeps its buckets.

use std::time::Duration;

/// `rate_limits[]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitConfig {
    pub name: String,
    /// The parts of a bucket's key, in the order written (at least one,
    /// none twice).
    pub key: Vec<LimitKey>,
    /// Token bucket: `None` when the policy only bounds in-flight requests.
    pub rate: Option<Rate>,
    pub mode: LimitMode,
    /// Whose sum the rate bounds: this replica's, or the fleet's.
    pub scope: LimitScope,
    /// Concurrent requests per key at most.
    pub max_in_flight: Option<u32>,
}

/// One part of a bucket's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address (after PROXY protocol and trusted
    /// `X-Forwarded-For`).
    ClientIp,
    /// A request header's value (empty when absent).
    Header(http::HeaderName),
    /// A cookie's value (empty when absent).
    Cookie(String),
    /// The session id of a client that came with a valid token; a client
    /// without one is keyed by its address.
    Session,
    /// The route's id.
    Route,
}

impl LimitKey {
    /// Its value may be a secret (shown hashed by the admin API).
    pub fn is_secret(&self) -> bool {
        matches!(
            self,
            LimitKey::Header(_) | LimitKey::Cookie(_) | LimitKey::Session
        )
    }
}

/// `tokens` refilled every `per`, `burst` at most in a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub tokens: u32,
    pub per: Duration,
    pub burst: u32,
}

impl Rate {
    /// Nanoseconds between two tokens (at least 1).
    pub fn interval_ns(&self) -> u64 {
        (self.per.as_nanos() as u64 / u64::from(self.tokens.max(1))).max(1)
    }

    /// `per` in whole seconds (the `w` of `RateLimit-Policy`).
    pub fn window_secs(&self) -> u64 {
        self.per.as_secs()
    }
}

/// `rate_limits[].scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitScope {
    /// Each replica keeps its own buckets.
    Local,
    /// The replicas share each key's rate through Redis (see
    /// [`crate::limit`]'s fleet share).
    Fleet,
}

/// `rate_limits[].mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitMode {
    /// Over the limit: 429.
    Enforce,
    /// Over the limit: counted and logged, the request goes through.
    Log,
}
