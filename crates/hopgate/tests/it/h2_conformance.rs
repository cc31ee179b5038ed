//! HTTP/2 abuse from a stack nobody here wrote: the python `h2`,
//! `hyperframe` and `hpack` packages (`tests/it/py/h2_abuse.py`) send rapid
//! resets, CONTINUATION floods, SETTINGS and PING floods, oversized header
//! lists and too many concurrent streams. Each case must be answered in a
//! bounded way (its stream refused, or its connection ended), the gateway's
//! memory must stay bounded, and a well-behaved client on a fresh
//! connection must be served right after every case.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::harness::{service, Backend, Gateway};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/h2_abuse.py");

async fn run(case: &str, addr: &str, extra: &[&str]) -> Value {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new("python3")
            .arg(SCRIPT)
            .arg(case)
            .arg(addr)
            .args(extra)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{case}: the abusive client hung"))
    .expect("python3 with the h2 package (pip install h2) runs the abuse script");
    assert!(
        out.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["after"], 200,
        "{case}: a well-behaved client was not served afterwards: {v}"
    );
    v["seen"].clone()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn hostile_http2_clients_are_bounded_and_others_keep_being_served() {
    let b = Backend::start("n1").await;
    let yaml = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\nservices:\n{}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        service("app", &[("n1", b.addr, "")])
    );
    let gw = Gateway::start(&yaml).await;
    let addr = gw.addr.to_string();
    let pid = gw.pid().unwrap();
    let rss_before = rss_kib(pid);

    // CVE-2023-44487: the connection is told to go away (ENHANCE_YOUR_CALM)
    // long before the 20,000 resets are all sent.
    let seen = run("rapid_reset", &addr, &[]).await;
    assert!(
        seen["goaway"] == 11 || seen["closed"] == true,
        "rapid reset: {seen}"
    );

    // CONTINUATION without end: the connection ends, memory stays bounded.
    let seen = run("continuation_flood", &addr, &[]).await;
    assert!(
        !seen["goaway"].is_null() || seen["closed"] == true,
        "continuation flood: {seen}"
    );

    // SETTINGS and PING floods are answered (or cut) without growing.
    run("settings_flood", &addr, &[]).await;
    run("ping_flood", &addr, &[]).await;

    // A header list between the limit (16 KiB) and 4× it: that stream gets
    // 431, the next stream on the same connection is served.
    let seen = run("oversized_headers", &addr, &["40000"]).await;
    assert_eq!(seen["stream1"], 431, "oversized header list: {seen}");
    assert_eq!(
        seen["stream3"], 200,
        "the connection died with the oversized stream: {seen}"
    );
    assert!(seen["goaway"].is_null(), "{seen}");
    // Far above it: the connection is ended, nothing is buffered without
    // bound.
    let seen = run("oversized_headers", &addr, &["400000"]).await;
    assert!(
        !seen["goaway"].is_null() || seen["stream1"] == 431,
        "{seen}"
    );

    // 1,000 concurrent streams: beyond the advertised limit they are
    // refused with REFUSED_STREAM (7).
    let seen = run("stream_limit", &addr, &["/?sleep_ms=300"]).await;
    let refused = seen["rst"].as_array().unwrap().iter().any(|c| c == 7);
    assert!(refused || !seen["goaway"].is_null(), "stream limit: {seen}");

    let grown = rss_kib(pid).saturating_sub(rss_before);
    assert!(
        grown < 64 * 1024,
        "the gateway grew by {grown} KiB under HTTP/2 abuse"
    );
}

/// A client that opens a stream with a zero flow-control window and never
/// opens it, on a large response: within the send stall limit
/// (`timeouts.idle`, 1 s here) the gateway releases the upstream (the
/// backend's request ends, the pool keeps no busy connection), counts a
/// client error and closes that client's connection; other clients are
/// served meanwhile and afterwards.
#[tokio::test]
async fn a_zero_window_stream_releases_its_upstream_within_the_stall_limit() {
    let b = Backend::start("n1").await;
    let yaml = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ idle: 1s }}\nservices:\n{}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        service("app", &[("n1", b.addr, "")])
    );
    let gw = Gateway::start(&yaml).await;
    let addr = gw.addr.to_string();
    // 50 MiB: far more than any socket buffer between the three of them.
    let stalled = {
        let addr = addr.clone();
        tokio::spawn(async move { run("zero_window", &addr, &["/big?bytes=52428800"]).await })
    };
    // While it stalls, another client is served.
    let c = crate::harness::client();
    for _ in 0..3 {
        let r = c.get(gw.url("/other")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let seen = stalled.await.unwrap();
    assert_eq!(seen["closed"], true, "the stalled stream was kept: {seen}");
    let elapsed = seen["elapsed"].as_f64().unwrap();
    assert!(
        elapsed < 15.0,
        "the stalled stream was kept {elapsed} s (limit 1 s): {seen}"
    );
    // The backend's request ended: the gateway let go of its connection.
    let mut in_flight = serde_json::Value::Null;
    for _ in 0..200 {
        let stats: Value = c
            .get(b.url("/control/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        in_flight = stats["in_flight"].clone();
        if in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(in_flight, 0, "the backend still serves the stalled request");
    let nodes = gw.admin_json("/admin/v1/nodes").await;
    let pool = &nodes["nodes"][0]["pool"];
    assert_eq!(
        pool["open"], pool["idle"],
        "a pooled connection is still busy: {pool}"
    );
    assert_eq!(
        nodes["nodes"][0]["failures"], 0,
        "charged to the node: {nodes}"
    );
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_client_errors_total{kind=\"client_stalled\"} 1"),
        "{m}"
    );
}

/// The stall limit is kept by one sweep per client connection: a
/// connection that was served a few responses first (the sweep already
/// sleeping on its schedule) and then stops granting window on a large one
/// is still closed within the limit, its upstream released and the stall
/// counted once.
#[tokio::test]
async fn a_stream_stalling_after_others_were_served_is_still_cut() {
    let b = Backend::start("n1").await;
    let yaml = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ idle: 1s }}\nservices:\n{}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        service("app", &[("n1", b.addr, "")])
    );
    let gw = Gateway::start(&yaml).await;
    let seen = run(
        "stall_after_served",
        &gw.addr.to_string(),
        &["/big?bytes=52428800"],
    )
    .await;
    assert_eq!(seen["served"], 3, "the small responses: {seen}");
    assert_eq!(seen["closed"], true, "the stalled stream was kept: {seen}");
    let elapsed = seen["elapsed"].as_f64().unwrap();
    assert!(
        elapsed < 15.0,
        "the stalled stream was kept {elapsed} s (limit 1 s): {seen}"
    );
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_client_errors_total{kind=\"client_stalled\"} 1"),
        "{m}"
    );
}
