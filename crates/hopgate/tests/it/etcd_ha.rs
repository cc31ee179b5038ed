//! Fleet mode on an etcd cluster of three members (real `etcd` processes on
//! loopback): two replicas with every member as an endpoint serve a steady
//! client loop while the leader is killed, then quorum is lost, then the
//! members come back. No client request fails; config and discovery
//! changes made after each event apply on both replicas; while quorum is
//! lost a config write through etcd is refused with 503, and a drain and a
//! maintenance notice hold on the receiving replica only and say so; the
//! drain reaches the fleet when quorum returns, the notice does not.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{client, json, service, temp_path, within, Backend, EtcdCluster, Gateway};

const PREFIX: &str = "/ha/";

fn key(rest: &str) -> String {
    format!("{PREFIX}{rest}")
}

/// A replica's local file: bootstrap sections, every member an endpoint.
fn bootstrap(replica: &str, endpoints: &str, cache: &Path) -> String {
    format!(
        "replica_id: {replica}\n\
         listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         sources:\n  file: {{ watch: false }}\n  etcd: {{ endpoints: {endpoints}, prefix: \"{PREFIX}\", cache: \"{}\" }}\n",
        cache.display()
    )
}

/// A shared document: one service `api` with `nodes`, every path to it.
fn shared(nodes: &[(&str, SocketAddr, &str)]) -> String {
    format!(
        "services:\n{}routes:\n  - {{ id: default, match: {{ path_prefix: / }}, service: api }}\ntimeouts: {{ shutdown: 5s }}\n",
        service("api", nodes)
    )
}

/// The replicas' cache files, removed with it.
struct Caches(Vec<PathBuf>);

