//! Balancers: which node of a group serves an unbound request.
//!
//! Owns the per-group pick state (rings, counters). One pick per request;
//! picks are lock-free. Unavailable nodes (unhealthy, ejected, draining,
//! circuit open) are skipped; nodes in `exclude` (already tried by this
//! request) are skipped unless nothing else is left.
//!
//! Must not touch: routing, I/O.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::LbPolicy;
use crate::node::NodeState;

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
    /// Hash of the request key, for `lb: hash`.
    pub hash: Option<u64>,
    /// Group indices already tried by this request.
    pub exclude: &'a [usize],
}

/// The compiled balancer of one group of nodes.
#[derive(Debug)]
pub struct Balancer {
    policy: LbPolicy,
    members: Vec<Member>,
    counter: AtomicUsize,
}

impl Balancer {
    /// Builds a balancer; `previous` (the same group in the snapshot being
    /// replaced) lends its counters when its membership is unchanged.
    pub fn build(policy: LbPolicy, members: Vec<Member>, previous: Option<&Balancer>) -> Balancer {
        let start = previous.map_or(0, |p| p.counter.load(Ordering::Relaxed));
        Balancer {
            policy,
            members,
            counter: AtomicUsize::new(start),
        }
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
        let n = self.members.len();
        if n == 0 {
            return None;
        }
        let start = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut fallback = None;
        for k in 0..n {
            let i = (start + k) % n;
            if !self.members[i].state.is_available(ctx.now_ms) {
                continue;
            }
            if ctx.exclude.contains(&i) {
                fallback.get_or_insert(i);
                continue;
            }
            return Some(i);
        }
        fallback
    }
}
