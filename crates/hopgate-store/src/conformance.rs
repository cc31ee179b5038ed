//! The behaviour every [`SessionStore`] must have, as runnable checks.
//!
//! Each `pub fn` takes an empty store and panics (with the
//! case's name) when the store misbehaves; [`run_all`] runs every case on
//! fresh stores. An implementation's test file runs them:
//!
//! ```no_run
//! hopgate_store::conformance::run_all(hopgate_store::MemoryStore::default);
//! ```
//!
//! Compiled always (it is small and depends on std only) so stores outside
//! this crate can run it too. Stores that sync in the background must pass
//! it against their local view.

use std::sync::{Arc, Barrier};
use std::thread;

use crate::{Binding, SessionId, SessionStore};

const NOW: u64 = 1_700_000_000;
const TTL: u64 = 3_600;

/// A distinct, deterministic id per `n`.
pub fn id(n: u64) -> SessionId {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&n.to_be_bytes());
    b[8..].copy_from_slice(&(!n).to_le_bytes());
    SessionId::from_bytes(b)
}

fn binding(service: &str, node: &str) -> Binding {
    Binding::new(service, node, NOW, NOW + TTL)
}

/// Runs every case, each on a fresh store from `make`.
pub fn run_all<S: SessionStore>(make: impl Fn() -> S) {
    put_get_round_trip(make());
    overwrite_replaces(make());
    remove_forgets(make());
    expired_hidden_from_get_and_swept(make());
    hops_and_context_preserved(make());
    bindings_to_counts(make());
    len_counts(make());
    snapshot_lists_everything(make());
    concurrent_distinct_writers_lose_nothing(make());
    concurrent_same_key_last_writer_wins(make());
    works_as_trait_object(make());
}

pub fn put_get_round_trip<S: SessionStore>(store: S) {
    assert_eq!(
        store.get(&id(1), NOW),
        None,
        "empty store returns a binding"
    );
    let b = binding("api", "api-1");
    store.put(id(1), b.clone());
    assert_eq!(store.get(&id(1), NOW), Some(b), "put/get round trip");
    assert_eq!(store.get(&id(2), NOW), None, "another id is unbound");
}

pub fn overwrite_replaces<S: SessionStore>(store: S) {
    store.put(id(1), binding("api", "api-1"));
    let mut hopped = binding("api", "api-2");
    hopped.hops = 1;
    store.put(id(1), hopped.clone());
    assert_eq!(store.get(&id(1), NOW), Some(hopped), "overwrite");
    assert_eq!(store.len(), 1, "overwrite must not add an entry");
}

pub fn remove_forgets<S: SessionStore>(store: S) {
    store.put(id(1), binding("api", "api-1"));
    store.put(id(2), binding("api", "api-1"));
    assert!(store.remove(&id(1)), "remove of a bound id returns true");
    assert!(!store.remove(&id(1)), "second remove returns false");
    assert!(
        !store.remove(&id(3)),
        "remove of an unknown id returns false"
    );
    assert_eq!(store.get(&id(1), NOW), None, "removed id still bound");
    assert!(
        store.get(&id(2), NOW).is_some(),
        "remove touched another id"
    );
    assert_eq!(store.len(), 1);
}

pub fn expired_hidden_from_get_and_swept<S: SessionStore>(store: S) {
    store.put(id(1), Binding::new("api", "a", NOW, NOW + 10));
    store.put(id(2), Binding::new("api", "a", NOW, NOW + 20));
    store.put(id(3), Binding::new("api", "a", NOW, NOW + 30));
    assert!(
        store.get(&id(1), NOW + 9).is_some(),
        "live before expires_at"
    );
    assert_eq!(store.get(&id(1), NOW + 10), None, "visible at expires_at");
    assert_eq!(store.get(&id(1), NOW + 25), None, "visible after expiry");
    assert!(store.get(&id(3), NOW + 25).is_some(), "a live one hidden");
    assert_eq!(store.sweep(NOW + 5), 0, "sweep dropped live bindings");
    assert_eq!(store.len(), 3);
    assert_eq!(store.sweep(NOW + 25), 2, "sweep count");
    assert_eq!(store.len(), 1, "len after sweep");
    assert!(
        store.get(&id(3), NOW + 25).is_some(),
        "sweep dropped a live one"
    );
    assert_eq!(store.sweep(NOW + 25), 0, "second sweep found more");
    // Re-binding an expired id makes it live again.
    store.put(id(1), Binding::new("api", "a", NOW + 25, NOW + 100));
    assert!(store.get(&id(1), NOW + 26).is_some(), "re-put after expiry");
}

