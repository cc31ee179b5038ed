//! Stage two: check a [`RawConfig`] and produce the typed [`Config`].
//!
//! Owns every rule a document must satisfy beyond its shape: addresses,
//! names and references, ranges, units, CIDRs, regexes and the combinations
//! of fields that make sense together. Every check records its problem under
//! the field path it concerns (`routes[2].service`,
//! `services[0].nodes[1].address`) and carries on, so one run reports every
//! error of a document. A missing optional value takes its default; a value
//! that is present but wrong is always an error, never quietly replaced.
//!
//! Must not touch: I/O of any kind. In particular no DNS: node and listener
//! addresses are IP addresses or `localhost`. Must never panic, whatever the
//! input (the admin API feeds it untrusted documents).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use regex::Regex;

use super::raw::{
    RawAccess, RawAdmin, RawHashOn, RawLimits, RawListener, RawMatch, RawNode, RawPool, RawRoute,
    RawService, RawSplit, RawTimeouts, Text,
};
use super::{
    AccessConfig, AdminConfig, Config, ConfigError, HashOn, LbPolicy, Limits, ListenerConfig,
    NodeConfig, PoolConfig, RawConfig, RouteConfig, ServiceConfig, Target, Timeouts,
    UpstreamProtocol, DEFAULT_POOL_MAX_IDLE, DEFAULT_WEIGHT,
};
use crate::route::{HostMatch, MatchSpec, PathMatch};
use crate::units;

mod pool_limits;
mod resilience;
#[cfg(test)]
mod tests;

/// The admin listener's address when the document has no `admin` section.
const DEFAULT_ADMIN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9901);

/// Stands in for a value that failed validation; never reaches a caller,
/// because any error makes [`validate`] return `Err`.
const PLACEHOLDER_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

const LB_NAMES: [&str; 5] = ["wrr_ring", "smooth_wrr", "random", "p2c", "hash"];
const PROTOCOL_NAMES: [&str; 2] = ["http1", "http2"];
const MAX_WEIGHT: i64 = 10_000;

/// Validates a raw document, returning every problem found, each with its
/// field path.
pub fn validate(raw: &RawConfig) -> Result<Config, Vec<ConfigError>> {
    let mut v = Validator::default();
    let listeners = v.listeners(&raw.listeners);
    let admin = v.admin(raw.admin.as_ref(), &listeners);
    // Services need the idle timeout (pool default) before timeouts are
    // reached in document order; check them aside and report them in place.
    let mut tv = Validator::default();
    let timeouts = tv.timeouts(raw.timeouts.as_ref());
    let fleet = raw.sources.as_ref().is_some_and(|s| s.etcd.is_some());
    let replica_id = raw.replica_id.as_ref().and_then(|r| {
        v.check("replica_id", check_label("replica_id", r))
            .map(|()| r.clone())
    });
    let services = v.services(&raw.services, timeouts.idle, fleet);
    let routes = v.routes(&raw.routes, &raw.services);
    let access = v.access(raw.access.as_ref());
    v.errors.append(&mut tv.errors);
    let limits = v.limits(raw.limits.as_ref());
    let retries = v.retries(raw.retries.as_ref());
    let sources = v.sources(raw.sources.as_ref());
    let sessions = v.sessions(raw.sessions.as_ref());
    let store = v.store(raw.store.as_ref());
    let maintenance = v.maintenance(raw.maintenance.as_ref());
    if !v.errors.is_empty() {
        return Err(v.errors);
    }
    Ok(Config {
        raw: raw.clone(),
        replica_id,
        listeners: listeners.into_iter().map(|(l, _)| l).collect(),
        admin,
        services,
        routes,
        access,
        timeouts,
        limits,
        retries,
        sources,
        sessions,
        store,
        maintenance,
    })
}

