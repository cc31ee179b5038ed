//! The store's one background task: connect, load, write, follow.
//!
//! Owns the two Redis connections (commands, and the change feed whose
//! `XREAD BLOCK` would stall a shared connection), both dialled through
//! the store's [`Connector`], the reconnect loop with its backoff, the
//! write queue drain (every write through the compare-and-set script), the
//! change feed cursor with its gap check, the bounded SCAN (re)load, the
//! epoch check that tells when Redis lost its data, the master check that
//! tells when it failed over, the re-seeding of Redis from the cache that
//! follows either, the miss lookup, and the connection state.
//!
//! Must not touch: the request path. Everything here runs on the task or in
//! a [`FetchFuture`](crate::FetchFuture); the store's methods only push to
//! the queue and read [`Shared`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use crossbeam_queue::ArrayQueue;
use redis::streams::{StreamRangeReply, StreamReadReply};
use redis::{Cmd, RedisError, Value};
use tokio::sync::Notify;

use super::conn::{needs_redial, Connector, RedisConn};
use super::wire::{self, adopt, CasOutcome, Cursor, EntryId, Keys};
use super::{RedisState, RedisStatus};
use crate::{Binding, MemoryStore, SessionId, SessionStore};

/// Writes sent in one pipeline.
const BATCH: usize = 256;
/// Notices read per `XREAD`.
const READ_COUNT: usize = 1_000;
/// How long one `XREAD` waits for a notice (it returns at once when one
/// arrives, so this only paces an idle loop).
const BLOCK: Duration = Duration::from_secs(2);
/// Keys asked per SCAN step.
const SCAN_COUNT: usize = 1_000;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often a connected replica checks Redis's epoch (at most; the feed
/// checks it between reads).
const EPOCH_CHECK: Duration = BLOCK;

/// One write waiting for Redis: the binding itself is read from the cache
/// when it is sent, so a session written many times while Redis is away
/// sends its latest binding.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dirty {
    pub(super) id: SessionId,
    pub(super) removed: bool,
}

/// What the store and its task share.
pub(super) struct Shared {
    pub(super) cache: MemoryStore,
    pub(super) keys: Keys,
    pub(super) replica: String,
    pub(super) stream_maxlen: usize,
    pub(super) fetch_timeout: Duration,
    pub(super) queue: ArrayQueue<Dirty>,
    pub(super) wake: Notify,
    /// The command connection while connected (for [`fetch`]).
    pub(super) conn: ArcSwapOption<RedisConn>,
    /// `single`, `sentinel` or `cluster`.
    mode: &'static str,
    /// The server in use (the master; on a cluster, the master of the
    /// store's slot), as of the last connection.
    server: parking_lot::Mutex<Option<String>>,
    state: AtomicU8,
    /// Whether the first load from Redis has finished.
    loaded: AtomicU8,
    dropped: AtomicU64,
    reconnects: AtomicU64,
    conflicts: AtomicU64,
    applied: AtomicU64,
    resyncs: AtomicU64,
    reseeded: AtomicU64,
    in_flight: AtomicUsize,
    last_error: parking_lot::Mutex<Option<String>>,
    /// The value of `<prefix>epoch` this replica last saw: a different one
    /// (or none) means Redis lost its data since.
    epoch: parking_lot::Mutex<Option<String>>,
    /// Redis lost its data and has not been re-seeded from the cache yet
    /// (stays set across a connection lost halfway through).
    reseed_pending: AtomicBool,
    reseed_wake: Notify,
}

const CONNECTED: u8 = 1;
const DEGRADED: u8 = 2;

impl Shared {
    pub(super) fn new(
        cache: MemoryStore,
        keys: Keys,
        replica: String,
        mode: &'static str,
        max_queue: usize,
        stream_maxlen: usize,
        fetch_timeout: Duration,
    ) -> Self {
        Self {
            cache,
            keys,
            replica,
            stream_maxlen,
            fetch_timeout,
            queue: ArrayQueue::new(max_queue.max(1)),
            wake: Notify::new(),
            conn: ArcSwapOption::empty(),
            mode,
            server: parking_lot::Mutex::new(None),
            state: AtomicU8::new(DEGRADED),
            loaded: AtomicU8::new(0),
            dropped: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            resyncs: AtomicU64::new(0),
            reseeded: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            last_error: parking_lot::Mutex::new(None),
            epoch: parking_lot::Mutex::new(None),
            reseed_pending: AtomicBool::new(false),
            reseed_wake: Notify::new(),
        }
    }

