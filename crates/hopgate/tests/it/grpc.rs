//! gRPC through the gateway with a real gRPC stack: tonic servers run in
//! this test process on 127.0.0.1:0 behind a `hopgate run` child whose
//! service speaks `protocol: http2` (h2c prior knowledge) upstream; tonic
//! clients reach the gateway over h2c. Messages and the service are written
//! by hand (`prost::Message` derives, a hand-written `tower::Service`), so
//! no protoc is needed.
//!
//! What every client sees is asserted: codes, messages, metadata carried in
//! trailers, which node answered, stream items and their order — while
//! backends stop, restart and drain, and while the gateway itself shuts down.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::server::{NamedService, ServerStreamingService, UnaryService};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

use crate::harness::{client, config, service, within, Gateway};

// ---------------------------------------------------------------- messages

/// The one request message of every method.
#[derive(Clone, PartialEq, prost::Message)]
struct Ask {
    #[prost(string, tag = "1")]
    text: String,
    /// Echo: sleep this long before answering.
    #[prost(uint64, tag = "2")]
    sleep_ms: u64,
    /// Count: how many items to stream.
    #[prost(uint32, tag = "3")]
    count: u32,
    /// Count: pause between items.
    #[prost(uint64, tag = "4")]
    interval_ms: u64,
    /// Count: end with an error status instead of item number `fail_after`.
    #[prost(uint32, optional, tag = "5")]
    fail_after: Option<u32>,
}

/// The one response message (streamed items too).
#[derive(Clone, PartialEq, prost::Message)]
struct Reply {
    /// The answering server instance.
    #[prost(string, tag = "1")]
    node: String,
    #[prost(uint32, tag = "2")]
    seq: u32,
    #[prost(string, tag = "3")]
    text: String,
}

// ------------------------------------------------------------------ server

const SERVICE: &str = "hopgate.test.Probe";
const ECHO: &str = "/hopgate.test.Probe/Echo";
const FAIL: &str = "/hopgate.test.Probe/Fail";
const COUNT: &str = "/hopgate.test.Probe/Count";