#[derive(Default)]
struct Validator {
    errors: Vec<ConfigError>,
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError::new(path, message));
    }

    /// Records `r`'s error under `path`; the value when there is none.
    fn check<T>(&mut self, path: impl Into<String>, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(t) => Some(t),
            Err(m) => {
                self.err(path, m);
                None
            }
        }
    }

    // ----- listeners and admin -----

    /// The listeners, each with whether its address parsed.
    fn listeners(&mut self, raw: &[RawListener]) -> Vec<(ListenerConfig, bool)> {
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
            out.push((
                ListenerConfig {
                    name: l.name.clone(),
                    address: address.unwrap_or(PLACEHOLDER_ADDR),
                    debug_headers: l.debug_headers,
                    normalize_path: l.normalize_path.unwrap_or(true),
                },
                address.is_some(),
            ));
        }
        out
    }

    fn admin(
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

    /// `fleet`: `sources.etcd` is set, so discovery may feed a service that
    /// lists no static nodes.
    fn services(
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

    fn service(
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

        if s.nodes.is_empty() && !fleet {
            self.err(
                format!("{p}.nodes"),
                "a service needs at least one node (an empty list is allowed only with \
                 sources.etcd, whose discovery adds nodes)",
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
            nodes,
        }
    }

    fn hash_on(&mut self, p: &str, h: &RawHashOn) -> Option<HashOn> {
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

    fn pool(&mut self, p: &str, raw: Option<&RawPool>, default_idle: Duration) -> PoolConfig {
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

    fn node(&mut self, p: &str, n: &RawNode) -> NodeConfig {
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

    fn routes(&mut self, raw: &[RawRoute], services: &[RawService]) -> Vec<RouteConfig> {
        // References resolve against the raw services (first of a name), so
        // a service with its own errors does not also break its routes.
        let mut by_name: HashMap<&str, usize> = HashMap::new();
        for (i, s) in services.iter().enumerate() {
            if !s.name.is_empty() {
                by_name.entry(&s.name).or_insert(i);
            }
        }
        let mut ids: HashMap<&str, usize> = HashMap::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            let p = format!("routes[{i}]");
            if r.id.is_empty() {
                self.err(format!("{p}.id"), "a route needs an id");
            } else if let Err(m) = check_route_id(&r.id) {
                self.err(format!("{p}.id"), m);
            } else if let Some(first) = ids.get(r.id.as_str()) {
                self.err(
                    format!("{p}.id"),
                    format!("duplicate route id {:?} (also routes[{first}])", r.id),
                );
            } else {
                ids.insert(&r.id, i);
            }
            out.push(self.route(&p, r, services, &by_name));
        }
        out
    }

    fn route(
        &mut self,
        p: &str,
        r: &RawRoute,
        services: &[RawService],
        by_name: &HashMap<&str, usize>,
    ) -> RouteConfig {
        let mut priority = 0;
        if let Some(t) = &r.priority {
            if let Some(n) = self.check(
                format!("{p}.priority"),
                int_in(t, i64::from(i32::MIN), i64::from(i32::MAX)),
            ) {
                priority = i32::try_from(n).unwrap_or_default();
            }
        }
        let matcher = self.matcher(&format!("{p}.match"), &r.matches);

        let service = if r.service.is_empty() {
            self.err(
                format!("{p}.service"),
                "required: name the service this route sends to",
            );
            None
        } else if let Some(&idx) = by_name.get(r.service.as_str()) {
            Some(idx)
        } else {
            let mut m = format!("unknown service {:?}", r.service);
            if let Some(near) = closest(&r.service, by_name.keys().copied()) {
                m.push_str(&format!(" (did you mean {near:?}?)"));
            }
            self.err(format!("{p}.service"), m);
            None
        };
        // Versions of the referenced service; `None` when it is unknown, so
        // that an unknown service is reported once, not once per version.
        let versions: Option<Vec<&str>> = service.and_then(|i| services.get(i)).map(|s| {
            let mut vs: Vec<&str> = Vec::new();
            for n in &s.nodes {
                if let Some(v) = n.version.as_deref().filter(|v| !v.is_empty()) {
                    if !vs.contains(&v) {
                        vs.push(v);
                    }
                }
            }
            vs
        });

        let mut target = Target::Service;
        if r.version.is_some() && r.split.is_some() {
            self.err(
                format!("{p}.split"),
                "version and split are mutually exclusive: use version for one version, split \
                 to share traffic between versions",
            );
        }
        if let Some(v) = &r.version {
            if self.version_ref(&format!("{p}.version"), v, &r.service, versions.as_deref()) {
                target = Target::Version(v.clone());
            }
        }
        if let Some(arms) = &r.split {
            if let Some(arms) =
                self.split(&format!("{p}.split"), arms, &r.service, versions.as_deref())
            {
                target = Target::Split(arms);
            }
        }
        if r.strict_version && r.version.is_none() && r.split.is_none() {
            self.err(
                format!("{p}.strict_version"),
                "requires version or split: without one there is no version to be strict about",
            );
        }
        RouteConfig {
            id: r.id.clone(),
            priority,
            matcher,
            service: service.unwrap_or_default(),
            target,
            strict_version: r.strict_version,
            enabled: r.enabled.unwrap_or(true),
        }
    }

    /// Checks that `v` names a version of the service; true when it does.
    fn version_ref(&mut self, p: &str, v: &str, service: &str, versions: Option<&[&str]>) -> bool {
        if v.is_empty() {
            self.err(
                p,
                "must not be empty: name a version of the service's nodes",
            );
            return false;
        }
        let Some(versions) = versions else {
            return false;
        };
        if versions.contains(&v) {
            return true;
        }
        let known = if versions.is_empty() {
            "its nodes have no version".to_owned()
        } else {
            format!("versions: {}", versions.join(", "))
        };
        self.err(
            p,
            format!("service {service:?} has no node with version {v:?} ({known})"),
        );
        false
    }

    fn split(
        &mut self,
        p: &str,
        arms: &[RawSplit],
        service: &str,
        versions: Option<&[&str]>,
    ) -> Option<Vec<(String, u32)>> {
        if arms.is_empty() {
            self.err(p, "must list at least one { version, weight }");
            return None;
        }
        let before = self.errors.len();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut out = Vec::with_capacity(arms.len());
        let mut any_weight = false;
        let mut all_weights_ok = true;
        for (j, a) in arms.iter().enumerate() {
            let ap = format!("{p}[{j}]");
            if let Some(first) = seen.get(a.version.as_str()) {
                self.err(
                    format!("{ap}.version"),
                    format!("duplicate version {:?} (also split[{first}])", a.version),
                );
            } else {
                self.version_ref(&format!("{ap}.version"), &a.version, service, versions);
                seen.insert(&a.version, j);
            }
            let weight = match &a.weight {
                None => {
                    self.err(
                        format!("{ap}.weight"),
                        "required: an integer from 0 to 10000",
                    );
                    None
                }
                Some(t) => self.check(format!("{ap}.weight"), int_in(t, 0, MAX_WEIGHT)),
            };
            match weight {
                Some(w) if w > 0 => {
                    any_weight = true;
                    out.push((a.version.clone(), to_u32(w)));
                }
                Some(_) => {}
                None => all_weights_ok = false,
            }
        }
        if all_weights_ok && !any_weight {
            self.err(
                p,
                "every weight is 0: at least one version must get traffic",
            );
        }
        (self.errors.len() == before).then_some(out)
    }

    fn matcher(&mut self, p: &str, m: &RawMatch) -> MatchSpec {
        let mut spec = MatchSpec::default();
        if let Some(h) = &m.host {
            if let Some(host) = self.check(format!("{p}.host"), parse_host_match(h)) {
                spec.host = host;
            }
        }

        let kinds: Vec<&str> = [
            ("path", m.path.is_some()),
            ("path_prefix", m.path_prefix.is_some()),
            ("path_regex", m.path_regex.is_some()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| *k)
        .collect();
        if kinds.len() > 1 {
            self.err(
                p,
                format!(
                    "at most one of path, path_prefix and path_regex is allowed (found {})",
                    kinds.join(" and ")
                ),
            );
        }
        if let Some(path) = &m.path {
            if let Some(path) = self.check(format!("{p}.path"), check_path(path)) {
                spec.path = PathMatch::Exact(path);
            }
        }
        if let Some(prefix) = &m.path_prefix {
            if let Some(prefix) = self.check(format!("{p}.path_prefix"), check_path(prefix)) {
                spec.path = PathMatch::Prefix(prefix);
            }
        }
        if let Some(re) = &m.path_regex {
            if let Some(re) = self.check(format!("{p}.path_regex"), compile_regex(re)) {
                spec.path = PathMatch::Regex(re);
            }
        }

        for (j, method) in m.methods.iter().enumerate() {
            if let Some(method) = self.check(format!("{p}.methods[{j}]"), parse_method(method)) {
                if !spec.methods.contains(&method) {
                    spec.methods.push(method);
                }
            }
        }

        for (name, value) in &m.headers {
            let hp = format!("{p}.headers.{name}");
            let name = self.check(hp.clone(), parse_header_name(name));
            let value = self.check(hp.clone(), parse_header_value(value));
            if let Some(name) = name {
                if spec.headers.iter().any(|(n, _)| *n == name) {
                    self.err(
                        hp,
                        format!("header {name:?} is listed twice (header names ignore case)"),
                    );
                } else if let Some(value) = value {
                    spec.headers.push((name, value));
                }
            }
        }

        for (key, value) in &m.query {
            if key.is_empty() {
                self.err(
                    format!("{p}.query"),
                    "query parameter names must not be empty",
                );
                continue;
            }
            let qp = format!("{p}.query.{key}");
            if key.contains(['&', '=', '#']) {
                self.err(
                    qp,
                    format!(
                        "invalid query parameter name {key:?}: it must not contain '&', '=' or '#'"
                    ),
                );
            } else if value.contains(['&', '#']) {
                self.err(
                    qp,
                    format!("invalid query value {value:?}: it must not contain '&' or '#'"),
                );
            } else {
                spec.query.push((key.clone(), value.clone()));
            }
        }

        for (j, c) in m.source_cidrs.iter().enumerate() {
            if let Some(net) = self.check(format!("{p}.source_cidrs[{j}]"), parse_cidr(c)) {
                spec.source_cidrs.push(net);
            }
        }
        spec
    }

    // ----- access, timeouts, limits -----

    fn access(&mut self, raw: Option<&RawAccess>) -> AccessConfig {
        let Some(raw) = raw else {
            return AccessConfig::default();
        };
        AccessConfig {
            allow: self.cidrs("access.allow_cidrs", &raw.allow_cidrs),
            deny: self.cidrs("access.deny_cidrs", &raw.deny_cidrs),
            trusted_proxies: self.cidrs("access.trusted_proxies", &raw.trusted_proxies),
        }
    }

    fn cidrs(&mut self, p: &str, raw: &[String]) -> Vec<IpNet> {
        raw.iter()
            .enumerate()
            .filter_map(|(j, c)| self.check(format!("{p}[{j}]"), parse_cidr(c)))
            .collect()
    }

    fn timeouts(&mut self, raw: Option<&RawTimeouts>) -> Timeouts {
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
        t
    }

    fn limits(&mut self, raw: Option<&RawLimits>) -> Limits {
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
                l.max_connections = to_usize(n);
            }
        }
        l
    }
}

// ----- value parsers: each returns the message of its error -----

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

/// A node address: `ip:port`, `localhost:port` or `http://ip:port`.
fn parse_upstream_addr(s: &str) -> Result<SocketAddr, String> {
    if s.is_empty() {
        return Err("required: an ip:port, like \"127.0.0.1:8081\"".to_owned());
    }
    let mut authority = match s.split_once("://") {
        Some((scheme, _)) if scheme.eq_ignore_ascii_case("https") => {
            return Err(format!(
                "https upstreams are not supported yet ({s:?}): use http:// or a bare ip:port"
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
fn parse_host_port(s: &str, whole: &str) -> Result<SocketAddr, String> {
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

/// Would binding both addresses conflict? Port 0 (an ephemeral port) never
/// does; an unspecified address covers every address of its family.
fn same_bind(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip()
            || (a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified())))
}

/// `10.0.0.0/8`, `fd00::/8`, or a bare IP (a single host).
fn parse_cidr(s: &str) -> Result<IpNet, String> {
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

/// An integer from `min` to `max` inclusive.
fn int_in(t: &Text, min: i64, max: i64) -> Result<i64, String> {
    let s = t.0.as_str();
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{s:?} is not an integer: expected an integer from {min} to {max}"
        ));
    }
    match s.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is out of range: expected an integer from {min} to {max}"
        )),
    }
}

/// A size (units::parse_size) from `min` to `max` bytes; `lo`/`hi` spell the
/// bounds for the message (`hi` empty: no upper bound).
fn size_in(t: &Text, min: u64, max: u64, lo: &str, hi: &str) -> Result<u64, String> {
    let n = units::parse_size(&t.0)?;
    if (min..=max).contains(&n) {
        return Ok(n);
    }
    Err(if hi.is_empty() {
        format!("size {:?} is out of range: expected at least {lo}", t.0)
    } else {
        format!("size {:?} is out of range: expected {lo} to {hi}", t.0)
    })
}

fn positive_duration(t: &Text) -> Result<Duration, String> {
    let d = units::parse_duration(&t.0)?;
    if d.is_zero() {
        return Err(format!("duration {:?} must be greater than 0", t.0));
    }
    Ok(d)
}

/// `api.example.com` (exact) or `*.example.com` (any subdomain), lowercased.
fn parse_host_match(h: &str) -> Result<HostMatch, String> {
    if h.is_empty() {
        return Err("must not be empty: leave host out to match any host".to_owned());
    }
    if h == "*" {
        return Err("\"*\" is not a host: leave host out to match any host".to_owned());
    }
    let lower = h.to_ascii_lowercase();
    if let Some(inner) = lower.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        if inner.parse::<Ipv6Addr>().is_ok() {
            return Ok(HostMatch::Exact(lower));
        }
    }
    let (wild, name) = match lower.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, lower.as_str()),
    };
    if name.contains('*') {
        return Err(format!(
            "invalid host {h:?}: '*' is only allowed as a leading \"*.\", like \"*.example.com\""
        ));
    }
    if name.contains(':') {
        return Err(format!(
            "invalid host {h:?}: a host match must not include a port"
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("invalid host {h:?}: empty label (check the dots)"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!(
                "invalid host {h:?}: expected letters, digits, '-' and '.', like \"api.example.com\""
            ));
        }
    }
    Ok(if wild {
        HostMatch::Suffix(format!(".{name}"))
    } else {
        HostMatch::Exact(lower)
    })
}

