//! `routes[].auth`: who may use a route. A bearer token (JWT) checked
//! against the keys of a JWKS file or of a key set fetched from a hopgate
//! service (`jwt`), a user and password checked against an htpasswd file
//! of bcrypt hashes (`basic`), or the answer of an authorization service
//! asked about each request (`forward`).
//!
//! Owns [`AuthKeys`], the keys and password files of the running config
//! as the data plane reads them (one lock-free pointer, swapped whole when
//! a config is applied or a file changes: keys rotate without a reload;
//! fetched key sets and forward auth's remembered decisions are kept
//! across applies that keep their block),
//! [`AuthMaterial`] (those files read, every problem a [`ConfigError`]
//! under the field path naming the file), the check a request goes through
//! ([`AuthKeys::check`]), its `401` answers with their `WWW-Authenticate`
//! challenges, and the counters of `hopgate_auth_total{route,result}`.
//!
//! The parts: `jwt` (JWKS files, signatures and claims), `fetch` (key
//! sets fetched from a service, and the task that fetches them), `basic`
//! (htpasswd files, bcrypt off the event loop, the cache of verified
//! passwords), `forward` (the authorization service's checks and their
//! decision cache), `load` (reading a config's files), `metrics` (the
//! counters' collector).
//!
//! Must not touch: the access log (credentials never reach it), the
//! snapshot, anything on a route without `auth`: such a request costs one
//! `Option` test.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderMap, Response, StatusCode};
use parking_lot::Mutex;

use hopgate_core::config::auth::{AuthKind, JwksSource, RouteAuth};
use hopgate_core::config::ConfigError;
use http::header::HeaderName;

use crate::body::ProxyBody;

mod basic;
mod fetch;
mod forward;
mod jwt;
mod load;
mod metrics;

pub use fetch::fetch_jwks;
pub(crate) use forward::Origin;
pub use load::AuthMaterial;
pub use metrics::AuthCollector;

/// What a check ended with: the `result` label of `hopgate_auth_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthResult {
    /// Credentials good: the request goes on.
    Allowed,
    /// Well-formed credentials that do not admit the client: an unknown
    /// user, a wrong password, a token for another issuer or audience.
    Denied,
    /// No credentials of the route's kind.
    Missing,
    /// Malformed credentials, or a token whose signature does not verify
    /// (a key not in the file, `alg: none`, a forged one).
    Invalid,
    /// A token past its `exp` (or before its `nbf`), beyond the skew.
    Expired,
    /// The gateway could not check: no keys loaded for the route, or the
    /// authorization service did not answer and the route denies then
    /// (`failure_mode: deny`).
    Error,
    /// The authorization service did not answer and the route lets the
    /// request through then (`failure_mode: allow`).
    FailedOpen,
}

pub(crate) const RESULTS: [AuthResult; 7] = [
    AuthResult::Allowed,
    AuthResult::Denied,
    AuthResult::Missing,
    AuthResult::Invalid,
    AuthResult::Expired,
    AuthResult::Error,
    AuthResult::FailedOpen,
];

impl AuthResult {
    pub(crate) fn name(self) -> &'static str {
        match self {
            AuthResult::Allowed => "allowed",
            AuthResult::Denied => "denied",
            AuthResult::Missing => "missing",
            AuthResult::Invalid => "invalid",
            AuthResult::Expired => "expired",
            AuthResult::Error => "error",
            AuthResult::FailedOpen => "failed_open",
        }
    }
}

/// One route's counts, one per [`AuthResult`]; kept across reloads and
/// file changes while the route id stays.
#[derive(Debug, Default)]
pub(crate) struct Counts([AtomicU64; 7]);

