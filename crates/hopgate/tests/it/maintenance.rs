//! Maintenance notifications and connection handoff: relaxed timeouts,
//! MOVING with sessions kept, notifications from a backend header,
//! de-duplication, malformed input, and a handoff that cannot reach the new
//! address (the node's sessions hop).

use std::time::Duration;

use crate::harness::{client, config, json, service, session_served_by, within, Backend, Gateway};

pub(crate) async fn notify(gw: &Gateway, body: serde_json::Value) -> (u16, serde_json::Value) {
    let r = client()
        .post(gw.admin_url("/admin/v1/maintenance"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

pub(crate) async fn node(gw: &Gateway, id: &str) -> serde_json::Value {
    let v: serde_json::Value = gw.admin_json("/admin/v1/nodes").await;
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .cloned()
        .unwrap()
}

/// `svc` (one [`service`] entry) taking in-band `Hop-Maintenance` notices,
/// with more `services[].maintenance` fields in `fields` (", a: b").
pub(crate) fn in_band(svc: &str, fields: &str) -> String {
    svc.replacen(
        "    nodes:\n",
        &format!("    maintenance: {{ in_band: true{fields} }}\n    nodes:\n"),
        1,
    )
}

pub(crate) fn cfg(services: &str, extra: &str) -> String {
    config(
        services,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    )
    .replace(
        "timeouts: { shutdown: 10s }",
        "timeouts: { shutdown: 10s, request: 500ms }",
    ) + extra
}

#[tokio::test]
async fn relaxed_timeouts_dedup_and_malformed_input() {
    let a = Backend::start("a").await;
    let gw = Gateway::start(&cfg(
        &service("s", &[("a", a.addr, "")]),
        "maintenance: { relaxed_timeout: 5s }\n",
    ))
    .await;
    let c = client();
    let slow = gw.url("/slow?sleep_ms=1200");
    assert_eq!(
        c.get(&slow).send().await.unwrap().status(),
        504,
        "normally too slow"
    );
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATING", "seq": 1}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], true);
    assert_eq!(
        c.get(&slow).send().await.unwrap().status(),
        200,
        "relaxed: a slow answer is not a failure"
    );
    let (s, _) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATED", "seq": 2}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], false);
    assert_eq!(
        c.get(&slow).send().await.unwrap().status(),
        504,
        "normal timeouts again"
    );
    // The same sequence number again: a duplicate, not applied.
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATING", "seq": 2}),
    )
    .await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["errors"][0]["path"], "seq");
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], false);
    // Malformed: rejected with the field named, nothing applied.
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "REBOOTING", "seq": 3}),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["errors"][0]["path"], "kind");
    let (s, v) = notify(&gw, serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 3, "to": "nowhere", "in": 5})).await;
    assert_eq!(s, 400);
    assert_eq!(v["errors"][0]["path"], "to");
    let (s, _) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 3}),
    )
    .await;
    assert_eq!(s, 400, "MOVING needs in=");
    let (s, _) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "zz", "kind": "MIGRATING", "seq": 3}),
    )
    .await;
    assert_eq!(s, 404);
    let m = gw.metrics().await;
    assert!(
        m.contains(
            "hopgate_maintenance_notifications_total{kind=\"MIGRATING\",result=\"applied\"} 1"
        ),
        "{m}"
    );
    assert!(
        m.contains(
            "hopgate_maintenance_notifications_total{kind=\"MIGRATING\",result=\"duplicate\"} 1"
        ),
        "{m}"
    );
}

