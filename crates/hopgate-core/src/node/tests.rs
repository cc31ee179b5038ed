//! The facade: availability, in-flight counting, and the breaker and
//! outlier detector as a node runs them.

use super::*;

#[test]
fn in_flight_guard_counts() {
    let n = Arc::new(NodeState::new(NodeKey {
        service: "s".into(),
        node: "n".into(),
    }));
    let g1 = n.begin_request();
    let g2 = n.begin_request();
    assert_eq!(n.in_flight(), 2);
    drop(g1);
    drop(g2);
    assert_eq!(n.in_flight(), 0);
    assert_eq!(n.requests(), 2);
}

fn node() -> NodeState {
    NodeState::new(NodeKey {
        service: "s".into(),
        node: "n".into(),
    })
}

#[test]
fn breaker_full_cycle_half_opens_on_the_asking_path() {
    let n = node();
    let cfg = crate::config::CircuitConfig {
        enabled: true,
        failure_threshold: 3,
        reset_timeout: std::time::Duration::from_millis(1000),
        max_requests: 2,
    };
    n.configure(&cfg);
    let out = crate::config::OutlierConfig {
        consecutive_5xx: 0,
        consecutive_failures: 0,
        ..Default::default()
    };
    let t0 = 10_000;
    for _ in 0..2 {
        assert!(n.try_acquire(t0));
        n.observe(Observation::Failure, t0, &out);
    }
    assert_eq!(n.circuit(), CircuitState::Closed);
    n.observe(Observation::Failure, t0, &out);
    assert_eq!(n.circuit(), CircuitState::Open);
    assert!(!n.is_available(t0 + 999));
    assert!(!n.try_acquire(t0 + 999));
    // Due: the asking path itself turns it half-open.
    assert!(n.is_available(t0 + 1000));
    assert!(n.try_acquire(t0 + 1000));
    assert_eq!(n.circuit(), CircuitState::HalfOpen);
    assert!(n.try_acquire(t0 + 1000));
    assert!(!n.try_acquire(t0 + 1000), "only max_requests probes");
    assert!(!n.is_available(t0 + 1000));
    // A half-open failure reopens.
    n.observe(Observation::Failure, t0 + 1001, &out);
    assert_eq!(n.circuit(), CircuitState::Open);
    assert!(!n.try_acquire(t0 + 1500));
    assert!(n.try_acquire(t0 + 2001));
    assert!(n.try_acquire(t0 + 2001));
    n.observe(Observation::Success, t0 + 2002, &out);
    assert_eq!(n.circuit(), CircuitState::HalfOpen);
    n.observe(Observation::Success, t0 + 2002, &out);
    assert_eq!(n.circuit(), CircuitState::Closed);
    assert_eq!(n.circuit_opened(), 2);
    // Probes whose outcome never arrives do not wedge half-open.
    n.observe(Observation::Failure, t0 + 3000, &out);
    n.observe(Observation::Failure, t0 + 3000, &out);
    n.observe(Observation::Failure, t0 + 3000, &out);
    assert_eq!(n.circuit(), CircuitState::Open);
    assert!(n.try_acquire(t0 + 4000));
    assert!(n.try_acquire(t0 + 4000));
    assert!(!n.try_acquire(t0 + 4500), "both probes out, no answer yet");
    assert!(
        n.try_acquire(t0 + 5000),
        "a fresh round after reset_timeout"
    );
    n.observe(Observation::Success, t0 + 5000, &out);
    n.observe(Observation::Success, t0 + 5000, &out);
    assert_eq!(n.circuit(), CircuitState::Closed);
    // A success while closed resets the count.
    n.observe(Observation::Failure, t0, &out);
    n.observe(Observation::Failure, t0, &out);
    n.observe(Observation::Success, t0, &out);
    n.observe(Observation::Failure, t0, &out);
    assert_eq!(n.circuit(), CircuitState::Closed);
}

