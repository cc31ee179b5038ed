//! Config canaries: `PUT /admin/v1/config?canary=P&bake=D` under load with
//! fresh sessions. A canary that sends its share to a dead service is
//! rolled back by the judge within the bake (its errors stay on its side,
//! the baseline sees none); a good one is promoted with zero errors; a
//! session stays on one side for the whole bake; promote and abort by hand;
//! a normal apply during a bake aborts the canary.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{client, dead_addr, json, Backend, Gateway};

/// One service `shop` with one node, sessions on, a fast judge.
fn shop(node: &str, addr: std::net::SocketAddr, judge: &str) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ shutdown: 10s }}\nsessions: {{}}\ncanary: {judge}\nservices:\n  - name: shop\n    nodes:\n      - {{ id: {node}, address: \"{addr}\" }}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: shop }}\n"
    )
}

/// Judged every second; a p99 rule that a loaded test machine's latency
/// spikes cannot trip (the p99 rule has its own unit tests).
const FAST_JUDGE: &str = "{ min_requests: 20, interval: 1s, window: 10s, min_p99_delta: 2s }";

/// What the load saw: answers by status, and by serving node.
#[derive(Default)]
struct Tally {
    status: HashMap<u16, u64>,
    nodes: HashMap<String, u64>,
}

/// `workers` clients sending requests without a session token (each a
/// fresh session) until `stop`.
fn load(
    gw: &Gateway,
    workers: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Tally>> {
    (0..workers)
        .map(|_| {
            let (url, stop) = (gw.url("/"), Arc::clone(stop));
            tokio::spawn(async move {
                let c = client();
                let mut t = Tally::default();
                let mut n = 0;
                // Bounded: 20,000 requests per worker at most.
                while !stop.load(Ordering::Relaxed) && n < 20_000 {
                    n += 1;
                    let Ok(r) = c.get(&url).send().await else {
                        *t.status.entry(0).or_default() += 1;
                        continue;
                    };
                    let status = r.status().as_u16();
                    *t.status.entry(status).or_default() += 1;
                    if status == 200 {
                        let node = json(r).await["node"].as_str().unwrap_or("?").to_owned();
                        *t.nodes.entry(node).or_default() += 1;
                    }
                }
                t
            })
        })
        .collect()
}

async fn stop_load(stop: &AtomicBool, load: Vec<tokio::task::JoinHandle<Tally>>) -> Tally {
    stop.store(true, Ordering::Relaxed);
    let mut all = Tally::default();
    for l in load {
        let t = l.await.unwrap();
        for (k, v) in t.status {
            *all.status.entry(k).or_default() += v;
        }
        for (k, v) in t.nodes {
            *all.nodes.entry(k).or_default() += v;
        }
    }
    all
}

async fn put_canary(gw: &Gateway, yaml: &str, query: &str) -> (u16, Value) {
    let r = client()
        .put(gw.admin_url(&format!("/admin/v1/config?{query}")))
        .body(yaml.to_owned())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn canary_status(gw: &Gateway) -> (u16, Value) {
    let r = client()
        .get(gw.admin_url("/admin/v1/config/canary"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Polls (bounded) until the canary is no longer baking; its status.
async fn decided(gw: &Gateway, limit: Duration) -> Value {
    let until = tokio::time::Instant::now() + limit;
    loop {
        let (_, v) = canary_status(gw).await;
        if v["state"] != "baking" {
            return v;
        }
        assert!(tokio::time::Instant::now() < until, "still baking: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn waits_for_requests(gw: &Gateway, side: &str, n: u64) {
    for _ in 0..600 {
        let (_, v) = canary_status(gw).await;
        if v[side]["requests"].as_u64().unwrap_or(0) >= n || v["state"] != "baking" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the {side} side never saw {n} requests");
}

#[tokio::test]
async fn a_canary_to_a_dead_service_is_rolled_back_within_its_bake() {
    let blue = Backend::start("blue").await;
    let gw = Gateway::start(&shop("blue", blue.addr, FAST_JUDGE)).await;
    // Before any canary: 404 with the field path.
    let (status, v) = canary_status(&gw).await;
    assert_eq!(status, 404, "{v}");
    assert_eq!(v["errors"][0]["path"], "canary");
    assert_eq!(v["errors"][0]["message"], "no canary");

    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&gw, 4, &stop);
    let bad = shop("dead", dead_addr(), FAST_JUDGE);
    let (status, v) = put_canary(&gw, &bad, "canary=20&bake=60s").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "baking");
    assert_eq!(v["percent"], 20.0);
    assert_eq!(v["bake"], "60s");
    let version = v["version"].as_u64().unwrap();
    let started = v["started"].as_u64().unwrap();

    let v = decided(&gw, Duration::from_secs(90)).await;
    // Load after the decision: served by the baseline.
    let (_, after) = canary_status(&gw).await;
    let before = after["baseline"]["requests"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let tally = stop_load(&stop, running).await;
    let after_rollback = client().get(gw.url("/")).send().await.unwrap();
    assert_eq!(json(after_rollback).await["node"], "blue");

    assert_eq!(v["state"], "rolled_back", "{v}");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.starts_with("rolled back: error rate"), "{reason}");
    assert_eq!(v["version"], version);
    assert_eq!(v["started"], started);
    // Within the bake: decided by a breach, not by the end of the bake.
    assert!(!reason.contains("end of the bake"), "{reason}");
    // Every error the clients saw was the canary's; the baseline none.
    let (c, b) = (&v["canary"], &v["baseline"]);
    assert_eq!(b["errors"], 0, "{v}");
    assert_eq!(b["error_rate"], 0.0, "{v}");
    let client_errors: u64 = tally
        .status
        .iter()
        .filter(|(s, _)| **s >= 500 || **s == 0)
        .map(|(_, n)| n)
        .sum();
    let canary_errors = c["errors"].as_u64().unwrap();
    assert!(canary_errors >= 20, "{v}");
    // (A request in flight when the canary ended is answered but no longer
    // counted: at most one per worker.)
    assert!(
        (canary_errors..=canary_errors + 4).contains(&client_errors),
        "clients saw {client_errors} errors, the canary counted {canary_errors}: {:?} {v}",
        tally.status
    );
    assert_eq!(
        c["errors"], c["requests"],
        "a dead service fails everything: {v}"
    );
    // Its share: about 20 % of the requests while it baked.
    let (cr, br) = (
        c["requests"].as_u64().unwrap(),
        b["requests"].as_u64().unwrap(),
    );
    let share = cr as f64 / (cr + br) as f64;
    assert!((0.05..0.40).contains(&share), "canary share {share}: {v}");
    assert_eq!(after["baseline"]["requests"].as_u64().unwrap(), before);
    // Every answer that was not an error came from the baseline.
    assert_eq!(tally.nodes.keys().collect::<Vec<_>>(), vec!["blue"]);
    // The running config is still the baseline; the decision is in the
    // history with its reason and counted.
    let versions = gw.admin_json("/admin/v1/config/versions").await;
    assert_eq!(versions["current"], 1);
    let rec = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["version"] == version)
        .cloned()
        .unwrap();
    assert_eq!(rec["canary"]["state"], "rolled_back");
    assert_eq!(rec["canary"]["reason"], v["reason"]);
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_canary_decisions_total{outcome=\"rolled_back\"} 1"),
        "{m}"
    );
    assert!(m.contains("hopgate_canary_baking 0"), "{m}");
    assert!(gw.logs().contains("config canary ended"));
}

#[tokio::test]
async fn a_good_canary_is_promoted_with_zero_errors() {
    let blue = Backend::start("blue").await;
    let green = Backend::start("green").await;
    let gw = Gateway::start(&shop("blue", blue.addr, FAST_JUDGE)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&gw, 4, &stop);
    // The promotion removes `blue`; no request fails for it.
    let good = shop("green", green.addr, FAST_JUDGE);
    let (status, v) = put_canary(&gw, &good, "canary=30&bake=6s").await;
    assert_eq!(status, 200, "{v}");
    let version = v["version"].as_u64().unwrap();
    let v = decided(&gw, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tally = stop_load(&stop, running).await;
    assert_eq!(v["state"], "promoted", "{v}");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("promoted after a clean bake"),
        "{v}"
    );
    assert_eq!(v["canary"]["errors"], 0);
    assert_eq!(v["baseline"]["errors"], 0);
    assert!(v["canary"]["requests"].as_u64().unwrap() >= 20, "{v}");
    assert_eq!(
        tally.status.keys().collect::<Vec<_>>(),
        vec![&200],
        "{:?}",
        tally.status
    );
    // Both sides served during the bake; green only after.
    assert!(tally.nodes.contains_key("blue") && tally.nodes.contains_key("green"));
    let versions = gw.admin_json("/admin/v1/config/versions").await;
    assert_eq!(versions["current"], version);
    let r = client().get(gw.url("/")).send().await.unwrap();
    assert_eq!(json(r).await["node"], "green");
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_canary_decisions_total{outcome=\"promoted\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn a_session_stays_on_one_side_for_the_whole_bake() {
    let blue = Backend::start("blue").await;
    let green = Backend::start("green").await;
    let gw = Gateway::start(&shop("blue", blue.addr, FAST_JUDGE)).await;
    let c = client();
    // Sessions that existed before the canary.
    let mut tokens = Vec::new();
    for _ in 0..20 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        tokens.push(r.headers()["hop-session"].to_str().unwrap().to_owned());
    }
    let good = shop("green", green.addr, FAST_JUDGE);
    let (status, v) = put_canary(&gw, &good, "canary=50&bake=60s").await;
    assert_eq!(status, 200, "{v}");
    // Sessions minted during the bake: the side of their first answer
    // (decided by the id minted for it) is the side they stay on.
    let mut seen: HashMap<usize, HashSet<String>> = HashMap::new();
    for _ in 0..20 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        seen.entry(tokens.len()).or_default();
        tokens.push(r.headers()["hop-session"].to_str().unwrap().to_owned());
        let node = json(r).await["node"].as_str().unwrap().to_owned();
        seen.entry(tokens.len() - 1).or_default().insert(node);
    }
    for round in 0..10 {
        for (i, t) in tokens.iter().enumerate() {
            let r = c
                .get(gw.url("/"))
                .header("hop-session", t)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "round {round}");
            let node = json(r).await["node"].as_str().unwrap().to_owned();
            seen.entry(i).or_default().insert(node);
        }
    }
    let (_, v) = canary_status(&gw).await;
    assert_eq!(v["state"], "baking", "{v}");
    let mut sides = HashMap::new();
    for (i, nodes) in seen.iter() {
        assert_eq!(nodes.len(), 1, "session {i} flipped: {nodes:?}");
        *sides
            .entry(nodes.iter().next().unwrap().clone())
            .or_insert(0) += 1;
    }
    // 50 %: both sides have sessions (old and newly minted alike).
    assert!(sides.len() == 2, "{sides:?}");
    let (_, v) = canary_status(&gw).await;
    assert!(v["canary"]["requests"].as_u64().unwrap() >= 10, "{v}");
    assert!(v["baseline"]["requests"].as_u64().unwrap() >= 10, "{v}");
}

#[tokio::test]
async fn promote_and_abort_by_hand_and_an_apply_aborts_a_bake() {
    let blue = Backend::start("blue").await;
    let green = Backend::start("green").await;
    let base = shop("blue", blue.addr, FAST_JUDGE);
    let good = shop("green", green.addr, FAST_JUDGE);
    let gw = Gateway::start(&base).await;
    let c = client();
    let post = |action: &str| {
        c.post(gw.admin_url(&format!("/admin/v1/config/canary/{action}")))
            .send()
    };
    // Nothing to decide.
    let r = post("promote").await.unwrap();
    assert_eq!(r.status(), 409);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["path"], "canary");
    // Bad parameters name their field; nothing starts.
    for (q, path) in [
        ("canary=0", "canary"),
        ("canary=150", "canary"),
        ("canary=10&bake=forever", "bake"),
        ("bake=30s", "bake"),
    ] {
        let (status, v) = put_canary(&gw, &good, q).await;
        assert_eq!(status, 400, "{q}: {v}");
        assert_eq!(v["errors"][0]["path"], path, "{q}: {v}");
    }
    // A broken document is rejected like any apply.
    let (status, v) = put_canary(&gw, "services: [ { name: x } ]", "canary=10").await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(canary_status(&gw).await.0, 404);
    // The running document is not a canary.
    let (status, v) = put_canary(&gw, &base, "canary=10").await;
    assert_eq!(status, 400, "{v}");

    // Abort by hand.
    let (status, v) = put_canary(&gw, &good, "canary=50&bake=120s").await;
    assert_eq!(status, 200, "{v}");
    let first = v["version"].as_u64().unwrap();
    let r = post("abort").await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "aborted");
    assert_eq!(v["reason"], "aborted by hand");
    assert_eq!(post("abort").await.unwrap().status(), 409);
    for _ in 0..20 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        assert_eq!(json(r).await["node"], "blue");
    }

    // Promote by hand, mid-bake, with traffic on both sides.
    let (status, v) = put_canary(&gw, &good, "canary=50&bake=120s").await;
    assert_eq!(status, 200, "{v}");
    let second = v["version"].as_u64().unwrap();
    assert!(second > first);
    for _ in 0..40 {
        assert_eq!(c.get(gw.url("/")).send().await.unwrap().status(), 200);
    }
    waits_for_requests(&gw, "canary", 1).await;
    let r = post("promote").await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["state"], "promoted", "{v}");
    assert_eq!(v["reason"], "promoted by hand");
    assert!(v["canary"]["requests"].as_u64().unwrap() >= 1, "{v}");
    let versions = gw.admin_json("/admin/v1/config/versions").await;
    assert_eq!(versions["current"], second);
    let r = c.get(gw.url("/")).send().await.unwrap();
    assert_eq!(json(r).await["node"], "green");

    // A normal apply during a bake aborts the canary first.
    let (status, v) = put_canary(&gw, &base, "canary=10&bake=120s").await;
    assert_eq!(status, 200, "{v}");
    let third = v["version"].as_u64().unwrap();
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(shop("blue", blue.addr, "{ min_requests: 30 }"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let applied: Value = r.json().await.unwrap();
    assert!(applied["version"].as_u64().unwrap() > third);
    let (_, v) = canary_status(&gw).await;
    assert_eq!(v["state"], "aborted", "{v}");
    assert_eq!(v["version"], third);
    assert_eq!(v["reason"], "aborted: a new config was applied (admin)");
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_canary_decisions_total{outcome=\"aborted\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("hopgate_canary_decisions_total{outcome=\"promoted\"} 1"),
        "{m}"
    );
    assert!(m.contains("hopgate_canary_started_total 3"), "{m}");
}

#[tokio::test]
async fn without_sessions_the_client_address_decides() {
    let blue = Backend::start("blue").await;
    let green = Backend::start("green").await;
    let no_sessions = |node, addr| shop(node, addr, FAST_JUDGE).replace("sessions: {}\n", "");
    let gw = Gateway::start(&no_sessions("blue", blue.addr)).await;
    let (status, v) =
        put_canary(&gw, &no_sessions("green", green.addr), "canary=50&bake=60s").await;
    assert_eq!(status, 200, "{v}");
    // Every request comes from 127.0.0.1: one side for all of them.
    let c = client();
    let mut nodes = HashSet::new();
    for _ in 0..40 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        assert!(r.headers().get("hop-session").is_none());
        nodes.insert(json(r).await["node"].as_str().unwrap().to_owned());
    }
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let (_, v) = canary_status(&gw).await;
    let (cr, br) = (
        v["canary"]["requests"].as_u64().unwrap(),
        v["baseline"]["requests"].as_u64().unwrap(),
    );
    assert!(cr == 0 || br == 0, "{v}");
    assert_eq!(cr + br, 40, "{v}");
}