pub fn hops_and_context_preserved<S: SessionStore>(store: S) {
    let mut b = binding("cart", "cart-3").with_context(&b"opaque\x00\xffstate"[..]);
    b.hops = 7;
    b.bound_at = NOW - 5;
    store.put(id(1), b.clone());
    let got = store.get(&id(1), NOW).expect("bound");
    assert_eq!(got.hops, 7, "hop count");
    assert_eq!(got.bound_at, NOW - 5, "bound_at");
    assert_eq!(
        got.context.as_deref(),
        Some(&b"opaque\x00\xffstate"[..]),
        "context"
    );
    assert_eq!(got, b);
    // Empty context and no context are different.
    store.put(id(2), binding("cart", "cart-3").with_context(Vec::new()));
    let got = store.get(&id(2), NOW).expect("bound");
    assert_eq!(got.context.as_deref(), Some(&[][..]), "empty context lost");
    store.put(id(3), binding("cart", "cart-3"));
    assert_eq!(store.get(&id(3), NOW).expect("bound").context, None);
    // A large context survives.
    let big: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    store.put(id(4), binding("cart", "cart-1").with_context(big.clone()));
    assert_eq!(
        store.get(&id(4), NOW).expect("bound").context.as_deref(),
        Some(&big[..])
    );
}

pub fn bindings_to_counts<S: SessionStore>(store: S) {
    for i in 0..10 {
        store.put(id(i), binding("api", "api-1"));
    }
    for i in 10..13 {
        store.put(id(i), binding("api", "api-2"));
    }
    store.put(id(13), binding("web", "api-1"));
    assert_eq!(store.bindings_to("api", "api-1"), 10);
    assert_eq!(store.bindings_to("api", "api-2"), 3);
    assert_eq!(
        store.bindings_to("web", "api-1"),
        1,
        "the service is part of the match"
    );
    assert_eq!(store.bindings_to("api", "api-3"), 0);
    // A hop moves the count.
    store.put(id(0), binding("api", "api-2"));
    assert_eq!(store.bindings_to("api", "api-1"), 9);
    assert_eq!(store.bindings_to("api", "api-2"), 4);
    store.remove(&id(10));
    assert_eq!(store.bindings_to("api", "api-2"), 3);
}

pub fn len_counts<S: SessionStore>(store: S) {
    assert_eq!(store.len(), 0);
    assert!(store.is_empty());
    for i in 0..100 {
        store.put(id(i), binding("api", "a"));
    }
    assert_eq!(store.len(), 100);
    assert!(!store.is_empty());
    for i in 0..40 {
        store.remove(&id(i));
    }
    assert_eq!(store.len(), 60);
}

pub fn snapshot_lists_everything<S: SessionStore>(store: S) {
    for i in 0..50 {
        let mut b = binding("api", if i % 2 == 0 { "a" } else { "b" });
        b.hops = i as u32;
        store.put(id(i), b);
    }
    let mut snap = store.iter_snapshot();
    snap.sort_by_key(|(_, b)| b.hops);
    assert_eq!(snap.len(), 50, "snapshot size");
    for (i, (sid, b)) in snap.iter().enumerate() {
        assert_eq!(*sid, id(i as u64), "snapshot id");
        assert_eq!(Some(b.clone()), store.get(sid, NOW), "snapshot binding");
    }
    let mut visited = 0;
    store.for_each(&mut |_, _| visited += 1);
    assert_eq!(visited, 50, "for_each visits");
}

