//! The fleet's session store: a [`MemoryStore`] cache that every trait
//! method reads and writes, kept in step with Redis (shared by every
//! replica) by one background task the store owns.
//!
//! Owns the Redis layout ([`wire`]: keys, hash fields, change notices, the
//! compare-and-set script), the way into Redis ([`conn`]: one server, the
//! master Redis Sentinel names, or a Redis Cluster, behind one
//! [`Connector`]), the task ([`sync`]: connections, write queue, change
//! feed, reload, miss lookup) and the connection state ([`RedisStatus`]);
//! also [`SharedCounters`] (`counters`), the counters a fleet sums in Redis
//! for the control plane's canary judge, and [`FleetShares`] (`lease`), the
//! fleet's shares of `scope: fleet` rate limits, so that no other crate
//! holds a Redis client. Must not touch: the request path's waiting. No trait
//! method awaits or takes a lock; `put` and `remove` change the cache and
//! push one entry onto a lock-free bounded queue.
//!
//! # Layout
//!
//! One hash per binding, `<prefix>s:<binding key in hex>` (the key is the
//! proxy's per-service `binding_key`), with the fields `service`, `node`,
//! `bound_at`, `hops`, `expires_at`, `writer` (the replica id) and, when
//! the binding has one, `context` (bytes as they are: Redis strings are
//! binary-safe; an absent field is no context, an empty one an empty
//! context). `EXPIREAT expires_at` makes Redis forget it with the session.
//!
//! # Writes: compare-and-set on the hop count
//!
//! Every write goes through [`wire::CAS_SCRIPT`], atomically in Redis: more
//! hops than stored win (the hash is replaced); the same hops on the same
//! node refresh it (context when given, expiry when later, writer); the
//! same hops on another node, or fewer hops, lose, and the script returns
//! the stored binding, which the loser's cache then takes. So when two
//! replicas hop one session at once, both propose hop *n+1*, the first to
//! reach Redis wins, and the other replica switches to the winner's node:
//! one node, never a flip-flop. A create (hop 0) loses to any binding of
//! another node. A binding Redis would expire at once is not written.
//!
//! Locally `put` replaces at once, as the [`conformance`](crate::conformance)
//! suite requires: the next `get` on this replica sees it. The difference
//! is fleet-wide only: a `put` is a proposal, and one that loses its
//! compare-and-set is replaced in the cache by Redis's binding shortly
//! after. The proxy only writes what this order accepts (a hop always adds
//! one to the hop count it read), so this matters only when two replicas
//! race. (The suite's cases of a same-hop write to another node, or of
//! fewer hops, run with bindings already expired by the wall clock, so
//! Redis ignores them and they check the local view alone.)
//!
//! # Learning of other replicas' changes: a stream
//!
//! A winning or refreshing write appends a notice (`k` the key, `r` the
//! writer, `o` set or delete, `q` its number from the counter
//! `<prefix>changes:seq`) to the stream `<prefix>changes` (`XADD ...
//! MAXLEN ~ stream_maxlen`, in the same script, so no write goes
//! unannounced). Each replica follows it with `XREAD BLOCK` from the last
//! id it has seen, skips its own notices, reads the changed hashes
//! (pipelined `HGETALL`) and takes each binding that wins over its cache
//! (the same order as the script). A notice arrives within a round trip
//! of the write, far inside the 1 s the contract allows.
//!
//! A stream rather than pub/sub because a stream survives a disconnect: a
//! replica that lost Redis resumes from its last id and gets every change
//! it missed, where pub/sub would have dropped them. When the cursor can no
//! longer be trusted (at start; the stream was trimmed past it, seen after
//! a reconnect from the stream's first entry and while following from a
//! jump in the notice numbers; the stream went back because Redis lost its
//! data) the replica reloads every binding by `SCAN` (bounded by the cache's `max_sessions`), having read the
//! stream's last id first so that changes during the scan are replayed.
//! A reload only merges what Redis holds into the cache (by the same
//! order); it never drops a local binding.
//!
//! # Redis lost its data: write the caches back
//!
//! `<prefix>epoch` holds a random value, set (`SET NX`) by the first
//! replica that finds it missing. Each replica remembers the one it saw and
//! checks it on every connection, on every gap in the notice numbers, and
//! every 2 s while following (so a `FLUSHALL` under live connections is
//! found even when nothing is written). A different or missing epoch means
//! Redis lost its data (restarted without persistence, failed over to an
//! empty replica, flushed): the replica reloads (which finds little and
//! drops nothing), then re-seeds Redis from its cache, beside the write
//! queue on the task, never on the request path. Every live binding is
//! written through the same compare-and-set script, pipelined by 256, with
//! its own `expires_at` (so its remaining TTL). When several replicas
//! re-seed at once, the binding with more hops wins, an equal one is a
//! refresh, and a stale copy loses and its replica takes the winner, as
//! for any write; the other replicas learn of it from the stream. The
//! number written is counted in [`RedisStatus::reseeded`] and logged once
//! per re-seed. A connection lost halfway re-runs the re-seed on the next
//! one.
//!
//! # Sentinel and Cluster
//!
//! Behind Sentinel the store is a single-server store whose every dial
//! asks the sentinels for the master: a failover is a disconnect, the
//! usual degrade-queue-reconnect, and the reconnect lands on the new
//! master. Because replication is asynchronous, a master that dies may
//! have acknowledged writes its replica never got; so whenever the store
//! finds a different master than at its last connection (on a Cluster,
//! a different master serving its slot, checked beside the epoch), it
//! re-seeds Redis from the cache as after a data loss. Writes still in the
//! queue or in flight are sent to the new master as after any reconnect.
//!
//! On a Cluster the script needs its three keys (binding, stream, counter)
//! in one slot, so every key is under the prefix as a hash tag
//! (`{hopgate:}s:…`, `{hopgate:}changes`, …): all sessions live on one
//! master. That gives the cluster's failover and routing, not write
//! scaling; one master's script rate is far above a fleet's session and
//! hop rate. Per-slot streams would spread writes but make every replica
//! follow many streams with their own cursors and gap checks; a prefix per
//! fleet already puts different fleets on different slots. The blocking
//! `XREAD` goes to that slot's master on its own connection; `SCAN` is
//! routed there too.
//!
//! # Misses
//!
//! A session minted on another replica may reach this one before its
//! notice does. [`SessionStore::fetch`] asks Redis for that one binding
//! (`HGETALL`, within `fetch_timeout`), puts it into the cache and returns
//! it; `None` when Redis has none, is away or is slow.
//!
//! # Degrade, never stop
//!
//! Without Redis every method still answers from the cache, new sessions
//! bind locally, and writes wait in the queue (at most `max_queue`; when
//! full the oldest is dropped and counted). The task reconnects with a
//! backoff (100 ms doubling to 2 s) and then sends the queue through the
//! same script, so a binding changed elsewhere meanwhile wins or loses by
//! the same rule. A queued entry names a session, not a value: the binding
//! sent is the cache's latest. State changes log one line each; the state
//! and the counters are in [`RedisStore::status`].

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::{Binding, FetchFuture, MemoryStore, SessionId, SessionStore};

