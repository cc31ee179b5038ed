//! Highly available Redis for tests: a Sentinel set (one master, one
//! replica, three sentinels) and a Cluster (three masters, three
//! replicas), every process a real `redis-server` on 127.0.0.1 with a free
//! port and a temporary directory, killed and removed on drop. Control
//! goes through `redis-cli`, as an operator's would.
//!
//! Owns those processes and directories only; the gateways are the
//! test's.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// One `redis-server` process (a data node or a sentinel).
pub struct RedisProc {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisProc {
    /// Starts `redis-server <dir>/redis.conf` holding `conf` (plus port,
    /// bind and dir), with `extra` arguments (`--sentinel`); returns once
    /// the port accepts connections.
    fn start(port: u16, conf: &str, extra: &[&str]) -> RedisProc {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hopgate-redis-ha-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("redis.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {}\nsave \"\"\nappendonly no\n{conf}",
            dir.display()
        );
        std::fs::write(&file, text).expect("config file");
        let log = std::fs::File::create(dir.join("redis.log")).expect("log file");
        let child = Command::new("redis-server")
            .arg(&file)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (scripts/deps.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server :{port} did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        RedisProc {
            port,
            dir,
            child: Some(child),
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `host:port`, as Redis names its nodes.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `redis-cli -p <port> args...`; its output (empty when it failed).
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }
}

impl Drop for RedisProc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `redis-cli -p <port> args...`; its output (empty when it failed).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port() -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
        let port = l.local_addr().expect("address").port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Waits for `ok` (polled every 50 ms), at most `bound`; whether it held.
pub fn wait_for(bound: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if ok() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One master, one replica, three sentinels watching them as `mymaster`
/// (quorum 2, the master judged down after 1 s).
pub struct SentinelSet {
    pub master: RedisProc,
    pub replica: RedisProc,
    pub sentinels: Vec<RedisProc>,
}

pub const MASTER_NAME: &str = "mymaster";

impl SentinelSet {
    pub fn start() -> SentinelSet {
        let master = RedisProc::start(free_port(), "", &[]);
        let replica = RedisProc::start(
            free_port(),
            &format!("replicaof 127.0.0.1 {}\n", master.port),
            &[],
        );
        assert!(
            wait_for(Duration::from_secs(10), || replica
                .cli(&["INFO", "replication"])
                .contains("master_link_status:up")),
            "the replica never synced with the master"
        );
        let watch = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 10000\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            master.port
        );
        let sentinels: Vec<RedisProc> = (0..3)
            .map(|_| RedisProc::start(free_port(), &watch, &["--sentinel"]))
            .collect();
        let set = SentinelSet {
            master,
            replica,
            sentinels,
        };
        assert!(
            wait_for(Duration::from_secs(15), || set.sentinels.iter().all(|s| {
                let info = s.cli(&["SENTINEL", "master", MASTER_NAME]);
                info.contains("num-other-sentinels\n2") && info.contains("num-slaves\n1")
            })),
            "the sentinels never saw each other and the replica"
        );
        set
    }

    /// The `store:` lines for these sentinels.
    pub fn store_yaml(&self) -> String {
        let endpoints: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("\"{}\"", s.url()))
            .collect();
        format!(
            "store: {{ kind: redis, sentinel: {{ master_name: {MASTER_NAME}, endpoints: [{}] }} }}\n",
            endpoints.join(", ")
        )
    }

    /// `host:port` of the master, as the first live sentinel names it.
    pub fn master_addr(&self) -> String {
        let s = self
            .sentinels
            .iter()
            .find(|s| s.is_running())
            .expect("a sentinel");
        let out = s.cli(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME]);
        let mut lines = out.lines();
        match (lines.next(), lines.next()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            _ => String::new(),
        }
    }
}

/// Three masters and three replicas, slots spread by `redis-cli --cluster
/// create`, node timeout 1 s.
pub struct RedisCluster {
    pub nodes: Vec<RedisProc>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        let conf =
            "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000\n";
        let nodes: Vec<RedisProc> = (0..6)
            .map(|_| RedisProc::start(free_port(), conf, &[]))
            .collect();
        let addrs: Vec<String> = nodes.iter().map(RedisProc::addr).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        // A replica that has not synced once cannot be elected.
        assert!(
            wait_for(Duration::from_secs(30), || cluster.nodes.iter().all(|n| {
                let info = n.cli(&["INFO", "replication"]);
                info.contains("role:master") || info.contains("master_link_status:up")
            })),
            "the replicas never synced with their masters"
        );
        cluster
    }

