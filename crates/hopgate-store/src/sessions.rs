//! [`Sessions`]: what the data plane and the admin API share about
//! sessions — the signing keys and the binding store.
//!
//! Owns the pairing only. Must not touch: token rules (core's `session`),
//! how a store keeps bindings.

use std::sync::Arc;

use hopgate_core::session::SessionKeys;

use crate::SessionStore;

/// Keys and store, shared by every request.
pub struct Sessions {
    pub keys: SessionKeys,
    pub store: Arc<dyn SessionStore>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions")
            .field("bindings", &self.store.len())
            .finish_non_exhaustive()
    }
}
