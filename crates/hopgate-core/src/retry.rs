//! Retry policy: which failed attempts may be tried again, and how many
//! retries the fleet can afford.
//!
//! Owns the idempotency rule and [`RetryBudget`], a
//! lock-free token bucket: every request deposits `budget` of a token, every
//! retry withdraws one, so retries stay below `budget` × recent requests
//! (plus a small floor, so a quiet service can still retry). A dying fleet
//! is therefore not stormed by its own clients' retries.
//!
//! Must not touch: I/O; the proxy runs the loop, this module only decides.

use std::sync::atomic::{AtomicI64, Ordering};

use http::header::HeaderName;
use http::{HeaderMap, Method};

/// `Idempotency-Key`, made once (a `&str` key is parsed into a header name
/// on every lookup).
static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// One retry, in milli-tokens.
const TOKEN: i64 = 1000;
/// Retries always affordable, even without recent traffic.
const FLOOR_TOKENS: i64 = 10 * TOKEN;
/// At most this many retries can be banked, so the budget follows recent
/// traffic rather than everything since start (at a 0.2 budget: the last
/// ~500 requests).
const MAX_TOKENS: i64 = 100 * TOKEN;

/// Methods RFC 9110 calls idempotent.
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::PUT | Method::DELETE | Method::TRACE
    )
}

/// May a request that possibly reached a backend be sent again? Only an
/// idempotent method, or one carrying `Idempotency-Key`.
pub fn replay_safe(method: &Method, headers: &HeaderMap) -> bool {
    is_idempotent(method) || headers.contains_key(&IDEMPOTENCY_KEY)
}

/// A set of HTTP statuses (100–599), one bit each: a membership test is a
/// shift and a mask, and whether the set is empty is one byte, kept as
/// statuses are added (the request path asks it of every request; comparing
/// the 64 bytes of bits was a call to `bcmp` each time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusSet {
    bits: [u64; 8],
    /// At least one status is in the set.
    any: bool,
}

impl StatusSet {
    /// Adds `status`; statuses outside 100–599 are ignored (validation
    /// refuses them).
    pub fn insert(&mut self, status: u16) {
        if let Some(i) = status.checked_sub(100).filter(|i| *i < 500) {
            self.bits[usize::from(i / 64)] |= 1 << (i % 64);
            self.any = true;
        }
    }

    pub fn contains(&self, status: u16) -> bool {
        status
            .checked_sub(100)
            .filter(|i| *i < 500)
            .is_some_and(|i| self.bits[usize::from(i / 64)] & (1 << (i % 64)) != 0)
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.any
    }

    /// The statuses in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (100..600).filter(|s| self.contains(*s))
    }
}

impl FromIterator<u16> for StatusSet {
    fn from_iter<I: IntoIterator<Item = u16>>(iter: I) -> Self {
        let mut set = StatusSet::default();
        for s in iter {
            set.insert(s);
        }
        set
    }
}

/// `services[].retries`: answers that mean the backend did not process the
/// request, retried on another node while no byte of the answer went to
/// the client (within `retries.attempts` and the retry budget).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryOnStatus {
    /// `on_status`: retried for every method (a draining backend's 503).
    pub any: StatusSet,
    /// `on_status_idempotent`: retried only for a replay-safe request
    /// (502/504 from a backend's own proxy).
    pub idempotent: StatusSet,
}

impl RetryOnStatus {
    /// Is `status` a "not processed" answer for this request?
    pub fn retries(&self, status: u16, replay_safe: bool) -> bool {
        self.any.contains(status) || (replay_safe && self.idempotent.contains(status))
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.any.is_empty() && self.idempotent.is_empty()
    }
}

/// A service's retry budget.
#[derive(Debug)]
pub struct RetryBudget {
    tokens: AtomicI64,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            tokens: AtomicI64::new(FLOOR_TOKENS),
        }
    }
}

impl RetryBudget {
    /// Called once per request: earns `ratio` of a retry.
    pub fn deposit(&self, ratio: f64) {
        let add = (ratio * TOKEN as f64) as i64;
        if add <= 0 {
            return;
        }
        let prev = self.tokens.fetch_add(add, Ordering::Relaxed);
        if prev + add > MAX_TOKENS {
            // Clamp; a racing deposit may overshoot a little, harmlessly.
            self.tokens
                .fetch_sub(prev + add - MAX_TOKENS, Ordering::Relaxed);
        }
    }

    /// Called before each retry: false when the budget is spent.
    pub fn try_withdraw(&self) -> bool {
        let prev = self.tokens.fetch_sub(TOKEN, Ordering::Relaxed);
        if prev >= TOKEN {
            true
        } else {
            self.tokens.fetch_add(TOKEN, Ordering::Relaxed);
            false
        }
    }

    /// Whole retries currently affordable.
    pub fn available(&self) -> i64 {
        self.tokens.load(Ordering::Relaxed) / TOKEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency() {
        for m in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::PUT,
            Method::DELETE,
            Method::TRACE,
        ] {
            assert!(is_idempotent(&m), "{m}");
        }
        assert!(!is_idempotent(&Method::POST));
        assert!(!is_idempotent(&Method::PATCH));
        let mut h = HeaderMap::new();
        assert!(!replay_safe(&Method::POST, &h));
        h.insert("idempotency-key", "k1".parse().unwrap());
        assert!(replay_safe(&Method::POST, &h));
    }

    #[test]
    fn budget_bounds_retries_by_traffic() {
        let b = RetryBudget::default();
        // The floor: 10 retries without any traffic.
        let mut n = 0;
        while b.try_withdraw() {
            n += 1;
        }
        assert_eq!(n, 10);
        // 100 requests at 20 % earn 20 retries.
        for _ in 0..100 {
            b.deposit(0.2);
        }
        let mut n = 0;
        while b.try_withdraw() {
            n += 1;
        }
        assert_eq!(n, 20);
        // A zero budget earns nothing.
        for _ in 0..100 {
            b.deposit(0.0);
        }
        assert!(!b.try_withdraw());
        // Banked retries are capped.
        for _ in 0..100_000 {
            b.deposit(1.0);
        }
        assert_eq!(b.available(), 100);
    }
}
