//! Phases 15 and 16: the end of every request, answered or not.
//!
//! Owns [`Done`] (what the end needs from the start), [`Outcome`] (what
//! the phases between found out), [`Done::finish`]: the choice between the
//! gateway's text and gRPC error answers, the request and response
//! counters (the gateway's and the route's), and the access log line:
//! written at once for an answer without a body, or handed to the body
//! ([`PendingLine`], [`LoggedBody`]) to be written with the bytes passed on
//! when the body ends or the client goes away.
//! Must not touch: the backend's answer (it is passed through as it is),
//! node state, sessions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::{HeaderValue, CONTENT_LENGTH, HOST, USER_AGENT};
use http::{Method, Request, Response, Version};
use http_body::Body as _;

use crate::upstream::Snapshot;
use hopgate_core::error::ErrorKind;

use super::logged::{AccessLine, LoggedBody};
use super::{ClientConn, RequestCtx};
use crate::body::ProxyBody;
use crate::headers::{RequestFacts, RequestId};
use crate::metrics::METRICS;
use crate::respond::{error_response, grpc_error_response};
use crate::trace::TraceId;

/// What the phases of a request found out, for the counters and the
/// access log.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) status: u16,
    pub(super) route: Option<usize>,
    pub(super) service: Option<usize>,
    pub(super) node: Option<usize>,
    pub(super) attempts: usize,
    pub(super) error: Option<ErrorKind>,
    /// The session hopped to another node on this request.
    pub(super) hopped: bool,
    /// The trace the request belongs to (all zeros before it is known).
    pub(super) trace_id: TraceId,
    /// The request's spans, while it is sampled for export.
    pub(super) span: Option<Box<crate::otlp::Span>>,
    /// From arrival to the last attempt's answer (or failure): the length
    /// of a request that ends there, so [`Done::finish`] need not read the
    /// clock again. `None` before any attempt.
    pub(super) took: Option<Duration>,
    /// Why the route's rate limit refused the request (its 429's headers).
    pub(super) limited: Option<crate::limit::Refused>,
}

/// What the access log needs from the request's head, taken when the
/// request arrives (only while the access log is on): copied into one
/// string, so the request keeps its parts and no reference count moves.
pub(super) struct AccessFacts {
    /// The host, the path and the user agent, one after the other.
    text: String,
    host_end: usize,
    path_end: usize,
    version: Version,
    bytes_in: Option<u64>,
    /// The path sent upstream, when a route filter rewrote it.
    pub(super) upstream_path: Option<Box<str>>,
}

impl AccessFacts {
    /// The head's facts, or `None` when no access line will be written.
    /// `facts` saves looking for a `Transfer-Encoding`.
    pub(super) fn of<B>(
        snap: &Snapshot,
        req: &Request<B>,
        facts: &RequestFacts,
    ) -> Option<Box<AccessFacts>> {
        if !snap.config.access_log.enabled || !crate::access_log::wanted() {
            return None;
        }
        // One pass over the headers (a request has few) instead of a hashed
        // lookup for each of the three; the first value of each counts.
        let (mut host, mut user_agent, mut length) = (None, None, None);
        for (name, value) in req.headers() {
            if *name == HOST {
                host.get_or_insert(value);
            } else if *name == USER_AGENT {
                user_agent.get_or_insert(value);
            } else if *name == CONTENT_LENGTH {
                length.get_or_insert(value);
            }
        }
        let host = host
            .and_then(|v| v.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()))
            .unwrap_or("-");
        let path = req.uri().path();
        let user_agent = text(user_agent);
        // A request without `Content-Length` or `Transfer-Encoding` has no
        // body.
        let bytes_in = match length {
            Some(v) => v.to_str().ok().and_then(|v| v.parse().ok()),
            None => (!facts.transfer_encoding()).then_some(0),
        };
        let mut text = String::with_capacity(host.len() + path.len() + user_agent.len());
        text.push_str(host);
        text.push_str(path);
        text.push_str(user_agent);
        Some(Box::new(AccessFacts {
            text,
            host_end: host.len(),
            path_end: host.len() + path.len(),
            version: req.version(),
            bytes_in,
            upstream_path: None,
        }))
    }

    fn host(&self) -> &str {
        self.text.get(..self.host_end).unwrap_or("-")
    }

    fn path(&self) -> &str {
        self.text.get(self.host_end..self.path_end).unwrap_or("-")
    }

    fn user_agent(&self) -> &str {
        self.text.get(self.path_end..).unwrap_or("-")
    }
}

/// A 429 of the route's rate limit: its `Retry-After` and `RateLimit`
/// headers.
#[cold]
fn limited_answer(
    resp: &mut Response<ProxyBody>,
    snap: &Snapshot,
    route: Option<usize>,
    refused: crate::limit::Refused,
) {
    let limiter = route.and_then(|r| snap.routes[r].rate_limit.as_deref());
    if let Some(limiter) = limiter {
        crate::limit::refusal_headers(resp.headers_mut(), limiter, refused);
    }
}

