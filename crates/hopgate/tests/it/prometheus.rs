//! The alerting rules shipped in `contrib/prometheus/`: `promtool check
//! rules` and `promtool test rules` on the shipped files, and a real
//! Prometheus (the Debian `prometheus` binary) scraping a gateway's admin
//! `/metrics` with those rules loaded, until a node taken down puts the
//! shipped `HopgateNodeDown` alert in the pending (or firing) state.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::harness::{client, config, temp_path, Backend, Gateway};

/// Polling bound for anything Prometheus has to scrape or evaluate (a
/// bound against hangs, not an assertion about speed).
const POLL_BOUND: Duration = Duration::from_secs(90);
const POLL_STEP: Duration = Duration::from_millis(250);

fn contrib() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/prometheus")
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(contrib())
        .output()
        .expect("promtool (Debian package prometheus; scripts/deps.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

#[test]
fn the_shipped_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = std::fs::read_to_string(contrib().join("hopgate-alerts.yml")).unwrap();
    let alerts = rules.matches("- alert: ").count();
    let checked = promtool(&["check", "rules", "hopgate-alerts.yml"]);
    assert!(
        checked.contains(&format!("SUCCESS: {alerts} rules found")),
        "{checked}"
    );
    let tested = promtool(&["test", "rules", "hopgate-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every shipped alert has a unit test.
    let tests = std::fs::read_to_string(contrib().join("hopgate-alerts.test.yml")).unwrap();
    for name in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {name}\n")),
            "no unit test for {name}"
        );
    }
}

/// A `prometheus` server on a free loopback port with a temporary storage
/// directory; killed and cleaned up on drop.
struct Prometheus {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (`host:port`, path `/metrics`)
    /// as job `hopgate` every second, evaluating `rules` every second.
    async fn start(target: &str, rules: &Path) -> Prometheus {
        let dir = temp_path("prometheus");
        // A free port: bound then released; if another process takes it in
        // between, Prometheus exits and the next port is tried.
        let mut log = String::new();
        for _ in 0..5 {
            std::fs::create_dir_all(&dir).unwrap();
            let config = dir.join("prometheus.yml");
            std::fs::write(
                &config,
                format!(
                    "global: {{ scrape_interval: 1s, evaluation_interval: 1s }}\n\
                     rule_files: [\"{}\"]\n\
                     scrape_configs:\n  - job_name: hopgate\n    metrics_path: /metrics\n    \
                     static_configs: [{{ targets: [\"{target}\"] }}]\n",
                    rules.display()
                ),
            )
            .unwrap();
            let port = crate::harness::dead_addr().port();
            let stderr = std::fs::File::create(dir.join("prometheus.log")).unwrap();
            let child = Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .expect("prometheus (Debian package prometheus; scripts/deps.sh installs it)");
            let mut p = Prometheus {
                child,
                dir: dir.clone(),
                url: format!("http://127.0.0.1:{port}"),
            };
            if p.ready().await {
                return p;
            }
            log = p.log();
        }
        panic!("prometheus did not start:\n{log}");
    }

