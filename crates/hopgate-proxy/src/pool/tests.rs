use super::*;

#[test]
fn refused_streams_are_told_by_reason_code() {
    assert!(refused(&h2::Reason::REFUSED_STREAM.into()));
    for other in [
        h2::Reason::NO_ERROR,
        h2::Reason::CANCEL,
        h2::Reason::INTERNAL_ERROR,
    ] {
        // Not a GOAWAY from the peer: a NO_ERROR alone proves nothing.
        assert!(!refused(&other.into()), "{other:?}");
    }
}

/// The request path's futures are moved on every request; keep an eye
/// on their size (dialling and HTTP/2 are boxed so their futures stay
/// out: 624 bytes on 2026-11-30 with the HTTP/1.1 exchange boxed too;
/// 688 on 2026-12-01 with the exchange inline, a named 608-byte future;
/// ~1 KB with hyper's client before).
#[test]
fn send_future_stays_small() {
    let pool = Arc::new(Pool::new(4));
    let settings = PoolSettings {
        protocol: UpstreamProtocol::Http1,
        max_idle: 4,
        idle_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(1),
        limits: PoolLimits::default(),
        proxy_protocol: None,
    };
    let req = Request::new(ProxyBody::Empty);
    let set = SetLines::default();
    let fut = pool.send(
        "127.0.0.1:9".parse().unwrap(),
        Box::new(req),
        &set,
        &settings,
        Instant::now(),
        crate::h1::HeadFor::Map,
    );
    let size = std::mem::size_of_val(&fut);
    assert!(size <= 688, "Pool::send future is {size} bytes");
}

/// A drain closes a connection still busy at its deadline (the backend
/// here reads the request and never answers), and forgets its driver.
#[tokio::test]
async fn drain_aborts_busy_connections_at_the_deadline() {
    use tokio::io::AsyncReadExt;
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = backend.local_addr().unwrap();
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = backend.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        // Read until the gateway closes the connection.
        while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
        let _ = closed_tx.send(());
    });
    let pool = Arc::new(Pool::new(4));
    let settings = PoolSettings {
        protocol: UpstreamProtocol::Http1,
        max_idle: 4,
        idle_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(60),
        limits: PoolLimits::default(),
        proxy_protocol: None,
    };
    let sending = {
        let pool = Arc::clone(&pool);
        tokio::spawn(async move {
            let req = Request::builder()
                .uri("/slow")
                .header("host", "x")
                .body(ProxyBody::Empty)
                .unwrap();
            pool.send(
                addr,
                Box::new(req),
                &SetLines::default(),
                &settings,
                Instant::now(),
                crate::h1::HeadFor::Map,
            )
            .await
        })
    };
    // Wait until the connection is open and busy.
    while pool.stats().open == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(pool.live.pin().len(), 1);
    pool.drain(Duration::from_millis(50));
    let result = tokio::time::timeout(Duration::from_secs(10), sending)
        .await
        .expect("the busy request ends once the drain deadline passes")
        .unwrap();
    // The head comes back for a replay.
    assert!(
        matches!(result, Err(SendFailure::SentWithHead(..))),
        "{result:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), closed_rx)
        .await
        .expect("the backend sees the connection closed")
        .unwrap();
    assert_eq!(pool.stats().open, 0);
    assert_eq!(pool.live.pin().len(), 0);
}

/// A backend that answers each request head it reads with the next
/// script line of its connection, then closes the connection when the
/// script of that connection is used up (an empty line: holds it open
/// until the gateway closes it). Returns its address and the
/// request heads it read (per connection).
async fn scripted(
    scripts: Vec<Vec<&'static [u8]>>,
) -> (SocketAddr, Arc<parking_lot::Mutex<Vec<Vec<u8>>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = backend.local_addr().unwrap();
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        for script in scripts {
            let (mut s, _) = backend.accept().await.unwrap();
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut got = Vec::new();
                for answer in script {
                    let mut buf = [0u8; 4096];
                    if answer.is_empty() {
                        // Hold the connection until the gateway closes it.
                        while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                        return;
                    }
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    log.lock().push(std::mem::take(&mut got));
                    s.write_all(answer).await.unwrap();
                }
            });
        }
    });
    (addr, seen)
}