/// Several std threads write distinct ids while others read: every write
/// is visible afterwards, and readers only ever see complete bindings.
pub fn concurrent_distinct_writers_lose_nothing<S: SessionStore>(store: S) {
    const WRITERS: u64 = 4;
    const READERS: usize = 2;
    const PER_WRITER: u64 = 5_000;
    let store = Arc::new(store);
    let start = Arc::new(Barrier::new(WRITERS as usize + READERS));
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let store = Arc::clone(&store);
        let start = Arc::clone(&start);
        handles.push(thread::spawn(move || {
            start.wait();
            for i in 0..PER_WRITER {
                let n = w * PER_WRITER + i;
                let mut b = binding("svc", &format!("node-{w}"));
                b.hops = n as u32;
                store.put(id(n), b);
            }
        }));
    }
    for _ in 0..READERS {
        let store = Arc::clone(&store);
        let start = Arc::clone(&start);
        handles.push(thread::spawn(move || {
            start.wait();
            for round in 0..3 {
                for n in 0..WRITERS * PER_WRITER {
                    if let Some(b) = store.get(&id(n), NOW) {
                        assert_eq!(b.hops as u64, n, "torn read (round {round})");
                        assert_eq!(&*b.node, format!("node-{}", n / PER_WRITER));
                    }
                }
            }
        }));
    }
    for h in handles {
        h.join().expect("a writer or reader thread panicked");
    }
    assert_eq!(store.len() as u64, WRITERS * PER_WRITER, "lost writes");
    for n in 0..WRITERS * PER_WRITER {
        let b = store
            .get(&id(n), NOW)
            .unwrap_or_else(|| panic!("lost write {n}"));
        assert_eq!(b.hops as u64, n);
    }
    for w in 0..WRITERS {
        assert_eq!(
            store.bindings_to("svc", &format!("node-{w}")) as u64,
            PER_WRITER
        );
    }
}

/// Several threads overwrite the same ids; afterwards each id holds one of
/// the written values, complete, and a final write by one thread wins.
pub fn concurrent_same_key_last_writer_wins<S: SessionStore>(store: S) {
    const THREADS: u32 = 4;
    const ROUNDS: u32 = 2_000;
    const KEYS: u64 = 8;
    let store = Arc::new(store);
    let start = Arc::new(Barrier::new(THREADS as usize));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                for r in 0..ROUNDS {
                    let k = u64::from(r) % KEYS;
                    let mut b = binding("svc", &format!("node-{t}"));
                    b.hops = t * ROUNDS + r;
                    store.put(id(k), b);
                    if let Some(seen) = store.get(&id(k), NOW) {
                        // Whatever a reader sees was written whole by one thread.
                        let writer = seen.hops / ROUNDS;
                        assert_eq!(&*seen.node, format!("node-{writer}"), "torn binding");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a writer thread panicked");
    }
    assert_eq!(store.len() as u64, KEYS, "same-key writes added entries");
    for k in 0..KEYS {
        let b = store.get(&id(k), NOW).expect("key written by every thread");
        let writer = b.hops / ROUNDS;
        assert!(writer < THREADS);
        assert_eq!(&*b.node, format!("node-{writer}"));
        // Each thread's last round on this key.
        assert_eq!(
            u64::from(b.hops % ROUNDS) % KEYS,
            k,
            "value from another key"
        );
    }
    // Once writers are quiet, the last put is what get returns.
    for k in 0..KEYS {
        let mut b = binding("svc", "final");
        b.hops = 42;
        store.put(id(k), b.clone());
        assert_eq!(store.get(&id(k), NOW), Some(b), "last writer wins");
    }
}

pub fn works_as_trait_object<S: SessionStore>(store: S) {
    let store: Arc<dyn SessionStore> = Arc::new(store);
    store.put(id(1), binding("api", "a"));
    let other = Arc::clone(&store);
    let got = thread::spawn(move || other.get(&id(1), NOW))
        .join()
        .expect("reader thread panicked");
    assert_eq!(got, Some(binding("api", "a")), "shared across threads");
    assert_eq!(store.evictions(), 0);
}
