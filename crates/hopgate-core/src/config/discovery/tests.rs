use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::*;
use crate::config::{load, ConfigError, Format};

fn doc(dns: &str, nodes: &str) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:8080 }}\n\
         services:\n  - name: api\n    discovery:\n      dns: {dns}\n    nodes: {nodes}\n\
         routes:\n  - {{ id: default, service: api }}\n"
    )
}

fn errors(dns: &str) -> Vec<ConfigError> {
    match load(&doc(dns, "[]"), Format::Yaml) {
        Ok(_) => panic!("expected errors for {dns}"),
        Err(e) => e,
    }
}

/// The one error of `dns` is at `path` and says `needle`.
fn one_error(dns: &str, path: &str, needle: &str) {
    let errs = errors(dns);
    assert_eq!(errs.len(), 1, "{dns}: {errs:?}");
    assert_eq!(errs[0].path, path, "{dns}: {errs:?}");
    assert!(errs[0].message.contains(needle), "{dns}: {errs:?}");
}

const P: &str = "services[0].discovery.dns";

#[test]
fn a_valid_block_types_with_defaults() {
    let cfg = load(
        &doc("{ name: api.internal, port: 8080 }", "[]"),
        Format::Yaml,
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    let d = cfg.services[0].discovery.clone().expect("discovery");
    assert_eq!(d.name, "api.internal");
    assert_eq!(d.kind, DnsType::A);
    assert_eq!(d.port, Some(8080));
    assert!(d.resolvers.is_empty());
    assert_eq!(d.refresh_min, DEFAULT_REFRESH_MIN);
    assert_eq!(d.refresh_max, DEFAULT_REFRESH_MAX);
    let srv = load(
        &doc(
            "{ name: _http._tcp.api.internal, type: srv, resolvers: [\"127.0.0.1:5353\", \"[::1]:53\"], refresh_min: 200ms, refresh_max: 2s }",
            "[{ id: s, address: 127.0.0.1:9 }]",
        ),
        Format::Yaml,
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    let d = srv.services[0].discovery.clone().expect("discovery");
    assert_eq!(d.kind, DnsType::Srv);
    assert_eq!(d.port, None);
    assert_eq!(d.resolvers.len(), 2);
    assert_eq!(d.refresh_min, Duration::from_millis(200));
}

#[test]
fn empty_nodes_need_discovery() {
    let e = load(
        "listeners:\n  - { name: p, address: 127.0.0.1:8080 }\nservices:\n  - { name: api, nodes: [] }\n",
        Format::Yaml,
    )
    .expect_err("no nodes, no discovery");
    assert_eq!(e[0].path, "services[0].nodes");
    assert!(e[0].message.contains("discovery.dns"), "{e:?}");
}

#[test]
fn every_error_has_its_field_path() {
    one_error(
        "{ name: \"api..internal\", port: 80 }",
        &format!("{P}.name"),
        "not a DNS name",
    );
    one_error(
        "{ name: \"bad name\", port: 80 }",
        &format!("{P}.name"),
        "not a DNS name",
    );
    one_error(
        "{ name: 10.0.0.1, port: 80 }",
        &format!("{P}.name"),
        "IP address",
    );
    one_error("{ port: 80 }", &format!("{P}.name"), "required");
    one_error(
        "{ name: api.internal, type: srv }",
        &format!("{P}.name"),
        "_service._proto.",
    );
    one_error(
        "{ name: _http.api.internal, type: srv }",
        &format!("{P}.name"),
        "_service._proto.",
    );
    one_error(
        "{ name: api.internal, port: 80, type: cname }",
        &format!("{P}.type"),
        "unknown record type",
    );
    one_error("{ name: api.internal }", &format!("{P}.port"), "required");
    one_error(
        "{ name: api.internal, type: aaaa }",
        &format!("{P}.port"),
        "required",
    );
    one_error(
        "{ name: api.internal, port: 0 }",
        &format!("{P}.port"),
        "out of range",
    );
    one_error(
        "{ name: api.internal, port: 70000 }",
        &format!("{P}.port"),
        "out of range",
    );
    one_error(
        "{ name: _h._tcp.api.internal, type: srv, port: 80 }",
        &format!("{P}.port"),
        "not allowed",
    );
    one_error(
        "{ name: api.internal, port: 80, refresh_min: 10s, refresh_max: 5s }",
        &format!("{P}.refresh_min"),
        "above refresh_max",
    );
    one_error(
        "{ name: api.internal, port: 80, refresh_min: 1ms }",
        &format!("{P}.refresh_min"),
        "out of range",
    );
    one_error(
        "{ name: api.internal, port: 80, refresh_max: soon }",
        &format!("{P}.refresh_max"),
        "",
    );
    one_error(
        "{ name: api.internal, port: 80, resolvers: [\"dns.local:53\"] }",
        &format!("{P}.resolvers[0]"),
        "invalid resolver",
    );
    one_error(
        "{ name: api.internal, port: 80, resolvers: [\"127.0.0.1\"] }",
        &format!("{P}.resolvers[0]"),
        "invalid resolver",
    );
    one_error(
        "{ name: api.internal, port: 80, resolvers: [] }",
        &format!("{P}.resolvers"),
        "empty list",
    );
    // Unknown fields are refused with their path too.
    let e = errors("{ name: api.internal, port: 80, ttl: 5s }");
    assert!(
        e.iter()
            .any(|e| e.path.starts_with(P) && e.message.contains("ttl")),
        "{e:?}"
    );
    // Several at once.
    let e = errors("{ name: \"-x\", type: mx, resolvers: [nope] }");
    let paths: Vec<&str> = e.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&format!("{P}.name").as_str()), "{paths:?}");
    assert!(paths.contains(&format!("{P}.type").as_str()), "{paths:?}");
    assert!(
        paths.contains(&format!("{P}.resolvers[0]").as_str()),
        "{paths:?}"
    );
}

