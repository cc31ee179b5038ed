use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::*;
use crate::config::Rate;

const SEC: u64 = 1_000_000_000;

fn policy(key: Vec<LimitKey>, tokens: u32, per_secs: u64, burst: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: "p".to_owned(),
        key,
        rate: Some(Rate {
            tokens,
            per: Duration::from_secs(per_secs),
            burst,
        }),
        mode: LimitMode::Enforce,
        scope: LimitScope::Local,
        max_in_flight: None,
    }
}

fn who<'a>(ip: u8, headers: &'a HeaderMap) -> Who<'a> {
    Who {
        client_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, ip)),
        route_id: "app",
        route: 0,
        headers,
        session: None,
    }
}

fn passes(d: &Decision) -> bool {
    matches!(d, Decision::Pass(_))
}

/// 1/m with burst 3: three pass, the fourth waits ~20 s; after 20 s one
/// more passes.
#[test]
fn a_burst_then_the_rate() {
    let l = Arc::new(RateLimiter::new(policy(vec![LimitKey::ClientIp], 1, 60, 3)));
    let h = HeaderMap::new();
    let now = 100 * SEC;
    for _ in 0..3 {
        assert!(passes(&l.admit(&who(1, &h), now)));
    }
    match l.admit(&who(1, &h), now) {
        Decision::Limited { retry_after } => assert_eq!(retry_after, 60),
        other => panic!("{other:?}"),
    }
    assert!(
        passes(&l.admit(&who(2, &h), now)),
        "another client has its own bucket"
    );
    assert!(passes(&l.admit(&who(1, &h), now + 60 * SEC)));
    assert!(!passes(&l.admit(&who(1, &h), now + 60 * SEC)));
    assert_eq!(l.counters.limited.load(Ordering::Relaxed), 2);
}

/// A header key separates clients; a missing header is one more key.
#[test]
fn header_keys_separate_clients() {
    let name = HeaderName::from_static("x-api-key");
    let l = Arc::new(RateLimiter::new(policy(
        vec![LimitKey::Header(name.clone())],
        1,
        3600,
        1,
    )));
    let (mut a, mut b, none) = (HeaderMap::new(), HeaderMap::new(), HeaderMap::new());
    a.insert(name.clone(), HeaderValue::from_static("a"));
    b.insert(name, HeaderValue::from_static("b"));
    assert!(passes(&l.admit(&who(1, &a), SEC)));
    assert!(passes(&l.admit(&who(1, &b), SEC)));
    assert!(passes(&l.admit(&who(1, &none), SEC)));
    assert!(
        !passes(&l.admit(&who(2, &a), SEC)),
        "same header, other address"
    );
    assert!(!passes(&l.admit(&who(2, &none), SEC)));
}

#[test]
fn log_mode_passes_and_counts() {
    let mut cfg = policy(vec![LimitKey::Route], 1, 3600, 2);
    cfg.mode = LimitMode::Log;
    let l = Arc::new(RateLimiter::new(cfg));
    let h = HeaderMap::new();
    for _ in 0..5 {
        assert!(passes(&l.admit(&who(1, &h), SEC)));
    }
    assert_eq!(l.counters.logged.load(Ordering::Relaxed), 3);
    assert_eq!(l.counters.limited.load(Ordering::Relaxed), 0);
}

#[test]
fn in_flight_is_bounded_until_released() {
    let mut cfg = policy(vec![LimitKey::ClientIp], 1, 1, 1);
    cfg.rate = None;
    cfg.max_in_flight = Some(2);
    let l = Arc::new(RateLimiter::new(cfg));
    let h = HeaderMap::new();
    let one = l.admit(&who(1, &h), SEC);
    let two = l.admit(&who(1, &h), SEC);
    assert!(passes(&one) && passes(&two));
    assert!(matches!(
        l.admit(&who(1, &h), SEC),
        Decision::TooManyInFlight
    ));
    drop(one);
    assert!(passes(&l.admit(&who(1, &h), SEC)));
    assert_eq!(l.counters.in_flight_limited.load(Ordering::Relaxed), 1);
}

