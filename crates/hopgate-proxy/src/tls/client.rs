//! TLS to upstream nodes: the connector a node's pool dials through.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, SignatureScheme};
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::metrics::TLS_METRICS;

/// A service's TLS client: trust, client certificate, ALPN (`h2` for
/// `protocol: http2`, else `http/1.1`), and the name checked in the
/// node's certificate. Its session cache makes re-dials resume.
pub struct UpstreamConnector {
    connector: TlsConnector,
    server_name: Option<ServerName<'static>>,
    /// Of the files' bytes and settings: an unchanged reload keeps the
    /// connector (and the pool's connections).
    fingerprint: u64,
}

impl std::fmt::Debug for UpstreamConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamConnector")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl UpstreamConnector {
    pub(super) fn new(
        config: Arc<ClientConfig>,
        server_name: Option<ServerName<'static>>,
        fingerprint: u64,
    ) -> UpstreamConnector {
        UpstreamConnector {
            connector: TlsConnector::from(config),
            server_name,
            fingerprint,
        }
    }

    /// Whether two connectors were made from the same files and settings.
    pub fn same_as(&self, other: &UpstreamConnector) -> bool {
        self.fingerprint == other.fingerprint
    }

    /// The TLS handshake on a connected socket to `addr`: the configured
    /// `server_name`, else the node's IP address, is sent and checked.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        tcp: TcpStream,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => ServerName::IpAddress(addr.ip().into()),
        };
        let r = self.connector.connect(name, tcp).await;
        TLS_METRICS.upstream(r.is_ok());
        r
    }
}

/// The one client certificate of a service (mutual TLS).
#[derive(Debug)]
pub(super) struct ClientCert(pub(super) Arc<CertifiedKey>);

impl ResolvesClientCert for ClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0
            .key
            .choose_scheme(sigschemes)
            .is_some()
            .then(|| Arc::clone(&self.0))
    }

    fn has_certs(&self) -> bool {
        true
    }
}
