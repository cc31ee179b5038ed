//! `hopgate backend`: a small demo/test backend. It is a tool for demos and
//! tests, **not** part of the product: nothing in the gateway depends on it,
//! and it may change whenever the tests need a new knob.
//!
//! What it owns:
//! - one listener serving HTTP/1.1 and HTTP/2 cleartext (prior knowledge) on
//!   the same port, with HTTP/1.1 upgrades for the WebSocket echo at `/ws`;
//! - the answer to every other path: a JSON document naming this node, the
//!   request line and the session/hop headers the gateway is expected to add
//!   (`X-Request-Id`, `Hop-Session`, `X-Hop-From`, `Hop-Session-Context`, ...),
//!   plus the length and FNV-1a 64 hash of the request body, read as a stream
//!   (never buffered whole);
//! - the knobs, as query parameters, that make it slow, big, chunked, failing
//!   or dying on demand, and the `/health` and `/control/*` endpoints that
//!   tests flip while traffic flows;
//! - its own graceful shutdown: stop accepting, let in-flight requests finish
//!   for up to [`GRACE`], close WebSockets with 1001 (going away).
//!
//! With `--tls-cert`/`--tls-key` it serves TLS instead (ALPN `h2` and
//! `http/1.1`), and with `--tls-client-ca` requires client certificates
//! (`backend/tls.rs`).
//!
//! What it must not touch: gateway internals. It speaks HTTP only and
//! knows hopgate's headers by name, exactly as a third-party backend would;
//! it never imports `hopgate-core`, `-proxy`, `-control` or `-store`.
//!
//! Knobs (combinable; a bad value answers 400 with `{"node","error"}`):
//! `sleep_ms=N` wait before answering; `status=N` (200..=999; 204/304 have
//! no body); `bytes=N` a body of N bytes of a fixed pattern (byte `i` is
//! `[0-9a-zA-Z-_][i % 64]`) in 16 KiB chunks, `chunk_delay_ms=M` between
//! chunks; `chunked=1` no Content-Length; `header=Name:Value` (repeatable;
//! the first one of a name replaces ours); `close=1` `Connection: close`
//! (HTTP/1.x only); `context=V` answers `Hop-Session-Context: V`; `maint=V`
//! answers `Hop-Maintenance: V`; `trailers=1` ends the body with trailers
//! `x-checksum` (FNV-1a 64 of the body sent) and `grpc-status: 0` (on
//! HTTP/1.1 only when the request carried `TE: trailers`, as hyper requires);
//! `echo=1` streams the request body back, Content-Type copied; `drop=1`
//! closes the connection without answering (HTTP/2: resets the stream).
//! HEAD gets the headers the body-carrying answer would have, and no body.
//!
//! Endpoints:
//! - `GET /health`: 200 `ok`, or 503 `unhealthy` after
//!   `POST /control/health?ok=0`;
//! - `POST /control/fail?on=1|0`: while on, every request outside `/health`
//!   and `/control/` answers 500 `{"node":..,"error":"failing"}`;
//! - `POST /control/health?ok=1|0`;
//! - `GET /control/seen`: `{"node","request_ids":[..],"count"}`, the
//!   `X-Request-Id` of the requests received (the last [`SEEN_CAP`]; `count`
//!   is the length of the list); `DELETE /control/seen` clears it;
//! - `GET /control/stats`: `{"node","requests","in_flight"}`;
//! - `GET /ws` with `Upgrade: websocket`: echoes text and binary messages;
//! - anything else: the JSON echo, shaped by the knobs.
//!
//! `/health` and `/control/*` are not counted in `requests`, `in_flight` nor
//! the seen list, so health checks do not disturb what tests assert.

use std::collections::VecDeque;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinSet;

mod body;
mod knobs;
#[cfg(test)]
mod tests;
mod tls;
mod ws;

use body::{Fnv, RespBody};
use knobs::Knobs;

/// How long in-flight requests and WebSockets get to finish on shutdown.
const GRACE: Duration = Duration::from_secs(10);
/// How many request ids `/control/seen` remembers (the most recent ones).
const SEEN_CAP: usize = 100_000;

