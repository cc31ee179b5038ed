//! Node identity and live state: the facade.
//!
//! Owns [`NodeState`]: the lock-free, per-node facts that outlive any config
//! snapshot (health, draining, in-flight count, latency EWMA, request and
//! failure counters, maintenance facts), and the questions the data plane
//! asks of a node ([`NodeState::is_available`], [`NodeState::try_acquire`],
//! [`NodeState::observe`]). Each concern lives in a file of its own, and
//! this facade composes them and logs their transitions with the node's
//! identity:
//!
//! - `breaker`: [`Breaker`], the circuit breaker, shared with the
//!   maintenance handoff's per-endpoint dial breaker;
//! - `outlier`: passive outlier detection, the ejection deadline and
//!   [`Verdict`];
//! - `clock`: [`now_ms`] / [`ms_at`], the time scale of every deadline here;
//! - `registry`: [`NodeRegistry`], one [`LiveNode`] (state plus the data
//!   plane's typed upstream handle) per `(service, node id)`.
//!
//! A reload that keeps a node keeps its state; a node that leaves the
//! config leaves the registry when the writer swaps in a snapshot without
//! it. Parameters from the config (breaker) are pushed in by the writer
//! when it swaps a snapshot in ([`crate::snapshot::Snapshot::configure_nodes`]),
//! never by compiling one.
//!
//! Must not touch: sockets or pools (the data plane's handle is a type
//! parameter of the registry and the snapshot, opaque here), config
//! parsing.

mod breaker;
mod clock;
mod outlier;
mod registry;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

pub use self::breaker::{Admit, Breaker, CircuitState};
pub use self::clock::{ms_at, now_ms};
pub use self::outlier::Verdict;
use self::outlier::{Failed, Outlier};
pub use self::registry::{LiveNode, NodeRegistry};
pub use crate::config::Health;
use crate::config::{CircuitConfig, OutlierConfig};

/// Stable identity of a node across reloads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeKey {
    pub service: String,
    pub node: String,
}

/// Live state of one node; every field is an atomic, read on the hot path
/// without a lock.
pub struct NodeState {
    key: NodeKey,
    health: AtomicU8,
    draining: AtomicBool,
    /// Left the config (a reload removed it): draining for new snapshots,
    /// still a last resort for requests routed by an older one.
    removed: AtomicBool,
    /// `now_ms()` when draining began (0 = not draining).
    draining_since_ms: AtomicU64,
    in_flight: AtomicU32,
    /// Latency EWMA in microseconds (0 = no sample yet).
    ewma_us: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    breaker: Breaker,
    /// Passive ejection, with its deadline.
    outlier: Outlier,
    /// Maintenance: relaxed timeouts while `now_ms() < relaxed_until_ms`.
    relaxed_until_ms: AtomicU64,
    /// Maintenance: the address the node moved to (MOVING), until a
    /// reload gives it a new configured address.
    moved_to: arc_swap::ArcSwapOption<std::net::SocketAddr>,
    /// Maintenance: the handoff could not reach the node at all.
    unreachable: AtomicBool,
    /// `now_ms()` from which the node ramps up under its service's
    /// `slow_start` (see [`crate::balance`]): when it joined a running
    /// service ([`NodeRegistry::live`]; 0, warm, for a service's first
    /// nodes), came back from unhealthy, its ejection ends or its circuit
    /// closes.
    warm_from_ms: AtomicU64,
}

/// What one attempt on a node came to, for breaker and outlier accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Answered with a status below 500.
    Success,
    /// Answered with a 5xx status.
    ServerError,
    /// Connect failure, reset, timeout, protocol error.
    Failure,
}

