//! Stage one: the configuration document exactly as written (docs/config.md).
//!
//! Every struct denies unknown fields so a typo is an error naming its path,
//! not a silently ignored line. Durations, sizes and CIDRs stay text here;
//! [`super::validate`] parses them so that *all* their errors can be reported
//! at once, each with its field path.

use std::collections::BTreeMap;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize};

mod auth;
mod discovery;
mod filters;
mod proxy_protocol;
mod rate_limits;
mod route_policy;
mod tls;
pub use auth::{
    RawAuth, RawAuthCache, RawBasicAuth, RawCacheKey, RawForwardAuth, RawJwksService, RawJwtAuth,
};
pub use discovery::{RawDiscovery, RawDnsDiscovery};
pub use filters::{
    RawDirectResponse, RawFilter, RawHeaderEdits, RawMirror, RawPathRewrite, RawRedirect,
    RawUrlRewrite,
};
pub use proxy_protocol::RawListenerProxyProtocol;
pub use rate_limits::{RawLimitKey, RawRateLimit};
pub use route_policy::{RawRouteLimits, RawRouteRetries, RawRouteTimeouts};
pub use tls::{RawCertificate, RawListenerTls, RawUpstreamTls};

/// A scalar kept as text (`2s`, `64KiB`, `10`): YAML may write it as a string
/// or a number; validation decides what it means.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Text;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text, E> {
                Ok(Text(v.to_owned()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Text, E> {
                Ok(Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Text {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Text".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": ["string", "number", "boolean"] })
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(s.to_owned())
    }
}

/// The whole configuration document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// This replica's name in fleet mode (default: hostname + admin port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_id: Option<String>,
    #[serde(default)]
    pub listeners: Vec<RawListener>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<RawAdmin>,
    #[serde(default)]
    pub services: Vec<RawService>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    /// Named rate-limit policies, referred to by `routes[].rate_limit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<RawRateLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<RawAccess>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<RawTimeouts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawLimits>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<RawRetries>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<RawSources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<RawSessions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<RawStore>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<RawMaintenance>,
    /// The access log: on or off, text or JSON, stderr or a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_log: Option<RawAccessLog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<RawUpgrade>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<RawCanary>,
    /// Span export (OTLP) of the gateway's own spans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracing: Option<RawTracing>,
    /// A directory where the running state (config versions applied
    /// through the admin API, drains, maintenance state, a baking canary)
    /// is kept, so that a plain restart resumes it. Relative to the config
    /// file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<std::path::PathBuf>,
}

/// `tracing:` — the gateway's own spans.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTracing {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otlp: Option<RawOtlp>,
}

/// `tracing.otlp:` — export of spans to an OpenTelemetry collector
/// (OTLP/HTTP).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOtlp {
    /// Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The collector's traces URL (default
    /// `http://127.0.0.1:4318/v1/traces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `http/protobuf` (the only one offered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `service.name` of the spans (default `hopgate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Share of the traces the gateway starts that are recorded, 0 to 1
    /// (default 1); a client's sampled flag decides for its own traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_ratio: Option<Text>,
    /// Spans waiting for export at most; more are dropped (default 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Text>,
    /// Spans per export request at most (default 512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Text>,
    /// Longest wait before a partial batch is sent (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Text>,
    /// Bound of one export request (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Text>,
    /// Extra request headers (for example an API key for a hosted
    /// collector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// Zero-downtime binary upgrades (`hopgate run --upgrade`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawUpgrade {
    /// The Unix socket the running process hands its listeners over on
    /// (default `hopgate-upgrade.sock` next to the config file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
}

/// `access_log:` — one line per request.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAccessLog {
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `text` or `json`; default: the `--log-format` of the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// A file to append to; stderr when absent or null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// An address clients connect to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawListener {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub address: String,
    /// Return `X-Upstream-Addr` and `X-Route-Rule-Id` to clients too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub debug_headers: bool,
    /// Match routes against the normalised path and forward it (default
    /// true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize_path: Option<bool>,
    /// Terminate TLS (HTTPS) with these certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawListenerTls>,
    /// The HTTP/1.1 server of client connections: `native` (hopgate's own,
    /// the only one; `hyper` is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http1: Option<String>,
    /// Read a PROXY protocol header (v1/v2) first on every connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<RawListenerProxyProtocol>,
}

/// The admin listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    #[serde(default)]
    pub address: String,
    /// Environment variable holding the bearer token (required off loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
}

