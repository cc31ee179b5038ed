//! Observability: the per-route and per-service metrics (checked by
//! `promtool`), the access log configured in the file (text and JSON, a
//! file path, SIGUSR1 reopening after a rotation, reload switching it off,
//! on and elsewhere) and W3C trace context on the hop to the backend.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::harness::{client, config, metric, service, temp_path, within, Backend, Gateway};

/// The commit `hopgate --version` names (the binary's build stamp).
fn build_commit() -> String {
    let out = std::process::Command::new(crate::harness::BIN)
        .arg("--version")
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&out.stdout).into_owned();
    v.split("(commit ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("no commit in {v:?}"))
        .to_owned()
}

/// `promtool check metrics` on the exposition: parses it with Prometheus's
/// own parser and lints it.
fn promtool_check(metrics: &str) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/deps.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(metrics.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool: {text}\n{metrics}");
    assert!(text.trim().is_empty(), "promtool lint: {text}");
}

async fn get(url: String) -> reqwest::Response {
    client().get(url).send().await.unwrap()
}

#[tokio::test]
async fn route_and_service_metrics_count_what_was_sent_and_promtool_accepts_them() {
    let a = Backend::start("a1").await;
    let b = Backend::start("b1").await;
    let services = format!(
        "{}{}",
        service("sa", &[("a1", a.addr, "")]),
        service("sb", &[("b1", b.addr, "")])
    );
    let routes = "  - { id: ra, match: { path_prefix: /a }, service: sa }\n  \
                  - { id: rb, match: { path_prefix: /b }, service: sb }";
    let gw = Gateway::start(&config(&services, routes)).await;
    for _ in 0..7 {
        assert_eq!(get(gw.url("/a")).await.status(), 200);
    }
    for _ in 0..3 {
        assert_eq!(get(gw.url("/a?status=503")).await.status(), 503);
    }
    for _ in 0..4 {
        assert_eq!(get(gw.url("/b?status=404")).await.status(), 404);
    }
    // No route: counted by the gateway, not by any route.
    assert_eq!(get(gw.url("/nowhere")).await.status(), 404);
    let m = gw.metrics().await;
    promtool_check(&m);

    let ra = "route=\"ra\",service=\"sa\"";
    let rb = "route=\"rb\",service=\"sb\"";
    for (series, want) in [
        (
            format!("hopgate_route_responses_total{{{ra},class=\"2xx\"}}"),
            7.0,
        ),
        (
            format!("hopgate_route_responses_total{{{ra},class=\"5xx\"}}"),
            3.0,
        ),
        (
            format!("hopgate_route_responses_total{{{ra},class=\"4xx\"}}"),
            0.0,
        ),
        (
            format!("hopgate_route_responses_total{{{rb},class=\"4xx\"}}"),
            4.0,
        ),
        (
            format!("hopgate_route_responses_total{{{rb},class=\"2xx\"}}"),
            0.0,
        ),
        (
            format!("hopgate_request_duration_seconds_count{{{ra}}}"),
            10.0,
        ),
        (
            format!("hopgate_request_duration_seconds_bucket{{{ra},le=\"+Inf\"}}"),
            10.0,
        ),
        (
            format!("hopgate_request_duration_seconds_count{{{rb}}}"),
            4.0,
        ),
        (
            format!("hopgate_upstream_duration_seconds_count{{{ra}}}"),
            10.0,
        ),
        (
            format!("hopgate_upstream_duration_seconds_bucket{{{ra},le=\"+Inf\"}}"),
            10.0,
        ),
        (
            format!("hopgate_upstream_duration_seconds_count{{{rb}}}"),
            4.0,
        ),
        ("hopgate_responses_total{class=\"4xx\"}".into(), 5.0),
        (
            format!(
                "hopgate_build_info{{version=\"{}\",commit=\"{}\"}}",
                env!("CARGO_PKG_VERSION"),
                build_commit()
            ),
            1.0,
        ),
    ] {
        assert_eq!(metric(&m, &series, &[]).unwrap(), want, "{series}");
    }
    // Buckets are cumulative and end at the count.
    let mut last = 0.0;
    for l in m
        .lines()
        .filter(|l| l.starts_with("hopgate_request_duration_seconds_bucket{route=\"ra\""))
    {
        let v: f64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(v >= last, "{l}");
        last = v;
    }
    assert_eq!(last, 10.0);
    assert!(
        metric(
            &m,
            "hopgate_request_duration_seconds_sum{route=\"ra\",service=\"sa\"}",
            &[]
        )
        .unwrap()
            > 0.0
    );
    // Connections and bytes: reqwest keeps its connections, so at least
    // one was accepted and bytes flowed both ways.
    assert!(metric(&m, "hopgate_connections_accepted_total", &[]).unwrap() >= 1.0);
    assert!(metric(&m, "hopgate_client_bytes_received_total", &[]).unwrap() > 15.0 * 20.0);
    assert!(metric(&m, "hopgate_client_bytes_sent_total", &[]).unwrap() > 15.0 * 100.0);
    // Every name users already scrape is still there.
    for name in [
        "hopgate_requests_total",
        "hopgate_errors_total",
        "hopgate_access_log_dropped_total",
        "hopgate_hop_duration_seconds_count",
        "hopgate_node_up",
        "hopgate_pool_queue_wait_seconds_count",
        "hopgate_config_reloads_total",
    ] {
        assert!(m.lines().any(|l| l.starts_with(name)), "{name} missing");
    }

    // A reload keeps the counters of a route and service that stay.
    gw.rewrite_config(&config(
        &services,
        &format!("{routes}\n  - {{ id: rc, match: {{ path_prefix: /c }}, service: sb }}"),
    ));
    gw.sighup();
    within(Duration::from_secs(10), || async {
        gw.metrics().await.contains("route=\"rc\"")
    })
    .await;
    assert_eq!(get(gw.url("/a")).await.status(), 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(
            &m,
            &format!("hopgate_request_duration_seconds_count{{{ra}}}"),
            &[]
        )
        .unwrap(),
        11.0
    );
    assert_eq!(
        metric(
            &m,
            "hopgate_request_duration_seconds_count{route=\"rc\",service=\"sb\"}",
            &[]
        )
        .unwrap(),
        0.0
    );
    promtool_check(&m);
}

