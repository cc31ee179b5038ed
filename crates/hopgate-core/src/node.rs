//! Node identity and live state.
//!
//! Owns [`NodeState`]: the lock-free, per-node facts that outlive any config
//! snapshot (health, draining, in-flight count, latency EWMA, ejection) and
//! the [`NodeRegistry`] that hands out one state per `(service, node id)`.
//! A reload that keeps a node keeps its state; a node that leaves the config
//! leaves the registry when no snapshot refers to it any more.
//!
//! Must not touch: sockets or pools (the proxy attaches its pool through
//! [`NodeState::extension`]), config parsing.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;

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

/// Stable identity of a node across reloads.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeKey {
    pub service: String,
    pub node: String,
}

/// Health as seen by checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Not checked yet: routable.
    Unknown = 0,
    Healthy = 1,
    Unhealthy = 2,
}

/// Live state of one node; every field is an atomic, read on the hot path
/// without a lock.
pub struct NodeState {
    key: NodeKey,
    health: AtomicU8,
    draining: AtomicBool,
    /// `now_ms()` when draining began (0 = not draining).
    draining_since_ms: AtomicU64,
    in_flight: AtomicU32,
    /// Latency EWMA in microseconds (0 = no sample yet).
    ewma_us: AtomicU64,
    /// Passive ejection: not routable until this `now_ms()`.
    ejected_until_ms: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    breaker: Breaker,
    outlier: Outlier,
    /// Maintenance: relaxed timeouts while `now_ms() < relaxed_until_ms`.
    relaxed_until_ms: AtomicU64,
    /// Maintenance: the address the node moved to (MOVING), until a
    /// reload gives it a new configured address.
    moved_to: arc_swap::ArcSwapOption<std::net::SocketAddr>,
    /// Maintenance: the handoff could not reach the node at all.
    unreachable: AtomicBool,
    extension: OnceLock<Arc<dyn Any + Send + Sync>>,
}

/// The state of a node's circuit breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitState {
    Closed = 0,
    Open = 1,
    HalfOpen = 2,
}

/// Per-node circuit breaker, all atomics. Its parameters are set by the
/// snapshot compile ([`NodeState::configure`]) so reloads retune it without
/// resetting it.
#[derive(Debug, Default)]
struct Breaker {
    state: AtomicU8,
    /// Consecutive failures while closed.
    failures: AtomicU32,
    opened_at_ms: AtomicU64,
    /// Probes admitted in the current half-open period.
    probes: AtomicU32,
    /// Probes that succeeded in the current half-open period.
    successes: AtomicU32,
    enabled: AtomicBool,
    threshold: AtomicU32,
    reset_ms: AtomicU64,
    max_requests: AtomicU32,
    /// Times the breaker opened (for the admin API).
    opened: AtomicU64,
}