    /// Waits until every live node says `cluster_state:ok` and agrees on
    /// the slots (`redis-cli --cluster check`).
    pub fn wait_ok(&self) {
        assert!(
            wait_for(Duration::from_secs(30), || {
                self.nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                    && self.check()
            }),
            "the cluster never settled"
        );
    }

    fn check(&self) -> bool {
        let Some(n) = self.nodes.iter().find(|n| n.is_running()) else {
            return false;
        };
        Command::new("redis-cli")
            .args(["--cluster", "check", &n.addr()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    pub fn store_yaml(&self) -> String {
        let endpoints: Vec<String> = self
            .nodes
            .iter()
            .take(3)
            .map(|n| format!("\"{}\"", n.url()))
            .collect();
        format!(
            "store: {{ kind: redis, cluster: {{ endpoints: [{}] }} }}\n",
            endpoints.join(", ")
        )
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.live()
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("a slot")
    }

    fn live(&self) -> &RedisProc {
        self.nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a live node")
    }

    /// The index in `nodes` of the master serving `slot`.
    pub fn master_of(&self, slot: u16) -> usize {
        self.serving(slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The index in `nodes` of the master serving `slot`, unless it is
    /// failing or unknown.
    pub fn serving(&self, slot: u16) -> Option<usize> {
        let table = self.live().cli(&["CLUSTER", "NODES"]);
        for line in table.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let serves = f[8..].iter().any(|r| {
                let (a, b) = r.split_once('-').unwrap_or((r, r));
                matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
            });
            if serves {
                let addr = f[1].split('@').next().unwrap_or_default();
                return self.nodes.iter().position(|n| n.addr() == addr);
            }
        }
        None
    }

    /// Every live node's `CLUSTER NODES` and `cluster_state`, for failure
    /// messages.
    pub fn nodes_tables(&self) -> String {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| {
                let state = n.cli(&["CLUSTER", "INFO"]);
                let state = state.lines().next().unwrap_or_default().to_owned();
                let log = std::fs::read_to_string(n.dir.join("redis.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(8).collect();
                format!(
                    "{} {state}\n{}log:\n{}\n",
                    n.addr(),
                    n.cli(&["CLUSTER", "NODES"]),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect()
    }

    /// The index in `nodes` of a live master other than `not`.
    pub fn other_master(&self, not: usize) -> usize {
        (0..self.nodes.len())
            .find(|&i| {
                i != not
                    && self.nodes[i].is_running()
                    && self.nodes[i].cli(&["ROLE"]).starts_with("master")
            })
            .expect("another master")
    }

    /// Moves `slot` with its keys from `nodes[from]` to `nodes[to]` by the
    /// protocol `redis-cli --cluster reshard` follows (which cannot be told
    /// which slot to move): `SETSLOT IMPORTING` on the target, `SETSLOT
    /// MIGRATING` on the source, `MIGRATE` a few keys at a time (with a
    /// pause, so the store works against a half-moved slot), then
    /// `SETSLOT NODE` on every master.
    pub fn migrate_slot(&self, slot: u16, from: usize, to: usize) {
        let (src, dst) = (&self.nodes[from], &self.nodes[to]);
        let slot = slot.to_string();
        let src_id = src.cli(&["CLUSTER", "MYID"]).trim().to_owned();
        let dst_id = dst.cli(&["CLUSTER", "MYID"]).trim().to_owned();
        let dst_port = dst.port.to_string();
        assert_eq!(
            dst.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src_id])
                .trim(),
            "OK"
        );
        assert_eq!(
            src.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst_id])
                .trim(),
            "OK"
        );
        let mut moved = 0usize;
        loop {
            let keys = src.cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "5"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let mut args = vec!["MIGRATE", "127.0.0.1", &dst_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let out = src.cli(&args);
            assert!(
                out.trim() == "OK" || out.trim() == "NOKEY",
                "MIGRATE: {out}"
            );
            moved += keys.len();
            std::thread::sleep(Duration::from_millis(20));
        }
        for n in self.nodes.iter().filter(|n| n.is_running()) {
            if n.cli(&["ROLE"]).starts_with("master") {
                n.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id]);
            }
        }
        eprintln!(
            "slot {slot}: {moved} keys moved from {} to {}",
            src.addr(),
            dst.addr()
        );
    }
}
