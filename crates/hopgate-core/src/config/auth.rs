//! The typed `routes[].auth` block: how a route checks who calls it. Paths
//! stay as written (relative to the config file's directory); the data
//! plane reads the files and checks credentials (`hopgate_proxy::auth`),
//! so this crate stays free of I/O and crypto.

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
    /// The key or password file this route reads.
    pub fn file(&self) -> &std::path::Path {
        match &self.kind {
            AuthKind::Jwt(j) => &j.jwks_file,
            AuthKind::Basic { htpasswd } => htpasswd,
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
}

/// `routes[].auth.jwt`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JwtAuth {
    pub jwks_file: PathBuf,
    pub issuer: Option<String>,
    /// Any one of them in `aud`; empty: `aud` is not checked.
    pub audiences: Vec<String>,
    pub clock_skew: Duration,
    /// Claim name and the header it is copied into, in name order.
    pub claims_to_headers: Vec<(String, HeaderName)>,
}