/// What one server instance has seen, for the test to inspect.
struct NodeState {
    id: String,
    /// The text of every Echo call that reached the handler.
    received: parking_lot::Mutex<Vec<String>>,
    /// `grpc-timeout` values of the Echo calls it received.
    deadlines: parking_lot::Mutex<Vec<String>>,
    /// Slow Echo handlers dropped before they could answer.
    abandoned: AtomicUsize,
    /// Highest item number any Count stream has handed to the transport.
    last_sent: AtomicU32,
    /// When set, every call is refused with UNAVAILABLE before any work.
    unavailable: std::sync::atomic::AtomicBool,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The `hopgate.test.Probe` service, routed by hand like generated code.
#[derive(Clone)]
struct Probe(Arc<NodeState>);

impl NamedService for Probe {
    const NAME: &'static str = SERVICE;
}

impl tower::Service<http::Request<tonic::body::Body>> for Probe {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let node = Arc::clone(&self.0);
        Box::pin(async move {
            if node.unavailable.load(Ordering::SeqCst) {
                return Ok(Status::unavailable("not taking calls").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Reply, Ask>::default());
            let resp = match req.uri().path() {
                ECHO => grpc.unary(Echo(node), req).await,
                FAIL => grpc.unary(Fail(node), req).await,
                COUNT => grpc.server_streaming(Count(node), req).await,
                other => Status::unimplemented(format!("no method {other}")).into_http(),
            };
            Ok(resp)
        })
    }
}

/// Counts a slow handler as abandoned unless it reached its answer.
struct Unfinished(Option<Arc<NodeState>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Unary: answers with its node id and the text it was sent.
struct Echo(Arc<NodeState>);

impl UnaryService<Ask> for Echo {
    type Response = Reply;
    type Future = BoxFuture<Result<Response<Reply>, Status>>;

    fn call(&mut self, req: Request<Ask>) -> Self::Future {
        let node = Arc::clone(&self.0);
        Box::pin(async move {
            if let Some(t) = req.metadata().get("grpc-timeout") {
                node.deadlines
                    .lock()
                    .push(t.to_str().unwrap_or("?").to_owned());
            }
            let ask = req.into_inner();
            node.received.lock().push(ask.text.clone());
            if ask.sleep_ms > 0 {
                let mut guard = Unfinished(Some(Arc::clone(&node)));
                tokio::time::sleep(Duration::from_millis(ask.sleep_ms)).await;
                guard.0 = None;
            }
            Ok(Response::new(Reply {
                node: node.id.clone(),
                seq: 0,
                text: ask.text,
            }))
        })
    }
}

/// The error every Fail call gets, with metadata that travels in trailers
/// (an ASCII key and a binary one).
fn failure(code: Code, message: &str, node: &str) -> Status {
    let mut md = MetadataMap::new();
    md.insert("x-thing", MetadataValue::from_static("widget-42"));
    md.insert("x-failed-node", node.parse().unwrap());
    md.insert_bin(
        "x-detail-bin",
        MetadataValue::from_bytes(&[0, 1, 2, 254, 255]),
    );
    Status::with_metadata(code, message, md)
}

/// Unary: always fails with NOT_FOUND and custom metadata.
struct Fail(Arc<NodeState>);

impl UnaryService<Ask> for Fail {
    type Response = Reply;
    type Future = BoxFuture<Result<Response<Reply>, Status>>;

    fn call(&mut self, _: Request<Ask>) -> Self::Future {
        let id = self.0.id.clone();
        Box::pin(async move { Err(failure(Code::NotFound, "no such thing", &id)) })
    }
}

/// Server streaming: `count` items numbered from 0, `interval_ms` apart;
/// with `fail_after: k`, an error status in the trailers after k items.
struct Count(Arc<NodeState>);

impl ServerStreamingService<Ask> for Count {
    type Response = Reply;
    type ResponseStream = ReceiverStream<Result<Reply, Status>>;
    type Future = BoxFuture<Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, req: Request<Ask>) -> Self::Future {
        let node = Arc::clone(&self.0);
        Box::pin(async move {
            let ask = req.into_inner();
            let (tx, rx) = mpsc::channel(1);
            tokio::spawn(async move {
                for seq in 0..ask.count {
                    if seq > 0 && ask.interval_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(ask.interval_ms)).await;
                    }
                    let item = if ask.fail_after == Some(seq) {
                        Err(failure(
                            Code::ResourceExhausted,
                            &format!("gave up after {seq} items"),
                            &node.id,
                        ))
                    } else {
                        Ok(Reply {
                            node: node.id.clone(),
                            seq,
                            text: format!("{}#{seq}", ask.text),
                        })
                    };
                    let last = item.is_err();
                    if tx.send(item).await.is_err() || last {
                        return;
                    }
                    node.last_sent.fetch_max(seq, Ordering::SeqCst);
                }
            });
            Ok(Response::new(ReceiverStream::new(rx)))
        })
    }
}

