//! Phase 9: the request's session. Who is this client, where is it bound
//! in the routed service, and must it hop?
//!
//! Owns the session's identification (or the canary's, when it identified
//! it already), its binding key, the synchronous store read, the shared
//! store's lookup for a known session this replica holds no binding for,
//! and the binding a v2 token's node hint stands for. Must not touch: the
//! upstream request (phase 11 sends the token), node choice (the attempts
//! follow the stickiness), anything `async` (the fetch is only started
//! here; the driver awaits it).

use http::header::HeaderMap;

use crate::upstream::{CompiledService, Snapshot};
use hopgate_core::config::SessionsConfig;
use hopgate_core::session::SessionId;
use hopgate_store::FetchFuture;

use crate::session::{self, ClientSession, Sessions, Stickiness};

/// What phase 9 found out.
pub(super) struct Session {
    /// Sessions are on for this request (the gateway has keys and a store,
    /// and `sessions.enabled` in the running config).
    pub(super) on: bool,
    pub(super) client: Option<ClientSession>,
    /// The store key of the session's binding in the routed service.
    pub(super) key: Option<SessionId>,
    /// Wall-clock seconds (token and binding times; 0 with sessions off).
    pub(super) now_unix: u64,
    /// The shared store's lookup, for the driver to await.
    pub(super) fetch: Option<FetchFuture>,
    /// The binding was made from the token's node hint (not stored yet).
    pub(super) hinted: bool,
    pub(super) stick: Stickiness,
}

/// Identifies the session (`known`: the canary's side choice did already)
/// and judges its binding in `svc`. With sessions off (`sessions` is
/// `None`, or `sessions.enabled` false): no session, no clock reading.
#[inline]
pub(super) fn of(
    snap: &Snapshot,
    sessions: Option<&Sessions>,
    headers: &HeaderMap,
    known: Option<ClientSession>,
    (route, svc): (usize, &CompiledService),
    now: u64,
) -> Session {
    let scfg = &snap.config.sessions;
    let sessions = sessions.filter(|_| scfg.enabled);
    // Wall-clock seconds only matter to sessions (token and binding times).
    let now_unix = if sessions.is_some() {
        session::unix_now()
    } else {
        0
    };
    let client =
        sessions.map(|s| known.unwrap_or_else(|| session::identify(s, scfg, headers, now_unix)));
    let key = client
        .as_ref()
        .map(|cs| session::binding_key(&cs.id, &svc.name));
    let mut found = Session {
        on: sessions.is_some(),
        client,
        key,
        now_unix,
        fetch: None,
        hinted: false,
        stick: Stickiness::Unbound,
    };
    if let (Some(s), Some(k)) = (sessions, &found.key) {
        found.stick = match s.store.get(k, now_unix) {
            Some(b) => session::stickiness(snap, route, svc, Some(b), now),
            None => unbound(snap, s, scfg, (route, svc), &mut found, now),
        };
    }
    found
}

/// A session this replica holds no binding for. With a valid token, a
/// shared store may hold its binding (minted on another replica, not
/// propagated yet): asked before the first attempt; a fresh session has
/// nothing to find. Not bound yet either (bindings are made when a client
/// comes back): its token names the node of its first answer.
#[inline]
fn unbound(
    snap: &Snapshot,
    s: &Sessions,
    scfg: &SessionsConfig,
    (route, svc): (usize, &CompiledService),
    found: &mut Session,
    now: u64,
) -> Stickiness {
    let Some(cs) = found.client.as_ref().filter(|c| c.known) else {
        return Stickiness::Unbound;
    };
    if let Some(k) = &found.key {
        found.fetch = s.store.fetch(k);
    }
    match session::hinted_binding(svc, cs, found.now_unix, scfg.ttl.as_secs()) {
        Some(b) => {
            found.hinted = true;
            session::stickiness(snap, route, svc, Some(b), now)
        }
        None => Stickiness::Unbound,
    }
}