/// Passive outlier detection counters.
#[derive(Debug, Default)]
struct Outlier {
    consecutive_5xx: AtomicU32,
    consecutive_failures: AtomicU32,
    /// Ejections in the current streak; the ejection time grows with it.
    ejections: AtomicU32,
    ejected_total: AtomicU64,
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

/// Result of [`NodeState::observe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    /// The outlier detector wants the node out for this long (the caller
    /// applies the service's ejection cap before ejecting).
    Eject(std::time::Duration),
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
            draining_since_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            ewma_us: AtomicU64::new(0),
            ejected_until_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            breaker: Breaker {
                enabled: AtomicBool::new(true),
                threshold: AtomicU32::new(5),
                reset_ms: AtomicU64::new(60_000),
                max_requests: AtomicU32::new(3),
                ..Breaker::default()
            },
            outlier: Outlier::default(),
            relaxed_until_ms: AtomicU64::new(0),
            moved_to: arc_swap::ArcSwapOption::empty(),
            unreachable: AtomicBool::new(false),
            extension: OnceLock::new(),
        }
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

    pub fn set_health(&self, h: Health) {
        self.health.store(h as u8, Ordering::Relaxed);
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

    /// When draining began (`now_ms()` scale), if it is draining.
    pub fn draining_since(&self) -> Option<u64> {
        match self.draining_since_ms.load(Ordering::Relaxed) {
            0 => None,
            t => Some(t),
        }
    }

    pub fn is_ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) > now_ms
    }

    /// Takes the node out of rotation until `until_ms` (see [`now_ms`]).
    pub fn eject_until(&self, until_ms: u64) {
        self.ejected_until_ms.store(until_ms, Ordering::Relaxed);
    }

    /// May new requests be sent here? (A half-open breaker with probes
    /// left, or an open one whose reset timeout has passed, counts as
    /// available: the transition happens in [`NodeState::try_acquire`].)
    pub fn is_available(&self, now_ms: u64) -> bool {
        self.health() != Health::Unhealthy
            && !self.is_draining()
            && !self.is_ejected(now_ms)
            && !self.is_unreachable()
            && self.circuit_may_pass(now_ms)
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
    /// back, and trying it beats failing the request.
    pub fn last_resort_ok(&self) -> bool {
        self.health() != Health::Unhealthy && !self.is_draining() && !self.is_unreachable()
    }

    /// Evidence that the node serves again (a last-resort request or an
    /// active health check succeeded): the ejection ends and an open breaker
    /// goes half-open, so its probes decide.
    pub fn recover(&self) {
        self.ejected_until_ms.store(0, Ordering::Relaxed);
        self.unreachable.store(false, Ordering::Relaxed);
        let b = &self.breaker;
        if b.state
            .compare_exchange(
                CircuitState::Open as u8,
                CircuitState::HalfOpen as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            b.opened_at_ms.store(now_ms(), Ordering::Relaxed);
            b.probes.store(0, Ordering::Relaxed);
            b.successes.store(0, Ordering::Relaxed);
            tracing::info!(service = %self.key.service, node = %self.key.node, "node answers again: circuit half-open");
        }
    }

    /// Applies the breaker parameters of the node's service (compile time).
    pub fn configure(&self, circuit: &crate::config::CircuitConfig) {
        let b = &self.breaker;
        b.enabled.store(circuit.enabled, Ordering::Relaxed);
        b.threshold
            .store(circuit.failure_threshold, Ordering::Relaxed);
        b.reset_ms
            .store(circuit.reset_timeout.as_millis() as u64, Ordering::Relaxed);
        b.max_requests
            .store(circuit.max_requests, Ordering::Relaxed);
        if !circuit.enabled {
            b.state.store(CircuitState::Closed as u8, Ordering::Relaxed);
        }
    }

    pub fn circuit(&self) -> CircuitState {
        match self.breaker.state.load(Ordering::Acquire) {
            1 => CircuitState::Open,
            2 => CircuitState::HalfOpen,
            _ => CircuitState::Closed,
        }
    }

    /// How many times the breaker has opened.
    pub fn circuit_opened(&self) -> u64 {
        self.breaker.opened.load(Ordering::Relaxed)
    }

    fn circuit_may_pass(&self, now_ms: u64) -> bool {
        let b = &self.breaker;
        match self.circuit() {
            CircuitState::Closed => true,
            CircuitState::Open => {
                now_ms
                    >= b.opened_at_ms.load(Ordering::Relaxed) + b.reset_ms.load(Ordering::Relaxed)
            }
            CircuitState::HalfOpen => {
                b.probes.load(Ordering::Relaxed) < b.max_requests.load(Ordering::Relaxed)
                    || now_ms
                        >= b.opened_at_ms.load(Ordering::Relaxed)
                            + b.reset_ms.load(Ordering::Relaxed)
            }
        }
    }

    /// The "may I send?" question, asked once per attempt after the node is
    /// picked. An open breaker whose reset timeout has passed turns
    /// half-open *here* (go-redis's never does, because only a path no one
    /// calls makes that transition); a half-open breaker admits at most
    /// `max_requests` probes.
    pub fn try_acquire(&self, now_ms: u64) -> bool {
        let b = &self.breaker;
        if !b.enabled.load(Ordering::Relaxed) {
            return true;
        }
        loop {
            match self.circuit() {
                CircuitState::Closed => return true,
                CircuitState::Open => {
                    let due =
                        b.opened_at_ms.load(Ordering::Relaxed) + b.reset_ms.load(Ordering::Relaxed);
                    if now_ms < due {
                        return false;
                    }
                    if b.state
                        .compare_exchange(
                            CircuitState::Open as u8,
                            CircuitState::HalfOpen as u8,
                            Ordering::AcqRel,
                            Ordering::Acquire,
                        )
                        .is_ok()
                    {
                        b.opened_at_ms.store(now_ms, Ordering::Relaxed);
                        b.probes.store(0, Ordering::Relaxed);
                        b.successes.store(0, Ordering::Relaxed);
                        tracing::info!(service = %self.key.service, node = %self.key.node, "circuit half-open: letting probes through");
                    }
                    // Re-read: we (or a racer) moved it to half-open.
                }
                CircuitState::HalfOpen => {
                    let max = b.max_requests.load(Ordering::Relaxed);
                    let n = b.probes.fetch_add(1, Ordering::AcqRel);
                    if n < max {
                        return true;
                    }
                    b.probes.fetch_sub(1, Ordering::AcqRel);
                    // Probes whose outcome never came back (a client gave
                    // up mid-request) must not wedge the breaker: after a
                    // reset timeout in half-open, admit a fresh round.
                    let since = b.opened_at_ms.load(Ordering::Relaxed);
                    if now_ms >= since + b.reset_ms.load(Ordering::Relaxed)
                        && b.opened_at_ms
                            .compare_exchange(since, now_ms, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                    {
                        b.probes.store(1, Ordering::Relaxed);
                        b.successes.store(0, Ordering::Relaxed);
                        return true;
                    }
                    return false;
                }
            }
        }
    }

    fn open_circuit(&self, now_ms: u64) {
        let b = &self.breaker;
        b.opened_at_ms.store(now_ms, Ordering::Relaxed);
        b.failures.store(0, Ordering::Relaxed);
        let prev = b.state.swap(CircuitState::Open as u8, Ordering::AcqRel);
        if prev != CircuitState::Open as u8 {
            b.opened.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(service = %self.key.service, node = %self.key.node, "circuit open");
        }
    }

    /// Accounts one attempt's outcome in the breaker and the outlier
    /// detector; says whether the detector wants the node ejected.
    pub fn observe(
        &self,
        what: Observation,
        now_ms: u64,
        outlier: &crate::config::OutlierConfig,
    ) -> Verdict {
        let b = &self.breaker;
        let o = &self.outlier;
        match what {
            Observation::Success => {
                o.consecutive_5xx.store(0, Ordering::Relaxed);
                o.consecutive_failures.store(0, Ordering::Relaxed);
                match self.circuit() {
                    CircuitState::Closed => b.failures.store(0, Ordering::Relaxed),
                    CircuitState::HalfOpen => {
                        let ok = b.successes.fetch_add(1, Ordering::AcqRel) + 1;
                        if ok >= b.max_requests.load(Ordering::Relaxed)
                            && b.state
                                .compare_exchange(
                                    CircuitState::HalfOpen as u8,
                                    CircuitState::Closed as u8,
                                    Ordering::AcqRel,
                                    Ordering::Acquire,
                                )
                                .is_ok()
                        {
                            b.failures.store(0, Ordering::Relaxed);
                            tracing::info!(service = %self.key.service, node = %self.key.node, "circuit closed");
                        }
                    }
                    CircuitState::Open => {}
                }
                // A node that serves well again starts a fresh ejection streak.
                if !self.is_ejected(now_ms) {
                    o.ejections.store(0, Ordering::Relaxed);
                }
                Verdict::Keep
            }
            Observation::ServerError | Observation::Failure => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                if b.enabled.load(Ordering::Relaxed) {
                    match self.circuit() {
                        CircuitState::Closed => {
                            let n = b.failures.fetch_add(1, Ordering::AcqRel) + 1;
                            if n >= b.threshold.load(Ordering::Relaxed) {
                                self.open_circuit(now_ms);
                            }
                        }
                        CircuitState::HalfOpen => self.open_circuit(now_ms),
                        CircuitState::Open => {}
                    }
                }
                let (count, limit) = if what == Observation::ServerError {
                    (
                        o.consecutive_5xx.fetch_add(1, Ordering::Relaxed) + 1,
                        outlier.consecutive_5xx,
                    )
                } else {
                    (
                        o.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1,
                        outlier.consecutive_failures,
                    )
                };
                if limit == 0 || count < limit || self.is_ejected(now_ms) {
                    return Verdict::Keep;
                }
                let streak = o.ejections.load(Ordering::Relaxed).min(16);
                let time = outlier
                    .base_ejection
                    .saturating_mul(1u32 << streak)
                    .min(outlier.max_ejection);
                Verdict::Eject(time)
            }
        }
    }

    /// Ejects the node for `time` (after the caller checked the service's
    /// cap) and starts counting afresh.
    pub fn eject_for(&self, time: std::time::Duration, now_ms: u64) {
        let o = &self.outlier;
        o.ejections.fetch_add(1, Ordering::Relaxed);
        o.ejected_total.fetch_add(1, Ordering::Relaxed);
        o.consecutive_5xx.store(0, Ordering::Relaxed);
        o.consecutive_failures.store(0, Ordering::Relaxed);
        self.eject_until(now_ms + time.as_millis() as u64);
        tracing::warn!(service = %self.key.service, node = %self.key.node, seconds = time.as_secs_f64(), "node ejected by outlier detection");
    }

    /// How many times the node was ejected.
    pub fn ejected_total(&self) -> u64 {
        self.outlier.ejected_total.load(Ordering::Relaxed)
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

    /// The data plane's per-node attachment (its upstream pool). Set once.
    pub fn extension<T: Any + Send + Sync>(&self, init: impl FnOnce() -> Arc<T>) -> Option<Arc<T>> {
        let any = self
            .extension
            .get_or_init(|| init() as Arc<dyn Any + Send + Sync>);
        Arc::clone(any).downcast::<T>().ok()
    }

    /// The attachment if one was set.
    pub fn extension_if_set<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.extension
            .get()
            .and_then(|a| Arc::clone(a).downcast::<T>().ok())
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

/// One [`NodeState`] per `(service, node id)`, shared by every snapshot.
///
/// Only the control plane's single writer calls into it (while compiling a
/// snapshot), so its mutex is never on the request path.
#[derive(Debug, Default)]
pub struct NodeRegistry {
    nodes: Mutex<HashMap<NodeKey, Arc<NodeState>>>,
}

impl NodeRegistry {
    pub fn new() -> NodeRegistry {
        NodeRegistry::default()
    }

    /// The state for this node, created on first sight.
    pub fn get_or_create(&self, service: &str, node: &str) -> Arc<NodeState> {
        let key = NodeKey {
            service: service.to_owned(),
            node: node.to_owned(),
        };
        let mut map = self.nodes.lock();
        Arc::clone(
            map.entry(key.clone())
                .or_insert_with(|| Arc::new(NodeState::new(key))),
        )
    }

    pub fn get(&self, service: &str, node: &str) -> Option<Arc<NodeState>> {
        let key = NodeKey {
            service: service.to_owned(),
            node: node.to_owned(),
        };
        self.nodes.lock().get(&key).cloned()
    }

    /// Forgets nodes not in `keep` and returns them (the caller drains them).
    pub fn retain(&self, keep: &std::collections::HashSet<NodeKey>) -> Vec<Arc<NodeState>> {
        let mut map = self.nodes.lock();
        let gone: Vec<NodeKey> = map.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        gone.into_iter().filter_map(|k| map.remove(&k)).collect()
    }

    pub fn all(&self) -> Vec<Arc<NodeState>> {
        let mut v: Vec<_> = self.nodes.lock().values().cloned().collect();
        v.sort_by(|a, b| a.key.cmp(&b.key));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_keeps_state_across_lookups() {
        let r = NodeRegistry::new();
        let a = r.get_or_create("api", "n1");
        a.set_health(Health::Unhealthy);
        let b = r.get_or_create("api", "n1");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(b.health(), Health::Unhealthy);
        let keep = std::collections::HashSet::new();
        assert_eq!(r.retain(&keep).len(), 1);
        assert!(r.get("api", "n1").is_none());
    }

    #[test]
    fn in_flight_guard_counts() {
        let n = Arc::new(NodeState::new(NodeKey {
            service: "s".into(),
            node: "n".into(),
        }));
        let g1 = n.begin_request();
        let g2 = n.begin_request();
        assert_eq!(n.in_flight(), 2);
        drop(g1);
        drop(g2);
        assert_eq!(n.in_flight(), 0);
        assert_eq!(n.requests(), 2);
    }

    fn node() -> NodeState {
        NodeState::new(NodeKey {
            service: "s".into(),
            node: "n".into(),
        })
    }

    #[test]
    fn breaker_full_cycle_half_opens_on_the_asking_path() {
        let n = node();
        let cfg = crate::config::CircuitConfig {
            enabled: true,
            failure_threshold: 3,
            reset_timeout: std::time::Duration::from_millis(1000),
            max_requests: 2,
        };
        n.configure(&cfg);
        let out = crate::config::OutlierConfig {
            consecutive_5xx: 0,
            consecutive_failures: 0,
            ..Default::default()
        };
        let t0 = 10_000;
        for _ in 0..2 {
            assert!(n.try_acquire(t0));
            n.observe(Observation::Failure, t0, &out);
        }
        assert_eq!(n.circuit(), CircuitState::Closed);
        n.observe(Observation::Failure, t0, &out);
        assert_eq!(n.circuit(), CircuitState::Open);
        assert!(!n.is_available(t0 + 999));
        assert!(!n.try_acquire(t0 + 999));
        // Due: the asking path itself turns it half-open.
        assert!(n.is_available(t0 + 1000));
        assert!(n.try_acquire(t0 + 1000));
        assert_eq!(n.circuit(), CircuitState::HalfOpen);
        assert!(n.try_acquire(t0 + 1000));
        assert!(!n.try_acquire(t0 + 1000), "only max_requests probes");
        assert!(!n.is_available(t0 + 1000));
        // A half-open failure reopens.
        n.observe(Observation::Failure, t0 + 1001, &out);
        assert_eq!(n.circuit(), CircuitState::Open);
        assert!(!n.try_acquire(t0 + 1500));
        assert!(n.try_acquire(t0 + 2001));
        assert!(n.try_acquire(t0 + 2001));
        n.observe(Observation::Success, t0 + 2002, &out);
        assert_eq!(n.circuit(), CircuitState::HalfOpen);
        n.observe(Observation::Success, t0 + 2002, &out);
        assert_eq!(n.circuit(), CircuitState::Closed);
        assert_eq!(n.circuit_opened(), 2);
        // Probes whose outcome never arrives do not wedge half-open.
        n.observe(Observation::Failure, t0 + 3000, &out);
        n.observe(Observation::Failure, t0 + 3000, &out);
        n.observe(Observation::Failure, t0 + 3000, &out);
        assert_eq!(n.circuit(), CircuitState::Open);
        assert!(n.try_acquire(t0 + 4000));
        assert!(n.try_acquire(t0 + 4000));
        assert!(!n.try_acquire(t0 + 4500), "both probes out, no answer yet");
        assert!(
            n.try_acquire(t0 + 5000),
            "a fresh round after reset_timeout"
        );
        n.observe(Observation::Success, t0 + 5000, &out);
        n.observe(Observation::Success, t0 + 5000, &out);
        assert_eq!(n.circuit(), CircuitState::Closed);
        // A success while closed resets the count.
        n.observe(Observation::Failure, t0, &out);
        n.observe(Observation::Failure, t0, &out);
        n.observe(Observation::Success, t0, &out);
        n.observe(Observation::Failure, t0, &out);
        assert_eq!(n.circuit(), CircuitState::Closed);
    }

    #[test]
    fn outlier_ejection_grows_and_resets() {
        let n = node();
        n.configure(&crate::config::CircuitConfig {
            enabled: false,
            ..Default::default()
        });
        let out = crate::config::OutlierConfig {
            consecutive_5xx: 3,
            consecutive_failures: 1,
            base_ejection: std::time::Duration::from_secs(2),
            max_ejection: std::time::Duration::from_secs(5),
            max_ejected_percent: 100,
        };
        let now = 1_000;
        assert_eq!(
            n.observe(Observation::ServerError, now, &out),
            Verdict::Keep
        );
        assert_eq!(
            n.observe(Observation::ServerError, now, &out),
            Verdict::Keep
        );
        let Verdict::Eject(t) = n.observe(Observation::ServerError, now, &out) else {
            panic!("third 5xx ejects")
        };
        assert_eq!(t, std::time::Duration::from_secs(2));
        n.eject_for(t, now);
        assert!(!n.is_available(now + 1));
        assert!(n.is_available(now + 2_000));
        // Repeat ejection: longer, capped at max.
        let Verdict::Eject(t) = n.observe(Observation::Failure, now + 2_000, &out) else {
            panic!("a connect failure ejects at once")
        };
        assert_eq!(t, std::time::Duration::from_secs(4));
        n.eject_for(t, now + 2_000);
        let Verdict::Eject(t) = n.observe(Observation::Failure, now + 7_000, &out) else {
            panic!()
        };
        assert_eq!(t, std::time::Duration::from_secs(5));
        // Serving well again resets the streak.
        n.observe(Observation::Success, now + 20_000, &out);
        let Verdict::Eject(t) = n.observe(Observation::Failure, now + 20_000, &out) else {
            panic!()
        };
        assert_eq!(t, std::time::Duration::from_secs(2));
        assert_eq!(n.ejected_total(), 2);
    }

    #[test]
    fn availability() {
        let n = NodeState::new(NodeKey {
            service: "s".into(),
            node: "n".into(),
        });
        assert!(n.is_available(now_ms()));
        n.set_draining(true);
        assert!(!n.is_available(now_ms()));
        n.set_draining(false);
        n.eject_until(now_ms() + 60_000);
        assert!(!n.is_available(now_ms()));
        n.eject_until(0);
        n.set_health(Health::Unhealthy);
        assert!(!n.is_available(now_ms()));
    }
}
