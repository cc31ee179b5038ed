//! `rate_limits[].scope: fleet`, end to end: two `hopgate run` replicas on
//! one real redis-server share one 100 req/s policy while a client loop
//! offers about 500 req/s split evenly across them. The admitted rate is
//! measured from the answers (200s counted over a window that starts after
//! the first syncs, so the start-up burst is left out), first with Redis,
//! then with Redis killed (each replica alone: 100 ÷ 2 live replicas), then
//! with Redis back. Every answer is a 200 or a 429: nothing fails for any
//! other reason. These are measured correctness bounds (±10 % of the
//! limit over windows of several seconds), not timings: the load only has
//! to stay well above the limit, which 500 req/s offered does on a slow
//! machine too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::harness::{backends, within, Gateway};
use crate::redis_server::RedisServer;

/// The shared limit (requests per second across the fleet).
const LIMIT: f64 = 100.0;

/// The tests of this module run one at a time: each offers hundreds of
/// requests a second, and two at once would starve each other's clients
/// on a small machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A replica on `redis` with the policy `fleet` (100/s, burst 40, keyed by
/// the client address: every request of the test is one key). The burst
/// (20 per replica) absorbs the client's pauses on a busy machine; the
/// windows measured start with the buckets empty (the load is well over
/// the rate), so it does not add to what they count.
async fn replica(redis: &RedisServer, svc: &str) -> Gateway {
    let routes = "  - { id: app, match: { path_prefix: / }, service: s, rate_limit: fleet }";
    let yaml = crate::harness::config(svc, routes)
        + &format!(
            "rate_limits:\n  - {{ name: fleet, key: [client_ip], rate: 100/s, burst: 40, scope: fleet }}\n\
             store: {{ kind: redis, url: \"{}\" }}\n",
            redis.url()
        );
    Gateway::start(&yaml).await
}

/// One answer: when it came, from which replica, its status (0: no answer).
type Answer = (Instant, usize, u16);

/// Offers `per_second` requests a second, `to_first` of every 20 to the
/// first replica and the rest to the second, until `stop` turns true;
/// every answer recorded.
async fn offer(
    urls: [String; 2],
    per_second: u64,
    to_first: usize,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Answer> {
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(128)
        .build()
        .unwrap();
    let slots = Arc::new(Semaphore::new(128));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / per_second));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut i = 0usize;
    while !*stop.borrow() {
        ticks.tick().await;
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        let which = usize::from(i % 20 >= to_first);
        let (http, url, tx) = (http.clone(), urls[which].clone(), tx.clone());
        tokio::spawn(async move {
            let status = match http.get(&url).send().await {
                Ok(r) => {
                    let s = r.status().as_u16();
                    let _ = r.bytes().await;
                    s
                }
                Err(e) => {
                    eprintln!("replica {which}: {e}");
                    0
                }
            };
            let _ = tx.send((Instant::now(), which, status));
            drop(permit);
        });
        i += 1;
    }
    drop(tx);
    let mut out = Vec::new();
    while let Some(a) = rx.recv().await {
        out.push(a);
    }
    out
}

/// Requests admitted per second over `[from, to)`: by replica and in all.
fn admitted(answers: &[Answer], from: Instant, to: Instant) -> ([f64; 2], f64) {
    let secs = (to - from).as_secs_f64();
    let mut n = [0u64; 2];
    for (at, which, status) in answers {
        if *status == 200 && *at >= from && *at < to {
            n[*which] += 1;
        }
    }
    let per = [n[0] as f64 / secs, n[1] as f64 / secs];
    (per, per[0] + per[1])
}