fn settings() -> PoolSettings {
    PoolSettings {
        protocol: UpstreamProtocol::Http1,
        max_idle: 4,
        idle_timeout: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        limits: PoolLimits::default(),
        proxy_protocol: None,
    }
}

fn get(path: &str) -> Request<ProxyBody> {
    Request::builder()
        .uri(path)
        .header("host", "x")
        .body(ProxyBody::Empty)
        .unwrap()
}

/// `req` through `pool` to `addr`: no lines set beside its headers, the
/// clock read now, answers as header maps.
async fn send(
    pool: &Arc<Pool>,
    addr: SocketAddr,
    req: Request<ProxyBody>,
    s: &PoolSettings,
) -> Result<Box<Response<ProxyBody>>, SendFailure> {
    pool.send(
        addr,
        Box::new(req),
        &SetLines::default(),
        s,
        Instant::now(),
        crate::h1::HeadFor::Map,
    )
    .await
}

async fn read_all(resp: Box<Response<ProxyBody>>) -> (Vec<u8>, Option<http::HeaderMap>) {
    use http_body_util::BodyExt;
    let collected = resp.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    (collected.to_bytes().to_vec(), trailers)
}

/// A connection whose response was read to the end carries the next
/// request; chunked bodies come whole, with their trailers.
#[tokio::test]
async fn a_clean_response_gives_the_connection_back() {
    let (addr, seen) = scripted(vec![vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n1\r\nd\r\n0\r\nX-Sum: 4\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    ]])
    .await;
    let pool = Arc::new(Pool::new(4));
    let s = settings();
    let resp = send(&pool, addr, get("/a"), &s).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(read_all(resp).await.0, b"ok");
    assert_eq!(pool.stats().idle, 1);
    let resp = send(&pool, addr, get("/b"), &s).await.unwrap();
    let (body, trailers) = read_all(resp).await;
    assert_eq!(body, b"abcd");
    assert_eq!(trailers.unwrap()["x-sum"], "4");
    let resp = send(&pool, addr, get("/c"), &s).await.unwrap();
    assert_eq!(resp.status(), 204, "the interim answer is skipped");
    assert_eq!(pool.stats().dialed, 1, "one connection for all three");
    assert_eq!(pool.stats().idle, 1);
    let heads = seen.lock().clone();
    assert_eq!(heads[0], b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n");
}

/// An idle connection the backend closed is never written to: the
/// request goes out on a new one.
#[tokio::test]
async fn a_connection_the_backend_closed_is_not_reused() {
    let (addr, _) = scripted(vec![
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"],
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2"],
    ])
    .await;
    let pool = Arc::new(Pool::new(4));
    let s = settings();
    let resp = send(&pool, addr, get("/1"), &s).await.unwrap();
    assert_eq!(read_all(resp).await.0, b"");
    assert_eq!(pool.stats().idle, 1);
    // Wait until the backend's close has reached us.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let resp = send(&pool, addr, get("/2"), &s).await.unwrap();
    assert_eq!(read_all(resp).await.0, b"2");
    assert_eq!(pool.stats().dialed, 2);
}

