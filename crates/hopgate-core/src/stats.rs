//! Per-route request counters, reached from the snapshot.
//!
//! Owns [`RouteStats`] (responses by status class, the request-duration and
//! upstream-duration histograms of one route, whose labels are the route
//! and its service, and its mirror's counts, [`MirrorStats`]) and their
//! histogram, [`AtomicHistogram`]. The compiler
//! of a snapshot creates them, or carries them over from the previous
//! snapshot for a route of the same id, so counters survive reloads; the
//! request path reaches them through the route it already holds: a field
//! access and a few relaxed atomic adds, no lock, no label lookup, no
//! allocation.
//!
//! Must not touch: exposition (the admin API renders these), I/O.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the request and upstream duration buckets.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The same bounds in microseconds, compared on the request path.
const BUCKET_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// A histogram of durations over [`DURATION_BUCKETS`]: one count per
/// bucket (not cumulative: one add per observation), the total count and
/// the sum in microseconds.
#[derive(Debug, Default)]
pub struct AtomicHistogram {
    buckets: [AtomicU64; DURATION_BUCKETS.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl AtomicHistogram {
    /// Records one duration: three relaxed atomic adds.
    pub fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        if let Some(i) = BUCKET_US.iter().position(|le| us <= *le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Cumulative bucket counts (Prometheus `le` semantics), the count and
    /// the sum in seconds. Read without a lock, so a scrape racing requests
    /// may see a count one ahead of its buckets; never a bucket above the
    /// count, because the count is read last.
    pub fn read(&self) -> ([u64; DURATION_BUCKETS.len()], u64, f64) {
        let mut cumulative = [0u64; DURATION_BUCKETS.len()];
        let mut acc = 0u64;
        for (slot, b) in cumulative.iter_mut().zip(&self.buckets) {
            acc += b.load(Ordering::Relaxed);
            *slot = acc;
        }
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let count = self.count.load(Ordering::Relaxed).max(acc);
        (cumulative, count, sum)
    }
}

/// One route's counters.
#[derive(Debug, Default)]
pub struct RouteStats {
    /// Index: status / 100 - 1 (1xx to 5xx).
    pub responses: [AtomicU64; 5],
    /// From the request's arrival to its response head.
    pub duration: AtomicHistogram,
    /// From sending the request to a node to its answer's head (or
    /// failure), per attempt.
    pub upstream: AtomicHistogram,
    /// The route's `mirror` filter's counts (zero without one).
    pub mirror: MirrorStats,
}

/// A route's mirrored copies (`hopgate_mirror_total{route,result}`) and
/// the copies in flight now (bounded by the filter's `max_in_flight`).
#[derive(Debug, Default)]
pub struct MirrorStats {
    /// Index: [`MirrorResult`] as `usize`.
    pub results: [AtomicU64; 4],
    pub in_flight: AtomicU64,
}

/// What became of a sampled copy: the `result` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MirrorResult {
    /// The mirror service answered (any status; the answer is discarded).
    Sent = 0,
    /// No node, a refused or failed connection, or no answer in time.
    Failed = 1,
    /// Over the route's `max_in_flight`: not sent.
    Dropped = 2,
    /// The copy's body was cut off: the mirror fell more than its buffer
    /// behind the client's body, or the client's body failed or was not
    /// read to its end. The mirror target saw a truncated request.
    Aborted = 3,
}

impl MirrorResult {
    pub const ALL: [MirrorResult; 4] = [
        MirrorResult::Sent,
        MirrorResult::Failed,
        MirrorResult::Dropped,
        MirrorResult::Aborted,
    ];

    pub fn label(self) -> &'static str {
        match self {
            MirrorResult::Sent => "sent",
            MirrorResult::Failed => "failed",
            MirrorResult::Dropped => "dropped",
            MirrorResult::Aborted => "aborted",
        }
    }
}

impl MirrorStats {
    pub fn count(&self, r: MirrorResult) {
        self.results[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(&self, r: MirrorResult) -> u64 {
        self.results[r as usize].load(Ordering::Relaxed)
    }

    /// Takes a place among the copies in flight; false (and counted
    /// `dropped`) when `max` are in flight already.
    pub fn enter(&self, max: u64) -> bool {
        if self.in_flight.fetch_add(1, Ordering::Relaxed) >= max {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.count(MirrorResult::Dropped);
            return false;
        }
        true
    }

    /// Gives back a place taken by [`MirrorStats::enter`].
    pub fn leave(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl RouteStats {
    /// Counts one response and its duration.
    pub fn record(&self, status: u16, took: Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[class].fetch_add(1, Ordering::Relaxed);
        self.duration.observe(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_bounds_inclusive() {
        let h = AtomicHistogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_micros(501));
        h.observe(Duration::from_secs(60));
        let (b, count, sum) = h.read();
        assert_eq!(b[0], 1);
        assert_eq!(b[1], 2);
        assert_eq!(b[DURATION_BUCKETS.len() - 1], 2, "60 s is only in +Inf");
        assert_eq!(count, 3);
        assert!((sum - 60.001001).abs() < 1e-9, "{sum}");
        for (le, us) in DURATION_BUCKETS.iter().zip(BUCKET_US) {
            assert_eq!((le * 1e6).round() as u64, us);
        }
    }

    #[test]
    fn status_classes() {
        let r = RouteStats::default();
        for s in [101, 200, 204, 302, 404, 503, 599, 0, 999] {
            r.record(s, Duration::ZERO);
        }
        let got: Vec<u64> = r
            .responses
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        assert_eq!(got, [2, 2, 1, 1, 3]);
    }
}
