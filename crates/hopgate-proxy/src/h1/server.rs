//! hopgate's own HTTP/1.1 server: one task per client connection reads
//! each request head with [`super::head::parse_request`], hands the request
//! to its [`Handler`] (the gateway's `ClientConn`), awaits the answer's
//! future in the same task and writes the response itself with
//! [`super::server_write`] (head, framing and body in as few vectored
//! writes as it can). This module keeps the connection loop.
//!
//! What it does, in the order of a request:
//!
//! - **Heads.** Ambiguous framing (a `Content-Length` next to a
//!   `Transfer-Encoding`, differing `Content-Length`s, a transfer coding
//!   other than one `chunked`, obsolete line folding, a bare LF, NUL or CR
//!   in a value) is answered 400 and never forwarded; a head past the
//!   listener's buffer limit or with too many lines, 431. The first bytes
//!   of a connection are bounded by the socket the caller hands over; a head
//!   begun and not finished within `timeouts.header_read` gets 408; an
//!   idle keep-alive connection is closed after `timeouts.idle`.
//! - **Bodies.** Content-Length and chunked request bodies (trailers
//!   included) stream to the forwarder as a [`ServerBody`], which writes
//!   `100 Continue` on its first read when the client asked for one.
//! - **Responses** ([`super::server_write`]). Content-Length, chunked
//!   (with trailers when the client sent `TE: trailers` and the response
//!   announces them in `Trailer`) or, for an HTTP/1.0 client and a body of
//!   unknown length, close-delimited; HEAD, 1xx, 204 and 304 answers carry
//!   no body.
//! - **Connections.** Keep-alive (HTTP/1.0 only when asked for), pipelined
//!   requests answered in order (the next head may already be in the
//!   buffer), a client that shuts its write side after a request still gets
//!   its answer, an upgrade answered 101 hands the socket (and any bytes
//!   read past the head) to whoever took the request's [`Upgrade`], and a
//!   draining listener or a closing handler closes the connection after
//!   the answer in flight (idle ones at once).
//! - **Idle memory.** A connection waiting for its next request holds no
//!   read buffer and no request block: both go back to the thread's spares
//!   ([`super::spare`]) when a request is done, and the next read borrows
//!   a buffer (kept only when bytes come: a partial head keeps it), the
//!   next request a block. What stays is the task (this loop's state, the
//!   exchange of a request being in the block), the socket and one timer
//!   (the idle wait's and a head's `header_read` clock at once). The
//!   loop's state is kept small: the serve future is a block, not an
//!   `async fn` (whose arguments would be kept twice), the head's wait is
//!   one `poll_fn` with no timer of its own, and the drain's wake-up is a
//!   place in its list inside the task ([`Drain`]), not a boxed wait.
//!
//! Must not touch: what a request is answered with (the handler's),
//! protocol selection (the caller's), how a response is framed and written
//! ([`super::server_write`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONNECTION, UPGRADE};
use http::uri::PathAndQuery;
use http::{Method, Request, Response, Uri, Version};
use tokio::io::AsyncWriteExt;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::deadline::LazyTimer;
use super::head::{self, BodyKind, Head, HeadError};
use super::server_body::{ClientStream, Conn, ServerBody, Shared, Slot};
use super::server_write::{write_response, write_upgrade, Ask, SlotIo};
use super::spare;
use super::Payload;
use hopgate_core::error::ErrorKind;

/// Bytes asked of the kernel per read of a head.
const HEAD_READ: usize = spare::READ_BUFFER;
/// How long a closing connection keeps reading (and dropping) what the
/// client still sends, so that closing with unread bytes does not reset
/// the connection under the answer just written.
const LINGER: Duration = Duration::from_secs(2);
/// The most bytes a closing connection reads and drops.
const LINGER_BYTES: usize = 1 << 20;

/// The listener's limits as the server uses them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub max_header_bytes: usize,
    /// `limits.max_headers`: above the parser's own 100, heads are parsed
    /// with room for one more line than this, so that the gateway's check
    /// answers what lies between (as with hyper's cap).
    pub max_headers: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Settings {
    /// The most header lines the parser takes: its own 100, or one more
    /// than a higher `limits.max_headers`.
    fn head_lines(&self) -> usize {
        if self.max_headers > head::MAX_HEADERS {
            self.max_headers + 1
        } else {
            head::MAX_HEADERS
        }
    }

    /// The most bytes a head may take in the buffer before it is refused
    /// with 431: room above `limits.max_header_bytes`, so that the
    /// gateway's own check answers a head between the limit and this with
    /// its 431 page (what hyper's server did too).
    fn head_buffer(&self) -> usize {
        (self.max_header_bytes * 2).clamp(16 << 10, head::MAX_HEAD_BYTES)
    }
}

