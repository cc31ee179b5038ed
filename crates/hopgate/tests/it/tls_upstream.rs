//! TLS to upstream nodes: a private CA with `server_name` (or the node's
//! IP address) checked, mutual TLS with a client certificate, connections
//! pooled like plain ones, HTTP/2 over TLS (ALPN `h2`) to `hopgate
//! backend`, and gRPC over TLS end to end with grpcio (gRPC C-core) on
//! both sides of the gateway.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{addr_after, client, metric, within, Gateway, BIN};
use crate::tls_pki::{curl, rustls_client, tls_connect, Pki};

/// `hopgate backend` serving TLS; killed on drop.
struct TlsBackend {
    _child: Child,
    addr: std::net::SocketAddr,
}

async fn tls_backend(id: &str, cert: &Path, key: &Path, client_ca: Option<&Path>) -> TlsBackend {
    let mut cmd = Command::new(BIN);
    cmd.args(["backend", "--id", id, "--tls-cert"])
        .arg(cert)
        .arg("--tls-key")
        .arg(key);
    if let Some(ca) = client_ca {
        cmd.arg("--tls-client-ca").arg(ca);
    }
    let mut child = cmd
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("backend started")
        .unwrap()
        .expect("a ready line");
    TlsBackend {
        _child: child,
        addr: addr_after(&line, "listening on "),
    }
}

/// One service `s<i>` per entry of `tls` (its `tls:` block, YAML flow),
/// each with a route `/s<i>/`.
fn config(node: std::net::SocketAddr, protocol: &str, tls: &[String]) -> String {
    let mut services = String::new();
    let mut routes = String::new();
    for (i, t) in tls.iter().enumerate() {
        services.push_str(&format!(
            "  - name: s{i}\n    protocol: {protocol}\n    tls: {t}\n    nodes: [ {{ id: n, address: \"{node}\" }} ]\n"
        ));
        routes.push_str(&format!(
            "  - {{ id: r{i}, match: {{ path_prefix: /s{i}/ }}, service: s{i} }}\n"
        ));
    }
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
         retries: {{ attempts: 1 }}\nservices:\n{services}routes:\n{routes}"
    )
}

