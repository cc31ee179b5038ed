//! Fleet state for `GET /admin/v1/fleet` and the `hopgate_fleet_*` gauges.
//!
//! Owns [`Fleet`]: this replica's id, the etcd source's status handle (when
//! `sources.etcd` is set) and an optional status provider for the shared
//! session store (Redis), which plugs in through [`StoreStatus`] without
//! this module knowing the store. Must not touch: the snapshot, node state.

use std::sync::{Arc, OnceLock};

use hopgate_store::{RedisState, RedisStatus, SessionStore};
use serde_json::{json, Value};

use crate::etcd::EtcdHandle;

/// What the shared session store reports about itself.
pub trait StoreStatus: Send + Sync {
    /// `{"state": "connected|degraded|off", ...}`.
    fn status(&self) -> Value;
    /// Whether it is reachable now (`hopgate_fleet_redis_up`).
    fn up(&self) -> bool;
}

/// The status of a session store shared through Redis, as the fleet view
/// shows it; installed only for a store that has one.
pub struct SharedStoreStatus(pub Arc<dyn SessionStore>);

impl StoreStatus for SharedStoreStatus {
    fn status(&self) -> Value {
        let status = self.0.redis_status().unwrap_or_else(RedisStatus::off);
        serde_json::to_value(status).unwrap_or_else(|_| json!({ "state": "off" }))
    }

    fn up(&self) -> bool {
        self.0
            .redis_status()
            .is_some_and(|s| s.state == RedisState::Connected)
    }
}

/// The fleet view of one replica.
pub struct Fleet {
    replica_id: String,
    etcd: Option<Arc<EtcdHandle>>,
    redis: OnceLock<Arc<dyn StoreStatus>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("replica_id", &self.replica_id)
            .finish_non_exhaustive()
    }
}

impl Fleet {
    pub fn new(replica_id: String, etcd: Option<Arc<EtcdHandle>>) -> Arc<Fleet> {
        Arc::new(Fleet {
            replica_id,
            etcd,
            redis: OnceLock::new(),
        })
    }

    /// Installs the session store's status provider (once).
    pub fn set_redis(&self, provider: Arc<dyn StoreStatus>) {
        if self.redis.set(provider).is_err() {
            tracing::warn!("fleet: a redis status provider was already installed");
        }
    }

    pub fn replica_id(&self) -> &str {
        &self.replica_id
    }

    /// The etcd source, when `sources.etcd` is set.
    pub fn etcd(&self) -> Option<&Arc<EtcdHandle>> {
        self.etcd.as_ref()
    }

    /// `GET /admin/v1/fleet`.
    pub fn json(&self, config_version: u64) -> Value {
        json!({
            "replica_id": self.replica_id,
            "redis": self.redis.get().map_or_else(|| json!({ "state": "off" }), |r| r.status()),
            "etcd": self.etcd.as_ref().map_or_else(|| json!({ "state": "off" }), |e| e.json()),
            "config_version": config_version,
        })
    }

    /// `(redis up, etcd up)` for the gauges; `None` = off.
    pub fn up(&self) -> (Option<bool>, Option<bool>) {
        (
            self.redis.get().map(|r| r.up()),
            self.etcd.as_ref().map(|e| e.up()),
        )
    }
}
