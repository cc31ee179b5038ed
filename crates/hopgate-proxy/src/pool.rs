//! Per-node upstream connection pools. HTTP/1.1 connections are raw
//! sockets spoken to by hopgate's own codec ([`crate::h1::client`]) from
//! the request's task; HTTP/2 (h2c) connections are hyper's
//! `client::conn::http2`, driven by a task of their own.
//!
//! Owns: dialing, the idle set, connection states and the pool operations
//! the control plane needs for maintenance handoff — [`Pool::evict_idle`],
//! [`Pool::mark_all_for_replacement`] and [`Pool::drain`]. HTTP/1.1
//! connections carry one request at a time and return to the idle set when
//! their response body has been read to the end; HTTP/2 (h2c) connections
//! are shared and multiplexed.
//!
//! A pool whose service has a `tls` block dials through the service's
//! [`UpstreamConnector`] (handed over by the control plane with each
//! applied config, [`Pool::set_tls`]): HTTP/1.1 sockets are then
//! [`UpstreamIo::Tls`], HTTP/2 connections run over TLS with ALPN `h2`. The
//! handshake is part of dialling (within `timeouts.connect`); connections
//! are pooled the same way.
//!
//! Classifies failures by whether the request could have reached the
//! backend ([`SendFailure::NotSent`] hands the request back untouched, so any
//! method may be retried elsewhere).
//!
//! Admission (`pool.max_connections`, `max_pending`, `queue_timeout`) is
//! [`crate::admission`]'s: a new connection needs a [`Permit`], held by
//! the connection's registry entry until the connection ends (so a slot is
//! freed whatever closes it: the backend, the idle timeout, an eviction, a
//! drain's deadline, an upgrade taking the socket); a request that finds
//! every slot taken queues, and a connection given back while someone
//! waits goes to the first waiter instead of the idle set. A full queue or
//! a wait that timed out is [`SendFailure::NotSent`] with a busy kind:
//! load, not the node's failure.
//!
//! Must not touch: routing, balancing, retry policy (the caller decides).
//! The idle set ([`idle`]) is lock-free and hands out the most recently
//! used connection first (idle ones it leaves over are swept at
//! `idle_timeout`); the registry of live connections
//! (which a drain's deadline closes: HTTP/2 drivers are aborted, HTTP/1.1
//! connections get their kill flag set and their current waiter woken) a
//! lock-free map touched only when a connection opens or closes; the only
//! lock is the HTTP/2 dial lock, taken when no usable HTTP/2 connection
//! exists.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::BytesMut;
use futures_util::task::AtomicWaker;
use hopgate_core::config::{PoolLimits, UpstreamProtocol};
use hopgate_core::error::{ErrorKind, ProxyError};
use hopgate_core::snapshot::{CompiledService, Snapshot};
use http::{Request, Response};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::headers::SetLines;

use crate::admission::{Admission, Grant, Permit};
use crate::body::ProxyBody;
use crate::h1::client as h1;
use crate::tls::{UpstreamConnector, UpstreamIo};

mod admit;
pub(crate) mod conn;
mod idle;
mod sending;
use admit::Handoff;
use conn::is_stale;
pub(crate) use conn::H1Conn;
use idle::IdleSet;

/// How often a pool in use looks at the idle connections its checkouts
/// do not reach ([`Pool::sweep_if_due`]).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How a pool dials and keeps connections; read from the snapshot on every
/// request so reloads apply at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    pub protocol: UpstreamProtocol,
    pub max_idle: usize,
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    /// Until the response head arrives.
    pub request_timeout: Duration,
    /// Connections per node and the queue for them.
    pub limits: PoolLimits,
    /// `services[].proxy_protocol`: the header each new connection starts
    /// with, and the client it names; a pooled connection is reused only
    /// for the client address it was opened for.
    pub proxy_protocol: Option<crate::proxy_protocol::SendProxy>,
}

impl PoolSettings {
    /// A service's settings under a snapshot: the one place they are built
    /// (the request path, and the maintenance handoff through
    /// [`PoolSettings::relaxed`]).
    pub fn of<U>(snap: &Snapshot<U>, svc: &CompiledService<U>) -> PoolSettings {
        let t = &snap.config.timeouts;
        PoolSettings {
            protocol: svc.protocol,
            max_idle: svc.pool.max_idle,
            idle_timeout: svc.pool.idle_timeout,
            connect_timeout: t.connect,
            request_timeout: t.request,
            limits: svc.pool.limits,
            proxy_protocol: svc
                .proxy_protocol
                .map(crate::proxy_protocol::SendProxy::without_client),
        }
    }

