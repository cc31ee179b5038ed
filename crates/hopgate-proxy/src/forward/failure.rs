//! Phase 13, step 6, for an attempt that failed: what it leads to.
//!
//! Owns the failure classes ([`Class`]: not sent, refused, sent, and a
//! gRPC UNAVAILABLE answered before any byte), the pure retry / replay /
//! hop decision ([`decide`]) and [`on_failure`], which carries a decision
//! out in one order for every class: log, account on the node, start a
//! hop, remember the error, then resend, replay, or end the request. Must
//! not touch: node choice and the retry budget's withdrawals (the next
//! attempt's `attempt::choose` / `attempt::spend`), an answer's handling
//! (`answer`), the session store.

use http::Response;

use hopgate_core::error::{ErrorKind, ProxyError};
use hopgate_core::node::Observation;
use hopgate_core::session::HopReason;

use super::attempt::Attempted;
use super::done::Outcome;
use super::plan::{begin_hop_if_bound, PendingHop};
use super::replay::{CopyKind, Replay};
use super::Req;
use crate::body::ProxyBody;
use crate::pool::SendFailure;

/// How an attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// The request cannot have reached the backend; it came back untouched.
    NotSent,
    /// HTTP/2: the backend refused the stream without processing it, but
    /// the request's body was consumed.
    Refused,
    /// The request may have reached the backend.
    Sent,
    /// A gRPC call answered UNAVAILABLE (trailers-only, `grpc-status: 14`)
    /// before any response byte: the backend did not process it.
    GrpcUnavailable,
    /// An answer whose status the service lists as "not processed"
    /// (`services[].retries.on_status`, or `on_status_idempotent` for a
    /// replay-safe request): a backend refusing work while it drains.
    NotProcessed,
    /// The client's fault, seen by its body while the send ran: a
    /// malformed or aborted body, one over the size limit, or a send that
    /// timed out waiting on the client.
    Client,
}

/// What [`decide`] looks at.
#[derive(Clone, Copy, Debug)]
pub(super) struct Facts {
    pub(super) class: Class,
    /// The error of a failed send (for a gRPC UNAVAILABLE answer,
    /// `ConnectionLost`).
    pub(super) kind: ErrorKind,
    /// The copy the request can be replayed from (phase 12). It is `Any`
    /// only for a replay-safe request (an idempotent method or an
    /// `Idempotency-Key`) whose body was empty or buffered.
    pub(super) copy: CopyKind,
    /// Another attempt may follow (`retries.attempts`).
    pub(super) attempts_left: bool,
    /// The service's retry budget has a token.
    pub(super) budget_left: bool,
    /// The request's session is bound to the node that failed.
    pub(super) bound_here: bool,
}

/// Where a failed attempt leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// The next attempt sends the untouched request.
    Resend,
    /// The next attempt sends a request built from the copy.
    Replay,
    /// The request ends with the gateway's error answer for the kind
    /// (502, 504, 413; for a gRPC client `grpc-status` 14, 4, 8).
    Answer(ErrorKind),
    /// The backend's answer goes to the client as it came.
    PassThrough,
    /// Not a failure after all: the answer is handled like any other.
    Deliver,
}

/// The decision for a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Decision {
    pub(super) next: Next,
    /// The node records `Observation::Failure`.
    pub(super) observe: bool,
    /// A hop starts if the session was bound to this node.
    pub(super) hop: bool,
}

