//! The fixed table of one policy's keys: open addressing over
//! [`MAX_KEYS`] slots of atomics, plus one overflow slot.
//!
//! A key (a nonzero 64-bit keyed hash) lives in one of [`PROBE`] slots
//! from its hash. A free slot, or an idle one (bucket full again, nothing
//! in flight), is claimed with one compare-and-swap on its key; a key that
//! finds neither shares the overflow slot. Two keys with the same 64-bit
//! hash share a bucket (one chance in 2^64 per pair).

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{ip_bits, ip_of};

/// Keys each policy holds apart at most; past it, keys share an overflow
/// bucket. 40 bytes a slot: about 2.5 MiB per policy.
pub const MAX_KEYS: usize = 65_536;

/// Slots a key may occupy, from its hash on.
const PROBE: usize = 8;

const NO_ROUTE: u32 = u32::MAX;

#[derive(Default)]
struct Slot {
    /// The key's hash; 0 = free.
    key: AtomicU64,
    /// GCRA's theoretical arrival time (nanoseconds): the bucket is full
    /// again once the clock passes it.
    tat: AtomicU64,
    /// The client address shown for the key (IPv6 form, 0 = none).
    ip_hi: AtomicU64,
    ip_lo: AtomicU64,
    /// The route index shown for the key ([`NO_ROUTE`]: none).
    route: AtomicU32,
    in_flight: AtomicU32,
}

impl Slot {
    fn idle(&self, now: u64) -> bool {
        self.tat.load(Ordering::Relaxed) <= now && self.in_flight.load(Ordering::Relaxed) == 0
    }
}

/// The slots of one policy.
pub(super) struct Table {
    slots: Box<[Slot]>,
}

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Table({} slots)", self.slots.len())
    }
}

/// Where [`Table::slot_for`] put a key.
pub(super) struct Found {
    pub(super) index: u32,
    new: bool,
}

impl Found {
    /// The key was placed in this slot just now.
    pub(super) fn is_new(&self) -> bool {
        self.new
    }
}

/// One key's state, for the admin API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyFill {
    /// The key's keyed hash (stable for the limiter's life).
    pub key: u64,
    /// The client address of the key, when the key holds one.
    pub ip: Option<IpAddr>,
    /// The route index of the key's last claim, when the key holds it.
    pub route: Option<usize>,
    /// Tokens used (the bucket's size minus what is left).
    pub used: u32,
    /// The key's bucket size here: the policy's `burst`, or for a `scope:
    /// fleet` policy this replica's share of it.
    pub burst: u32,
    pub in_flight: u32,
    /// The overflow bucket shared by keys without a slot of their own.
    pub overflow: bool,
}

impl Table {
    pub(super) fn new() -> Table {
        Table {
            slots: (0..=MAX_KEYS).map(|_| Slot::default()).collect(),
        }
    }

    fn overflow_index() -> u32 {
        MAX_KEYS as u32
    }

    /// The slot of `key` at `now`: its own, a free or idle one claimed for
    /// it, else the overflow slot (counted in `overflow`).
    pub(super) fn slot_for(&self, key: u64, now: u64, overflow: &AtomicU64) -> Found {
        let start = key as usize & (MAX_KEYS - 1);
        for _ in 0..2 {
            let mut spare = None;
            for i in 0..PROBE {
                let idx = (start + i) & (MAX_KEYS - 1);
                let s = &self.slots[idx];
                let k = s.key.load(Ordering::Acquire);
                if k == key {
                    return Found {
                        index: idx as u32,
                        new: false,
                    };
                }
                if spare.is_none() && (k == 0 || s.idle(now)) {
                    spare = Some((idx, k));
                }
            }
            let Some((idx, old)) = spare else { break };
            let s = &self.slots[idx];
            if s.key
                .compare_exchange(old, key, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Found {
                    index: idx as u32,
                    new: true,
                };
            }
        }
        overflow.fetch_add(1, Ordering::Relaxed);
        Found {
            index: Table::overflow_index(),
            new: false,
        }
    }

    /// The key in slot `idx` (0: free).
    pub(super) fn key_at(&self, idx: u32) -> u64 {
        self.slots
            .get(idx as usize)
            .map_or(0, |s| s.key.load(Ordering::Relaxed))
    }

