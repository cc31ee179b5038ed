//! The circuit breaker: closed → open → half-open → closed.
//!
//! Owns [`Breaker`], the one implementation of the cycle, used by every
//! node ([`super::NodeState`]) and by the maintenance handoff's per-endpoint
//! dial breaker in the control plane:
//!
//! - **closed**: `failure_threshold` consecutive failures open it (a
//!   success resets the count);
//! - **open**: nothing passes until `reset_timeout` has passed; then the
//!   asking path itself ([`Breaker::try_acquire`]) turns it half-open, so a
//!   breaker always leaves the open state (go-redis's never does, because
//!   only a path no one calls makes that transition). Evidence from
//!   elsewhere may half-open it early ([`Breaker::half_open`]);
//! - **half-open**: at most `max_requests` probes pass; that many successes
//!   close it, one failure reopens it. Probes whose outcome never comes back
//!   (a client gave up mid-request) do not wedge it: after another
//!   `reset_timeout` a fresh round is admitted.
//!
//! Every field is an atomic, so the request path asks without a lock; the
//! parameters are atomics too, so a reload retunes a breaker without
//! resetting it ([`Breaker::configure`]). Time comes in as milliseconds on
//! the [`super::now_ms`] scale; the breaker never reads a clock.
//!
//! Must not touch: logging, node identity, the clock. Transitions are
//! returned ([`Admit`], and the `bool`s of [`Breaker::success`],
//! [`Breaker::failure`] and [`Breaker::half_open`]) and the owner logs them.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::config::CircuitConfig;

/// The state of a circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

/// The answer of [`Breaker::try_acquire`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Passes.
    Yes,
    /// Passes as the first probe of a breaker that this call turned from
    /// open to half-open.
    YesHalfOpened,
    /// Held back.
    No,
}

impl Admit {
    pub fn passed(self) -> bool {
        self != Admit::No
    }
}

/// A lock-free circuit breaker (see the module doc for the cycle).
#[derive(Debug)]
pub struct Breaker {
    state: AtomicU8,
    /// Consecutive failures while closed.
    failures: AtomicU32,
    /// When it opened, or when the current half-open round began.
    opened_at_ms: AtomicU64,
    /// Probes admitted in the current half-open round.
    probes: AtomicU32,
    /// Probes that succeeded in the current half-open round.
    successes: AtomicU32,
    enabled: AtomicBool,
    threshold: AtomicU32,
    reset_ms: AtomicU64,
    max_requests: AtomicU32,
    /// Times it opened.
    opened: AtomicU64,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::new(&CircuitConfig::default())
    }
}

impl Breaker {
    /// A closed breaker with these parameters.
    pub fn new(params: &CircuitConfig) -> Breaker {
        let b = Breaker {
            state: AtomicU8::new(CircuitState::Closed as u8),
            failures: AtomicU32::new(0),
            opened_at_ms: AtomicU64::new(0),
            probes: AtomicU32::new(0),
            successes: AtomicU32::new(0),
            enabled: AtomicBool::new(true),
            threshold: AtomicU32::new(0),
            reset_ms: AtomicU64::new(0),
            max_requests: AtomicU32::new(0),
            opened: AtomicU64::new(0),
        };
        b.configure(params);
        b
    }

    /// Retunes the breaker without resetting it. A disabled breaker closes
    /// and lets everything pass.
    pub fn configure(&self, params: &CircuitConfig) {
        self.enabled.store(params.enabled, Ordering::Relaxed);
        self.threshold
            .store(params.failure_threshold, Ordering::Relaxed);
        self.reset_ms
            .store(params.reset_timeout.as_millis() as u64, Ordering::Relaxed);
        self.max_requests
            .store(params.max_requests, Ordering::Relaxed);
        if !params.enabled {
            self.state
                .store(CircuitState::Closed as u8, Ordering::Relaxed);
        }
    }

    /// The parameters it runs with now.
    pub fn params(&self) -> CircuitConfig {
        CircuitConfig {
            enabled: self.enabled.load(Ordering::Relaxed),
            failure_threshold: self.threshold.load(Ordering::Relaxed),
            reset_timeout: std::time::Duration::from_millis(self.reset_ms.load(Ordering::Relaxed)),
            max_requests: self.max_requests.load(Ordering::Relaxed),
        }
    }

