//! Passive outlier detection: ejecting a node that keeps failing.
//!
//! Owns [`Outlier`]: the consecutive 5xx and failure counts, the ejection
//! deadline, the ejection streak (each ejection in a streak lasts twice the
//! one before, up to `max_ejection`) and the ejection total. It says when a
//! node should go ([`Verdict::Eject`]); the caller applies the service's
//! ejection cap and then calls [`Outlier::eject_for`].
//!
//! Must not touch: the breaker, logging, the clock (time comes in as
//! milliseconds on the [`super::now_ms`] scale), the service's other nodes
//! (the cap is the caller's).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::config::OutlierConfig;

/// What the outlier detector wants after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// The outlier detector wants the node out for this long (the caller
    /// applies the service's ejection cap before ejecting).
    Eject(Duration),
}

/// The kind of failure an attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failed {
    /// Answered with a 5xx status.
    ServerError,
    /// Connect failure, reset, timeout, protocol error.
    Other,
}

/// Passive outlier detection counters and the ejection deadline.
#[derive(Debug, Default)]
pub(crate) struct Outlier {
    consecutive_5xx: AtomicU32,
    consecutive_failures: AtomicU32,
    /// Ejections in the current streak; the ejection time grows with it.
    ejections: AtomicU32,
    ejected_total: AtomicU64,
    /// Not routable until this `now_ms()`.
    ejected_until_ms: AtomicU64,
}

impl Outlier {
    pub(crate) fn is_ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) > now_ms
    }

    pub(crate) fn eject_until(&self, until_ms: u64) {
        self.ejected_until_ms.store(until_ms, Ordering::Relaxed);
    }

    /// A success: the counts start afresh, and a node that serves well
    /// again (not ejected) starts a fresh ejection streak.
    pub(crate) fn success(&self, now_ms: u64) {
        self.consecutive_5xx.store(0, Ordering::Relaxed);
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if !self.is_ejected(now_ms) {
            self.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// A failure: ejects when its consecutive count reaches the limit (0 =
    /// never) and the node is not ejected already.
    pub(crate) fn failure(&self, what: Failed, now_ms: u64, cfg: &OutlierConfig) -> Verdict {
        let (count, limit) = match what {
            Failed::ServerError => (
                self.consecutive_5xx.fetch_add(1, Ordering::Relaxed) + 1,
                cfg.consecutive_5xx,
            ),
            Failed::Other => (
                self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1,
                cfg.consecutive_failures,
            ),
        };
        if limit == 0 || count < limit || self.is_ejected(now_ms) {
            return Verdict::Keep;
        }
        let streak = self.ejections.load(Ordering::Relaxed).min(16);
        let time = cfg
            .base_ejection
            .saturating_mul(1u32 << streak)
            .min(cfg.max_ejection);
        Verdict::Eject(time)
    }

    /// Ejects for `time` and starts counting afresh.
    pub(crate) fn eject_for(&self, time: Duration, now_ms: u64) {
        self.ejections.fetch_add(1, Ordering::Relaxed);
        self.ejected_total.fetch_add(1, Ordering::Relaxed);
        self.consecutive_5xx.store(0, Ordering::Relaxed);
        self.consecutive_failures.store(0, Ordering::Relaxed);
        self.eject_until(now_ms + time.as_millis() as u64);
    }

    pub(crate) fn ejected_total(&self) -> u64 {
        self.ejected_total.load(Ordering::Relaxed)
    }
}
