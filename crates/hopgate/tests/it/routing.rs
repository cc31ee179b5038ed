//! Routing through a real gateway: every match dimension, precedence,
//! canary splits, version fallback and strict_version.

use crate::harness::{client, config, json, service, Backend, Gateway};

async fn rule_for(
    gw: &Gateway,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> String {
    let mut req = client()
        .request(method.parse().unwrap(), gw.url(path))
        .header("host", host);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{method} {host}{path}");
    let rule = resp
        .headers()
        .get("x-route-rule-id")
        .expect("debug_headers returns the rule id")
        .to_str()
        .unwrap()
        .to_owned();
    // The backend saw the same rule id.
    let body = json(resp).await;
    assert_eq!(body["route"], rule.as_str());
    rule
}

#[tokio::test]
async fn every_match_dimension_and_precedence() {
    let b = Backend::start("n1").await;
    let svc = service("app", &[("n1", b.addr, "v1")]);
    let routes = r#"
  - { id: r-exact-host, match: { host: api.example.com, path_prefix: / }, service: app }
  - { id: r-host-path, match: { host: api.example.com, path_prefix: /v2 }, service: app }
  - { id: r-wild, match: { host: "*.example.com" }, service: app }
  - { id: r-wild-deep, match: { host: "*.deep.example.com" }, service: app }
  - { id: r-exact-path, match: { path: /exact }, service: app }
  - { id: r-regex, match: { path_regex: "^/v[0-9]+/items$" }, service: app }
  - { id: r-methods, match: { path_prefix: /m, methods: [POST, PUT] }, service: app }
  - { id: r-header, match: { path_prefix: /h, headers: { X-Canary: "1" } }, service: app }
  - { id: r-query, match: { path_prefix: /q, query: { beta: "true" } }, service: app }
  - { id: r-cidr-other, priority: 50, match: { path_prefix: /c, source_cidrs: [10.0.0.0/8] }, service: app }
  - { id: r-cidr-local, match: { path_prefix: /c, source_cidrs: [127.0.0.0/8, "::1/128"] }, service: app }
  - { id: r-prio-low, priority: 1, match: { path_prefix: /p }, service: app }
  - { id: r-prio-high, priority: 10, match: { path_prefix: /p }, service: app }
  - { id: r-tie-a, priority: 5, match: { path_prefix: /t }, service: app }
  - { id: r-tie-b, priority: 5, match: { path_prefix: /t }, service: app }
  - { id: r-long, priority: 5, match: { path_prefix: /tl }, service: app }
  - { id: r-disabled, priority: 100, enabled: false, match: { path_prefix: /d }, service: app }
  - { id: r-d, match: { path_prefix: /d }, service: app }
  - { id: r-fallback, match: { path_prefix: / }, service: app }
"#;
    let gw = Gateway::start(&config(&svc, routes)).await;
    type Case<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("GET", "api.example.com", "/", &[], "r-exact-host"),
        ("GET", "API.Example.COM:8080", "/x", &[], "r-exact-host"),
        ("GET", "api.example.com", "/v2/users", &[], "r-host-path"),
        // the exact-host tier wins over host-less rules, even a more specific path
        ("GET", "api.example.com", "/exact", &[], "r-exact-host"),
        ("GET", "x.example.com", "/", &[], "r-wild"),
        ("GET", "a.b.example.com", "/", &[], "r-wild"),
        ("GET", "x.deep.example.com", "/", &[], "r-wild-deep"),
        ("GET", "example.com", "/", &[], "r-fallback"),
        ("GET", "localhost", "/exact", &[], "r-exact-path"),
        ("GET", "localhost", "/exactly", &[], "r-fallback"),
        ("GET", "localhost", "/v1/items", &[], "r-regex"),
        ("GET", "localhost", "/v12/items", &[], "r-regex"),
        ("GET", "localhost", "/v1/items/x", &[], "r-fallback"),
        ("POST", "localhost", "/m", &[], "r-methods"),
        ("PUT", "localhost", "/m", &[], "r-methods"),
        ("GET", "localhost", "/m", &[], "r-fallback"),
        ("GET", "localhost", "/h", &[("x-canary", "1")], "r-header"),
        ("GET", "localhost", "/h", &[("x-canary", "0")], "r-fallback"),
        ("GET", "localhost", "/h", &[], "r-fallback"),
        ("GET", "localhost", "/q?beta=true", &[], "r-query"),
        ("GET", "localhost", "/q?x=1&beta=true", &[], "r-query"),
        ("GET", "localhost", "/q?beta=false", &[], "r-fallback"),
        ("GET", "localhost", "/q", &[], "r-fallback"),
        ("GET", "localhost", "/c", &[], "r-cidr-local"),
        ("GET", "localhost", "/p", &[], "r-prio-high"),
        ("GET", "localhost", "/t", &[], "r-tie-a"),
        ("GET", "localhost", "/tl", &[], "r-long"),
        ("GET", "localhost", "/d", &[], "r-d"),
    ];
    for (method, host, path, headers, want) in cases {
        let got = rule_for(&gw, method, host, path, headers).await;
        assert_eq!(&got, want, "{method} {host}{path} {headers:?}");
    }
}