/// An exact path or prefix: starts with `/`, no query or fragment.
fn check_path(p: &str) -> Result<String, String> {
    if !p.starts_with('/') {
        return Err(format!("path {p:?} must start with \"/\""));
    }
    if p.contains(['?', '#']) {
        return Err(format!(
            "path {p:?} must not contain '?' or '#': match query parameters with match.query"
        ));
    }
    if p.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "path {p:?} must not contain whitespace or control characters"
        ));
    }
    Ok(p.to_owned())
}

/// Compiled regexes of recent configs, by pattern: a reload recompiles only
/// the patterns that changed (compiling is by far the costliest part of
/// validating a big config). Bounded; cleared when full.
static REGEX_CACHE: std::sync::LazyLock<parking_lot::Mutex<HashMap<String, Regex>>> =
    std::sync::LazyLock::new(Default::default);
const REGEX_CACHE_MAX: usize = 50_000;

fn compile_regex(re: &str) -> Result<Regex, String> {
    if let Some(hit) = REGEX_CACHE.lock().get(re) {
        return Ok(hit.clone());
    }
    let compiled = compile_regex_uncached(re)?;
    let mut cache = REGEX_CACHE.lock();
    if cache.len() >= REGEX_CACHE_MAX {
        cache.clear();
    }
    cache.insert(re.to_owned(), compiled.clone());
    Ok(compiled)
}

