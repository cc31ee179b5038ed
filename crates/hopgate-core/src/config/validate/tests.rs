use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;

use super::edge::DEFAULT_ADMIN;
use super::routes::compile_regex;
use super::values::{closest, edit_distance};
use super::*;
use crate::config::raw::{
    RawAccess, RawAdmin, RawHashOn, RawLimits, RawListener, RawMatch, RawNode, RawPool, RawRoute,
    RawService, RawSplit, RawTimeouts, Text,
};
use crate::config::raw::{RawCircuit, RawHealth, RawOutlier, RawRetries};
use crate::config::{load, Format, EMBEDDED_DEFAULT};
use crate::config::{
    AdminConfig, HashOn, LbPolicy, Limits, PoolConfig, Target, Timeouts, UpstreamProtocol,
    DEFAULT_POOL_MAX_IDLE, DEFAULT_WEIGHT,
};
use crate::route::{HostMatch, PathMatch};

const LISTENER: &str = "listeners:\n  - name: public\n    address: 127.0.0.1:8080\n";

const API: &str = "services:
  - name: api
    nodes:
      - { id: api-1, address: 127.0.0.1:8081, version: v1 }
      - { id: api-2, address: 127.0.0.1:8082, version: v2 }
";

const DEFAULT_ROUTE: &str = "routes:\n  - id: default\n    service: api\n";

fn check(doc: &str) -> Result<Config, Vec<ConfigError>> {
    load(doc, Format::Yaml)
}

fn ok(doc: &str) -> Config {
    match check(doc) {
        Ok(c) => c,
        Err(errors) => panic!("expected a valid config, got {}", render(&errors)),
    }
}

fn errors(doc: &str) -> Vec<ConfigError> {
    match check(doc) {
        Ok(_) => panic!("expected errors, the config validated:\n{doc}"),
        Err(errors) => errors,
    }
}

fn render(errors: &[ConfigError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The one error of `doc`, which must be at `path` and whose message must
/// contain `needle`.
fn only(doc: &str, path: &str, needle: &str) {
    let errs = errors(doc);
    assert_eq!(
        errs.len(),
        1,
        "expected one error at {path}, got:\n{}",
        render(&errs)
    );
    assert_eq!(errs[0].path, path, "wrong path: {}", errs[0]);
    assert!(
        errs[0].message.contains(needle),
        "message of {} should contain {needle:?}",
        errs[0]
    );
}

/// A document whose routes section is `routes` (the `api` service has v1 and v2).
fn with_routes(routes: &str) -> String {
    format!("{LISTENER}{API}routes:\n{routes}")
}

/// A document whose services section is `services`; one route to `api`.
fn with_services(services: &str) -> String {
    format!("{LISTENER}services:\n{services}{DEFAULT_ROUTE}")
}

/// A single-node `api` service with extra service-level `fields`.
fn api_with(fields: &str) -> String {
    with_services(&format!(
        "  - name: api\n{fields}    nodes:\n      - {{ id: a, address: 127.0.0.1:8081 }}\n"
    ))
}

/// The `api` service with one node given by its flow-mapping `node`.
fn node(node: &str) -> String {
    with_services(&format!("  - name: api\n    nodes:\n      - {node}\n"))
}

/// A valid document plus a top-level section.
fn with_top(section: &str) -> String {
    format!("{LISTENER}{API}{DEFAULT_ROUTE}{section}")
}

/// A route `r` to `api` with the given match mapping.
fn matching(m: &str) -> String {
    with_routes(&format!("  - id: r\n    service: api\n    match: {m}\n"))
}

// ----- the embedded default, defaults, the typed output -----

#[test]
fn embedded_default_validates() {
    let c = ok(EMBEDDED_DEFAULT);
    assert_eq!(c.listeners.len(), 1);
    assert_eq!(c.listeners[0].name, "public");
    assert_eq!(c.listeners[0].address, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(c.admin.address, "127.0.0.1:9901".parse().unwrap());
    assert_eq!(c.services[0].name, "demo");
    assert_eq!(c.services[0].nodes.len(), 2);
    assert_eq!(c.routes[0].service, 0);
}

#[test]
fn absent_values_take_their_defaults() {
    let c = ok(&format!(
        "{LISTENER}services:\n  - name: api\n    nodes:\n      - {{ id: a, address: 127.0.0.1:8081 }}\n{DEFAULT_ROUTE}"
    ));
    assert_eq!(
        c.admin,
        AdminConfig {
            address: DEFAULT_ADMIN,
            token_env: None
        }
    );
    assert!(!c.listeners[0].debug_headers);
    assert!(
        c.listeners[0].normalize_path,
        "normalize_path defaults to on"
    );
    let s = &c.services[0];
    assert_eq!(s.lb, LbPolicy::SmoothWrr);
    assert_eq!(s.hash_on, None);
    assert_eq!(s.protocol, UpstreamProtocol::Http1);
    assert_eq!(
        s.pool,
        PoolConfig {
            max_idle: DEFAULT_POOL_MAX_IDLE,
            idle_timeout: Timeouts::default().idle,
            limits: Default::default(),
        }
    );
    let n = &s.nodes[0];
    assert_eq!(n.version, "");
    assert_eq!(n.weight, DEFAULT_WEIGHT);
    assert_eq!(n.zone, None);
    let r = &c.routes[0];
    assert_eq!(r.priority, 0);
    assert!(r.enabled);
    assert!(!r.strict_version);
    assert_eq!(r.target, Target::Service);
    assert_eq!(r.matcher.host, HostMatch::Any);
    assert_eq!(r.matcher.path, PathMatch::Prefix("/".into()));
    assert!(r.matcher.methods.is_empty() && r.matcher.headers.is_empty());
    assert!(r.matcher.query.is_empty() && r.matcher.source_cidrs.is_empty());
    assert!(c.access.allow.is_empty() && c.access.deny.is_empty());
    assert!(c.access.trusted_proxies.is_empty());
    assert_eq!(c.timeouts, Timeouts::default());
    assert_eq!(c.limits, Limits::default());
}

#[test]
fn the_raw_document_is_kept() {
    let raw = crate::config::parse(EMBEDDED_DEFAULT, Format::Yaml).unwrap();
    let c = validate(&raw).unwrap();
    assert_eq!(c.raw, raw);
}

#[test]
fn json_documents_validate_the_same_way() {
    let doc = r#"{"listeners":[{"name":"p","address":"127.0.0.1:8080"}],
        "services":[{"name":"api","nodes":[{"id":"a","address":"127.0.0.1:8081","weight":5}]}],
        "routes":[{"id":"r","service":"apii","priority":7}]}"#;
    let errs = load(doc, Format::Json).unwrap_err();
    assert_eq!(
        render(&errs),
        r#"routes[0].service: unknown service "apii" (did you mean "api"?)"#
    );
}

#[test]
fn an_empty_raw_config_reports_missing_listeners_only() {
    let errs = validate(&RawConfig::default()).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].path, "listeners");
}

// ----- every error at once, with exact paths -----