    /// Maintenance: every timeout raised to at least `relaxed`, so slow
    /// answers are not failures.
    pub fn relaxed(self, relaxed: Duration) -> PoolSettings {
        PoolSettings {
            idle_timeout: self.idle_timeout.max(relaxed),
            connect_timeout: self.connect_timeout.max(relaxed),
            request_timeout: self.request_timeout.max(relaxed),
            ..self
        }
    }
}

/// The explicit state of one upstream connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    Idle = 0,
    InUse = 1,
    /// Marked for replacement: finishes its current request, then closes.
    Unusable = 2,
    Closed = 3,
}

/// Facts about one connection shared with whatever runs it (an HTTP/2
/// driver task, or the request that has an HTTP/1.1 connection checked
/// out) and with the pool's registry.
#[derive(Debug)]
pub(crate) struct ConnMeta {
    pub id: u64,
    pub addr: SocketAddr,
    pub generation: u64,
    state: AtomicU8,
    /// Set by a drain's deadline: whoever uses the connection stops.
    killed: AtomicBool,
    /// The task waiting on the connection, woken when it is killed
    /// (lock-free).
    waker: AtomicWaker,
}

impl ConnMeta {
    pub(crate) fn state(&self) -> ConnState {
        match self.state.load(Ordering::Relaxed) {
            0 => ConnState::Idle,
            1 => ConnState::InUse,
            2 => ConnState::Unusable,
            _ => ConnState::Closed,
        }
    }

    fn set(&self, s: ConnState) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// Has a drain's deadline closed this connection?
    pub(crate) fn killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Wakes `waker` when the connection is killed. Register, then look
    /// at [`ConnMeta::killed`]: a kill in between still wakes the task.
    pub(crate) fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }

    fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.waker.wake();
    }
}

struct H2Conn {
    meta: Arc<ConnMeta>,
    sender: http2::SendRequest<ProxyBody>,
}

/// Why a send failed, and whether the request may still be sent elsewhere.
#[derive(Debug)]
pub enum SendFailure {
    /// The request never reached the backend; here it is, untouched.
    NotSent {
        request: Box<Request<ProxyBody>>,
        error: ProxyError,
    },
    /// The request may have reached the backend.
    Sent(ProxyError),
    /// The request may have reached the backend (HTTP/1.1); its head comes
    /// back as it was sent, so that a replay needs no copy made before the
    /// send.
    SentWithHead(ProxyError, Box<http::request::Parts>),
    /// HTTP/2: the backend refused the stream (REFUSED_STREAM, or a stream
    /// above its GOAWAY's last-stream-id): it never processed the request,
    /// but the request itself was consumed. Safe to replay from a copy.
    Refused(ProxyError),
}

impl From<h1::Failure<ProxyBody>> for SendFailure {
    fn from(f: h1::Failure<ProxyBody>) -> SendFailure {
        match f {
            h1::Failure::NotSent { request, error } => SendFailure::NotSent { request, error },
            h1::Failure::Sent {
                error,
                head: Some(head),
            } => SendFailure::SentWithHead(error, head),
            h1::Failure::Sent { error, head: None } => SendFailure::Sent(error),
        }
    }
}

/// Counters of one pool, for the admin API and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    pub open: usize,
    pub idle: usize,
    pub dialed: u64,
    pub dial_failures: u64,
    pub generation: u64,
    /// Requests waiting for a connection now.
    pub queued: usize,
    /// Requests that had to wait for a connection, ever.
    pub queue_waits: u64,
    /// Requests refused because `max_pending` were waiting already.
    pub queue_full: u64,
    /// Requests that waited `queue_timeout` in vain.
    pub queue_timeouts: u64,
}