fn compile_regex_uncached(re: &str) -> Result<Regex, String> {
    Regex::new(re).map_err(|e| {
        let why = match &e {
            regex::Error::Syntax(text) => text
                .lines()
                .rev()
                .find_map(|l| l.strip_prefix("error: "))
                .unwrap_or("syntax error")
                .to_owned(),
            regex::Error::CompiledTooBig(limit) => {
                format!("compiled form exceeds the {limit} byte limit")
            }
            other => other.to_string(),
        };
        format!("invalid regex {re:?}: {why}")
    })
}

fn parse_method(m: &str) -> Result<Method, String> {
    if m.is_empty() {
        return Err("method must not be empty".to_owned());
    }
    let upper = m.to_ascii_uppercase();
    if !upper.bytes().all(is_tchar) {
        return Err(format!(
            "invalid method {m:?}: expected a token like GET or POST"
        ));
    }
    Method::from_bytes(upper.as_bytes())
        .map_err(|_| format!("invalid method {m:?}: expected a token like GET or POST"))
}

fn parse_header_name(n: &str) -> Result<HeaderName, String> {
    if n.is_empty() {
        return Err("header name must not be empty".to_owned());
    }
    HeaderName::from_bytes(n.as_bytes())
        .map_err(|_| format!("invalid header name {n:?}: expected a token like \"X-Canary\""))
}

