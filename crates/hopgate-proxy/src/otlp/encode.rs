//! A batch of records → one `ExportTraceServiceRequest` (protobuf bytes).
//!
//! Attributes follow the OpenTelemetry HTTP semantic conventions
//! (`http.request.method`, `url.path`, `url.scheme`, `server.address`,
//! `server.port`, `client.address`, `http.response.status_code`,
//! `http.route`, `error.type`, `http.request.resend_count`) plus the
//! gateway's own `hopgate.*` (service, node, attempt, request id, hop, the
//! route's filters and the path a filter rewrote; `url.path` stays the
//! client's).
//! Runs in the export task only: every string is made here.

use std::time::Instant;

use prost::Message as _;

use super::proto::{
    ExportTraceServiceRequest, InstrumentationScope, KeyValue, Resource, ResourceSpans, ScopeSpans,
    Span as PSpan, Status, KIND_CLIENT, KIND_SERVER, STATUS_ERROR,
};
use super::{End, Span};

/// The resource every span of this process belongs to.
pub(crate) struct Origin<'a> {
    pub(crate) service_name: &'a str,
}

/// Unix nanoseconds of `t`, by the clock pair taken when the request ended.
fn unix_ns(end: &End, t: Instant) -> u64 {
    let back = end.ended.saturating_duration_since(t);
    end.ended_unix_ns
        .saturating_sub(u64::try_from(back.as_nanos()).unwrap_or(u64::MAX))
}

/// `server.address` of the request: the Host header (or the URI's
/// authority) without its port.
fn host_name(span: &Span) -> Option<(String, Option<u16>)> {
    let text = span
        .host
        .as_ref()
        .and_then(|h| h.to_str().ok())
        .or_else(|| span.uri.authority().map(|a| a.as_str()))?;
    let auth: http::uri::Authority = text.parse().ok()?;
    Some((auth.host().to_owned(), auth.port_u16()))
}

/// `hopgate.filters` (the route's filter kinds in order, comma-separated)
/// and `hopgate.rewritten_path` (the path sent upstream, when a filter
/// rewrote it).
fn filter_attrs(
    span: &Span,
    route: Option<&hopgate_core::snapshot::CompiledRoute>,
    attrs: &mut Vec<KeyValue>,
) {
    if let Some(f) = route.and_then(|r| r.filters.as_deref()) {
        attrs.push(KeyValue::str("hopgate.filters", f.kinds.join(",")));
    }
    if let Some(p) = &span.rewritten_path {
        attrs.push(KeyValue::str("hopgate.rewritten_path", &**p));
    }
}

fn error_status(kind: &str) -> Option<Status> {
    Some(Status {
        message: kind.to_owned(),
        code: STATUS_ERROR,
    })
}