#[tokio::test]
async fn upstream_tls_with_a_private_ca_checks_the_name_and_pools() {
    let pki = Pki::new();
    let (cert, key) = pki.issue("node", "DNS:api.internal,IP:127.0.0.1");
    let backend = tls_backend("tls-1", &cert, &key, None).await;
    let ca = pki.path("ca.pem").display().to_string();
    let gw = Gateway::start(&config(
        backend.addr,
        "http1",
        &[
            format!("{{ ca: \"{ca}\", server_name: api.internal }}"),
            // No server_name: the node's IP address is checked.
            format!("{{ ca: \"{ca}\" }}"),
            // A name the certificate does not carry.
            format!("{{ ca: \"{ca}\", server_name: other.internal }}"),
            // The system roots do not know the private CA.
            "{ server_name: api.internal }".to_owned(),
        ],
    ))
    .await;
    let c = client();
    for _ in 0..5 {
        let r = c.get(gw.url("/s0/x")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["node"], "tls-1");
        assert_eq!(doc["version"], "HTTP/1.1");
    }
    let m = gw.metrics().await;
    // Five sequential requests, one connection: pooled like plain ones.
    assert_eq!(
        metric(&m, "hopgate_tls_upstream_handshakes_total", &[]).unwrap(),
        1.0,
        "{m}"
    );
    // A reload that leaves the TLS settings and files alone keeps the
    // pooled TLS connection.
    let text = std::fs::read_to_string(&gw.config_path).unwrap();
    gw.rewrite_config(&text.replace(
        "retries: { attempts: 1 }",
        "retries: { attempts: 1, budget: 0.5 }",
    ));
    within(Duration::from_secs(20), || async {
        metric(&gw.metrics().await, "hopgate_config_version", &[]).unwrap() >= 2.0
    })
    .await;
    assert_eq!(
        metric(&gw.metrics().await, "hopgate_config_version", &[]).unwrap(),
        2.0
    );
    let r = c.get(gw.url("/s0/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "hopgate_tls_upstream_handshakes_total", &[]).unwrap(),
        1.0,
        "{m}"
    );
    let r = c.get(gw.url("/s1/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    for bad in ["/s2/x", "/s3/x"] {
        let r = c.get(gw.url(bad)).send().await.unwrap();
        assert_eq!(r.status(), 502, "{bad}");
    }
    let m = gw.metrics().await;
    assert!(
        metric(&m, "hopgate_tls_upstream_handshake_failures_total", &[]).unwrap() >= 2.0,
        "{m}"
    );
    assert!(gw.logs().contains("tls"), "{}", gw.logs());
}

#[tokio::test]
async fn upstream_mutual_tls_presents_the_client_certificate() {
    let pki = Pki::new();
    let (cert, key) = pki.issue("node", "DNS:api.internal");
    let (ccert, ckey) = pki.issue("gateway-client", "DNS:gateway.internal");
    let ca_path = pki.path("ca.pem");
    let backend = tls_backend("mtls-1", &cert, &key, Some(&ca_path)).await;
    let ca = ca_path.display().to_string();
    let yaml = config(
        backend.addr,
        "http1",
        &[
            format!(
                "{{ ca: \"{ca}\", server_name: api.internal, client_cert: \"{}\", client_key: \"{}\" }}",
                ccert.display(),
                ckey.display()
            ),
            format!("{{ ca: \"{ca}\", server_name: api.internal }}"),
        ],
    )
    // Active health checks go over TLS too, with the client certificate.
    .replacen(
        "  - name: s0\n",
        "  - name: s0\n    health: { path: /health, interval: 200ms, rise: 1 }\n",
        1,
    );
    let gw = Gateway::start(&yaml).await;
    let mut healthy = false;
    for _ in 0..200 {
        let nodes = gw.admin_json("/admin/v1/nodes").await;
        if nodes.to_string().contains("\"health\":\"healthy\"") {
            healthy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(healthy, "the TLS health check never passed: {}", gw.logs());
    let c = client();
    let r = c.get(gw.url("/s0/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["node"], "mtls-1");
    // Without a client certificate the backend refuses the connection.
    let r = c.get(gw.url("/s1/x")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let m = gw.metrics().await;
    assert!(
        m.contains(
            "hopgate_tls_certificate_expiry_timestamp_seconds{service=\"s0\",certificate=\"0\"}"
        ),
        "{m}"
    );
}

#[tokio::test]
async fn http2_over_tls_to_the_backend_and_tls_on_both_sides() {
    let pki = Pki::new();
    let (cert, key) = pki.issue("node", "DNS:api.internal");
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let backend = tls_backend("h2tls", &cert, &key, None).await;
    let ca = pki.path("ca.pem").display().to_string();
    let mut yaml = config(
        backend.addr,
        "http2",
        &[format!("{{ ca: \"{ca}\", server_name: api.internal }}")],
    );
    yaml = yaml.replacen(
        "  - { name: public, address: 127.0.0.1:0 }",
        &format!(
            "  - name: public\n    address: 127.0.0.1:0\n    tls: {{ certificates: [ {{ cert: \"{}\", key: \"{}\", sni: [example.com] }} ] }}",
            site.display(),
            site_key.display()
        ),
        1,
    );
    let gw = Gateway::start(&yaml).await;
    for extra in [&[][..], &["--http1.1"][..]] {
        let f = curl(
            Some(&pki.path("ca.pem")),
            "example.com",
            gw.addr.port(),
            "/s0/x",
            extra,
        );
        assert_eq!(f.status, 200, "{f:?}");
        let doc: Value = serde_json::from_str(&f.body).unwrap();
        assert_eq!(doc["node"], "h2tls");
        assert_eq!(doc["version"], "HTTP/2.0", "ALPN h2 to the backend");
        assert_eq!(doc["forwarded_proto"], "https");
    }
}

const PEER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/it/py/grpcio_tls_peer.py"
);

#[tokio::test]
async fn grpc_over_tls_end_to_end_with_grpcio() {
    let pki = Pki::new();
    let (cert, key) = pki.issue("node", "DNS:grpc.internal");
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let mut server = Command::new("python3")
        .arg(PEER)
        .arg("server")
        .arg(&cert)
        .arg(&key)
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python3 with grpcio");
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("grpcio server started")
        .unwrap()
        .expect("a port line");
    let port: u16 = line.strip_prefix("port ").unwrap().trim().parse().unwrap();
    let ca = pki.path("ca.pem");
    let yaml = format!(
        "listeners:\n  - name: public\n    address: 127.0.0.1:0\n    tls: {{ certificates: [ {{ cert: \"{}\", key: \"{}\", sni: [example.com] }} ] }}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         services:\n  - name: g\n    protocol: http2\n    tls: {{ ca: \"{}\", server_name: grpc.internal }}\n    nodes: [ {{ id: n1, address: \"127.0.0.1:{port}\" }} ]\n\
         routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: g }}\n",
        site.display(),
        site_key.display(),
        ca.display()
    );
    let gw = Gateway::start(&yaml).await;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        Command::new("python3")
            .arg(PEER)
            .arg("client")
            .arg(format!("127.0.0.1:{}", gw.addr.port()))
            .arg(&ca)
            .arg("example.com")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("grpcio client finished")
    .unwrap();
    assert!(
        out.status.success(),
        "grpcio client failed: {}\ngateway logs:\n{}",
        String::from_utf8_lossy(&out.stderr),
        gw.logs()
    );
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(seen["unary_ok"], "echo:hi");
    assert_eq!(
        seen["stream_three"],
        serde_json::json!(["item-0", "item-1", "item-2"])
    );
    assert_eq!(seen["unary_fail"]["code"], "FAILED_PRECONDITION");
    assert_eq!(seen["unary_fail"]["details"], "the cart is locked");
    let m = gw.metrics().await;
    assert!(metric(&m, "hopgate_tls_upstream_handshakes_total", &[]).unwrap() >= 1.0);
}

#[tokio::test]
async fn websocket_over_tls_on_both_sides() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;

    let pki = Pki::new();
    let (cert, key) = pki.issue("node", "DNS:api.internal");
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let backend = tls_backend("ws-tls", &cert, &key, None).await;
    let ca = pki.path("ca.pem");
    let yaml = config(
        backend.addr,
        "http1",
        &[format!("{{ ca: \"{}\", server_name: api.internal }}", ca.display())],
    )
    .replacen(
        "  - { name: public, address: 127.0.0.1:0 }",
        &format!(
            "  - name: public\n    address: 127.0.0.1:0\n    tls: {{ certificates: [ {{ cert: \"{}\", key: \"{}\", sni: [example.com] }} ] }}",
            site.display(),
            site_key.display()
        ),
        1,
    )
    .replace("path_prefix: /s0/", "path_prefix: /");
    let gw = Gateway::start(&yaml).await;
    let port = gw.addr.port();
    let stream = tls_connect(&rustls_client(&ca), "example.com", port).await;
    let (mut ws, resp) =
        tokio_tungstenite::client_async(format!("wss://example.com:{port}/ws"), stream)
            .await
            .unwrap();
    assert_eq!(resp.status(), 101);
    for i in 0..20 {
        ws.send(Message::text(format!("over tls {i}")))
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(20), ws.next())
            .await
            .expect("an echo in time")
            .unwrap()
            .unwrap();
        assert_eq!(got, Message::text(format!("over tls {i}")));
    }
    ws.send(Message::Close(None)).await.unwrap();
}
