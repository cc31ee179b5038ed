//! Per-route policy (`routes[].timeouts`, `.retries`, `.limits`) with real
//! processes: each route's whole-request deadline, a slow attempt retried
//! on another node, body limits above and below the global one (with curl
//! as the client too), `retries.attempts: 1`, a route's status list over
//! its service's, a route's idle limit on its
//! WebSocket tunnels, `GET /admin/v1/routes`, and a bad policy on reload
//! keeping the running config.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::harness::{
    client, config, dead_addr, h2_client, json, metric, within, Backend, Gateway,
};

/// A node that accepts connections and never answers; counts them.
async fn silent_node() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            count.fetch_add(1, Ordering::Relaxed);
            held.push(s);
        }
    });
    (addr, accepted)
}

fn one_node(name: &str, addr: SocketAddr) -> String {
    format!("  - name: {name}\n    nodes:\n      - {{ id: {name}-1, address: \"{addr}\" }}\n")
}

/// Two routes to the same slow backend, one with a 1 s deadline and one
/// with 4 s: each answers 504 at its own deadline, and the short one does
/// not wait for the long one.
#[tokio::test]
async fn each_route_answers_504_at_its_own_deadline() {
    let b = Backend::start("b").await;
    let routes = "  - { id: short, match: { path_prefix: /short }, service: s, timeouts: { request: 1s } }\n  - { id: long, match: { path_prefix: /long }, service: s, timeouts: { request: 4s } }\n";
    let gw = Gateway::start(&config(&one_node("s", b.addr), routes)).await;
    let c = client();
    let order = Arc::new(AtomicUsize::new(0));
    let get = |path: &'static str| {
        let (c, url, order) = (c.clone(), gw.url(path), Arc::clone(&order));
        tokio::spawn(async move {
            let status = c.get(url).send().await.unwrap().status().as_u16();
            (status, order.fetch_add(1, Ordering::SeqCst))
        })
    };
    // Both ask for an answer that takes 2.5 s.
    let short = get("/short/x?sleep_ms=2500");
    let long = get("/long/x?sleep_ms=2500");
    let (short, long) = (short.await.unwrap(), long.await.unwrap());
    assert_eq!(short.0, 504, "the 1 s route answers 504");
    assert_eq!(long.0, 200, "the 4 s route waits for the 2.5 s answer");
    assert_eq!(
        short.1, 0,
        "the short route's 504 came before the long answer"
    );
    // Past its own deadline the long route answers 504 too.
    let r = c.get(gw.url("/long/x?sleep_ms=6000")).send().await.unwrap();
    assert_eq!(r.status(), 504);
    // An HTTP/2 client's request is held to the route's deadline as well.
    let r = h2_client()
        .get(gw.url("/short/x?sleep_ms=2500"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (r.version(), r.status().as_u16()),
        (reqwest::Version::HTTP_2, 504)
    );
}

