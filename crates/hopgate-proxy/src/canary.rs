//! The data plane's side of a config canary: which snapshot a request
//! uses while a canary bakes, and what each side's requests did.
//!
//! Owns [`CanaryArm`] (the canary's compiled snapshot, its share, its
//! hash key and the two sides' counters), the slot the control plane
//! installs it in ([`CanarySlot`]: an `ArcSwapOption` the request path
//! loads only while a flag says a canary bakes), the side choice (one
//! keyed hash of the session id or client address and one comparison)
//! and [`SideStats`]: requests, 5xx answers and gateway errors, and a
//! latency histogram (the one `latency::Histogram`), all atomics.
//! Must not touch: the judge (the control plane reads the counters and
//! decides), locks, allocation on the request path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use crate::latency::{Histogram, Reading};
use crate::upstream::Snapshot;
use hopgate_core::balance::hash_key;

/// Where the control plane installs a running canary.
pub type CanarySlot = Arc<CanaryCell>;

/// The running canary, if one bakes, and a flag that says so: with none
/// (nearly always) a request reads the flag, one plain load, instead of
/// loading the slot twice (~40 instructions each).
#[derive(Debug, Default)]
pub struct CanaryCell {
    arm: ArcSwapOption<CanaryArm>,
    on: AtomicBool,
}

impl CanaryCell {
    /// Installs `arm` (`None`: the canary ended). The flag is raised after
    /// an arm is in and lowered before it goes, so a request that sees it
    /// raised finds the arm — or, racing its end, none, which it handles
    /// like no canary.
    pub fn store(&self, arm: Option<Arc<CanaryArm>>) {
        if arm.is_some() {
            self.arm.store(arm);
            self.on.store(true, Ordering::Release);
        } else {
            self.on.store(false, Ordering::Release);
            self.arm.store(None);
        }
    }

    /// Runs `f` on the running canary's arm, if one bakes.
    #[inline]
    pub fn with_arm<R>(&self, f: impl FnOnce(&CanaryArm) -> R) -> Option<R> {
        if !self.on.load(Ordering::Acquire) {
            return None;
        }
        self.arm.load().as_deref().map(f)
    }
}

/// One side's counters since the canary started. Cumulative: the judge
/// takes differences between two readings for its sliding window.
#[derive(Debug, Default)]
pub struct SideStats {
    requests: AtomicU64,
    errors: AtomicU64,
    latency: Histogram,
}

/// A reading of [`SideStats`] (or the difference of two, or the sum of
/// the replicas' readings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SideCounts {
    pub requests: u64,
    pub errors: u64,
    /// The latencies, in the data plane's one histogram layout.
    pub latency: Reading,
}

impl SideCounts {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &SideCounts) -> SideCounts {
        SideCounts {
            requests: self.requests.saturating_sub(earlier.requests),
            errors: self.errors.saturating_sub(earlier.errors),
            latency: self.latency.since(&earlier.latency),
        }
    }

    /// Adds `other` (counts of the same side from another replica).
    pub fn add(&mut self, other: &SideCounts) {
        self.requests += other.requests;
        self.errors += other.errors;
        self.latency.add(&other.latency);
    }

    /// Errors per request (0 with no requests).
    pub fn error_rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 / self.requests as f64
        }
    }

    /// The 99th percentile latency: the upper bound of the bucket holding
    /// it (zero with no requests).
    pub fn p99(&self) -> Duration {
        self.latency.quantile(0.99).unwrap_or(Duration::ZERO)
    }
}

impl SideStats {
    /// Counts one finished request: its status (the gateway's own for its
    /// errors) and how long it took to answer.
    #[inline]
    pub fn record(&self, status: u16, latency: Duration) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if status >= 500 {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.latency.record(latency);
    }

    pub fn read(&self) -> SideCounts {
        SideCounts {
            requests: self.requests.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            latency: self.latency.read(),
        }
    }
}

