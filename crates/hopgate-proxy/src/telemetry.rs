//! The data plane read through one door: what the control plane (admin
//! API, `/metrics`, dashboard, event stream, canary judge) and the
//! binary (its log writer, the demo) may know of the request path's
//! counters, hops and latencies.
//!
//! Owns the read API: [`counters`] (every counter of `metrics`, read once
//! into plain numbers), the hop ring ([`recent_hops`], [`hops_by_reason`],
//! [`hop_histogram`]) and the live hop feed ([`subscribe_hops`]), the
//! request-latency histogram ([`request_latency`], a [`Reading`] of the
//! data plane's one histogram type, `latency::Histogram`), the labels and
//! bucket bounds exposition needs, and the one counter written from
//! outside ([`access_log_dropped`]). The statics stay private to this
//! crate: the request path records into them with relaxed atomics and
//! no indirection, exactly as before; only readers come through here.
//!
//! Must not touch: how or when the request path records (`metrics`,
//! `latency`, `canary`), exposition formats.

use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::events::Subscription;
pub use crate::latency::{Reading, BUCKETS};
pub use crate::metrics::{
    HopRecord, TokenRejection, ERROR_KINDS, ERROR_KIND_LIST, HOP_BUCKETS, QUEUE_WAIT_BUCKETS,
    RECENT_HOPS,
};

use crate::latency::REQUEST_LATENCY;
use crate::metrics::{HOPS, METRICS};

/// Every data-plane counter, read once (relaxed loads: each value is
/// exact, the set is not one instant).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub requests: u64,
    /// Index: status / 100 (1..=5); 0 unused.
    pub responses: [u64; 6],
    /// Index: the position of the kind in [`ERROR_KIND_LIST`].
    pub upstream_errors: [u64; ERROR_KINDS],
    pub retries: u64,
    pub last_resort_picks: u64,
    pub sessions_created: u64,
    /// Index: [`TokenRejection`] as `usize`.
    pub tokens_rejected: [u64; 4],
    pub contexts_stored: u64,
    pub contexts_oversized: u64,
    pub contexts_delivered: u64,
    pub maintenance_malformed: u64,
    pub maintenance_dropped: u64,
    pub maintenance_in_band_off: u64,
    pub maintenance_request_carried: u64,
    /// Cumulative bucket counts (bounds: [`QUEUE_WAIT_BUCKETS`]).
    pub queue_wait_buckets: [u64; QUEUE_WAIT_BUCKETS.len()],
    pub queue_wait_count: u64,
    pub queue_wait_sum_us: u64,
    pub access_log_dropped: u64,
    pub connections_accepted: u64,
    pub connections_open: u64,
    pub client_bytes_received: u64,
    pub client_bytes_sent: u64,
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn all<const N: usize>(c: &[AtomicU64; N]) -> [u64; N] {
    std::array::from_fn(|i| get(&c[i]))
}

/// Every counter now.
pub fn counters() -> Counters {
    let m = &*METRICS;
    Counters {
        requests: get(&m.requests),
        responses: all(&m.responses),
        upstream_errors: all(&m.upstream_errors),
        retries: get(&m.retries),
        last_resort_picks: get(&m.last_resort_picks),
        sessions_created: get(&m.sessions_created),
        tokens_rejected: all(&m.tokens_rejected),
        contexts_stored: get(&m.contexts_stored),
        contexts_oversized: get(&m.contexts_oversized),
        contexts_delivered: get(&m.contexts_delivered),
        maintenance_malformed: get(&m.maintenance_malformed),
        maintenance_dropped: get(&m.maintenance_dropped),
        maintenance_in_band_off: get(&m.maintenance_in_band_off),
        maintenance_request_carried: get(&m.maintenance_request_carried),
        queue_wait_buckets: all(&m.queue_wait_buckets),
        queue_wait_count: get(&m.queue_wait_count),
        queue_wait_sum_us: get(&m.queue_wait_sum_us),
        access_log_dropped: get(&m.access_log_dropped),
        connections_accepted: get(&m.connections_accepted),
        connections_open: get(&m.connections_open),
        client_bytes_received: get(&m.client_bytes_received),
        client_bytes_sent: get(&m.client_bytes_sent),
    }
}

/// The most recent hops, newest first (at most [`RECENT_HOPS`]).
pub fn recent_hops(limit: usize) -> Vec<HopRecord> {
    METRICS.recent_hops(limit)
}

/// `(service, reason, count)` for every hop counter.
pub fn hops_by_reason() -> Vec<(String, &'static str, u64)> {
    METRICS.hops_by_reason()
}

/// `(service, status, count)`: answers retried on another node because the
/// service lists their status as "not processed".
pub fn retries_on_status() -> Vec<(String, u16, u64)> {
    METRICS.retries_on_status()
}

/// Cumulative bucket counts (bounds: [`HOP_BUCKETS`]), total count and sum
/// (seconds) of hop durations.
pub fn hop_histogram() -> ([u64; HOP_BUCKETS.len()], u64, f64) {
    METRICS.hop_histogram()
}

/// Every hop recorded from now on, as it happens. While nobody is
/// subscribed, recording a hop publishes nothing.
pub fn subscribe_hops() -> Subscription<HopRecord> {
    HOPS.subscribe()
}

/// Every request's duration so far (subtract an earlier reading for a
/// window).
pub fn request_latency() -> Reading {
    REQUEST_LATENCY.read()
}

/// Counts one access line dropped because the log's buffer was full (the
/// binary's log writer).
pub fn access_log_dropped() {
    METRICS.access_log_dropped.fetch_add(1, Ordering::Relaxed);
}