/// A connection's end before a request could be read.
enum NoHead {
    /// Closed, idle too long, or draining: close quietly.
    Quiet,
    /// Answer with this error, then close.
    Refuse(ErrorKind),
}

/// What a server asks of the code behind it (the gateway's `ClientConn`):
/// one per connection; the server is generic over it, so the request's
/// future is a named type, run in a block from the thread's spares.
pub trait Handler: Send + Sync + 'static {
    /// The body type of requests and answers.
    type Body: Payload;

    /// The answer to a request: `req` is its head (its body an empty
    /// placeholder), `body` its body, if it has one.
    fn call(
        &self,
        req: Box<Request<Self::Body>>,
        body: Option<Box<ServerBody>>,
    ) -> impl Future<Output = Box<Response<Self::Body>>> + Send + 'static;

    /// The answer to a head that cannot be served (no request was made of
    /// it): 400, 408, 414 or 431.
    fn refusal(&self, kind: ErrorKind) -> Box<Response<Self::Body>>;

    /// Close the connection after the answer in flight (the process hands
    /// over to a new one).
    fn closing(&self) -> bool;

    /// The client's address, for the log.
    fn peer(&self) -> SocketAddr;
}

/// A client socket handed over after a 101, with the bytes read past the
/// request head.
pub type UpgradedClient = (Box<dyn ClientStream>, Bytes);

/// The client's side of an upgrade: its socket and the bytes read past
/// the request head, sent once the 101 is written. Carried in the
/// request's extensions (which want `Clone`, hence the shared slot).
#[derive(Clone)]
pub struct Upgrade(Arc<parking_lot::Mutex<Option<oneshot::Receiver<UpgradedClient>>>>);

impl Upgrade {
    /// Where the socket will come from, once.
    pub fn take(&self) -> Option<oneshot::Receiver<UpgradedClient>> {
        self.0.lock().take()
    }
}

/// The `Upgrade` protocol of a request asking for one (HTTP/1.1 only).
pub fn upgrade_request<B>(req: &Request<B>) -> Option<HeaderValue> {
    if req.version() != Version::HTTP_11 {
        return None;
    }
    let asks = req
        .headers()
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("upgrade"));
    if !asks {
        return None;
    }
    req.headers().get(UPGRADE).cloned()
}

/// What the answer depends on from its request, and the connection's
/// fate as the request left it.
struct Asked {
    ask: Ask,
    keep: bool,
}

impl Asked {
    fn of(head: &Head, connect: bool) -> Asked {
        Asked {
            ask: Ask {
                version: if head.minor == 0 {
                    Version::HTTP_10
                } else {
                    Version::HTTP_11
                },
                is_head: false,
                trailers_ok: head.minor == 1 && head.facts.te_trailers,
            },
            keep: head.keeps_alive() && !connect,
        }
    }
}

/// Where the client connection is while the request is served.
enum Held {
    /// With the server (a request without a body).
    Own(Conn),
    /// In the body's slot.
    Slot(Slot),
}

/// A listener's drain as its HTTP/1.1 connections see it: a flag (one
/// atomic load per look) and the wake-up of the connections waiting
/// between requests, which close at once (busy ones after the answer in
/// flight). Each connection has its place in the wake-up inside its own
/// task ([`Waits`]), registered once.
#[derive(Debug, Default)]
pub(crate) struct Drain {
    draining: AtomicBool,
    wake: Arc<Notify>,
}

impl Drain {
    /// Begins the drain (once: it is never undone).
    pub(crate) fn begin(&self) {
        self.draining.store(true, Ordering::Release);
        self.wake.notify_waiters();
    }

    /// Has the drain begun?
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}