/// The retry / replay / hop decision, for every class in one place.
///
/// A resend or replay of a not-sent, refused or sent failure still meets
/// the next attempt's own checks: the loop ends with this error when no
/// attempt or no budget token is left (after a node is chosen). Only a
/// gRPC UNAVAILABLE answer asks for them here: without them it is an
/// ordinary answer.
pub(super) fn decide(f: Facts) -> Decision {
    let retry_or_answer = |copy_fits: bool| {
        if copy_fits {
            Next::Replay
        } else {
            Next::Answer(f.kind)
        }
    };
    match f.class {
        // The node's connection limit and queue turned it away: load, not
        // a failure. Another node may take it, unless the request's
        // session is bound to this one: a live node keeps its sessions
        // (served elsewhere, the session would silently move), so that
        // request gets the 503. Health, breaker and outlier count are
        // untouched.
        Class::NotSent if f.kind.is_busy() => Decision {
            next: if f.bound_here {
                Next::Answer(f.kind)
            } else {
                Next::Resend
            },
            observe: false,
            hop: false,
        },
        // Whatever the method: it never reached a backend.
        Class::NotSent => Decision {
            next: Next::Resend,
            observe: true,
            hop: true,
        },
        // Never processed, but the body is gone: only a copy can go again.
        Class::Refused => Decision {
            next: retry_or_answer(f.copy != CopyKind::Absent),
            observe: true,
            hop: true,
        },
        // The backend did nothing wrong: the client did (the body was
        // over the limit, broken, cut off or too slow).
        Class::Client => Decision {
            next: Next::Answer(f.kind),
            observe: false,
            hop: false,
        },
        Class::Sent if f.kind == ErrorKind::BodyTooLarge => Decision {
            next: Next::Answer(f.kind),
            observe: false,
            hop: false,
        },
        // It may have run on the backend: never sent twice unless
        // replay-safe with its body kept.
        Class::Sent => Decision {
            next: retry_or_answer(f.copy == CopyKind::Any),
            observe: true,
            hop: true,
        },
        Class::GrpcUnavailable if !(f.attempts_left && f.budget_left) => Decision {
            next: Next::Deliver,
            observe: false,
            hop: false,
        },
        Class::GrpcUnavailable if f.copy == CopyKind::Absent => Decision {
            next: Next::PassThrough,
            observe: false,
            hop: false,
        },
        Class::GrpcUnavailable => Decision {
            next: Next::Replay,
            observe: true,
            hop: false,
        },
        Class::NotProcessed => not_processed(f),
    }
}

/// [`decide`] for a "not processed" answer: sent again elsewhere,
/// whatever the method, when a copy, an attempt and a budget token are
/// left (the node is not failing, it refuses work while it drains: it
/// backs off and a session bound to it moves); otherwise the answer goes
/// to the client as the backend gave it.
fn not_processed(f: Facts) -> Decision {
    let retry = f.attempts_left && f.budget_left && f.copy != CopyKind::Absent;
    Decision {
        next: if retry { Next::Replay } else { Next::Deliver },
        observe: false,
        hop: retry,
    }
}

/// A failed attempt: a send that failed, a gRPC UNAVAILABLE answer, or a
/// "not processed" answer (rare, so boxed: the common answer stays
/// unboxed).
pub(super) enum Failed {
    Send(SendFailure),
    GrpcUnavailable(Box<Response<ProxyBody>>),
    NotProcessed(Box<Response<ProxyBody>>),
}

/// What the driver does after a failed attempt.
pub(super) enum AfterFailure {
    /// Another attempt, with this request.
    Next(Box<http::Request<ProxyBody>>),
    /// The request ends with this result.
    End(Result<Box<Response<ProxyBody>>, ErrorKind>),
    /// Handle this answer like any other.
    Deliver(Box<Response<ProxyBody>>),
}

/// A failed attempt taken apart: its class, the send's error (none for a
/// gRPC UNAVAILABLE answer), and what it handed back: the request (not
/// sent), the head as sent (HTTP/1.1, for a replay), or the answer.
struct Handed {
    class: Class,
    error: Option<ProxyError>,
    request: Option<Box<http::Request<ProxyBody>>>,
    sent_head: Option<Box<http::request::Parts>>,
    answer: Option<Box<Response<ProxyBody>>>,
}

impl Failed {
    #[inline]
    fn handed(self) -> Handed {
        let by = |class, error| Handed {
            class,
            error: Some(error),
            request: None,
            sent_head: None,
            answer: None,
        };
        match self {
            Failed::Send(SendFailure::NotSent { request, error }) => Handed {
                request: Some(request),
                ..by(Class::NotSent, error)
            },
            Failed::Send(SendFailure::Refused(error)) => by(Class::Refused, error),
            Failed::Send(SendFailure::Sent(error)) => by(Class::Sent, error),
            Failed::Send(SendFailure::SentWithHead(error, head)) => Handed {
                sent_head: Some(head),
                ..by(Class::Sent, error)
            },
            Failed::GrpcUnavailable(resp) => Handed {
                class: Class::GrpcUnavailable,
                error: None,
                request: None,
                sent_head: None,
                answer: Some(resp),
            },
            Failed::NotProcessed(resp) => Handed {
                class: Class::NotProcessed,
                error: None,
                request: None,
                sent_head: None,
                answer: Some(resp),
            },
        }
    }
}

/// What a request ends with when no attempt is left: the last attempt's
/// error, or, once a "not processed" answer was retried, that answer (the
/// backend's own refusal, passed on unchanged, rather than a 502 of the
/// gateway's when no other node could take the request).
pub(super) struct Last {
    pub(super) kind: ErrorKind,
    refused: Option<Box<Response<ProxyBody>>>,
}