#[tokio::test]
async fn a_backend_header_announces_maintenance_and_is_stripped() {
    let a = Backend::start("a").await;
    // In-band notices are opt-in per service.
    let gw = Gateway::start(&cfg(&in_band(&service("s", &[("a", a.addr, "")]), ""), "")).await;
    let c = client();
    let r = c
        .get(gw.url("/x?maint=FAILING_OVER%20seq%3D4"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("hop-maintenance").is_none(),
        "the client never sees the header"
    );
    let relaxed = within(Duration::from_secs(10), || async {
        node(&gw, "a").await["maintenance"]["relaxed"] == true
    })
    .await;
    assert!(relaxed, "the header's notification was applied");
    let r = c
        .get(gw.url("/x?maint=FAILING%20nonsense"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("hop-maintenance").is_none());
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_maintenance_headers_ignored_total{reason=\"malformed\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn moving_keeps_sessions_bound_and_lets_in_flight_finish() {
    let old = Backend::start("old-a").await;
    let b = Backend::start("b").await;
    let moved = Backend::start("new-a").await;
    let svc = service("s", &[("a", old.addr, ""), ("b", b.addr, "")]);
    let gw = Gateway::start(&(cfg(&svc, "") + "sessions: { ttl: 1h }\n")).await;
    let c = client();
    // Find a session bound to node a.
    let token = session_served_by(&gw, "old-a").await;
    let slow = {
        let (url, t) = (gw.url("/slow?sleep_ms=400"), token.clone());
        tokio::spawn(async move { client().get(url).header("hop-session", t).send().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (s, v) = notify(&gw, serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 1, "to": moved.addr.to_string(), "in": 2})).await;
    assert_eq!(s, 200, "{v}");
    let r = slow.await.unwrap().unwrap();
    assert_eq!(
        json(r).await["node"],
        "old-a",
        "in-flight work finished on the old address"
    );
    for _ in 0..5 {
        let r = c
            .get(gw.url("/"))
            .header("hop-session", &token)
            .send()
            .await
            .unwrap();
        let v = json(r).await;
        assert_eq!(v["node"], "new-a", "new requests go to the new address");
        assert!(
            v["hop_from"].is_null(),
            "no hop: the node kept its identity"
        );
    }
    let sid: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{token}")).await;
    assert_eq!(sid["bindings"][0]["node"], "a");
    assert_eq!(sid["bindings"][0]["hops"], 0);
    let n = node(&gw, "a").await;
    assert_eq!(n["maintenance"]["moved_to"], moved.addr.to_string());
    assert_eq!(
        n["maintenance"]["relaxed"], true,
        "post-handoff relaxed window"
    );
    let m = gw.metrics().await;
    assert!(m.contains("hopgate_handoffs_total{outcome=\"ok\"}"), "{m}");
    assert!(
        !m.contains("hopgate_handoffs_total{outcome=\"ok\"} 0"),
        "a connection was handed off: {m}"
    );
}

#[tokio::test]
async fn an_unreachable_new_address_makes_the_sessions_hop() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]);
    let extra =
        "sessions: { ttl: 1h }\nmaintenance: { handoff_timeout: 500ms, max_handoff_retries: 2 }\n";
    let gw = Gateway::start(&(cfg(&svc, "") + extra)).await;
    let c = client();
    let token = session_served_by(&gw, "a").await;
    let dead = crate::harness::dead_addr();
    let (s, _) = notify(&gw, serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 1, "to": dead.to_string(), "in": 1})).await;
    assert_eq!(s, 200);
    let unreachable = within(Duration::from_secs(10), || async {
        node(&gw, "a").await["maintenance"]["unreachable"] == true
    })
    .await;
    assert!(unreachable, "retries exhausted: the node is unreachable");
    let r = c
        .get(gw.url("/"))
        .header("hop-session", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v = json(r).await;
    assert_eq!(v["node"], "b", "the session hopped to a healthy node");
    assert_eq!(v["hop_from"], "a");
    let hops: serde_json::Value = gw.admin_json("/admin/v1/hops").await;
    assert_eq!(hops["hops"][0]["reason"], "maintenance");
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_handoffs_total{outcome=\"exhausted\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn disabled_mode_ignores_notifications() {
    let a = Backend::start("a").await;
    let gw = Gateway::start(&cfg(
        &service("s", &[("a", a.addr, "")]),
        "maintenance: { mode: disabled }\n",
    ))
    .await;
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATING", "seq": 1}),
    )
    .await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["refused"]["reason"], "disabled");
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], false);
}

#[tokio::test]
async fn older_sequence_numbers_are_ignored_and_relaxed_nodes_are_not_ejected() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let svc = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]).replacen(
        "  - name: s\n",
        "  - name: s\n    outlier: { consecutive_5xx: 1 }\n    circuit: { enabled: false }\n",
        1,
    );
    let gw = Gateway::start(&cfg(&svc, "")).await;
    let (s, _) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATING", "seq": 5}),
    )
    .await;
    assert_eq!(s, 200);
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATED", "seq": 4}),
    )
    .await;
    assert_eq!(s, 409, "an older seq after a newer one is ignored: {v}");
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], true);
    // While relaxed, failures do not eject the node.
    let c = client();
    c.post(a.url("/control/fail?on=1")).send().await.unwrap();
    for _ in 0..6 {
        c.get(gw.url("/")).send().await.unwrap();
    }
    let n = node(&gw, "a").await;
    assert_eq!(n["ejections"], 0, "no passive ejection while relaxed: {n}");
    // Not relaxed: the same failures eject it.
    let (s, _) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATED", "seq": 6}),
    )
    .await;
    assert_eq!(s, 200);
    for _ in 0..6 {
        c.get(gw.url("/")).send().await.unwrap();
    }
    assert!(node(&gw, "a").await["ejections"].as_u64().unwrap() >= 1);
}

#[tokio::test]
async fn moving_without_an_address_reconnects_after_half_the_time() {
    let a = Backend::start("a").await;
    let gw = Gateway::start(&cfg(&service("s", &[("a", a.addr, "")]), "")).await;
    let c = client();
    assert_eq!(c.get(gw.url("/")).send().await.unwrap().status(), 200);
    let before = node(&gw, "a").await["pool"]["generation"].as_u64().unwrap();
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 1, "in": 1}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        node(&gw, "a").await["pool"]["generation"].as_u64().unwrap(),
        before,
        "nothing happens at once"
    );
    let mut after = before;
    for _ in 0..200 {
        after = node(&gw, "a").await["pool"]["generation"].as_u64().unwrap();
        if after > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(after > before, "connections were replaced after T/2");
    assert_eq!(c.get(gw.url("/")).send().await.unwrap().status(), 200);
}

