//! Zero-downtime binary upgrade: `hopgate run --upgrade` takes the
//! listening sockets of the running process over `upgrade.socket`, and the
//! old process drains. Real clients count every refused connection and
//! failed request across five upgrades in a row.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{addr_after, client, temp_path, within, Backend, BIN};

/// A `hopgate run` process started on a config file.
struct Proc {
    child: Child,
    /// The first listener's address.
    addr: SocketAddr,
    admin: SocketAddr,
    /// Every listener: (name, address).
    listeners: Vec<(String, SocketAddr)>,
    log: PathBuf,
}

impl Proc {
    /// Starts `hopgate run --config <config>` (with `--upgrade`): the
    /// process once it printed its ready lines, else its exit code and
    /// stderr.
    async fn start(config: &Path, upgrade: bool, env: &[(&str, &str)]) -> Result<Proc, String> {
        let log = temp_path("log");
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        if upgrade {
            cmd.arg("--upgrade");
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn hopgate run");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut got = Vec::new();
        let read = async {
            while let Ok(Some(l)) = lines.next_line().await {
                let admin = l.starts_with("hopgate admin listening");
                got.push(l);
                if admin {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .expect("the process neither started nor exited");
        if !got
            .last()
            .is_some_and(|l| l.starts_with("hopgate admin listening"))
        {
            let code = tokio::time::timeout(Duration::from_secs(30), child.wait())
                .await
                .expect("exits")
                .unwrap()
                .code();
            let stderr = std::fs::read_to_string(&log).unwrap_or_default();
            let _ = std::fs::remove_file(&log);
            return Err(format!("exit {code:?}\n{stderr}"));
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let listeners = got[..got.len() - 1]
            .iter()
            .map(|l| {
                let name = l.split("name=").nth(1).unwrap().split(' ').next().unwrap();
                (name.to_owned(), addr_after(l, "addr="))
            })
            .collect::<Vec<_>>();
        Ok(Proc {
            child,
            addr: listeners[0].1,
            admin: addr_after(got.last().unwrap(), "addr="),
            listeners,
            log,
        })
    }

    fn listener(&self, name: &str) -> SocketAddr {
        self.listeners
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.listeners))
            .1
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) for the process to exit; its exit code.
    async fn exit_code(&mut self) -> Option<i32> {
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the old process exits after draining")
            .ok()?
            .code()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{sig}"), &pid.to_string()])
                .status();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn yaml(backend: SocketAddr, socket: &Path, extra_listener: Option<SocketAddr>) -> String {
    let extra = extra_listener
        .map(|a| format!("  - {{ name: extra, address: \"{a}\" }}\n"))
        .unwrap_or_default();
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\n{extra}admin: {{ address: 127.0.0.1:0 }}\n\
         timeouts: {{ shutdown: 2s }}\nlimits: {{ max_connections: 1000 }}\nupgrade: {{ socket: {} }}\n\
         services:\n  - {{ name: app, nodes: [ {{ id: n1, address: \"{backend}\" }} ] }}\n\
         routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        socket.display()
    )
}

/// Requests that succeeded, failed, or could not connect at all.
#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
    errors: parking_lot::Mutex<Vec<String>>,
}

impl Tally {
    async fn record(&self, r: Result<reqwest::Response, reqwest::Error>) {
        match r {
            Ok(resp) if resp.status() == 200 => match resp.bytes().await {
                Ok(_) => {
                    self.ok.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => self.fail(format!("body: {e:?}")),
            },
            Ok(resp) => self.fail(format!("status {}", resp.status())),
            Err(e) if e.is_connect() => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.errors.lock().push(format!("connect: {e:?}"));
            }
            Err(e) => self.fail(format!("{e:?}")),
        }
    }

    fn fail(&self, e: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.errors.lock().push(e);
    }
}

#[derive(Clone, Copy)]
enum Client {
    /// HTTP/1.1, one pooled connection reused.
    KeepAlive,
    /// HTTP/1.1, a new connection per request.
    NewConnection,
    /// HTTP/2 over cleartext (prior knowledge), one connection multiplexed.
    H2c,
}

/// Clients looping on `url` until `stop`: keep-alive ones (a pooled
/// client) and ones opening a new connection per request.
fn load(
    url: String,
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    kind: Client,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let b = reqwest::Client::builder().no_proxy();
        let c = match kind {
            Client::KeepAlive => b.pool_max_idle_per_host(4),
            Client::NewConnection => b.pool_max_idle_per_host(0),
            Client::H2c => b.http2_prior_knowledge(),
        }
        .build()
        .unwrap();
        while !stop.load(Ordering::Relaxed) {
            let r = c.get(&url).send().await;
            tally.record(r).await;
        }
    })
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn echo(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text))
        .await
        .expect("send on the WebSocket");
    let answer = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(m) = ws.next().await {
            match m.expect("WebSocket message") {
                Message::Text(t) => return t.to_string(),
                Message::Close(f) => panic!("closed early: {f:?}"),
                _ => continue,
            }
        }
        panic!("WebSocket ended early");
    })
    .await
    .expect("echo within the bound");
    assert_eq!(answer, text);
}

/// The close code the server ends the WebSocket with.
async fn close_code(ws: &mut Ws) -> Option<u16> {
    let read = async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Close(frame)) => return frame.map(|f| u16::from(f.code)),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the WebSocket ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_upgrades_under_load_lose_nothing() {
    let b = Backend::start("n1").await;
    let socket = temp_path("sock");
    let config = temp_path("yaml");
    std::fs::write(&config, yaml(b.addr, &socket, None)).unwrap();
    let mut current = Proc::start(&config, false, &[]).await.expect("starts");
    let addr = current.addr;
    let admin = current.admin;
    // The handover socket is the owner's only.
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "upgrade socket mode {mode:o}");

    let stop = Arc::new(AtomicBool::new(false));
    let keep = Arc::new(Tally::default());
    let fresh = Arc::new(Tally::default());
    let h2 = Arc::new(Tally::default());
    let mut loads = Vec::new();
    for _ in 0..3 {
        for (path, tally, kind) in [
            ("k", &keep, Client::KeepAlive),
            ("n", &fresh, Client::NewConnection),
            ("h2", &h2, Client::H2c),
        ] {
            loads.push(load(
                format!("http://{addr}/{path}"),
                Arc::clone(&stop),
                Arc::clone(tally),
                kind,
            ));
        }
    }
    let stop_file = temp_path("stop");
    let py = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/py/new_conn_loop.py"
        ))
        .args(["127.0.0.1", &addr.port().to_string()])
        .arg(&stop_file)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3");

