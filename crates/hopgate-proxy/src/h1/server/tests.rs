//! The server's connection loop: heads to requests, idle connections
//! giving their buffers back, pipelining and timeouts.

use super::*;
use crate::h1::testing::TestBody;
use http::header::CONTENT_LENGTH;
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, DuplexStream, ReadHalf};

/// Answers every request with its path and the length of its body.
struct Echo;

impl Handler for Echo {
    type Body = TestBody;

    fn call(
        &self,
        req: Box<Request<TestBody>>,
        body: Option<Box<ServerBody>>,
    ) -> impl Future<Output = Box<Response<TestBody>>> + Send + 'static {
        let path = req.uri().path().to_owned();
        async move {
            let mut got = 0;
            if let Some(body) = body {
                got = body.collect().await.map_or(0, |b| b.to_bytes().len());
            }
            let text = format!("{path} {got}");
            let mut resp = Response::new(TestBody::full(text.clone()));
            resp.headers_mut()
                .insert(CONTENT_LENGTH, HeaderValue::from(text.len()));
            Box::new(resp)
        }
    }

    fn refusal(&self, kind: ErrorKind) -> Box<Response<TestBody>> {
        let mut resp = Response::new(TestBody::Empty);
        *resp.status_mut() = http::StatusCode::from_u16(kind.status()).unwrap();
        resp.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        Box::new(resp)
    }

    fn closing(&self) -> bool {
        false
    }

    fn peer(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 1))
    }
}

fn settings() -> Arc<Settings> {
    Arc::new(Settings {
        max_header_bytes: 16 << 10,
        max_headers: 100,
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(60),
    })
}

/// Reads one answer (head and its Content-Length body): its status
/// line's code and its body.
async fn answer(rd: &mut ReadHalf<DuplexStream>, pending: &mut Vec<u8>) -> (u16, String) {
    loop {
        if let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&pending[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            if pending.len() >= end + 4 + len {
                let code = head[9..12].parse().unwrap();
                let body = String::from_utf8_lossy(&pending[end + 4..end + 4 + len]).into();
                pending.drain(..end + 4 + len);
                return (code, body);
            }
        }
        let mut chunk = [0u8; 4096];
        let n = rd.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the server closed before its answer");
        pending.extend_from_slice(&chunk[..n]);
    }
}

/// Waits (bounded) until the thread keeps `n` spare read buffers.
async fn spares_become(n: usize) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while spare::buffers_kept() != n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the thread never kept {n} spare buffers"));
}

