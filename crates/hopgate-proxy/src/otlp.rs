//! Span export over OTLP/HTTP (protobuf), off the request path.
//!
//! Owns the per-request record of the gateway's spans ([`Span`]: one
//! SERVER span for the request, one CLIENT span per upstream attempt whose
//! id is the parent id sent to that backend in `traceparent`), the bounded
//! lock-free queue the request path hands records to ([`Exporter::hand`]),
//! the background task that batches and posts them (`export`), their
//! encoding (`encode`, messages in `proto`), and the export counters
//! ([`counters`], [`render_metrics`]).
//!
//! The request path's whole cost: with `tracing.otlp.enabled: false` one
//! check when the trace is propagated (no record is made, so the later
//! steps find `None`); when on and the trace is sampled, one boxed record
//! filled in place (plus its attempts' vector: no lock, no other
//! allocation; the URI and header are shared-buffer clones) and one
//! `ArrayQueue::push` at the end; a full queue drops the record and counts
//! it. Names, strings and the protobuf are made by the export task.
//!
//! Must not touch: the trace context itself (`trace`), the snapshot (only
//! loaded), any lock on the request path.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;
use hopgate_core::error::ErrorKind;
use http::header::HeaderValue;
use http::{Method, Uri};

use crate::trace::{Propagated, TraceId};
use crate::upstream::Snapshot;

mod encode;
mod export;
mod proto;

pub use export::start;

/// One CLIENT span: an attempt sent to a node.
#[derive(Debug, Clone)]
pub(crate) struct Attempt {
    /// The parent id this attempt's `traceparent` carried.
    pub(crate) id: [u8; 8],
    pub(crate) node: usize,
    /// 1 for the first attempt.
    pub(crate) number: u32,
    pub(crate) sent: Instant,
    pub(crate) answered: Instant,
    /// The node's status; 0 when it gave none.
    pub(crate) status: u16,
    pub(crate) error: Option<ErrorKind>,
}

/// A sampled request's spans, boxed once when its trace is propagated and
/// filled in place until the request ends.
#[derive(Debug)]
pub struct Span {
    pub(crate) trace_id: TraceId,
    /// The SERVER span's id.
    pub(crate) id: [u8; 8],
    /// The client's span, when it sent a `traceparent`.
    pub(crate) parent: Option<[u8; 8]>,
    pub(crate) flags: u8,
    /// The id the next attempt's `traceparent` carries.
    pub(crate) next_id: [u8; 8],
    pub(crate) uri: Uri,
    pub(crate) host: Option<HeaderValue>,
    pub(crate) https: bool,
    /// The path sent upstream, when a route filter rewrote it (`uri` keeps
    /// the client's).
    pub(crate) rewritten_path: Option<Box<str>>,
    pub(crate) attempts: Vec<Attempt>,
    /// Set when the request ends.
    pub(crate) end: Option<End>,
}

/// What the end of the request adds.
#[derive(Debug)]
pub(crate) struct End {
    /// Names of the route, service and nodes are read from it at export.
    pub(crate) snap: Arc<Snapshot>,
    pub(crate) method: Method,
    pub(crate) request_id: HeaderValue,
    pub(crate) peer: SocketAddr,
    pub(crate) started: Instant,
    /// The clock pair the export converts every `Instant` with.
    pub(crate) ended: Instant,
    pub(crate) ended_unix_ns: u64,
    pub(crate) route: Option<usize>,
    pub(crate) service: Option<usize>,
    pub(crate) status: u16,
    pub(crate) error: Option<ErrorKind>,
    pub(crate) hopped: bool,
}

impl Span {
    /// The record of a sampled trace whose context `p` was just sent.
    pub(crate) fn new(p: &Propagated, uri: Uri, host: Option<HeaderValue>, https: bool) -> Span {
        Span {
            trace_id: p.trace_id,
            id: crate::trace::new_span_id(),
            parent: p.parent,
            flags: p.flags,
            next_id: p.span_id,
            uri,
            host,
            https,
            rewritten_path: None,
            attempts: Vec::new(),
            end: None,
        }
    }

    /// Before attempt `number` (1-based) is sent: a retry gets its own
    /// CLIENT span id, written into its `traceparent`; the first keeps the
    /// id [`crate::trace::propagate`] sent.
    pub(crate) fn before_attempt(&mut self, number: usize, set: &mut crate::headers::SetLines) {
        if number > 1 {
            self.next_id = crate::trace::new_span_id();
            let v = crate::trace::parent_value(&self.trace_id, &self.next_id, self.flags);
            set.traceparent = Some(v);
        }
    }

    /// After an attempt: what the node answered, or why it did not.
    pub(crate) fn after_attempt(
        &mut self,
        node: usize,
        number: usize,
        sent: Instant,
        answered: Instant,
        outcome: Result<u16, ErrorKind>,
    ) {
        let (status, error) = match outcome {
            Ok(s) => (s, None),
            Err(k) => (0, Some(k)),
        };
        self.attempts.push(Attempt {
            id: self.next_id,
            node,
            number: u32::try_from(number).unwrap_or(u32::MAX),
            sent,
            answered,
            status,
            error,
        });
    }

    /// Spans in this record (the SERVER span and its CLIENT spans).
    fn count(&self) -> u64 {
        1 + self.attempts.len() as u64
    }
}

/// Nanoseconds since the Unix epoch, now.
pub(crate) fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