#[test]
fn every_error_is_reported_at_once_with_its_exact_path() {
    let doc = r#"
listeners:
  - name: ""
    address: 127.0.0.1
  - name: b
    address: 127.0.0.1:8080
admin:
  address: 10.1.2.3:9901
services:
  - name: api
    lb: hash
    pool: { max_idle: lots, idle_timeout: 5 }
    nodes:
      - { id: n1, address: "https://10.0.0.1:443", weight: 0 }
      - { id: n1, address: 127.0.0.1:8082, version: v1 }
  - name: web
    nodes: []
routes:
  - id: a
    priority: "1.5"
    match:
      host: "a.*.com"
      path: /x
      path_regex: "("
      methods: [GET, "B@D"]
      headers: { "bad header": "1" }
      source_cidrs: [10.0.0.0/8, 10.0.0/8, "::1", nope]
    service: apii
  - id: a
    service: api
    version: v9
    strict_version: true
  - id: c
    service: web
    split: [ { version: v1, weight: 0 } ]
access:
  allow_cidrs: [1.2.3.4/40]
  trusted_proxies: [127.0.0.1, x]
timeouts: { connect: 1, request: 0ms, shutdown: soon }
limits: { max_header_bytes: 2MiB, max_headers: 0, max_uri_bytes: 100, max_body_bytes: 0, max_connections: 1e9 }
"#;
    let errs = errors(doc);
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "listeners[0].name",
            "listeners[0].address",
            "admin.token_env",
            "services[0].hash_on",
            "services[0].pool.max_idle",
            "services[0].pool.idle_timeout",
            "services[0].nodes[0].address",
            "services[0].nodes[0].weight",
            "services[0].nodes[1].id",
            "services[1].nodes",
            "routes[0].priority",
            "routes[0].match.host",
            "routes[0].match",
            "routes[0].match.path_regex",
            "routes[0].match.methods[1]",
            "routes[0].match.headers.bad header",
            "routes[0].match.source_cidrs[1]",
            "routes[0].match.source_cidrs[3]",
            "routes[0].service",
            "routes[1].id",
            "routes[1].version",
            "routes[2].split[0].version",
            "routes[2].split",
            "access.allow_cidrs[0]",
            "access.trusted_proxies[1]",
            "timeouts.connect",
            "timeouts.request",
            "timeouts.shutdown",
            "limits.max_header_bytes",
            "limits.max_headers",
            "limits.max_uri_bytes",
            "limits.max_body_bytes",
            "limits.max_connections",
        ],
        "got:\n{}",
        render(&errs)
    );
}

#[test]
fn messages_quote_the_bad_value() {
    let doc = with_top("timeouts: { connect: 10 }\nlimits: { max_headers: \"many\" }\n");
    let errs = errors(&doc);
    assert_eq!(
        render(&errs),
        "timeouts.connect: duration \"10\" needs a unit (ms, s, m, h), like \"2s\"\n\
         limits.max_headers: \"many\" is not an integer: expected an integer from 1 to 10000"
    );
}

// ----- listeners and admin -----

#[test]
fn at_least_one_listener() {
    only(
        &format!("listeners: []\n{API}{DEFAULT_ROUTE}"),
        "listeners",
        "at least one",
    );
    only(
        &format!("{API}{DEFAULT_ROUTE}"),
        "listeners",
        "at least one",
    );
}

#[test]
fn listener_names_are_required_and_unique() {
    let two = |a: &str, b: &str| {
        format!(
            "listeners:\n  - {{ name: {a}, address: 127.0.0.1:8080 }}\n  - {{ name: {b}, address: 127.0.0.1:8088 }}\n{API}{DEFAULT_ROUTE}"
        )
    };
    only(&two("a", "\"\""), "listeners[1].name", "needs a name");
    only(
        &two("a", "a"),
        "listeners[1].name",
        "duplicate listener name \"a\" (also listeners[0])",
    );
    ok(&two("a", "b"));
}

fn listener_at(addr: &str) -> String {
    format!("listeners:\n  - {{ name: p, address: \"{addr}\" }}\n{API}{DEFAULT_ROUTE}")
}

#[test]
fn listener_addresses_parse() {
    let c = ok(&listener_at("localhost:8080"));
    assert_eq!(c.listeners[0].address, "127.0.0.1:8080".parse().unwrap());
    let c = ok(&listener_at("LocalHost:8080"));
    assert_eq!(c.listeners[0].address, "127.0.0.1:8080".parse().unwrap());
    let c = ok(&listener_at("[::1]:8080"));
    assert_eq!(c.listeners[0].address, "[::1]:8080".parse().unwrap());
    ok(&listener_at("0.0.0.0:80"));
    ok(&listener_at("127.0.0.1:0"));
    let bad = [
        ("", "required"),
        ("127.0.0.1", "needs a port"),
        ("localhost", "needs a port"),
        (
            "8080",
            "a bare port: write the IP too, like \"127.0.0.1:8080\"",
        ),
        (":8080", "has no host"),
        ("127.0.0.1:", "invalid port \"\""),
        ("127.0.0.1:65536", "invalid port \"65536\""),
        ("127.0.0.1:+80", "invalid port"),
        ("example.com:80", "only IP addresses and localhost"),
        ("::1", "write IPv6 as [address]:port"),
        ("[::1]", "needs a port"),
        ("[::1:8080", "missing \"]\""),
        ("[127.0.0.1]:80", "not an IPv6 address"),
        ("1:2:3", "expected ip:port"),
        ("http://127.0.0.1:8080", "has no scheme"),
    ];
    for (addr, needle) in bad {
        only(&listener_at(addr), "listeners[0].address", needle);
    }
}

#[test]
fn listeners_never_share_an_address() {
    let two = |a: &str, b: &str| {
        format!(
            "listeners:\n  - {{ name: a, address: \"{a}\" }}\n  - {{ name: b, address: \"{b}\" }}\n{API}{DEFAULT_ROUTE}"
        )
    };
    only(
        &two("127.0.0.1:8080", "localhost:8080"),
        "listeners[1].address",
        "conflicts with listeners[0].address",
    );
    only(
        &two("127.0.0.1:8080", "0.0.0.0:8080"),
        "listeners[1].address",
        "conflicts",
    );
    only(
        &two("0.0.0.0:8080", "10.0.0.1:8080"),
        "listeners[1].address",
        "conflicts",
    );
    only(
        &two("[::]:8080", "[::1]:8080"),
        "listeners[1].address",
        "conflicts",
    );
    ok(&two("127.0.0.1:8080", "127.0.0.1:8081"));
    ok(&two("127.0.0.1:8080", "127.0.0.2:8080"));
    ok(&two("0.0.0.0:8080", "[::1]:8080"));
    // Ephemeral ports never clash.
    ok(&two("127.0.0.1:0", "127.0.0.1:0"));
}

fn admin(section: &str) -> String {
    format!("{LISTENER}admin:\n{section}{API}{DEFAULT_ROUTE}")
}

#[test]
fn admin_address() {
    let c = ok(&admin("  address: 127.0.0.1:9000\n"));
    assert_eq!(c.admin.address, "127.0.0.1:9000".parse().unwrap());
    let c = ok(&admin("  token_env: TOKEN\n"));
    assert_eq!(c.admin.address, DEFAULT_ADMIN);
    assert_eq!(c.admin.token_env.as_deref(), Some("TOKEN"));
    only(
        &admin("  address: 127.0.0.1\n"),
        "admin.address",
        "needs a port",
    );
    only(
        &admin("  address: 127.0.0.1:8080\n"),
        "admin.address",
        "conflicts with listeners[0].address",
    );
    only(
        &admin("  address: localhost:8080\n"),
        "admin.address",
        "conflicts",
    );
}

#[test]
fn listeners_keep_off_the_default_admin_address() {
    let on = |addr: &str| {
        format!("listeners:\n  - {{ name: p, address: \"{addr}\" }}\n{API}{DEFAULT_ROUTE}")
    };
    only(
        &on("127.0.0.1:9901"),
        "listeners[0].address",
        "conflicts with the admin listener's default address 127.0.0.1:9901",
    );
    only(
        &on("0.0.0.0:9901"),
        "listeners[0].address",
        "set admin.address",
    );
    let moved = format!("listeners:\n  - {{ name: p, address: 127.0.0.1:9901 }}\nadmin: {{ token_env: T }}\n{API}{DEFAULT_ROUTE}");
    only(&moved, "listeners[0].address", "default address");
    let moved = format!("listeners:\n  - {{ name: p, address: 127.0.0.1:9901 }}\nadmin: {{ address: 127.0.0.1:9902 }}\n{API}{DEFAULT_ROUTE}");
    ok(&moved);
}

