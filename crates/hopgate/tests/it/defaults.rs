//! Defaults that are fast: the runtime follows the CPUs the process may run
//! on, and the access log is written off the request path (buffered, by a
//! thread of its own; lines dropped and counted rather than a request
//! waiting for stderr; what is waiting written out at exit).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{addr_after, client, config, service, temp_path, Backend, Gateway, BIN};

const ROUTE: &str = "  - { id: all, match: { path_prefix: / }, service: svc }";

/// A `hopgate run` started from a command of the test's own (a `taskset`
/// wrapper, a stderr pipe nobody reads).
struct Run {
    child: Child,
    addr: SocketAddr,
    admin: SocketAddr,
    config: PathBuf,
}

impl Run {
    /// `cmd` is the program (hopgate or a wrapper with its arguments and
    /// hopgate's path) with stderr already set.
    async fn start(mut cmd: Command, args: &[&str], env: &[(&str, &str)], yaml: &str) -> Run {
        let config = temp_path("yaml");
        std::fs::write(&config, yaml).unwrap();
        cmd.args(args)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .env_remove("HOPGATE_WORKER_THREADS")
            .env_remove("TOKIO_WORKER_THREADS")
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn hopgate run");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut ready = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), async {
            while ready.len() < 2 {
                match lines.next_line().await {
                    Ok(Some(l)) => ready.push(l),
                    _ => break,
                }
            }
        })
        .await
        .expect("gateway did not become ready");
        assert_eq!(ready.len(), 2, "gateway did not start: {ready:?}");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Run {
            child,
            addr: addr_after(&ready[0], "addr="),
            admin: addr_after(&ready[1], "addr="),
            config,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Starts `hopgate run` (under `wrapper`, with `env`), answers one request
/// through it, stops it, and returns what it wrote to stderr.
async fn stderr_of_run(b: &Backend, wrapper: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = match wrapper.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(BIN);
            c
        }
        None => Command::new(BIN),
    };
    let log = temp_path("log");
    cmd.stderr(std::fs::File::create(&log).unwrap());
    let yaml = config(&service("svc", &[("n1", b.addr, "")]), ROUTE);
    let mut run = Run::start(cmd, &[], env, &yaml).await;
    let r = client().get(run.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let _ = run.child.start_kill();
    let _ = run.child.wait().await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    text
}

/// The runtime line of a start log.
fn runtime_line(log: &str) -> &str {
    log.lines()
        .find(|l| l.contains("runtime: "))
        .unwrap_or_else(|| panic!("no runtime line in:\n{log}"))
}

#[tokio::test]
async fn one_available_cpu_runs_a_current_thread_runtime_without_any_variable() {
    let b = Backend::start("n1").await;
    // Pinned to one CPU the way the load benchmark pins: no variable set.
    let log = stderr_of_run(&b, &["taskset", "-c", "0"], &[]).await;
    assert!(
        runtime_line(&log).contains("runtime: current-thread (1 available CPU)"),
        "{log}"
    );
    // A variable still wins over the CPU count.
    let log = stderr_of_run(
        &b,
        &["taskset", "-c", "0"],
        &[("HOPGATE_WORKER_THREADS", "2")],
    )
    .await;
    assert!(
        runtime_line(&log).contains("runtime: multi-thread (HOPGATE_WORKER_THREADS=2)"),
        "{log}"
    );
    // Unpinned on a machine with more CPUs: one worker per CPU.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus > 1 {
        let log = stderr_of_run(&b, &[], &[]).await;
        assert!(
            runtime_line(&log).contains(&format!("runtime: multi-thread ({cpus} available CPUs)")),
            "{log}"
        );
    }
}

