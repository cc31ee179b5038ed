//! hopgate-proxy: the data plane.
//!
//! Owns the listeners and their hyper servers ([`listener`]), the
//! per-request path ([`forward`]): snapshot load → access check → route →
//! node pick → forward through the node's [`pool`] → respond, the header
//! rewriting ([`headers`]) and the single error-to-response mapping
//! ([`respond`]). Each node's pool hangs off its typed [`upstream`] handle.
//!
//! Must not touch: the control plane. The snapshot arrives through an
//! `ArcSwap` that the control plane writes and this crate only loads, once
//! per request; node live state is read through `hopgate_core::node`.

pub mod body;
pub mod client_io;
pub mod forward;
pub mod headers;
pub mod listener;
pub mod metrics;
pub mod pool;
pub mod respond;
pub mod session;
pub mod tunnel;
pub mod upstream;

pub use forward::{Forwarder, SharedSnapshot};
pub use listener::{serve_listener, ListenerCtx, ListenerSettings};
pub use upstream::{CompiledNode, CompiledService, LiveNode, NodeRegistry, Snapshot, Upstream};