/// Serves HTTP/1.x requests on `io` (whose first bytes, `read`, were
/// already read) until the client closes, a request asks to close, the
/// listener drains or an error ends the connection.
///
/// Not an `async fn`: an `async fn` keeps its arguments twice in the
/// connection's task (the arguments, and the locals they move into:
/// rust-lang/rust#62958), a block its captures once. What the task holds
/// while the connection waits is its memory ([module docs](self)).
pub(crate) fn serve<H: Handler>(
    io: Box<dyn ClientStream>,
    read: BytesMut,
    handler: H,
    settings: Arc<Settings>,
    drain: Arc<Drain>,
) -> impl Future<Output = ()> + Send {
    let (mut c, mut handler, mut drain) = (Conn { io, buf: read }, handler, drain);
    async move {
        // The loop's locals in a scope of their own, so that none is kept
        // beside the close's state after it (a local that was borrowed is
        // kept until its scope ends).
        let end = {
            let mut first = true;
            let mut waits = Waits::default();
            let mut woken = std::pin::pin!(Arc::clone(&drain.wake).notified_owned());
            loop {
                let got = read_head(&mut c, &settings, first, &drain, &mut waits, woken.as_mut());
                let head = match got.await {
                    Ok(h) => h,
                    Err(NoHead::Quiet) => return,
                    Err(NoHead::Refuse(kind)) => break End::Refuse(kind),
                };
                first = false;
                let begun = match begin::<H::Body>(head, c) {
                    Ok(b) => b,
                    Err((back, kind)) => {
                        c = back;
                        break End::Refuse(kind);
                    }
                };
                // The exchange (the handler's future, then the answer's
                // write) in a block from the thread's spares, given back
                // when it is done: no allocation per request, and none
                // held while the connection waits. The handler and the
                // drain ride along and come back.
                let mut block = spare::block();
                block.set(Some(exchange(handler, drain, begun)));
                let Some(running) = block.as_mut().as_pin_mut() else {
                    return;
                };
                let Exchanged {
                    handler: h,
                    drain: d,
                    written,
                    keep,
                } = running.await;
                spare::give_block(block);
                (handler, drain) = (h, d);
                let (next, unread) = match written {
                    Some(Ok(written)) => written,
                    Some(Err(e)) => {
                        tracing::debug!(peer = %handler.peer(), error = %e, "writing a response failed");
                        return;
                    }
                    None => return,
                };
                c = next;
                if !keep {
                    break End::Close(unread || !c.buf.is_empty());
                }
            }
        };
        match end {
            // Rare: its write's state in a box of its own, not in every
            // connection's task.
            End::Refuse(kind) => Box::pin(refuse(c, handler.refusal(kind))).await,
            End::Close(unread) => linger_close(c, unread).await,
        }
    }
}

/// How a connection's loop ended, when it has something left to do.
enum End {
    /// Answer with this error, then close.
    Refuse(ErrorKind),
    /// Close (lingering when the client may still be sending: `true`).
    Close(bool),
}

/// What a request's exchange starts from.
struct Begun<B> {
    req: Box<Request<B>>,
    body: Option<Box<ServerBody>>,
    held: Held,
    upgrade: Option<oneshot::Sender<UpgradedClient>>,
    asked: Asked,
}

/// The request a head read into `c` makes, and where the connection is
/// while it is served; the connection back with the refusal when the head
/// cannot be served. A plain function: nothing it uses is kept in the
/// connection's task.
fn begin<B: Payload>(head: Head, mut c: Conn) -> Result<Begun<B>, (Conn, ErrorKind)> {
    let bytes = c.buf.split_to(head.len).freeze();
    let mut req = match request::<B>(&head, &bytes) {
        Ok(r) => r,
        Err(kind) => return Err((c, kind)),
    };
    // The request's values hold the head's bytes now.
    drop(bytes);
    let mut asked = Asked::of(&head, req.method() == Method::CONNECT);
    asked.ask.is_head = req.method() == Method::HEAD;
    // An upgrade: the socket goes to the tunnel after a 101.
    // (`Connection: upgrade` was seen by the parse, or there is none.)
    let upgrade = (head.facts.upgrade && upgrade_request(&req).is_some()).then(|| {
        let (tx, rx) = oneshot::channel();
        let offer = Upgrade(Arc::new(parking_lot::Mutex::new(Some(rx))));
        req.extensions_mut().insert(offer);
        tx
    });
    let (body, held) = hold(&head, c);
    // Its line list goes back to the thread's spare before the answer's
    // head is parsed into it (`head::Lines`).
    drop(head);
    Ok(Begun {
        req,
        body,
        held,
        upgrade,
        asked,
    })
}

/// A request's exchange done: the handler and drain it borrowed,
/// the connection as [`write_answer`] gave it back, and whether it stays
/// open.
struct Exchanged<H> {
    handler: H,
    drain: Arc<Drain>,
    written: Option<io::Result<(Conn, bool)>>,
    keep: bool,
}

