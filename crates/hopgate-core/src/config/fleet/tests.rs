use std::collections::BTreeMap;

use super::*;
use crate::config::parse;
use crate::config::{load, Format};

const BOOT: &str = r#"
replica_id: gw-1
listeners: [ { name: public, address: 127.0.0.1:0 } ]
admin: { address: 127.0.0.1:0 }
sources:
  etcd: { endpoints: [http://127.0.0.1:2379], prefix: /hopgate/test/ }
"#;

const RUNTIME: &str = r#"
services:
  - name: api
    nodes: [ { id: s1, address: 127.0.0.1:8081, version: v1 } ]
  - name: disc
    nodes: []
routes:
  - { id: default, match: { path_prefix: / }, service: api }
timeouts: { request: 5s }
"#;

fn boot() -> RawConfig {
    parse(BOOT, Format::Yaml).unwrap()
}

#[test]
fn a_bootstrap_section_in_the_shared_document_is_named() {
    let doc = format!("{RUNTIME}\nlisteners: []\nadmin: {{ address: 127.0.0.1:1 }}\n");
    let errors = parse_runtime(&doc).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["listeners", "admin"]);
    let json = r#"{"services":[],"sources":{}}"#;
    let errors = parse_runtime(json).unwrap_err();
    assert_eq!(errors[0].path, "sources");
}

#[test]
fn the_shared_document_parses_as_yaml_and_json() {
    let raw = parse_runtime(RUNTIME).unwrap();
    assert_eq!(raw.services.len(), 2);
    let json = r#"{"services":[{"name":"api","nodes":[{"id":"a","address":"127.0.0.1:1"}]}]}"#;
    assert_eq!(parse_runtime(json).unwrap().services[0].nodes[0].id, "a");
    let bad = parse_runtime("services: [ { name: api, nodez: [] } ]").unwrap_err();
    assert!(bad[0].path.starts_with("services[0]"), "{bad:?}");
}

#[test]
fn compose_takes_each_side_from_its_owner() {
    let mut local = boot();
    local.timeouts = None;
    let runtime = parse_runtime(RUNTIME).unwrap();
    let merged = compose(&local, &runtime);
    assert_eq!(merged.replica_id.as_deref(), Some("gw-1"));
    assert_eq!(merged.services.len(), 2);
    assert!(merged.timeouts.is_some());
    let cfg = crate::config::validate(&merged).unwrap();
    assert_eq!(cfg.replica_id.as_deref(), Some("gw-1"));
    assert_eq!(cfg.sources.etcd.as_ref().unwrap().prefix, "/hopgate/test/");
    // The bootstrap half of a composed document carries no runtime section.
    assert!(runtime_sections_in(&compose(&merged, &RawConfig::default())).is_empty());
}

#[test]
fn a_local_file_with_runtime_sections_is_refused_in_fleet_mode() {
    let mut local = boot();
    local.routes = parse_runtime(RUNTIME).unwrap().routes;
    local.limits = Some(Default::default());
    let errors = check_bootstrap(&local).unwrap_err();
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["routes", "limits"]);
    assert!(check_bootstrap(&boot()).is_ok());
}

#[test]
fn empty_node_lists_need_fleet_mode() {
    let alone = "services: [ { name: a, nodes: [] } ]\n";
    let errors = load(alone, Format::Yaml).unwrap_err();
    assert!(
        errors.iter().any(|e| e.path == "services[0].nodes"),
        "{errors:?}"
    );
    let merged = compose(&boot(), &parse_runtime(alone).unwrap());
    assert!(crate::config::validate(&merged).is_ok());
}