#[test]
fn admin_token_env_is_required_off_loopback() {
    only(
        &admin("  address: 0.0.0.0:9901\n"),
        "admin.token_env",
        "not loopback",
    );
    only(
        &admin("  address: 10.0.0.5:9901\n"),
        "admin.token_env",
        "10.0.0.5:9901",
    );
    only(
        &admin("  address: \"[::]:9901\"\n"),
        "admin.token_env",
        "not loopback",
    );
    ok(&admin(
        "  address: 0.0.0.0:9901\n  token_env: HOPGATE_ADMIN_TOKEN\n",
    ));
    ok(&admin("  address: \"[::1]:9901\"\n"));
    ok(&admin("  address: 127.0.0.2:9901\n"));
    only(
        &admin("  address: 0.0.0.0:9901\n  token_env: \"\"\n"),
        "admin.token_env",
        "invalid environment variable name",
    );
    only(
        &admin("  token_env: 1TOKEN\n"),
        "admin.token_env",
        "\"1TOKEN\"",
    );
    only(
        &admin("  token_env: MY-TOKEN\n"),
        "admin.token_env",
        "invalid",
    );
}

// ----- services -----

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

// ----- routes -----

#[test]
fn route_ids() {
    only(
        &with_routes("  - { id: \"\", service: api }\n"),
        "routes[0].id",
        "needs an id",
    );
    only(
        &with_routes("  - { service: api }\n"),
        "routes[0].id",
        "needs an id",
    );
    only(
        &with_routes("  - { id: a, service: api }\n  - { id: b, service: api }\n  - { id: a, service: api }\n"),
        "routes[2].id",
        "duplicate route id \"a\" (also routes[0])",
    );
    only(
        &with_routes("  - { id: \"my route\", service: api }\n"),
        "routes[0].id",
        "invalid route id \"my route\"",
    );
    only(
        &with_routes("  - { id: \"rüte\", service: api }\n"),
        "routes[0].id",
        "visible ASCII",
    );
}

#[test]
fn route_priority() {
    let prio = |p: &str| with_routes(&format!("  - {{ id: r, service: api, priority: {p} }}\n"));
    assert_eq!(ok(&prio("100")).routes[0].priority, 100);
    assert_eq!(ok(&prio("-5")).routes[0].priority, -5);
    assert_eq!(ok(&prio("2147483647")).routes[0].priority, i32::MAX);
    assert_eq!(ok(&prio("-2147483648")).routes[0].priority, i32::MIN);
    assert_eq!(ok(&prio("\"42\"")).routes[0].priority, 42);
    only(
        &prio("2147483648"),
        "routes[0].priority",
        "\"2147483648\" is out of range: expected an integer from -2147483648 to 2147483647",
    );
    only(&prio("-3000000000"), "routes[0].priority", "out of range");
    only(&prio("1.5"), "routes[0].priority", "not an integer");
    only(
        &prio("high"),
        "routes[0].priority",
        "\"high\" is not an integer",
    );
    only(&prio("\"\""), "routes[0].priority", "not an integer");
    only(&prio("\"-\""), "routes[0].priority", "not an integer");
}

#[test]
fn route_enabled_defaults_to_true() {
    assert!(ok(&with_routes("  - { id: r, service: api }\n")).routes[0].enabled);
    assert!(
        !ok(&with_routes(
            "  - { id: r, service: api, enabled: false }\n"
        ))
        .routes[0]
            .enabled
    );
    assert!(ok(&with_routes("  - { id: r, service: api, enabled: true }\n")).routes[0].enabled);
}

#[test]
fn host_matches() {
    let host = |h: &str| {
        ok(&matching(&format!("{{ host: \"{h}\" }}"))).routes[0]
            .matcher
            .host
            .clone()
    };
    assert_eq!(
        host("api.example.com"),
        HostMatch::Exact("api.example.com".into())
    );
    assert_eq!(
        host("API.Example.COM"),
        HostMatch::Exact("api.example.com".into())
    );
    assert_eq!(
        host("*.Example.com"),
        HostMatch::Suffix(".example.com".into())
    );
    assert_eq!(host("localhost"), HostMatch::Exact("localhost".into()));
    assert_eq!(host("10.0.0.1"), HostMatch::Exact("10.0.0.1".into()));
    assert_eq!(host("[::1]"), HostMatch::Exact("[::1]".into()));
    assert_eq!(
        host("my_host.internal"),
        HostMatch::Exact("my_host.internal".into())
    );
    let bad = [
        ("", "must not be empty"),
        ("*", "leave host out"),
        ("api.*.com", "only allowed as a leading \"*.\""),
        ("*api.example.com", "only allowed as a leading"),
        ("*.*.example.com", "only allowed as a leading"),
        ("api.example.*", "only allowed as a leading"),
        ("*.", "empty label"),
        ("api..example.com", "empty label"),
        (".example.com", "empty label"),
        ("example.com.", "empty label"),
        ("api.example.com:8080", "must not include a port"),
        ("[::1]:8080", "must not include a port"),
        ("api example.com", "expected letters, digits"),
        ("api/example", "expected letters, digits"),
    ];
    for (h, needle) in bad {
        only(
            &matching(&format!("{{ host: \"{h}\" }}")),
            "routes[0].match.host",
            needle,
        );
    }
}

#[test]
fn path_matches() {
    let path = |m: &str| ok(&matching(m)).routes[0].matcher.path.clone();
    assert_eq!(path("{ path: /exact }"), PathMatch::Exact("/exact".into()));
    assert_eq!(
        path("{ path_prefix: /api }"),
        PathMatch::Prefix("/api".into())
    );
    assert_eq!(path("{ path_prefix: / }"), PathMatch::Prefix("/".into()));
    assert_eq!(path("{}"), PathMatch::Prefix("/".into()));
    match path("{ path_regex: \"^/v[0-9]+/\" }") {
        PathMatch::Regex(r) => assert_eq!(r.as_str(), "^/v[0-9]+/"),
        other => panic!("expected a regex, got {other:?}"),
    }

    let p = "routes[0].match";
    only(
        &matching("{ path: /a, path_prefix: /a }"),
        p,
        "at most one of path, path_prefix and path_regex is allowed (found path and path_prefix)",
    );
    only(
        &matching("{ path_prefix: /a, path_regex: a }"),
        p,
        "found path_prefix and path_regex",
    );
    only(
        &matching("{ path: /a, path_prefix: /a, path_regex: a }"),
        p,
        "found path and path_prefix and path_regex",
    );

    only(
        &matching("{ path: api }"),
        "routes[0].match.path",
        "path \"api\" must start with \"/\"",
    );
    only(
        &matching("{ path: \"\" }"),
        "routes[0].match.path",
        "must start with",
    );
    only(
        &matching("{ path_prefix: api/ }"),
        "routes[0].match.path_prefix",
        "must start with \"/\"",
    );
    only(
        &matching("{ path_prefix: \"/a?b=1\" }"),
        "routes[0].match.path_prefix",
        "match.query",
    );
    only(
        &matching("{ path: \"/a b\" }"),
        "routes[0].match.path",
        "whitespace",
    );

    only(
        &matching("{ path_regex: \"^/v[0-9+/\" }"),
        "routes[0].match.path_regex",
        "invalid regex \"^/v[0-9+/\": unclosed character class",
    );
    only(
        &matching("{ path_regex: \"(\" }"),
        "routes[0].match.path_regex",
        "unclosed group",
    );
    only(
        &matching("{ path_regex: \"a{99999}{99999}\" }"),
        "routes[0].match.path_regex",
        "invalid regex",
    );
    // Every problem of one match is reported, not only the first.
    let errs = errors(&matching("{ path: x, path_regex: \"(\" }"));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].match",
            "routes[0].match.path",
            "routes[0].match.path_regex"
        ]
    );
}

