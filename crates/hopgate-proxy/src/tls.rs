//! TLS: termination on listeners and TLS to upstream nodes, with rustls
//! and its *ring* provider (no aws-lc-rs, no cmake).
//!
//! Owns reading the PEM files a config names ([`TlsMaterial::load`]), the
//! per-listener certificate maps chosen by SNI ([`TlsListeners`], whose
//! resolver reads an atomically swapped map so a reload or a rotated file
//! changes certificates without touching the `ServerConfig`, its session
//! cache or its ticket keys), the handshake on accept, the upstream
//! connector a node's pool dials through ([`UpstreamConnector`]), the
//! socket type of an upstream connection ([`UpstreamIo`]: plain TCP or
//! TLS) and the TLS metrics.
//!
//! Bad files are configuration errors under the field path that names the
//! file (`listeners[0].tls.certificates[1].key: ... does not match the
//! certificate`): the caller (the control plane, `hopgate validate`)
//! refuses the config and the running certificates keep serving.
//!
//! Paths are relative to the config file's directory (like the etcd
//! cache file): a config and its certificates move together.
//!
//! Trust for upstreams without `ca`: the operating system's store, read
//! with `rustls-native-certs` at each load, rather than `webpki-roots`'
//! compiled-in Mozilla list. The system store is what operators already
//! manage: it follows OS updates without rebuilding hopgate, and a private
//! CA installed system-wide (`update-ca-certificates`) is trusted, which is
//! the common case for a gateway in front of internal services.
//!
//! Session tickets: one ticketer for the whole process, shared by every
//! listener's `ServerConfig`, and the `ServerConfig` of a listener lives as
//! long as the process; reloads swap certificates only, so tickets issued
//! before a reload resume after it.
//!
//! Must not touch: routing, the snapshot (the control plane installs what
//! is loaded here), the plain-TCP request path (a plain upstream connection
//! is one enum variant away from the bare socket).

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

mod certs;
mod client;
mod io;
mod load;
pub mod metrics;
mod server;

pub use certs::CertMap;
pub use client::UpstreamConnector;
pub use io::UpstreamIo;
pub use load::TlsMaterial;
pub use server::{ListenerTlsState, TlsListeners};

pub(crate) use server::accept;

/// The one crypto provider: *ring*.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}
