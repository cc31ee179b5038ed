//! The memory budget: under 300 bytes per stored session in the memory store.
//!
//! Measured from the process's resident set (/proc/self/statm) before and
//! after inserting 100,000 sessions spread over 4 services × 8 nodes, with
//! no context (the common case). Alone in its test binary so no other test
//! allocates meanwhile. Run with `--nocapture` to see the figure.

use hopgate_store::conformance::id;
use hopgate_store::{Binding, MemoryStore, SessionStore};

const SESSIONS: u64 = 100_000;
const BUDGET_BYTES: f64 = 300.0;

/// Resident set size in bytes, from /proc/self/statm (Linux).
fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let resident_pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(resident_pages * 4096)
}

#[test]
fn bytes_per_session_under_budget() {
    let Some(before) = rss_bytes() else {
        eprintln!("no /proc/self/statm: skipping the memory measurement");
        return;
    };
    let now = 1_700_000_000;
    let store = MemoryStore::default();
    for i in 0..SESSIONS {
        // Fresh name allocations per put, as a caller building them from
        // request data would: the store's interning must absorb them.
        let b = Binding::new(
            format!("service-{}", i % 4),
            format!("service-{}-node-{}", i % 4, i % 8),
            now,
            now + 3_600,
        );
        store.put(id(i), b);
    }
    assert_eq!(store.len() as u64, SESSIONS);
    let after = rss_bytes().expect("statm readable");
    let per_session = after.saturating_sub(before) as f64 / SESSIONS as f64;
    println!(
        "memory store: {SESSIONS} sessions, RSS {before} -> {after} bytes, {per_session:.1} bytes/session"
    );
    assert!(
        per_session < BUDGET_BYTES,
        "{per_session:.1} bytes per session, budget {BUDGET_BYTES}"
    );
    drop(store);
}
