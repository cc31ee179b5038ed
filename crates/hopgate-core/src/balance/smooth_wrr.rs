//! `smooth_wrr`: nginx's smooth weighted round robin, precomputed.
//!
//! Owns the sequence; the ring it is walked with (slots plus one atomic
//! counter, one `fetch_add` per pick) is [`super::Ring`], shared with
//! `wrr_ring`.
//!
//! nginx keeps a `current` weight per peer: each pick adds every peer's
//! weight to its `current`, takes the peer with the largest `current` (the
//! first one on ties) and subtracts the total weight from it. That walk is
//! periodic with period `sum(weight / gcd)` and does not depend on anything
//! but the weights, so instead of running it under a lock on every request
//! (as nginx does per worker), one period is recorded here at build time and
//! picks index it lock-free. For 5:1:1 the period is `a a b a c a a`.
//!
//! Approximation: when the reduced weights sum above `RING_CAP` (8192) they
//! are first scaled down to it (see [`super::ring_counts`]); the sequence is
//! then nginx's sequence for the scaled weights, so shares are exact to
//! within 1/8192 of the total but the order is not nginx's for the original
//! weights. nginx's failure handling (`effective_weight`) is not reproduced:
//! unavailable members are skipped by the ring instead.
//!
//! Building is O(L·n) for a period of length L over n members.
//!
//! Must not touch: node state, counters, availability (all in `balance`).

/// One period of the smooth WRR sequence for these slot counts.
pub(super) fn sequence(counts: &[u64]) -> Vec<u32> {
    let weights: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
    let total: i64 = weights.iter().sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(total as usize);
    for _ in 0..total {
        let mut best = 0;
        for (i, w) in weights.iter().enumerate() {
            current[i] += w;
            if current[i] > current[best] {
                best = i;
            }
        }
        current[best] -= total;
        out.push(best as u32);
    }
    out
}
