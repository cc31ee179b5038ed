//! The data plane's counters, in one place.
//!
//! Owns every number the request path records: requests and responses by
//! status class, upstream failures by kind, retries, last-resort picks,
//! session tokens accepted or replaced (and why), hops by service and
//! reason with their duration, context handoffs, and the ring of recent
//! hops the admin API shows, and the live hop feed ([`HOPS`]).
//! Request-path counters are plain atomics (no lock); hop accounting takes
//! a short lock, but hops are rare by nature. Other crates read all of
//! this through `telemetry`, never through these statics.
//!
//! Must not touch: exposition formats (the admin API renders these), I/O.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use serde::Serialize;

use hopgate_core::error::ErrorKind;

use crate::events::Feed;

/// Upper bounds (seconds) of the hop-duration histogram buckets.
pub const HOP_BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Upper bounds (seconds) of the pool queue-wait histogram buckets.
pub const QUEUE_WAIT_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How many recent hops the admin API can show.
pub const RECENT_HOPS: usize = 1000;

/// Why a token was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRejection {
    Malformed = 0,
    BadSignature = 1,
    Expired = 2,
    FromTheFuture = 3,
}

impl TokenRejection {
    pub const ALL: [TokenRejection; 4] = [
        TokenRejection::Malformed,
        TokenRejection::BadSignature,
        TokenRejection::Expired,
        TokenRejection::FromTheFuture,
    ];

    pub fn label(self) -> &'static str {
        match self {
            TokenRejection::Malformed => "malformed",
            TokenRejection::BadSignature => "bad_signature",
            TokenRejection::Expired => "expired",
            TokenRejection::FromTheFuture => "from_the_future",
        }
    }
}

/// One hop, as the admin API lists it.
#[derive(Clone, Debug, Serialize)]
pub struct HopRecord {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub session: String,
    pub service: String,
    pub from: String,
    pub to: String,
    pub reason: &'static str,
    pub duration_us: u64,
    /// Bytes of session context handed to the new node with the hop.
    pub context_bytes: usize,
}

#[derive(Default)]
struct HopStats {
    /// (service, reason) → count.
    by_reason: BTreeMap<(String, &'static str), u64>,
    buckets: [u64; HOP_BUCKETS.len()],
    count: u64,
    sum_seconds: f64,
    recent: VecDeque<HopRecord>,
}

/// All data-plane counters.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) requests: AtomicU64,
    /// Index: status / 100 (1..=5); 0 unused.
    pub(crate) responses: [AtomicU64; 6],
    pub(crate) upstream_errors: [AtomicU64; ERROR_KINDS],
    pub(crate) retries: AtomicU64,
    pub(crate) last_resort_picks: AtomicU64,
    pub(crate) sessions_created: AtomicU64,
    pub(crate) tokens_rejected: [AtomicU64; 4],
    pub(crate) contexts_stored: AtomicU64,
    pub(crate) contexts_oversized: AtomicU64,
    pub(crate) contexts_delivered: AtomicU64,
    /// `Hop-Maintenance` headers that could not be parsed.
    pub(crate) maintenance_malformed: AtomicU64,
    /// Parsed ones the intake queue had no room for.
    pub(crate) maintenance_dropped: AtomicU64,
    /// `Hop-Maintenance` from a service without `maintenance.in_band`.
    pub(crate) maintenance_in_band_off: AtomicU64,
    /// `Hop-Maintenance` in the answer to a request that carried one.
    pub(crate) maintenance_request_carried: AtomicU64,
    /// Waits for an upstream connection in a node's queue (admitted or
    /// not): cumulative bucket counts, count and sum in microseconds.
    pub(crate) queue_wait_buckets: [AtomicU64; QUEUE_WAIT_BUCKETS.len()],
    pub(crate) queue_wait_count: AtomicU64,
    pub(crate) queue_wait_sum_us: AtomicU64,
    /// Access log lines dropped because the log's buffer was full (stderr
    /// slower than the traffic); counted by the binary's log writer.
    pub(crate) access_log_dropped: AtomicU64,
    /// Client connections accepted (all listeners).
    pub(crate) connections_accepted: AtomicU64,
    /// Client connections open now.
    pub(crate) connections_open: AtomicU64,
    /// Bytes read from clients' sockets (heads and bodies, as sent).
    pub(crate) client_bytes_received: AtomicU64,
    /// Bytes written to clients' sockets.
    pub(crate) client_bytes_sent: AtomicU64,
    hops: Mutex<HopStats>,
    /// Answers retried because their service lists the status as "not
    /// processed" (`services[].retries`): (service, status) → count. Rare
    /// (a backend refusing work while it drains), so behind a mutex.
    retried_on_status: Mutex<BTreeMap<(Arc<str>, u16), u64>>,
}

