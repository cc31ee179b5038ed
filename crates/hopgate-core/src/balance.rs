//! Balancers: which node of a group serves an unbound request.
//!
//! Owns the per-group pick state: the tables compiled from the members and
//! their weights (rings, cumulative weights, the Maglev table), the rotation
//! counters, and the key hash used by `lb: hash` ([`hash_key`]). A
//! [`Balancer`] is built once per group by the snapshot compiler and then only
//! read: a pick takes no lock, allocates nothing, and advances a ring's
//! counter exactly once (YoBFF advanced its counter twice per request, so a
//! two-node ring always landed on the same node; here the one advance is in
//! [`Balancer::pick`] and nowhere else).
//!
//! Policies, dispatched through an enum (no trait objects):
//!
//! | policy       | table                                   | pick                     |
//! |--------------|-----------------------------------------|--------------------------|
//! | `wrr_ring`   | interleaved ring, slots ∝ weight        | O(1): one `fetch_add`    |
//! | `smooth_wrr` | one period of nginx's smooth WRR         | O(1): one `fetch_add`    |
//! | `random`     | cumulative weights                      | O(log n): binary search  |
//! | `p2c`        | cumulative weights                      | O(log n): two draws      |
//! | `hash`       | Maglev lookup table (≥ 65 537 entries)  | O(1): one table read     |
//!
//! Rules shared by every policy:
//! - a member is *available* when [`NodeState::is_available`] says so
//!   (not unhealthy, not draining, not ejected); unavailable members are
//!   never returned;
//! - members in [`PickCtx::exclude`] (already tried by this request) are
//!   skipped unless every available member is excluded, in which case one of
//!   them is returned;
//! - `None` means no member is available;
//! - when the policy's first choice cannot be used, the request goes to a
//!   weighted choice among the members that can take it (the rings derive
//!   that choice from their ticket, `hash` from the key, so both stay
//!   deterministic); this path scans the group and is O(n);
//! - a weight of 0 counts as 1 (validation rejects it; this keeps a stray
//!   zero from turning into a division by zero or an empty table);
//! - **slow start** (`services[].slow_start`, [`Balancer::with_slow_start`]):
//!   a member that is warming up ([`NodeState::warm_from`]: new, back from
//!   unhealthy, its ejection over, its circuit closed) keeps the policy's
//!   pick with probability [`ramp_permille`], 10 % rising linearly to
//!   100 % over the window; otherwise the request goes to a weighted choice
//!   among the members that are warm and can take it (none: the pick
//!   stands). Its share of the group is thereby its weight's share times
//!   the ramp, for every policy: the gate sits after the policy's choice,
//!   so `p2c` still compares loads and `hash` draws the gate from the key
//!   (a key admitted at 30 % stays admitted at 40 %: keys move to the
//!   warming node and stay). Without a window, one branch per pick.
//!
//! Must not touch: routing, version splits, sessions (callers decide which
//! group to balance over and whether a bound node wins), I/O and clocks (the
//! time comes in [`PickCtx::now_ms`]). Node state is only read here; the
//! control plane and the proxy write it.

mod hash;
mod p2c;
mod random;
mod smooth_wrr;
mod wrr_ring;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::LbPolicy;
use crate::node::NodeState;

pub use hash::hash_key;

use hash::Maglev;
use p2c::P2c;
use random::WeightedRandom;

/// One member of a balanced group.
#[derive(Clone, Debug)]
pub struct Member {
    pub state: Arc<NodeState>,
    pub weight: u32,
}

/// Inputs of one pick.
#[derive(Clone, Copy, Debug)]
pub struct PickCtx<'a> {
    /// `now_ms()` for availability checks.
    pub now_ms: u64,
    /// Hash of the request key, for `lb: hash` (see [`hash_key`]).
    pub hash: Option<u64>,
    /// Group indices already tried by this request.
    pub exclude: &'a [usize],
}

/// The compiled balancer of one group of nodes.
#[derive(Debug)]
pub struct Balancer {
    policy: LbPolicy,
    members: Vec<Member>,
    strategy: Strategy,
    /// `services[].slow_start` in ms (0: off).
    slow_start_ms: u64,
}