mod conn;
mod counters;
mod lease;
mod sync;
mod wire;

use sync::{Dirty, Shared};

pub use conn::{needs_redial, Connector, RedisConn};
pub use counters::SharedCounters;
pub use hopgate_core::config::RedisTarget;
pub use lease::FleetShares;

/// What a [`RedisStore`] needs to start.
#[derive(Clone, Debug)]
pub struct RedisOptions {
    /// Which Redis: one server, a master behind Sentinel, or a Cluster.
    pub target: RedisTarget,
    /// Prefix of every key (`hopgate:` by default).
    pub prefix: String,
    /// This replica's id, written with each binding; its own change notices
    /// are skipped.
    pub replica_id: String,
    /// Writes held while Redis is away; past it the oldest are dropped.
    pub max_queue: usize,
    /// Approximate length the change stream is trimmed to.
    pub stream_maxlen: usize,
    /// How long [`SessionStore::fetch`] waits for Redis.
    pub fetch_timeout: Duration,
}

impl RedisOptions {
    pub const DEFAULT_MAX_QUEUE: usize = 100_000;
    pub const DEFAULT_STREAM_MAXLEN: usize = 100_000;
    pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_millis(200);

    /// Options for one server at `url` with the defaults: prefix
    /// `hopgate:`, queue 100 000, stream 100 000, fetch timeout 200 ms.
    pub fn new(url: impl Into<String>, replica_id: impl Into<String>) -> Self {
        Self::with_target(RedisTarget::Url(url.into()), replica_id)
    }

    /// Options for `target` with the same defaults as [`RedisOptions::new`].
    pub fn with_target(target: RedisTarget, replica_id: impl Into<String>) -> Self {
        Self {
            target,
            prefix: "hopgate:".into(),
            replica_id: replica_id.into(),
            max_queue: Self::DEFAULT_MAX_QUEUE,
            stream_maxlen: Self::DEFAULT_STREAM_MAXLEN,
            fetch_timeout: Self::DEFAULT_FETCH_TIMEOUT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RedisStoreError {
    /// A malformed URL; the message names the field.
    #[error("{0}")]
    Url(String),
}

/// Whether the store reaches Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisState {
    /// Writes go through and changes arrive.
    Connected,
    /// Redis is unreachable: local bindings only, writes queued.
    Degraded,
    /// No Redis is configured (the memory store).
    Off,
}

impl RedisState {
    pub fn as_str(self) -> &'static str {
        match self {
            RedisState::Connected => "connected",
            RedisState::Degraded => "degraded",
            RedisState::Off => "off",
        }
    }
}

/// The store's connection state and counters, for the admin API and the
/// metrics. Counters run since start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RedisStatus {
    pub state: RedisState,
    /// Writes not yet answered by Redis.
    pub queued: usize,
    /// Writes dropped: the queue was full, or Redis refused them.
    pub dropped: u64,
    /// Connections made after the first.
    pub reconnects: u64,
    /// Writes that lost their compare-and-set (the cache took the winner).
    pub conflicts: u64,
    /// Bindings taken from Redis: other replicas' changes, loads, lookups.
    pub remote_applied: u64,
    /// Full reloads after a gap in the change stream.
    pub resyncs: u64,
    /// Bindings written back from the local cache after Redis lost its
    /// data (and taken by Redis: compare-and-set won or refreshed).
    pub reseeded: u64,
    /// The last Redis error, if any.
    pub last_error: Option<String>,
    /// `single`, `sentinel`, `cluster`, or `off` without Redis.
    pub mode: &'static str,
    /// The server in use, `host:port`: the master (found through the
    /// sentinels in `sentinel` mode; in `cluster` mode the master of the
    /// slot holding the store's keys), as of the last connection.
    pub server: Option<String>,
}

