//! The `tls` blocks of listeners and services, as written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `listeners[].tls`: terminate TLS with these certificates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawListenerTls {
    /// Chosen by SNI: exact name, then wildcard, then the first.
    #[serde(default)]
    pub certificates: Vec<RawCertificate>,
}

/// One certificate chain and its private key (PEM files).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCertificate {
    #[serde(default)]
    pub cert: String,
    #[serde(default)]
    pub key: String,
    /// Names (`example.com`, `*.example.com`) this certificate answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<String>,
}

/// `services[].tls`: speak TLS to the service's nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUpstreamTls {
    /// CA bundle (PEM) the nodes' certificates must chain to (default: the
    /// system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// Name sent as SNI and checked against the node's certificate
    /// (default: the node's IP address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
    /// Client certificate chain (PEM) for mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert: Option<String>,
    /// Its private key (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<String>,
}