/// Per-policy pick state.
#[derive(Debug)]
enum Strategy {
    WrrRing(Ring),
    SmoothWrr(Ring),
    Random(WeightedRandom),
    P2c(P2c),
    Hash(Maglev),
}

impl Balancer {
    /// Builds a balancer; `previous` (the same group in the snapshot being
    /// replaced, passed only when its membership and weights are unchanged)
    /// lends its rotation counter, so a reload continues the rotation instead
    /// of restarting it. With the same policy the counter is shared, not
    /// copied: requests still finishing on the old snapshot advance the same
    /// rotation. Tables are reused too when the members really are the same
    /// nodes with the same weights (checked here, not trusted).
    pub fn build(policy: LbPolicy, members: Vec<Member>, previous: Option<&Balancer>) -> Balancer {
        let previous = previous.filter(|p| p.policy == policy);
        let reusable = previous.filter(|p| same_members(&p.members, &members));
        let strategy = match (policy, reusable.map(|p| &p.strategy)) {
            (LbPolicy::WrrRing, Some(Strategy::WrrRing(r))) => Strategy::WrrRing(r.share()),
            (LbPolicy::SmoothWrr, Some(Strategy::SmoothWrr(r))) => Strategy::SmoothWrr(r.share()),
            (LbPolicy::Hash, Some(Strategy::Hash(m))) => Strategy::Hash(m.clone()),
            (LbPolicy::WrrRing, _) => {
                let slots = wrr_ring::order(&ring_counts(&members));
                Strategy::WrrRing(Ring::new(slots, previous.and_then(Balancer::counter)))
            }
            (LbPolicy::SmoothWrr, _) => {
                let slots = smooth_wrr::sequence(&ring_counts(&members));
                Strategy::SmoothWrr(Ring::new(slots, previous.and_then(Balancer::counter)))
            }
            (LbPolicy::Random, _) => Strategy::Random(WeightedRandom::new(&members)),
            (LbPolicy::P2c, _) => Strategy::P2c(P2c::new(&members)),
            (LbPolicy::Hash, _) => Strategy::Hash(Maglev::new(&members)),
        };
        Balancer {
            policy,
            members,
            strategy,
            slow_start_ms: 0,
        }
    }

