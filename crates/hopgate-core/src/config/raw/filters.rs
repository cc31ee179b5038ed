//! `routes[].filters`, as written: one entry per filter, each entry exactly
//! one kind (the Gateway API HTTPRoute vocabulary: request and response
//! header edits, URL rewrite, redirect, direct response, mirror). Shape
//! only; the rules live in `validate/filters.rs`, the compiled program in
//! [`crate::filter`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// One filter of a route; exactly one of its fields is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFilter {
    /// Edit the request's headers before it goes upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_headers: Option<RawHeaderEdits>,
    /// Edit the answer's headers before they go to the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_headers: Option<RawHeaderEdits>,
    /// Rewrite the path and/or the host the upstream sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_rewrite: Option<RawUrlRewrite>,
    /// Answer with a redirect instead of forwarding (no service needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<RawRedirect>,
    /// Answer with a fixed response instead of forwarding (no service
    /// needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_response: Option<RawDirectResponse>,
    /// Send a copy of the request to another service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<RawMirror>,
}

/// `add` (another line), `set` (replace every line of the name), `remove`.
/// Values may use `${client_ip}`, `${request_id}`, `${route_id}`,
/// `${host}`, `${scheme}`; `$$` is a literal `$`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderEdits {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// `url_rewrite:` — what the upstream sees instead of the client's path
/// and host; the query is kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUrlRewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<RawPathRewrite>,
    /// The `Host` (HTTP/2 `:authority`) sent upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// One of `replace_prefix` (the route's `match.path_prefix` replaced),
/// `full` (the whole path), or `regex` with `replace` (`$1`, `${name}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPathRewrite {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<String>,
}

/// `redirect:` — unset parts keep the request's; the query is kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    /// `http` or `https`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<Text>,
    /// `replace_prefix` or `full` (no regex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<RawPathRewrite>,
    /// 301, 302 (default), 303, 307 or 308.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Text>,
}

/// `direct_response:` — a fixed answer (maintenance pages).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDirectResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// A file read when the config is loaded (relative to the config
    /// file's directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_file: Option<String>,
}

/// `mirror:` — a copy of a sampled share of requests to another service.
/// The copy never delays or fails the client's request; its answer is
/// discarded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMirror {
    /// The service the copies go to (through its own balancing and pools;
    /// it may be the route's own service).
    #[serde(default)]
    pub service: String,
    /// The share of requests copied, 0 to 100; fractions allowed (down to
    /// 0.0001). Default 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<Text>,
    /// Copies of this route in flight at once, 1 to 65536; a copy over it
    /// is dropped (and counted). Default 64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<Text>,
}
