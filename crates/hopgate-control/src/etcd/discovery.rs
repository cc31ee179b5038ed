//! Discovered nodes: from the keys under `<prefix>nodes/` to the nodes
//! merged into the runtime layer.
//!
//! Owns the set of discovered nodes last applied and the ones held back by
//! the burst rule ([`hopgate_core::config::fleet::held_removals`]): when the
//! removals of one change would leave a service with no node at all, the
//! removed nodes that still pass health checks stay, with a warning and a
//! count (`hopgate_fleet_discovery_removals_deferred_total`). They leave as
//! soon as any node of the service is registered again, or when they fail
//! their checks (re-checked every second while any is held). A removal goes
//! through the ordinary reload path: the node leaves the snapshot and
//! drains, its sessions hop on their next request.
//!
//! Must not touch: etcd (the loop hands the view in), the snapshot (only
//! through [`Control`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use hopgate_core::config::fleet::{self, NodeName};
use hopgate_core::config::raw::{RawConfig, RawNode};

use super::{EtcdHandle, View};
use crate::control::Control;

/// The view's node registrations that parse and pass the node rules; the
/// others are logged and left out.
fn registered(view: &View, prefix: &str) -> BTreeMap<NodeName, RawNode> {
    let mut out = BTreeMap::new();
    for (rest, value) in &view.nodes {
        let Some(name) = fleet::parse_node_key(rest) else {
            tracing::warn!(key = %format!("{prefix}nodes/{rest}"), "etcd: ignoring a discovery key that is not nodes/<service>/<node_id>");
            continue;
        };
        match fleet::parse_registration(&name.1, value.as_bytes()) {
            Ok(node) => {
                out.insert(name, node);
            }
            Err(e) => {
                tracing::warn!(service = %name.0, node = %name.1, error = %e, "etcd: ignoring a bad node registration");
            }
        }
    }
    out
}

/// The runtime layer to boot with: `runtime` plus every registered node of
/// the view (nothing is held at boot).
pub fn boot_layer(mut runtime: RawConfig, view: &View, prefix: &str) -> RawConfig {
    fleet::merge_nodes(&mut runtime, &registered(view, prefix));
    runtime
}

/// A layer ready to apply, with what [`Discovery::commit`] keeps from it.
#[derive(Debug)]
pub(crate) struct Planned {
    pub(crate) layer: RawConfig,
    merged: BTreeMap<NodeName, RawNode>,
    held: BTreeSet<NodeName>,
}

/// Discovered nodes as last applied.
#[derive(Debug, Default)]
pub(crate) struct Discovery {
    served: BTreeMap<NodeName, RawNode>,
    held: BTreeSet<NodeName>,
}

impl Discovery {
    pub(crate) fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// The parsed shared document with the view's nodes merged in.
    pub(crate) fn plan(
        &self,
        mut runtime: RawConfig,
        view: &View,
        control: &Control,
        handle: &EtcdHandle,
    ) -> Planned {
        let registered = registered(view, &handle.prefix);
        // Gone since the last apply, per service.
        let mut gone: BTreeMap<&str, Vec<(String, bool)>> = BTreeMap::new();
        let snap = control.snapshot().load();
        let now = hopgate_core::node::now_ms();
        for (name, _) in self
            .served
            .iter()
            .filter(|(n, _)| !registered.contains_key(*n))
        {
            let healthy = snap
                .services
                .iter()
                .find(|s| s.name == name.0)
                .and_then(|s| s.nodes.iter().find(|n| n.id == name.1))
                .is_some_and(|n| n.state.is_available(now));
            gone.entry(name.0.as_str())
                .or_default()
                .push((name.1.clone(), healthy));
        }
        let mut held = BTreeSet::new();
        let mut merged = registered.clone();
        for (service, gone) in gone {
            let statics = runtime
                .services
                .iter()
                .find(|s| s.name == service)
                .map_or(0, |s| s.nodes.len());
            // DNS discovery's nodes of the service count as remaining too.
            let remaining = statics
                + control.dns_nodes_of(service)
                + registered.keys().filter(|(s, _)| s == service).count();
            for id in fleet::held_removals(remaining, &gone) {
                let name = (service.to_owned(), id);
                if !self.held.contains(&name) {
                    handle.deferred_removals.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        service,
                        node = %name.1,
                        "etcd: node deregistered but it is the service's last and still healthy; keeping it until another registers or it fails its checks"
                    );
                }
                if let Some(node) = self.served.get(&name) {
                    merged.insert(name.clone(), node.clone());
                }
                held.insert(name);
            }
        }
        let report = fleet::merge_nodes(&mut runtime, &merged);
        for (s, n) in &report.shadowed {
            tracing::warn!(service = %s, node = %n, "etcd: discovered node has the id of a static node; the static one wins");
        }
        for (s, n) in &report.orphans {
            tracing::warn!(service = %s, node = %n, "etcd: discovered node of a service the config does not have; ignored");
        }
        for name in report.shadowed.iter().chain(&report.orphans) {
            merged.remove(name);
        }
        Planned {
            layer: runtime,
            merged,
            held,
        }
    }

    /// Remembers what an applied plan served.
    pub(crate) fn commit(&mut self, planned: Planned) -> RawConfig {
        self.served = planned.merged;
        self.held = planned.held;
        planned.layer
    }
}
