//! Backpressure towards backends: `services[].pool.max_connections` caps the
//! upstream connections a node gets however many requests arrive at once,
//! the rest wait in a bounded FIFO queue (`max_pending`, `queue_timeout`),
//! and what the queue turns away is a 503 with a clear body that never
//! counts against the node's health.
//!
//! The backend here is an in-process HTTP/1.1 server that counts its open
//! TCP connections (accepted and not yet closed) and remembers the peak, so
//! the test sees exactly what a backend with a small accept backlog would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::harness::{client, config, h2_client, within, Gateway};

/// A backend that answers `ok` after `delay` and counts its connections.
struct CountingBackend {
    addr: SocketAddr,
    open: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
    /// Requests being answered now.
    busy: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl CountingBackend {
    async fn start(delay: Duration) -> CountingBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::new(AtomicUsize::new(0));
        let busy = Arc::new(AtomicUsize::new(0));
        let (o, p, a, b) = (open.clone(), peak.clone(), accepted.clone(), busy.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                a.fetch_add(1, Ordering::SeqCst);
                let now = o.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(now, Ordering::SeqCst);
                let (o, b) = (o.clone(), b.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |_req| {
                        let b = b.clone();
                        async move {
                            b.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(delay).await;
                            b.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from_static(b"ok"),
                            )))
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                    o.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        CountingBackend {
            addr,
            open,
            peak,
            accepted,
            busy,
            task,
        }
    }
}

impl Drop for CountingBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn yaml(addr: SocketAddr, pool: &str) -> String {
    config(
        &format!(
            "  - name: app\n    pool: {pool}\n    nodes:\n      - {{ id: n1, address: \"{addr}\" }}\n"
        ),
        "  - { id: all, match: { path_prefix: / }, service: app }\n",
    )
}

/// The node's entry in `GET /admin/v1/nodes`.
async fn node(gw: &Gateway) -> serde_json::Value {
    let v = gw.admin_json("/admin/v1/nodes").await;
    v["nodes"][0].clone()
}

/// The case: one HTTP/2 client with 64 concurrent streams used to
/// become 64 upstream connections at once. With `max_connections: 4` the
/// backend never sees more than 4, and every request is served (the rest
/// wait their turn in the queue).
#[tokio::test]
async fn sixty_four_streams_never_open_more_than_max_connections() {
    // 64 requests of 200 ms on 4 connections: 3.2 s of work, so requests
    // queue unless they arrive further apart than that.
    let backend = CountingBackend::start(Duration::from_millis(200)).await;
    let gw = Gateway::start(&yaml(backend.addr, "{ max_connections: 4 }")).await;
    let c = h2_client();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let c = c.clone();
        let url = gw.url(&format!("/r{i}"));
        tasks.push(tokio::spawn(async move {
            let r = c.get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }));
    }
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!((status, body.as_str()), (200, "ok"));
    }
    let peak = backend.peak.load(Ordering::SeqCst);
    assert!(
        peak <= 4,
        "the backend saw {peak} connections at once (max_connections: 4)"
    );
    assert!(backend.accepted.load(Ordering::SeqCst) >= 1);
    let n = node(&gw).await;
    assert!(
        n["pool"]["queue_waits"].as_u64().unwrap() > 0,
        "requests queued: {n}"
    );
    assert_eq!(n["pool"]["queued"], 0, "{n}");
    assert_eq!(n["failures"], 0, "{n}");
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_pool_queue_depth{service=\"app\",node=\"n1\"} 0"),
        "{m}"
    );
    assert!(
        !m.contains("hopgate_pool_queue_wait_seconds_count 0\n"),
        "{m}"
    );
}