#[test]
fn regex_errors_are_one_short_line() {
    for re in ["(", "[", "a{2,1}", "\\p{Nope}", "(?P<>a)", "*"] {
        let m = compile_regex(re).unwrap_err();
        assert!(!m.contains('\n') && m.len() < 200, "{m}");
        assert!(m.starts_with(&format!("invalid regex {re:?}: ")), "{m}");
    }
}

#[test]
fn method_matches() {
    let c = ok(&matching("{ methods: [get, Post, PURGE, GET] }"));
    assert_eq!(
        c.routes[0].matcher.methods,
        [
            Method::GET,
            Method::POST,
            Method::from_bytes(b"PURGE").unwrap()
        ]
    );
    only(
        &matching("{ methods: [GET, \"\"] }"),
        "routes[0].match.methods[1]",
        "must not be empty",
    );
    only(
        &matching("{ methods: [\"GE T\"] }"),
        "routes[0].match.methods[0]",
        "invalid method \"GE T\"",
    );
    only(
        &matching("{ methods: [GET, POST, \"G(ET\"] }"),
        "routes[0].match.methods[2]",
        "invalid method",
    );
    only(
        &matching("{ methods: [\"GÉT\"] }"),
        "routes[0].match.methods[0]",
        "invalid method",
    );
}

#[test]
fn header_matches() {
    let c = ok(&matching(
        "{ headers: { X-Canary: \"1\", Accept: \"text/html; q=0.9\" } }",
    ));
    let h = &c.routes[0].matcher.headers;
    assert_eq!(h.len(), 2);
    assert!(h.contains(&(
        HeaderName::from_static("x-canary"),
        HeaderValue::from_static("1")
    )));
    ok(&matching("{ headers: { X-Empty: \"\" } }"));
    only(
        &matching("{ headers: { \"X Canary\": \"1\" } }"),
        "routes[0].match.headers.X Canary",
        "invalid header name \"X Canary\"",
    );
    only(
        &matching("{ headers: { \"X-Ça\": \"1\" } }"),
        "routes[0].match.headers.X-Ça",
        "invalid header name",
    );
    only(
        &matching("{ headers: { \"\": \"1\" } }"),
        "routes[0].match.headers.",
        "must not be empty",
    );
    only(
        &matching("{ headers: { X-A: \"a\\nb\" } }"),
        "routes[0].match.headers.X-A",
        "invalid header value",
    );
    // obs-text (non-ASCII bytes) is legal in a header value.
    ok(&matching("{ headers: { X-A: \"é\" } }"));
    only(
        &matching("{ headers: { X-A: \"\\u007f\" } }"),
        "routes[0].match.headers.X-A",
        "control characters",
    );
    only(
        &matching("{ headers: { X-A: \" 1\" } }"),
        "routes[0].match.headers.X-A",
        "whitespace",
    );
    only(
        &matching("{ headers: { X-A: \"1\", x-a: \"2\" } }"),
        "routes[0].match.headers.x-a",
        "listed twice",
    );
    // A bad name and a bad value are both reported.
    let errs = errors(&matching("{ headers: { \"X A\": \"\\u0001\" } }"));
    assert_eq!(errs.len(), 2, "{}", render(&errs));
}

#[test]
fn query_matches() {
    let c = ok(&matching("{ query: { beta: \"true\", flag: \"\" } }"));
    assert_eq!(
        c.routes[0].matcher.query,
        [
            ("beta".into(), "true".into()),
            ("flag".into(), String::new())
        ]
    );
    only(
        &matching("{ query: { \"\": x } }"),
        "routes[0].match.query",
        "must not be empty",
    );
    only(
        &matching("{ query: { \"a=b\": x } }"),
        "routes[0].match.query.a=b",
        "invalid query parameter name",
    );
    only(
        &matching("{ query: { a: \"x&y\" } }"),
        "routes[0].match.query.a",
        "invalid query value \"x&y\"",
    );
}

#[test]
fn source_cidrs() {
    let c = ok(&matching(
        "{ source_cidrs: [10.0.0.0/8, 192.168.1.7, \"::1\", \"fd00::/8\", 10.1.2.3/16] }",
    ));
    let want: Vec<IpNet> = [
        "10.0.0.0/8",
        "192.168.1.7/32",
        "::1/128",
        "fd00::/8",
        "10.1.0.0/16",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    assert_eq!(c.routes[0].matcher.source_cidrs, want);
    let errs = errors(&matching(
        "{ source_cidrs: [10.0.0.0/8, 10.0.0/8, \"\", 1.2.3.4/33, \"::1/129\", 10.0.0.0/8/8] }",
    ));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].match.source_cidrs[1]",
            "routes[0].match.source_cidrs[2]",
            "routes[0].match.source_cidrs[3]",
            "routes[0].match.source_cidrs[4]",
            "routes[0].match.source_cidrs[5]",
        ]
    );
    assert_eq!(errs[0].message, "invalid CIDR \"10.0.0/8\": expected a network like \"10.0.0.0/8\" or \"fd00::/8\", or a bare IP");
}

#[test]
fn route_services_must_exist() {
    let c = ok(&format!(
        "{LISTENER}services:\n  - {{ name: web, nodes: [ {{ id: a, address: 127.0.0.1:8081 }} ] }}\n  - {{ name: api, nodes: [ {{ id: a, address: 127.0.0.1:8082 }} ] }}\n{DEFAULT_ROUTE}"
    ));
    assert_eq!(c.routes[0].service, 1);
    only(
        &with_routes("  - { id: r, service: apii }\n"),
        "routes[0].service",
        "unknown service \"apii\" (did you mean \"api\"?)",
    );
    only(
        &with_routes("  - { id: r, service: ap }\n"),
        "routes[0].service",
        "(did you mean \"api\"?)",
    );
    only(
        &with_routes("  - { id: r, service: API }\n"),
        "routes[0].service",
        "(did you mean \"api\"?)",
    );
    let errs = errors(&with_routes("  - { id: r, service: billing }\n"));
    assert_eq!(
        render(&errs),
        "routes[0].service: unknown service \"billing\""
    );
    only(
        &with_routes("  - { id: r }\n"),
        "routes[0].service",
        "required",
    );
}

#[test]
fn closest_names() {
    assert_eq!(closest("apii", ["api", "web"]), Some("api"));
    assert_eq!(closest("wbe", ["api", "web"]), Some("web"));
    assert_eq!(closest("billing", ["api", "web"]), None);
    assert_eq!(closest("api2", ["api1", "api"]), Some("api1"));
    assert_eq!(closest(&"x".repeat(1000), ["x"]), None);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("é", "e"), 1);
}

#[test]
fn route_versions() {
    let c = ok(&with_routes("  - { id: r, service: api, version: v2 }\n"));
    assert_eq!(c.routes[0].target, Target::Version("v2".into()));
    only(
        &with_routes("  - { id: r, service: api, version: v3 }\n"),
        "routes[0].version",
        "service \"api\" has no node with version \"v3\" (versions: v1, v2)",
    );
    only(
        &with_routes("  - { id: r, service: api, version: \"\" }\n"),
        "routes[0].version",
        "must not be empty",
    );
    let unversioned =
        with_services("  - name: api\n    nodes: [ { id: a, address: 127.0.0.1:8081 } ]\n");
    let doc = unversioned.replace("service: api\n", "service: api\n    version: v1\n");
    only(&doc, "routes[0].version", "its nodes have no version");
    // An unknown service is reported once, not again for its version.
    only(
        &with_routes("  - { id: r, service: nope, version: v1 }\n"),
        "routes[0].service",
        "unknown service",
    );
}

