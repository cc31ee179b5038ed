//! DNS discovery's pure side (docs/config.md, "discovery.dns").
//!
//! Owns the typed `services[].discovery.dns` ([`DnsDiscovery`]), the id a
//! resolved address gets as a node ([`node_id`]: `<name>@<ip>:<port>`,
//! stable for as long as the address stays in the record set), the node a
//! resolved target becomes ([`dns_node`]), the SRV rules ([`srv_targets`]:
//! only the lowest priority that has an address is used; a record's weight
//! is the node's weight), and [`merge_dns`], which puts a service's last
//! good set of resolved nodes into a document in place of any it carried
//! before. The control plane calls it on every document it applies, so a
//! reload from any source keeps the resolved nodes, and a set that changed
//! goes through the ordinary reload path (a node that left drains).
//!
//! Must not touch: DNS itself, sockets, clocks, live node state (the
//! resolver is `hopgate_control::dns`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::raw::{RawConfig, RawNode, Text};

/// `refresh_min` when not given.
pub const DEFAULT_REFRESH_MIN: Duration = Duration::from_secs(1);
/// `refresh_max` when not given.
pub const DEFAULT_REFRESH_MAX: Duration = Duration::from_secs(30);

/// The record type a service's name is resolved with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsType {
    A,
    Aaaa,
    Srv,
}

impl DnsType {
    pub fn as_str(self) -> &'static str {
        match self {
            DnsType::A => "a",
            DnsType::Aaaa => "aaaa",
            DnsType::Srv => "srv",
        }
    }
}

/// `services[].discovery.dns`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsDiscovery {
    /// As written (a trailing `.` kept: such a name is not searched).
    pub name: String,
    pub kind: DnsType,
    /// The nodes' port for `a` and `aaaa`; `None` for `srv`.
    pub port: Option<u16>,
    /// Name servers, each asked over UDP and TCP; empty: the system's
    /// (`/etc/resolv.conf`).
    pub resolvers: Vec<SocketAddr>,
    pub refresh_min: Duration,
    pub refresh_max: Duration,
}

impl DnsDiscovery {
    /// How long to wait before the next resolution: the answer's TTL
    /// clamped to `[refresh_min, refresh_max]` (`None`: no TTL, as after a
    /// failure: `refresh_min`).
    pub fn next_refresh(&self, ttl: Option<Duration>) -> Duration {
        ttl.unwrap_or(self.refresh_min)
            .clamp(self.refresh_min, self.refresh_max)
    }

    /// Whether `id` is the id of a node this discovery made.
    pub fn owns(&self, id: &str) -> bool {
        is_dns_node(&self.name, id)
    }
}

/// One resolved address with the weight its record gave (`None`: the
/// default node weight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Resolved {
    pub addr: SocketAddr,
    pub weight: Option<u32>,
}

/// The node id of a resolved address: `<name>@<ip>:<port>` (IPv6 in
/// brackets), e.g. `api.internal@10.0.0.7:8080`.
pub fn node_id(name: &str, addr: SocketAddr) -> String {
    format!("{name}@{addr}")
}

/// Whether `id` is one [`node_id`] makes for `name`.
pub fn is_dns_node(name: &str, id: &str) -> bool {
    id.strip_prefix(name)
        .is_some_and(|rest| rest.starts_with('@'))
}

/// The node a resolved address becomes.
pub fn dns_node(name: &str, r: &Resolved) -> RawNode {
    RawNode {
        id: node_id(name, r.addr),
        address: r.addr.to_string(),
        weight: r.weight.map(|w| Text(w.to_string())),
        ..RawNode::default()
    }
}

/// An SRV record's weight as a node weight: 0 (RFC 2782's "very small
/// chance") becomes 1, and at most the node limit, 10 000.
pub fn srv_weight(weight: u16) -> u32 {
    u32::from(weight).clamp(1, 10_000)
}

/// One SRV record with the addresses its target resolved to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvTarget {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    pub addrs: Vec<std::net::IpAddr>,
}

/// The SRV rule: the records of the lowest priority that has at least one
/// address are used; higher priorities are backups, used only when every
/// lower one has none. Each address is a node with the record's port and
/// weight (an address listed by two records of that priority counts once,
/// with the larger weight). Sorted, so equal answers give equal sets.
pub fn srv_targets(records: &[SrvTarget]) -> Vec<Resolved> {
    let Some(priority) = records
        .iter()
        .filter(|r| !r.addrs.is_empty() && r.port != 0)
        .map(|r| r.priority)
        .min()
    else {
        return Vec::new();
    };
    let mut out: BTreeMap<SocketAddr, u32> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.priority == priority && r.port != 0)
    {
        for ip in &r.addrs {
            let w = out.entry(SocketAddr::new(*ip, r.port)).or_insert(0);
            *w = (*w).max(srv_weight(r.weight));
        }
    }
    out.into_iter()
        .map(|(addr, w)| Resolved {
            addr,
            weight: Some(w),
        })
        .collect()
}

/// Addresses of an A or AAAA answer as nodes on `port`, sorted, without
/// duplicates, with the default weight.
pub fn address_targets(ips: &[std::net::IpAddr], port: u16) -> Vec<Resolved> {
    let mut addrs: Vec<SocketAddr> = ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
    addrs.sort();
    addrs.dedup();
    addrs
        .into_iter()
        .map(|addr| Resolved { addr, weight: None })
        .collect()
}

/// Puts each service's resolved nodes into `raw`: in every service whose
/// `discovery.dns` is set, the nodes a discovery made (ids `<name>@…`) are
/// taken out and the ones in `resolved` (keyed by service name, resolved
/// for that name) appended after the static nodes. A service without
/// `discovery.dns` is left as it is. Returns whether `raw` changed.
pub fn merge_dns(
    raw: &mut RawConfig,
    resolved: &BTreeMap<String, (String, Vec<Resolved>)>,
) -> bool {
    let mut changed = false;
    for svc in &mut raw.services {
        let Some(name) = svc
            .discovery
            .as_ref()
            .and_then(|d| d.dns.as_ref())
            .map(|d| d.name.clone())
        else {
            continue;
        };
        let before = svc.nodes.clone();
        svc.nodes.retain(|n| !is_dns_node(&name, &n.id));
        if let Some((for_name, set)) = resolved.get(&svc.name) {
            if *for_name == name {
                for r in set {
                    let id = node_id(&name, r.addr);
                    if svc.nodes.iter().all(|n| n.id != id) {
                        svc.nodes.push(dns_node(&name, r));
                    }
                }
            }
        }
        changed |= svc.nodes != before;
    }
    changed
}

#[cfg(test)]
mod tests;