#[test]
fn etcd_source_fields_are_checked_with_paths() {
    let doc = r#"
sources:
  etcd: { endpoints: ["127.0.0.1:2379", "http://x:notaport"], prefix: nope, cache: "" }
replica_id: "two words"
"#;
    let errors = load(doc, Format::Yaml).unwrap_err();
    let paths: Vec<&str> = errors
        .iter()
        .map(|e| e.path.as_str())
        .filter(|p| *p != "listeners")
        .collect();
    assert_eq!(
        paths,
        [
            "replica_id",
            "sources.etcd.endpoints[0]",
            "sources.etcd.endpoints[1]",
            "sources.etcd.prefix",
            "sources.etcd.cache",
        ]
    );
    let errors = load("sources: { etcd: {} }", Format::Yaml).unwrap_err();
    assert!(errors.iter().any(|e| e.path == "sources.etcd.endpoints"));
    let cfg = load(
        "listeners: [ { name: p, address: 127.0.0.1:0 } ]\nsources: { etcd: { endpoints: [http://h:1] } }",
        Format::Yaml,
    )
    .unwrap();
    assert_eq!(cfg.sources.etcd.unwrap().prefix, "/hopgate/");
}

#[test]
fn node_keys_and_registrations() {
    assert_eq!(
        parse_node_key("api/n1"),
        Some(("api".to_owned(), "n1".to_owned()))
    );
    for bad in ["api", "api/", "/n1", "api/n1/x", ""] {
        assert_eq!(parse_node_key(bad), None, "{bad}");
    }
    let n = parse_registration(
        "n1",
        br#"{"address":"127.0.0.1:8081","version":"v1","weight":100}"#,
    )
    .unwrap();
    assert_eq!(n.address, "127.0.0.1:8081");
    assert_eq!(n.version.as_deref(), Some("v1"));
    let e = parse_registration("n1", br#"{"address":"nowhere"}"#).unwrap_err();
    assert!(e.starts_with("address:"), "{e}");
    let e = parse_registration("n1", br#"{"address":"127.0.0.1:1","weight":0}"#).unwrap_err();
    assert!(e.starts_with("weight:"), "{e}");
    assert!(parse_registration("n1", b"{").is_err());
    assert!(parse_registration("n1", br#"{"address":"127.0.0.1:1","x":1}"#).is_err());
    assert!(parse_registration("bad id", br#"{"address":"127.0.0.1:1"}"#).is_err());
}

fn reg(addr: &str) -> RawNode {
    RawNode {
        address: addr.to_owned(),
        ..RawNode::default()
    }
}

#[test]
fn discovered_nodes_join_their_services_after_the_static_ones() {
    let mut runtime = parse_runtime(RUNTIME).unwrap();
    let mut found = BTreeMap::new();
    for (svc, id) in [
        ("disc", "b"),
        ("disc", "a"),
        ("api", "d1"),
        ("api", "s1"),
        ("gone", "x"),
    ] {
        let mut n = reg("127.0.0.1:9000");
        n.id = id.to_owned();
        found.insert((svc.to_owned(), id.to_owned()), n);
    }
    let report = merge_nodes(&mut runtime, &found);
    let ids = |i: usize| -> Vec<String> {
        runtime.services[i]
            .nodes
            .iter()
            .map(|n| n.id.clone())
            .collect()
    };
    assert_eq!(ids(0), ["s1", "d1"]);
    assert_eq!(ids(1), ["a", "b"]);
    assert_eq!(report.shadowed, [("api".to_owned(), "s1".to_owned())]);
    assert_eq!(report.orphans, [("gone".to_owned(), "x".to_owned())]);
    let merged = compose(&boot(), &runtime);
    assert!(crate::config::validate(&merged).is_ok());
}

#[test]
fn the_burst_rule_keeps_healthy_nodes_only_when_nothing_would_remain() {
    let gone = [
        ("a".to_owned(), true),
        ("b".to_owned(), false),
        ("c".to_owned(), true),
    ];
    assert_eq!(held_removals(0, &gone), ["a", "c"]);
    assert!(held_removals(1, &gone).is_empty());
    assert!(held_removals(0, &[("b".to_owned(), false)]).is_empty());
    assert!(held_removals(0, &[]).is_empty());
}