/// One request: the handler's answer, then its write. Owns what it uses
/// (it runs in a spare block, [`spare::block`]) and hands the handler and
/// the drain back.
async fn exchange<H: Handler>(
    handler: H,
    drain: Arc<Drain>,
    begun: Begun<H::Body>,
) -> Exchanged<H> {
    let Begun {
        req,
        body,
        held,
        upgrade,
        mut asked,
    } = begun;
    let resp = handler.call(req, body).await;
    if drain.draining() || handler.closing() {
        asked.keep = false;
    }
    let written = write_answer(held, resp, upgrade, &mut asked).await;
    Exchanged {
        handler,
        drain,
        written,
        keep: asked.keep,
    }
}

/// The request's body as the handler gets it, and where the connection
/// waits meanwhile: in the body's slot while there is a body.
fn hold(head: &Head, c: Conn) -> (Option<Box<ServerBody>>, Held) {
    let (chunked, len) = match head::request_body(head) {
        BodyKind::Empty | BodyKind::Close => return (None, Held::Own(c)),
        BodyKind::Length(n) => (false, n),
        BodyKind::Chunked => (true, 0),
    };
    let slot: Slot = Arc::new(parking_lot::Mutex::new(Shared {
        conn: Some(c),
        done: false,
        answered: false,
    }));
    let expect = head.facts.expect_continue && head.minor == 1;
    let body = ServerBody::new(Arc::clone(&slot), chunked, len, expect);
    (Some(Box::new(body)), Held::Slot(slot))
}

/// Writes the answer; gives the connection back with whether bytes of
/// the request body were left unread, or `None` when it is gone (an
/// upgrade took it).
async fn write_answer<B: Payload>(
    held: Held,
    resp: Box<Response<B>>,
    upgrade: Option<oneshot::Sender<UpgradedClient>>,
    asked: &mut Asked,
) -> Option<io::Result<(Conn, bool)>> {
    let (ask, keep) = (asked.ask, &mut asked.keep);
    match held {
        Held::Own(mut own) => {
            if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                if let Some(tx) = upgrade {
                    if write_upgrade(&mut own.io, resp).await.is_ok() {
                        let _ = tx.send((own.io, own.buf.freeze()));
                    }
                }
                return None;
            }
            let r = write_response(&mut own.io, resp, ask, keep).await;
            Some(r.map(|()| (own, false)))
        }
        Held::Slot(slot) => Some(write_through_slot(slot, resp, ask, keep).await),
    }
}

/// Writes the answer to a request with a body. The body may still be
/// reading: a backend that answers while it reads (an echo) gets its
/// answer streamed while the client's body still comes, written through
/// the slot; the connection comes back after it.
async fn write_through_slot<B: Payload>(
    slot: Slot,
    resp: Box<Response<B>>,
    ask: Ask,
    keep: &mut bool,
) -> io::Result<(Conn, bool)> {
    let reading = {
        let mut shared = slot.lock();
        shared.answered = true;
        !shared.done && Arc::strong_count(&slot) > 1
    };
    let mut resp = Some(resp);
    let r = match if reading { resp.take() } else { None } {
        Some(resp) => write_response(&mut SlotIo(Arc::clone(&slot)), resp, ask, keep).await,
        None => Ok(()),
    };
    let (own, done) = {
        let mut shared = slot.lock();
        (shared.conn.take(), shared.done)
    };
    // A body not read to its end leaves bytes of it unread.
    if !done {
        *keep = false;
    }
    match (r, own) {
        (Ok(()), Some(mut own)) if !reading => {
            if let Some(resp) = resp {
                write_response(&mut own.io, resp, ask, keep).await?;
            }
            Ok((own, !done))
        }
        (Ok(()), Some(own)) => Ok((own, !done)),
        (Err(e), _) => Err(e),
        (Ok(()), None) => Err(io::ErrorKind::NotConnected.into()),
    }
}

/// What a connection waits on besides its socket, kept for its life:
/// one timer for both the idle wait between requests and a head's
/// `header_read` clock (a [`LazyTimer`]: moved, not made per wait, and not
/// re-armed for every request), and whether its place in the drain's
/// wake-up is registered.
#[derive(Default)]
struct Waits {
    timer: LazyTimer,
    /// The drain's wake-up has been polled: it holds this task's waker
    /// from then on (the connection never changes task), so later waits
    /// look at the flag itself (an atomic load) instead of polling it
    /// again (which takes the wake-up's lock).
    registered: bool,
}

