//! Rate limits: one [`RateLimiter`] per `rate_limits[]` policy, a token
//! bucket (GCRA: one "theoretical arrival time" per key) and an in-flight
//! count per key, in a fixed table of atomics.
//!
//! Owns the buckets, their keys ([`Who`] → a 64-bit keyed hash), the
//! decision for one request ([`RateLimiter::admit`]), the in-flight guard
//! ([`Held`]), the counters, and the read-out of the fullest keys for the
//! admin API ([`RateLimiter::fullest`]). A limiter outlives snapshots: the
//! compiler hands the previous snapshot's limiter to a policy with the same
//! name and equal parameters ([`RateLimiter::carry`]), so a reload keeps
//! the buckets; a changed policy gets a new, empty limiter.
//!
//! The request path takes no lock and allocates nothing: hashing the key,
//! at most a few probes into the table, one compare-and-swap on the
//! bucket. Memory is bounded: [`MAX_KEYS`] slots per policy, allocated
//! once. A slot whose bucket has refilled and which holds no request in
//! flight is idle and may be taken by another key; when every slot a key
//! may use is busy, the key shares one overflow bucket (counted).
//!
//! A `scope: fleet` policy also has a [`FleetShare`] (`fleet`): each key's
//! bucket here runs at this replica's share of the rate, which the control
//! plane sets from Redis in the background; its keys are hashed the same
//! on every replica. A local policy does none of that.
//!
//! Must not touch: I/O, the snapshot, responses (the data plane writes the
//! 429 and its headers).

use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use http::HeaderMap;

use crate::config::{LimitKey, LimitMode, LimitScope, RateLimitConfig};

mod fleet;
mod table;
#[cfg(test)]
mod tests;

use fleet::StableHasher;
pub use fleet::{floor as fleet_floor, Demand, FleetAnswer, FleetShare, FleetView, PPM};
use table::Table;
pub use table::{KeyFill, MAX_KEYS};

/// Nanoseconds since the first call in this process (the buckets' clock).
pub fn ns_at(at: Instant) -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    at.saturating_duration_since(*START.get_or_init(Instant::now))
        .as_nanos() as u64
}

/// What a request is keyed by: the parts a policy's key may name.
pub struct Who<'a> {
    pub client_ip: IpAddr,
    pub route_id: &'a str,
    pub route: usize,
    pub headers: &'a HeaderMap,
    /// The session id of a client that came with a valid token.
    pub session: Option<&'a [u8]>,
}

/// A request's fate under a policy.
#[derive(Debug)]
pub enum Decision {
    /// Through; the guard holds its in-flight count (policies with
    /// `max_in_flight`) until dropped.
    Pass(Option<Held>),
    /// Over the rate: refused, retry after this many seconds (at least 1).
    Limited { retry_after: u64 },
    /// Over `max_in_flight`: refused.
    TooManyInFlight,
}

/// The counters of one policy (`hopgate_rate_limited_total{policy,mode}`).
#[derive(Debug, Default)]
pub struct LimitCounters {
    /// Refused (mode enforce): over the rate.
    pub limited: AtomicU64,
    /// Refused (mode enforce): over `max_in_flight`.
    pub in_flight_limited: AtomicU64,
    /// Let through in mode log although over the rate.
    pub logged: AtomicU64,
    /// Let through in mode log although over `max_in_flight`.
    pub in_flight_logged: AtomicU64,
    /// Keys that found no slot of their own and shared the overflow bucket.
    pub overflow: AtomicU64,
}

/// The buckets of one policy.
#[derive(Debug)]
pub struct RateLimiter {
    pub config: RateLimitConfig,
    /// Nanoseconds per token, and the bucket's size in nanoseconds
    /// (`burst` tokens); both 0 without a rate.
    interval: u64,
    capacity: u64,
    burst: u32,
    table: Table,
    /// `scope: fleet`: this replica's share of each key's rate.
    fleet: Option<FleetShare>,
    seed: std::hash::RandomState,
    pub counters: LimitCounters,
    /// When a log-mode excess was last logged (milliseconds of
    /// [`ns_at`]'s clock; 0 never).
    logged_ms: AtomicU64,
}