/// A tonic server in this process; stops gracefully on [`GrpcNode::stop`],
/// is aborted on drop.
struct GrpcNode {
    state: Arc<NodeState>,
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl GrpcNode {
    async fn start(id: &str) -> GrpcNode {
        GrpcNode::start_on(id, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Serves on `addr` (a port just released may linger: the bind is
    /// retried, bounded).
    async fn start_on(id: &str, addr: SocketAddr) -> GrpcNode {
        let mut bound = None;
        for _ in 0..100 {
            match TcpListener::bind(addr).await {
                Ok(l) => {
                    bound = Some(l);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        let listener = bound.unwrap_or_else(|| panic!("gRPC node {id} could not bind {addr}"));
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(NodeState {
            id: id.to_owned(),
            received: parking_lot::Mutex::default(),
            deadlines: parking_lot::Mutex::default(),
            abandoned: AtomicUsize::new(0),
            last_sent: AtomicU32::new(0),
            unavailable: std::sync::atomic::AtomicBool::new(false),
        });
        let (shutdown, signal) = oneshot::channel::<()>();
        let svc = Probe(Arc::clone(&state));
        let task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .serve_with_incoming_shutdown(svc, TcpListenerStream::new(listener), async {
                    let _ = signal.await;
                })
                .await;
            if let Err(e) = served {
                eprintln!("gRPC node stopped with an error: {e}");
            }
        });
        GrpcNode {
            state,
            addr,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Graceful stop: the listener closes at once, open connections get
    /// GOAWAY, in-flight calls finish; returns when all of that is done.
    async fn stop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(Duration::from_secs(20), &mut task)
                .await
                .is_err()
            {
                task.abort();
                panic!("gRPC node {} did not stop within 20 s", self.state.id);
            }
        }
    }
}

impl Drop for GrpcNode {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

// ------------------------------------------------------------------ client

/// An h2c channel (one HTTP/2 connection) to `addr`.
async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("h2c connection to {addr}: {e}"))
}

/// A channel that counts every TCP connection it opens (tonic reconnects
/// silently; the count shows whether it had to).
async fn counted_channel(addr: SocketAddr, dials: Arc<AtomicUsize>) -> Channel {
    let connector = tower::service_fn(move |_: http::Uri| {
        let dials = Arc::clone(&dials);
        async move {
            dials.fetch_add(1, Ordering::SeqCst);
            let stream = tokio::net::TcpStream::connect(addr).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    });
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_with_connector(connector)
        .await
        .unwrap_or_else(|e| panic!("h2c connection to {addr}: {e}"))
}

/// A hand-written client of `hopgate.test.Probe`.
#[derive(Clone)]
struct ProbeClient(tonic::client::Grpc<Channel>);

impl ProbeClient {
    fn new(ch: Channel) -> ProbeClient {
        ProbeClient(tonic::client::Grpc::new(ch))
    }

    async fn connect(addr: SocketAddr) -> ProbeClient {
        ProbeClient::new(channel(addr).await)
    }

    async fn ready(&mut self) -> Result<(), Status> {
        self.0
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("channel not ready: {e}")))
    }

    async fn unary(&mut self, path: &'static str, req: Request<Ask>) -> Result<Reply, Status> {
        self.ready().await?;
        let codec = ProstCodec::<Ask, Reply>::default();
        self.0
            .unary(req, PathAndQuery::from_static(path), codec)
            .await
            .map(Response::into_inner)
    }

    async fn echo(&mut self, text: &str) -> Result<Reply, Status> {
        let ask = Ask {
            text: text.to_owned(),
            ..Ask::default()
        };
        self.unary(ECHO, Request::new(ask)).await
    }

    async fn count(&mut self, ask: Ask) -> Result<Streaming<Reply>, Status> {
        self.ready().await?;
        let codec = ProstCodec::<Ask, Reply>::default();
        self.0
            .server_streaming(Request::new(ask), PathAndQuery::from_static(COUNT), codec)
            .await
            .map(Response::into_inner)
    }
}

/// Reads a stream to its end: the items, then `Ok(())` for status OK or
/// the error status.
async fn collect(mut s: Streaming<Reply>) -> (Vec<Reply>, Result<(), Status>) {
    let mut items = Vec::new();
    loop {
        match s.message().await {
            Ok(Some(r)) => items.push(r),
            Ok(None) => return (items, Ok(())),
            Err(e) => return (items, Err(e)),
        }
    }
}

/// Bounds a call that must not hang (a guard, not a timing assertion).
async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within 20 s"))
}

// ----------------------------------------------------------------- gateway

/// Service `s` over h2c with the given nodes; `extra` is more YAML for the
/// service (4-space indented lines).
fn grpc_config(nodes: &[(&str, SocketAddr)], extra: &str) -> String {
    let nodes: Vec<(&str, SocketAddr, &str)> = nodes.iter().map(|(i, a)| (*i, *a, "")).collect();
    let svc = service("s", &nodes).replacen(
        "  - name: s\n",
        &format!("  - name: s\n    protocol: http2\n{extra}"),
        1,
    );
    config(
        &svc,
        "  - { id: grpc, match: { path_prefix: / }, service: s }",
    )
}

/// The gateway's WARN and ERROR log lines and its access lines for failed
/// requests, for failure messages (the first and last 20 when many).
fn warnings(gw: &Gateway) -> String {
    let logs = gw.logs();
    let lines: Vec<&str> = logs
        .lines()
        .filter(|l| {
            l.contains("WARN")
                || l.contains("ERROR")
                || (l.contains("hopgate::access") && !l.contains("status=200"))
        })
        .collect();
    if lines.len() <= 40 {
        return lines.join("\n");
    }
    format!(
        "{}\n...\n{}",
        lines[..20].join("\n"),
        lines[lines.len() - 20..].join("\n")
    )
}

async fn grpc_gateway(nodes: &[(&str, SocketAddr)], extra: &str) -> Gateway {
    Gateway::start(&grpc_config(nodes, extra)).await
}

// ------------------------------------------------------------------- tests

#[tokio::test]
async fn unary_and_streaming_through_the_gateway_match_direct_calls() {
    let a = GrpcNode::start("a").await;
    let b = GrpcNode::start("b").await;
    let gw = grpc_gateway(&[("a", a.addr), ("b", b.addr)], "").await;
    let mut direct = BTreeMap::new();
    for n in [&a, &b] {
        direct.insert(n.state.id.clone(), ProbeClient::connect(n.addr).await);
    }
    let mut via = ProbeClient::connect(gw.addr).await;

    // Unary, small and large (several HTTP/2 flow-control windows).
    let big = "x".repeat(300 * 1024);
    let mut answered = BTreeSet::new();
    for text in ["hello", "", "ünïcødé ✓", &big, "hello", &big] {
        let r = via.echo(text).await.expect("unary through the gateway");
        let d = direct.get_mut(&r.node).unwrap().echo(text).await.unwrap();
        assert_eq!(r, d, "through the gateway == direct to {}", r.node);
        assert_eq!(r.text, text);
        answered.insert(r.node);
    }
    assert_eq!(answered.len(), 2, "both nodes answered: {answered:?}");

    // Server streaming: same items, same order, same end.
    let mut streamed_by = BTreeSet::new();
    for round in 0..4 {
        let ask = Ask {
            text: format!("round{round}"),
            count: 40,
            interval_ms: if round % 2 == 0 { 0 } else { 5 },
            ..Ask::default()
        };
        let (items, end) = bounded("a stream", async {
            collect(via.count(ask.clone()).await.expect("stream opens")).await
        })
        .await;
        end.expect("status OK through the gateway");
        assert_eq!(items.len(), 40, "every item");
        let node = items[0].node.clone();
        let want: Vec<u32> = (0..40).collect();
        assert_eq!(items.iter().map(|r| r.seq).collect::<Vec<_>>(), want);
        let d = direct.get_mut(&node).unwrap();
        let (direct_items, direct_end) = collect(d.count(ask).await.unwrap()).await;
        direct_end.unwrap();
        assert_eq!(items, direct_items, "stream through the gateway == direct");
        streamed_by.insert(node);
    }
    assert_eq!(streamed_by.len(), 2, "streams went to both nodes");
}

#[tokio::test]
async fn error_status_and_trailer_metadata_pass_unchanged() {
    let a = GrpcNode::start("a").await;
    let gw = grpc_gateway(&[("a", a.addr)], "").await;
    let mut direct = ProbeClient::connect(a.addr).await;
    let mut via = ProbeClient::connect(gw.addr).await;

    let same = |d: &Status, v: &Status| {
        assert_eq!(v.code(), d.code());
        assert_eq!(v.message(), d.message());
        for key in ["x-thing", "x-failed-node"] {
            assert_eq!(
                v.metadata().get(key),
                d.metadata().get(key),
                "metadata {key}"
            );
        }
        assert_eq!(
            v.metadata()
                .get_bin("x-detail-bin")
                .and_then(|b| b.to_bytes().ok()),
            d.metadata()
                .get_bin("x-detail-bin")
                .and_then(|b| b.to_bytes().ok()),
            "binary metadata"
        );
    };

    // Unary: a trailers-only response.
    let d = direct
        .unary(FAIL, Request::new(Ask::default()))
        .await
        .unwrap_err();
    let v = via
        .unary(FAIL, Request::new(Ask::default()))
        .await
        .unwrap_err();
    assert_eq!(v.code(), Code::NotFound, "{v:?}");
    assert_eq!(v.message(), "no such thing");
    assert_eq!(v.metadata().get("x-thing").unwrap(), "widget-42");
    assert_eq!(v.metadata().get("x-failed-node").unwrap(), "a");
    assert_eq!(
        v.metadata()
            .get_bin("x-detail-bin")
            .unwrap()
            .to_bytes()
            .unwrap()
            .as_ref(),
        &[0, 1, 2, 254, 255]
    );
    same(&d, &v);

    // Streaming: items, then the error in real trailers after the body.
    let ask = Ask {
        text: "t".into(),
        count: 10,
        fail_after: Some(3),
        ..Ask::default()
    };
    let (d_items, d_end) = collect(direct.count(ask.clone()).await.unwrap()).await;
    let (v_items, v_end) = bounded("a failing stream", async {
        collect(via.count(ask).await.expect("stream opens")).await
    })
    .await;
    assert_eq!(v_items.len(), 3, "the items before the failure");
    assert_eq!(v_items, d_items);
    let (d, v) = (d_end.unwrap_err(), v_end.unwrap_err());
    assert_eq!(v.code(), Code::ResourceExhausted, "{v:?}");
    assert_eq!(v.message(), "gave up after 3 items");
    assert_eq!(v.metadata().get("x-thing").unwrap(), "widget-42");
    same(&d, &v);

    // The connection is fine afterwards.
    assert_eq!(via.echo("still here").await.unwrap().text, "still here");
}

#[tokio::test]
async fn grpc_timeout_ends_a_slow_call_and_the_gateway_keeps_serving() {
    let a = GrpcNode::start("a").await;
    let gw = grpc_gateway(&[("a", a.addr)], "").await;
    let mut via = ProbeClient::connect(gw.addr).await;

    let mut req = Request::new(Ask {
        text: "slow".into(),
        sleep_ms: 60_000,
        ..Ask::default()
    });
    req.set_timeout(Duration::from_millis(300));
    let err = bounded("a call with a 300 ms deadline", via.unary(ECHO, req))
        .await
        .expect_err("the slow call cannot succeed within its deadline");
    assert!(
        matches!(err.code(), Code::DeadlineExceeded | Code::Cancelled),
        "deadline exceeded or cancelled, got {err:?}"
    );
    // The deadline travelled to the backend, which gave up on the call.
    let seen = a.state.deadlines.lock().clone();
    assert_eq!(seen.len(), 1, "the backend saw grpc-timeout: {seen:?}");
    within(Duration::from_secs(10), || async {
        a.state.abandoned.load(Ordering::SeqCst) == 1
    })
    .await;
    assert_eq!(
        a.state.abandoned.load(Ordering::SeqCst),
        1,
        "the backend's handler was cancelled, not left running"
    );

    // The gateway keeps serving: the same connection and a new one.
    let r = via
        .echo("after")
        .await
        .expect("same connection still works");
    assert_eq!((r.node.as_str(), r.text.as_str()), ("a", "after"));
    let mut fresh = ProbeClient::connect(gw.addr).await;
    assert_eq!(fresh.echo("fresh").await.unwrap().node, "a");
}

/// One unary call of a [`Load`].
struct Call {
    /// The test's phase when the call started.
    phase: usize,
    text: String,
    /// The answering node, or the error.
    result: Result<String, String>,
}

/// Unary load through one client: `callers` tasks, each call with a unique
/// text, at most `total` calls. Every call holds `gate` for reading while it
/// runs, so a test can hold new calls back (and wait for running ones) by
/// taking it for writing.
struct Load {
    done: Arc<AtomicUsize>,
    running: Arc<AtomicBool>,
    phase: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::RwLock<()>>,
    log: Arc<parking_lot::Mutex<Vec<Call>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(client: &ProbeClient, callers: usize, total: usize, pause: Duration) -> Load {
        let issued = Arc::new(AtomicUsize::new(0));
        let load = Load {
            done: Arc::default(),
            running: Arc::new(AtomicBool::new(true)),
            phase: Arc::default(),
            gate: Arc::default(),
            log: Arc::default(),
            tasks: Vec::new(),
        };
        let tasks = (0..callers)
            .map(|_| {
                let mut c = client.clone();
                let issued = Arc::clone(&issued);
                let (done, running, phase, gate, log) = (
                    Arc::clone(&load.done),
                    Arc::clone(&load.running),
                    Arc::clone(&load.phase),
                    Arc::clone(&load.gate),
                    Arc::clone(&load.log),
                );
                tokio::spawn(async move {
                    while running.load(Ordering::SeqCst) {
                        let n = issued.fetch_add(1, Ordering::SeqCst);
                        if n >= total {
                            break;
                        }
                        let text = format!("load-{n}");
                        let open = gate.read().await;
                        let phase = phase.load(Ordering::SeqCst);
                        let got =
                            tokio::time::timeout(Duration::from_secs(20), c.echo(&text)).await;
                        drop(open);
                        let result = match got {
                            Ok(Ok(r)) if r.text == text => Ok(r.node),
                            Ok(Ok(r)) => Err(format!("wrong answer {r:?}")),
                            Ok(Err(s)) => Err(format!("{s:?}")),
                            Err(_) => Err("no answer within 20 s".to_owned()),
                        };
                        log.lock().push(Call {
                            phase,
                            text,
                            result,
                        });
                        done.fetch_add(1, Ordering::SeqCst);
                        if !pause.is_zero() {
                            tokio::time::sleep(pause).await;
                        }
                    }
                })
            })
            .collect();
        Load { tasks, ..load }
    }

    /// Waits (bounded) until `n` calls have completed.
    async fn until_done(&self, n: usize) {
        let reached = within(Duration::from_secs(20), || async {
            self.done.load(Ordering::SeqCst) >= n
        })
        .await;
        assert!(reached, "the load never reached {n} calls");
    }

    /// Waits (bounded) until `node` has answered a call.
    async fn until_served_by(&self, node: &str) {
        let answered = within(Duration::from_secs(20), || async {
            self.log
                .lock()
                .iter()
                .any(|c| c.result.as_deref() == Ok(node))
        })
        .await;
        assert!(answered, "{node} never answered a call");
    }

    /// Stops the callers (bounded) and returns every call.
    async fn finish(self) -> Vec<Call> {
        self.running.store(false, Ordering::SeqCst);
        for t in self.tasks {
            bounded("the load", t).await.unwrap();
        }
        std::mem::take(&mut *self.log.lock())
    }
}

/// Failed calls, each marked with whether any of `nodes` ever saw it (one
/// that none saw was never processed and was safe to send elsewhere).
fn failures(calls: &[Call], nodes: &[&GrpcNode]) -> Vec<String> {
    calls
        .iter()
        .filter_map(|c| {
            let e = c.result.as_ref().err()?;
            let seen = nodes
                .iter()
                .any(|n| n.state.received.lock().contains(&c.text));
            Some(format!("{} [reached a backend: {seen}]: {e}", c.text))
        })
        .collect()
}

/// Which node answered how many calls.
fn served<'a>(calls: impl IntoIterator<Item = &'a Call>) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for c in calls {
        if let Ok(n) = &c.result {
            *m.entry(n.clone()).or_default() += 1;
        }
    }
    m
}

