//! Services, their balancing, pools and nodes.

use super::*;

#[test]
fn service_names() {
    let named = |n: &str| {
        format!(
            "{LISTENER}services:\n  - name: \"{n}\"\n    nodes: [ {{ id: a, address: 127.0.0.1:8081 }} ]\nroutes: []\n"
        )
    };
    ok(&named("api.v2_internal-1"));
    only(&named(""), "services[0].name", "needs a name");
    only(
        &named("my api"),
        "services[0].name",
        "invalid service name \"my api\"",
    );
    only(&named("api/v1"), "services[0].name", "letters, digits");
    only(&named("ápi"), "services[0].name", "invalid service name");
    let dup = format!(
        "{LISTENER}services:\n  - {{ name: api, nodes: [ {{ id: a, address: 127.0.0.1:8081 }} ] }}\n  - {{ name: web, nodes: [ {{ id: a, address: 127.0.0.1:8081 }} ] }}\n  - {{ name: api, nodes: [ {{ id: a, address: 127.0.0.1:8082 }} ] }}\n{DEFAULT_ROUTE}"
    );
    only(
        &dup,
        "services[2].name",
        "duplicate service name \"api\" (also services[0])",
    );
}

#[test]
fn lb_policies() {
    for (name, lb) in [
        ("wrr_ring", LbPolicy::WrrRing),
        ("smooth_wrr", LbPolicy::SmoothWrr),
        ("random", LbPolicy::Random),
        ("p2c", LbPolicy::P2c),
    ] {
        assert_eq!(
            ok(&api_with(&format!("    lb: {name}\n"))).services[0].lb,
            lb
        );
    }
    only(
        &api_with("    lb: round_robin\n"),
        "services[0].lb",
        "unknown lb policy \"round_robin\"",
    );
    only(
        &api_with("    lb: smoth_wrr\n"),
        "services[0].lb",
        "(did you mean \"smooth_wrr\"?)",
    );
    only(
        &api_with("    lb: \"\"\n"),
        "services[0].lb",
        "expected one of wrr_ring, smooth_wrr",
    );
    only(
        &api_with("    lb: Random\n"),
        "services[0].lb",
        "did you mean \"random\"",
    );
}

#[test]
fn hash_on_is_required_exactly_when_lb_is_hash() {
    let c = ok(&api_with("    lb: hash\n    hash_on: { header: X-User }\n"));
    assert_eq!(c.services[0].lb, LbPolicy::Hash);
    assert_eq!(
        c.services[0].hash_on,
        Some(HashOn::Header(HeaderName::from_static("x-user")))
    );
    let c = ok(&api_with("    lb: hash\n    hash_on: { cookie: uid }\n"));
    assert_eq!(c.services[0].hash_on, Some(HashOn::Cookie("uid".into())));
    let c = ok(&api_with(
        "    lb: hash\n    hash_on: { source_ip: true }\n",
    ));
    assert_eq!(c.services[0].hash_on, Some(HashOn::SourceIp));
    let c = ok(&api_with(
        "    lb: hash\n    hash_on: { header: X-User, source_ip: false }\n",
    ));
    assert!(matches!(c.services[0].hash_on, Some(HashOn::Header(_))));

    only(
        &api_with("    lb: hash\n"),
        "services[0].hash_on",
        "required when lb is hash",
    );
    only(
        &api_with("    hash_on: { header: X-User }\n"),
        "services[0].hash_on",
        "only allowed when lb is hash (lb is \"smooth_wrr\")",
    );
    only(
        &api_with("    lb: p2c\n    hash_on: { source_ip: true }\n"),
        "services[0].hash_on",
        "(lb is \"p2c\")",
    );
    only(
        &api_with("    lb: hash\n    hash_on: {}\n"),
        "services[0].hash_on",
        "exactly one of header, cookie or source_ip: true (found 0)",
    );
    only(
        &api_with("    lb: hash\n    hash_on: { source_ip: false }\n"),
        "services[0].hash_on",
        "found 0",
    );
    only(
        &api_with("    lb: hash\n    hash_on: { header: X-User, cookie: u, source_ip: true }\n"),
        "services[0].hash_on",
        "found 3",
    );
    only(
        &api_with("    lb: hash\n    hash_on: { header: \"X User\" }\n"),
        "services[0].hash_on.header",
        "invalid header name \"X User\"",
    );
    only(
        &api_with("    lb: hash\n    hash_on: { header: \"\" }\n"),
        "services[0].hash_on.header",
        "must not be empty",
    );
    only(
        &api_with("    lb: hash\n    hash_on: { cookie: \"a b\" }\n"),
        "services[0].hash_on.cookie",
        "invalid cookie name \"a b\"",
    );
    only(
        &api_with("    lb: hash\n    hash_on: { cookie: \"\" }\n"),
        "services[0].hash_on.cookie",
        "invalid cookie name",
    );
    // An unknown lb is reported once; hash_on is not judged against it.
    only(
        &api_with("    lb: hsh\n    hash_on: { cookie: u }\n"),
        "services[0].lb",
        "did you mean \"hash\"",
    );
}

