//! The `mirror` route filter end to end, with parts this project did not
//! write: Debian's nginx as the origin and as the mirror target (its
//! access log shows every copy it got), curl and reqwest as clients. The
//! copy is the request as the upstream sees it (rewritten path, edited
//! headers, body), over HTTP/1.1 and h2c; the client's answer is the
//! origin's whatever the mirror target does (dead, or never answering);
//! `percent` samples (0 sends none, 100 all, 50 about half); copies over
//! `max_in_flight` and bodies over `retries.buffer_body` are not sent;
//! every outcome is counted in `hopgate_mirror_total{route,result}`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::harness::{client, curl, dead_addr, metric, within, Gateway, Nginx};

/// The origin: answers what it received.
async fn origin() -> Nginx {
    Nginx::start(
        &[],
        "",
        "location / { return 200 \"origin uri=$request_uri xa=$http_x_a\\n\"; }",
    )
    .await
}

/// The mirror target: answers 204 and logs one line per copy (`-` for an
/// empty value).
async fn shadow() -> Nginx {
    Nginx::start(
        &[],
        "log_format copy '$request_method $request_uri host=$host xa=$http_x_a \
         len=$content_length route=$http_x_route_rule_id';",
        "access_log {root}/copies.log copy; location / { return 204; }",
    )
    .await
}

