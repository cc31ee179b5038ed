use std::time::Duration;

use crate::config::{load, Config, ConfigError, Format, LimitKey, LimitMode, Rate};

const BASE: &str = "
listeners: [ { name: public, address: 127.0.0.1:0 } ]
services: [ { name: api, nodes: [ { id: n1, address: 127.0.0.1:9 } ] } ]
";

fn doc(routes_limit: &str, policies: &str) -> String {
    format!(
        "{BASE}routes: [ {{ id: app, match: {{ path_prefix: / }}, service: api{routes_limit} }} ]\n\
         rate_limits:\n{policies}"
    )
}

fn check(routes_limit: &str, policies: &str) -> Result<Config, Vec<ConfigError>> {
    load(&doc(routes_limit, policies), Format::Yaml)
}

/// `(path, message fragment)` of every error.
fn errors(routes_limit: &str, policies: &str) -> Vec<(String, String)> {
    match check(routes_limit, policies) {
        Ok(_) => panic!("expected errors:\n{}", doc(routes_limit, policies)),
        Err(e) => e.into_iter().map(|e| (e.path, e.message)).collect(),
    }
}

fn has(errs: &[(String, String)], path: &str, fragment: &str) -> bool {
    errs.iter().any(|(p, m)| p == path && m.contains(fragment))
}

#[test]
fn a_full_policy_validates() {
    let cfg = check(
        ", rate_limit: per-client",
        "  - { name: per-client, key: [client_ip, { header: X-Api-Key }, { cookie: sid }, session, route], \
         rate: 100/s, burst: 200, scope: local, mode: log, max_in_flight: 4 }\n",
    )
    .unwrap();
    let p = &cfg.rate_limits[0];
    assert_eq!(cfg.routes[0].rate_limit, Some(0));
    assert_eq!(p.key.len(), 5);
    assert_eq!(
        p.key[1],
        LimitKey::Header(http::HeaderName::from_static("x-api-key"))
    );
    assert_eq!(
        p.rate,
        Some(Rate {
            tokens: 100,
            per: Duration::from_secs(1),
            burst: 200
        })
    );
    assert_eq!(p.mode, LimitMode::Log);
    assert_eq!(p.max_in_flight, Some(4));
}

#[test]
fn burst_defaults_to_the_rate() {
    let cfg = check("", "  - { name: p, key: [route], rate: 5/m }\n").unwrap();
    let r = cfg.rate_limits[0].rate.unwrap();
    assert_eq!((r.tokens, r.per, r.burst), (5, Duration::from_secs(60), 5));
    assert_eq!(cfg.routes[0].rate_limit, None);
}

#[test]
fn every_mistake_is_named_by_its_path() {
    let errs = errors(
        ", rate_limit: per-clinet",
        "  - { name: per-client, key: [client_ip], rate: 100/x, burst: 0 }\n\
         \x20 - { name: per-client, key: [], rate: 1/s }\n\
         \x20 - { name: other, key: [ip, { header: X }, { query: q }], rate: 1/h, scope: fleet }\n\
         \x20 - { name: inflight, key: [client_ip], max_in_flight: 0, mode: strict }\n",
    );
    assert!(
        has(&errs, "routes[0].rate_limit", "did you mean \"per-client\""),
        "{errs:?}"
    );
    assert!(
        has(&errs, "rate_limits[0].rate", "invalid rate"),
        "{errs:?}"
    );
    assert!(has(&errs, "rate_limits[0].burst", "burst 0"), "{errs:?}");
    assert!(has(&errs, "rate_limits[1].name", "duplicate"), "{errs:?}");
    assert!(
        has(&errs, "rate_limits[1].key", "at least one part"),
        "{errs:?}"
    );
    assert!(
        has(&errs, "rate_limits[2].key[0]", "unknown key kind \"ip\""),
        "{errs:?}"
    );
    assert!(
        has(&errs, "rate_limits[2].key[2]", "unknown key kind \"query\""),
        "{errs:?}"
    );
    assert!(
        has(&errs, "rate_limits[2].scope", "it needs store.kind: redis"),
        "{errs:?}"
    );
    assert!(
        has(&errs, "rate_limits[3].max_in_flight", "out of range"),
        "{errs:?}"
    );
    assert!(
        has(&errs, "rate_limits[3].mode", "enforce or log"),
        "{errs:?}"
    );
    assert_eq!(errs.len(), 10, "{errs:?}");
}

#[test]
fn a_policy_needs_a_rate_or_max_in_flight() {
    let errs = errors("", "  - { name: p, key: [client_ip] }\n");
    assert!(has(&errs, "rate_limits[0].rate", "required"), "{errs:?}");
    let errs = errors("", "  - { name: p, key: [client_ip], burst: 3 }\n");
    assert!(
        has(&errs, "rate_limits[0].burst", "needs a rate"),
        "{errs:?}"
    );
}

#[test]
fn rate_syntax() {
    use super::parse_rate;
    use crate::config::raw::Text;
    for (t, want) in [("1/s", Some(1)), ("600/m", Some(600)), ("5 / h", Some(5))] {
        assert_eq!(parse_rate(&Text::from(t)).ok().map(|r| r.0), want, "{t}");
    }
    for t in ["0/s", "s/1", "10", "1.5/s", "-1/s", "2000000/s", "10/d"] {
        assert!(parse_rate(&Text::from(t)).is_err(), "{t}");
    }
}
