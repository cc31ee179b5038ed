//! Phases 15 and 16: the end of every request, answered or not.
//!
//! Owns [`Done`] (what the end needs from the start), [`Outcome`] (what
//! the phases between found out), [`Done::finish`]: the choice between the
//! gateway's text and gRPC error answers, the request and response
//! counters (the gateway's and the route's), and the access log line.
//! Must not touch: the backend's answer (it is passed through as it is),
//! node state, sessions.

use std::time::Instant;

use http::header::{HeaderValue, CONTENT_LENGTH, HOST, USER_AGENT};
use http::{Method, Request, Response, Version};
use http_body::Body as _;

use crate::upstream::Snapshot;
use hopgate_core::error::ErrorKind;

use super::{ClientConn, RequestCtx};
use crate::body::ProxyBody;
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
}

/// What the access log needs from the request's head, taken when the
/// request arrives (only while the access log is on).
pub(super) struct AccessFacts {
    uri: http::Uri,
    host: Option<HeaderValue>,
    user_agent: Option<HeaderValue>,
    version: Version,
    bytes_in: Option<u64>,
}

impl AccessFacts {
    /// The head's facts, or `None` when no access line will be written.
    pub(super) fn of<B>(snap: &Snapshot, req: &Request<B>) -> Option<Box<AccessFacts>> {
        if !snap.config.access_log.enabled
            || !crate::access_log::has_sink()
            || !tracing::enabled!(target: "hopgate::access", tracing::Level::INFO)
        {
            return None;
        }
        let h = req.headers();
        Some(Box::new(AccessFacts {
            uri: req.uri().clone(),
            host: h.get(HOST).cloned(),
            user_agent: h.get(USER_AGENT).cloned(),
            version: req.version(),
            bytes_in: super::plan::content_length(h).or_else(|| req_body_len(h)),
        }))
    }
}

/// A request without `Content-Length` or `Transfer-Encoding` has no body.
fn req_body_len(h: &http::HeaderMap) -> Option<u64> {
    (!h.contains_key(CONTENT_LENGTH) && !h.contains_key(http::header::TRANSFER_ENCODING))
        .then_some(0)
}

/// What the end of a request needs from its start: the answer's form, the
/// access log line, the counters.
pub(super) struct Done {
    pub(super) method: Method,
    pub(super) request_id: HeaderValue,
    pub(super) started: Instant,
    pub(super) grpc: bool,
    pub(super) out: Outcome,
    /// `Some` while the access log is on.
    pub(super) access: Option<Box<AccessFacts>>,
}

impl Done {
    /// The response to the client (an error becomes the gateway's own
    /// answer), counted and logged.
    pub(super) fn finish(
        self,
        snap: &std::sync::Arc<Snapshot>,
        conn: &ClientConn,
        result: Result<Response<ProxyBody>, ErrorKind>,
    ) -> Response<ProxyBody> {
        let mut out = self.out;
        let resp = match result {
            Ok(r) => r,
            Err(kind) => {
                out.status = kind.status();
                out.error = Some(kind);
                METRICS.error(kind);
                if self.grpc {
                    grpc_error_response(kind, Some(&self.request_id))
                } else {
                    error_response(kind, Some(&self.request_id))
                }
            }
        };
        // A gRPC error travels as HTTP 200 with a `grpc-status`; it is
        // counted (like the access log shows it) by the gateway's status.
        let status = if out.error.is_some() {
            out.status
        } else {
            resp.status().as_u16()
        };
        METRICS.response(status);
        if let Some(span) = out.span.take() {
            if let Some(ex) = &conn.forwarder.otlp {
                let end = (out.route, out.service, status, out.error, out.hopped);
                let (m, id) = (&self.method, &self.request_id);
                crate::otlp::finish(ex, span, snap, m, id, conn.peer, self.started, end);
            }
        }
        let took = self.started.elapsed();
        crate::latency::REQUEST_LATENCY.record(took);
        if let Some(r) = out.route {
            snap.routes[r].stats.record(status, took);
        }
        // A baking config canary counts each side's answers.
        if let Some(arm) = conn.forwarder.canary.load().as_deref() {
            if let Some(side) = arm.side_of(snap.version) {
                side.record(status, took);
            }
        }
        if let Some(facts) = &self.access {
            let line = Inputs {
                method: &self.method,
                request_id: &self.request_id,
                out: &out,
                took,
                peer: &conn.peer_text,
                ctx: &conn.ctx,
                facts,
                bytes_out: resp.body().size_hint().exact(),
            };
            log_access(snap, &line);
        }
        resp
    }
}

/// One access line's inputs.
struct Inputs<'a> {
    method: &'a Method,
    request_id: &'a HeaderValue,
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

fn text(v: Option<&HeaderValue>) -> &str {
    v.and_then(|v| v.to_str().ok()).unwrap_or("-")
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
                node.address_header.to_str().unwrap_or("-"),
            )
        }
        (Some(s), None) => (snap.services[s].name.as_str(), "-", "-"),
        _ => ("-", "-", "-"),
    };
    let f = l.facts;
    let host = f
        .host
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .or_else(|| f.uri.authority().map(|a| a.as_str()))
        .unwrap_or("-");
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
        host,
        path: f.uri.path(),
        protocol: protocol(f.version),
        request_id: l.request_id.to_str().unwrap_or("-"),
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
        user_agent: text(f.user_agent.as_ref()),
        trace_id,
        latency_us: u64::try_from(l.took.as_micros()).unwrap_or(u64::MAX),
    });
}