/// What the end of a request needs from its start: the answer's form, the
/// access log line, the counters.
pub(super) struct Done {
    pub(super) method: Method,
    pub(super) request_id: RequestId,
    pub(super) started: Instant,
    pub(super) grpc: bool,
    pub(super) out: Outcome,
    /// `Some` while the access log is on.
    pub(super) access: Option<Box<AccessFacts>>,
}

impl Done {
    /// The response to the client (an error becomes the gateway's own
    /// answer), counted and logged; an answer whose body is still to come
    /// has its line written when the body ends ([`LoggedBody`]).
    ///
    /// Borrowed, not taken: the request's future holds it in place (taken
    /// by value it was copied out first, ~200 bytes per request); only an
    /// access line waiting for its body takes its parts.
    pub(super) fn finish(
        &mut self,
        snap: &Arc<Snapshot>,
        conn: &Arc<ClientConn>,
        result: Result<Box<Response<ProxyBody>>, ErrorKind>,
    ) -> Box<Response<ProxyBody>> {
        let resp = match result {
            Ok(r) => r,
            Err(kind) => self.error(snap, kind),
        };
        // A gRPC error travels as HTTP 200 with a `grpc-status`; it is
        // counted (like the access log shows it) by the gateway's status.
        let status = if self.out.error.is_some() {
            self.out.status
        } else {
            resp.status().as_u16()
        };
        let took = self.count(snap, conn, status);
        match self.access.take() {
            Some(facts) => self.log(snap, conn, resp, took, facts),
            None => resp,
        }
    }

    /// The gateway's own answer for an error (with the rate limit's
    /// headers when a limit refused the request).
    #[cold]
    fn error(&mut self, snap: &Snapshot, kind: ErrorKind) -> Box<Response<ProxyBody>> {
        let out = &mut self.out;
        out.status = kind.status();
        out.error = Some(kind);
        METRICS.error(kind);
        let mut resp = error_answer(kind, self.grpc, &self.request_id);
        if let Some(refused) = out.limited {
            limited_answer(&mut resp, snap, out.route, refused);
        }
        resp
    }

    /// Counts the answer: the status, the span, the latency (the route's
    /// and, while a config canary bakes, its side's). How long the request
    /// took.
    #[inline]
    fn count(&mut self, snap: &Arc<Snapshot>, conn: &ClientConn, status: u16) -> Duration {
        let out = &mut self.out;
        METRICS.response(status);
        if let Some(span) = out.span.take() {
            if let Some(ex) = &conn.forwarder.otlp {
                let end = (out.route, out.service, status, out.error, out.hopped);
                let (m, id) = (&self.method, &self.request_id.to_value());
                crate::otlp::finish(ex, span, snap, m, id, conn.peer, self.started, end);
            }
        }
        let took = match out.took {
            Some(took) => took,
            None => self.started.elapsed(),
        };
        crate::latency::REQUEST_LATENCY.record(took);
        if let Some(r) = out.route {
            snap.routes[r].stats.record(status, took);
        }
        conn.forwarder.canary.with_arm(|arm| {
            if let Some(side) = arm.side_of(snap.version) {
                side.record(status, took);
            }
        });
        took
    }

    /// The access line: written now when no body is to come, else when the
    /// body ends ([`LoggedBody`]).
    #[inline]
    fn log(
        &mut self,
        snap: &Arc<Snapshot>,
        conn: &Arc<ClientConn>,
        resp: Box<Response<ProxyBody>>,
        took: Duration,
        facts: Box<AccessFacts>,
    ) -> Box<Response<ProxyBody>> {
        // Nothing to wait for: no body, or one the server never sends.
        if resp.body().is_end_stream()
            || self.method == Method::HEAD
            || matches!(resp.status().as_u16(), 204 | 304)
        {
            let line = Inputs {
                method: &self.method,
                request_id: &self.request_id,
                out: &self.out,
                took,
                peer: &conn.peer_text,
                ctx: &conn.ctx,
                facts: &facts,
                bytes_out: Some(0),
            };
            log_access(snap, &line);
            return resp;
        }
        let line = PendingLine {
            snap: Arc::clone(snap),
            conn: Arc::clone(conn),
            method: std::mem::replace(&mut self.method, Method::GET),
            request_id: std::mem::replace(
                &mut self.request_id,
                RequestId::Client(HeaderValue::from_static("-")),
            ),
            out: std::mem::take(&mut self.out),
            took,
            facts,
        };
        line.wait_for(resp)
    }
}

/// The gateway's own answer for `kind`: a gRPC one for a gRPC request.
fn error_answer(kind: ErrorKind, grpc: bool, request_id: &RequestId) -> Box<Response<ProxyBody>> {
    let id = request_id.to_value();
    Box::new(if grpc {
        grpc_error_response(kind, Some(&id))
    } else {
        error_response(kind, Some(&id))
    })
}

