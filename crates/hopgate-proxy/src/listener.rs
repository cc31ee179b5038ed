//! Listeners: accept loops and the server of each client connection.
//!
//! Owns accepting (with the `max_connections` limit), the choice of each
//! connection's server (from its first bytes, or TLS ALPN: h2c's preface
//! and `h2` go to hyper's HTTP/2 server, everything else to hopgate's own
//! HTTP/1.1 server, [`crate::h1::server`], with the connection's
//! [`ClientConn`] as its handler), on TLS listeners after the handshake
//! ([`crate::tls::accept`], in the connection's task, bounded by
//! `timeouts.header_read`), the limits hyper's HTTP/2 server enforces,
//! and graceful shutdown: stop accepting, let in-flight requests finish up
//! to a deadline, HTTP/2 GOAWAY and HTTP/1.1 `Connection: close`.
//!
//! Must not touch: routing or forwarding (that is [`crate::forward`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use hopgate_core::config::{Config, ListenerConfig};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::body::{ProxyBody, RequestBody};
use crate::client_io::ClientIo;
use crate::forward::{ClientConn, Forwarder, RequestCtx, ResponseFuture};
use crate::tls::ListenerTlsState;

/// What one listener needs to serve.
#[derive(Debug, Clone)]
pub struct ListenerCtx {
    pub name: Arc<str>,
    pub forwarder: Forwarder,
    /// Read at each accept; the control plane stores new settings on reload
    /// without restarting the listener.
    pub settings: Arc<ArcSwap<ListenerSettings>>,
    /// The listener's TLS (`crate::tls::TlsListeners::listener`): while it
    /// holds certificates, each connection starts with a TLS handshake.
    pub tls: Arc<ListenerTlsState>,
}

/// The per-listener knobs a reload may change without re-binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerSettings {
    pub debug_headers: bool,
    pub normalize_path: bool,
    /// Terminates TLS (`X-Forwarded-Proto: https`).
    pub tls: bool,
    pub max_connections: usize,
    pub max_header_bytes: usize,
    pub max_headers: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// How long shutdown waits for in-flight requests.
    pub shutdown_timeout: Duration,
    /// PROXY protocol: trusted sources only, each connection's header read
    /// first ([`crate::proxy_protocol`]).
    pub proxy_protocol: Option<Arc<crate::proxy_protocol::Inbound>>,
}

impl ListenerSettings {
    /// `max_connections`: `limits.max_connections`, or the value derived
    /// from the file-descriptor limit when the config leaves it unset.
    pub fn from_config(
        l: &ListenerConfig,
        cfg: &Config,
        max_connections: usize,
    ) -> ListenerSettings {
        ListenerSettings {
            debug_headers: l.debug_headers,
            normalize_path: l.normalize_path,
            tls: l.tls.is_some(),
            max_connections,
            max_header_bytes: cfg.limits.max_header_bytes,
            max_headers: cfg.limits.max_headers,
            header_read_timeout: cfg.timeouts.header_read,
            idle_timeout: cfg.timeouts.idle,
            shutdown_timeout: cfg.timeouts.shutdown,
            proxy_protocol: l
                .proxy_protocol
                .as_ref()
                .map(|pp| Arc::new(crate::proxy_protocol::Inbound::new(&l.name, pp))),
        }
    }
}

/// What a listener advertises as `SETTINGS_MAX_HEADER_LIST_SIZE` for
/// `limits.max_header_bytes`: 4× the limit, at least 64 KiB.
fn h2_header_list_size(max_header_bytes: usize) -> u32 {
    u32::try_from(max_header_bytes.saturating_mul(4).max(64 << 10)).unwrap_or(u32::MAX)
}

/// hyper's server for a listener's HTTP/2 connections (h2c and ALPN `h2`).
fn server_builder(s: &ListenerSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new()).http2_only();
    builder
        .http2()
        .timer(TokioTimer::new())
        // The advertised list size is also the h2 library's limit for
        // buffering a header block across CONTINUATION frames, beyond which
        // it ends the whole connection (COMPRESSION_ERROR). Advertising 4×
        // the limit keeps a request between the limit and 4× to its own
        // stream: the gateway's own check answers it 431 with a body, and
        // the connection's other streams go on.
        .max_header_list_size(h2_header_list_size(s.max_header_bytes))
        .keep_alive_interval(Some(Duration::from_secs(30)));
    builder
}

