//! `rate_limits:` and the parts of a policy's key, as written.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// `rate_limits[]`: a named policy that routes refer to
/// (`routes[].rate_limit`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRateLimit {
    /// The policy's name, unique among `rate_limits`.
    #[serde(default)]
    pub name: String,
    /// What a bucket belongs to: `client_ip`, `session`, `route`,
    /// `{ header: X-Api-Key }`, `{ cookie: name }`, or several of them.
    #[serde(default)]
    pub key: Vec<RawLimitKey>,
    /// Tokens refilled per second, minute or hour: `100/s`, `600/m`,
    /// `1000/h`. Optional when `max_in_flight` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Text>,
    /// Size of each bucket, the most requests a key may send at once
    /// (default: the `N` of `rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<Text>,
    /// `local` (each replica counts alone; the default) or `fleet` (the
    /// replicas share the rate through the Redis store; needs
    /// `store.kind: redis` and a `rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// `enforce` (answer 429; the default) or `log` (count and log, let
    /// the request through).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Concurrent requests per key at most (null: no bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<Text>,
}

/// One part of a policy's key: a name (`client_ip`, `session`, `route`)
/// or a one-entry map (`{ header: X-Api-Key }`, `{ cookie: name }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawLimitKey {
    Name(String),
    Map(BTreeMap<String, String>),
}
