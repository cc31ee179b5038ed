//! Test harness: handles for `hopgate backend` and `hopgate run` child
//! processes on ephemeral loopback ports. Every handle kills its process on
//! drop, so a failing test leaves nothing behind. No fixed ports, no pkill.
//!
//! Besides the process handles it holds the one copy of what every test
//! file needs: the polling helper ([`within`]), the Prometheus text reader
//! ([`metric`]), the fleet handle ([`Fleet`], in `harness/fleet.rs`:
//! replicas on one etcd prefix) and an etcd cluster of several members
//! ([`EtcdCluster`], in `harness/etcd_cluster.rs`). Test files keep only
//! what is theirs.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

mod etcd_cluster;
mod fleet;
mod metrics;
mod nginx;
pub mod redis_ha;

pub use etcd_cluster::EtcdCluster;
pub use fleet::Fleet;
pub use metrics::metric;
pub use nginx::{curl, Nginx};

pub const BIN: &str = env!("CARGO_BIN_EXE_hopgate");

/// How long a child may take to print its ready line before the test gives
/// up (a bound against hangs, not an assertion about speed).
const READY_BOUND: Duration = Duration::from_secs(30);

pub fn temp_path(ext: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "hopgate-it-{}-{}.{ext}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Reads stdout lines until one starts with `prefix`; returns the rest of
/// the lines seen so far too (the gateway prints several ready lines).
/// Every stdout line a child printed after its ready lines.
pub type Lines = std::sync::Arc<parking_lot::Mutex<Vec<String>>>;

async fn wait_lines(child: &mut Child, want: usize) -> Vec<String> {
    wait_lines_into(child, want, Lines::default()).await
}

async fn wait_lines_into(child: &mut Child, want: usize, rest: Lines) -> Vec<String> {
    let stdout = child.stdout.take().expect("stdout piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut got = Vec::new();
    let read = async {
        while got.len() < want {
            match lines.next_line().await {
                Ok(Some(l)) => got.push(l),
                _ => break,
            }
        }
    };
    tokio::time::timeout(READY_BOUND, read)
        .await
        .expect("child did not become ready");
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            rest.lock().push(l);
        }
    });
    got
}

pub fn addr_after(line: &str, key: &str) -> SocketAddr {
    let start = line
        .find(key)
        .unwrap_or_else(|| panic!("{key} not in {line:?}"))
        + key.len();
    line[start..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|e| panic!("bad address in {line:?}: {e}"))
}

/// A `hopgate backend` child process.
pub struct Backend {
    pub id: String,
    pub addr: SocketAddr,
    child: Option<Child>,
}

impl Backend {
    pub async fn start(id: &str) -> Backend {
        Backend::start_on(id, "127.0.0.1:0".parse().unwrap()).await
    }

    pub async fn start_on(id: &str, addr: SocketAddr) -> Backend {
        Backend::start_with(id, addr, None).await
    }

    /// Starts a backend that appends every request id it receives to `record`.
    pub async fn start_recording(id: &str, addr: SocketAddr, record: &std::path::Path) -> Backend {
        Backend::start_with(id, addr, Some(record)).await
    }

    async fn start_with(id: &str, addr: SocketAddr, record: Option<&std::path::Path>) -> Backend {
        // A port just released may linger briefly; retry the bind a few times.
        for attempt in 0..50 {
            let mut cmd = Command::new(BIN);
            cmd.args(["backend", "--id", id, "--listen", &addr.to_string()]);
            if let Some(r) = record {
                cmd.arg("--record").arg(r);
            }
            let mut child = cmd
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn hopgate backend");
            let lines = wait_lines(&mut child, 1).await;
            if let Some(line) = lines.first() {
                return Backend {
                    id: id.to_owned(),
                    addr: addr_after(line, "listening on "),
                    child: Some(child),
                };
            }
            let _ = child.wait().await;
            tokio::time::sleep(Duration::from_millis(100 + attempt * 10)).await;
        }
        panic!("backend {id} could not bind {addr}");
    }

    /// SIGKILL: the process dies at once, connections are reset.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
            let _ = c.wait().await;
        }
    }

    /// SIGTERM: graceful stop; waits for the process to exit.
    pub async fn term(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(&c, "TERM");
            let _ = c.wait().await;
        }
    }

    /// Starts again on the same address.
    pub async fn restart(&mut self) {
        self.kill().await;
        let mut again = Backend::start_on(&self.id, self.addr).await;
        self.child = again.child.take();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
    }
}

fn signal(child: &Child, sig: &str) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status();
    }
}

/// A `hopgate run` child process with its config in a temp file.
pub struct Gateway {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub config_path: PathBuf,
    child: Option<Child>,
    pub stderr_path: PathBuf,
    /// stdout lines printed after the ready lines (e.g. listeners added by a reload).
    pub stdout: Lines,
}

impl Gateway {
    /// Starts a gateway on `yaml`, which must use `127.0.0.1:0` (or any
    /// free address) for its one listener and its admin.
    pub async fn start(yaml: &str) -> Gateway {
        Gateway::start_with_env(yaml, &[]).await
    }

    pub async fn start_with_env(yaml: &str, env: &[(&str, &str)]) -> Gateway {
        Gateway::start_with(yaml, env, &[]).await
    }

