//! Per-node upstream connection pools, built on hyper's low-level
//! `client::conn` handshakes so the gateway controls every connection.
//!
//! Owns: dialing, the idle set, connection states and the pool operations
//! the control plane needs for maintenance handoff — [`Pool::evict_idle`],
//! [`Pool::mark_all_for_replacement`] and [`Pool::drain`]. HTTP/1.1
//! connections carry one request at a time and return to the idle set when
//! their response body has been read to the end; HTTP/2 (h2c) connections
//! are shared and multiplexed.
//!
//! Classifies failures by whether the request could have reached the
//! backend ([`SendFailure::NotSent`] hands the request back untouched, so any
//! method may be retried elsewhere).
//!
//! Admission (`pool.max_connections`, `max_pending`, `queue_timeout`) is
//! [`crate::admission`]'s: a new connection needs a [`Permit`], which its
//! driver holds until the connection ends (so a slot is freed whatever
//! closes it: the backend, the idle timeout, an eviction, a drain's
//! deadline); a request that finds every slot taken queues, and a
//! connection given back while someone waits goes to the first waiter
//! instead of the idle set. A full queue or a wait that timed out is
//! [`SendFailure::NotSent`] with a busy kind: load, not the node's failure.
//!
//! Must not touch: routing, balancing, retry policy (the caller decides).
//! The idle set is a lock-free queue and the registry of connection drivers
//! (which a drain's deadline aborts) a lock-free map touched only when a
//! connection opens or closes; the only lock is the HTTP/2 dial lock, taken
//! when no usable HTTP/2 connection exists.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use crossbeam_queue::ArrayQueue;
use hopgate_core::config::{PoolLimits, UpstreamProtocol};
use hopgate_core::error::{ErrorKind, ProxyError};
use hopgate_core::snapshot::{CompiledService, Snapshot};
use http::{Request, Response};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::admission::{Admission, Grant, Permit};
use crate::body::ProxyBody;

mod admit;
use admit::Handoff;

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

/// Facts about one connection shared with its driver task.
#[derive(Debug)]
pub(crate) struct ConnMeta {
    pub id: u64,
    pub addr: SocketAddr,
    pub generation: u64,
    state: AtomicU8,
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
}

struct H1Conn {
    meta: Arc<ConnMeta>,
    sender: http1::SendRequest<ProxyBody>,
}

