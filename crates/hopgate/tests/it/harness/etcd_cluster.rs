//! A real etcd cluster for tests: `n` `etcd` child processes on free
//! loopback client and peer ports, one data dir each, started together
//! (a member cannot answer until a majority is up). Members can be killed
//! (SIGKILL) and restarted on the same ports and data; the leader is found
//! with `etcdctl endpoint status`. Owns the processes and their data dirs
//! and logs (killed and removed on drop). Keys are written with `etcdctl`
//! over every endpoint, so a write goes through whichever member answers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{temp_path, within};

struct Member {
    name: String,
    client: String,
    peer: String,
    data: PathBuf,
    child: Option<Child>,
}

pub struct EtcdCluster {
    members: Vec<Member>,
    token: String,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Member {
    fn spawn(&mut self, initial_cluster: &str, token: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))
            .map_or_else(|_| Stdio::null(), Stdio::from);
        let child = Command::new("etcd")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen-client-urls", &self.client])
            .args(["--advertise-client-urls", &self.client])
            .args(["--listen-peer-urls", &self.peer])
            .args(["--initial-advertise-peer-urls", &self.peer])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-token", token])
            .args(["--initial-cluster-state", "new"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd (Debian package etcd-server)");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}

impl EtcdCluster {
    /// `n` members, started together; returns once every one is healthy.
    pub async fn start(n: usize) -> EtcdCluster {
        static N: AtomicU64 = AtomicU64::new(0);
        let members = (0..n)
            .map(|i| Member {
                name: format!("m{i}"),
                client: format!("http://127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                data: temp_path("etcd"),
                child: None,
            })
            .collect();
        let mut c = EtcdCluster {
            members,
            token: format!(
                "it-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        };
        for i in 0..n {
            c.spawn(i);
        }
        for i in 0..n {
            c.wait_healthy(i).await;
        }
        c
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize) {
        let (ic, token) = (self.initial_cluster(), self.token.clone());
        self.members[i].spawn(&ic, &token);
    }

    async fn wait_healthy(&self, i: usize) {
        let healthy = within(Duration::from_secs(30), || async {
            self.ctl_at(&self.members[i].client, &["endpoint", "health"])
                .status
                .success()
        })
        .await;
        assert!(
            healthy,
            "etcd member {i} not healthy; its log ends:\n{}",
            self.members[i].log_tail()
        );
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client.clone()).collect()
    }

    /// The endpoints as a YAML flow list.
    pub fn endpoints_yaml(&self) -> String {
        let quoted: Vec<String> = self
            .endpoints()
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect();
        format!("[{}]", quoted.join(", "))
    }

    /// Kills member `i` (SIGKILL); its data stays for [`EtcdCluster::restart`].
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again on its ports and data. It is healthy once a
    /// majority is up: call [`EtcdCluster::wait_quorum`] after the last one.
    pub fn restart(&mut self, i: usize) {
        self.members[i].kill();
        self.spawn(i);
    }

    /// Waits until every running member is healthy (has a leader).
    pub async fn wait_quorum(&self) {
        for (i, m) in self.members.iter().enumerate() {
            if m.child.is_some() {
                self.wait_healthy(i).await;
            }
        }
    }

    /// The index of the member that leads now, as the running members say.
    pub fn leader(&self) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader = None;
        for m in &self.members {
            let out = self.ctl_at(&m.client, &["endpoint", "status", "-w", "json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let status = &v[0]["Status"];
            ids.push(status["header"]["member_id"].as_u64());
            if let Some(l) = status["leader"].as_u64().filter(|l| *l != 0) {
                leader = Some(l);
            }
        }
        let leader = leader?;
        ids.iter().position(|id| *id == Some(leader))
    }

    fn ctl_at(&self, endpoints: &str, args: &[&str]) -> std::process::Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", endpoints, "--dial-timeout", "1s"])
            .args(["--command-timeout", "3s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run etcdctl (Debian package etcd-client)")
    }

    /// Runs etcdctl against every member; its stdout, or a panic with its
    /// stderr.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.ctl_at(&self.endpoints().join(","), args);
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn put(&self, key: &str, value: &str) {
        self.ctl(&["put", key, value]);
    }

    pub fn put_lease(&self, key: &str, value: &str, lease: &str) {
        self.ctl(&["put", key, value, &format!("--lease={lease}")]);
    }

    /// A key's value, if present.
    pub fn get(&self, key: &str) -> Option<String> {
        let out = self.ctl(&["get", key, "--print-value-only"]);
        let v = out.trim_end_matches('\n');
        (!v.is_empty()).then(|| v.to_owned())
    }

    /// Grants a lease; its id (hex, as etcdctl prints it).
    pub fn lease_grant(&self, ttl_secs: u64) -> String {
        let out = self.ctl(&["lease", "grant", &ttl_secs.to_string()]);
        out.split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("unexpected etcdctl output {out:?}"))
            .to_owned()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            m.kill();
            let _ = std::fs::remove_dir_all(&m.data);
            let _ = std::fs::remove_file(m.data.with_extension("log"));
        }
    }
}