/// `hopgate backend`: run the demo/test backend.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BackendArgs {
    /// Node id reported in every answer.
    #[arg(long)]
    pub(crate) id: String,
    /// Address to listen on; port 0 picks a free port (printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub(crate) listen: SocketAddr,
    /// Append the `X-Request-Id` of every request received to this file, one
    /// per line, written before answering (survives `kill -9`).
    #[arg(long)]
    pub(crate) record: Option<std::path::PathBuf>,
    /// Serve TLS with this certificate chain (PEM); needs `--tls-key`.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<std::path::PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<std::path::PathBuf>,
    /// With TLS: require client certificates signed by this CA (PEM).
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_client_ca: Option<std::path::PathBuf>,
    /// On SIGTERM, keep serving this long (`2s`, `500ms`) but answer every
    /// request, `/health` included, `503` with `Retry-After: 1` without
    /// processing it (not counted, not recorded), then shut down: a
    /// backend that refuses work while it drains, as Spring, Node or an
    /// Envoy sidecar do during a graceful shutdown.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) unavailable_on_term: Option<Duration>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    hopgate_core::units::parse_duration(s)
}

/// Binds, prints exactly one line `hopgate backend <id> listening on <addr>`
/// to stdout (flushed), serves until SIGTERM/SIGINT, then shuts down
/// gracefully and returns.
pub(crate) async fn run(args: BackendArgs) -> anyhow::Result<()> {
    // Install the signal handlers before announcing the address, so a
    // harness that signals right after reading the line never kills us
    // with the default action.
    let signals = Signals::install().context("installing signal handlers")?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "hopgate backend {} listening on {}", args.id, addr)?;
        out.flush()?;
    }
    let record = match &args.record {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("opening {}", path.display()))?,
        ),
        None => None,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => Some(tls::acceptor(c, k, args.tls_client_ca.as_deref())?),
        _ => None,
    };
    let state = Arc::new(State::new(args.id, record));
    let unavailable_for = args.unavailable_on_term.unwrap_or_default();
    let refusing = Arc::clone(&state);
    let shutdown = async move {
        signals.recv().await;
        if !unavailable_for.is_zero() {
            refusing.unavailable.store(true, Ordering::Relaxed);
            tracing::info!(node = %refusing.id, ?unavailable_for, "backend: SIGTERM; answering 503 before shutting down");
            tokio::time::sleep(unavailable_for).await;
        }
    };
    serve_state(listener, state, tls, shutdown).await
}

/// Serves on an already-bound listener until `shutdown` resolves, then shuts
/// down gracefully: stop accepting, let in-flight requests finish for up to
/// ten seconds, close WebSockets with 1001.
pub(crate) async fn serve(
    listener: TcpListener,
    id: String,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_state(listener, Arc::new(State::new(id, None)), None, shutdown).await
}

async fn serve_state(
    listener: TcpListener,
    state: Arc<State>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);

    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // Nagle only delays small responses; ignore failures.
                    let _ = stream.set_nodelay(true);
                    let conn_state = Arc::clone(&state);
                    let service = service_fn(move |req| handle(Arc::clone(&conn_state), req));
                    if let Some(acceptor) = &tls {
                        let (acceptor, builder) = (acceptor.clone(), builder.clone());
                        let watcher = graceful.watcher();
                        connections.spawn(async move {
                            let stream = match acceptor.accept(stream).await {
                                Ok(s) => s,
                                Err(error) => {
                                    tracing::debug!(%error, "backend tls handshake failed");
                                    return;
                                }
                            };
                            let conn = builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), service);
                            if let Err(error) = watcher.watch(conn.into_owned()).await {
                                tracing::debug!(%error, "backend connection ended with an error");
                            }
                        });
                        continue;
                    }
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .into_owned();
                    let conn = graceful.watch(conn);
                    connections.spawn(async move {
                        if let Err(error) = conn.await {
                            tracing::debug!(%error, "backend connection ended with an error");
                        }
                    });
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off, retry.
                    tracing::warn!(%error, "backend accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }

    drop(listener);
    state.shutting_down.send_replace(true);
    let mut websockets = state.websockets.subscribe();
    let drained = async {
        graceful.shutdown().await;
        let _ = websockets.wait_for(|open| *open == 0).await;
    };
    if tokio::time::timeout(GRACE, drained).await.is_err() {
        tracing::warn!(
            node = %state.id,
            "backend shutdown: grace period over, aborting what is left"
        );
    }
    connections.shutdown().await;
    Ok(())
}

