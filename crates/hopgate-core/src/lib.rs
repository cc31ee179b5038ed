//! hopgate-core: the pure heart of hopgate.
//!
//! Owns the configuration stages (raw serde types → validated [`config::Config`]
//! → compiled [`snapshot::Snapshot`]), the routing engine, the balancers, the
//! lock-free live state of nodes and the error vocabulary shared by the data
//! and control planes.
//!
//! Must not touch: sockets, files (other than what a caller hands in as text),
//! the tokio runtime, Redis or etcd. Everything here is deterministic given its
//! inputs (plus a random source for balancing), which is what lets it be
//! benchmarked and fuzzed in isolation.

pub mod access;
pub mod balance;
pub mod config;
pub mod cookie;
pub mod error;
pub mod filter;
pub mod limit;
pub mod maintenance;
pub mod node;
pub mod retry;
pub mod route;
pub mod session;
pub mod snapshot;
pub mod stats;
pub mod units;

pub use config::{Config, ConfigError};
pub use snapshot::Snapshot;
