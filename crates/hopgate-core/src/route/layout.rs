//! The router's flat layout: the index types that the compiler
//! (`route/compile.rs`) and the trie builder (`route/trie.rs`) fill in and
//! the lookup (`route.rs`) reads.
//!
//! Owns [`Span`] (a run of a router-wide array), [`Cand`] (a candidate rule
//! with what a scan needs inline), [`RegexRule`] and [`Tier`], and the one
//! ordering every candidate list follows: `(priority desc, rule asc)`.
//!
//! Must not touch: grouping rules into tiers (`route/compile.rs`), the trie's
//! shape (`route/trie.rs`), the lookup (`route.rs`).

use std::cmp::Reverse;
use std::ops::Range;

use regex::Regex;

/// A run of entries of a router-wide array.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: u32,
    pub(super) len: u32,
}

impl Span {
    pub(super) const EMPTY: Span = Span { start: 0, len: 0 };

    /// `n` as an index; tables past `u32::MAX` entries are not supported.
    pub(super) fn index(n: usize) -> u32 {
        u32::try_from(n).expect("routing table larger than u32::MAX entries")
    }

    pub(super) fn of(start: usize, end: usize) -> Span {
        Span {
            start: Span::index(start),
            len: Span::index(end - start),
        }
    }

    pub(super) fn range(self) -> Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }

    /// Sorts `list` by precedence and appends it to `out`.
    pub(super) fn push_sorted(out: &mut Vec<Cand>, mut list: Vec<Cand>) -> Span {
        list.sort_unstable_by_key(|c| (Reverse(c.priority), c.rule));
        let start = out.len();
        out.extend(list);
        Span::of(start, out.len())
    }
}

/// A rule that may win once its path matched, with what a scan needs
/// inline so that it can decide without touching the rule's predicates.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cand {
    pub(super) priority: i32,
    pub(super) rule: u32,
    /// The rule has no predicates (methods, headers, query, sources).
    pub(super) plain: bool,
}

#[derive(Debug)]
pub(super) struct RegexRule {
    pub(super) priority: i32,
    pub(super) rule: u32,
    pub(super) plain: bool,
    pub(super) regex: Regex,
}

/// The rules sharing one host condition: only what every lookup in the
/// tier reads, so that it fits in a fraction of a cache line.
#[derive(Debug)]
pub(super) struct Tier {
    /// Bit `min(len, 63)` is set if an exact-path rule has a path of that
    /// length (then look in `Router::exact_paths[tier]`).
    pub(super) exact_lens: u64,
    /// Root of this tier's prefix trie, if it has prefix rules.
    pub(super) trie_root: Option<u32>,
    /// This tier's run of `Router::regexes`.
    pub(super) regexes: Span,
}
