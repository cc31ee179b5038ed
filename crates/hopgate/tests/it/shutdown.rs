//! Graceful shutdown: SIGTERM stops accepting and lets in-flight requests
//! finish.

use std::time::Duration;

use crate::harness::{client, config, service, within, Backend, Gateway};

#[tokio::test]
async fn sigterm_lets_a_slow_request_finish() {
    let b = Backend::start("n1").await;
    let svc = service("svc", &[("n1", b.addr, "")]);
    let mut gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    let c = client();
    let url = gw.url("/slow?sleep_ms=1500");
    let slow = tokio::spawn(async move { c.get(url).send().await });
    // Let the request reach the backend before signalling.
    let seen = client();
    loop {
        let v: serde_json::Value = seen
            .get(b.url("/control/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["in_flight"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.sigterm();
    let resp = slow
        .await
        .unwrap()
        .expect("the in-flight request completes");
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["node"], "n1");
    assert_eq!(gw.wait().await, Some(0), "clean exit after draining");
    // Nothing listens any more.
    assert!(tokio::net::TcpStream::connect(gw.addr).await.is_err());
}

#[tokio::test]
async fn readyz_turns_503_while_in_flight_work_drains() {
    let b = Backend::start("n1").await;
    let svc = service("svc", &[("n1", b.addr, "")]);
    let mut gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    let c = client();
    assert_eq!(
        c.get(gw.admin_url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let url = gw.url("/slow?sleep_ms=1500");
    let slow = tokio::spawn(async move { client().get(url).send().await });
    loop {
        let v: serde_json::Value = c
            .get(b.url("/control/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["in_flight"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.sigterm();
    let mut saw_503 = false;
    for _ in 0..50 {
        // A fresh connection each time: the admin listener still accepts.
        if let Ok(r) = client().get(gw.admin_url("/readyz")).send().await {
            if r.status() == 503 {
                saw_503 = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_503, "load balancers see the gateway going away");
    assert_eq!(slow.await.unwrap().unwrap().status(), 200);
    assert_eq!(gw.wait().await, Some(0));
}

/// With `timeouts.shutdown_delay`, a SIGTERM first only turns `/readyz` to
/// 503: the listeners keep accepting and serving, so a load balancer that
/// polls `/readyz` stops sending before anything is refused. A second
/// signal skips the rest of the delay.
#[tokio::test]
async fn shutdown_delay_keeps_serving_while_readyz_says_503() {
    let b = Backend::start("n1").await;
    let svc = service("svc", &[("n1", b.addr, "")]);
    let yaml = config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    )
    .replace(
        "timeouts: { shutdown: 10s }",
        "timeouts: { shutdown: 10s, shutdown_delay: 1h }",
    );
    let mut gw = Gateway::start(&yaml).await;
    gw.sigterm();
    let mut saw_503 = false;
    for _ in 0..250 {
        if let Ok(r) = client().get(gw.admin_url("/readyz")).send().await {
            if r.status() == 503 {
                saw_503 = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_503, "readyz never turned 503; logs:\n{}", gw.logs());
    // New connections are still accepted and served during the delay.
    for _ in 0..3 {
        let r = client().get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // The second-signal handler is in place once the delay is announced.
    within(Duration::from_secs(10), || async {
        gw.logs().contains("/readyz answers 503")
    })
    .await;
    // The second signal ends the (hour-long) delay; the exit is clean.
    gw.sigterm();
    assert_eq!(gw.wait().await, Some(0), "logs:\n{}", gw.logs());
}