#[test]
fn protocols() {
    assert_eq!(
        ok(&api_with("    protocol: http1\n")).services[0].protocol,
        UpstreamProtocol::Http1
    );
    assert_eq!(
        ok(&api_with("    protocol: http2\n")).services[0].protocol,
        UpstreamProtocol::Http2
    );
    only(
        &api_with("    protocol: h2c\n"),
        "services[0].protocol",
        "unknown protocol \"h2c\": expected one of http1, http2",
    );
    only(
        &api_with("    protocol: HTTP2\n"),
        "services[0].protocol",
        "did you mean \"http2\"",
    );
}

#[test]
fn pool_settings() {
    let c = ok(&api_with("    pool: { max_idle: 0, idle_timeout: 5s }\n"));
    assert_eq!(
        c.services[0].pool,
        PoolConfig {
            max_idle: 0,
            idle_timeout: Duration::from_secs(5),
            limits: Default::default(),
        }
    );
    assert_eq!(
        ok(&api_with("    pool: { max_idle: 10000 }\n")).services[0]
            .pool
            .max_idle,
        10_000
    );
    assert_eq!(
        ok(&api_with("    pool: { max_idle: \"12\" }\n")).services[0]
            .pool
            .max_idle,
        12
    );
    // idle_timeout defaults to timeouts.idle, whatever that is.
    let doc = format!(
        "{}timeouts: {{ idle: 90s }}\n",
        api_with("    pool: { max_idle: 3 }\n")
    );
    assert_eq!(
        ok(&doc).services[0].pool.idle_timeout,
        Duration::from_secs(90)
    );
    only(
        &api_with("    pool: { max_idle: 10001 }\n"),
        "services[0].pool.max_idle",
        "\"10001\" is out of range: expected an integer from 0 to 10000",
    );
    only(
        &api_with("    pool: { max_idle: -1 }\n"),
        "services[0].pool.max_idle",
        "out of range",
    );
    only(
        &api_with("    pool: { max_idle: 2.5 }\n"),
        "services[0].pool.max_idle",
        "\"2.5\" is not an integer",
    );
    only(
        &api_with("    pool: { max_idle: true }\n"),
        "services[0].pool.max_idle",
        "not an integer",
    );
    only(
        &api_with("    pool: { idle_timeout: 0s }\n"),
        "services[0].pool.idle_timeout",
        "must be greater than 0",
    );
    only(
        &api_with("    pool: { idle_timeout: 30 }\n"),
        "services[0].pool.idle_timeout",
        "needs a unit",
    );
}

#[test]
fn a_service_needs_nodes() {
    only(
        &with_services("  - name: api\n    nodes: []\n"),
        "services[0].nodes",
        "at least one node",
    );
    only(
        &with_services("  - name: api\n"),
        "services[0].nodes",
        "at least one node",
    );
}

#[test]
fn node_ids() {
    let two = |a: &str, b: &str| {
        with_services(&format!(
            "  - name: api\n    nodes:\n      - {{ id: \"{a}\", address: 127.0.0.1:8081 }}\n      - {{ id: \"{b}\", address: 127.0.0.1:8082 }}\n"
        ))
    };
    ok(&two("a", "b"));
    only(&two("a", ""), "services[0].nodes[1].id", "needs an id");
    only(
        &two("a", "a"),
        "services[0].nodes[1].id",
        "duplicate node id \"a\" (also nodes[0])",
    );
    only(
        &two("a/b", "b"),
        "services[0].nodes[0].id",
        "must not contain whitespace, '/'",
    );
    only(
        &two("a b", "b"),
        "services[0].nodes[0].id",
        "invalid node id \"a b\"",
    );
    // Node ids are unique within a service only.
    let doc = format!(
        "{LISTENER}services:\n  - {{ name: api, nodes: [ {{ id: n, address: 127.0.0.1:8081 }} ] }}\n  - {{ name: web, nodes: [ {{ id: n, address: 127.0.0.1:8082 }} ] }}\n{DEFAULT_ROUTE}"
    );
    ok(&doc);
}