    for round in 0..5 {
        // Some traffic on this generation first.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let c = client();
        let slow_url = format!("http://{addr}/slow?sleep_ms=1500");
        let slow = tokio::spawn(async move { c.get(slow_url).send().await });
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws"))
            .await
            .expect("WebSocket upgrade");
        echo(&mut ws, "before").await;
        // Let the slow request reach the backend.
        tokio::time::sleep(Duration::from_millis(200)).await;

        let next = Proc::start(&config, true, &[])
            .await
            .unwrap_or_else(|e| panic!("round {round}: upgrade failed: {e}"));
        let ready_at = std::time::Instant::now();
        assert_eq!(next.addr, addr, "the new process serves the same socket");
        assert_eq!(next.admin, admin, "and the same admin socket");
        // The old process drains: the open WebSocket still works...
        echo(&mut ws, "during the drain").await;
        // ...until the drain deadline (timeouts.shutdown = 2s), then 1012.
        assert_eq!(close_code(&mut ws).await, Some(1012), "round {round}");
        assert!(
            ready_at.elapsed() >= Duration::from_secs(1),
            "round {round}: the WebSocket was closed {:?} after the handover, before the drain deadline",
            ready_at.elapsed()
        );
        let slow = slow.await.unwrap().expect("the slow request completes");
        assert_eq!(slow.status(), 200, "round {round}");
        assert_eq!(
            current.exit_code().await,
            Some(0),
            "round {round}: old process exit"
        );
        let old_logs = current.logs();
        assert!(
            old_logs.contains("handed over to the new process"),
            "{old_logs}"
        );
        current = next;
        assert!(current.running());
        // The new process took the handover socket over.
        assert!(std::os::unix::fs::FileTypeExt::is_socket(
            &std::fs::symlink_metadata(&socket).unwrap().file_type()
        ));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for l in loads {
        l.await.unwrap();
    }
    std::fs::write(&stop_file, b"").unwrap();
    let out = tokio::time::timeout(Duration::from_secs(60), py.wait_with_output())
        .await
        .expect("the python client stops")
        .unwrap();
    let py_out = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_file(&stop_file);

    for (what, t) in [
        ("keep-alive", &keep),
        ("new connection per request", &fresh),
        ("HTTP/2", &h2),
    ] {
        let errors = t.errors.lock().clone();
        assert_eq!(
            t.refused.load(Ordering::Relaxed),
            0,
            "{what}: refused: {errors:?}"
        );
        assert_eq!(
            t.failed.load(Ordering::Relaxed),
            0,
            "{what}: failed: {errors:?}"
        );
        assert!(
            t.ok.load(Ordering::Relaxed) > 100,
            "{what}: too little traffic"
        );
    }
    let first = py_out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("ok=") && first.contains(" failed=0 refused=0"),
        "python client: {py_out}"
    );
    let py_ok: u64 = first
        .trim_start_matches("ok=")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(py_ok > 50, "python client: {py_out}");
    eprintln!(
        "upgrade under load: keep-alive ok={}, new-connection ok={}, h2c ok={}, python {first}",
        keep.ok.load(Ordering::Relaxed),
        fresh.ok.load(Ordering::Relaxed),
        h2.ok.load(Ordering::Relaxed)
    );

