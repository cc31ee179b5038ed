//! The `mirror` route filter end to end, with parts this project did not
//! write: Debian's nginx as the origin and as the mirror target (each
//! reads a body whole before it answers; the target's access log shows
//! every complete copy it got, with its body's length, and every request
//! it saw, truncated ones included), curl and reqwest as clients. The
//! copy is the request as the upstream sees it (rewritten path, edited
//! headers, body), over HTTP/1.1 and h2c, whatever the body: declared,
//! chunked, streamed, larger than `retries.buffer_body`; the client's
//! answer is the origin's whatever the mirror target does (dead, never
//! answering, never reading); `percent` samples (0 sends none, 100 all,
//! 50 about half); copies over `max_in_flight` are not sent; a copy that
//! falls behind or whose client gives up is aborted, never completed;
//! every outcome is counted in `hopgate_mirror_total{route,result}`.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use crate::harness::{client, curl, dead_addr, h2_client, metric, within, Gateway, Nginx};

/// Reads a request's body whole (nginx's proxy does, before it sends it
/// on, to itself here with the body's length), then `inner` answers it
/// (with the original target in `X-Orig-Uri`).
fn reading(prefix: &str, inner: &str) -> String {
    format!(
        "client_max_body_size 0; \
         location / {{ proxy_set_header X-Orig-Uri $request_uri; \
         proxy_pass http://127.0.0.1:$server_port/{prefix}$request_uri; }} \
         location /{prefix}/ {{ {inner} }}"
    )
}

/// The origin: answers what it received, once it has the whole body.
async fn origin() -> Nginx {
    let inner = "return 200 \"origin uri=$http_x_orig_uri xa=$http_x_a\\n\";";
    Nginx::start(&[], "", &reading("__o", inner)).await
}

/// The mirror target: answers 204 once it has the whole body, and logs
/// one line per complete copy (`-` for an empty value; `len` the body's
/// length) in `copies.log`, and one per request it saw, with its status,
/// in `seen.log` (a truncated copy is there, not in `copies.log`).
async fn shadow() -> Nginx {
    let http = "log_format copy '$request_method $http_x_orig_uri host=$host xa=$http_x_a \
                len=$content_length route=$http_x_route_rule_id'; \
                log_format seen '$request_uri $status';";
    let server = format!(
        "access_log {{root}}/seen.log seen; {}",
        reading("__copy", "access_log {root}/copies.log copy; return 204;")
    );
    Nginx::start(&[], http, &server).await
}

