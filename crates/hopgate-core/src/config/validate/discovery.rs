//! Validation of `services[].discovery`: the DNS name (and for `type: srv`
//! its `_service._proto.` prefix), the record type, the port, the
//! resolvers and the refresh bounds. Same contract as the parent module:
//! every error with its path, no I/O (the name is checked, never
//! resolved), no panic.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::values::{int_in, unknown_choice};
use super::Validator;
use crate::config::discovery::{DnsDiscovery, DnsType, DEFAULT_REFRESH_MAX, DEFAULT_REFRESH_MIN};
use crate::config::raw::{RawDiscovery, RawDnsDiscovery, Text};
use crate::units;

const TYPE_NAMES: [&str; 3] = ["a", "aaaa", "srv"];
const REFRESH_FLOOR: Duration = Duration::from_millis(100);
const REFRESH_CEILING: Duration = Duration::from_secs(3600);

/// A name to resolve: dot-separated labels of letters, digits, hyphens and
/// underscores (1–63 bytes, no hyphen at either end), 253 bytes at most,
/// an optional final dot; not an IP address.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("required: a DNS name, like \"api.internal\"".to_owned());
    }
    if name.parse::<IpAddr>().is_ok() {
        return Err(format!(
            "{name:?} is an IP address, not a name: list it as a static node instead"
        ));
    }
    let bare = name.strip_suffix('.').unwrap_or(name);
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if bare.is_empty() || bare.len() > 253 || !bare.split('.').all(ok_label) {
        return Err(format!(
            "{name:?} is not a DNS name (labels of letters, digits, '-' and '_', like api.internal)"
        ));
    }
    Ok(())
}

/// An SRV name starts with `_service._proto.` and names a domain after it.
fn check_srv_name(name: &str) -> Result<(), String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    let labels: Vec<&str> = bare.split('.').collect();
    let underscored = |l: &str| l.len() > 1 && l.starts_with('_');
    if labels.len() < 3 || !underscored(labels[0]) || !underscored(labels[1]) {
        return Err(format!(
            "{name:?}: an SRV name starts with _service._proto. and a domain, like \"_http._tcp.api.internal\""
        ));
    }
    Ok(())
}

fn refresh(t: &Text) -> Result<Duration, String> {
    let d = units::parse_duration(&t.0)?;
    if !(REFRESH_FLOOR..=REFRESH_CEILING).contains(&d) {
        return Err(format!(
            "duration {:?} is out of range: expected 100ms to 1h",
            t.0
        ));
    }
    Ok(d)
}

fn resolver(s: &str) -> Result<SocketAddr, String> {
    let addr = s.parse::<SocketAddr>().map_err(|_| {
        format!("invalid resolver {s:?}: expected ip:port, like \"127.0.0.1:53\" or \"[::1]:53\"")
    })?;
    if addr.port() == 0 || addr.ip().is_unspecified() {
        return Err(format!(
            "invalid resolver {s:?}: a name server needs a real address and port"
        ));
    }
    Ok(addr)
}

impl Validator {
    pub(super) fn discovery(
        &mut self,
        p: &str,
        raw: Option<&RawDiscovery>,
    ) -> Option<DnsDiscovery> {
        let dns = raw?.dns.as_ref()?;
        self.dns_discovery(&format!("{p}.dns"), dns)
    }

    fn dns_discovery(&mut self, p: &str, d: &RawDnsDiscovery) -> Option<DnsDiscovery> {
        let before = self.errors.len();
        let kind = match d.kind.as_deref() {
            None | Some("a") => Some(DnsType::A),
            Some("aaaa") => Some(DnsType::Aaaa),
            Some("srv") => Some(DnsType::Srv),
            Some(other) => {
                self.err(
                    format!("{p}.type"),
                    unknown_choice("record type", other, &TYPE_NAMES),
                );
                None
            }
        };
        let named = self.check(format!("{p}.name"), check_name(&d.name));
        if named.is_some() && kind == Some(DnsType::Srv) {
            self.check(format!("{p}.name"), check_srv_name(&d.name));
        }
        let port = match (kind, &d.port) {
            (Some(DnsType::Srv), Some(_)) => {
                self.err(
                    format!("{p}.port"),
                    "not allowed with type: srv (each SRV record carries its port)",
                );
                None
            }
            (Some(DnsType::A | DnsType::Aaaa), None) => {
                self.err(
                    format!("{p}.port"),
                    "required with type: a or aaaa: the nodes' port, like 8080",
                );
                None
            }
            (_, Some(t)) => self
                .check(format!("{p}.port"), int_in(t, 1, 65_535))
                .and_then(|n| u16::try_from(n).ok()),
            (_, None) => None,
        };
        let mut resolvers = Vec::new();
        if let Some(list) = &d.resolvers {
            if list.is_empty() {
                self.err(
                    format!("{p}.resolvers"),
                    "an empty list resolves nothing: leave it out to use /etc/resolv.conf's name servers",
                );
            }
            for (i, r) in list.iter().enumerate() {
                if let Some(a) = self.check(format!("{p}.resolvers[{i}]"), resolver(r)) {
                    resolvers.push(a);
                }
            }
        }
        let refresh_min = match &d.refresh_min {
            None => Some(DEFAULT_REFRESH_MIN),
            Some(t) => self.check(format!("{p}.refresh_min"), refresh(t)),
        };
        let refresh_max = match &d.refresh_max {
            None => Some(DEFAULT_REFRESH_MAX),
            Some(t) => self.check(format!("{p}.refresh_max"), refresh(t)),
        };
        if let (Some(lo), Some(hi)) = (refresh_min, refresh_max) {
            if lo > hi {
                self.err(
                    format!("{p}.refresh_min"),
                    format!("refresh_min ({lo:?}) is above refresh_max ({hi:?})"),
                );
            }
        }
        if self.errors.len() != before {
            return None;
        }
        Some(DnsDiscovery {
            name: d.name.clone(),
            kind: kind.unwrap_or(DnsType::A),
            port,
            resolvers,
            refresh_min: refresh_min.unwrap_or(DEFAULT_REFRESH_MIN),
            refresh_max: refresh_max.unwrap_or(DEFAULT_REFRESH_MAX),
        })
    }
}