impl Drop for Caches {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A client loop over the replicas until stopped: every answer that is not
/// a 200 with its whole body is kept (the task's result).
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Load {
    fn start(urls: Vec<String>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let (s, o) = (Arc::clone(&stop), Arc::clone(&ok));
        let task = tokio::spawn(async move {
            let c = client();
            let mut failed = Vec::new();
            while !s.load(Ordering::Relaxed) {
                for url in &urls {
                    let answer = match c.get(url).send().await {
                        Ok(r) => {
                            let status = r.status();
                            r.bytes().await.map(|_| status).map_err(|e| e.to_string())
                        }
                        Err(e) => Err(e.to_string()),
                    };
                    match answer {
                        Ok(st) if st == 200 => {
                            o.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(st) => failed.push(format!("{url}: {st}")),
                        Err(e) => failed.push(format!("{url}: {e}")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            failed
        });
        Load { stop, ok, task }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    /// Whether more requests succeed from now on (the loop is alive).
    async fn flows(&self) -> bool {
        let before = self.ok();
        within(Duration::from_secs(10), || async {
            self.ok() >= before + 20
        })
        .await
    }

    /// Stops the loop; the failures seen.
    async fn finish(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let ok = self.ok();
        let failed = self.task.await.expect("the client loop panicked");
        (ok, failed)
    }
}

fn node<'a>(nodes: &'a Value, id: &str) -> Option<&'a Value> {
    nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
}

/// Whether `check` holds on `gw`'s `/admin/v1/nodes` within 15 s.
async fn nodes_become(gw: &Gateway, check: impl Fn(&Value) -> bool) -> bool {
    let check = &check;
    within(Duration::from_secs(15), || async move {
        check(&gw.admin_json("/admin/v1/nodes").await)
    })
    .await
}

/// Whether `check` holds on the `etcd` part of `gw`'s `/admin/v1/fleet`
/// within 30 s.
async fn etcd_becomes(gw: &Gateway, check: impl Fn(&Value) -> bool) -> bool {
    let check = &check;
    within(Duration::from_secs(30), || async move {
        check(&gw.admin_json("/admin/v1/fleet").await["etcd"])
    })
    .await
}

fn healthy(etcd: &Value, reachable: u64) -> bool {
    etcd["state"] == "connected" && etcd["quorum"] == true && etcd["members_reachable"] == reachable
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_cluster_loses_its_leader_then_quorum_under_load_without_a_failed_request() {
    let mut etcd = EtcdCluster::start(3).await;
    let b1 = Backend::start("b1").await;
    let b2 = Backend::start("b2").await;
    let b3 = Backend::start("b3").await;
    etcd.put(&key("config"), &shared(&[("s1", b1.addr, "")]));
    let caches = Caches(vec![temp_path("json"), temp_path("json")]);
    let eps = etcd.endpoints_yaml();
    let a = Gateway::start(&bootstrap("gw-a", &eps, &caches.0[0])).await;
    let b = Gateway::start(&bootstrap("gw-b", &eps, &caches.0[1])).await;
    for gw in [&a, &b] {
        assert!(
            etcd_becomes(gw, |e| healthy(e, 3)).await,
            "not connected to all three members; logs:\n{}",
            gw.logs()
        );
    }
    let metrics = a.metrics().await;
    assert!(
        metrics.contains("hopgate_fleet_etcd_quorum 1")
            && metrics.contains("hopgate_fleet_etcd_members_reachable 3"),
        "{metrics}"
    );
    let load = Load::start(vec![a.url("/"), b.url("/")]);
    assert!(load.flows().await, "the client loop does not get answers");

    // 1. The leader dies: the replicas move to another member, and a
    // config change made after it applies on both.
    let leader = etcd.leader().expect("the cluster has a leader");
    etcd.kill(leader);
    let new_leader = within(Duration::from_secs(30), || async {
        etcd.leader().is_some_and(|l| l != leader)
    })
    .await;
    assert!(new_leader, "no new leader was elected");
    etcd.put(
        &key("config"),
        &shared(&[("s1", b1.addr, ""), ("s2", b2.addr, "")]),
    );
    for gw in [&a, &b] {
        assert!(
            nodes_become(gw, |n| node(n, "s2").is_some()).await,
            "the config change after the leader kill did not apply; logs:\n{}",
            gw.logs()
        );
        assert!(
            etcd_becomes(gw, |e| healthy(e, 2)).await,
            "the dead member is not shown; fleet: {}",
            gw.admin_json("/admin/v1/fleet").await
        );
    }

    // 2. The old leader comes back, then the two others die: one member
    // of three is left, reachable but without a leader.
    etcd.restart(leader);
    etcd.wait_quorum().await;
    for gw in [&a, &b] {
        assert!(etcd_becomes(gw, |e| healthy(e, 3)).await);
    }
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    for i in &others {
        etcd.kill(*i);
    }
    for gw in [&a, &b] {
        assert!(
            etcd_becomes(gw, |e| e["state"] == "degraded"
                && e["quorum"] == false
                && e["members_reachable"] == 1)
            .await,
            "quorum loss not seen; fleet: {}",
            gw.admin_json("/admin/v1/fleet").await
        );
    }
    assert!(load.flows().await, "requests stopped without quorum");
    let metrics = a.metrics().await;
    assert!(
        metrics.contains("hopgate_fleet_etcd_quorum 0")
            && metrics.contains("hopgate_fleet_etcd_members_reachable 1"),
        "{metrics}"
    );

    // A config write through etcd is refused with 503 and says why.
    let r = client()
        .put(a.admin_url("/admin/v1/config?canary=50&bake=10s"))
        .body(shared(&[("s2", b2.addr, "")]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body = json(r).await;
    assert_eq!(body["errors"][0]["path"], "", "{body}");
    let message = body["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("etcd has no quorum"), "{message}");

    // A drain applies on the receiving replica only, and the answer says so.
    let r = client()
        .post(a.admin_url("/admin/v1/nodes/api/s1/drain"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = json(r).await;
    assert_eq!(body["draining"], true, "{body}");
    assert_eq!(body["fleet"], "not_shared", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("etcd has no quorum"),
        "{body}"
    );
    let drained = |n: &Value| node(n, "s1").is_some_and(|s| s["draining"] == true);
    assert!(drained(&a.admin_json("/admin/v1/nodes").await));
    assert!(!drained(&b.admin_json("/admin/v1/nodes").await));
    let fleet = a.admin_json("/admin/v1/fleet").await;
    assert_eq!(
        fleet["etcd"]["unshared_drains"][0]["node"], "api/s1",
        "{fleet}"
    );

    // So does a maintenance notice.
    let notice =
        serde_json::json!({ "service": "api", "node": "s2", "kind": "MIGRATING", "seq": 1 });
    let r = client()
        .post(a.admin_url("/admin/v1/maintenance"))
        .json(&notice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = json(r).await;
    assert_eq!(body["fleet"], "not_shared", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("etcd has no quorum"),
        "{body}"
    );
    let relaxed = |n: &Value| node(n, "s2").is_some_and(|s| s["maintenance"]["relaxed"] == true);
    assert!(relaxed(&a.admin_json("/admin/v1/nodes").await));
    assert!(!relaxed(&b.admin_json("/admin/v1/nodes").await));
    assert!(load.flows().await);

    // 3. Quorum returns: the replicas reconnect by themselves, the drain
    // made meanwhile reaches the fleet, and config and discovery changes
    // made after apply on both.
    for i in &others {
        etcd.restart(*i);
    }
    etcd.wait_quorum().await;
    for gw in [&a, &b] {
        assert!(
            etcd_becomes(gw, |e| healthy(e, 3)).await,
            "no reconnect after quorum returned; logs:\n{}",
            gw.logs()
        );
    }
    assert!(
        nodes_become(&b, drained).await,
        "the drain made without quorum did not reach the other replica; logs of gw-a:\n{}",
        a.logs()
    );
    assert!(etcd_becomes(&a, |e| e["unshared_drains"] == serde_json::json!([])).await);
    // The notice was not: it announced an event at a time now past.
    assert!(!relaxed(&b.admin_json("/admin/v1/nodes").await));
    etcd.put(
        &key("config"),
        &shared(&[("s2", b2.addr, ""), ("s3", b3.addr, "")]),
    );
    let lease = etcd.lease_grant(60);
    let reg = format!(r#"{{"address":"{}","version":"","weight":100}}"#, b1.addr);
    etcd.put_lease(&key("nodes/api/d1"), &reg, &lease);
    for gw in [&a, &b] {
        assert!(
            nodes_become(gw, |n| node(n, "s1").is_none()
                && node(n, "s3").is_some()
                && node(n, "d1").is_some())
            .await,
            "the config and discovery changes after quorum returned did not apply; logs:\n{}",
            gw.logs()
        );
    }
    assert!(load.flows().await);

    let (ok, failed) = load.finish().await;
    assert!(ok > 0);
    assert!(
        failed.is_empty(),
        "{} failed requests: {:?}",
        failed.len(),
        &failed[..failed.len().min(10)]
    );
}
