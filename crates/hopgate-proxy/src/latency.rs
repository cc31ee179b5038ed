//! Durations as a lock-free log-linear histogram: the data plane's one
//! histogram of latencies.
//!
//! Owns [`Histogram`] (one atomic counter per bucket: four buckets per
//! power of two of microseconds, so a quantile read from it is within 25 %
//! of the true value; [`BUCKETS`] of them reach 2^32 µs, about 71 minutes,
//! and anything longer lands in the last), its [`Reading`] (a copy of the
//! counts, differences and sums of readings, quantiles) and
//! [`REQUEST_LATENCY`], every request's duration (recorded by `done.rs`).
//! A config canary's two sides use the same type (`canary.rs`), and the
//! fleet's canary sums readings bucket by bucket in Redis, so the bucket
//! layout is shared by every replica: change it only with the canary's
//! Redis fields in mind. Recording is one `fetch_add`, no lock.
//!
//! Must not touch: exposition formats, I/O.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Number of buckets: four per power of two of microseconds, up to 2^32 µs.
pub const BUCKETS: usize = 128;

/// A histogram of durations, in microseconds.
#[derive(Debug)]
pub(crate) struct Histogram {
    buckets: [AtomicU64; BUCKETS],
}

/// Counts per bucket at one moment (or between two moments, or summed
/// over replicas).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    buckets: [u64; BUCKETS],
}

/// Every request's duration, from its head read to its answer's head.
pub(crate) static REQUEST_LATENCY: Histogram = Histogram::new();

impl Histogram {
    pub(crate) const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; BUCKETS],
        }
    }

    /// Counts one duration.
    #[inline]
    pub(crate) fn record(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn read(&self) -> Reading {
        Reading {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
        }
    }
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new()
    }
}

impl Default for Reading {
    fn default() -> Reading {
        Reading {
            buckets: [0; BUCKETS],
        }
    }
}

impl Reading {
    /// The counts per bucket.
    pub fn buckets(&self) -> &[u64; BUCKETS] {
        &self.buckets
    }

    /// Sets bucket `i`'s count (a sum read back from elsewhere); an `i`
    /// past the last bucket is ignored.
    pub fn set(&mut self, i: usize, n: u64) {
        if let Some(b) = self.buckets.get_mut(i) {
            *b = n;
        }
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &Reading) -> Reading {
        Reading {
            buckets: std::array::from_fn(|i| self.buckets[i].saturating_sub(earlier.buckets[i])),
        }
    }

    /// Adds `other`'s counts.
    pub fn add(&mut self, other: &Reading) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *a += b;
        }
    }

    /// How many durations were counted.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The `q` quantile (0..=1): the upper bound of the bucket holding the
    /// `⌈q·count⌉`-th duration (computed in integers, so 0.99 of 1000 is
    /// the 990th); `None` when nothing was counted.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let ppm = (q.clamp(0.0, 1.0) * 1e6).round() as u128;
        let rank = (ppm * u128::from(total)).div_ceil(1_000_000).max(1);
        let mut seen = 0u128;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += u128::from(*n);
            if seen >= rank {
                return Some(Duration::from_micros(upper_us(i)));
            }
        }
        Some(Duration::from_micros(upper_us(BUCKETS - 1)))
    }
}

/// The bucket of a duration in microseconds: 0..=3 hold 0..=3 µs, then
/// four per power of two.
fn bucket_of(us: u64) -> usize {
    if us < 4 {
        return us as usize;
    }
    let msb = 63 - us.leading_zeros() as usize; // ≥ 2
    let sub = ((us >> (msb - 2)) & 3) as usize;
    (msb * 4 + sub - 4).min(BUCKETS - 1)
}

/// The upper bound (exclusive), in microseconds, of bucket `i`.
fn upper_us(i: usize) -> u64 {
    if i < 4 {
        return i as u64 + 1;
    }
    let msb = (i + 4) / 4;
    let sub = ((i + 4) % 4) as u64;
    (4 + sub + 1) << (msb - 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_bound_their_values() {
        let mut last = 0;
        let mut us = 0u64;
        while us < 1 << 32 {
            let b = bucket_of(us);
            assert!(b >= last, "{us}");
            last = b;
            assert!(
                upper_us(b) > us,
                "{us} in bucket {b} bounded by {}",
                upper_us(b)
            );
            if b > 0 {
                assert!(upper_us(b - 1) <= us, "{us} belongs below bucket {b}");
            }
            // Within 25% of the bound once past the first few buckets.
            if us > 16 {
                assert!(upper_us(b) as f64 <= us as f64 * 1.25 + 1.0, "{us}");
            }
            us = us * 9 / 8 + 1;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_window() {
        let h = Histogram::new();
        let before = h.read();
        assert_eq!(h.read().since(&before).quantile(0.5), None);
        for _ in 0..98 {
            h.record(Duration::from_micros(1000));
        }
        h.record(Duration::from_millis(50));
        h.record(Duration::from_millis(400));
        let window = h.read().since(&before);
        assert_eq!(window.count(), 100);
        let us = |q| window.quantile(q).unwrap().as_micros();
        assert!((1000..1250).contains(&us(0.5)), "{}", us(0.5));
        assert!((50_000..62_500).contains(&us(0.99)), "{}", us(0.99));
        assert!((400_000..500_000).contains(&us(1.0)), "{}", us(1.0));
        // Only the window counts.
        let later = h.read();
        h.record(Duration::from_micros(10));
        assert!(h.read().since(&later).quantile(0.99).unwrap() < Duration::from_micros(16));
    }

    #[test]
    fn readings_add_and_set() {
        let mut a = Reading::default();
        a.set(3, 2);
        a.set(BUCKETS, 9);
        let mut b = a.clone();
        b.add(&a);
        assert_eq!(b.buckets()[3], 4);
        assert_eq!(b.count(), 4);
        assert_eq!(b.since(&a), a);
    }
}