#[test]
fn route_splits() {
    let split = |arms: &str| {
        with_routes(&format!(
            "  - id: r\n    service: api\n    split: [ {arms} ]\n"
        ))
    };
    let c = ok(&split(
        "{ version: v1, weight: 90 }, { version: v2, weight: 10 }",
    ));
    assert_eq!(
        c.routes[0].target,
        Target::Split(vec![("v1".into(), 90), ("v2".into(), 10)])
    );
    // Zero-weight arms are valid and carry no traffic.
    let c = ok(&split(
        "{ version: v1, weight: 0 }, { version: v2, weight: 10000 }",
    ));
    assert_eq!(
        c.routes[0].target,
        Target::Split(vec![("v2".into(), 10_000)])
    );

    only(&split(""), "routes[0].split", "at least one");
    only(
        &split("{ version: v1, weight: 0 }, { version: v2, weight: 0 }"),
        "routes[0].split",
        "every weight is 0",
    );
    only(
        &split("{ version: v1, weight: 90 }, { version: v3, weight: 10 }"),
        "routes[0].split[1].version",
        "no node with version \"v3\"",
    );
    only(
        &split("{ version: v1, weight: 50 }, { version: v1, weight: 50 }"),
        "routes[0].split[1].version",
        "duplicate version \"v1\" (also split[0])",
    );
    only(
        &split("{ version: \"\", weight: 50 }, { version: v1, weight: 50 }"),
        "routes[0].split[0].version",
        "must not be empty",
    );
    only(
        &split("{ version: v1, weight: 10001 }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "\"10001\" is out of range: expected an integer from 0 to 10000",
    );
    only(
        &split("{ version: v1, weight: -1 }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "out of range",
    );
    only(
        &split("{ version: v1, weight: half }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "not an integer",
    );
    only(
        &split("{ version: v1 }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "required",
    );
    // A bad weight is not also reported as "every weight is 0".
    only(
        &split("{ version: v1, weight: x }, { version: v2, weight: 0 }"),
        "routes[0].split[0].weight",
        "not an integer",
    );
    // version and split together: one error, both still checked.
    let both =
        "  - id: r\n    service: api\n    version: v1\n    split: [ { version: v1, weight: 1 } ]\n";
    only(&with_routes(both), "routes[0].split", "mutually exclusive");
    let both_bad =
        "  - id: r\n    service: api\n    version: v7\n    split: [ { version: v8, weight: 1 } ]\n";
    let errs = errors(&with_routes(both_bad));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].split",
            "routes[0].version",
            "routes[0].split[0].version"
        ]
    );
}

#[test]
fn strict_version_needs_a_version() {
    only(
        &with_routes("  - { id: r, service: api, strict_version: true }\n"),
        "routes[0].strict_version",
        "requires version or split",
    );
    assert!(
        ok(&with_routes(
            "  - { id: r, service: api, version: v1, strict_version: true }\n"
        ))
        .routes[0]
            .strict_version
    );
    let split = "  - id: r\n    service: api\n    strict_version: true\n    split: [ { version: v1, weight: 1 } ]\n";
    assert!(ok(&with_routes(split)).routes[0].strict_version);
}

// ----- access, timeouts, limits -----

#[test]
fn access_cidrs() {
    let c = ok(&with_top("access:\n  allow_cidrs: [10.0.0.0/8]\n  deny_cidrs: [10.9.0.0/16, 10.1.1.1]\n  trusted_proxies: [\"::1\"]\n"));
    assert_eq!(c.access.allow, ["10.0.0.0/8".parse::<IpNet>().unwrap()]);
    assert_eq!(c.access.deny.len(), 2);
    assert_eq!(
        c.access.trusted_proxies,
        ["::1/128".parse::<IpNet>().unwrap()]
    );
    let errs = errors(&with_top("access:\n  allow_cidrs: [10.0.0.0/8, x]\n  deny_cidrs: [1.2.3.4/99]\n  trusted_proxies: [10.0.0.1, 10.0.0.0/8, \"\"]\n"));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "access.allow_cidrs[1]",
            "access.deny_cidrs[0]",
            "access.trusted_proxies[2]"
        ]
    );
    assert!(errs[0].message.contains("invalid CIDR \"x\""));
}

#[test]
fn timeouts() {
    let c = ok(&with_top(
        "timeouts: { connect: 250ms, request: 2m, idle: 1h, header_read: 1.5s, shutdown: 5s, shutdown_delay: 0s }\n",
    ));
    assert_eq!(
        c.timeouts,
        Timeouts {
            connect: Duration::from_millis(250),
            request: Duration::from_secs(120),
            idle: Duration::from_secs(3600),
            header_read: Duration::from_millis(1500),
            shutdown: Duration::from_secs(5),
            shutdown_delay: Duration::ZERO,
        }
    );
    assert_eq!(Timeouts::default().shutdown_delay, Duration::from_secs(2));
    only(
        &with_top("timeouts: { shutdown_delay: 2h }\n"),
        "timeouts.shutdown_delay",
        "above the limit of 1h",
    );
    only(
        &with_top("timeouts: { shutdown_delay: soon }\n"),
        "timeouts.shutdown_delay",
        "",
    );
    // Only the given fields change.
    let c = ok(&with_top("timeouts: { shutdown: 1s }\n"));
    assert_eq!(
        c.timeouts,
        Timeouts {
            shutdown: Duration::from_secs(1),
            ..Timeouts::default()
        }
    );
    for field in ["connect", "request", "idle", "header_read", "shutdown"] {
        let path = format!("timeouts.{field}");
        only(
            &with_top(&format!("timeouts: {{ {field}: 0s }}\n")),
            &path,
            "must be greater than 0",
        );
        only(
            &with_top(&format!("timeouts: {{ {field}: 10 }}\n")),
            &path,
            "needs a unit",
        );
        only(
            &with_top(&format!("timeouts: {{ {field}: soon }}\n")),
            &path,
            "\"soon\"",
        );
        only(
            &with_top(&format!("timeouts: {{ {field}: 3 weeks }}\n")),
            &path,
            "unknown unit",
        );
    }
}

#[test]
fn limits() {
    let c = ok(&with_top("limits: { max_header_bytes: 1KiB, max_headers: 1, max_uri_bytes: 256, max_body_bytes: 1, max_connections: 1 }\n"));
    assert_eq!(
        c.limits,
        Limits {
            max_header_bytes: 1024,
            max_headers: 1,
            max_uri_bytes: 256,
            max_body_bytes: 1,
            max_connections: Some(1),
            max_connections_per_client: None,
        }
    );
    let c = ok(&with_top("limits: { max_header_bytes: 1MiB, max_headers: 10000, max_uri_bytes: 1MiB, max_body_bytes: 1GiB, max_connections: 10000000, max_connections_per_client: 8 }\n"));
    assert_eq!(
        c.limits,
        Limits {
            max_header_bytes: 1 << 20,
            max_headers: 10_000,
            max_uri_bytes: 1 << 20,
            max_body_bytes: 1 << 30,
            max_connections: Some(10_000_000),
            max_connections_per_client: Some(8),
        }
    );
    let c = ok(&with_top("limits: { max_body_bytes: 64KB }\n"));
    assert_eq!(
        c.limits,
        Limits {
            max_body_bytes: 64_000,
            ..Limits::default()
        }
    );

    let bad = [
        ("max_header_bytes", "1023", "expected 1KiB to 1MiB"),
        ("max_header_bytes", "1048577", "out of range"),
        ("max_header_bytes", "16 KiBs", "unknown unit"),
        ("max_header_bytes", "-1", "must start with a number"),
        ("max_headers", "0", "expected an integer from 1 to 10000"),
        ("max_headers", "10001", "out of range"),
        ("max_headers", "1KiB", "not an integer"),
        ("max_uri_bytes", "255", "expected 256 to 1MiB"),
        ("max_uri_bytes", "2MiB", "out of range"),
        ("max_body_bytes", "0", "expected at least 1"),
        ("max_body_bytes", "99999999999GiB", "too large"),
        (
            "max_connections",
            "0",
            "expected an integer from 1 to 10000000",
        ),
        ("max_connections", "10000001", "out of range"),
        ("max_connections", "lots", "not an integer"),
        (
            "max_connections_per_client",
            "0",
            "expected an integer from 1 to 1000000",
        ),
    ];
    for (field, value, needle) in bad {
        only(
            &with_top(&format!("limits: {{ {field}: \"{value}\" }}\n")),
            &format!("limits.{field}"),
            needle,
        );
    }
}

