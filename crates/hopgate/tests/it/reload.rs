//! Hot reload without a blip: under load, by every source (admin API, the
//! watched file, SIGHUP), with broken configs rejected and the running one
//! kept, in-flight requests finishing on the snapshot they started with,
//! live node state surviving, and listeners added and removed in place.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::harness::{addr_after, client, config, json, service, within, Backend, Gateway};

fn two_service_config(a: &Backend, b: &Backend, target: &str, extra: &str) -> String {
    let services = format!(
        "{}{}",
        service("sa", &[("a", a.addr, "")]),
        service("sb", &[("b", b.addr, "")])
    );
    format!(
        "{}{extra}",
        config(&services, &format!("  - {{ id: x, match: {{ path_prefix: /x }}, service: {target} }}\n  - {{ id: rest, match: {{ path_prefix: / }}, service: sa }}"))
    )
}

async fn versions(gw: &Gateway) -> serde_json::Value {
    gw.admin_json("/admin/v1/config/versions").await
}

#[tokio::test]
async fn two_hundred_reloads_under_load_lose_nothing() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let to_a = two_service_config(&a, &b, "sa", "");
    let to_b = two_service_config(&a, &b, "sb", "");
    let gw = Gateway::start(&to_a).await;
    // Each answer must come from one of the two configs' nodes.
    let (ok, bad) =
        reload_under_load(&gw, &to_a, &to_b, 200, |node| node == "a" || node == "b").await;
    assert_eq!(bad, 0, "failed or inconsistent requests");
    assert!(ok > 200, "the load ran alongside");
    assert_eq!(versions(&gw).await["current"], 201);
}

