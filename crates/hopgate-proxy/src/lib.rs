//! hopgate-proxy: the data plane.
//!
//! Owns the listeners and their hyper servers ([`listener`]), the
//! per-request path ([`forward`]): snapshot load → access check → route →
//! node pick → forward through the node's [`pool`] → respond, the header
//! rewriting ([`headers`]) and the single error-to-response mapping
//! ([`respond`]). Each node's pool hangs off its typed [`upstream`] handle;
//! its connection limit and queue are [`admission`].
//!
//! The public surface is what the binary and the control plane need,
//! nothing more: every module is private, and the crate root re-exports
//! the listener, the forwarder, the pool's control surface, the snapshot
//! types carrying each node's `Upstream`, the canary's slot and counters,
//! TLS loading and its collector, routes' auth keys ([`AuthKeys`], read
//! by [`AuthMaterial`]; key sets fetched from services by [`fetch_jwks`])
//! and their collector, the OTLP export task, the access log's
//! sink, `ClientIo` and `wait_closed`. Counters, hops and latencies are
//! read through one door, [`telemetry`]; the statics behind it stay
//! private. What only the fuzz targets drive is in `fuzzing`, behind the
//! `fuzzing` cargo feature.
//!
//! Must not touch: the control plane. The snapshot arrives through an
//! `ArcSwap` that the control plane writes and this crate only loads, once
//! per request; node live state is read through `hopgate_core::node`.

mod access_log;
mod admission;
mod auth;
mod body;
mod canary;
mod client_io;
mod coalesce;
mod events;
mod filter_files;
mod forward;
// The codec, header scans, session identification and trace-context
// parser are public only for the fuzz targets (`--features fuzzing`,
// [`fuzzing`]); without the feature their `pub` items are the crate's own,
// and what only a fuzz target calls is unused.
#[cfg_attr(
    not(feature = "fuzzing"),
    allow(unreachable_pub, unused_imports, dead_code)
)]
mod h1;
mod handover;
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
mod headers;
mod latency;
mod limit;
mod listener;
mod metrics;
// Its `pub` items predate this crate's narrow surface (only `start` is
// used outside); `counters` and `render_metrics` have no caller at all.
#[allow(unreachable_pub, dead_code)]
mod otlp;
mod outcome;
mod pool;
mod proxy_protocol;
mod respond;
mod send_watch;
#[allow(unreachable_pub)]
mod session;
mod subrequest;
pub mod telemetry;
// Its `pub` items predate this crate's narrow surface (the binary and the
// control plane use the four re-exported below).
#[allow(unreachable_pub, unused_imports)]
mod tls;
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub, dead_code))]
mod trace;
mod tunnel;
mod upstream;

pub use access_log::{set_json as set_access_log_json, set_sink as set_access_log_sink};
pub use auth::{fetch_jwks, AuthCollector, AuthKeys, AuthMaterial};
pub use canary::{CanaryArm, CanaryCell, CanarySlot, SideCounts, SideStats};
pub use client_io::ClientIo;
pub use filter_files::{filter_bodies_differ, read_filter_bodies};
pub use forward::{Forwarder, RequestCtx};
pub use handover::begin_handover;
pub use listener::{serve_listener, ListenerCtx, ListenerSettings};
pub use otlp::start as start_otlp_export;
pub use pool::{Pool, PoolSettings, PoolStats};
pub use proxy_protocol::{header_for as proxy_protocol_header, ProxyProtocolCollector};
pub use tls::metrics::TlsCollector;
pub use tls::{TlsListeners, TlsMaterial, UpstreamConnector};
pub use tunnel::wait_closed;
pub use upstream::{
    CompiledNode, CompiledService, LiveNode, NodeRegistry, SharedSnapshot, Snapshot, Upstream,
};

/// What only the fuzz targets (and benches) drive: hopgate's HTTP/1.1
/// codec, the header scans, session identification, the trace-context
/// parser and the PROXY protocol header reader. Behind the `fuzzing` feature (`fuzz/Cargo.toml` turns it on).
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// hopgate's HTTP/1.1 codec.
    pub mod http1 {
        pub use crate::h1::*;
    }
    pub use crate::headers::{append_forwarded_for, scan_request, scan_response, strip_request};
    pub use crate::proxy_protocol::{fuzz_read as proxy_protocol_read, header_for};
    pub use crate::session::identify;
    /// W3C trace context.
    pub mod trace {
        pub use crate::trace::*;
    }
}