struct IdleConn {
    conn: H1Conn,
    since: Instant,
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
    /// HTTP/2: the backend refused the stream (REFUSED_STREAM, or a stream
    /// above its GOAWAY's last-stream-id): it never processed the request,
    /// but the request itself was consumed. Safe to replay from a copy.
    Refused(ProxyError),
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
    idle: ArcSwap<ArrayQueue<IdleConn>>,
    h2: ArcSwapOption<H2Conn>,
    h2_dial: tokio::sync::Mutex<()>,
    /// Connections older than this generation are not reused.
    generation: AtomicU64,
    /// Connections below this generation are closed (their drivers
    /// aborted) once a drain's deadline has passed.
    kill_below: Arc<AtomicU64>,
    /// Every running connection driver, by connection id: its generation
    /// and the handle that aborts it. Touched when a connection opens or
    /// closes and by a drain's deadline, never per request (a driver that
    /// polled a kill signal next to its connection paid for it on every
    /// wake-up).
    drivers: Arc<papaya::HashMap<u64, (u64, tokio::task::AbortHandle)>>,
    next_id: AtomicU64,
    open: Arc<AtomicUsize>,
    dialed: AtomicU64,
    dial_failures: AtomicU64,
    /// Connection slots and the queue of requests waiting for one.
    admission: Admission<Handoff>,
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
            idle: ArcSwap::from_pointee(ArrayQueue::new(max_idle.max(1))),
            h2: ArcSwapOption::empty(),
            h2_dial: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(1),
            kill_below: Arc::new(AtomicU64::new(0)),
            drivers: Arc::new(papaya::HashMap::new()),
            next_id: AtomicU64::new(1),
            open: Arc::new(AtomicUsize::new(0)),
            dialed: AtomicU64::new(0),
            dial_failures: AtomicU64::new(0),
            admission: Admission::new(&PoolLimits::default()),
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
        while let Some(idle) = q.pop() {
            idle.conn.meta.set(ConnState::Closed);
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
        let drivers = Arc::clone(&self.drivers);
        tokio::spawn(async move {
            tokio::time::sleep(deadline).await;
            kill_below.fetch_max(cut, Ordering::Relaxed);
            for (_, (generation, handle)) in drivers.pin().iter() {
                if *generation < cut {
                    handle.abort();
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

    /// Sends `req` to `addr` over a pooled or new connection.
    ///
    /// The common case — an idle HTTP/1.1 connection that is ready — runs
    /// inline with no nested future; waiting for a connection to become
    /// ready, dialling and HTTP/2 are boxed, so their (larger) futures do not
    /// sit inside every request's future.
    ///
    /// `now` is the caller's clock reading (for the idle-timeout check).
    pub async fn send(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Request<ProxyBody>,
        s: &PoolSettings,
        now: Instant,
    ) -> Result<Response<ProxyBody>, SendFailure> {
        self.admission.configure(&s.limits);
        if s.protocol == UpstreamProtocol::Http2 {
            return Box::pin(self.send_h2(addr, req, s)).await;
        }
        let mut req = req;
        while let Some(mut conn) = self.checkout_h1(addr, s, now) {
            if !conn.sender.is_ready() {
                // A pooled connection that turns out dead here was never
                // written to: moving on to the next one is always safe.
                let ready = tokio::time::timeout(s.connect_timeout, conn.sender.ready());
                if !matches!(Box::pin(ready).await, Ok(Ok(()))) {
                    conn.meta.set(ConnState::Closed);
                    continue;
                }
            }
            let fut = conn.sender.try_send_request(req);
            let result = tokio::time::timeout(s.request_timeout, fut).await;
            match self.finish_h1(conn, result) {
                Err(SendFailure::NotSent { request, .. }) => req = *request,
                other => return other,
            }
        }
        Box::pin(self.dial_and_send_h1(addr, req, s)).await
    }

    /// Gives an HTTP/1.1 connection to the first request waiting for one,
    /// or puts it in the idle set (closing it when the set is full).
    fn park(&self, conn: H1Conn) {
        let mut conn = conn;
        loop {
            conn.meta.set(ConnState::Idle);
            match self.admission.offer(Handoff::H1(conn)) {
                Ok(()) => return,
                Err(Handoff::H1(c)) => conn = c,
                Err(Handoff::H2) => return,
            }
            let idle = IdleConn {
                conn,
                since: Instant::now(),
            };
            let queue = self.idle.load();
            if let Err(rejected) = queue.push(idle) {
                rejected.conn.meta.set(ConnState::Closed);
                return;
            }
            // A request may have queued between the offer and the push;
            // it looked at the idle set before this push or it is seen here.
            if !self.admission.has_waiters() {
                return;
            }
            match queue.pop() {
                Some(idle) => conn = idle.conn,
                None => return,
            }
        }
    }

    /// Takes an idle HTTP/1.1 connection to `addr` that may be reused,
    /// closing the stale ones it meets.
    fn checkout_h1(&self, addr: SocketAddr, s: &PoolSettings, now: Instant) -> Option<H1Conn> {
        let generation = self.generation.load(Ordering::Relaxed);
        let queue = self.idle.load();
        if queue.capacity() != s.max_idle.max(1) {
            // A reload changed the pool size: start a queue of the new size;
            // the old one's connections close as it is dropped.
            self.idle
                .store(Arc::new(ArrayQueue::new(s.max_idle.max(1))));
        }
        while let Some(idle) = queue.pop() {
            let conn = idle.conn;
            if conn.meta.addr != addr
                || conn.meta.generation < generation
                || now.saturating_duration_since(idle.since) > s.idle_timeout
                || conn.sender.is_closed()
            {
                conn.meta.set(ConnState::Closed);
                continue;
            }
            conn.meta.set(ConnState::InUse);
            return Some(conn);
        }
        None
    }

    async fn dial_and_send_h1(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Request<ProxyBody>,
        s: &PoolSettings,
    ) -> Result<Response<ProxyBody>, SendFailure> {
        let mut req = req;
        loop {
            let (mut conn, reused) = match self.obtain_h1(addr, s).await {
                Ok(c) => c,
                Err(error) => {
                    return Err(SendFailure::NotSent {
                        request: Box::new(req),
                        error,
                    })
                }
            };
            if reused && !conn.sender.is_ready() {
                // Like a checkout: a handed-over connection that turns out
                // dead was never written to.
                let ready = tokio::time::timeout(s.connect_timeout, conn.sender.ready()).await;
                if !matches!(ready, Ok(Ok(()))) {
                    conn.meta.set(ConnState::Closed);
                    continue;
                }
            }
            let fut = conn.sender.try_send_request(req);
            let result = tokio::time::timeout(s.request_timeout, fut).await;
            match self.finish_h1(conn, result) {
                Err(SendFailure::NotSent { request, .. }) if reused => req = *request,
                other => return other,
            }
        }
    }

    /// Classifies the outcome of one HTTP/1.1 exchange; the connection goes
    /// with the response body (back to the pool when it is read to the end)
    /// or is closed.
    fn finish_h1(
        self: &Arc<Self>,
        conn: H1Conn,
        result: Result<
            Result<
                Response<hyper::body::Incoming>,
                hyper::client::conn::TrySendError<Request<ProxyBody>>,
            >,
            tokio::time::error::Elapsed,
        >,
    ) -> Result<Response<ProxyBody>, SendFailure> {
        match result {
            Err(_) => {
                conn.meta.set(ConnState::Closed);
                Err(SendFailure::Sent(ProxyError::new(
                    ErrorKind::UpstreamTimeout,
                )))
            }
            Ok(Ok(resp)) => {
                let (parts, body) = resp.into_parts();
                // An upgraded connection leaves the pool for good.
                let conn = if parts.status == http::StatusCode::SWITCHING_PROTOCOLS {
                    conn.meta.set(ConnState::Closed);
                    None
                } else {
                    Some(conn)
                };
                let returner = Returner {
                    pool: Arc::clone(self),
                    conn,
                };
                Ok(Response::from_parts(
                    parts,
                    ProxyBody::upstream(body, returner),
                ))
            }
            Ok(Err(mut e)) => {
                conn.meta.set(ConnState::Closed);
                match e.take_message() {
                    Some(request) => Err(SendFailure::NotSent {
                        request: Box::new(request),
                        error: ProxyError::with_detail(ErrorKind::ConnectionLost, e.error()),
                    }),
                    None => Err(SendFailure::Sent(classify(&e.into_error()))),
                }
            }
        }
    }

    async fn dial(&self, addr: SocketAddr, s: &PoolSettings) -> Result<TcpStream, ProxyError> {
        let res = tokio::time::timeout(s.connect_timeout, TcpStream::connect(addr)).await;
        let stream = match res {
            Err(_) => Err(ProxyError::with_detail(ErrorKind::ConnectTimeout, addr)),
            Ok(Err(e)) => Err(ProxyError::with_detail(
                ErrorKind::ConnectFailed,
                format_args!("{addr}: {e}"),
            )),
            Ok(Ok(s)) => Ok(s),
        };
        match stream {
            Ok(s) => {
                let _ = s.set_nodelay(true);
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
        })
    }

    async fn dial_h1(
        &self,
        addr: SocketAddr,
        s: &PoolSettings,
        generation: u64,
        permit: Permit<Handoff>,
    ) -> Result<H1Conn, ProxyError> {
        let stream = self.dial(addr, s).await?;
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ProxyError::with_detail(ErrorKind::ConnectFailed, e))?;
        let meta = self.new_meta(addr, generation);
        self.spawn_driver(meta.clone(), permit, async move {
            let _ = conn.with_upgrades().await;
        });
        Ok(H1Conn { meta, sender })
    }

    /// Runs a connection until it ends or [`Pool::drain`] aborts it; its
    /// slot is freed then (an upgraded connection leaves the pool, and its
    /// slot, when its driver hands it over).
    fn spawn_driver(
        &self,
        meta: Arc<ConnMeta>,
        permit: Permit<Handoff>,
        conn: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.open.fetch_add(1, Ordering::Relaxed);
        let id = meta.id;
        let generation = meta.generation;
        let guard = DriverGuard {
            meta,
            open: Arc::clone(&self.open),
            drivers: Arc::clone(&self.drivers),
            _permit: permit,
        };
        let task = tokio::spawn(async move {
            let _guard = guard;
            conn.await;
        });
        self.drivers
            .pin()
            .insert(id, (generation, task.abort_handle()));
        // The connection may already have ended (its guard found nothing to
        // remove), or a drain's deadline may have passed while it was dialled.
        if task.is_finished() {
            self.drivers.pin().remove(&id);
        } else if generation < self.kill_below.load(Ordering::Relaxed) {
            task.abort();
        }
    }

    async fn send_h2(
        self: &Arc<Self>,
        addr: SocketAddr,
        req: Request<ProxyBody>,
        s: &PoolSettings,
    ) -> Result<Response<ProxyBody>, SendFailure> {
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
                let returner = Returner {
                    pool: Arc::clone(self),
                    conn: None,
                };
                Ok(Response::from_parts(
                    parts,
                    ProxyBody::upstream(body, returner),
                ))
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

/// Marks a connection closed and forgets its driver when the driver ends,
/// whether its connection finished or a drain aborted it.
struct DriverGuard {
    meta: Arc<ConnMeta>,
    open: Arc<AtomicUsize>,
    drivers: Arc<papaya::HashMap<u64, (u64, tokio::task::AbortHandle)>>,
    /// The connection's slot, freed when the driver ends.
    _permit: Permit<Handoff>,
}

impl Drop for DriverGuard {
    fn drop(&mut self) {
        self.meta.set(ConnState::Closed);
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.drivers.pin().remove(&self.meta.id);
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

/// Gives an HTTP/1.1 connection back to its pool once its response body
/// has been read to the end. Dropping it without [`Returner::give_back`]
/// closes the connection (the body was not fully read, so it cannot be
/// reused).
pub struct Returner {
    pool: Arc<Pool>,
    conn: Option<H1Conn>,
}

impl std::fmt::Debug for Returner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Returner")
            .field("conn", &self.conn.as_ref().map(|c| c.meta.id))
            .finish()
    }
}

impl Returner {
    pub fn give_back(mut self) {
        let Some(conn) = self.conn.take() else { return };
        let pool = &self.pool;
        if conn.meta.generation < pool.generation.load(Ordering::Relaxed)
            || conn.meta.state() == ConnState::Unusable
            || conn.sender.is_closed()
        {
            conn.meta.set(ConnState::Closed);
            return;
        }
        pool.park(conn);
    }
}

impl Drop for Returner {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            c.meta.set(ConnState::Closed);
        }
    }
}

#[cfg(test)]
mod tests {
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
    /// on their size (dialling, readiness waits and HTTP/2 are boxed so
    /// their futures stay out; ~1 KB in the 2026-11-29 build).
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
        };
        let req = Request::new(ProxyBody::Empty);
        let fut = pool.send(
            "127.0.0.1:9".parse().unwrap(),
            req,
            &settings,
            Instant::now(),
        );
        let size = std::mem::size_of_val(&fut);
        assert!(size < 2048, "Pool::send future is {size} bytes");
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
        };
        let sending = {
            let pool = Arc::clone(&pool);
            tokio::spawn(async move {
                let req = Request::builder()
                    .uri("/slow")
                    .header("host", "x")
                    .body(ProxyBody::Empty)
                    .unwrap();
                pool.send(addr, req, &settings, Instant::now()).await
            })
        };
        // Wait until the connection is open and busy.
        while pool.stats().open == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.drivers.pin().len(), 1);
        pool.drain(Duration::from_millis(50));
        let result = tokio::time::timeout(Duration::from_secs(10), sending)
            .await
            .expect("the busy request ends once the drain deadline passes")
            .unwrap();
        assert!(matches!(result, Err(SendFailure::Sent(_))), "{result:?}");
        tokio::time::timeout(Duration::from_secs(10), closed_rx)
            .await
            .expect("the backend sees the connection closed")
            .unwrap();
        assert_eq!(pool.stats().open, 0);
        assert_eq!(pool.drivers.pin().len(), 0);
    }
}