/// SIGTERM and SIGINT, registered up front; SIGUSR1 and SIGUSR2 are
/// caught and ignored, so a `kill -USR1` meant for the gateway (log
/// rotation) does not end a backend on the same host.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        // A handler, once registered, stays for the process's life: the
        // default action (exit) never comes back, and nobody listens.
        drop(signal(SignalKind::user_defined1())?);
        drop(signal(SignalKind::user_defined2())?);
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    #[cfg(not(unix))]
    fn install() -> std::io::Result<Self> {
        Ok(Self {})
    }

    #[cfg(unix)]
    async fn recv(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    #[cfg(not(unix))]
    async fn recv(self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// State shared by every connection of one backend.
struct State {
    id: String,
    failing: AtomicBool,
    healthy: AtomicBool,
    /// `--unavailable-on-term` in force: every answer is a 503.
    unavailable: AtomicBool,
    requests: AtomicU64,
    in_flight: AtomicU64,
    seen: Mutex<VecDeque<String>>,
    /// `--record`: every request id, appended as it arrives.
    record: Option<Mutex<std::fs::File>>,
    /// Flips to true once when shutdown starts; WebSockets watch it.
    shutting_down: watch::Sender<bool>,
    /// Number of open WebSockets; shutdown waits for zero.
    websockets: watch::Sender<usize>,
}

impl State {
    fn new(id: String, record: Option<std::fs::File>) -> Self {
        Self {
            record: record.map(Mutex::new),
            id,
            failing: AtomicBool::new(false),
            healthy: AtomicBool::new(true),
            unavailable: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            seen: Mutex::new(VecDeque::new()),
            shutting_down: watch::Sender::new(false),
            websockets: watch::Sender::new(0),
        }
    }

    async fn remember(&self, request_id: &str) {
        if let Some(file) = &self.record {
            let mut f = file.lock().await;
            // One write per line: backends sharing a record file append
            // whole lines (`writeln!` may split the id and its newline).
            let _ = f.write_all(format!("{request_id}\n").as_bytes());
        }
        let mut seen = self.seen.lock().await;
        if seen.len() >= SEEN_CAP {
            seen.pop_front();
        }
        seen.push_back(request_id.to_owned());
    }
}

/// Counts a request as in flight until dropped (it rides on the response
/// body, so a streamed answer counts until its last byte).
struct InFlight(Arc<State>);

impl InFlight {
    fn new(state: &Arc<State>) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(state))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The service error for `drop=1`: hyper closes the connection (HTTP/1.1)
/// or resets the stream (HTTP/2) without writing a response.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dropped on request (drop=1)")
    }
}

impl std::error::Error for Dropped {}

