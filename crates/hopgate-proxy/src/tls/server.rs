//! TLS termination: per-listener certificates chosen by SNI and the
//! handshake of an accepted connection.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::certs::CertMap;
use super::metrics::{Expiry, Failure, TLS_METRICS};

/// Reads the listener's current map at each handshake.
#[derive(Debug)]
struct SniResolver(Arc<ArcSwapOption<CertMap>>);

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let map = self.0.load();
        map.as_ref()
            .map(|m| Arc::clone(m.pick(hello.server_name())))
    }
}

/// The process's session-ticket keys, shared by every listener so that
/// neither a reload nor a re-created listener invalidates tickets.
fn ticketer() -> Option<Arc<dyn ProducesTickets>> {
    static TICKETER: OnceLock<Option<Arc<dyn ProducesTickets>>> = OnceLock::new();
    TICKETER
        .get_or_init(|| match rustls::crypto::ring::Ticketer::new() {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(error = %e, "tls: no session-ticket keys (no randomness?); TLS 1.3 resumption uses the session cache only");
                None
            }
        })
        .clone()
}

/// One listener's TLS: a `ServerConfig` made once (ALPN `h2` and
/// `http/1.1`, the shared ticketer, its session cache) whose resolver reads
/// `certs`, which reloads swap. `certs` is `None` while the listener is
/// plain.
pub struct ListenerTlsState {
    certs: Arc<ArcSwapOption<CertMap>>,
    acceptor: Option<TlsAcceptor>,
}

impl std::fmt::Debug for ListenerTlsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListenerTlsState")
            .field("enabled", &self.enabled())
            .finish_non_exhaustive()
    }
}

impl ListenerTlsState {
    fn new() -> ListenerTlsState {
        let certs = Arc::new(ArcSwapOption::empty());
        let acceptor = ServerConfig::builder_with_provider(super::provider())
            .with_safe_default_protocol_versions()
            .map(|b| {
                let mut config = b
                    .with_no_client_auth()
                    .with_cert_resolver(Arc::new(SniResolver(Arc::clone(&certs))));
                config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
                if let Some(t) = ticketer() {
                    config.ticketer = t;
                }
                TlsAcceptor::from(Arc::new(config))
            });
        if let Err(e) = &acceptor {
            tracing::error!(error = %e, "tls: cannot build the server configuration");
        }
        ListenerTlsState {
            certs,
            acceptor: acceptor.ok(),
        }
    }

    /// Whether certificates are installed.
    pub fn enabled(&self) -> bool {
        self.certs.load().is_some()
    }
}

/// Every listener's TLS state by name, created on first use; the control
/// plane installs each applied config's certificates here.
#[derive(Debug, Default)]
pub struct TlsListeners {
    by_name: Mutex<HashMap<String, Arc<ListenerTlsState>>>,
}

impl TlsListeners {
    /// The named listener's state (one per name for the process's life).
    pub fn listener(&self, name: &str) -> Arc<ListenerTlsState> {
        Arc::clone(
            self.by_name
                .lock()
                .entry(name.to_owned())
                .or_insert_with(|| Arc::new(ListenerTlsState::new())),
        )
    }

    /// Swaps in the certificates of `listeners` (the listeners it does
    /// not name turn plain) and their `expiry` figures
    /// ([`super::TlsMaterial::install`]).
    pub(crate) fn install(
        &self,
        listeners: &[(String, Option<Arc<CertMap>>)],
        expiry: Vec<Expiry>,
    ) {
        let mut by_name = self.by_name.lock();
        // Each listener's map is stored once: a handshake running meanwhile
        // sees the old certificates or the new ones, never none.
        for (name, state) in by_name.iter() {
            let map = listeners
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, m)| m.clone());
            state.certs.store(map);
        }
        for (name, map) in listeners {
            by_name
                .entry(name.clone())
                .or_insert_with(|| Arc::new(ListenerTlsState::new()))
                .certs
                .store(map.clone());
        }
        TLS_METRICS.set_expiry(expiry);
    }
}

/// The handshake of an accepted connection, bounded by `timeout`: the TLS
/// stream, or `None` (counted by reason and logged at debug).
pub(crate) async fn accept(
    state: &ListenerTlsState,
    tcp: TcpStream,
    timeout: Duration,
) -> Option<TlsStream<TcpStream>> {
    let acceptor = state.acceptor.as_ref()?;
    let r = tokio::time::timeout(timeout, acceptor.accept(tcp)).await;
    let failure = match r {
        Ok(Ok(s)) => {
            TLS_METRICS.handshake_ok();
            return Some(s);
        }
        Err(_) => Failure::Timeout,
        Ok(Err(e)) => classify(&e),
    };
    TLS_METRICS.handshake_failed(failure);
    tracing::debug!(reason = failure.name(), "tls handshake failed");
    None
}

fn classify(e: &io::Error) -> Failure {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return match e.kind() {
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset => Failure::Closed,
            _ => Failure::Io,
        };
    };
    match tls {
        rustls::Error::General(m) if m.contains("certificate") => Failure::NoCertificate,
        rustls::Error::PeerIncompatible(_) | rustls::Error::NoApplicationProtocol => {
            Failure::Incompatible
        }
        rustls::Error::AlertReceived(_) => Failure::Alert,
        _ => Failure::Protocol,
    }
}