impl std::fmt::Debug for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeState")
            .field("key", &self.key)
            .field("health", &self.health())
            .field("draining", &self.is_draining())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl NodeState {
    pub fn new(key: NodeKey) -> NodeState {
        NodeState {
            key,
            health: AtomicU8::new(Health::Unknown as u8),
            draining: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            draining_since_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            ewma_us: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            breaker: Breaker::default(),
            outlier: Outlier::default(),
            relaxed_until_ms: AtomicU64::new(0),
            moved_to: arc_swap::ArcSwapOption::empty(),
            unreachable: AtomicBool::new(false),
            warm_from_ms: AtomicU64::new(0),
        }
    }

    /// Since when the node ramps up under slow start (`now_ms()` scale;
    /// it may lie in the future while an ejection lasts).
    pub fn warm_from(&self) -> u64 {
        self.warm_from_ms.load(Ordering::Relaxed)
    }

    /// The node starts over as a cold one from `at_ms`: slow start ramps
    /// its share up again from there.
    pub(crate) fn rewarm(&self, at_ms: u64) {
        // 0 means "never cold": the process's first millisecond counts as 1.
        self.warm_from_ms.fetch_max(at_ms.max(1), Ordering::Relaxed);
    }

    pub fn key(&self) -> &NodeKey {
        &self.key
    }

    pub fn health(&self) -> Health {
        match self.health.load(Ordering::Relaxed) {
            1 => Health::Healthy,
            2 => Health::Unhealthy,
            _ => Health::Unknown,
        }
    }

    /// Sets the health verdict; a node back from unhealthy starts its
    /// slow start over.
    pub fn set_health(&self, h: Health) {
        let was = self.health.swap(h as u8, Ordering::Relaxed);
        if was == Health::Unhealthy as u8 && h != Health::Unhealthy {
            self.rewarm(now_ms());
        }
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn set_draining(&self, on: bool) {
        if on {
            // Keep the first start time when asked twice.
            let _ = self.draining_since_ms.compare_exchange(
                0,
                now_ms().max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else {
            self.draining_since_ms.store(0, Ordering::Relaxed);
        }
        self.draining.store(on, Ordering::Relaxed);
    }

    /// A reload removed the node from the config: it drains, but a request
    /// that loaded the snapshot before the swap may still reach it as a
    /// last resort ([`NodeState::last_resort_ok`]) rather than fail.
    pub fn set_removed(&self) {
        self.removed.store(true, Ordering::Relaxed);
        self.set_draining(true);
    }

    /// When draining began (`now_ms()` scale), if it is draining.
    pub fn draining_since(&self) -> Option<u64> {
        match self.draining_since_ms.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        }
    }

    pub fn is_ejected(&self, now_ms: u64) -> bool {
        self.outlier.is_ejected(now_ms)
    }

    /// Takes the node out of rotation until `until_ms` (see [`now_ms`]);
    /// its slow start begins when the ejection ends.
    pub fn eject_until(&self, until_ms: u64) {
        self.outlier.eject_until(until_ms);
        self.rewarm(until_ms);
    }

    /// May new requests be sent here? (A half-open breaker with probes
    /// left, or an open one whose reset timeout has passed, counts as
    /// available: the transition happens in [`NodeState::try_acquire`].)
    pub fn is_available(&self, now_ms: u64) -> bool {
        self.health() != Health::Unhealthy
            && !self.is_draining()
            && !self.is_ejected(now_ms)
            && !self.is_unreachable()
            && self.breaker.may_pass(now_ms)
    }

    /// Relaxed timeouts until `until_ms` (never shortens a longer period).
    pub fn relax_until(&self, until_ms: u64) {
        self.relaxed_until_ms.fetch_max(until_ms, Ordering::Relaxed);
    }

    /// Normal timeouts again from `at_ms` (now, or the end of a
    /// post-handoff window).
    pub fn unrelax_at(&self, at_ms: u64) {
        self.relaxed_until_ms.store(at_ms, Ordering::Relaxed);
    }

    /// Is the node under relaxed timeouts (maintenance)?
    pub fn is_relaxed(&self, now_ms: u64) -> bool {
        self.relaxed_until_ms.load(Ordering::Relaxed) > now_ms
    }

    /// When the relaxed period ends (`now_ms()` scale; 0 = none).
    pub fn relaxed_until(&self) -> u64 {
        self.relaxed_until_ms.load(Ordering::Relaxed)
    }

    /// Where the node lives now, if a MOVING notification moved it.
    pub fn moved_to(&self) -> Option<std::net::SocketAddr> {
        self.moved_to.load().as_deref().copied()
    }

    pub fn set_moved_to(&self, addr: Option<std::net::SocketAddr>) {
        self.moved_to.store(addr.map(Arc::new));
    }

    pub fn is_unreachable(&self) -> bool {
        self.unreachable.load(Ordering::Relaxed)
    }

    /// Marks the node unreachable (a handoff could not reach it) or clears it.
    pub fn set_unreachable(&self, on: bool) {
        self.unreachable.store(on, Ordering::Relaxed);
    }

    /// Could this node serve if the gateway ignored passive verdicts
    /// (ejection, open breaker)? Used as a last resort when no available
    /// node is left: a node that was ejected while restarting may well be
    /// back, and trying it beats failing the request. A node a reload
    /// removed counts too: only requests routed by a snapshot from before
    /// the reload still see it, and for them it is the routing they
    /// started with (an operator's drain still excludes a node).
    pub fn last_resort_ok(&self) -> bool {
        self.health() != Health::Unhealthy
            && (!self.is_draining() || self.removed.load(Ordering::Relaxed))
            && !self.is_unreachable()
    }

    /// Evidence that the node serves again (a last-resort request or an
    /// active health check succeeded): the ejection ends and an open breaker
    /// goes half-open, so its probes decide.
    pub fn recover(&self) {
        let now = now_ms();
        if self.outlier.is_ejected(now) {
            // The ejection ends now rather than at its deadline.
            self.warm_from_ms.store(now.max(1), Ordering::Relaxed);
        }
        self.outlier.eject_until(0);
        self.unreachable.store(false, Ordering::Relaxed);
        if self.breaker.half_open(now_ms()) {
            tracing::info!(service = %self.key.service, node = %self.key.node, "node answers again: circuit half-open");
        }
    }

    /// Applies the breaker parameters of the node's service. The writer
    /// calls it when it swaps a snapshot in
    /// ([`crate::snapshot::Snapshot::configure_nodes`]).
    pub fn configure(&self, circuit: &CircuitConfig) {
        self.breaker.configure(circuit);
    }

    /// The breaker parameters the node runs with now.
    pub fn circuit_params(&self) -> CircuitConfig {
        self.breaker.params()
    }

    pub fn circuit(&self) -> CircuitState {
        self.breaker.state()
    }

    /// How many times the breaker has opened.
    pub fn circuit_opened(&self) -> u64 {
        self.breaker.opened_total()
    }

    /// The "may I send?" question, asked once per attempt after the node is
    /// picked (see [`Breaker::try_acquire`]).
    pub fn try_acquire(&self, now_ms: u64) -> bool {
        let admit = self.breaker.try_acquire(now_ms);
        if admit == Admit::YesHalfOpened {
            tracing::info!(service = %self.key.service, node = %self.key.node, "circuit half-open: letting probes through");
        }
        admit.passed()
    }

    /// Accounts one attempt's outcome in the breaker and the outlier
    /// detector; says whether the detector wants the node ejected.
    pub fn observe(&self, what: Observation, now_ms: u64, outlier: &OutlierConfig) -> Verdict {
        let failed = match what {
            Observation::Success => {
                if self.breaker.success() {
                    self.rewarm(now_ms);
                    tracing::info!(service = %self.key.service, node = %self.key.node, "circuit closed");
                }
                self.outlier.success(now_ms);
                return Verdict::Keep;
            }
            Observation::ServerError => Failed::ServerError,
            Observation::Failure => Failed::Other,
        };
        self.failures.fetch_add(1, Ordering::Relaxed);
        if self.breaker.failure(now_ms) {
            tracing::warn!(service = %self.key.service, node = %self.key.node, "circuit open");
        }
        self.outlier.failure(failed, now_ms, outlier)
    }

    /// Ejects the node for `time` (after the caller checked the service's
    /// cap) and starts counting afresh.
    pub fn eject_for(&self, time: std::time::Duration, now_ms: u64) {
        self.outlier.eject_for(time, now_ms);
        let ms = u64::try_from(time.as_millis()).unwrap_or(u64::MAX);
        self.rewarm(now_ms.saturating_add(ms));
        tracing::warn!(service = %self.key.service, node = %self.key.node, seconds = time.as_secs_f64(), "node ejected by outlier detection");
    }

    /// How many times the node was ejected.
    pub fn ejected_total(&self) -> u64 {
        self.outlier.ejected_total()
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a request in; the guard counts it out when dropped.
    pub fn begin_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Latency EWMA in microseconds (0 before the first sample).
    pub fn ewma_us(&self) -> u64 {
        self.ewma_us.load(Ordering::Relaxed)
    }

    /// Folds one latency sample into the EWMA (weight 1/8, like TCP's SRTT).
    pub fn observe_latency_us(&self, sample: u64) {
        let old = self.ewma_us.load(Ordering::Relaxed);
        let new = if old == 0 {
            sample.max(1)
        } else {
            (old * 7 + sample) / 8
        };
        // A lost race only loses one sample; no need for a CAS loop.
        self.ewma_us.store(new.max(1), Ordering::Relaxed);
    }
}

/// Counts one in-flight request on a node until dropped.
#[derive(Debug)]
pub struct InFlight(Arc<NodeState>);

impl InFlight {
    pub fn node(&self) -> &Arc<NodeState> {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
