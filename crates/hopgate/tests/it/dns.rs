//! DNS discovery (`services[].discovery.dns`) against a real DNS server:
//! `tests/it/py/dns_server.py` (dnslib's wire format) on a free loopback
//! port, answering from a JSON file it re-reads on every query, so a test
//! changes the records by rewriting the file. Backends listen on distinct
//! 127.0.0.x addresses with one port, so A records list distinct nodes.
//!
//! An address that leaves the records drains (no client error, its session
//! hops with its context), one that joins gets requests, a DNS outage keeps
//! the last good set (counted, shown in the admin API), and SRV weights are
//! the nodes' weights with higher priorities as backups.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{client, json as body_json, temp_path, Backend, Gateway};

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/dns_server.py");
const SECRET: &str = "dns-secret-0123456789abcdefghijklmnopqr";

/// The DNS server child and the records file it answers from.
struct DnsServer {
    port: u16,
    records: PathBuf,
    child: Option<Child>,
}

impl DnsServer {
    async fn start(records: &Value) -> DnsServer {
        let path = temp_path("json");
        std::fs::write(&path, records.to_string()).unwrap();
        let mut child = Command::new("python3")
            .arg(SERVER)
            .arg(&path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 (with dnslib: pip install dnslib) runs the DNS server");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the DNS server did not start")
            .unwrap()
            .expect("the DNS server printed its port (is dnslib installed?)");
        let port = line.trim_start_matches("port ").parse().unwrap();
        DnsServer {
            port,
            records: path,
            child: Some(child),
        }
    }

    /// New records, answered from the next query on.
    fn set(&self, records: &Value) {
        let tmp = self.records.with_extension("tmp");
        std::fs::write(&tmp, records.to_string()).unwrap();
        std::fs::rename(&tmp, &self.records).unwrap();
    }

    async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.records);
    }
}

fn a_records(ips: &[&str]) -> Value {
    json!({ "ttl": 0, "a": { "api.test.": ips } })
}

/// Backends on `127.0.0.<last>` for each of `lasts`, all on one port.
async fn backends_on_one_port(lasts: &[u8]) -> Vec<Backend> {
    let first = Backend::start_on(
        &format!("b{}", lasts[0]),
        format!("127.0.0.{}:0", lasts[0]).parse().unwrap(),
    )
    .await;
    let port = first.addr.port();
    let mut out = vec![first];
    for l in &lasts[1..] {
        let addr: SocketAddr = format!("127.0.0.{l}:{port}").parse().unwrap();
        out.push(Backend::start_on(&format!("b{l}"), addr).await);
    }
    out
}

fn gateway_yaml(dns: &str, lb: &str) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         timeouts: {{ shutdown: 10s }}\n\
         services:\n  - name: s\n    lb: {lb}\n    drain: {{ mode: migrate, deadline: 5s }}\n    discovery:\n      dns: {dns}\n    nodes: []\n\
         routes:\n  - {{ id: r, match: {{ path_prefix: / }}, service: s }}\n\
         sessions: {{ secret_env: HG_SECRET, ttl: 1h }}\n"
    )
}

async fn start_gateway(dns: &DnsServer, extra: &str, lb: &str) -> Gateway {
    let block = format!(
        "{{ name: {extra}, resolvers: [\"127.0.0.1:{}\"], refresh_min: 200ms, refresh_max: 1s }}",
        dns.port
    );
    Gateway::start_with_env(&gateway_yaml(&block, lb), &[("HG_SECRET", SECRET)]).await
}

/// The node ids of service `s` in `GET /admin/v1/nodes`.
async fn node_ids(gw: &Gateway) -> Vec<String> {
    let v = gw.admin_json("/admin/v1/nodes").await;
    let mut ids: Vec<String> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["service"] == "s")
        .map(|n| n["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// Waits (bounded) until service `s` has exactly `want` nodes.
async fn wait_nodes(gw: &Gateway, want: &[String]) {
    let mut want = want.to_vec();
    want.sort();
    for _ in 0..200 {
        if node_ids(gw).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "nodes {:?}, wanted {want:?}; logs:\n{}",
        node_ids(gw).await,
        gw.logs()
    );
}

fn id_of(addr: SocketAddr) -> String {
    format!("api.test@{addr}")
}

/// Requests in a loop until stopped: (requests, errors, nodes seen).
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u64, u64, BTreeMap<String, u64>)>,
}