impl Waits {
    /// Has the listener begun to drain? Registers the wake-up for it on
    /// the first call.
    fn drained(
        &mut self,
        woken: Pin<&mut OwnedNotified>,
        drain: &Drain,
        cx: &mut Context<'_>,
    ) -> bool {
        if !self.registered {
            self.registered = true;
            if woken.poll(cx).is_ready() {
                return true;
            }
        }
        drain.draining()
    }
}

/// Reads until a whole request head is in the buffer. A plain function
/// around one `poll_fn`: what the wait keeps in the connection's task is
/// the closure's few words (an `async fn` would keep its arguments twice
/// and a timer of its own).
fn read_head<'a>(
    c: &'a mut Conn,
    s: &'a Settings,
    first: bool,
    drain: &'a Drain,
    waits: &'a mut Waits,
    mut woken: Pin<&'a mut OwnedNotified>,
) -> impl Future<Output = Result<Head, NoHead>> + Send + 'a {
    // The head's clock: from its first byte (the first bytes of a
    // connection are bounded by `ClientIo`, and start it too).
    let mut began = (first || !c.buf.is_empty()).then(Instant::now);
    // The end of the idle wait, once there is one.
    let mut idle_until = None;
    std::future::poll_fn(move |cx| loop {
        if !c.buf.is_empty() {
            match head::parse_request_up_to(&c.buf, s.head_lines()) {
                Ok(Some(h)) => return Poll::Ready(Ok(h)),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(NoHead::Refuse(refusal(e)))),
            }
            if c.buf.len() >= s.head_buffer() {
                return Poll::Ready(Err(NoHead::Refuse(ErrorKind::HeadersTooLarge)));
            }
            began.get_or_insert_with(Instant::now);
        }
        let got = match began {
            Some(at) => match c.poll_fill(HEAD_READ, cx) {
                Poll::Ready(r) => r,
                Poll::Pending if waits.timer.poll_passed(at + s.header_read_timeout, cx) => {
                    // A head begun and not finished in time.
                    return Poll::Ready(Err(if c.buf.is_empty() {
                        NoHead::Quiet
                    } else {
                        NoHead::Refuse(ErrorKind::ClientTimeout)
                    }));
                }
                Poll::Pending => return Poll::Pending,
            },
            None => {
                // Between requests: idle until the next one, or drained,
                // with no buffer held while nothing comes.
                if drain.draining() {
                    return Poll::Ready(Err(NoHead::Quiet));
                }
                match c.poll_fill_idle(cx) {
                    Poll::Ready(r) => r,
                    Poll::Pending => {
                        let until =
                            *idle_until.get_or_insert_with(|| Instant::now() + s.idle_timeout);
                        if waits.drained(woken.as_mut(), drain, cx)
                            || waits.timer.poll_passed(until, cx)
                        {
                            return Poll::Ready(Err(NoHead::Quiet));
                        }
                        return Poll::Pending;
                    }
                }
            }
        };
        match got {
            Ok(0) | Err(_) => return Poll::Ready(Err(NoHead::Quiet)),
            Ok(_) => {}
        }
    })
}

/// The answer to a head that cannot be served.
fn refusal(e: HeadError) -> ErrorKind {
    match e {
        HeadError::TooManyHeaders | HeadError::TooLarge => ErrorKind::HeadersTooLarge,
        _ => ErrorKind::BadRequest,
    }
}

/// The request a head describes, its header values sharing `bytes`.
fn request<B: Payload>(head: &Head, bytes: &Bytes) -> Result<Box<Request<B>>, ErrorKind> {
    // Boxed from the start: the request moves through the forwarder as a
    // pointer. Its body goes beside it until the forwarder decides how to
    // send it.
    let mut req = B::request();
    fill_request(&mut req, head, bytes)?;
    Ok(req)
}

