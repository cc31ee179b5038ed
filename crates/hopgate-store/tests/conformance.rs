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
fn full_store_rejects_new_ids_but_updates_existing_ones() {
    let s = MemoryStore::new(3);
    for i in 0..3 {
        s.put(id(i), Binding::new("api", "a", NOW, NOW + 60));
    }
    s.put(id(3), Binding::new("api", "a", NOW, NOW + 60));
    assert_eq!(s.get(&id(3), NOW), None, "new id stored past the bound");
    assert_eq!(s.full_rejections(), 1);
    assert_eq!(s.len(), 3);
    // An existing session can still hop.
    let mut hopped = Binding::new("api", "b", NOW, NOW + 60);
    hopped.hops = 1;
    s.put(id(0), hopped.clone());
    assert_eq!(s.get(&id(0), NOW), Some(hopped));
    assert_eq!(s.full_rejections(), 1);
    // Expiry makes room once swept.
    s.put(id(1), Binding::new("api", "a", NOW, NOW + 1));
    assert_eq!(s.sweep(NOW + 1), 1);
    s.put(id(3), Binding::new("api", "a", NOW, NOW + 60));
    assert!(s.get(&id(3), NOW).is_some());
    // Raising the bound takes effect at once.
    s.set_max_sessions(10);
    s.put(id(4), Binding::new("api", "a", NOW, NOW + 60));
    assert!(s.get(&id(4), NOW).is_some());
    assert_eq!(s.max_sessions(), 10);
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
