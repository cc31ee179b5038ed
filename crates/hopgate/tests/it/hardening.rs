//! What silent and hostile clients do to the gateway's own resources:
//! connections that never speak, a partial HTTP/2 preface, the admin
//! listener, and a `max_connections` the process cannot hold.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{client, json, metric, service, temp_path, within, Backend, Gateway, BIN};

/// Waits (bounded by `bound`) for the server to close `s`: a read that
/// returns end of stream or an error. Whether it did.
async fn closed_by_server(s: &mut TcpStream, bound: Duration) -> bool {
    let mut buf = [0u8; 256];
    matches!(
        tokio::time::timeout(bound, s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// A config with one listener, the admin API, the top-level lines `extra`
/// and one service `app` whose node `n1` is at `node`, every path routed to
/// it by the rule `all`.
fn app_config(extra: &str, node: SocketAddr) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n{extra}services:\n{}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        service("app", &[("n1", node, "")])
    )
}

async fn silent_and_partial(addr: SocketAddr) -> Vec<TcpStream> {
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    conns.push(partial);
    conns
}

#[tokio::test]
async fn connections_that_never_send_a_request_are_closed() {
    let b = Backend::start("n1").await;
    let yaml = app_config("timeouts: { header_read: 1s, shutdown: 5s }\n", b.addr);
    let gw = Gateway::start(&yaml).await;
    // The public listener: silent connections and a partial h2 preface are
    // closed after header_read (1 s); the bound is only against a hang.
    for (i, mut c) in silent_and_partial(gw.addr).await.into_iter().enumerate() {
        assert!(
            closed_by_server(&mut c, Duration::from_secs(20)).await,
            "public connection {i} that sent no request was left open"
        );
    }
    // The admin listener has its own deadline (10 s).
    for (i, mut c) in silent_and_partial(gw.admin).await.into_iter().enumerate() {
        assert!(
            closed_by_server(&mut c, Duration::from_secs(40)).await,
            "admin connection {i} that sent no request was left open"
        );
    }
    // Real clients are served as before, on both.
    let r = client().get(gw.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = client().get(gw.admin_url("/livez")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn max_connections_beyond_the_descriptor_limit_is_refused_at_start() {
    let path = temp_path("yaml");
    std::fs::write(
        &path,
        "listeners:\n  - { name: public, address: 127.0.0.1:0 }\nadmin: { address: 127.0.0.1:0 }\nlimits: { max_connections: 10000000 }\nservices:\n  - { name: app, nodes: [ { id: n1, address: \"127.0.0.1:1\" } ] }\nroutes:\n  - { id: all, match: { path_prefix: / }, service: app }\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(BIN)
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started with max_connections it cannot hold"
    );
    assert!(
        stderr.contains("limits.max_connections") && stderr.contains("RLIMIT_NOFILE"),
        "{stderr}"
    );
}

/// What `run` refuses, `hopgate validate` and a reload refuse too (the same
/// arithmetic against the open-file limit), and the running config stays.
#[tokio::test]
async fn max_connections_beyond_the_descriptor_limit_is_refused_by_validate_and_reload() {
    let b = Backend::start("n1").await;
    let good = crate::harness::config(
        &service("app", &[("n1", b.addr, "")]),
        "  - { id: all, match: { path_prefix: / }, service: app }",
    );
    let too_many = format!("{good}limits: {{ max_connections: 10000000 }}\n");
    let path = temp_path("yaml");
    std::fs::write(&path, &too_many).unwrap();
    let out = tokio::process::Command::new(BIN)
        .arg("validate")
        .arg(&path)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "validate accepted it");
    assert!(
        stderr.contains("limits.max_connections:") && stderr.contains("RLIMIT_NOFILE"),
        "{stderr}"
    );

    let gw = Gateway::start(&good).await;
    let r = client()
        .put(gw.admin_url("/admin/v1/config"))
        .body(too_many)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let doc: serde_json::Value = r.json().await.unwrap();
    assert_eq!(doc["errors"][0]["path"], "limits.max_connections", "{doc}");
    let r = client().get(gw.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200, "the running config stays");
}

#[tokio::test]
async fn a_yaml_alias_bomb_through_the_admin_api_is_refused_and_the_gateway_keeps_serving() {
    let b = Backend::start("n1").await;
    let yaml = crate::harness::config(
        &service("app", &[("n1", b.addr, "")]),
        "  - { id: all, match: { path_prefix: / }, service: app }\n",
    );
    let gw = Gateway::start(&yaml).await;
    // ~200 KB of valid-looking routes whose `methods` all alias one
    // anchored list of 3,000 methods: 9 million strings once expanded.
    let methods = vec!["GET"; 3_000].join(",");
    let mut bomb = yaml.replace(
        "routes:\n",
        &format!("routes:\n  - {{ id: r0, match: {{ path_prefix: /, methods: &big [{methods}] }}, service: app }}\n"),
    );
    for i in 1..3_000 {
        bomb.push_str(&format!(
            "  - {{ id: r{i}, match: {{ path_prefix: /, methods: *big }}, service: app }}\n"
        ));
    }
    let r = client()
        .put(gw.admin_url("/admin/v1/config"))
        .header("content-type", "application/yaml")
        .body(bomb)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body = r.text().await.unwrap();
    assert!(body.contains("expands to more than"), "{body}");
    let r = client().get(gw.url("/")).send().await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "the gateway stopped serving after the bomb"
    );
}

/// Open upstream connections of the node that are not idle (busy with a
/// response), from `/metrics`.
async fn busy_upstreams(gw: &Gateway) -> i64 {
    let m = gw.metrics().await;
    let get = |state: &str| -> i64 {
        m.lines()
            .find(|l| {
                l.starts_with("hopgate_pool_connections{")
                    && l.contains(&format!("state=\"{state}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    get("open") - get("idle")
}

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_and_its_upstream_released() {
    let b = Backend::start("n1").await;
    let yaml = app_config("timeouts: { idle: 2s, shutdown: 5s }\n", b.addr);
    let gw = Gateway::start(&yaml).await;
    // HTTP/1.1: ask for 64 MiB and read none of it.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /?bytes=67108864 HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // While the response is stuck, its upstream connection is busy.
    let mut busy = 0;
    for _ in 0..100 {
        busy = busy_upstreams(&gw).await;
        if busy > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(busy, 1, "the stuck response holds one upstream connection");
    // After the stall limit (idle: 2s) the gateway gives up: the upstream
    // connection is released, and the client gets far less than asked.
    let released = within(Duration::from_secs(20), || async {
        busy_upstreams(&gw).await == 0
    })
    .await;
    assert!(
        released,
        "a client that never reads pins its upstream connection forever"
    );
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got += n,
            Err(_) => panic!("the connection of a client that stopped reading stayed open"),
        }
    }
    assert!(got < 64 << 20, "the whole body arrived: {got} bytes");
}

/// The status code of the answer read from `s` (0 when the connection
/// closed without one), bounded against a hang.
async fn status_of(s: &mut TcpStream) -> u16 {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    let read = async {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(20), read).await;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn client_body_faults_are_the_clients_and_never_the_nodes() {
    let b = Backend::start("n1").await;
    let yaml = app_config(
        "timeouts: { request: 1s, shutdown: 5s }\nsessions: {}\n",
        b.addr,
    );
    let gw = Gateway::start(&yaml).await;
    // A session bound to the node, to see that it does not hop.
    let r = client().get(gw.url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let token = r.headers()["hop-session"].to_str().unwrap().to_owned();
    let send = |bytes: &'static [u8]| async move {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(bytes).await.unwrap();
        s
    };
    let partial: &[u8] =
        b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\n\r\n0123456789";
    // Malformed chunked bodies: a chunk size that is not hex.
    for i in 0..6 {
        let mut s = send(b"POST /upload HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\nmore\r\n").await;
        assert_eq!(status_of(&mut s).await, 400, "malformed chunked upload {i}");
    }
    // Aborted uploads: the client goes away mid-body.
    for _ in 0..6 {
        let s = send(partial).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(s);
    }
    // Too-slow uploads: part of the body, then nothing for longer than
    // timeouts.request, the client still there.
    for i in 0..2 {
        let mut s = send(partial).await;
        assert_eq!(status_of(&mut s).await, 408, "too-slow upload {i}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let nodes = gw.admin_json("/admin/v1/nodes").await;
    let n = &nodes["nodes"][0];
    assert_eq!(n["available"], true, "{n}");
    assert_eq!(n["circuit"], "closed", "{n}");
    assert_eq!(n["ejected"], false, "{n}");
    assert_eq!(n["ejections"], 0, "{n}");
    assert_eq!(n["failures"], 0, "{n}");
    // The session stays where it was: no hop.
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "hopgate_hops_total", &[]).unwrap_or(0.0),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "hopgate_client_errors_total",
            &[("kind", "malformed_body")]
        )
        .unwrap_or(0.0),
        6.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "hopgate_client_errors_total",
            &[("kind", "client_aborted")]
        )
        .unwrap_or(0.0),
        6.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "hopgate_client_errors_total",
            &[("kind", "client_timeout")]
        )
        .unwrap_or(0.0),
        2.0,
        "{m}"
    );
}

/// Sends one raw HTTP/1.1 request and returns the status and body of the
/// answer (the connection is closed by `Connection: close`).
async fn raw_exchange(addr: SocketAddr, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn routes_match_the_normalised_path_and_backends_get_it() {
    let app = Backend::start("app").await;
    let admin = Backend::start("admin").await;
    let yaml = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ shutdown: 5s }}\nservices:\n{}{}\nroutes:\n  - {{ id: admin, match: {{ path_prefix: /admin }}, service: admin }}\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        service("app", &[("app", app.addr, "")]),
        service("admin", &[("admin", admin.addr, "")])
    );
    let gw = Gateway::start(&yaml).await;
    for (path, want) in [
        ("/admin/x?q=1", "/admin/x"),
        ("/%61dmin/x?q=1", "/admin/x"),
        ("//admin/x", "/admin/x"),
        ("/./admin/x", "/admin/x"),
        ("/api/../admin/x", "/admin/x"),
        ("/api/%2e%2E/admin/x", "/admin/x"),
        ("/admin//./x/", "/admin/x/"),
    ] {
        let (status, body) = raw_exchange(
            gw.addr,
            &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200, "{path}: {body}");
        let doc: serde_json::Value =
            serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
        assert_eq!(
            doc["node"], "admin",
            "{path} skipped the /admin rule: {doc}"
        );
        assert_eq!(doc["path"], want, "{path}: the backend got another path");
    }
    let (status, body) = raw_exchange(
        gw.addr,
        "GET /x?q=1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("\"app\""), "{body}");
    // Encoded slashes and backslashes are refused.
    for path in ["/%2Fadmin", "/%2fadmin/x", "/a%5Cadmin", "/a%zz"] {
        let (status, body) = raw_exchange(
            gw.addr,
            &format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 400, "{path}: {body}");
    }
    // A listener with normalize_path: false routes and forwards the raw path.
    let raw = Gateway::start(&yaml.replace(
        "address: 127.0.0.1:0 }\nadmin",
        "address: 127.0.0.1:0, normalize_path: false }\nadmin",
    ))
    .await;
    let (status, body) = raw_exchange(
        raw.addr,
        "GET /%61dmin/x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let doc: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(
        (&doc["node"], &doc["path"]),
        (&"app".into(), &"/%61dmin/x".into()),
        "{doc}"
    );
}

#[tokio::test]
async fn duplicate_hosts_trace_and_unsafe_request_ids_are_refused() {
    let b = Backend::start("n1").await;
    let yaml = app_config("timeouts: { shutdown: 5s }\n", b.addr);
    let gw = Gateway::start(&yaml).await;
    // Two Host lines, different or identical: 400 (RFC 9112 §3.2).
    for hosts in ["host: a\r\nhost: b\r\n", "host: a\r\nhost: a\r\n"] {
        let (status, body) = raw_exchange(
            gw.addr,
            &format!("GET / HTTP/1.1\r\n{hosts}connection: close\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 400, "{hosts:?}: {body}");
    }
    // TRACE is answered 405 with Allow, never forwarded.
    let r = client()
        .request(reqwest::Method::TRACE, gw.url("/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    let allow = r.headers()["allow"].to_str().unwrap().to_owned();
    assert!(allow.contains("GET") && !allow.contains("TRACE"), "{allow}");
    let stats = json(client().get(b.url("/control/stats")).send().await.unwrap()).await;
    assert_eq!(stats["requests"], 0, "TRACE reached the backend: {stats}");
    // A request id that is not safe to echo is replaced; a safe one kept.
    let evil = "<script>alert(1)</script>";
    let r = client()
        .request(reqwest::Method::TRACE, gw.url("/"))
        .header("x-request-id", evil)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-content-type-options"], "nosniff");
    let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    let body = r.text().await.unwrap();
    assert!(id != evil && !body.contains("<script>"), "{id} {body}");
    assert!(body.contains(&id), "{body}");
    for (sent, kept) in [("req-42.a_b:c", true), (evil, false)] {
        let r = client()
            .get(gw.url("/"))
            .header("x-request-id", sent)
            .send()
            .await
            .unwrap();
        let doc = json(r).await;
        assert_eq!(doc["request_id"] == sent, kept, "{sent}: {doc}");
    }
}

#[tokio::test]
async fn a_trusted_proxys_forwarded_proto_is_honoured_and_makes_the_cookie_secure() {
    let b = Backend::start("n1").await;
    let make = |access: &str| {
        app_config(
            &format!("timeouts: {{ shutdown: 5s }}\nsessions: {{}}\n{access}"),
            b.addr,
        )
    };
    let trusted = Gateway::start(&make("access: { trusted_proxies: [127.0.0.1/32] }\n")).await;
    let untrusted = Gateway::start(&make("")).await;
    for (gw, proto, want, secure) in [
        (&trusted, "https", "https", true),
        (&trusted, "http", "http", false),
        (&trusted, "gopher", "http", false),
        (&untrusted, "https", "http", false),
    ] {
        let r = client()
            .get(gw.url("/"))
            .header("x-forwarded-proto", proto)
            .send()
            .await
            .unwrap();
        let cookie = r.headers()["set-cookie"].to_str().unwrap().to_owned();
        assert_eq!(cookie.contains("; Secure"), secure, "{proto}: {cookie}");
        let doc = json(r).await;
        assert_eq!(doc["forwarded_proto"], want, "{proto}: {doc}");
    }
}

#[tokio::test]
async fn grpc_to_an_http1_service_gets_a_clear_grpc_error_and_one_warning() {
    let b = Backend::start("n1").await;
    let yaml = app_config("timeouts: { shutdown: 5s }\n", b.addr);
    let gw = Gateway::start(&yaml).await;
    for _ in 0..3 {
        let r = crate::harness::h2_client()
            .post(gw.url("/pkg.Svc/Method"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(vec![0u8, 0, 0, 0, 0])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "13");
        let msg = r.headers()["grpc-message"].to_str().unwrap().to_owned();
        assert!(msg.contains("protocol:%20http2"), "{msg}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = gw.logs();
    let warnings: Vec<_> = logs
        .lines()
        .filter(|l| l.contains("without protocol: http2"))
        .collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(warnings[0].contains("route=all"), "{}", warnings[0]);
}
