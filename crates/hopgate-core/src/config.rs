//! Configuration in three stages: [`raw`] (serde, exactly as written) →
//! [`validate`] (every error at once, each with its field path) → the typed
//! [`Config`] below, which [`crate::snapshot::Snapshot::compile`] turns into
//! the runtime form.
//!
//! Owns: the document schema, parsing of YAML/JSON text, validation rules and
//! the embedded default. Must not touch: files, sockets, live node state.

pub mod auth;
mod bound;
pub mod discovery;
pub mod fleet;
mod proxy_protocol;
mod rate_limits;
pub mod raw;
pub mod route_policy;
mod store;
pub mod summary;
mod tls;
mod tracing;
mod unknown;
pub mod validate;

pub use bound::{MAX_DOCUMENT_BYTES, MAX_VALUES};

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use ipnet::IpNet;

pub use proxy_protocol::{
    ListenerProxyProtocol, ProxyProtocolVersion, DEFAULT_PROXY_PROTOCOL_TIMEOUT,
};
pub use rate_limits::{LimitKey, LimitMode, LimitScope, Rate, RateLimitConfig};
pub use raw::RawConfig;
pub use store::{RedisStoreConfig, RedisTarget, StoreConfig};
pub use tls::{CertificateConfig, ListenerTls, UpstreamTls};
pub use tracing::{OtlpConfig, TracingConfig, DEFAULT_OTLP_ENDPOINT};
pub use validate::validate;

use crate::route::MatchSpec;

/// One configuration problem, named by its field path
/// (`routes[2].service: unknown service "apii"`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// The text format of a configuration document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

/// Parses a document into the raw stage. Structural errors (unknown field,
/// wrong type, bad syntax) come back with the path where they happened; this
/// stops at the first (see [`parse_all`] for every unknown field at once).
pub fn parse(text: &str, format: Format) -> Result<RawConfig, ConfigError> {
    bound::check(text, format == Format::Yaml)?;
    match format {
        Format::Yaml => {
            if text.trim().is_empty() {
                return Err(ConfigError::new("", "the configuration document is empty"));
            }
            let de = serde_yaml_ng::Deserializer::from_str(text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let path = clean_path(&e.path().to_string());
                let inner = e.into_inner();
                let mut msg = inner.to_string();
                // serde_yaml_ng prefixes its message with the path it knows;
                // we already report the path, so drop the repetition.
                if let Some((head, rest)) = msg.split_once(": ") {
                    if !head.contains(' ') && (path.starts_with(head) || head == ".") {
                        msg = rest.to_owned();
                    }
                }
                if let Some(loc) = inner.location() {
                    if !msg.contains("line ") {
                        msg = format!("{msg} (line {}, column {})", loc.line(), loc.column());
                    }
                }
                ConfigError::new(path, msg)
            })
        }
        Format::Json => {
            let mut de = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize(&mut de).map_err(|e| {
                let path = clean_path(&e.path().to_string());
                ConfigError::new(path, e.into_inner().to_string())
            })
        }
    }
}

/// Guesses the format of a document: JSON if it starts with `{`.
pub fn sniff_format(text: &str) -> Format {
    if text.trim_start().starts_with('{') {
        Format::Json
    } else {
        Format::Yaml
    }
}

/// Parses a document into the raw stage, reporting *every* unknown field
/// (each with a "did you mean" when a known name is close) rather than the
/// first; other structural errors still stop the parse.
pub fn parse_all(text: &str, format: Format) -> Result<RawConfig, Vec<ConfigError>> {
    match unknown::parse_lenient(text, format) {
        (Some(raw), errors) if errors.is_empty() => Ok(raw),
        (_, errors) => Err(errors),
    }
}

/// Parses and validates a document in one go. Unknown fields do not hide
/// the rest: they are set aside, the remainder is validated, and every
/// error comes back together.
pub fn load(text: &str, format: Format) -> Result<Config, Vec<ConfigError>> {
    let (raw, mut errors) = unknown::parse_lenient(text, format);
    let Some(raw) = raw else {
        return Err(errors);
    };
    match validate(&raw) {
        Ok(cfg) if errors.is_empty() => Ok(cfg),
        Ok(_) => Err(errors),
        Err(more) => {
            errors.extend(more);
            Err(errors)
        }
    }
}

