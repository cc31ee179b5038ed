//! Full cycles of the shared breaker, with time driven by hand, under the
//! parameters of both of its users: a node's breaker (from `circuit:`) and
//! the maintenance handoff's per-endpoint dial breaker (5 failures, 60 s,
//! 3 probes).

use std::time::Duration;

use super::*;

fn params(threshold: u32, reset_ms: u64, max_requests: u32) -> CircuitConfig {
    CircuitConfig {
        enabled: true,
        failure_threshold: threshold,
        reset_timeout: Duration::from_millis(reset_ms),
        max_requests,
    }
}

#[test]
fn closed_open_half_open_closed() {
    let b = Breaker::new(&params(3, 1000, 2));
    let t0 = 10_000;
    for _ in 0..2 {
        assert_eq!(b.try_acquire(t0), Admit::Yes);
        assert!(!b.failure(t0));
    }
    assert_eq!(b.state(), CircuitState::Closed);
    assert!(b.failure(t0), "the threshold-th failure opens");
    assert_eq!(b.state(), CircuitState::Open);
    assert_eq!(b.opened_total(), 1);
    assert!(!b.may_pass(t0 + 999));
    assert_eq!(b.try_acquire(t0 + 999), Admit::No);
    // Due: the asking path itself turns it half-open.
    assert!(b.may_pass(t0 + 1000));
    assert_eq!(b.try_acquire(t0 + 1000), Admit::YesHalfOpened);
    assert_eq!(b.state(), CircuitState::HalfOpen);
    assert_eq!(b.try_acquire(t0 + 1000), Admit::Yes);
    assert_eq!(
        b.try_acquire(t0 + 1000),
        Admit::No,
        "only max_requests probes"
    );
    assert!(!b.may_pass(t0 + 1000));
    assert!(!b.success(), "one success of two");
    assert!(b.success(), "max_requests successes close it");
    assert_eq!(b.state(), CircuitState::Closed);
    assert_eq!(b.try_acquire(t0 + 1000), Admit::Yes);
}

#[test]
fn a_half_open_failure_reopens_and_the_timer_restarts() {
    let b = Breaker::new(&params(1, 1000, 3));
    assert!(b.failure(0));
    assert_eq!(b.try_acquire(1000), Admit::YesHalfOpened);
    assert!(b.failure(1200), "a half-open failure reopens");
    assert_eq!(b.state(), CircuitState::Open);
    assert_eq!(b.opened_total(), 2);
    assert_eq!(
        b.try_acquire(2100),
        Admit::No,
        "open for reset_timeout from 1200"
    );
    assert_eq!(b.try_acquire(2200), Admit::YesHalfOpened);
}

#[test]
fn a_success_while_closed_resets_the_count() {
    let b = Breaker::new(&params(3, 1000, 1));
    assert!(!b.failure(0));
    assert!(!b.failure(0));
    assert!(!b.success());
    assert!(!b.failure(0));
    assert!(!b.failure(0));
    assert_eq!(b.state(), CircuitState::Closed);
    assert!(b.failure(0));
}

#[test]
fn outcomes_while_open_change_nothing() {
    let b = Breaker::new(&params(1, 1000, 1));
    assert!(b.failure(0));
    assert!(!b.failure(500), "already open");
    assert!(
        !b.success(),
        "a late success does not close an open breaker"
    );
    assert_eq!(b.state(), CircuitState::Open);
    assert_eq!(b.try_acquire(999), Admit::No);
    assert_eq!(b.try_acquire(1000), Admit::YesHalfOpened);
}

#[test]
fn lost_probes_do_not_wedge_half_open() {
    let b = Breaker::new(&params(1, 1000, 2));
    assert!(b.failure(0));
    assert!(b.try_acquire(1000).passed());
    assert!(b.try_acquire(1000).passed());
    assert_eq!(
        b.try_acquire(1500),
        Admit::No,
        "both probes out, no answer yet"
    );
    assert_eq!(
        b.try_acquire(2000),
        Admit::Yes,
        "a fresh round after reset_timeout"
    );
    assert_eq!(b.try_acquire(2000), Admit::Yes);
    assert_eq!(b.try_acquire(2000), Admit::No);
    assert!(!b.success());
    assert!(b.success());
    assert_eq!(b.state(), CircuitState::Closed);
}

#[test]
fn half_open_on_evidence_from_elsewhere() {
    let b = Breaker::new(&params(1, 60_000, 1));
    assert!(!b.half_open(0), "a closed breaker stays closed");
    assert!(b.failure(0));
    assert!(b.half_open(10));
    assert_eq!(b.state(), CircuitState::HalfOpen);
    assert!(!b.half_open(10), "only from open");
    assert_eq!(
        b.try_acquire(10),
        Admit::Yes,
        "the probe passes long before the reset timeout"
    );
    assert!(b.success());
    assert_eq!(b.state(), CircuitState::Closed);
}

#[test]
fn disabled_lets_everything_pass_and_retuning_keeps_the_state() {
    let b = Breaker::new(&params(1, 1000, 1));
    assert!(b.failure(0));
    b.configure(&params(1, 5000, 1));
    assert_eq!(b.state(), CircuitState::Open, "retuning does not reset");
    assert_eq!(
        b.try_acquire(1000),
        Admit::No,
        "the new reset timeout applies"
    );
    assert_eq!(b.params(), params(1, 5000, 1));
    b.configure(&CircuitConfig {
        enabled: false,
        ..params(1, 5000, 1)
    });
    assert_eq!(b.state(), CircuitState::Closed);
    assert!(!b.failure(0), "failures are not counted while disabled");
    assert_eq!(b.try_acquire(0), Admit::Yes);
}

#[test]
fn default_is_the_documented_circuit_default() {
    let b = Breaker::default();
    assert_eq!(b.params(), CircuitConfig::default());
    assert_eq!(b.state(), CircuitState::Closed);
}
