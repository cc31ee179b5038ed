//! The `services[].discovery` block, as written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// `services[].discovery`: where nodes come from besides the static list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDiscovery {
    /// Nodes from DNS records: every resolved address is a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<RawDnsDiscovery>,
}

/// `services[].discovery.dns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDnsDiscovery {
    /// The name to resolve (`api.internal`; for `type: srv`
    /// `_http._tcp.api.internal`).
    #[serde(default)]
    pub name: String,
    /// The nodes' port: required for `a` and `aaaa`, not allowed for `srv`
    /// (the records carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<Text>,
    /// `a` (default) | `aaaa` | `srv`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name servers as `ip:port` (UDP and TCP); default: `/etc/resolv.conf`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolvers: Option<Vec<String>>,
    /// Shortest wait between two resolutions, whatever the records' TTL
    /// (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_min: Option<Text>,
    /// Longest wait between two resolutions, whatever the records' TTL
    /// (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_max: Option<Text>,
}