/// A named set of nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawService {
    #[serde(default)]
    pub name: String,
    /// `wrr_ring | smooth_wrr | random | p2c | hash` (default `smooth_wrr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lb: Option<String>,
    /// What `lb: hash` hashes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_on: Option<RawHashOn>,
    /// Upstream protocol: `http1` (default) or `http2` (h2c prior knowledge, for gRPC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Per-node connection pool tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<RawPool>,
    /// Active health checks (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<RawHealth>,
    /// Passive outlier detection (on with defaults when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier: Option<RawOutlier>,
    /// Per-node circuit breaker (on with defaults when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub circuit: Option<RawCircuit>,
    /// What draining a node does to its sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<RawDrain>,
    /// Whether (and within which bounds) the service's nodes may announce
    /// maintenance in a `Hop-Maintenance` response header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<RawServiceMaintenance>,
    /// Speak TLS to the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawUpstreamTls>,
    /// Answers of the service's backends that mean "not processed",
    /// retried on another node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<RawServiceRetries>,
    /// A node that is new, or back from unhealthy, ejected or an open
    /// circuit, ramps its share from ~10 % to its full weight over this
    /// window (`30s`; default off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<Text>,
    /// Nodes discovered by DNS, besides (or instead of) the static ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<RawDiscovery>,
    /// Send a PROXY protocol header (`v1` or `v2`) on every new connection
    /// to the nodes, carrying the client's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<String>,
    #[serde(default)]
    pub nodes: Vec<RawNode>,
}

/// `services[].maintenance`: the in-band `Hop-Maintenance` header of one
/// service's backends. Off unless `in_band: true`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawServiceMaintenance {
    /// Act on `Hop-Maintenance` response headers (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_band: Option<bool>,
    /// Where a MOVING `to=` may point (default: nowhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_to_cidrs: Option<Vec<String>>,
    /// Largest step of `seq` above the last one seen for the node (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seq_jump: Option<Text>,
}

/// Key for consistent hashing: exactly one of the fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHashOn {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ip: Option<bool>,
}

/// Upstream connection pool settings of a service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    /// Idle keep-alive connections kept per node (default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_idle: Option<Text>,
    /// How long an idle pooled connection is kept (default: `timeouts.idle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Text>,
    /// Open upstream connections per node (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<Text>,
    /// Requests that may wait for a connection per node (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pending: Option<Text>,
    /// How long a request may wait for a connection (default 5s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_timeout: Option<Text>,
}

/// One backend instance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNode {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A routing rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    #[serde(default)]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Text>,
    #[serde(default, rename = "match")]
    pub matches: RawMatch,
    #[serde(default)]
    pub service: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Vec<RawSplit>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_version: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// This route's timeouts (unset: the global ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeouts: Option<RawRouteTimeouts>,
    /// This route's retries (unset: the service's and the global ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<RawRouteRetries>,
    /// This route's request limits (unset: the global ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<RawRouteLimits>,
    /// The `rate_limits[]` policy this route's requests pass through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<String>,
    /// Applied in the order written (`raw/filters.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<RawFilter>,
    /// Who may use the route (`jwt` or `basic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<RawAuth>,
}

/// Match conditions of a rule; every present condition must hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_regex: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_cidrs: Vec<String>,
}

/// One arm of a weighted version split.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSplit {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub weight: Option<Text>,
}

/// Client IP access control.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAccess {
    #[serde(default)]
    pub allow_cidrs: Vec<String>,
    #[serde(default)]
    pub deny_cidrs: Vec<String>,
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
}

/// Timeouts (durations).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTimeouts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header_read: Option<Text>,
    /// How long shutdown waits for in-flight requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown: Option<Text>,
    /// How long `/readyz` answers 503 before the listeners stop accepting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_delay: Option<Text>,
}

/// Request limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_header_bytes: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_headers: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_uri_bytes: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<Text>,
    /// Open connections of one client address at most, over every
    /// listener (after PROXY protocol); one more is closed at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_client: Option<Text>,
}

/// Active health checks of a service's nodes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rise: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fall: Option<Text>,
    /// `200`, or a class like `2xx`, or a range `200-399` (default `2xx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_status: Option<Text>,
    /// `unknown` (default) or `healthy`: the state before the first check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<String>,
}

