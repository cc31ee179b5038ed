//! Fleet mode with `store.kind: redis`: two `hopgate run` replicas on one
//! real redis-server with the same session secret. A session minted on one
//! is routed to the same node by the other; a hop on one is visible on the
//! other within 1 s; Redis dying under load fails no request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::harness::{backends, client, json, session_gateway, Gateway};
use crate::redis_server::RedisServer;

const SECRET: &str = "fleet-secret-0123456789abcdefghijklmnop";

/// A replica sharing `redis` as its session store.
async fn replica(redis: &RedisServer, svc: &str) -> Gateway {
    let rest = format!(
        "sessions: {{ secret_env: HG_SECRET, ttl: 1h }}\nstore: {{ kind: redis, url: \"{}\" }}\n",
        redis.url()
    );
    session_gateway(svc, &rest, SECRET, &[]).await
}

/// The node a request with `token` was served by.
async fn node_via(gw: &Gateway, token: &str) -> String {
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    json(r).await["node"].as_str().unwrap().to_owned()
}

/// Polls `GET /admin/v1/sessions/{token}` on `gw` until its binding is on
/// `node` with `hops` hops; how long that took (at most `limit`).
async fn binding_shows(
    gw: &Gateway,
    token: &str,
    node: &str,
    hops: u64,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    loop {
        let r = client()
            .get(gw.admin_url(&format!("/admin/v1/sessions/{token}")))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            let v: serde_json::Value = r.json().await.unwrap();
            let b = &v["bindings"][0];
            if b["node"] == node && b["hops"] == hops {
                return start.elapsed();
            }
        }
        assert!(
            start.elapsed() < limit,
            "{token}: not bound to {node} with {hops} hops within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_and_its_hop_are_shared_by_every_replica() {
    let redis = RedisServer::start();
    let (_b, svc) = backends(3).await;
    let a = replica(&redis, &svc).await;
    let b = replica(&redis, &svc).await;
    // Minted on A. Not bound anywhere yet (bindings are made when the
    // client comes back), but its token names the node.
    let r = client().get(a.url("/")).send().await.unwrap();
    let token = r.headers()["hop-session"].to_str().unwrap().to_owned();
    let bound = json(r).await["node"].as_str().unwrap().to_owned();
    // The client comes back through B: B sends it to the same node from
    // the token alone, and binds it there.
    assert_eq!(
        node_via(&b, &token).await,
        bound,
        "B routes the new session to the node of its first answer"
    );
    // A learns of the binding within 1 s, and both keep the session there.
    let took = binding_shows(&a, &token, &bound, 0, Duration::from_secs(1)).await;
    eprintln!("binding on A after {took:?}");
    for _ in 0..5 {
        assert_eq!(
            node_via(&b, &token).await,
            bound,
            "B routes the session to its node"
        );
        assert_eq!(node_via(&a, &token).await, bound);
    }
    // A drain on A makes it hop there; B shows the hop within 1 s.
    let r = client()
        .post(a.admin_url(&format!("/admin/v1/nodes/s/{bound}/drain")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let hopped = node_via(&a, &token).await;
    assert_ne!(hopped, bound);
    let took = binding_shows(&b, &token, &hopped, 1, Duration::from_secs(1)).await;
    eprintln!("hop on B after {took:?}");
    assert_eq!(node_via(&b, &token).await, hopped, "B follows the hop");
    assert_eq!(node_via(&a, &token).await, hopped);
    // Each replica logged its connection to Redis.
    assert!(a.logs().contains("redis store connected"), "{}", a.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_redis_under_load_fails_no_request() {
    let mut redis = RedisServer::start();
    let (_b, svc) = backends(3).await;
    let gws = Arc::new([replica(&redis, &svc).await, replica(&redis, &svc).await]);
    let failures = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let stop_at = Instant::now() + Duration::from_secs(3);
    let mut clients = Vec::new();
    for c in 0..8usize {
        let (gws, failures, sent) = (Arc::clone(&gws), Arc::clone(&failures), Arc::clone(&sent));
        clients.push(tokio::spawn(async move {
            let http = client();
            let mut token: Option<String> = None;
            let mut i = c;
            while Instant::now() < stop_at {
                // Each client starts a new session every 20 requests, and
                // alternates replicas.
                if i % 20 == 0 {
                    token = None;
                }
                let gw = &gws[i % 2];
                let mut req = http.get(gw.url("/"));
                if let Some(t) = &token {
                    req = req.header("hop-session", t);
                }
                sent.fetch_add(1, Ordering::Relaxed);
                match req.send().await {
                    Ok(r) if r.status() == 200 => {
                        if let Some(t) = r.headers().get("hop-session") {
                            token = Some(t.to_str().unwrap().to_owned());
                        }
                        let _ = r.bytes().await;
                    }
                    Ok(r) => {
                        eprintln!("status {}", r.status());
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("error {e}");
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.kill();
    // While Redis is away: a session minted on A is still served, sticky.
    let r = client().get(gws[0].url("/")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let token = r.headers()["hop-session"].to_str().unwrap().to_owned();
    let bound = json(r).await["node"].as_str().unwrap().to_owned();
    assert_eq!(node_via(&gws[0], &token).await, bound);
    for c in clients {
        c.await.unwrap();
    }
    let (sent, failed) = (
        sent.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    );
    eprintln!("{sent} requests, {failed} failed");
    assert!(sent > 100, "too little load: {sent}");
    assert_eq!(failed, 0, "requests failed while Redis died");
    for gw in gws.iter() {
        assert!(gw.logs().contains("redis store degraded"), "{}", gw.logs());
    }
    // Redis back: the binding written on A while it was away reaches B.
    redis.restart();
    binding_shows(&gws[1], &token, &bound, 0, Duration::from_secs(8)).await;
    assert_eq!(node_via(&gws[1], &token).await, bound);
}

/// A session bound by another replica whose change notice this replica has
/// not seen (here: a binding written straight into Redis, with no notice at
/// all) is looked up in Redis on the replica's first request for it, and
/// followed, instead of being bound anew to whatever node the balancer
/// picks. `GET /admin/v1/fleet` shows the store connected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_unknown_here_is_looked_up_in_redis_before_binding() {
    use hopgate_core::session::{
        binding_key, mint, mint_hinted, node_hint, unix_now, SessionId, SessionKeys,
    };

    let redis = RedisServer::start();
    let (_b, svc) = backends(3).await;
    let gw = replica(&redis, &svc).await;
    let fleet = gw.admin_json("/admin/v1/fleet").await;
    assert_eq!(fleet["redis"]["state"], "connected", "{fleet}");
    assert!(gw.metrics().await.contains("hopgate_fleet_redis_up 1"));

    let keys = SessionKeys::from_secrets(SECRET.as_bytes(), &[]);
    for (i, node) in ["n0", "n1", "n2", "n1", "n0"].into_iter().enumerate() {
        let id = SessionId::random();
        let now = unix_now();
        // Half of them with a token naming n2 as their first node: what the
        // shared store holds (the session moved since) wins over the hint.
        let token = if i % 2 == 0 {
            mint_hinted(&keys, id, now, node_hint("s", "n2"))
        } else {
            mint(&keys, id, now)
        };
        let key = format!("hopgate:s:{}", binding_key(&id, "s"));
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &redis.port.to_string(), "HSET", &key])
            .args(["service", "s", "node", node, "bound_at", &now.to_string()])
            .args(["hops", "0", "expires_at", &(now + 3600).to_string()])
            .args(["writer", "another-replica"])
            .output()
            .expect("redis-cli (Debian package redis-tools)");
        assert!(out.status.success(), "{out:?}");
        // The first request already goes to the stored node.
        assert_eq!(
            node_via(&gw, &token).await,
            node,
            "a session bound on another replica was bound anew"
        );
        assert_eq!(node_via(&gw, &token).await, node);
    }
}
