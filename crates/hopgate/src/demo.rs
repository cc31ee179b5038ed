//! `hopgate demo`: the story of a zero-downtime gateway, told on loopback.
//!
//! Starts demo backends and the gateway in front of them (sessions on), in
//! this process, prints the dashboard URL, then drives traffic from
//! sessions that each keep a context, restarts one node and drains another,
//! and narrates every hop as the gateway records it (its hop feed) and the
//! final count. `--drive` ends there; without it the demo keeps running
//! (light traffic, the dashboard live) until Ctrl-C. Logs are quiet (errors
//! only) and the access log off unless `--access-log`. For showing and
//! trying hopgate; not used by the gateway itself.

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
use hopgate_proxy::telemetry::{self, HopRecord};

use crate::backend;
use crate::gateway::{wait_for_signals, Gateway};

#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Where the gateway listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Where the admin API (and the dashboard) listens.
    #[arg(long, default_value = "127.0.0.1:9901")]
    admin: SocketAddr,
    /// How many demo backends to start.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=16))]
    nodes: u8,
    /// Requests to drive, spread over the sessions.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=1_000_000))]
    requests: u64,
    /// Client sessions sending them.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    sessions: u64,
    /// Tell the story, print the count and exit (else keep running).
    #[arg(long)]
    drive: bool,
    /// Write the access log (one line per request) to stderr.
    #[arg(long)]
    access_log: bool,
}

/// The log filter when `RUST_LOG` is not set: errors only, plus the access
/// log when asked for.
pub(crate) fn log_filter(args: &DemoArgs) -> &'static str {
    if args.access_log {
        "error,hopgate::access=info"
    } else {
        "error"
    }
}

/// Hops narrated one by one; more are only counted (the story stays short).
const NARRATED: u64 = 30;