/// The hyper service of one HTTP/2 client connection; cloned (one
/// reference count) per request.
#[derive(Clone)]
struct ConnService(Arc<ClientConn>);

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Infallibly<ResponseFuture>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        Infallibly(self.0.serve(req.map(RequestBody::Hyper)))
    }
}

/// A listener's settings as of its last accept, and what is built from
/// them (rebuilt when a reload stores new ones).
struct Current {
    settings: Arc<ListenerSettings>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    req_ctx: Arc<RequestCtx>,
}

impl Current {
    fn of(ctx: &ListenerCtx, settings: Arc<ListenerSettings>) -> Current {
        Current {
            builder: Arc::new(server_builder(&settings)),
            req_ctx: Arc::new(RequestCtx {
                listener: ctx.name.clone(),
                debug_headers: settings.debug_headers,
                normalize_path: settings.normalize_path,
                tls: settings.tls,
            }),
            settings,
        }
    }

    /// Takes the listener's latest settings, if a reload changed them.
    fn refresh(&mut self, ctx: &ListenerCtx) {
        let latest = ctx.settings.load();
        if !Arc::ptr_eq(&latest, &self.settings) {
            *self = Current::of(ctx, arc_swap::Guard::into_inner(latest));
        }
    }
}

/// Accepts and serves clients on `listener` until `shutdown` turns true, then
/// drains: open connections get GOAWAY / `Connection: close` and up to
/// `shutdown_timeout` to finish what they are doing.
pub async fn serve_listener(
    listener: TcpListener,
    ctx: ListenerCtx,
    mut shutdown: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    // hopgate's own HTTP/1.1 connections drain on this (each holds a
    // receiver; the sender sees when the last one is gone).
    let drain = watch::Sender::new(false);
    let open = Arc::new(AtomicUsize::new(0));
    let mut current = Current::of(&ctx, ctx.settings.load_full());
    let mut refusing = false;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: back off briefly instead of spinning.
                tracing::warn!(listener = %ctx.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // A dual-stack listener sees IPv4 clients as `::ffff:a.b.c.d`: keep
        // them as the IPv4 address they are (access rules, hashing and
        // `X-Forwarded-For` all see that).
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        current.refresh(&ctx);
        let s = &current.settings;
        if open.load(Ordering::Relaxed) >= s.max_connections {
            // One warning per burst of refusals, not one per connection.
            if !refusing {
                refusing = true;
                tracing::warn!(listener = %ctx.name, %peer, limit = s.max_connections, "max_connections reached; closing new connections");
            }
            drop(stream);
            continue;
        }
        if refusing {
            refusing = false;
            tracing::info!(listener = %ctx.name, "below max_connections again; accepting");
        }
        let Some(inbound) = proxy_protocol_admits(&ctx, s, peer) else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn = Accepted {
            forwarder: ctx.forwarder.clone(),
            req_ctx: Arc::clone(&current.req_ctx),
            inbound,
            stream,
            peer,
            guard: OpenGuard::new(&open),
            builder: Arc::clone(&current.builder),
            watcher: graceful.watcher(),
            first_bytes: s.header_read_timeout,
            stall: s.idle_timeout,
            native: Native {
                settings: crate::h1::server::Settings {
                    max_header_bytes: s.max_header_bytes,
                    max_headers: s.max_headers,
                    header_read_timeout: s.header_read_timeout,
                    idle_timeout: s.idle_timeout,
                },
                drain: drain.subscribe(),
            },
            // TLS when the listener's settings say so (they follow reloads;
            // the certificates are installed before the settings change). A
            // TLS listener never falls back to cleartext: without
            // certificates the handshake fails.
            tls: s.tls.then(|| Arc::clone(&ctx.tls)),
        };
        tokio::spawn(serve_accepted(conn));
    }
    drop(listener);
    shut_down(&ctx, &open, &drain, graceful).await;
}

/// PROXY protocol: only the trusted balancers may connect (`None`: close
/// this one); the header is read in the connection's task. `Some(None)`
/// for a listener without it.
#[inline]
fn proxy_protocol_admits(
    ctx: &ListenerCtx,
    s: &ListenerSettings,
    peer: SocketAddr,
) -> Option<Option<Arc<crate::proxy_protocol::Inbound>>> {
    match &s.proxy_protocol {
        None => Some(None),
        Some(pp) if pp.trusts(peer.ip()) => Some(Some(Arc::clone(pp))),
        Some(_) => {
            tracing::debug!(listener = %ctx.name, %peer, "PROXY protocol: source not trusted; closed");
            None
        }
    }
}