impl Last {
    pub(super) fn new(kind: ErrorKind) -> Last {
        Last {
            kind,
            refused: None,
        }
    }

    /// The end of a request whose attempts ran out with `kind`.
    pub(super) fn end(
        &mut self,
        kind: ErrorKind,
        out: &mut Outcome,
    ) -> Result<Box<Response<ProxyBody>>, ErrorKind> {
        match self.refused.take() {
            Some(resp) => Ok(pass_on(resp, out)),
            None => Err(kind),
        }
    }
}

/// An upstream answer handed on as it came, without the answer step.
fn pass_on(mut resp: Box<Response<ProxyBody>>, out: &mut Outcome) -> Box<Response<ProxyBody>> {
    out.status = resp.status().as_u16();
    // Passed on without the answer step: as a header map.
    crate::h1::response_head::materialize(&mut resp);
    resp
}

/// Carries out [`decide`] for a failed attempt, in the same order for
/// every class: log, account on the node, start a hop if the session was
/// bound to it, remember the error, then resend, replay or end.
pub(super) fn on_failure(
    failed: Failed,
    req: Req<'_>,
    at: &Attempted<'_>,
    hop: &mut Option<PendingHop>,
    replay: Option<&Replay>,
    last: &mut Last,
    out: &mut Outcome,
) -> AfterFailure {
    let mut p = failed.handed();
    let kind = p
        .error
        .as_ref()
        .map_or(ErrorKind::ConnectionLost, |e| e.kind);
    // A send the client's body broke, or that timed out waiting on it, is
    // the client's fault (a not-sent request never read its body).
    let client_fault = match (p.class, req.client_body) {
        (Class::Sent | Class::Refused, Some(body)) => {
            body.fault(kind == ErrorKind::UpstreamTimeout)
        }
        _ => None,
    };
    let (class, kind) = match client_fault {
        Some(fault) => (Class::Client, fault),
        None => (p.class, kind),
    };
    p.class = class;
    let decision = decide(Facts {
        class,
        kind,
        copy: Replay::kind(replay),
        attempts_left: at.attempts_left,
        // Read only for the classes that ask.
        budget_left: matches!(class, Class::GrpcUnavailable | Class::NotProcessed)
            && at.svc.retry_budget.available() > 0,
        bound_here: req
            .flight
            .prior
            .as_ref()
            .is_some_and(|b| *b.node == *at.node.shared_id),
    });
    if decision.next == Next::Deliver {
        if let Some(resp) = p.answer {
            return AfterFailure::Deliver(resp);
        }
    }
    log_failure(at, &p, kind, decision.next);
    if decision.observe {
        at.account(Observation::Failure);
    }
    let reason = if p.class == Class::NotProcessed {
        back_off(at, &p);
        HopReason::Draining
    } else {
        HopReason::Unhealthy
    };
    if decision.hop {
        let prior = req.flight.prior.as_ref();
        begin_hop_if_bound(hop, prior, &at.node.shared_id, reason);
    }
    last.kind = kind;
    let refused = (p.class == Class::NotProcessed)
        .then(|| p.answer.take())
        .flatten();
    let next = after(decision.next, p, replay, kind, out);
    if refused.is_some() {
        last.refused = refused;
    }
    match next {
        AfterFailure::End(Err(kind)) => AfterFailure::End(last.end(kind, out)),
        other => other,
    }
}

/// The longest `Retry-After` a "not processed" answer makes its node back
/// off for; without one, [`DEFAULT_BACK_OFF_MS`].
const MAX_BACK_OFF_MS: u64 = 60_000;
const DEFAULT_BACK_OFF_MS: u64 = 1_000;

/// A "not processed" answer being retried: counted by status, and its
/// node backs off for the answer's `Retry-After` (seconds, at most a
/// minute; one second without it): new requests and sessions go to the
/// other nodes meanwhile, as from a draining node. No failure is charged
/// to the node.
#[cold]
fn back_off(at: &Attempted<'_>, p: &Handed) {
    let Some(resp) = &p.answer else { return };
    let status = resp.status().as_u16();
    crate::metrics::METRICS.retried_on_status(&at.svc.shared_name, status);
    let ms = resp
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_BACK_OFF_MS, |s| {
            s.saturating_mul(1000).min(MAX_BACK_OFF_MS)
        });
    at.node.state.eject_until(at.answered_ms.saturating_add(ms));
    tracing::info!(service = %at.svc.name, node = %at.node.id, status, back_off_ms = ms, attempt = at.number, "answer means not processed; retrying on another node");
}

