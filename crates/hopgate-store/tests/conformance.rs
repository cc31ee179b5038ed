//! The conformance suite on the memory store, plus what only the memory
//! store promises (capacity bound, name interning).

use std::sync::Arc;

use hopgate_store::conformance::{self, id};
use hopgate_store::{Binding, MemoryStore, SessionStore};

const NOW: u64 = 1_700_000_000;

fn store() -> MemoryStore {
    MemoryStore::default()
}

#[test]
fn run_all_on_memory_store() {
    conformance::run_all(store);
}

#[test]
fn run_all_on_a_nearly_full_store() {
    // The bound must not get in the way below it.
    conformance::run_all(|| MemoryStore::new(100_000));
}

#[test]
fn put_get_round_trip() {
    conformance::put_get_round_trip(store());
}

#[test]
fn overwrite_replaces() {
    conformance::overwrite_replaces(store());
}

#[test]
fn remove_forgets() {
    conformance::remove_forgets(store());
}

#[test]
fn expired_hidden_from_get_and_swept() {
    conformance::expired_hidden_from_get_and_swept(store());
}

#[test]
fn hops_and_context_preserved() {
    conformance::hops_and_context_preserved(store());
}

#[test]
fn bindings_to_counts() {
    conformance::bindings_to_counts(store());
}

#[test]
fn len_counts() {
    conformance::len_counts(store());
}

#[test]
fn snapshot_lists_everything() {
    conformance::snapshot_lists_everything(store());
}

#[test]
fn concurrent_distinct_writers_lose_nothing() {
    conformance::concurrent_distinct_writers_lose_nothing(store());
}

#[test]
fn concurrent_same_key_last_writer_wins() {
    conformance::concurrent_same_key_last_writer_wins(store());
}

#[test]
fn works_as_trait_object() {
    conformance::works_as_trait_object(store());
}

#[test]
fn a_full_store_evicts_the_least_recently_used() {
    let s = MemoryStore::new(8);
    for i in 0..8 {
        s.put(id(i), Binding::new("api", "a", NOW, NOW + 60));
    }
    assert_eq!(s.evictions(), 0);
    // A new user still gets a binding; one old one makes room.
    s.put(id(8), Binding::new("api", "a", NOW, NOW + 60));
    assert!(s.get(&id(8), NOW).is_some(), "the new session is bound");
    assert_eq!((s.len(), s.evictions()), (8, 1));
    // Sessions that keep being read survive every later eviction; idle
    // ones go.
    let hot: Vec<u64> = (0..4).filter(|i| s.get(&id(*i), NOW).is_some()).collect();
    assert!(hot.len() >= 3, "{hot:?}");
    // At least three idle ones (of 4..8) are left: three new sessions
    // evict only those. (A fourth could find every binding read since the
    // clock hand last passed it, and CLOCK then takes any of them: it
    // approximates LRU, it does not promise it.)
    for new in 9..12 {
        for h in &hot {
            assert!(s.get(&id(*h), NOW).is_some(), "hot session {h} evicted");
        }
        s.put(id(new), Binding::new("api", "a", NOW, NOW + 60));
        assert!(s.get(&id(new), NOW).is_some());
    }
    assert_eq!((s.len(), s.evictions()), (8, 4));
    for h in &hot {
        assert!(s.get(&id(*h), NOW).is_some(), "hot session {h} evicted");
    }
    // Updates of existing ids never evict.
    let mut hopped = Binding::new("api", "b", NOW, NOW + 60);
    hopped.hops = 1;
    s.put(id(hot[0]), hopped.clone());
    assert_eq!(s.get(&id(hot[0]), NOW), Some(hopped));
    assert_eq!(s.evictions(), 4);
    // Expired bindings make room without counting as evictions.
    let t = NOW + 100;
    assert!(s.get(&id(hot[0]), t).is_none(), "expired");
    s.put(id(100), Binding::new("api", "a", t, t + 60));
    assert_eq!(s.evictions(), 4, "an expired binding is not an eviction");
    assert!(s.get(&id(100), t).is_some());
    // Raising the bound takes effect at once; lowering it evicts down to
    // it on the next new session.
    s.set_max_sessions(10);
    s.put(id(101), Binding::new("api", "a", t, t + 60));
    assert_eq!(s.max_sessions(), 10);
    s.set_max_sessions(1);
    s.put(id(102), Binding::new("api", "a", t, t + 60));
    assert!(s.len() <= 2, "{}", s.len());
    assert!(s.get(&id(102), t).is_some());
}

#[test]
fn concurrent_inserts_into_a_full_store_stay_near_the_bound() {
    let s = Arc::new(MemoryStore::new(1000));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 0..5_000u64 {
                    let k = id(t * 1_000_000 + i);
                    s.put(k, Binding::new("api", "a", NOW, NOW + 60));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // Inserts that raced a pass overshot the bound; the next pass takes
    // the store back under it (and the newcomer is bound).
    s.put(id(u64::MAX), Binding::new("api", "a", NOW, NOW + 60));
    assert!(s.get(&id(u64::MAX), NOW).is_some());
    assert!(s.len() <= 1000, "{}", s.len());
    assert_eq!(s.evictions(), 20_001 - s.len() as u64);
}

#[test]
fn names_are_interned_and_pruned() {
    let s = MemoryStore::default();
    // Each put brings its own allocation of the same names.
    for i in 0..100 {
        s.put(
            id(i),
            Binding::new(
                String::from("api"),
                format!("node-{}", i % 2),
                NOW,
                NOW + 60,
            ),
        );
    }
    let a = s.get(&id(0), NOW).expect("bound");
    let b = s.get(&id(2), NOW).expect("bound");
    let c = s.get(&id(1), NOW).expect("bound");
    assert!(
        Arc::ptr_eq(&a.service, &b.service),
        "service names not shared"
    );
    assert!(
        Arc::ptr_eq(&a.service, &c.service),
        "service names not shared"
    );
    assert!(Arc::ptr_eq(&a.node, &b.node), "node names not shared");
    assert!(!Arc::ptr_eq(&a.node, &c.node));
    drop((a, b, c));
    // Everything expires: the names go too, and come back on demand.
    assert_eq!(s.sweep(NOW + 60), 100);
    s.put(id(0), Binding::new("api", "node-0", NOW, NOW + 60));
    assert_eq!(s.bindings_to("api", "node-0"), 1);
}

#[test]
fn debug_shows_counts() {
    let s = MemoryStore::new(7);
    s.put(id(1), Binding::new("api", "a", NOW, NOW + 60));
    let dbg = format!("{s:?}");
    assert!(
        dbg.contains("len: 1") && dbg.contains("max_sessions: 7"),
        "{dbg}"
    );
}

#[test]
fn binding_stays_small() {
    // Two Arc<str> (16 each), an optional Arc<[u8]> (16), two u64 and a u32.
    assert!(
        std::mem::size_of::<Binding>() <= 72,
        "{}",
        std::mem::size_of::<Binding>()
    );
}