/// The connection pool of one node.
pub struct Pool {
    /// Parked HTTP/1.1 connections, the most recently used first.
    idle: ArcSwap<IdleSet<H1Conn>>,
    /// When the idle set is next swept for connections past
    /// `idle_timeout` or closed by the backend, in ms since `born`.
    next_sweep_ms: AtomicU64,
    born: Instant,
    h2: ArcSwapOption<H2Conn>,
    h2_dial: tokio::sync::Mutex<()>,
    /// Connections older than this generation are not reused.
    generation: AtomicU64,
    /// Connections below this generation are closed once a drain's
    /// deadline has passed.
    kill_below: Arc<AtomicU64>,
    /// Every open connection, by id: its generation and how to close it.
    /// Touched when a connection opens or closes and by a drain's deadline,
    /// never per request.
    live: Arc<Registry>,
    next_id: AtomicU64,
    open: Arc<AtomicUsize>,
    dialed: AtomicU64,
    dial_failures: AtomicU64,
    /// Connection slots and the queue of requests waiting for one.
    admission: Admission<Handoff>,
    /// The service's TLS client (`services[].tls`), read once per dial.
    tls: ArcSwapOption<UpstreamConnector>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("stats", &self.stats())
            .finish()
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(hopgate_core::config::DEFAULT_POOL_MAX_IDLE)
    }
}

impl Pool {
    pub fn new(max_idle: usize) -> Pool {
        Pool {
            idle: ArcSwap::from_pointee(IdleSet::new(max_idle)),
            next_sweep_ms: AtomicU64::new(SWEEP_EVERY.as_millis() as u64),
            born: Instant::now(),
            h2: ArcSwapOption::empty(),
            h2_dial: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(1),
            kill_below: Arc::new(AtomicU64::new(0)),
            live: Arc::new(papaya::HashMap::new()),
            next_id: AtomicU64::new(1),
            open: Arc::new(AtomicUsize::new(0)),
            dialed: AtomicU64::new(0),
            dial_failures: AtomicU64::new(0),
            admission: Admission::new(&PoolLimits::default()),
            tls: ArcSwapOption::empty(),
        }
    }

    /// The TLS client new connections are made with, if any.
    pub fn tls(&self) -> Option<Arc<UpstreamConnector>> {
        self.tls.load_full()
    }

    /// Sets how new connections are made: over TLS with `tls`, or plain.
    /// A change (other files, other settings, TLS turned on or off) marks
    /// the open connections for replacement; the same files and settings
    /// keep them.
    pub fn set_tls(&self, tls: Option<Arc<UpstreamConnector>>) {
        let old = self.tls.load();
        let same = match (old.as_deref(), tls.as_deref()) {
            (None, None) => true,
            (Some(a), Some(b)) => a.same_as(b),
            _ => false,
        };
        if !same {
            self.tls.store(tls);
            self.mark_all_for_replacement();
        }
    }

    pub fn stats(&self) -> PoolStats {
        let a = self.admission.stats();
        PoolStats {
            queued: a.queued,
            queue_waits: a.waits,
            queue_full: a.rejected_full,
            queue_timeouts: a.rejected_timeout,
            open: self.open.load(Ordering::Relaxed),
            idle: self.idle.load().len(),
            dialed: self.dialed.load(Ordering::Relaxed),
            dial_failures: self.dial_failures.load(Ordering::Relaxed),
            generation: self.generation.load(Ordering::Relaxed),
        }
    }

    /// Closes every idle connection now.
    pub fn evict_idle(&self) -> usize {
        let q = self.idle.load();
        let mut n = 0;
        while let Some(conn) = q.pop() {
            conn.meta.set(ConnState::Closed);
            n += 1;
        }
        n
    }

    /// Every existing connection is replaced: idle ones are closed now, busy
    /// ones finish their request and are closed instead of being reused.
    /// New requests get new connections.
    pub fn mark_all_for_replacement(&self) {
        self.generation.fetch_add(1, Ordering::Relaxed);
        self.evict_idle();
        if let Some(h2) = self.h2.swap(None) {
            h2.meta.set(ConnState::Unusable);
        }
    }

