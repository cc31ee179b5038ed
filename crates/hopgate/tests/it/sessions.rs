//! Sessions that hop: affinity, a hop on node death carrying the session
//! and its context, drain modes, forged and expired tokens, key rotation,
//! persistence across a gateway restart.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hopgate_core::session::{mint, SessionId, SessionKeys};

use crate::harness::{backends, client, config, json, session_gateway, temp_path, Gateway, BIN};

const OLD_SECRET: &str = "old-secret-0123456789abcdefghijklmnopq";
const NEW_SECRET: &str = "new-secret-0123456789abcdefghijklmnopq";
const SECRET: &str = "test-secret-0123456789abcdefghijklmnop";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn sessions_yaml(extra: &str) -> String {
    format!("sessions: {{ secret_env: HG_SECRET, previous_secrets_env: HG_PREVIOUS, ttl: 1h{extra} }}\n")
}

/// A request carrying `token` in the Hop-Session header.
async fn get(
    gw: &Gateway,
    path: &str,
    token: Option<&str>,
) -> (String, reqwest::header::HeaderMap, serde_json::Value) {
    let mut req = client().get(gw.url(path));
    if let Some(t) = token {
        req = req.header("hop-session", t);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
    let headers = r.headers().clone();
    let v = json(r).await;
    (v["node"].as_str().unwrap().to_owned(), headers, v)
}

fn issued(headers: &reqwest::header::HeaderMap) -> Option<String> {
    headers
        .get("hop-session")
        .map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn a_session_sticks_to_its_node_and_sessionless_traffic_spreads() {
    let (_b, svc) = backends(3).await;
    let gw = session_gateway(&svc, &sessions_yaml(""), SECRET, &[]).await;
    let (first, headers, _) = get(&gw, "/", None).await;
    let token = issued(&headers).expect("a new session is issued");
    let cookie = headers
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("hop_session="), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    for _ in 0..100 {
        let (node, headers, v) = get(&gw, "/", Some(&token)).await;
        assert_eq!(node, first, "the session stays on its node");
        assert!(issued(&headers).is_none(), "a valid token is not re-issued");
        assert_eq!(v["session"], token.as_str(), "the backend sees the session");
    }
    // The cookie works the same way.
    let r = client()
        .get(gw.url("/"))
        .header("cookie", format!("a=b; hop_session={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(json(r).await["node"], first.as_str());
    // Without a session, requests spread.
    let mut seen = BTreeMap::new();
    for _ in 0..30 {
        let (node, _, _) = get(&gw, "/", None).await;
        *seen.entry(node).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
}

#[tokio::test]
async fn a_session_hops_with_its_context_when_its_node_dies() {
    let (mut b, svc) = backends(3).await;
    let gw = session_gateway(&svc, &sessions_yaml(""), SECRET, &[]).await;
    // The backend asks the gateway to keep a context for this session.
    let (bound, headers, _) = get(&gw, "/login?context=cart%3D3", None).await;
    assert!(
        headers.get("hop-session-context").is_none(),
        "the context is not shown to the client"
    );
    let token = issued(&headers).unwrap();
    let sid = {
        let v: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{token}")).await;
        assert_eq!(v["bindings"][0]["node"], bound.as_str());
        assert_eq!(v["bindings"][0]["context_bytes"], 6);
        v["session"].as_str().unwrap().to_owned()
    };
    let victim = b.iter_mut().find(|x| x.id == bound).unwrap();
    victim.kill().await;
    let (new_node, _, v) = get(&gw, "/cart", Some(&token)).await;
    assert_ne!(new_node, bound);
    assert_eq!(
        v["hop_from"],
        bound.as_str(),
        "X-Hop-From names the dead node"
    );
    assert_eq!(v["hop_context"], "cart=3", "the stored context travels");
    assert_eq!(v["session"], token.as_str(), "the same session, unchanged");
    // The next request stays on the new node, without hop headers.
    let (again, _, v) = get(&gw, "/cart", Some(&token)).await;
    assert_eq!(again, new_node);
    assert!(v["hop_from"].is_null());
    // The admin API shows the new binding and the hop.
    let s: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{sid}")).await;
    assert_eq!(s["bindings"][0]["node"], new_node.as_str());
    assert_eq!(s["bindings"][0]["hops"], 1);
    let hops: serde_json::Value = gw.admin_json("/admin/v1/hops?limit=5").await;
    let h = &hops["hops"][0];
    assert_eq!(h["session"], sid.as_str());
    assert_eq!(h["from"], bound.as_str());
    assert_eq!(h["to"], new_node.as_str());
    assert_eq!(h["reason"], "unhealthy");
    assert!(gw.logs().contains(&format!(
        "hop session={sid} from={bound} to={new_node} reason=unhealthy"
    )));
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains("hopgate_hops_total{service=\"s\",reason=\"unhealthy\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("hopgate_hop_duration_seconds_count 1"));
}

#[tokio::test]
async fn drain_migrate_moves_sessions_and_lets_in_flight_finish() {
    let (_b, svc) = backends(3).await;
    let gw = session_gateway(&svc, &sessions_yaml(""), SECRET, &[]).await;
    let (bound, headers, _) = get(&gw, "/", None).await;
    let token = issued(&headers).unwrap();
    // A slow request in flight on the node about to drain.
    let slow = {
        let url = gw.url("/slow?sleep_ms=1000");
        let t = token.clone();
        tokio::spawn(async move { client().get(url).header("hop-session", t).send().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = client()
        .post(gw.admin_url(&format!("/admin/v1/nodes/s/{bound}/drain")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (node, _, v) = get(&gw, "/", Some(&token)).await;
    assert_ne!(node, bound, "migrate: the session hops at its next request");
    assert_eq!(v["hop_from"], bound.as_str());
    let r = slow.await.unwrap().unwrap();
    assert_eq!(r.status(), 200, "the in-flight request finished");
    assert_eq!(json(r).await["node"], bound.as_str());
    let hops: serde_json::Value = gw.admin_json("/admin/v1/hops").await;
    assert_eq!(hops["hops"][0]["reason"], "draining");
}

#[tokio::test]
async fn drain_finish_keeps_sessions_until_the_deadline() {
    let (_b, svc) = backends(3).await;
    let svc = svc.replacen(
        "  - name: s\n",
        "  - name: s\n    drain: { mode: finish, deadline: 1s }\n",
        1,
    );
    let gw = session_gateway(&svc, &sessions_yaml(""), SECRET, &[]).await;
    let (bound, headers, _) = get(&gw, "/", None).await;
    let token = issued(&headers).unwrap();
    client()
        .post(gw.admin_url(&format!("/admin/v1/nodes/s/{bound}/drain")))
        .send()
        .await
        .unwrap();
    let (node, _, _) = get(&gw, "/", Some(&token)).await;
    assert_eq!(
        node, bound,
        "finish: the session stays while the drain runs"
    );
    // New sessions avoid the draining node.
    for _ in 0..10 {
        let (n, _, _) = get(&gw, "/", None).await;
        assert_ne!(n, bound);
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (node, _, v) = get(&gw, "/", Some(&token)).await;
    assert_ne!(node, bound, "after the deadline it hops");
    assert_eq!(v["hop_from"], bound.as_str());
}

#[tokio::test]
async fn forged_tampered_expired_and_garbage_tokens_are_replaced_and_counted() {
    let (_b, svc) = backends(3).await;
    let gw = session_gateway(&svc, &sessions_yaml(""), SECRET, &[]).await;
    let (bound, headers, _) = get(&gw, "/", None).await;
    let token = issued(&headers).unwrap();
    // Bound when the client comes back with its token.
    assert_eq!(get(&gw, "/", Some(&token)).await.0, bound);
    let sid: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{token}")).await;
    let id: SessionId = sid["session"].as_str().unwrap().parse().unwrap();
    let forged = mint(&SessionKeys::from_secrets(b"attacker-key", &[]), id, now());
    let expired = mint(
        &SessionKeys::from_secrets(SECRET.as_bytes(), &[]),
        id,
        now() - 7200,
    );
    // One character inside the signature changed: every bit of it is data
    // (the last character of base64 carries padding bits, and changing
    // those could make the token malformed rather than badly signed).
    let mut tampered = token.clone().into_bytes();
    let at = tampered.len() - 5;
    tampered[at] = if tampered[at] == b'A' { b'Q' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    for (label, bad) in [
        ("forged", forged),
        ("expired", expired),
        ("tampered", tampered),
        ("garbage", "not-a-token".to_owned()),
    ] {
        let (_, headers, v) = get(&gw, "/", Some(&bad)).await;
        let fresh = issued(&headers).unwrap_or_else(|| panic!("{label}: a new session is issued"));
        assert_ne!(fresh, bad, "{label}");
        assert_eq!(
            v["session"],
            fresh.as_str(),
            "{label}: the backend sees the new session, never the claimed one"
        );
    }
    // The real session is untouched: still on its node, no hop.
    let (node, _, _) = get(&gw, "/", Some(&token)).await;
    assert_eq!(node, bound);
    let s: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{id}")).await;
    assert_eq!(s["bindings"][0]["hops"], 0);
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_session_tokens_rejected_total{reason=\"bad_signature\"} 2"),
        "{m}"
    );
    assert!(
        m.contains("hopgate_session_tokens_rejected_total{reason=\"expired\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("hopgate_session_tokens_rejected_total{reason=\"malformed\"} 1"),
        "{m}"
    );
}

#[tokio::test]
async fn bindings_survive_a_restart_and_rotated_keys_are_honoured() {
    let (_b, svc) = backends(3).await;
    let store = temp_path("sessions");
    let store_yaml = format!(
        "{}store: {{ path: \"{}\" }}\n",
        config(&svc, "  - { id: r, match: { path_prefix: / }, service: s }"),
        store.display()
    );
    let yaml = |extra: &str| store_yaml.clone() + &sessions_yaml(extra);
    // First life: old key.
    let mut gw = Gateway::start_with_env(&yaml(""), &[("HG_SECRET", OLD_SECRET)]).await;
    let (bound, headers, _) = get(&gw, "/", None).await;
    let token = issued(&headers).unwrap();
    // Bound when the client comes back with its token.
    assert_eq!(get(&gw, "/", Some(&token)).await.0, bound);
    gw.sigterm();
    assert_eq!(gw.wait().await, Some(0));
    drop(gw);
    // Second life: a new key, the old one kept as previous.
    let gw = Gateway::start_with_env(
        &yaml(""),
        &[("HG_SECRET", NEW_SECRET), ("HG_PREVIOUS", OLD_SECRET)],
    )
    .await;
    assert!(
        gw.logs().contains("loaded 1"),
        "the store was loaded: {}",
        gw.logs()
    );
    let (node, headers, _) = get(&gw, "/", Some(&token)).await;
    assert_eq!(
        node, bound,
        "the binding survived the restart and the old-key token was honoured"
    );
    let reissued = issued(&headers).expect("re-signed with the current key");
    assert_ne!(reissued, token);
    let (node, headers, _) = get(&gw, "/", Some(&reissued)).await;
    assert_eq!(node, bound);
    assert!(issued(&headers).is_none());
    drop(gw);
    // A corrupted file: a clear warning, an empty store, and the gateway serves.
    std::fs::write(&store, b"this is not a session file").unwrap();
    let gw = Gateway::start_with_env(&yaml(""), &[("HG_SECRET", NEW_SECRET)]).await;
    assert!(gw.logs().to_lowercase().contains("warn"), "{}", gw.logs());
    let (_, headers, _) = get(&gw, "/", Some(&reissued)).await;
    assert!(
        issued(&headers).is_none(),
        "the token is still valid; only the binding was lost"
    );
    let _ = std::fs::remove_file(&store);
}

#[tokio::test]
async fn an_oversized_context_is_not_stored_and_is_counted() {
    let (_b, svc) = backends(3).await;
    let gw = session_gateway(&svc, &sessions_yaml(", context_max: 64"), SECRET, &[]).await;
    let (_, headers, _) = get(&gw, "/?context=small", None).await;
    let token = issued(&headers).unwrap();
    let big = "x".repeat(100);
    let (_, headers, _) = get(&gw, &format!("/?context={big}"), Some(&token)).await;
    assert!(
        headers.get("hop-session-context").is_none(),
        "never shown to the client"
    );
    let s: serde_json::Value = gw.admin_json(&format!("/admin/v1/sessions/{token}")).await;
    assert_eq!(
        s["bindings"][0]["context_bytes"], 5,
        "the last context that fit is kept"
    );
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_session_contexts_total{event=\"oversized\"} 1"),
        "{m}"
    );
    assert!(gw.logs().contains("Hop-Session-Context too large"));
}

#[tokio::test]
async fn a_session_secret_shorter_than_32_bytes_stops_the_start() {
    let path = temp_path("yaml");
    std::fs::write(
        &path,
        "listeners:\n  - { name: public, address: 127.0.0.1:0 }\nadmin: { address: 127.0.0.1:0 }\nsessions: { secret_env: HG_SHORT }\nservices:\n  - { name: app, nodes: [ { id: n1, address: \"127.0.0.1:1\" } ] }\nroutes:\n  - { id: all, match: { path_prefix: / }, service: app }\n",
    )
    .unwrap();
    let out = tokio::process::Command::new(BIN)
        .args(["run", "--config"])
        .arg(&path)
        .env("HG_SHORT", "change-me")
        .kill_on_drop(true)
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started with a 9-byte secret");
    assert!(
        stderr.contains("HG_SHORT") && stderr.contains("9 bytes") && stderr.contains("at least 32"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("change-me"),
        "the secret itself is logged: {stderr}"
    );
}