/// A gateway whose config has `access_log` set to `block` (YAML flow).
async fn gateway_logging(b: &Backend, block: &str) -> Gateway {
    let yaml = format!(
        "{}access_log: {block}\n",
        config(
            &service("svc", &[("n1", b.addr, "")]),
            "  - { id: all, match: { path_prefix: / }, service: svc }"
        )
    );
    Gateway::start(&yaml).await
}

/// Waits (bounded) until `path` holds a line containing `needle`; returns
/// the file's lines.
async fn wait_for_line(path: &Path, needle: &str) -> Vec<String> {
    let read = || std::fs::read_to_string(path).unwrap_or_default();
    let seen = within(Duration::from_secs(10), || async {
        read().contains(needle)
    })
    .await;
    let text = read();
    assert!(
        seen,
        "no line with {needle:?} in {}:\n{text}",
        path.display()
    );
    text.lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn the_json_access_log_goes_to_its_file_with_every_field() {
    let b = Backend::start("n1").await;
    let log = temp_path("access.json");
    let gw = gateway_logging(&b, &format!("{{ format: json, path: {} }}", log.display())).await;
    let r = client()
        .post(gw.url("/some/path?secret=1"))
        .header("x-request-id", "json-fields-1")
        .header("user-agent", "obs-test/1.0 \"quoted\"")
        .header(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        .body("0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.unwrap();
    let lines = wait_for_line(&log, "json-fields-1").await;
    let line = lines.iter().find(|l| l.contains("json-fields-1")).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let host = gw.addr.to_string();
    let upstream = b.addr.to_string();
    for (k, want) in [
        ("message", serde_json::json!("access")),
        ("target", serde_json::json!("hopgate::access")),
        ("listener", serde_json::json!("public")),
        ("method", serde_json::json!("POST")),
        ("host", serde_json::json!(host)),
        ("path", serde_json::json!("/some/path")),
        ("protocol", serde_json::json!("HTTP/1.1")),
        ("request_id", serde_json::json!("json-fields-1")),
        ("rule", serde_json::json!("all")),
        ("service", serde_json::json!("svc")),
        ("node", serde_json::json!("n1")),
        ("upstream", serde_json::json!(upstream)),
        ("status", serde_json::json!(200)),
        ("error", serde_json::json!("-")),
        ("bytes_in", serde_json::json!(10)),
        ("bytes_out", serde_json::json!(body.len())),
        ("user_agent", serde_json::json!("obs-test/1.0 \"quoted\"")),
        (
            "trace_id",
            serde_json::json!("0af7651916cd43dd8448eb211c80319c"),
        ),
    ] {
        assert_eq!(v[k], want, "{k} in {line}");
    }
    assert!(v["latency_us"].is_u64(), "{line}");
    assert!(v["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert!(!line.contains("secret"), "the query string is not logged");
    // Not on stderr.
    assert!(!gw.logs().contains("json-fields-1"), "{}", gw.logs());
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn the_text_access_log_goes_to_its_file_with_every_field() {
    let b = Backend::start("n1").await;
    let log = temp_path("access.txt");
    let gw = gateway_logging(&b, &format!("{{ format: text, path: {} }}", log.display())).await;
    let r = client()
        .get(gw.url("/t?x=1"))
        .header("x-request-id", "text-fields-1")
        .header("user-agent", "obs-test/2.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let doc: serde_json::Value = r.json().await.unwrap();
    let seen = traceparent_seen(&doc);
    let lines = wait_for_line(&log, "text-fields-1").await;
    let line = lines.iter().find(|l| l.contains("text-fields-1")).unwrap();
    for want in [
        " INFO hopgate::access: access listener=public peer=127.0.0.1:",
        " method=GET ",
        &format!(" host=\"{}\" ", gw.addr),
        " path=\"/t\" protocol=\"HTTP/1.1\" request_id=\"text-fields-1\" rule=\"all\" service=\"svc\" node=\"n1\" ",
        &format!(" upstream=\"{}\" ", b.addr),
        " retries=0 hops=0 status=200 error=\"-\" bytes_in=0 bytes_out=",
        " user_agent=\"obs-test/2.0\" trace_id=",
        " latency_us=",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
    // The trace id the gateway started is the one the backend saw.
    let trace = line
        .split("trace_id=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert_eq!(trace.len(), 32, "{line}");
    assert_eq!(&seen[3..35], trace, "{line}");
    assert!(!gw.logs().contains("text-fields-1"));
    let _ = std::fs::remove_file(&log);
}

/// `--pid-file` names this gateway, for `kill -USR1 "$(cat FILE)"` after a
/// rotation; a demo backend on the same host ignores SIGUSR1 (and
/// SIGUSR2) instead of dying; the file goes when the gateway exits.
#[tokio::test]
async fn the_pid_file_names_the_gateway_and_a_backend_ignores_sigusr1() {
    let b = Backend::start("n1").await;
    let log = temp_path("access.log");
    let pid_file = temp_path("pid");
    let yaml = format!(
        "{}access_log: {{ path: {} }}\n",
        config(
            &service("svc", &[("n1", b.addr, "")]),
            "  - { id: all, match: { path_prefix: / }, service: svc }"
        ),
        log.display()
    );
    let mut gw = Gateway::start_with(&yaml, &[], &["--pid-file", pid_file.to_str().unwrap()]).await;
    let written = within(Duration::from_secs(10), || async { pid_file.exists() }).await;
    assert!(written, "no pid file; logs:\n{}", gw.logs());
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(Some(pid), gw.pid());

    assert_eq!(
        client().get(gw.url("/")).send().await.unwrap().status(),
        200
    );
    std::fs::rename(&log, log.with_extension("log.1")).unwrap();
    let rotate = format!("kill -USR1 \"$(cat {})\"", pid_file.display());
    let status = std::process::Command::new("sh")
        .args(["-c", &rotate])
        .status()
        .unwrap();
    assert!(status.success());
    let reopened = within(Duration::from_secs(10), || async { log.exists() }).await;
    assert!(reopened, "no new access log after SIGUSR1");

    for sig in ["-USR1", "-USR2"] {
        let backend = b.pid().unwrap().to_string();
        let status = std::process::Command::new("kill")
            .args([sig, &backend])
            .status()
            .unwrap();
        assert!(status.success());
    }
    for _ in 0..3 {
        let r = client().get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200, "the backend died of SIGUSR1/SIGUSR2");
    }

    gw.sigterm();
    gw.wait().await;
    assert!(!pid_file.exists(), "the pid file outlived the gateway");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(log.with_extension("log.1"));
}

#[tokio::test]
async fn sigusr1_reopens_the_access_log_after_a_rotation_and_loses_no_line() {
    let b = Backend::start("n1").await;
    let log = temp_path("access.log");
    let rotated = log.with_extension("log.1");
    let gw = gateway_logging(&b, &format!("{{ path: {} }}", log.display())).await;
    let c = client();
    for i in 0..50 {
        let r = c
            .get(gw.url("/"))
            .header("x-request-id", format!("rot-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // Some of these lines may still wait in the buffer: they must land in
    // the rotated file (the one open) or the new one, never nowhere.
    std::fs::rename(&log, &rotated).unwrap();
    let pid = gw.pid().unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status();
    // The new file appears at the path once the writer thread reopens it.
    within(Duration::from_secs(10), || async { log.exists() }).await;
    assert!(log.exists(), "no new file after SIGUSR1");
    for i in 50..100 {
        let r = c
            .get(gw.url("/"))
            .header("x-request-id", format!("rot-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let new_lines = wait_for_line(&log, "\"rot-99\"").await;
    let old_lines: Vec<String> = std::fs::read_to_string(&rotated)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let ids = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| {
                l.split("request_id=\"")
                    .nth(1)?
                    .split('"')
                    .next()
                    .map(str::to_owned)
            })
            .collect()
    };
    let (old, new) = (ids(&old_lines), ids(&new_lines));
    // Every line made after the reopen is in the new file.
    for i in 50..100 {
        assert!(
            new.contains(&format!("rot-{i}")),
            "rot-{i} not in the new file"
        );
    }
    assert!(old.contains(&"rot-0".to_owned()), "{old:?}");
    let all: BTreeSet<&String> = old.iter().chain(&new).collect();
    assert_eq!(all.len(), 100, "each line once: {old:?} {new:?}");
    assert_eq!(old.len() + new.len(), 100, "no line twice");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&rotated);
}

#[tokio::test]
async fn reload_switches_the_access_log_off_on_and_to_another_file() {
    let b = Backend::start("n1").await;
    let first = temp_path("access.log");
    let second = temp_path("access.json");
    let base = config(
        &service("svc", &[("n1", b.addr, "")]),
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    );
    let with = |block: String| format!("{base}access_log: {block}\n");
    let gw = Gateway::start(&with(format!("{{ path: {} }}", first.display()))).await;
    let c = client();
    let send = |id: &'static str| {
        let (c, url) = (c.clone(), gw.url("/"));
        async move {
            let r = c.get(url).header("x-request-id", id).send().await.unwrap();
            assert_eq!(r.status(), 200);
        }
    };
    send("reload-on-1").await;
    wait_for_line(&first, "reload-on-1").await;

    let applied = |version: u64| {
        let admin = gw.admin_url("/admin/v1/config/versions");
        async move {
            for _ in 0..400 {
                let v: serde_json::Value = client()
                    .get(&admin)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if v["current"] == version {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            panic!("config version {version} never applied");
        }
    };
    gw.rewrite_config(&with(format!(
        "{{ enabled: false, path: {} }}",
        first.display()
    )));
    gw.sighup();
    applied(2).await;
    send("reload-off-1").await;
    // Turned back on, elsewhere, as JSON: the line after it lands there,
    // and the line sent while off is nowhere.
    gw.rewrite_config(&with(format!(
        "{{ enabled: true, format: json, path: {} }}",
        second.display()
    )));
    gw.sighup();
    applied(3).await;
    send("reload-on-2").await;
    let lines = wait_for_line(&second, "reload-on-2").await;
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["request_id"], "reload-on-2");
    let everything = format!(
        "{}{}{}",
        std::fs::read_to_string(&first).unwrap(),
        std::fs::read_to_string(&second).unwrap(),
        gw.logs()
    );
    assert!(!everything.contains("reload-off-1"), "{everything}");
    assert!(!std::fs::read_to_string(&first)
        .unwrap()
        .contains("reload-on-2"));
    // Back to stderr.
    gw.rewrite_config(&with("{ format: text }".into()));
    gw.sighup();
    applied(4).await;
    send("reload-on-3").await;
    within(Duration::from_secs(10), || async {
        gw.logs().contains("request_id=\"reload-on-3\"")
    })
    .await;
    assert!(
        gw.logs().contains("request_id=\"reload-on-3\""),
        "{}",
        gw.logs()
    );
    let _ = std::fs::remove_file(&first);
    let _ = std::fs::remove_file(&second);
}

#[tokio::test]
async fn an_access_log_file_that_cannot_be_opened_stops_the_start_naming_the_field() {
    let b = Backend::start("n1").await;
    let yaml = format!(
        "{}access_log: {{ path: /nonexistent-dir/hopgate/access.log }}\n",
        config(
            &service("svc", &[("n1", b.addr, "")]),
            "  - { id: all, match: { path_prefix: / }, service: svc }"
        )
    );
    let path = temp_path("yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = tokio::process::Command::new(crate::harness::BIN)
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("access_log.path: cannot open /nonexistent-dir/hopgate/access.log"),
        "{err}"
    );
}

fn traceparent_seen(doc: &serde_json::Value) -> String {
    doc["headers"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent reached the backend: {doc}"))
        .to_owned()
}

#[tokio::test]
async fn traceparent_is_passed_on_with_a_new_parent_id_or_started_when_absent() {
    let b = Backend::start("n1").await;
    let log = temp_path("access.json");
    let gw = gateway_logging(&b, &format!("{{ format: json, path: {} }}", log.display())).await;
    let c = client();
    let sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let doc: serde_json::Value = c
        .get(gw.url("/"))
        .header("x-request-id", "trace-1")
        .header("traceparent", sent)
        .header("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let seen = traceparent_seen(&doc);
    assert_eq!(seen.len(), 55, "{seen}");
    assert_eq!(&seen[..36], &sent[..36], "same version and trace id");
    assert_ne!(&seen[36..52], &sent[36..52], "a new parent id for the hop");
    assert_ne!(&seen[36..52], "0000000000000000");
    assert_eq!(&seen[52..], "-01", "flags kept");
    assert_eq!(
        doc["headers"]["tracestate"],
        "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    );

    // Absent: a trace is started, and its id is the one in the access log.
    let doc: serde_json::Value = c
        .get(gw.url("/"))
        .header("x-request-id", "trace-2")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let started = traceparent_seen(&doc);
    let parts: Vec<&str> = started.split('-').collect();
    assert_eq!(parts.len(), 4, "{started}");
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1].len(), 32);
    assert_ne!(parts[1], "00000000000000000000000000000000");
    assert_eq!(parts[2].len(), 16);
    assert!(parts.iter().all(|p| p
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())));

    // Invalid (an all-zero trace id): replaced, its tracestate dropped.
    let doc: serde_json::Value = c
        .get(gw.url("/"))
        .header("x-request-id", "trace-3")
        .header(
            "traceparent",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        )
        .header("tracestate", "congo=t61rcWkgMzE")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let replaced = traceparent_seen(&doc);
    assert_ne!(&replaced[3..35], "00000000000000000000000000000000");
    assert!(doc["headers"]["tracestate"].is_null(), "{doc}");

    let lines = wait_for_line(&log, "trace-3").await;
    let trace_of = |id: &str| -> String {
        let l = lines
            .iter()
            .find(|l| l.contains(&format!("\"{id}\"")))
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        v["trace_id"].as_str().unwrap().to_owned()
    };
    assert_eq!(trace_of("trace-1"), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(trace_of("trace-2"), parts[1]);
    assert_eq!(trace_of("trace-3"), &replaced[3..35]);
    let _ = std::fs::remove_file(&log);
}
