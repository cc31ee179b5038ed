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

mod defaults;
mod edge;
mod limits;
mod robustness;
mod routes;
mod services;
mod store;
