//! `wrr_ring`: the order of an interleaved weighted ring.
//!
//! Owns only the layout of the ring; the ring itself (slots plus one atomic
//! counter, one `fetch_add` per pick) is [`super::Ring`], shared with
//! `smooth_wrr`.
//!
//! Member `i` with `c_i` slots has its `k`-th slot at the ideal position
//! `(k + ½) / c_i` of the ring; the ring lists every slot by ideal position
//! (ties by member index). Occurrences of a member are therefore spread
//! evenly, never in blocks: for 2:1 the ring is `a b a`, for two members of
//! weight 1 it is `a b`, and the gap between two slots of member `i` is at
//! most `len / c_i + n`. Building is O(L log L) for a ring of length L.
//!
//! Must not touch: node state, counters, availability (all in `balance`).

use std::cmp::Ordering;

/// The ring for these slot counts (see [`super::ring_counts`]).
pub(super) fn order(counts: &[u64]) -> Vec<u32> {
    // (k, c, member): slot k of a member with c slots.
    let mut slots: Vec<(u64, u64, u32)> = counts
        .iter()
        .enumerate()
        .flat_map(|(i, &c)| (0..c).map(move |k| (k, c, i as u32)))
        .collect();
    slots.sort_unstable_by(by_ideal_position);
    slots.into_iter().map(|(_, _, i)| i).collect()
}

/// Compares `(2k₁ + 1) / 2c₁` with `(2k₂ + 1) / 2c₂` exactly, then member
/// index.
fn by_ideal_position(a: &(u64, u64, u32), b: &(u64, u64, u32)) -> Ordering {
    let lhs = u128::from(2 * a.0 + 1) * u128::from(b.1);
    let rhs = u128::from(2 * b.0 + 1) * u128::from(a.1);
    lhs.cmp(&rhs).then(a.2.cmp(&b.2))
}