/// Established TCP connections to `port` (from `ss`).
fn connections_to(port: u16) -> usize {
    let out = std::process::Command::new("ss")
        .args([
            "-Htn",
            "state",
            "established",
            &format!("( dport = :{port} )"),
        ])
        .output()
        .expect("ss (iproute2) is installed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count()
}

#[tokio::test]
async fn moving_under_continuous_load_loses_nothing_and_leaves_the_old_address() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let old = Backend::start("old-a").await;
    let b = Backend::start("b").await;
    let moved = Backend::start("new-a").await;
    let svc = service("s", &[("a", old.addr, ""), ("b", b.addr, "")]);
    let gw = Gateway::start(&(cfg(&svc, "") + "sessions: { ttl: 1h }\n")).await;
    let token = Arc::new(session_served_by(&gw, "old-a").await);
    let stop = Arc::new(AtomicBool::new(false));
    let noticed = Arc::new(AtomicBool::new(false));
    let (errors, late_on_old, served_new) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut load = Vec::new();
    for _ in 0..8 {
        let (stop, noticed, errors, late, served_new, token, url) = (
            stop.clone(),
            noticed.clone(),
            errors.clone(),
            late_on_old.clone(),
            served_new.clone(),
            token.clone(),
            gw.url("/work"),
        );
        load.push(tokio::spawn(async move {
            let c = client();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) || n < 20 {
                n += 1;
                let after_notice = noticed.load(Ordering::Acquire);
                match c
                    .get(&url)
                    .header("hop-session", token.as_str())
                    .send()
                    .await
                {
                    Ok(r) if r.status() == 200 => {
                        let v = json(r).await;
                        assert!(v["hop_from"].is_null(), "MOVING is not a hop");
                        match v["node"].as_str() {
                            Some("old-a") if after_notice => {
                                late.fetch_add(1, Ordering::Relaxed);
                            }
                            Some("new-a") => {
                                served_new.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {}
                        }
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v) = notify(&gw, serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 1, "to": moved.addr.to_string(), "in": 1})).await;
    assert_eq!(s, 200, "{v}");
    noticed.store(true, Ordering::Release);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    assert_eq!(errors.load(Ordering::Relaxed), 0, "no client error");
    assert_eq!(
        late_on_old.load(Ordering::Relaxed),
        0,
        "nothing new reached the old address after the notice"
    );
    assert!(
        served_new.load(Ordering::Relaxed) > 0,
        "traffic arrived at the new address"
    );
    let sid: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{token}")).await;
    assert_eq!(
        sid["bindings"][0]["node"], "a",
        "the session kept its node id"
    );
    // After T, nothing of the gateway's is left connected to the old address.
    let mut left = usize::MAX;
    for _ in 0..200 {
        left = connections_to(old.addr.port());
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(left, 0, "connections to the old address closed by T");
}

#[tokio::test]
async fn the_handoff_breaker_opens_half_opens_and_closes_when_the_address_comes_up() {
    let a = Backend::start("a").await;
    let svc = service("s", &[("a", a.addr, "")]);
    let extra = "maintenance: { handoff_timeout: 300ms, max_handoff_retries: 3, breaker_failures: 2, breaker_reset: 1s }\n";
    let gw = Gateway::start(&(cfg(&svc, "") + extra)).await;
    let target = crate::harness::dead_addr();
    let metric = |m: &str, name: &str| -> u64 {
        m.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let metrics = || async { gw.metrics().await };
    // Nothing listens at `target`: dials fail, retries back off, the breaker
    // opens after two failures and turns the third attempt away.
    let (s, _) = notify(&gw, serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 1, "to": target.to_string(), "in": 1})).await;
    assert_eq!(s, 200);
    let mut m = metrics().await;
    for _ in 0..300 {
        if metric(&m, "hopgate_handoffs_total{outcome=\"breaker_open\"}") >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        m = metrics().await;
    }
    assert_eq!(
        metric(&m, "hopgate_handoffs_total{outcome=\"attempt_failed\"}"),
        2,
        "{m}"
    );
    assert!(
        metric(&m, "hopgate_handoffs_total{outcome=\"breaker_open\"}") >= 1,
        "{m}"
    );
    assert_eq!(node(&gw, "a").await["maintenance"]["unreachable"], true);
    // The address comes up; after the reset time the breaker half-opens on
    // the next handoff and its probe succeeds.
    let up = Backend::start_on("a-new", target).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (s, _) = notify(&gw, serde_json::json!({"service": "s", "node": "a", "kind": "MOVING", "seq": 2, "to": up.addr.to_string(), "in": 1})).await;
    assert_eq!(s, 200);
    let mut ok = 0;
    for _ in 0..300 {
        ok = metric(&metrics().await, "hopgate_handoffs_total{outcome=\"ok\"}");
        if ok >= 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ok >= 1, "the half-open probe dialled the new address");
    assert_eq!(node(&gw, "a").await["maintenance"]["unreachable"], false);
    let v = json(client().get(gw.url("/")).send().await.unwrap()).await;
    assert_eq!(v["node"], "a-new", "traffic flows to the new address");
}
