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

use super::load::TlsMaterial;
use super::metrics::{Failure, TLS_METRICS};

/// A listener's certificates by name.
#[derive(Debug)]
pub struct CertMap {
    /// Exact names, lower case.
    pub(super) exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` kept as `example.com`: matches one more label.
    pub(super) wildcard: HashMap<String, Arc<CertifiedKey>>,
    /// The first certificate: no SNI, or a name no certificate lists.
    pub(super) default: Arc<CertifiedKey>,
}

impl CertMap {
    /// Exact name, then wildcard, then the default.
    fn pick(&self, name: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = name else {
            return &self.default;
        };
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if let Some(c) = self.exact.get(name) {
            return c;
        }
        if let Some(c) = name
            .split_once('.')
            .and_then(|(_, rest)| self.wildcard.get(rest))
        {
            return c;
        }
        &self.default
    }
}

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

    /// Swaps in the certificates of `material` (listeners it does not name
    /// turn plain) and its expiry figures.
    pub fn install(&self, material: &TlsMaterial) {
        let mut by_name = self.by_name.lock();
        // Each listener's map is stored once: a handshake running meanwhile
        // sees the old certificates or the new ones, never none.
        for (name, state) in by_name.iter() {
            let map = material
                .listeners
                .iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, m)| m.clone());
            state.certs.store(map);
        }
        for (name, map) in &material.listeners {
            by_name
                .entry(name.clone())
                .or_insert_with(|| Arc::new(ListenerTlsState::new()))
                .certs
                .store(map.clone());
        }
        TLS_METRICS.set_expiry(material.expiry.clone());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_then_wildcard_then_default() {
        // Three distinct keys stand for three certificates.
        let key = |n: u8| {
            let der = rustls::pki_types::CertificateDer::from(vec![n]);
            Arc::new(CertifiedKey::new(
                vec![der],
                Arc::new(NoKey) as Arc<dyn rustls::sign::SigningKey>,
            ))
        };
        let (a, b, d) = (key(1), key(2), key(3));
        let map = CertMap {
            exact: HashMap::from([("example.com".to_owned(), Arc::clone(&a))]),
            wildcard: HashMap::from([("example.com".to_owned(), Arc::clone(&b))]),
            default: Arc::clone(&d),
        };
        assert!(Arc::ptr_eq(map.pick(Some("example.com")), &a));
        assert!(Arc::ptr_eq(map.pick(Some("EXAMPLE.com.")), &a));
        assert!(Arc::ptr_eq(map.pick(Some("api.example.com")), &b));
        assert!(
            Arc::ptr_eq(map.pick(Some("a.b.example.com")), &d),
            "a wildcard covers one label"
        );
        assert!(Arc::ptr_eq(map.pick(Some("other.org")), &d));
        assert!(Arc::ptr_eq(map.pick(None), &d));
    }

    #[derive(Debug)]
    struct NoKey;
    impl rustls::sign::SigningKey for NoKey {
        fn choose_scheme(
            &self,
            _: &[rustls::SignatureScheme],
        ) -> Option<Box<dyn rustls::sign::Signer>> {
            None
        }
        fn algorithm(&self) -> rustls::SignatureAlgorithm {
            rustls::SignatureAlgorithm::ECDSA
        }
    }
}
