//! Validation of `services[]`: names, balancing policy and hash keys,
//! protocol, pool settings and nodes (ids, addresses, weights, versions,
//! zones). Same contract as the parent module: every error with its path,
//! never a silent default for a present value, no I/O (no DNS), no panic.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::values::{
    check_label, int_in, is_name_byte, is_tchar, parse_header_name, positive_duration, to_u32,
    to_usize, unknown_choice,
};
use super::{Validator, MAX_WEIGHT, PLACEHOLDER_ADDR};
use crate::config::raw::{RawHashOn, RawNode, RawPool, RawService, RawServiceRetries};
use crate::config::{
    HashOn, LbPolicy, NodeConfig, PoolConfig, ServiceConfig, UpstreamProtocol,
    DEFAULT_POOL_MAX_IDLE, DEFAULT_WEIGHT,
};
use crate::retry::RetryOnStatus;

const LB_NAMES: [&str; 5] = ["wrr_ring", "smooth_wrr", "random", "p2c", "hash"];
const PROTOCOL_NAMES: [&str; 2] = ["http1", "http2"];

impl Validator {
    /// `fleet`: `sources.etcd` is set, so discovery may feed a service that
    /// lists no static nodes.
    pub(super) fn services(
        &mut self,
        raw: &[RawService],
        default_idle: Duration,
        fleet: bool,
    ) -> Vec<ServiceConfig> {
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, s) in raw.iter().enumerate() {
            let p = format!("services[{i}]");
            if s.name.is_empty() {
                self.err(format!("{p}.name"), "a service needs a name");
            } else if !s.name.bytes().all(is_name_byte) {
                self.err(
                    format!("{p}.name"),
                    format!(
                        "invalid service name {:?}: use only letters, digits, '_', '.' and '-'",
                        s.name
                    ),
                );
            } else if let Some(first) = names.get(s.name.as_str()) {
                self.err(
                    format!("{p}.name"),
                    format!(
                        "duplicate service name {:?} (also services[{first}])",
                        s.name
                    ),
                );
            } else {
                names.insert(&s.name, i);
            }
            out.push(self.service(&p, s, default_idle, fleet));
        }
        out
    }

    pub(super) fn service(
        &mut self,
        p: &str,
        s: &RawService,
        default_idle: Duration,
        fleet: bool,
    ) -> ServiceConfig {
        let lb = match s.lb.as_deref() {
            None => Some(LbPolicy::SmoothWrr),
            Some(name) => {
                let lb = LbPolicy::parse(name);
                if lb.is_none() {
                    self.err(
                        format!("{p}.lb"),
                        unknown_choice("lb policy", name, &LB_NAMES),
                    );
                }
                lb
            }
        };
        let hash_on = s
            .hash_on
            .as_ref()
            .and_then(|h| self.hash_on(&format!("{p}.hash_on"), h));
        match (lb, &s.hash_on) {
            (Some(LbPolicy::Hash), None) => self.err(
                format!("{p}.hash_on"),
                "required when lb is hash: give one of { header: X-User }, { cookie: name } \
                 or { source_ip: true }",
            ),
            (Some(other), Some(_)) if other != LbPolicy::Hash => self.err(
                format!("{p}.hash_on"),
                format!(
                    "only allowed when lb is hash (lb is {:?})",
                    s.lb.as_deref().unwrap_or("smooth_wrr")
                ),
            ),
            _ => {}
        }
        let protocol = match s.protocol.as_deref() {
            None | Some("http1") => UpstreamProtocol::Http1,
            Some("http2") => UpstreamProtocol::Http2,
            Some(other) => {
                self.err(
                    format!("{p}.protocol"),
                    unknown_choice("protocol", other, &PROTOCOL_NAMES),
                );
                UpstreamProtocol::Http1
            }
        };
        let pool = self.pool(&format!("{p}.pool"), s.pool.as_ref(), default_idle);
        let health = s
            .health
            .as_ref()
            .map(|h| self.health(&format!("{p}.health"), h));
        let outlier = self.outlier(&format!("{p}.outlier"), s.outlier.as_ref());
        let circuit = self.circuit(&format!("{p}.circuit"), s.circuit.as_ref());
        let drain = self.drain(&format!("{p}.drain"), s.drain.as_ref());
        let maintenance =
            self.service_maintenance(&format!("{p}.maintenance"), s.maintenance.as_ref());
        let tls = s
            .tls
            .as_ref()
            .map(|t| self.upstream_tls(&format!("{p}.tls"), t));
        let retry_on = s
            .retries
            .as_ref()
            .map(|r| self.retry_on(&format!("{p}.retries"), r))
            .unwrap_or_default();
        let slow_start = self.duration_or(
            format!("{p}.slow_start"),
            s.slow_start.as_ref(),
            Duration::from_secs(3600),
            Duration::ZERO,
        );
        let proxy_protocol = self.service_proxy_protocol(p, s.proxy_protocol.as_deref(), protocol);

        let discovery = self.discovery(&format!("{p}.discovery"), s.discovery.as_ref());
        let dns = s.discovery.as_ref().is_some_and(|d| d.dns.is_some());
        if s.nodes.is_empty() && !fleet && !dns {
            self.err(
                format!("{p}.nodes"),
                "a service needs at least one node (an empty list is allowed only with \
                 discovery.dns or sources.etcd, whose discovery adds nodes)",
            );
        }
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut nodes = Vec::with_capacity(s.nodes.len());
        for (j, n) in s.nodes.iter().enumerate() {
            let np = format!("{p}.nodes[{j}]");
            if n.id.is_empty() {
                self.err(format!("{np}.id"), "a node needs an id");
            } else if let Err(m) = check_label("node id", &n.id) {
                self.err(format!("{np}.id"), m);
            } else if let Some(first) = ids.get(n.id.as_str()) {
                self.err(
                    format!("{np}.id"),
                    format!("duplicate node id {:?} (also nodes[{first}])", n.id),
                );
            } else {
                ids.insert(&n.id, j);
            }
            nodes.push(self.node(&np, n));
        }
        ServiceConfig {
            name: s.name.clone(),
            lb: lb.unwrap_or(LbPolicy::SmoothWrr),
            hash_on,
            protocol,
            pool,
            health,
            outlier,
            circuit,
            drain,
            maintenance,
            tls,
            slow_start,
            retry_on,
            discovery,
            proxy_protocol,
            nodes,
        }
    }

    /// `services[].retries`: each status 400–599, none in both lists.
    pub(super) fn retry_on(&mut self, p: &str, r: &RawServiceRetries) -> RetryOnStatus {
        let mut out = RetryOnStatus::default();
        let lists = [
            ("on_status", &r.on_status, &mut out.any),
            (
                "on_status_idempotent",
                &r.on_status_idempotent,
                &mut out.idempotent,
            ),
        ];
        let mut seen: HashMap<u16, String> = HashMap::new();
        for (name, list, set) in lists {
            for (j, t) in list.iter().flatten().enumerate() {
                let path = format!("{p}.{name}[{j}]");
                let Some(n) = self.check(path.clone(), int_in(t, 400, 599)) else {
                    continue;
                };
                let status = n as u16;
                if let Some(first) = seen.get(&status) {
                    self.err(
                        path,
                        format!("status {status} is listed twice (also {first})"),
                    );
                    continue;
                }
                seen.insert(status, format!("{name}[{j}]"));
                set.insert(status);
            }
        }
        out
    }

    pub(super) fn hash_on(&mut self, p: &str, h: &RawHashOn) -> Option<HashOn> {
        let source_ip = h.source_ip == Some(true);
        let given = usize::from(h.header.is_some())
            + usize::from(h.cookie.is_some())
            + usize::from(source_ip);
        if given != 1 {
            self.err(
                p,
                format!("needs exactly one of header, cookie or source_ip: true (found {given})"),
            );
        }
        let mut out = source_ip.then_some(HashOn::SourceIp);
        if let Some(name) = &h.header {
            out = self
                .check(format!("{p}.header"), parse_header_name(name))
                .map(HashOn::Header);
        }
        if let Some(c) = &h.cookie {
            if c.is_empty() || !c.bytes().all(is_tchar) {
                self.err(
                    format!("{p}.cookie"),
                    format!("invalid cookie name {c:?}: expected a token like \"session_id\""),
                );
            } else {
                out = Some(HashOn::Cookie(c.clone()));
            }
        }
        out
    }

    pub(super) fn pool(
        &mut self,
        p: &str,
        raw: Option<&RawPool>,
        default_idle: Duration,
    ) -> PoolConfig {
        let mut pool = PoolConfig {
            max_idle: DEFAULT_POOL_MAX_IDLE,
            idle_timeout: default_idle,
            limits: Default::default(),
        };
        let Some(raw) = raw else { return pool };
        pool.limits = self.pool_limits(p, raw);
        if let Some(t) = &raw.max_idle {
            if let Some(n) = self.check(format!("{p}.max_idle"), int_in(t, 0, 10_000)) {
                pool.max_idle = to_usize(n);
            }
        }
        if let Some(t) = &raw.idle_timeout {
            if let Some(d) = self.check(format!("{p}.idle_timeout"), positive_duration(t)) {
                pool.idle_timeout = d;
            }
        }
        pool
    }

    pub(super) fn node(&mut self, p: &str, n: &RawNode) -> NodeConfig {
        let address = self.check(format!("{p}.address"), parse_upstream_addr(&n.address));
        let mut weight = DEFAULT_WEIGHT;
        if let Some(t) = &n.weight {
            if let Some(w) = self.check(format!("{p}.weight"), int_in(t, 1, MAX_WEIGHT)) {
                weight = to_u32(w);
            }
        }
        if let Some(v) = &n.version {
            if let Err(m) = check_label("version", v) {
                self.err(format!("{p}.version"), m);
            }
        }
        if let Some(z) = &n.zone {
            if let Err(m) = check_label("zone", z) {
                self.err(format!("{p}.zone"), m);
            }
        }
        for k in n.labels.keys() {
            if k.is_empty() {
                self.err(format!("{p}.labels"), "label names must not be empty");
            }
        }
        NodeConfig {
            id: n.id.clone(),
            address: address.unwrap_or(PLACEHOLDER_ADDR),
            version: n.version.clone().unwrap_or_default(),
            weight,
            zone: n.zone.clone(),
        }
    }

    // ----- routes -----
}

