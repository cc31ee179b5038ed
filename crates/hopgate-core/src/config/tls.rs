//! The typed `tls` blocks: what a listener terminates TLS with and how a
//! service's nodes are reached over TLS. Paths stay as written (relative to
//! the config file's directory); the data plane reads the files
//! (`hopgate_proxy::tls`), so this crate stays free of I/O.

use std::path::PathBuf;

/// `listeners[].tls`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerTls {
    /// In configured order: the first is the default certificate.
    pub certificates: Vec<CertificateConfig>,
}

/// One certificate of a listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Lower-case names: `example.com` or `*.example.com`.
    pub sni: Vec<String>,
}

/// `services[].tls`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTls {
    /// CA bundle; `None` trusts the system roots.
    pub ca: Option<PathBuf>,
    /// SNI and the name checked in the node's certificate; `None` checks
    /// the node's IP address.
    pub server_name: Option<String>,
    /// Client certificate and key for mutual TLS (both or neither).
    pub client_auth: Option<(PathBuf, PathBuf)>,
}
