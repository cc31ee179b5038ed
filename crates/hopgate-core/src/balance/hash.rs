//! `hash`: consistent hashing (Maglev), and the key hash it is fed with.
//!
//! Owns [`hash_key`] and the Maglev lookup table. A request's key (a header,
//! a cookie, the client IP — the proxy extracts it) is hashed with
//! [`hash_key`] into [`super::PickCtx::hash`]; the pick reads one table
//! entry: O(1), no lock, no shared write.
//!
//! Table (Eisenbud et al., "Maglev", NSDI 2016): every node derives a
//! permutation of the `M` table slots from a hash of its *id* (not its
//! position in the group), and nodes take turns claiming their next free
//! slot, each in proportion to its weight, until the table is full. So:
//! - the table depends only on the set of `(node id, weight)` pairs — the
//!   same on every replica and across reloads that keep the nodes, whatever
//!   their order in the config;
//! - unweighted nodes own within one slot of `M / n` each;
//! - adding or removing one of n nodes moves about 1/n of the keys (plus a
//!   small extra shuffle, well under 1% of keys at `M = 65 537`, n ≈ 10).
//!
//! `M` is 65 537 (prime) up to 512 members and grows through fixed size
//! classes beyond (M ≥ 128 n), so crossing 512 members reshuffles once. Slots
//! are `u16` for groups that fit (128 KiB per table) and reused across
//! reloads when the members are unchanged.
//!
//! A key whose node cannot take the request walks on through the table to the
//! first node that can, along a probe sequence of its own (double hashing:
//! `start + k · step`, both from the key; up to 64 probes): deterministic,
//! only that node's keys move, and they spread over the others in proportion
//! to their shares. (Walking to the adjacent entry would not: neighbouring
//! Maglev slots are correlated, and with ten equal nodes some would inherit
//! 2.5 times as many keys as others.) Past the walk, a weighted choice
//! seeded by the key.
//! A request without a key (`hash: None`) is balanced by weighted random.
//!
//! Must not touch: key extraction (the proxy's job), node state.

use std::sync::Arc;

use super::random::WeightedRandom;
use super::{fallback, mix64, open, weight_of, Member, PickCtx};

/// Hashes a balancing key: a fixed, unseeded 64-bit hash (wyhash-style
/// multiply-fold over 8-byte little-endian words), identical on every
/// platform, process and replica. Not collision-resistant against an
/// adversary; it only has to spread keys. Changing it reshuffles every
/// `lb: hash` affinity, so its output is pinned by tests.
pub fn hash_key(bytes: &[u8]) -> u64 {
    const P0: u64 = 0xa076_1d64_78bd_642f;
    const P1: u64 = 0xe703_7ed1_a0b4_28db;
    const P2: u64 = 0x8ebc_6af0_9c88_c6e3;
    let mut h = P0 ^ (bytes.len() as u64).wrapping_mul(P1);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(w);
        h = fold_mul(h ^ u64::from_le_bytes(buf), P1);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut buf = [0u8; 8];
        buf[..tail.len()].copy_from_slice(tail);
        h = fold_mul(h ^ u64::from_le_bytes(buf), P2);
    }
    mix64(h)
}

/// 64×64→128 multiply, high half xor low half.
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Table size for groups up to 512 members.
const BASE_TABLE: u64 = 65_537;
/// Entries walked past an unusable node before the seeded fallback.
const WALK: usize = 64;
const SEED_OFFSET: u64 = 0x4d61_676c_6576_4f66; // "MaglevOf"
const SEED_SKIP: u64 = 0x4d61_676c_6576_536b; // "MaglevSk"
const SEED_PROBE: u64 = 0x4d61_676c_6576_5072; // "MaglevPr"
const SEED_FALLBACK: u64 = 0x4d61_676c_6576_4662; // "MaglevFb"

#[derive(Clone)]
enum Table {
    Narrow(Arc<[u16]>),
    Wide(Arc<[u32]>),
}

impl Table {
    fn len(&self) -> usize {
        match self {
            Table::Narrow(t) => t.len(),
            Table::Wide(t) => t.len(),
        }
    }

