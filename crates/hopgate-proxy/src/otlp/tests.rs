use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::HeaderValue;
use prost::Message as _;

use super::encode::{encode, Origin};
use super::proto::{self, ExportTraceServiceRequest, Value};
use super::*;
use crate::trace::{Propagated, TraceId};

fn snapshot() -> Arc<Snapshot> {
    Arc::new(Snapshot::compile(
        Arc::new(
            hopgate_core::config::load(
                "listeners:\n  - { name: p, address: 127.0.0.1:8080 }\nservices:\n  - name: api\n    nodes:\n      - { id: n1, address: 127.0.0.1:8081 }\n      - { id: n2, address: 127.0.0.1:8082 }\nroutes:\n  - { id: r1, service: api }\n",
                hopgate_core::config::Format::Yaml,
            )
            .unwrap(),
        ),
        2,
        &crate::NodeRegistry::default(),
        None,
    ))
}

const TRACE: [u8; 16] = [0x4b; 16];
const CLIENT_SPAN: [u8; 8] = [0x0a; 8];
const SENT: [u8; 8] = [0x0c; 8];

/// A request with a client parent, a failed first attempt on n1 and a
/// retry answered 200 by n2.
fn record(snap: &Arc<Snapshot>) -> Box<Span> {
    let p = Propagated {
        trace_id: TraceId(TRACE),
        span_id: SENT,
        parent: Some(CLIENT_SPAN),
        flags: 1,
    };
    let mut s = Box::new(Span::new(
        &p,
        "/orders/7?x=1".parse().unwrap(),
        Some(HeaderValue::from_static("shop.example:8443")),
        true,
    ));
    let t0 = Instant::now();
    let mut h = crate::headers::SetLines::default();
    s.before_attempt(1, &mut h);
    assert!(
        h.traceparent.is_none(),
        "the first attempt keeps the propagated id"
    );
    s.after_attempt(
        0,
        1,
        t0,
        t0 + Duration::from_millis(3),
        Err(ErrorKind::ConnectFailed),
    );
    s.before_attempt(2, &mut h);
    let retry = crate::trace::parse(h.traceparent.as_ref().unwrap().as_bytes()).unwrap();
    assert_eq!((retry.trace_id, retry.flags), (TRACE, 1));
    assert_eq!(retry.parent_id, s.next_id);
    assert_ne!(retry.parent_id, SENT);
    s.after_attempt(
        1,
        2,
        t0 + Duration::from_millis(4),
        t0 + Duration::from_millis(9),
        Ok(200),
    );
    s.end = Some(End {
        snap: Arc::clone(snap),
        method: Method::POST,
        request_id: HeaderValue::from_static("req-1"),
        peer: "10.1.2.3:5555".parse().unwrap(),
        started: t0 - Duration::from_millis(1),
        ended: t0 + Duration::from_millis(10),
        ended_unix_ns: 1_700_000_000_000_000_000,
        route: Some(0),
        service: Some(0),
        status: 200,
        error: None,
        hopped: false,
    });
    s
}

fn attr<'a>(span: &'a proto::Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(span: &proto::Span, key: &str) -> String {
    match attr(span, key) {
        Some(Value::String(s)) => s.clone(),
        other => panic!("{key}: {other:?}"),
    }
}

fn int(span: &proto::Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::Int(n)) => *n,
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn a_record_encodes_to_a_server_span_and_one_client_span_per_attempt() {
    let snap = snapshot();
    let rec = record(&snap);
    let retry_id = rec.next_id;
    let server_id = rec.id;
    let (bytes, n) = encode(
        &[rec],
        &Origin {
            service_name: "edge",
        },
    );
    assert_eq!(n, 3);
    let req = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
    let rs = &req.resource_spans[0];
    let res = rs.resource.as_ref().unwrap();
    assert!(res.attributes.iter().any(|kv| kv.key == "service.name"
        && kv.value.as_ref().unwrap().value == Some(Value::String("edge".into()))));
    let spans = &rs.scope_spans[0].spans;
    assert_eq!(spans.len(), 3);
    let server = &spans[0];
    assert_eq!(server.kind, proto::KIND_SERVER);
    assert_eq!(server.name, "POST r1");
    assert_eq!(server.trace_id, TRACE.to_vec());
    assert_eq!(server.span_id, server_id.to_vec());
    assert_eq!(server.parent_span_id, CLIENT_SPAN.to_vec());
    assert_eq!(server.flags, 0x301);
    assert_eq!(text(server, "http.request.method"), "POST");
    assert_eq!(text(server, "url.path"), "/orders/7");
    assert_eq!(text(server, "url.query"), "x=1");
    assert_eq!(text(server, "url.scheme"), "https");
    assert_eq!(text(server, "server.address"), "shop.example");
    assert_eq!(int(server, "server.port"), 8443);
    assert_eq!(text(server, "client.address"), "10.1.2.3");
    assert_eq!(int(server, "http.response.status_code"), 200);
    assert_eq!(text(server, "http.route"), "r1");
    assert_eq!(text(server, "hopgate.service"), "api");
    assert_eq!(text(server, "hopgate.request_id"), "req-1");
    assert!(attr(server, "error.type").is_none() && server.status.is_none());
    assert_eq!(server.end_time_unix_nano, 1_700_000_000_000_000_000);
    assert_eq!(
        server.end_time_unix_nano - server.start_time_unix_nano,
        11_000_000
    );

    let (first, second) = (&spans[1], &spans[2]);
    for c in [first, second] {
        assert_eq!(c.kind, proto::KIND_CLIENT);
        assert_eq!(c.trace_id, TRACE.to_vec());
        assert_eq!(c.parent_span_id, server_id.to_vec());
        assert_eq!(text(c, "hopgate.service"), "api");
    }
    assert_eq!(first.span_id, SENT.to_vec());
    assert_eq!(text(first, "server.address"), "127.0.0.1");
    assert_eq!(int(first, "server.port"), 8081);
    assert_eq!(text(first, "hopgate.node"), "n1");
    assert_eq!(int(first, "hopgate.attempt"), 1);
    assert_eq!(text(first, "error.type"), ErrorKind::ConnectFailed.label());
    assert_eq!(first.status.as_ref().unwrap().code, proto::STATUS_ERROR);
    assert!(attr(first, "http.response.status_code").is_none());
    assert_eq!(
        first.end_time_unix_nano - first.start_time_unix_nano,
        3_000_000
    );
    assert_eq!(second.span_id, retry_id.to_vec());
    assert_eq!(int(second, "server.port"), 8082);
    assert_eq!(int(second, "hopgate.attempt"), 2);
    assert_eq!(int(second, "http.request.resend_count"), 1);
    assert_eq!(int(second, "http.response.status_code"), 200);
    assert!(second.status.is_none());
}

