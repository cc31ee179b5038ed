//! `hopgate demo`: demo backends and the gateway in front of them, all in
//! this process on loopback, with the curl commands to try. With `--drive`
//! it also sends traffic, restarts a node mid-way and reports what clients
//! saw. For showing and trying hopgate; not used by the gateway itself.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use hopgate_control::Source;
use hopgate_core::config;

use crate::backend;
use crate::gateway::{wait_for_signals, Gateway};

#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Where the gateway listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the admin API listens.
    #[arg(long, default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// How many demo backends to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=16))]
    nodes: u8,
    /// Drive traffic, restart a node under load, print the outcome and exit.
    #[arg(long)]
    drive: bool,
}

struct DemoNode {
    id: String,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

async fn start_node(id: &str, addr: SocketAddr) -> anyhow::Result<DemoNode> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = oneshot::channel::<()>();
    let id_owned = id.to_owned();
    tokio::spawn(async move {
        let _ = backend::serve(listener, id_owned, async move {
            let _ = rx.await;
        })
        .await;
    });
    Ok(DemoNode {
        id: id.to_owned(),
        addr,
        stop: Some(tx),
    })
}

fn demo_config(args: &DemoArgs, nodes: &[DemoNode]) -> String {
    let mut s = format!(
        "listeners:\n  - {{ name: public, address: \"{}\", debug_headers: true }}\nadmin:\n  address: \"{}\"\nservices:\n  - name: demo\n    lb: smooth_wrr\n    nodes:\n",
        args.listen, args.admin
    );
    for n in nodes {
        s.push_str(&format!(
            "      - {{ id: {}, address: \"{}\", version: v1, weight: 100 }}\n",
            n.id, n.addr
        ));
    }
    s.push_str("routes:\n  - { id: default, match: { path_prefix: / }, service: demo }\n");
    s
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut nodes = Vec::new();
    for i in 1..=args.nodes {
        nodes.push(start_node(&format!("node-{i}"), "127.0.0.1:0".parse()?).await?);
    }
    let text = demo_config(&args, &nodes);
    let cfg = config::load(&text, config::Format::Yaml).map_err(|errors| {
        anyhow::anyhow!(
            "demo config invalid: {}",
            errors
                .iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let gw = Gateway::start(
        cfg,
        Source::Embedded,
        None,
        crate::listenfd::Inherited::none(),
    )
    .await?;
    gw.print_ready();
    let public = gw.listeners[0].1;
    println!();
    println!("hopgate demo: {} backends behind the gateway", nodes.len());
    for n in &nodes {
        println!("  {} at {}", n.id, n.addr);
    }
    println!();
    println!("try:");
    println!("  curl -s http://{public}/hello            # JSON from the node that served it");
    println!("  curl -si http://{public}/hello | grep -i x-upstream-addr");
    println!(
        "  curl -s http://{}/admin/v1/nodes         # node state",
        gw.admin_addr
    );
    println!(
        "  curl -s -X POST http://{}/admin/v1/nodes/demo/node-1/drain   # take node-1 out",
        gw.admin_addr
    );
    println!();
    if args.drive {
        drive(public, &mut nodes).await?;
        gw.shutdown().await;
        return Ok(());
    }
    println!("Ctrl-C to stop.");
    wait_for_signals(&gw).await;
    gw.shutdown().await;
    for n in &mut nodes {
        if let Some(s) = n.stop.take() {
            let _ = s.send(());
        }
    }
    Ok(())
}

/// Sends GETs from 8 clients while node-1 is stopped and restarted.
async fn drive(public: SocketAddr, nodes: &mut [DemoNode]) -> anyhow::Result<()> {
    let ok = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let per_node: Arc<parking_lot_free::Counts> = Arc::new(parking_lot_free::Counts::new(nodes));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (ok, errors, per_node) = (ok.clone(), errors.clone(), per_node.clone());
        clients.push(tokio::spawn(async move {
            for _ in 0..250 {
                match get(public).await {
                    Ok((200, body)) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        per_node.count(&body);
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let victim = &mut nodes[0];
    println!("stopping {} ({}) under load ...", victim.id, victim.addr);
    if let Some(s) = victim.stop.take() {
        let _ = s.send(());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!("starting {} again on {}", victim.id, victim.addr);
    let restarted = start_node(&victim.id.clone(), victim.addr).await?;
    *victim = restarted;
    for c in clients {
        let _ = c.await;
    }
    println!(
        "done: {} ok, {} client-visible errors",
        ok.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    );
    for (id, n) in per_node.snapshot() {
        println!("  {id}: {n} responses");
    }
    Ok(())
}

async fn get(addr: SocketAddr) -> anyhow::Result<(u16, Bytes)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = http::Request::get("/demo")
        .header(http::header::HOST, addr.to_string())
        .body(Empty::<Bytes>::new())?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

/// Per-node response counts without a lock: one atomic per node id.
mod parking_lot_free {
    use std::sync::atomic::{AtomicU64, Ordering};

    pub(super) struct Counts {
        ids: Vec<String>,
        counts: Vec<AtomicU64>,
    }

    impl Counts {
        pub(super) fn new(nodes: &[super::DemoNode]) -> Counts {
            Counts {
                ids: nodes.iter().map(|n| n.id.clone()).collect(),
                counts: nodes.iter().map(|_| AtomicU64::new(0)).collect(),
            }
        }

        pub(super) fn count(&self, body: &[u8]) {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
                return;
            };
            let Some(node) = v.get("node").and_then(|n| n.as_str()) else {
                return;
            };
            if let Some(i) = self.ids.iter().position(|id| id == node) {
                self.counts[i].fetch_add(1, Ordering::Relaxed);
            }
        }

        pub(super) fn snapshot(&self) -> Vec<(String, u64)> {
            self.ids
                .iter()
                .cloned()
                .zip(self.counts.iter().map(|c| c.load(Ordering::Relaxed)))
                .collect()
        }
    }
}