/// An access line waiting for the end of its answer's body.
pub(super) struct PendingLine {
    snap: Arc<Snapshot>,
    conn: Arc<ClientConn>,
    method: Method,
    request_id: RequestId,
    out: Outcome,
    took: std::time::Duration,
    facts: Box<AccessFacts>,
}

impl PendingLine {
    /// `resp` with its body wrapped to write this line when it ends
    /// ([`LoggedBody`]).
    fn wait_for(self, mut resp: Box<Response<ProxyBody>>) -> Box<Response<ProxyBody>> {
        ProxyBody::wrap_in(&mut resp, |body| {
            let watched = matches!(body, ProxyBody::SendWatched(_));
            ProxyBody::Logged(Box::new(LoggedBody::new(body, self, watched)))
        });
        resp
    }
}

impl AccessLine for PendingLine {
    /// Writes the line: `bytes_out` body bytes were passed on; `cut`
    /// says why the body did not end (the line keeps the status the
    /// client got, like nginx does, and names the cause as its `error`).
    fn write(&mut self, bytes_out: u64, cut: Option<ErrorKind>) {
        let mut out = std::mem::take(&mut self.out);
        if out.error.is_none() {
            out.error = cut;
        }
        let line = Inputs {
            method: &self.method,
            request_id: &self.request_id,
            out: &out,
            took: self.took,
            peer: &self.conn.peer_text,
            ctx: &self.conn.ctx,
            facts: &self.facts,
            bytes_out: Some(bytes_out),
        };
        log_access(&self.snap, &line);
    }
}

/// One access line's inputs.
struct Inputs<'a> {
    method: &'a Method,
    request_id: &'a RequestId,
    out: &'a Outcome,
    took: std::time::Duration,
    peer: &'a str,
    ctx: &'a RequestCtx,
    facts: &'a AccessFacts,
    bytes_out: Option<u64>,
}

fn protocol(v: Version) -> &'static str {
    match v {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_11 => "HTTP/1.1",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "-",
    }
}

/// A header's value, or `-` when it is missing or not printable ASCII.
fn text(v: Option<&HeaderValue>) -> &str {
    v.and_then(|v| v.to_str().ok()).unwrap_or("-")
}

/// A value the gateway made or checked (ASCII): no second check.
fn ascii(v: &HeaderValue) -> &str {
    std::str::from_utf8(v.as_bytes()).unwrap_or("-")
}

fn log_access(snap: &Snapshot, l: &Inputs<'_>) {
    let out = l.out;
    let route = out.route.map(|r| snap.routes[r].id.as_str()).unwrap_or("-");
    let (service, node, upstream) = match (out.service, out.node) {
        (Some(s), Some(n)) => {
            let node = &snap.services[s].nodes[n];
            (
                snap.services[s].name.as_str(),
                node.id.as_str(),
                ascii(&node.address_header),
            )
        }
        (Some(s), None) => (snap.services[s].name.as_str(), "-", "-"),
        _ => ("-", "-", "-"),
    };
    let f = l.facts;
    let mut hex = [0u8; 32];
    let trace_id = if out.trace_id.0 == [0; 16] {
        "-"
    } else {
        out.trace_id.hex(&mut hex)
    };
    crate::access_log::write(&crate::access_log::Line {
        listener: &l.ctx.listener,
        peer: l.peer,
        method: l.method.as_str(),
        host: f.host(),
        path: f.path(),
        upstream_path: f.upstream_path.as_deref(),
        protocol: protocol(f.version),
        request_id: l.request_id.as_str(),
        rule: route,
        service,
        node,
        upstream,
        retries: out.attempts.saturating_sub(1) as u64,
        hops: u64::from(out.hopped),
        status: u64::from(out.status),
        error: out.error.map(|e| e.label()).unwrap_or("-"),
        bytes_in: f.bytes_in,
        bytes_out: l.bytes_out,
        user_agent: f.user_agent(),
        trace_id,
        latency_us: u64::try_from(l.took.as_micros()).unwrap_or(u64::MAX),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_that_are_not_printable_ascii_are_written_as_a_dash() {
        for raw in [&b"caf\xe9/1.0"[..], b"\xff\xfe", "é".as_bytes()] {
            let v = HeaderValue::from_bytes(raw).unwrap();
            assert_eq!(text(Some(&v)), "-", "{raw:?}");
        }
        assert_eq!(text(None), "-");
        let v = HeaderValue::from_static("curl/8.5.0 \"x\"\t\\");
        assert_eq!(text(Some(&v)), "curl/8.5.0 \"x\"\t\\");
    }

    #[test]
    fn the_facts_string_splits_back_into_its_three_values() {
        let (host, path, ua) = ("shop.example", "/a/b", "curl/8");
        let f = AccessFacts {
            text: format!("{host}{path}{ua}"),
            host_end: host.len(),
            path_end: host.len() + path.len(),
            version: Version::HTTP_11,
            bytes_in: None,
            upstream_path: None,
        };
        assert_eq!((f.host(), f.path(), f.user_agent()), (host, path, ua));
    }
}