fn node_at(addr: &str) -> String {
    node(&format!("{{ id: a, address: \"{addr}\" }}"))
}

#[test]
fn node_addresses() {
    let good = [
        ("127.0.0.1:8081", "127.0.0.1:8081"),
        ("localhost:8081", "127.0.0.1:8081"),
        ("http://127.0.0.1:8081", "127.0.0.1:8081"),
        ("HTTP://127.0.0.1:8081", "127.0.0.1:8081"),
        ("http://localhost:8081", "127.0.0.1:8081"),
        ("http://127.0.0.1:8081/", "127.0.0.1:8081"),
        ("[::1]:8081", "[::1]:8081"),
        ("http://[::1]:8081", "[::1]:8081"),
        ("10.1.2.3:80", "10.1.2.3:80"),
    ];
    for (addr, want) in good {
        let c = ok(&node_at(addr));
        assert_eq!(
            c.services[0].nodes[0].address,
            want.parse().unwrap(),
            "{addr}"
        );
    }
    let p = "services[0].nodes[0].address";
    let bad = [
        ("", "required"),
        ("https://127.0.0.1:8443", "https:// is not a node address"),
        ("HTTPS://127.0.0.1:8443", "https:// is not a node address"),
        ("ftp://127.0.0.1:21", "unsupported scheme \"ftp\""),
        ("http://127.0.0.1:8081/api", "URL path \"/api\""),
        ("127.0.0.1:8081/api", "URL path"),
        ("http://127.0.0.1:8081?x=1", "URL path \"?x=1\""),
        ("http://user@127.0.0.1:8081", "user info"),
        ("127.0.0.1", "needs a port"),
        ("localhost", "needs a port"),
        ("api.internal", "needs a port"),
        ("http://127.0.0.1", "needs a port"),
        (
            "api.internal:8080",
            "only IP addresses and localhost are accepted",
        ),
        (
            "http://backend:8080",
            "only IP addresses and localhost are accepted",
        ),
        ("127.0.0.1:0", "port 0"),
        ("0.0.0.0:8081", "unspecified"),
        ("127.0.0.1:70000", "invalid port \"70000\""),
        ("::1", "[address]:port"),
        ("http://", "needs a port"),
    ];
    for (addr, needle) in bad {
        only(&node_at(addr), p, needle);
    }
}

#[test]
fn node_weights() {
    let c = ok(&node("{ id: a, address: 127.0.0.1:8081, weight: 1 }"));
    assert_eq!(c.services[0].nodes[0].weight, 1);
    let c = ok(&node("{ id: a, address: 127.0.0.1:8081, weight: 10000 }"));
    assert_eq!(c.services[0].nodes[0].weight, 10_000);
    let c = ok(&node("{ id: a, address: 127.0.0.1:8081, weight: \"7\" }"));
    assert_eq!(c.services[0].nodes[0].weight, 7);
    let p = "services[0].nodes[0].weight";
    only(
        &node("{ id: a, address: 127.0.0.1:8081, weight: 0 }"),
        p,
        "\"0\" is out of range: expected an integer from 1 to 10000",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, weight: 10001 }"),
        p,
        "out of range",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, weight: -5 }"),
        p,
        "out of range",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, weight: 99999999999999999999 }"),
        p,
        "",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, weight: heavy }"),
        p,
        "\"heavy\" is not an integer",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, weight: 1.5 }"),
        p,
        "not an integer",
    );
}

#[test]
fn node_version_and_zone() {
    let c = ok(&node(
        "{ id: a, address: 127.0.0.1:8081, version: v1.2, zone: eu-1 }",
    ));
    assert_eq!(c.services[0].nodes[0].version, "v1.2");
    assert_eq!(c.services[0].nodes[0].zone.as_deref(), Some("eu-1"));
    only(
        &node("{ id: a, address: 127.0.0.1:8081, version: \"\" }"),
        "services[0].nodes[0].version",
        "must not be empty",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, version: \"v 1\" }"),
        "services[0].nodes[0].version",
        "invalid version \"v 1\"",
    );
    only(
        &node("{ id: a, address: 127.0.0.1:8081, zone: \"\" }"),
        "services[0].nodes[0].zone",
        "must not be empty",
    );
    ok(&node(
        "{ id: a, address: 127.0.0.1:8081, labels: { rack: r1 } }",
    ));
    only(
        &node("{ id: a, address: 127.0.0.1:8081, labels: { \"\": r1 } }"),
        "services[0].nodes[0].labels",
        "must not be empty",
    );
}
