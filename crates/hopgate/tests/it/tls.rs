//! HTTPS on a listener: certificates chosen by SNI (exact, wildcard, the
//! first as default), ALPN `h2` and `http/1.1`, `X-Forwarded-Proto:
//! https`, rotated files picked up while connections stay up, session
//! tickets that survive the reload, and bad files refused with their field
//! path while the old certificates keep serving. Clients: curl, and a
//! rustls client where one connection must span several steps.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::harness::{metric, within, Backend, Gateway, BIN};
use crate::tls_pki::{curl, get_on, presented, rustls_client, tls_connect, Pki};

/// A gateway config whose one listener terminates TLS with `certs` (a
/// YAML flow list) in front of `backend`.
fn tls_config(certs: &str, backend: &Backend) -> String {
    format!(
        "listeners:\n  - name: public\n    address: 127.0.0.1:0\n    tls:\n      certificates: {certs}\n\
         admin: {{ address: 127.0.0.1:0 }}\n\
         services:\n  - name: api\n    nodes: [ {{ id: b1, address: \"{}\" }} ]\n\
         routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: api }}\n",
        backend.addr
    )
}

fn cert_entry(cert: &Path, key: &Path, sni: &str) -> String {
    format!(
        "{{ cert: \"{}\", key: \"{}\", sni: [{sni}] }}",
        cert.display(),
        key.display()
    )
}

#[tokio::test]
async fn https_picks_the_certificate_by_sni_and_speaks_h2_and_http1() {
    let pki = Pki::new();
    let (first, first_key) = pki.issue("first", "DNS:first.test");
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let (wild, wild_key) = pki.issue("wild", "DNS:*.wild.test");
    let backend = Backend::start("b1").await;
    let certs = format!(
        "[ {}, {}, {} ]",
        cert_entry(&first, &first_key, "first.test"),
        cert_entry(&site, &site_key, "example.com"),
        cert_entry(&wild, &wild_key, "\"*.wild.test\""),
    );
    let gw = Gateway::start(&tls_config(&certs, &backend)).await;
    let port = gw.addr.port();
    let ca = pki.path("ca.pem");

    // Exact name; curl offers h2 and http/1.1, the gateway picks h2.
    let f = curl(Some(&ca), "example.com", port, "/a", &[]);
    assert_eq!((f.status, f.http_version.as_str()), (200, "2"), "{f:?}");
    assert_eq!(f.subject, "CN=site");
    let doc: Value = serde_json::from_str(&f.body).unwrap();
    assert_eq!(doc["forwarded_proto"], "https");
    assert_eq!(doc["node"], "b1");

    // Wildcard, over HTTP/1.1 (ALPN http/1.1 only).
    let f = curl(Some(&ca), "api.wild.test", port, "/b", &["--http1.1"]);
    assert_eq!((f.status, f.http_version.as_str()), (200, "1.1"), "{f:?}");
    assert_eq!(f.subject, "CN=wild");
    let doc: Value = serde_json::from_str(&f.body).unwrap();
    assert_eq!(doc["forwarded_proto"], "https");
    assert_eq!(doc["version"], "HTTP/1.1");

    // A wildcard covers one label only; an unknown name and no SNI at all
    // get the first certificate.
    for name in ["a.b.wild.test", "unknown.test"] {
        let f = curl(None, name, port, "/", &[]);
        assert_eq!(f.subject, "CN=first", "{name}");
    }
    let f = curl(None, "127.0.0.1", port, "/", &[]);
    assert_eq!(f.subject, "CN=first", "an IP address sends no SNI");
    assert_eq!(f.status, 200);

    // A client that trusts the CA but asks for a name the default does not
    // carry is refused by the client, as it should be.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "--noproxy", "*", "--cacert"])
        .arg(&ca)
        .args(["--resolve", &format!("unknown.test:{port}:127.0.0.1")])
        .arg(format!("https://unknown.test:{port}/"))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the default certificate does not name unknown.test"
    );

    // Plain HTTP on the TLS port is a failed handshake, counted.
    let plain = crate::harness::client().get(gw.url("/")).send().await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());

    // Counted once the connection's task has seen the failure.
    let protocol = |m: &str| {
        metric(
            m,
            "hopgate_tls_handshake_failures_total",
            &[("reason", "protocol")],
        )
    };
    within(Duration::from_secs(20), || async {
        protocol(&gw.metrics().await) >= Some(1.0)
    })
    .await;
    let m = gw.metrics().await;
    assert!(protocol(&m).unwrap() >= 1.0, "{m}");
    assert!(
        metric(&m, "hopgate_tls_handshakes_total", &[]).unwrap() >= 5.0,
        "{m}"
    );
    for i in 0..3 {
        let expiry = metric(
            &m,
            "hopgate_tls_certificate_expiry_timestamp_seconds",
            &[("listener", "public"), ("certificate", &i.to_string())],
        )
        .unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            expiry > now + 29.0 * 86400.0 && expiry < now + 31.0 * 86400.0,
            "{expiry}"
        );
    }
}

