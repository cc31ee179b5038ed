//! The admin API: config read/apply with every error named by path,
//! versions, rollback, node listing, drain/undrain, health endpoints.

use crate::harness::{client, config, json, service, Backend, Gateway};

#[tokio::test]
async fn apply_reject_version_and_rollback() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let services = format!(
        "{}{}",
        service("sa", &[("a", a.addr, "")]),
        service("sb", &[("b", b.addr, "")])
    );
    let to_a = config(
        &services,
        "  - { id: r, match: { path_prefix: / }, service: sa }",
    );
    let to_b = config(
        &services,
        "  - { id: r, match: { path_prefix: / }, service: sb }",
    );
    let gw = Gateway::start(&to_a).await;
    let c = client();
    let node = |gw: &Gateway| {
        let c = c.clone();
        let url = gw.url("/");
        async move {
            json(c.get(url).send().await.unwrap()).await["node"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    assert_eq!(node(&gw).await, "a");

    // Apply a new config (YAML body).
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(to_b.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["version"], 2);
    assert_eq!(v["changed"], true);
    assert_eq!(node(&gw).await, "b");

    // Identical re-apply: no new version.
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(to_b.clone())
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["version"], 2);
    assert_eq!(v["changed"], false);

    // A broken config: 400, every error with its path, the old config serves.
    let broken = to_b
        .replace("service: sb", "service: sbb")
        .replace("address: 127.0.0.1:0, debug", "address: nowhere, debug");
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(broken)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: serde_json::Value = r.json().await.unwrap();
    let paths: Vec<&str> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"routes[0].service"), "{v}");
    assert!(paths.contains(&"listeners[0].address"), "{v}");
    assert_eq!(node(&gw).await, "b");
    let versions: serde_json::Value = gw.admin_json("/admin/v1/config/versions").await;
    assert_eq!(versions["current"], 2);
    assert_eq!(versions["reload_failures"], 1);
    assert_eq!(
        versions["last_error"]["errors"].as_array().unwrap().len(),
        paths.len()
    );
    assert_eq!(versions["versions"].as_array().unwrap().len(), 2);

    // JSON is accepted too.
    let cfg: serde_json::Value = gw.admin_json("/admin/v1/config").await;
    assert_eq!(cfg["version"], 2);
    let mut doc = cfg["config"].clone();
    doc["routes"][0]["id"] = "renamed".into();
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .header("content-type", "application/json")
        .body(doc.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["version"], 3);

    // Rollback to version 1 restores its routing.
    let r = c
        .post(gw.admin_url("/admin/v1/config/rollback/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(node(&gw).await, "a");
    let r = c
        .post(gw.admin_url("/admin/v1/config/rollback/99"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn nodes_health_and_unknown_paths() {
    let a = Backend::start("a").await;
    let gw = Gateway::start(&config(
        &service("s", &[("a", a.addr, "v1")]),
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ))
    .await;
    let c = client();
    assert_eq!(
        c.get(gw.admin_url("/livez")).send().await.unwrap().status(),
        200
    );
    assert_eq!(
        c.get(gw.admin_url("/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    c.get(gw.url("/")).send().await.unwrap();
    let v: serde_json::Value = gw.admin_json("/admin/v1/nodes").await;
    let n = &v["nodes"][0];
    assert_eq!(n["id"], "a");
    assert_eq!(n["service"], "s");
    assert_eq!(n["version"], "v1");
    assert_eq!(n["requests"], 1);
    assert_eq!(n["draining"], false);
    assert_eq!(n["pool"]["dialed"], 1);
    let r = c
        .post(gw.admin_url("/admin/v1/nodes/s/nope/drain"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["errors"][0]["path"], "node");
    assert_eq!(
        c.get(gw.admin_url("/nope")).send().await.unwrap().status(),
        404
    );
    // An unknown path under /admin is a 404 too, not a 405.
    for unknown in ["/admin/v1/nope", "/admin/v2/nodes", "/admin"] {
        let r = c.get(gw.admin_url(unknown)).send().await.unwrap();
        assert_eq!(r.status(), 404, "{unknown}");
    }
    // A known path with the wrong method is a 405 that names what is allowed.
    for (method, path, allow) in [
        (reqwest::Method::DELETE, "/admin/v1/config", "GET, PUT"),
        (reqwest::Method::GET, "/admin/v1/maintenance", "POST"),
        (reqwest::Method::POST, "/metrics", "GET"),
        (reqwest::Method::GET, "/admin/v1/nodes/s/a/drain", "POST"),
    ] {
        let r = c
            .request(method.clone(), gw.admin_url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method} {path}");
        assert_eq!(r.headers()["allow"], allow, "{method} {path}");
    }
}

#[tokio::test]
async fn admin_token_is_enforced() {
    let a = Backend::start("a").await;
    let yaml = config(
        &service("s", &[("a", a.addr, "")]),
        "  - { id: r, match: { path_prefix: / }, service: s }",
    )
    .replace(
        "admin: { address: 127.0.0.1:0 }",
        "admin: { address: 127.0.0.1:0, token_env: HG_TEST_TOKEN }",
    );
    let gw = Gateway::start_with_env(&yaml, &[("HG_TEST_TOKEN", "s3cret")]).await;
    let c = client();
    assert_eq!(
        c.get(gw.admin_url("/admin/v1/nodes"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let r = c
        .get(gw.admin_url("/admin/v1/nodes"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["www-authenticate"],
        "Bearer realm=\"hopgate-admin\""
    );
    let r = c
        .get(gw.admin_url("/admin/v1/nodes"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = c
        .get(gw.admin_url("/admin/v1/nodes"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The probes answer without it (a kubelet cannot send one); the
    // metrics and the rest of the API still need it.
    for (path, status) in [("/livez", 200), ("/readyz", 200), ("/metrics", 401)] {
        let r = c.get(gw.admin_url(path)).send().await.unwrap();
        assert_eq!(r.status(), status, "{path} without the token");
    }
    let r = c.post(gw.admin_url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 401, "only GET is open");
    assert!(
        !gw.logs().contains("s3cret"),
        "the token never appears in logs"
    );
}