impl Counts {
    pub(crate) fn bump(&self, r: AuthResult) {
        self.0[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, r: AuthResult) -> u64 {
        self.0[r as usize].load(Ordering::Relaxed)
    }
}

/// One route's file as read (or its fetched keys, or its decisions), and
/// its counts.
pub(crate) struct Guard {
    /// The file it was read from (as configured; empty for a route that
    /// reads none), to match the route's config.
    file: PathBuf,
    keys: Keys,
    counts: Arc<Counts>,
}

impl Guard {
    /// Was this made for the route's config `cfg`?
    fn fits(&self, cfg: &RouteAuth) -> bool {
        match (&self.keys, &cfg.kind) {
            (Keys::Jwt(_), AuthKind::Jwt(_)) | (Keys::Basic(_), AuthKind::Basic { .. }) => {
                cfg.file() == Some(self.file.as_path())
            }
            (Keys::Fetched(f), AuthKind::Jwt(j)) => {
                matches!(&j.keys, JwksSource::Service(s) if f.serves(s))
            }
            (Keys::Forward(d), AuthKind::Forward(f)) => d.made_for == *f,
            _ => false,
        }
    }
}

/// A route's keys or users.
pub(crate) enum Keys {
    Jwt(jwt::Jwks),
    /// Keys fetched from a service (`auth.jwt.jwks`).
    Fetched(Arc<fetch::Fetched>),
    Basic(basic::Htpasswd),
    /// Forward auth's remembered decisions.
    Forward(Arc<forward::Decisions>),
}

/// Headers an allowing check sets on the request (forward auth's
/// `copy_response_headers`).
pub(crate) type Grant = Arc<[(HeaderName, HeaderValue)]>;

/// Sets a grant's headers on the request.
pub(crate) fn grant(headers: &mut HeaderMap, grant: Option<&Grant>) {
    for (h, v) in grant.into_iter().flat_map(|g| g.iter()) {
        headers.append(h.clone(), v.clone());
    }
}

/// The running config's auth files, by route id.
type Guards = std::collections::HashMap<String, Arc<Guard>>;

/// The keys and users every route with `auth` checks against: shared by
/// the control plane (which installs what it read) and the data plane
/// (which only loads the pointer).
#[derive(Default)]
pub struct AuthKeys {
    guards: ArcSwap<Guards>,
    /// The files last read (resolved), for the file watcher.
    files: Mutex<Vec<PathBuf>>,
    /// Wakes the task that fetches key sets ([`fetch_jwks`]): a new set
    /// to fetch, or a token naming an unknown key.
    wake: tokio::sync::Notify,
}

impl std::fmt::Debug for AuthKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthKeys")
            .field("routes", &self.guards.load().len())
            .finish()
    }
}

/// A basic-auth password being checked off the event loop, or an
/// authorization service being asked: `Ok` with the headers to set on the
/// request, `Err` is the client's answer.
pub(crate) type AuthWait = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Option<Grant>, Box<Response<ProxyBody>>>> + Send>,
>;

/// What [`AuthKeys::check`] decided.
pub(crate) enum Checked {
    /// Let through (the claims' headers set, `Authorization` removed when
    /// asked).
    Pass,
    /// Let through once this resolves to `Ok`.
    Wait(AuthWait),
    /// Turned away with this answer.
    Refuse(Box<Response<ProxyBody>>),
}

impl AuthKeys {
    /// Swaps in what a config's files read as; counts stay with their
    /// route ids, fetched key sets and remembered decisions with a route
    /// whose block kept them.
    pub fn install(&self, material: AuthMaterial) {
        let old = self.guards.load_full();
        let (routes, files) = material.into_parts();
        let guards: Guards = routes
            .into_iter()
            .map(|(id, (file, keys))| {
                let before = old.get(&id);
                let counts = before.map_or_else(Arc::default, |g| Arc::clone(&g.counts));
                let keys = kept(before.map(|g| &g.keys), keys);
                (id, Arc::new(Guard { file, keys, counts }))
            })
            .collect();
        self.guards.store(Arc::new(guards));
        *self.files.lock() = files;
        self.wake.notify_one();
    }

    /// The key sets fetched from services, for the task that fetches them.
    fn fetched(&self) -> Vec<Arc<fetch::Fetched>> {
        let guards = self.guards.load();
        let mut sets: Vec<Arc<fetch::Fetched>> = Vec::new();
        for g in guards.values() {
            if let Keys::Fetched(f) = &g.keys {
                if !sets.iter().any(|s| Arc::ptr_eq(s, f)) {
                    sets.push(Arc::clone(f));
                }
            }
        }
        sets
    }

    /// The JWKS and htpasswd files the running config read (resolved).
    pub fn files(&self) -> Vec<PathBuf> {
        self.files.lock().clone()
    }

    /// Checks a request to route `id` configured with `cfg`; the headers
    /// the gateway sets from claims are removed from the client's request
    /// first, whatever the outcome.
    pub(crate) fn check(&self, id: &str, cfg: &RouteAuth, headers: &mut HeaderMap) -> Checked {
        for h in &cfg.strip {
            headers.remove(h);
        }
        let guards = self.guards.load();
        let Some(guard) = guards.get(id).filter(|g| g.fits(cfg)) else {
            tracing::error!(route = id, "auth: no keys loaded for the route; refusing");
            return Checked::Refuse(unavailable());
        };
        let checked = match (&guard.keys, &cfg.kind) {
            (Keys::Jwt(jwks), AuthKind::Jwt(j)) => jwt::check(jwks, j, headers),
            (Keys::Fetched(f), AuthKind::Jwt(j)) => self.fetched_check(f, j, headers),
            (Keys::Basic(users), AuthKind::Basic { .. }) => {
                return basic::check(users, cfg, headers, &guard.counts);
            }
            _ => Err((AuthResult::Error, String::new())),
        };
        match checked {
            Ok(()) => {
                guard.counts.bump(AuthResult::Allowed);
                if cfg.remove_authorization {
                    headers.remove(AUTHORIZATION);
                }
                Checked::Pass
            }
            Err((AuthResult::Error, _)) => {
                guard.counts.bump(AuthResult::Error);
                Checked::Refuse(unavailable())
            }
            Err((result, why)) => {
                guard.counts.bump(result);
                Checked::Refuse(unauthorized(bearer_challenge(&cfg.realm, result, &why)))
            }
        }
    }