#[tokio::test]
async fn stopping_one_of_two_nodes_under_unary_load_fails_no_call() {
    const TOTAL: usize = 300;
    let mut a = GrpcNode::start("a").await;
    let b = GrpcNode::start("b").await;
    let gw = grpc_gateway(&[("a", a.addr), ("b", b.addr)], "").await;
    let via = ProbeClient::connect(gw.addr).await;
    let load = Load::start(&via, 8, TOTAL, Duration::ZERO);

    // A third of the load in, stop a between calls: hold new calls back,
    // let the running ones end...
    load.until_done(TOTAL / 3).await;
    let gate = Arc::clone(&load.gate).write_owned().await;
    // ...put a slow call in flight on a (round robin: within a few tries)...
    let mut slow = Vec::new();
    let mut slow_on_a = None;
    for i in 0..4 {
        let text = format!("slow-{i}");
        let mut c = via.clone();
        let ask = Ask {
            text: text.clone(),
            sleep_ms: 800,
            ..Ask::default()
        };
        slow.push(tokio::spawn(async move {
            c.unary(ECHO, Request::new(ask)).await
        }));
        let landed = bounded("a slow call reaching a backend", async {
            loop {
                for n in [&a, &b] {
                    if n.state.received.lock().contains(&text) {
                        return n.state.id.clone();
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        if landed == "a" {
            slow_on_a = Some(i);
            break;
        }
    }
    let slow_on_a = slow_on_a.expect("a slow call reached a");
    // ...and stop a gracefully while that call runs; then let calls flow.
    a.stop().await;
    load.phase.store(1, Ordering::SeqCst);
    drop(gate);
    for (i, t) in slow.into_iter().enumerate() {
        let r = bounded("a slow call", t)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("slow call {i} failed: {e:?}"));
        if i == slow_on_a {
            assert_eq!(r.node, "a", "the call in flight on a finished there");
        }
    }
    load.until_done(TOTAL).await;
    let calls = load.finish().await;

    assert_eq!(calls.len(), TOTAL);
    let failed = failures(&calls, &[&a, &b]);
    assert!(
        failed.is_empty(),
        "{} of {TOTAL} calls failed: {:#?}\ngateway warnings:\n{}",
        failed.len(),
        &failed[..failed.len().min(5)],
        warnings(&gw)
    );
    let before = served(calls.iter().filter(|c| c.phase == 0));
    assert!(
        before.contains_key("a"),
        "a served before the stop: {before:?}"
    );
    let after: Vec<&str> = calls
        .iter()
        .filter(|c| c.phase == 1)
        .map(|c| c.result.as_deref().unwrap())
        .collect();
    assert!(!after.is_empty(), "calls ran after the stop");
    assert!(
        after.iter().all(|n| *n == "b"),
        "after the stop every call went to b: {after:?}"
    );
}

/// Short ejection and breaker times so restarted nodes rejoin quickly.
const QUICK_REJOIN: &str = "    outlier: { base_ejection: 300ms, max_ejection: 1s }\n    circuit: { failure_threshold: 5, reset_timeout: 500ms, max_requests: 1 }\n";

#[tokio::test]
async fn one_client_connection_survives_every_backend_restarting_in_turn() {
    let mut a = GrpcNode::start("a1").await;
    let mut b = GrpcNode::start("b1").await;
    let gw = grpc_gateway(&[("a", a.addr), ("b", b.addr)], QUICK_REJOIN).await;
    let dials = Arc::new(AtomicUsize::new(0));
    let via = ProbeClient::new(counted_channel(gw.addr, Arc::clone(&dials)).await);
    let load = Load::start(&via, 4, 20_000, Duration::from_millis(2));

    load.until_served_by("a1").await;
    load.until_served_by("b1").await;
    let mut old = Vec::new();
    for (node, next) in [(&mut a, "a2"), (&mut b, "b2")] {
        let addr = node.addr;
        // Stopped between calls (graceful), started again on the same
        // address while calls flow.
        let gate = Arc::clone(&load.gate).write_owned().await;
        node.stop().await;
        drop(gate);
        old.push(std::mem::replace(
            node,
            GrpcNode::start_on(next, addr).await,
        ));
        load.until_served_by(next).await;
    }
    let calls = load.finish().await;

    let mut nodes: Vec<&GrpcNode> = old.iter().collect();
    nodes.extend([&a, &b]);
    let failed = failures(&calls, &nodes);
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:#?}\ngateway warnings:\n{}",
        failed.len(),
        calls.len(),
        &failed[..failed.len().min(5)],
        warnings(&gw)
    );
    let served = served(&calls);
    for id in ["a1", "b1", "a2", "b2"] {
        assert!(served.contains_key(id), "{id} served: {served:?}");
    }
    assert_eq!(
        dials.load(Ordering::SeqCst),
        1,
        "one client connection to the gateway for the whole test"
    );
}

/// A graceful backend stop while calls keep flowing (no pause around it):
/// a stream the backend never processed (opened after its GOAWAY, above the
/// final last-stream-id) must be retried on another node, not failed.
/// Races are what it looks for, so it repeats the stop several times.
#[tokio::test]
#[ignore = "residual race (about 1 run in 4): when the backend closes its connection before its final GOAWAY reaches the gateway, a stream it never processed looks like a reset one, and a non-idempotent call cannot be replayed safely; run with --ignored"]
async fn graceful_stops_under_continuous_load_fail_no_unprocessed_call() {
    let mut a = GrpcNode::start("a1").await;
    let b = GrpcNode::start("b").await;
    let gw = grpc_gateway(&[("a", a.addr), ("b", b.addr)], QUICK_REJOIN).await;
    let via = ProbeClient::connect(gw.addr).await;
    let load = Load::start(&via, 16, 50_000, Duration::ZERO);
    let mut old = Vec::new();
    load.until_served_by("a1").await;
    for cycle in 2..=9 {
        let addr = a.addr;
        a.stop().await;
        let next = format!("a{cycle}");
        old.push(std::mem::replace(
            &mut a,
            GrpcNode::start_on(&next, addr).await,
        ));
        load.until_served_by(&next).await;
    }
    let calls = load.finish().await;
    let mut nodes: Vec<&GrpcNode> = old.iter().collect();
    nodes.extend([&a, &b]);
    let failed = failures(&calls, &nodes);
    assert!(
        failed.is_empty(),
        "{} of {} calls failed: {:#?}\ngateway warnings:\n{}",
        failed.len(),
        calls.len(),
        &failed[..failed.len().min(5)],
        warnings(&gw)
    );
}

#[tokio::test]
async fn a_stream_on_a_draining_node_ends_unavailable_at_the_deadline() {
    let a = GrpcNode::start("a").await;
    let b = GrpcNode::start("b").await;
    let gw = grpc_gateway(
        &[("a", a.addr), ("b", b.addr)],
        "    drain: { mode: finish, deadline: 1s }\n",
    )
    .await;
    let mut via = ProbeClient::connect(gw.addr).await;
    // Long enough never to end by itself within the test's bounds.
    let mut stream = via
        .count(Ask {
            text: "long".into(),
            count: 2_000,
            interval_ms: 50,
            ..Ask::default()
        })
        .await
        .expect("stream opens");
    let first = stream.message().await.unwrap().expect("a first item");
    let node = first.node.clone();
    let (state, other) = if node == "a" {
        (&a.state, "b")
    } else {
        (&b.state, "a")
    };
    for _ in 0..3 {
        stream.message().await.unwrap().expect("more items");
    }

    let sent_before_drain = state.last_sent.load(Ordering::SeqCst);
    let r = client()
        .post(gw.admin_url(&format!("/admin/v1/nodes/s/{node}/drain")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "drain {node}");
    // New calls avoid the draining node.
    for _ in 0..4 {
        assert_eq!(via.echo("new").await.unwrap().node, other);
    }

    let mut last_seq = 3;
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.message().await {
                Ok(Some(r)) => {
                    assert_eq!(r.node, node);
                    assert_eq!(r.seq, last_seq + 1, "items in order, none lost");
                    last_seq = r.seq;
                }
                Ok(None) => return Ok(()),
                Err(s) => return Err(s),
            }
        }
    })
    .await;
    let end = end.unwrap_or_else(|_| {
        panic!(
            "the stream on draining node {node} was still open 20 s after the drain \
             (deadline 1s); last item {last_seq}"
        )
    });
    let status = end.expect_err("the stream must not end with OK");
    assert_eq!(
        status.code(),
        Code::Unavailable,
        "ended with grpc-status 14: {status:?}"
    );
    assert!(
        last_seq >= sent_before_drain + 3,
        "the stream kept flowing after the drain began (last item {last_seq}, \
         {sent_before_drain} sent before the drain)"
    );
}

#[tokio::test]
async fn sigterm_lets_an_open_stream_finish_then_refuses_connections() {
    let a = GrpcNode::start("a").await;
    let mut gw = grpc_gateway(&[("a", a.addr)], "").await;
    let mut via = ProbeClient::connect(gw.addr).await;
    let mut stream = via
        .count(Ask {
            text: "finite".into(),
            count: 20,
            interval_ms: 50,
            ..Ask::default()
        })
        .await
        .expect("stream opens");
    let first = stream.message().await.unwrap().expect("a first item");
    assert_eq!((first.node.as_str(), first.seq), ("a", 0));

    gw.sigterm();
    let (rest, end) = bounded("the stream after SIGTERM", collect(stream)).await;
    end.expect("the open stream ends with status OK");
    let seqs: Vec<u32> = std::iter::once(0)
        .chain(rest.iter().map(|r| r.seq))
        .collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "all 20 items, in order");
    assert!(rest.iter().all(|r| r.node == "a"));

    assert_eq!(gw.wait().await, Some(0), "clean exit after the stream");
    assert!(
        tokio::net::TcpStream::connect(gw.addr).await.is_err(),
        "nothing listens any more"
    );
    let refused = Endpoint::from_shared(format!("http://{}", gw.addr))
        .unwrap()
        .connect()
        .await;
    assert!(refused.is_err(), "a new gRPC connection is refused");
}

/// A backend that answers UNAVAILABLE before producing any response byte
/// has not processed the call: the gateway replays it on another node
/// and the refusing node never sees the call.
#[tokio::test]
async fn unavailable_before_any_response_byte_is_retried_elsewhere() {
    let a = GrpcNode::start("a").await;
    let b = GrpcNode::start("b").await;
    a.state.unavailable.store(true, Ordering::SeqCst);
    let gw = grpc_gateway(&[("a", a.addr), ("b", b.addr)], "").await;
    let mut via = ProbeClient::connect(gw.addr).await;
    for i in 0..20 {
        let text = format!("call-{i}");
        let r = via.echo(&text).await.expect("no client sees UNAVAILABLE");
        assert_eq!(r.node, "b");
        assert_eq!(r.text, text);
    }
    assert!(
        a.state.received.lock().is_empty(),
        "the refusing node processed nothing"
    );
    assert!(
        gw.logs().contains("UNAVAILABLE before any response byte"),
        "some calls were retried"
    );
}
