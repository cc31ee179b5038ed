//! `random`: weighted random choice.
//!
//! Owns the cumulative weight table (also used by `p2c` to draw its two
//! candidates and by `hash` when a request has no key). A pick draws one
//! number from fastrand's thread-local generator and binary-searches the
//! table: O(log n), no lock, no shared write.
//!
//! Must not touch: node state (read through `balance`'s helpers only).

use super::{fallback, open, weight_of, Member, PickCtx};

/// Cumulative weights: entry `i` is the sum of the weights of members
/// `0..=i`.
#[derive(Clone, Debug)]
pub(super) struct WeightedRandom {
    cumulative: Box<[u64]>,
}

impl WeightedRandom {
    pub(super) fn new(members: &[Member]) -> WeightedRandom {
        let mut sum = 0;
        let cumulative = members
            .iter()
            .map(|m| {
                sum += weight_of(m);
                sum
            })
            .collect();
        WeightedRandom { cumulative }
    }

    /// Sum of all weights (0 for an empty group).
    pub(super) fn total(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// The member whose weight interval holds `x` (`x < total()`).
    pub(super) fn index_of(&self, x: u64) -> usize {
        self.cumulative.partition_point(|&c| c <= x)
    }

    /// Where member `i`'s weight interval starts.
    pub(super) fn start_of(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.cumulative[i - 1]
        }
    }

    /// One weighted draw over the whole group, or `None` when it is empty.
    pub(super) fn draw(&self) -> Option<usize> {
        let total = self.total();
        (total > 0).then(|| self.index_of(fastrand::u64(..total)))
    }

    pub(super) fn pick(&self, members: &[Member], ctx: &PickCtx<'_>) -> Option<usize> {
        let i = self.draw()?;
        if open(members, ctx, i) {
            return Some(i);
        }
        fallback(members, ctx, fastrand::u64(..))
    }
}
