//! hopgate-control: the control plane.
//!
//! Owns the single writer of the snapshot ([`control::Control`]): every
//! config source (file, SIGHUP, admin API) goes through one pipeline —
//! parse → validate → compile → swap — under one lock, so reloads never
//! interleave and a failure keeps the running snapshot. Also owns the
//! applied-version history and the admin API ([`admin`]).
//!
//! Must not touch: the request path. The data plane only ever loads the
//! snapshot this crate stores.

pub mod admin;
pub mod control;
pub mod etcd;
pub mod fleet;
pub mod health;
pub mod maintenance;
pub mod metrics;
pub mod watch;

pub use control::{ApplyOutcome, Control, Source};
