//! The transparency matrix: the same requests directly against a backend
//! and through hopgate must give the same status, body and headers (apart
//! from the ones hopgate adds), over HTTP/1.1 and h2c.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{client, config, h2_client, service, Backend, Gateway};

/// Headers that legitimately differ between a direct and a proxied answer.
const VARYING: &[&str] = &["date", "x-upstream-addr", "x-route-rule-id"];

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

async fn fetch(c: &reqwest::Client, method: &str, url: &str, body: Option<Vec<u8>>) -> Answer {
    let mut req = c.request(method.parse().unwrap(), url);
    if let Some(b) = body {
        req = req.body(b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(k, _)| !VARYING.contains(&k.as_str()))
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or("<bin>").to_owned(),
            )
        })
        .collect();
    headers.sort();
    let body = resp.bytes().await.unwrap().to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

async fn setup() -> (Backend, Gateway) {
    setup_with("").await
}

async fn setup_with(extra: &str) -> (Backend, Gateway) {
    let b = Backend::start("t1").await;
    let svc = service("svc", &[("t1", b.addr, "")]);
    let yaml = config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ) + extra;
    let gw = Gateway::start(&yaml).await;
    (b, gw)
}

fn cases() -> Vec<(&'static str, String, Option<Vec<u8>>)> {
    let many_headers: String = (0..60)
        .map(|i| format!("&header=X-H{i}:value-{i}"))
        .collect();
    vec![
        ("GET", "/t?bytes=1000".into(), None),
        ("GET", "/t?bytes=0".into(), None),
        ("GET", "/t?bytes=300000&chunked=1".into(), None),
        ("GET", "/t?bytes=4000000".into(), None),
        ("HEAD", "/t?bytes=1000".into(), None),
        ("GET", "/t?status=204".into(), None),
        ("GET", "/t?status=304".into(), None),
        ("GET", "/t?status=418&bytes=10".into(), None),
        ("GET", "/t?status=503&bytes=10".into(), None),
        ("GET", format!("/t?bytes=5{many_headers}"), None),
        ("POST", "/t?echo=1".into(), Some(vec![b'x'; 2_000_000])),
        ("PUT", "/t?echo=1".into(), Some(b"small body".to_vec())),
        ("DELETE", "/t?bytes=3".into(), None),
        ("OPTIONS", "/t?bytes=3".into(), None),
    ]
}

async fn compare(c: &reqwest::Client, b: &Backend, gw: &Gateway, label: &str) {
    for (method, path, body) in cases() {
        let direct = fetch(c, method, &b.url(&path), body.clone()).await;
        let proxied = fetch(c, method, &gw.url(&path), body).await;
        assert_eq!(
            direct.status, proxied.status,
            "{label} {method} {path}: status"
        );
        assert_eq!(
            direct.headers, proxied.headers,
            "{label} {method} {path}: headers"
        );
        assert!(
            direct.body == proxied.body,
            "{label} {method} {path}: body differs ({} vs {} bytes)",
            direct.body.len(),
            proxied.body.len()
        );
    }
}

#[tokio::test]
async fn http1_matches_direct() {
    let (b, gw) = setup().await;
    compare(&client(), &b, &gw, "h1").await;
}

#[tokio::test]
async fn h2c_matches_direct() {
    let (b, gw) = setup().await;
    compare(&h2_client(), &b, &gw, "h2c").await;
}

#[tokio::test]
async fn hundred_mib_streams_both_ways() {
    let (_b, gw) = setup_with("limits: { max_body_bytes: 200MiB }\n").await;
    let c = client();
    // Download: 100 MiB, counted as it arrives.
    let resp = c.get(gw.url("/big?bytes=104857600")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        total += chunk.unwrap().len() as u64;
    }
    assert_eq!(total, 104_857_600);
    // Upload: 100 MiB generated on the fly; the backend counts and hashes it.
    let chunk = bytes::Bytes::from(vec![7u8; 1 << 20]);
    let body =
        futures_util::stream::iter((0..100).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let resp = c
        .post(gw.url("/upload"))
        .body(reqwest::Body::wrap_stream(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["body_bytes"], 104_857_600u64);
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", gw_pid(&gw))).unwrap_or_default();
    let hwm_kib: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(hwm_kib > 0, "read the gateway's peak RSS");
    assert!(
        hwm_kib < 64 * 1024,
        "the gateway buffered a body: peak RSS {hwm_kib} KiB"
    );
}

fn gw_pid(gw: &Gateway) -> u32 {
    gw.pid().expect("gateway running")
}

#[tokio::test]
async fn expect_100_continue() {
    let (b, gw) = setup().await;
    for addr in [b.addr, gw.addr] {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            b"POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("an interim answer")
            .unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(head.starts_with("HTTP/1.1 100 Continue"), "{addr}: {head}");
        s.write_all(b"hello").await.unwrap();
        let mut all = Vec::new();
        let mut saw_final = false;
        while !saw_final {
            let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
                .await
                .expect("a final answer")
                .unwrap();
            assert!(n > 0, "connection closed early");
            all.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&all);
            saw_final = text.contains("HTTP/1.1 200 OK") && text.contains("\"body_bytes\":5");
        }
    }
}