    /// Replaces every connection (see [`Pool::mark_all_for_replacement`])
    /// and, once `deadline` has passed, closes any old connection still
    /// busy. Requests started after this call use new connections. Returns
    /// how many idle connections were closed (a handoff re-dials as many).
    pub fn drain(self: &Arc<Self>, deadline: Duration) -> usize {
        self.generation.fetch_add(1, Ordering::Relaxed);
        let evicted = self.evict_idle();
        if let Some(h2) = self.h2.swap(None) {
            h2.meta.set(ConnState::Unusable);
        }
        let cut = self.generation.load(Ordering::Relaxed);
        let kill_below = Arc::clone(&self.kill_below);
        let live = Arc::clone(&self.live);
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            kill_below.fetch_max(cut, Ordering::Relaxed);
            for (_, (generation, closer)) in live.pin().iter() {
                if *generation < cut {
                    closer.close();
                }
            }
        });
        evicted
    }

    /// Dials `addr` now and parks the connection as idle (or as the shared
    /// HTTP/2 connection), so the next request finds it warm. Used by the
    /// maintenance handoff to move a node's connections to its new address.
    pub async fn prewarm(
        &self,
        addr: SocketAddr,
        settings: &PoolSettings,
    ) -> Result<(), ProxyError> {
        self.admission.configure(&settings.limits);
        let generation = self.generation.load(Ordering::Relaxed);
        let permit = match self.admit(settings.limits.queue_timeout).await? {
            Grant::Slot(permit) => permit,
            // A connection is free already: it stays warm for the next
            // request (or the next waiter).
            Grant::Handoff(Handoff::H1(conn)) => {
                self.park(conn);
                return Ok(());
            }
            Grant::Handoff(Handoff::H2) => return Ok(()),
        };
        match settings.protocol {
            UpstreamProtocol::Http1 => {
                let conn = self.dial_h1(addr, settings, generation, permit).await?;
                self.park(conn);
            }
            UpstreamProtocol::Http2 => {
                let conn = self.dial_h2(addr, settings, generation, permit).await?;
                self.h2.store(Some(Arc::new(conn)));
                self.wake_h2_waiters();
            }
        }
        Ok(())
    }

    /// Gives an HTTP/1.1 connection to the first request waiting for one,
    /// or puts it in the idle set (closing it when the set is full).
    fn park(&self, conn: Box<H1Conn>) {
        let mut conn = conn;
        loop {
            conn.meta.set(ConnState::Idle);
            match self.admission.offer(Handoff::H1(conn)) {
                Ok(()) => return,
                Err(Handoff::H1(c)) => conn = c,
                Err(Handoff::H2) => return,
            }
            conn.idle_since = Instant::now();
            let queue = self.idle.load();
            if let Err(rejected) = queue.push(conn) {
                rejected.meta.set(ConnState::Closed);
                return;
            }
            // A request may have queued between the offer and the push;
            // it looked at the idle set before this push or it is seen here.
            if !self.admission.has_waiters() {
                return;
            }
            match queue.pop() {
                Some(idle) => conn = idle,
                None => return,
            }
        }
    }

    /// A connection whose response has been read to the end: parked for
    /// reuse unless it was marked for replacement.
    pub(crate) fn give_back(&self, conn: Box<H1Conn>) {
        if conn.meta.generation < self.generation.load(Ordering::Relaxed)
            || conn.meta.state() == ConnState::Unusable
            || conn.meta.killed()
        {
            conn.meta.set(ConnState::Closed);
            return;
        }
        self.park(conn);
    }

    /// Takes an idle HTTP/1.1 connection to `addr` that may be reused,
    /// closing the stale ones it meets.
    fn checkout_h1(&self, addr: SocketAddr, s: &PoolSettings, now: Instant) -> Option<Box<H1Conn>> {
        let generation = self.generation.load(Ordering::Relaxed);
        let queue = self.idle.load();
        if queue.capacity() != s.max_idle.max(1) {
            // A reload changed the pool size: start a set of the new size;
            // the old one's connections close as it is dropped.
            self.idle.store(Arc::new(IdleSet::new(s.max_idle)));
        }
        self.sweep_if_due(&queue, generation, s.idle_timeout, now);
        let usable = |conn: &mut Box<H1Conn>| {
            conn.meta.addr == addr
                && conn.meta.generation >= generation
                && now.saturating_duration_since(conn.idle_since) <= s.idle_timeout
                && !is_stale(conn)
        };
        if s.proxy_protocol.is_none() {
            // The common case, one branch: every connection serves every
            // client (one opened for the PROXY protocol before a reload
            // turned it off names a client: not reused).
            while let Some(mut conn) = queue.pop() {
                if usable(&mut conn) && conn.proxied_for.is_none() {
                    conn.meta.set(ConnState::InUse);
                    return Some(conn);
                }
                conn.meta.set(ConnState::Closed);
            }
            return None;
        }
        self.checkout_proxied(&queue, s, usable)
    }

    /// [`Pool::checkout_h1`] for a service that sends the PROXY protocol:
    /// a connection opened for this client; those opened for others are
    /// put back after the search (no allocation unless there are some).
    #[cold]
    fn checkout_proxied(
        &self,
        queue: &IdleSet<H1Conn>,
        s: &PoolSettings,
        mut usable: impl FnMut(&mut Box<H1Conn>) -> bool,
    ) -> Option<Box<H1Conn>> {
        let proxied_for = crate::proxy_protocol::client_ip(s.proxy_protocol);
        let mut others: Vec<Box<H1Conn>> = Vec::new();
        let mut found = None;
        while let Some(mut conn) = queue.pop() {
            if !usable(&mut conn) {
                conn.meta.set(ConnState::Closed);
                continue;
            }
            if conn.proxied_for != proxied_for {
                others.push(conn);
                continue;
            }
            conn.meta.set(ConnState::InUse);
            found = Some(conn);
            break;
        }
        for conn in others {
            if let Err(conn) = queue.push(conn) {
                conn.meta.set(ConnState::Closed);
            }
        }
        found
    }

    /// At most every [`SWEEP_EVERY`], closes the idle connections that
    /// checkouts do not reach (the most recent ones are reused first, so
    /// those a burst left over sit untouched): past `idle_timeout`, of an
    /// old generation, or closed or written to by the backend.
    fn sweep_if_due(
        &self,
        queue: &IdleSet<H1Conn>,
        generation: u64,
        idle_timeout: Duration,
        now: Instant,
    ) {
        let at = now.saturating_duration_since(self.born).as_millis() as u64;
        let due = self.next_sweep_ms.load(Ordering::Relaxed);
        if at < due
            || self
                .next_sweep_ms
                .compare_exchange(
                    due,
                    at + SWEEP_EVERY.as_millis() as u64,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        queue.retain(|conn| {
            let keep = conn.meta.generation >= generation
                && now.saturating_duration_since(conn.idle_since) <= idle_timeout
                && !is_stale(conn);
            if !keep {
                conn.meta.set(ConnState::Closed);
            }
            keep
        });
    }

    async fn dial_and_send_h1(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Box<Request<ProxyBody>>,
        set: &SetLines,
        s: &PoolSettings,
        head_for: crate::h1::HeadFor,
    ) -> Result<Box<Response<ProxyBody>>, SendFailure> {
        let mut req = req;
        loop {
            let (conn, reused) = match self.obtain_h1(addr, s).await {
                Ok(c) => c,
                Err(error) => {
                    return Err(SendFailure::NotSent {
                        request: req,
                        error,
                    })
                }
            };
            // A handed-over connection that turns out dead before any byte
            // was written hands the request back: try the next one.
            let deadline = tokio::time::Instant::now() + s.request_timeout;
            match h1::send(self, conn, req, set, deadline, head_for).await {
                Err(h1::Failure::NotSent { request, .. }) if reused => req = request,
                other => return other.map_err(SendFailure::from),
            }
        }
    }

    async fn dial(&self, addr: SocketAddr, s: &PoolSettings) -> Result<UpstreamIo, ProxyError> {
        let connect = async {
            let mut tcp = TcpStream::connect(addr).await?;
            // The PROXY header goes first, before TLS.
            if let Some(p) = s.proxy_protocol {
                crate::proxy_protocol::send(&mut tcp, p, addr).await?;
            }
            Ok::<_, std::io::Error>(tcp)
        };
        let res = tokio::time::timeout(s.connect_timeout, connect).await;
        let stream = match res {
            Err(_) => Err(ProxyError::with_detail(ErrorKind::ConnectTimeout, addr)),
            Ok(Err(e)) => Err(ProxyError::with_detail(
                ErrorKind::ConnectFailed,
                format_args!("{addr}: {e}"),
            )),
            Ok(Ok(s)) => Ok(s),
        };
        let stream = match stream {
            Ok(tcp) => {
                let _ = tcp.set_nodelay(true);
                match self.tls.load_full() {
                    None => Ok(UpstreamIo::Plain(tcp)),
                    Some(tls) => {
                        let hs = tokio::time::timeout(s.connect_timeout, tls.connect(addr, tcp));
                        match hs.await {
                            Ok(Ok(t)) => Ok(UpstreamIo::Tls(Box::new(t))),
                            Ok(Err(e)) => Err(ProxyError::with_detail(
                                ErrorKind::ConnectFailed,
                                format_args!("{addr}: tls: {e}"),
                            )),
                            Err(_) => Err(ProxyError::with_detail(
                                ErrorKind::ConnectTimeout,
                                format_args!("{addr}: tls handshake"),
                            )),
                        }
                    }
                }
            }
            Err(e) => Err(e),
        };
        match stream {
            Ok(s) => {
                self.dialed.fetch_add(1, Ordering::Relaxed);
                Ok(s)
            }
            Err(e) => {
                self.dial_failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    fn new_meta(&self, addr: SocketAddr, generation: u64) -> Arc<ConnMeta> {
        Arc::new(ConnMeta {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            addr,
            generation,
            state: AtomicU8::new(ConnState::InUse as u8),
            killed: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        })
    }

    async fn dial_h1(
        &self,
        addr: SocketAddr,
        s: &PoolSettings,
        generation: u64,
        permit: Permit<Handoff>,
    ) -> Result<Box<H1Conn>, ProxyError> {
        let io = self.dial(addr, s).await?;
        let meta = self.new_meta(addr, generation);
        let live = self.register(&meta, Closer::Conn(Arc::clone(&meta)), permit);
        // A drain's deadline may have passed while it was dialled.
        if generation < self.kill_below.load(Ordering::Relaxed) {
            meta.kill();
        }
        Ok(Box::new(H1Conn {
            meta,
            io,
            buf: BytesMut::new(),
            out: Vec::new(),
            timer: Default::default(),
            idle_since: Instant::now(),
            proxied_for: crate::proxy_protocol::client_ip(s.proxy_protocol),
            _live: live,
        }))
    }

    /// Counts a connection as open and enters it in the registry; the
    /// guard undoes both and frees the connection's slot.
    fn register(&self, meta: &Arc<ConnMeta>, closer: Closer, permit: Permit<Handoff>) -> LiveGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.live.pin().insert(meta.id, (meta.generation, closer));
        LiveGuard {
            meta: Arc::clone(meta),
            open: Arc::clone(&self.open),
            live: Arc::clone(&self.live),
            _permit: permit,
        }
    }

    /// Runs an HTTP/2 connection until it ends or [`Pool::drain`] aborts it.
    fn spawn_driver(
        &self,
        meta: Arc<ConnMeta>,
        permit: Permit<Handoff>,
        conn: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let (start, ready) = tokio::sync::oneshot::channel::<LiveGuard>();
        let task = tokio::spawn(async move {
            let _guard = ready.await;
            conn.await;
        });
        let guard = self.register(&meta, Closer::Task(task.abort_handle()), permit);
        if start.send(guard).is_err() {
            // The driver has already ended (the guard, handed back, undoes
            // the registration as it drops).
            return;
        }
        // A drain's deadline may have passed while it was dialled.
        if meta.generation < self.kill_below.load(Ordering::Relaxed) {
            task.abort();
        }
    }

    async fn send_h2(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Request<ProxyBody>,
        s: &PoolSettings,
    ) -> Result<Box<Response<ProxyBody>>, SendFailure> {
        let generation = self.generation.load(Ordering::Relaxed);
        let current = self.h2.load_full().filter(|c| {
            !c.sender.is_closed() && c.meta.addr == addr && c.meta.generation >= generation
        });
        let conn = match current {
            Some(c) => c,
            None => match self.obtain_h2(addr, s, generation).await {
                Ok(c) => c,
                Err(error) => {
                    return Err(SendFailure::NotSent {
                        request: Box::new(req),
                        error,
                    })
                }
            },
        };
        let mut sender = conn.sender.clone();
        let fut = sender.try_send_request(req);
        match tokio::time::timeout(s.request_timeout, fut).await {
            Err(_) => Err(SendFailure::Sent(ProxyError::new(
                ErrorKind::UpstreamTimeout,
            ))),
            Ok(Ok(resp)) => {
                let (parts, body) = resp.into_parts();
                Ok(Box::new(Response::from_parts(
                    parts,
                    ProxyBody::Upstream(body),
                )))
            }
            Ok(Err(mut e)) => {
                let refused = is_refused_stream(e.error());
                match e.take_message() {
                    Some(request) => Err(SendFailure::NotSent {
                        request: Box::new(request),
                        error: ProxyError::with_detail(ErrorKind::ConnectionLost, e.error()),
                    }),
                    None if refused => Err(SendFailure::Refused(ProxyError::with_detail(
                        ErrorKind::ConnectionLost,
                        "stream refused by the backend",
                    ))),
                    None => Err(SendFailure::Sent(classify(&e.into_error()))),
                }
            }
        }
    }

    async fn dial_h2(
        &self,
        addr: SocketAddr,
        s: &PoolSettings,
        generation: u64,
        permit: Permit<Handoff>,
    ) -> Result<H2Conn, ProxyError> {
        let stream = self.dial(addr, s).await?;
        let (sender, conn) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(20))
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ProxyError::with_detail(ErrorKind::ConnectFailed, e))?;
        let meta = self.new_meta(addr, generation);
        meta.set(ConnState::Idle);
        self.spawn_driver(meta.clone(), permit, async move {
            let _ = conn.await;
        });
        Ok(H2Conn { meta, sender })
    }
}