#[tokio::test]
async fn rotated_certificate_files_are_picked_up_while_connections_stay_up() {
    let r = Rotation::start("").await;
    let (pki, gw, site) = (&r.pki, &r.gw, &r.site);
    let (live_cert, live_key) = (&r.live_cert, &r.live_key);
    let port = gw.addr.port();
    let config = rustls_client(&pki.path("ca.pem"));

    // One connection before the rotation; reading an answer also takes in
    // the TLS 1.3 session tickets.
    let mut old = tls_connect(&config, "example.com", port).await;
    assert!(presented(&old, site));
    assert_eq!(get_on(&mut old, "example.com", "/before").await.0, 200);

    // New files renamed over the old ones (key first: a half-rotated pair
    // is never loaded, the watcher waits until both hold still).
    let (site2, site2_key) = pki.issue("site2", "DNS:example.com");
    pki.replace(&site2_key, live_key);
    pki.replace(&site2, live_cert);
    let rotated = within(Duration::from_secs(20), || async {
        curl(Some(&pki.path("ca.pem")), "example.com", port, "/", &[]).subject == "CN=site2"
    })
    .await;
    assert!(
        rotated,
        "not within 20 s: new connections get the rotated certificate"
    );

    // The connection made before the rotation still works.
    assert_eq!(get_on(&mut old, "example.com", "/after").await.0, 200);
    // A ticket from before the reload still resumes: the ticket keys
    // survived it.
    let resumed = tls_connect(&config, "example.com", port).await;
    assert_eq!(
        resumed.get_ref().1.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    let mut fresh = tls_connect(&rustls_client(&pki.path("ca.pem")), "example.com", port).await;
    assert!(presented(&fresh, &site2));
    assert_eq!(get_on(&mut fresh, "example.com", "/").await.0, 200);
    assert!(
        gw.logs().contains("certificate files re-read"),
        "{}",
        gw.logs()
    );
}

/// Waits for `hopgate_config_reload_failures_total` to reach `n`.
/// Waits for reload failure `n` and for its log line, which holds every
/// one of `needles` (the counter moves before the line is written), and
/// returns the logs.
async fn wait_failures(gw: &Gateway, n: f64, needles: &[&str]) -> String {
    let logged = within(Duration::from_secs(20), || async {
        let failures = metric(
            &gw.metrics().await,
            "hopgate_config_reload_failures_total",
            &[],
        );
        failures.unwrap() >= n && needles.iter().all(|x| gw.logs().contains(x))
    })
    .await;
    assert!(
        logged,
        "no reload failure #{n} logged with {needles:?}; logs:\n{}",
        gw.logs()
    );
    gw.logs()
}

#[tokio::test]
async fn bad_certificates_are_refused_with_their_field_path_and_the_old_ones_keep_serving() {
    let pki = Pki::new();
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let (_other, other_key) = pki.issue("other", "DNS:other.test");
    let (expired, expired_key) = pki.issue_expired("expired", "DNS:example.com");
    let backend = Backend::start("b1").await;
    let live_cert = pki.path("live.pem");
    let live_key = pki.path("live.key");
    std::fs::copy(&site, &live_cert).unwrap();
    std::fs::copy(&site_key, &live_key).unwrap();
    let good = format!("[ {} ]", cert_entry(&live_cert, &live_key, "example.com"));
    let gw = Gateway::start(&tls_config(&good, &backend)).await;
    let port = gw.addr.port();
    let ca = pki.path("ca.pem");
    let serving = || curl(Some(&ca), "example.com", port, "/", &[]);
    assert_eq!(serving().subject, "CN=site");

    // A config whose key does not match its certificate: refused, path named.
    let mismatched = format!("[ {} ]", cert_entry(&site, &other_key, "example.com"));
    gw.rewrite_config(&tls_config(&mismatched, &backend));
    wait_failures(
        &gw,
        1.0,
        &["listeners[0].tls.certificates[0].key", "does not match"],
    )
    .await;
    assert_eq!(serving().subject, "CN=site");

    // An expired certificate: refused at its `cert`.
    let old = format!("[ {} ]", cert_entry(&expired, &expired_key, "example.com"));
    gw.rewrite_config(&tls_config(&old, &backend));
    wait_failures(
        &gw,
        2.0,
        &["listeners[0].tls.certificates[0].cert", "expired"],
    )
    .await;
    let f = serving();
    assert_eq!((f.status, f.subject.as_str()), (200, "CN=site"));

    // Back to the good config, then a rotation on disk that pairs the
    // certificate with a foreign key: the watcher's reload is refused too.
    gw.rewrite_config(&tls_config(&good, &backend));
    tokio::time::sleep(Duration::from_secs(3)).await;
    pki.replace(&other_key, &live_key);
    wait_failures(&gw, 3.0, &["source=certificates"]).await;
    assert_eq!(serving().subject, "CN=site");
    let last = gw.admin_json("/admin/v1/config/versions").await;
    assert_eq!(last["last_error"]["source"], "certificates", "{last}");
    assert!(
        last.to_string()
            .contains("listeners[0].tls.certificates[0].key"),
        "{last}"
    );
}

#[test]
fn validate_reads_the_files_relative_to_the_config_directory() {
    let pki = Pki::new();
    pki.issue("site", "DNS:example.com");
    pki.issue("other", "DNS:other.test");
    pki.issue_expired("expired", "DNS:example.com");
    let write = |name: &str, cert: &str, key: &str| {
        let path = pki.path(name);
        std::fs::write(
            &path,
            format!(
                "listeners:\n  - name: public\n    address: 127.0.0.1:8443\n    tls:\n      certificates:\n        - {{ cert: {cert}, key: {key}, sni: [example.com] }}\n\
                 services:\n  - name: api\n    nodes: [ {{ id: a, address: 127.0.0.1:8081 }} ]\n\
                 routes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: api }}\n"
            ),
        )
        .unwrap();
        // From another working directory: paths start at the config's.
        Command::new(BIN)
            .current_dir("/")
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap()
    };
    let ok = write("ok.yaml", "site.pem", "site.key");
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );

    let bad = write("mismatch.yaml", "site.pem", "other.key");
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("listeners[0].tls.certificates[0].key: "),
        "{err}"
    );
    assert!(err.contains("does not match the certificate"), "{err}");

    let old = write("expired.yaml", "expired.pem", "expired.key");
    assert_eq!(old.status.code(), Some(1));
    let err = String::from_utf8_lossy(&old.stderr);
    assert!(
        err.contains("listeners[0].tls.certificates[0].cert: "),
        "{err}"
    );
    assert!(err.contains("expired on"), "{err}");

    let missing = write("missing.yaml", "nope.pem", "site.key");
    assert_eq!(missing.status.code(), Some(1));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("listeners[0].tls.certificates[0].cert: cannot read"),
        "{err}"
    );

    let garbage = write("garbage.yaml", "site.key", "site.key");
    assert_eq!(garbage.status.code(), Some(1));
    let err = String::from_utf8_lossy(&garbage.stderr);
    assert!(
        err.contains("listeners[0].tls.certificates[0].cert: "),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test]
