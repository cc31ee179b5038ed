//! `routes[].auth.forward` against a small Python authorization service
//! (`tests/it/py/auth_server.py`) behind a hopgate service: allowed (its
//! `X-User` reaching the backend over the client's own), denied (its 401
//! with its `WWW-Authenticate` and body reaching the client, a 302 with its
//! `Location`), decisions remembered by the `Authorization` header (the
//! service counts its calls), the service drained, killed and restarted
//! node by node under load with no client error, and `failure_mode: deny`
//! vs `allow` with the service down. And `routes[].auth.jwt.jwks`: a key
//! set served by the same Python server, fetched through the service and
//! rotated there while the gateway runs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{
    client, config, dead_addr, metric, service, temp_path, within, Backend, Gateway,
};

const SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/auth_server.py");
const JWT_TOOL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/jwt_tool.py");

/// One `auth_server.py` child (killed on drop).
struct AuthServer {
    child: Option<Child>,
    port: u16,
    jwks: Option<PathBuf>,
}

impl AuthServer {
    async fn start(port: u16, jwks: Option<&Path>) -> AuthServer {
        let mut cmd = Command::new("python3");
        cmd.arg(SERVER).arg(port.to_string());
        if let Some(j) = jwks {
            cmd.arg(j);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 runs auth_server.py");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("auth_server.py did not start")
            .unwrap()
            .expect("auth_server.py printed nothing");
        let port = line.strip_prefix("port ").unwrap().trim().parse().unwrap();
        AuthServer {
            child: Some(child),
            port,
            jwks: jwks.map(Path::to_path_buf),
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Killed and started again on its port.
    async fn restart(&mut self) {
        self.kill().await;
        for _ in 0..50 {
            let mut cmd = Command::new("python3");
            cmd.arg(SERVER).arg(self.port.to_string());
            if let Some(j) = &self.jwks {
                cmd.arg(j);
            }
            let mut child = cmd
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let ready = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await;
            if matches!(ready, Ok(Ok(Some(_)))) {
                self.child = Some(child);
                return;
            }
            // The port lingers a moment after the kill: try again.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("auth_server.py did not restart on its port {}", self.port);
    }

    async fn get(&self, path: &str) -> Value {
        client()
            .get(format!("http://{}{path}", self.addr()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn calls(&self) -> u64 {
        self.get("/calls").await["calls"].as_u64().unwrap()
    }
}

/// The authorization service `authz` of `servers`.
fn authz(servers: &[(&str, String)], health: bool) -> String {
    let mut s = "  - name: authz\n".to_owned();
    if health {
        s.push_str(
            "    health: { path: /health, interval: 200ms, timeout: 200ms, rise: 1, fall: 1 }\n",
        );
    }
    s.push_str("    nodes:\n");
    for (id, addr) in servers {
        s.push_str(&format!("      - {{ id: {id}, address: \"{addr}\" }}\n"));
    }
    s
}

/// The forward block of the tests' routes (`extra`: more fields).
fn forward(path: &str, extra: &str) -> String {
    format!(
        "{{ forward: {{ service: authz, path: {path}, copy_request_headers: [Authorization], copy_response_headers: [X-User]{extra} }} }}"
    )
}

/// Status, headers and body of a GET of `path` with `headers`.
async fn get(
    gw: &Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = client().get(gw.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let h = r.headers().clone();
    (status, h, r.text().await.unwrap())
}

fn auth_count(metrics: &str, route: &str, result: &str) -> f64 {
    metric(
        metrics,
        "hopgate_auth_total",
        &[("route", route), ("result", result)],
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn allowed_denied_and_remembered_decisions() {
    let auth = AuthServer::start(0, None).await;
    let b = Backend::start("n1").await;
    let log = temp_path("access.json");
    let services = format!(
        "{}{}",
        service("svc", &[("n1", b.addr, "")]),
        authz(&[("a1", auth.addr())], false)
    );
    let cached = forward(
        "/check",
        ", cache: { key: { header: Authorization }, ttl: 1h }",
    );
    let routes = format!(
        "  - {{ id: app, match: {{ path_prefix: /app }}, service: svc, auth: {cached} }}\n\
         \x20 - {{ id: fresh, match: {{ path_prefix: /fresh }}, service: svc, auth: {} }}\n\
         \x20 - {{ id: login, match: {{ path_prefix: /login-only }}, service: svc, auth: {} }}",
        forward("/check", ""),
        forward("/login-check", "")
    );
    let yaml = format!(
        "{}access_log: {{ format: json, path: {} }}\n",
        config(&services, &routes),
        log.display()
    );
    let gw = Gateway::start(&yaml).await;

    // Allowed: the service's X-User reaches the backend, the client's own
    // X-User does not; X-Other is not copied.
    let good = [
        ("authorization", "Bearer good-alice"),
        ("x-user", "mallory"),
    ];
    let (s, _, body) = get(&gw, "/app/x?y=1", &good).await;
    assert_eq!(s, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["headers"]["x-user"], "alice", "{body}");
    assert!(body["headers"].get("x-other").is_none(), "{body}");
    // The check described the request.
    let last = auth.get("/last").await;
    assert_eq!(last["x-forwarded-method"], "GET", "{last}");
    assert_eq!(last["x-forwarded-uri"], "/app/x?y=1", "{last}");
    assert_eq!(last["x-forwarded-proto"], "http", "{last}");
    assert_eq!(last["x-forwarded-for"], "127.0.0.1", "{last}");
    assert!(
        last["x-forwarded-host"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{last}"
    );
    assert_eq!(last["authorization"], "Bearer good-alice", "{last}");
    assert_eq!(auth.calls().await, 1);
    // Remembered: the same Authorization asks nothing.
    let (s, _, body) = get(&gw, "/app/other", &good).await;
    assert_eq!(s, 200);
    assert!(body.contains("\"x-user\":\"alice\""), "{body}");
    assert_eq!(auth.calls().await, 1, "a remembered decision asked again");

    // Denied: the service's 401, its challenge and its body; remembered too.
    for _ in 0..2 {
        let (s, h, body) = get(&gw, "/app/x", &[("authorization", "Bearer bad")]).await;
        assert_eq!(s, 401);
        assert_eq!(h["www-authenticate"], "Bearer realm=\"authsrv\"");
        assert_eq!(body, "denied by authsrv\n");
    }
    assert_eq!(auth.calls().await, 2, "a remembered denial asked again");
    // No key: asked every time.
    for _ in 0..2 {
        let (s, _, _) = get(&gw, "/app/x", &[]).await;
        assert_eq!(s, 401);
    }
    assert_eq!(auth.calls().await, 4);
    // Without a cache every request is asked.
    for _ in 0..2 {
        let (s, _, _) = get(&gw, "/fresh/", &good).await;
        assert_eq!(s, 200);
    }
    assert_eq!(auth.calls().await, 6);
    // A redirect to a login page reaches the client as it was.
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(gw.url("/login-only/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 302);
    assert_eq!(r.headers()["location"], "/login");

    let m = gw.metrics().await;
    assert_eq!(auth_count(&m, "app", "allowed"), 2.0, "{m}");
    assert_eq!(auth_count(&m, "app", "denied"), 4.0, "{m}");
    assert_eq!(auth_count(&m, "fresh", "allowed"), 2.0, "{m}");
    // Credentials never reach the access log (9 requests so far).
    let lines = || std::fs::read_to_string(&log).unwrap_or_default();
    let written = within(Duration::from_secs(10), || async {
        lines().lines().count() >= 9
    })
    .await;
    let logged = lines();
    assert!(written, "access lines missing:\n{logged}");
    assert!(logged.contains("\"status\":401"), "{logged}");
    assert!(!logged.contains("good-alice"), "a credential was logged");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn failure_mode_deny_answers_503_and_allow_lets_through_without_identity() {
    let b = Backend::start("n1").await;
    let down = dead_addr().to_string();
    let services = format!(
        "{}{}",
        service("svc", &[("n1", b.addr, "")]),
        authz(&[("a1", down)], false)
    );
    let routes = format!(
        "  - {{ id: deny, match: {{ path_prefix: /deny }}, service: svc, auth: {} }}\n\
         \x20 - {{ id: allow, match: {{ path_prefix: /allow }}, service: svc, auth: {} }}",
        forward("/check", ", timeout: 1s"),
        forward("/check", ", failure_mode: allow")
    );
    let gw = Gateway::start(&config(&services, &routes)).await;
    let creds = [
        ("authorization", "Bearer good-alice"),
        ("x-user", "mallory"),
    ];
    let (s, _, body) = get(&gw, "/deny/x", &creds).await;
    assert_eq!(s, 503, "{body}");
    assert!(
        body.contains("authorization service is unavailable"),
        "{body}"
    );
    let (s, _, body) = get(&gw, "/allow/x", &creds).await;
    assert_eq!(s, 200, "{body}");
    let body: Value = serde_json::from_str(&body).unwrap();
    assert!(
        body["headers"].get("x-user").is_none(),
        "a smuggled X-User passed on failing open: {body}"
    );
    let m = gw.metrics().await;
    assert_eq!(auth_count(&m, "deny", "error"), 1.0, "{m}");
    assert_eq!(auth_count(&m, "allow", "failed_open"), 1.0, "{m}");
}

/// Clients loop through the gateway while each node of the authorization
/// service is drained, killed, restarted and put back in turn: every
/// answer is the backend's 200 (`failure_mode: deny` would have answered
/// 503 had a check found no node).
#[tokio::test]
async fn the_auth_service_drained_and_restarted_under_load_loses_no_request() {
    let mut a1 = AuthServer::start(0, None).await;
    let mut a2 = AuthServer::start(0, None).await;
    let b = Backend::start("n1").await;
    let services = format!(
        "{}{}",
        service("svc", &[("n1", b.addr, "")]),
        authz(&[("a1", a1.addr()), ("a2", a2.addr())], true)
    );
    let routes = format!(
        "  - {{ id: app, match: {{ path_prefix: / }}, service: svc, auth: {} }}",
        forward("/check", "")
    );
    let gw = Arc::new(Gateway::start(&config(&services, &routes)).await);
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (gw, stop, ok, bad) = (gw.clone(), stop.clone(), ok.clone(), bad.clone());
        workers.push(tokio::spawn(async move {
            let c = client();
            // Bounded: at most this many requests per worker.
            for _ in 0..20_000 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let r = c
                    .get(gw.url("/x"))
                    .header("authorization", "Bearer good-bob")
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(r) => bad.lock().push(format!("{}", r.status())),
                    Err(e) => bad.lock().push(e.to_string()),
                }
            }
        }));
    }
    let admin = client();
    for (id, server) in [("a1", &mut a1), ("a2", &mut a2)] {
        let before = ok.load(Ordering::Relaxed);
        assert!(
            within(Duration::from_secs(30), || {
                let ok = ok.clone();
                async move { ok.load(Ordering::Relaxed) >= before + 50 }
            })
            .await,
            "the load did not flow"
        );
        let r = admin
            .post(gw.admin_url(&format!("/admin/v1/nodes/authz/{id}/drain")))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "drain {id}: {}", r.status());
        server.restart().await;
        let r = admin
            .post(gw.admin_url(&format!("/admin/v1/nodes/authz/{id}/undrain")))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "undrain {id}: {}", r.status());
        // The restarted node answers checks again.
        let s: &AuthServer = server;
        assert!(
            within(Duration::from_secs(30), move || async move {
                s.calls().await > 0
            })
            .await,
            "{id} got no check after its restart"
        );
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let bad = bad.lock().clone();
    assert!(bad.is_empty(), "client errors: {bad:?}");
    assert!(ok.load(Ordering::Relaxed) > 100);
    let m = gw.metrics().await;
    assert_eq!(auth_count(&m, "app", "error"), 0.0, "{m}");
}

/// Keys and tokens from `jwt_tool.py`.
fn pyjwt(spec: &Value) -> Value {
    use std::io::Write;
    let mut child = std::process::Command::new("python3")
        .arg(JWT_TOOL)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs jwt_tool.py (pip install pyjwt cryptography)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spec.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "jwt_tool.py failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The key set of `kids`, written the way a rotation does.
fn write_jwks(path: &Path, made: &Value, kids: &[&str]) {
    let keys: Vec<Value> = kids.iter().map(|k| made["jwks"][k].clone()).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json!({ "keys": keys }).to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_key_set_fetched_from_a_service_rotates_without_a_reload() {
    let claims = json!({ "sub": "alice", "aud": "api" });
    let made = pyjwt(&json!({
        "keys": [{ "kid": "a", "kind": "rsa" }, { "kid": "b", "kind": "ec" }],
        "tokens": [
            { "name": "a", "kid": "a", "alg": "RS256", "claims": claims, "exp_in": 600 },
            { "name": "b", "kid": "b", "alg": "ES256", "claims": claims, "exp_in": 600 }
        ]
    }));
    let jwks = temp_path("jwks.json");
    write_jwks(&jwks, &made, &["a"]);
    let idp = AuthServer::start(0, Some(&jwks)).await;
    let b = Backend::start("n1").await;
    let services = format!(
        "{}  - name: idp\n    nodes:\n      - {{ id: i1, address: \"{}\" }}\n",
        service("svc", &[("n1", b.addr, "")]),
        idp.addr()
    );
    let routes = "  - { id: api, match: { path_prefix: / }, service: svc, auth: { jwt: { jwks: { service: idp, path: /jwks.json, refresh: 10s }, audiences: [api], claims_to_headers: { sub: X-User } } } }";
    let gw = Gateway::start(&config(&services, routes)).await;
    let (ta, tb) = (bearer(&made, "a"), bearer(&made, "b"));
    let (ta, tb, gw) = (ta.as_str(), tb.as_str(), &gw);
    // The first fetch brings key a.
    assert!(
        within(Duration::from_secs(30), move || async move {
            status(gw, ta).await == 200
        })
        .await,
        "key a was never fetched"
    );
    assert_eq!(status(gw, tb).await, 401, "key b is not in the set yet");
    // Key b added at the provider: a token naming it brings it in (a
    // fetch on the unknown kid, or the refresh).
    write_jwks(&jwks, &made, &["a", "b"]);
    assert!(
        within(Duration::from_secs(30), move || async move {
            status(gw, tb).await == 200
        })
        .await,
        "key b was never fetched"
    );
    assert_eq!(status(gw, ta).await, 200, "key a is still in the set");
    // Key a removed: refused from the next refresh on.
    write_jwks(&jwks, &made, &["b"]);
    assert!(
        within(Duration::from_secs(30), move || async move {
            status(gw, ta).await == 401
        })
        .await,
        "key a was never dropped"
    );
    assert_eq!(status(gw, tb).await, 200);
    let _ = std::fs::remove_file(&jwks);
}

fn bearer(made: &Value, name: &str) -> String {
    format!("Bearer {}", made["tokens"][name].as_str().unwrap())
}

/// The status of a GET of `/` with `auth` as its `Authorization`.
async fn status(gw: &Gateway, auth: &str) -> u16 {
    get(gw, "/", &[("authorization", auth)]).await.0
}

/// Behind a trusted proxy the check says what the client used: the
/// proxy's `X-Forwarded-Proto` and the client address it forwarded; an
/// untrusted client's claims are replaced by what the gateway saw.
#[tokio::test]
async fn the_check_describes_the_client_behind_a_trusted_proxy() {
    let auth = AuthServer::start(0, None).await;
    let b = Backend::start("n1").await;
    let services = format!(
        "{}{}",
        service("svc", &[("n1", b.addr, "")]),
        authz(&[("a1", auth.addr())], false)
    );
    let routes = format!(
        "  - {{ id: app, match: {{ path_prefix: /app }}, service: svc, auth: {} }}",
        forward("/check", "")
    );
    let claims = [
        ("authorization", "Bearer good-alice"),
        ("x-forwarded-proto", "https"),
        ("x-forwarded-for", "203.0.113.9"),
    ];
    let trusted = format!(
        "{}access: {{ trusted_proxies: [127.0.0.1/32] }}\n",
        config(&services, &routes)
    );
    let gw = Gateway::start(&trusted).await;
    let (s, _, body) = get(&gw, "/app/x", &claims).await;
    assert_eq!(s, 200, "{body}");
    let last = auth.get("/last").await;
    assert_eq!(last["x-forwarded-proto"], "https", "{last}");
    assert_eq!(last["x-forwarded-for"], "203.0.113.9", "{last}");
    drop(gw);
    let gw = Gateway::start(&config(&services, &routes)).await;
    let (s, _, body) = get(&gw, "/app/x", &claims).await;
    assert_eq!(s, 200, "{body}");
    let last = auth.get("/last").await;
    assert_eq!(last["x-forwarded-proto"], "http", "{last}");
    assert_eq!(last["x-forwarded-for"], "127.0.0.1", "{last}");
}