type Answer = Result<Response<RespBody>, Dropped>;

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Answer {
    if state.unavailable.load(Ordering::Relaxed) {
        return Ok(unavailable(&state, req).await);
    }
    let path = req.uri().path();
    if path == "/health" {
        return Ok(health(&state, req).await);
    }
    if path == "/control" || path.starts_with("/control/") {
        return Ok(control(&state, req).await);
    }

    state.requests.fetch_add(1, Ordering::Relaxed);
    let in_flight = InFlight::new(&state);
    if let Some(request_id) = header_str(&req, "x-request-id") {
        state.remember(&request_id).await;
    }
    let head_only = req.method() == Method::HEAD;

    if state.failing.load(Ordering::Relaxed) {
        let _ = consume(req.into_body()).await;
        let doc = json!({"node": state.id, "error": "failing"});
        return Ok(json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &doc,
            head_only,
        ));
    }

    let knobs = match Knobs::parse(req.uri().query()) {
        Ok(knobs) => knobs,
        Err(message) => {
            let _ = consume(req.into_body()).await;
            let doc = json!({"node": state.id, "error": message});
            return Ok(json_response(StatusCode::BAD_REQUEST, &doc, head_only));
        }
    };

    if path == "/ws" && ws::is_upgrade(&req) {
        return Ok(ws::accept(&state, req));
    }

    if knobs.drop {
        knobs.sleep().await;
        return Err(Dropped);
    }

    let version = req.version();
    let status = knobs.status.unwrap_or(StatusCode::OK);
    let (mut response, len) = if knobs.echo {
        knobs.sleep().await;
        let content_type = req.headers().get(header::CONTENT_TYPE).cloned();
        let mut body = req.into_body();
        let len = body::exact_len(&body);
        let first = match body.frame().await.transpose() {
            Ok(first) => first,
            // The client went away mid-upload: nobody to answer.
            Err(_) => return Err(Dropped),
        };
        let mut response = Response::new(RespBody::echo(first, body));
        if let Some(content_type) = content_type {
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, content_type);
        }
        (response, len)
    } else {
        let (parts, body) = req.into_parts();
        let (body_bytes, body_fnv) = match consume(body).await {
            Ok(read) => read,
            // The client went away mid-upload: nobody to answer.
            Err(_) => return Err(Dropped),
        };
        knobs.sleep().await;
        match knobs.bytes {
            Some(n) => {
                let mut response = Response::new(RespBody::pattern(n, knobs.chunk_delay));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                (response, Some(n))
            }
            None => {
                let doc = describe(&state.id, &parts, body_bytes, body_fnv);
                let body = Bytes::from(doc.to_string());
                let len = body.len() as u64;
                let mut response = Response::new(RespBody::full(body));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                (response, Some(len))
            }
        }
    };

    *response.status_mut() = status;
    let headers = response.headers_mut();
    let bodyless = head_only || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    let exact = !knobs.chunked && !knobs.trailers;
    if matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED) {
        headers.remove(header::CONTENT_TYPE);
    } else if let (true, Some(len)) = (exact, len) {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if knobs.trailers {
        headers.insert(
            header::TRAILER,
            HeaderValue::from_static("x-checksum, grpc-status"),
        );
    }
    if let Some(context) = knobs.context {
        headers.insert("hop-session-context", context);
    }
    if let Some(maintenance) = knobs.maint {
        headers.insert("hop-maintenance", maintenance);
    }
    if knobs.close && version <= Version::HTTP_11 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let mut replaced: Vec<&HeaderName> = Vec::new();
    for (name, value) in &knobs.headers {
        // The first `header=` of a name replaces ours, later ones add to it.
        if replaced.contains(&name) {
            headers.append(name, value.clone());
        } else {
            headers.insert(name, value.clone());
            replaced.push(name);
        }
    }

    let response = response.map(|body| {
        if bodyless {
            RespBody::empty()
        } else {
            body.exact(exact)
                .with_trailers(knobs.trailers)
                .in_flight(in_flight)
        }
    });
    Ok(response)
}

/// The JSON document describing the request.
fn describe(id: &str, parts: &http::request::Parts, body_bytes: u64, body_fnv: u64) -> Value {
    let get = |name: &str| -> Value {
        match joined(&parts.headers, name) {
            Some(value) => Value::String(value),
            None => Value::Null,
        }
    };
    let mut headers = Map::new();
    for name in parts.headers.keys() {
        if let Some(value) = joined(&parts.headers, name.as_str()) {
            headers.insert(name.as_str().to_owned(), Value::String(value));
        }
    }
    let host = joined(&parts.headers, "host")
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()));
    json!({
        "node": id,
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "version": format!("{:?}", parts.version),
        "request_id": get("x-request-id"),
        "session": session(&parts.headers),
        "hop_from": get("x-hop-from"),
        "hop_context": get("hop-session-context"),
        "route": get("x-route-rule-id"),
        "upstream_addr": get("x-upstream-addr"),
        "forwarded_for": get("x-forwarded-for"),
        "forwarded_proto": get("x-forwarded-proto"),
        "host": host,
        "headers": headers,
        "body_bytes": body_bytes,
        "body_fnv": format!("{body_fnv:016x}"),
    })
}

/// The session token: the `Hop-Session` header, else the `hop_session`
/// cookie.
fn session(headers: &http::HeaderMap) -> Option<String> {
    if let Some(value) = joined(headers, "hop-session") {
        return Some(value);
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == "hop_session")
        .map(|(_, value)| value.to_owned())
}

/// All values of a header joined with `, ` (lossy for non-UTF-8 bytes).
fn joined(headers: &http::HeaderMap, name: &str) -> Option<String> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    let mut out = String::from_utf8_lossy(first.as_bytes()).into_owned();
    for value in values {
        out.push_str(", ");
        out.push_str(&String::from_utf8_lossy(value.as_bytes()));
    }
    Some(out)
}