/// The failure's log line: `debug` for the client's fault and a busy
/// node, `warn` for the node's failure and for a gRPC UNAVAILABLE retried
/// elsewhere.
#[inline]
fn log_failure(at: &Attempted<'_>, p: &Handed, kind: ErrorKind, next: Next) {
    match &p.error {
        Some(_) if p.class == Class::Client => {
            tracing::debug!(service = %at.svc.name, node = %at.node.id, error = kind.label(), "request ended by the client's fault; not charged to the node");
        }
        Some(_) if kind.is_busy() => {
            // Load, not a failure; counted in the pool's queue metrics.
            tracing::debug!(service = %at.svc.name, node = %at.node.id, error = kind.label(), "node busy; not charged to the node");
        }
        Some(error) => log_upstream_failure(at, error, p.class != Class::Sent),
        None if next == Next::Replay && p.class == Class::GrpcUnavailable => {
            tracing::warn!(service = %at.svc.name, node = %at.node.id, "gRPC UNAVAILABLE before any response byte; retrying elsewhere");
        }
        None => {}
    }
}

/// Where the decision leads: the next attempt's request (the untouched
/// one, or one built from the copy), or the end of the request.
#[inline]
fn after(
    next: Next,
    p: Handed,
    replay: Option<&Replay>,
    kind: ErrorKind,
    out: &mut Outcome,
) -> AfterFailure {
    match next {
        Next::Resend => match p.request {
            Some(request) => AfterFailure::Next(request),
            None => AfterFailure::End(Err(kind)),
        },
        Next::Replay => match replay.and_then(|copy| copy.request(p.sent_head)) {
            Some(request) => AfterFailure::Next(request),
            None => AfterFailure::End(Err(kind)),
        },
        Next::Answer(kind) => AfterFailure::End(Err(kind)),
        Next::PassThrough | Next::Deliver => match p.answer {
            Some(resp) => AfterFailure::End(Ok(pass_on(resp, out))),
            None => AfterFailure::End(Err(kind)),
        },
    }
}