/// Stops a listener: lingers while the process hands over, then drains
/// its connections, up to `shutdown_timeout` in all.
async fn shut_down(
    ctx: &ListenerCtx,
    open: &AtomicUsize,
    drain: &watch::Sender<bool>,
    graceful: GracefulShutdown,
) {
    tracing::info!(listener = %ctx.name, open = open.load(Ordering::Relaxed), "listener stopped accepting; draining");
    let deadline = ctx.settings.load().shutdown_timeout;
    let lingered = crate::handover::linger(open, deadline).await;
    drain.send_replace(true);
    let both = async {
        tokio::join!(graceful.shutdown(), drain.closed());
    };
    if tokio::time::timeout(deadline.saturating_sub(lingered), both)
        .await
        .is_err()
    {
        tracing::warn!(listener = %ctx.name, "shutdown deadline passed with connections still open");
    }
}

/// An accepted connection and what its task needs to serve it.
struct Accepted {
    stream: TcpStream,
    /// The socket's peer address (the balancer's, with PROXY protocol).
    peer: SocketAddr,
    forwarder: Forwarder,
    req_ctx: Arc<RequestCtx>,
    /// The listener's PROXY protocol, when it takes a header first.
    inbound: Option<Arc<crate::proxy_protocol::Inbound>>,
    /// Counts the connection open until its task ends.
    guard: OpenGuard,
    builder: Arc<auto::Builder<TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
    /// `timeouts.header_read`: the first bytes (and the TLS handshake).
    first_bytes: Duration,
    /// `timeouts.idle`.
    stall: Duration,
    native: Native,
    tls: Option<Arc<ListenerTlsState>>,
}

/// One connection's task: the TLS handshake when the listener has TLS,
/// then hyper's HTTP/2 server (h2c's preface, ALPN `h2`) or hopgate's own
/// HTTP/1.1 server (everything else).
async fn serve_accepted(a: Accepted) {
    let Accepted {
        mut stream,
        peer,
        forwarder,
        req_ctx,
        inbound,
        guard: _guard,
        builder,
        watcher,
        first_bytes,
        stall,
        native,
        tls,
    } = a;
    // The address a PROXY protocol header carries replaces the socket's
    // for everything downstream (read before TLS: the header comes first).
    let peer = match inbound {
        None => peer,
        Some(pp) => match pp.read(&mut stream, peer).await {
            Some(client) => client,
            None => return,
        },
    };
    // `limits.max_connections_per_client`: held until the connection ends.
    let limiter = forwarder.snapshot().load().connections.clone();
    let Some(_place) = crate::limit::admit_connection(limiter.as_ref(), peer) else {
        return;
    };
    let svc = ConnService(Arc::new(ClientConn::new(forwarder, peer, req_ctx)));
    let Some(tls) = tls else {
        let io = ClientIo::new(stream, first_bytes, stall);
        // h2c (the preface) goes to hyper; everything else is HTTP/1.x
        // for hopgate's own server.
        return match sniff(io).await {
            // Boxed: hyper's connection state is a few KiB, and in the
            // task itself it would size every HTTP/1.1 connection's task
            // too (an idle one's memory, [`crate::h1::server`]).
            // Its writes gathered per turn of its task: one socket write
            // where h2 flushes each large DATA frame ([`crate::coalesce`]).
            Some(Sniffed::H2c(io)) => {
                crate::coalesce::gathered(io, |io| serve_conn(&builder, io, svc, watcher, peer))
                    .await;
            }
            Some(Sniffed::Http1(io, read)) => {
                serve_native(Box::new(io), read, svc, native).await;
            }
            None => {}
        };
    };
    // The handshake and its stream, boxed: neither sizes the task of
    // every connection (an idle one's memory, [`crate::h1::server`]).
    let Some((h2, io)) = Box::pin(handshake(&tls, stream, first_bytes, stall)).await else {
        return;
    };
    // ALPN `h2` goes to hyper.
    if h2 {
        crate::coalesce::gathered(io, |io| serve_conn(&builder, io, svc, watcher, peer)).await;
    } else {
        serve_native(io, bytes::BytesMut::new(), svc, native).await;
    }
}