async fn a_reload_turns_tls_on_and_adds_certificates() {
    let pki = Pki::new();
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let (wild, wild_key) = pki.issue("wild", "DNS:*.wild.test");
    let backend = Backend::start("b1").await;
    let plain = tls_config("[]", &backend).replace("\n    tls:\n      certificates: []", "");
    let gw = Gateway::start(&plain).await;
    let port = gw.addr.port();
    let r = crate::harness::client()
        .get(gw.url("/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["forwarded_proto"], "http");

    // The same listener (name and address) turns HTTPS with one certificate.
    let one = format!("[ {} ]", cert_entry(&site, &site_key, "example.com"));
    gw.rewrite_config(&tls_config(&one, &backend));
    let ca = pki.path("ca.pem");
    let mut served = None;
    for _ in 0..200 {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "5", "--noproxy", "*", "--cacert"])
            .arg(&ca)
            .args(["--resolve", &format!("example.com:{port}:127.0.0.1")])
            .arg(format!("https://example.com:{port}/"))
            .output()
            .unwrap();
        if out.status.success() {
            served = Some(String::from_utf8_lossy(&out.stdout).into_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let doc: Value = serde_json::from_str(&served.expect("HTTPS within 20 s")).unwrap();
    assert_eq!(doc["forwarded_proto"], "https");

    // A second certificate added by reload answers its names.
    let two = format!(
        "[ {}, {} ]",
        cert_entry(&site, &site_key, "example.com"),
        cert_entry(&wild, &wild_key, "\"*.wild.test\"")
    );
    gw.rewrite_config(&tls_config(&two, &backend));
    let rotated = within(Duration::from_secs(20), || async {
        curl(None, "api.wild.test", port, "/", &[]).subject == "CN=wild"
    })
    .await;
    assert!(
        rotated,
        "not within 20 s: the added certificate answers its names"
    );
    assert_eq!(
        curl(Some(&ca), "example.com", port, "/", &[]).subject,
        "CN=site"
    );
}

#[tokio::test]
async fn failed_handshakes_are_counted_by_reason_and_bounded_in_time() {
    use tokio::io::AsyncWriteExt;

    let pki = Pki::new();
    let (site, site_key) = pki.issue("site", "DNS:example.com");
    let backend = Backend::start("b1").await;
    let certs = format!("[ {} ]", cert_entry(&site, &site_key, "example.com"));
    let yaml = tls_config(&certs, &backend) + "timeouts: { header_read: 300ms }\n";
    let gw = Gateway::start(&yaml).await;

    // Silent: connects and sends nothing; closed at the deadline.
    let mut silent = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(
        Duration::from_secs(20),
        tokio::io::AsyncReadExt::read(&mut silent, &mut buf),
    )
    .await
    .expect("the gateway closes a silent connection")
    .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");

    // Gone: half a ClientHello, then the client closes.
    let mut gone = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    gone.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    drop(gone);

    // Not TLS at all.
    let mut http = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();

    let want = [("timeout", 1.0), ("closed", 1.0), ("protocol", 1.0)];
    let failures = |m: &str, r: &str| {
        metric(m, "hopgate_tls_handshake_failures_total", &[("reason", r)]).unwrap()
    };
    within(Duration::from_secs(20), || async {
        let m = gw.metrics().await;
        want.iter().all(|(r, n)| failures(&m, r) >= *n)
    })
    .await;
    let m = gw.metrics().await;
    for (r, n) in want {
        let got = failures(&m, r);
        assert!(got >= n, "{r}: {got}\n{m}");
    }
    assert_eq!(
        metric(&m, "hopgate_tls_handshakes_total", &[]),
        Some(0.0),
        "{m}"
    );
    // The gateway still serves.
    assert_eq!(
        curl(
            Some(&pki.path("ca.pem")),
            "example.com",
            gw.addr.port(),
            "/",
            &[]
        )
        .status,
        200
    );
}

/// inotify wakes the certificate watcher: with a one-hour polling
/// interval, files renamed over the old ones are still picked up at once.
#[tokio::test]
async fn rotated_certificates_are_seen_by_the_kernel_not_the_interval() {
    let r = Rotation::start("sources: { file: { interval: 1h } }\n").await;
    let port = r.gw.addr.port();
    let (site2, site2_key) = r.pki.issue("site2", "DNS:example.com");
    r.pki.replace(&site2_key, &r.live_key);
    r.pki.replace(&site2, &r.live_cert);
    let rotated = within(Duration::from_secs(20), || async {
        curl(Some(&r.pki.path("ca.pem")), "example.com", port, "/", &[]).subject == "CN=site2"
    })
    .await;
    assert!(
        rotated,
        "not within 20 s: new connections get the rotated certificate"
    );
}

/// A gateway serving `example.com` from copies (`live.pem`, `live.key`) of
/// a first certificate, for the rotation tests; `extra` is appended to the
/// config.
struct Rotation {
    pki: Pki,
    gw: Gateway,
    site: std::path::PathBuf,
    live_cert: std::path::PathBuf,
    live_key: std::path::PathBuf,
    _backend: Backend,
}

impl Rotation {
    async fn start(extra: &str) -> Rotation {
        let pki = Pki::new();
        let (site, site_key) = pki.issue("site", "DNS:example.com");
        let backend = Backend::start("b1").await;
        let live_cert = pki.path("live.pem");
        let live_key = pki.path("live.key");
        std::fs::copy(&site, &live_cert).unwrap();
        std::fs::copy(&site_key, &live_key).unwrap();
        let certs = format!("[ {} ]", cert_entry(&live_cert, &live_key, "example.com"));
        let gw = Gateway::start(&format!("{}{extra}", tls_config(&certs, &backend))).await;
        Rotation {
            pki,
            gw,
            site,
            live_cert,
            live_key,
            _backend: backend,
        }
    }
}