    /// [`Gateway::start_with_env`] with more `hopgate run` arguments.
    pub async fn start_with(yaml: &str, env: &[(&str, &str)], args: &[&str]) -> Gateway {
        let path = temp_path("yaml");
        std::fs::write(&path, yaml).unwrap();
        let stderr_path = temp_path("log");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"])
            .arg(&path)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn hopgate run");
        let stdout = Lines::default();
        let lines = wait_lines_into(&mut child, 2, stdout.clone()).await;
        assert_eq!(
            lines.len(),
            2,
            "gateway did not start; stderr:\n{}",
            std::fs::read_to_string(&stderr_path).unwrap_or_default()
        );
        Gateway {
            addr: addr_after(&lines[0], "addr="),
            admin: addr_after(&lines[1], "addr="),
            config_path: path,
            child: Some(child),
            stderr_path,
            stdout,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    /// Waits (bounded) for a later stdout line containing `needle`.
    pub async fn wait_stdout(&self, needle: &str) -> String {
        let line = || {
            self.stdout
                .lock()
                .iter()
                .find(|l| l.contains(needle))
                .cloned()
        };
        let seen = within(Duration::from_secs(10), || async { line().is_some() }).await;
        assert!(seen, "no stdout line with {needle:?}");
        line().unwrap_or_default()
    }

    /// Rewrites the config file the way editors do: a new file renamed over
    /// the old one.
    pub fn rewrite_config(&self, yaml: &str) {
        let tmp = self.config_path.with_extension("tmp");
        std::fs::write(&tmp, yaml).unwrap();
        std::fs::rename(&tmp, &self.config_path).unwrap();
    }

    /// The admin API's `/metrics` text.
    pub async fn metrics(&self) -> String {
        client()
            .get(self.admin_url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A JSON document from the admin API.
    pub async fn admin_json(&self, path: &str) -> serde_json::Value {
        client()
            .get(self.admin_url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn sigterm(&self) {
        if let Some(c) = self.child.as_ref() {
            signal(c, "TERM");
        }
    }

    pub fn sighup(&self) {
        if let Some(c) = self.child.as_ref() {
            signal(c, "HUP");
        }
    }

    /// Waits for the process to exit; returns its exit code.
    pub async fn wait(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        tokio::time::timeout(Duration::from_secs(60), c.wait())
            .await
            .ok()?
            .ok()?
            .code()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.start_kill();
        }
        let _ = std::fs::remove_file(&self.config_path);
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}

/// A reqwest client that never pools across tests and has no proxy.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(8)
        .build()
        .unwrap()
}

/// An HTTP/2 prior-knowledge client.
pub fn h2_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .http2_prior_knowledge()
        .build()
        .unwrap()
}

/// The JSON document a backend answered with.
pub async fn json(resp: reqwest::Response) -> serde_json::Value {
    let status = resp.status();
    let text = resp.text().await.unwrap();
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("status {status}, not JSON ({e}): {text}"))
}

/// Which node served a JSON response.
pub async fn node_of(resp: reqwest::Response) -> String {
    json(resp).await["node"].as_str().unwrap_or("?").to_owned()
}

/// Builds a config with one listener and admin on ephemeral ports.
pub fn config(services: &str, routes: &str) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0, debug_headers: true }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ shutdown: 10s }}\nservices:\n{services}\nroutes:\n{routes}\n"
    )
}

/// A service entry with the given nodes `(id, addr, version)`.
pub fn service(name: &str, nodes: &[(&str, SocketAddr, &str)]) -> String {
    let mut s = format!("  - name: {name}\n    nodes:\n");
    for (id, addr, version) in nodes {
        let version = if version.is_empty() {
            String::new()
        } else {
            format!(", version: \"{version}\"")
        };
        s.push_str(&format!(
            "      - {{ id: {id}, address: \"{addr}\"{version} }}\n"
        ));
    }
    s
}

/// The route of single-service tests: every path to the service `s`.
pub const ROUTE_ALL: &str = "  - { id: r, match: { path_prefix: / }, service: s }";

/// `n` backends `n0`, `n1`, … and the service `s` with one node per
/// backend, named like it.
pub async fn backends(n: usize) -> (Vec<Backend>, String) {
    let mut b = Vec::with_capacity(n);
    for i in 0..n {
        b.push(Backend::start(&format!("n{i}")).await);
    }
    let nodes: Vec<_> = b.iter().map(|b| (b.id.as_str(), b.addr, "")).collect();
    let svc = service("s", &nodes);
    (b, svc)
}

/// A gateway with sessions: the [`config`] of `services` and [`ROUTE_ALL`],
/// then `rest` (the `sessions` section, which names `HG_SECRET`, and any
/// other lines); `secret` is `HG_SECRET`'s value, `env` more variables.
pub async fn session_gateway(
    services: &str,
    rest: &str,
    secret: &str,
    env: &[(&str, &str)],
) -> Gateway {
    let yaml = config(services, ROUTE_ALL) + rest;
    let mut all = vec![("HG_SECRET", secret)];
    all.extend_from_slice(env);
    Gateway::start_with_env(&yaml, &all).await
}

/// A port that nothing listens on (bound, then released).
pub fn dead_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A new session whose first request was served by the backend `backend`
/// (the `node` its JSON names); its token.
pub async fn session_served_by(gw: &Gateway, backend: &str) -> String {
    let c = client();
    for _ in 0..50 {
        let r = c.get(gw.url("/")).send().await.unwrap();
        let token = r
            .headers()
            .get("hop-session")
            .expect("sessions are on")
            .to_str()
            .unwrap()
            .to_owned();
        if json(r).await["node"] == backend {
            return token;
        }
    }
    panic!("no new session landed on {backend}");
}

/// Polls `check` every 20 ms until it holds or `bound` passes; whether it
/// held. The bound is a guard against hangs, not a timing assertion: the
/// caller asserts on the answer with a message saying what never happened.
pub async fn within<F, Fut>(bound: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > bound {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