/// The state of the policy `fleet` in `GET /admin/v1/fleet`.
async fn share_state(gw: &Gateway) -> String {
    let v: serde_json::Value = crate::harness::client()
        .get(gw.admin_url("/admin/v1/fleet"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    v["rate_limits"][0]["state"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

async fn all_in_state(gws: &[Gateway; 2], state: &str) -> bool {
    within(Duration::from_secs(10), || async {
        share_state(&gws[0]).await == state && share_state(&gws[1]).await == state
    })
    .await
}

/// The counter `hopgate_rate_limit_fleet_fallbacks_total{policy="fleet"}`.
async fn fallbacks(gw: &Gateway) -> u64 {
    let text = gw.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix("hopgate_rate_limit_fleet_fallbacks_total{policy=\"fleet\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fallbacks counter in\n{text}"))
}

/// Within ±`tolerance` of `want`.
fn near(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= want * tolerance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_limit_and_split_it_while_redis_is_away() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut redis = RedisServer::start();
    let (_b, svc) = backends(1).await;
    let gws = [replica(&redis, &svc).await, replica(&redis, &svc).await];
    assert!(
        all_in_state(&gws, "shared").await,
        "the replicas never synced with Redis"
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(offer([gws[0].url("/"), gws[1].url("/")], 500, 10, stopped));
    // Shared: measured from 1.5 s (the first requests' demand has reached
    // Redis and come back as shares) for 4 s.
    let shared = Instant::now() + Duration::from_millis(1_500);
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let shared_end = Instant::now();
    // Redis killed under load: measured for 4 s once both replicas show
    // the fallback.
    redis.kill();
    assert!(
        all_in_state(&gws, "fallback").await,
        "the replicas never fell back"
    );
    let away = Instant::now() + Duration::from_millis(500);
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let away_end = Instant::now();
    // Redis back: measured for 4 s from 1 s after both share again.
    redis.restart();
    assert!(
        all_in_state(&gws, "shared").await,
        "the replicas never shared again"
    );
    let back = Instant::now() + Duration::from_millis(1_000);
    tokio::time::sleep(Duration::from_millis(5_000)).await;
    let back_end = Instant::now();
    let _ = stop.send(true);
    let answers = load.await.unwrap();

    let odd: Vec<_> = answers
        .iter()
        .filter(|(_, _, s)| *s != 200 && *s != 429)
        .collect();
    assert!(odd.is_empty(), "answers other than 200 and 429: {odd:?}");
    let offered = answers.len() as f64 / (back_end - shared).as_secs_f64();
    let (by, total) = admitted(&answers, shared, shared_end);
    eprintln!("offered ~{offered:.0}/s; shared: {total:.1}/s admitted ({by:.1?} by replica)");
    assert!(
        offered > 2.5 * LIMIT,
        "the load stayed too close to the limit to measure it: {offered:.0}/s"
    );
    assert!(
        near(total, LIMIT, 0.10),
        "shared: {total:.1}/s admitted, not within 10 % of {LIMIT}"
    );
    let (by, total) = admitted(&answers, away, away_end);
    eprintln!("Redis away: {total:.1}/s admitted ({by:.1?} by replica)");
    for (i, r) in by.iter().enumerate() {
        assert!(
            near(*r, LIMIT / 2.0, 0.10),
            "Redis away: replica {i} admitted {r:.1}/s, not about {}",
            LIMIT / 2.0
        );
    }
    assert!(near(total, LIMIT, 0.10), "Redis away: {total:.1}/s in all");
    let (by, total) = admitted(&answers, back, back_end);
    eprintln!("Redis back: {total:.1}/s admitted ({by:.1?} by replica)");
    assert!(
        near(total, LIMIT, 0.10),
        "Redis back: {total:.1}/s admitted, not within 10 % of {LIMIT}"
    );
    for gw in &gws {
        assert!(fallbacks(gw).await >= 1, "the fallback is counted");
        assert!(
            gw.logs()
                .contains("rate limit fleet share: Redis unreachable"),
            "{}",
            gw.logs()
        );
    }
}

/// One key whose traffic goes 95 % to one replica and 5 % to the other
/// still gets the whole limit across the fleet (each replica's share
/// follows its demand), where an even split would admit about 75/s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_sent_mostly_to_one_replica_still_gets_the_whole_limit() {
    let _one = ONE_AT_A_TIME.lock().await;
    let redis = RedisServer::start();
    let (_b, svc) = backends(1).await;
    let gws = [replica(&redis, &svc).await, replica(&redis, &svc).await];
    assert!(
        all_in_state(&gws, "shared").await,
        "the replicas never synced with Redis"
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(offer([gws[0].url("/"), gws[1].url("/")], 500, 19, stopped));
    let from = Instant::now() + Duration::from_millis(1_500);
    tokio::time::sleep(Duration::from_millis(5_500)).await;
    let to = Instant::now();
    let _ = stop.send(true);
    let answers = load.await.unwrap();
    assert!(answers.iter().all(|(_, _, s)| *s == 200 || *s == 429));
    let (by, total) = admitted(&answers, from, to);
    let offered = answers.len() as f64 / (to - from).as_secs_f64();
    eprintln!("95/5 split: offered ~{offered:.0}/s, {total:.1}/s admitted ({by:.1?} by replica)");
    assert!(
        near(total, LIMIT, 0.10),
        "95/5 split: {total:.1}/s admitted, not within 10 % of {LIMIT}"
    );
    let limits: serde_json::Value = crate::harness::client()
        .get(gws[0].admin_url("/admin/v1/limits"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let p = &limits["policies"][0];
    assert_eq!(p["scope"], "fleet");
    assert_eq!(p["fleet"]["state"], "shared");
    assert_eq!(p["fleet"]["live_replicas"], 2);
}