// ----- robustness -----

/// Nasty values for every text field: validation must report, never panic.
const NASTY: &[&str] = &[
    "",
    " ",
    "*",
    "*.",
    ".",
    ":",
    "::",
    "[",
    "]",
    "[::1",
    "[]:80",
    "[::1]:",
    "/",
    "//",
    "http://",
    "https://",
    "http:///",
    "localhost",
    "localhost:",
    "é",
    "ä:80",
    "\u{0}",
    "\u{7f}",
    "💥",
    "-",
    "--1",
    "+1",
    "1e3",
    "NaN",
    "inf",
    "-0",
    "0",
    "18446744073709551616",
    "-9223372036854775809",
    "99999999999999999999999999GiB",
    "1.5.5s",
    "0.0000000001s",
    "(",
    "[a-",
    "a{999999}",
    "10.0.0.0/",
    "/8",
    "10.0.0.0/8/8",
    "0.0.0.0:0",
    "1:2:3:4:5:6:7:8:9",
];

#[test]
fn nasty_values_never_panic() {
    for &s in NASTY {
        let t = || Some(Text(s.to_owned()));
        let raw = RawConfig {
            replica_id: Some(s.into()),
            listeners: vec![RawListener {
                name: s.into(),
                address: s.into(),
                debug_headers: true,
                normalize_path: Some(false),
                tls: Some(crate::config::raw::RawListenerTls {
                    certificates: vec![crate::config::raw::RawCertificate {
                        cert: s.into(),
                        key: s.into(),
                        sni: vec![s.into(), format!("*.{s}")],
                    }],
                }),
                http1: Some(s.into()),
                proxy_protocol: Some(crate::config::raw::RawListenerProxyProtocol {
                    versions: Some(vec![Text(s.into()), Text(s.into())]),
                    trusted_cidrs: vec![s.into()],
                    timeout: t(),
                }),
            }],
            admin: Some(RawAdmin {
                address: s.into(),
                token_env: Some(s.into()),
            }),
            services: vec![RawService {
                name: s.into(),
                lb: Some(s.into()),
                hash_on: Some(RawHashOn {
                    header: Some(s.into()),
                    cookie: Some(s.into()),
                    source_ip: Some(true),
                }),
                protocol: Some(s.into()),
                pool: Some(RawPool {
                    max_idle: t(),
                    idle_timeout: t(),
                    max_connections: t(),
                    max_pending: t(),
                    queue_timeout: t(),
                }),
                health: Some(RawHealth {
                    path: Some(s.into()),
                    interval: t(),
                    timeout: t(),
                    rise: t(),
                    fall: t(),
                    expect_status: t(),
                    initial: Some(s.into()),
                }),
                outlier: Some(RawOutlier {
                    consecutive_5xx: t(),
                    consecutive_failures: t(),
                    base_ejection: t(),
                    max_ejection: t(),
                    max_ejected_percent: t(),
                }),
                circuit: Some(RawCircuit {
                    enabled: Some(true),
                    failure_threshold: t(),
                    reset_timeout: t(),
                    max_requests: t(),
                }),
                drain: Some(crate::config::raw::RawDrain {
                    mode: Some(s.into()),
                    deadline: t(),
                }),
                maintenance: None,
                tls: Some(crate::config::raw::RawUpstreamTls {
                    ca: Some(s.into()),
                    server_name: Some(s.into()),
                    client_cert: Some(s.into()),
                    client_key: None,
                }),
                slow_start: t(),
                retries: Some(crate::config::raw::RawServiceRetries {
                    on_status: Some(vec![Text(s.into())]),
                    on_status_idempotent: Some(vec![Text(s.into())]),
                }),
                discovery: Some(crate::config::raw::RawDiscovery {
                    dns: Some(crate::config::raw::RawDnsDiscovery {
                        name: s.into(),
                        port: t(),
                        kind: Some(s.into()),
                        resolvers: Some(vec![s.into()]),
                        refresh_min: t(),
                        refresh_max: t(),
                    }),
                }),
                proxy_protocol: Some(s.into()),
                nodes: vec![RawNode {
                    id: s.into(),
                    address: s.into(),
                    version: Some(s.into()),
                    weight: t(),
                    zone: Some(s.into()),
                    labels: [(s.to_owned(), s.to_owned())].into(),
                }],
            }],
            routes: vec![RawRoute {
                id: s.into(),
                priority: t(),
                matches: RawMatch {
                    host: Some(s.into()),
                    path: Some(s.into()),
                    path_prefix: Some(s.into()),
                    path_regex: Some(s.into()),
                    methods: vec![s.into()],
                    headers: [(s.to_owned(), s.to_owned())].into(),
                    query: [(s.to_owned(), s.to_owned())].into(),
                    source_cidrs: vec![s.into()],
                },
                service: s.into(),
                version: Some(s.into()),
                split: Some(vec![RawSplit {
                    version: s.into(),
                    weight: t(),
                }]),
                strict_version: true,
                enabled: Some(false),
                filters: vec![crate::config::raw::RawFilter {
                    request_headers: Some(edits(s)),
                    response_headers: Some(edits(s)),
                    url_rewrite: Some(crate::config::raw::RawUrlRewrite {
                        path: Some(path_rewrite(s)),
                        host: Some(s.into()),
                    }),
                    redirect: Some(crate::config::raw::RawRedirect {
                        scheme: Some(s.into()),
                        host: Some(s.into()),
                        port: t(),
                        path: Some(path_rewrite(s)),
                        status: t(),
                    }),
                    direct_response: Some(crate::config::raw::RawDirectResponse {
                        status: t(),
                        content_type: Some(s.into()),
                        body: Some(s.into()),
                        body_file: Some(s.into()),
                    }),
                    mirror: Some(crate::config::raw::RawMirror {
                        service: s.into(),
                        percent: t(),
                        max_in_flight: t(),
                    }),
                }],
                timeouts: Some(crate::config::raw::RawRouteTimeouts {
                    request: t(),
                    attempt: t(),
                    idle: t(),
                }),
                retries: Some(crate::config::raw::RawRouteRetries {
                    attempts: t(),
                    on_status: Some(vec![Text(s.into())]),
                    on_status_idempotent: Some(vec![Text(s.into())]),
                    budget: t(),
                }),
                limits: Some(crate::config::raw::RawRouteLimits {
                    max_body_bytes: t(),
                }),
                rate_limit: Some(s.into()),
                auth: Some(crate::config::raw::RawAuth {
                    jwt: Some(crate::config::raw::RawJwtAuth {
                        jwks_file: s.into(),
                        jwks: Some(crate::config::raw::RawJwksService {
                            service: s.into(),
                            path: s.into(),
                            refresh: t(),
                        }),
                        issuer: Some(s.into()),
                        audiences: Some(vec![s.into()]),
                        clock_skew: t(),
                        claims_to_headers: [(s.to_owned(), s.to_owned())].into(),
                        realm: Some(s.into()),
                        remove_authorization: Some(true),
                    }),
                    basic: Some(crate::config::raw::RawBasicAuth {
                        htpasswd: s.into(),
                        realm: Some(s.into()),
                        remove_authorization: Some(false),
                    }),
                    forward: Some(crate::config::raw::RawForwardAuth {
                        service: s.into(),
                        path: s.into(),
                        copy_request_headers: vec![s.into()],
                        copy_response_headers: vec![s.into()],
                        cache: Some(crate::config::raw::RawAuthCache {
                            key: crate::config::raw::RawCacheKey {
                                header: Some(s.into()),
                                cookie: Some(s.into()),
                            },
                            ttl: t(),
                            max_entries: t(),
                        }),
                        failure_mode: Some(s.into()),
                        timeout: t(),
                    }),
                }),
            }],
            rate_limits: vec![crate::config::raw::RawRateLimit {
                name: s.into(),
                key: vec![
                    crate::config::raw::RawLimitKey::Name(s.into()),
                    crate::config::raw::RawLimitKey::Map([(s.to_owned(), s.to_owned())].into()),
                ],
                rate: t(),
                burst: t(),
                scope: Some(s.into()),
                mode: Some(s.into()),
                max_in_flight: t(),
            }],
            access: Some(RawAccess {
                allow_cidrs: vec![s.into()],
                deny_cidrs: vec![s.into()],
                trusted_proxies: vec![s.into()],
            }),
            timeouts: Some(RawTimeouts {
                connect: t(),
                request: t(),
                idle: t(),
                header_read: t(),
                shutdown: t(),
                shutdown_delay: t(),
            }),
            limits: Some(RawLimits {
                max_header_bytes: t(),
                max_headers: t(),
                max_uri_bytes: t(),
                max_body_bytes: t(),
                max_connections: t(),
                max_connections_per_client: t(),
            }),
            retries: Some(RawRetries {
                attempts: t(),
                budget: t(),
                buffer_body: t(),
            }),
            sources: Some(crate::config::raw::RawSources {
                file: Some(crate::config::raw::RawFileSource {
                    watch: Some(true),
                    interval: t(),
                }),
                etcd: Some(crate::config::raw::RawEtcdSource {
                    endpoints: vec![s.into()],
                    prefix: Some(s.into()),
                    cache: Some(s.into()),
                }),
            }),
            sessions: Some(crate::config::raw::RawSessions {
                enabled: Some(true),
                cookie: Some(s.into()),
                header: Some(s.into()),
                ttl: t(),
                secret_env: Some(s.into()),
                previous_secrets_env: Some(s.into()),
                context_max: t(),
                secure: Some(crate::config::raw::RawSecure::Word(s.into())),
            }),
            store: Some(crate::config::raw::RawStore {
                kind: Some(s.into()),
                url: Some(s.into()),
                sentinel: Some(crate::config::raw::RawRedisSentinel {
                    master_name: Some(s.into()),
                    endpoints: vec![s.into()],
                }),
                cluster: Some(crate::config::raw::RawRedisCluster {
                    endpoints: vec![s.into()],
                }),
                prefix: Some(s.into()),
                max_queue: t(),
                path: Some(s.into()),
                max_sessions: t(),
                persist_interval: t(),
            }),
            maintenance: Some(crate::config::raw::RawMaintenance {
                mode: Some(s.into()),
                relaxed_timeout: t(),
                max_relaxed: t(),
                post_handoff_relaxed: t(),
                handoff_timeout: t(),
                max_handoff_retries: t(),
                workers: t(),
                queue: t(),
                breaker_failures: t(),
                breaker_reset: t(),
            }),
            access_log: Some(crate::config::raw::RawAccessLog {
                enabled: Some(true),
                format: Some(s.into()),
                path: Some(s.into()),
            }),
            upgrade: Some(crate::config::raw::RawUpgrade {
                socket: Some(s.into()),
            }),
            canary: Some(crate::config::raw::RawCanary {
                min_requests: t(),
                interval: t(),
                window: t(),
                max_error_ratio: t(),
                min_error_delta: t(),
                max_p99_ratio: t(),
                min_p99_delta: t(),
            }),
            tracing: Some(crate::config::raw::RawTracing {
                otlp: Some(crate::config::raw::RawOtlp {
                    enabled: Some(true),
                    endpoint: Some(s.into()),
                    protocol: Some(s.into()),
                    service_name: Some(s.into()),
                    sample_ratio: t(),
                    queue: t(),
                    batch: t(),
                    interval: t(),
                    timeout: t(),
                    headers: [(s.to_owned(), s.to_owned())].into(),
                }),
            }),
            state_dir: Some(s.into()),
        };
        let errs = validate(&raw).expect_err("every field is nonsense");
        for e in &errs {
            assert!(!e.path.is_empty(), "{s:?}: an error without a path: {e}");
            assert!(
                !e.message.is_empty(),
                "{s:?}: an error without a message at {}",
                e.path
            );
        }
    }
}

