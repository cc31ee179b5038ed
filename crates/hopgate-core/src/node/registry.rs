//! One live node per `(service, node id)`, shared by every snapshot.
//!
//! Owns [`NodeRegistry`] and [`LiveNode`]: a node's [`NodeState`] and its
//! typed upstream handle `U`, created together on first sight and handed to
//! every snapshot that names the node, so a reload that keeps a node keeps
//! both (**live state outlives snapshots**).
//!
//! `U` is whatever the data plane attaches to a node (`hopgate-proxy`'s
//! `Upstream`, which owns the node's connection pool); core never looks
//! inside it. It is a type parameter rather than a `dyn Any` slot so that
//! nothing downcasts: the snapshot's `CompiledNode<U>` holds the same
//! `Arc<U>`, and the request path reaches its pool through one field. The
//! default `()` is for core's own tests and benchmarks.
//!
//! Only the control plane's single writer calls into it (while compiling a
//! snapshot, and when dropping nodes that left the config), so its mutex is
//! never on the request path.
//!
//! Must not touch: node state beyond creating it, the contents of `U`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{NodeKey, NodeState};

/// A node's live parts: its state and its upstream handle.
#[derive(Debug)]
pub struct LiveNode<U> {
    pub state: Arc<NodeState>,
    pub upstream: Arc<U>,
}

impl<U> Clone for LiveNode<U> {
    fn clone(&self) -> Self {
        LiveNode {
            state: Arc::clone(&self.state),
            upstream: Arc::clone(&self.upstream),
        }
    }
}

/// One [`LiveNode`] per `(service, node id)`, shared by every snapshot.
#[derive(Debug)]
pub struct NodeRegistry<U = ()> {
    nodes: Mutex<HashMap<NodeKey, LiveNode<U>>>,
    /// Services of a snapshot already swapped in ([`NodeRegistry::retain`]):
    /// a node that joins one of them later starts cold (slow start); the
    /// nodes a service starts with start warm.
    services: Mutex<HashSet<String>>,
}

impl<U> Default for NodeRegistry<U> {
    fn default() -> Self {
        NodeRegistry {
            nodes: Mutex::new(HashMap::new()),
            services: Mutex::new(HashSet::new()),
        }
    }
}

impl NodeRegistry {
    /// A registry whose nodes carry no upstream handle (tests, benchmarks).
    pub fn new() -> NodeRegistry {
        NodeRegistry::default()
    }
}

fn key(service: &str, node: &str) -> NodeKey {
    NodeKey {
        service: service.to_owned(),
        node: node.to_owned(),
    }
}

impl<U: Default> NodeRegistry<U> {
    /// The live node, created on first sight: warm when it is among the
    /// first nodes of its service, cold (ramping up under the service's
    /// slow start) when it joins a service that had nodes already.
    pub fn live(&self, service: &str, node: &str) -> LiveNode<U> {
        let key = key(service, node);
        self.nodes
            .lock()
            .entry(key.clone())
            .or_insert_with(|| {
                let state = NodeState::new(key);
                if self.services.lock().contains(service) {
                    state.rewarm(super::now_ms());
                }
                LiveNode {
                    state: Arc::new(state),
                    upstream: Arc::new(U::default()),
                }
            })
            .clone()
    }

    /// The state for this node, created on first sight.
    pub fn get_or_create(&self, service: &str, node: &str) -> Arc<NodeState> {
        self.live(service, node).state
    }
}

impl<U> NodeRegistry<U> {
    /// These services run from now on (the first snapshot is swapped in,
    /// or a later one by [`NodeRegistry::retain`]): a node that joins one
    /// of them afterwards starts cold.
    pub fn mark_running<'a>(&self, services: impl IntoIterator<Item = &'a str>) {
        let mut known = self.services.lock();
        for s in services {
            if !known.contains(s) {
                known.insert(s.to_owned());
            }
        }
    }

    pub fn get(&self, service: &str, node: &str) -> Option<Arc<NodeState>> {
        self.nodes
            .lock()
            .get(&key(service, node))
            .map(|n| Arc::clone(&n.state))
    }

    /// Forgets nodes not in `keep` and returns them (the caller drains them).
    /// The writer calls it once a snapshot is swapped in, so the services
    /// of `keep` count as running from then on.
    pub fn retain(&self, keep: &HashSet<NodeKey>) -> Vec<LiveNode<U>> {
        self.mark_running(keep.iter().map(|k| k.service.as_str()));
        let mut map = self.nodes.lock();
        let gone: Vec<NodeKey> = map.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        gone.into_iter().filter_map(|k| map.remove(&k)).collect()
    }

    pub fn all(&self) -> Vec<Arc<NodeState>> {
        let mut v: Vec<_> = self
            .nodes
            .lock()
            .values()
            .map(|n| Arc::clone(&n.state))
            .collect();
        v.sort_by(|a, b| a.key().cmp(b.key()));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Health;

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
    fn registry_keeps_the_upstream_with_the_state() {
        let r: NodeRegistry<std::sync::atomic::AtomicU32> = NodeRegistry::default();
        let a = r.live("api", "n1");
        a.upstream.store(7, std::sync::atomic::Ordering::Relaxed);
        let b = r.live("api", "n1");
        assert!(Arc::ptr_eq(&a.upstream, &b.upstream));
        assert!(Arc::ptr_eq(&a.state, &b.state));
        let gone = r.retain(&HashSet::new());
        assert_eq!(
            gone[0].upstream.load(std::sync::atomic::Ordering::Relaxed),
            7
        );
    }
}
