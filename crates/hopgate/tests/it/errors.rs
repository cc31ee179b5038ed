//! Errors a user can act on: each limit and failure gets its status and a
//! short body naming the reason and the request id; nothing panics.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{client, config, dead_addr, node_of, service, Backend, Gateway};

async fn expect_error(resp: reqwest::Response, status: u16, reason: &str) {
    assert_eq!(resp.status().as_u16(), status);
    let id = resp
        .headers()
        .get("x-request-id")
        .expect("error answers carry the request id")
        .to_str()
        .unwrap()
        .to_owned();
    let text = resp.text().await.unwrap();
    assert!(
        text.contains(reason),
        "{status}: {text:?} should name {reason:?}"
    );
    assert!(
        text.contains(&id),
        "{status}: {text:?} should name request id {id}"
    );
}

#[tokio::test]
async fn limits_and_failures() {
    let b = Backend::start("n1").await;
    let dead = dead_addr();
    let services = format!(
        "{}{}",
        service("live", &[("n1", b.addr, "")]),
        service("dead", &[("gone", dead, "")])
    );
    let routes = r#"
  - { id: dead, match: { path_prefix: /dead }, service: dead }
  - { id: live, match: { host: live.test }, service: live }
"#;
    let yaml = format!(
        "{}limits: {{ max_header_bytes: 8KiB, max_headers: 30, max_uri_bytes: 1KiB, max_body_bytes: 1KiB }}\n",
        config(&services, routes).replace("timeouts: { shutdown: 10s }", "timeouts: { shutdown: 10s, request: 1s }")
    );
    let gw = Gateway::start(&yaml).await;
    let c = client();

    // No rule matches: 404.
    expect_error(
        c.get(gw.url("/nothing")).send().await.unwrap(),
        404,
        "no route",
    )
    .await;
    // A dead backend: 502 after trying, with a clear body.
    expect_error(
        c.get(gw.url("/dead")).send().await.unwrap(),
        502,
        "could not connect",
    )
    .await;
    // A slow backend: 504.
    expect_error(
        c.get(gw.url("/slow?sleep_ms=3000"))
            .header("host", "live.test")
            .send()
            .await
            .unwrap(),
        504,
        "did not answer in time",
    )
    .await;
    // URI too long: 414.
    let long = format!("/{}", "a".repeat(2000));
    expect_error(
        c.get(gw.url(&long))
            .header("host", "live.test")
            .send()
            .await
            .unwrap(),
        414,
        "URI too long",
    )
    .await;
    // Too many headers: 431.
    let mut req = c.get(gw.url("/")).header("host", "live.test");
    for i in 0..40 {
        req = req.header(format!("x-h{i}"), "v");
    }
    expect_error(req.send().await.unwrap(), 431, "headers too large").await;
    // Declared body too large: 413.
    expect_error(
        c.post(gw.url("/"))
            .header("host", "live.test")
            .body(vec![0u8; 4096])
            .send()
            .await
            .unwrap(),
        413,
        "body too large",
    )
    .await;
    // A chunked body that grows past the limit: 413 too.
    let chunk = bytes::Bytes::from(vec![1u8; 512]);
    let stream =
        futures_util::stream::iter((0..8).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let resp = c
        .post(gw.url("/"))
        .header("host", "live.test")
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await;
    match resp {
        Ok(r) => expect_error(r, 413, "body too large").await,
        // The gateway may close the connection while the client still sends.
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }

    // Header bytes over the limit: 431 with a body naming the reason.
    let r = c
        .get(gw.url("/"))
        .header("host", "live.test")
        .header("x-big", "b".repeat(9000))
        .send()
        .await
        .unwrap();
    expect_error(r, 431, "headers too large").await;
    // Far over it, hyper's parser answers 431 itself.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let big = format!(
        "GET / HTTP/1.1\r\nHost: live.test\r\nX-Big: {}\r\n\r\n",
        "b".repeat(20_000)
    );
    let _ = s.write_all(big.as_bytes()).await;
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 431"), "{head:?}");

    // Malformed requests get 400 and the gateway keeps serving.
    for garbage in [
        &b"BLAH\r\n\r\n"[..],
        &b"GET / HTTP/1.1\r\nHost: live.test\r\nBad Header\r\n\r\n"[..],
        &b"GET / HTTP/9.9\r\n\r\n"[..],
        &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
    ] {
        let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let _ = s.write_all(garbage).await;
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap_or(0);
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(
            n == 0 || head.starts_with("HTTP/1.1 4"),
            "{garbage:?} → {head:?}"
        );
    }
    let ok = c
        .get(gw.url("/"))
        .header("host", "live.test")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert!(!gw.logs().contains("panicked"), "no worker panicked");
}