/// The JSON Schema of the configuration document (`hopgate schema`), for
/// editors and linters. Durations and sizes are strings or numbers here;
/// their syntax is checked by validation.
pub fn json_schema() -> String {
    let mut schema = schemars::schema_for!(RawConfig);
    schema.insert("title".into(), "hopgate configuration".into());
    serde_json::to_string_pretty(&schema).unwrap_or_default()
}

fn clean_path(p: &str) -> String {
    // A syntax error has no field to name: `a.b.?` means "somewhere in a.b".
    let p = p.trim_end_matches('?').trim_end_matches('.');
    if p == "." || p.is_empty() {
        String::new()
    } else {
        p.to_owned()
    }
}

/// The configuration the gateway runs when given none: one public listener,
/// the admin listener, and a `demo` service of two local nodes (the ones
/// `hopgate backend` and `hopgate demo` start).
pub const EMBEDDED_DEFAULT: &str = r#"
listeners:
  - name: public
    address: 127.0.0.1:8080
admin:
  address: 127.0.0.1:9901
services:
  - name: demo
    lb: smooth_wrr
    nodes:
      - { id: node-1, address: 127.0.0.1:8081, version: v1, weight: 100 }
      - { id: node-2, address: 127.0.0.1:8082, version: v1, weight: 100 }
routes:
  - id: default
    match: { path_prefix: / }
    service: demo
"#;

// ----- stage two: the validated, typed configuration -----

/// A validated configuration: every value parsed and in range.
#[derive(Clone, Debug)]
pub struct Config {
    /// The document this came from (serialised back by the admin API).
    pub raw: RawConfig,
    /// `replica_id` as written; the binary fills in the default.
    pub replica_id: Option<String>,
    pub listeners: Vec<ListenerConfig>,
    pub admin: AdminConfig,
    pub services: Vec<ServiceConfig>,
    pub routes: Vec<RouteConfig>,
    /// `rate_limits[]`, indexed by `RouteConfig::rate_limit`.
    pub rate_limits: Vec<RateLimitConfig>,
    pub access: AccessConfig,
    pub timeouts: Timeouts,
    pub limits: Limits,
    pub retries: RetryConfig,
    pub sources: SourcesConfig,
    pub sessions: SessionsConfig,
    pub store: StoreConfig,
    pub maintenance: MaintenanceConfig,
    pub access_log: AccessLogConfig,
    pub upgrade: UpgradeConfig,
    pub canary: CanaryConfig,
    pub tracing: TracingConfig,
    /// `state_dir` as written (relative to the config file's directory).
    pub state_dir: Option<std::path::PathBuf>,
}

/// `canary:`: when a config canary is judged and what rolls it back.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CanaryConfig {
    /// Requests each side needs in the window before it is judged.
    pub min_requests: u64,
    /// How often the judge looks.
    pub interval: Duration,
    /// The sliding window both sides are compared over.
    pub window: Duration,
    /// Canary error rate ≥ this × the baseline's (and ≥ `min_error_delta`
    /// above it) rolls back.
    pub max_error_ratio: f64,
    pub min_error_delta: f64,
    /// Canary p99 ≥ this × the baseline's (and ≥ `min_p99_delta` above
    /// it) rolls back.
    pub max_p99_ratio: f64,
    pub min_p99_delta: Duration,
}

impl Default for CanaryConfig {
    fn default() -> CanaryConfig {
        CanaryConfig {
            min_requests: 50,
            interval: Duration::from_secs(5),
            window: Duration::from_secs(30),
            max_error_ratio: 2.0,
            min_error_delta: 0.01,
            max_p99_ratio: 2.0,
            min_p99_delta: Duration::from_millis(50),
        }
    }
}

/// `access_log:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLogConfig {
    pub enabled: bool,
    /// `None`: the process's `--log-format`.
    pub format: Option<AccessLogFormat>,
    /// `None`: stderr.
    pub path: Option<std::path::PathBuf>,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            enabled: true,
            format: None,
            path: None,
        }
    }
}

/// The access log's line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessLogFormat {
    Text,
    Json,
}

/// `upgrade:`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradeConfig {
    /// The handover socket as written; `None` = [`DEFAULT_UPGRADE_SOCKET`].
    /// A relative path is resolved against the config file's directory.
    pub socket: Option<std::path::PathBuf>,
}

/// The handover socket's file name when `upgrade.socket` is not set.
pub const DEFAULT_UPGRADE_SOCKET: &str = "hopgate-upgrade.sock";