/// The statuses `nginx` logged for requests (complete or not) whose
/// target starts with `prefix`.
fn seen(nginx: &Nginx, prefix: &str) -> Vec<String> {
    let log = std::fs::read_to_string(nginx.dir.join("root/seen.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.split(' ').nth(1).map(str::to_owned))
        .collect()
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
         limits: {{ max_body_bytes: 100MiB }}\n\
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
         \x20 - {{ id: stall, match: {{ path_prefix: /stall }}, service: web, filters: [ {{ mirror: {{ service: silent }} }} ] }}\n\
         \x20 - {{ id: stream, match: {{ path_prefix: /stream }}, service: web, filters: [ {{ mirror: {{ service: shadow }} }} ] }}\n\
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
    // Counted once the copy's answer is read (after the log line).
    let counted = within(Duration::from_secs(20), || async {
        mirrored(&gw, "copy", "sent").await == 12.0
    })
    .await;
    assert!(counted, "{}", gw.metrics().await);
    for r in ["failed", "dropped", "aborted"] {
        assert_eq!(mirrored(&gw, "copy", r).await, 0.0, "{r}");
    }

    // A body over retries.buffer_body is copied as it streams to the
    // origin: 2,000 bytes, then 1 MiB.
    let big = "b".repeat(2000);
    let got = fetch(false, &["-d", &big], &gw.url("/copy/big")).await;
    assert_eq!(got, "origin uri=/v2/big xa=edited\n");
    let file = crate::harness::temp_path("mirror-mib");
    std::fs::write(&file, vec![b'm'; 1 << 20]).unwrap();
    let at = format!("@{}", file.display());
    let got = fetch(false, &["--data-binary", &at], &gw.url("/copy/mib")).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(got, "origin uri=/v2/mib xa=edited\n");
    let arrived = within(Duration::from_secs(20), || async {
        copies(&s, "/v2/big").len() == 1 && copies(&s, "/v2/mib").len() == 1
    })
    .await;
    assert!(arrived, "copies: {:?}", copies(&s, "/"));
    assert_eq!(
        copies(&s, "/v2/big"),
        ["POST /v2/big host=127.0.0.1 xa=edited len=2000 route=copy"]
    );
    assert_eq!(
        copies(&s, "/v2/mib"),
        ["POST /v2/mib host=127.0.0.1 xa=edited len=1048576 route=copy"]
    );
    let counted = within(Duration::from_secs(20), || async {
        mirrored(&gw, "copy", "sent").await == 14.0
    })
    .await;
    assert!(counted, "{}", gw.metrics().await);
    assert_eq!(mirrored(&gw, "copy", "aborted").await, 0.0);
}

/// A streamed body of `chunks` chunks of `size` bytes, a pause before
/// each: no `Content-Length` (chunked over HTTP/1.1, DATA frames over
/// h2c), not complete when the gateway forwards it.
fn trickle(chunks: usize, size: usize) -> reqwest::Body {
    let chunk = bytes::Bytes::from(vec![b'c'; size]);
    let stream = futures_util::stream::unfold(0, move |i| {
        let chunk = chunk.clone();
        async move {
            if i == chunks {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            Some((Ok::<_, std::io::Error>(chunk), i + 1))
        }
    });
    reqwest::Body::wrap_stream(stream)
}

/// A chunked POST over HTTP/1.1 and a streamed one over h2c reach the
/// mirror target whole (its length as the origin got it), as the client
/// gets the origin's answer.
#[tokio::test]
async fn streamed_bodies_are_copied_whole() {
    let (o, s) = (origin().await, shadow().await);
    let (quiet, _task) = silent().await;
    let gw = Gateway::start(&config(o.addr, s.addr, quiet)).await;
    for (name, c) in [("h1", client()), ("h2c", h2_client())] {
        let r = c
            .post(gw.url(&format!("/stream/{name}")))
            .body(trickle(20, 4000))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{name}");
        let text = r.text().await.unwrap();
        assert_eq!(text, format!("origin uri=/stream/{name} xa=\n"));
    }
    let arrived = within(Duration::from_secs(20), || async {
        copies(&s, "/stream/").len() == 2
    })
    .await;
    assert!(arrived, "copies: {:?}", copies(&s, "/"));
    for name in ["h1", "h2c"] {
        assert_eq!(
            copies(&s, &format!("/stream/{name}")),
            [format!(
                "POST /stream/{name} host=127.0.0.1 xa=- len=80000 route=stream"
            )]
        );
    }
    let counted = within(Duration::from_secs(20), || async {
        mirrored(&gw, "stream", "sent").await == 2.0
    })
    .await;
    assert!(counted, "{}", gw.metrics().await);
    assert_eq!(mirrored(&gw, "stream", "aborted").await, 0.0);
}

/// A mirror target that never reads: the client's 32 MiB upload goes to
/// the origin and its answer comes back; the copy, more than its buffer
/// behind, is aborted (its place in flight given back at once, not at the
/// mirror's request timeout).
#[tokio::test]
async fn a_stalled_mirror_is_aborted_and_the_client_is_not_held_up() {
    let (o, s) = (origin().await, shadow().await);
    let (quiet, _task) = silent().await;
    let gw = Gateway::start(&config(o.addr, s.addr, quiet)).await;
    let file = crate::harness::temp_path("mirror-stall");
    std::fs::write(&file, vec![b's'; 32 << 20]).unwrap();
    let at = format!("@{}", file.display());
    let got = fetch(false, &["--data-binary", &at], &gw.url("/stall/p")).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(got, "origin uri=/stall/p xa=\n");
    let aborted = within(Duration::from_secs(20), || async {
        mirrored(&gw, "stall", "aborted").await == 1.0
    })
    .await;
    assert!(aborted, "{}", gw.metrics().await);
    let freed = within(Duration::from_secs(10), || async {
        let text = gw.metrics().await;
        metric(&text, "hopgate_mirror_in_flight", &[("route", "stall")]) == Some(0.0)
    })
    .await;
    assert!(freed, "{}", gw.metrics().await);
    assert_eq!(mirrored(&gw, "stall", "sent").await, 0.0);
}

/// A client that sends half its declared body and goes away: the origin
/// never gets a complete request, and neither does the mirror target,
/// which sees the copy cut off; the copy is counted aborted.
#[tokio::test]
async fn a_client_that_gives_up_mid_body_aborts_the_copy() {
    let (o, s) = (origin().await, shadow().await);
    let (quiet, _task) = silent().await;
    let gw = Gateway::start(&config(o.addr, s.addr, quiet)).await;
    let addr = gw.addr;
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head =
        format!("POST /stream/gone HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 200000\r\n\r\n");
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(&vec![b'g'; 100_000]).await.unwrap();
    // Time for the copy to reach the mirror target (not asserted on).
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(conn);
    let aborted = within(Duration::from_secs(20), || async {
        mirrored(&gw, "stream", "aborted").await == 1.0
    })
    .await;
    assert!(aborted, "{}", gw.metrics().await);
    let cut = within(Duration::from_secs(20), || async {
        !seen(&s, "/stream/gone").is_empty()
    })
    .await;
    assert!(cut, "the copy reached the mirror target");
    assert!(
        seen(&s, "/stream/gone").iter().all(|st| st != "204"),
        "{:?}",
        seen(&s, "/stream/gone")
    );
    assert!(copies(&s, "/stream/").is_empty(), "{:?}", copies(&s, "/"));
    assert_eq!(mirrored(&gw, "stream", "sent").await, 0.0);
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
    for r in ["sent", "failed", "dropped", "aborted"] {
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