/// The access line of request `id`, with the fields that vary (time,
/// client port, latency) replaced by `*`.
fn access_line_shape(log: &str, id: &str) -> String {
    let line = log
        .lines()
        .find(|l| l.contains("hopgate::access") && l.contains(&format!("\"{id}\"")))
        .unwrap_or_else(|| panic!("no access line for {id} in:\n{log}"));
    let mut out = Vec::new();
    for (i, w) in line.split(' ').enumerate() {
        let shape = if i == 0 && w.ends_with('Z') && w.len() > 20 {
            "<time>".to_owned()
        } else if let Some(p) = w.strip_prefix("peer=127.0.0.1:") {
            assert!(p.parse::<u16>().is_ok(), "{line}");
            "peer=127.0.0.1:*".to_owned()
        } else if let Some(l) = w.strip_prefix("latency_us=") {
            assert!(l.parse::<u64>().is_ok(), "{line}");
            "latency_us=*".to_owned()
        } else if let Some(l) = w.strip_prefix("bytes_out=") {
            assert!(l.parse::<u64>().is_ok(), "{line}");
            "bytes_out=*".to_owned()
        } else if let Some(t) = w.strip_prefix("trace_id=") {
            assert_eq!(t.len(), 34, "{line}");
            "trace_id=*".to_owned()
        } else {
            w.to_owned()
        };
        out.push(shape);
    }
    out.join(" ")
}

