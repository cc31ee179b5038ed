//! The check as a request meets it: challenges, algorithm confusion, claims
//! copied, identity headers stripped, counts.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName};
use jsonwebtoken::{EncodingKey, Header};

use hopgate_core::config::auth::{AuthKind, JwksSource, JwtAuth, RouteAuth};

use super::*;

const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

fn jwks_with_secret() -> Vec<u8> {
    let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(SECRET);
    format!(r#"{{"keys":[{{"kty":"oct","kid":"h","k":"{k}","alg":"HS256"}}]}}"#).into_bytes()
}

fn route(file: &str) -> RouteAuth {
    RouteAuth {
        kind: AuthKind::Jwt(JwtAuth {
            keys: JwksSource::File(PathBuf::from(file)),
            issuer: Some("https://id".into()),
            audiences: vec!["api".into()],
            clock_skew: Duration::from_secs(30),
            claims_to_headers: vec![("sub".into(), HeaderName::from_static("x-user"))],
        }),
        realm: "app".into(),
        remove_authorization: true,
        strip: vec![HeaderName::from_static("x-user")],
    }
}

fn keys_of(id: &str, file: &str, jwks: &[u8]) -> AuthKeys {
    let keys = AuthKeys::default();
    let mut routes = std::collections::HashMap::new();
    routes.insert(
        id.to_owned(),
        (
            PathBuf::from(file),
            Keys::Jwt(jwt::Jwks::parse(jwks).unwrap()),
        ),
    );
    keys.install(AuthMaterial::from_parts(routes, Vec::new()));
    keys
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hs256(claims: &serde_json::Value) -> String {
    let mut h = Header::new(jsonwebtoken::Algorithm::HS256);
    h.kid = Some("h".into());
    jsonwebtoken::encode(&h, claims, &EncodingKey::from_secret(SECRET)).unwrap()
}

fn with_token(t: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(AUTHORIZATION, format!("Bearer {t}").parse().unwrap());
    h.insert("x-user", "mallory".parse().unwrap());
    h
}

fn challenge(c: Checked) -> String {
    match c {
        Checked::Refuse(r) => {
            assert_eq!(r.status(), 401);
            r.headers()[WWW_AUTHENTICATE].to_str().unwrap().to_owned()
        }
        Checked::Pass => panic!("passed"),
        Checked::Wait(_) => panic!("waits"),
    }
}

#[test]
fn an_hs256_token_from_an_oct_key_passes_with_its_claims() {
    let keys = keys_of("app", "k.json", &jwks_with_secret());
    let cfg = route("k.json");
    let t = hs256(
        &serde_json::json!({"sub": "alice", "iss": "https://id", "aud": "api", "exp": now() + 60}),
    );
    let mut h = with_token(&t);
    assert!(matches!(keys.check("app", &cfg, &mut h), Checked::Pass));
    assert_eq!(h["x-user"], "alice", "the claim, not the client's copy");
    assert!(h.get(AUTHORIZATION).is_none(), "remove_authorization");
    let counts = keys.counts();
    assert_eq!(counts[0].1.get(AuthResult::Allowed), 1);
}

#[test]
fn skew_issuer_and_missing_exp() {
    let keys = keys_of("app", "k.json", &jwks_with_secret());
    let cfg = route("k.json");
    // Expired 10 s ago: inside the 30 s skew.
    let t = hs256(&serde_json::json!({"iss": "https://id", "aud": "api", "exp": now() - 10}));
    assert!(matches!(
        keys.check("app", &cfg, &mut with_token(&t)),
        Checked::Pass
    ));
    let t = hs256(&serde_json::json!({"iss": "https://id", "aud": "api", "exp": now() - 100}));
    assert!(challenge(keys.check("app", &cfg, &mut with_token(&t))).contains("expired"));
    let t = hs256(
        &serde_json::json!({"iss": "https://id", "aud": "api", "nbf": now() + 100, "exp": now() + 200}),
    );
    assert!(challenge(keys.check("app", &cfg, &mut with_token(&t))).contains("not valid yet"));
    let t = hs256(&serde_json::json!({"iss": "https://other", "aud": "api", "exp": now() + 60}));
    assert!(challenge(keys.check("app", &cfg, &mut with_token(&t))).contains("another issuer"));
    let t = hs256(&serde_json::json!({"iss": "https://id", "aud": "api"}));
    assert!(challenge(keys.check("app", &cfg, &mut with_token(&t))).contains("no exp"));
}

/// An HS256 token whose secret is an RSA key's public material finds no
/// key: the RSA key only verifies RS256.
#[test]
fn the_key_decides_the_algorithm() {
    let rsa = br#"{"keys":[{"kty":"RSA","kid":"h","n":"xwc8jJ04NUmkyUgchm1XH5OvZ0pFGOsUIPWGtlf4lVcSNmO8aY7-DO-TzM5L3M784qUi3chLOSS3gsyqA-FXH6yrmiQGK8ARjTA7XwyKH0w5tNL7AmnnzeWjCGZ_lR34VZ0YBu7d4xOtaDhtKupHfsXsVdcV7v9HrME7zEFTJM50TCgU_M_mw6o72rCrgoVGirsrhtW8gQalEEMyaEqsxXOmRACmU_o5Y9RmcJOT8ME8oNPsbBVxyffL-43r7vFW4vCdxH-XYDk2G_OObP9eMurUFAaqI-7VAxFl6405hU5wxXEyT-O3pvxAn4q4vIZc-NGbUf0Qt6Pb-BPBn2MFRQ","e":"AQAB"}]}"#;
    let keys = keys_of("app", "k.json", rsa);
    let cfg = route("k.json");
    let t = hs256(&serde_json::json!({"iss": "https://id", "aud": "api", "exp": now() + 60}));
    let c = challenge(keys.check("app", &cfg, &mut with_token(&t)));
    assert!(
        c.contains("no key for the token's kid and algorithm"),
        "{c}"
    );
    // An RSA key declared HS256 is refused when the file is read.
    let e = jwt::Jwks::parse(br#"{"keys":[{"kty":"RSA","n":"xwc8","e":"AQAB","alg":"HS256"}]}"#)
        .err()
        .unwrap();
    assert!(e.contains("keys[0]") && e.contains("does not fit"), "{e}");
}

#[test]
fn missing_and_stripped_whatever_the_outcome() {
    let keys = keys_of("app", "k.json", &jwks_with_secret());
    let cfg = route("k.json");
    let mut h = HeaderMap::new();
    h.insert("x-user", "mallory".parse().unwrap());
    assert_eq!(
        challenge(keys.check("app", &cfg, &mut h)),
        "Bearer realm=\"app\""
    );
    assert!(h.get("x-user").is_none());
    // No keys for the route (or for another file): refused, counted nowhere.
    let other = route("other.json");
    match keys.check("app", &other, &mut HeaderMap::new()) {
        Checked::Refuse(r) => assert_eq!(r.status(), 503),
        _ => panic!("a route without keys must not pass"),
    }
}

#[test]
fn counts_survive_a_new_file() {
    let keys = keys_of("app", "k.json", &jwks_with_secret());
    let cfg = route("k.json");
    let _ = keys.check("app", &cfg, &mut HeaderMap::new());
    let mut routes = std::collections::HashMap::new();
    routes.insert(
        "app".to_owned(),
        (
            PathBuf::from("k.json"),
            Keys::Jwt(jwt::Jwks::parse(&jwks_with_secret()).unwrap()),
        ),
    );
    keys.install(AuthMaterial::from_parts(routes, Vec::new()));
    let _ = keys.check("app", &cfg, &mut HeaderMap::new());
    assert_eq!(keys.counts()[0].1.get(AuthResult::Missing), 2);
}

/// A verified token is remembered for its route config and its file:
/// another config (another audience) checks it again, and a new file
/// (the key removed) refuses it.
#[test]
fn verified_tokens_are_remembered_per_config_and_file() {
    let keys = keys_of("app", "k.json", &jwks_with_secret());
    let cfg = route("k.json");
    let t = hs256(
        &serde_json::json!({"sub": "alice", "iss": "https://id", "aud": "api", "exp": now() + 60}),
    );
    for _ in 0..2 {
        let mut h = with_token(&t);
        assert!(matches!(keys.check("app", &cfg, &mut h), Checked::Pass));
        assert_eq!(h["x-user"], "alice", "the cached claims too");
    }
    let mut other = route("k.json");
    if let AuthKind::Jwt(j) = &mut other.kind {
        j.audiences = vec!["billing".into()];
    }
    let c = challenge(keys.check("app", &other, &mut with_token(&t)));
    assert!(c.contains("audience"), "{c}");
    // The file now holds another secret: the remembered token is gone.
    let k = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(b"another secret, 32 bytes long!!!");
    let jwks = format!(r#"{{"keys":[{{"kty":"oct","kid":"h","k":"{k}"}}]}}"#);
    let mut routes = std::collections::HashMap::new();
    routes.insert(
        "app".to_owned(),
        (
            PathBuf::from("k.json"),
            Keys::Jwt(jwt::Jwks::parse(jwks.as_bytes()).unwrap()),
        ),
    );
    keys.install(AuthMaterial::from_parts(routes, Vec::new()));
    let c = challenge(keys.check("app", &cfg, &mut with_token(&t)));
    assert!(c.contains("signature does not verify"), "{c}");
}

/// Forward auth's decisions and a fetched key set are kept by an apply
/// that keeps their block, and start afresh when it changes.
#[test]
fn decisions_and_fetched_sets_are_kept_while_their_block_is() {
    use hopgate_core::config::auth::{FailureMode, ForwardAuth, JwksService};
    let fwd = |path: &str| ForwardAuth {
        service: "authz".into(),
        path: path.into(),
        copy_request_headers: Vec::new(),
        copy_response_headers: Vec::new(),
        cache: None,
        failure_mode: FailureMode::Deny,
        timeout: Duration::from_secs(1),
    };
    let set = |path: &str| JwksService {
        service: "idp".into(),
        path: path.into(),
        refresh: Duration::from_secs(60),
    };
    let install = |keys: &AuthKeys, check: &str, jwks: &str| {
        let mut routes = std::collections::HashMap::new();
        let d = Arc::new(forward::Decisions::new(fwd(check)));
        routes.insert("f".to_owned(), (PathBuf::new(), Keys::Forward(d)));
        let f = Arc::new(fetch::Fetched::new(set(jwks)));
        routes.insert("j".to_owned(), (PathBuf::new(), Keys::Fetched(f)));
        keys.install(AuthMaterial::from_parts(routes, Vec::new()));
        let g = keys.guards.load();
        let d = match &g["f"].keys {
            Keys::Forward(d) => Arc::as_ptr(d),
            _ => panic!("forward"),
        };
        let f = match &g["j"].keys {
            Keys::Fetched(f) => Arc::as_ptr(f),
            _ => panic!("fetched"),
        };
        (d, f)
    };
    let keys = AuthKeys::default();
    let first = install(&keys, "/check", "/jwks.json");
    assert_eq!(install(&keys, "/check", "/jwks.json"), first, "kept");
    let changed = install(&keys, "/other", "/keys.json");
    assert_ne!(changed.0, first.0, "a changed forward block starts afresh");
    assert_ne!(changed.1, first.1, "another key set starts empty");
    assert_eq!(keys.fetched().len(), 1);
}
