//! The typed upstream handle: what the data plane attaches to a node.
//!
//! Owns [`Upstream`], one per node identity, holding the node's connection
//! [`Pool`] (created by the first request or MOVING handoff that needs it,
//! with the service's `pool.max_idle`), and the data plane's names for the
//! snapshot types carrying it: [`Snapshot`], [`CompiledService`],
//! [`CompiledNode`], [`NodeRegistry`] and [`LiveNode`].
//!
//! Why a type parameter. Core's registry and snapshot are generic over the
//! handle (`hopgate_core::snapshot::Snapshot<U>`); this crate fixes `U =
//! Upstream`. The registry creates the handle with the node's state and
//! every snapshot that keeps the node holds the same `Arc<Upstream>`, so
//! the pool outlives snapshots exactly like node state. The request path
//! reaches its concrete pool with a field access and a `OnceLock` read:
//! no `dyn Any` slot, no downcast, no `expect`, no map lookup, no
//! reference-count traffic and no virtual call (the `Any` slot it replaces
//! cost an `Arc` clone and a virtual `type_id` call per request). The
//! control plane (which depends on this crate) calls the pool's methods
//! directly (stats, drain, replace-all, prewarm), so core needs no trait
//! mirroring them. The alternatives were weighed: a core trait object
//! serves the control plane but cannot give the request path its
//! concrete, `async` `send` without a downcast or a boxed future per
//! request; a side table keyed by node needs a lookup per request.
//!
//! Must not touch: node state (that is `hopgate_core::node`), the pool's
//! internals (that is [`crate::pool`]).

use std::sync::{Arc, OnceLock};

use crate::pool::Pool;

/// The data plane's handle on one node's upstream: its connection pool,
/// created on first use.
#[derive(Debug, Default)]
pub struct Upstream {
    pool: OnceLock<Arc<Pool>>,
}

impl Upstream {
    /// The node's pool, created with `max_idle` idle slots if this is its
    /// first use.
    pub fn pool(&self, max_idle: usize) -> &Arc<Pool> {
        self.pool.get_or_init(|| Arc::new(Pool::new(max_idle)))
    }

    /// The node's pool, if anything has used it yet.
    pub fn pool_if_set(&self) -> Option<&Arc<Pool>> {
        self.pool.get()
    }
}

/// A compiled configuration whose nodes carry an [`Upstream`].
pub type Snapshot = hopgate_core::snapshot::Snapshot<Upstream>;
/// The running snapshot's pointer, as the data plane loads it.
pub type SharedSnapshot = hopgate_core::snapshot::SharedSnapshot<Upstream>;
/// A compiled service whose nodes carry an [`Upstream`].
pub type CompiledService = hopgate_core::snapshot::CompiledService<Upstream>;
/// A compiled node with its [`Upstream`].
pub type CompiledNode = hopgate_core::snapshot::CompiledNode<Upstream>;
/// The registry of node state and upstream handles.
pub type NodeRegistry = hopgate_core::node::NodeRegistry<Upstream>;
/// A node's state and upstream handle, as the registry keeps them.
pub type LiveNode = hopgate_core::node::LiveNode<Upstream>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_created_once_and_shared() {
        let registry = NodeRegistry::default();
        let a = registry.live("s", "n");
        assert!(
            a.upstream.pool_if_set().is_none(),
            "no pool before first use"
        );
        let pool = Arc::clone(a.upstream.pool(4));
        let b = registry.live("s", "n");
        assert!(Arc::ptr_eq(b.upstream.pool_if_set().unwrap(), &pool));
        assert!(Arc::ptr_eq(b.upstream.pool(64), &pool), "created once");
    }
}
