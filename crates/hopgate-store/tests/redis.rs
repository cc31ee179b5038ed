//! The redis store against a real `redis-server`: the conformance suite on
//! its local view, then what only a shared store promises (propagation,
//! compare-and-set across replicas, the miss lookup, the load at start,
//! degrading and reconciling when Redis goes away and comes back).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hopgate_store::conformance::{self, id};
use hopgate_store::{
    Binding, MemoryStore, RedisOptions, RedisState, RedisStore, SessionId, SessionStore,
    SharedCounters,
};

#[path = "redis/server.rs"]
mod server;

use server::RedisServer;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// A prefix no other store of this process uses.
fn fresh_prefix() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!("t{}:", N.fetch_add(1, Ordering::Relaxed))
}

fn options(r: &RedisServer, prefix: &str, replica: &str) -> RedisOptions {
    let mut o = RedisOptions::new(r.url(), replica);
    o.prefix = prefix.to_owned();
    o
}

async fn replica(r: &RedisServer, prefix: &str, name: &str) -> RedisStore {
    let s = RedisStore::start(options(r, prefix, name), MemoryStore::default()).expect("start");
    assert!(
        s.wait_loaded(Duration::from_secs(5)).await,
        "{name} never loaded"
    );
    s
}

fn live(node: &str, hops: u32) -> Binding {
    let t = now();
    let mut b = Binding::new("api", node, t, t + 600);
    b.hops = hops;
    b
}