/// Number of [`ErrorKind`]s tracked (index = `error_index`).
pub const ERROR_KINDS: usize = 23;

/// Every error kind, in the index order of `upstream_errors`.
pub const ERROR_KIND_LIST: [ErrorKind; ERROR_KINDS] = [
    ErrorKind::NoRoute,
    ErrorKind::Forbidden,
    ErrorKind::NoLiveNode,
    ErrorKind::ConnectFailed,
    ErrorKind::ConnectTimeout,
    ErrorKind::ConnectionLost,
    ErrorKind::UpstreamReset,
    ErrorKind::UpstreamTimeout,
    ErrorKind::UpstreamProtocol,
    ErrorKind::HeadersTooLarge,
    ErrorKind::UriTooLong,
    ErrorKind::BodyTooLarge,
    ErrorKind::BadRequest,
    ErrorKind::ShuttingDown,
    ErrorKind::MalformedBody,
    ErrorKind::ClientAborted,
    ErrorKind::ClientTimeout,
    ErrorKind::MethodNotAllowed,
    ErrorKind::GrpcNeedsHttp2,
    ErrorKind::PoolQueueFull,
    ErrorKind::PoolQueueTimeout,
    ErrorKind::ClientStalled,
    ErrorKind::RateLimited,
];

fn error_index(kind: ErrorKind) -> usize {
    ERROR_KIND_LIST.iter().position(|k| *k == kind).unwrap_or(0)
}

/// The process-wide counters.
pub(crate) static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// Every hop the data plane records, as it happens (the admin API's event
/// stream and the demo's narrator subscribe).
pub(crate) static HOPS: LazyLock<Feed<HopRecord>> = LazyLock::new(Feed::new);

impl Metrics {
    pub(crate) fn response(&self, status: u16) {
        let class = usize::from(status / 100).min(5);
        self.responses[class].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.upstream_errors[error_index(kind)].fetch_add(1, Ordering::Relaxed);
    }

    /// Times one wait in a node's connection queue.
    pub(crate) fn queue_wait(&self, waited: std::time::Duration) {
        let secs = waited.as_secs_f64();
        for (i, le) in QUEUE_WAIT_BUCKETS.iter().enumerate() {
            if secs <= *le {
                self.queue_wait_buckets[i].fetch_add(1, Ordering::Relaxed);
            }
        }
        self.queue_wait_count.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.queue_wait_sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub(crate) fn token_rejected(&self, why: TokenRejection) {
        self.tokens_rejected[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts, times and remembers one hop.
    pub(crate) fn hop(&self, record: HopRecord) {
        let secs = record.duration_us as f64 / 1e6;
        // To the live feed after the ring: what a subscriber got, the ring has.
        let live = HOPS.active().then(|| record.clone());
        let mut h = self.hops.lock();
        *h.by_reason
            .entry((record.service.clone(), record.reason))
            .or_insert(0) += 1;
        for (i, le) in HOP_BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum_seconds += secs;
        if h.recent.len() >= RECENT_HOPS {
            h.recent.pop_front();
        }
        h.recent.push_back(record);
        drop(h);
        if let Some(record) = live {
            HOPS.publish(|| record);
        }
    }

    /// Counts one "not processed" answer retried on another node.
    pub(crate) fn retried_on_status(&self, service: &Arc<str>, status: u16) {
        *self
            .retried_on_status
            .lock()
            .entry((Arc::clone(service), status))
            .or_insert(0) += 1;
    }

    /// `(service, status, count)` for every "not processed" retry counter.
    pub(crate) fn retries_on_status(&self) -> Vec<(String, u16, u64)> {
        self.retried_on_status
            .lock()
            .iter()
            .map(|((s, status), n)| (s.to_string(), *status, *n))
            .collect()
    }

    /// The most recent hops, newest first.
    pub(crate) fn recent_hops(&self, limit: usize) -> Vec<HopRecord> {
        self.hops
            .lock()
            .recent
            .iter()
            .rev()
            .take(limit)
            .cloned()
            .collect()
    }

    /// `(service, reason, count)` for every hop counter.
    pub(crate) fn hops_by_reason(&self) -> Vec<(String, &'static str, u64)> {
        self.hops
            .lock()
            .by_reason
            .iter()
            .map(|((s, r), n)| (s.clone(), *r, *n))
            .collect()
    }

    /// Cumulative bucket counts, total count and sum of hop durations.
    pub(crate) fn hop_histogram(&self) -> ([u64; HOP_BUCKETS.len()], u64, f64) {
        let h = self.hops.lock();
        (h.buckets, h.count, h.sum_seconds)
    }
}
