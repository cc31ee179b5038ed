//! The path-prefix radix tree: every `prefix` rule of every host tier, in one
//! flat arena.
//!
//! Owns the trie layout, its construction from (prefix, candidate) pairs and
//! the walk along a request path. A node carries the candidates whose prefix
//! ends exactly there, already sorted by precedence; edges are compressed
//! (one label per node, children sorted by first byte, found by binary
//! search), so a lookup costs one pass over the request path whatever the
//! number of rules.
//!
//! Must not touch: candidate ordering and predicate evaluation (done by the
//! router, `route.rs`); host handling.

use super::layout::{Cand, Span};

#[derive(Clone, Copy, Debug)]
struct Node {
    /// Edge label into `Trie::labels`, first byte included.
    label: Span,
    /// Candidates whose prefix ends at this node, into the router's list.
    cands: Span,
    /// Children: a contiguous run of `Trie::nodes`, sorted by first byte.
    kids: Span,
}

/// All path tries of a router. Each host tier owns one root.
#[derive(Debug, Default)]
pub(super) struct Trie {
    nodes: Vec<Node>,
    /// `firsts[i]` is the first byte of `nodes[i]`'s label (0 for a root):
    /// searching the children touches one short run of bytes, not nodes.
    firsts: Vec<u8>,
    labels: Vec<u8>,
}

impl Trie {
    fn push(&mut self, first: u8, node: Node) -> u32 {
        let id = Span::index(self.nodes.len());
        self.nodes.push(node);
        self.firsts.push(first);
        id
    }
}

/// Collects the prefixes of one host tier before freezing them into a [`Trie`].
#[derive(Debug)]
pub(super) struct TrieBuilder {
    nodes: Vec<TmpNode>,
}

/// An uncompressed, one byte per edge node (build time only).
#[derive(Debug, Default)]
struct TmpNode {
    kids: Vec<(u8, u32)>,
    cands: Vec<Cand>,
}

impl Default for TrieBuilder {
    fn default() -> Self {
        TrieBuilder {
            nodes: vec![TmpNode::default()],
        }
    }
}

impl TrieBuilder {
    pub(super) fn is_empty(&self) -> bool {
        self.nodes.len() == 1 && self.nodes[0].cands.is_empty()
    }

    pub(super) fn add(&mut self, prefix: &[u8], cand: Cand) {
        let mut at = 0usize;
        for &b in prefix {
            at = match self.nodes[at].kids.binary_search_by_key(&b, |k| k.0) {
                Ok(i) => self.nodes[at].kids[i].1 as usize,
                Err(i) => {
                    let id = Span::index(self.nodes.len());
                    self.nodes.push(TmpNode::default());
                    self.nodes[at].kids.insert(i, (b, id));
                    id as usize
                }
            };
        }
        self.nodes[at].cands.push(cand);
    }

    /// Freezes the tier into `trie`; candidate lists are sorted and appended
    /// to `cands`. Returns the root's node id.
    pub(super) fn finish(mut self, trie: &mut Trie, cands: &mut Vec<Cand>) -> u32 {
        let root_cands = Span::push_sorted(cands, std::mem::take(&mut self.nodes[0].cands));
        let root = trie.push(
            0,
            Node {
                label: Span::EMPTY,
                cands: root_cands,
                kids: Span::EMPTY,
            },
        );
        // (temporary node, arena node): an explicit stack, as prefixes may be deep.
        let mut stack = vec![(0usize, root)];
        while let Some((tmp, at)) = stack.pop() {
            let kids = std::mem::take(&mut self.nodes[tmp].kids);
            let first_kid = trie.nodes.len();
            for (b, kid) in kids {
                let label_start = trie.labels.len();
                trie.labels.push(b);
                let mut kid = kid as usize;
                // Compress chains of single-child nodes that carry no rule.
                while self.nodes[kid].cands.is_empty() && self.nodes[kid].kids.len() == 1 {
                    let (b, next) = self.nodes[kid].kids[0];
                    trie.labels.push(b);
                    kid = next as usize;
                }
                let node_cands =
                    Span::push_sorted(cands, std::mem::take(&mut self.nodes[kid].cands));
                let label = Span::of(label_start, trie.labels.len());
                let id = trie.push(
                    b,
                    Node {
                        label,
                        cands: node_cands,
                        kids: Span::EMPTY,
                    },
                );
                stack.push((kid, id));
            }
            trie.nodes[at as usize].kids = Span::of(first_kid, trie.nodes.len());
        }
        root
    }
}

impl Trie {
    /// Calls `visit(candidates, prefix length)` for every node holding
    /// rules on `path`'s way down from `root`, shortest prefix first.
    /// Allocation-free; one pass over `path`.
    #[inline]
    pub(super) fn walk(&self, root: u32, path: &[u8], mut visit: impl FnMut(Span, usize)) {
        let mut node = &self.nodes[root as usize];
        let mut depth = 0;
        loop {
            if node.cands.len != 0 {
                visit(node.cands, depth);
            }
            let Some(&b) = path.get(depth) else { return };
            let Ok(k) = self.firsts[node.kids.range()].binary_search(&b) else {
                return;
            };
            let kid = &self.nodes[node.kids.start as usize + k];
            if !has_prefix(&path[depth..], &self.labels[kid.label.range()]) {
                return;
            }
            depth += kid.label.len as usize;
            node = kid;
        }
    }
}

/// `s.starts_with(p)`, without a `memcmp` call: labels are short.
#[inline]
fn has_prefix(s: &[u8], p: &[u8]) -> bool {
    s.len() >= p.len() && s.iter().zip(p).all(|(a, b)| a == b)
}