/// The SERVER span and the CLIENT spans of one record, appended to `out`.
fn spans_of(span: &Span, out: &mut Vec<PSpan>) {
    let Some(end) = &span.end else {
        return;
    };
    let snap = &end.snap;
    let route = end.route.and_then(|r| snap.routes.get(r));
    let service = end.service.and_then(|s| snap.services.get(s));
    let method = end.method.as_str();
    let mut attrs = vec![
        KeyValue::str("http.request.method", method),
        KeyValue::str("url.path", span.uri.path()),
        KeyValue::str("url.scheme", if span.https { "https" } else { "http" }),
        KeyValue::str("client.address", end.peer.ip().to_string()),
        KeyValue::int("client.port", i64::from(end.peer.port())),
    ];
    if let Some(q) = span.uri.query() {
        attrs.push(KeyValue::str("url.query", q));
    }
    filter_attrs(span, route, &mut attrs);
    if let Some((host, port)) = host_name(span) {
        attrs.push(KeyValue::str("server.address", host));
        if let Some(p) = port {
            attrs.push(KeyValue::int("server.port", i64::from(p)));
        }
    }
    if end.status != 0 {
        attrs.push(KeyValue::int(
            "http.response.status_code",
            i64::from(end.status),
        ));
    }
    if let Some(r) = route {
        attrs.push(KeyValue::str("http.route", r.id.as_str()));
    }
    if let Some(s) = service {
        attrs.push(KeyValue::str("hopgate.service", s.name.as_str()));
    }
    if let Ok(id) = end.request_id.to_str() {
        attrs.push(KeyValue::str("hopgate.request_id", id));
    }
    if end.hopped {
        attrs.push(KeyValue::bool("hopgate.hopped", true));
    }
    // A server span is an error on the gateway's own failures and on 5xx;
    // a 4xx is the client's (semantic conventions).
    let error = match end.error {
        Some(k) => Some(k.label().to_owned()),
        None if end.status >= 500 => Some(end.status.to_string()),
        None => None,
    };
    if let Some(e) = &error {
        attrs.push(KeyValue::str("error.type", e.as_str()));
    }
    let flags = u32::from(span.flags) | 0x100; // bit 8: the parent's remoteness is known
    let flags = if span.parent.is_some() {
        flags | 0x200
    } else {
        flags
    };
    out.push(PSpan {
        trace_id: span.trace_id.0.to_vec(),
        span_id: span.id.to_vec(),
        trace_state: String::new(),
        parent_span_id: span.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: match route {
            Some(r) => format!("{method} {}", r.id),
            None => method.to_owned(),
        },
        kind: KIND_SERVER,
        start_time_unix_nano: unix_ns(end, end.started),
        end_time_unix_nano: end.ended_unix_ns,
        attributes: attrs,
        status: error.as_deref().and_then(error_status),
        flags,
    });
    for a in &span.attempts {
        let node = service.and_then(|s| s.nodes.get(a.node));
        let mut attrs = vec![
            KeyValue::str("http.request.method", method),
            KeyValue::int("hopgate.attempt", i64::from(a.number)),
        ];
        if a.number > 1 {
            attrs.push(KeyValue::int(
                "http.request.resend_count",
                i64::from(a.number - 1),
            ));
        }
        if let Some(n) = node {
            attrs.push(KeyValue::str("server.address", n.address.ip().to_string()));
            attrs.push(KeyValue::int("server.port", i64::from(n.address.port())));
            attrs.push(KeyValue::str("hopgate.node", n.id.as_str()));
        }
        if let Some(s) = service {
            attrs.push(KeyValue::str("hopgate.service", s.name.as_str()));
        }
        if a.status != 0 {
            attrs.push(KeyValue::int(
                "http.response.status_code",
                i64::from(a.status),
            ));
        }
        // A client span is an error on 4xx too (semantic conventions).
        let error = match a.error {
            Some(k) => Some(k.label().to_owned()),
            None if a.status >= 400 => Some(a.status.to_string()),
            None => None,
        };
        if let Some(e) = &error {
            attrs.push(KeyValue::str("error.type", e.as_str()));
        }
        out.push(PSpan {
            trace_id: span.trace_id.0.to_vec(),
            span_id: a.id.to_vec(),
            trace_state: String::new(),
            parent_span_id: span.id.to_vec(),
            name: method.to_owned(),
            kind: KIND_CLIENT,
            start_time_unix_nano: unix_ns(end, a.sent),
            end_time_unix_nano: unix_ns(end, a.answered),
            attributes: attrs,
            status: error.as_deref().and_then(error_status),
            flags: u32::from(span.flags) | 0x100,
        });
    }
}

/// The request message for `batch`.
pub(crate) fn request(batch: &[Box<Span>], origin: &Origin<'_>) -> ExportTraceServiceRequest {
    let mut spans = Vec::with_capacity(batch.len() * 2);
    for s in batch {
        spans_of(s, &mut spans);
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    KeyValue::str("service.name", origin.service_name),
                    KeyValue::str("service.version", env!("CARGO_PKG_VERSION")),
                    KeyValue::str("telemetry.sdk.name", "hopgate"),
                    KeyValue::str("telemetry.sdk.language", "rust"),
                ],
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "hopgate".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                }),
                spans,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The protobuf bytes of `batch`, and how many spans they hold.
pub(crate) fn encode(batch: &[Box<Span>], origin: &Origin<'_>) -> (Vec<u8>, u64) {
    let req = request(batch, origin);
    let n = req
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len() as u64)
        .sum();
    (req.encode_to_vec(), n)
}
