//! A real `etcd` child process for fleet tests: client and peer on free
//! 127.0.0.1 ports, data in a temp dir, killed (and the dir removed) on
//! drop. Keys are written with `etcdctl`, etcd's own client.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::harness::temp_path;

pub struct Etcd {
    pub endpoint: String,
    peer: String,
    data: PathBuf,
    child: Option<Child>,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Etcd {
    pub async fn start() -> Etcd {
        let data = temp_path("etcd");
        let mut log = String::new();
        for _ in 0..5 {
            let mut e = Etcd {
                endpoint: format!("http://127.0.0.1:{}", free_port()),
                peer: format!("http://127.0.0.1:{}", free_port()),
                data: data.clone(),
                child: None,
            };
            if e.spawn().await {
                return e;
            }
            log = log_tail(&data);
        }
        panic!("etcd did not start; its log ends:\n{log}");
    }

    /// Starts the process on this handle's ports and data dir; true once it
    /// answers.
    async fn spawn(&mut self) -> bool {
        let child = Command::new("etcd")
            .args(["--name", "it"])
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen-client-urls", &self.endpoint])
            .args(["--advertise-client-urls", &self.endpoint])
            .args(["--listen-peer-urls", &self.peer])
            .args(["--initial-advertise-peer-urls", &self.peer])
            .args(["--initial-cluster", &format!("it={}", self.peer)])
            .stdout(Stdio::null())
            .stderr(self.log_file())
            .spawn()
            .expect("spawn etcd (Debian package etcd-server)");
        self.child = Some(child);
        for _ in 0..100 {
            if self.ctl_ok(&["endpoint", "health"]) {
                return true;
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return false;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.kill();
        false
    }

    /// Kills the process (SIGKILL); the data dir stays for [`Etcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub async fn restart(&mut self) {
        self.kill();
        for _ in 0..20 {
            if self.spawn().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "etcd did not restart; its log ends:\n{}",
            log_tail(&self.data)
        );
    }

    /// Where the process's own log goes (appended to across restarts), so
    /// that a start that fails says why.
    fn log_file(&self) -> Stdio {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data.with_extension("log"))
            .map_or_else(|_| Stdio::null(), Stdio::from)
    }

    fn ctl_output(&self, args: &[&str]) -> std::process::Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.endpoint, "--dial-timeout", "1s"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run etcdctl (Debian package etcd-client)")
    }

    fn ctl_ok(&self, args: &[&str]) -> bool {
        self.ctl_output(args).status.success()
    }

    /// Runs etcdctl; its stdout, or a panic with its stderr.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.ctl_output(args);
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

    pub fn del(&self, key: &str) {
        self.ctl(&["del", key]);
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
        // "lease 694d9a3b5c0c4b0a granted with TTL(30s)"
        out.split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("unexpected etcdctl output {out:?}"))
            .to_owned()
    }

    pub fn lease_revoke(&self, lease: &str) {
        self.ctl(&["lease", "revoke", lease]);
    }
}

/// The last lines of the log of the etcd whose data dir is `data`.
fn log_tail(data: &std::path::Path) -> String {
    let text = std::fs::read_to_string(data.with_extension("log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.data);
        let _ = std::fs::remove_file(self.data.with_extension("log"));
    }
}