/// 64 concurrent HTTP/1.1 clients against `max_connections: 4`: the same
/// bound, every request served; after a reload to `max_connections: 8`
/// the pool grows to the new limit and no further.
#[tokio::test]
async fn concurrent_http1_clients_share_max_connections_and_reload_applies() {
    let backend = CountingBackend::start(Duration::from_millis(200)).await;
    let gw = Gateway::start(&yaml(backend.addr, "{ max_connections: 4 }")).await;
    let burst = |gw_url: String| async move {
        let mut tasks = Vec::new();
        for _ in 0..64 {
            let url = gw_url.clone();
            // One client each: 64 client connections.
            tasks.push(tokio::spawn(async move {
                let r = client().get(url).send().await.unwrap();
                r.status().as_u16()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
    };
    burst(gw.url("/")).await;
    assert!(backend.peak.load(Ordering::SeqCst) <= 4);

    let before = gw.admin_json("/admin/v1/config/versions").await["current"].clone();
    gw.rewrite_config(&yaml(backend.addr, "{ max_connections: 8 }"));
    gw.sighup();
    // Wait (bounded) for the reload to be running.
    let applied = within(Duration::from_secs(10), || async {
        gw.admin_json("/admin/v1/config/versions").await["current"] != before
    })
    .await;
    assert!(applied, "reload not applied:\n{}", gw.logs());
    backend
        .peak
        .store(backend.open.load(Ordering::SeqCst), Ordering::SeqCst);
    burst(gw.url("/")).await;
    let peak = backend.peak.load(Ordering::SeqCst);
    assert!(
        (5..=8).contains(&peak),
        "peak {peak} after a reload to max_connections: 8"
    );
}

/// `max_connections: 1`, `max_pending: 2`, a short `queue_timeout`, and a
/// backend that holds its one connection: of five more requests two wait
/// and time out, the rest find the queue full. All five get 503 with a
/// body saying the backend is busy, and the node's health is untouched
/// (no failure counted, not ejected, breaker closed).
#[tokio::test]
async fn a_full_queue_answers_503_and_never_charges_the_node() {
    // Held far longer than the five requests' attempts can take (at most
    // 3 attempts × 300 ms each).
    let backend = CountingBackend::start(Duration::from_secs(5)).await;
    let gw = Gateway::start(&yaml(
        backend.addr,
        "{ max_connections: 1, max_pending: 2, queue_timeout: 300ms }",
    ))
    .await;
    let first = {
        let url = gw.url("/hold");
        tokio::spawn(async move {
            let r = client().get(url).send().await.unwrap();
            r.status().as_u16()
        })
    };
    // Wait (bounded) until the backend holds the first request.
    within(Duration::from_secs(10), || async {
        backend.busy.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(backend.busy.load(Ordering::SeqCst), 1);
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let url = gw.url("/more");
        tasks.push(tokio::spawn(async move {
            let r = client().get(url).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }));
    }
    let (mut full, mut timeout) = (0, 0);
    for t in tasks {
        let (status, body) = t.await.unwrap();
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("backend busy"), "{body}");
        if body.contains("queue is full") {
            full += 1;
        } else if body.contains("became free in time") {
            timeout += 1;
        } else {
            panic!("unexpected body {body:?}");
        }
    }
    assert!(full >= 1 && timeout >= 1, "full {full}, timeout {timeout}");
    assert_eq!(first.await.unwrap(), 200, "the held request completes");
    assert_eq!(backend.peak.load(Ordering::SeqCst), 1);
    assert_eq!(backend.accepted.load(Ordering::SeqCst), 1);

    let n = node(&gw).await;
    assert_eq!(n["failures"], 0, "{n}");
    assert_eq!(n["ejected"], false, "{n}");
    assert_eq!(n["available"], true, "{n}");
    assert_eq!(n["circuit"], "closed", "{n}");
    assert!(n["pool"]["queue_full"].as_u64().unwrap() >= 1, "{n}");
    assert!(n["pool"]["queue_timeouts"].as_u64().unwrap() >= 1, "{n}");
    let m = gw.metrics().await;
    assert!(
        m.contains("hopgate_errors_total{kind=\"pool_queue_full\"}"),
        "{m}"
    );
    assert!(
        m.contains(
            "hopgate_pool_queue_rejected_total{service=\"app\",node=\"n1\",reason=\"timeout\"}"
        ),
        "{m}"
    );
    // And the node serves normally once the load is gone.
    let r = client().get(gw.url("/after")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(backend.open.load(Ordering::SeqCst) <= 1);
}

/// A session bound to a busy node stays with it: with `max_pending: 0` the
/// node's one connection busy, a request of that session gets the 503
/// (it is not served by the other node, which would move the session);
/// once the node is free again the session is still served there. A
/// request without a session may go to the other node.
#[tokio::test]
async fn a_busy_node_keeps_its_sessions() {
    use crate::harness::{json, service, session_served_by, Backend};
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let services = service("s", &[("a", a.addr, ""), ("b", b.addr, "")]).replace(
        "    nodes:\n",
        "    pool: { max_connections: 1, max_pending: 0 }\n    nodes:\n",
    );
    let yaml = config(
        &services,
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ) + "sessions: { secret_env: HG_SECRET, ttl: 1h }\n";
    let gw =
        Gateway::start_with_env(&yaml, &[("HG_SECRET", "test-secret-0123456789-0123456789")]).await;
    let token = session_served_by(&gw, "a").await;
    let with_token = |path: &str| {
        client()
            .get(gw.url(path))
            .header("hop-session", token.clone())
            .send()
    };
    assert_eq!(json(with_token("/").await.unwrap()).await["node"], "a");

    // Hold a's one connection.
    let held = {
        let url = gw.url("/?sleep_ms=3000");
        let token = token.clone();
        tokio::spawn(async move {
            let r = client()
                .get(url)
                .header("hop-session", token)
                .send()
                .await
                .unwrap();
            json(r).await["node"].as_str().unwrap().to_owned()
        })
    };
    let mut busy = false;
    for _ in 0..400 {
        let stats = json(client().get(a.url("/control/stats")).send().await.unwrap()).await;
        if stats["in_flight"] == 1 {
            busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(busy, "the held request never reached a");

    let r = with_token("/").await.unwrap();
    assert_eq!(r.status(), 503);
    let body = r.text().await.unwrap();
    assert!(body.contains("queue is full"), "{body}");
    // Without a session, b takes it.
    for _ in 0..4 {
        let r = client().get(gw.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(json(r).await["node"], "b");
    }

    assert_eq!(held.await.unwrap(), "a");
    assert_eq!(json(with_token("/").await.unwrap()).await["node"], "a");
    let nodes = gw.admin_json("/admin/v1/nodes").await;
    for n in nodes["nodes"].as_array().unwrap() {
        assert_eq!(n["failures"], 0, "{n}");
        assert_eq!(n["circuit"], "closed", "{n}");
    }
    assert!(
        !gw.metrics().await.contains("hopgate_hops_total{"),
        "a session hopped"
    );
}
