//! The embedded session store: a lock-free concurrent map with TTL expiry,
//! a size bound and an optional persistence file.
//!
//! Owns the map (papaya: reads and writes take no lock; a read is a hash
//! probe under an epoch guard, so readers never wait on writers nor on each
//! other), the interning of service and node names, and the snapshot file
//! format (see [`persist`]).
//!
//! Expiry: a binding past its `expires_at` is invisible to `get` at once and
//! freed by the next `sweep` (the control plane runs it periodically).
//!
//! Bound: at `max_sessions` a *new* session id makes room by evicting the
//! least recently used bindings, approximately, with the CLOCK
//! (second-chance) algorithm. Every binding carries a `used` bit that a
//! `get` sets (a relaxed load, and a relaxed store only when it was clear:
//! no lock, no write to a shared line on the common path). When a new id
//! finds the store full, one writer at a time (an atomic flag, never
//! waited on: the others insert and the store overshoots by those racing
//! inserts until the next pass) moves a hand over the map: a binding with
//! its bit set gets a second chance (the bit is cleared), one without it
//! has not been read for a whole revolution of the hand and is evicted.
//! Expired bindings met on the way are dropped first (not counted as
//! evictions). A pass frees a batch (`max_sessions / 256`, 1 to 4096) so
//! the cost of walking the map to the hand is amortised over that many
//! inserts; it looks at no more than two revolutions' worth of bindings, so
//! it always ends. Evictions are counted ([`SessionStore::evictions`]) and
//! logged at exponentially spaced counts. An exact LRU would need a shared
//! list reordered on every read, that is a lock (or a contended CAS) on
//! the hot path; sampling à la Redis needs random access, which the map
//! does not offer. CLOCK needs one bit per binding and nothing on reads.
//!
//! A flood of clients that never come back cannot fill the store in the
//! first place: the proxy binds a session only when its client returns the
//! token (see `settle_session`). What the eviction protects against is a
//! store full of real but idle sessions, or of tokens replayed by a
//! client that does come back: a new user still gets a binding, and the
//! ones evicted are those idle for longest.
//!
//! Must not touch: clocks (`now` comes from the caller), the network.

use std::collections::hash_map::RandomState;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{Binding, SessionId, SessionStore};

mod persist;

pub use persist::{LoadReport, LoadWarning};

/// `max_sessions` when none is given: about 150 MB of bindings.
pub const DEFAULT_MAX_SESSIONS: usize = 1_000_000;

/// A stored binding and its CLOCK bit.
struct Slot {
    binding: Binding,
    /// Read since the eviction hand last passed (set on insert too: a new
    /// binding gets one revolution).
    used: AtomicBool,
}

impl Slot {
    fn new(binding: Binding) -> Self {
        Slot {
            binding,
            used: AtomicBool::new(true),
        }
    }

    fn touch(&self) {
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
    }
}

/// The embedded store. Cheap to share: wrap it in an `Arc`.
pub struct MemoryStore {
    map: papaya::HashMap<SessionId, Slot, RandomState>,
    /// One `Arc<str>` per distinct service or node name, shared by every
    /// binding that names it (held twice here: as key and as value, since
    /// papaya's sets cannot hand back the stored key on insert).
    names: papaya::HashMap<Arc<str>, Arc<str>, RandomState>,
    max_sessions: AtomicUsize,
    /// Bindings evicted to make room, since start.
    evicted: AtomicU64,
    /// Where the eviction hand stopped (a position in the map's order).
    hand: AtomicUsize,
    /// A writer is moving the hand.
    evicting: AtomicBool,
    /// The latest `now` a `get` was asked about: lets a pass tell expired
    /// bindings from idle ones (`put` takes no clock).
    last_now: AtomicU64,
}