    fn get(&self, slot: usize) -> usize {
        match self {
            Table::Narrow(t) => usize::from(t[slot]),
            Table::Wide(t) => t[slot] as usize,
        }
    }
}

/// The Maglev table of a group, plus the weights used for keyless requests.
#[derive(Clone)]
pub(super) struct Maglev {
    table: Table,
    keyless: WeightedRandom,
}

impl std::fmt::Debug for Maglev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maglev")
            .field("table_len", &self.table.len())
            .finish()
    }
}

impl Maglev {
    pub(super) fn new(members: &[Member]) -> Maglev {
        let slots = populate(members);
        let table = if members.len() <= usize::from(u16::MAX) + 1 {
            Table::Narrow(slots.iter().map(|&s| s as u16).collect())
        } else {
            Table::Wide(slots.into())
        };
        Maglev {
            table,
            keyless: WeightedRandom::new(members),
        }
    }

    pub(super) fn pick(&self, members: &[Member], ctx: &PickCtx<'_>) -> Option<usize> {
        let Some(hash) = ctx.hash else {
            let i = self.keyless.draw()?;
            if open(members, ctx, i) {
                return Some(i);
            }
            return fallback(members, ctx, fastrand::u64(..));
        };
        let len = self.table.len();
        if len == 0 {
            return None;
        }
        let m = len as u64;
        let mut slot = mix64(hash) % m;
        let i = self.table.get(slot as usize);
        if open(members, ctx, i) {
            return Some(i);
        }
        // m is prime, so any step in 1..m visits every slot.
        let step = mix64(hash ^ SEED_PROBE) % (m - 1).max(1) + 1;
        for _ in 1..WALK.min(len) {
            slot = (slot + step) % m;
            let i = self.table.get(slot as usize);
            if open(members, ctx, i) {
                return Some(i);
            }
        }
        fallback(members, ctx, mix64(hash ^ SEED_FALLBACK))
    }
}

/// Size of the table for `n` members: a prime ≥ 128 n, from fixed classes.
pub(super) fn table_size(n: usize) -> u64 {
    let mut m = BASE_TABLE;
    while m < 128 * n as u64 {
        m = next_prime(4 * m);
    }
    m
}

fn next_prime(mut x: u64) -> u64 {
    let is_prime = |x: u64| {
        x >= 2
            && (2..)
                .take_while(|d| d * d <= x)
                .all(|d| x.rem_euclid(d) != 0)
    };
    while !is_prime(x) {
        x += 1;
    }
    x
}

/// Fills the table: nodes, in id order, take turns claiming the next free
/// slot of their permutation; a node of weight `w` takes a turn in `w` out
/// of every `max weight` rounds.
fn populate(members: &[Member]) -> Vec<u32> {
    const FREE: u32 = u32::MAX;
    if members.is_empty() {
        return Vec::new();
    }
    let m = table_size(members.len());
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| {
        members[a]
            .state
            .key()
            .node
            .cmp(&members[b].state.key().node)
    });
    // Per member: (next position in its permutation, skip, credit).
    let mut walk: Vec<(u64, u64, u64)> = members
        .iter()
        .map(|mem| {
            let h = hash_key(mem.state.key().node.as_bytes());
            (
                mix64(h ^ SEED_OFFSET) % m,
                mix64(h ^ SEED_SKIP) % (m - 1) + 1,
                0,
            )
        })
        .collect();
    let max_weight = members.iter().map(weight_of).max().unwrap_or(1);
    let mut table = vec![FREE; m as usize];
    let mut filled = 0u64;
    loop {
        for &i in &order {
            let (pos, skip, credit) = &mut walk[i];
            *credit += weight_of(&members[i]);
            if *credit < max_weight {
                continue;
            }
            *credit -= max_weight;
            // The permutation visits every slot (m is prime), so a free one
            // is always found.
            // pos, skip < m: one conditional subtraction replaces a division.
            let advance = |pos: u64| {
                let p = pos + *skip;
                if p >= m {
                    p - m
                } else {
                    p
                }
            };
            while table[*pos as usize] != FREE {
                *pos = advance(*pos);
            }
            table[*pos as usize] = i as u32;
            *pos = advance(*pos);
            filled += 1;
            if filled == m {
                return table;
            }
        }
    }
}