/// The same policy carries its limiter; a changed one starts afresh.
#[test]
fn carry_keeps_equal_policies() {
    let cfg = policy(vec![LimitKey::ClientIp], 1, 60, 1);
    let (first, reset) = RateLimiter::carry(&cfg, None);
    assert!(!reset);
    let (same, reset) = RateLimiter::carry(&cfg, Some(&first));
    assert!(Arc::ptr_eq(&first, &same) && !reset);
    let changed = policy(vec![LimitKey::ClientIp], 2, 60, 1);
    let (other, reset) = RateLimiter::carry(&changed, Some(&first));
    assert!(!Arc::ptr_eq(&first, &other) && reset);
}

/// The fullest keys come first, with their address; idle ones are left
/// out.
#[test]
fn fullest_lists_busy_keys() {
    let l = Arc::new(RateLimiter::new(policy(vec![LimitKey::ClientIp], 1, 60, 5)));
    let h = HeaderMap::new();
    for _ in 0..3 {
        l.admit(&who(1, &h), SEC);
    }
    l.admit(&who(2, &h), SEC);
    let top = l.fullest(10, SEC);
    assert_eq!(top.len(), 2);
    assert_eq!(top[0].used, 3);
    assert_eq!(top[0].ip, Some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    assert_eq!(top[1].used, 1);
    assert!(
        l.fullest(10, 1000 * SEC).is_empty(),
        "refilled buckets are idle"
    );
}

/// Keys past the table share the overflow bucket, counted; idle slots are
/// taken again.
#[test]
fn the_table_is_bounded() {
    let l = Arc::new(RateLimiter::new(policy(
        vec![LimitKey::ClientIp],
        1,
        3600,
        1,
    )));
    let h = HeaderMap::new();
    let mut refused = 0;
    for i in 0..(MAX_KEYS as u32 + 5000) {
        let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
        let w = Who {
            client_ip: ip,
            ..who(0, &h)
        };
        if !passes(&l.admit(&w, SEC)) {
            refused += 1;
        }
    }
    let overflow = l.counters.overflow.load(Ordering::Relaxed);
    assert!(overflow >= 5000, "{overflow}");
    assert_eq!(refused, overflow - 1, "overflowing keys share one bucket");
    // An hour later every bucket is full again: new keys find room.
    let later = 3601 * SEC;
    let w = Who {
        client_ip: IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)),
        ..who(0, &h)
    };
    assert!(passes(&l.admit(&w, later)));
    assert_eq!(l.counters.overflow.load(Ordering::Relaxed), overflow);
}

fn fleet_policy(tokens: u32, burst: u32) -> RateLimitConfig {
    let mut p = policy(vec![LimitKey::ClientIp], tokens, 1, burst);
    p.scope = LimitScope::Fleet;
    p
}

/// Requests of client 1 admitted over `secs` seconds at 10,000 a second.
fn admitted_over(l: &Arc<RateLimiter>, start: u64, secs: u64) -> u64 {
    let h = HeaderMap::new();
    (0..secs * 10_000)
        .filter(|i| passes(&l.admit(&who(1, &h), start + i * SEC / 10_000)))
        .count() as u64
}

/// Two replicas key the same client the same way (their keys meet in
/// Redis); a local policy's keys are per process.
#[test]
fn fleet_keys_are_the_same_on_every_replica() {
    let h = HeaderMap::new();
    let (a, b) = (
        RateLimiter::new(fleet_policy(100, 10)),
        RateLimiter::new(fleet_policy(100, 10)),
    );
    assert_eq!(a.key_of(&who(1, &h)), b.key_of(&who(1, &h)));
    assert_ne!(a.key_of(&who(1, &h)), a.key_of(&who(2, &h)));
}