impl RedisStatus {
    /// The status of a gateway without Redis.
    pub fn off() -> Self {
        Self {
            state: RedisState::Off,
            queued: 0,
            dropped: 0,
            reconnects: 0,
            conflicts: 0,
            remote_applied: 0,
            resyncs: 0,
            reseeded: 0,
            last_error: None,
            mode: "off",
            server: None,
        }
    }
}

/// Session bindings shared through Redis, answered from a local cache.
pub struct RedisStore {
    shared: Arc<Shared>,
    connector: Connector,
    task: tokio::task::JoinHandle<()>,
}

impl RedisStore {
    /// Starts the store over `cache` (which may already hold bindings) and
    /// its background task on the current tokio runtime. Returns at once,
    /// degraded until the first connection and load succeed (see
    /// [`RedisStore::wait_loaded`]); only a malformed URL is an error.
    pub fn start(opts: RedisOptions, cache: MemoryStore) -> Result<Self, RedisStoreError> {
        let connector = Connector::new(&opts.target).map_err(|e| {
            let field = match opts.target {
                RedisTarget::Url(_) => "store.url",
                RedisTarget::Sentinel { .. } => "store.sentinel.endpoints",
                RedisTarget::Cluster { .. } => "store.cluster.endpoints",
            };
            RedisStoreError::Url(format!("{field}: {e}"))
        })?;
        let cluster = matches!(opts.target, RedisTarget::Cluster { .. });
        let shared = Arc::new(Shared::new(
            cache,
            wire::Keys::new(&opts.prefix, cluster),
            opts.replica_id,
            connector.mode(),
            opts.max_queue,
            opts.stream_maxlen,
            opts.fetch_timeout,
        ));
        let task = tokio::spawn(sync::run(Arc::clone(&shared), connector.clone()));
        Ok(Self {
            shared,
            connector,
            task,
        })
    }

    /// Waits until the first load from Redis is done, at most `within`;
    /// whether it is.
    pub async fn wait_loaded(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while !self.shared.is_loaded() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Waits until every queued write has been answered by Redis, at most
    /// `within` (at shutdown, so the last requests' bindings are shared);
    /// whether the queue is empty.
    pub async fn flush(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.status().queued > 0 {
            if tokio::time::Instant::now() >= deadline
                || self.status().state != RedisState::Connected
            {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    /// The connection state and counters.
    pub fn status(&self) -> RedisStatus {
        self.shared.status()
    }

    /// How this store dials Redis: any other user of the store's Redis
    /// connects through it (`connector().connect(..)` gives a
    /// [`RedisConn`], a `ConnectionLike` over one server, the Sentinel
    /// master or the Cluster).
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The local cache.
    pub fn cache(&self) -> &MemoryStore {
        &self.shared.cache
    }

    pub fn replica_id(&self) -> &str {
        &self.shared.replica
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("replica", &self.shared.replica)
            .field("cache", &self.shared.cache)
            .field("status", &self.status())
            .finish()
    }
}

impl SessionStore for RedisStore {
    fn get(&self, id: &SessionId, now: u64) -> Option<Binding> {
        self.shared.cache.get(id, now)
    }

    fn put(&self, id: SessionId, binding: Binding) {
        self.shared.cache.put(id, binding);
        self.shared.enqueue(Dirty { id, removed: false });
    }

    fn remove(&self, id: &SessionId) -> bool {
        let had = self.shared.cache.remove(id);
        self.shared.enqueue(Dirty {
            id: *id,
            removed: true,
        });
        had
    }

    fn sweep(&self, now: u64) -> usize {
        // Redis expires its copies itself (EXPIREAT).
        self.shared.cache.sweep(now)
    }

    fn len(&self) -> usize {
        self.shared.cache.len()
    }

    fn bindings_to(&self, service: &str, node: &str) -> usize {
        self.shared.cache.bindings_to(service, node)
    }

    fn for_each(&self, visit: &mut dyn FnMut(&SessionId, &Binding)) {
        self.shared.cache.for_each(visit);
    }

    fn evictions(&self) -> u64 {
        self.shared.cache.evictions()
    }

    fn fetch(&self, id: &SessionId) -> Option<FetchFuture> {
        Some(Box::pin(sync::fetch(Arc::clone(&self.shared), *id)))
    }

    fn redis_status(&self) -> Option<RedisStatus> {
        Some(self.status())
    }
}