/// The lines `nginx` logged for copies whose target starts with `prefix`.
fn copies(nginx: &Nginx, prefix: &str) -> Vec<String> {
    let log = std::fs::read_to_string(nginx.dir.join("root/copies.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.split(' ').nth(1).is_some_and(|t| t.starts_with(prefix)))
        .map(str::to_owned)
        .collect()
}

/// A TCP server that accepts connections and never answers; its
/// connections are held until the test ends.
async fn silent() -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    (addr, task)
}

fn config(origin: SocketAddr, shadow: SocketAddr, silent: SocketAddr) -> String {
    let dead = dead_addr();
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
         timeouts: {{ shutdown: 5s }}\nretries: {{ buffer_body: 1KiB }}\n\
         services:\n\
         \x20 - {{ name: web, nodes: [ {{ id: o, address: \"{origin}\" }} ] }}\n\
         \x20 - {{ name: shadow, nodes: [ {{ id: s, address: \"{shadow}\" }} ] }}\n\
         \x20 - {{ name: dead, nodes: [ {{ id: d, address: \"{dead}\" }} ] }}\n\
         \x20 - {{ name: silent, nodes: [ {{ id: q, address: \"{silent}\" }} ] }}\n\
         routes:\n\
         \x20 - id: copy\n    match: {{ path_prefix: /copy }}\n    service: web\n    filters:\n\
         \x20     - request_headers: {{ set: {{ X-A: edited }} }}\n\
         \x20     - url_rewrite: {{ path: {{ replace_prefix: /v2 }} }}\n\
         \x20     - mirror: {{ service: shadow, percent: 100 }}\n\
         \x20 - {{ id: none, match: {{ path_prefix: /none }}, service: web, filters: [ {{ mirror: {{ service: shadow, percent: 0 }} }} ] }}\n\
         \x20 - {{ id: half, match: {{ path_prefix: /half }}, service: web, filters: [ {{ mirror: {{ service: shadow, percent: 50 }} }} ] }}\n\
         \x20 - {{ id: dead, match: {{ path_prefix: /dead }}, service: web, filters: [ {{ mirror: {{ service: dead }} }} ] }}\n\
         \x20 - {{ id: slow, match: {{ path_prefix: /slow }}, service: web, filters: [ {{ mirror: {{ service: silent, max_in_flight: 2 }} }} ] }}\n\
         \x20 - {{ id: all, match: {{ path_prefix: / }}, service: web }}\n"
    )
}

/// `hopgate_mirror_total{route,result}` now (0 when absent).
async fn mirrored(gw: &Gateway, route: &str, result: &str) -> f64 {
    let text = gw.metrics().await;
    metric(
        &text,
        "hopgate_mirror_total",
        &[("route", route), ("result", result)],
    )
    .unwrap_or(0.0)
}

/// curl's body for one request (`-d` makes it a POST with that body).
async fn fetch(h2: bool, extra: &[&str], url: &str) -> String {
    let mut args = Vec::new();
    if h2 {
        args.push("--http2-prior-knowledge");
    }
    args.extend(extra);
    args.push(url);
    curl(&args).await
}

#[tokio::test]
async fn copies_reach_a_second_nginx_as_the_upstream_sees_them() {
    let (o, s) = (origin().await, shadow().await);
    let (quiet, _task) = silent().await;
    let gw = Gateway::start(&config(o.addr, s.addr, quiet)).await;
    for h2 in [false, true] {
        for _ in 0..3 {
            let got = fetch(h2, &["-d", "hello"], &gw.url("/copy/x?q=1")).await;
            assert_eq!(got, "origin uri=/v2/x?q=1 xa=edited\n", "h2={h2}");
            let got = fetch(h2, &[], &gw.url("/copy/get")).await;
            assert_eq!(got, "origin uri=/v2/get xa=edited\n", "h2={h2}");
        }
    }
    let arrived = within(Duration::from_secs(20), || async {
        copies(&s, "/v2/").len() == 12
    })
    .await;
    assert!(arrived, "copies: {:?}", copies(&s, "/"));
    let lines = copies(&s, "/v2/");
    let posts: Vec<_> = lines.iter().filter(|l| l.starts_with("POST ")).collect();
    assert_eq!(posts.len(), 6, "{lines:?}");
    for l in &posts {
        assert_eq!(
            l.as_str(),
            "POST /v2/x?q=1 host=127.0.0.1 xa=edited len=5 route=copy"
        );
    }
    for l in lines.iter().filter(|l| l.starts_with("GET ")) {
        assert_eq!(
            l.as_str(),
            "GET /v2/get host=127.0.0.1 xa=edited len=- route=copy"
        );
    }
    assert_eq!(mirrored(&gw, "copy", "sent").await, 12.0);
    for r in ["failed", "dropped", "too_large"] {
        assert_eq!(mirrored(&gw, "copy", r).await, 0.0, "{r}");
    }

    // A body over retries.buffer_body goes to the origin, not the mirror.
    let big = "b".repeat(2000);
    let got = fetch(false, &["-d", &big], &gw.url("/copy/big")).await;
    assert_eq!(got, "origin uri=/v2/big xa=edited\n");
    assert_eq!(mirrored(&gw, "copy", "too_large").await, 1.0);
    assert_eq!(mirrored(&gw, "copy", "sent").await, 12.0);
}

#[tokio::test]
async fn percent_samples_the_share_it_names() {
    let (o, s) = (origin().await, shadow().await);
    let (quiet, _task) = silent().await;
    let gw = Gateway::start(&config(o.addr, s.addr, quiet)).await;
    let c = client();
    let n = 200;
    for path in ["/none/a", "/half/a"] {
        for _ in 0..n {
            let r = c.get(gw.url(path)).send().await.unwrap();
            assert_eq!(r.status(), 200);
            assert_eq!(r.text().await.unwrap(), format!("origin uri={path} xa=\n"));
        }
    }
    let settled = within(Duration::from_secs(20), || async {
        let sent = mirrored(&gw, "half", "sent").await as usize;
        sent > 0 && copies(&s, "/half/").len() == sent
    })
    .await;
    let sent = mirrored(&gw, "half", "sent").await;
    assert!(
        settled,
        "{sent} counted, {} logged",
        copies(&s, "/half/").len()
    );
    // 50 % of 200: 100 expected, sd ~7; the bound is ~5.6 sd either way.
    assert!((60.0..=140.0).contains(&sent), "50 % sent {sent} of {n}");
    for r in ["sent", "failed", "dropped", "too_large"] {
        assert_eq!(mirrored(&gw, "none", r).await, 0.0, "0 %: {r}");
    }
    assert!(copies(&s, "/none/").is_empty());
}

/// A dead mirror target and one that never answers change nothing for the
/// client (its answers come back, the POST's body included); copies over
/// `max_in_flight` are dropped and counted.
#[tokio::test]
async fn dead_and_silent_mirror_targets_leave_the_answer_alone() {
    let (o, s) = (origin().await, shadow().await);
    let (quiet, _task) = silent().await;
    let gw = Gateway::start(&config(o.addr, s.addr, quiet)).await;
    for h2 in [false, true] {
        for _ in 0..3 {
            let got = fetch(h2, &["-d", "x"], &gw.url("/dead/p")).await;
            assert_eq!(got, "origin uri=/dead/p xa=\n", "h2={h2}");
        }
    }
    let failed = within(Duration::from_secs(20), || async {
        mirrored(&gw, "dead", "failed").await == 6.0
    })
    .await;
    assert!(failed, "{}", gw.metrics().await);
    assert_eq!(mirrored(&gw, "dead", "sent").await, 0.0);

    // The silent target holds every copy it accepts (until the mirror
    // service's request timeout, 30 s): two are in flight, the other four
    // are dropped, and every client answer is the origin's.
    for i in 0..6 {
        let h2 = i % 2 == 1;
        let got = fetch(h2, &["-d", "body"], &gw.url("/slow/p")).await;
        assert_eq!(got, "origin uri=/slow/p xa=\n", "request {i}");
    }
    assert_eq!(mirrored(&gw, "slow", "dropped").await, 4.0);
    let text = gw.metrics().await;
    assert_eq!(
        metric(&text, "hopgate_mirror_in_flight", &[("route", "slow")]),
        Some(2.0),
        "{text}"
    );
    assert_eq!(mirrored(&gw, "slow", "sent").await, 0.0);
}
