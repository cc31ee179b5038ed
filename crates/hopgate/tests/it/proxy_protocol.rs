//! The PROXY protocol on both sides. In front: a listener with
//! `proxy_protocol` takes the client address from v1 and v2 headers
//! (written by the test, by curl's `--haproxy-protocol`, and by a real
//! HAProxy's `send-proxy` / `send-proxy-v2`, to a plain and to a TLS
//! listener), and that address is what routes, access rules, source-IP
//! hashing, `X-Forwarded-For` and the access log see; untrusted sources, garbage,
//! refused versions and silent peers are closed, counted, and nothing
//! reaches the backend. Behind: `services[].proxy_protocol: v2` to a real
//! nginx `listen … proxy_protocol`, which answers `$proxy_protocol_addr`.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{client, temp_path, Backend, Gateway, Nginx};
use crate::tls_pki::Pki;

/// A v1 header naming `client` (to a made-up destination).
fn v1(client: &str) -> Vec<u8> {
    let c: SocketAddr = client.parse().unwrap();
    format!("PROXY TCP4 {} 192.0.2.200 {} 80\r\n", c.ip(), c.port()).into_bytes()
}

/// A v2 PROXY header naming `client` (IPv4).
fn v2(client: &str) -> Vec<u8> {
    let c: SocketAddr = client.parse().unwrap();
    let SocketAddr::V4(c) = c else {
        panic!("IPv4 only")
    };
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([0x21, 0x11, 0, 12]);
    h.extend(c.ip().octets());
    h.extend([192, 0, 2, 200]);
    h.extend(c.port().to_be_bytes());
    h.extend(80u16.to_be_bytes());
    h
}

/// A v2 LOCAL header (a balancer's own health check).
fn v2_local() -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    h.extend([0x20, 0x00, 0, 0]);
    h
}