/// A TLS client's handshake (within the first-bytes deadline): whether
/// it chose `h2`, and its stream with the connection's deadlines.
async fn handshake(
    tls: &ListenerTlsState,
    stream: TcpStream,
    first_bytes: Duration,
    stall: Duration,
) -> Option<(bool, Box<TlsClientIo>)> {
    let stream = crate::tls::accept(tls, stream, first_bytes).await?;
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    Some((h2, Box::new(ClientIo::new(stream, first_bytes, stall))))
}

/// A TLS client connection's stream.
type TlsClientIo = ClientIo<tokio_rustls::server::TlsStream<TcpStream>>;

/// Serves one HTTP/2 client connection (h2c or TLS) with hyper until it
/// ends, shutdown closes it, or a stream stalls past the send limit.
async fn serve_conn<I>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    svc: ConnService,
    watcher: hyper_util::server::graceful::Watcher,
    peer: SocketAddr,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let watches = Arc::clone(svc.0.send_watches());
    let conn = builder.serve_connection(TokioIo::new(io), svc).into_owned();
    let conn = watcher.watch(conn);
    // hyper's connection first, and no random pick of the branch per wake:
    // the sweep is polled after it, and costs a load unless its own waker
    // fired ([`crate::send_watch::Stalled`]).
    tokio::select! {
        biased;
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "client connection ended with an error");
            }
        }
        // An HTTP/2 stream stalled past the send limit (the sweep cut it):
        // the connection is dropped, which closes it.
        () = watches.stalled() => {
            tracing::info!(%peer, "client connection closed: an HTTP/2 stream accepted no response data for the stall limit");
        }
    }
}

/// What a connection served by hopgate's own HTTP/1.1 server needs from
/// its listener.
struct Native {
    settings: crate::h1::server::Settings,
    /// Turns true when the listener drains.
    drain: watch::Receiver<bool>,
}

/// A plain connection's protocol, told from its first bytes.
enum Sniffed<I> {
    /// The HTTP/2 preface: hyper's, with the bytes read so far replayed.
    H2c(crate::tunnel::ReadAhead<ClientIo<I>>),
    /// Anything else: HTTP/1.x, with the bytes read so far.
    Http1(ClientIo<I>, bytes::BytesMut),
}

/// Reads until the first bytes tell h2c's preface from HTTP/1.x (the
/// first-bytes deadline is `ClientIo`'s); `None` when the client closed
/// or timed out first.
async fn sniff<I>(mut io: ClientIo<I>) -> Option<Sniffed<I>>
where
    I: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut buf = bytes::BytesMut::with_capacity(8 << 10);
    loop {
        match io.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        let n = buf.len().min(PREFACE.len());
        if buf[..n] != PREFACE[..n] {
            return Some(Sniffed::Http1(io, buf));
        }
        if n == PREFACE.len() {
            let read_ahead = buf.freeze();
            return Some(Sniffed::H2c(crate::tunnel::ReadAhead { read_ahead, io }));
        }
    }
}

/// Serves one client connection with hopgate's own HTTP/1.1 server until
/// it ends. The connection's send-stall sweep is not run: only HTTP/2
/// streams are watched ([`crate::send_watch`]), and this server speaks
/// HTTP/1.x only.
async fn serve_native(
    io: Box<dyn crate::h1::ClientStream>,
    read: bytes::BytesMut,
    svc: ConnService,
    native: Native,
) {
    crate::h1::server::serve(io, read, svc.0, native.settings, native.drain).await;
}

/// Resolves once shutdown has been requested.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

struct OpenGuard(Arc<AtomicUsize>);

impl OpenGuard {
    fn new(open: &Arc<AtomicUsize>) -> OpenGuard {
        open.fetch_add(1, Ordering::Relaxed);
        crate::metrics::METRICS
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        crate::metrics::METRICS
            .connections_open
            .fetch_add(1, Ordering::Relaxed);
        OpenGuard(Arc::clone(open))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        crate::metrics::METRICS
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// Wraps a future that cannot fail in the `Result` hyper's service wants,
/// without another layer of `async` (and its copy of the future).
pub(crate) struct Infallibly<F>(F);

impl<F: Future<Output = Box<Response<ProxyBody>>> + Unpin> Future for Infallibly<F> {
    type Output = Result<Response<ProxyBody>, Infallible>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx).map(|mut resp| {
            // hyper writes header maps only.
            crate::h1::response_head::materialize(&mut resp);
            Ok(*resp)
        })
    }
}