    /// A token checked against a fetched key set; a `kid` the set does
    /// not have (or no set yet) asks for a fetch.
    fn fetched_check(
        &self,
        f: &fetch::Fetched,
        j: &hopgate_core::config::auth::JwtAuth,
        headers: &mut HeaderMap,
    ) -> Result<(), (AuthResult, String)> {
        let Some(jwks) = f.keys() else {
            f.want();
            self.wake.notify_one();
            return Err((AuthResult::Error, String::new()));
        };
        let checked = jwt::check(&jwks, j, headers);
        if matches!(&checked, Err((AuthResult::Invalid, why)) if why == jwt::NO_KEY) {
            f.want();
            self.wake.notify_one();
        }
        checked
    }

    /// Forward auth (`auth.forward`) for route `id`: the client's copies
    /// of the identity headers removed, then a remembered decision or a
    /// wait for the authorization service.
    pub(crate) fn forward(
        &self,
        id: &str,
        cfg: &RouteAuth,
        req: &mut http::Request<ProxyBody>,
        origin: Origin<'_>,
    ) -> Checked {
        for h in &cfg.strip {
            req.headers_mut().remove(h);
        }
        let guards = self.guards.load();
        let guard = guards.get(id).filter(|g| g.fits(cfg));
        let (Some(g), AuthKind::Forward(f)) = (guard, &cfg.kind) else {
            tracing::error!(
                route = id,
                "auth: forward auth is not set up for the route; refusing"
            );
            return Checked::Refuse(unavailable());
        };
        let Keys::Forward(decisions) = &g.keys else {
            return Checked::Refuse(unavailable());
        };
        forward::check(decisions, &g.counts, f, req, origin)
    }

    /// Every route's counts, for the collector.
    pub(crate) fn counts(&self) -> Vec<(String, Arc<Counts>)> {
        let mut rows: Vec<_> = self
            .guards
            .load()
            .iter()
            .map(|(id, g)| (id.clone(), Arc::clone(&g.counts)))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }
}

/// The keys a route gets at an apply: a fetched set or remembered
/// decisions it had under the same block are kept.
fn kept(before: Option<&Keys>, new: Keys) -> Keys {
    match (before, new) {
        (Some(Keys::Fetched(old)), Keys::Fetched(new)) if old.serves(&new.source) => {
            old.keep_for(&new.source);
            Keys::Fetched(Arc::clone(old))
        }
        (Some(Keys::Forward(old)), Keys::Forward(new)) if old.made_for == new.made_for => {
            Keys::Forward(Arc::clone(old))
        }
        (_, new) => new,
    }
}

/// RFC 6750's challenge: the realm alone when no token came, else
/// `invalid_token` and why.
fn bearer_challenge(realm: &str, result: AuthResult, why: &str) -> HeaderValue {
    let text = if result == AuthResult::Missing {
        format!("Bearer realm=\"{realm}\"")
    } else {
        let why: String = why
            .chars()
            .filter(|c| (' '..='~').contains(c) && *c != '"' && *c != '\\')
            .collect();
        format!("Bearer realm=\"{realm}\", error=\"invalid_token\", error_description=\"{why}\"")
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

/// The basic scheme's challenge (RFC 7617).
fn basic_challenge(realm: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
        .unwrap_or_else(|_| HeaderValue::from_static("Basic"))
}

/// `401` with its challenge.
fn unauthorized(challenge: HeaderValue) -> Box<Response<ProxyBody>> {
    let mut resp = answer(
        StatusCode::UNAUTHORIZED,
        "hopgate: authentication required\n",
    );
    resp.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    resp
}

/// `503`: the route's keys are not loaded (a config canary that added
/// `auth` to a route, say): refused rather than let through.
fn unavailable() -> Box<Response<ProxyBody>> {
    answer(
        StatusCode::SERVICE_UNAVAILABLE,
        "hopgate: authentication is not available for this route\n",
    )
}

fn answer(status: StatusCode, body: &'static str) -> Box<Response<ProxyBody>> {
    let mut resp = Response::new(ProxyBody::full(body));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Box::new(resp)
}

/// Reports a file's problem under `field`.
fn file_error(field: &str, path: &std::path::Path, what: impl std::fmt::Display) -> ConfigError {
    ConfigError::new(field, format!("{}: {what}", path.display()))
}

#[cfg(test)]
mod tests;