impl RateLimiter {
    pub fn new(config: RateLimitConfig) -> RateLimiter {
        let (interval, capacity) = match &config.rate {
            Some(r) => {
                let t = r.interval_ns();
                (t, t.saturating_mul(u64::from(r.burst)))
            }
            None => (0, 0),
        };
        let fleet = (config.scope == LimitScope::Fleet).then(FleetShare::new);
        RateLimiter {
            burst: config.rate.map_or(0, |r| r.burst),
            config,
            interval,
            capacity,
            table: Table::new(),
            fleet,
            seed: std::hash::RandomState::new(),
            counters: LimitCounters::default(),
            logged_ms: AtomicU64::new(0),
        }
    }

    /// The limiter for `config`: `previous` when it has the same name and
    /// parameters (its buckets carry on), else a new one. The second value
    /// is true when `previous` existed and was replaced (its buckets reset).
    pub fn carry(
        config: &RateLimitConfig,
        previous: Option<&Arc<RateLimiter>>,
    ) -> (Arc<RateLimiter>, bool) {
        match previous {
            Some(p) if p.config == *config => (Arc::clone(p), false),
            Some(_) => (Arc::new(RateLimiter::new(config.clone())), true),
            None => (Arc::new(RateLimiter::new(config.clone())), false),
        }
    }

    /// One request's decision at `now` ([`ns_at`]): its in-flight count
    /// first, then a token from its bucket. In mode log an excess is
    /// counted (and logged at most every 10 s) and the request passes.
    pub fn admit(self: &Arc<Self>, who: &Who<'_>, now: u64) -> Decision {
        let key = self.key_of(who);
        let slot = self.table.slot_for(key, now, &self.counters.overflow);
        if slot.is_new() {
            let route = self.config.key.contains(&LimitKey::Route);
            let route = route.then_some(who.route);
            self.table.describe(slot.index, self.shown_ip(who), route);
            if let Some(f) = &self.fleet {
                f.claimed(slot.index);
            }
        }
        let held = match self.config.max_in_flight {
            Some(max) => match self.table.enter(slot.index, max) {
                Some(held) => Some(Held {
                    limiter: Arc::clone(self),
                    slot: held,
                }),
                None if self.log_only(&self.counters.in_flight_logged, now) => Some(Held {
                    limiter: Arc::clone(self),
                    slot: self.table.force_enter(slot.index),
                }),
                None => {
                    self.counters
                        .in_flight_limited
                        .fetch_add(1, Ordering::Relaxed);
                    return Decision::TooManyInFlight;
                }
            },
            None => None,
        };
        if self.interval != 0 {
            let (interval, capacity) = match &self.fleet {
                Some(f) => f.scaled(slot.index, self.interval, self.burst),
                None => (self.interval, self.capacity),
            };
            if let Err(wait) = self.table.take(slot.index, now, interval, capacity) {
                if !self.log_only(&self.counters.logged, now) {
                    self.counters.limited.fetch_add(1, Ordering::Relaxed);
                    return Decision::Limited {
                        retry_after: wait.div_ceil(1_000_000_000).max(1),
                    };
                }
            }
        }
        Decision::Pass(held)
    }

    /// True in mode log, where an excess is counted and logged (at most
    /// once every 10 s per policy) and the request goes through.
    fn log_only(&self, counter: &AtomicU64, now: u64) -> bool {
        if self.config.mode != LimitMode::Log {
            return false;
        }
        counter.fetch_add(1, Ordering::Relaxed);
        let ms = now / 1_000_000 + 1;
        let last = self.logged_ms.load(Ordering::Relaxed);
        if (last == 0 || ms >= last + 10_000)
            && self
                .logged_ms
                .compare_exchange(last, ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::info!(
                policy = %self.config.name,
                over_rate = self.counters.logged.load(Ordering::Relaxed),
                over_in_flight = self.counters.in_flight_logged.load(Ordering::Relaxed),
                "rate limit exceeded (mode log: let through)"
            );
        }
        true
    }

    /// The bucket's size in tokens and its window in seconds (`q` and `w`
    /// of `RateLimit-Policy`), when the policy has a rate.
    pub fn quota(&self) -> Option<(u32, u64)> {
        self.config.rate.map(|r| (r.burst, r.window_secs().max(1)))
    }