/// `Connection: close`, an HTTP/1.0 answer and a close-delimited body
/// each end their connection.
#[tokio::test]
async fn answers_that_close_are_not_parked() {
    let (addr, _) = scripted(vec![
        vec![b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\na"],
        vec![b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nb"],
        vec![b"HTTP/1.1 200 OK\r\n\r\nuntil close"],
    ])
    .await;
    let pool = Arc::new(Pool::new(4));
    let s = settings();
    for want in [&b"a"[..], b"b", b"until close"] {
        let resp = send(&pool, addr, get("/"), &s).await.unwrap();
        assert_eq!(read_all(resp).await.0, want);
        assert_eq!(pool.stats().idle, 0);
    }
    assert_eq!(pool.stats().open, 0);
}

/// Ambiguous framing from a backend is an invalid response, and the
/// connection is closed.
#[tokio::test]
async fn ambiguous_responses_are_refused() {
    let (addr, _) = scripted(vec![
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"],
        vec![b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"],
        vec![b"HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n"],
    ])
    .await;
    let pool = Arc::new(Pool::new(4));
    let s = settings();
    for _ in 0..3 {
        match send(&pool, addr, get("/"), &s).await {
            Err(SendFailure::SentWithHead(e, head)) => {
                assert_eq!(e.kind, ErrorKind::UpstreamProtocol, "{e:?}");
                assert_eq!(head.uri, "/");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(pool.stats().open, 0);
}

/// A refused connect hands the request back for another node.
#[tokio::test]
async fn a_refused_connect_is_not_sent() {
    let unused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = unused.local_addr().unwrap();
    drop(unused);
    let pool = Arc::new(Pool::new(4));
    let result = send(&pool, addr, get("/"), &settings()).await;
    assert!(
        matches!(result, Err(SendFailure::NotSent { .. })),
        "{result:?}"
    );
}

/// A 101 hands the socket to the tunnel with the bytes read past the
/// head; the connection leaves the pool.
#[tokio::test]
async fn an_upgrade_hands_over_the_socket() {
    let (addr, _) = scripted(vec![vec![
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\nearly",
    ]])
    .await;
    let pool = Arc::new(Pool::new(4));
    let mut resp = send(&pool, addr, get("/"), &settings()).await.unwrap();
    assert_eq!(resp.status(), 101);
    match crate::tunnel::upstream_upgrade(&mut resp) {
        crate::tunnel::UpstreamUpgrade::Raw(Some((_, read_ahead))) => {
            // The backend may not have sent it in the same segment.
            assert!(b"early".starts_with(&read_ahead));
        }
        _ => panic!("no raw upgrade"),
    }
    assert_eq!(pool.stats().open, 0);
}

/// A drain's deadline also ends a response body still streaming on an
/// old connection: the body fails and the socket is closed.
#[tokio::test]
async fn drain_ends_a_streaming_body_at_the_deadline() {
    use http_body_util::BodyExt;
    let (addr, _) = scripted(vec![vec![
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nten bytes!",
        b"",
    ]])
    .await;
    let pool = Arc::new(Pool::new(4));
    let resp = send(&pool, addr, get("/"), &settings()).await.unwrap();
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "ten bytes!");
    assert_eq!(pool.stats().open, 1);
    pool.drain(Duration::from_millis(50));
    let next = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("the body ends once the drain deadline passes");
    assert!(matches!(next, Some(Err(_))), "{next:?}");
    assert_eq!(pool.stats().open, 0);
    assert_eq!(pool.live.pin().len(), 0);
}

/// After a burst opened three connections, one request at a time keeps
/// reusing the same connection (the most recently parked), and the idle
/// sweep closes the two the burst left over once they pass
/// `idle_timeout`, while the one in use stays.
#[tokio::test]
async fn the_latest_connection_is_reused_and_leftovers_are_swept() {
    const A: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na";
    const B: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb";
    const C: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nc";
    let (addr, _) = scripted(vec![vec![A; 40], vec![B; 40], vec![C; 40]]).await;
    let pool = Arc::new(Pool::new(8));
    let s = PoolSettings {
        idle_timeout: Duration::from_millis(600),
        ..settings()
    };
    let (r1, r2, r3) = tokio::join!(
        send(&pool, addr, get("/1"), &s),
        send(&pool, addr, get("/2"), &s),
        send(&pool, addr, get("/3"), &s)
    );
    let mut burst = Vec::new();
    for r in [r1, r2, r3] {
        burst.push(read_all(r.unwrap()).await.0);
    }
    burst.sort();
    assert_eq!(burst, [b"a", b"b", b"c"], "three connections");
    assert_eq!((pool.stats().open, pool.stats().idle), (3, 3));

    let mut served = Vec::new();
    let started = Instant::now();
    // Past the first sweep (one second after the pool was made) and the
    // leftovers' idle timeout, one request every 50 ms (far inside the
    // timeout, so a slow machine does not expire the one in use).
    while started.elapsed() < Duration::from_millis(1_500) {
        let resp = send(&pool, addr, get("/seq"), &s).await.unwrap();
        served.extend(read_all(resp).await.0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        served.iter().all(|&c| c == served[0]),
        "one connection serves them all: {:?}",
        String::from_utf8_lossy(&served)
    );
    assert_eq!(pool.stats().dialed, 3, "nothing dialled after the burst");
    assert_eq!(
        (pool.stats().open, pool.stats().idle),
        (1, 1),
        "the two leftovers were swept"
    );
}
