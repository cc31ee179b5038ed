//! `auth.jwt.jwks`: a JWT route's key set fetched from a hopgate service
//! (an identity provider's `/.well-known/jwks.json` behind the gateway's
//! own health checks, balancing, breaker and drain: the fetch goes through
//! [`crate::subrequest`]), instead of read from a file.
//!
//! One task ([`fetch_jwks`]) fetches every such set of the running config:
//! at once when a route first names it, then every `refresh`, and sooner
//! when a token names a `kid` the set does not have (a key rotated in at
//! the provider), at most once every [`KID_MISS_GAP`]. A failed fetch (no
//! node, a timeout, a non-2xx, a malformed set) keeps the keys in use,
//! is logged, and is tried again after [`RETRY`]. Until the first fetch
//! succeeds the route has no keys and answers `503`. The set survives
//! reloads that keep the route's `service` and `path`.
//!
//! Owns [`Fetched`] and [`fetch_jwks`]. Must not touch: the check (in
//! `jwt`), the service's nodes (only through `subrequest`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use http::{HeaderMap, Method};
use tokio::sync::watch;

use hopgate_core::config::auth::JwksService;
use hopgate_core::node::now_ms;

use super::jwt::Jwks;
use super::AuthKeys;
use crate::subrequest::{self, Ask};
use crate::upstream::SharedSnapshot;

/// The fewest milliseconds between two fetches a token's unknown `kid`
/// starts.
pub(crate) const KID_MISS_GAP: Duration = Duration::from_secs(10);
/// When a failed fetch is tried again.
pub(crate) const RETRY: Duration = Duration::from_secs(5);
/// The longest a fetch may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest key set read.
const MAX_SET: usize = 1024 * 1024;
/// How often the task looks for a set that is due, at the least.
const TICK: Duration = Duration::from_secs(1);

/// A key set fetched from a service, and when to fetch it again.
pub(crate) struct Fetched {
    pub(super) source: JwksService,
    keys: ArcSwapOption<Jwks>,
    /// [`now_ms`] of the next fetch due.
    due_ms: AtomicU64,
    /// [`now_ms`] of the last fetch started.
    last_ms: AtomicU64,
    /// A token named a `kid` the set does not have.
    wanted: AtomicBool,
    /// `refresh`, in milliseconds (a reload may change it).
    refresh_ms: AtomicU64,
}

impl Fetched {
    pub(crate) fn new(source: JwksService) -> Fetched {
        let refresh_ms = source.refresh.as_millis() as u64;
        Fetched {
            source,
            keys: ArcSwapOption::empty(),
            due_ms: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            wanted: AtomicBool::new(false),
            refresh_ms: AtomicU64::new(refresh_ms),
        }
    }

    /// The keys, once a fetch succeeded.
    pub(crate) fn keys(&self) -> Option<Arc<Jwks>> {
        self.keys.load_full()
    }

    /// How many keys the set has now.
    pub(crate) fn len(&self) -> usize {
        self.keys.load().as_ref().map_or(0, |k| k.len())
    }

    /// Same service and path: the set is the same one.
    pub(crate) fn serves(&self, s: &JwksService) -> bool {
        self.source.service == s.service && self.source.path == s.path
    }

    /// A reload kept the set: its `refresh` may have changed.
    pub(crate) fn keep_for(&self, s: &JwksService) {
        self.refresh_ms
            .store(s.refresh.as_millis() as u64, Ordering::Relaxed);
    }

    /// A token named a key the set does not have: fetch again soon.
    pub(crate) fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
    }

    fn due(&self, now: u64) -> bool {
        let last = self.last_ms.load(Ordering::Relaxed);
        now >= self.due_ms.load(Ordering::Relaxed)
            || (self.wanted.load(Ordering::Relaxed)
                && now >= last + KID_MISS_GAP.as_millis() as u64)
    }

    /// One fetch: new keys installed, or the old ones kept.
    async fn fetch(&self, snapshot: &SharedSnapshot) {
        let now = now_ms();
        self.last_ms.store(now, Ordering::Relaxed);
        self.wanted.store(false, Ordering::Relaxed);
        let ask = Ask {
            method: Method::GET,
            path: self.source.path.clone(),
            headers: HeaderMap::new(),
        };
        let s = &self.source;
        let got = subrequest::ask(snapshot, &s.service, &ask, TIMEOUT, MAX_SET).await;
        let parsed = match got {
            Ok(a) if a.status.is_success() => Jwks::parse(&a.body),
            Ok(a) => Err(format!("the service answered {}", a.status)),
            Err(e) => Err(e.to_string()),
        };
        match parsed {
            Ok(jwks) => {
                let n = jwks.len();
                let before = self.len();
                self.keys.store(Some(Arc::new(jwks)));
                let refresh = self.refresh_ms.load(Ordering::Relaxed);
                self.due_ms.store(now_ms() + refresh, Ordering::Relaxed);
                tracing::debug!(service = %s.service, path = %s.path, keys = n, before, "auth.jwt.jwks: key set fetched");
            }
            Err(why) => {
                self.due_ms
                    .store(now_ms() + RETRY.as_millis() as u64, Ordering::Relaxed);
                tracing::warn!(service = %s.service, path = %s.path, error = %why, "auth.jwt.jwks: fetching the key set failed; the keys in use stay");
            }
        }
    }
}

/// Fetches the key sets of the running config's routes that name one
/// (`auth.jwt.jwks`), as they fall due, until `shutdown` turns true.
pub async fn fetch_jwks(
    keys: Arc<AuthKeys>,
    snapshot: SharedSnapshot,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let now = now_ms();
        for f in keys.fetched() {
            if f.due(now) {
                f.fetch(&snapshot).await;
            }
        }
        tokio::select! {
            () = keys.wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    return;
                }
            }
        }
    }
}
