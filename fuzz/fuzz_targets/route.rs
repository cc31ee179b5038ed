//! Route matching: for any request, the compiled router picks exactly the
//! rule the reference `linear_lookup` picks (a differential target), and
//! neither panics.
#![no_main]

use std::sync::OnceLock;

use hopgate_core::config::{parse, validate, Format};
use hopgate_core::route::{linear_lookup, RequestView, Router, RuleSpec};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;

const RULES: &str = r#"
listeners: [ { name: p, address: "127.0.0.1:8080" } ]
services:
  - { name: app, nodes: [ { id: n1, address: "127.0.0.1:1" } ] }
routes:
  - { id: exact-host, match: { host: api.example.com, path_prefix: / }, service: app }
  - { id: host-path, match: { host: api.example.com, path_prefix: /v2 }, service: app }
  - { id: wild, match: { host: "*.example.com" }, service: app }
  - { id: wild-deep, match: { host: "*.deep.example.com", path_prefix: /d }, service: app }
  - { id: exact-path, match: { path: /exact }, service: app }
  - { id: regex, match: { path_regex: "^/v[0-9]+/items$" }, service: app }
  - { id: methods, match: { path_prefix: /m, methods: [POST, PUT] }, service: app }
  - { id: header, match: { path_prefix: /h, headers: { X-Canary: "1" } }, service: app }
  - { id: query, match: { path_prefix: /q, query: { beta: "true" } }, service: app }
  - { id: cidr, priority: 50, match: { path_prefix: /c, source_cidrs: [10.0.0.0/8] }, service: app }
  - { id: prio-low, priority: 1, match: { path_prefix: /p }, service: app }
  - { id: prio-high, priority: 10, match: { path_prefix: /p }, service: app }
  - { id: tie-a, priority: 5, match: { path_prefix: /t }, service: app }
  - { id: tie-b, priority: 5, match: { path_prefix: /t }, service: app }
  - { id: disabled, priority: 100, enabled: false, match: { path_prefix: /d }, service: app }
  - { id: fallback, match: { path_prefix: / }, service: app }
"#;

fn rules() -> &'static (Vec<RuleSpec>, Router) {
    static R: OnceLock<(Vec<RuleSpec>, Router)> = OnceLock::new();
    R.get_or_init(|| {
        let cfg = validate(&parse(RULES, Format::Yaml).unwrap()).unwrap();
        let specs: Vec<RuleSpec> = cfg
            .routes
            .iter()
            .map(|r| RuleSpec {
                matcher: r.matcher.clone(),
                priority: r.priority,
                enabled: r.enabled,
            })
            .collect();
        let router = Router::build(specs.clone());
        (specs, router)
    })
}

fuzz_target!(|data: &[u8]| {
    // Fields separated by NUL: host, path, query, method, X-Canary, source.
    let mut parts = data.split(|b| *b == 0);
    let mut next = || std::str::from_utf8(parts.next().unwrap_or_default()).unwrap_or("");
    let (host, path, query, method, canary, ip) = (next(), next(), next(), next(), next(), next());
    let Ok(method) = Method::from_bytes(if method.is_empty() {
        b"GET"
    } else {
        method.as_bytes()
    }) else {
        return;
    };
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(canary) {
        headers.insert(HeaderName::from_static("x-canary"), v);
    }
    let source_ip = ip.parse().unwrap_or([10, 1, 2, 3].into());
    let view = RequestView {
        host,
        path,
        query: (!query.is_empty()).then_some(query),
        method: &method,
        headers: &headers,
        source_ip,
    };
    let (specs, router) = rules();
    assert_eq!(
        router.lookup(&view),
        linear_lookup(specs, &view),
        "{view:?}"
    );
});