impl MemoryStore {
    /// An empty store holding at most `max_sessions` bindings.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            map: papaya::HashMap::with_hasher(RandomState::new()),
            names: papaya::HashMap::with_hasher(RandomState::new()),
            max_sessions: AtomicUsize::new(max_sessions),
            evicted: AtomicU64::new(0),
            hand: AtomicUsize::new(0),
            evicting: AtomicBool::new(false),
            last_now: AtomicU64::new(0),
        }
    }

    pub fn max_sessions(&self) -> usize {
        self.max_sessions.load(Ordering::Relaxed)
    }

    /// Changes the bound (on reload). Lowering it evicts nothing at once:
    /// the next new session's pass evicts down to it.
    pub fn set_max_sessions(&self, max_sessions: usize) {
        self.max_sessions.store(max_sessions, Ordering::Relaxed);
    }

    /// Writes every binding to `path` atomically (a temporary file in the
    /// same directory, fsynced, then renamed over `path`); returns how many
    /// were written. Expired bindings not yet swept are written too and
    /// skipped by [`MemoryStore::load`]. Blocking file I/O: call it from a
    /// blocking task, never from the request path.
    pub fn save(&self, path: &Path) -> io::Result<usize> {
        persist::save(self, path)
    }

    /// Loads the store saved at `path`, skipping bindings expired at `now`,
    /// with [`DEFAULT_MAX_SESSIONS`]. Never fails: a missing file gives an
    /// empty store; an unreadable, corrupt or other-version file gives an
    /// empty store and a [`LoadReport::warning`] to log.
    pub fn load(path: &Path, now: u64) -> (MemoryStore, LoadReport) {
        Self::load_with_limit(path, now, DEFAULT_MAX_SESSIONS)
    }

    /// [`MemoryStore::load`] with a bound; bindings past it are skipped and
    /// counted in [`LoadReport::over_limit`].
    pub fn load_with_limit(
        path: &Path,
        now: u64,
        max_sessions: usize,
    ) -> (MemoryStore, LoadReport) {
        persist::load(path, now, max_sessions)
    }

    /// The shared copy of `name`, adding it on first sight.
    fn intern(&self, name: &Arc<str>) -> Arc<str> {
        let names = self.names.pin();
        if let Some(shared) = names.get(&**name) {
            return Arc::clone(shared);
        }
        // Another thread may insert the same name first: either way, the
        // one in the map wins.
        Arc::clone(names.get_or_insert(Arc::clone(name), Arc::clone(name)))
    }

    fn intern_str(&self, name: &str) -> Arc<str> {
        let names = self.names.pin();
        if let Some(shared) = names.get(name) {
            return Arc::clone(shared);
        }
        self.intern(&Arc::from(name))
    }

    /// Stores `binding` for `id` only when `replace(current)` says so, in one
    /// atomic step (a concurrent `put` is either seen by `replace` or comes
    /// after); whether it was stored. `current` includes an expired binding
    /// not swept yet. A new id past `max_sessions` makes room first.
    pub(crate) fn put_if(
        &self,
        id: SessionId,
        mut binding: Binding,
        replace: impl Fn(Option<&Binding>) -> bool,
    ) -> bool {
        binding.service = self.intern(&binding.service);
        binding.node = self.intern(&binding.node);
        let map = self.map.pin();
        let max = self.max_sessions();
        if map.len() >= max && !map.contains_key(&id) {
            self.make_room(max);
        }
        let done = map.compute(id, |cur| {
            if replace(cur.map(|(_, s)| &s.binding)) {
                papaya::Operation::Insert(Slot::new(binding.clone()))
            } else {
                papaya::Operation::Abort(())
            }
        });
        !matches!(done, papaya::Compute::Aborted(()))
    }

    /// Inserts without interning or bound checks (load, which has done both).
    fn insert_raw(&self, id: SessionId, binding: Binding) {
        self.map.pin().insert(id, Slot::new(binding));
    }

    /// One pass of the CLOCK hand, freeing room for at least one new
    /// binding (a batch, in fact; see the module docs). Returns at once if
    /// another writer is already making room.
    fn make_room(&self, max: usize) {
        if self.evicting.swap(true, Ordering::Acquire) {
            return;
        }
        let map = self.map.pin();
        let len = map.len();
        let batch = (max / 256).clamp(1, 4096);
        let target = (len + batch).saturating_sub(max);
        let now = self.last_now.load(Ordering::Relaxed);
        let start = self.hand.load(Ordering::Relaxed);
        // From the hand to the end, then round again twice: the first
        // revolution may only clear bits.
        let order = map
            .iter()
            .enumerate()
            .skip(start)
            .chain(map.iter().enumerate())
            .chain(map.iter().enumerate())
            .take(2 * len + 1);
        let (mut freed, mut evicted, mut stop) = (0, 0u64, start);
        for (i, (id, slot)) in order {
            stop = i + 1;
            if !slot.binding.is_live(now) {
                let gone = map.remove_if(id, |_, s| !s.binding.is_live(now));
                freed += usize::from(matches!(gone, Ok(Some(_))));
            } else if slot.used.load(Ordering::Relaxed) {
                slot.used.store(false, Ordering::Relaxed);
            } else if matches!(
                map.remove_if(id, |_, s| !s.used.load(Ordering::Relaxed)),
                Ok(Some(_))
            ) {
                freed += 1;
                evicted += 1;
            }
            if freed >= target {
                break;
            }
        }
        self.hand.store(stop, Ordering::Relaxed);
        self.evicting.store(false, Ordering::Release);
        if evicted > 0 {
            let before = self.evicted.fetch_add(evicted, Ordering::Relaxed);
            let after = before + evicted;
            // Logged when the total crosses a power of two.
            if before == 0 || after.ilog2() > before.ilog2() {
                tracing::warn!(
                    max_sessions = max,
                    evicted_total = after,
                    "session store full: least recently used sessions evicted to bind new ones"
                );
            }
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_SESSIONS)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("len", &self.map.len())
            .field("max_sessions", &self.max_sessions())
            .field("evictions", &self.evicted.load(Ordering::Relaxed))
            .finish()
    }
}