    /// Queues a write for Redis; never waits. A full queue drops its
    /// oldest write (counted).
    pub(super) fn enqueue(&self, d: Dirty) {
        if self.queue.force_push(d).is_some() {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped_total = n,
                    max_queue = self.queue.capacity(),
                    "redis store: write queue full; the oldest queued write was dropped"
                );
            }
        }
        self.wake.notify_one();
    }

    pub(super) fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire) == 1
    }

    pub(super) fn status(&self) -> RedisStatus {
        RedisStatus {
            state: match self.state.load(Ordering::Relaxed) {
                CONNECTED => RedisState::Connected,
                _ => RedisState::Degraded,
            },
            queued: self.queue.len() + self.in_flight.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            conflicts: self.conflicts.load(Ordering::Relaxed),
            remote_applied: self.applied.load(Ordering::Relaxed),
            resyncs: self.resyncs.load(Ordering::Relaxed),
            reseeded: self.reseeded.load(Ordering::Relaxed),
            last_error: self.last_error.lock().clone(),
            mode: self.mode,
            server: self.server.lock().clone(),
        }
    }

    fn set_connected(&self) {
        if self.state.swap(CONNECTED, Ordering::Relaxed) != CONNECTED {
            tracing::info!(
                replica = %self.replica,
                queued = self.queue.len(),
                "redis store connected; reconciling queued writes"
            );
        }
    }

    fn set_degraded(&self, e: &RedisError) {
        self.conn.store(None);
        *self.last_error.lock() = Some(e.to_string());
        if self.state.swap(DEGRADED, Ordering::Relaxed) != DEGRADED {
            tracing::warn!(
                replica = %self.replica,
                error = %e,
                "redis store degraded: serving from the local cache, writes queued until Redis is back"
            );
        }
    }

    /// Puts `b` (held by Redis) into the cache when it should win there.
    fn take(&self, id: SessionId, b: Binding) -> bool {
        let taken = self.cache.put_if(id, b.clone(), |l| adopt(l, &b));
        if taken {
            self.applied.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }
}

