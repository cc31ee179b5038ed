//! The `proxy_protocol` blocks of listeners and services, as written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// `listeners[].proxy_protocol`: every connection starts with a PROXY
/// protocol header from a trusted L4 balancer, whose client address
/// replaces the socket's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawListenerProxyProtocol {
    /// Header versions accepted: `1` (text), `2` (binary); default both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Vec<Text>>,
    /// The only sources that may connect (required, at least one).
    #[serde(default)]
    pub trusted_cidrs: Vec<String>,
    /// How long the header may take to arrive (default `3s`, 10ms–60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Text>,
}