#[test]
fn random_documents_never_panic() {
    // Random documents stitched from valid and nasty fragments.
    let mut rng = fastrand::Rng::with_seed(7);
    let values: Vec<&str> = NASTY
        .iter()
        .copied()
        .chain([
            "127.0.0.1:8081",
            "api",
            "v1",
            "10.0.0.0/8",
            "2s",
            "64KiB",
            "100",
            "hash",
            "/api",
        ])
        .collect();
    for _ in 0..500 {
        let mut v = || values[rng.usize(..values.len())].to_owned();
        let raw = RawConfig {
            replica_id: Some(v()),
            listeners: vec![RawListener {
                name: v(),
                address: v(),
                debug_headers: false,
                normalize_path: None,
                tls: None,
                http1: Some(v()),
                proxy_protocol: None,
            }],
            admin: None,
            services: vec![RawService {
                name: v(),
                lb: Some(v()),
                hash_on: None,
                protocol: None,
                pool: Some(RawPool {
                    max_idle: Some(Text(v())),
                    idle_timeout: Some(Text(v())),
                    max_connections: Some(Text(v())),
                    max_pending: Some(Text(v())),
                    queue_timeout: Some(Text(v())),
                }),
                health: None,
                outlier: None,
                circuit: None,
                drain: None,
                maintenance: None,
                tls: None,
                slow_start: None,
                retries: None,
                discovery: None,
                proxy_protocol: Some(v()),
                nodes: vec![RawNode {
                    id: v(),
                    address: v(),
                    version: Some(v()),
                    weight: Some(Text(v())),
                    ..RawNode::default()
                }],
            }],
            routes: vec![RawRoute {
                id: v(),
                priority: Some(Text(v())),
                matches: RawMatch {
                    host: Some(v()),
                    path_regex: Some(v()),
                    ..RawMatch::default()
                },
                service: v(),
                split: Some(vec![RawSplit {
                    version: v(),
                    weight: Some(Text(v())),
                }]),
                ..RawRoute::default()
            }],
            ..RawConfig::default()
        };
        let _ = validate(&raw);
    }
}

