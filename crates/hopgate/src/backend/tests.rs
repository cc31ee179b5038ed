//! The demo backend against real sockets on 127.0.0.1:0, driven by hyper's
//! own HTTP/1.1 and HTTP/2 clients, raw TCP and tokio-tungstenite. Sleeps
//! only create slowness; no test asserts a duration.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt as _, StreamExt as _};
use http::header::HeaderMap;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;

use super::body::Fnv;
use super::knobs::{self, Knobs};

type ReqBody = BoxBody<Bytes, Infallible>;

/// A backend served in-process; stopping it is explicit so tests can
/// observe the graceful shutdown.
struct Backend {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Backend {
    async fn start(id: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(super::serve(listener, id.to_owned(), async move {
            let _ = stopped.await;
        }));
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    async fn finished(mut self) -> anyhow::Result<()> {
        self.shutdown();
        (&mut self.task).await.unwrap()
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn empty() -> ReqBody {
    Empty::new().boxed()
}

fn full(bytes: impl Into<Bytes>) -> ReqBody {
    Full::new(bytes.into()).boxed()
}

/// A body sent as `chunks` frames of `chunk` bytes, generated on the fly.
fn streamed(chunks: usize, chunk: usize) -> (ReqBody, u64, u64) {
    let piece = move |i: usize| -> Bytes { (0..chunk).map(|j| (i * 7 + j * 13) as u8).collect() };
    let mut hash = Fnv::new();
    for i in 0..chunks {
        hash.write(&piece(i));
    }
    let stream = futures_util::stream::iter(0..chunks)
        .map(move |i| Ok::<_, Infallible>(Frame::data(piece(i))));
    let body = BodyExt::boxed(StreamBody::new(stream));
    (body, (chunks * chunk) as u64, hash.finish())
}

fn request(method: Method, addr: SocketAddr, path: &str, body: ReqBody) -> Request<ReqBody> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .body(body)
        .unwrap()
}

/// One request on a fresh HTTP/1.1 connection.
async fn send(addr: SocketAddr, req: Request<ReqBody>) -> hyper::Result<Response<Incoming>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender.send_request(req).await
}

/// A fresh HTTP/2 prior-knowledge connection.
async fn h2(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<ReqBody> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    trailers: Option<HeaderMap>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

async fn read(response: Response<Incoming>) -> Answer {
    let (parts, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: collected.to_bytes(),
        trailers,
    }
}

async fn call(addr: SocketAddr, method: Method, path: &str) -> Answer {
    read(
        send(addr, request(method, addr, path, empty()))
            .await
            .unwrap(),
    )
    .await
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    call(addr, Method::GET, path).await
}

fn fnv(bytes: &[u8]) -> u64 {
    let mut hash = Fnv::new();
    hash.write(bytes);
    hash.finish()
}

fn pattern(len: usize) -> Vec<u8> {
    let alphabet = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
    (0..len).map(|i| alphabet[i % 64]).collect()
}

/// Waits (bounded) until `/control/stats` reports `in_flight`.
async fn wait_in_flight(addr: SocketAddr, want: u64) {
    for _ in 0..500 {
        if get(addr, "/control/stats").await.json()["in_flight"] == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("in_flight never reached {want}");
}

#[tokio::test]
async fn json_names_node_request_and_hop_headers() {
    let backend = Backend::start("node-a").await;
    let addr = backend.addr;
    let req = Request::builder()
        .method(Method::POST)
        .uri("/api/items?x=1&y=two")
        .header("host", "api.example.com")
        .header("x-request-id", "req-1")
        .header("hop-session", "tok-1")
        .header("x-hop-from", "node-z")
        .header("hop-session-context", "ctx-1")
        .header("x-route-rule-id", "default")
        .header("x-upstream-addr", "127.0.0.1:1")
        .header("x-forwarded-for", "10.0.0.1")
        .header("x-forwarded-proto", "http")
        .header("x-multi", "a")
        .header("x-multi", "b")
        .body(full("hello"))
        .unwrap();
    let answer = read(send(addr, req).await.unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(
        answer.header("content-length"),
        Some(answer.body.len().to_string().as_str())
    );
    let doc = answer.json();
    assert_eq!(doc["node"], "node-a");
    assert_eq!(doc["method"], "POST");
    assert_eq!(doc["path"], "/api/items");
    assert_eq!(doc["query"], "x=1&y=two");
    assert_eq!(doc["version"], "HTTP/1.1");
    assert_eq!(doc["request_id"], "req-1");
    assert_eq!(doc["session"], "tok-1");
    assert_eq!(doc["hop_from"], "node-z");
    assert_eq!(doc["hop_context"], "ctx-1");
    assert_eq!(doc["route"], "default");
    assert_eq!(doc["upstream_addr"], "127.0.0.1:1");
    assert_eq!(doc["forwarded_for"], "10.0.0.1");
    assert_eq!(doc["forwarded_proto"], "http");
    assert_eq!(doc["host"], "api.example.com");
    assert_eq!(doc["headers"]["x-multi"], "a, b");
    assert_eq!(doc["headers"]["x-request-id"], "req-1");
    assert_eq!(doc["body_bytes"], 5);
    assert_eq!(doc["body_fnv"], format!("{:016x}", fnv(b"hello")));

    // Absent headers are null; the session also comes from the cookie.
    let req = Request::builder()
        .uri("/")
        .header("host", addr.to_string())
        .header("cookie", "theme=dark; hop_session=tok-2")
        .body(empty())
        .unwrap();
    let doc = read(send(addr, req).await.unwrap()).await.json();
    assert_eq!(doc["session"], "tok-2");
    assert_eq!(doc["query"], Value::Null);
    assert_eq!(doc["request_id"], Value::Null);
    assert_eq!(doc["hop_from"], Value::Null);
    assert_eq!(doc["body_bytes"], 0);
    assert_eq!(doc["body_fnv"], "cbf29ce484222325");
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn status_header_context_and_maintenance_knobs() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let answer = get(
        addr,
        "/x?status=418&header=X-A:1&header=X-A:%202&header=Content-Type:text/x-demo\
         &context=ctx%3D1&maint=MOVING%20seq%3D3%20to%3D127.0.0.1%3A9%20in%3D5",
    )
    .await;
    assert_eq!(answer.status, StatusCode::IM_A_TEAPOT);
    let values: Vec<_> = answer.headers.get_all("x-a").iter().collect();
    assert_eq!(values, ["1", "2"]);
    assert_eq!(answer.header("content-type"), Some("text/x-demo"));
    assert_eq!(answer.header("hop-session-context"), Some("ctx=1"));
    assert_eq!(
        answer.header("hop-maintenance"),
        Some("MOVING seq=3 to=127.0.0.1:9 in=5")
    );
    assert_eq!(answer.json()["node"], "n");

    for status in [204, 304] {
        let answer = get(addr, &format!("/x?status={status}")).await;
        assert_eq!(answer.status.as_u16(), status);
        assert!(answer.body.is_empty());
        assert!(answer.headers.get("content-length").is_none());
    }

    // The sleep only makes it slow; the answer is the same.
    let answer = get(addr, "/x?sleep_ms=30&status=503").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.json()["node"], "n");

    for bad in [
        "status=abc",
        "status=99",
        "status=101",
        "header=NoColon",
        "bytes=-1",
        "echo=maybe",
    ] {
        let answer = get(addr, &format!("/x?{bad}")).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(answer.json()["error"].is_string(), "{bad}");
    }
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn bytes_and_chunked_knobs_stream_the_pattern() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let answer = get(addr, "/big?bytes=40000").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-length"), Some("40000"));
    assert_eq!(
        answer.header("content-type"),
        Some("application/octet-stream")
    );
    assert_eq!(answer.body, pattern(40000));

    let answer = get(addr, "/big?bytes=40000&chunked=1&chunk_delay_ms=5").await;
    assert!(answer.headers.get("content-length").is_none());
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert_eq!(answer.body, pattern(40000));

    let answer = get(addr, "/big?bytes=0").await;
    assert_eq!(answer.header("content-length"), Some("0"));
    assert!(answer.body.is_empty());

    let answer = get(addr, "/json?chunked=1").await;
    assert!(answer.headers.get("content-length").is_none());
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert_eq!(answer.json()["path"], "/json");
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn streamed_upload_is_counted_and_hashed() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let (body, len, hash) = streamed(128, 64 * 1024);
    let answer = read(
        send(addr, request(Method::PUT, addr, "/up", body))
            .await
            .unwrap(),
    )
    .await;
    let doc = answer.json();
    assert_eq!(doc["body_bytes"], len);
    assert_eq!(doc["body_fnv"], format!("{hash:016x}"));

    // The same over HTTP/2.
    let (body, len, hash) = streamed(16, 50_000);
    let req = request(Method::POST, addr, &format!("http://{addr}/up"), body);
    let answer = read(h2(addr).await.send_request(req).await.unwrap()).await;
    let doc = answer.json();
    assert_eq!(doc["version"], "HTTP/2.0");
    assert_eq!(doc["body_bytes"], len);
    assert_eq!(doc["body_fnv"], format!("{hash:016x}"));
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn expect_100_continue_is_honoured() {
    let backend = Backend::start("n").await;
    // The JSON answer reads the body first; the echo reads its first chunk
    // before answering: both must send 100 Continue to a waiting client.
    for (path, want) in [("/up", "\"body_bytes\":5"), ("/up?echo=1", "\r\n\r\nhello")] {
        let mut stream = TcpStream::connect(backend.addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 100 Continue\r\n"),
            "{path}: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        stream.write_all(b"hello").await.unwrap();
        let mut seen = buf[..n].to_vec();
        while !String::from_utf8_lossy(&seen).contains(want) {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "{path}: closed early: {:?}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        assert!(String::from_utf8_lossy(&seen).contains("HTTP/1.1 200 OK\r\n"));
    }
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn echo_streams_the_request_body_back() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let (body, len, hash) = streamed(40, 10_000);
    let mut req = request(Method::POST, addr, "/echo?echo=1", body);
    req.headers_mut()
        .insert("content-type", "text/x-test".parse().unwrap());
    let answer = read(send(addr, req).await.unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), Some("text/x-test"));
    assert_eq!(answer.body.len() as u64, len);
    assert_eq!(fnv(&answer.body), hash);

    // With a known length, the length is kept.
    let req = request(Method::POST, addr, "/echo?echo=1", full("abc"));
    let answer = read(send(addr, req).await.unwrap()).await;
    assert_eq!(answer.header("content-length"), Some("3"));
    assert_eq!(answer.body, "abc");

    // Echo with trailers over HTTP/2: the checksum is the body's.
    let req = request(
        Method::POST,
        addr,
        &format!("http://{addr}/echo?echo=1&trailers=1"),
        full("ping-pong"),
    );
    let answer = read(h2(addr).await.send_request(req).await.unwrap()).await;
    assert_eq!(answer.body, "ping-pong");
    let trailers = answer.trailers.expect("trailers");
    assert_eq!(
        trailers["x-checksum"],
        format!("{:016x}", fnv(b"ping-pong")).as_str()
    );
    assert_eq!(trailers["grpc-status"], "0");
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn trailers_on_h2_and_on_chunked_h1() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let req = request(
        Method::GET,
        addr,
        &format!("http://{addr}/t?bytes=20000&trailers=1"),
        empty(),
    );
    let answer = read(h2(addr).await.send_request(req).await.unwrap()).await;
    assert_eq!(answer.body, pattern(20000));
    let trailers = answer.trailers.expect("h2 trailers");
    assert_eq!(
        trailers["x-checksum"],
        format!("{:016x}", fnv(&pattern(20000))).as_str()
    );
    assert_eq!(trailers["grpc-status"], "0");

    let mut req = request(Method::GET, addr, "/t?trailers=1", empty());
    req.headers_mut().insert("te", "trailers".parse().unwrap());
    let answer = read(send(addr, req).await.unwrap()).await;
    assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
    assert_eq!(answer.json()["path"], "/t");
    let trailers = answer.trailers.expect("h1 trailers");
    assert_eq!(
        trailers["x-checksum"],
        format!("{:016x}", fnv(&answer.body)).as_str()
    );
    assert_eq!(trailers["grpc-status"], "0");
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn head_gets_headers_without_body() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let answer = call(addr, Method::HEAD, "/x").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert!(answer.headers.get("content-length").is_some());
    assert!(answer.body.is_empty());

    let answer = call(addr, Method::HEAD, "/x?bytes=1000&header=X-A:1").await;
    assert_eq!(answer.header("content-length"), Some("1000"));
    assert_eq!(answer.header("x-a"), Some("1"));
    assert!(answer.body.is_empty());

    // And over HTTP/2.
    let req = request(
        Method::HEAD,
        addr,
        &format!("http://{addr}/x?bytes=1000"),
        empty(),
    );
    let answer = read(h2(addr).await.send_request(req).await.unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-length"), Some("1000"));
    assert!(answer.body.is_empty());
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn health_follows_the_control_switch() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let answer = get(addr, "/health").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body, "ok");

    let answer = call(addr, Method::POST, "/control/health?ok=0").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["healthy"], false);
    assert_eq!(
        get(addr, "/health").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // Only health is affected.
    assert_eq!(get(addr, "/x").await.status, StatusCode::OK);

    call(addr, Method::POST, "/control/health?ok=1").await;
    assert_eq!(get(addr, "/health").await.status, StatusCode::OK);

    let answer = call(addr, Method::POST, "/control/health").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    let answer = get(addr, "/control/health?ok=1").await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    let answer = get(addr, "/control/nope").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn fail_switch_answers_500_outside_health_and_control() {
    let backend = Backend::start("node-f").await;
    let addr = backend.addr;
    let answer = call(addr, Method::POST, "/control/fail?on=1").await;
    assert_eq!(answer.json()["failing"], true);

    let answer = get(addr, "/anything?status=200").await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        answer.json(),
        serde_json::json!({"node": "node-f", "error": "failing"})
    );
    let answer = read(
        send(addr, request(Method::POST, addr, "/up", full("body")))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(get(addr, "/health").await.status, StatusCode::OK);
    assert_eq!(get(addr, "/control/stats").await.status, StatusCode::OK);

    call(addr, Method::POST, "/control/fail?on=0").await;
    assert_eq!(get(addr, "/anything").await.status, StatusCode::OK);
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn seen_and_stats_count_requests() {
    let backend = Backend::start("node-s").await;
    let addr = backend.addr;
    for i in 0..5 {
        let mut req = request(Method::GET, addr, "/x", empty());
        req.headers_mut()
            .insert("x-request-id", format!("r-{i}").parse().unwrap());
        read(send(addr, req).await.unwrap()).await;
    }
    get(addr, "/no-id").await;
    get(addr, "/health").await;

    let doc = get(addr, "/control/seen").await.json();
    assert_eq!(doc["node"], "node-s");
    assert_eq!(doc["count"], 5);
    assert_eq!(
        doc["request_ids"],
        serde_json::json!(["r-0", "r-1", "r-2", "r-3", "r-4"])
    );
    let doc = get(addr, "/control/stats").await.json();
    assert_eq!(doc["node"], "node-s");
    assert_eq!(doc["requests"], 6);
    assert_eq!(doc["in_flight"], 0);

    let doc = call(addr, Method::DELETE, "/control/seen").await.json();
    assert_eq!(doc["cleared"], 5);
    assert_eq!(get(addr, "/control/seen").await.json()["count"], 0);
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn h2c_prior_knowledge_multiplexes() {
    let backend = Backend::start("n2").await;
    let addr = backend.addr;
    let sender = h2(addr).await;
    let mut calls = Vec::new();
    for i in 0..4 {
        let mut sender = sender.clone();
        let req = request(
            Method::GET,
            addr,
            &format!("http://{addr}/multi/{i}?sleep_ms=20"),
            empty(),
        );
        calls.push(tokio::spawn(async move {
            read(sender.send_request(req).await.unwrap()).await
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let answer = call.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        let doc = answer.json();
        assert_eq!(doc["node"], "n2");
        assert_eq!(doc["version"], "HTTP/2.0");
        assert_eq!(doc["path"], format!("/multi/{i}"));
        assert_eq!(doc["host"], addr.to_string());
    }
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn drop_closes_without_a_response() {
    let backend = Backend::start("n").await;
    let addr = backend.addr;
    let result = send(addr, request(Method::POST, addr, "/x?drop=1", full("data"))).await;
    assert!(
        result.is_err(),
        "got a response: {:?}",
        result.map(|r| r.status())
    );

    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /x?drop=1 HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // EOF or reset, never a status line.
    let _ = stream.read_to_end(&mut buf).await;
    assert!(buf.is_empty(), "{:?}", String::from_utf8_lossy(&buf));

    // The backend itself lives on.
    assert_eq!(get(addr, "/x").await.status, StatusCode::OK);
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn close_knob_ends_the_connection() {
    let backend = Backend::start("n").await;
    let mut stream = TcpStream::connect(backend.addr).await.unwrap();
    stream
        .write_all(b"GET /x?close=1 HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("connection: close\r\n"), "{text}");
    assert!(text.ends_with('}'), "{text}");
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn malformed_requests_get_400() {
    let backend = Backend::start("n").await;
    let mut stream = TcpStream::connect(backend.addr).await.unwrap();
    stream.write_all(b"NOT HTTP AT ALL\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    let _ = stream.read_to_end(&mut buf).await;
    assert!(
        buf.starts_with(b"HTTP/1.1 400"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
    assert_eq!(get(backend.addr, "/x").await.status, StatusCode::OK);
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn websocket_echoes_text_binary_and_pings() {
    let backend = Backend::start("n").await;
    let stream = TcpStream::connect(backend.addr).await.unwrap();
    let url = format!("ws://{}/ws", backend.addr);
    let (mut socket, response) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);

    socket.send(Message::text("hello")).await.unwrap();
    assert_eq!(
        socket.next().await.unwrap().unwrap(),
        Message::text("hello")
    );
    let binary: Vec<u8> = (0..=255).collect();
    socket.send(Message::binary(binary.clone())).await.unwrap();
    assert_eq!(
        socket.next().await.unwrap().unwrap(),
        Message::binary(binary)
    );
    socket
        .send(Message::Ping(Bytes::from_static(b"p")))
        .await
        .unwrap();
    assert_eq!(
        socket.next().await.unwrap().unwrap(),
        Message::Pong(Bytes::from_static(b"p"))
    );
    socket.close(None).await.unwrap();
    while let Some(Ok(_)) = socket.next().await {}
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn websocket_is_closed_with_1001_on_shutdown() {
    let mut backend = Backend::start("n").await;
    let stream = TcpStream::connect(backend.addr).await.unwrap();
    let url = format!("ws://{}/ws", backend.addr);
    let (mut socket, _) = tokio_tungstenite::client_async(url, stream).await.unwrap();
    socket.send(Message::text("before")).await.unwrap();
    assert_eq!(
        socket.next().await.unwrap().unwrap(),
        Message::text("before")
    );

    backend.shutdown();
    let mut close_code = None;
    while let Some(Ok(message)) = socket.next().await {
        if let Message::Close(frame) = message {
            close_code = frame.map(|f| f.code);
        }
    }
    assert_eq!(close_code, Some(CloseCode::Away));
    backend.finished().await.unwrap();
}

#[tokio::test]
async fn graceful_shutdown_lets_a_slow_request_finish() {
    let mut backend = Backend::start("n").await;
    let addr = backend.addr;
    let slow = tokio::spawn(async move { get(addr, "/slow?sleep_ms=300").await });
    wait_in_flight(addr, 1).await;

    // A slow streamed answer over HTTP/2 is in flight too.
    let req = request(
        Method::GET,
        addr,
        &format!("http://{addr}/stream?bytes=100000&chunk_delay_ms=20"),
        empty(),
    );
    let streaming = h2(addr).await.send_request(req).await.unwrap();
    wait_in_flight(addr, 2).await;

    backend.shutdown();
    let answer = slow.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["path"], "/slow");
    let answer = read(streaming).await;
    assert_eq!(answer.body, pattern(100_000));
    backend.finished().await.unwrap();

    // Stopped accepting: the port is closed now.
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn knobs_parse_and_decode() {
    let knobs = Knobs::parse(Some(
        "sleep_ms=5&status=201&bytes=7&chunk_delay_ms=3&chunked&header=A:%20b+c\
         &close=0&context=x%2By&maint=M&trailers=true&echo=no&drop=off&other=%zz",
    ))
    .unwrap();
    assert_eq!(knobs.sleep_for, Duration::from_millis(5));
    assert_eq!(knobs.status, Some(StatusCode::CREATED));
    assert_eq!(knobs.bytes, Some(7));
    assert_eq!(knobs.chunk_delay, Duration::from_millis(3));
    assert!(knobs.chunked && knobs.trailers);
    assert!(!knobs.close && !knobs.echo && !knobs.drop);
    assert_eq!(knobs.headers.len(), 1);
    assert_eq!(knobs.headers[0].0, "a");
    assert_eq!(knobs.headers[0].1, "b c");
    assert_eq!(knobs.context.unwrap(), "x+y");
    assert_eq!(knobs.maint.unwrap(), "M");

    assert!(Knobs::parse(None).is_ok());
    assert!(Knobs::parse(Some("&&=&%")).is_ok());
    assert!(Knobs::parse(Some("sleep_ms=99999999999999999999")).is_err());
    assert!(Knobs::parse(Some("context=%0A")).is_err());
    assert_eq!(knobs::flag(Some("on=1"), "on"), Ok(true));
    assert_eq!(knobs::flag(Some("on=0"), "on"), Ok(false));
    assert!(knobs::flag(Some("off=1"), "on").is_err());
    assert!(knobs::flag(Some("on=2"), "on").is_err());
}
