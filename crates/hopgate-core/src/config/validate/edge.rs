//! Validation of the edge sections: `listeners`, `admin`, `access`,
//! `timeouts` and `limits`, and the parsers of listening addresses and
//! CIDRs. Same contract as the parent module: every error with its path,
//! never a silent default for a present value, no I/O (no DNS), no panic.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ipnet::IpNet;

use super::services::parse_host_port;
use super::values::{int_in, is_env_name, positive_duration, size_in, to_usize};
use super::{Validator, PLACEHOLDER_ADDR};
use crate::config::raw::{RawAccess, RawAdmin, RawLimits, RawListener, RawTimeouts, Text};
use crate::config::{AccessConfig, AdminConfig, Limits, ListenerConfig, Timeouts};
use crate::units;

/// The admin listener's address when the document has no `admin` section.
pub(super) const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9901);

impl Validator {
    /// The listeners, each with whether its address parsed.
    pub(super) fn listeners(&mut self, raw: &[RawListener]) -> Vec<(ListenerConfig, bool)> {
        if raw.is_empty() {
            self.err(
                "listeners",
                "at least one listener is required, like { name: public, address: 127.0.0.1:8080 }",
            );
        }
        let mut out: Vec<(ListenerConfig, bool)> = Vec::with_capacity(raw.len());
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, l) in raw.iter().enumerate() {
            let p = format!("listeners[{i}]");
            if l.name.is_empty() {
                self.err(format!("{p}.name"), "a listener needs a name");
            } else if let Some(first) = names.get(l.name.as_str()) {
                self.err(
                    format!("{p}.name"),
                    format!(
                        "duplicate listener name {:?} (also listeners[{first}])",
                        l.name
                    ),
                );
            } else {
                names.insert(&l.name, i);
            }
            let address = self.check(format!("{p}.address"), parse_bind_addr(&l.address));
            if let Some(addr) = address {
                let clash = out
                    .iter()
                    .enumerate()
                    .find(|(_, (o, ok))| *ok && same_bind(o.address, addr));
                if let Some((j, (o, _))) = clash {
                    self.err(
                        format!("{p}.address"),
                        format!(
                            "address {:?} conflicts with listeners[{j}].address ({})",
                            l.address, o.address
                        ),
                    );
                }
            }
            let tls = l
                .tls
                .as_ref()
                .map(|t| self.listener_tls(&format!("{p}.tls"), t));
            let http1 = self.http1_server(&p, l.http1.as_deref());
            let proxy_protocol = l
                .proxy_protocol
                .as_ref()
                .map(|pp| self.listener_proxy_protocol(&format!("{p}.proxy_protocol"), pp));
            out.push((
                ListenerConfig {
                    name: l.name.clone(),
                    address: address.unwrap_or(PLACEHOLDER_ADDR),
                    debug_headers: l.debug_headers,
                    normalize_path: l.normalize_path.unwrap_or(true),
                    tls,
                    http1,
                    proxy_protocol,
                },
                address.is_some(),
            ));
        }
        out
    }

    pub(super) fn admin(
        &mut self,
        raw: Option<&RawAdmin>,
        listeners: &[(ListenerConfig, bool)],
    ) -> AdminConfig {
        // Without `admin`, or without its `address`, the default applies.
        let given = raw.map(|r| r.address.as_str()).filter(|a| !a.is_empty());
        let address = match given {
            Some(a) => self.check("admin.address", parse_bind_addr(a)),
            None => Some(DEFAULT_ADMIN),
        };
        if let Some(addr) = address {
            let clash = listeners
                .iter()
                .enumerate()
                .find(|(_, (l, ok))| *ok && same_bind(l.address, addr));
            match clash {
                Some((j, (l, _))) if given.is_some() => self.err(
                    "admin.address",
                    format!(
                        "address {addr} conflicts with listeners[{j}].address ({}): the admin \
                         listener needs its own address",
                        l.address
                    ),
                ),
                // The listener is what the document wrote; name it.
                Some((j, (l, _))) => self.err(
                    format!("listeners[{j}].address"),
                    format!(
                        "address {} conflicts with the admin listener's default address \
                         {addr}: use another address or set admin.address",
                        l.address
                    ),
                ),
                None => {}
            }
        }
        let Some(raw) = raw else {
            return AdminConfig {
                address: address.unwrap_or(PLACEHOLDER_ADDR),
                token_env: None,
            };
        };
        if let Some(t) = &raw.token_env {
            if !is_env_name(t) {
                self.err(
                    "admin.token_env",
                    format!(
                        "invalid environment variable name {t:?}: expected letters, digits and \
                         '_', like \"HOPGATE_ADMIN_TOKEN\""
                    ),
                );
            }
        } else if let Some(addr) = address.filter(|a| !a.ip().is_loopback()) {
            self.err(
                "admin.token_env",
                format!(
                    "required because the admin address {addr} is not loopback: name the \
                     environment variable holding the admin token"
                ),
            );
        }
        AdminConfig {
            address: address.unwrap_or(PLACEHOLDER_ADDR),
            token_env: raw.token_env.clone(),
        }
    }

    // ----- services -----

    pub(super) fn access(&mut self, raw: Option<&RawAccess>) -> AccessConfig {
        let Some(raw) = raw else {
            return AccessConfig::default();
        };
        AccessConfig {
            allow: self.cidrs("access.allow_cidrs", &raw.allow_cidrs),
            deny: self.cidrs("access.deny_cidrs", &raw.deny_cidrs),
            trusted_proxies: self.cidrs("access.trusted_proxies", &raw.trusted_proxies),
        }
    }

    pub(super) fn cidrs(&mut self, p: &str, raw: &[String]) -> Vec<IpNet> {
        raw.iter()
            .enumerate()
            .filter_map(|(j, c)| self.check(format!("{p}[{j}]"), parse_cidr(c)))
            .collect()
    }

    pub(super) fn timeouts(&mut self, raw: Option<&RawTimeouts>) -> Timeouts {
        let mut t = Timeouts::default();
        let Some(raw) = raw else { return t };
        let fields: [(&str, &Option<Text>, &mut Duration); 5] = [
            ("connect", &raw.connect, &mut t.connect),
            ("request", &raw.request, &mut t.request),
            ("idle", &raw.idle, &mut t.idle),
            ("header_read", &raw.header_read, &mut t.header_read),
            ("shutdown", &raw.shutdown, &mut t.shutdown),
        ];
        for (name, text, slot) in fields {
            if let Some(text) = text {
                if let Some(d) = self.check(format!("timeouts.{name}"), positive_duration(text)) {
                    *slot = d;
                }
            }
        }
        if let Some(text) = &raw.shutdown_delay {
            let r = units::parse_duration(&text.0).and_then(|d| {
                if d > Duration::from_secs(3600) {
                    Err(format!("duration {:?} is above the limit of 1h", text.0))
                } else {
                    Ok(d)
                }
            });
            if let Some(d) = self.check("timeouts.shutdown_delay", r) {
                t.shutdown_delay = d;
            }
        }
        t
    }

    pub(super) fn limits(&mut self, raw: Option<&RawLimits>) -> Limits {
        let mut l = Limits::default();
        let Some(raw) = raw else { return l };
        if let Some(t) = &raw.max_header_bytes {
            let r = size_in(t, 1 << 10, 1 << 20, "1KiB", "1MiB");
            if let Some(n) = self.check("limits.max_header_bytes", r) {
                l.max_header_bytes = to_usize(n);
            }
        }
        if let Some(t) = &raw.max_headers {
            if let Some(n) = self.check("limits.max_headers", int_in(t, 1, 10_000)) {
                l.max_headers = to_usize(n);
            }
        }
        if let Some(t) = &raw.max_uri_bytes {
            let r = size_in(t, 256, 1 << 20, "256", "1MiB");
            if let Some(n) = self.check("limits.max_uri_bytes", r) {
                l.max_uri_bytes = to_usize(n);
            }
        }
        if let Some(t) = &raw.max_body_bytes {
            let r = size_in(t, 1, u64::MAX, "1", "");
            if let Some(n) = self.check("limits.max_body_bytes", r) {
                l.max_body_bytes = n;
            }
        }
        if let Some(t) = &raw.max_connections {
            if let Some(n) = self.check("limits.max_connections", int_in(t, 1, 10_000_000)) {
                l.max_connections = Some(to_usize(n));
            }
        }
        if let Some(t) = &raw.max_connections_per_client {
            let r = int_in(t, 1, 1_000_000);
            if let Some(n) = self.check("limits.max_connections_per_client", r) {
                l.max_connections_per_client = Some(n as u32);
            }
        }
        l
    }
}

/// A listening address: `ip:port`, `[v6]:port` or `localhost:port`.
fn parse_bind_addr(s: &str) -> Result<SocketAddr, String> {
    if s.is_empty() {
        return Err("required: an ip:port, like \"127.0.0.1:8080\"".to_owned());
    }
    if s.contains("://") {
        return Err(format!(
            "invalid address {s:?}: a listener address has no scheme, like \"127.0.0.1:8080\""
        ));
    }
    parse_host_port(s, s)
}

/// Would binding both addresses conflict? Port 0 (an ephemeral port) never
/// does; an unspecified address covers every address of its family.
fn same_bind(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip()
            || (a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified())))
}

/// `10.0.0.0/8`, `fd00::/8`, or a bare IP (a single host).
pub(super) fn parse_cidr(s: &str) -> Result<IpNet, String> {
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(IpNet::from(ip));
    }
    Err(format!(
        "invalid CIDR {s:?}: expected a network like \"10.0.0.0/8\" or \"fd00::/8\", or a bare IP"
    ))
}