    // Exactly one process remains, and it shuts down cleanly.
    assert!(current.running());
    current.signal("TERM");
    assert_eq!(current.exit_code().await, Some(0));
    assert!(!socket.exists(), "the socket file is removed at exit");
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn a_new_process_that_fails_leaves_the_old_one_serving() {
    let b = Backend::start("n1").await;
    let socket = temp_path("sock");
    let config = temp_path("yaml");
    let good = yaml(b.addr, &socket, None);
    std::fs::write(&config, &good).unwrap();
    let mut old = Proc::start(&config, false, &[]).await.expect("starts");
    let c = client();
    let serves = |old: &Proc| {
        let (c, url) = (c.clone(), format!("http://{}/", old.addr));
        async move { c.get(url).send().await.map(|r| r.status().as_u16()).ok() }
    };

    // A config that does not validate: the new process stops before it
    // ever contacts the old one.
    let broken = good.replace("address: 127.0.0.1:0 }\nadmin", "address: nowhere }\nadmin");
    std::fs::write(&config, &broken).unwrap();
    let e = Proc::start(&config, true, &[])
        .await
        .err()
        .expect("refuses a broken config");
    assert!(e.contains("config error: listeners[0].address"), "{e}");
    assert_eq!(serves(&old).await, Some(200));

    // A config whose new listener cannot bind: the new process received
    // the sockets, fails to start, and says why to the old one.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std::fs::write(
        &config,
        yaml(b.addr, &socket, Some(busy.local_addr().unwrap())),
    )
    .unwrap();
    let e = Proc::start(&config, true, &[])
        .await
        .err()
        .expect("cannot bind");
    assert!(e.contains("cannot listen on"), "{e}");
    within(Duration::from_secs(10), || async {
        old.logs().contains("upgrade aborted")
    })
    .await;
    let logs = old.logs();
    assert!(
        logs.contains("upgrade aborted")
            && logs.contains("failed to start")
            && logs.contains("cannot listen on"),
        "{logs}"
    );
    assert!(old.running());
    assert_eq!(serves(&old).await, Some(200));
    let ready = c
        .get(format!("http://{}/readyz", old.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);

    // The handover socket still works: a good new process takes over.
    drop(busy);
    std::fs::write(&config, &good).unwrap();
    let next = Proc::start(&config, true, &[]).await.expect("upgrade");
    assert_eq!(next.addr, old.addr);
    assert_eq!(old.exit_code().await, Some(0));
    assert_eq!(serves(&next).await, Some(200));
    let _ = std::fs::remove_file(&config);
}

#[tokio::test]
async fn a_stale_socket_file_is_replaced_and_a_live_one_is_left_alone() {
    let b = Backend::start("n1").await;
    let socket = temp_path("sock");
    let config = temp_path("yaml");
    std::fs::write(&config, yaml(b.addr, &socket, None)).unwrap();
    // A socket file nobody listens on (a process that crashed).
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let mut first = Proc::start(&config, false, &[]).await.expect("starts");
    assert!(
        first.logs().contains("removing a stale socket"),
        "{}",
        first.logs()
    );
    // A second instance on the same socket path does not steal it.
    let second = Proc::start(&temp_config(&yaml(b.addr, &socket, None)), false, &[])
        .await
        .expect("starts");
    assert!(
        second
            .logs()
            .contains("another running process listens on it"),
        "{}",
        second.logs()
    );
    // SIGKILL leaves the file behind; the next start replaces it.
    first.signal("KILL");
    let _ = first.exit_code().await;
    assert!(socket.exists());
    let third = Proc::start(&config, false, &[]).await.expect("starts");
    assert!(
        third.logs().contains("removing a stale socket"),
        "{}",
        third.logs()
    );
    let next = Proc::start(&config, true, &[])
        .await
        .expect("upgrade of the third");
    assert_eq!(next.addr, third.addr);
    drop(second);
    let _ = std::fs::remove_file(&config);
}

fn temp_config(text: &str) -> PathBuf {
    let p = temp_path("yaml");
    std::fs::write(&p, text).unwrap();
    p
}

mod carried;
mod state;
