//! Phases 15 and 16: the end of every request, answered or not.
//!
//! Owns [`Done`] (what the end needs from the start), [`Outcome`] (what
//! the phases between found out), [`Done::finish`]: the choice between the
//! gateway's text and gRPC error answers, the request and response
//! counters, and the access log line. Must not touch: the backend's
//! answer (it is passed through as it is), node state, sessions.

use std::time::Instant;

use http::header::HeaderValue;
use http::{Method, Response};

use crate::upstream::Snapshot;
use hopgate_core::error::ErrorKind;

use super::{ClientConn, RequestCtx};
use crate::body::ProxyBody;
use crate::metrics::METRICS;
use crate::respond::{error_response, grpc_error_response};

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
}

/// What the end of a request needs from its start: the answer's form, the
/// access log line, the counters.
pub(super) struct Done {
    pub(super) method: Method,
    pub(super) request_id: HeaderValue,
    pub(super) started: Instant,
    pub(super) grpc: bool,
    pub(super) out: Outcome,
}

impl Done {
    /// The response to the client (an error becomes the gateway's own
    /// answer), counted and logged.
    pub(super) fn finish(
        self,
        snap: &Snapshot,
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
        // A baking config canary counts each side's answers.
        if let Some(arm) = conn.forwarder.canary.load().as_deref() {
            if let Some(side) = arm.side_of(snap.version) {
                side.record(status, self.started.elapsed());
            }
        }
        log_access(
            snap,
            &self.method,
            &self.request_id,
            &out,
            self.started,
            &conn.peer_text,
            &conn.ctx,
        );
        resp
    }
}

fn log_access(
    snap: &Snapshot,
    method: &Method,
    request_id: &HeaderValue,
    out: &Outcome,
    started: Instant,
    peer: &str,
    ctx: &RequestCtx,
) {
    if !tracing::enabled!(target: "hopgate::access", tracing::Level::INFO) {
        return;
    }
    let route = out.route.map(|r| snap.routes[r].id.as_str()).unwrap_or("-");
    let (service, node) = match (out.service, out.node) {
        (Some(s), Some(n)) => (
            snap.services[s].name.as_str(),
            snap.services[s].nodes[n].id.as_str(),
        ),
        (Some(s), None) => (snap.services[s].name.as_str(), "-"),
        _ => ("-", "-"),
    };
    tracing::info!(
        target: "hopgate::access",
        listener = %ctx.listener,
        peer = %peer,
        method = %method,
        request_id = request_id.to_str().unwrap_or("-"),
        rule = route,
        service,
        node,
        retries = out.attempts.saturating_sub(1),
        hops = u8::from(out.hopped),
        status = out.status,
        error = out.error.map(|e| e.label()).unwrap_or("-"),
        latency_us = started.elapsed().as_micros() as u64,
        "access"
    );
}
