//! The whole fleet at once: three `hopgate run` replicas on ONE real
//! redis-server and ONE real etcd, each with a bootstrap file alone. The
//! runtime config (services, routes, sessions) comes from etcd, bindings
//! live in Redis. A session minted on A is routed to its node by B and C;
//! a drain posted to A reaches every replica through etcd, the session hops
//! on A, and B and C show and follow the hop within 1 s; etcd dying under
//! session load through all three fails no request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{client, json, service, within, Backend, Fleet, Gateway};
use crate::redis_server::RedisServer;

/// At least 32 bytes, shared by every replica.
const SECRET: &str = "fleet-three-secret-0123456789abcdef";

/// The node a request carrying `token` through `gw` was served by.
async fn node_via(gw: &Gateway, token: &str) -> String {
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    json(r).await["node"].as_str().unwrap().to_owned()
}

/// `gw`'s binding of `token` as `(node, hops)`, if it has one.
async fn binding(gw: &Gateway, token: &str) -> Option<(String, u64)> {
    let r = client()
        .get(gw.admin_url(&format!("/admin/v1/sessions/{token}")))
        .send()
        .await
        .unwrap();
    if r.status() != 200 {
        return None;
    }
    let v: Value = r.json().await.unwrap();
    let b = &v["bindings"][0];
    Some((b["node"].as_str()?.to_owned(), b["hops"].as_u64()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_config_sessions_and_a_drain() {
    let redis = RedisServer::start();
    let mut f = Fleet::start()
        .await
        .redis(&redis)
        .env("HOPGATE_SESSION_SECRET", SECRET);
    let backends = [
        Backend::start("n0").await,
        Backend::start("n1").await,
        Backend::start("n2").await,
    ];
    let nodes: Vec<_> = backends
        .iter()
        .map(|b| (b.id.as_str(), b.addr, ""))
        .collect();
    let shared = format!(
        "services:\n{}routes:\n  - {{ id: default, match: {{ path_prefix: / }}, service: api }}\nsessions: {{ ttl: 1h }}\ntimeouts: {{ shutdown: 5s }}\n",
        service("api", &nodes)
    );
    f.etcd.put(&f.key("config"), &shared);
    let replicas = f.replicas(["gw-a", "gw-b", "gw-c"]).await;
    let [a, b, c] = &replicas;
    for gw in [a, b, c] {
        let fleet = gw.admin_json("/admin/v1/fleet").await;
        assert_eq!(fleet["redis"]["state"], "connected", "{fleet}");
        let etcd_up = within(Duration::from_secs(5), || async {
            gw.admin_json("/admin/v1/fleet").await["etcd"]["state"] == "connected"
        })
        .await;
        assert!(etcd_up, "etcd not connected: {}", gw.logs());
        let versions = gw.admin_json("/admin/v1/config/versions").await;
        let last = versions["versions"].as_array().unwrap().last().unwrap();
        assert_eq!(last["source"], "etcd", "{versions}");
    }

    // Minted on A (sessions are on through the shared config).
    let r = client().get(a.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let token = r
        .headers()
        .get("hop-session")
        .expect("sessions on from the etcd document")
        .to_str()
        .unwrap()
        .to_owned();
    let bound = json(r).await["node"].as_str().unwrap().to_owned();
    // B and C route it to the same node, from their first request on (the
    // miss lookup, if the change notice has not arrived yet).
    for gw in [b, c] {
        for _ in 0..3 {
            assert_eq!(node_via(gw, &token).await, bound);
        }
        assert_eq!(binding(gw, &token).await, Some((bound.clone(), 0)));
    }

    // A drain posted to A: fleet-wide through etcd.
    let r = client()
        .post(a.admin_url(&format!("/admin/v1/nodes/api/{bound}/drain")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(json(r).await["fleet"], true);
    for gw in [a, b, c] {
        let drained = within(Duration::from_secs(1), || async {
            let nodes = gw.admin_json("/admin/v1/nodes").await;
            nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["id"] == bound.as_str() && n["draining"] == true)
        })
        .await;
        assert!(drained, "the drain did not reach every replica within 1 s");
    }
    // The session hops on its next request, on A.
    let hopped = node_via(a, &token).await;
    assert_ne!(hopped, bound, "the session stayed on the drained node");
    // B and C show the hop within 1 s, then route the session there.
    for gw in [b, c] {
        let start = Instant::now();
        let shown = within(Duration::from_secs(1), || async {
            binding(gw, &token).await == Some((hopped.clone(), 1))
        })
        .await;
        assert!(
            shown,
            "the hop to {hopped} not shown within 1 s: {:?}",
            binding(gw, &token).await
        );
        eprintln!("hop shown after {:?}", start.elapsed());
    }
    for gw in [b, c, a] {
        for _ in 0..3 {
            assert_eq!(node_via(gw, &token).await, hopped);
        }
    }

    // etcd dies while clients keep the session busy on all three replicas:
    // no request fails, and the session stays where it hopped.
    let failures = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for (i, gw) in [a, b, c, a, b, c].into_iter().enumerate() {
        let (url, token, hopped) = (gw.url(&format!("/?c={i}")), token.clone(), hopped.clone());
        let (failures, served, stop) = (failures.clone(), served.clone(), stop.clone());
        load.push(tokio::spawn(async move {
            let http = client();
            while !stop.load(Ordering::Relaxed) {
                match http.get(&url).header("hop-session", &token).send().await {
                    Ok(r) if r.status() == 200 => {
                        let node = json(r).await["node"].as_str().unwrap_or("?").to_owned();
                        if node == hopped {
                            served.fetch_add(1, Ordering::Relaxed);
                        } else {
                            eprintln!("served by {node}, not {hopped}");
                            failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(r) => {
                        eprintln!("status {}", r.status());
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("error {e}");
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    f.etcd.kill();
    for gw in [a, b, c] {
        let degraded = within(Duration::from_secs(10), || async {
            gw.admin_json("/admin/v1/fleet").await["etcd"]["state"] == "degraded"
        })
        .await;
        assert!(degraded, "etcd state did not turn degraded");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.unwrap();
    }
    let (served, failed) = (
        served.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    );
    eprintln!("{served} requests served while etcd died, {failed} failed");
    assert!(served > 50, "too little load: {served}");
    assert_eq!(failed, 0, "requests failed or left the session's node");
    for gw in [a, b, c] {
        assert!(gw.metrics().await.contains("hopgate_fleet_etcd_up 0"));
        assert!(gw.metrics().await.contains("hopgate_fleet_redis_up 1"));
    }
    drop(replicas);
}