/// Polls `f` every 10 ms until it holds; how long it took.
async fn within(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

async fn raw(r: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(r.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_counters_sum_every_replicas_increase_and_redial_after_a_failure() {
    let mut redis = RedisServer::start();
    let prefix = fresh_prefix();
    let open = |r: &RedisServer| {
        SharedCounters::canary(
            &hopgate_store::RedisTarget::Url(r.url()),
            &prefix,
            7,
            Duration::from_secs(2),
        )
        .expect("url")
    };
    let (mut a, mut b) = (open(&redis), open(&redis));
    let f = |k: &str, n: u64| (k.to_owned(), n);
    let sums = a.add_and_read(&[f("c:r", 3), f("c:e", 0)]).await.unwrap();
    assert_eq!(
        sums,
        HashMap::from([("c:r".to_owned(), 3)]),
        "zeros are not written"
    );
    let sums = b.add_and_read(&[f("c:r", 2), f("b:5", 4)]).await.unwrap();
    assert_eq!(sums["c:r"], 5);
    assert_eq!(sums["b:5"], 4);
    // The hash is per canary and expires a day after its last update.
    let mut raw = raw(&redis).await;
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("{prefix}canary:0000000000000007"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!((86_000..=86_400).contains(&ttl), "{ttl}");
    // Redis gone: an error; back: the next call dials again.
    redis.kill();
    assert!(a.add_and_read(&[f("c:r", 1)]).await.is_err());
    redis.restart();
    let sums = a.add_and_read(&[f("c:r", 1)]).await.unwrap();
    assert!(sums["c:r"] >= 1, "{sums:?}");
}

#[test]
fn conformance_on_the_local_view() {
    let redis = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let _in_rt = rt.enter();
    let make = || {
        let s = RedisStore::start(
            options(&redis, &fresh_prefix(), "conformance"),
            MemoryStore::default(),
        )
        .expect("start");
        assert!(rt.block_on(s.wait_loaded(Duration::from_secs(5))));
        s
    };
    conformance::run_all(make);
    // And with Redis gone: the same answers from the cache alone.
    let s = make();
    drop(redis);
    conformance::put_get_round_trip(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_reaches_the_other_replica_within_a_second() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let (a, b) = (
        replica(&redis, &p, "a").await,
        replica(&redis, &p, "b").await,
    );
    let sid = SessionId::random();
    let bound = live("api-1", 0).with_context(&b"\x00ctx\xff"[..]);
    a.put(sid, bound.clone());
    let took = within(Duration::from_secs(1), "b sees a's binding", || {
        b.get(&sid, now()).as_ref() == Some(&bound)
    })
    .await;
    eprintln!("propagation took {took:?}");
    // A hop by a, with a new context.
    let mut hopped = live("api-2", 1).with_context(&b"moved"[..]);
    hopped.bound_at = bound.bound_at;
    a.put(sid, hopped.clone());
    within(Duration::from_secs(1), "b sees the hop", || {
        b.get(&sid, now()).as_ref() == Some(&hopped)
    })
    .await;
    // The hash in Redis, field by field.
    let mut conn = raw(&redis).await;
    let fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
        .arg(format!("{p}s:{sid}"))
        .query_async(&mut conn)
        .await
        .expect("hgetall");
    assert_eq!(fields["node"], b"api-2");
    assert_eq!(fields["hops"], b"1");
    assert_eq!(fields["writer"], b"a");
    assert_eq!(fields["context"], b"moved");
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("{p}s:{sid}"))
        .query_async(&mut conn)
        .await
        .expect("ttl");
    assert!((590..=601).contains(&ttl), "ttl {ttl}");
    // A remove travels too.
    assert!(a.remove(&sid));
    within(Duration::from_secs(1), "b forgets it", || {
        b.get(&sid, now()).is_none()
    })
    .await;
    assert_eq!(a.status().state, RedisState::Connected);
    assert_eq!(a.status().queued, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_hops_on_two_replicas_end_on_one_node() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let (a, b) = (
        replica(&redis, &p, "a").await,
        replica(&redis, &p, "b").await,
    );
    for round in 0..20u32 {
        let sid = SessionId::random();
        // Two creates at once: one wins, both end on it.
        a.put(sid, live("api-1", 0));
        b.put(sid, live("api-2", 0));
        let agree = |a: &RedisStore, b: &RedisStore| {
            let (x, y) = (a.get(&sid, now()), b.get(&sid, now()));
            x.is_some() && x == y
        };
        within(Duration::from_secs(1), "creates converge", || agree(&a, &b)).await;
        let hops = a.get(&sid, now()).expect("bound").hops;
        assert_eq!(hops, 0, "round {round}");
        // Two hops at once (both from hop 0): one node.
        a.put(sid, live("api-3", 1));
        b.put(sid, live("api-4", 1));
        within(Duration::from_secs(1), "hops converge", || agree(&a, &b)).await;
        let won = a.get(&sid, now()).expect("bound");
        assert_eq!(won.hops, 1);
        assert!(["api-3", "api-4"].contains(&&*won.node), "{won:?}");
        // A stale writer (fewer hops) loses, and takes the winner back.
        b.put(sid, live("api-1", 0));
        within(Duration::from_secs(1), "the stale write is undone", || {
            b.get(&sid, now()).as_ref() == Some(&won)
        })
        .await;
        assert_eq!(a.get(&sid, now()).as_ref(), Some(&won), "a never moved");
    }
    let lost = a.status().conflicts + b.status().conflicts;
    assert!(
        lost >= 40,
        "every round has at least two lost writes: {lost}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_miss_asks_redis() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let b = replica(&redis, &p, "b").await;
    // A binding another replica wrote, whose notice b has not seen (written
    // here without one).
    let sid = SessionId::random();
    let exp = now() + 600;
    let mut conn = raw(&redis).await;
    let _: () = redis::cmd("HSET")
        .arg(format!("{p}s:{sid}"))
        .arg(&[
            ("service", "api"),
            ("node", "api-7"),
            ("bound_at", "5"),
            ("hops", "2"),
            ("writer", "a"),
        ])
        .arg("expires_at")
        .arg(exp)
        .query_async(&mut conn)
        .await
        .expect("hset");
    assert_eq!(b.get(&sid, now()), None);
    let got = b.fetch(&sid).expect("a shared store asks").await;
    let mut want = Binding::new("api", "api-7", 5, exp);
    want.hops = 2;
    assert_eq!(got.as_ref(), Some(&want));
    assert_eq!(b.get(&sid, now()), Some(want), "the cache has it now");
    let unknown = SessionId::random();
    assert_eq!(b.fetch(&unknown).expect("asks").await, None);
    assert!(MemoryStore::default().fetch(&unknown).is_none());
    // With Redis away the lookup answers None at once.
    drop(redis);
    within(Duration::from_secs(3), "degraded", || {
        b.status().state == RedisState::Degraded
    })
    .await;
    let start = Instant::now();
    assert_eq!(b.fetch(&unknown).expect("asks").await, None);
    assert!(start.elapsed() < Duration::from_millis(300));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_replica_loads_what_redis_holds() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let a = replica(&redis, &p, "a").await;
    let ids: Vec<SessionId> = (0..500).map(|_| SessionId::random()).collect();
    for (i, sid) in ids.iter().enumerate() {
        a.put(*sid, live(&format!("api-{}", i % 3), 0));
    }
    assert!(a.flush(Duration::from_secs(3)).await, "a's writes are in");
    let c = replica(&redis, &p, "c").await;
    assert_eq!(c.len(), 500);
    for sid in &ids {
        assert_eq!(c.get(sid, now()), a.get(sid, now()));
    }
    // The load is bounded by the cache's size.
    let small = RedisStore::start(options(&redis, &p, "d"), MemoryStore::new(100)).expect("start");
    assert!(small.wait_loaded(Duration::from_secs(5)).await);
    assert_eq!(small.len(), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_degrades_then_reconciles() {
    let mut redis = RedisServer::start();
    let p = fresh_prefix();
    let (a, b) = (
        replica(&redis, &p, "a").await,
        replica(&redis, &p, "b").await,
    );
    let before = SessionId::random();
    a.put(before, live("api-1", 0));
    within(Duration::from_secs(1), "b sees it", || {
        b.get(&before, now()).is_some()
    })
    .await;

    redis.kill();
    within(Duration::from_secs(3), "a degraded", || {
        a.status().state == RedisState::Degraded
    })
    .await;
    assert!(a.status().last_error.is_some());
    // Every method still answers from the cache, and writes queue.
    assert!(a.get(&before, now()).is_some());
    let during: Vec<SessionId> = (0..50).map(|_| SessionId::random()).collect();
    for sid in &during {
        a.put(*sid, live("api-2", 0));
    }
    let mut hopped = live("api-3", 1);
    hopped.bound_at = 1;
    a.put(before, hopped.clone());
    assert!(a.get(&during[0], now()).is_some());
    assert_eq!(a.bindings_to("api", "api-2"), 50);
    assert_eq!(a.len(), 51);
    assert!(a.status().queued >= 51, "{:?}", a.status());

    redis.restart();
    within(Duration::from_secs(5), "a reconnects and drains", || {
        let s = a.status();
        s.state == RedisState::Connected && s.queued == 0
    })
    .await;
    within(Duration::from_secs(5), "b has a's queued writes", || {
        during.iter().all(|sid| b.get(sid, now()).is_some())
            && b.get(&before, now()).as_ref() == Some(&hopped)
    })
    .await;
    assert!(a.status().reconnects >= 1);
    assert_eq!(a.status().dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_the_oldest_and_counts() {
    let redis = RedisServer::start();
    let mut o = options(&redis, &fresh_prefix(), "a");
    o.max_queue = 4;
    let a = RedisStore::start(o, MemoryStore::default()).expect("start");
    assert!(a.wait_loaded(Duration::from_secs(5)).await);
    drop(redis);
    within(Duration::from_secs(3), "degraded", || {
        a.status().state == RedisState::Degraded
    })
    .await;
    for _ in 0..10 {
        a.put(SessionId::random(), live("api-1", 0));
    }
    let s = a.status();
    assert_eq!((s.queued, s.dropped), (4, 6), "{s:?}");
    assert_eq!(a.len(), 10, "the cache keeps every binding");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_starts_degraded_without_redis_and_serves() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let s = RedisStore::start(
        RedisOptions::new(format!("redis://127.0.0.1:{port}/0"), "a"),
        MemoryStore::default(),
    )
    .expect("start");
    assert!(!s.wait_loaded(Duration::from_millis(300)).await);
    assert_eq!(s.status().state, RedisState::Degraded);
    s.put(id(1), live("api-1", 0));
    assert!(s.get(&id(1), now()).is_some());
    assert!(RedisStore::start(RedisOptions::new("nope://x", "a"), MemoryStore::default()).is_err());
    let shared: Arc<dyn SessionStore> = Arc::new(s);
    assert_eq!(
        shared.redis_status().map(|s| s.state),
        Some(RedisState::Degraded)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_reloads_everything_when_redis_lost_its_data() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let (a, b) = (
        replica(&redis, &p, "a").await,
        replica(&redis, &p, "b").await,
    );
    let old = SessionId::random();
    a.put(old, live("api-1", 0));
    within(Duration::from_secs(1), "b sees it", || {
        b.get(&old, now()).is_some()
    })
    .await;
    // Redis loses everything, stream included (as after a restart without
    // persistence); a binding then appears with no notice; the replicas'
    // connections drop.
    let mut conn = raw(&redis).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("flushall");
    let new = SessionId::random();
    let _: () = redis::cmd("HSET")
        .arg(format!("{p}s:{new}"))
        .arg(&[
            ("service", "api"),
            ("node", "api-9"),
            ("bound_at", "1"),
            ("hops", "0"),
        ])
        .arg("expires_at")
        .arg(now() + 600)
        .query_async(&mut conn)
        .await
        .expect("hset");
    let _: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query_async(&mut conn)
        .await
        .expect("client kill");
    // The stream went back past b's cursor: b reloads by SCAN.
    within(Duration::from_secs(3), "b resyncs", || {
        b.status().resyncs >= 1 && b.get(&new, now()).is_some()
    })
    .await;
    assert!(b.get(&old, now()).is_some(), "the cache keeps what it had");
    // And follows the new stream from its start.
    within(Duration::from_secs(3), "a reconnects", || {
        a.status().state == RedisState::Connected && a.status().reconnects >= 1
    })
    .await;
    let later = SessionId::random();
    a.put(later, live("api-2", 0));
    within(Duration::from_secs(1), "b follows the new stream", || {
        b.get(&later, now()).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_misses_nothing_when_the_stream_is_trimmed() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let mut o = options(&redis, &p, "a");
    o.stream_maxlen = 100;
    let a = RedisStore::start(o, MemoryStore::default()).expect("start");
    assert!(a.wait_loaded(Duration::from_secs(5)).await);
    let b = replica(&redis, &p, "b").await;
    // A burst far longer than the stream is kept: whatever b could not
    // read in time was trimmed, and b reloads by SCAN.
    let ids: Vec<SessionId> = (0..5_000).map(|_| SessionId::random()).collect();
    for sid in &ids {
        a.put(*sid, live("api-1", 0));
    }
    assert!(a.flush(Duration::from_secs(5)).await);
    within(Duration::from_secs(5), "b has every binding", || {
        b.len() == ids.len()
    })
    .await;
    let mut conn = raw(&redis).await;
    let kept: u64 = redis::cmd("XLEN")
        .arg(format!("{p}changes"))
        .query_async(&mut conn)
        .await
        .expect("xlen");
    assert!(kept < 1_000, "the stream is trimmed: {kept}");
    eprintln!("b: {:?}", b.status());
}

async fn hash_of(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("hgetall")
}

/// Redis loses everything while two replicas hold bindings (`FLUSHALL`,
/// connections kept): the replicas find out by the epoch and write their
/// caches back, so a replica started right after finds every session, and
/// a hop one replica had wins over the stale copy another one held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_redis_is_reseeded_and_the_hop_wins_over_a_stale_copy() {
    let redis = RedisServer::start();
    let p = fresh_prefix();
    let (a, b) = (
        replica(&redis, &p, "a").await,
        replica(&redis, &p, "b").await,
    );
    let shared: Vec<SessionId> = (0..300).map(|_| SessionId::random()).collect();
    for (i, sid) in shared.iter().enumerate() {
        a.put(*sid, live(&format!("api-{}", i % 3), (i % 4) as u32));
    }
    within(Duration::from_secs(5), "b has a's bindings", || {
        shared
            .iter()
            .all(|sid| b.get(sid, now()) == a.get(sid, now()))
    })
    .await;
    // A binding only b holds (its notice was lost with Redis's data), and a
    // session that hopped on a whose hop b never learned of.
    let only_b = SessionId::random();
    let mut b_only = live("api-7", 2);
    b_only.expires_at = now() + 300;
    b.cache().put(only_b, b_only.clone());
    let moved = SessionId::random();
    a.put(moved, live("api-1", 0));
    within(Duration::from_secs(1), "b has it", || {
        b.get(&moved, now()).is_some()
    })
    .await;
    let hopped = live("api-2", 1);
    a.cache().put(moved, hopped.clone());
    assert_eq!(b.get(&moved, now()).map(|b| b.hops), Some(0), "b is stale");

    let mut conn = raw(&redis).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("flushall");
    // A fresh replica, started at once on the empty Redis.
    let c = replica(&redis, &p, "c").await;
    let took = within(Duration::from_secs(10), "c has every binding", || {
        shared
            .iter()
            .all(|sid| c.get(sid, now()) == a.get(sid, now()))
            && c.get(&only_b, now()).as_ref() == Some(&b_only)
            && c.get(&moved, now()).as_ref() == Some(&hopped)
    })
    .await;
    eprintln!("c had every binding {took:?} after FLUSHALL");
    within(Duration::from_secs(5), "b takes the hop", || {
        b.get(&moved, now()).as_ref() == Some(&hopped)
    })
    .await;
    assert_eq!(a.get(&moved, now()).as_ref(), Some(&hopped), "a kept it");
    // In Redis: the hop, and each binding with its own remaining TTL.
    let stored = hash_of(&mut conn, &format!("{p}s:{moved}")).await;
    assert_eq!(
        (stored["node"].as_str(), stored["hops"].as_str()),
        ("api-2", "1")
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("{p}s:{only_b}"))
        .query_async(&mut conn)
        .await
        .expect("ttl");
    assert!((250..=301).contains(&ttl), "ttl {ttl}");
    let (sa, sb) = (a.status(), b.status());
    assert!(sa.reseeded >= 301, "a wrote its cache back: {sa:?}");
    assert!(sb.reseeded >= 1, "b wrote its cache back: {sb:?}");
    assert!(sa.resyncs >= 1 && sb.resyncs >= 1);
    assert_eq!(c.status().reseeded, 0, "c had nothing to write back");
}

/// Redis restarts without its data: the replicas reconnect, see the new
/// epoch, and write their caches back; a replica started afterwards finds
/// the sessions with their hop counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_empty_gets_the_bindings_back_from_the_replicas() {
    let mut redis = RedisServer::start();
    let p = fresh_prefix();
    let (a, b) = (
        replica(&redis, &p, "a").await,
        replica(&redis, &p, "b").await,
    );
    let from_a: Vec<SessionId> = (0..50).map(|_| SessionId::random()).collect();
    let from_b: Vec<SessionId> = (0..50).map(|_| SessionId::random()).collect();
    for sid in &from_a {
        a.put(*sid, live("api-1", 1));
    }
    for sid in &from_b {
        b.put(*sid, live("api-2", 3));
    }
    assert!(a.flush(Duration::from_secs(3)).await && b.flush(Duration::from_secs(3)).await);
    within(Duration::from_secs(5), "a and b agree", || {
        from_a.iter().chain(&from_b).all(|sid| {
            let x = a.get(sid, now());
            x.is_some() && x == b.get(sid, now())
        })
    })
    .await;

    redis.restart_empty();
    within(Duration::from_secs(10), "both reconnect and resync", || {
        [a.status(), b.status()]
            .iter()
            .all(|s| s.state == RedisState::Connected && s.reconnects >= 1 && s.resyncs >= 1)
    })
    .await;
    let c = replica(&redis, &p, "c").await;
    let has = |sid: &SessionId, node: &str, hops: u32| {
        c.get(sid, now())
            .is_some_and(|b| &*b.node == node && b.hops == hops)
    };
    let took = within(Duration::from_secs(10), "c has every binding", || {
        from_a.iter().all(|sid| has(sid, "api-1", 1))
            && from_b.iter().all(|sid| has(sid, "api-2", 3))
    })
    .await;
    eprintln!("c had every binding {took:?} after it started");
    let (sa, sb) = (a.status(), b.status());
    assert!(sa.reseeded >= 100 && sb.reseeded >= 100, "{sa:?} {sb:?}");
}