/// Before any sync a replica counts itself alone: the whole rate. With two
/// live replicas a cold key gets half; a hot key its demand's share (the
/// weight), and after a fallback half again.
#[test]
fn a_fleet_key_runs_at_its_share() {
    let l = Arc::new(RateLimiter::new(fleet_policy(100, 1)));
    let got = admitted_over(&l, 10 * SEC, 2);
    assert!((199..=201).contains(&got), "alone: {got}");
    // A sync: two live replicas, the key not hot yet.
    let demand = l.fleet_demand(2000, 100);
    assert_eq!(demand.len(), 1);
    assert!(demand[0].hot, "10,000/s is more than half of a 50/s share");
    let cold = FleetAnswer {
        live: 2,
        totals: vec![demand[0].milli_rps],
        hot: vec![],
    };
    assert!(l.fleet_apply(&demand, &cold), "first sync: shared now");
    let got = admitted_over(&l, 20 * SEC, 2);
    assert!((99..=101).contains(&got), "cold, two replicas: {got}");
    // Hot: this replica sees 90 % of the fleet's demand for the key.
    let demand = l.fleet_demand(2000, 100);
    let hot = FleetAnswer {
        live: 2,
        totals: vec![demand[0].milli_rps * 10 / 9],
        hot: vec![demand[0].key],
    };
    assert!(!l.fleet_apply(&demand, &hot));
    assert_eq!(l.fleet().map(|f| f.hot_keys), Some(1));
    let got = admitted_over(&l, 30 * SEC, 2);
    assert!((176..=182).contains(&got), "90 % share: {got}");
    // Redis away: half again, counted once.
    assert!(l.fleet_fall_back());
    assert!(!l.fleet_fall_back());
    let got = admitted_over(&l, 40 * SEC, 2);
    assert!((99..=101).contains(&got), "fallback: {got}");
    let f = l.fleet().unwrap();
    assert_eq!(
        (f.shared, f.fallback, f.fallbacks, f.live),
        (false, true, 1, 2)
    );
}

/// A hot key's share never drops below the floor (5 % of the rate over the
/// live replicas) nor goes above the whole rate.
#[test]
fn a_hot_share_is_bounded() {
    let l = Arc::new(RateLimiter::new(fleet_policy(1000, 1)));
    admitted_over(&l, SEC, 1);
    let demand = l.fleet_demand(1000, 100);
    let answer = FleetAnswer {
        live: 2,
        totals: vec![demand[0].milli_rps * 1000],
        hot: vec![demand[0].key],
    };
    l.fleet_apply(&demand, &answer);
    let got = admitted_over(&l, 10 * SEC, 2);
    // floor(2) = 2.5 % of 1000/s = 25/s.
    assert!((49..=51).contains(&got), "floor: {got}");
    assert_eq!(fleet_floor(2), PPM / 40);
}

/// The admin API's fullest keys measure a fleet key against this
/// replica's bucket (its share), not the policy's whole burst.
#[test]
fn a_fleet_key_is_shown_against_its_share() {
    let l = Arc::new(RateLimiter::new(fleet_policy(100, 10)));
    let h = HeaderMap::new();
    l.admit(&who(1, &h), SEC);
    assert_eq!(l.fullest(1, SEC)[0].burst, 10, "alone: the whole burst");
    let demand = l.fleet_demand(1000, 100);
    let cold = FleetAnswer {
        live: 2,
        totals: vec![demand[0].milli_rps],
        hot: vec![],
    };
    l.fleet_apply(&demand, &cold);
    for _ in 0..20 {
        l.admit(&who(1, &h), 2 * SEC);
    }
    let top = l.fullest(1, 2 * SEC);
    assert_eq!((top[0].burst, top[0].used), (5, 5), "two replicas: half");
    let local = Arc::new(RateLimiter::new(policy(
        vec![LimitKey::ClientIp],
        100,
        1,
        10,
    )));
    local.admit(&who(1, &h), SEC);
    assert_eq!(local.fullest(1, SEC)[0].burst, 10);
}