    /// Ramps members that are warming up over `window` (zero: off).
    pub fn with_slow_start(mut self, window: std::time::Duration) -> Balancer {
        self.slow_start_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// The slow-start window in ms (0: off).
    pub fn slow_start_ms(&self) -> u64 {
        self.slow_start_ms
    }

    pub fn policy(&self) -> LbPolicy {
        self.policy
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Does the group have at least one available node?
    pub fn has_available(&self, now_ms: u64) -> bool {
        self.members.iter().any(|m| m.state.is_available(now_ms))
    }

    /// Picks a member index, or `None` when no member is available.
    pub fn pick(&self, ctx: &PickCtx<'_>) -> Option<usize> {
        let members = &self.members[..];
        let i = match &self.strategy {
            Strategy::WrrRing(ring) | Strategy::SmoothWrr(ring) => ring.pick(members, ctx),
            Strategy::Random(r) => r.pick(members, ctx),
            Strategy::P2c(p) => p.pick(members, ctx),
            Strategy::Hash(m) => m.pick(members, ctx),
        }?;
        if self.slow_start_ms == 0 {
            return Some(i);
        }
        Some(self.slow_start_gate(i, ctx))
    }

    /// Slow start's gate on the policy's pick `i` (see the module doc).
    fn slow_start_gate(&self, i: usize, ctx: &PickCtx<'_>) -> usize {
        let window = self.slow_start_ms;
        let ramp = ramp_permille(self.members[i].state.warm_from(), ctx.now_ms, window);
        if ramp >= 1000 {
            return i;
        }
        // The hash policy draws from the key, so a key's fate is stable;
        // the others from the thread's generator.
        let seed = match ctx.hash {
            Some(h) if self.policy == LbPolicy::Hash => mix64(h ^ 0x5157_4152_5453_4c4f),
            _ => fastrand::u64(..),
        };
        if scale(seed, 1000) < ramp {
            return i;
        }
        let warm = |j: usize, m: &Member| {
            j != i
                && open(&self.members, ctx, j)
                && ramp_permille(m.state.warm_from(), ctx.now_ms, window) >= 1000
        };
        let total: u64 = self
            .members
            .iter()
            .enumerate()
            .filter(|&(j, m)| warm(j, m))
            .map(|(_, m)| weight_of(m))
            .sum();
        if total == 0 {
            return i;
        }
        let mut x = scale(mix64(seed), total);
        for (j, m) in self.members.iter().enumerate() {
            if !warm(j, m) {
                continue;
            }
            let w = weight_of(m);
            if x < w {
                return j;
            }
            x -= w;
        }
        i
    }

    /// How far each member's slow start has come, in per mille (1000:
    /// warm, or slow start off), for the admin API.
    pub fn ramp_of(&self, i: usize, now_ms: u64) -> u64 {
        match (self.slow_start_ms, self.members.get(i)) {
            (0, _) | (_, None) => 1000,
            (window, Some(m)) => ramp_permille(m.state.warm_from(), now_ms, window),
        }
    }

    /// The rotation counter of a ring policy (total picks since the rotation
    /// began, carried across reloads); `None` for the other policies.
    pub fn rotation(&self) -> Option<usize> {
        self.counter().map(|c| c.load(Ordering::Relaxed))
    }

    fn counter(&self) -> Option<&Arc<Counter>> {
        match &self.strategy {
            Strategy::WrrRing(r) | Strategy::SmoothWrr(r) => Some(&r.next),
            _ => None,
        }
    }
}

/// How far a member warming up since `warm_from` is at `now` under a
/// slow-start window of `window` ms, in per mille: 100 (10 %) at the start
/// (and while `warm_from` lies ahead: an ejection not over yet), rising
/// linearly to 1000 at the window's end. `warm_from` 0: never cold.
pub fn ramp_permille(warm_from: u64, now: u64, window: u64) -> u64 {
    let elapsed = now.saturating_sub(warm_from);
    if window == 0 || warm_from == 0 || elapsed >= window {
        return 1000;
    }
    100 + (u128::from(elapsed) * 900 / u128::from(window)) as u64
}

/// Same nodes (by state identity), same order, same weights.
fn same_members(a: &[Member], b: &[Member]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| Arc::ptr_eq(&x.state, &y.state) && x.weight == y.weight)
}

/// Upper bound on a ring's length (slots), beyond the one slot every member
/// always gets. Weights whose gcd-reduced sum exceeds it are scaled down, so
/// each member's share is exact to within `1 / RING_CAP` of the total.
const RING_CAP: u64 = 8192;

/// The weight a member counts for (0 counts as 1).
fn weight_of(m: &Member) -> u64 {
    u64::from(m.weight.max(1))
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Slot counts of a ring: weights divided by their gcd and, when their sum
/// exceeds [`RING_CAP`], scaled down to it (each member keeps at least one
/// slot) and reduced again.
fn ring_counts(members: &[Member]) -> Vec<u64> {
    let reduce = |mut c: Vec<u64>| {
        let g = c.iter().copied().fold(0, gcd).max(1);
        c.iter_mut().for_each(|x| *x /= g);
        c
    };
    let counts = reduce(members.iter().map(weight_of).collect());
    let total: u64 = counts.iter().sum();
    if total <= RING_CAP {
        return counts;
    }
    let scaled = counts
        .iter()
        .map(|&c| ((u128::from(c) * u128::from(RING_CAP) / u128::from(total)) as u64).max(1))
        .collect();
    reduce(scaled)
}

/// A counter on its own cache lines, so picks in one group do not contend
/// with whatever sits next to it in memory.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Counter(AtomicUsize);

impl std::ops::Deref for Counter {
    type Target = AtomicUsize;
    fn deref(&self) -> &AtomicUsize {
        &self.0
    }
}

/// A precomputed sequence of member indices walked by one shared counter:
/// the pick state of `wrr_ring` and `smooth_wrr`.
struct Ring {
    slots: Arc<[u32]>,
    next: Arc<Counter>,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("len", &self.slots.len())
            .field("next", &self.next.load(Ordering::Relaxed))
            .finish()
    }
}

impl Ring {
    /// A ring over `slots`, continuing `carried` when given.
    fn new(slots: Vec<u32>, carried: Option<&Arc<Counter>>) -> Ring {
        Ring {
            slots: slots.into(),
            next: carried.map_or_else(Default::default, Arc::clone),
        }
    }