fn log_upstream_failure(at: &Attempted<'_>, error: &ProxyError, not_sent: bool) {
    tracing::warn!(
        service = %at.svc.name,
        node = %at.node.id,
        addr = %at.node.address,
        attempt = at.number,
        not_sent,
        error = %error,
        "upstream attempt failed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::respond::grpc_status;
    use ErrorKind::{
        BodyTooLarge, ClientAborted, ClientTimeout, ConnectFailed, ConnectionLost, MalformedBody,
        PoolQueueFull, PoolQueueTimeout, UpstreamReset, UpstreamTimeout,
    };

    /// What a client or the next attempt sees, written like the spec
    /// table: "resend", "replay", "502", "grpc 14", "as sent", "answer".
    fn shown(next: Next, grpc: bool) -> String {
        match next {
            Next::Resend => "resend".into(),
            Next::Replay => "replay".into(),
            Next::Answer(kind) if grpc => format!("grpc {}", grpc_status(kind)),
            Next::Answer(kind) => kind.status().to_string(),
            Next::PassThrough => "as sent".into(),
            Next::Deliver => "answer".into(),
        }
    }

    /// The copy phase 12 keeps, from the method and the body.
    fn copy(replay_safe: bool, body: &str) -> CopyKind {
        match (replay_safe, body) {
            (true, "empty" | "buffered") => CopyKind::Any,
            (_, "arrived") => CopyKind::Unprocessed,
            _ => CopyKind::Absent,
        }
    }

    #[test]
    fn what_a_failed_attempt_leads_to() {
        use Class::{Client, GrpcUnavailable, NotSent, Refused, Sent};
        // class, error, replay-safe (idempotent method or Idempotency-Key),
        // body (empty / buffered / arrived / streamed), attempts left,
        // budget left, gRPC client -> next, observed, hop
        #[rustfmt::skip]
        let table = [
            (NotSent, ConnectFailed, false, "streamed", true, true, false, "resend", true, true),
            (NotSent, ConnectFailed, true, "empty", false, false, false, "resend", true, true),
            (NotSent, ConnectionLost, false, "arrived", true, false, true, "resend", true, true),
            (NotSent, PoolQueueFull, false, "streamed", true, true, false, "resend", false, false),
            (NotSent, PoolQueueTimeout, false, "arrived", true, true, true, "resend", false, false),
            (Refused, ConnectionLost, false, "arrived", true, true, false, "replay", true, true),
            (Refused, ConnectionLost, true, "buffered", true, true, false, "replay", true, true),
            (Refused, ConnectionLost, false, "streamed", true, true, false, "502", true, true),
            (Refused, ConnectionLost, false, "streamed", true, true, true, "grpc 14", true, true),
            (Sent, UpstreamReset, true, "empty", true, true, false, "replay", true, true),
            (Sent, UpstreamReset, true, "buffered", true, true, false, "replay", true, true),
            (Sent, UpstreamReset, false, "buffered", true, true, false, "502", true, true),
            (Sent, UpstreamReset, true, "streamed", true, true, false, "502", true, true),
            (Sent, UpstreamReset, false, "arrived", true, true, false, "502", true, true),
            (Sent, UpstreamReset, false, "arrived", true, true, true, "grpc 14", true, true),
            (Sent, UpstreamTimeout, false, "streamed", true, true, false, "504", true, true),
            (Sent, UpstreamTimeout, false, "streamed", true, true, true, "grpc 4", true, true),
            (Sent, BodyTooLarge, true, "buffered", true, true, false, "413", false, false),
            (Client, MalformedBody, false, "streamed", true, true, false, "400", false, false),
            (Client, ClientAborted, true, "streamed", true, true, false, "400", false, false),
            (Client, ClientTimeout, false, "arrived", true, true, false, "408", false, false),
            (Client, ClientTimeout, false, "arrived", true, true, true, "grpc 4", false, false),
            (GrpcUnavailable, ConnectionLost, false, "arrived", true, true, true, "replay", true, false),
            (GrpcUnavailable, ConnectionLost, true, "empty", true, true, true, "replay", true, false),
            (GrpcUnavailable, ConnectionLost, false, "streamed", true, true, true, "as sent", false, false),
            (GrpcUnavailable, ConnectionLost, false, "arrived", false, true, true, "answer", false, false),
            (GrpcUnavailable, ConnectionLost, false, "arrived", true, false, true, "answer", false, false),
        ];
        for (i, row) in table.into_iter().enumerate() {
            let (class, kind, safe, body, attempts_left, budget_left, grpc, next, observe, hop) =
                row;
            let d = decide(Facts {
                class,
                kind,
                copy: copy(safe, body),
                attempts_left,
                budget_left,
                bound_here: false,
            });
            assert_eq!(
                (shown(d.next, grpc).as_str(), d.observe, d.hop),
                (next, observe, hop),
                "row {i}: {row:?}"
            );
        }
    }

    /// A "not processed" answer (a draining backend's 503) goes again
    /// elsewhere, for any method, when a copy was kept (a plain POST's
    /// copy may follow only an unprocessed failure: this one), another
    /// attempt is allowed and the budget has a token; the node is not
    /// charged. Otherwise the answer passes through as it came.
    #[test]
    fn a_not_processed_answer_is_replayed_or_passed_through() {
        // copy, attempts left, budget left -> next, observed, hop
        let table = [
            (CopyKind::Unprocessed, true, true, "replay", false, true),
            (CopyKind::Any, true, true, "replay", false, true),
            (CopyKind::Absent, true, true, "answer", false, false),
            (CopyKind::Unprocessed, false, true, "answer", false, false),
            (CopyKind::Any, true, false, "answer", false, false),
        ];
        for (i, row) in table.into_iter().enumerate() {
            let (copy, attempts_left, budget_left, next, observe, hop) = row;
            let d = decide(Facts {
                class: Class::NotProcessed,
                kind: ConnectionLost,
                copy,
                attempts_left,
                budget_left,
                bound_here: true,
            });
            assert_eq!(
                (shown(d.next, false).as_str(), d.observe, d.hop),
                (next, observe, hop),
                "row {i}: {row:?}"
            );
        }
    }

    /// A busy node (its queue full or timed out) is never charged; the
    /// request goes elsewhere, unless its session is bound to that node:
    /// then it is answered 503 and the session stays.
    #[test]
    fn a_busy_node_keeps_its_sessions() {
        for kind in [PoolQueueFull, PoolQueueTimeout] {
            let facts = |bound_here| Facts {
                class: Class::NotSent,
                kind,
                copy: CopyKind::Absent,
                attempts_left: true,
                budget_left: true,
                bound_here,
            };
            let elsewhere = decide(facts(false));
            assert_eq!(
                (
                    shown(elsewhere.next, false).as_str(),
                    elsewhere.observe,
                    elsewhere.hop
                ),
                ("resend", false, false)
            );
            let bound = decide(facts(true));
            assert_eq!(
                (shown(bound.next, false).as_str(), bound.observe, bound.hop),
                ("503", false, false)
            );
        }
    }
}