static SPANS_EXPORTED: AtomicU64 = AtomicU64::new(0);
static SPANS_DROPPED: AtomicU64 = AtomicU64::new(0);
static BATCHES_EXPORTED: AtomicU64 = AtomicU64::new(0);
static BATCHES_FAILED: AtomicU64 = AtomicU64::new(0);

/// The export counters since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Spans a collector accepted.
    pub spans_exported: u64,
    /// Spans lost: the queue was full, their batch failed, or the final
    /// flush ran out of time.
    pub spans_dropped: u64,
    pub batches_exported: u64,
    pub batches_failed: u64,
}

pub fn counters() -> Counters {
    Counters {
        spans_exported: SPANS_EXPORTED.load(Ordering::Relaxed),
        spans_dropped: SPANS_DROPPED.load(Ordering::Relaxed),
        batches_exported: BATCHES_EXPORTED.load(Ordering::Relaxed),
        batches_failed: BATCHES_FAILED.load(Ordering::Relaxed),
    }
}

/// Appends the export counters in the Prometheus text format:
/// `hopgate_otlp_spans_exported_total`, `hopgate_otlp_spans_dropped_total`,
/// `hopgate_otlp_batches_total{result="ok|failed"}`.
pub fn render_metrics(out: &mut String) {
    use std::fmt::Write as _;
    let c = counters();
    let _ = write!(
        out,
        "# HELP hopgate_otlp_spans_exported_total Spans an OTLP collector accepted.\n\
         # TYPE hopgate_otlp_spans_exported_total counter\n\
         hopgate_otlp_spans_exported_total {}\n\
         # HELP hopgate_otlp_spans_dropped_total Spans lost: export queue full, batch failed, or shutdown flush out of time.\n\
         # TYPE hopgate_otlp_spans_dropped_total counter\n\
         hopgate_otlp_spans_dropped_total {}\n\
         # HELP hopgate_otlp_batches_total OTLP export requests by result.\n\
         # TYPE hopgate_otlp_batches_total counter\n\
         hopgate_otlp_batches_total{{result=\"ok\"}} {}\n\
         hopgate_otlp_batches_total{{result=\"failed\"}} {}\n",
        c.spans_exported, c.spans_dropped, c.batches_exported, c.batches_failed
    );
}

/// The queue between the request path and the export task.
#[derive(Debug)]
pub struct Exporter {
    /// Replaced (by the export task only) when `tracing.otlp.queue`
    /// changes on reload.
    queue: ArcSwap<ArrayQueue<Box<Span>>>,
    /// Wakes the task when a full batch waits: a one-slot channel, whose
    /// `try_send` neither waits nor locks.
    wake: tokio::sync::mpsc::Sender<()>,
    batch: AtomicUsize,
}

impl Exporter {
    fn new(queue: usize, batch: usize) -> (Exporter, tokio::sync::mpsc::Receiver<()>) {
        let (wake, woken) = tokio::sync::mpsc::channel(1);
        let ex = Exporter {
            queue: ArcSwap::from_pointee(ArrayQueue::new(queue.max(1))),
            wake,
            batch: AtomicUsize::new(batch.max(1)),
        };
        (ex, woken)
    }

    /// Hands a finished record to the export task: never waits, never
    /// locks; a full queue drops it (counted).
    pub(crate) fn hand(&self, span: Box<Span>) {
        let q = self.queue.load();
        let n = span.count();
        match q.push(span) {
            Ok(()) => {
                // Once per batch: the task sends it without waiting for
                // its interval.
                if q.len() == self.batch.load(Ordering::Relaxed) {
                    let _ = self.wake.try_send(());
                }
            }
            Err(_) => {
                SPANS_DROPPED.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// Ends `span` and hands it over: the end's facts, the clock pair.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    exporter: &Exporter,
    mut span: Box<Span>,
    snap: &Arc<Snapshot>,
    method: &Method,
    request_id: &HeaderValue,
    peer: SocketAddr,
    started: Instant,
    facts: (Option<usize>, Option<usize>, u16, Option<ErrorKind>, bool),
) {
    let (route, service, status, error, hopped) = facts;
    span.end = Some(End {
        snap: Arc::clone(snap),
        method: method.clone(),
        request_id: request_id.clone(),
        peer,
        started,
        ended: Instant::now(),
        ended_unix_ns: unix_now_ns(),
        route,
        service,
        status,
        error,
        hopped,
    });
    exporter.hand(span);
}

/// [`Span::before_attempt`] for a sampled request; `request` as it is
/// otherwise. A plain function, so the request's future holds nothing more.
pub(crate) fn before_attempt(
    span: Option<&mut Span>,
    number: usize,
    set: &mut crate::headers::SetLines,
) {
    if let Some(s) = span {
        s.before_attempt(number, set);
    }
}

/// An attempt's result as its CLIENT span records it.
pub(crate) fn outcome_of(
    result: &Result<Box<http::Response<crate::body::ProxyBody>>, crate::pool::SendFailure>,
) -> Result<u16, ErrorKind> {
    use crate::pool::SendFailure;
    match result {
        Ok(r) => Ok(r.status().as_u16()),
        Err(SendFailure::NotSent { error, .. } | SendFailure::Sent(error))
        | Err(SendFailure::SentWithHead(error, _) | SendFailure::Refused(error)) => Err(error.kind),
    }
}

#[cfg(test)]
mod tests;