    /// The `n` keys with the fewest tokens left at `now`, most used first,
    /// each measured against its bucket here (a fleet policy's share).
    pub fn fullest(&self, n: usize, now: u64) -> Vec<KeyFill> {
        match &self.fleet {
            Some(f) => self
                .table
                .fullest(n, now, |i| f.scale(i, self.interval, self.burst)),
            None => self
                .table
                .fullest(n, now, |_| (self.interval, self.capacity)),
        }
    }

    /// This replica's share state of a `scope: fleet` policy.
    pub fn fleet(&self) -> Option<FleetView> {
        self.fleet.as_ref().map(FleetShare::view)
    }

    /// A fleet policy's demand since the last call (`elapsed_ms` ago), at
    /// most `max` keys, hottest first; empty for a local policy.
    pub fn fleet_demand(&self, elapsed_ms: u64, max: usize) -> Vec<Demand> {
        let (Some(f), Some(r)) = (&self.fleet, &self.config.rate) else {
            return Vec::new();
        };
        let per = r.per.as_secs().max(1);
        let rate_milli = u64::from(r.tokens) * 1000 / per;
        f.demand(|i| self.table.key_at(i as u32), rate_milli, elapsed_ms, max)
    }

    /// Takes Redis's answer to the sync that reported `reported`. True
    /// when the policy was in fallback until now.
    pub fn fleet_apply(&self, reported: &[Demand], answer: &FleetAnswer) -> bool {
        self.fleet.as_ref().is_some_and(|f| {
            f.apply(
                reported,
                answer,
                |k| self.table.find(k),
                |i| self.table.key_at(i),
            )
        })
    }

    /// A sync failed: the policy falls back to `rate ÷ live replicas`.
    /// True when this starts the fallback.
    pub fn fleet_fall_back(&self) -> bool {
        self.fleet.as_ref().is_some_and(FleetShare::fall_back)
    }

    /// The hash of a request's key (never 0: 0 marks a free slot): keyed
    /// per process for a local policy, the same on every replica for a
    /// fleet one.
    fn key_of(&self, who: &Who<'_>) -> u64 {
        match self.fleet {
            Some(_) => self.key_with(StableHasher::new(&self.config.name), who),
            None => self.key_with(self.seed.build_hasher(), who),
        }
    }

    fn key_with(&self, mut h: impl Hasher, who: &Who<'_>) -> u64 {
        for part in &self.config.key {
            match part {
                LimitKey::ClientIp => write_ip(&mut h, 1, who.client_ip),
                LimitKey::Route => {
                    h.write_u8(2);
                    h.write(who.route_id.as_bytes());
                    h.write_u8(0xff);
                }
                LimitKey::Header(name) => {
                    h.write_u8(3);
                    if let Some(v) = who.headers.get(name) {
                        h.write(v.as_bytes());
                    }
                    h.write_u8(0xff);
                }
                LimitKey::Cookie(name) => {
                    h.write_u8(4);
                    if let Some(v) = crate::cookie::value(who.headers, name) {
                        h.write(v.as_bytes());
                    }
                    h.write_u8(0xff);
                }
                LimitKey::Session => match who.session {
                    Some(id) => {
                        h.write_u8(5);
                        h.write(id);
                        h.write_u8(0xff);
                    }
                    None => write_ip(&mut h, 6, who.client_ip),
                },
            }
        }
        h.finish().max(1)
    }

    /// The address shown for a key by the admin API: the client's, when
    /// the key holds it (or stands in for a missing session).
    fn shown_ip(&self, who: &Who<'_>) -> Option<IpAddr> {
        self.config
            .key
            .iter()
            .any(|k| *k == LimitKey::ClientIp || (*k == LimitKey::Session && who.session.is_none()))
            .then_some(who.client_ip)
    }
}

fn write_ip(h: &mut impl Hasher, tag: u8, ip: IpAddr) {
    h.write_u8(tag);
    let v6 = match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    h.write(&v6.octets());
}

/// One request counted in flight on a key until dropped (the end of the
/// request: its answer's body, or its tunnel).
#[derive(Debug)]
pub struct Held {
    limiter: Arc<RateLimiter>,
    slot: u32,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.limiter.table.leave(self.slot);
    }
}

/// An address as the table stores it (IPv4 mapped into IPv6).
pub(crate) fn ip_bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// [`ip_bits`] back to an address.
pub(crate) fn ip_of(bits: u128) -> IpAddr {
    let v6 = Ipv6Addr::from(bits);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}