impl SessionStore for MemoryStore {
    fn get(&self, id: &SessionId, now: u64) -> Option<Binding> {
        // Written about once a second, not once a read.
        if self.last_now.load(Ordering::Relaxed) < now {
            self.last_now.store(now, Ordering::Relaxed);
        }
        let map = self.map.pin();
        let slot = map.get(id).filter(|s| s.binding.is_live(now))?;
        slot.touch();
        Some(slot.binding.clone())
    }

    fn put(&self, id: SessionId, mut binding: Binding) {
        binding.service = self.intern(&binding.service);
        binding.node = self.intern(&binding.node);
        let map = self.map.pin();
        let max = self.max_sessions();
        if map.len() >= max && !map.contains_key(&id) {
            self.make_room(max);
        }
        map.insert(id, Slot::new(binding));
    }

    fn remove(&self, id: &SessionId) -> bool {
        self.map.pin().remove(id).is_some()
    }

    fn sweep(&self, now: u64) -> usize {
        let map = self.map.pin();
        let mut dropped = 0;
        for (id, s) in map.iter() {
            if !s.binding.is_live(now)
                && matches!(
                    map.remove_if(id, |_, s| !s.binding.is_live(now)),
                    Ok(Some(_))
                )
            {
                dropped += 1;
            }
        }
        drop(map);
        // Forget names no binding uses any more (nodes gone from the
        // config): the map itself holds two references.
        self.names
            .pin()
            .retain(|_, name| Arc::strong_count(name) > 2);
        dropped
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn bindings_to(&self, service: &str, node: &str) -> usize {
        let map = self.map.pin();
        map.values()
            .filter(|s| &*s.binding.node == node && &*s.binding.service == service)
            .count()
    }

    fn for_each(&self, visit: &mut dyn FnMut(&SessionId, &Binding)) {
        let map = self.map.pin();
        for (id, s) in map.iter() {
            visit(id, &s.binding);
        }
    }

    fn evictions(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}