#[test]
fn failures_mark_the_server_span_and_started_traces_have_no_parent() {
    let snap = snapshot();
    let mut rec = record(&snap);
    rec.parent = None;
    rec.attempts.clear();
    let end = rec.end.as_mut().unwrap();
    end.status = 504;
    end.error = Some(ErrorKind::UpstreamTimeout);
    let (bytes, n) = encode(&[rec], &Origin { service_name: "x" });
    assert_eq!(n, 1);
    let req = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
    let server = &req.resource_spans[0].scope_spans[0].spans[0];
    assert!(server.parent_span_id.is_empty());
    assert_eq!(server.flags, 0x101);
    assert_eq!(
        text(server, "error.type"),
        ErrorKind::UpstreamTimeout.label()
    );
    assert_eq!(int(server, "http.response.status_code"), 504);
    assert_eq!(server.status.as_ref().unwrap().code, proto::STATUS_ERROR);
    // A record that never ended (cannot happen) encodes to nothing.
    let mut open = record(&snap);
    open.end = None;
    assert_eq!(encode(&[open], &Origin { service_name: "x" }).1, 0);
}

#[test]
fn a_full_queue_drops_and_counts_without_waiting() {
    let snap = snapshot();
    let (ex, mut woken) = Exporter::new(2, 2);
    let before = counters().spans_dropped;
    for _ in 0..5 {
        ex.hand(record(&snap));
    }
    assert_eq!(ex.queue.load().len(), 2);
    // The second record filled a batch: the task was woken, once.
    assert!(woken.try_recv().is_ok());
    assert!(woken.try_recv().is_err());
    // Three records of three spans each were dropped (other tests may
    // drop too, concurrently: at least).
    assert!(counters().spans_dropped - before >= 9);
    let mut text = String::new();
    render_metrics(&mut text);
    assert!(text.contains("# TYPE hopgate_otlp_spans_dropped_total counter\n"));
    assert!(text.contains("hopgate_otlp_batches_total{result=\"failed\"} "));
}

/// A route with filters names them in order (`hopgate.filters`); a path a
/// filter rewrote is `hopgate.rewritten_path` while `url.path` stays the
/// client's; a route without filters has neither.
#[test]
fn filters_and_the_rewritten_path_are_span_attributes() {
    let snap = Arc::new(Snapshot::compile(
        Arc::new(
            hopgate_core::config::load(
                "listeners:\n  - { name: p, address: 127.0.0.1:8080 }\nservices:\n  - name: api\n    nodes:\n      - { id: n1, address: 127.0.0.1:8081 }\nroutes:\n  - id: r1\n    match: { path_prefix: /orders }\n    service: api\n    filters:\n      - request_headers: { set: { X-A: '1' } }\n      - url_rewrite: { path: { replace_prefix: /v2/orders } }\n      - response_headers: { remove: [Server] }\n  - { id: plain, service: api }\n",
                hopgate_core::config::Format::Yaml,
            )
            .unwrap(),
        ),
        2,
        &crate::NodeRegistry::default(),
        None,
    ));
    let server_of = |rec: Box<Span>| {
        let (bytes, _) = encode(&[rec], &Origin { service_name: "x" });
        let req = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        req.resource_spans[0].scope_spans[0].spans[0].clone()
    };
    let mut rec = record(&snap);
    rec.rewritten_path = Some("/v2/orders/7".into());
    let server = server_of(rec);
    assert_eq!(text(&server, "url.path"), "/orders/7");
    assert_eq!(text(&server, "hopgate.rewritten_path"), "/v2/orders/7");
    assert_eq!(
        text(&server, "hopgate.filters"),
        "request_headers,url_rewrite,response_headers"
    );
    let mut plain = record(&snap);
    plain.end.as_mut().unwrap().route = Some(1);
    let server = server_of(plain);
    assert_eq!(text(&server, "http.route"), "plain");
    assert!(attr(&server, "hopgate.filters").is_none());
    assert!(attr(&server, "hopgate.rewritten_path").is_none());
}
