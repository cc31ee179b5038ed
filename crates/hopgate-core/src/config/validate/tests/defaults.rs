//! The embedded default, defaults and the typed output; every error at once with its exact path.

use super::*;

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
