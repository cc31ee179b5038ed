//! The Redis session store on highly available Redis: two `hopgate run`
//! replicas on a Sentinel set, then on a Cluster, under session traffic
//! while the master is killed (and, on the Cluster, the store's slot is
//! migrated). No request fails, and every binding made before and during
//! the failure (hops included) ends up the same on both replicas.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::redis_ha::{wait_for, RedisCluster, SentinelSet};
use crate::harness::{backends, client, session_gateway, Gateway};

const SECRET: &str = "fleet-secret-0123456789abcdefghijklmnop";

async fn replica(svc: &str, store_yaml: &str) -> Gateway {
    let rest = format!("sessions: {{ secret_env: HG_SECRET, ttl: 1h }}\n{store_yaml}");
    session_gateway(svc, &rest, SECRET, &[]).await
}

/// Session traffic on two replicas: 8 clients, each alternating replicas
/// and starting a new session every 20 requests. Counts failures and
/// remembers how often each token was sent back (a binding is made on the
/// token's second request) and whether it was minted during the outage.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    /// Set while Redis is failing over: tokens minted then are marked.
    outage: Arc<AtomicBool>,
    tokens: Arc<parking_lot::Mutex<HashMap<String, (u32, bool)>>>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(gws: &Arc<[Gateway; 2]>) -> Load {
        let mut load = Load {
            stop: Arc::default(),
            sent: Arc::default(),
            failed: Arc::default(),
            outage: Arc::default(),
            tokens: Arc::default(),
            clients: Vec::new(),
        };
        for c in 0..8usize {
            let (gws, stop, sent, failed, outage, tokens) = (
                Arc::clone(gws),
                Arc::clone(&load.stop),
                Arc::clone(&load.sent),
                Arc::clone(&load.failed),
                Arc::clone(&load.outage),
                Arc::clone(&load.tokens),
            );
            load.clients.push(tokio::spawn(async move {
                let http = client();
                let mut token: Option<String> = None;
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    if i % 20 == 0 {
                        token = None;
                    }
                    let mut req = http.get(gws[i % 2].url("/"));
                    if let Some(t) = &token {
                        req = req.header("hop-session", t);
                        tokens.lock().entry(t.clone()).or_default().0 += 1;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    match req.send().await {
                        Ok(r) if r.status() == 200 => {
                            if let Some(t) = r.headers().get("hop-session") {
                                let t = t.to_str().unwrap().to_owned();
                                let during = outage.load(Ordering::Relaxed);
                                tokens.lock().entry(t.clone()).or_insert((0, during));
                                token = Some(t);
                            }
                            let _ = r.bytes().await;
                        }
                        Ok(r) => {
                            eprintln!("status {}", r.status());
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            eprintln!("error {e}");
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    i += 1;
                }
            }));
        }
        load
    }

    /// Stops the clients; the tokens that were sent back at least once
    /// (so bound), each with whether it was minted during the outage.
    async fn finish(self) -> (u64, u64, Vec<(String, bool)>) {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.clients {
            c.await.unwrap();
        }
        let bound = self
            .tokens
            .lock()
            .iter()
            .filter(|(_, (uses, _))| *uses > 0)
            .map(|(t, (_, during))| (t.clone(), *during))
            .collect();
        (
            self.sent.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            bound,
        )
    }
}

/// Drains `node` of service `s` on both replicas: their sessions there hop.
async fn drain(gws: &[Gateway; 2], node: &str) {
    for gw in gws {
        let r = client()
            .post(gw.admin_url(&format!("/admin/v1/nodes/s/{node}/drain")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
}

/// `(node, hops)` of `token`'s binding on `gw`, if it has one.
async fn binding(gw: &Gateway, token: &str) -> Option<(String, u64)> {
    let r = client()
        .get(gw.admin_url(&format!("/admin/v1/sessions/{token}")))
        .send()
        .await
        .ok()?;
    if r.status() != 200 {
        return None;
    }
    let v: serde_json::Value = r.json().await.ok()?;
    let b = &v["bindings"][0];
    Some((b["node"].as_str()?.to_owned(), b["hops"].as_u64()?))
}

/// The tokens whose binding is missing on the first replica or differs
/// on the second, with both bindings.
type Differing = Vec<(String, Option<(String, u64)>, Option<(String, u64)>)>;

async fn differing(gws: [&Gateway; 2], tokens: &[(String, bool)]) -> Differing {
    let mut out = Vec::new();
    for (t, _) in tokens {
        let (a, b) = (binding(gws[0], t).await, binding(gws[1], t).await);
        if a.is_none() || a != b {
            out.push((t.clone(), a, b));
        }
    }
    out
}

/// Waits until both replicas hold the same binding for every token; the
/// number of bindings with a hop, and of tokens minted during the outage.
async fn same_bindings_on_both(gws: [&Gateway; 2], tokens: &[(String, bool)]) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut left = differing(gws, tokens).await;
    while !left.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        left = differing(gws, tokens).await;
    }
    assert!(
        left.is_empty(),
        "{} of {} bindings lost or different between the replicas, e.g. {:?}",
        left.len(),
        tokens.len(),
        left.first()
    );
    let mut hopped = 0;
    for (t, _) in tokens {
        if binding(gws[0], t).await.is_some_and(|(_, hops)| hops > 0) {
            hopped += 1;
        }
    }
    let during = tokens.iter().filter(|(_, d)| *d).count();
    (hopped, during)
}

/// Redis itself holds every binding: no write was dropped on either
/// replica, and a third replica started now (which loads everything from
/// Redis) has the same bindings as the first.
async fn redis_holds_them(gws: &[Gateway; 2], svc: &str, store: &str, tokens: &[(String, bool)]) {
    for gw in gws {
        let v = gw.admin_json("/admin/v1/fleet").await;
        assert_eq!(v["redis"]["dropped"], 0, "writes dropped: {v}");
    }
    let late = replica(svc, store).await;
    same_bindings_on_both([&gws[0], &late], tokens).await;
}

/// Waits until both replicas' `GET /admin/v1/fleet` show the store
/// connected in `mode` to `server`.
async fn fleet_shows(gws: &[Gateway; 2], mode: &str, server: &str) {
    for gw in gws {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let v: serde_json::Value = gw.admin_json("/admin/v1/fleet").await;
            let r = &v["redis"];
            if r["state"] == "connected" && r["mode"] == mode && r["server"] == server {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "fleet never showed {mode} on {server}: {v}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_under_load_loses_no_request_and_no_binding() {
    let mut set = SentinelSet::start();
    let (_b, svc) = backends(3).await;
    let store = set.store_yaml();
    let gws = Arc::new([replica(&svc, &store).await, replica(&svc, &store).await]);
    let old = set.master.addr();
    fleet_shows(&gws, "sentinel", &old).await;
    let load = Load::start(&gws);
    tokio::time::sleep(Duration::from_secs(1)).await;
    drain(&gws, "n0").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // kill -9 of the master: the sentinels promote the replica.
    load.outage.store(true, Ordering::Relaxed);
    set.master.kill();
    drain(&gws, "n1").await;
    let new = set.replica.addr();
    assert!(
        tokio::task::block_in_place(
            || wait_for(Duration::from_secs(30), || set.master_addr() == new)
        ),
        "the sentinels never promoted the replica"
    );
    fleet_shows(&gws, "sentinel", &new).await;
    load.outage.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (sent, failed, tokens) = load.finish().await;
    eprintln!(
        "{sent} requests, {failed} failed, {} bound sessions",
        tokens.len()
    );
    assert!(sent > 100, "too little load: {sent}");
    assert_eq!(failed, 0, "requests failed during the failover");
    let (hopped, during) = same_bindings_on_both([&gws[0], &gws[1]], &tokens).await;
    eprintln!("{hopped} bindings hopped, {during} made during the failover");
    assert!(hopped > 0, "no session hopped");
    assert!(during > 0, "no session was bound during the failover");
    redis_holds_them(&gws, &svc, &store, &tokens).await;
    for gw in gws.iter() {
        let logs = gw.logs();
        assert!(logs.contains("Redis has a new master"), "{logs}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_slot_migration_and_failover_under_load_lose_nothing() {
    let mut cluster = RedisCluster::start();
    let (_b, svc) = backends(3).await;
    let store = cluster.store_yaml();
    let gws = Arc::new([replica(&svc, &store).await, replica(&svc, &store).await]);
    // Every key of the store is in the slot of its hash tag.
    let slot = cluster.slot_of("{hopgate:}changes");
    assert_eq!(slot, cluster.slot_of("{hopgate:}s:00"));
    let owner = cluster.master_of(slot);
    fleet_shows(&gws, "cluster", &cluster.nodes[owner].addr()).await;
    let load = Load::start(&gws);
    tokio::time::sleep(Duration::from_secs(1)).await;
    drain(&gws, "n0").await;
    // The slot moves to another master under load.
    let target = cluster.other_master(owner);
    tokio::task::block_in_place(|| cluster.migrate_slot(slot, owner, target));
    assert_eq!(cluster.master_of(slot), target);
    fleet_shows(&gws, "cluster", &cluster.nodes[target].addr()).await;
    // Then its new master dies: its replica takes over.
    load.outage.store(true, Ordering::Relaxed);
    cluster.nodes[target].kill();
    drain(&gws, "n1").await;
    let promoted = tokio::task::block_in_place(|| {
        wait_for(Duration::from_secs(30), || {
            cluster
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                && cluster.serving(slot).is_some_and(|m| m != target)
        })
    });
    assert!(
        promoted,
        "no replica took over the slot:\n{}",
        cluster.nodes_tables()
    );
    let new = cluster.nodes[cluster.master_of(slot)].addr();
    fleet_shows(&gws, "cluster", &new).await;
    load.outage.store(false, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (sent, failed, tokens) = load.finish().await;
    eprintln!(
        "{sent} requests, {failed} failed, {} bound sessions",
        tokens.len()
    );
    assert!(sent > 100, "too little load: {sent}");
    assert_eq!(
        failed, 0,
        "requests failed during the migration or failover"
    );
    let (hopped, during) = same_bindings_on_both([&gws[0], &gws[1]], &tokens).await;
    eprintln!("{hopped} bindings hopped, {during} made during the failover");
    assert!(hopped > 0, "no session hopped");
    assert!(during > 0, "no session was bound during the failover");
    redis_holds_them(&gws, &svc, &store, &tokens).await;
    // The canary judge's counters sum on the cluster too.
    let target = hopgate_store::RedisTarget::Cluster {
        endpoints: cluster.nodes.iter().map(|n| n.url()).collect(),
    };
    let open = || {
        hopgate_store::SharedCounters::canary(&target, "hopgate:", 7, Duration::from_secs(2))
            .expect("endpoints")
    };
    let (mut a, mut b) = (open(), open());
    a.add_and_read(&[("c:r".into(), 3)]).await.expect("counted");
    let sums = b.add_and_read(&[("c:r".into(), 2)]).await.expect("counted");
    assert_eq!(sums["c:r"], 5, "{sums:?}");
}
