//! `routes[].auth`: bearer tokens made by PyJWT (RS256 and ES256) against
//! a JWKS file, with the file rotated on disk while the gateway runs (a
//! new key accepted at once, the old one until it is removed); expired,
//! wrong-audience and `alg: none` tokens refused with RFC 6750's
//! challenge; claims reaching the backend as headers and a client's own
//! copy of such a header stripped; basic auth against an htpasswd file
//! made by Apache's `htpasswd -B`, changed on disk; credentials absent
//! from the access log; bad files refused with their field path.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use crate::harness::{client, config, metric, service, temp_path, within, Backend, Gateway, BIN};

const JWT_TOOL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/py/jwt_tool.py");

/// Keys and tokens from `tests/it/py/jwt_tool.py` (see its spec).
fn pyjwt(spec: &Value) -> Value {
    let mut child = Command::new("python3")
        .arg(JWT_TOOL)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs jwt_tool.py (pip install pyjwt cryptography)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(spec.to_string().as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "jwt_tool.py failed (pip install pyjwt cryptography)"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Writes a JWKS file of `kids` the way a key rotation does: a new file
/// renamed over the old one.
fn write_jwks(path: &Path, made: &Value, kids: &[&str]) {
    let keys: Vec<Value> = kids.iter().map(|k| made["jwks"][k].clone()).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json!({ "keys": keys }).to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn token<'a>(made: &'a Value, name: &str) -> &'a str {
    made["tokens"][name].as_str().unwrap()
}

/// A gateway with the routes `routes` (YAML lines) to `b`, logging
/// access lines as JSON to `log`.
async fn gateway(b: &Backend, routes: &str, log: &Path) -> Gateway {
    let yaml = format!(
        "{}access_log: {{ format: json, path: {} }}\n",
        config(&service("svc", &[("n1", b.addr, "")]), routes),
        log.display()
    );
    Gateway::start(&yaml).await
}

/// Status, `WWW-Authenticate` and (on a 200) the backend's JSON of a GET
/// with `auth` as its `Authorization` header and `extra` headers.
async fn get(
    gw: &Gateway,
    path: &str,
    auth: Option<&str>,
    extra: &[(&str, &str)],
) -> (u16, String, Value) {
    let mut req = client().get(gw.url(path));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = if status == 200 {
        r.json().await.unwrap()
    } else {
        Value::Null
    };
    (status, challenge, body)
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn cleanup(files: &[&PathBuf]) {
    for f in files {
        let _ = std::fs::remove_file(f);
    }
}

#[tokio::test]
async fn jwt_rs256_and_es256_pass_with_claims_and_bad_tokens_get_the_bearer_challenge() {
    let claims = json!({ "sub": "alice", "iss": "https://id.example.com", "aud": "api" });
    let no_sub = json!({ "iss": "https://id.example.com", "aud": ["other", "api"] });
    let made = pyjwt(&json!({
        "keys": [{ "kid": "a", "kind": "rsa" }, { "kid": "b", "kind": "ec" }, { "kid": "x", "kind": "rsa" }],
        "tokens": [
            { "name": "rs", "kid": "a", "alg": "RS256", "claims": claims, "exp_in": 300 },
            { "name": "es", "kid": "b", "alg": "ES256", "claims": claims, "exp_in": 300 },
            { "name": "no_sub", "kid": "a", "alg": "RS256", "claims": no_sub, "exp_in": 300 },
            { "name": "expired", "kid": "a", "alg": "RS256", "claims": claims, "exp_in": -3600 },
            { "name": "wrong_aud", "kid": "a", "alg": "RS256",
              "claims": { "sub": "alice", "iss": "https://id.example.com", "aud": "billing" }, "exp_in": 300 },
            { "name": "none", "kid": "a", "alg": "none", "claims": claims, "exp_in": 300 },
            { "name": "unknown_key", "kid": "x", "alg": "RS256", "claims": claims, "exp_in": 300 },
            { "name": "forged_kid", "kid": "x", "alg": "RS256", "claims": claims, "exp_in": 300 }
        ]
    }));
    let jwks = temp_path("jwks.json");
    write_jwks(&jwks, &made, &["a", "b"]);
    let log = temp_path("access.json");
    let b = Backend::start("n1").await;
    let jwt = format!(
        "jwt: {{ jwks_file: \"{}\", issuer: \"https://id.example.com\", audiences: [api], claims_to_headers: {{ sub: X-User }}",
        jwks.display()
    );
    let routes = format!(
        "  - {{ id: strip, match: {{ path_prefix: /strip }}, service: svc, auth: {{ {jwt}, remove_authorization: true }} }} }}\n\
         \x20 - {{ id: app, match: {{ path_prefix: / }}, service: svc, auth: {{ {jwt} }} }} }}"
    );
    let gw = gateway(&b, &routes, &log).await;

    // No token: the realm alone (the route id by default).
    let (s, c, _) = get(&gw, "/", None, &[]).await;
    assert_eq!((s, c.as_str()), (401, "Bearer realm=\"app\""));
    let (s, c, _) = get(&gw, "/", Some("Basic YTpi"), &[]).await;
    assert_eq!(
        (s, c.as_str()),
        (401, "Bearer realm=\"app\""),
        "another scheme is no token"
    );

    // RS256 and ES256 pass; the claim reaches the backend as X-User, over
    // the client's own X-User; the token goes on (remove_authorization off).
    for name in ["rs", "es"] {
        let t = bearer(token(&made, name));
        let (s, c, body) = get(&gw, "/", Some(&t), &[("x-user", "mallory")]).await;
        assert_eq!(s, 200, "{name}: {c}");
        assert_eq!(body["headers"]["x-user"], "alice", "{name}: {body}");
        assert_eq!(body["headers"]["authorization"], t.as_str());
    }
    // A token without the claim: the client's X-User is still stripped.
    let (s, _, body) = get(
        &gw,
        "/",
        Some(&bearer(token(&made, "no_sub"))),
        &[("x-user", "mallory")],
    )
    .await;
    assert_eq!(s, 200);
    assert!(
        body["headers"].get("x-user").is_none(),
        "a smuggled X-User reached the backend: {body}"
    );
    // remove_authorization: the backend never sees the token.
    let (s, _, body) = get(&gw, "/strip", Some(&bearer(token(&made, "rs"))), &[]).await;
    assert_eq!(s, 200);
    assert!(body["headers"].get("authorization").is_none(), "{body}");
    assert_eq!(body["headers"]["x-user"], "alice");

    // Refused tokens: 401 with invalid_token and why.
    for (name, why) in [
        ("expired", "the token has expired"),
        ("wrong_aud", "the token is not for this audience"),
        ("none", "malformed token or unsupported algorithm"),
        ("unknown_key", "no key for the token's kid and algorithm"),
    ] {
        let (s, c, _) = get(&gw, "/", Some(&bearer(token(&made, name))), &[]).await;
        assert_eq!(s, 401, "{name}");
        assert_eq!(
            c,
            format!("Bearer realm=\"app\", error=\"invalid_token\", error_description=\"{why}\""),
            "{name}"
        );
    }
    // A valid token's payload under another signature: refused.
    let rs = token(&made, "rs");
    let other = token(&made, "forged_kid");
    let spliced: Vec<&str> = rs.split('.').collect();
    let sig = other.rsplit('.').next().unwrap();
    let forged = format!("{}.{}.{sig}", spliced[0], spliced[1]);
    let (s, c, _) = get(&gw, "/", Some(&bearer(&forged)), &[]).await;
    assert_eq!(s, 401);
    assert!(c.contains("signature does not verify"), "{c}");

    // Counted by route and result.
    let m = gw.metrics().await;
    let count = |route: &str, result: &str| {
        metric(
            &m,
            "hopgate_auth_total",
            &[("route", route), ("result", result)],
        )
        .unwrap_or(-1.0)
    };
    assert_eq!(count("app", "allowed"), 3.0, "{m}");
    assert_eq!(count("strip", "allowed"), 1.0);
    assert_eq!(count("app", "missing"), 2.0);
    assert_eq!(count("app", "expired"), 1.0);
    assert_eq!(count("app", "denied"), 1.0);
    assert_eq!(count("app", "invalid"), 3.0);

    // The access log has the requests, and no credentials.
    let logged = within(Duration::from_secs(10), || async {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
            >= 11
    })
    .await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(logged, "access lines missing:\n{text}");
    assert!(text.contains("\"status\":401"), "{text}");
    for secret in [rs, token(&made, "es"), "Bearer", "YTpi"] {
        assert!(!text.contains(secret), "{secret:?} reached the access log");
    }
    cleanup(&[&jwks, &log]);
}

#[tokio::test]
async fn a_jwks_rotated_on_disk_takes_the_new_key_at_once_and_the_old_until_removed() {
    let claims = json!({ "sub": "bob", "aud": "api" });
    let made = pyjwt(&json!({
        "keys": [{ "kid": "old", "kind": "rsa" }, { "kid": "new", "kind": "ec" }],
        "tokens": [
            { "name": "old", "kid": "old", "alg": "RS256", "claims": claims, "exp_in": 600 },
            { "name": "new", "kid": "new", "alg": "ES256", "claims": claims, "exp_in": 600 }
        ]
    }));
    let jwks = temp_path("jwks.json");
    write_jwks(&jwks, &made, &["old"]);
    let log = temp_path("access.json");
    let b = Backend::start("n1").await;
    let routes = format!(
        "  - {{ id: api, match: {{ path_prefix: / }}, service: svc, auth: {{ jwt: {{ jwks_file: \"{}\", audiences: [api] }} }} }}",
        jwks.display()
    );
    let gw = gateway(&b, &routes, &log).await;
    let (old, new) = (bearer(token(&made, "old")), bearer(token(&made, "new")));
    assert_eq!(get(&gw, "/", Some(&old), &[]).await.0, 200);
    assert_eq!(
        get(&gw, "/", Some(&new), &[]).await.0,
        401,
        "not in the file yet"
    );

    // The new key is published beside the old: both pass, no reload.
    write_jwks(&jwks, &made, &["old", "new"]);
    let took = within(Duration::from_secs(10), || async {
        get(&gw, "/", Some(&new), &[]).await.0 == 200
    })
    .await;
    assert!(took, "the new key was never accepted; logs:\n{}", gw.logs());
    assert_eq!(
        get(&gw, "/", Some(&old), &[]).await.0,
        200,
        "the old key until it is removed"
    );

    // The old key is removed: its tokens are refused from then on.
    write_jwks(&jwks, &made, &["new"]);
    let gone = within(Duration::from_secs(10), || async {
        get(&gw, "/", Some(&old), &[]).await.0 == 401
    })
    .await;
    assert!(gone, "the removed key was still accepted");
    assert_eq!(get(&gw, "/", Some(&new), &[]).await.0, 200);

    // A broken file keeps the keys in use (and is counted as a rejected reload).
    std::fs::write(&jwks, "{ not json").unwrap();
    let refused = within(Duration::from_secs(10), || async {
        gw.metrics()
            .await
            .contains("hopgate_config_reload_failures_total 1")
    })
    .await;
    assert!(
        refused,
        "the broken JWKS was not refused; logs:\n{}",
        gw.logs()
    );
    assert_eq!(get(&gw, "/", Some(&new), &[]).await.0, 200);
    let v = gw.admin_json("/admin/v1/config").await;
    assert_eq!(v["version"], 1, "a key rotation is not a config reload");
    cleanup(&[&jwks, &log]);
}

/// Runs Apache's `htpasswd` with `args`.
fn htpasswd(args: &[&str]) {
    let ok = Command::new("htpasswd")
        .args(args)
        .stderr(Stdio::null())
        .status()
        .expect("htpasswd runs (apt-get install apache2-utils)")
        .success();
    assert!(ok, "htpasswd {args:?}");
}

fn basic(user: &str, password: &str) -> String {
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {pair}")
}

#[tokio::test]
async fn basic_auth_checks_an_htpasswd_file_made_by_apache_and_follows_its_changes() {
    let file = temp_path("htpasswd");
    let f = file.to_str().unwrap();
    htpasswd(&["-c", "-b", "-B", f, "alice", "s3cret-alice"]);
    let log = temp_path("access.json");
    let b = Backend::start("n1").await;
    let routes = format!(
        "  - {{ id: app, match: {{ path_prefix: / }}, service: svc, auth: {{ basic: {{ htpasswd: \"{f}\", realm: \"Staff only\" }} }} }}"
    );
    let gw = gateway(&b, &routes, &log).await;
    let challenge = "Basic realm=\"Staff only\", charset=\"UTF-8\"";
    assert_eq!(get(&gw, "/", None, &[]).await.0, 401);
    assert_eq!(get(&gw, "/", None, &[]).await.1, challenge);
    let alice = basic("alice", "s3cret-alice");
    // Twice: the second from the cache of verified passwords.
    for _ in 0..2 {
        let (s, _, body) = get(&gw, "/", Some(&alice), &[]).await;
        assert_eq!(s, 200);
        assert_eq!(body["headers"]["authorization"], alice.as_str());
    }
    let (s, c, _) = get(&gw, "/", Some(&basic("alice", "wrong")), &[]).await;
    assert_eq!((s, c.as_str()), (401, challenge));
    let bob = basic("bob", "bobs-pass");
    assert_eq!(get(&gw, "/", Some(&bob), &[]).await.0, 401, "no bob yet");

    // bob is added to the file: accepted without a reload.
    htpasswd(&["-b", "-B", f, "bob", "bobs-pass"]);
    let took = within(Duration::from_secs(10), || async {
        get(&gw, "/", Some(&bob), &[]).await.0 == 200
    })
    .await;
    assert!(
        took,
        "the new user was never accepted; logs:\n{}",
        gw.logs()
    );
    assert_eq!(get(&gw, "/", Some(&alice), &[]).await.0, 200);

    let m = gw.metrics().await;
    let count = |result: &str| {
        metric(
            &m,
            "hopgate_auth_total",
            &[("route", "app"), ("result", result)],
        )
        .unwrap_or(-1.0)
    };
    assert!(count("allowed") >= 4.0, "{m}");
    assert!(count("denied") >= 2.0, "{m}");
    assert_eq!(count("missing"), 2.0, "{m}");

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        text.contains("\"status\":401") && text.contains("\"status\":200"),
        "{text}"
    );
    for secret in [
        "s3cret-alice",
        "bobs-pass",
        alice.as_str(),
        bob.as_str(),
        "Basic",
    ] {
        assert!(!text.contains(secret), "{secret:?} reached the access log");
    }
    cleanup(&[&file, &log]);
}

/// `hopgate validate` on a config whose auth block is `auth`; its stderr
/// (the errors) when it fails.
fn validate(auth: &str) -> Result<(), String> {
    let yaml = config(
        &service("svc", &[("n1", "127.0.0.1:9".parse().unwrap(), "")]),
        &format!("  - {{ id: app, match: {{ path_prefix: / }}, service: svc, auth: {auth} }}"),
    );
    let path = temp_path("yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .arg("validate")
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn bad_auth_files_and_blocks_are_refused_with_their_field_path() {
    let jwks = temp_path("jwks.json");
    let htp = temp_path("htpasswd");
    let missing = temp_path("missing.json");
    // A JWKS whose key names an algorithm that does not sign.
    std::fs::write(
        &jwks,
        r#"{"keys":[{"kty":"RSA","n":"xwc8","e":"AQAB","alg":"RSA-OAEP"}]}"#,
    )
    .unwrap();
    std::fs::write(&htp, "alice:$apr1$abcdefgh$0123456789abcdefghijkl\n").unwrap();
    let cases = [
        (
            format!("{{ jwt: {{ jwks_file: \"{}\" }} }}", missing.display()),
            "routes[0].auth.jwt.jwks_file",
            "cannot read",
        ),
        (
            format!("{{ jwt: {{ jwks_file: \"{}\" }} }}", jwks.display()),
            "routes[0].auth.jwt.jwks_file",
            "keys[0]",
        ),
        (
            format!("{{ basic: {{ htpasswd: \"{}\" }} }}", htp.display()),
            "routes[0].auth.basic.htpasswd",
            "line 1: user \"alice\": the hash is MD5",
        ),
        (
            "{ forward: { service: authz, path: /check } }".to_owned(),
            "routes[0].auth.forward.service",
            "unknown service \"authz\"",
        ),
        (
            format!(
                "{{ jwt: {{ jwks_file: x.json, audiences: [] }}, basic: {{ htpasswd: \"{}\" }} }}",
                htp.display()
            ),
            "routes[0].auth",
            "not jwt and basic",
        ),
        (
            "{ jwt: { jwks_file: x.json, audiences: [] } }".to_owned(),
            "routes[0].auth.jwt.audiences",
            "at least one",
        ),
        (
            "{ jwt: { jwks_file: x.json, claims_to_headers: { sub: \"X User\" } } }".to_owned(),
            "routes[0].auth.jwt.claims_to_headers.sub",
            "invalid header name",
        ),
        (
            "{ jwt: { jwks_file: x.json, claims_to_headers: { sub: Connection } } }".to_owned(),
            "routes[0].auth.jwt.claims_to_headers.sub",
            "hop-by-hop",
        ),
    ];
    for (auth, path, words) in cases {
        let err = validate(&auth).expect_err(&auth);
        assert!(err.contains(path) && err.contains(words), "{auth}: {err}");
    }
    cleanup(&[&jwks, &htp]);
}