/// Whether maintenance notifications are acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceMode {
    /// Act on notifications from every source (HTTP backends have no
    /// capability handshake, so this is the same as `Enabled`).
    Auto,
    Enabled,
    /// Ignore (and count) every notification.
    Disabled,
}

/// `maintenance:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaintenanceConfig {
    pub mode: MaintenanceMode,
    pub relaxed_timeout: Duration,
    pub max_relaxed: Duration,
    pub post_handoff_relaxed: Duration,
    pub handoff_timeout: Duration,
    /// 1..=10.
    pub max_handoff_retries: u32,
    /// 0 = sized from the pool.
    pub workers: usize,
    /// 0 = sized from the pool.
    pub queue: usize,
    /// Handoff breaker: consecutive dial failures that open it.
    pub breaker_failures: u32,
    /// Handoff breaker: open time before it half-opens.
    pub breaker_reset: Duration,
}

impl Default for MaintenanceConfig {
    fn default() -> Self {
        MaintenanceConfig {
            mode: MaintenanceMode::Auto,
            relaxed_timeout: Duration::from_secs(10),
            max_relaxed: Duration::from_secs(300),
            post_handoff_relaxed: Duration::from_secs(20),
            handoff_timeout: Duration::from_secs(15),
            max_handoff_retries: 3,
            workers: 0,
            queue: 0,
            breaker_failures: 5,
            breaker_reset: Duration::from_secs(60),
        }
    }
}

/// `sessions:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionsConfig {
    pub enabled: bool,
    pub cookie: String,
    pub header: http::HeaderName,
    pub ttl: Duration,
    pub secret_env: String,
    pub previous_secrets_env: Option<String>,
    pub context_max: usize,
    pub secure: CookieSecure,
}

/// `sessions.secure`: when the session cookie carries `Secure`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CookieSecure {
    /// When the request came over TLS, or a trusted proxy said
    /// `X-Forwarded-Proto: https`.
    #[default]
    Auto,
    Always,
    Never,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            enabled: false,
            cookie: "hop_session".to_owned(),
            header: http::HeaderName::from_static("hop-session"),
            ttl: Duration::from_secs(24 * 3600),
            secret_env: "HOPGATE_SESSION_SECRET".to_owned(),
            previous_secrets_env: None,
            context_max: 4096,
            secure: CookieSecure::Auto,
        }
    }
}

/// What draining a node does to the sessions bound to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainMode {
    /// Bound sessions hop on their next request; in-flight requests finish.
    Migrate,
    /// Bound sessions stay until the deadline, then hop.
    Finish,
}

/// `services[].drain`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainConfig {
    pub mode: DrainMode,
    pub deadline: Duration,
}

impl Default for DrainConfig {
    fn default() -> Self {
        DrainConfig {
            mode: DrainMode::Migrate,
            deadline: Duration::from_secs(30),
        }
    }
}

/// `sources:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourcesConfig {
    /// Watch the `--config` file and re-apply it when it changes.
    pub file_watch: bool,
    pub file_interval: Duration,
    /// Fleet mode, when set.
    pub etcd: Option<EtcdSourceConfig>,
}

impl Default for SourcesConfig {
    fn default() -> Self {
        SourcesConfig {
            file_watch: true,
            file_interval: Duration::from_secs(1),
            etcd: None,
        }
    }
}

/// `sources.etcd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSourceConfig {
    /// Client URLs (`http://host:port`), at least one.
    pub endpoints: Vec<String>,
    /// Key prefix, ending in `/`.
    pub prefix: String,
    /// The cache file as written; `None` = the default name next to the
    /// config file (the binary resolves both against the config's folder).
    pub cache: Option<std::path::PathBuf>,
}

/// The prefix used when `sources.etcd.prefix` is absent.
pub const DEFAULT_ETCD_PREFIX: &str = "/hopgate/";
/// The cache file name used when `sources.etcd.cache` is absent.
pub const DEFAULT_ETCD_CACHE: &str = "hopgate-etcd-cache.json";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub address: SocketAddr,
    pub debug_headers: bool,
    /// Routes see, and backends get, the path in normal form
    /// ([`crate::route::normalize_path`]); a path with an encoded slash is
    /// refused.
    pub normalize_path: bool,
    /// HTTPS: the certificates this listener terminates TLS with.
    pub tls: Option<ListenerTls>,
    /// Which server speaks HTTP/1.1 to its clients.
    pub http1: Http1Server,
    /// PROXY protocol headers in front of every connection, when set.
    pub proxy_protocol: Option<ListenerProxyProtocol>,
}