fn parse_header_value(v: &str) -> Result<HeaderValue, String> {
    if v.starts_with([' ', '\t']) || v.ends_with([' ', '\t']) {
        return Err(format!(
            "header value {v:?} must not start or end with whitespace (it would never match)"
        ));
    }
    HeaderValue::from_str(v)
        .map_err(|_| format!("invalid header value {v:?}: control characters are not allowed"))
}

/// Node ids, versions and zones: non-empty, no whitespace, `/` or control
/// characters (they appear in admin URLs and logs).
fn check_label(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} must not be empty (leave it out instead)"));
    }
    if s.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(format!(
            "invalid {what} {s:?}: it must not contain whitespace, '/' or control characters"
        ));
    }
    Ok(())
}

/// Route ids travel in the `X-Route-Rule-Id` header.
fn check_route_id(id: &str) -> Result<(), String> {
    if id.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(format!(
            "invalid route id {id:?}: use visible ASCII without spaces (it is sent as a header)"
        ))
    }
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// An RFC 9110 token character.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `unknown lb policy "smoth_wrr" (did you mean "smooth_wrr"?): expected one of ...`
fn unknown_choice(what: &str, got: &str, choices: &[&str]) -> String {
    let mut m = format!("unknown {what} {got:?}");
    if let Some(near) = closest(got, choices.iter().copied()) {
        m.push_str(&format!(" (did you mean {near:?}?)"));
    }
    m.push_str(&format!(": expected one of {}", choices.join(", ")));
    m
}

/// The candidate nearest to `name` within edit distance 2 (ignoring ASCII
/// case), if any; ties go to the first.
fn closest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    const MAX_LEN: usize = 64;
    if name.len() > MAX_LEN {
        return None;
    }
    let name = name.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c.len() > MAX_LEN {
            continue;
        }
        let d = edit_distance(&name, &c.to_ascii_lowercase());
        if d <= 2 && !matches!(best, Some((bd, _)) if bd <= d) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

fn to_usize(n: impl TryInto<usize>) -> usize {
    n.try_into().unwrap_or(usize::MAX)
}

fn to_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
