//! The clock of live state: milliseconds since the process started.
//!
//! Owns [`now_ms`] and [`ms_at`], the one time scale every deadline in node
//! state (ejection, breaker, drain start, relaxed timeouts) is written in.
//! The breaker and the outlier detector never read the clock themselves:
//! callers pass `now_ms` in, so tests drive time by hand.
//!
//! Must not touch: anything but `std::time::Instant` (no tokio timers).

use std::sync::OnceLock;
use std::time::Instant;

/// Milliseconds since the first call in this process; monotonic.
pub fn now_ms() -> u64 {
    ms_at(Instant::now())
}

/// [`now_ms`] for an instant already read: the request path reads the
/// clock once and derives what it needs from that.
pub fn ms_at(at: Instant) -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    at.saturating_duration_since(*START.get_or_init(Instant::now))
        .as_millis() as u64
}
