//! A `scope: fleet` policy's share of its rate: which part of each key's
//! rate this replica may admit, set by the control plane's sync with Redis
//! a few times a second and read with two atomic loads per request.
//!
//! A key is **cold** until some replica sees it use at least half of a
//! cold share: each replica then admits `rate ÷ live replicas` of it (with
//! `burst ÷ live replicas`, at least 1), so the fleet's sum is the rate.
//! A **hot** key gets a weight of its own: this replica's demand for it
//! (requests per second, refused ones included) over the fleet's demand,
//! at least [`floor`] (so a replica the key just moved to is not shut
//! out). The weights of one key sum to 1 plus at most `live × floor` (5 %
//! of the rate), whatever the key's traffic split. Without Redis
//! ([`FleetShare::fall_back`]) every key is cold again, with the last
//! known number of live replicas: `rate ÷ live replicas` each, never
//! "everyone blocked" and never "no limit".
//!
//! The sync reads only the slots of 64-slot chunks marked since the last
//! one (a request marks its slot's chunk on its first request of a sync
//! period; a slot with a weight is marked again at each sync), so its cost
//! follows the keys in use, not the table's size.
//!
//! Owns the per-slot weights and demand counters, the live count, the
//! shared/fallback state and its counters, the fleet-wide key hash
//! ([`StableHasher`]: the same key is the same number on every replica).
//! Must not touch: Redis (the control plane talks to it and hands the
//! answers here), the buckets themselves (`table`).

use std::collections::HashSet;
use std::hash::Hasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

use super::MAX_KEYS;

const STARTING: u8 = 0;
const SHARED: u8 = 1;
const FALLBACK: u8 = 2;

/// Weights are parts per million of the policy's rate.
pub const PPM: u32 = 1_000_000;

/// Nanoseconds between tokens at most once scaled (keeps `tat + interval`
/// far inside a `u64`).
const MAX_INTERVAL: u64 = 100_000_000_000_000_000;

/// The least weight a hot key has on a replica: 5 % of the rate shared by
/// the live replicas.
pub fn floor(live: u32) -> u32 {
    (PPM / 20 / live.max(1)).max(1)
}

/// One key's demand on this replica since the last sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The fleet-wide key ([`StableHasher`]).
    pub key: u64,
    /// Its slot in this replica's table.
    pub index: u32,
    /// Requests per second (×1000), refused ones included.
    pub milli_rps: u64,
    /// It used at least half of a cold share here: the fleet should treat
    /// it as hot.
    pub hot: bool,
}

/// What Redis answered to one sync of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetAnswer {
    /// Replicas that synced this policy lately (this one included).
    pub live: u32,
    /// The fleet's demand (milli-requests per second) for each key
    /// reported, in the order reported.
    pub totals: Vec<u64>,
    /// The keys some replica finds hot.
    pub hot: Vec<u64>,
}

/// The share state of one fleet policy.
pub struct FleetShare {
    /// Per slot: its key's weight in [`PPM`]; 0 = cold.
    weights: Box<[AtomicU32]>,
    /// Per slot: requests since the last sync.
    seen: Box<[AtomicU32]>,
    /// One bit per 64 slots: a slot in it had a first request since the
    /// last sync, or has a weight (so the sync reads only those chunks).
    active: Box<[AtomicU64]>,
    /// A cold key's weight: `PPM ÷ live`.
    cold: AtomicU32,
    live: AtomicU32,
    /// [`STARTING`], [`SHARED`] (Redis answered the last sync: hot keys
    /// use their weights) or [`FALLBACK`].
    state: AtomicU8,
    /// Hot keys with a weight here after the last sync.
    hot: AtomicU32,
    /// Times the policy fell back to `rate ÷ live replicas`.
    pub fallbacks: AtomicU64,
    /// Syncs that failed (Redis away, slow, or refusing).
    pub sync_errors: AtomicU64,
}

impl std::fmt::Debug for FleetShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetShare")
            .field("live", &self.live)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Default for FleetShare {
    fn default() -> Self {
        FleetShare::new()
    }
}

