//! `routes[].timeouts`, `routes[].retries` and `routes[].limits` as
//! written: a route's own policy, every field optional (unset inherits;
//! the order is in [`crate::config::route_policy`]).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// `routes[].timeouts`: this route's timeouts, overriding the global ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRouteTimeouts {
    /// The whole request, every attempt included, until the answer's head
    /// (`120s`); past it the client gets 504. Default: no bound across
    /// attempts (each attempt is bounded by `attempt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Text>,
    /// One attempt, until the answer's head (`30s`); an attempt past it is
    /// retried when the retry rules allow, else 504. Default: this route's
    /// `request` when set, else the global `timeouts.request`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<Text>,
    /// Streams on this route: how long a WebSocket (upgraded) tunnel may
    /// be idle, and an HTTP/2 client may accept no response data
    /// (`300s`). Default: the global `timeouts.idle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Text>,
}

/// `routes[].retries`: this route's retries, overriding the service's and
/// the global ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRouteRetries {
    /// Most attempts per request, the first included (1..=10; 1 turns
    /// retries off on this route). Default: the global `retries.attempts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Text>,
    /// Answers retried on another node for every method (like
    /// `services[].retries.on_status`; `[]` retries none on this route).
    /// Default: the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status: Option<Vec<Text>>,
    /// Answers retried only for replay-safe requests (like
    /// `services[].retries.on_status_idempotent`). Default: the service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status_idempotent: Option<Vec<Text>>,
    /// The share of a retry each request of this route adds to its
    /// service's retry budget (0..=1). Default: the global
    /// `retries.budget`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Text>,
}

/// `routes[].limits`: this route's request limits, overriding the global
/// ones.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRouteLimits {
    /// Largest request body on this route, larger or smaller than the
    /// global one (`100MiB`); past it the client gets 413. Default: the
    /// global `limits.max_body_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<Text>,
}