/// The task: sessions with Redis, one after another, until the store is
/// dropped (which aborts it).
pub(super) async fn run(shared: Arc<Shared>, connector: Connector) {
    let mut cursor: Option<Cursor> = None;
    let mut retry: Vec<Dirty> = Vec::new();
    let mut backoff = MIN_BACKOFF;
    loop {
        let mut connected = false;
        let e = session(&shared, &connector, &mut cursor, &mut retry, &mut connected).await;
        shared.in_flight.store(retry.len(), Ordering::Relaxed);
        shared.set_degraded(&e);
        if connected {
            backoff = MIN_BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// One connected period; returns the error that ended it.
async fn session(
    shared: &Shared,
    connector: &Connector,
    cursor: &mut Option<Cursor>,
    retry: &mut Vec<Dirty>,
    connected: &mut bool,
) -> RedisError {
    let mut cmd = match connector.connect(CONNECT_TIMEOUT, RESPONSE_TIMEOUT).await {
        Ok(c) => c,
        Err(e) => return e,
    };
    // Its own connection: a blocked XREAD would stall the commands queued
    // behind it (on a cluster, on that node's connection).
    let mut feed = match connector
        .connect(CONNECT_TIMEOUT, BLOCK + RESPONSE_TIMEOUT)
        .await
    {
        Ok(c) => c,
        Err(e) => return e,
    };
    if let Err(e) = check_server(shared, &mut cmd).await {
        return e;
    }
    let scripts = match load_scripts(&mut cmd).await {
        Ok(s) => s,
        Err(e) => return e,
    };
    let lost = match check_epoch(shared, &mut cmd).await {
        Ok(lost) => lost,
        Err(e) => return e,
    };
    if let Err(e) = follow_from(shared, &mut cmd, cursor, lost).await {
        return e;
    }
    if shared.loaded.swap(1, Ordering::AcqRel) == 1 {
        shared.reconnects.fetch_add(1, Ordering::Relaxed);
    }
    *connected = true;
    shared.conn.store(Some(Arc::new(cmd.clone())));
    shared.set_connected();
    let reader_cursor = cursor.get_or_insert_with(Cursor::default);
    let mut lookups = cmd.clone();
    let mut seeding = cmd.clone();
    tokio::select! {
        e = write_loop(shared, &mut cmd, &scripts, retry) => e,
        e = read_loop(shared, &mut lookups, &mut feed, reader_cursor) => e,
        e = reseed_loop(shared, &mut seeding, &scripts) => e,
    }
}

struct Scripts {
    cas: String,
    remove: String,
}

async fn load_scripts(cmd: &mut RedisConn) -> Result<Scripts, RedisError> {
    let load = |text: &'static str| {
        let mut cmd = cmd.clone();
        async move {
            redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(text)
                .query_async::<String>(&mut cmd)
                .await
        }
    };
    Ok(Scripts {
        cas: load(wire::CAS_SCRIPT).await?,
        remove: load(wire::REMOVE_SCRIPT).await?,
    })
}

/// Notes which server holds the store's keys (the master; on a cluster,
/// the master of the store's slot). When it changed since the last look
/// (a failover or, on a cluster, a slot migration), the old master may
/// have acknowledged writes it never passed to its replica: the cache is
/// written back ([`reseed_loop`]; the compare-and-set makes a binding
/// Redis still holds a plain refresh).
async fn check_server(shared: &Shared, cmd: &mut RedisConn) -> Result<(), RedisError> {
    let now = cmd.server_of(&shared.keys.stream()).await?;
    let before = shared.server.lock().replace(now.clone());
    if before.is_some_and(|b| b != now) {
        tracing::warn!(
            replica = %shared.replica,
            server = %now,
            "redis store: Redis has a new master; writing the local bindings back in case the old one lost the last writes"
        );
        shared.reseed_pending.store(true, Ordering::Release);
        shared.reseed_wake.notify_one();
    }
    Ok(())
}

/// Reads Redis's epoch, `<prefix>epoch`, creating it when it is missing
/// (`SET NX`: the first replica to find Redis empty names the new epoch,
/// the others read it); whether Redis lost its data since this replica
/// last looked (the epoch changed or had vanished). Losing it marks the
/// cache for re-seeding ([`reseed_loop`]). The first look only records it.
async fn check_epoch(shared: &Shared, cmd: &mut RedisConn) -> Result<bool, RedisError> {
    let key = shared.keys.epoch();
    // The epoch only has to differ from the last one: without a random
    // source, the time and the process id do.
    let mine = SessionId::try_random().map_or_else(
        |_| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            format!("{nanos:x}-{}", std::process::id())
        },
        |id| id.to_string(),
    );
    let mut set = redis::cmd("SET");
    set.arg(&key).arg(&mine).arg("NX");
    let mut get = redis::cmd("GET");
    get.arg(&key);
    let answers = cmd.run_all(vec![set, get]).await?;
    let current: String =
        redis::from_redis_value(answers.into_iter().nth(1).unwrap_or(Value::Nil))?;
    let before = shared.epoch.lock().replace(current.clone());
    let lost = before.is_some_and(|b| b != current);
    if lost {
        tracing::warn!(
            replica = %shared.replica,
            epoch = %current,
            "redis store: Redis lost its data; reloading, then writing the local bindings back"
        );
        shared.reseed_pending.store(true, Ordering::Release);
        shared.reseed_wake.notify_one();
    }
    Ok(lost)
}

/// Sets where the change feed resumes, reloading every binding by SCAN
/// when notices may have been missed: at start, when Redis lost its data
/// (`lost`: its epoch changed), when the stream was trimmed past the cursor
/// (its first entry is after it), or when it went back. While following, a
/// jump in the notice numbers, or a new epoch, reveals the same
/// ([`read_loop`]).
async fn follow_from(
    shared: &Shared,
    cmd: &mut RedisConn,
    cursor: &mut Option<Cursor>,
    lost: bool,
) -> Result<(), RedisError> {
    let stream = shared.keys.stream();
    let first = edge(cmd, "XRANGE", &stream, "-", "+").await?;
    let last = edge(cmd, "XREVRANGE", &stream, "+", "-").await?;
    let gap = match *cursor {
        None => true,
        Some(_) if lost => true,
        Some(seen) => {
            first.is_some_and(|f| f.id > seen.id)
                || last.map_or(seen.id != EntryId::default(), |l| l.id < seen.id)
        }
    };
    if gap {
        *cursor = Some(reload(shared, cmd, cursor.is_some()).await?);
    }
    Ok(())
}

/// Reads the stream's last entry, then every binding by SCAN; the cursor
/// to follow from (changes during the SCAN are replayed from it). The
/// caller's cursor moves only once the SCAN is complete: a connection lost
/// halfway scans again next time.
async fn reload(shared: &Shared, cmd: &mut RedisConn, resync: bool) -> Result<Cursor, RedisError> {
    let last = edge(cmd, "XREVRANGE", &shared.keys.stream(), "+", "-").await?;
    let loaded = scan_load(shared, cmd).await?;
    if resync {
        shared.resyncs.fetch_add(1, Ordering::Relaxed);
    }
    tracing::info!(
        bindings = loaded,
        resync,
        "redis store: bindings loaded from Redis"
    );
    Ok(last.unwrap_or_default())
}

/// The first (`XRANGE`) or last (`XREVRANGE`) entry of the stream.
async fn edge(
    cmd: &mut RedisConn,
    verb: &str,
    stream: &str,
    from: &str,
    to: &str,
) -> Result<Option<Cursor>, RedisError> {
    let r: StreamRangeReply = redis::cmd(verb)
        .arg(stream)
        .arg(from)
        .arg(to)
        .arg("COUNT")
        .arg(1)
        .query_async(cmd)
        .await?;
    Ok(r.ids.first().and_then(|e| {
        Some(Cursor {
            id: EntryId::parse(&e.id)?,
            seq: wire::seq_of(&e.map),
        })
    }))
}

/// Loads every binding Redis holds into the cache, at most the cache's
/// `max_sessions` of them; how many were read.
async fn scan_load(shared: &Shared, cmd: &mut RedisConn) -> Result<usize, RedisError> {
    let pattern = shared.keys.binding_pattern();
    let stream = shared.keys.stream();
    let limit = shared.cache.max_sessions();
    let mut cursor = 0u64;
    let mut read = 0usize;
    loop {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        // On a cluster every key of the store is in one slot (wire::Keys).
        let (next, keys): (u64, Vec<String>) = cmd.query_on_slot_of(&scan, &stream).await?;
        let ids: Vec<SessionId> = keys
            .iter()
            .filter_map(|k| shared.keys.id_of(k))
            .take(limit - read)
            .collect();
        read += ids.len();
        apply_remote(shared, cmd, &ids).await?;
        cursor = next;
        if cursor == 0 || read >= limit {
            return Ok(read);
        }
    }
}

/// Reads the bindings of `ids` and takes those that win over the cache.
async fn apply_remote(
    shared: &Shared,
    cmd: &mut RedisConn,
    ids: &[SessionId],
) -> Result<(), RedisError> {
    if ids.is_empty() {
        return Ok(());
    }
    let asks = ids
        .iter()
        .map(|id| {
            let mut c = redis::cmd("HGETALL");
            c.arg(shared.keys.binding(id));
            c
        })
        .collect();
    let found = cmd.run_all(asks).await?;
    for (id, fields) in ids.iter().zip(found) {
        let fields: HashMap<String, Vec<u8>> = redis::from_redis_value(fields)?;
        // An empty hash: expired or removed since the notice.
        if let Some(b) = wire::binding_from(&fields) {
            shared.take(*id, b);
        }
    }
    Ok(())
}

/// Sends queued writes through the scripts, a pipeline at a time. A batch
/// is kept in `retry` until Redis has answered it, so a lost connection
/// sends it again on the next one (the script makes that harmless).
async fn write_loop(
    shared: &Shared,
    cmd: &mut RedisConn,
    scripts: &Scripts,
    retry: &mut Vec<Dirty>,
) -> RedisError {
    loop {
        if retry.is_empty() {
            while retry.len() < BATCH {
                let Some(d) = shared.queue.pop() else { break };
                retry.push(d);
            }
            shared.in_flight.store(retry.len(), Ordering::Relaxed);
        }
        if retry.is_empty() {
            shared.wake.notified().await;
            continue;
        }
        match send(shared, cmd, scripts, retry).await {
            Ok(_) => {}
            Err(e) if needs_redial(&e) => return e,
            Err(e) => {
                // Redis refused the batch itself (not the connection):
                // sending it again would fail again.
                shared
                    .dropped
                    .fetch_add(retry.len() as u64, Ordering::Relaxed);
                *shared.last_error.lock() = Some(e.to_string());
                tracing::warn!(error = %e, writes = retry.len(), "redis store: writes refused by Redis; dropped");
            }
        }
        retry.clear();
        shared.in_flight.store(0, Ordering::Relaxed);
    }
}

/// Sends `batch` in one pipeline; how many bindings Redis took (written or
/// refreshed: compare-and-set won).
async fn send(
    shared: &Shared,
    cmd: &mut RedisConn,
    scripts: &Scripts,
    batch: &[Dirty],
) -> Result<usize, RedisError> {
    let stream = shared.keys.stream();
    let seq = shared.keys.seq();
    let mut cmds: Vec<Cmd> = Vec::with_capacity(batch.len());
    let mut sent: Vec<(SessionId, bool)> = Vec::with_capacity(batch.len());
    for d in batch {
        let key = shared.keys.binding(&d.id);
        let hex = d.id.to_string();
        let mut pipe = redis::cmd("EVALSHA");
        if d.removed {
            pipe.arg(&scripts.remove)
                .arg(3)
                .arg(&key)
                .arg(&stream)
                .arg(&seq)
                .arg(&shared.replica)
                .arg(shared.stream_maxlen)
                .arg(&hex);
            cmds.push(pipe);
            sent.push((d.id, true));
            continue;
        }
        // Removed or swept since: nothing to write.
        let Some(b) = shared.cache.get(&d.id, 0) else {
            continue;
        };
        pipe.arg(&scripts.cas)
            .arg(3)
            .arg(&key)
            .arg(&stream)
            .arg(&seq)
            .arg(&*b.service)
            .arg(&*b.node)
            .arg(b.bound_at)
            .arg(b.hops)
            .arg(b.expires_at)
            .arg(&shared.replica)
            .arg(if b.context.is_some() { "1" } else { "0" })
            .arg(b.context.as_deref().unwrap_or_default())
            .arg(shared.stream_maxlen)
            .arg(&hex);
        cmds.push(pipe);
        sent.push((d.id, false));
    }
    if sent.is_empty() {
        return Ok(0);
    }
    let answers = cmd.run_all(cmds).await?;
    let mut written = 0;
    for ((id, removed), answer) in sent.into_iter().zip(answers) {
        if removed {
            continue;
        }
        match wire::cas_outcome(&answer) {
            Some(CasOutcome::Written) => written += 1,
            Some(CasOutcome::Lost(winner)) => {
                shared.conflicts.fetch_add(1, Ordering::Relaxed);
                if let Some(w) = winner {
                    tracing::debug!(session_key = %id, node = %w.node, hops = w.hops, "redis store: write lost its compare-and-set; taking the stored binding");
                    shared.take(id, w);
                }
            }
            Some(CasOutcome::Expired) | None => {}
        }
    }
    Ok(written)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Writes the cache back into Redis each time Redis has lost its data
/// (see [`check_epoch`]), beside the write queue so requests' writes never
/// wait behind it. Every live binding goes through the compare-and-set
/// script, `BATCH` to a pipeline, with its own expiry (so its remaining
/// TTL): when several replicas re-seed at once the binding with more hops
/// wins, an equal one is a harmless refresh, and a stale copy loses and
/// takes the winner. A connection lost halfway leaves the re-seed pending,
/// and the next connection runs it again from the start.
async fn reseed_loop(shared: &Shared, cmd: &mut RedisConn, scripts: &Scripts) -> RedisError {
    loop {
        if !shared.reseed_pending.load(Ordering::Acquire) {
            shared.reseed_wake.notified().await;
            continue;
        }
        let now = unix_now();
        let mut live = Vec::new();
        shared.cache.for_each(&mut |id, b| {
            if b.is_live(now) {
                live.push(Dirty {
                    id: *id,
                    removed: false,
                });
            }
        });
        let conflicts = shared.conflicts.load(Ordering::Relaxed);
        let mut written = 0usize;
        for chunk in live.chunks(BATCH) {
            match send(shared, cmd, scripts, chunk).await {
                Ok(n) => written += n,
                Err(e) if needs_redial(&e) => return e,
                Err(e) => {
                    shared
                        .dropped
                        .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    *shared.last_error.lock() = Some(e.to_string());
                    tracing::warn!(error = %e, writes = chunk.len(), "redis store: re-seeding writes refused by Redis; dropped");
                }
            }
        }
        shared.reseed_pending.store(false, Ordering::Release);
        shared.reseeded.fetch_add(written as u64, Ordering::Relaxed);
        tracing::info!(
            replica = %shared.replica,
            reseeded = written,
            lost = shared.conflicts.load(Ordering::Relaxed).saturating_sub(conflicts),
            "redis store: Redis re-seeded from the local cache"
        );
    }
}

/// Follows the change stream from `cursor`, taking other replicas'
/// changes into the cache (its own are skipped: the cache has them). A
/// jump in the notice numbers means notices were lost before this replica
/// read them (trimmed while it lagged, or Redis lost its data): it
/// reloads everything. Between reads, at most every [`EPOCH_CHECK`], it
/// checks the epoch, so a Redis that lost its data while the connections
/// stayed up (`FLUSHALL`) is found even when nothing is written; then it
/// reloads too, and the cache is written back ([`reseed_loop`]).
async fn read_loop(
    shared: &Shared,
    cmd: &mut RedisConn,
    feed: &mut RedisConn,
    cursor: &mut Cursor,
) -> RedisError {
    let stream = shared.keys.stream();
    let mut checked = tokio::time::Instant::now();
    loop {
        if checked.elapsed() >= EPOCH_CHECK {
            checked = tokio::time::Instant::now();
            if shared.mode == "cluster" {
                // A cluster fails over behind one connection.
                if let Err(e) = check_server(shared, cmd).await {
                    return e;
                }
            }
            match check_epoch(shared, cmd).await {
                Ok(false) => {}
                Ok(true) => match reload(shared, cmd, true).await {
                    Ok(c) => *cursor = c,
                    Err(e) => return e,
                },
                Err(e) => return e,
            }
        }
        let reply: Option<StreamReadReply> = match redis::cmd("XREAD")
            .arg("COUNT")
            .arg(READ_COUNT)
            .arg("BLOCK")
            .arg(BLOCK.as_millis() as u64)
            .arg("STREAMS")
            .arg(&stream)
            .arg(cursor.id.to_string())
            .query_async(feed)
            .await
        {
            Ok(r) => r,
            Err(e) => return e,
        };
        let Some(reply) = reply else { continue };
        let mut set = Vec::new();
        let mut gap = false;
        for entry in reply.keys.into_iter().flat_map(|k| k.ids) {
            let Some(id) = EntryId::parse(&entry.id) else {
                continue;
            };
            let seq = wire::seq_of(&entry.map);
            if !cursor.follows(seq) {
                gap = true;
                break;
            }
            *cursor = Cursor { id, seq };
            let Some(n) = wire::notice_from(&entry.map) else {
                continue;
            };
            if n.writer == shared.replica {
                continue;
            }
            if n.removed {
                set.retain(|id| *id != n.id);
                if shared.cache.remove(&n.id) {
                    shared.applied.fetch_add(1, Ordering::Relaxed);
                }
            } else if !set.contains(&n.id) {
                set.push(n.id);
            }
        }
        if let Err(e) = apply_remote(shared, cmd, &set).await {
            return e;
        }
        if gap {
            // Trimmed, or Redis lost its data: the epoch tells which.
            checked = tokio::time::Instant::now();
            if let Err(e) = check_epoch(shared, cmd).await {
                return e;
            }
            match reload(shared, cmd, true).await {
                Ok(c) => *cursor = c,
                Err(e) => return e,
            }
        }
    }
}

/// The miss lookup behind [`SessionStore::fetch`].
pub(super) async fn fetch(shared: Arc<Shared>, id: SessionId) -> Option<Binding> {
    let mut conn = RedisConn::clone(&*shared.conn.load_full()?);
    let key = shared.keys.binding(&id);
    let mut ask = redis::cmd("HGETALL");
    ask.arg(key);
    let ask = ask.query_async::<HashMap<String, Vec<u8>>>(&mut conn);
    let fields = tokio::time::timeout(shared.fetch_timeout, ask)
        .await
        .ok()?
        .ok()?;
    let b = wire::binding_from(&fields)?;
    shared.take(id, b);
    shared.cache.get(&id, 0)
}