#[tokio::test]
async fn the_access_lines_of_the_last_requests_before_sigterm_are_written() {
    let b = Backend::start("n1").await;
    let mut gw = Gateway::start(&config(&service("svc", &[("n1", b.addr, "")]), ROUTE)).await;
    let c = client();
    for i in 0..30 {
        let r = c
            .get(gw.url("/"))
            .header("x-request-id", format!("last-lines-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // At once: the writer thread writes every second, so without the flush
    // at exit the last lines would still be waiting.
    gw.sigterm();
    assert_eq!(gw.wait().await, Some(0));
    let logs = gw.logs();
    for i in 0..30 {
        assert!(
            logs.contains(&format!("request_id=\"last-lines-{i}\"")),
            "{logs}"
        );
    }
    // The line is exactly what it was before it went through the buffer.
    assert_eq!(
        access_line_shape(&logs, "last-lines-29"),
        format!(
            "<time>  INFO hopgate::access: access listener=public peer=127.0.0.1:* method=GET \
             host=\"{host}\" path=\"/\" protocol=\"HTTP/1.1\" \
             request_id=\"last-lines-29\" rule=\"all\" service=\"svc\" node=\"n1\" \
             upstream=\"{upstream}\" retries=0 hops=0 status=200 error=\"-\" bytes_in=0 \
             bytes_out=* user_agent=\"-\" trace_id=* latency_us=*",
            host = gw
                .url("")
                .trim_start_matches("http://")
                .trim_end_matches('/'),
            upstream = b.addr,
        )
    );
    // Access lines and event lines keep their order: the last access line
    // comes before the shutdown's own lines.
    let last = logs.find("\"last-lines-29\"").unwrap();
    let done = logs.find("shutdown complete").expect("shutdown logged");
    assert!(last < done, "{logs}");
}

#[tokio::test]
async fn json_access_lines_keep_their_format_and_are_flushed_at_exit() {
    let b = Backend::start("n1").await;
    let log = temp_path("log");
    let mut cmd = Command::new(BIN);
    cmd.stderr(std::fs::File::create(&log).unwrap());
    let yaml = config(&service("svc", &[("n1", b.addr, "")]), ROUTE);
    let mut run = Run::start(cmd, &["--log-format", "json"], &[], &yaml).await;
    let r = client()
        .get(run.url("/"))
        .header("x-request-id", "json-line-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let pid = run.child.id().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let exit = tokio::time::timeout(Duration::from_secs(60), run.child.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert_eq!(exit.code(), Some(0));
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let line = text
        .lines()
        .find(|l| l.contains("\"json-line-1\""))
        .unwrap_or_else(|| panic!("no access line in:\n{text}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let expected = format!(
        "{{\"timestamp\":\"{}\",\"level\":\"INFO\",\"message\":\"access\",\"listener\":\"public\",\
         \"peer\":\"{}\",\"method\":\"GET\",\"host\":\"{}\",\"path\":\"/\",\"protocol\":\"HTTP/1.1\",\
         \"request_id\":\"json-line-1\",\"rule\":\"all\",\
         \"service\":\"svc\",\"node\":\"n1\",\"upstream\":\"{}\",\"retries\":0,\"hops\":0,\"status\":200,\
         \"error\":\"-\",\"bytes_in\":0,\"bytes_out\":{},\"user_agent\":\"-\",\"trace_id\":\"{}\",\
         \"latency_us\":{},\"target\":\"hopgate::access\"}}",
        v["timestamp"].as_str().unwrap(),
        v["peer"].as_str().unwrap(),
        v["host"].as_str().unwrap(),
        b.addr,
        v["bytes_out"].as_u64().unwrap(),
        v["trace_id"].as_str().unwrap(),
        v["latency_us"].as_u64().unwrap(),
    );
    assert_eq!(line, expected);
}

#[tokio::test]
async fn a_blocked_stderr_drops_and_counts_access_lines_instead_of_holding_requests() {
    let b = Backend::start("n1").await;
    let mut cmd = Command::new(BIN);
    // A pipe nobody reads: once its 64 KiB are full, every write to stderr
    // blocks for good.
    cmd.stderr(Stdio::piped());
    let yaml = config(&service("svc", &[("n1", b.addr, "")]), ROUTE);
    let run = Arc::new(Run::start(cmd, &[], &[], &yaml).await);
    // ~330-byte access lines: 6,000 of them are ~2 MB, more than the pipe
    // and the 1 MiB buffer hold together.
    let id = "x".repeat(120);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (run, id) = (run.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            for i in 0..375 {
                let r = c
                    .get(run.url("/"))
                    .header("x-request-id", format!("{id}-{t}-{i}"))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
            }
        }));
    }
    // A bound against a hang (a request waiting for stderr), not a timing.
    tokio::time::timeout(Duration::from_secs(120), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
    .expect("requests were held up by a blocked stderr");
    let metrics = client()
        .get(format!("http://{}/metrics", run.admin))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hopgate_access_log_dropped_total "))
        .unwrap_or_else(|| panic!("no hopgate_access_log_dropped_total in:\n{metrics}"))
        .parse()
        .unwrap();
    assert!(dropped > 0, "no line dropped");
    assert!(dropped < 6000, "{dropped} dropped: the buffer held nothing");
}

/// Two listeners and no `limits` section under an open-file hard limit of
/// 20,000: a fixed 10,000 connections per listener would not fit (10,000 ×
/// 2 + 256 reserved); the gateway derives the value instead, logs it and
/// serves on both listeners. An explicit value that cannot fit is still
/// refused, with the arithmetic.
#[tokio::test]
async fn two_listeners_without_limits_start_under_a_hard_limit_of_20000() {
    let b = Backend::start("n1").await;
    let two = |limits: &str| {
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\n  - {{ name: second, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n{limits}services:\n{}\nroutes:\n{ROUTE}\n",
            service("svc", &[("n1", b.addr, "")])
        )
    };
    let config = temp_path("yaml");
    let log = temp_path("log");
    std::fs::write(&config, two("")).unwrap();
    let mut child = Command::new("prlimit")
        .args(["--nofile=20000:20000", BIN, "run", "--config"])
        .arg(&config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn prlimit hopgate run");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ready = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while ready.len() < 3 {
            match lines.next_line().await {
                Ok(Some(l)) => ready.push(l),
                _ => break,
            }
        }
    })
    .await;
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(ready.len(), 3, "did not start: {ready:?}\n{}", stderr());
    for line in ready.iter().filter(|l| l.contains(" name=")) {
        let addr = addr_after(line, "addr=");
        let r = client()
            .get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "through {line}");
    }
    let text = stderr();
    let derived = text
        .lines()
        .find(|l| l.contains("limits.max_connections not set"))
        .unwrap_or_else(|| panic!("no derived max_connections line in:\n{text}"));
    // (20,000 − 256) ÷ (2 × 2 listeners)
    assert!(derived.contains("max_connections=4936"), "{derived}");
    assert!(derived.contains("nofile=20000"), "{derived}");
    let _ = child.start_kill();
    let _ = child.wait().await;

    std::fs::write(&config, two("limits: { max_connections: 10000 }\n")).unwrap();
    let out = Command::new("prlimit")
        .args(["--nofile=20000:20000", BIN, "run", "--config"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with 2 × 10000 connections");
    assert!(
        text.contains(
            "limits.max_connections: 10000 per listener × 2 listener(s) + 256 reserved = 20256"
        ),
        "{text}"
    );
    let _ = std::fs::remove_file(&config);
    let _ = std::fs::remove_file(&log);
}
