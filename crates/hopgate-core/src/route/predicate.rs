//! A rule's non-host, non-path conditions, precompiled for the lookup:
//! methods as a bitmask, source CIDRs as a prefix trie when there are many.
//!
//! Owns [`Predicates`] and its evaluation, which must agree exactly with
//! [`MatchSpec::predicates_hold`] (the randomized test in `route/tests.rs`
//! checks it). Must not touch: host, path or precedence.

use std::net::IpAddr;

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;

use super::{query_has, MatchSpec, RequestView};
use crate::access::CidrSet;

/// Beyond this many networks, a rule's sources go into a [`CidrSet`].
const CIDR_LIST_MAX: usize = 8;

/// The methods that get a bit; any other method is an extension method.
static STANDARD_METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
    Method::CONNECT,
    Method::PATCH,
    Method::TRACE,
];

/// The bit of a standard method, `0` for an extension method. Computed once
/// per request.
pub(super) fn method_bit(m: &Method) -> u16 {
    STANDARD_METHODS
        .iter()
        .position(|s| s == m)
        .map_or(0, |i| 1 << i)
}

#[derive(Debug)]
enum Sources {
    Any,
    List(Box<[IpNet]>),
    Set(Box<CidrSet>),
}

#[derive(Debug)]
pub(super) struct Predicates {
    /// No condition at all: `hold` is `true` without looking.
    none: bool,
    /// No method condition.
    any_method: bool,
    /// Bits of the standard methods allowed.
    method_mask: u16,
    /// Allowed extension methods (never a standard one).
    other_methods: Box<[Method]>,
    headers: Box<[(HeaderName, HeaderValue)]>,
    query: Box<[(Box<str>, Box<str>)]>,
    sources: Sources,
}

impl Predicates {
    pub(super) fn compile(m: &MatchSpec) -> Predicates {
        let mut method_mask = 0;
        let mut other_methods = Vec::new();
        for method in &m.methods {
            match method_bit(method) {
                0 => other_methods.push(method.clone()),
                bit => method_mask |= bit,
            }
        }
        let sources = match m.source_cidrs.len() {
            0 => Sources::Any,
            n if n <= CIDR_LIST_MAX => Sources::List(m.source_cidrs.clone().into()),
            _ => Sources::Set(Box::new(CidrSet::new(&m.source_cidrs))),
        };
        Predicates {
            none: m.methods.is_empty()
                && m.headers.is_empty()
                && m.query.is_empty()
                && m.source_cidrs.is_empty(),
            any_method: m.methods.is_empty(),
            method_mask,
            other_methods: other_methods.into(),
            headers: m.headers.clone().into(),
            query: m
                .query
                .iter()
                .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
                .collect(),
            sources,
        }
    }

    /// Has the rule no predicate at all?
    pub(super) fn none(&self) -> bool {
        self.none
    }

    /// Same answer as [`MatchSpec::predicates_hold`]; `method_bit` is
    /// [`method_bit`] of `req.method`.
    pub(super) fn hold(&self, req: &RequestView<'_>, method_bit: u16) -> bool {
        (self.none
            || self.any_method
            || self.method_mask & method_bit != 0
            || (method_bit == 0 && self.other_methods.iter().any(|m| m == req.method)))
            && self
                .headers
                .iter()
                .all(|(name, value)| req.headers.get_all(name).iter().any(|v| v == value))
            && self.query.iter().all(|(k, v)| query_has(req.query, k, v))
            && self.sources_hold(req.source_ip)
    }

    fn sources_hold(&self, ip: IpAddr) -> bool {
        match &self.sources {
            Sources::Any => true,
            Sources::List(nets) => nets.iter().any(|n| n.contains(&ip)),
            Sources::Set(set) => set.contains(ip),
        }
    }
}