    /// Polls `/-/ready` until it answers 200 (true) or the process exits
    /// (false).
    async fn ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + POLL_BOUND;
        while tokio::time::Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return false;
            }
            if let Ok(r) = client().get(format!("{}/-/ready", self.url)).send().await {
                if r.status() == 200 {
                    return true;
                }
            }
            tokio::time::sleep(POLL_STEP).await;
        }
        panic!("prometheus not ready within {POLL_BOUND:?}: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let r = client()
            .get(format!("{}{path}", self.url))
            .query(query)
            .send()
            .await
            .unwrap();
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], "success", "{path}: {v}");
        v["data"].clone()
    }

    /// The instant vector `q`, as `(labels, value)` pairs.
    async fn query(&self, q: &str) -> Vec<(Value, f64)> {
        let data = self.api("/api/v1/query", &[("query", q)]).await;
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let v = s["value"][1].as_str().unwrap().parse().unwrap();
                (s["metric"].clone(), v)
            })
            .collect()
    }

    /// Polls until `done` holds for what `probe` returns; returns that.
    async fn until<T: std::fmt::Debug>(
        &self,
        what: &str,
        mut probe: impl AsyncFnMut(&Prometheus) -> T,
        done: impl Fn(&T) -> bool,
    ) -> T {
        let deadline = tokio::time::Instant::now() + POLL_BOUND;
        loop {
            let got = probe(self).await;
            if done(&got) {
                return got;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: still {got:?} after {POLL_BOUND:?}; prometheus log:\n{}",
                self.log()
            );
            tokio::time::sleep(POLL_STEP).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn a_real_prometheus_scrapes_hopgate_and_the_shipped_node_alert_goes_pending() {
    let mut b = [Backend::start("n0").await, Backend::start("n1").await];
    let yaml = config(
        &format!(
            "  - name: s\n    health: {{ path: /health, interval: 200ms, timeout: 200ms, rise: 1, fall: 2 }}\n    nodes:\n      - {{ id: n0, address: \"{}\" }}\n      - {{ id: n1, address: \"{}\" }}\n",
            b[0].addr, b[1].addr
        ),
        "  - { id: r, match: { path_prefix: / }, service: s }",
    );
    let gw = Gateway::start(&yaml).await;
    const SENT: usize = 25;
    for _ in 0..SENT {
        let r = client().get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    let rules = contrib().join("hopgate-alerts.yml").canonicalize().unwrap();
    let prom = Prometheus::start(&gw.admin.to_string(), &rules).await;

    // The shipped rules are loaded.
    let shipped = std::fs::read_to_string(&rules)
        .unwrap()
        .matches("- alert: ")
        .count();
    let groups = prom.api("/api/v1/rules", &[]).await;
    let loaded: usize = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["rules"].as_array().unwrap().len())
        .sum();
    assert_eq!(loaded, shipped, "{groups}");

    // Scraped: the target is up and the requests sent are counted.
    prom.until(
        "up{job=\"hopgate\"} == 1",
        async |p: &Prometheus| p.query("up{job=\"hopgate\"}").await,
        |r| r.len() == 1 && r[0].1 == 1.0,
    )
    .await;
    let counted = prom
        .until(
            "hopgate_requests_total == SENT",
            async |p: &Prometheus| p.query("hopgate_requests_total{job=\"hopgate\"}").await,
            |r| r.len() == 1 && r[0].1 == SENT as f64,
        )
        .await;
    assert_eq!(
        counted[0].0["instance"],
        gw.admin.to_string(),
        "{counted:?}"
    );
    // Both nodes are up: the node alert is silent.
    prom.until(
        "both nodes up",
        async |p: &Prometheus| p.query("hopgate_node_up{service=\"s\"}").await,
        |r| r.len() == 2 && r.iter().all(|(_, v)| *v == 1.0),
    )
    .await;
    let alerts = prom.api("/api/v1/alerts", &[]).await;
    assert!(!alerts.to_string().contains("HopgateNodeDown"), "{alerts}");

    // A node dies: the health checks take it out of rotation, and the
    // shipped HopgateNodeDown alert (for: 1m) goes pending, then firing.
    b[1].kill().await;
    let alert = prom
        .until(
            "HopgateNodeDown for s/n1 pending or firing",
            async |p: &Prometheus| {
                p.api("/api/v1/alerts", &[]).await["alerts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|a| a["labels"]["alertname"] == "HopgateNodeDown")
                    .cloned()
            },
            |a| {
                a.as_ref()
                    .is_some_and(|a| a["state"] == "pending" || a["state"] == "firing")
            },
        )
        .await
        .unwrap();
    assert_eq!(alert["labels"]["service"], "s", "{alert}");
    assert_eq!(alert["labels"]["node"], "n1", "{alert}");
    assert_eq!(alert["labels"]["severity"], "warning", "{alert}");
    assert_eq!(alert["labels"]["job"], "hopgate", "{alert}");
    assert!(
        alert["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("s/n1"),
        "{alert}"
    );
    // The other node stays quiet.
    let alerts = prom.api("/api/v1/alerts", &[]).await;
    let down: Vec<&Value> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["alertname"] == "HopgateNodeDown")
        .collect();
    assert_eq!(down.len(), 1, "{alerts}");
    drop(prom);
    drop(gw);
}
