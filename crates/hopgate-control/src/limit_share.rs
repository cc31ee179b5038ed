//! The background sync of `scope: fleet` rate limits: every [`TICK`], for
//! each fleet policy of the running snapshot, this replica's demand for
//! its busy keys goes to Redis and the fleet's comes back (one script
//! call per policy, through the store crate's [`FleetShares`]); the
//! limiter turns it into this replica's share of each key's rate. A sync
//! that fails puts the policy in fallback (`rate ÷ live replicas` per
//! replica, counted, logged once); the next one that succeeds shares
//! again (logged once).
//!
//! Owns the task and its timing. Must not touch: the request path (the
//! limiters' atomics are all it shares with it), the snapshot (read only),
//! Redis beyond [`FleetShares`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use hopgate_store::FleetShares;

use crate::control::Control;

/// How often each fleet policy syncs.
const TICK: Duration = Duration::from_millis(100);

/// How long a replica's registration and demand count in Redis after its
/// last sync.
const TTL: Duration = Duration::from_secs(1);

/// How long one sync may take (Redis away: the fallback starts then).
const CALL_TIMEOUT: Duration = Duration::from_millis(250);

/// Keys reported per policy and sync at most (the busiest).
const MAX_REPORTED: usize = 1024;

/// Starts the sync when the store is Redis; it ends when `shutdown` turns
/// true. Without Redis no policy can be `scope: fleet` (validation) and
/// the task ends at once.
pub fn start(
    control: Arc<Control>,
    replica_id: String,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let Some(redis) = control.snapshot().load().config.store.redis.clone() else {
            return;
        };
        // One member per process, not per replica id: during a binary
        // upgrade the old and the new process share the replica id and
        // both admit requests, so each reports its own demand (and both
        // count as live) instead of overwriting the other's.
        let member = format!("{replica_id}/{}", std::process::id());
        let shares = match FleetShares::new(&redis.target, &redis.prefix, &member, CALL_TIMEOUT) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "rate limit fleet share: not started");
                return;
            }
        };
        tokio::select! {
            () = run(control, shares) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    })
}

async fn run(control: Arc<Control>, mut shares: FleetShares) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        ticks.tick().await;
        let elapsed = last.elapsed().as_millis() as u64;
        last = Instant::now();
        let snap = control.snapshot().load_full();
        for limiter in snap.limiters.iter().filter(|l| l.fleet().is_some()) {
            sync_one(&mut shares, limiter, elapsed).await;
        }
    }
}

async fn sync_one(
    shares: &mut FleetShares,
    limiter: &hopgate_core::limit::RateLimiter,
    elapsed_ms: u64,
) {
    let policy = limiter.config.name.as_str();
    let demand = limiter.fleet_demand(elapsed_ms, MAX_REPORTED);
    match shares.sync(policy, &demand, TTL).await {
        Ok(answer) => {
            if limiter.fleet_apply(&demand, &answer) {
                tracing::info!(
                    policy,
                    live_replicas = answer.live,
                    "rate limit fleet share: shared through Redis"
                );
            }
        }
        Err(error) => {
            if limiter.fleet_fall_back() {
                let live = limiter.fleet().map_or(1, |f| f.live);
                tracing::warn!(
                    policy,
                    %error,
                    live_replicas = live,
                    "rate limit fleet share: Redis unreachable; this replica admits rate / live replicas until it is back"
                );
            }
        }
    }
}
