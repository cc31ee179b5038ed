//! `routes[].auth`, as written: who may use a route (a JWT, a user of an
//! htpasswd file, or the answer of an authorization service).
//!
//! Owns the shape of the block only; its checks are
//! `validate/auth.rs`, reading the key and password files is the data
//! plane's (`hopgate_proxy::auth`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// `routes[].auth`: exactly one of `jwt`, `basic` and `forward`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// A bearer token (JWT) signed by a key of a JWKS file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<RawJwtAuth>,
    /// A user and password of an htpasswd file (bcrypt hashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<RawBasicAuth>,
    /// Ask an authorization service (a hopgate service) about each
    /// request first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<RawForwardAuth>,
}

/// `routes[].auth.forward`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawForwardAuth {
    /// The service that answers the checks (a name from `services`).
    #[serde(default)]
    pub service: String,
    /// The path the check asks for (starts with `/`; a query may follow).
    #[serde(default)]
    pub path: String,
    /// Request headers sent along with the check (besides the
    /// `X-Forwarded-*` ones that describe the request).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_request_headers: Vec<String>,
    /// Headers of an allowing answer set on the request to the backend;
    /// client-sent copies are always removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_response_headers: Vec<String>,
    /// Remember decisions by a header or cookie for a short while (no
    /// cache when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<RawAuthCache>,
    /// `deny` (default: answer 503) or `allow` when the service cannot
    /// answer (no node reachable, a timeout, a 5xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<String>,
    /// The longest a check may take, every attempt included (default 2s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Text>,
}

/// `routes[].auth.forward.cache`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAuthCache {
    /// What a decision is remembered by: `{ header: NAME }` or
    /// `{ cookie: NAME }`.
    #[serde(default)]
    pub key: RawCacheKey,
    /// How long a decision is remembered (up to 1h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Text>,
    /// The most decisions remembered for the route (default 10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<Text>,
}

/// `routes[].auth.forward.cache.key`: one of `header` and `cookie`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCacheKey {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie: Option<String>,
}

/// `routes[].auth.jwt.jwks`: the key set fetched from a hopgate service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJwksService {
    /// The service that serves the key set (a name from `services`).
    #[serde(default)]
    pub service: String,
    /// The path asked for (starts with `/`), e.g. `/.well-known/jwks.json`.
    #[serde(default)]
    pub path: String,
    /// How often the set is fetched again (default 5m; 10s to 24h). A
    /// token naming an unknown `kid` also starts a fetch (at most one
    /// every 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<Text>,
}

/// `routes[].auth.jwt`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJwtAuth {
    /// A JWKS file (`{"keys": [...]}`), relative to the config file's
    /// directory; re-read when it changes (keys rotate without a reload).
    /// One of `jwks_file` and `jwks`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub jwks_file: String,
    /// The key set fetched from a hopgate service instead of a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks: Option<RawJwksService>,
    /// The `iss` every token must carry (not checked when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    /// A token's `aud` must name at least one of these (not checked when
    /// absent; an empty list is an error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audiences: Option<Vec<String>>,
    /// Leeway for `exp` and `nbf` (default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_skew: Option<Text>,
    /// Claim name → request header the backend gets it in. Client-sent
    /// copies of these headers are always removed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims_to_headers: BTreeMap<String, String>,
    /// The `realm` of the `WWW-Authenticate` challenge (default: the
    /// route id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm: Option<String>,
    /// Remove the `Authorization` header before the backend (default
    /// false: the backend gets the token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_authorization: Option<bool>,
}

/// `routes[].auth.basic`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBasicAuth {
    /// An htpasswd file of `user:bcrypt-hash` lines, relative to the config
    /// file's directory; re-read when it changes.
    #[serde(default)]
    pub htpasswd: String,
    /// The `realm` of the `WWW-Authenticate` challenge (default: the
    /// route id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realm: Option<String>,
    /// Remove the `Authorization` header before the backend (default
    /// false: the backend gets the credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_authorization: Option<bool>,
}
