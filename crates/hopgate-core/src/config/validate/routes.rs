//! Validation of `routes[]`: ids, service and version references, weighted
//! splits and match predicates (hosts, paths, methods, headers, query,
//! source CIDRs), with a bounded cache of compiled regexes. Same contract as
//! the parent module: every error with its path, no I/O, no panic.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use regex::Regex;

use super::edge::parse_cidr;
use super::values::{
    check_route_id, closest, int_in, parse_header_name, parse_header_value, parse_method, to_u32,
};
use super::{Validator, MAX_WEIGHT};
use crate::config::raw::{RawMatch, RawRoute, RawService, RawSplit};
use crate::config::{RouteConfig, Target};
use crate::route::{HostMatch, MatchSpec, PathMatch};

impl Validator {
    pub(super) fn routes(&mut self, raw: &[RawRoute], services: &[RawService]) -> Vec<RouteConfig> {
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

    pub(super) fn route(
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

        let filters = self.filters(p, r, (services, by_name));
        // It answers itself (a redirect or direct response): no service.
        let local = r
            .filters
            .iter()
            .any(|f| f.redirect.is_some() || f.direct_response.is_some());
        let service = if r.service.is_empty() && local {
            None
        } else if r.service.is_empty() {
            self.err(
                format!("{p}.service"),
                "required: name the service this route sends to (a route without service must \
                 end in redirect or direct_response)",
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

        if r.service.is_empty() && local && (r.version.is_some() || r.split.is_some()) {
            let field = if r.version.is_some() {
                "version"
            } else {
                "split"
            };
            self.err(
                format!("{p}.{field}"),
                "needs a service: this route answers itself (redirect or direct_response)",
            );
        }
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
            // A route that answers itself may have no service: no index.
            service: service.unwrap_or(if local { usize::MAX } else { 0 }),
            target,
            strict_version: r.strict_version,
            enabled: r.enabled.unwrap_or(true),
            policy: self.route_policy(p, r),
            rate_limit: None,
            filters,
            auth: match &r.auth {
                // Checked before a request is sent: a route that answers
                // itself sends none.
                Some(_) if local => {
                    self.err(
                        format!("{p}.auth"),
                        "a route that answers itself (redirect or direct_response) cannot have auth: put the auth on the routes that reach a service",
                    );
                    None
                }
                Some(a) => self.route_auth(p, &r.id, a, by_name),
                None => None,
            },
        }
    }

    /// Checks that `v` names a version of the service; true when it does.
    pub(super) fn version_ref(
        &mut self,
        p: &str,
        v: &str,
        service: &str,
        versions: Option<&[&str]>,
    ) -> bool {
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

    pub(super) fn split(
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

    pub(super) fn matcher(&mut self, p: &str, m: &RawMatch) -> MatchSpec {
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
pub(super) fn check_path(p: &str) -> Result<String, String> {
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

pub(super) fn compile_regex(re: &str) -> Result<Regex, String> {
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