/// A node address: `ip:port`, `localhost:port` or `http://ip:port`.
fn parse_upstream_addr(s: &str) -> Result<SocketAddr, String> {
    if s.is_empty() {
        return Err("required: an ip:port, like \"127.0.0.1:8081\"".to_owned());
    }
    let mut authority = match s.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(format!(
                "https:// is not a node address ({s:?}): give a bare ip:port and set the service's tls block (tls: {{ ca: ca.pem, server_name: api.internal }})"
            ))
        }
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "unsupported scheme {scheme:?} in {s:?}: expected ip:port or http://ip:port"
            ))
        }
        None => s,
    };
    if let Some(i) = authority.find(['/', '?', '#']) {
        let (head, tail) = authority.split_at(i);
        if tail != "/" {
            return Err(format!(
                "address {s:?} has a URL path {tail:?}: a node is addressed by ip:port only"
            ));
        }
        authority = head;
    }
    if authority.contains('@') {
        return Err(format!("address {s:?} has user info: expected ip:port"));
    }
    let addr = parse_host_port(authority, s)?;
    if addr.port() == 0 {
        return Err(format!(
            "address {s:?} has port 0: a node needs a real port"
        ));
    }
    if addr.ip().is_unspecified() {
        return Err(format!(
            "address {s:?} is unspecified ({}): a node needs an address to connect to",
            addr.ip()
        ));
    }
    Ok(addr)
}