/// Passive outlier detection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOutlier {
    /// Consecutive 5xx answers that eject a node (0 = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_5xx: Option<Text>,
    /// Consecutive failed connects or resets that eject a node (0 = never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_failures: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ejection: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ejection: Option<Text>,
    /// Most of a service that may be ejected at once, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ejected_percent: Option<Text>,
}

/// Per-node circuit breaker.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCircuit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_timeout: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<Text>,
}

/// Retry policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRetries {
    /// Most attempts per request, the first included (1..=10, default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Text>,
    /// Retries allowed as a share of recent requests (0..=1, default 0.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Text>,
    /// Largest request body kept to replay a retry (default 64KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_body: Option<Text>,
}

/// `services[].retries`: statuses retried on another node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawServiceRetries {
    /// Retried for every method while no byte of the answer went out
    /// (typically `[503]`: a backend refusing work while it drains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status: Option<Vec<Text>>,
    /// Retried only for idempotent requests or ones with an
    /// `Idempotency-Key` (typically `[502, 504]` from a backend's own proxy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_status_idempotent: Option<Vec<Text>>,
}

/// Where configuration comes from besides the command line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<RawFileSource>,
    /// Fleet mode: runtime sections, discovery and operator actions from etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd: Option<RawEtcdSource>,
}

/// The etcd cluster holding the shared configuration (fleet mode).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEtcdSource {
    /// Client URLs, like `http://127.0.0.1:2379`.
    #[serde(default)]
    pub endpoints: Vec<String>,
    /// Key prefix of this fleet (default `/hopgate/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Last good document and node set, for booting while etcd is down
    /// (default `hopgate-etcd-cache.json` next to the config file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
}

/// The config file given with `--config`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawFileSource {
    /// Re-apply the file when it changes (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch: Option<bool>,
    /// How often the file is looked at (default 1s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Text>,
}

/// Draining behaviour of a service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDrain {
    /// `migrate` (default): bound sessions hop on their next request.
    /// `finish`: they stay until `deadline`, then hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Text>,
}

/// Gateway-minted sessions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    /// Default true when the section is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// Environment variable with earlier secrets, comma-separated (rotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secrets_env: Option<String>,
    /// Largest `Hop-Session-Context` kept (default 4KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_max: Option<Text>,
    /// The cookie's `Secure` attribute: `auto` (default), `true`, `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<RawSecure>,
}

/// `sessions.secure`: a boolean or the word `auto`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawSecure {
    Bool(bool),
    Word(String),
}

/// Where session bindings live.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// `memory` (default) or `redis`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// redis: `redis://[user:password@]host[:port][/db]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// redis: the master found through Redis Sentinel (instead of `url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<RawRedisSentinel>,
    /// redis: a Redis Cluster (instead of `url`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<RawRedisCluster>,
    /// redis: prefix of every key (default `hopgate:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// redis: writes held while Redis is away (default 100000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_queue: Option<Text>,
    /// memory: persist bindings to this file so a restart keeps them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<Text>,
    /// memory with path: how often bindings are written (default 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persist_interval: Option<Text>,
}

/// `store.sentinel:` — Redis Sentinel: the sentinels tell which server is
/// the master, and again after a failover.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRedisSentinel {
    /// The name the sentinels monitor the master under (`mymaster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_name: Option<String>,
    /// Sentinels, `redis://host:port` (26379 by default); at least one.
    #[serde(default)]
    pub endpoints: Vec<String>,
}

/// `store.cluster:` — Redis Cluster: the nodes to learn the cluster from.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRedisCluster {
    /// Cluster nodes, `redis://[user:password@]host:port`; at least one
    /// (the others are discovered).
    #[serde(default)]
    pub endpoints: Vec<String>,
}

/// `canary:`: how a config canary is judged against the baseline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCanary {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_ratio: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_error_delta: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_p99_ratio: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p99_delta: Option<Text>,
}

/// Maintenance notifications and connection handoff.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawMaintenance {
    /// `auto` (default), `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relaxed_timeout: Option<Text>,
    /// Longest a relaxed period lasts without its end notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_relaxed: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_handoff_relaxed: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_timeout: Option<Text>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_handoff_retries: Option<Text>,
    /// Handoff workers (0 = sized from the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<Text>,
    /// Handoff queue size (0 = sized from the pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<Text>,
    /// Per-endpoint handoff circuit breaker: consecutive dial failures that
    /// open it (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_failures: Option<Text>,
    /// How long it stays open before half-opening (default 60s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker_reset: Option<Text>,
}