/// Applies `to_b`, `to_a`, `to_b`, ... `reloads` times through the admin
/// API while 8 clients send requests; returns (good, bad) answers, good
/// being a 200 whose `node` passes `consistent`.
async fn reload_under_load(
    gw: &Gateway,
    to_a: &str,
    to_b: &str,
    reloads: usize,
    consistent: fn(&str) -> bool,
) -> (u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut load = Vec::new();
    for _ in 0..8 {
        let (stop, ok, bad, url) = (stop.clone(), ok.clone(), bad.clone(), gw.url("/x"));
        load.push(tokio::spawn(async move {
            let c = client();
            while !stop.load(Ordering::Relaxed) {
                let good = match c.get(&url).send().await {
                    Ok(r) if r.status() == 200 => {
                        consistent(json(r).await["node"].as_str().unwrap_or(""))
                    }
                    _ => false,
                };
                if good { &ok } else { &bad }.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let c = client();
    for i in 0..reloads {
        let body = if i % 2 == 0 { to_b } else { to_a };
        let r = c
            .put(gw.admin_url("/admin/v1/config"))
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "reload {i}");
    }
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    (ok.load(Ordering::Relaxed), bad.load(Ordering::Relaxed))
}

#[tokio::test]
async fn broken_configs_by_api_and_by_file_keep_the_running_config() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let good = two_service_config(&a, &b, "sb", "sources: { file: { interval: 50ms } }\n");
    let gw = Gateway::start(&good).await;
    let c = client();
    let last_ok = "hopgate_config_last_reload_successful ";
    assert!(gw.metrics().await.contains(&format!("{last_ok}1\n")));
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/configs/broken");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 30);
    let mut failures = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let expect = text
            .lines()
            .next()
            .unwrap()
            .trim_start_matches("# expect:")
            .trim()
            .to_owned();
        let r = c
            .put(gw.admin_url("/admin/v1/config"))
            .body(text.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{}", f.display());
        let v: serde_json::Value = r.json().await.unwrap();
        let named = v["errors"].as_array().unwrap().iter().any(|e| {
            let line = format!(
                "{}: {}",
                e["path"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            );
            line.contains(&expect)
        });
        assert!(named, "{}: {expect:?} not named in {v}", f.display());
        failures += 1;
        assert_eq!(
            json(c.get(gw.url("/x")).send().await.unwrap()).await["node"],
            "b",
            "still serving after {}",
            f.display()
        );
    }
    assert_eq!(versions(&gw).await["reload_failures"], failures);
    assert!(
        gw.metrics().await.contains(&format!("{last_ok}0\n")),
        "the last offer was rejected"
    );
    // By file: a few broken files in turn, each noticed, counted and shown.
    for f in files.iter().take(5) {
        let before = versions(&gw).await["reload_failures"].as_u64().unwrap();
        gw.rewrite_config(&std::fs::read_to_string(f).unwrap());
        let mut v = versions(&gw).await;
        for _ in 0..400 {
            if v["reload_failures"].as_u64().unwrap() > before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
            v = versions(&gw).await;
        }
        assert_eq!(
            v["reload_failures"].as_u64().unwrap(),
            before + 1,
            "{} noticed",
            f.display()
        );
        assert!(v["last_error"]["source"]
            .as_str()
            .unwrap()
            .starts_with("file:"));
        assert_eq!(
            json(c.get(gw.url("/x")).send().await.unwrap()).await["node"],
            "b"
        );
    }
    assert_eq!(
        versions(&gw).await["current"],
        1,
        "no broken config was applied"
    );
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(good.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        gw.metrics().await.contains(&format!("{last_ok}1\n")),
        "a good config went in after the broken ones"
    );
}

#[tokio::test]
async fn file_watch_and_sighup_apply_changes() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let watch_on = "sources: { file: { interval: 50ms } }\n";
    let gw = Gateway::start(&two_service_config(&a, &b, "sa", watch_on)).await;
    let c = client();
    assert_eq!(
        json(c.get(gw.url("/x")).send().await.unwrap()).await["node"],
        "a"
    );
    gw.rewrite_config(&two_service_config(&a, &b, "sb", watch_on));
    let mut node = String::new();
    for _ in 0..400 {
        node = json(c.get(gw.url("/x")).send().await.unwrap()).await["node"]
            .as_str()
            .unwrap()
            .to_owned();
        if node == "b" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(node, "b", "the watched file was applied");
    let v = versions(&gw).await;
    assert!(v["versions"][1]["source"]
        .as_str()
        .unwrap()
        .starts_with("file:"));

    // A config that turns watching off is itself applied by the watcher;
    // from then on only SIGHUP applies the file.
    let watch_off = "sources: { file: { watch: false, interval: 50ms } }\n";
    gw.rewrite_config(&two_service_config(&a, &b, "sb", watch_off));
    within(Duration::from_secs(10), || async {
        versions(&gw).await["current"] == 3
    })
    .await;
    assert_eq!(versions(&gw).await["current"], 3);
    gw.rewrite_config(&two_service_config(&a, &b, "sa", watch_off));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        versions(&gw).await["current"],
        3,
        "watching is off: the edit waits"
    );
    assert_eq!(
        json(c.get(gw.url("/x")).send().await.unwrap()).await["node"],
        "b"
    );
    gw.sighup();
    for _ in 0..400 {
        node = json(c.get(gw.url("/x")).send().await.unwrap()).await["node"]
            .as_str()
            .unwrap()
            .to_owned();
        if node == "a" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(node, "a", "SIGHUP re-read the file");
}

#[tokio::test]
async fn a_slow_request_finishes_with_the_routing_it_started_with() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let gw = Gateway::start(&two_service_config(&a, &b, "sa", "")).await;
    let c = client();
    let url = gw.url("/x/slow?sleep_ms=1000");
    let slow = tokio::spawn({
        let c = c.clone();
        async move { c.get(url).send().await }
    });
    // Wait until it is in flight on a, then switch /x to b.
    loop {
        let v: serde_json::Value = c
            .get(a.url("/control/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if v["in_flight"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(two_service_config(&a, &b, "sb", ""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        json(c.get(gw.url("/x")).send().await.unwrap()).await["node"],
        "b",
        "new requests follow the new config"
    );
    let resp = slow.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        json(resp).await["node"],
        "a",
        "the in-flight request finished where it started"
    );
}

#[tokio::test]
async fn live_node_state_survives_a_reload() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]).replacen(
        "  - name: s\n",
        "  - name: s\n    outlier: { consecutive_5xx: 0, consecutive_failures: 0 }\n    circuit: { failure_threshold: 2, reset_timeout: 1h }\n",
        1,
    );
    let cfg = |id: &str| {
        config(
            &svc,
            &format!("  - {{ id: {id}, match: {{ path_prefix: / }}, service: s }}"),
        )
    };
    let gw = Gateway::start(&cfg("one")).await;
    let c = client();
    c.post(a.url("/control/fail?on=1")).send().await.unwrap();
    for _ in 0..4 {
        c.get(gw.url("/")).send().await.unwrap();
    }
    c.post(gw.admin_url("/admin/v1/nodes/s/b/drain"))
        .send()
        .await
        .unwrap();
    let nodes = |gw: &Gateway| {
        let (c, url) = (c.clone(), gw.admin_url("/admin/v1/nodes"));
        async move {
            c.get(url)
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let before = nodes(&gw).await;
    assert_eq!(before["nodes"][0]["circuit"], "open");
    assert_eq!(before["nodes"][1]["draining"], true);
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(cfg("two"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let after = nodes(&gw).await;
    assert_eq!(after["version"], 2);
    assert_eq!(after["nodes"][0]["circuit"], "open", "breaker state kept");
    assert_eq!(after["nodes"][0]["circuit_opened"], 1);
    assert_eq!(
        after["nodes"][0]["requests"], before["nodes"][0]["requests"],
        "counters kept"
    );
    assert_eq!(after["nodes"][1]["draining"], true, "drain kept");
}

#[tokio::test]
async fn listeners_are_added_and_removed_without_touching_the_others() {
    let a = Backend::start("a").await;
    let svc = service("s", &[("a", a.addr, "")]);
    let one = config(&svc, "  - { id: r, match: { path_prefix: / }, service: s }");
    let two = one.replace(
        "listeners:\n",
        "listeners:\n  - { name: second, address: 127.0.0.1:0 }\n",
    );
    let gw = Gateway::start(&one).await;
    // A keep-alive connection on the first listener, open across reloads.
    let keep = client();
    assert_eq!(keep.get(gw.url("/")).send().await.unwrap().status(), 200);
    let c = client();
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(two)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let line = gw.wait_stdout("name=second").await;
    let second = addr_after(&line, "addr=");
    let r = c.get(format!("http://{second}/")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the added listener serves");
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(one)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let gone = within(Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(second).await.is_err()
    })
    .await;
    assert!(gone, "the removed listener stopped accepting");
    assert_eq!(
        keep.get(gw.url("/")).send().await.unwrap().status(),
        200,
        "the first listener never noticed"
    );
}

/// The event log tells what was loaded and what each reload changed, and a
/// rejected document is one ERROR line holding every error in it.
#[tokio::test]
async fn the_log_summarises_loads_and_reloads_in_one_line_each() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let gw = Gateway::start(&two_service_config(&a, &b, "sa", "")).await;
    let c = client();
    let logs = gw.logs();
    assert!(
        logs.contains("config loaded: 1 listener, 2 services (2 nodes), 2 routes"),
        "{logs}"
    );
    // Two mistakes in one document: an unknown field and an unknown service.
    let bad =
        two_service_config(&a, &b, "nowhere", "").replace("path_prefix: /x", "path_prefx: /x");
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let good = two_service_config(&a, &b, "sb", "retries: { attempts: 2 }\n");
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut logs = String::new();
    for _ in 0..200 {
        logs = gw.logs();
        if logs.contains("config applied") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let rejected: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("config rejected"))
        .collect();
    assert_eq!(rejected.len(), 1, "one line per rejected document: {logs}");
    assert!(rejected[0].contains("ERROR"), "{}", rejected[0]);
    assert!(
        rejected[0].contains("unknown field `path_prefx` (did you mean `path_prefix`?)")
            && rejected[0].contains("routes[0].service: unknown service \"nowhere\""),
        "{}",
        rejected[0]
    );
    let applied = logs.lines().find(|l| l.contains("config applied")).unwrap();
    assert!(applied.contains("routes ~x; sections retries"), "{applied}");
}

/// inotify wakes the watcher: with a one-hour polling interval, an edit
/// (written in place, then renamed over) is still applied at once.
#[tokio::test]
async fn the_file_watch_is_woken_by_the_kernel_not_the_interval() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let slow_poll = "sources: { file: { interval: 1h } }\n";
    let gw = Gateway::start(&two_service_config(&a, &b, "sa", slow_poll)).await;
    let c = client();
    let node = |want: &'static str| {
        let c = c.clone();
        let url = gw.url("/x");
        async move {
            for _ in 0..400 {
                let n = json(c.get(&url).send().await.unwrap()).await["node"].clone();
                if n == want {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            false
        }
    };
    assert!(node("a").await);
    // Renamed over (the way editors save).
    gw.rewrite_config(&two_service_config(&a, &b, "sb", slow_poll));
    assert!(node("b").await, "the rename was not applied within 10 s");
    // Written in place.
    std::fs::write(&gw.config_path, two_service_config(&a, &b, "sa", slow_poll)).unwrap();
    assert!(
        node("a").await,
        "the in-place write was not applied within 10 s"
    );
    assert_eq!(versions(&gw).await["current"], 3);
}

/// Reloads that replace a service's only node under load: a request that
/// loaded the snapshot just before a swap still reaches the node that
/// snapshot names (a last resort for it), never a 503 for "no live node".
#[tokio::test]
async fn reloads_that_replace_the_only_node_lose_nothing() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let only = |n: &Backend| {
        config(
            &service("shop", &[(&n.id, n.addr, "")]),
            "  - { id: all, match: { path_prefix: / }, service: shop }",
        )
    };
    let (to_a, to_b) = (only(&a), only(&b));
    let gw = Gateway::start(&to_a).await;
    let (ok, bad) =
        reload_under_load(&gw, &to_a, &to_b, 300, |node| node == "a" || node == "b").await;
    assert_eq!(bad, 0, "failed requests");
    assert!(ok > 300, "the load ran alongside");
}
