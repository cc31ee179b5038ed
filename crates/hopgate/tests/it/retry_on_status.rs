//! Retry on a backend's "not processed" answers (`services[].retries`): a
//! backend that answers 503 while it shuts down gracefully (`hopgate
//! backend --unavailable-on-term`) under keep-alive load with plain POSTs
//! shows no client a 503, and no POST reaches a backend twice.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{addr_after, client, config, metric, temp_path, Gateway, BIN};

/// A `hopgate backend` that records every request id it processes and,
/// after SIGTERM, refuses work with 503 for `refuse` before it exits.
struct Refusing {
    addr: SocketAddr,
    child: Child,
}

impl Refusing {
    async fn start(id: &str, record: &Path, refuse: &str) -> Refusing {
        let mut child = Command::new(BIN)
            .args(["backend", "--id", id, "--listen", "127.0.0.1:0"])
            .arg("--record")
            .arg(record)
            .args(["--unavailable-on-term", refuse])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn hopgate backend");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("backend did not start")
            .unwrap()
            .expect("backend printed nothing");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Refusing {
            addr: addr_after(&line, "listening on "),
            child,
        }
    }

    fn sigterm(&self) {
        let pid = self.child.id().expect("running").to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
    }
}

#[tokio::test]
async fn a_draining_backends_503s_are_retried_and_no_post_runs_twice() {
    let record = temp_path("ids");
    let n1 = Refusing::start("n1", &record, "2s").await;
    let n2 = Refusing::start("n2", &record, "2s").await;
    let services = format!(
        "  - name: app\n    retries: {{ on_status: [503] }}\n    nodes:\n      - {{ id: n1, address: \"{}\" }}\n      - {{ id: n2, address: \"{}\" }}\n",
        n1.addr, n2.addr
    );
    let gw = Gateway::start(&config(
        &services,
        "  - { id: all, match: { path_prefix: / }, service: app }\n",
    ))
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for task in 0..8 {
        let (stop, ok, url) = (stop.clone(), ok.clone(), gw.url("/orders"));
        clients.push(tokio::spawn(async move {
            // One keep-alive connection per task.
            let c = client();
            let mut failures = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) || i < 20 {
                let id = format!("post-{task}-{i}");
                let r = c
                    .post(&url)
                    .header("x-request-id", &id)
                    .body(format!("order {id}"))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => {
                        let _ = r.bytes().await;
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => failures.push(format!("{id}: {}", r.status())),
                    Err(e) => failures.push(format!("{id}: {e}")),
                }
                i += 1;
            }
            failures
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // n1 drains: for 2 s every answer it gives is a 503 it did not process.
    n1.sigterm();
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "client-visible errors: {} e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    let served = ok.load(Ordering::Relaxed);
    // Every POST a client got a 200 for was processed exactly once.
    let text = std::fs::read_to_string(&record).unwrap();
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for id in text.lines() {
        *counts.entry(id).or_insert(0) += 1;
    }
    for (id, n) in &counts {
        assert_eq!(*n, 1, "POST {id} reached a backend {n} times");
    }
    assert_eq!(
        counts.len() as u64,
        served,
        "a 200 without a processed POST"
    );
    let metrics = gw.metrics().await;
    let retried = metric(
        &metrics,
        "hopgate_retries_on_status_total",
        &[("service", "app"), ("status", "503")],
    )
    .unwrap_or(0.0);
    println!("{served} POSTs served, {retried} answers of 503 retried on the other node");
    assert!(retried > 0.0, "no 503 was retried:\n{metrics}");
    let _ = std::fs::remove_file(&record);
}

/// When every node answers a status of `on_status` and no other node is
/// left to try, the client gets the last backend's answer as it came (its
/// status and body), not a 502 of the gateway's.
#[tokio::test]
async fn when_every_node_refuses_the_last_refusal_passes_through() {
    let (a, b) = (
        crate::harness::Backend::start("n1").await,
        crate::harness::Backend::start("n2").await,
    );
    let yaml = config(
        &format!(
            "  - name: app\n    retries: {{ on_status: [503] }}\n    nodes:\n      - {{ id: n1, address: \"{}\" }}\n      - {{ id: n2, address: \"{}\" }}\n",
            a.addr, b.addr
        ),
        "  - { id: all, match: { path_prefix: / }, service: app }",
    );
    let gw = Gateway::start(&yaml).await;
    let r = client()
        .post(gw.url("/refuse?status=503"))
        .body("once")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "the backend's own answer, not a 502");
    let body: serde_json::Value = r.json().await.unwrap();
    let node = body["node"].as_str().unwrap_or_default().to_owned();
    assert!(node == "n1" || node == "n2", "{body}");
    let metrics = gw.metrics().await;
    let retried = metric(
        &metrics,
        "hopgate_retries_on_status_total",
        &[("service", "app"), ("status", "503")],
    )
    .unwrap_or(0.0);
    assert!(retried >= 1.0, "the first refusal was retried:\n{metrics}");
}