impl Load {
    fn start(gw: &Gateway) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let url = gw.url("/");
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let c = client();
            let (ok, errors) = (AtomicU64::new(0), AtomicU64::new(0));
            let mut seen = BTreeMap::new();
            // Bounded: at most 20 000 requests or 60 s.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            for _ in 0..20_000 {
                if s.load(Ordering::Relaxed) || tokio::time::Instant::now() > deadline {
                    break;
                }
                match c.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        let v = body_json(r).await;
                        *seen
                            .entry(v["node"].as_str().unwrap_or("?").to_owned())
                            .or_insert(0) += 1;
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (ok.into_inner(), errors.into_inner(), seen)
        });
        Load { stop, task }
    }

    async fn finish(self) -> (u64, u64, BTreeMap<String, u64>) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

async fn get(gw: &Gateway, path: &str, token: Option<&str>) -> (reqwest::header::HeaderMap, Value) {
    let mut req = client().get(gw.url(path));
    if let Some(t) = token {
        req = req.header("hop-session", t);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    let headers = r.headers().clone();
    (headers, body_json(r).await)
}

#[tokio::test]
async fn an_address_that_leaves_the_records_drains_and_its_session_hops_with_its_context() {
    let b = backends_on_one_port(&[2, 3]).await;
    let dns = DnsServer::start(&a_records(&["127.0.0.2", "127.0.0.3"])).await;
    let gw = start_gateway(
        &dns,
        &format!("api.test, port: {}", b[0].addr.port()),
        "smooth_wrr",
    )
    .await;
    wait_nodes(&gw, &[id_of(b[0].addr), id_of(b[1].addr)]).await;

    // A session on b2 with a context the backend asked the gateway to keep.
    let mut token = None;
    for _ in 0..50 {
        let (headers, v) = get(&gw, "/login?context=cart%3D3", None).await;
        if v["node"] == "b2" {
            token = Some(headers["hop-session"].to_str().unwrap().to_owned());
            break;
        }
    }
    let token = token.expect("a session landed on b2");
    let (_, v) = get(&gw, "/", Some(&token)).await;
    assert_eq!(v["node"], "b2", "bound: {v}");

    let load = Load::start(&gw);
    tokio::time::sleep(Duration::from_millis(300)).await;
    dns.set(&a_records(&["127.0.0.3"]));
    wait_nodes(&gw, &[id_of(b[1].addr)]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ok, errors, seen) = load.finish().await;
    assert_eq!(
        errors, 0,
        "no client error while the node left ({ok} ok, {seen:?})"
    );
    assert!(ok > 20, "{ok}");

    // The session hops to b3 with its context, named from the drained node.
    let (_, v) = get(&gw, "/cart", Some(&token)).await;
    assert_eq!(v["node"], "b3", "{v}");
    assert_eq!(v["hop_from"], id_of(b[0].addr).as_str(), "{v}");
    assert_eq!(v["hop_context"], "cart=3", "the context travels: {v}");
    assert!(
        gw.logs().contains("node removed from config; draining"),
        "{}",
        gw.logs()
    );
    let versions = gw.admin_json("/admin/v1/config/versions").await;
    assert!(versions.to_string().contains("\"dns\""), "{versions}");
}

#[tokio::test]
async fn an_address_that_joins_the_records_gets_requests() {
    let b = backends_on_one_port(&[5, 6]).await;
    let dns = DnsServer::start(&a_records(&["127.0.0.5"])).await;
    let gw = start_gateway(
        &dns,
        &format!("api.test, port: {}", b[0].addr.port()),
        "smooth_wrr",
    )
    .await;
    wait_nodes(&gw, &[id_of(b[0].addr)]).await;
    let load = Load::start(&gw);
    tokio::time::sleep(Duration::from_millis(200)).await;
    dns.set(&a_records(&["127.0.0.5", "127.0.0.6"]));
    wait_nodes(&gw, &[id_of(b[0].addr), id_of(b[1].addr)]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, errors, seen) = load.finish().await;
    assert_eq!(errors, 0, "{seen:?}");
    assert!(
        seen.get("b6").copied().unwrap_or(0) > 0,
        "the new node serves: {seen:?} of {ok}"
    );
    // Both are served from now on.
    let mut after = BTreeMap::new();
    for _ in 0..10 {
        let (_, v) = get(&gw, "/", None).await;
        *after
            .entry(v["node"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(after.len(), 2, "{after:?}");
}

#[tokio::test]
async fn a_dns_outage_keeps_the_last_good_set_and_is_counted() {
    let b = backends_on_one_port(&[7, 8]).await;
    let mut dns = DnsServer::start(&a_records(&["127.0.0.7", "127.0.0.8"])).await;
    let gw = start_gateway(
        &dns,
        &format!("api.test, port: {}", b[0].addr.port()),
        "smooth_wrr",
    )
    .await;
    let both = [id_of(b[0].addr), id_of(b[1].addr)];
    wait_nodes(&gw, &both).await;
    let load = Load::start(&gw);

    // SERVFAIL, then an empty answer, then no server at all.
    dns.set(&json!({ "mode": "servfail" }));
    tokio::time::sleep(Duration::from_millis(700)).await;
    dns.set(&json!({ "ttl": 0, "a": { "api.test.": [] } }));
    tokio::time::sleep(Duration::from_millis(700)).await;
    dns.stop().await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (ok, errors, seen) = load.finish().await;
    assert_eq!(errors, 0, "{seen:?}");
    assert!(ok > 20);
    assert_eq!(seen.len(), 2, "both nodes kept serving: {seen:?}");
    wait_nodes(&gw, &both).await;

    let metrics = gw.metrics().await;
    let count = |result: &str| -> u64 {
        let key = format!("hopgate_dns_resolutions_total{{service=\"s\",result=\"{result}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(key.as_str()))
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    assert!(count("ok") >= 1, "{metrics}");
    assert!(count("servfail") >= 1, "{metrics}");
    assert!(count("empty") >= 1, "{metrics}");
    let failed: u64 = [
        "servfail", "empty", "nxdomain", "timeout", "refused", "error",
    ]
    .iter()
    .map(|r| count(r))
    .sum();
    assert!(failed >= 3, "{metrics}");
    assert!(
        metrics.contains("hopgate_dns_nodes{service=\"s\"} 2"),
        "{metrics}"
    );

    let nodes = gw.admin_json("/admin/v1/nodes").await;
    let d = &nodes["dns"][0];
    assert_eq!(d["service"], "s", "{nodes}");
    assert_eq!(d["name"], "api.test");
    assert_ne!(d["last_result"], "ok", "{d}");
    assert!(d["last_success_at"].as_u64().unwrap() > 0, "{d}");
    assert!(d["failures_in_a_row"].as_u64().unwrap() >= 1, "{d}");
    assert_eq!(d["addresses"].as_array().unwrap().len(), 2, "{d}");
}

#[tokio::test]
async fn srv_weights_are_node_weights_and_higher_priorities_are_backups() {
    let b1 = Backend::start("w3").await;
    let b2 = Backend::start("w1").await;
    let backup = Backend::start("backup").await;
    let records = |primary_target: &str| {
        json!({
            "ttl": 0,
            "a": { "t.api.test.": ["127.0.0.1"], "gone.api.test.": [] },
            "srv": { "_http._tcp.api.test.": [
                [10, 3, b1.addr.port(), primary_target],
                [10, 1, b2.addr.port(), primary_target],
                [20, 5, backup.addr.port(), "t.api.test."],
            ] }
        })
    };
    let dns = DnsServer::start(&records("t.api.test.")).await;
    let gw = start_gateway(&dns, "_http._tcp.api.test, type: srv", "smooth_wrr").await;
    let id = |a: SocketAddr| format!("_http._tcp.api.test@{a}");
    wait_nodes(&gw, &[id(b1.addr), id(b2.addr)]).await;
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..400 {
        let (_, v) = get(&gw, "/", None).await;
        *seen
            .entry(v["node"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    let w3 = seen.get("w3").copied().unwrap_or(0);
    let w1 = seen.get("w1").copied().unwrap_or(0);
    assert_eq!(w3 + w1, 400, "the backup gets nothing: {seen:?}");
    assert!((285..=315).contains(&w3), "3:1 shares: {seen:?}");
    let nodes = gw.admin_json("/admin/v1/nodes").await;
    let mut weights: Vec<u64> = nodes["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["weight"].as_u64().unwrap())
        .collect();
    weights.sort_unstable();
    assert_eq!(weights, [1, 3], "{nodes}");

    // The primaries' target has no address any more: the backup serves.
    dns.set(&records("gone.api.test."));
    wait_nodes(&gw, &[id(backup.addr)]).await;
    let (_, v) = get(&gw, "/", None).await;
    assert_eq!(v["node"], "backup");
}

/// Whether `check` holds within `bound` (polled every 50 ms).
async fn eventually<F, Fut>(bound: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while start.elapsed() < bound {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_fleet_every_replica_resolves_beside_etcd_discovery() {
    let b = backends_on_one_port(&[9, 10]).await;
    let registered = Backend::start("etcd-node").await;
    let dns = DnsServer::start(&a_records(&["127.0.0.9"])).await;
    let etcd = crate::etcd_server::Etcd::start().await;
    let prefix = format!("/it-dns-{}/", std::process::id());
    let shared = format!(
        "services:\n  - name: s\n    discovery:\n      dns: {{ name: api.test, port: {}, resolvers: [\"127.0.0.1:{}\"], refresh_min: 200ms, refresh_max: 1s }}\n    nodes: []\n\
         routes:\n  - {{ id: r, match: {{ path_prefix: / }}, service: s }}\n",
        b[0].addr.port(),
        dns.port
    );
    etcd.put(&format!("{prefix}config"), &shared);
    let lease = etcd.lease_grant(30);
    etcd.put_lease(
        &format!("{prefix}nodes/s/d1"),
        &format!(r#"{{"address":"{}"}}"#, registered.addr),
        &lease,
    );
    let mut replicas = Vec::new();
    let mut caches = Vec::new();
    for name in ["gw-a", "gw-b"] {
        let cache = temp_path("json");
        let yaml = format!(
            "replica_id: {name}\nlisteners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
             sources:\n  file: {{ watch: false }}\n  etcd: {{ endpoints: [\"{}\"], prefix: \"{prefix}\", cache: \"{}\" }}\n",
            etcd.endpoint,
            cache.display()
        );
        caches.push(cache);
        replicas.push(Gateway::start(&yaml).await);
    }
    // Both replicas: the registered node and the resolved one.
    for gw in &replicas {
        wait_nodes(gw, &["d1".to_owned(), id_of(b[0].addr)]).await;
    }
    // The records change: every replica follows on its own; the etcd node stays.
    dns.set(&a_records(&["127.0.0.10"]));
    for gw in &replicas {
        wait_nodes(gw, &["d1".to_owned(), id_of(b[1].addr)]).await;
    }
    // The registration goes: the resolved node keeps the service (the
    // burst rule holds nothing back, as the service is not left empty).
    etcd.lease_revoke(&lease);
    for gw in &replicas {
        wait_nodes(gw, &[id_of(b[1].addr)]).await;
        let served = eventually(Duration::from_secs(5), || async {
            let (_, v) = get(gw, "/", None).await;
            v["node"] == "b10"
        })
        .await;
        assert!(served, "{}", gw.logs());
    }
    for c in caches {
        let _ = std::fs::remove_file(c);
    }
}