/// The HTTP/1.1 server of a listener's client connections (HTTP/2 is
/// always hyper's): hopgate's own, the only one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Http1Server {
    /// hopgate's own connection loop on its own codec.
    #[default]
    Native,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminConfig {
    pub address: SocketAddr,
    pub token_env: Option<String>,
}

/// Load-balancing policy of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LbPolicy {
    WrrRing,
    SmoothWrr,
    Random,
    P2c,
    Hash,
}

impl LbPolicy {
    pub fn parse(s: &str) -> Option<LbPolicy> {
        Some(match s {
            "wrr_ring" => LbPolicy::WrrRing,
            "smooth_wrr" => LbPolicy::SmoothWrr,
            "random" => LbPolicy::Random,
            "p2c" => LbPolicy::P2c,
            "hash" => LbPolicy::Hash,
            _ => return None,
        })
    }
}

/// What `lb: hash` hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashOn {
    Header(http::HeaderName),
    Cookie(String),
    SourceIp,
}

/// Protocol spoken to a service's nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamProtocol {
    Http1,
    /// HTTP/2 with prior knowledge (h2c), as gRPC backends expect.
    Http2,
}

#[derive(Clone, Debug)]
pub struct ServiceConfig {
    pub name: String,
    pub lb: LbPolicy,
    /// Present exactly when `lb` is [`LbPolicy::Hash`].
    pub hash_on: Option<HashOn>,
    pub protocol: UpstreamProtocol,
    pub pool: PoolConfig,
    /// Active health checks, when configured.
    pub health: Option<HealthConfig>,
    pub outlier: OutlierConfig,
    pub circuit: CircuitConfig,
    pub drain: DrainConfig,
    /// `Hop-Maintenance` from this service's backends.
    pub maintenance: ServiceMaintenance,
    /// TLS to the nodes, when configured.
    pub tls: Option<UpstreamTls>,
    /// `services[].slow_start`: how long a warming node takes to reach
    /// its full share ([`Duration::ZERO`]: off).
    pub slow_start: Duration,
    /// `services[].retries`: "not processed" answers retried elsewhere.
    pub retry_on: crate::retry::RetryOnStatus,
    /// Nodes from DNS (`discovery.dns`), resolved by the control plane and
    /// merged into `nodes` before validation.
    pub discovery: Option<discovery::DnsDiscovery>,
    /// The PROXY protocol header sent first on each new connection to the
    /// nodes, when set.
    pub proxy_protocol: Option<ProxyProtocolVersion>,
    pub nodes: Vec<NodeConfig>,
}

/// `services[].maintenance`: how far a backend of the service is trusted
/// to announce its own maintenance in a `Hop-Maintenance` response header.
/// The admin API (and the fleet's notices) are not bound by it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceMaintenance {
    /// The header is acted on at all (default false: stripped and counted).
    pub in_band: bool,
    /// A MOVING `to=` must fall in one of these (default none: no `to=`).
    pub allow_to_cidrs: Vec<IpNet>,
    /// A notice whose `seq` is more than this above the last one seen for
    /// its node is refused (default [`DEFAULT_MAX_SEQ_JUMP`]).
    pub max_seq_jump: u64,
}

/// `services[].maintenance.max_seq_jump` when not given.
pub const DEFAULT_MAX_SEQ_JUMP: u64 = 1000;

impl Default for ServiceMaintenance {
    fn default() -> Self {
        ServiceMaintenance {
            in_band: false,
            allow_to_cidrs: Vec::new(),
            max_seq_jump: DEFAULT_MAX_SEQ_JUMP,
        }
    }
}

impl ServiceMaintenance {
    /// `to` falls in `allow_to_cidrs` (IPv4-mapped IPv6 addresses are
    /// compared as the IPv4 address they carry).
    pub fn allows_to(&self, to: std::net::IpAddr) -> bool {
        let to = match to {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(to, std::net::IpAddr::V4),
            v4 => v4,
        };
        self.allow_to_cidrs.iter().any(|c| c.contains(&to))
    }
}

/// A node's health as active checks see it. The config names the one a
/// node starts with ([`HealthConfig::initial`]); live node state
/// (`crate::node`, which re-exports it) holds the current one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Not checked yet: routable.
    Unknown = 0,
    Healthy = 1,
    Unhealthy = 2,
}

