//! hopgate-control: the control plane.
//!
//! Owns the single writer of the snapshot ([`control::Control`]): every
//! config source (file, SIGHUP, admin API) goes through one pipeline —
//! parse → validate → compile → swap — under one lock, so reloads never
//! interleave and a failure keeps the running snapshot. Also owns the
//! applied-version history, the admin API, active health checks, the
//! maintenance-notification state machine, the file watcher, the fleet view,
//! the etcd source and DNS discovery.
//!
//! The surface is narrow on purpose: modules are private and the binary
//! gets only what it wires together — [`Control`] and [`Source`],
//! [`serve_admin`]/[`Admin`], [`Maintenance`], [`watch_file`],
//! [`Fleet`]/[`SharedStoreStatus`] and, under [`etcd`], the source, the boot
//! read and the discovery layer.
//!
//! Must not touch: the request path. The data plane only ever loads the
//! snapshot this crate stores.

mod admin;
mod auth_watch;
mod control;
mod dns;
pub mod etcd;
mod exposition;
mod fleet;
mod health;
mod limit_share;
mod maintenance;
mod metrics;
mod tls_watch;
mod watch;

pub use admin::{serve_admin, Admin};
pub use auth_watch::watch_auth_files;
pub use control::{ApplyOutcome, Carried, CarriedCanary, CarriedNotice, Control, OnApply, Source};
pub use dns::start as start_dns;
pub use fleet::{Fleet, SharedStoreStatus};
pub use limit_share::start as start_fleet_limits;
pub use maintenance::Maintenance;
pub use metrics::set_build_commit;
pub use tls_watch::watch_tls_files;
pub use watch::{watch_file, FileWatch};
