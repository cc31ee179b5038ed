use std::time::Duration;

use crate::config::{load, Config, ConfigError, Format, ProxyProtocolVersion};

const SERVICE: &str = "services:
  - name: api
    nodes:
      - { id: a, address: 127.0.0.1:8081 }
routes:
  - id: default
    service: api
";

/// A document whose only listener has `proxy_protocol: <pp>`.
fn listener(pp: &str) -> String {
    format!(
        "listeners:\n  - name: public\n    address: 127.0.0.1:8080\n    proxy_protocol: {pp}\n{SERVICE}"
    )
}

/// A document whose `api` service has `extra` (service-level lines).
fn service(extra: &str) -> String {
    format!(
        "listeners:\n  - name: public\n    address: 127.0.0.1:8080\nservices:\n  - name: api\n{extra}    nodes:\n      - {{ id: a, address: 127.0.0.1:8081 }}\nroutes:\n  - id: default\n    service: api\n"
    )
}

fn ok(doc: &str) -> Config {
    match load(doc, Format::Yaml) {
        Ok(c) => c,
        Err(e) => panic!("expected a valid config, got {e:?}"),
    }
}

fn errors(doc: &str) -> Vec<ConfigError> {
    match load(doc, Format::Yaml) {
        Ok(_) => panic!("expected errors:\n{doc}"),
        Err(e) => e,
    }
}

/// `doc`'s errors are exactly at `paths`, and the first says `needle`.
fn at(doc: &str, paths: &[&str], needle: &str) {
    let errs = errors(doc);
    let got: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(got, paths, "{errs:?}");
    assert!(errs[0].message.contains(needle), "{errs:?}");
}

#[test]
fn absent_is_off_and_defaults_fill_a_present_block() {
    let c = ok(&service(""));
    assert!(c.listeners[0].proxy_protocol.is_none());
    assert!(c.services[0].proxy_protocol.is_none());
    let c = ok(&listener("{ trusted_cidrs: [10.0.0.0/8, 192.168.1.7] }"));
    let pp = c.listeners[0].proxy_protocol.as_ref().expect("on");
    assert!(pp.v1 && pp.v2);
    assert_eq!(pp.timeout, Duration::from_secs(3));
    assert_eq!(pp.trusted_cidrs.len(), 2);
    let c = ok(&listener(
        "{ versions: [2], trusted_cidrs: [\"fd00::/8\"], timeout: 250ms }",
    ));
    let pp = c.listeners[0].proxy_protocol.as_ref().expect("on");
    assert!(!pp.v1 && pp.v2);
    assert_eq!(pp.timeout, Duration::from_millis(250));
}

#[test]
fn listener_errors_name_their_field() {
    at(
        &listener("{ versions: [1, 3], trusted_cidrs: [10.0.0.0/8] }"),
        &["listeners[0].proxy_protocol.versions[1]"],
        "expected 1 or 2",
    );
    at(
        &listener("{ versions: [], trusted_cidrs: [10.0.0.0/8] }"),
        &["listeners[0].proxy_protocol.versions"],
        "at least one version",
    );
    at(
        &listener("{ versions: [2, 2], trusted_cidrs: [10.0.0.0/8] }"),
        &["listeners[0].proxy_protocol.versions[1]"],
        "twice",
    );
    at(
        &listener("{ trusted_cidrs: [10.0.0/8] }"),
        &["listeners[0].proxy_protocol.trusted_cidrs[0]"],
        "invalid CIDR",
    );
    at(
        &listener("{ trusted_cidrs: [] }"),
        &["listeners[0].proxy_protocol.trusted_cidrs"],
        "at least one CIDR",
    );
    at(
        &listener("{ versions: [1] }"),
        &["listeners[0].proxy_protocol.trusted_cidrs"],
        "at least one CIDR",
    );
    for t in ["0s", "5ms", "61s", "soon"] {
        at(
            &listener(&format!("{{ trusted_cidrs: [10.0.0.0/8], timeout: {t} }}")),
            &["listeners[0].proxy_protocol.timeout"],
            "",
        );
    }
    // Every error of one block at once.
    at(
        &listener("{ versions: [0], trusted_cidrs: [x], timeout: 2h }"),
        &[
            "listeners[0].proxy_protocol.versions[0]",
            "listeners[0].proxy_protocol.trusted_cidrs[0]",
            "listeners[0].proxy_protocol.timeout",
        ],
        "",
    );
    // A misspelt field is named too.
    let errs = errors(&listener("{ trusted_cidr: [10.0.0.0/8] }"));
    assert!(
        errs.iter()
            .any(|e| e.path.starts_with("listeners[0].proxy_protocol")),
        "{errs:?}"
    );
}

#[test]
fn services_send_v1_or_v2_over_http1_only() {
    let c = ok(&service("    proxy_protocol: v2\n"));
    assert_eq!(c.services[0].proxy_protocol, Some(ProxyProtocolVersion::V2));
    let c = ok(&service("    proxy_protocol: v1\n"));
    assert_eq!(c.services[0].proxy_protocol, Some(ProxyProtocolVersion::V1));
    at(
        &service("    proxy_protocol: v3\n"),
        &["services[0].proxy_protocol"],
        "expected one of v1, v2",
    );
    at(
        &service("    proxy_protocol: 2\n"),
        &["services[0].proxy_protocol"],
        "",
    );
    at(
        &service("    protocol: http2\n    proxy_protocol: v2\n"),
        &["services[0].proxy_protocol"],
        "http2",
    );
}
