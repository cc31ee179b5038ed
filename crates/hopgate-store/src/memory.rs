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
//! Bound: at `max_sessions` a *new* session id is refused (the binding is
//! not stored; the request still goes through, its session just is not
//! sticky yet), counted in [`SessionStore::full_rejections`] and logged at
//! exponentially spaced counts. Existing sessions are never evicted to make
//! room: a flood of fresh clients must not unbind the sessions already
//! there. Updates of existing ids always succeed. The bound is checked
//! without a lock, so concurrent inserts may overshoot it by at most the
//! number of writing threads.
//!
//! Must not touch: clocks (`now` comes from the caller), the network.

use std::collections::hash_map::RandomState;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::{Binding, SessionId, SessionStore};

mod persist;

pub use persist::{LoadReport, LoadWarning};

/// `max_sessions` when none is given: about 150 MB of bindings.
pub const DEFAULT_MAX_SESSIONS: usize = 1_000_000;

/// The embedded store. Cheap to share: wrap it in an `Arc`.
pub struct MemoryStore {
    map: papaya::HashMap<SessionId, Binding, RandomState>,
    /// One `Arc<str>` per distinct service or node name, shared by every
    /// binding that names it (held twice here: as key and as value, since
    /// papaya's sets cannot hand back the stored key on insert).
    names: papaya::HashMap<Arc<str>, Arc<str>, RandomState>,
    max_sessions: AtomicUsize,
    rejected: AtomicU64,
}

impl MemoryStore {
    /// An empty store holding at most `max_sessions` bindings.
    pub fn new(max_sessions: usize) -> Self {
        Self {
            map: papaya::HashMap::with_hasher(RandomState::new()),
            names: papaya::HashMap::with_hasher(RandomState::new()),
            max_sessions: AtomicUsize::new(max_sessions),
            rejected: AtomicU64::new(0),
        }
    }

    pub fn max_sessions(&self) -> usize {
        self.max_sessions.load(Ordering::Relaxed)
    }

    /// Changes the bound (on reload). Lowering it evicts nothing: new
    /// sessions are refused until expiry brings the count under it.
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
    /// not swept yet. A new id past `max_sessions` is refused and counted.
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
        let full = map.len() >= max;
        let mut refused_full = false;
        let done = map.compute(id, |cur| {
            let cur = cur.map(|(_, b)| b);
            if cur.is_none() && full {
                refused_full = true;
                return papaya::Operation::Abort(());
            }
            if replace(cur) {
                papaya::Operation::Insert(binding.clone())
            } else {
                papaya::Operation::Abort(())
            }
        });
        let stored = !matches!(done, papaya::Compute::Aborted(()));
        if refused_full {
            self.reject_full(max);
        }
        stored
    }

    /// Inserts without interning or bound checks (load, which has done both).
    fn insert_raw(&self, id: SessionId, binding: Binding) {
        self.map.pin().insert(id, binding);
    }

    fn reject_full(&self, max: usize) {
        let n = self.rejected.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                max_sessions = max,
                rejected_total = n,
                "session store full: new session not stored (it stays unbound until expiry frees room)"
            );
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
            .field("full_rejections", &self.rejected.load(Ordering::Relaxed))
            .finish()
    }
}

impl SessionStore for MemoryStore {
    fn get(&self, id: &SessionId, now: u64) -> Option<Binding> {
        let map = self.map.pin();
        map.get(id).filter(|b| b.is_live(now)).cloned()
    }

    fn put(&self, id: SessionId, mut binding: Binding) {
        let map = self.map.pin();
        let max = self.max_sessions();
        if map.len() >= max && !map.contains_key(&id) {
            self.reject_full(max);
            return;
        }
        binding.service = self.intern(&binding.service);
        binding.node = self.intern(&binding.node);
        map.insert(id, binding);
    }

    fn remove(&self, id: &SessionId) -> bool {
        self.map.pin().remove(id).is_some()
    }

    fn sweep(&self, now: u64) -> usize {
        let map = self.map.pin();
        let mut dropped = 0;
        for (id, b) in map.iter() {
            if !b.is_live(now) && matches!(map.remove_if(id, |_, b| !b.is_live(now)), Ok(Some(_))) {
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
            .filter(|b| &*b.node == node && &*b.service == service)
            .count()
    }

    fn for_each(&self, visit: &mut dyn FnMut(&SessionId, &Binding)) {
        let map = self.map.pin();
        for (id, b) in map.iter() {
            visit(id, b);
        }
    }

    fn full_rejections(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
}