struct DemoNode {
    id: String,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl DemoNode {
    fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
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
        "listeners:\n  - {{ name: public, address: \"{}\", debug_headers: true }}\nadmin:\n  address: \"{}\"\n\
         services:\n  - name: demo\n    lb: smooth_wrr\n    drain: {{ mode: migrate, deadline: 30s }}\n\
         \x20   health: {{ path: /health, interval: 1s, timeout: 500ms, rise: 1, fall: 1 }}\n    nodes:\n",
        args.listen, args.admin
    );
    for n in nodes {
        s.push_str(&format!(
            "      - {{ id: {}, address: \"{}\", version: v1, weight: 100 }}\n",
            n.id, n.addr
        ));
    }
    s.push_str("routes:\n  - { id: default, match: { path_prefix: / }, service: demo }\n");
    s.push_str("sessions: { enabled: true, context_max: 4KiB }\n");
    s
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let mut nodes = Vec::new();
    for i in 1..=args.nodes {
        nodes.push(start_node(&format!("node-{i}"), "127.0.0.1:0".parse()?).await?);
    }
    let text = demo_config(&args, &nodes);
    let cfg = config::load(&text, config::Format::Yaml).map_err(|errors| {
        let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        anyhow::anyhow!("demo config invalid: {}", all.join("; "))
    })?;
    let gw = Gateway::start(
        cfg,
        Source::Embedded,
        None,
        crate::listenfd::Inherited::none(),
        None,
    )
    .await?;
    gw.print_ready();
    let public = gw.listeners[0].1;
    let list: Vec<String> = nodes
        .iter()
        .map(|n| format!("{} {}", n.id, n.addr))
        .collect();
    println!(
        "hopgate demo: {} backends ({})",
        nodes.len(),
        list.join(", ")
    );
    println!("dashboard: http://{}/", gw.admin_addr);
    println!("try: curl -s http://{public}/hello   (the JSON names the node that answered)");
    println!(
        "     curl -sN http://{}/admin/v1/events   (the live feed)",
        gw.admin_addr
    );
    if !args.drive {
        println!("the story starts in 5 s: open the dashboard now");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let result = story(&args, public, gw.admin_addr, &mut nodes).await;
    if result.is_ok() && !args.drive {
        println!("still running: light traffic continues; Ctrl-C to stop");
        let trickle = tokio::spawn(trickle(public));
        wait_for_signals(&gw).await;
        trickle.abort();
    }
    gw.shutdown().await;
    nodes.iter_mut().for_each(DemoNode::stop);
    result
}

/// Drives the traffic, restarts node-1, drains node-2, narrates each hop.
async fn story(
    args: &DemoArgs,
    public: SocketAddr,
    admin: SocketAddr,
    nodes: &mut [DemoNode],
) -> anyhow::Result<()> {
    let (told, all_told) = oneshot::channel();
    let narrator = tokio::spawn(narrate(telemetry::subscribe_hops(), all_told));
    let progress = Arc::new(Progress::default());
    let per = args.requests / args.sessions;
    let extra = args.requests % args.sessions;
    println!(
        "driving {} requests from {} sessions, each with a context the gateway keeps",
        thousands(args.requests),
        args.sessions
    );
    let mut clients = Vec::new();
    for i in 0..args.sessions {
        let n = per + u64::from(i < extra);
        clients.push(tokio::spawn(session(public, i, n, Arc::clone(&progress))));
    }
    let at = |share: u64| args.requests * share / 100;
    progress.wait_for(at(20)).await;
    println!("restarting {} …", nodes[0].id);
    nodes[0].stop();
    progress.wait_for(at(40)).await;
    let (id, addr) = (nodes[0].id.clone(), nodes[0].addr);
    nodes[0] = start_node(&id, addr).await?;
    println!("{id} is back on {addr}");
    progress.wait_for(at(60)).await;
    println!("draining {} …", nodes[1].id);
    admin_post(
        admin,
        &format!("/admin/v1/nodes/demo/{}/drain", nodes[1].id),
    )
    .await?;
    for c in clients {
        let _ = c.await;
    }
    // Every hop is recorded before its answer leaves the gateway: all are
    // in the feed now.
    let _ = told.send(());
    let _ = narrator.await;
    let hops = telemetry::hop_histogram().1;
    println!(
        "{} requests, {} errors, {} hops",
        thousands(progress.done.load(Ordering::Relaxed)),
        thousands(progress.errors.load(Ordering::Relaxed)),
        thousands(hops),
    );
    let lost = progress.context_lost.load(Ordering::Relaxed);
    if lost > 0 {
        println!("{lost} hops arrived without their context");
    }
    if !args.drive {
        admin_post(
            admin,
            &format!("/admin/v1/nodes/demo/{}/undrain", nodes[1].id),
        )
        .await?;
    }
    Ok(())
}

/// Prints each hop the gateway records, as it happens, until `done` and
/// the feed is empty.
async fn narrate(mut sub: telemetry::Subscription<HopRecord>, mut done: oneshot::Receiver<()>) {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    let mut told = 0u64;
    let mut finishing = false;
    loop {
        let next = if finishing {
            match sub.rx.try_recv() {
                Ok(h) => Ok(h),
                Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                Err(_) => return,
            }
        } else {
            tokio::select! {
                r = sub.rx.recv() => r,
                _ = &mut done => {
                    finishing = true;
                    continue;
                }
            }
        };
        let h = match next {
            Ok(h) => h,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        told += 1;
        if told > NARRATED {
            if told == NARRATED + 1 {
                println!("… (more hops: counted below, listed in the dashboard)");
            }
            continue;
        }
        let context = if h.context_bytes > 0 {
            "context kept"
        } else {
            "no context"
        };
        println!(
            "session {}… hopped {} → {} ({}), {context}",
            h.session.get(..4).unwrap_or(&h.session),
            h.from,
            h.to,
            h.reason
        );
    }
}

#[derive(Default)]
struct Progress {
    done: AtomicU64,
    errors: AtomicU64,
    context_lost: AtomicU64,
    moved: tokio::sync::Notify,
}

impl Progress {
    fn count(&self, ok: bool) {
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.done.fetch_add(1, Ordering::Relaxed);
        self.moved.notify_waiters();
    }

    async fn wait_for(&self, n: u64) {
        loop {
            let moved = self.moved.notified();
            if self.done.load(Ordering::Relaxed) >= n {
                return;
            }
            // Bounded: a stalled run still moves on.
            let _ = tokio::time::timeout(Duration::from_millis(100), moved).await;
        }
    }
}

/// One client session: its first answer gives the token and a context to
/// keep (`cart-N`); every hop must bring that context to the new node.
async fn session(public: SocketAddr, i: u64, requests: u64, p: Arc<Progress>) {
    let context = format!("cart-{i}");
    let mut token: Option<String> = None;
    for k in 0..requests {
        let path = if k == 0 {
            format!("/demo?context={context}")
        } else {
            "/demo".to_owned()
        };
        match get(public, &path, token.as_deref()).await {
            Ok((200, issued, body)) => {
                token = token.or(issued);
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                if v["hop_from"].is_string() && v["hop_context"] != context.as_str() {
                    p.context_lost.fetch_add(1, Ordering::Relaxed);
                }
                p.count(true);
            }
            _ => p.count(false),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A few requests a second, so the dashboard has something to show.
async fn trickle(public: SocketAddr) {
    loop {
        let _ = get(public, "/demo", None).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, Option<String>, Bytes)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut req = http::Request::get(path).header(http::header::HOST, addr.to_string());
    if let Some(t) = token {
        req = req.header("hop-session", t);
    }
    let resp = sender
        .send_request(req.body(Empty::<Bytes>::new())?)
        .await?;
    let status = resp.status().as_u16();
    let issued = resp
        .headers()
        .get("hop-session")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, issued, body))
}

async fn admin_post(admin: SocketAddr, path: &str) -> anyhow::Result<()> {
    let stream = tokio::net::TcpStream::connect(admin).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let req = http::Request::post(path)
        .header(http::header::HOST, admin.to_string())
        .body(Empty::<Bytes>::new())?;
    let status = sender.send_request(req).await?.status();
    anyhow::ensure!(status.is_success(), "POST {path}: {status}");
    Ok(())
}

/// `2000` as `2,000`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut o = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    o
}

#[cfg(test)]
mod tests {
    #[test]
    fn thousands_groups_digits() {
        assert_eq!(super::thousands(0), "0");
        assert_eq!(super::thousands(999), "999");
        assert_eq!(super::thousands(2000), "2,000");
        assert_eq!(super::thousands(1_234_567), "1,234,567");
    }
}
