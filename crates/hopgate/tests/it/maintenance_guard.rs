//! The in-band `Hop-Maintenance` header is not a control channel for
//! clients: a backend that reflects a request value into its answer (the
//! test backend's `maint=` and `header=` knobs do exactly that) must not let
//! a client relax, move or lock out a node. Off by default per service; when
//! on, `to=` is bound by `allow_to_cidrs` and `seq` by `max_seq_jump`; an
//! answer to a request that carried `Hop-Maintenance` is never trusted, and
//! the client's header never reaches the backend. The admin API stays
//! trusted.

use std::time::Duration;

use crate::harness::{client, json, service, Backend, Gateway};
use crate::maintenance::{cfg, in_band, node, notify};

/// `v` as a query value (spaces and `=` escaped).
fn q(v: &str) -> String {
    v.replace(' ', "%20").replace('=', "%3D")
}

/// Polls the metrics until `line` shows up (within ~10 s).
async fn wait_metric(gw: &Gateway, line: &str) {
    for _ in 0..500 {
        if gw.metrics().await.contains(line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "metric line {line:?} never showed up:\n{}",
        gw.metrics().await
    );
}

/// Polls node `id` until its `maintenance.<field>` is `want` (within ~10 s).
async fn wait_node(gw: &Gateway, id: &str, field: &str, want: serde_json::Value) {
    for _ in 0..500 {
        if node(gw, id).await["maintenance"][field] == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "node {id}: maintenance.{field} never became {want}: {}",
        node(gw, id).await
    );
}

#[tokio::test]
async fn a_reflected_hop_maintenance_does_nothing_by_default() {
    let a = Backend::start("a").await;
    let elsewhere = Backend::start("elsewhere").await;
    let gw = Gateway::start(&cfg(&service("s", &[("a", a.addr, "")]), "")).await;
    let c = client();
    let moving = q(&format!("MOVING seq=1 to={} in=30", elsewhere.addr));
    let r = c
        .get(gw.url(&format!("/x?maint={moving}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("hop-maintenance").is_none());
    // The same through a generic reflected header, and a relaxing kind.
    let r = c
        .get(gw.url(&format!(
            "/x?header=Hop-Maintenance:{}",
            q("MIGRATING seq=2")
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("hop-maintenance").is_none());
    // Ignored in the data plane, before the answer went out: counted now.
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_maintenance_headers_ignored_total{reason=\"in_band_off\"} 2"),
        "{m}"
    );
    assert!(
        !m.contains("hopgate_maintenance_notifications_total{"),
        "nothing reached the intake: {m}"
    );
    let n = node(&gw, "a").await;
    assert_eq!(n["maintenance"]["moved_to"], serde_json::Value::Null, "{n}");
    assert_eq!(n["maintenance"]["relaxed"], false, "{n}");
    // Traffic still goes to a's own address.
    assert_eq!(
        json(c.get(gw.url("/")).send().await.unwrap()).await["node"],
        "a"
    );
    // The operator's channel is unaffected.
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATING", "seq": 1}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
}

#[tokio::test]
async fn in_band_moving_outside_allow_to_cidrs_is_refused() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let gw = Gateway::start(&cfg(
        &in_band(
            &service("s", &[("a", a.addr, "")]),
            ", allow_to_cidrs: [ 127.0.0.1/32 ]",
        ),
        "",
    ))
    .await;
    let c = client();
    // 127.0.0.2 is outside 127.0.0.1/32.
    let outside = q(&format!(
        "MOVING seq=1 to=127.0.0.2:{} in=30",
        b.addr.port()
    ));
    let r = c
        .get(gw.url(&format!("/x?maint={outside}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_metric(
        &gw,
        "hopgate_maintenance_notifications_total{kind=\"MOVING\",result=\"to_not_allowed\"} 1",
    )
    .await;
    assert_eq!(
        node(&gw, "a").await["maintenance"]["moved_to"],
        serde_json::Value::Null
    );
    assert!(
        gw.logs()
            .contains("to= is outside services[].maintenance.allow_to_cidrs"),
        "the refusal is logged"
    );
    assert_eq!(
        json(c.get(gw.url("/")).send().await.unwrap()).await["node"],
        "a"
    );
    // Inside the allowed network the move is applied (the refused seq was
    // not recorded, so seq 1 is still new).
    let inside = q(&format!("MOVING seq=1 to={} in=30", b.addr));
    c.get(gw.url(&format!("/x?maint={inside}")))
        .send()
        .await
        .unwrap();
    wait_node(
        &gw,
        "a",
        "moved_to",
        serde_json::Value::String(b.addr.to_string()),
    )
    .await;
    assert_eq!(
        json(c.get(gw.url("/")).send().await.unwrap()).await["node"],
        "b"
    );
}

#[tokio::test]
async fn in_band_seq_jumps_are_bounded_and_the_admin_api_is_not() {
    let a = Backend::start("a").await;
    let gw = Gateway::start(&cfg(
        &in_band(&service("s", &[("a", a.addr, "")]), ", max_seq_jump: 10"),
        "",
    ))
    .await;
    let c = client();
    let send = |v: &str| c.get(gw.url(&format!("/x?maint={}", q(v)))).send();
    // The lock-out attempt: seq = 2^64 - 1.
    assert_eq!(
        send("MIGRATING seq=18446744073709551615")
            .await
            .unwrap()
            .status(),
        200
    );
    wait_metric(
        &gw,
        "hopgate_maintenance_notifications_total{kind=\"MIGRATING\",result=\"seq_jump\"} 1",
    )
    .await;
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], false);
    // Within the bound of the last seen (none yet: 0).
    send("MIGRATING seq=5").await.unwrap();
    wait_node(&gw, "a", "relaxed", serde_json::Value::Bool(true)).await;
    // 16 - 5 = 11 > 10: refused; 15 - 5 = 10: applied.
    send("MIGRATED seq=16").await.unwrap();
    wait_metric(
        &gw,
        "hopgate_maintenance_notifications_total{kind=\"MIGRATED\",result=\"seq_jump\"} 1",
    )
    .await;
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], true);
    send("MIGRATED seq=15").await.unwrap();
    wait_node(&gw, "a", "relaxed", serde_json::Value::Bool(false)).await;
    // The operator is not bound by max_seq_jump, and was never locked out.
    let (s, v) = notify(
        &gw,
        serde_json::json!({"service": "s", "node": "a", "kind": "MIGRATING", "seq": 100000}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], true);
}

#[tokio::test]
async fn a_request_carrying_hop_maintenance_never_triggers_and_never_reaches_the_backend() {
    let a = Backend::start("a").await;
    let gw = Gateway::start(&cfg(&in_band(&service("s", &[("a", a.addr, "")]), ""), "")).await;
    let c = client();
    let relax = q("MIGRATING seq=3");
    let r = c
        .get(gw.url(&format!("/x?maint={relax}")))
        .header("hop-maintenance", "MIGRATING seq=3")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("hop-maintenance").is_none());
    let seen = json(r).await;
    assert_eq!(
        seen["headers"].get("hop-maintenance"),
        None,
        "the client's Hop-Maintenance reached the backend: {seen}"
    );
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_maintenance_headers_ignored_total{reason=\"request_carried\"} 1"),
        "{m}"
    );
    assert_eq!(node(&gw, "a").await["maintenance"]["relaxed"], false);
    // The same answer to a request without the header is taken.
    c.get(gw.url(&format!("/x?maint={relax}")))
        .send()
        .await
        .unwrap();
    wait_node(&gw, "a", "relaxed", serde_json::Value::Bool(true)).await;
}