/// A snapshot of a policy's share state (admin API, metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetView {
    /// Redis answered the last sync.
    pub shared: bool,
    /// Redis did not answer the last sync (false before the first one).
    pub fallback: bool,
    pub live: u32,
    pub hot_keys: u32,
    pub fallbacks: u64,
    pub sync_errors: u64,
}

impl FleetShare {
    /// Before its first sync a replica counts itself alone (`live` 1).
    pub fn new() -> FleetShare {
        let atomics = || (0..=MAX_KEYS).map(|_| AtomicU32::new(0)).collect();
        FleetShare {
            weights: atomics(),
            seen: atomics(),
            active: (0..(MAX_KEYS + 1).div_ceil(64 * 64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            cold: AtomicU32::new(PPM),
            live: AtomicU32::new(1),
            state: AtomicU8::new(STARTING),
            hot: AtomicU32::new(0),
            fallbacks: AtomicU64::new(0),
            sync_errors: AtomicU64::new(0),
        }
    }

    /// This replica's GCRA parameters for slot `idx` (the policy's
    /// `interval` and `burst` scaled by the slot's weight), counting the
    /// request as demand.
    #[inline]
    pub(super) fn scaled(&self, idx: u32, interval: u64, burst: u32) -> (u64, u64) {
        let i = idx as usize;
        if self.seen[i].fetch_add(1, Relaxed) == 0 {
            self.mark(i);
        }
        self.scale(idx, interval, burst)
    }

    /// [`FleetShare::scaled`] without counting demand: what the admin API
    /// shows of a key's bucket.
    #[inline]
    pub(super) fn scale(&self, idx: u32, interval: u64, burst: u32) -> (u64, u64) {
        let mut w = self.cold.load(Relaxed);
        if self.state.load(Relaxed) == SHARED {
            let own = self.weights[idx as usize].load(Relaxed);
            if own != 0 {
                w = own;
            }
        }
        let w = u128::from(w.max(1));
        let interval = (u128::from(interval) * u128::from(PPM) / w).min(u128::from(MAX_INTERVAL));
        let burst = (u128::from(burst) * w / u128::from(PPM)).max(1);
        let interval = interval as u64;
        (interval, interval.saturating_mul(burst as u64))
    }

    /// Marks slot `i`'s chunk for the next sync.
    fn mark(&self, i: usize) {
        let chunk = i / 64;
        self.active[chunk / 64].fetch_or(1 << (chunk % 64), Relaxed);
    }

    /// The slots of the chunks marked since the last call (marks cleared
    /// first: a request marking meanwhile is seen at the next call).
    fn marked(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (w, word) in self.active.iter().enumerate() {
            let mut bits = word.swap(0, Relaxed);
            while bits != 0 {
                let chunk = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                out.extend((chunk * 64..(chunk + 1) * 64).filter(|i| *i < self.seen.len()));
            }
        }
        out
    }

    /// A slot was given to a new key: it starts cold.
    pub(super) fn claimed(&self, idx: u32) {
        self.weights[idx as usize].store(0, Relaxed);
        self.seen[idx as usize].store(0, Relaxed);
    }

    /// The demand of every slot with requests since the last sync or a
    /// weight of its own (the counters restart), hottest first, at most
    /// `max`. `keys(i)` is slot `i`'s key (0 = free); `rate_milli` the
    /// policy's rate in milli-tokens per second; `elapsed_ms` the time
    /// since the last call.
    pub(super) fn demand(
        &self,
        keys: impl Fn(usize) -> u64,
        rate_milli: u64,
        elapsed_ms: u64,
        max: usize,
    ) -> Vec<Demand> {
        let elapsed_ms = elapsed_ms.max(1);
        let cold_milli = rate_milli * u64::from(self.cold.load(Relaxed)) / u64::from(PPM);
        let mut out = Vec::new();
        for i in self.marked() {
            let seen = match self.seen[i].load(Relaxed) {
                0 => 0,
                _ => self.seen[i].swap(0, Relaxed),
            };
            let weighted = self.weights[i].load(Relaxed) != 0;
            if seen == 0 && !weighted {
                continue;
            }
            let key = keys(i);
            if key == 0 {
                continue;
            }
            let milli_rps = u64::from(seen) * 1_000_000 / elapsed_ms;
            out.push(Demand {
                key,
                index: i as u32,
                milli_rps,
                hot: milli_rps.saturating_mul(2) >= cold_milli,
            });
        }
        out.sort_by_key(|d| std::cmp::Reverse(d.milli_rps));
        out.truncate(max);
        out
    }

    /// Takes Redis's answer to the sync that reported `reported`: the live
    /// count, and a weight for each hot key this replica holds (`find`
    /// gives a key's slot, `key_at` a slot's key). Returns true when the
    /// policy was not shared until now.
    pub(super) fn apply(
        &self,
        reported: &[Demand],
        answer: &FleetAnswer,
        find: impl Fn(u64) -> Option<u32>,
        key_at: impl Fn(u32) -> u64,
    ) -> bool {
        let live = answer.live.max(1);
        self.live.store(live, Relaxed);
        self.cold.store(PPM / live, Relaxed);
        let hot: HashSet<u64> = answer.hot.iter().copied().collect();
        let floor = floor(live);
        let mut done = HashSet::with_capacity(reported.len());
        let mut weighted = 0u32;
        for (d, total) in reported.iter().zip(&answer.totals) {
            let w = match (hot.contains(&d.key), *total) {
                (false, _) => 0,
                (true, 0) => PPM / live,
                (true, t) => {
                    let w = u128::from(d.milli_rps) * u128::from(PPM) / u128::from(t);
                    (w as u32).clamp(floor, PPM)
                }
            };
            let mut n = 0;
            if key_at(d.index) == d.key {
                self.weights[d.index as usize].store(w, Relaxed);
                if w != 0 {
                    self.mark(d.index as usize);
                    n += 1;
                }
            }
            weighted += n;
            done.insert(d.key);
        }
        for key in hot.iter().filter(|k| !done.contains(k)) {
            if let Some(idx) = find(*key) {
                let i = idx as usize;
                if self.weights[i]
                    .compare_exchange(0, floor, Relaxed, Relaxed)
                    .is_ok()
                {
                    self.mark(i);
                    weighted += 1;
                }
            }
        }
        self.hot.store(weighted, Relaxed);
        self.state.swap(SHARED, Relaxed) != SHARED
    }

    /// Redis did not answer: every key cold, `rate ÷ live` with the last
    /// known live count (1 when Redis never answered). Returns true when
    /// this starts a fallback (counted).
    pub(super) fn fall_back(&self) -> bool {
        self.sync_errors.fetch_add(1, Relaxed);
        if self.state.swap(FALLBACK, Relaxed) == FALLBACK {
            return false;
        }
        self.fallbacks.fetch_add(1, Relaxed);
        for w in self.weights.iter() {
            w.store(0, Relaxed);
        }
        self.hot.store(0, Relaxed);
        true
    }

    pub fn view(&self) -> FleetView {
        let state = self.state.load(Relaxed);
        FleetView {
            shared: state == SHARED,
            fallback: state == FALLBACK,
            live: self.live.load(Relaxed),
            hot_keys: self.hot.load(Relaxed),
            fallbacks: self.fallbacks.load(Relaxed),
            sync_errors: self.sync_errors.load(Relaxed),
        }
    }
}

/// The fleet-wide key hash: FNV-1a over the key's bytes, then a 64-bit
/// finaliser. The same on every replica and every build (unlike the
/// per-process random seed of a local policy), seeded with the policy's
/// name.
pub(super) struct StableHasher(u64);

impl StableHasher {
    pub(super) fn new(policy: &str) -> StableHasher {
        let mut h = StableHasher(0xcbf2_9ce4_8422_2325);
        h.write(policy.as_bytes());
        h.write_u8(0xff);
        h
    }
}

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.write(&[b]);
    }

    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}