/// Active health checks of a service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// Consecutive passes that make a node healthy.
    pub rise: u32,
    /// Consecutive failures that make a node unhealthy.
    pub fall: u32,
    /// Inclusive range of statuses that pass.
    pub expect_status: (u16, u16),
    /// Health before the first check: `Unknown` or `Healthy` (both routable).
    pub initial: Health,
}

/// Passive outlier detection of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutlierConfig {
    /// 0 = never eject on 5xx.
    pub consecutive_5xx: u32,
    /// 0 = never eject on connect failures/resets.
    pub consecutive_failures: u32,
    pub base_ejection: Duration,
    pub max_ejection: Duration,
    pub max_ejected_percent: u8,
}

impl Default for OutlierConfig {
    fn default() -> Self {
        OutlierConfig {
            consecutive_5xx: 5,
            consecutive_failures: 1,
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(60),
            max_ejected_percent: 50,
        }
    }
}

/// Per-node circuit breaker of a service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitConfig {
    pub enabled: bool,
    pub failure_threshold: u32,
    pub reset_timeout: Duration,
    pub max_requests: u32,
}

impl Default for CircuitConfig {
    fn default() -> Self {
        CircuitConfig {
            enabled: true,
            failure_threshold: 5,
            reset_timeout: Duration::from_secs(60),
            max_requests: 3,
        }
    }
}

/// Retry policy (`retries:`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetryConfig {
    /// Most attempts per request, the first included.
    pub attempts: u32,
    /// Retries allowed as a share of recent requests.
    pub budget: f64,
    /// Largest request body buffered so a sent request can be replayed.
    pub buffer_body: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: 3,
            budget: 0.2,
            buffer_body: 64 << 10,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    pub max_idle: usize,
    pub idle_timeout: Duration,
    /// Admission limits: connections per node and the queue in front of
    /// them.
    pub limits: PoolLimits,
}

/// How many upstream connections one node may have open, and how many
/// requests may wait for one (`services[].pool.max_connections`,
/// `max_pending`, `queue_timeout`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// Open upstream connections per node (HTTP/2: connections, not
    /// streams), counting those being dialled. At least 1.
    pub max_connections: usize,
    /// Requests that may wait for a connection when all are busy; 0 = none
    /// (refused at once).
    pub max_pending: usize,
    /// How long a request waits in that queue.
    pub queue_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            max_connections: DEFAULT_POOL_MAX_CONNECTIONS,
            max_pending: DEFAULT_POOL_MAX_PENDING,
            queue_timeout: DEFAULT_POOL_QUEUE_TIMEOUT,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub id: String,
    pub address: SocketAddr,
    /// Empty when the node has no version.
    pub version: String,
    /// 1..=10_000.
    pub weight: u32,
    pub zone: Option<String>,
}

/// What a rule sends traffic to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Any node of the service.
    Service,
    /// Nodes of one version.
    Version(String),
    /// A weighted split between versions (canary); weights are > 0.
    Split(Vec<(String, u32)>),
}

#[derive(Clone, Debug)]
pub struct RouteConfig {
    pub id: String,
    pub priority: i32,
    pub matcher: MatchSpec,
    /// Index into [`Config::services`].
    pub service: usize,
    pub target: Target,
    pub strict_version: bool,
    pub enabled: bool,
    /// `timeouts`, `retries`, `limits` as the route sets them
    /// ([`route_policy`]: what it inherits is resolved when compiled).
    pub policy: route_policy::RoutePolicy,
    /// Index into [`Config::rate_limits`].
    pub rate_limit: Option<usize>,
    /// `filters`, compiled ([`crate::filter`]); `None` without filters.
    pub filters: Option<std::sync::Arc<crate::filter::RouteFilters>>,
    /// `auth`: who may use the route (checked before anything else).
    pub auth: Option<std::sync::Arc<auth::RouteAuth>>,
}

