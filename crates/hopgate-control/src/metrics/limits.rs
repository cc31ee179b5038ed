//! The rate-limit families: `hopgate_rate_limited_total{policy,mode,limit}`
//! (requests over a policy's rate or `max_in_flight`: refused in mode
//! enforce, let through in mode log) and
//! `hopgate_rate_limit_overflow_total{policy}` (keys that shared the
//! overflow bucket), read from the running snapshot's limiters.
//!
//! Must not touch: the limiters (read only).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::DescriptorEncoder;

use crate::exposition::counters;

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
    )
}
