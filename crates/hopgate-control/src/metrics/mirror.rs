//! The mirror families: `hopgate_mirror_total{route,result}` (the copies
//! a route's `mirror` filter sampled: sent, failed, dropped over its
//! `max_in_flight`, aborted when its body was cut off) and
//! `hopgate_mirror_in_flight{route}`, read from the running snapshot's
//! route stats. Only routes with a mirror have series; without any, the
//! families are left out.
//!
//! Must not touch: the counts (read only).

use std::fmt;
use std::sync::atomic::Ordering;

use prometheus_client::encoding::DescriptorEncoder;

use hopgate_core::snapshot::CompiledRoute;
use hopgate_core::stats::MirrorResult;

use crate::exposition::{counters, gauges};

pub(super) fn mirrors(enc: &mut DescriptorEncoder, snap: &hopgate_proxy::Snapshot) -> fmt::Result {
    let mirrored = || {
        snap.routes
            .iter()
            .filter(|r| r.filters.as_ref().is_some_and(|f| f.mirror.is_some()))
    };
    if mirrored().next().is_none() {
        return Ok(());
    }
    let rows = mirrored().flat_map(|r: &CompiledRoute| {
        MirrorResult::ALL.map(|res| {
            let labels = [("route", r.id.as_str()), ("result", res.label())];
            (labels, r.stats.mirror.get(res))
        })
    });
    counters(
        enc,
        "hopgate_mirror",
        "Copies sampled by a route's mirror filter, by route and result: sent (the mirror service answered; the answer is discarded), failed (no node, or no answer), dropped (over max_in_flight), aborted (the copy's body was cut off: the mirror fell behind, or the client's body failed or was not read to its end).",
        rows,
    )?;
    gauges(
        enc,
        "hopgate_mirror_in_flight",
        "Copies of a route's mirror filter in flight now.",
        None,
        mirrored().map(|r| {
            let n = r.stats.mirror.in_flight.load(Ordering::Relaxed);
            (
                [("route", r.id.as_str())],
                i64::try_from(n).unwrap_or(i64::MAX),
            )
        }),
    )
}
