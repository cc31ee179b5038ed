//! The routing engine: which rule does a request match?
//!
//! Owns the compiled match structures and the lookup. Lookup is pure and
//! allocation-free; its cost does not grow with the number of rules (hosts
//! are hashed, paths are walked through a trie, each candidate list is
//! pre-sorted by precedence), except for regex paths, which are tried one by
//! one within the request's host tier.
//!
//! Precedence: the host tier is chosen first (exact host, then `*.suffix`
//! wildcards from the longest suffix, then rules without a host); within a
//! tier the highest `priority` wins, ties go to the longest path match, then
//! to declaration order. A tier with no matching rule falls through to the
//! next one. Disabled rules never match.
//!
//! Layout: this file holds the public types, the lookup and the reference
//! [`linear_lookup`]; `route/compile.rs` builds the [`Router`] out of the
//! index types of `route/layout.rs` (spans, candidates, tiers),
//! `route/table.rs` is the frozen hash table for hosts and exact paths,
//! `route/trie.rs` the path-prefix radix tree, `route/predicate.rs` the
//! precompiled method/header/query/source conditions, and `route/tests.rs`
//! checks the router against `linear_lookup` (matrix + randomized).
//!
//! Must not touch: node state, balancing, I/O. The meaning of a rule is
//! defined by `linear_lookup`; the compiled router may only be faster.

mod compile;
mod layout;
mod normalize;
mod predicate;
mod table;
mod trie;

#[cfg(test)]
mod tests;

use std::cmp::Reverse;
use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use regex::Regex;

use layout::{Cand, RegexRule, Span, Tier};
use predicate::Predicates;
use table::ByteMap;
use trie::Trie;

pub use normalize::{normalize_path, PathError};

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
            && self.query.iter().all(|(k, v)| query_has(req.query, k, v))
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

/// The host without its port (`[::1]:8080` → `[::1]`), case untouched.
/// An IPv6 literal keeps its brackets; anything else loses a trailing
/// `:digits` (or a bare trailing `:`).
pub fn host_without_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // IPv6 literal: [::1]:8080
        return match rest.find(']') {
            Some(end) => &host[..end + 2],
            None => host,
        };
    }
    // Equivalent to "strip from the last `:` if only digits follow it", in
    // one backwards pass: the last `:` is followed by digits only exactly
    // when it precedes the trailing run of digits.
    let b = host.as_bytes();
    let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    match b.len().checked_sub(digits + 1) {
        Some(i) if b[i] == b':' => &host[..i],
        _ => host,
    }
}

/// The compiled routing table.
///
/// Layout: host keys in two hash tables (exact hosts, wildcard suffixes),
/// each pointing at a tier; one more tier holds the rules without a host.
/// A tier has an exact-path hash table, the root of its path-prefix trie
/// (all tries share one arena) and its regex rules. Every candidate list is
/// sorted by precedence, so a scan stops at the first rule whose predicates
/// hold, or as soon as no later rule could win.
///
/// Lookup cost: O(host length) for the host tables (the wildcard table is
/// probed at most once per `.` of the host, longest suffix first), O(path
/// length) for the exact-path table and the trie walk, plus the candidates
/// actually examined, plus one `Regex::find` per regex rule of the tier
/// that could still win. Regex rules are the one linear part (they cannot
/// be indexed): keep them few per host.
#[derive(Debug, Default)]
pub struct Router {
    /// Number of input rules, disabled ones included.
    rules: usize,
    /// Lowercase exact host → tier.
    exact_hosts: ByteMap<u32>,
    /// Lowercase wildcard suffix (`.example.com`) → tier.
    suffix_hosts: ByteMap<u32>,
    /// Length of the longest suffix key starting with `.`.
    max_dotted_suffix: usize,
    /// Distinct lengths of suffix keys *not* starting with `.` (the reference
    /// allows them), longest first; usually empty.
    undotted_suffix_lens: Box<[usize]>,
    /// The tier of rules without a host condition.
    any_host: Option<u32>,
    tiers: Box<[Tier]>,
    /// Per tier: exact path → candidates.
    exact_paths: Box<[ByteMap<Span>]>,
    trie: Trie,
    /// Regex rules, one run per tier, each sorted by precedence.
    regexes: Box<[RegexRule]>,
    /// Candidate lists, referenced by [`Span`]s from tiers and trie nodes.
    cands: Box<[Cand]>,
    /// Precompiled predicates, indexed by rule.
    preds: Box<[Predicates]>,
}

/// The best rule found so far in a tier.
#[derive(Clone, Copy, Debug)]
struct Best {
    priority: i32,
    len: usize,
    rule: u32,
}

/// Would a rule with this `priority`, match length and index beat `best`?
fn outranks(priority: i32, len: usize, rule: u32, best: Option<Best>) -> bool {
    match best {
        None => true,
        Some(b) => (priority, len, Reverse(rule)) > (b.priority, b.len, Reverse(b.rule)),
    }
}