#[tokio::test]
async fn canary_split_follows_weights() {
    let v1 = Backend::start("v1-node").await;
    let v2 = Backend::start("v2-node").await;
    let svc = service(
        "canary",
        &[("v1-node", v1.addr, "v1"), ("v2-node", v2.addr, "v2")],
    );
    let routes = r#"
  - id: split
    match: { path_prefix: / }
    service: canary
    split: [ { version: v1, weight: 80 }, { version: v2, weight: 20 } ]
"#;
    let gw = Gateway::start(&config(&svc, routes)).await;
    let c = client();
    let n = 1000;
    let mut v2_count = 0;
    for _ in 0..n {
        let body = json(c.get(gw.url("/split")).send().await.unwrap()).await;
        if body["node"] == "v2-node" {
            v2_count += 1;
        }
    }
    // Expected 200, sd ≈ 12.6: a fair 80/20 split lands within ±70 with
    // overwhelming probability; a broken split (50/50, 0/100) does not.
    assert!((130..=270).contains(&v2_count), "v2 got {v2_count} of {n}");
}

#[tokio::test]
async fn version_fallback_and_strict_version() {
    let v1 = Backend::start("v1-node").await;
    let v2 = Backend::start("v2-node").await;
    let svc = service(
        "svc",
        &[("v1-node", v1.addr, "v1"), ("v2-node", v2.addr, "v2")],
    );
    let routes = r#"
  - { id: strict, match: { path_prefix: /strict }, service: svc, version: v2, strict_version: true }
  - { id: loose, match: { path_prefix: / }, service: svc, version: v2 }
"#;
    let gw = Gateway::start(&config(&svc, routes)).await;
    let c = client();
    for path in ["/loose", "/strict"] {
        let body = json(c.get(gw.url(path)).send().await.unwrap()).await;
        assert_eq!(
            body["node"], "v2-node",
            "{path} goes to v2 while it is live"
        );
    }
    // Take the only v2 node out of rotation.
    let r = c
        .post(gw.admin_url("/admin/v1/nodes/svc/v2-node/drain"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for _ in 0..5 {
        let body = json(c.get(gw.url("/loose")).send().await.unwrap()).await;
        assert_eq!(body["node"], "v1-node", "falls back to the other version");
        let r = c.get(gw.url("/strict")).send().await.unwrap();
        assert_eq!(r.status(), 503, "strict_version never falls back");
        let text = r.text().await.unwrap();
        assert!(text.contains("no live node"), "{text}");
    }
    assert!(
        gw.logs().contains("falling back"),
        "a fallback is logged as a warning"
    );
    c.post(gw.admin_url("/admin/v1/nodes/svc/v2-node/undrain"))
        .send()
        .await
        .unwrap();
    let body = json(c.get(gw.url("/strict")).send().await.unwrap()).await;
    assert_eq!(body["node"], "v2-node");
}

#[tokio::test]
async fn round_robin_spreads_over_nodes() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let svc = service("svc", &[("a", a.addr, ""), ("b", b.addr, "")]);
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: svc }",
    ))
    .await;
    let c = client();
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let body = json(c.get(gw.url("/")).send().await.unwrap()).await;
        *seen
            .entry(body["node"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    assert_eq!(seen.get("a"), Some(&10), "{seen:?}");
    assert_eq!(seen.get("b"), Some(&10), "{seen:?}");
}

/// A dual-stack listener (`[::]`) sees IPv4 clients as `::ffff:a.b.c.d`:
/// IPv4 rules must still hold for them, and the backend must see the IPv4
/// address in `X-Forwarded-For`.
#[tokio::test]
async fn ipv4_clients_of_a_dual_stack_listener_meet_ipv4_rules() {
    if std::net::TcpListener::bind("[::]:0").is_err() {
        eprintln!("no IPv6 on this machine; skipping");
        return;
    }
    let b = Backend::start("n1").await;
    let svc = service("app", &[("n1", b.addr, "v1")]);
    let routes = r#"
  - { id: r-local4, priority: 10, match: { path_prefix: /c, source_cidrs: [127.0.0.0/8] }, service: app }
  - { id: r-any, match: { path_prefix: / }, service: app }
"#;
    let yaml =
        config(&svc, routes).replace("address: 127.0.0.1:0, debug", "address: \"[::]:0\", debug");
    let gw = Gateway::start(&yaml).await;
    let url = format!("http://127.0.0.1:{}/c", gw.addr.port());
    let resp = client().get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["x-route-rule-id"],
        "r-local4",
        "an IPv4 client matched no IPv4 source_cidrs rule"
    );
    let body = json(resp).await;
    assert_eq!(body["forwarded_for"], "127.0.0.1");

    // deny_cidrs written for IPv4 keep an IPv4 client out.
    let denied = yaml.replace(
        "\nservices:",
        "\naccess: { deny_cidrs: [127.0.0.0/8] }\nservices:",
    );
    gw.rewrite_config(&denied);
    let mut status = 0;
    for _ in 0..100 {
        status = client().get(&url).send().await.unwrap().status().as_u16();
        if status == 403 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        status, 403,
        "an IPv4 client bypassed deny_cidrs on a dual-stack listener"
    );
}
