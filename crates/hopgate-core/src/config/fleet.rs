//! Fleet mode's pure rules (docs/fleet.md).
//!
//! Owns: which top-level sections are *bootstrap* (each replica's local
//! file) and which are *runtime* (the shared etcd document
//! `<prefix>config`), splitting and composing documents along that line,
//! the JSON a backend registers under `<prefix>nodes/<service>/<node_id>`,
//! merging discovered nodes into their services, and the burst rule that
//! keeps a burst of removals from emptying a service.
//!
//! Must not touch: etcd, files, sockets, live node state (callers pass
//! health in as plain booleans).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::raw::{RawConfig, RawNode, RawService, Text};
use super::{parse_all, sniff_format, validate, ConfigError, Format};

/// Sections that stay in the local file: they describe the process.
pub const BOOTSTRAP_SECTIONS: [&str; 10] = [
    "replica_id",
    "listeners",
    "admin",
    "store",
    "sources",
    "access_log",
    "upgrade",
    "canary",
    "tracing",
    "state_dir",
];

/// Sections that come from `<prefix>config` when `sources.etcd` is set.
/// (`outlier`, `circuit` and `drain` are per service, inside `services`.)
pub const RUNTIME_SECTIONS: [&str; 9] = [
    "services",
    "routes",
    "rate_limits",
    "access",
    "sessions",
    "retries",
    "timeouts",
    "limits",
    "maintenance",
];

/// Parses the shared document. A bootstrap section in it is an error named
/// by that section; otherwise the usual schema rules apply.
pub fn parse_runtime(text: &str) -> Result<RawConfig, Vec<ConfigError>> {
    let format = sniff_format(text);
    let keys: Vec<String> = match format {
        Format::Json => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        },
        Format::Yaml => match serde_yaml_ng::from_str::<serde_yaml_ng::Value>(text) {
            Ok(serde_yaml_ng::Value::Mapping(m)) => m
                .keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        },
    };
    let errors: Vec<ConfigError> = keys
        .iter()
        .filter(|k| BOOTSTRAP_SECTIONS.contains(&k.as_str()))
        .map(|k| {
            ConfigError::new(
                k.as_str(),
                "a bootstrap section: it belongs in each replica's local file, not in the \
                 shared etcd document",
            )
        })
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    parse_all(text, format)
}

/// The runtime sections present in a (local) document, in schema order.
pub fn runtime_sections_in(raw: &RawConfig) -> Vec<&'static str> {
    let present = [
        !raw.services.is_empty(),
        !raw.routes.is_empty(),
        !raw.rate_limits.is_empty(),
        raw.access.is_some(),
        raw.sessions.is_some(),
        raw.retries.is_some(),
        raw.timeouts.is_some(),
        raw.limits.is_some(),
        raw.maintenance.is_some(),
    ];
    RUNTIME_SECTIONS
        .iter()
        .zip(present)
        .filter_map(|(name, p)| p.then_some(*name))
        .collect()
}