    pub fn state(&self) -> CircuitState {
        match self.state.load(Ordering::Acquire) {
            1 => CircuitState::Open,
            2 => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }

    /// How many times it has opened.
    pub fn opened_total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    fn due(&self, now_ms: u64) -> bool {
        now_ms >= self.opened_at_ms.load(Ordering::Relaxed) + self.reset_ms.load(Ordering::Relaxed)
    }

    /// Would [`Breaker::try_acquire`] let a request pass now? Read only: an
    /// open breaker that is due counts as passable, the transition itself
    /// happens when asked.
    pub fn may_pass(&self, now_ms: u64) -> bool {
        match self.state() {
            CircuitState::Closed => true,
            CircuitState::Open => self.due(now_ms),
            CircuitState::HalfOpen => {
                self.probes.load(Ordering::Relaxed) < self.max_requests.load(Ordering::Relaxed)
                    || self.due(now_ms)
            }
        }
    }

    /// Starts a half-open round at `now_ms`.
    fn begin_round(&self, now_ms: u64) {
        self.opened_at_ms.store(now_ms, Ordering::Relaxed);
        self.probes.store(0, Ordering::Relaxed);
        self.successes.store(0, Ordering::Relaxed);
    }

    /// The "may I send?" question, asked once per attempt. An open breaker
    /// whose reset timeout has passed turns half-open here; a half-open
    /// breaker admits at most `max_requests` probes per round.
    pub fn try_acquire(&self, now_ms: u64) -> Admit {
        if !self.enabled.load(Ordering::Relaxed) {
            return Admit::Yes;
        }
        let mut half_opened = false;
        loop {
            match self.state() {
                CircuitState::Closed => return Admit::Yes,
                CircuitState::Open => {
                    if !self.due(now_ms) {
                        return Admit::No;
                    }
                    half_opened |= self.half_open(now_ms);
                    // Re-read: we (or a racer) moved it to half-open.
                }
                CircuitState::HalfOpen => {
                    let admitted = if half_opened {
                        Admit::YesHalfOpened
                    } else {
                        Admit::Yes
                    };
                    let max = self.max_requests.load(Ordering::Relaxed);
                    if self.probes.fetch_add(1, Ordering::AcqRel) < max {
                        return admitted;
                    }
                    self.probes.fetch_sub(1, Ordering::AcqRel);
                    // Probes whose outcome never came back must not wedge
                    // the breaker: after a reset timeout in half-open, admit
                    // a fresh round.
                    let since = self.opened_at_ms.load(Ordering::Relaxed);
                    if now_ms >= since + self.reset_ms.load(Ordering::Relaxed)
                        && self
                            .opened_at_ms
                            .compare_exchange(since, now_ms, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                    {
                        self.probes.store(1, Ordering::Relaxed);
                        self.successes.store(0, Ordering::Relaxed);
                        return admitted;
                    }
                    return Admit::No;
                }
            }
        }
    }

    /// Evidence from elsewhere that the far side serves again (a health
    /// check passed, a last-resort request succeeded): an open breaker goes
    /// half-open now, so its probes decide. True when it changed.
    pub fn half_open(&self, now_ms: u64) -> bool {
        let changed = self
            .state
            .compare_exchange(
                CircuitState::Open as u8,
                CircuitState::HalfOpen as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if changed {
            self.begin_round(now_ms);
        }
        changed
    }

    /// Accounts a success. True when it closed the breaker.
    pub fn success(&self) -> bool {
        match self.state() {
            CircuitState::Closed => {
                self.failures.store(0, Ordering::Relaxed);
                false
            }
            CircuitState::HalfOpen => {
                let ok = self.successes.fetch_add(1, Ordering::AcqRel) + 1;
                let closed = ok >= self.max_requests.load(Ordering::Relaxed)
                    && self
                        .state
                        .compare_exchange(
                            CircuitState::HalfOpen as u8,
                            CircuitState::Closed as u8,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok();
                if closed {
                    self.failures.store(0, Ordering::Relaxed);
                }
                closed
            }
            CircuitState::Open => false,
        }
    }

    /// Accounts a failure (ignored while disabled). True when it opened the
    /// breaker.
    pub fn failure(&self, now_ms: u64) -> bool {
        if !self.enabled.load(Ordering::Relaxed) {
            return false;
        }
        match self.state() {
            CircuitState::Closed => {
                let n = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
                n >= self.threshold.load(Ordering::Relaxed) && self.open(now_ms)
            }
            CircuitState::HalfOpen => self.open(now_ms),
            CircuitState::Open => false,
        }
    }

    fn open(&self, now_ms: u64) -> bool {
        self.opened_at_ms.store(now_ms, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        let prev = self.state.swap(CircuitState::Open as u8, Ordering::AcqRel);
        let opened = prev != CircuitState::Open as u8;
        if opened {
            self.opened.fetch_add(1, Ordering::Relaxed);
        }
        opened
    }
}

#[cfg(test)]
mod tests;