/// How a drain's deadline closes a connection.
#[derive(Debug)]
enum Closer {
    /// An HTTP/2 connection: its driver task is aborted.
    Task(tokio::task::AbortHandle),
    /// An HTTP/1.1 connection: its kill flag is set and its user woken.
    Conn(Arc<ConnMeta>),
}

impl Closer {
    fn close(&self) {
        match self {
            Closer::Task(handle) => handle.abort(),
            Closer::Conn(meta) => meta.kill(),
        }
    }
}

/// Open connections by id: generation and closer.
type Registry = papaya::HashMap<u64, (u64, Closer)>;

/// Marks a connection closed and takes it out of the registry when it
/// ends: an HTTP/1.1 connection dropped, an HTTP/2 driver finished or
/// aborted.
#[derive(Debug)]
struct LiveGuard {
    meta: Arc<ConnMeta>,
    open: Arc<AtomicUsize>,
    live: Arc<Registry>,
    /// The connection's slot, freed when the connection ends.
    _permit: Permit<Handoff>,
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.meta.set(ConnState::Closed);
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.live.pin().remove(&self.meta.id);
    }
}

/// Is this the error an HTTP/2 peer gives for a stream it never processed?
/// Decided by the h2 error found in hyper's source chain ([`refused`]).
fn is_refused_stream(e: &hyper::Error) -> bool {
    use std::error::Error as _;
    let mut src = e.source();
    while let Some(s) = src {
        if s.downcast_ref::<h2::Error>().is_some_and(refused) {
            return true;
        }
        src = s.source();
    }
    false
}

