//! Request durations, as a lock-free histogram.
//!
//! Owns [`REQUEST_LATENCY`]: one atomic counter per log-scale bucket (four
//! buckets per power of two of microseconds, so a quantile read from it is
//! within 19% of the true value). Recording is one `fetch_add`; readers
//! (the dashboard's `stats` events) take a [`Snapshot`] and read quantiles
//! from the difference of two snapshots.
//!
//! Must not touch: exposition formats, I/O.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Buckets per power of two.
const SUB: u32 = 4;
/// Powers of two covered (2^40 µs is about 12 days; longer lands in the last).
const OCTAVES: u32 = 40;
/// Number of buckets.
pub const BUCKETS: usize = (SUB * OCTAVES) as usize;

/// A histogram of durations in microseconds.
pub struct Latency {
    buckets: [AtomicU64; BUCKETS],
}

/// Counts per bucket at one moment.
pub type Snapshot = [u64; BUCKETS];

/// Every request's duration, from its head read to its answer's head.
pub static REQUEST_LATENCY: Latency = Latency::new();

impl Latency {
    pub const fn new() -> Latency {
        Latency {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
        }
    }

    /// Counts one duration.
    #[inline]
    pub fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.buckets[index(us)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

/// The bucket of `us` microseconds: 0..=3 hold 0..=3 µs, then four per
/// power of two (of `us + 4`).
fn index(us: u64) -> usize {
    let v = us.saturating_add(4);
    let e = 63 - v.leading_zeros();
    let sub = (v >> (e - 2)) & 3;
    (((e - 2) * SUB) as usize + sub as usize).min(BUCKETS - 1)
}

/// The smallest `us + 4` that lands in bucket `i`.
fn lower(i: usize) -> u64 {
    (4 + (i % SUB as usize) as u64) << (i / SUB as usize)
}

/// The largest duration (µs) counted in bucket `i`.
pub fn upper_us(i: usize) -> u64 {
    if i + 1 >= BUCKETS {
        return u64::MAX;
    }
    lower(i + 1) - 5
}

/// The `q` quantile (0..=1) of the durations counted between `before` and
/// `after`, as the upper bound of its bucket in µs; `None` when there were
/// none.
pub fn quantile(before: &Snapshot, after: &Snapshot, q: f64) -> Option<u64> {
    let delta = |i: usize| after[i].saturating_sub(before[i]);
    let total: u64 = (0..BUCKETS).map(delta).sum();
    if total == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for i in 0..BUCKETS {
        seen += delta(i);
        if seen >= rank {
            return Some(upper_us(i));
        }
    }
    Some(upper_us(BUCKETS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_duration_falls_in_a_bucket_that_bounds_it() {
        let mut us = 0u64;
        while us < 1 << 36 {
            let i = index(us);
            assert!(us <= upper_us(i), "{us} above bucket {i}'s bound");
            if i > 0 {
                assert!(us > upper_us(i - 1), "{us} belongs below bucket {i}");
            }
            // Within 25% of the bound once past the first few buckets.
            if us > 16 {
                assert!(upper_us(i) as f64 <= us as f64 * 1.25 + 1.0);
            }
            us = us * 9 / 8 + 1;
        }
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_window() {
        let h = Latency::new();
        let before = h.snapshot();
        assert_eq!(quantile(&before, &h.snapshot(), 0.5), None);
        for _ in 0..98 {
            h.record(Duration::from_micros(1000));
        }
        h.record(Duration::from_millis(50));
        h.record(Duration::from_millis(400));
        let after = h.snapshot();
        let p50 = quantile(&before, &after, 0.5).unwrap();
        assert!((1000..1250).contains(&p50), "{p50}");
        let p99 = quantile(&before, &after, 0.99).unwrap();
        assert!((50_000..62_500).contains(&p99), "{p99}");
        let max = quantile(&before, &after, 1.0).unwrap();
        assert!((400_000..500_000).contains(&max), "{max}");
        // Only the window counts.
        let later = h.snapshot();
        h.record(Duration::from_micros(10));
        assert!(quantile(&later, &h.snapshot(), 0.99).unwrap() < 16);
    }
}