/// A connection that went idle (its buffer back with the thread) reads
/// a head that comes in parts, with a request with a body and a second
/// request pipelined behind it, and answers them in order; the partial
/// head keeps the buffer it was read into.
#[tokio::test]
async fn an_idle_connection_reads_partial_and_pipelined_heads() {
    let (client, server) = tokio::io::duplex(64 << 10);
    let task = tokio::spawn(serve(
        Box::new(server),
        BytesMut::new(),
        Echo,
        settings(),
        Arc::default(),
    ));
    let (mut rd, mut wr) = tokio::io::split(client);
    let mut pending = Vec::new();
    wr.write_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut rd, &mut pending).await, (200, "/one 0".into()));
    // Idle: the connection's buffer is the thread's spare.
    spares_become(1).await;
    wr.write_all(b"POST /tw").await.unwrap();
    // The partial head holds the buffer.
    spares_become(0).await;
    wr.write_all(b"o HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\n\r\nhello")
        .await
        .unwrap();
    wr.write_all(b"GET /three HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut rd, &mut pending).await, (200, "/two 5".into()));
    assert_eq!(
        answer(&mut rd, &mut pending).await,
        (200, "/three 0".into())
    );
    spares_become(1).await;
    // Idle again, then a whole head in one piece.
    wr.write_all(b"GET /four HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut rd, &mut pending).await, (200, "/four 0".into()));
    wr.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the connection ends when the client closes")
        .unwrap();
}

/// A head begun on an idle connection and not finished within
/// `header_read` is answered 408 (the buffer borrowed for it included).
#[tokio::test(start_paused = true)]
async fn a_partial_head_after_idle_times_out_with_408() {
    let (client, server) = tokio::io::duplex(64 << 10);
    let task = tokio::spawn(serve(
        Box::new(server),
        BytesMut::new(),
        Echo,
        settings(),
        Arc::default(),
    ));
    let (mut rd, mut wr) = tokio::io::split(client);
    let mut pending = Vec::new();
    wr.write_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut rd, &mut pending).await, (200, "/one 0".into()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    wr.write_all(b"GET /slow HTTP/1.1\r\nho").await.unwrap();
    assert_eq!(answer(&mut rd, &mut pending).await.0, 408);
    task.await.unwrap();
}

/// A drain closes a connection waiting between requests at once (its
/// wait registered with the drain's wake-up), and one that connects after
/// the drain began once its request is answered, with `Connection: close`.
#[tokio::test]
async fn a_drain_closes_idle_connections_at_once() {
    let drain = Arc::new(Drain::default());
    let (client, server) = tokio::io::duplex(64 << 10);
    let task = tokio::spawn(serve(
        Box::new(server),
        BytesMut::new(),
        Echo,
        settings(),
        Arc::clone(&drain),
    ));
    let (mut rd, mut wr) = tokio::io::split(client);
    let mut pending = Vec::new();
    wr.write_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(answer(&mut rd, &mut pending).await, (200, "/one 0".into()));
    // Waiting for its next request (its buffer given back) when the
    // drain begins.
    spares_become(1).await;
    drain.begin();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("an idle connection closes when the drain begins")
        .unwrap();
    let mut rest = Vec::new();
    rd.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());

    let (client, server) = tokio::io::duplex(64 << 10);
    let task = tokio::spawn(serve(
        Box::new(server),
        BytesMut::new(),
        Echo,
        settings(),
        drain,
    ));
    let (mut rd, mut wr) = tokio::io::split(client);
    wr.write_all(b"GET /late HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    let mut all = Vec::new();
    rd.read_to_end(&mut all).await.unwrap();
    let all = String::from_utf8_lossy(&all).to_ascii_lowercase();
    assert!(all.starts_with("http/1.1 200"), "{all}");
    assert!(all.contains("connection: close"), "{all}");
    assert!(all.ends_with("/late 0"), "{all}");
    task.await.unwrap();
}

/// The names matched by hand are the names `HeaderName` parses, in any
/// case, and their near misses are parsed as `HeaderName` parses them.
#[test]
fn known_names_are_the_names_header_name_parses() {
    for lower in [
        "host",
        "accept",
        "cookie",
        "user-agent",
        "connection",
        "content-type",
        "authorization",
        "content-length",
        "accept-encoding",
        "accept-language",
        "x-custom",
    ] {
        let upper = lower.to_ascii_uppercase();
        let mut mixed = lower.as_bytes().to_vec();
        mixed[0] = mixed[0].to_ascii_uppercase();
        let mut near = lower.as_bytes().to_vec();
        near[lower.len() - 1] = b'x';
        for raw in [lower.as_bytes(), upper.as_bytes(), &mixed, &near] {
            assert_eq!(
                header_name(raw).unwrap(),
                HeaderName::from_bytes(raw).unwrap(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }
}

#[test]
fn origin_form_targets_make_the_uri_the_general_parse_makes() {
    for t in [
        &b"/"[..],
        b"/p?q=1",
        b"/a%20b/c",
        b"/?",
        b"//x/y",
        b"/p?a=1&b=%2F",
        b"/bad\x7f",
        b"/sp ace",
        b"*",
        b"http://h:8/p?q",
        b"h:80",
    ] {
        let ours = target_uri(Bytes::copy_from_slice(t));
        let theirs = Uri::from_maybe_shared(Bytes::copy_from_slice(t));
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{:?}",
            String::from_utf8_lossy(t)
        );
        if let (Ok(a), Ok(b)) = (ours, theirs) {
            assert_eq!(a, b);
            assert_eq!(a.path(), b.path());
            assert_eq!(a.query(), b.query());
            assert_eq!(a.authority(), b.authority());
            assert_eq!(a.scheme(), b.scheme());
        }
    }
}

#[test]
fn heads_become_requests_sharing_their_bytes() {
    let raw = b"POST /p?q=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\nContent-Length: 3\r\nx-v: caf\xe9\r\n\r\n";
    let head = head::parse_request(raw).unwrap().unwrap();
    let req = request_from_head(&head, raw).unwrap();
    assert_eq!(req.method(), Method::POST);
    assert_eq!(req.uri(), "/p?q=1");
    assert_eq!(req.version(), Version::HTTP_11);
    assert_eq!(req.headers().get_all(CONTENT_LENGTH).iter().count(), 1);
    assert_eq!(req.headers()["x-v"].as_bytes(), b"caf\xe9");
    let bad = b"G(T / HTTP/1.1\r\nhost: a\r\n\r\n";
    if let Ok(Some(h)) = head::parse_request(bad) {
        assert!(request_from_head(&h, bad).is_err());
    }
}