/// A running canary as the request path sees it.
#[derive(Debug)]
pub struct CanaryArm {
    /// The canary's compiled config.
    pub snapshot: Arc<Snapshot>,
    /// The version of the snapshot the other requests use.
    pub baseline_version: u64,
    /// A hash below this goes to the canary.
    threshold: u64,
    /// Keys the side choice (the same on every replica of a fleet, so a
    /// session lands on the same side everywhere).
    key: u64,
    pub canary: SideStats,
    pub baseline: SideStats,
}

/// `percent` (0–100) of the hash space, as the threshold a hash is
/// compared with.
fn threshold_of(percent: f64) -> u64 {
    if percent >= 100.0 {
        u64::MAX
    } else if percent <= 0.0 {
        0
    } else {
        (percent / 100.0 * u64::MAX as f64) as u64
    }
}

/// SplitMix64's finaliser: spreads a keyed hash over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl CanaryArm {
    /// The key of the side choice.
    pub fn key(&self) -> u64 {
        self.key
    }

    pub fn new(
        snapshot: Arc<Snapshot>,
        baseline_version: u64,
        percent: f64,
        key: u64,
    ) -> CanaryArm {
        CanaryArm {
            snapshot,
            baseline_version,
            threshold: threshold_of(percent),
            key,
            canary: SideStats::default(),
            baseline: SideStats::default(),
        }
    }

    /// True when the request identified by `id` (a session id, or a
    /// client address's bytes) goes to the canary: one keyed hash, one
    /// comparison.
    #[inline]
    pub fn takes(&self, id: &[u8]) -> bool {
        mix(hash_key(id) ^ self.key) < self.threshold
    }

    /// The side a snapshot of `version` counts for, if either.
    #[inline]
    pub fn side_of(&self, version: u64) -> Option<&SideStats> {
        if version == self.snapshot.version {
            Some(&self.canary)
        } else if version == self.baseline_version {
            Some(&self.baseline)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p99_and_error_rate() {
        let s = SideStats::default();
        for _ in 0..990 {
            s.record(200, Duration::from_millis(1));
        }
        for _ in 0..10 {
            s.record(502, Duration::from_millis(400));
        }
        let c = s.read();
        assert_eq!(c.requests, 1000);
        assert_eq!(c.errors, 10);
        assert!((c.error_rate() - 0.01).abs() < 1e-9);
        let p99 = c.p99();
        assert!(
            p99 >= Duration::from_millis(1) && p99 < Duration::from_micros(1300),
            "{p99:?}"
        );
        let later = SideStats::default();
        for _ in 0..100 {
            later.record(200, Duration::from_millis(300));
        }
        let p = later.read().since(&SideCounts::default()).p99();
        assert!(
            p >= Duration::from_millis(300) && p < Duration::from_millis(380),
            "{p:?}"
        );
    }

    #[test]
    fn the_share_follows_the_percent_and_is_stable() {
        let snap = Arc::new(Snapshot::compile(
            Arc::new(
                hopgate_core::config::load(
                    "listeners:\n  - { name: p, address: 127.0.0.1:8080 }\nservices:\n  - name: a\n    nodes:\n      - { id: a, address: 127.0.0.1:8081 }\nroutes:\n  - { id: r, service: a }\n",
                    hopgate_core::config::Format::Yaml,
                )
                .unwrap(),
            ),
            2,
            &crate::NodeRegistry::default(),
            None,
        ));
        let arm = CanaryArm::new(snap, 1, 20.0, 0x1234);
        let taken = (0..100_000u32)
            .filter(|i| arm.takes(&i.to_le_bytes()))
            .count();
        assert!((18_500..21_500).contains(&taken), "{taken}");
        for i in 0..1000u32 {
            assert_eq!(arm.takes(&i.to_le_bytes()), arm.takes(&i.to_le_bytes()));
        }
        assert!(arm.side_of(2).is_some() && arm.side_of(1).is_some() && arm.side_of(3).is_none());
        assert_eq!(threshold_of(0.0), 0);
        assert_eq!(threshold_of(100.0), u64::MAX);
    }
}
