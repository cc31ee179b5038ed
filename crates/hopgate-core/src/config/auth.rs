//! The typed `routes[].auth` block: how a route checks who calls it. Paths
//! stay as written (relative to the config file's directory); services
//! are named (the data plane finds them in the snapshot it runs under).
//! The data plane reads the files, asks the services and checks
//! credentials (`hopgate_proxy::auth`), so this crate stays free of I/O
//! and crypto.

use std::path::PathBuf;
use std::time::Duration;

use http::HeaderName;

/// `routes[].auth.jwt.clock_skew` when absent.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(30);

/// One route's authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteAuth {
    pub kind: AuthKind,
    /// The `realm` of the `WWW-Authenticate` challenge.
    pub realm: String,
    /// `Authorization` is removed before the backend.
    pub remove_authorization: bool,
    /// Headers removed from every client request before the check: the
    /// ones the gateway sets from a token's claims.
    pub strip: Vec<HeaderName>,
}

impl RouteAuth {
    /// The key or password file this route reads, if it reads one (keys
    /// fetched from a service and forward auth read none).
    pub fn file(&self) -> Option<&std::path::Path> {
        match &self.kind {
            AuthKind::Jwt(j) => match &j.keys {
                JwksSource::File(f) => Some(f),
                JwksSource::Service(_) => None,
            },
            AuthKind::Basic { htpasswd } => Some(htpasswd),
            AuthKind::Forward(_) => None,
        }
    }
}

/// What a client proves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthKind {
    /// A bearer token signed by a key of a JWKS file.
    Jwt(JwtAuth),
    /// A user and password of an htpasswd file.
    Basic { htpasswd: PathBuf },
    /// The answer of an authorization service (a subrequest).
    Forward(ForwardAuth),
}

/// `routes[].auth.jwt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtAuth {
    /// Where the keys come from.
    pub keys: JwksSource,
    pub issuer: Option<String>,
    /// Any one of them in `aud`; empty: `aud` is not checked.
    pub audiences: Vec<String>,
    pub clock_skew: Duration,
    /// Claim name and the header it is copied into, in name order.
    pub claims_to_headers: Vec<(String, HeaderName)>,
}

/// Where a JWT route's keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// `jwks_file`: a JWKS file, re-read when it changes.
    File(PathBuf),
    /// `jwks`: fetched from a hopgate service, refreshed periodically and
    /// when a token names a key the set does not have.
    Service(JwksService),
}

/// `routes[].auth.jwt.jwks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwksService {
    /// A service of the config (by name).
    pub service: String,
    /// The path (and query) asked for, starting with `/`.
    pub path: String,
    /// How often the set is fetched again.
    pub refresh: Duration,
}

/// `routes[].auth.jwt.jwks.refresh` when absent.
pub const DEFAULT_JWKS_REFRESH: Duration = Duration::from_secs(300);

/// `routes[].auth.forward.timeout` when absent: the whole check, every
/// attempt included.
pub const DEFAULT_FORWARD_TIMEOUT: Duration = Duration::from_secs(2);

/// `routes[].auth.forward.cache.max_entries` when absent.
pub const DEFAULT_CACHE_ENTRIES: usize = 10_000;

/// `routes[].auth.forward`: each request (or each cache miss) is asked of
/// an authorization service first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForwardAuth {
    /// A service of the config (by name): its nodes, health, breaker and
    /// drain apply to the checks.
    pub service: String,
    /// The path (and query) the check asks for, starting with `/`.
    pub path: String,
    /// Headers of the client's request sent along with the check.
    pub copy_request_headers: Vec<HeaderName>,
    /// Headers of an allowing answer set on the request to the backend
    /// (client-sent copies are always removed first).
    pub copy_response_headers: Vec<HeaderName>,
    /// Decisions remembered, when set.
    pub cache: Option<DecisionCache>,
    pub failure_mode: FailureMode,
    /// The longest a check may take, every attempt included.
    pub timeout: Duration,
}

/// `routes[].auth.forward.cache`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecisionCache {
    pub key: CacheKey,
    pub ttl: Duration,
    /// The most decisions remembered for the route.
    pub max_entries: usize,
}

/// What a decision is remembered by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheKey {
    /// The value of a request header (`Authorization`).
    Header(HeaderName),
    /// The value of a cookie.
    Cookie(String),
}

/// What a request gets when the authorization service cannot answer (no
/// node reachable, a timeout, a 5xx).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureMode {
    /// Refused with `503` (the default).
    Deny,
    /// Let through, without the identity headers.
    Allow,
}
