//! Balancing, health checks, circuit breaking, outlier ejection, retries —
//! and the headline: a rolling restart of every backend under load shows
//! clients no error for any request that could safely be served elsewhere.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{client, config, json, service, temp_path, within, Backend, Gateway};

async fn nodes(gw: &Gateway) -> HashMap<String, serde_json::Value> {
    let v: serde_json::Value = gw.admin_json("/admin/v1/nodes").await;
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap().to_owned(), n.clone()))
        .collect()
}

/// Polls `cond` on the admin view until it holds (bounded; not a timing assertion).
async fn wait_for_node(
    gw: &Gateway,
    id: &str,
    cond: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let (cond, found) = (&cond, &parking_lot::Mutex::new(None));
    let reached = within(Duration::from_secs(15), || async move {
        let n = nodes(gw).await.remove(id);
        let hit = n.as_ref().is_some_and(cond);
        *found.lock() = n;
        hit
    })
    .await;
    let last = found.lock().take();
    assert!(
        reached,
        "node {id} never reached the expected state: {last:?}"
    );
    last.unwrap_or_default()
}

#[tokio::test]
async fn health_checks_take_a_node_out_after_fall_and_back_after_rise() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]).replacen(
        "  - name: s\n",
        "  - name: s\n    health: { path: /health, interval: 100ms, timeout: 100ms, rise: 2, fall: 2 }\n",
        1,
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;
    let c = client();
    wait_for_node(&gw, "a", |n| n["health"] == "healthy").await;
    c.post(a.url("/control/health?ok=0")).send().await.unwrap();
    wait_for_node(&gw, "a", |n| n["health"] == "unhealthy").await;
    for _ in 0..10 {
        let v = json(c.get(gw.url("/")).send().await.unwrap()).await;
        assert_eq!(v["node"], "b", "an unhealthy node gets no traffic");
    }
    c.post(a.url("/control/health?ok=1")).send().await.unwrap();
    wait_for_node(&gw, "a", |n| n["health"] == "healthy").await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..10 {
        seen.insert(
            json(c.get(gw.url("/")).send().await.unwrap()).await["node"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert!(seen.contains("a"), "a is back in rotation: {seen:?}");
}

#[tokio::test]
async fn circuit_breaker_full_cycle() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]).replacen(
        "  - name: s\n",
        "  - name: s\n    outlier: { consecutive_5xx: 0, consecutive_failures: 0 }\n    circuit: { failure_threshold: 3, reset_timeout: 1s, max_requests: 2 }\n",
        1,
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;
    let c = client();
    c.post(a.url("/control/fail?on=1")).send().await.unwrap();
    // Round robin: every other request reaches a and fails (500, passed through).
    let mut fails = 0;
    for _ in 0..6 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        if r.status() == 500 {
            fails += 1;
        }
    }
    assert_eq!(
        fails, 3,
        "three failures reach the client before the breaker opens"
    );
    let n = wait_for_node(&gw, "a", |n| n["circuit"] == "open").await;
    assert_eq!(n["circuit_opened"], 1);
    for _ in 0..10 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200, "an open circuit sends everything to b");
        assert_eq!(json(r).await["node"], "b");
    }
    // Still failing when the reset timeout passes: the first probe reopens it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(c.get(gw.url("/")).send().await.unwrap().status().as_u16());
    }
    assert!(
        statuses.contains(&500),
        "a half-open probe reached a: {statuses:?}"
    );
    let n = wait_for_node(&gw, "a", |n| n["circuit"] == "open").await;
    assert_eq!(n["circuit_opened"], 2, "the half-open failure reopened it");
    // Healthy again: after the reset timeout, max_requests probes close it.
    c.post(a.url("/control/fail?on=0")).send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut served = HashMap::new();
    for _ in 0..12 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        *served
            .entry(json(r).await["node"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    wait_for_node(&gw, "a", |n| n["circuit"] == "closed").await;
    assert!(
        served.get("a").copied().unwrap_or(0) >= 2,
        "a served its probes and more: {served:?}"
    );
}

#[tokio::test]
async fn hash_on_header_keeps_a_key_on_one_node() {
    let mut backends = Vec::new();
    for i in 0..3 {
        backends.push(Backend::start(&format!("n{i}")).await);
    }
    let nodes: Vec<(String, std::net::SocketAddr)> =
        backends.iter().map(|b| (b.id.clone(), b.addr)).collect();
    let refs: Vec<(&str, std::net::SocketAddr, &str)> =
        nodes.iter().map(|(i, a)| (i.as_str(), *a, "")).collect();
    let svc = service("s", &refs).replacen(
        "  - name: s\n",
        "  - name: s\n    lb: hash\n    hash_on: { header: X-User }\n",
        1,
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;
    let c = client();
    let mut owners = std::collections::BTreeSet::new();
    for user in 0..30 {
        let mut first = None;
        for _ in 0..5 {
            let v = json(
                c.get(gw.url("/"))
                    .header("x-user", format!("user-{user}"))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            let node = v["node"].as_str().unwrap().to_owned();
            assert_eq!(
                *first.get_or_insert(node.clone()),
                node,
                "user-{user} moved"
            );
        }
        owners.insert(first.unwrap());
    }
    assert_eq!(owners.len(), 3, "keys spread over every node");
}

#[tokio::test]
async fn a_dead_node_is_ejected_on_its_first_failure_and_clients_see_nothing() {
    let a = Backend::start("a").await;
    let mut b = Backend::start("b").await;
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]);
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;
    let c = client();
    for _ in 0..4 {
        assert_eq!(c.get(gw.url("/")).send().await.unwrap().status(), 200);
    }
    b.kill().await;
    for _ in 0..20 {
        let r = c.post(gw.url("/")).body("x").send().await.unwrap();
        assert_eq!(r.status(), 200, "retried on a: it never reached b");
    }
    let n = nodes(&gw).await;
    assert_eq!(n["b"]["ejections"], 1, "one failure ejected b: {}", n["b"]);
    assert_eq!(n["b"]["ejected"], true);
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    errors: AtomicU64,
    plain_post_502: AtomicU64,
}

async fn rolling_restart(graceful: bool) {
    let record = temp_path("ids");
    let mut backends = Vec::new();
    for i in 0..3 {
        backends.push(
            Backend::start_recording(&format!("n{i}"), "127.0.0.1:0".parse().unwrap(), &record)
                .await,
        );
    }
    let refs: Vec<(String, std::net::SocketAddr)> =
        backends.iter().map(|b| (b.id.clone(), b.addr)).collect();
    let refs: Vec<(&str, std::net::SocketAddr, &str)> =
        refs.iter().map(|(i, a)| (i.as_str(), *a, "")).collect();
    // Active checks bring a restarted node back at once; without them its
    // open breaker would keep it out for reset_timeout (60 s).
    let svc = service("s", &refs).replacen(
        "  - name: s\n",
        "  - name: s\n    health: { path: /health, interval: 200ms, timeout: 200ms, rise: 1, fall: 2 }\n",
        1,
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let failures = Arc::new(tokio::sync::Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for task in 0..32 {
        let (stop, tally, failures) = (stop.clone(), tally.clone(), failures.clone());
        let url = gw.url("/work");
        clients.push(tokio::spawn(async move {
            let c = client();
            let mut i = 0u64;
            // Each client keeps going until the restarts are done and it has
            // made at least 40 requests (so the load is never too thin).
            while i < 400 && (!stop.load(Ordering::Relaxed) || i < 40) {
                let kind = ["get", "put", "keyed", "post"][(i % 4) as usize];
                let id = format!("{kind}-{task}-{i}");
                let req = match kind {
                    "get" => c.get(&url),
                    "put" => c.put(&url).body("put-body"),
                    "keyed" => c
                        .post(&url)
                        .header("idempotency-key", &id)
                        .body("keyed-body"),
                    _ => c.post(&url).body("post-body"),
                };
                let res = req.header("x-request-id", &id).send().await;
                match res {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        tally.ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) if r.status() == 502 && kind == "post" => {
                        tally.plain_post_502.fetch_add(1, Ordering::Relaxed);
                    }
                    other => {
                        tally.errors.fetch_add(1, Ordering::Relaxed);
                        let what = match other {
                            Ok(r) => format!("{id}: status {}", r.status()),
                            Err(e) => format!("{id}: {e}"),
                        };
                        failures.lock().await.push(what);
                    }
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for b in backends.iter_mut() {
        if graceful {
            b.term().await;
        } else {
            b.kill().await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        *b = Backend::start_recording(&b.id.clone(), b.addr, &record).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let failures = failures.lock().await.clone();
    if !failures.is_empty() {
        let logs = gw.logs();
        let warns: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .collect();
        eprintln!(
            "gateway warnings ({}):\n{}",
            warns.len(),
            warns
                .iter()
                .take(60)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    assert!(
        failures.is_empty(),
        "client-visible errors: {} e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(tally.ok.load(Ordering::Relaxed) > 1000, "the load ran");

    // No request reached a backend twice unless it was safe to replay.
    let ids = std::fs::read_to_string(&record).unwrap();
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for id in ids.lines() {
        *counts.entry(id).or_insert(0) += 1;
    }
    for (id, n) in &counts {
        if id.starts_with("post-") {
            assert_eq!(*n, 1, "plain POST {id} reached a backend {n} times");
        }
    }

    // Every node serves again (ejections from the restarts expire).
    let c = client();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..600 {
        let v = json(c.get(gw.url("/")).send().await.unwrap()).await;
        seen.insert(v["node"].as_str().unwrap().to_owned());
        if seen.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        seen.len(),
        3,
        "all nodes serve after the restarts: {seen:?}"
    );
    let _ = std::fs::remove_file(&record);
}

#[tokio::test]
async fn rolling_restart_with_sigterm_shows_no_errors() {
    rolling_restart(true).await;
}

#[tokio::test]
async fn rolling_restart_with_kill_9_shows_no_errors() {
    rolling_restart(false).await;
}
