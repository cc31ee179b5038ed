//! The Redis store: one server, Sentinel or Cluster.

use super::*;

#[test]
fn redis_store_takes_a_url_and_its_defaults() {
    let c = ok(&with_top(
        "store: { kind: redis, url: redis://127.0.0.1:6379/0 }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!(
        r.target,
        crate::config::RedisTarget::Url("redis://127.0.0.1:6379/0".into())
    );
    assert_eq!(r.prefix, "hopgate:");
    assert_eq!(r.max_queue, 100_000);
    let c = ok(&with_top(
        "store: { kind: redis, url: \"redis://:pw@[::1]:7000\", prefix: \"gw/a:\", max_queue: 10 }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!((r.prefix.as_str(), r.max_queue), ("gw/a:", 10));
    assert_eq!(ok(&with_top("store: { kind: memory }\n")).store.redis, None);
}

#[test]
fn redis_store_takes_a_sentinel_or_a_cluster() {
    use crate::config::RedisTarget;
    let c = ok(&with_top(
        "store: { kind: redis, sentinel: { master_name: mymaster, endpoints: [redis://127.0.0.1:26379, redis://127.0.0.1:26380] } }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!(
        r.target,
        RedisTarget::Sentinel {
            master_name: "mymaster".into(),
            endpoints: vec![
                "redis://127.0.0.1:26379".into(),
                "redis://127.0.0.1:26380".into()
            ],
        }
    );
    assert_eq!(r.target.mode(), "sentinel");
    let c = ok(&with_top(
        "store: { kind: redis, cluster: { endpoints: [redis://127.0.0.1:7000] } }\n",
    ));
    let r = c.store.redis.expect("redis config");
    assert_eq!(
        r.target,
        RedisTarget::Cluster {
            endpoints: vec!["redis://127.0.0.1:7000".into()],
        }
    );
}

#[test]
fn redis_sentinel_and_cluster_fields_are_checked_with_their_path() {
    only(
        &with_top("store: { kind: redis, sentinel: { endpoints: [redis://h:26379] } }\n"),
        "store.sentinel.master_name",
        "required",
    );
    only(
        &with_top("store: { kind: redis, sentinel: { master_name: m, endpoints: [] } }\n"),
        "store.sentinel.endpoints",
        "at least one",
    );
    only(
        &with_top("store: { kind: redis, cluster: { endpoints: [redis://h:7000, \"h:7001\"] } }\n"),
        "store.cluster.endpoints[1]",
        "must start with redis://",
    );
    only(
        &with_top(
            "store: { kind: redis, url: redis://h:1, cluster: { endpoints: [redis://h:7000] } }\n",
        ),
        "store",
        "exactly one of url, sentinel and cluster",
    );
    only(
        &with_top("store: { cluster: { endpoints: [redis://h:7000] } }\n"),
        "store.cluster",
        "only for kind: redis",
    );
}

#[test]
fn redis_store_fields_are_checked_with_their_path() {
    only(
        &with_top("store: { kind: redis }\n"),
        "store.url",
        "needs a url",
    );
    for (url, needle) in [
        ("http://127.0.0.1:6379", "must start with redis://"),
        ("redis://", "no host"),
        ("redis://:6379/0", "no host"),
        ("redis://127.0.0.1:0", "port"),
        ("redis://127.0.0.1:http", "port"),
        ("redis://127.0.0.1:6379/zero", "database"),
        ("redis://[::1", "bracket"),
    ] {
        only(
            &with_top(&format!("store: {{ kind: redis, url: \"{url}\" }}\n")),
            "store.url",
            needle,
        );
    }
    only(
        &with_top("store: { kind: redis, url: redis://h:1, prefix: \"a b\" }\n"),
        "store.prefix",
        "without spaces",
    );
    only(
        &with_top("store: { kind: redis, url: redis://h:1, max_queue: 0 }\n"),
        "store.max_queue",
        "out of range",
    );
    only(
        &with_top("store: { kind: redis, url: redis://h:1, path: s.snap }\n"),
        "store.path",
        "memory-store feature",
    );
    only(
        &with_top("store: { url: redis://h:1 }\n"),
        "store.url",
        "only for kind: redis",
    );
    only(
        &with_top("store: { kind: etcd }\n"),
        "store.kind",
        "unknown store kind",
    );
}

#[test]
fn an_unset_max_connections_is_derived_from_the_descriptor_limit() {
    use crate::config::{derive_max_connections, MAX_CONNECTIONS_CAP};
    assert_eq!(ok(&with_top("")).limits.max_connections, None);
    // Two listeners under a hard limit of 20,000: what refused to start
    // with a fixed 10,000 each now gets (20,000 − 256) ÷ (2 × 2).
    assert_eq!(derive_max_connections(2, Some(20_000)), 4_936);
    assert_eq!(derive_max_connections(1, Some(20_000)), 9_872);
    assert_eq!(
        derive_max_connections(1, Some(1_048_576)),
        MAX_CONNECTIONS_CAP
    );
    assert_eq!(derive_max_connections(3, None), MAX_CONNECTIONS_CAP);
    assert_eq!(derive_max_connections(1, Some(1_024)), 384);
    // Below the reserve, still at least one connection: never a refusal.
    assert_eq!(derive_max_connections(4, Some(100)), 1);
    assert_eq!(derive_max_connections(0, Some(20_000)), 9_872);
}

#[test]
fn slow_start_is_a_window_of_at_most_an_hour() {
    let svc = |v: &str| {
        format!(
            "{LISTENER}services:\n  - name: api\n    slow_start: {v}\n    nodes:\n      - {{ id: api-1, address: 127.0.0.1:8081 }}\n{DEFAULT_ROUTE}"
        )
    };
    assert_eq!(
        ok(&svc("30s")).services[0].slow_start,
        Duration::from_secs(30)
    );
    assert_eq!(ok(&with_top("")).services[0].slow_start, Duration::ZERO);
    only(&svc("soon"), "services[0].slow_start", "");
    only(&svc("2h"), "services[0].slow_start", "too long");
}

#[test]
fn retries_on_status_are_statuses_400_to_599_each_listed_once() {
    let svc = |v: &str| {
        format!(
            "{LISTENER}services:\n  - name: api\n    retries: {v}\n    nodes:\n      - {{ id: api-1, address: 127.0.0.1:8081 }}\n{DEFAULT_ROUTE}"
        )
    };
    let c = ok(&svc(
        "{ on_status: [503], on_status_idempotent: [502, \"504\"] }",
    ));
    let r = c.services[0].retry_on;
    assert!(r.retries(503, false) && r.retries(503, true));
    assert!(!r.retries(502, false) && r.retries(502, true) && r.retries(504, true));
    assert!(!r.retries(500, true));
    assert_eq!(r.any.iter().collect::<Vec<_>>(), [503]);
    assert!(ok(&with_top("")).services[0].retry_on.is_empty());
    only(
        &svc("{ on_status: [200] }"),
        "services[0].retries.on_status[0]",
        "from 400 to 599",
    );
    only(
        &svc("{ on_status: [503, lots] }"),
        "services[0].retries.on_status[1]",
        "not an integer",
    );
    only(
        &svc("{ on_status: [503], on_status_idempotent: [503] }"),
        "services[0].retries.on_status_idempotent[0]",
        "listed twice (also on_status[0])",
    );
    only(
        &svc("{ on_status: [503], retry: 1 }"),
        "services[0].retries.retry",
        "",
    );
}