    /// The slot holding `key`, without claiming one.
    pub(super) fn find(&self, key: u64) -> Option<u32> {
        let start = key as usize & (MAX_KEYS - 1);
        (0..PROBE)
            .map(|i| (start + i) & (MAX_KEYS - 1))
            .find(|idx| self.slots[*idx].key.load(Ordering::Relaxed) == key)
            .map(|idx| idx as u32)
    }

    /// Records what the admin API shows for the key in slot `idx`.
    pub(super) fn describe(&self, idx: u32, ip: Option<IpAddr>, route: Option<usize>) {
        let s = &self.slots[idx as usize];
        let bits = ip.map_or(0, ip_bits);
        s.ip_hi.store((bits >> 64) as u64, Ordering::Relaxed);
        s.ip_lo.store(bits as u64, Ordering::Relaxed);
        s.route.store(
            route
                .and_then(|r| u32::try_from(r).ok())
                .unwrap_or(NO_ROUTE),
            Ordering::Relaxed,
        );
    }

    /// One more request in flight on slot `idx`, unless `max` are already.
    pub(super) fn enter(&self, idx: u32, max: u32) -> Option<u32> {
        let n = &self.slots[idx as usize].in_flight;
        let mut cur = n.load(Ordering::Relaxed);
        loop {
            if cur >= max {
                return None;
            }
            match n.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(idx),
                Err(c) => cur = c,
            }
        }
    }

    /// One more request in flight on slot `idx`, whatever the bound.
    pub(super) fn force_enter(&self, idx: u32) -> u32 {
        self.slots[idx as usize]
            .in_flight
            .fetch_add(1, Ordering::AcqRel);
        idx
    }

    pub(super) fn leave(&self, idx: u32) {
        self.slots[idx as usize]
            .in_flight
            .fetch_sub(1, Ordering::AcqRel);
    }

    /// One token from slot `idx`'s bucket at `now`, or how many
    /// nanoseconds until one is there. `interval`: nanoseconds per token;
    /// `capacity`: the bucket's size in nanoseconds.
    pub(super) fn take(&self, idx: u32, now: u64, interval: u64, capacity: u64) -> Result<(), u64> {
        let tat = &self.slots[idx as usize].tat;
        let mut cur = tat.load(Ordering::Relaxed);
        loop {
            let next = cur.max(now) + interval;
            let ahead = next - now;
            if ahead > capacity {
                return Err(ahead - capacity);
            }
            match tat.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(c) => cur = c,
            }
        }
    }

    /// The `n` busiest keys at `now`: the fewest tokens left first, then
    /// the most in flight. Idle keys are left out.
    pub(super) fn fullest(
        &self,
        n: usize,
        now: u64,
        bucket: impl Fn(u32) -> (u64, u64),
    ) -> Vec<KeyFill> {
        let mut out: Vec<KeyFill> = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let key = s.key.load(Ordering::Relaxed);
            let overflow = i == MAX_KEYS;
            if (key == 0 && !overflow) || s.idle(now) {
                continue;
            }
            let (interval, capacity) = bucket(i as u32);
            let burst = capacity.checked_div(interval).unwrap_or(0);
            let ahead = s.tat.load(Ordering::Relaxed).saturating_sub(now);
            let used = ahead.div_ceil(interval.max(1)).min(burst) as u32;
            let bits = (u128::from(s.ip_hi.load(Ordering::Relaxed)) << 64)
                | u128::from(s.ip_lo.load(Ordering::Relaxed));
            let route = s.route.load(Ordering::Relaxed);
            out.push(KeyFill {
                key,
                ip: (bits != 0).then(|| ip_of(bits)),
                route: (route != NO_ROUTE && !overflow).then_some(route as usize),
                used,
                burst: u32::try_from(burst).unwrap_or(u32::MAX),
                in_flight: s.in_flight.load(Ordering::Relaxed),
                overflow,
            });
        }
        out.sort_by_key(|k| std::cmp::Reverse((k.used, k.in_flight)));
        out.truncate(n);
        out
    }
}
