//! Config canaries in a fleet: two `hopgate run` replicas on one real etcd
//! and one real redis-server. A canary started on one replica goes through
//! etcd to both, both judge it on the counts summed in Redis, and one
//! compare-and-set in etcd decides it for both: a dead canary is rolled
//! back on both with the same reason, a good one promoted on both (its
//! document becomes `<prefix>config`), and a replica that loses etcd during
//! a bake rolls back on its own and never promotes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{client, dead_addr, json, within, Backend, Fleet, Gateway};
use crate::redis_server::RedisServer;

const SECRET: &str = "canary-fleet-secret-0123456789abcdef";

/// The shared runtime document: one service `shop` on one node.
fn shared(node: &str, addr: std::net::SocketAddr) -> String {
    format!(
        "services:\n  - name: shop\n    nodes:\n      - {{ id: {node}, address: \"{addr}\" }}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: shop }}\nsessions: {{ ttl: 1h }}\ntimeouts: {{ shutdown: 5s }}\n"
    )
}

async fn status(gw: &Gateway) -> Value {
    client()
        .get(gw.admin_url("/admin/v1/config/canary"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn put_canary(gw: &Gateway, doc: &str, query: &str) -> (u16, Value) {
    let r = client()
        .put(gw.admin_url(&format!("/admin/v1/config?{query}")))
        .body(doc.to_owned())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// Both replicas' canary once neither bakes.
async fn decided_on_both(a: &Gateway, b: &Gateway, bound: Duration) -> (Value, Value) {
    let done = within(bound, || async {
        status(a).await["state"] != "baking" && status(b).await["state"] != "baking"
    })
    .await;
    let (va, vb) = (status(a).await, status(b).await);
    assert!(done, "still baking:\nA {va}\nB {vb}");
    (va, vb)
}

/// Fresh-session load through every replica until `stop`; how many
/// answers were not 200.
fn load(gws: &[&Gateway], stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<(u64, u64)>> {
    gws.iter()
        .map(|gw| {
            let (url, stop) = (gw.url("/"), Arc::clone(stop));
            tokio::spawn(async move {
                let c = client();
                let (mut ok, mut bad) = (0, 0);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 20_000 {
                    n += 1;
                    match c.get(&url).send().await {
                        Ok(r) if r.status() == 200 => ok += 1,
                        _ => bad += 1,
                    }
                }
                (ok, bad)
            })
        })
        .collect()
}

async fn stop_load(stop: &AtomicBool, l: Vec<tokio::task::JoinHandle<(u64, u64)>>) -> (u64, u64) {
    stop.store(true, Ordering::Relaxed);
    let mut t = (0, 0);
    for h in l {
        let (ok, bad) = h.await.unwrap();
        t.0 += ok;
        t.1 += bad;
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_started_on_one_replica_is_judged_and_decided_the_same_on_all() {
    let redis = RedisServer::start();
    let mut f = Fleet::start()
        .await
        .redis(&redis)
        .bootstrap_lines(
            "canary: { min_requests: 20, interval: 1s, window: 10s, min_p99_delta: 2s }\n",
        )
        .env("HOPGATE_SESSION_SECRET", SECRET);
    let blue = Backend::start("blue").await;
    let green = Backend::start("green").await;
    f.etcd.put(&f.key("config"), &shared("blue", blue.addr));
    let replicas = f.replicas(["gw-a", "gw-b"]).await;
    let [a, b] = &replicas;
    for gw in [a, b] {
        let up = within(Duration::from_secs(10), || async {
            gw.admin_json("/admin/v1/fleet").await["etcd"]["state"] == "connected"
        })
        .await;
        assert!(up, "etcd not connected: {}", gw.logs());
    }

    // 1. A dead canary started on A: rolled back on both, by one decision.
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&[a, b], &stop);
    let (code, v) = put_canary(a, &shared("dead", dead_addr()), "canary=30&bake=60s").await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["state"], "baking");
    let on_b = within(Duration::from_secs(5), || async {
        status(b).await["state"] == "baking"
    })
    .await;
    assert!(on_b, "B did not start the canary: {}", b.logs());
    let (va, vb) = decided_on_both(a, b, Duration::from_secs(60)).await;
    let (_, bad) = stop_load(&stop, running).await;
    for v in [&va, &vb] {
        assert_eq!(v["state"], "rolled_back", "{v}");
        assert_eq!(v["baseline"]["errors"], 0, "{v}");
        assert_eq!(v["percent"], 30.0);
    }
    let reason = va["reason"].as_str().unwrap();
    assert!(reason.starts_with("rolled back: error rate"), "{reason}");
    assert_eq!(va["reason"], vb["reason"], "one decision for the fleet");
    // The clients saw the canary's errors before the rollback.
    assert!(bad > 0);
    let doc: Value = serde_json::from_str(&f.etcd.get(&f.key("canary")).unwrap()).unwrap();
    assert_eq!(doc["state"], "rolled_back");
    assert_eq!(doc["reason"], va["reason"]);
    for gw in [a, b] {
        let r = client().get(gw.url("/")).send().await.unwrap();
        assert_eq!(json(r).await["node"], "blue");
    }

    // 2. A good canary started on B: promoted on both; its document is
    // now the fleet's config.
    let stop = Arc::new(AtomicBool::new(false));
    let running = load(&[a, b], &stop);
    // The promotion removes the running config's node `blue`: requests
    // routed by the older snapshot in the instant of the swap still reach
    // it (a removed node is their last resort), so none fails.
    let good = shared("green", green.addr);
    let (code, v) = put_canary(b, &good, "canary=50&bake=5s").await;
    assert_eq!(code, 200, "{v}");
    let (va, vb) = decided_on_both(a, b, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, bad) = stop_load(&stop, running).await;
    let failed = |gw: &Gateway| {
        gw.logs()
            .lines()
            .filter(|l| l.contains("hopgate::access") && !l.contains("error=\"-\""))
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        bad,
        0,
        "a good canary costs no request:\nA {}\nB {}",
        failed(a),
        failed(b)
    );
    for v in [&va, &vb] {
        assert_eq!(v["state"], "promoted", "{v}");
        assert_eq!(v["canary"]["errors"], 0, "{v}");
    }
    assert_eq!(va["reason"], vb["reason"]);
    assert_eq!(
        f.etcd.get(&f.key("config")).unwrap().trim_end(),
        good.trim_end()
    );
    for gw in [a, b] {
        let green_now = within(Duration::from_secs(5), || async {
            let r = client().get(gw.url("/")).send().await.unwrap();
            json(r).await["node"] == "green"
        })
        .await;
        assert!(green_now, "{}", gw.logs());
        let m = gw.metrics().await;
        assert!(
            m.contains("hopgate_canary_decisions_total{outcome=\"promoted\"} 1"),
            "{m}"
        );
        assert!(
            m.contains("hopgate_canary_decisions_total{outcome=\"rolled_back\"} 1"),
            "{m}"
        );
    }

    // 3. etcd dies during a bake: each replica rolls back on its own and
    // none promotes.
    let (code, v) = put_canary(a, &shared("blue", blue.addr), "canary=50&bake=120s").await;
    assert_eq!(code, 200, "{v}");
    let on_b = within(Duration::from_secs(5), || async {
        status(b).await["state"] == "baking"
    })
    .await;
    assert!(on_b);
    f.etcd.kill();
    let (va, vb) = decided_on_both(a, b, Duration::from_secs(60)).await;
    for v in [&va, &vb] {
        assert_eq!(v["state"], "rolled_back", "{v}");
        let reason = v["reason"].as_str().unwrap();
        assert!(reason.contains("etcd was lost during the bake"), "{reason}");
    }
    for gw in [a, b] {
        let r = client().get(gw.url("/")).send().await.unwrap();
        assert_eq!(json(r).await["node"], "green", "the running config stays");
    }
}