#[test]
fn outlier_ejection_grows_and_resets() {
    let n = node();
    n.configure(&crate::config::CircuitConfig {
        enabled: false,
        ..Default::default()
    });
    let out = crate::config::OutlierConfig {
        consecutive_5xx: 3,
        consecutive_failures: 1,
        base_ejection: std::time::Duration::from_secs(2),
        max_ejection: std::time::Duration::from_secs(5),
        max_ejected_percent: 100,
    };
    let now = 1_000;
    assert_eq!(
        n.observe(Observation::ServerError, now, &out),
        Verdict::Keep
    );
    assert_eq!(
        n.observe(Observation::ServerError, now, &out),
        Verdict::Keep
    );
    let Verdict::Eject(t) = n.observe(Observation::ServerError, now, &out) else {
        panic!("third 5xx ejects")
    };
    assert_eq!(t, std::time::Duration::from_secs(2));
    n.eject_for(t, now);
    assert!(!n.is_available(now + 1));
    assert!(n.is_available(now + 2_000));
    // Repeat ejection: longer, capped at max.
    let Verdict::Eject(t) = n.observe(Observation::Failure, now + 2_000, &out) else {
        panic!("a connect failure ejects at once")
    };
    assert_eq!(t, std::time::Duration::from_secs(4));
    n.eject_for(t, now + 2_000);
    let Verdict::Eject(t) = n.observe(Observation::Failure, now + 7_000, &out) else {
        panic!()
    };
    assert_eq!(t, std::time::Duration::from_secs(5));
    // Serving well again resets the streak.
    n.observe(Observation::Success, now + 20_000, &out);
    let Verdict::Eject(t) = n.observe(Observation::Failure, now + 20_000, &out) else {
        panic!()
    };
    assert_eq!(t, std::time::Duration::from_secs(2));
    assert_eq!(n.ejected_total(), 2);
}

#[test]
fn availability() {
    let n = NodeState::new(NodeKey {
        service: "s".into(),
        node: "n".into(),
    });
    assert!(n.is_available(now_ms()));
    n.set_draining(true);
    assert!(!n.is_available(now_ms()));
    n.set_draining(false);
    n.eject_until(now_ms() + 60_000);
    assert!(!n.is_available(now_ms()));
    n.eject_until(0);
    n.set_health(Health::Unhealthy);
    assert!(!n.is_available(now_ms()));
}

/// A node a reload removed is out of rotation but stays a last resort for
/// requests routed by the snapshot from before the reload; an operator's
/// drain is not.
#[test]
fn a_removed_node_is_a_last_resort_and_a_drained_one_is_not() {
    let n = node();
    n.set_draining(true);
    assert!(!n.is_available(now_ms()));
    assert!(!n.last_resort_ok(), "an operator's drain excludes the node");
    let gone = node();
    gone.set_removed();
    assert!(gone.is_draining());
    assert!(!gone.is_available(now_ms()));
    assert!(
        gone.last_resort_ok(),
        "removed by a reload: still a last resort"
    );
    gone.set_health(Health::Unhealthy);
    assert!(!gone.last_resort_ok());
}

#[test]
fn a_node_joining_a_running_service_starts_cold_the_first_ones_warm() {
    let r = NodeRegistry::new();
    let a = r.get_or_create("svc", "a");
    let b = r.get_or_create("svc", "b");
    assert_eq!((a.warm_from(), b.warm_from()), (0, 0));
    // The writer swapped a snapshot with them in.
    let keep = [a.key().clone(), b.key().clone()].into_iter().collect();
    assert!(r.retain(&keep).is_empty());
    let c = r.get_or_create("svc", "c");
    assert!(c.warm_from() > 0, "a later node ramps");
    assert_eq!(r.get_or_create("other", "x").warm_from(), 0);
    // Known nodes keep their state.
    assert!(Arc::ptr_eq(&a, &r.get_or_create("svc", "a")));
}
