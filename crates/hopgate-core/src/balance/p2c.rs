//! `p2c`: power of two choices on load.
//!
//! Owns the load comparison. A pick draws two distinct members at random,
//! weighted (the second draw excludes the first), and sends the request to
//! the one with the lower load score
//!
//! ```text
//! score = (in_flight + 1) × ewma_latency_us
//! ```
//!
//! Weights bias which two members are compared; load alone decides between
//! them. With equal load (ties go to the first draw) the traffic therefore
//! splits exactly by weight, and under uneven load the lighter candidate
//! wins whatever its weight (in a two-member group, always). Dividing the
//! score by the weight as well would count the weight twice and starve
//! light members of an idle group.
//!
//! A member without a latency sample yet borrows the other candidate's EWMA
//! (so the two are compared on in-flight requests alone) and two members
//! without samples count 1 µs each; a new node is thus neither starved nor
//! flooded before its first response. O(log n), no lock, no shared write.
//!
//! When either candidate cannot take the request (unavailable or already
//! tried) the two draws are redone among the members that can, by scanning
//! the group (O(n), off the fast path).
//!
//! Must not touch: node state (in-flight counts and EWMAs are written by the
//! proxy; this only reads them).

use super::random::WeightedRandom;
use super::{best_tier, nth_weighted, open, weight_of, Member, PickCtx};

#[derive(Clone, Debug)]
pub(super) struct P2c {
    weights: WeightedRandom,
}

impl P2c {
    pub(super) fn new(members: &[Member]) -> P2c {
        P2c {
            weights: WeightedRandom::new(members),
        }
    }

    pub(super) fn pick(&self, members: &[Member], ctx: &PickCtx<'_>) -> Option<usize> {
        if members.len() >= 2 {
            let total = self.weights.total();
            let a = self.weights.index_of(fastrand::u64(..total));
            let wa = weight_of(&members[a]);
            // Draw over the other members: skip a's interval.
            let mut y = fastrand::u64(..total - wa);
            if y >= self.weights.start_of(a) {
                y += wa;
            }
            let b = self.weights.index_of(y);
            if open(members, ctx, a) && open(members, ctx, b) {
                return Some(lighter(members, a, b));
            }
        }
        self.pick_slow(members, ctx)
    }

    /// The same two draws among the members that can take the request.
    fn pick_slow(&self, members: &[Member], ctx: &PickCtx<'_>) -> Option<usize> {
        let (tier, total) = best_tier(members, ctx)?;
        let a = nth_weighted(members, ctx, tier, None, fastrand::u64(..total))?;
        let rest = total.saturating_sub(weight_of(&members[a]));
        if rest == 0 {
            return Some(a);
        }
        let b = nth_weighted(members, ctx, tier, Some(a), fastrand::u64(..rest)).unwrap_or(a);
        Some(lighter(members, a, b))
    }
}

/// `a` unless `b`'s load score is strictly lower.
fn lighter(members: &[Member], a: usize, b: usize) -> usize {
    let (sa, sb) = (&members[a].state, &members[b].state);
    let (ea, eb) = match (sa.ewma_us(), sb.ewma_us()) {
        (0, 0) => (1, 1),
        (0, e) | (e, 0) => (e, e),
        pair => pair,
    };
    // (u32 + 1) × u64 fits u128.
    let score = |in_flight: u32, ewma: u64| (u128::from(in_flight) + 1) * u128::from(ewma);
    if score(sb.in_flight(), eb) < score(sa.in_flight(), ea) {
        b
    } else {
        a
    }
}
