//! Turns a list of [`RuleSpec`]s into a [`Router`]: groups enabled rules by
//! host tier, then per tier by path kind (exact map, prefix trie, regex
//! list), with every candidate list sorted by precedence (priority
//! descending, then declaration order).
//!
//! Owns the build-time grouping. The index types it fills in ([`Span`],
//! [`Cand`], [`Tier`]) live in `route/layout.rs`. Must not touch: the
//! lookup (`route.rs`), which relies on the invariants documented here:
//! - host keys are lowercase; a rule whose host contains an ASCII uppercase
//!   letter can never match (the reference lowercases the request host and
//!   compares exactly), so it is left out;
//! - every candidate list is sorted by `(priority desc, rule asc)`.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::layout::{Cand, RegexRule, Span, Tier};
use super::predicate::Predicates;
use super::table::ByteMap;
use super::trie::{Trie, TrieBuilder};
use super::{HostMatch, PathMatch, Router, RuleSpec};

#[derive(Default)]
struct TierBuilder {
    exact: HashMap<Box<[u8]>, Vec<Cand>>,
    prefixes: TrieBuilder,
    regexes: Vec<RegexRule>,
}

/// A tier's frozen parts, before they are split into the router's arrays.
struct BuiltTier {
    tier: Tier,
    exact_paths: ByteMap<Span>,
}

impl TierBuilder {
    fn finish(
        self,
        trie: &mut Trie,
        cands: &mut Vec<Cand>,
        regexes: &mut Vec<RegexRule>,
    ) -> BuiltTier {
        let exact = self
            .exact
            .into_iter()
            .map(|(path, list)| (path, Span::push_sorted(cands, list)))
            .collect();
        let exact_paths = ByteMap::new(false, exact);
        let trie_root = (!self.prefixes.is_empty()).then(|| self.prefixes.finish(trie, cands));
        let mut own = self.regexes;
        // Sorted by precedence, so a scan can stop at the first rule of
        // lower priority than the best so far.
        own.sort_unstable_by_key(|r| (Reverse(r.priority), r.rule));
        let start = regexes.len();
        regexes.extend(own);
        BuiltTier {
            tier: Tier {
                exact_lens: exact_paths.lens(),
                trie_root,
                regexes: Span::of(start, regexes.len()),
            },
            exact_paths,
        }
    }
}

fn tier_of(map: &mut HashMap<Box<[u8]>, u32>, key: String, tiers: &mut Vec<TierBuilder>) -> u32 {
    *map.entry(key.into_bytes().into()).or_insert_with(|| {
        tiers.push(TierBuilder::default());
        Span::index(tiers.len() - 1)
    })
}

fn has_upper(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_uppercase())
}

pub(super) fn compile(rules: Vec<RuleSpec>) -> Router {
    let count = rules.len();
    let preds: Vec<Predicates> = rules
        .iter()
        .map(|r| Predicates::compile(&r.matcher))
        .collect();
    let mut exact_hosts = HashMap::new();
    let mut suffix_hosts = HashMap::new();
    let mut any_host = None;
    let mut tiers: Vec<TierBuilder> = Vec::new();

    for (i, r) in rules.into_iter().enumerate() {
        if !r.enabled {
            continue;
        }
        let tier = match r.matcher.host {
            HostMatch::Any => *any_host.get_or_insert_with(|| {
                tiers.push(TierBuilder::default());
                Span::index(tiers.len() - 1)
            }),
            HostMatch::Exact(h) if !has_upper(&h) => tier_of(&mut exact_hosts, h, &mut tiers),
            HostMatch::Suffix(s) if !has_upper(&s) => tier_of(&mut suffix_hosts, s, &mut tiers),
            HostMatch::Exact(_) | HostMatch::Suffix(_) => continue,
        };
        let tb = &mut tiers[tier as usize];
        let cand = Cand {
            priority: r.priority,
            rule: Span::index(i),
            plain: preds[i].none(),
        };
        match r.matcher.path {
            PathMatch::Exact(p) => tb
                .exact
                .entry(p.into_bytes().into())
                .or_default()
                .push(cand),
            PathMatch::Prefix(p) => tb.prefixes.add(p.as_bytes(), cand),
            PathMatch::Regex(regex) => tb.regexes.push(RegexRule {
                priority: r.priority,
                rule: cand.rule,
                plain: cand.plain,
                regex,
            }),
        }
    }

    let max_suffix = suffix_hosts
        .keys()
        .filter(|k| k.first() == Some(&b'.'))
        .map(|k| k.len())
        .max()
        .unwrap_or(0);
    let mut undotted: Vec<usize> = suffix_hosts
        .keys()
        .filter(|k| k.first() != Some(&b'.'))
        .map(|k| k.len())
        .collect();
    undotted.sort_unstable_by(|a, b| b.cmp(a));
    undotted.dedup();

    let mut trie = Trie::default();
    let mut cands = Vec::new();
    let mut regexes = Vec::new();
    let (tiers, exact_paths): (Vec<_>, Vec<_>) = tiers
        .into_iter()
        .map(|t| {
            let built = t.finish(&mut trie, &mut cands, &mut regexes);
            (built.tier, built.exact_paths)
        })
        .unzip();
    Router {
        rules: count,
        exact_hosts: ByteMap::new(true, exact_hosts.into_iter().collect()),
        suffix_hosts: ByteMap::new(true, suffix_hosts.into_iter().collect()),
        max_dotted_suffix: max_suffix,
        undotted_suffix_lens: undotted.into(),
        any_host,
        tiers: tiers.into(),
        exact_paths: exact_paths.into(),
        trie,
        regexes: regexes.into(),
        cands: cands.into(),
        preds: preds.into(),
    }
}
