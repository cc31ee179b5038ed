//! `routes[].auth`, as written: who may use a route (a JWT or a user of an
//! htpasswd file).
//!
//! Owns the shape of the block only; its checks are
//! `validate/auth.rs`, reading the key and password files is the data
//! plane's (`hopgate_proxy::auth`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Text;

/// `routes[].auth`: exactly one of `jwt` and `basic`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    /// A bearer token (JWT) signed by a key of a JWKS file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<RawJwtAuth>,
    /// A user and password of an htpasswd file (bcrypt hashes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<RawBasicAuth>,
    /// Asking an authorization service: not available yet (refused by
    /// validation, which says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<serde_json::Value>,
}

/// `routes[].auth.jwt`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJwtAuth {
    /// A JWKS file (`{"keys": [...]}`), relative to the config file's
    /// directory; re-read when it changes (keys rotate without a reload).
    #[serde(default)]
    pub jwks_file: String,
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
