//! Span export over OTLP/HTTP (`tracing.otlp`), checked by a third-party
//! receiver: `tests/it/py/otlp_receiver.py` decodes what the gateway posts
//! with the official OpenTelemetry protobuf bindings and writes the spans
//! as JSON lines. The backend echoes the `traceparent` it received, so a
//! test can tie the gateway's CLIENT span to what the backend saw.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{client, config, dead_addr, json, service, temp_path, Backend, Gateway};

const RECEIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/otlp_receiver.py");

/// A client's sampled trace.
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The receiver child and the file it writes; both removed on drop.
struct Receiver {
    _child: Child,
    port: u16,
    out: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.out);
    }
}

impl Receiver {
    async fn start() -> Receiver {
        let out = temp_path("spans.jsonl");
        let mut child = Command::new("python3")
            .arg(RECEIVER)
            .arg(&out)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 (with opentelemetry-proto: pip install opentelemetry-proto) runs the receiver");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the OTLP receiver did not start")
            .unwrap()
            .expect("the OTLP receiver printed nothing (is opentelemetry-proto installed?)");
        let port = line.strip_prefix("port ").unwrap().trim().parse().unwrap();
        Receiver {
            _child: child,
            port,
            out,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/v1/traces", self.port)
    }

    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits (bounded) until `n` spans of `trace` arrived; all of that
    /// trace's spans.
    async fn trace(&self, trace: &str, n: usize) -> Vec<Value> {
        for _ in 0..400 {
            let got: Vec<Value> = self
                .spans()
                .into_iter()
                .filter(|s| s["trace_id"] == trace)
                .collect();
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "fewer than {n} spans of trace {trace} arrived; all spans: {:?}",
            self.spans()
        );
    }
}

fn gateway_config(b: &Backend, otlp: &str) -> String {
    let mut c = config(
        &service("svc", &[("n1", b.addr, "")]),
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    );
    c.push_str(&format!("tracing:\n  otlp: {otlp}\n"));
    c
}

fn kind<'a>(spans: &'a [Value], k: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["kind"] == k).collect()
}

/// The traceparent the backend received.
fn seen(doc: &Value) -> String {
    doc["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent reached the backend: {doc}"))
        .to_owned()
}