#[test]
fn redis_store_takes_a_url_and_its_defaults() {
    let c = ok(&with_top(
        "store: { kind: redis, url: redis://127.0.0.1:6379/0 }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!(
        r.target,
        crate::config::RedisTarget::Url("redis://127.0.0.1:6379/0".into())
    );
    assert_eq!(r.prefix, "hopgate:");
    assert_eq!(r.max_queue, 100_000);
    let c = ok(&with_top(
        "store: { kind: redis, url: \"redis://:pw@[::1]:7000\", prefix: \"gw/a:\", max_queue: 10 }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!((r.prefix.as_str(), r.max_queue), ("gw/a:", 10));
    assert_eq!(ok(&with_top("store: { kind: memory }\n")).store.redis, None);
}

#[test]
fn redis_store_takes_a_sentinel_or_a_cluster() {
    use crate::config::RedisTarget;
    let c = ok(&with_top(
        "store: { kind: redis, sentinel: { master_name: mymaster, endpoints: [redis://127.0.0.1:26379, redis://127.0.0.1:26380] } }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!(
        r.target,
        RedisTarget::Sentinel {
            master_name: "mymaster".into(),
            endpoints: vec![
                "redis://127.0.0.1:26379".into(),
                "redis://127.0.0.1:26380".into()
            ],
        }
    );
    assert_eq!(r.target.mode(), "sentinel");
    let c = ok(&with_top(
        "store: { kind: redis, cluster: { endpoints: [redis://127.0.0.1:7000] } }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!(
        r.target,
        RedisTarget::Cluster {
            endpoints: vec!["redis://127.0.0.1:7000".into()],
        }
    );
}

#[test]
fn redis_sentinel_and_cluster_fields_are_checked_with_their_path() {
    only(
        &with_top("store: { kind: redis, sentinel: { endpoints: [redis://h:26379] } }\n"),
        "store.sentinel.master_name",
        "required",
    );
    only(
        &with_top("store: { kind: redis, sentinel: { master_name: m, endpoints: [] } }\n"),
        "store.sentinel.endpoints",
        "at least one",
    );
    only(
        &with_top("store: { kind: redis, cluster: { endpoints: [redis://h:7000, \"h:7001\"] } }\n"),
        "store.cluster.endpoints[1]",
        "must start with redis://",
    );
    only(
        &with_top(
            "store: { kind: redis, url: redis://h:1, cluster: { endpoints: [redis://h:7000] } }\n",
        ),
        "store",
        "exactly one of url, sentinel and cluster",
    );
    only(
        &with_top("store: { cluster: { endpoints: [redis://h:7000] } }\n"),
        "store.cluster",
        "only for kind: redis",
    );
}

#[test]
fn redis_store_fields_are_checked_with_their_path() {
    only(
        &with_top("store: { kind: redis }\n"),
        "store.url",
        "needs a url",
    );
    for (url, needle) in [
        ("http://127.0.0.1:6379", "must start with redis://"),
        ("redis://", "no host"),
        ("redis://:6379/0", "no host"),
        ("redis://127.0.0.1:0", "port"),
        ("redis://127.0.0.1:http", "port"),
        ("redis://127.0.0.1:6379/zero", "database"),
        ("redis://[::1", "bracket"),
    ] {
        only(
            &with_top(&format!("store: {{ kind: redis, url: \"{url}\" }}\n")),
            "store.url",
            needle,
        );
    }
    only(
        &with_top("store: { kind: redis, url: redis://h:1, prefix: \"a b\" }\n"),
        "store.prefix",
        "without spaces",
    );
    only(
        &with_top("store: { kind: redis, url: redis://h:1, max_queue: 0 }\n"),
        "store.max_queue",
        "out of range",
    );
    only(
        &with_top("store: { kind: redis, url: redis://h:1, path: s.snap }\n"),
        "store.path",
        "memory-store feature",
    );
    only(
        &with_top("store: { url: redis://h:1 }\n"),
        "store.url",
        "only for kind: redis",
    );
    only(
        &with_top("store: { kind: etcd }\n"),
        "store.kind",
        "unknown store kind",
    );
}

#[test]
fn an_unset_max_connections_is_derived_from_the_descriptor_limit() {
    use crate::config::{derive_max_connections, MAX_CONNECTIONS_CAP};
    assert_eq!(ok(&with_top("")).limits.max_connections, None);
    // Two listeners under a hard limit of 20,000: what refused to start
    // with a fixed 10,000 each now gets (20,000 − 256) ÷ (2 × 2).
    assert_eq!(derive_max_connections(2, Some(20_000)), 4_936);
    assert_eq!(derive_max_connections(1, Some(20_000)), 9_872);
    assert_eq!(
        derive_max_connections(1, Some(1_048_576)),
        MAX_CONNECTIONS_CAP
    );
    assert_eq!(derive_max_connections(3, None), MAX_CONNECTIONS_CAP);
    assert_eq!(derive_max_connections(1, Some(1_024)), 384);
    // Below the reserve, still at least one connection: never a refusal.
    assert_eq!(derive_max_connections(4, Some(100)), 1);
    assert_eq!(derive_max_connections(0, Some(20_000)), 9_872);
}

#[test]
fn slow_start_is_a_window_of_at_most_an_hour() {
    let svc = |v: &str| {
        format!(
            "{LISTENER}services:\n  - name: api\n    slow_start: {v}\n    nodes:\n      - {{ id: api-1, address: 127.0.0.1:8081 }}\n{DEFAULT_ROUTE}"
        )
    };
    assert_eq!(
        ok(&svc("30s")).services[0].slow_start,
        Duration::from_secs(30)
    );
    assert_eq!(ok(&with_top("")).services[0].slow_start, Duration::ZERO);
    only(&svc("soon"), "services[0].slow_start", "");
    only(&svc("2h"), "services[0].slow_start", "too long");
}

#[test]
fn retries_on_status_are_statuses_400_to_599_each_listed_once() {
    let svc = |v: &str| {
        format!(
            "{LISTENER}services:\n  - name: api\n    retries: {v}\n    nodes:\n      - {{ id: api-1, address: 127.0.0.1:8081 }}\n{DEFAULT_ROUTE}"
        )
    };
    let c = ok(&svc(
        "{ on_status: [503], on_status_idempotent: [502, \"504\"] }",
    ));
    let r = c.services[0].retry_on;
    assert!(r.retries(503, false) && r.retries(503, true));
    assert!(!r.retries(502, false) && r.retries(502, true) && r.retries(504, true));
    assert!(!r.retries(500, true));
    assert_eq!(r.any.iter().collect::<Vec<_>>(), [503]);
    assert!(ok(&with_top("")).services[0].retry_on.is_empty());
    only(
        &svc("{ on_status: [200] }"),
        "services[0].retries.on_status[0]",
        "from 400 to 599",
    );
    only(
        &svc("{ on_status: [503, lots] }"),
        "services[0].retries.on_status[1]",
        "not an integer",
    );
    only(
        &svc("{ on_status: [503], on_status_idempotent: [503] }"),
        "services[0].retries.on_status_idempotent[0]",
        "listed twice (also on_status[0])",
    );
    only(
        &svc("{ on_status: [503], retry: 1 }"),
        "services[0].retries.retry",
        "",
    );
}

/// Header edits with every field set to `s`.
fn edits(s: &str) -> crate::config::raw::RawHeaderEdits {
    crate::config::raw::RawHeaderEdits {
        add: [(s.to_owned(), s.to_owned())].into(),
        set: [(s.to_owned(), s.to_owned())].into(),
        remove: vec![s.into()],
    }
}

/// A path rewrite with every field set to `s`.
fn path_rewrite(s: &str) -> crate::config::raw::RawPathRewrite {
    crate::config::raw::RawPathRewrite {
        replace_prefix: Some(s.into()),
        full: Some(s.into()),
        regex: Some(s.into()),
        replace: Some(s.into()),
    }
}