/// `retries.on_status` on a route replaces the service's list: `[]`
/// turns the service's "retry a 503 elsewhere" off on that route only.
#[tokio::test]
async fn a_routes_status_list_overrides_the_services() {
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let services = format!(
        "  - name: s\n    retries: {{ on_status: [503] }}\n    nodes:\n      - {{ id: a, address: \"{}\" }}\n      - {{ id: b, address: \"{}\" }}\n",
        a.addr, b.addr
    );
    let routes = "  - { id: plain, match: { path_prefix: /plain }, service: s, retries: { on_status: [] } }\n  - { id: rest, match: { path_prefix: / }, service: s, retries: { attempts: 2 } }\n";
    let gw = Gateway::start(&config(&services, routes)).await;
    let c = client();
    let retried = || async {
        let m = gw.metrics().await;
        metric(
            &m,
            "hopgate_retries_on_status_total",
            &[("service", "s"), ("status", "503")],
        )
        .unwrap_or(0.0)
    };
    for i in 0..4 {
        let r = c
            .post(gw.url(&format!("/plain/{i}?status=503")))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
    }
    assert_eq!(retried().await, 0.0, "the route's empty list still retried");
    let r = c
        .post(gw.url("/rest/x?status=503"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        503,
        "every node answers 503: the last one passes through"
    );
    assert!(
        retried().await > 0.0,
        "the service's list was not used on the other route"
    );
}

/// An attempt past the route's `attempt` bound is retried on the other
/// node (a GET is replay-safe), which answers; on a route whose only node
/// is silent the client gets 504.
#[tokio::test]
async fn a_slow_attempt_is_retried_on_another_node() {
    let b = Backend::start("b").await;
    let (silent, accepted) = silent_node().await;
    let services = format!(
        "  - name: s\n    outlier: {{ consecutive_5xx: 0, consecutive_failures: 0 }}\n    circuit: {{ enabled: false }}\n    nodes:\n      - {{ id: quiet, address: \"{silent}\" }}\n      - {{ id: b, address: \"{}\" }}\n{}",
        b.addr,
        one_node("lone", silent)
    );
    let routes = "  - { id: app, match: { path_prefix: /app }, service: s, timeouts: { request: 10s, attempt: 300ms } }\n  - { id: lone, match: { path_prefix: /lone }, service: lone, timeouts: { attempt: 300ms } }\n";
    let gw = Gateway::start(&config(&services, routes)).await;
    let c = client();
    for i in 0..6 {
        let r = c.get(gw.url(&format!("/app/{i}"))).send().await.unwrap();
        assert_eq!(r.status(), 200, "request {i}");
        assert_eq!(json(r).await["node"], "b");
    }
    assert!(
        accepted.load(Ordering::Relaxed) > 0,
        "no attempt went to the silent node, so none was retried"
    );
    let r = c.get(gw.url("/lone/x")).send().await.unwrap();
    assert_eq!(r.status(), 504);
}

/// `limits.max_body_bytes` on a route, larger and smaller than the global
/// 1 KiB: 413 against the route's own limit, declared or streamed.
#[tokio::test]
async fn route_body_limits_above_and_below_the_global_one() {
    let b = Backend::start("b").await;
    let routes = "  - { id: big, match: { path_prefix: /big }, service: s, limits: { max_body_bytes: 64KiB } }\n  - { id: small, match: { path_prefix: /small }, service: s, limits: { max_body_bytes: 100 } }\n  - { id: rest, match: { path_prefix: / }, service: s }\n";
    let yaml = config(&one_node("s", b.addr), routes) + "limits: { max_body_bytes: 1KiB }\n";
    let gw = Gateway::start(&yaml).await;
    let c = client();
    let post = |path: &str, n: usize| c.post(gw.url(path)).body(vec![b'x'; n]).send();
    let cases = [
        ("/big/x", 10_000, 200),
        ("/rest/x", 10_000, 413),
        ("/small/x", 500, 413),
        ("/rest/x", 500, 200),
        ("/big/x", 100_000, 413),
    ];
    for (path, n, want) in cases {
        let r = post(path, n).await.unwrap();
        assert_eq!(r.status(), want, "POST {n} bytes to {path}");
        if want == 200 {
            assert_eq!(json(r).await["body_bytes"], n, "{path} got the whole body");
        }
    }
    // curl, with a chunked body (no declared length): the route's limit
    // applies to the stream too.
    let curl = |path: String, n: usize| async move {
        let body = temp_body(n);
        let out = tokio::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(["-H", "Transfer-Encoding: chunked", "--data-binary"])
            .arg(format!("@{}", body.display()))
            .arg(path)
            .output()
            .await
            .expect("curl runs");
        let _ = std::fs::remove_file(&body);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(curl(gw.url("/big/x"), 10_000).await, "200");
    assert_eq!(curl(gw.url("/small/x"), 500).await, "413");
    assert_eq!(curl(gw.url("/rest/x"), 10_000).await, "413");
}

fn temp_body(n: usize) -> std::path::PathBuf {
    let p = crate::harness::temp_path("body");
    std::fs::write(&p, vec![b'y'; n]).unwrap();
    p
}

/// `retries.attempts: 1` on a route: a request whose node refuses the
/// connection is not retried there (502), while the default route's are
/// (every answer 200).
#[tokio::test]
async fn attempts_1_turns_retries_off_on_its_route() {
    let b = Backend::start("b").await;
    let services = format!(
        "  - name: s\n    outlier: {{ consecutive_5xx: 0, consecutive_failures: 0 }}\n    circuit: {{ enabled: false }}\n    nodes:\n      - {{ id: dead, address: \"{}\" }}\n      - {{ id: b, address: \"{}\" }}\n",
        dead_addr(),
        b.addr
    );
    let routes = "  - { id: once, match: { path_prefix: /once }, service: s, retries: { attempts: 1 } }\n  - { id: rest, match: { path_prefix: / }, service: s }\n";
    let gw = Gateway::start(&config(&services, routes)).await;
    let c = client();
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(
            c.get(gw.url(&format!("/rest/{i}")))
                .send()
                .await
                .unwrap()
                .status(),
        );
    }
    assert!(
        statuses.iter().all(|s| *s == 200),
        "default route: {statuses:?}"
    );
    let mut once = Vec::new();
    for i in 0..8 {
        once.push(
            c.get(gw.url(&format!("/once/{i}")))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16(),
        );
    }
    assert!(once.contains(&502), "attempts: 1 retried anyway: {once:?}");
    assert!(once.contains(&200), "the live node answered none: {once:?}");
}

/// `GET /admin/v1/routes`: every route with its match, service, target,
/// enabled flag and effective policy, each value with its origin.
#[tokio::test]
async fn admin_routes_shows_effective_values_and_their_origin() {
    let b = Backend::start("b").await;
    let services = format!(
        "  - name: s\n    retries: {{ on_status: [503] }}\n    nodes:\n      - {{ id: b, address: \"{}\", version: v1 }}\n",
        b.addr
    );
    let routes = "  - id: app\n    match: { path_prefix: /app, methods: [GET] }\n    service: s\n    version: v1\n    timeouts: { request: 120s, attempt: 30s }\n    retries: { attempts: 2, on_status: [] }\n    limits: { max_body_bytes: 100MiB }\n  - { id: plain, match: { path_prefix: / }, service: s, enabled: false }\n";
    let yaml = config(&services, routes) + "timeouts: { request: 20s, idle: 90s, shutdown: 10s }\n";
    let gw = Gateway::start(&yaml.replace("timeouts: { shutdown: 10s }\n", "")).await;
    let v = gw.admin_json("/admin/v1/routes").await;
    let app = &v["routes"][0];
    assert_eq!(app["id"], "app");
    assert_eq!(app["enabled"], true);
    assert_eq!(app["service"], "s");
    assert_eq!(app["match"]["path_prefix"], "/app");
    assert_eq!(app["target"]["version"], "v1");
    let p = &app["policy"];
    let pair = |v: &serde_json::Value| (v["value"].clone(), v["from"].clone());
    use serde_json::json as j;
    assert_eq!(pair(&p["timeouts"]["request"]), (j!("120s"), j!("route")));
    assert_eq!(pair(&p["timeouts"]["attempt"]), (j!("30s"), j!("route")));
    assert_eq!(pair(&p["timeouts"]["idle"]), (j!("90s"), j!("global")));
    assert_eq!(pair(&p["retries"]["attempts"]), (j!(2), j!("route")));
    assert_eq!(pair(&p["retries"]["on_status"]), (j!([]), j!("route")));
    assert_eq!(pair(&p["retries"]["budget"]), (j!(0.2), j!("global")));
    assert_eq!(
        pair(&p["limits"]["max_body_bytes"]),
        (j!(100u64 << 20), j!("route"))
    );
    let plain = &v["routes"][1];
    assert_eq!(plain["enabled"], false);
    assert_eq!(plain["target"]["kind"], "service");
    let q = &plain["policy"];
    assert_eq!(pair(&q["timeouts"]["request"]), (j!(null), j!("global")));
    assert_eq!(pair(&q["timeouts"]["attempt"]), (j!("20s"), j!("global")));
    assert_eq!(pair(&q["retries"]["attempts"]), (j!(3), j!("global")));
    assert_eq!(pair(&q["retries"]["on_status"]), (j!([503]), j!("service")));
    assert_eq!(
        pair(&q["limits"]["max_body_bytes"]),
        (j!(10u64 << 20), j!("global"))
    );
}

/// A reload whose route policy is invalid is refused with its field path;
/// the running config, and its route policy, stay.
#[tokio::test]
async fn a_bad_policy_on_reload_keeps_the_running_config() {
    let b = Backend::start("b").await;
    let good =
        "  - { id: app, match: { path_prefix: / }, service: s, timeouts: { request: 1s } }\n";
    let gw = Gateway::start(&config(&one_node("s", b.addr), good)).await;
    let versions = || gw.admin_json("/admin/v1/config/versions");
    let before = versions().await["reload_failures"].as_u64().unwrap();
    let bad = "  - { id: app, match: { path_prefix: / }, service: s, timeouts: { request: 1s, attempt: 5s } }\n";
    gw.rewrite_config(&config(&one_node("s", b.addr), bad));
    let refused = within(Duration::from_secs(10), || async {
        versions().await["reload_failures"].as_u64().unwrap() > before
    })
    .await;
    assert!(refused, "the bad reload was never refused");
    let v = versions().await;
    assert!(
        v.to_string().contains("routes[0].timeouts.attempt"),
        "the error names its field: {v}"
    );
    let r = gw.admin_json("/admin/v1/routes").await;
    let t = &r["routes"][0]["policy"]["timeouts"];
    assert_eq!(t["request"]["value"], "1s");
    assert_eq!(t["attempt"]["value"], "1s");
    let r = client()
        .get(gw.url("/x?sleep_ms=2000"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504, "the running 1 s deadline still holds");
}

/// `timeouts.idle` on a route: its WebSocket tunnel closes once idle that
/// long, while a tunnel on a route with the global 60 s keeps echoing.
#[tokio::test]
async fn a_routes_idle_limit_closes_its_idle_tunnels_only() {
    let b = Backend::start("ws").await;
    let routes = "  - { id: brief, match: { path_prefix: /ws, query: { idle: short } }, service: s, timeouts: { idle: 1s } }\n  - { id: rest, match: { path_prefix: / }, service: s }\n";
    let gw = Gateway::start(&config(&one_node("s", b.addr), routes)).await;
    let open = |q: &'static str| {
        let url = format!("ws://{}/ws{q}", gw.addr);
        async move {
            let (ws, resp) = tokio_tungstenite::connect_async(url)
                .await
                .expect("upgrade");
            assert_eq!(resp.status(), 101);
            ws
        }
    };
    let mut brief = open("?idle=short").await;
    let mut kept = open("").await;
    for ws in [&mut brief, &mut kept] {
        ws.send(Message::text("hi")).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
    }
    // Nothing flows: the brief route's tunnel ends (a bound against hangs,
    // not a timing assertion).
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match brief.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the 1 s idle tunnel was never closed");
    kept.send(Message::text("still here")).await.unwrap();
    assert_eq!(
        kept.next().await.unwrap().unwrap(),
        Message::text("still here"),
        "the tunnel on the global idle limit was closed too"
    );
}