/// The local file's errors in fleet mode: one per runtime section it
/// carries (they come from etcd; two places would silently disagree).
pub fn check_bootstrap(raw: &RawConfig) -> Result<(), Vec<ConfigError>> {
    let errors: Vec<ConfigError> = runtime_sections_in(raw)
        .into_iter()
        .map(|s| {
            ConfigError::new(
                s,
                "with sources.etcd set this section comes from the etcd key <prefix>config; \
                 remove it from the local file",
            )
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// `bootstrap`'s process-level sections with `runtime`'s shared ones.
pub fn compose(bootstrap: &RawConfig, runtime: &RawConfig) -> RawConfig {
    RawConfig {
        replica_id: bootstrap.replica_id.clone(),
        listeners: bootstrap.listeners.clone(),
        admin: bootstrap.admin.clone(),
        store: bootstrap.store.clone(),
        sources: bootstrap.sources.clone(),
        access_log: bootstrap.access_log.clone(),
        upgrade: bootstrap.upgrade.clone(),
        canary: bootstrap.canary.clone(),
        tracing: bootstrap.tracing.clone(),
        state_dir: bootstrap.state_dir.clone(),
        services: runtime.services.clone(),
        routes: runtime.routes.clone(),
        rate_limits: runtime.rate_limits.clone(),
        access: runtime.access.clone(),
        sessions: runtime.sessions.clone(),
        retries: runtime.retries.clone(),
        timeouts: runtime.timeouts.clone(),
        limits: runtime.limits.clone(),
        maintenance: runtime.maintenance.clone(),
    }
}

/// What a backend writes under `<prefix>nodes/<service>/<node_id>`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    pub address: String,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub weight: Option<Text>,
    #[serde(default)]
    pub zone: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `(service, node id)` of a discovered node.
pub type NodeName = (String, String);

/// Splits the part of a discovery key after `<prefix>nodes/` into
/// `(service, node id)`; `None` unless it is exactly two non-empty parts.
pub fn parse_node_key(rest: &str) -> Option<NodeName> {
    let (service, node) = rest.split_once('/')?;
    if service.is_empty() || node.is_empty() || node.contains('/') {
        return None;
    }
    Some((service.to_owned(), node.to_owned()))
}

/// Turns a registration into a node, checked by the same rules as a static
/// node (address, weight, id), so one bad registration is dropped on its
/// own instead of failing the whole merged document.
pub fn parse_registration(node_id: &str, value: &[u8]) -> Result<RawNode, String> {
    let reg: Registration =
        serde_json::from_slice(value).map_err(|e| format!("not a node registration: {e}"))?;
    let node = RawNode {
        id: node_id.to_owned(),
        address: reg.address,
        // Registrars write `"version": ""` for "no version".
        version: reg.version.filter(|v| !v.is_empty()),
        weight: reg.weight,
        zone: reg.zone,
        labels: reg.labels,
    };
    let probe = RawConfig {
        services: vec![RawService {
            name: "probe".to_owned(),
            nodes: vec![node.clone()],
            ..RawService::default()
        }],
        ..RawConfig::default()
    };
    // The probe has no listener; only the node's own errors count.
    let errors: Vec<ConfigError> = match validate(&probe) {
        Ok(_) => Vec::new(),
        Err(errors) => errors
            .into_iter()
            .filter(|e| e.path.starts_with("services[0].nodes[0]"))
            .collect(),
    };
    if errors.is_empty() {
        return Ok(node);
    }
    Err(errors
        .iter()
        .map(|e| {
            let field = e.path.rsplit('.').next().unwrap_or_default();
            format!("{field}: {}", e.message)
        })
        .collect::<Vec<_>>()
        .join("; "))
}

/// What [`merge_nodes`] could not place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Discovered nodes whose id a static node of the service already has
    /// (the static node wins).
    pub shadowed: Vec<NodeName>,
    /// Discovered nodes of a service the document does not have.
    pub orphans: Vec<NodeName>,
}

/// Appends discovered nodes to their services, after the static ones, in
/// key order (so every replica builds the same document from the same
/// keys).
pub fn merge_nodes(
    runtime: &mut RawConfig,
    discovered: &BTreeMap<NodeName, RawNode>,
) -> MergeReport {
    let mut report = MergeReport::default();
    for ((service, id), node) in discovered {
        let Some(svc) = runtime.services.iter_mut().find(|s| &s.name == service) else {
            report.orphans.push((service.clone(), id.clone()));
            continue;
        };
        if svc.nodes.iter().any(|n| &n.id == id) {
            report.shadowed.push((service.clone(), id.clone()));
            continue;
        }
        svc.nodes.push(node.clone());
    }
    report
}

/// The burst rule. A service's discovered nodes whose keys are gone (deleted
/// or lease expired) are normally removed, which drains them. But when
/// those removals would leave the service with no node at all (`remaining`
/// counts its static nodes plus the discovered nodes still registered),
/// the gone nodes that still pass health checks are kept — a mass expiry is
/// far more often a registrar or etcd problem than every backend dying at
/// once. Returns the ids to keep; once any node is registered again, or the
/// kept ones fail their checks, they are removed as usual.
pub fn held_removals(remaining: usize, gone: &[(String, bool)]) -> Vec<String> {
    if remaining > 0 {
        return Vec::new();
    }
    gone.iter()
        .filter(|(_, healthy)| *healthy)
        .map(|(id, _)| id.clone())
        .collect()
}

#[cfg(test)]
mod tests;