fn header_str(req: &Request<Incoming>, name: &str) -> Option<String> {
    joined(req.headers(), name)
}

/// Reads a request body to its end, chunk by chunk: (bytes, FNV-1a 64).
async fn consume(mut body: Incoming) -> Result<(u64, u64), hyper::Error> {
    let mut len = 0u64;
    let mut hash = Fnv::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            len += data.len() as u64;
            hash.write(&data);
        }
    }
    Ok((len, hash.finish()))
}

fn json_response(status: StatusCode, doc: &Value, head_only: bool) -> Response<RespBody> {
    let body = Bytes::from(doc.to_string());
    let len = body.len();
    let body = if head_only {
        RespBody::empty()
    } else {
        RespBody::full(body)
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    response
}

fn text_response(status: StatusCode, text: &'static str, head_only: bool) -> Response<RespBody> {
    let body = if head_only {
        RespBody::empty()
    } else {
        RespBody::full(Bytes::from_static(text.as_bytes()))
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(text.len()));
    response
}

/// A request refused unprocessed while the backend drains
/// (`--unavailable-on-term`).
async fn unavailable(state: &State, req: Request<Incoming>) -> Response<RespBody> {
    let head_only = req.method() == Method::HEAD;
    let _ = consume(req.into_body()).await;
    let doc = json!({"node": state.id, "error": "shutting down"});
    let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, &doc, head_only);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

async fn health(state: &State, req: Request<Incoming>) -> Response<RespBody> {
    let head_only = req.method() == Method::HEAD;
    let _ = consume(req.into_body()).await;
    if state.healthy.load(Ordering::Relaxed) {
        text_response(StatusCode::OK, "ok", head_only)
    } else {
        text_response(StatusCode::SERVICE_UNAVAILABLE, "unhealthy", head_only)
    }
}

async fn control(state: &State, req: Request<Incoming>) -> Response<RespBody> {
    let (parts, body) = req.into_parts();
    let _ = consume(body).await;
    let head_only = parts.method == Method::HEAD;
    let path = parts.uri.path();
    let query = parts.uri.query();
    let error = |status: StatusCode, message: &str| {
        json_response(
            status,
            &json!({"node": state.id, "error": message}),
            head_only,
        )
    };
    let method_ok = |allowed: &[Method]| allowed.contains(&parts.method);
    let doc = match path {
        "/control/fail" if method_ok(&[Method::POST, Method::PUT]) => {
            match knobs::flag(query, "on") {
                Ok(on) => {
                    state.failing.store(on, Ordering::Relaxed);
                    json!({"node": state.id, "failing": on})
                }
                Err(message) => return error(StatusCode::BAD_REQUEST, &message),
            }
        }
        "/control/health" if method_ok(&[Method::POST, Method::PUT]) => {
            match knobs::flag(query, "ok") {
                Ok(ok) => {
                    state.healthy.store(ok, Ordering::Relaxed);
                    json!({"node": state.id, "healthy": ok})
                }
                Err(message) => return error(StatusCode::BAD_REQUEST, &message),
            }
        }
        "/control/seen" if method_ok(&[Method::GET, Method::HEAD]) => {
            let seen = state.seen.lock().await;
            let ids: Vec<&str> = seen.iter().map(String::as_str).collect();
            json!({"node": state.id, "request_ids": ids, "count": ids.len()})
        }
        "/control/seen" if method_ok(&[Method::DELETE]) => {
            let mut seen = state.seen.lock().await;
            let cleared = seen.len();
            seen.clear();
            json!({"node": state.id, "cleared": cleared})
        }
        "/control/stats" if method_ok(&[Method::GET, Method::HEAD]) => json!({
            "node": state.id,
            "requests": state.requests.load(Ordering::Relaxed),
            "in_flight": state.in_flight.load(Ordering::Relaxed),
        }),
        "/control/fail" | "/control/health" | "/control/seen" | "/control/stats" => {
            return error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
        }
        _ => return error(StatusCode::NOT_FOUND, "unknown control endpoint"),
    };
    json_response(StatusCode::OK, &doc, head_only)
}
