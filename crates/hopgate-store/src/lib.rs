//! hopgate-store: where session bindings live.
//!
//! Owns the [`SessionStore`] trait (session id → [`Binding`]: service, node,
//! bound-at, hop count, opaque context, expiry), the embedded
//! [`MemoryStore`] with its optional persistence file, the fleet's
//! [`RedisStore`] (a `MemoryStore` cache kept in sync with Redis by its own
//! tasks), the counters a fleet sums in Redis ([`SharedCounters`], for the
//! control plane's canary judge: this is the workspace's only Redis
//! client), and the [`conformance`] suite every implementation must pass.
//!
//! Must not touch the request path's I/O: every trait method is synchronous
//! and answers from memory, so the hot path never awaits a store. A store
//! that needs the network (Redis) keeps a local cache that the methods read
//! and write, and talks to its server from a background task it owns;
//! losing the server degrades it to that local state, never blocks a
//! request. Token minting and verification are not here (they are pure and
//! live in `hopgate_core::session`); neither are metrics or logging of hops.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use hopgate_core::session::SessionId;

pub mod conformance;
mod memory;
mod redis;
mod sessions;

pub use memory::{LoadReport, LoadWarning, MemoryStore, DEFAULT_MAX_SESSIONS};
pub use redis::{
    needs_redial, Connector, FleetShares, RedisConn, RedisOptions, RedisState, RedisStatus,
    RedisStore, RedisStoreError, RedisTarget, SharedCounters,
};
pub use sessions::Sessions;

/// The answer of [`SessionStore::fetch`]: resolves to the binding the
/// shared store holds (already put into the local view), or `None` when it
/// holds none, is unreachable, or did not answer in time. Never fails.
pub type FetchFuture = Pin<Box<dyn Future<Output = Option<Binding>> + Send + 'static>>;

/// Where a session is bound, and what it carries across a hop.
///
/// Kept small (72 bytes): names are `Arc<str>` shared by every session bound
/// to the same node (the memory store interns them), and the context is a
/// shared slice so cloning a binding out of the store never copies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub service: Arc<str>,
    pub node: Arc<str>,
    /// Unix seconds when the session was bound to `node` (reset by a hop).
    pub bound_at: u64,
    /// How many times the session has hopped.
    pub hops: u32,
    /// Opaque `Hop-Session-Context` from the backend, handed to the next
    /// node after a hop. Size-limited by the proxy, not here.
    pub context: Option<Arc<[u8]>>,
    /// Unix seconds after which the binding is gone: live while
    /// `now < expires_at`.
    pub expires_at: u64,
}

impl Binding {
    /// A fresh binding with no hop and no context.
    pub fn new(
        service: impl Into<Arc<str>>,
        node: impl Into<Arc<str>>,
        bound_at: u64,
        expires_at: u64,
    ) -> Self {
        Self {
            service: service.into(),
            node: node.into(),
            bound_at,
            hops: 0,
            context: None,
            expires_at,
        }
    }

    pub fn with_context(mut self, context: impl Into<Arc<[u8]>>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// Whether the binding is still visible at `now` (unix seconds).
    pub fn is_live(&self, now: u64) -> bool {
        now < self.expires_at
    }

    pub fn context_len(&self) -> usize {
        self.context.as_deref().map_or(0, <[u8]>::len)
    }
}

/// Session binding storage, shared by every request.
///
/// Every method is synchronous and must return without network I/O: the
/// request path calls them inline. Implementations are shared as
/// `Arc<dyn SessionStore>`.
///
/// Semantics every implementation has (checked by [`conformance`]):
/// a binding is visible to [`get`](SessionStore::get) only while live
/// (`now < expires_at`); `put` on an existing id replaces it (last writer
/// wins) in this replica's view at once; distinct ids never interfere. A
/// store shared by replicas may later replace a `put` that lost to another
/// replica's write (the Redis store orders writes by hop count; see
/// [`RedisStore`]).
pub trait SessionStore: Send + Sync + 'static {
    /// The live binding of `id` at `now`, if any.
    fn get(&self, id: &SessionId, now: u64) -> Option<Binding>;

    /// Binds `id`, replacing any previous binding. A store at its capacity
    /// makes room for a *new* id by evicting the least recently used
    /// bindings (approximately); see [`evictions`](SessionStore::evictions).
    fn put(&self, id: SessionId, binding: Binding);

    /// Forgets `id`; whether it was there (live or not).
    fn remove(&self, id: &SessionId) -> bool;

    /// Drops every binding expired at `now`; how many were dropped.
    fn sweep(&self, now: u64) -> usize;

    /// Bindings held, including expired ones not swept yet.
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many bindings point at `node` of `service` (expired ones not
    /// swept yet included). May be O(n): for the admin API, not the hot path.
    fn bindings_to(&self, service: &str, node: &str) -> usize;

    /// Calls `visit` once per binding held (expired ones not swept yet
    /// included). Concurrent writes may or may not be seen.
    fn for_each(&self, visit: &mut dyn FnMut(&SessionId, &Binding));

    /// A copy of every binding held, for persistence and the admin API.
    fn iter_snapshot(&self) -> Vec<(SessionId, Binding)> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each(&mut |id, b| out.push((*id, b.clone())));
        out
    }

    /// Bindings evicted to make room for new ones, since start.
    fn evictions(&self) -> u64 {
        0
    }

    /// Asks the shared store, off the hot path, for a binding this replica
    /// does not hold (a session minted on another replica and not yet
    /// propagated here). `None` when the store has nothing remote to ask
    /// (the memory store): the caller binds at once. Otherwise the future
    /// answers within the store's short timeout and, when a binding is
    /// found, has already put it into the local view, so the next
    /// [`get`](SessionStore::get) sees it. Call it only on a miss of a
    /// *verified* token; a fresh session has nothing to find.
    fn fetch(&self, id: &SessionId) -> Option<FetchFuture> {
        let _ = id;
        None
    }

    /// The shared store's connection state, for the admin API
    /// (`GET /admin/v1/fleet`) and the metrics; `None` for a store with
    /// nothing remote (reported as `off`).
    fn redis_status(&self) -> Option<RedisStatus> {
        None
    }
}