/// Writes the method, target, version and headers of `head` into `req`.
fn fill_request<B>(req: &mut Request<B>, head: &Head, bytes: &Bytes) -> Result<(), ErrorKind> {
    let method =
        Method::from_bytes(&bytes[head.method.clone()]).map_err(|_| ErrorKind::BadRequest)?;
    let target = bytes.slice(head.target.clone());
    if target.len() >= usize::from(u16::MAX) {
        return Err(ErrorKind::UriTooLong);
    }
    let uri = target_uri(target).map_err(|_| ErrorKind::BadRequest)?;
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = if head.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let headers = req.headers_mut();
    // Room for the line the gateway adds to the map (the session header;
    // the lines it sets go beside it, `SetLines`), so the map is
    // allocated once.
    headers.reserve(head.headers.len() + 1);
    let mut length_seen = false;
    for h in &head.headers {
        let raw = &bytes[h.name.clone()];
        // Repeated `Content-Length` lines (the parser made sure they
        // agree) are forwarded as one, as hyper's server did.
        if raw.len() == 14 && raw.eq_ignore_ascii_case(b"content-length") {
            if length_seen {
                continue;
            }
            length_seen = true;
        }
        let name = header_name(raw).map_err(|_| ErrorKind::BadRequest)?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(h.value.clone()))
            .map_err(|_| ErrorKind::BadRequest)?;
        headers.append(name, value);
    }
    Ok(())
}

/// A request target as a `Uri`. An origin-form target (`/path?query`,
/// nearly every request) is a path and query only: made as one directly,
/// without `Uri`'s dispatch on the target's form (~60 instructions; the
/// same `Uri` either way).
fn target_uri(target: Bytes) -> Result<Uri, http::uri::InvalidUri> {
    if target.first() == Some(&b'/') {
        PathAndQuery::from_maybe_shared(target).map(Uri::from)
    } else {
        Uri::from_maybe_shared(target)
    }
}

/// The header name `raw` (token characters, as the parse took them): the
/// names most requests carry are matched here, 8 bytes at a time
/// ([`head::name_is`]), instead of by `HeaderName`'s own parse (a
/// lower-casing copy and a table walk, ~100 instructions a line).
fn header_name(raw: &[u8]) -> Result<HeaderName, http::header::InvalidHeaderName> {
    use head::name_is;
    use http::header;
    let known = match raw.len() {
        4 if name_is(raw, b"host") => header::HOST,
        6 if name_is(raw, b"accept") => header::ACCEPT,
        6 if name_is(raw, b"cookie") => header::COOKIE,
        10 if name_is(raw, b"user-agent") => header::USER_AGENT,
        10 if name_is(raw, b"connection") => header::CONNECTION,
        12 if name_is(raw, b"content-type") => header::CONTENT_TYPE,
        13 if name_is(raw, b"authorization") => header::AUTHORIZATION,
        14 if name_is(raw, b"content-length") => header::CONTENT_LENGTH,
        15 if name_is(raw, b"accept-encoding") => header::ACCEPT_ENCODING,
        15 if name_is(raw, b"accept-language") => header::ACCEPT_LANGUAGE,
        _ => return HeaderName::from_bytes(raw),
    };
    Ok(known)
}

/// [`request`] for a head parsed from `head_bytes` (a copy is taken): the
/// fuzz target's way in.
pub fn request_from_head(head: &Head, head_bytes: &[u8]) -> Result<Request<()>, ErrorKind> {
    let mut req = Request::new(());
    fill_request(&mut req, head, &Bytes::copy_from_slice(head_bytes))?;
    Ok(req)
}

/// Answers with `resp`, a refusal (no request was made of the bytes),
/// then closes.
async fn refuse<B: Payload>(mut c: Conn, mut resp: Box<Response<B>>) {
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    let ask = Ask {
        version: Version::HTTP_11,
        is_head: false,
        trailers_ok: false,
    };
    let mut keep = false;
    if write_response(&mut c.io, resp, ask, &mut keep)
        .await
        .is_ok()
    {
        linger_close(c, true).await;
    }
}

/// Shuts the write side; when the client may still be sending (`unread`:
/// a body or pipelined requests left unread), reads and drops what it
/// sends before the socket is closed ([`linger`], its timer in a box of
/// its own rather than in every connection's task).
async fn linger_close(mut c: Conn, unread: bool) {
    if c.io.shutdown().await.is_err() || !unread {
        return;
    }
    Box::pin(linger(c)).await;
}

/// Reads and drops what the client sends (bounded in time and bytes), so
/// that the close does not reset the connection under the answer.
async fn linger(mut c: Conn) {
    let until = Instant::now() + LINGER;
    let mut dropped = 0;
    while dropped < LINGER_BYTES {
        c.buf.clear();
        let read = std::future::poll_fn(|cx| c.poll_fill(HEAD_READ, cx));
        match tokio::time::timeout_at(until, read).await {
            Ok(Ok(n)) if n > 0 => dropped += n,
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests;