    /// The same ring and counter, for a rebuilt group with identical members.
    fn share(&self) -> Ring {
        Ring {
            slots: Arc::clone(&self.slots),
            next: Arc::clone(&self.next),
        }
    }

    /// One ticket, one slot. If that slot's member cannot take the request,
    /// a weighted choice among those that can, derived from the ticket.
    fn pick(&self, members: &[Member], ctx: &PickCtx<'_>) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        let i = self.slots[ticket % self.slots.len()] as usize;
        if open(members, ctx, i) {
            return Some(i);
        }
        fallback(members, ctx, mix64(ticket as u64))
    }
}

/// Can member `i` take this request on the policy's first choice?
fn open(members: &[Member], ctx: &PickCtx<'_>, i: usize) -> bool {
    members[i].state.is_available(ctx.now_ms) && !ctx.exclude.contains(&i)
}

/// The members a fallback choice is made from: those not yet tried, or, when
/// every available member was tried, those.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tier {
    Open,
    Excluded,
}

impl Tier {
    fn admits(self, members: &[Member], ctx: &PickCtx<'_>, i: usize) -> bool {
        members[i].state.is_available(ctx.now_ms)
            && ctx.exclude.contains(&i) == (self == Tier::Excluded)
    }
}

/// The first non-empty tier and its total weight.
fn best_tier(members: &[Member], ctx: &PickCtx<'_>) -> Option<(Tier, u64)> {
    let (mut open, mut excluded) = (0u64, 0u64);
    for (i, m) in members.iter().enumerate() {
        if !m.state.is_available(ctx.now_ms) {
            continue;
        }
        if ctx.exclude.contains(&i) {
            excluded += weight_of(m);
        } else {
            open += weight_of(m);
        }
    }
    if open > 0 {
        Some((Tier::Open, open))
    } else if excluded > 0 {
        Some((Tier::Excluded, excluded))
    } else {
        None
    }
}

/// The member of `tier` (other than `skip`) whose weight interval contains
/// `x`, an offset into the tier's total weight. Node state can change
/// between passes; then the last admitted member answers.
fn nth_weighted(
    members: &[Member],
    ctx: &PickCtx<'_>,
    tier: Tier,
    skip: Option<usize>,
    mut x: u64,
) -> Option<usize> {
    let mut last = None;
    for (i, m) in members.iter().enumerate() {
        if Some(i) == skip || !tier.admits(members, ctx, i) {
            continue;
        }
        let w = weight_of(m);
        if x < w {
            return Some(i);
        }
        x -= w;
        last = Some(i);
    }
    last
}

/// A weighted choice among the members that can take the request, driven by
/// `seed` (uniform over `u64`). O(n): used only off the fast path.
fn fallback(members: &[Member], ctx: &PickCtx<'_>, seed: u64) -> Option<usize> {
    let (tier, total) = best_tier(members, ctx)?;
    nth_weighted(members, ctx, tier, None, scale(seed, total))
}

/// Maps a uniform `u64` onto `0..n` (multiply-high; no modulo bias to speak
/// of, no division).
fn scale(seed: u64, n: u64) -> u64 {
    ((u128::from(seed) * u128::from(n)) >> 64) as u64
}

/// SplitMix64's finalizer: a bijective, well-avalanched mix of a `u64`.
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}
