//! The rate-limit families: `hopgate_rate_limited_total{policy,mode,limit}`
//! (requests over a policy's rate or `max_in_flight`: refused in mode
//! enforce, let through in mode log) and
//! `hopgate_rate_limit_overflow_total{policy}` (keys that shared the
//! overflow bucket), read from the running snapshot's limiters; for
//! `scope: fleet` policies `hopgate_rate_limit_fleet_shared{policy}` (1
//! shared through Redis, 0 not), `hopgate_rate_limit_fleet_live_replicas`,
//! `hopgate_rate_limit_fleet_hot_keys`,
//! `hopgate_rate_limit_fleet_fallbacks_total` and
//! `hopgate_rate_limit_fleet_sync_errors_total`; and
//! `hopgate_client_connections_refused_total` (connections closed by
//! `limits.max_connections_per_client`).
//!
//! Must not touch: the limiters (read only).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::DescriptorEncoder;

use hopgate_core::limit::FleetView;

use crate::exposition::{counters, gauges};

pub(super) fn rate_limits(
    enc: &mut DescriptorEncoder,
    snap: &hopgate_proxy::Snapshot,
) -> fmt::Result {
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let rows = snap.limiters.iter().flat_map(|l| {
        let (name, c) = (l.config.name.as_str(), &l.counters);
        [
            ("enforce", "rate", get(&c.limited)),
            ("enforce", "in_flight", get(&c.in_flight_limited)),
            ("log", "rate", get(&c.logged)),
            ("log", "in_flight", get(&c.in_flight_logged)),
        ]
        .map(move |(mode, limit, n)| ([("policy", name), ("mode", mode), ("limit", limit)], n))
    });
    counters(
        enc,
        "hopgate_rate_limited",
        "Requests over a rate limit policy's rate or max_in_flight: refused with 429 (mode enforce) or let through and logged (mode log), by policy, mode and limit.",
        rows,
    )?;
    counters(
        enc,
        "hopgate_rate_limit_overflow",
        "Requests whose key found no slot of its own in the policy's table and shared its overflow bucket.",
        snap.limiters
            .iter()
            .map(|l| ([("policy", l.config.name.as_str())], get(&l.counters.overflow))),
    )?;
    counters(
        enc,
        "hopgate_client_connections_refused",
        "Client connections closed at once because their client address had limits.max_connections_per_client open (since the bound was last set).",
        [(
            [("limit", "max_connections_per_client")],
            snap.connections
                .as_ref()
                .map_or(0, |l| get(&l.counters.in_flight_limited)),
        )],
    )?;
    fleet_shares(enc, snap)
}

/// The share state of the `scope: fleet` policies.
fn fleet_shares(enc: &mut DescriptorEncoder, snap: &hopgate_proxy::Snapshot) -> fmt::Result {
    let views: Vec<(&str, FleetView)> = snap
        .limiters
        .iter()
        .filter_map(|l| Some((l.config.name.as_str(), l.fleet()?)))
        .collect();
    let rows = |f: fn(&FleetView) -> i64| {
        views
            .iter()
            .map(move |(name, v)| ([("policy", *name)], f(v)))
            .collect::<Vec<_>>()
    };
    gauges(
        enc,
        "hopgate_rate_limit_fleet_shared",
        "1 while a scope: fleet policy shares its rate through Redis, 0 while it falls back to rate / live replicas (or has not synced yet).",
        None,
        rows(|v| i64::from(v.shared)),
    )?;
    gauges(
        enc,
        "hopgate_rate_limit_fleet_live_replicas",
        "Replicas that synced the scope: fleet policy lately (the last count known while Redis is away).",
        None,
        rows(|v| i64::from(v.live)),
    )?;
    gauges(
        enc,
        "hopgate_rate_limit_fleet_hot_keys",
        "Keys of the scope: fleet policy with a share of their own here (the others get rate / live replicas).",
        None,
        rows(|v| i64::from(v.hot_keys)),
    )?;
    let total = |f: fn(&FleetView) -> u64| {
        views
            .iter()
            .map(move |(name, v)| ([("policy", *name)], f(v)))
            .collect::<Vec<_>>()
    };
    counters(
        enc,
        "hopgate_rate_limit_fleet_fallbacks",
        "Times a scope: fleet policy fell back to rate / live replicas because Redis did not answer.",
        total(|v| v.fallbacks),
    )?;
    counters(
        enc,
        "hopgate_rate_limit_fleet_sync_errors",
        "Syncs of a scope: fleet policy with Redis that failed.",
        total(|v| v.sync_errors),
    )
}