/// By its reason code: REFUSED_STREAM (as a stream reset or a connection
/// error), or the backend's graceful GOAWAY (NO_ERROR, sent by the peer)
/// failing a stream above its last-stream-id, which it never processed
/// (RFC 9113 §6.8).
fn refused(e: &h2::Error) -> bool {
    e.reason() == Some(h2::Reason::REFUSED_STREAM)
        || (e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR))
}

/// Maps a hyper error after the request may have been written.
fn classify(e: &hyper::Error) -> ProxyError {
    use std::error::Error as _;
    let mut src = e.source();
    while let Some(s) = src {
        if s.is::<crate::body::BodyTooLarge>() {
            return ProxyError::with_detail(ErrorKind::BodyTooLarge, s);
        }
        src = s.source();
    }
    let kind = if e.is_parse() || e.is_parse_status() {
        ErrorKind::UpstreamProtocol
    } else if e.is_timeout() {
        ErrorKind::UpstreamTimeout
    } else {
        ErrorKind::UpstreamReset
    };
    ProxyError::with_detail(kind, chain(e))
}

/// An error and all its sources, for logs.
fn chain(e: &hyper::Error) -> String {
    use std::error::Error as _;
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        text.push_str(": ");
        text.push_str(&s.to_string());
        src = s.source();
    }
    text
}

#[cfg(test)]
mod tests;