/// Splits `host:port` and accepts IP hosts and `localhost`; `whole` is the
/// text as written, for messages.
pub(super) fn parse_host_port(s: &str, whole: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let Some((host, tail)) = rest.split_once(']') else {
            return Err(format!("invalid address {whole:?}: missing \"]\""));
        };
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(format!(
                "invalid address {whole:?}: {host:?} in brackets is not an IPv6 address"
            ));
        }
        match tail.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if tail.is_empty() => (host, None),
            None => return Err(format!("invalid address {whole:?}: expected [ipv6]:port")),
        }
    } else if s.matches(':').count() > 1 {
        if s.parse::<Ipv6Addr>().is_ok() {
            return Err(format!(
                "address {whole:?} needs a port: write IPv6 as [address]:port, like \"[::1]:8080\""
            ));
        }
        return Err(format!(
            "invalid address {whole:?}: expected ip:port, like \"127.0.0.1:8080\""
        ));
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let Some(port) = port else {
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "address {whole:?} is a bare port: write the IP too, like \"127.0.0.1:{s}\" (this machine only) or \"0.0.0.0:{s}\" (every interface)"
            ));
        }
        return Err(format!("address {whole:?} needs a port, like \"{s}:8080\""));
    };
    if host.is_empty() {
        return Err(format!(
            "address {whole:?} has no host: expected ip:port, like \"0.0.0.0{s}\" or \"127.0.0.1{s}\""
        ));
    }
    let port: u16 = match port.parse() {
        Ok(n) if port.bytes().all(|b| b.is_ascii_digit()) => n,
        _ => {
            return Err(format!(
                "address {whole:?} has an invalid port {port:?}: expected a number from 0 to 65535"
            ))
        }
    };
    let ip = if let Ok(ip) = host.parse::<IpAddr>() {
        ip
    } else if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        return Err(format!(
            "cannot use host {host:?} in {whole:?}: only IP addresses and localhost are accepted"
        ));
    };
    Ok(SocketAddr::new(ip, port))
}
