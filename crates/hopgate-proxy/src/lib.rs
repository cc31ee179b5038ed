//! hopgate-proxy: the data plane.
//!
//! Owns the listeners and their hyper servers ([`listener`]), the
//! per-request path ([`forward`]): snapshot load → access check → route →
//! node pick → forward through the node's [`pool`] → respond, the header
//! rewriting ([`headers`]) and the single error-to-response mapping
//! ([`respond`]). Each node's pool hangs off its typed [`upstream`] handle;
//! its connection limit and queue are [`admission`].
//!
//! Must not touch: the control plane. The snapshot arrives through an
//! `ArcSwap` that the control plane writes and this crate only loads, once
//! per request; node live state is read through `hopgate_core::node`.

pub mod access_log;
mod admission;
mod body;
pub mod canary;
mod client_io;
pub mod events;
mod forward;
mod h1;
mod handover;
mod headers;
pub mod latency;
mod listener;
pub mod metrics;
pub mod otlp;
mod pool;
pub mod proxy_protocol;
mod respond;
mod send_watch;
mod session;
pub mod tls;
pub mod trace;
mod tunnel;
mod upstream;

pub use client_io::ClientIo;
pub use forward::{Forwarder, RequestCtx};
pub use handover::begin_handover;
/// hopgate's HTTP/1.1 codec, public for the fuzz targets and benches.
pub mod http1 {
    pub use crate::h1::*;
}
pub use headers::{append_forwarded_for, scan_request, scan_response, strip_request};
pub use listener::{serve_listener, ListenerCtx, ListenerSettings};
pub use pool::{Pool, PoolSettings, PoolStats};
pub use session::{identify, Sessions};
pub use tunnel::wait_closed;
pub use upstream::{
    CompiledNode, CompiledService, LiveNode, NodeRegistry, SharedSnapshot, Snapshot, Upstream,
};
