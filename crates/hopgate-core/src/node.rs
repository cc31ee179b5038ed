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
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
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
    in_flight: AtomicU32,
    /// Latency EWMA in microseconds (0 = no sample yet).
    ewma_us: AtomicU64,
    /// Passive ejection: not routable until this `now_ms()`.
    ejected_until_ms: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    extension: OnceLock<Arc<dyn Any + Send + Sync>>,
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
            in_flight: AtomicU32::new(0),
            ewma_us: AtomicU64::new(0),
            ejected_until_ms: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
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
        self.draining.store(on, Ordering::Relaxed);
    }

    pub fn is_ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Ordering::Relaxed) > now_ms
    }

    /// Takes the node out of rotation until `until_ms` (see [`now_ms`]).
    pub fn eject_until(&self, until_ms: u64) {
        self.ejected_until_ms.store(until_ms, Ordering::Relaxed);
    }

    /// May new requests be sent here?
    pub fn is_available(&self, now_ms: u64) -> bool {
        self.health() != Health::Unhealthy && !self.is_draining() && !self.is_ejected(now_ms)
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

    pub fn record_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
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
        let any = self.extension.get_or_init(|| init() as Arc<dyn Any + Send + Sync>);
        Arc::clone(any).downcast::<T>().ok()
    }

    /// The attachment if one was set.
    pub fn extension_if_set<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.extension.get().and_then(|a| Arc::clone(a).downcast::<T>().ok())
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