/// Sends `prefix` then a GET of `path` on a new connection and reads until
/// the gateway closes: the whole answer as text (empty when the
/// connection was closed without one).
async fn raw(addr: SocketAddr, prefix: &[u8], path: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut out = prefix.to_vec();
    out.extend(
        format!("GET {path} HTTP/1.1\r\nHost: pp.test\r\nConnection: close\r\n\r\n").bytes(),
    );
    // The gateway may close before reading it all (a refused source).
    let _ = s.write_all(&out).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// The status and the JSON body of a raw answer.
fn answer(text: &str) -> (u16, Value) {
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let body = match (text.find('{'), text.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&text[a..=b]).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (status, body)
}

/// `hopgate_proxy_protocol_total{listener="public",result="<result>"}`.
async fn counted(gw: &Gateway, result: &str) -> u64 {
    let line = format!("hopgate_proxy_protocol_total{{listener=\"public\",result=\"{result}\"}} ");
    gw.metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Requests the backend has served (its own counter).
async fn served(b: &Backend) -> u64 {
    let v: Value = client()
        .get(b.url("/control/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["requests"].as_u64().unwrap()
}

/// A gateway whose listener (`listener_extra`: more of its flow mapping)
/// takes PROXY headers from `trusted`: a `vip` route for
/// 203.0.113.0/24 to `vip`, everything else to `main`; 198.51.100.0/24
/// denied.
fn gateway_config(
    trusted: &str,
    pp_extra: &str,
    listener_extra: &str,
    vip: &Backend,
    main: &Backend,
) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0, proxy_protocol: {{ trusted_cidrs: [{trusted}]{pp_extra} }}{listener_extra} }}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         access: {{ deny_cidrs: [198.51.100.0/24] }}\n\
         services:\n  - name: vip\n    nodes: [ {{ id: vip, address: \"{}\" }} ]\n  - name: main\n    nodes: [ {{ id: main, address: \"{}\" }} ]\n\
         routes:\n  - {{ id: vip, priority: 10, match: {{ path_prefix: /, source_cidrs: [203.0.113.0/24] }}, service: vip }}\n  - {{ id: rest, match: {{ path_prefix: / }}, service: main }}\n",
        vip.addr, main.addr
    )
}

#[tokio::test]
async fn the_carried_address_is_the_client_for_routes_access_forwarding_and_logs() {
    let (vip, main) = (Backend::start("vip").await, Backend::start("main").await);
    let gw = Gateway::start(&gateway_config("127.0.0.0/8", "", "", &vip, &main)).await;

    // v1 and v2 from the test: the route for 203.0.113.0/24 matches and
    // X-Forwarded-For names the carried client.
    for (header, ip) in [
        (v1("203.0.113.7:5555"), "203.0.113.7"),
        (v2("203.0.113.9:6666"), "203.0.113.9"),
    ] {
        let (status, doc) = answer(&raw(gw.addr, &header, "/a").await);
        assert_eq!(status, 200, "{doc}");
        assert_eq!(doc["node"], "vip", "{doc}");
        assert_eq!(doc["forwarded_for"], ip, "{doc}");
    }
    // Another carried address: the other route.
    let (status, doc) = answer(&raw(gw.addr, &v1("192.0.2.10:7777"), "/b").await);
    assert_eq!((status, doc["node"].as_str()), (200, Some("main")), "{doc}");
    assert_eq!(doc["forwarded_for"], "192.0.2.10");
    // access.deny_cidrs refuses the carried address.
    let (status, _) = answer(&raw(gw.addr, &v2("198.51.100.5:1234"), "/c").await);
    assert_eq!(status, 403);
    // v2 LOCAL (a balancer's health check): the socket's address.
    let (status, doc) = answer(&raw(gw.addr, &v2_local(), "/d").await);
    assert_eq!((status, doc["node"].as_str()), (200, Some("main")), "{doc}");
    assert_eq!(doc["forwarded_for"], "127.0.0.1");
    // curl's own header (v1, its socket address).
    let out = tokio::process::Command::new("curl")
        .args([
            "-s",
            "--max-time",
            "20",
            "--noproxy",
            "*",
            "--haproxy-protocol",
        ])
        .arg(gw.url("/curl"))
        .output()
        .await
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(doc["node"], "main", "{out:?}");
    assert_eq!(doc["forwarded_for"], "127.0.0.1", "{out:?}");

    // The access log names the carried client, port included.
    let mut logs = String::new();
    for _ in 0..100 {
        logs = gw.logs();
        if logs.contains("peer=203.0.113.7:5555") && logs.contains("peer=198.51.100.5:1234") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(logs.contains("peer=203.0.113.7:5555"), "{logs}");
    assert!(logs.contains("peer=198.51.100.5:1234"), "{logs}");
    assert_eq!(counted(&gw, "ok").await, 5);
    assert_eq!(counted(&gw, "local").await, 1);
    assert_eq!(counted(&gw, "untrusted").await, 0);
}

#[tokio::test]
async fn untrusted_sources_garbage_refused_versions_and_silence_are_closed_and_counted() {
    let (vip, main) = (Backend::start("vip").await, Backend::start("main").await);

    // Loopback is not trusted: even a valid header is refused at accept.
    let gw = Gateway::start(&gateway_config("10.0.0.0/8", "", "", &vip, &main)).await;
    for header in [v1("203.0.113.7:5555"), Vec::new()] {
        let text = raw(gw.addr, &header, "/").await;
        assert!(!text.contains("HTTP/"), "{text}");
    }
    assert_eq!(counted(&gw, "untrusted").await, 2);
    drop(gw);

    // Trusted, but v2 only and a short deadline.
    let gw = Gateway::start(&gateway_config(
        "127.0.0.1/32",
        ", versions: [2], timeout: 300ms",
        "",
        &vip,
        &main,
    ))
    .await;
    // No header at all (a plain HTTP request), a garbled v2 header, a
    // v1 header where only v2 is accepted.
    let mut garbled = v2("203.0.113.7:5555");
    garbled[12] = 0x2f;
    for (prefix, result) in [
        (Vec::new(), "malformed"),
        (garbled, "malformed"),
        (v1("203.0.113.7:5555"), "version"),
    ] {
        let text = raw(gw.addr, &prefix, "/").await;
        assert!(!text.contains("HTTP/"), "{result}: {text}");
        assert!(counted(&gw, result).await >= 1, "{result}");
    }
    assert_eq!(counted(&gw, "malformed").await, 2);
    // A peer that sends nothing is closed at the deadline.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert_eq!(counted(&gw, "timeout").await, 1);
    // Half a header, then the peer goes: closed.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(&v2("203.0.113.7:5555")[..10]).await.unwrap();
    drop(s);
    for _ in 0..100 {
        if counted(&gw, "closed").await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(counted(&gw, "closed").await, 1);
    // Nothing reached a backend; a good header still works afterwards.
    assert_eq!(served(&vip).await + served(&main).await, 0);
    let (status, doc) = answer(&raw(gw.addr, &v2("203.0.113.7:5555"), "/").await);
    assert_eq!((status, doc["node"].as_str()), (200, Some("vip")), "{doc}");
}

/// A child process killed on drop, with its temp dir removed.
struct Child {
    dir: std::path::PathBuf,
    _child: tokio::process::Child,
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

async fn wait_listening(port: u16) {
    for _ in 0..400 {
        if TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("nothing listens on port {port}");
}

/// HAProxy in HTTP mode: one frontend per `(port, server line)`, each
/// taking the client address from `X-Client` (`http-request set-src`),
/// so the PROXY header it sends carries a chosen address.
async fn haproxy(fronts: &[(u16, String)]) -> Child {
    let dir = temp_path("haproxy");
    std::fs::create_dir_all(&dir).unwrap();
    let mut conf = String::from(
        "global\n  maxconn 256\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n  http-reuse never\n",
    );
    for (i, (port, server)) in fronts.iter().enumerate() {
        conf.push_str(&format!(
            "frontend f{i}\n  bind 127.0.0.1:{port}\n  http-request set-src hdr(x-client) if {{ req.hdr(x-client) -m found }}\n  default_backend b{i}\nbackend b{i}\n  server gw {server}\n"
        ));
    }
    let path = dir.join("haproxy.cfg");
    std::fs::write(&path, conf).unwrap();
    let child = tokio::process::Command::new("haproxy")
        .arg("-db")
        .arg("-f")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("haproxy is installed by scripts/deps.sh");
    for (port, _) in fronts {
        wait_listening(*port).await;
    }
    Child { dir, _child: child }
}

async fn via_haproxy(port: u16, client_ip: &str) -> Value {
    let r = client()
        .get(format!("http://127.0.0.1:{port}/h"))
        .header("x-client", client_ip)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn haproxy_send_proxy_and_send_proxy_v2_to_plain_and_tls_listeners() {
    let (vip, main) = (Backend::start("vip").await, Backend::start("main").await);
    let plain = Gateway::start(&gateway_config("127.0.0.0/8", "", "", &vip, &main)).await;
    let pki = Pki::new();
    let (cert, key) = pki.issue("site", "DNS:example.com");
    let tls = format!(
        ", tls: {{ certificates: [ {{ cert: \"{}\", key: \"{}\" }} ] }}",
        cert.display(),
        key.display()
    );
    let secure = Gateway::start(&gateway_config("127.0.0.0/8", "", &tls, &vip, &main)).await;
    let ports = [free_port(), free_port(), free_port()];
    let _haproxy = haproxy(&[
        (ports[0], format!("{} send-proxy", plain.addr)),
        (ports[1], format!("{} send-proxy-v2", plain.addr)),
        (
            ports[2],
            format!(
                "{} send-proxy-v2 ssl verify none sni str(example.com)",
                secure.addr
            ),
        ),
    ])
    .await;
    for port in ports {
        let doc = via_haproxy(port, "203.0.113.44").await;
        assert_eq!(doc["node"], "vip", "{doc}");
        // HAProxy appends nothing (no `option forwardfor`): the gateway's
        // X-Forwarded-For is the carried address.
        assert_eq!(doc["forwarded_for"], "203.0.113.44", "{doc}");
        let doc = via_haproxy(port, "192.0.2.55").await;
        assert_eq!(doc["node"], "main", "{doc}");
        assert_eq!(doc["forwarded_for"], "192.0.2.55", "{doc}");
    }
    assert_eq!(
        via_haproxy(ports[2], "192.0.2.56").await["forwarded_proto"],
        "https"
    );
    assert_eq!(counted(&plain, "ok").await, 4);
    assert_eq!(counted(&secure, "ok").await, 3);
}

/// nginx `listen … proxy_protocol` answering `<$proxy_protocol_addr>
/// <$connection>` (the address its header named, and which connection).
async fn nginx_proxy_protocol() -> (Nginx, SocketAddr) {
    let nginx = Nginx::start_listening(
        &[],
        "",
        " proxy_protocol",
        "keepalive_requests 1000; location / { return 200 \"$proxy_protocol_addr $connection\\n\"; }",
    )
    .await;
    let addr = nginx.addr;
    (nginx, addr)
}

/// Sends `prefix` and `n` keep-alive GETs on one connection; the bodies.
async fn keep_alive(addr: SocketAddr, prefix: &[u8], n: usize) -> Vec<String> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(prefix).await.unwrap();
    let mut bodies = Vec::new();
    for i in 0..n {
        // The previous answer's connection is back in the pool by now.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let close = if i + 1 == n {
            "Connection: close\r\n"
        } else {
            ""
        };
        s.write_all(format!("GET /n HTTP/1.1\r\nHost: pp.test\r\n{close}\r\n").as_bytes())
            .await
            .unwrap();
        // Read one answer: head, then Content-Length bytes.
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            assert_eq!(
                s.read(&mut byte).await.unwrap(),
                1,
                "{}",
                String::from_utf8_lossy(&buf)
            );
            buf.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).await.unwrap();
        bodies.push(String::from_utf8(body).unwrap().trim().to_owned());
    }
    bodies
}

#[tokio::test]
async fn v2_to_an_nginx_node_names_each_client_and_never_reuses_across_clients() {
    let (_nginx, node) = nginx_proxy_protocol().await;
    let gw = Gateway::start(&format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0, proxy_protocol: {{ trusted_cidrs: [127.0.0.0/8] }} }}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         services:\n  - name: web\n    proxy_protocol: v2\n    health: {{ path: /health, interval: 200ms, timeout: 200ms, rise: 1, fall: 1 }}\n    nodes: [ {{ id: nginx, address: \"{node}\" }} ]\n\
         routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: web }}\n"
    ))
    .await;
    // Health checks speak the PROXY protocol too (v2 LOCAL): the node
    // turns healthy.
    let mut health = Value::Null;
    for _ in 0..200 {
        let v = gw.admin_json("/admin/v1/nodes").await;
        health = v["nodes"][0]["health"].clone();
        if health == "healthy" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health, "healthy");

    // Client A, two requests on one client connection, then again on a
    // new one: nginx sees A's address on one upstream connection.
    let a1 = keep_alive(gw.addr, &v1("203.0.113.7:5555"), 2).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let a2 = keep_alive(gw.addr, &v2("203.0.113.7:5556"), 1).await;
    let conn_of = |s: &String| s.split(' ').nth(1).unwrap().to_owned();
    for body in a1.iter().chain(&a2) {
        assert!(body.starts_with("203.0.113.7 "), "{body}");
    }
    assert_eq!(conn_of(&a1[0]), conn_of(&a1[1]), "{a1:?}");
    assert_eq!(
        conn_of(&a1[0]),
        conn_of(&a2[0]),
        "reused for the same client: {a1:?} {a2:?}"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Client B right after: its own upstream connection with its address,
    // not A's pooled one.
    let b = keep_alive(gw.addr, &v2("192.0.2.9:4444"), 1).await;
    assert!(b[0].starts_with("192.0.2.9 "), "{b:?}");
    assert_ne!(conn_of(&b[0]), conn_of(&a1[0]), "{b:?} {a1:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    // And A again finds its own connection, still pooled.
    let a3 = keep_alive(gw.addr, &v1("203.0.113.7:5557"), 1).await;
    assert_eq!(a3[0], a1[0], "{a3:?}");
}

/// `hash_on: { source_ip: true }` hashes the carried client, not the
/// balancer: one socket address (127.0.0.1) carrying twenty clients
/// spreads over the nodes, and each client keeps its node.
#[tokio::test]
async fn source_ip_hashing_uses_the_carried_client() {
    let nodes = [
        Backend::start("h1").await,
        Backend::start("h2").await,
        Backend::start("h3").await,
    ];
    let list: Vec<String> = nodes
        .iter()
        .map(|b| format!("{{ id: {}, address: \"{}\" }}", b.id, b.addr))
        .collect();
    let gw = Gateway::start(&format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0, proxy_protocol: {{ trusted_cidrs: [127.0.0.0/8] }} }}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         sessions: {{ enabled: false }}\n\
         services:\n  - name: app\n    lb: hash\n    hash_on: {{ source_ip: true }}\n    nodes: [ {} ]\n\
         routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        list.join(", ")
    ))
    .await;
    let mut seen = std::collections::BTreeSet::new();
    for i in 1..=20 {
        let client = format!("203.0.113.{i}:4000");
        let mut node_of_client = None;
        for round in 0..3 {
            let header = if round % 2 == 0 {
                v1(&client)
            } else {
                v2(&client)
            };
            let (status, doc) = answer(&raw(gw.addr, &header, "/h").await);
            assert_eq!(status, 200, "{doc}");
            let node = doc["node"].as_str().unwrap().to_owned();
            let first = node_of_client.get_or_insert_with(|| node.clone());
            assert_eq!(*first, node, "client {client} moved between nodes");
        }
        seen.insert(node_of_client.unwrap());
    }
    assert!(
        seen.len() > 1,
        "twenty carried clients all hashed to {seen:?}: the balancer's address was hashed"
    );
}