#[test]
fn refresh_follows_the_ttl_within_bounds() {
    let d = DnsDiscovery {
        name: "api".into(),
        kind: DnsType::A,
        port: Some(80),
        resolvers: Vec::new(),
        refresh_min: Duration::from_secs(1),
        refresh_max: Duration::from_secs(30),
    };
    assert_eq!(
        d.next_refresh(Some(Duration::from_secs(0))),
        Duration::from_secs(1)
    );
    assert_eq!(
        d.next_refresh(Some(Duration::from_secs(7))),
        Duration::from_secs(7)
    );
    assert_eq!(
        d.next_refresh(Some(Duration::from_secs(3600))),
        Duration::from_secs(30)
    );
    assert_eq!(d.next_refresh(None), Duration::from_secs(1));
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn srv_uses_the_lowest_priority_with_an_address() {
    let rec = |priority, weight, port, addrs: &[&str]| SrvTarget {
        priority,
        weight,
        port,
        addrs: addrs.iter().map(|a| ip(a)).collect(),
    };
    let set = srv_targets(&[
        rec(20, 1, 9000, &["127.0.0.9"]),
        rec(10, 3, 8081, &["127.0.0.1"]),
        rec(10, 0, 8082, &["127.0.0.1"]),
        rec(5, 1, 8080, &[]),
    ]);
    assert_eq!(
        set,
        vec![
            Resolved {
                addr: "127.0.0.1:8081".parse().expect("addr"),
                weight: Some(3)
            },
            Resolved {
                addr: "127.0.0.1:8082".parse().expect("addr"),
                weight: Some(1)
            },
        ]
    );
    // The primaries have no address: the backups serve.
    let backup = srv_targets(&[rec(10, 1, 8081, &[]), rec(20, 2, 9000, &["127.0.0.9"])]);
    assert_eq!(backup.len(), 1);
    assert_eq!(backup[0].weight, Some(2));
    assert!(srv_targets(&[]).is_empty());
    assert_eq!(srv_weight(60_000), 10_000);
}

#[test]
fn ids_are_valid_node_ids_and_stable() {
    let v4: SocketAddr = "10.0.0.7:8080".parse().expect("addr");
    let v6: SocketAddr = "[fd00::7]:8080".parse().expect("addr");
    assert_eq!(node_id("api.internal", v4), "api.internal@10.0.0.7:8080");
    assert_eq!(node_id("api.internal", v6), "api.internal@[fd00::7]:8080");
    assert!(is_dns_node("api.internal", "api.internal@10.0.0.7:8080"));
    assert!(!is_dns_node("api.internal", "api.internal.x@10.0.0.7:8080"));
    assert!(!is_dns_node("api.internal", "node-1"));
    // The merged document validates: the ids pass the node id rules.
    let mut raw = crate::config::parse(
        &doc("{ name: api.internal, port: 8080 }", "[]"),
        Format::Yaml,
    )
    .expect("parse");
    let set = address_targets(&[ip("10.0.0.7"), ip("fd00::7"), ip("10.0.0.7")], 8080);
    assert_eq!(set.len(), 2);
    let resolved = BTreeMap::from([("api".to_owned(), ("api.internal".to_owned(), set))]);
    assert!(merge_dns(&mut raw, &resolved));
    let cfg = crate::config::validate(&raw).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(cfg.services[0].nodes.len(), 2);
}

#[test]
fn merge_replaces_what_discovery_put_and_keeps_static_nodes() {
    let mut raw = crate::config::parse(
        &doc(
            "{ name: api.internal, port: 8080 }",
            "[{ id: static, address: 127.0.0.1:9000 }, { id: \"api.internal@10.0.0.1:8080\", address: \"10.0.0.1:8080\" }]",
        ),
        Format::Yaml,
    )
    .expect("parse");
    let set = address_targets(&[ip("10.0.0.2")], 8080);
    let resolved = BTreeMap::from([("api".to_owned(), ("api.internal".to_owned(), set))]);
    assert!(merge_dns(&mut raw, &resolved));
    let ids: Vec<&str> = raw.services[0]
        .nodes
        .iter()
        .map(|n| n.id.as_str())
        .collect();
    assert_eq!(ids, ["static", "api.internal@10.0.0.2:8080"]);
    // Merging the same set again changes nothing.
    assert!(!merge_dns(&mut raw, &resolved));
    // A set resolved for another name (the config renamed it) is not used.
    let stale = BTreeMap::from([(
        "api".to_owned(),
        (
            "old.internal".to_owned(),
            address_targets(&[ip("10.0.0.3")], 8080),
        ),
    )]);
    assert!(merge_dns(&mut raw, &stale));
    let ids: Vec<&str> = raw.services[0]
        .nodes
        .iter()
        .map(|n| n.id.as_str())
        .collect();
    assert_eq!(ids, ["static"]);
}
