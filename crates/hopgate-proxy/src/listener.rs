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
use tokio::sync::{watch, Notify};

use crate::body::{ProxyBody, RequestBody};
use crate::client_io::ClientIo;
use crate::forward::{ClientConn, Forwarder, RequestCtx, ResponseFuture};
use crate::h1::server::Drain;
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
/// them (rebuilt when a reload stores new ones): one per listener, shared
/// by its connections (each holds it until its server starts, and takes
/// only what that server needs).
struct Current {
    settings: Arc<ListenerSettings>,
    forwarder: Arc<Forwarder>,
    builder: auto::Builder<TokioExecutor>,
    req_ctx: Arc<RequestCtx>,
    /// What hopgate's own HTTP/1.1 server needs.
    h1: Arc<crate::h1::server::Settings>,
    drain: Arc<Drain>,
    /// TLS when the listener's settings say so (they follow reloads; the
    /// certificates are installed before the settings change). A TLS
    /// listener never falls back to cleartext: without certificates the
    /// handshake fails.
    tls: Option<Arc<ListenerTlsState>>,
}

impl Current {
    fn of(ctx: &ListenerCtx, settings: Arc<ListenerSettings>, drain: &Arc<Drain>) -> Arc<Current> {
        let s = &*settings;
        Arc::new(Current {
            forwarder: Arc::new(ctx.forwarder.clone()),
            builder: server_builder(s),
            req_ctx: Arc::new(RequestCtx {
                listener: ctx.name.clone(),
                debug_headers: s.debug_headers,
                normalize_path: s.normalize_path,
                tls: s.tls,
            }),
            h1: Arc::new(crate::h1::server::Settings {
                max_header_bytes: s.max_header_bytes,
                max_headers: s.max_headers,
                header_read_timeout: s.header_read_timeout,
                idle_timeout: s.idle_timeout,
            }),
            drain: Arc::clone(drain),
            tls: s.tls.then(|| Arc::clone(&ctx.tls)),
            settings,
        })
    }

