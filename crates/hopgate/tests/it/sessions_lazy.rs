//! Sessions are bound lazily and a full store evicts: a client that never
//! returns its token costs the store nothing, a returning one is bound to
//! the node its first answer came from (the token names it), and when the
//! store is full a new user still gets a binding while the least recently
//! used one goes, counted.

use hopgate_core::session::{mint, SessionId, SessionKeys, HINTED_TOKEN_LEN};

use crate::harness::{backends, client, json, metric, session_gateway, Gateway};

const SECRET: &str = "lazy-binding-secret-0123456789-abcdef";
const SESSIONS: &str = "sessions: { secret_env: HG_SECRET, ttl: 1h }\n";

/// One request, with `token` in the `Hop-Session` header when given: the
/// node that answered and the token the answer issued, if any.
async fn get(gw: &Gateway, token: Option<&str>) -> (String, Option<String>) {
    let mut req = client().get(gw.url("/"));
    if let Some(t) = token {
        req = req.header("hop-session", t);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let issued = r
        .headers()
        .get("hop-session")
        .map(|v| v.to_str().unwrap().to_owned());
    (json(r).await["node"].as_str().unwrap().to_owned(), issued)
}

/// `GET /admin/v1/sessions/{token}`: status and body.
async fn binding(gw: &Gateway, token: &str) -> (u16, serde_json::Value) {
    let r = client()
        .get(gw.admin_url(&format!("/admin/v1/sessions/{token}")))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn cookieless_requests_create_no_bindings_and_a_returned_token_binds_to_the_first_node() {
    let (_b, svc) = backends(3).await;
    let gw = session_gateway(&svc, SESSIONS, SECRET, &[]).await;
    let mut first = Vec::new();
    for _ in 0..30 {
        let (node, token) = get(&gw, None).await;
        let token = token.expect("a new session is given its token");
        assert_eq!(token.len(), HINTED_TOKEN_LEN, "the token names its node");
        first.push((node, token));
    }
    let m = gw.metrics().await;
    assert_eq!(
        metric(&m, "hopgate_sessions", &[]).unwrap(),
        0.0,
        "no binding yet"
    );
    assert_eq!(
        metric(&m, "hopgate_sessions_created_total", &[]).unwrap(),
        30.0
    );
    for (_, token) in first.iter().take(3) {
        assert_eq!(binding(&gw, token).await.0, 404);
    }
    // Every returning client lands on the node of its first answer, and is
    // bound there on its first return.
    for (node, token) in &first {
        for _ in 0..3 {
            let (again, issued) = get(&gw, Some(token)).await;
            assert_eq!(&again, node, "back to the first node");
            assert_eq!(issued, None, "a valid token is not re-issued");
        }
        let (status, v) = binding(&gw, token).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["bindings"][0]["node"], node.as_str(), "{v}");
        assert_eq!(v["bindings"][0]["hops"], 0, "{v}");
    }
    assert_eq!(
        metric(&gw.metrics().await, "hopgate_sessions", &[]).unwrap(),
        30.0
    );
    // A token of the format before hints (v1) still verifies; with no node
    // named, it is balanced and bound on the spot (its client came back).
    let keys = SessionKeys::from_secrets(SECRET.as_bytes(), &[]);
    let old = mint(
        &keys,
        SessionId::random(),
        hopgate_core::session::unix_now(),
    );
    let (node, issued) = get(&gw, Some(&old)).await;
    assert_eq!(issued, None);
    let (status, v) = binding(&gw, &old).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["bindings"][0]["node"], node.as_str());
}

#[tokio::test]
async fn a_token_naming_a_node_that_cannot_serve_hops_and_binds_elsewhere() {
    let (_b, svc) = backends(2).await;
    let gw = session_gateway(&svc, SESSIONS, SECRET, &[]).await;
    let (first, token) = get(&gw, None).await;
    let token = token.unwrap();
    let r = client()
        .post(gw.admin_url(&format!("/admin/v1/nodes/s/{first}/drain")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (then, _) = get(&gw, Some(&token)).await;
    assert_ne!(then, first, "the named node is draining (migrate)");
    let (status, v) = binding(&gw, &token).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["bindings"][0]["node"], then.as_str(), "{v}");
    assert_eq!(
        v["bindings"][0]["hops"], 1,
        "the move off the first node is a hop: {v}"
    );
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_hops_total{service=\"s\",reason=\"draining\"} 1"),
        "{m}"
    );
    // And it stays there.
    assert_eq!(get(&gw, Some(&token)).await.0, then);
}

#[tokio::test]
async fn a_full_store_evicts_the_least_recently_used_and_a_new_user_still_binds() {
    let (_b, svc) = backends(2).await;
    let gw = session_gateway(
        &svc,
        &format!("{SESSIONS}store: {{ max_sessions: 3 }}\n"),
        SECRET,
        &[],
    )
    .await;
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let (_, t) = get(&gw, None).await;
        let t = t.unwrap();
        get(&gw, Some(&t)).await;
        tokens.push(t);
    }
    let m = gw.metrics().await;
    assert_eq!(metric(&m, "hopgate_sessions", &[]).unwrap(), 3.0);
    assert_eq!(
        metric(&m, "hopgate_session_evictions_total", &[]).unwrap(),
        0.0
    );
    // A fourth user, in a full store.
    let (node, t) = get(&gw, None).await;
    let t = t.unwrap();
    assert_eq!(get(&gw, Some(&t)).await.0, node);
    let (status, v) = binding(&gw, &t).await;
    assert_eq!(status, 200, "the new user is bound: {v}");
    assert_eq!(v["bindings"][0]["node"], node.as_str());
    let m = gw.metrics().await;
    assert_eq!(metric(&m, "hopgate_sessions", &[]).unwrap(), 3.0);
    assert_eq!(
        metric(&m, "hopgate_session_evictions_total", &[]).unwrap(),
        1.0
    );
    let mut gone = 0;
    for old in &tokens {
        if binding(&gw, old).await.0 == 404 {
            gone += 1;
        }
    }
    assert_eq!(gone, 1, "exactly one old binding was evicted");
    assert!(
        gw.logs().contains("least recently used sessions evicted"),
        "the eviction is logged"
    );
}