impl Router {
    /// Compiles the rules; rule `i` of the input is reported as `i` by [`Router::lookup`].
    pub fn build(rules: Vec<RuleSpec>) -> Router {
        compile::compile(rules)
    }

    /// The index of the rule that wins for this request, if any. Same
    /// answer as [`linear_lookup`]. Never allocates (the regex crate keeps a
    /// match cache per regex and thread, created on first use).
    pub fn lookup(&self, req: &RequestView<'_>) -> Option<usize> {
        if self.tiers.is_empty() {
            return None;
        }
        let host = host_without_port(req.host).as_bytes();
        let method_bit = predicate::method_bit(req.method);
        let in_tier = |t: u32| self.best_in(t as usize, req, method_bit);

        if let Some(&t) = self.exact_hosts.get(host) {
            if let Some(rule) = in_tier(t) {
                return Some(rule);
            }
        }

        if !self.suffix_hosts.is_empty() {
            // Probe the host's suffixes, longest first: those starting at a
            // `.` (if short enough to be a key), merged with the lengths of
            // undotted keys.
            let n = host.len();
            let mut undotted = &self.undotted_suffix_lens[..];
            while undotted.first().is_some_and(|&l| l > n) {
                undotted = &undotted[1..];
            }
            let probe = |len: usize| match self.suffix_hosts.get(&host[n - len..]) {
                Some(&t) => in_tier(t),
                None => None,
            };
            let first = n.saturating_sub(self.max_dotted_suffix);
            let dots = host
                .iter()
                .enumerate()
                .skip(first)
                .filter(|&(_, &b)| b == b'.');
            for (p, _) in dots {
                let len = n - p;
                while let Some((&l, rest)) = undotted.split_first() {
                    if l < len {
                        break;
                    }
                    undotted = rest;
                    if l > len {
                        if let Some(rule) = probe(l) {
                            return Some(rule);
                        }
                    }
                }
                if let Some(rule) = probe(len) {
                    return Some(rule);
                }
            }
            for &l in undotted {
                if let Some(rule) = probe(l) {
                    return Some(rule);
                }
            }
        }

        self.any_host.and_then(in_tier)
    }

    /// The winner among one tier's rules.
    fn best_in(&self, t: usize, req: &RequestView<'_>, method_bit: u16) -> Option<usize> {
        let tier = &self.tiers[t];
        let path = req.path.as_bytes();
        let mut best = None;
        if ByteMap::<Span>::may_hold(tier.exact_lens, path.len()) {
            if let Some(&span) = self.exact_paths[t].get(path) {
                self.scan(span, path.len(), req, method_bit, &mut best);
            }
        }
        if let Some(root) = tier.trie_root {
            self.trie.walk(root, path, |span, depth| {
                self.scan(span, depth, req, method_bit, &mut best);
            });
        }
        for r in &self.regexes[tier.regexes.range()] {
            if best.is_some_and(|b: Best| r.priority < b.priority) {
                break; // sorted: no later regex rule can win either
            }
            if !(r.plain || self.preds[r.rule as usize].hold(req, method_bit)) {
                continue;
            }
            if let Some(m) = r.regex.find(req.path) {
                if outranks(r.priority, m.len(), r.rule, best) {
                    best = Some(Best {
                        priority: r.priority,
                        len: m.len(),
                        rule: r.rule,
                    });
                }
            }
        }
        best.map(|b| b.rule as usize)
    }

    /// Scans a precedence-sorted candidate list whose path matched with
    /// length `len`: the first candidate that cannot beat `best` ends the
    /// scan (nor can any after it), the first whose predicates hold wins.
    #[inline]
    fn scan(
        &self,
        span: Span,
        len: usize,
        req: &RequestView<'_>,
        method_bit: u16,
        best: &mut Option<Best>,
    ) {
        for c in &self.cands[span.range()] {
            if !outranks(c.priority, len, c.rule, *best) {
                return;
            }
            if c.plain || self.preds[c.rule as usize].hold(req, method_bit) {
                *best = Some(Best {
                    priority: c.priority,
                    len,
                    rule: c.rule,
                });
                return;
            }
        }
    }

    pub fn len(&self) -> usize {
        self.rules
    }

    pub fn is_empty(&self) -> bool {
        self.rules == 0
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
            HostMatch::Suffix(s) => host
                .ends_with(s.as_str())
                .then_some((1, usize::MAX - s.len())),
            HostMatch::Any => Some((2, 0)),
        }
    };
    let mut best: Option<((u8, usize), i32, usize, usize)> = None;
    for (i, r) in rules.iter().enumerate() {
        if !r.enabled {
            continue;
        }
        let Some(t) = tier(&r.matcher.host) else {
            continue;
        };
        let Some(len) = r.matcher.path_match_len(req.path) else {
            continue;
        };
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