#[derive(Clone, Debug, Default)]
pub struct AccessConfig {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    pub trusted_proxies: Vec<IpNet>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// Until the upstream's response head arrives.
    pub request: Duration,
    /// Idle client keep-alive connections and idle pooled upstream connections.
    pub idle: Duration,
    /// Reading a client's request head (slowloris guard).
    pub header_read: Duration,
    /// Graceful shutdown: how long in-flight requests may take to finish.
    pub shutdown: Duration,
    /// Graceful shutdown: how long `/readyz` answers 503, while everything
    /// else is still served, before the listeners stop accepting (so load
    /// balancers stop sending first). Zero skips the wait.
    pub shutdown_delay: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(1),
            request: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            header_read: Duration::from_secs(10),
            shutdown: Duration::from_secs(30),
            shutdown_delay: Duration::from_secs(2),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub max_uri_bytes: usize,
    pub max_body_bytes: u64,
    /// Client connections per listener, when the config sets it. Unset,
    /// the binary derives it from the process's file-descriptor limit at
    /// start ([`derive_max_connections`]) instead of a fixed number that
    /// may not fit the machine.
    pub max_connections: Option<usize>,
    /// Open connections of one client address at most, over every
    /// listener (`limits.max_connections_per_client`; `None`: no bound).
    pub max_connections_per_client: Option<u32>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 16 << 10,
            max_headers: 100,
            max_uri_bytes: 8 << 10,
            max_body_bytes: 10 << 20,
            max_connections: None,
            max_connections_per_client: None,
        }
    }
}

/// The most client connections per listener a derived
/// `limits.max_connections` allows, however many descriptors there are.
pub const MAX_CONNECTIONS_CAP: usize = 10_000;
/// File descriptors kept for everything that is not a client or an
/// upstream connection: the admin API, health checks, logs, the config
/// and session files.
pub const RESERVED_FDS: u64 = 256;

/// `limits.max_connections` for a config that does not set it: with
/// `nofile` descriptors (`None`: unlimited) shared by `listeners`
/// listeners, each client connection counted with the upstream connection
/// it may hold (two descriptors, as HAProxy derives `maxconn` from
/// `ulimit -n`), after [`RESERVED_FDS`]; at most [`MAX_CONNECTIONS_CAP`],
/// at least 1. A machine's limit never stops the process: a low one gives
/// a low value.
/// Whether `listeners` listeners of `max_connections` client connections
/// each fit in `limit` file descriptors (`None`: unlimited) with
/// [`RESERVED_FDS`] to spare. The same check refuses a start, a
/// `hopgate validate` and a reload; the error names the field and shows
/// the arithmetic.
pub fn check_fd_fit(
    listeners: usize,
    max_connections: usize,
    limit: Option<u64>,
) -> Result<(), ConfigError> {
    let Some(limit) = limit else { return Ok(()) };
    let need = (listeners as u64)
        .saturating_mul(max_connections as u64)
        .saturating_add(RESERVED_FDS);
    if need > limit {
        return Err(ConfigError::new(
            "limits.max_connections",
            format!("{max_connections} per listener × {listeners} listener(s) + {RESERVED_FDS} reserved = {need} file descriptors, above this process's limit of {limit} (RLIMIT_NOFILE hard limit; raise it with `ulimit -Hn` / systemd LimitNOFILE=, or lower limits.max_connections, or leave it unset to derive it from the limit)"),
        ));
    }
    Ok(())
}

pub fn derive_max_connections(listeners: usize, nofile: Option<u64>) -> usize {
    let Some(nofile) = nofile else {
        return MAX_CONNECTIONS_CAP;
    };
    let per = nofile.saturating_sub(RESERVED_FDS) / (2 * listeners.max(1) as u64);
    usize::try_from(per)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS_CAP)
}

/// Default idle connections kept per node. Above the number of requests a
/// node has in flight at its busiest, every burst closes the connections
/// the queue cannot hold and dials them again for the next one (at 64, two
/// nodes under 128 busy client connections dialled for ~2 % of requests);
/// Traefik keeps 200 by default, HAProxy and Envoy cap only open
/// connections.
pub const DEFAULT_POOL_MAX_IDLE: usize = 256;
/// Default open upstream connections per node (Envoy's default
/// `max_connections` circuit-breaker threshold).
pub const DEFAULT_POOL_MAX_CONNECTIONS: usize = 1024;
/// Default requests waiting for a connection per node (Envoy's default
/// `max_pending_requests`).
pub const DEFAULT_POOL_MAX_PENDING: usize = 1024;
/// Default wait in that queue (HAProxy's `timeout queue` is unset by
/// default and falls back to `timeout connect`, commonly 5 s).
pub const DEFAULT_POOL_QUEUE_TIMEOUT: Duration = Duration::from_secs(5);
/// Default node weight.
pub const DEFAULT_WEIGHT: u32 = 100;