    /// Takes the listener's latest settings, if a reload changed them.
    fn refresh(this: &mut Arc<Current>, ctx: &ListenerCtx) {
        let latest = ctx.settings.load();
        if !Arc::ptr_eq(&latest, &this.settings) {
            let drain = Arc::clone(&this.drain);
            *this = Current::of(ctx, arc_swap::Guard::into_inner(latest), &drain);
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
    // hopgate's own HTTP/1.1 connections drain on this.
    let drain = Arc::new(Drain::default());
    let open = Arc::new(Open::default());
    let mut current = Current::of(&ctx, ctx.settings.load_full(), &drain);
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
        Current::refresh(&mut current, &ctx);
        let s = &current.settings;
        if open.count.load(Ordering::Relaxed) >= s.max_connections {
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
            stream,
            peer,
            inbound,
            guard: OpenGuard::new(&open),
            current: Arc::clone(&current),
            watcher: graceful.watcher(),
        };
        tokio::spawn(serve_accepted(Box::new(conn)));
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
async fn shut_down(ctx: &ListenerCtx, open: &Open, drain: &Drain, graceful: GracefulShutdown) {
    tracing::info!(listener = %ctx.name, open = open.count.load(Ordering::Relaxed), "listener stopped accepting; draining");
    let deadline = ctx.settings.load().shutdown_timeout;
    let lingered = crate::handover::linger(&open.count, deadline).await;
    drain.begin();
    let both = async {
        tokio::join!(graceful.shutdown(), open.closed());
    };
    if tokio::time::timeout(deadline.saturating_sub(lingered), both)
        .await
        .is_err()
    {
        tracing::warn!(listener = %ctx.name, "shutdown deadline passed with connections still open");
    }
}

/// An accepted connection and what its task needs to serve it (boxed
/// into the task, which takes it apart at once: [`serve_accepted`]).
struct Accepted {
    stream: TcpStream,
    /// The socket's peer address (the balancer's, with PROXY protocol).
    peer: SocketAddr,
    /// The listener's PROXY protocol, when it takes a header first.
    inbound: Option<Arc<crate::proxy_protocol::Inbound>>,
    /// Counts the connection open until its task ends.
    guard: OpenGuard,
    current: Arc<Current>,
    watcher: hyper_util::server::graceful::Watcher,
}

/// One connection's task: the TLS handshake when the listener has TLS,
/// then hyper's HTTP/2 server (h2c's preface, ALPN `h2`) or hopgate's own
/// HTTP/1.1 server (everything else).
///
/// An idle HTTP/1.1 connection's memory is mostly this task, sized by its
/// largest state: so the connection comes in a box (an `async fn`, or a
/// block's capture, would keep its fields in the task for its whole
/// life: rust-lang/rust#62958), what only another state needs (hyper's
/// connection, the TLS handshake, the PROXY protocol header's read) runs
/// in a box of its own, and the HTTP/1.1 server starts with only what it
/// needs (the listener's share dropped).
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn serve_accepted(a: Box<Accepted>) -> impl Future<Output = ()> + Send {
    async move {
        let Accepted {
            stream,
            peer,
            inbound,
            guard: _guard,
            current,
            watcher,
        } = unbox(a);
        // The address a PROXY protocol header carries replaces the socket's
        // for everything downstream (read before TLS: the header comes
        // first).
        let (stream, peer) = match inbound {
            None => (stream, peer),
            Some(pp) => match Box::pin(proxy_header(pp, stream, peer)).await {
                Some(read) => read,
                None => return,
            },
        };
        // `limits.max_connections_per_client`: held until the connection
        // ends.
        let Some(_place) = admit_client(&current, peer) else {
            return;
        };
        let conn = ClientConn::new(
            Arc::clone(&current.forwarder),
            peer,
            Arc::clone(&current.req_ctx),
        );
        let svc = ConnService(Arc::new(conn));
        let (first_bytes, stall) = (
            current.settings.header_read_timeout,
            current.settings.idle_timeout,
        );
        let next = match current.tls.clone() {
            // The handshake and its stream, boxed: neither sizes the task
            // of every connection.
            Some(tls) => Box::pin(handshake(tls, stream, first_bytes, stall)).await,
            // h2c (the preface) goes to hyper; everything else is HTTP/1.x
            // for hopgate's own server.
            None => sniff(Box::new(ClientIo::new(stream, first_bytes, stall))).await,
        };
        // HTTP/2 boxed (`gathered` boxes what it runs): hyper's connection
        // state is a few KiB, and in the task itself it would size every
        // HTTP/1.1 connection's task too. Its writes gathered per turn of
        // its task: one socket write where h2 flushes each large DATA
        // frame ([`crate::coalesce`]).
        let builder = &current.builder;
        match next {
            Some(Next::H2c(io)) => {
                crate::coalesce::gathered(io, |io| serve_conn(builder, io, svc, watcher, peer))
                    .await;
            }
            Some(Next::H2(io)) => {
                crate::coalesce::gathered(io, |io| serve_conn(builder, io, svc, watcher, peer))
                    .await;
            }
            Some(Next::Http1(io, read)) => {
                drop(watcher);
                serve_native(io, read, svc, current).await;
            }
            None => {}
        }
    }
}

/// The PROXY protocol header's read (the stream handed back with the
/// client's address), in a box of its own: only such listeners' tasks
/// have this state.
async fn proxy_header(
    pp: Arc<crate::proxy_protocol::Inbound>,
    mut stream: TcpStream,
    peer: SocketAddr,
) -> Option<(TcpStream, SocketAddr)> {
    let client = pp.read(&mut stream, peer).await?;
    Some((stream, client))
}

/// `limits.max_connections_per_client`: the client's place (`Some(None)`
/// without the limit), `None` when it has too many connections.
fn admit_client(current: &Current, peer: SocketAddr) -> Option<Option<hopgate_core::limit::Held>> {
    let limiter = current.forwarder.snapshot().load().connections.clone();
    crate::limit::admit_connection(limiter.as_ref(), peer)
}

/// The value in a box, the box freed (a `*boxed` move in the task would
/// free it only when the task ends).
#[allow(clippy::boxed_local)] // what it is for
fn unbox<T>(b: Box<T>) -> T {
    *b
}

/// A TLS client's handshake (within the first-bytes deadline): its
/// stream with the connection's deadlines, for hyper when it chose `h2`.
async fn handshake(
    tls: Arc<ListenerTlsState>,
    stream: TcpStream,
    first_bytes: Duration,
    stall: Duration,
) -> Option<Next> {
    let stream = crate::tls::accept(&tls, stream, first_bytes).await?;
    let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = Box::new(ClientIo::new(stream, first_bytes, stall));
    Some(if h2 {
        Next::H2(io)
    } else {
        Next::Http1(io, bytes::BytesMut::new())
    })
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

/// A connection's protocol, told from its first bytes (or TLS ALPN),
/// with its stream.
enum Next {
    /// The HTTP/2 preface: hyper's, with the bytes read so far replayed.
    H2c(crate::tunnel::ReadAhead<Box<ClientIo<TcpStream>>>),
    /// ALPN `h2`: hyper's.
    H2(Box<TlsClientIo>),
    /// Anything else: HTTP/1.x, with the bytes read so far.
    Http1(Box<dyn crate::h1::ClientStream>, bytes::BytesMut),
}

/// Reads until the first bytes tell h2c's preface from HTTP/1.x (the
/// first-bytes deadline is `ClientIo`'s); `None` when the client closed
/// or timed out first.
async fn sniff(mut io: Box<ClientIo<TcpStream>>) -> Option<Next> {
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
            return Some(Next::Http1(io, buf));
        }
        if n == PREFACE.len() {
            let read_ahead = buf.freeze();
            return Some(Next::H2c(crate::tunnel::ReadAhead { read_ahead, io }));
        }
    }
}

/// Serves one client connection with hopgate's own HTTP/1.1 server until
/// it ends, with what it needs of the listener's `current` (the rest let
/// go before it starts). The connection's send-stall sweep is not run:
/// only HTTP/2 streams are watched ([`crate::send_watch`]), and this
/// server speaks HTTP/1.x only.
fn serve_native(
    io: Box<dyn crate::h1::ClientStream>,
    read: bytes::BytesMut,
    svc: ConnService,
    current: Arc<Current>,
) -> impl Future<Output = ()> + Send {
    let (settings, drain) = (Arc::clone(&current.h1), Arc::clone(&current.drain));
    drop(current);
    crate::h1::server::serve(io, read, svc.0, settings, drain)
}

/// Resolves once shutdown has been requested.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A listener's open connections: their count (`max_connections`) and
/// the wake-up of a drain waiting for the last one to end.
#[derive(Default)]
struct Open {
    count: AtomicUsize,
    none: Notify,
}

impl Open {
    /// Resolves once no connection is open.
    async fn closed(&self) {
        loop {
            let none = self.none.notified();
            let mut none = std::pin::pin!(none);
            none.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            none.await;
        }
    }
}

struct OpenGuard(Arc<Open>);

impl OpenGuard {
    fn new(open: &Arc<Open>) -> OpenGuard {
        open.count.fetch_add(1, Ordering::Relaxed);
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
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none.notify_waiters();
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future a function returns.
    fn future_of<A, F: Future>(_: fn(A) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    fn future_of5<A, B, C, D, E, F: Future>(_: fn(A, B, C, D, E) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// An idle HTTP/1.1 connection's memory is mostly its task, sized by
    /// the largest state of its future: it stays small (a debug build's
    /// sizes, somewhat above a release build's; 1,768 bytes for the task
    /// and 880 for the HTTP/1.1 loop before `idle2k`). A bound crossed
    /// here is a field kept across an await that need not be (an `async
    /// fn`'s arguments, a borrowed local whose scope runs on).
    #[test]
    fn connection_futures_stay_small() {
        let task = future_of(serve_accepted);
        let h1 = future_of5(crate::h1::server::serve::<Arc<ClientConn>>);
        assert!(task <= 512, "the connection task's future: {task} bytes");
        assert!(h1 <= 320, "the HTTP/1.1 loop's future: {h1} bytes");
        let io = std::mem::size_of::<ClientIo<TcpStream>>();
        assert!(io <= 64, "ClientIo: {io} bytes");
    }
}