#[tokio::test]
async fn access_denied_and_no_live_node() {
    let b = Backend::start("n1").await;
    let svc = service("svc", &[("n1", b.addr, "")]);
    let routes = "  - { id: all, match: { path_prefix: / }, service: svc }";
    let yaml = format!(
        "{}access: {{ deny_cidrs: [127.0.0.0/8] }}\n",
        config(&svc, routes)
    );
    let gw = Gateway::start(&yaml).await;
    expect_error(
        client().get(gw.url("/")).send().await.unwrap(),
        403,
        "not allowed",
    )
    .await;
    drop(gw);

    let gw = Gateway::start(&config(&svc, routes)).await;
    let c = client();
    c.post(gw.admin_url("/admin/v1/nodes/svc/n1/drain"))
        .send()
        .await
        .unwrap();
    expect_error(
        c.get(gw.url("/")).send().await.unwrap(),
        503,
        "no live node",
    )
    .await;
}

#[tokio::test]
async fn dead_node_is_retried_on_a_live_one() {
    let b = Backend::start("live").await;
    let svc = service("svc", &[("gone", dead_addr(), ""), ("live", b.addr, "")]);
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    let c = client();
    for _ in 0..10 {
        // POST without Idempotency-Key is safe to retry: it never reached the dead node.
        let r = c.post(gw.url("/x")).body("data").send().await.unwrap();
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["node"], "live");
        assert_eq!(v["body_bytes"], 4);
    }
}

/// A node that reads each request head and closes the connection without
/// an answer: a request sent to it "may have reached" it. An idempotent
/// request is replayed on the other node from the head the failed send
/// handed back (with that node's own `X-Upstream-Addr`, and nothing of
/// the first attempt's node); a POST without `Idempotency-Key` is not,
/// and gets a 502.
#[tokio::test]
async fn a_request_sent_and_unanswered_is_replayed_only_when_idempotent() {
    let swallow = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let swallow_addr = swallow.local_addr().unwrap();
    let swallowed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&swallowed);
    let swallower = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = swallow.accept().await else {
                return;
            };
            let count = std::sync::Arc::clone(&count);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                // Closed with the request read and unanswered.
            });
        }
    });
    let b = Backend::start("live").await;
    // No outlier ejection or breaker in the way: each request starts on
    // the next node of the ring.
    let svc = service("svc", &[("swallow", swallow_addr, ""), ("live", b.addr, "")])
        + "    lb: wrr_ring\n    outlier: { consecutive_failures: 0, consecutive_5xx: 0 }\n    circuit: { enabled: false }\n";
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    let c = client();
    for i in 0..6 {
        let r = c
            .get(gw.url(&format!("/r{i}")))
            .header("x-mine", "kept")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET {i}");
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["node"], "live");
        assert_eq!(v["path"], format!("/r{i}"));
        assert_eq!(v["upstream_addr"], b.addr.to_string());
        assert_eq!(v["headers"]["x-mine"], "kept");
        assert!(v["hop_from"].is_null(), "{v}");
    }
    let replayed = swallowed.load(std::sync::atomic::Ordering::SeqCst);
    assert!(replayed >= 1, "no GET was sent to the swallowing node");
    let mut refused = 0;
    for _ in 0..6 {
        let r = c.post(gw.url("/p")).body("data").send().await.unwrap();
        match r.status().as_u16() {
            200 => assert_eq!(node_of(r).await, "live"),
            502 => refused += 1,
            other => panic!("POST answered {other}"),
        }
    }
    assert!(refused >= 1, "no POST met the swallowing node");
    swallower.abort();
}

#[tokio::test]
async fn grpc_timeout_bounds_the_wait_and_errors_are_grpc_statuses() {
    let b = Backend::start("n1").await;
    let svc = service("svc", &[("n1", b.addr, "")]).replacen(
        "  - name: svc\n",
        "  - name: svc\n    protocol: http2\n",
        1,
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    let c = crate::harness::h2_client();
    // The backend ignores grpc-timeout; the gateway does not.
    let r = c
        .post(gw.url("/pkg.Svc/Slow?sleep_ms=5000"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "300m")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        200,
        "gRPC errors travel as statuses, not HTTP errors"
    );
    assert_eq!(r.headers()["grpc-status"], "4", "DEADLINE_EXCEEDED");
    // Counted by the gateway's status (504), as the access log shows it,
    // not as the HTTP 200 the status travels in.
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_responses_total{class=\"5xx\"} 1\n")
            && m.contains("hopgate_responses_total{class=\"2xx\"} 0\n"),
        "{m}"
    );
    // A gRPC call with no route: UNIMPLEMENTED, not a text 404.
    drop(gw);
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: only, match: { path_prefix: /other }, service: svc }",
    ))
    .await;
    let r = c
        .post(gw.url("/pkg.Svc/Call"))
        .header("content-type", "application/grpc")
        .body(vec![0u8, 0, 0, 0, 0])
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["grpc-status"], "12");
}