#[tokio::test]
async fn spans_join_the_client_trace_and_the_backend_hangs_under_the_client_span() {
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    let gw = Gateway::start(&gateway_config(
        &b,
        &format!(
            "{{ enabled: true, endpoint: \"{}\", service_name: edge-gw, interval: 50ms, headers: {{ X-Api-Key: k1 }} }}",
            rx.endpoint()
        ),
    ))
    .await;
    let r = client()
        .get(gw.url("/orders/7?x=1"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .header("tracestate", "vendor=kept")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let doc = json(r).await;
    let sent = seen(&doc);
    assert_eq!(&sent[3..35], TRACE, "{sent}");
    assert!(sent.ends_with("-01"), "{sent}");
    let upstream_parent = &sent[36..52];
    assert_ne!(upstream_parent, CLIENT_SPAN);

    let spans = rx.trace(TRACE, 2).await;
    assert_eq!(spans.len(), 2, "{spans:?}");
    let server = kind(&spans, "SERVER")[0];
    let client_span = kind(&spans, "CLIENT")[0];
    // The SERVER span is the client's span's child...
    assert_eq!(server["parent_span_id"], CLIENT_SPAN, "{server}");
    assert_eq!(server["name"], "GET all");
    assert_eq!(server["service"], "edge-gw");
    assert_eq!(server["content_type"], "application/x-protobuf");
    assert_eq!(server["api_key"], "k1");
    assert_eq!(server["path"], "/v1/traces");
    let a = &server["attributes"];
    assert_eq!(a["http.request.method"], "GET");
    assert_eq!(a["url.path"], "/orders/7");
    assert_eq!(a["url.query"], "x=1");
    assert_eq!(a["url.scheme"], "http");
    assert_eq!(a["server.address"], "127.0.0.1");
    assert_eq!(a["server.port"], i64::from(gw.addr.port()));
    assert_eq!(a["client.address"], "127.0.0.1");
    assert_eq!(a["http.response.status_code"], 200);
    assert_eq!(a["http.route"], "all");
    assert_eq!(a["hopgate.service"], "svc");
    assert!(a.get("error.type").is_none(), "{a}");
    // ...and the CLIENT span is the very parent the backend was given.
    assert_eq!(client_span["span_id"], upstream_parent, "{client_span}");
    assert_eq!(client_span["parent_span_id"], server["span_id"]);
    assert_eq!(client_span["name"], "GET");
    let c = &client_span["attributes"];
    assert_eq!(c["server.address"], "127.0.0.1");
    assert_eq!(c["server.port"], i64::from(b.addr.port()));
    assert_eq!(c["http.response.status_code"], 200);
    assert_eq!(c["hopgate.attempt"], 1);
    assert_eq!(c["hopgate.node"], "n1");
    // The attempt lies within the request.
    let (s0, s1) = (
        server["start"].as_u64().unwrap(),
        server["end"].as_u64().unwrap(),
    );
    let (c0, c1) = (
        client_span["start"].as_u64().unwrap(),
        client_span["end"].as_u64().unwrap(),
    );
    assert!(s0 <= c0 && c0 <= c1 && c1 <= s1, "{server} {client_span}");

    // No traceparent: the gateway starts a sampled trace (ratio 1).
    let r = client().get(gw.url("/fresh")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let sent = seen(&json(r).await);
    assert!(
        sent.ends_with("-01"),
        "a recorded trace is sent sampled: {sent}"
    );
    let spans = rx.trace(&sent[3..35], 2).await;
    let server = kind(&spans, "SERVER")[0];
    assert_eq!(
        server["parent_span_id"], "",
        "a started trace has no parent"
    );
    assert_eq!(kind(&spans, "CLIENT")[0]["span_id"], &sent[36..52]);
}

#[tokio::test]
async fn a_failed_request_marks_its_spans_with_the_error() {
    let rx = Receiver::start().await;
    let dead = dead_addr();
    let mut c = config(
        &service("svc", &[("gone", dead, "")]),
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    );
    c.push_str(&format!(
        "retries: {{ attempts: 1 }}\ntracing:\n  otlp: {{ enabled: true, endpoint: \"{}\", interval: 50ms }}\n",
        rx.endpoint()
    ));
    let gw = Gateway::start(&c).await;
    let r = client()
        .get(gw.url("/x"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_server_error(), "{}", r.status());
    let status = i64::from(r.status().as_u16());
    let spans = rx.trace(TRACE, 2).await;
    let server = kind(&spans, "SERVER")[0];
    assert_eq!(server["attributes"]["http.response.status_code"], status);
    assert!(server["attributes"]["error.type"].is_string(), "{server}");
    assert_eq!(server["status"], 2, "STATUS_CODE_ERROR: {server}");
    let attempt = kind(&spans, "CLIENT")[0];
    assert_eq!(attempt["attributes"]["server.port"], i64::from(dead.port()));
    assert!(attempt["attributes"]["error.type"].is_string(), "{attempt}");
    assert!(attempt["attributes"]
        .get("http.response.status_code")
        .is_none());
}

#[tokio::test]
async fn a_retry_has_its_own_client_span_and_the_backend_hangs_under_it() {
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    let dead = dead_addr();
    let mut c = config(
        &service("svc", &[("gone", dead, ""), ("n1", b.addr, "")]),
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    );
    c.push_str(&format!(
        "retries: {{ attempts: 3 }}\ntracing:\n  otlp: {{ enabled: true, endpoint: \"{}\", interval: 50ms }}\n",
        rx.endpoint()
    ));
    let gw = Gateway::start(&c).await;
    let http = client();
    // The balancer alternates: within a few requests one tries the dead
    // node first and is retried on n1.
    for i in 1..=20u32 {
        let trace = format!("{:032x}", 0xabc0_0000 + i);
        let r = http
            .get(gw.url("/retry"))
            .header("traceparent", format!("00-{trace}-{CLIENT_SPAN}-01"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let sent = seen(&json(r).await);
        let spans = rx.trace(&trace, 2).await;
        let mut attempts = kind(&spans, "CLIENT");
        if attempts.len() < 2 {
            continue;
        }
        attempts.sort_by_key(|s| s["attributes"]["hopgate.attempt"].as_i64());
        let server = kind(&spans, "SERVER")[0];
        let (first, retry) = (attempts[0], attempts[1]);
        assert_eq!(first["attributes"]["server.port"], i64::from(dead.port()));
        assert!(first["attributes"]["error.type"].is_string(), "{first}");
        assert_eq!(retry["attributes"]["hopgate.attempt"], 2);
        assert_eq!(retry["attributes"]["http.request.resend_count"], 1);
        assert_eq!(retry["attributes"]["server.port"], i64::from(b.addr.port()));
        assert_eq!(retry["attributes"]["http.response.status_code"], 200);
        // The backend got the retry's own id; each attempt has its own.
        assert_eq!(retry["span_id"], &sent[36..52], "{retry}");
        assert_ne!(first["span_id"], retry["span_id"]);
        for a in [first, retry] {
            assert_eq!(a["parent_span_id"], server["span_id"]);
        }
        assert_eq!(server["attributes"]["http.response.status_code"], 200);
        return;
    }
    panic!("no request was retried: {:?}", rx.spans());
}

#[tokio::test]
async fn sample_ratio_zero_records_only_traces_a_client_sampled() {
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    let gw = Gateway::start(&gateway_config(
        &b,
        &format!(
            "{{ enabled: true, endpoint: \"{}\", sample_ratio: 0, interval: 50ms }}",
            rx.endpoint()
        ),
    ))
    .await;
    let c = client();
    for i in 0..20 {
        let mut req = c.get(gw.url("/unsampled"));
        if i % 2 == 1 {
            // A client's trace with the sampled flag off.
            req = req.header("traceparent", format!("00-{:032x}-{CLIENT_SPAN}-00", i + 1));
        }
        let r = req.send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(seen(&json(r).await).ends_with("-00"));
    }
    // A client's sampled trace is recorded whatever the ratio: once its
    // spans are in, everything sent before them is too (one queue, in
    // order).
    let r = c
        .get(gw.url("/marker"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    rx.trace(TRACE, 2).await;
    let all = rx.spans();
    assert_eq!(all.len(), 2, "only the sampled trace: {all:?}");
}

#[tokio::test]
async fn disabled_sends_nothing_and_a_reload_turns_it_on() {
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    let off = gateway_config(
        &b,
        &format!(
            "{{ enabled: false, endpoint: \"{}\", interval: 50ms }}",
            rx.endpoint()
        ),
    );
    let gw = Gateway::start(&off).await;
    let c = client();
    for _ in 0..10 {
        let r = c
            .get(gw.url("/off"))
            .header("traceparent", format!("00-{:032x}-{CLIENT_SPAN}-01", 7))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Off, a trace the gateway starts is not sampled.
    let r = c.get(gw.url("/off")).send().await.unwrap();
    assert!(seen(&json(r).await).ends_with("-00"));
    let on = off.replace("enabled: false", "enabled: true");
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(on)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = c
        .get(gw.url("/on"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    rx.trace(TRACE, 2).await;
    let all = rx.spans();
    assert_eq!(all.len(), 2, "nothing from before the reload: {all:?}");
}

#[tokio::test]
async fn a_receiver_that_is_down_loses_no_request_and_the_failures_are_counted() {
    let b = Backend::start("n1").await;
    let gw = Gateway::start(&gateway_config(
        &b,
        &format!(
            "{{ enabled: true, endpoint: \"http://{}/v1/traces\", interval: 20ms, timeout: 1s, queue: 64, batch: 8 }}",
            dead_addr()
        ),
    ))
    .await;
    let c = client();
    let mut ok = 0;
    for _ in 0..300 {
        if c.get(gw.url("/")).send().await.unwrap().status() == 200 {
            ok += 1;
        }
    }
    assert_eq!(ok, 300, "every request is answered while export fails");
    let mut logs = String::new();
    for _ in 0..400 {
        logs = gw.logs();
        if logs.contains("OTLP export failed") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let line = logs
        .lines()
        .find(|l| l.contains("OTLP export failed"))
        .unwrap_or_else(|| panic!("no failed export logged:\n{logs}"));
    assert!(line.contains("batches_failed=1"), "{line}");
    assert!(line.contains("connect"), "{line}");
}

#[tokio::test]
async fn spans_queued_at_shutdown_are_flushed() {
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    // Batches would wait ten minutes: only the final flush sends these.
    let mut gw = Gateway::start(&gateway_config(
        &b,
        &format!(
            "{{ enabled: true, endpoint: \"{}\", interval: 10m }}",
            rx.endpoint()
        ),
    ))
    .await;
    let r = client()
        .get(gw.url("/last"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(rx.spans().is_empty());
    gw.sigterm();
    assert_eq!(gw.wait().await, Some(0));
    assert_eq!(rx.spans().len(), 2, "{:?}", rx.spans());
}

/// Behind an L4 balancer with the PROXY protocol, the span's
/// `client.address` is the client the header carries, not the balancer.
#[tokio::test]
async fn the_span_names_the_client_a_proxy_header_carries() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const TRACE_PP: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    let yaml = gateway_config(
        &b,
        &format!(
            "{{ enabled: true, endpoint: \"{}\", interval: 50ms }}",
            rx.endpoint()
        ),
    )
    .replace(
        "debug_headers: true }",
        "debug_headers: true, proxy_protocol: { trusted_cidrs: [127.0.0.0/8] } }",
    );
    assert!(yaml.contains("proxy_protocol"), "{yaml}");
    let gw = Gateway::start(&yaml).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let request = format!(
        "PROXY TCP4 203.0.113.9 192.0.2.200 5555 80\r\nGET /pp HTTP/1.1\r\nHost: pp.test\r\ntraceparent: 00-{TRACE_PP}-{CLIENT_SPAN}-01\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let spans = rx.trace(TRACE_PP, 2).await;
    let server = kind(&spans, "SERVER")[0];
    assert_eq!(
        server["attributes"]["client.address"], "203.0.113.9",
        "{server}"
    );
}

/// A route with filters: the SERVER span names them in order
/// (`hopgate.filters`), keeps the client's path in `url.path` and the path
/// the backend got in `hopgate.rewritten_path`.
#[tokio::test]
async fn a_rewritten_request_names_its_filters_and_both_paths() {
    let rx = Receiver::start().await;
    let b = Backend::start("n1").await;
    let mut c = config(
        &service("svc", &[("n1", b.addr, "")]),
        "  - id: rw\n    match: { path_prefix: /old }\n    service: svc\n    filters:\n      \
         - request_headers: { set: { X-A: '1' } }\n      \
         - url_rewrite: { path: { replace_prefix: /new } }\n",
    );
    c.push_str(&format!(
        "tracing:\n  otlp: {{ enabled: true, endpoint: \"{}\", interval: 50ms }}\n",
        rx.endpoint()
    ));
    let gw = Gateway::start(&c).await;
    let trace = "7a".repeat(16);
    let r = client()
        .get(gw.url("/old/orders?x=1"))
        .header("traceparent", format!("00-{trace}-{CLIENT_SPAN}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let doc = json(r).await;
    assert_eq!(doc["path"], "/new/orders", "{doc}");
    let spans = rx.trace(&trace, 2).await;
    let a = &kind(&spans, "SERVER")[0]["attributes"];
    assert_eq!(a["url.path"], "/old/orders", "{a}");
    assert_eq!(a["hopgate.rewritten_path"], "/new/orders", "{a}");
    assert_eq!(a["hopgate.filters"], "request_headers,url_rewrite", "{a}");
    assert_eq!(a["http.route"], "rw", "{a}");
}
