//! `store:` as validated: the memory store's bound and persistence, and,
//! for `kind: redis`, which Redis (one server, a Sentinel-watched master
//! or a Cluster) and how the store writes to it.
//!
//! Owns these types only. Must not touch: validation (`validate/`) and
//! the stores themselves (the `hopgate-store` crate).

use std::time::Duration;

/// `store:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Persistence file of the memory store.
    pub path: Option<std::path::PathBuf>,
    pub max_sessions: usize,
    pub persist_interval: Duration,
    /// `Some` for `kind: redis`: bindings are shared through Redis.
    pub redis: Option<RedisStoreConfig>,
}

/// `store:` with `kind: redis`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisStoreConfig {
    /// Which Redis: one server, a Sentinel-watched master, or a Cluster.
    pub target: RedisTarget,
    /// Prefix of every key hopgate writes (default `hopgate:`).
    pub prefix: String,
    /// Writes held while Redis is unreachable; past it the oldest go.
    pub max_queue: usize,
}

/// How the store reaches Redis (`store.url`, `store.sentinel` or
/// `store.cluster`: exactly one). Every URL is checked for its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: `redis://[user:password@]host[:port][/db]`.
    Url(String),
    /// The master the sentinels at `endpoints` know as `master_name`; the
    /// master is reached with the first endpoint's username, password and
    /// database (the sentinels with their own URL's).
    Sentinel {
        master_name: String,
        endpoints: Vec<String>,
    },
    /// A Redis Cluster, learned from any of `endpoints`.
    Cluster { endpoints: Vec<String> },
}

impl RedisTarget {
    /// `single`, `sentinel` or `cluster`.
    pub fn mode(&self) -> &'static str {
        match self {
            RedisTarget::Url(_) => "single",
            RedisTarget::Sentinel { .. } => "sentinel",
            RedisTarget::Cluster { .. } => "cluster",
        }
    }
}

impl RedisStoreConfig {
    pub const DEFAULT_PREFIX: &'static str = "hopgate:";
    pub const DEFAULT_MAX_QUEUE: usize = 100_000;
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            redis: None,
            path: None,
            max_sessions: 1_000_000,
            persist_interval: Duration::from_secs(10),
        }
    }
}
