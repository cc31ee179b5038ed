//! One-line descriptions of a configuration for the event log: what was
//! loaded at start, and what a reload changed.
//!
//! Owns the wording of those lines. Must not touch: anything live (it reads
//! two documents and returns text).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use super::raw::RawConfig;
use super::Config;

/// How many names a diff lists per kind before "+N more".
const NAMES_SHOWN: usize = 5;

/// `2 listeners, 3 services (7 nodes), 12 routes, sessions on (memory), maintenance auto`.
pub fn summary(cfg: &Config) -> String {
    let nodes: usize = cfg.services.iter().map(|s| s.nodes.len()).sum();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let store = if let Some(r) = &cfg.store.redis {
        match r.target.mode() {
            "sentinel" => "redis sentinel",
            "cluster" => "redis cluster",
            _ => "redis",
        }
    } else if cfg.store.path.is_some() {
        "memory, persisted"
    } else {
        "memory"
    };
    let mut s = format!(
        "{}, {} ({}), {}",
        plural(cfg.listeners.len(), "listener", "listeners"),
        plural(cfg.services.len(), "service", "services"),
        plural(nodes, "node", "nodes"),
        plural(cfg.routes.len(), "route", "routes"),
    );
    if cfg.sessions.enabled {
        let _ = write!(s, ", sessions on ({store} store)");
    } else {
        s.push_str(", sessions off");
    }
    if cfg.sources.etcd.is_some() {
        s.push_str(", fleet mode (etcd)");
    }
    s
}

/// What changed from `old` to `new`:
/// `services +billing; nodes -api/api-3 ~api/api-1; routes ~default; sections timeouts`,
/// or `no changes`.
pub fn diff(old: &RawConfig, new: &RawConfig) -> String {
    let (Ok(Value::Object(mut a)), Ok(Value::Object(mut b))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return "changes not summarised".to_owned();
    };
    let mut parts = Vec::new();
    for (section, key) in [
        ("listeners", "name"),
        ("services", "name"),
        ("routes", "id"),
    ] {
        let (x, y) = (a.remove(section), b.remove(section));
        let (mut xs, mut ys) = (keyed(x.as_ref(), key), keyed(y.as_ref(), key));
        if section == "services" {
            // Nodes are listed on their own: a node change is not a
            // service change.
            let (xn, yn) = (take_nodes(&mut xs), take_nodes(&mut ys));
            push_changes(&mut parts, "services", &xs, &ys);
            push_changes(&mut parts, "nodes", &xn, &yn);
        } else {
            push_changes(&mut parts, section, &xs, &ys);
        }
    }
    let mut sections: Vec<&str> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .map(String::as_str)
        .collect();
    sections.sort_unstable();
    sections.dedup();
    if !sections.is_empty() {
        parts.push(format!("sections {}", sections.join(", ")));
    }
    if parts.is_empty() {
        "no changes".to_owned()
    } else {
        parts.join("; ")
    }
}

fn keyed(list: Option<&Value>, key: &str) -> BTreeMap<String, Value> {
    let Some(Value::Array(items)) = list else {
        return BTreeMap::new();
    };
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let name = v
                .get(key)
                .and_then(Value::as_str)
                .map_or_else(|| format!("#{i}"), str::to_owned);
            (name, v.clone())
        })
        .collect()
}

/// Removes each service's nodes, returning them keyed `service/node`.
fn take_nodes(services: &mut BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut nodes = BTreeMap::new();
    for (svc, v) in services.iter_mut() {
        let list = v.as_object_mut().and_then(|o| o.remove("nodes"));
        for (id, n) in keyed(list.as_ref(), "id") {
            nodes.insert(format!("{svc}/{id}"), n);
        }
    }
    nodes
}

fn push_changes(
    parts: &mut Vec<String>,
    what: &str,
    old: &BTreeMap<String, Value>,
    new: &BTreeMap<String, Value>,
) {
    let added = new
        .keys()
        .filter(|k| !old.contains_key(*k))
        .map(|k| format!("+{k}"));
    let removed = old
        .keys()
        .filter(|k| !new.contains_key(*k))
        .map(|k| format!("-{k}"));
    let changed = new
        .iter()
        .filter(|(k, v)| old.get(*k).is_some_and(|o| o != *v))
        .map(|(k, _)| format!("~{k}"));
    let all: Vec<String> = added.chain(removed).chain(changed).collect();
    if all.is_empty() {
        return;
    }
    let mut s = format!("{what} {}", all[..all.len().min(NAMES_SHOWN)].join(" "));
    if all.len() > NAMES_SHOWN {
        let _ = write!(s, " (+{} more)", all.len() - NAMES_SHOWN);
    }
    parts.push(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, parse, Format, EMBEDDED_DEFAULT};

    #[test]
    fn the_embedded_default_is_summarised() {
        let cfg = load(EMBEDDED_DEFAULT, Format::Yaml).unwrap();
        let s = summary(&cfg);
        assert_eq!(
            s,
            format!("1 listener, 1 service (2 nodes), 1 route, sessions off")
        );
        let mut on = cfg.clone();
        on.sessions.enabled = true;
        assert!(
            summary(&on).ends_with("sessions on (memory store)"),
            "{}",
            summary(&on)
        );
    }

    #[test]
    fn a_diff_names_what_was_added_removed_and_changed() {
        let old = parse(EMBEDDED_DEFAULT, Format::Yaml).unwrap();
        assert_eq!(diff(&old, &old), "no changes");
        let mut new = old.clone();
        new.services[0].nodes[0].weight = Some("7".into());
        new.services[0].nodes.pop();
        new.services[0].lb = Some("p2c".into());
        new.routes[0].id = "renamed".into();
        new.timeouts = Some(Default::default());
        let d = diff(&old, &new);
        assert_eq!(
            d,
            format!(
                "services ~demo; nodes -demo/node-2 ~demo/node-1; routes +renamed -{}; sections timeouts",
                old.routes[0].id
            )
        );
    }
}
