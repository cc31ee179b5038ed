//! One HTTP/1.1 exchange with a backend over a raw socket, run by the
//! request's own task: no connection task, no channel.
//!
//! [`send`] writes the request head in one vectored write, streams the
//! request body while watching for the response head (a backend may answer
//! before it has read the whole body), skips interim 1xx answers and turns
//! the head into a `Response` whose body, a [`ResponseBody`], reads the
//! rest from the socket ([`super::body`]) and hands the connection back
//! ([`Connection::give_back`]) when the response ends cleanly on a
//! connection that stays open (otherwise it is dropped: closed). A 101
//! answer carries the socket, with any bytes read past the head, in its
//! extensions ([`Upgraded`]).
//!
//! The connection is the caller's type ([`Connection`]: its socket,
//! buffers, timer, kill flag and where it goes back to); so are the body
//! ([`Payload`]) and the lines added to the head ([`ExtraLines`]). Every
//! wait registers with the connection's kill waker and checks its kill
//! flag, which a drain's deadline sets.
//!
//! Must not touch: where connections are kept and how they are chosen
//! (the caller's, through [`Connection`]), routing, retries.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use hopgate_core::error::{ErrorKind, ProxyError};
use http::header::HeaderName;
use http::{Method, Request, Response};
use http_body::{Frame, SizeHint};
use tokio::io::AsyncWrite;

use super::body::{ReadError, Reading};
use super::deadline::LazyTimer;
use super::head::{self, BodyKind, Head, ResponseKind};
use super::response_head::{raw_response, response, HeadFor, RawHead};
use super::write::{self, ExtraLines, Out};
use super::{BoxError, Payload};

/// Bytes asked of the kernel per read of a head.
pub(crate) const HEAD_READ: usize = 8 * 1024;

/// An upstream socket as the client reads it: into a buffer, by
/// readiness.
pub trait Socket: AsyncWrite + Unpin + Send + 'static {
    /// Reads what the socket has into `buf`: `Ok(0)` at end of stream.
    fn poll_read_buf(
        &mut self,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>>;
}

/// A connection's parts the exchange works with, borrowed together.
pub struct Wire<'a, Io> {
    pub io: &'a mut Io,
    /// Bytes read and not used yet.
    pub buf: &'a mut BytesMut,
    /// Where the request head is rendered (kept, with its room, from one
    /// request to the next).
    pub out: &'a mut Vec<u8>,
    /// The request timeout's timer, kept from one exchange to the next.
    pub timer: &'a mut LazyTimer,
}

/// An upstream connection as the caller (the pool) keeps it: the codec
/// speaks on it and says when it may be reused; keeping it is the
/// caller's business. Dropping one closes it.
pub trait Connection: Send + Sized + Unpin + 'static {
    type Io: Socket;
    /// Where a connection goes back to when its exchange ended cleanly.
    type Home: Send + Sync + 'static;

    fn wire(&mut self) -> Wire<'_, Self::Io>;

    /// Registers `waker` to be woken when the connection is killed (a
    /// drain's deadline), then says whether it was.
    fn killed(&self, waker: &std::task::Waker) -> bool;

    /// The connection's exchange ended cleanly with nothing unread: it
    /// may carry another request.
    fn give_back(home: &Self::Home, conn: Self);

    /// The socket and its unread bytes, after a 101: the connection is
    /// no longer an HTTP one.
    fn into_upgraded(self) -> (Self::Io, Bytes);
}

/// A backend's socket after a 101, with the bytes read past the head,
/// carried in the response's extensions (which want `Clone`, hence the
/// shared slot).
pub struct Upgraded<Io>(Arc<parking_lot::Mutex<Option<(Io, Bytes)>>>);

impl<Io> Clone for Upgraded<Io> {
    fn clone(&self) -> Self {
        Upgraded(Arc::clone(&self.0))
    }
}

impl<Io> std::fmt::Debug for Upgraded<Io> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Upgraded")
    }
}

impl<Io> Upgraded<Io> {
    pub(crate) fn new(io: Io, read_ahead: Bytes) -> Upgraded<Io> {
        Upgraded(Arc::new(parking_lot::Mutex::new(Some((io, read_ahead)))))
    }

    /// The socket and its read-ahead bytes, once.
    pub fn take(&self) -> Option<(Io, Bytes)> {
        self.0.lock().take()
    }
}

/// How a send failed.
#[derive(Debug)]
pub enum Failure<B> {
    /// No byte of the request reached the socket; here it is, untouched.
    NotSent {
        request: Box<Request<B>>,
        error: ProxyError,
    },
    /// The request may have reached the backend; its head comes back as
    /// it was sent when it is still here, so that a replay needs no copy
    /// made before the send.
    Sent {
        error: ProxyError,
        head: Option<Box<http::request::Parts>>,
    },
}

/// Reads what the socket has into `buf`: `Ok(0)` at end of stream.
fn poll_fill<Io: Socket>(
    io: &mut Io,
    buf: &mut BytesMut,
    want: usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < 512 {
        buf.reserve(want);
    }
    io.poll_read_buf(buf, cx)
}

/// The request body on its way to the backend.
pub(crate) struct Pump<B> {
    body: B,
    kind: BodyKind,
    out: Out,
    allowed: Vec<HeaderName>,
    ended: bool,
}

impl<B> std::fmt::Debug for Pump<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("kind", &self.kind)
            .field("ended", &self.ended)
            .finish()
    }
}

enum PumpError {
    /// The client's body failed.
    Body(BoxError),
    /// The body did not match its declared length.
    Length(&'static str),
    /// Writing to the backend failed.
    Io(io::Error),
}

impl<B: Payload> Pump<B> {
    fn new(body: B, kind: BodyKind, allowed: Vec<HeaderName>) -> Pump<B> {
        Pump {
            body,
            kind,
            out: Out::default(),
            allowed,
            ended: kind == BodyKind::Empty,
        }
    }

    fn poll<Io: Socket>(
        &mut self,
        io: &mut Io,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), PumpError>> {
        loop {
            ready!(self.out.poll_write(io, cx)).map_err(PumpError::Io)?;
            if self.ended {
                return Poll::Ready(Ok(()));
            }
            let frame = match ready!(Pin::new(&mut self.body).poll_frame(cx)) {
                None => {
                    match self.kind {
                        BodyKind::Length(n) if n > 0 => {
                            return Poll::Ready(Err(PumpError::Length(
                                "request body shorter than its Content-Length",
                            )))
                        }
                        BodyKind::Chunked => self.out.last_chunk(Bytes::new()),
                        _ => {}
                    }
                    self.ended = true;
                    continue;
                }
                Some(Err(e)) => return Poll::Ready(Err(PumpError::Body(e))),
                Some(Ok(frame)) => frame,
            };
            match frame.into_data() {
                Ok(data) if data.is_empty() => {}
                Ok(data) => match &mut self.kind {
                    BodyKind::Length(n) => {
                        let len = data.len() as u64;
                        if len > *n {
                            return Poll::Ready(Err(PumpError::Length(
                                "request body longer than its Content-Length",
                            )));
                        }
                        *n -= len;
                        self.out.raw(data);
                    }
                    BodyKind::Chunked => self.out.chunk(data),
                    BodyKind::Empty | BodyKind::Close => {
                        return Poll::Ready(Err(PumpError::Length(
                            "request body where none was framed",
                        )))
                    }
                },
                Err(frame) => {
                    if let (Ok(trailers), BodyKind::Chunked) = (frame.into_trailers(), self.kind) {
                        let lines = write::encode_trailers(&trailers, &self.allowed);
                        self.out.last_chunk(lines);
                        self.ended = true;
                    }
                }
            }
        }
    }
}

/// How the response head wait failed.
enum HeadFail {
    Killed,
    Body(BoxError),
    Length(&'static str),
    Invalid(head::HeadError),
    Closed(Option<io::Error>),
    Io(io::Error),
}

fn killed_error() -> ProxyError {
    ProxyError::with_detail(
        ErrorKind::UpstreamReset,
        "connection closed at a drain deadline",
    )
}

impl HeadFail {
    fn into_error<B: Payload>(self) -> ProxyError {
        match self {
            HeadFail::Killed => killed_error(),
            HeadFail::Body(e) => match B::own_error(&e) {
                Some(kind) => ProxyError::with_detail(kind, e),
                None => ProxyError::with_detail(
                    ErrorKind::UpstreamReset,
                    format_args!("error from the request body: {e}"),
                ),
            },
            HeadFail::Length(what) => ProxyError::with_detail(ErrorKind::UpstreamReset, what),
            HeadFail::Invalid(e) => ProxyError::with_detail(
                ErrorKind::UpstreamProtocol,
                format_args!("invalid response from the backend: {e}"),
            ),
            HeadFail::Closed(write) => ProxyError::with_detail(
                ErrorKind::UpstreamReset,
                match write {
                    Some(e) => format!("connection closed before the response head (writing: {e})"),
                    None => "connection closed before the response head".to_owned(),
                },
            ),
            HeadFail::Io(e) => ProxyError::with_detail(ErrorKind::UpstreamReset, e),
        }
    }
}

/// Sends `req` on `conn` and waits for the response head until
/// `deadline` (`timeouts.request`). A request none of whose bytes reached
/// the socket is handed back as [`Failure::NotSent`]. `set`: the lines the
/// caller adds after the request's own; `head_for`: the form the answer's
/// head is handed on in ([`HeadFor`]).
///
/// The head is rendered into the connection's own buffer here, before the
/// first poll; the rest of the exchange (head, body, response head,
/// deadline) is the returned [`Exchange`], a named future: it can sit
/// inline in its caller's future (no box per request) and holds the
/// request once. No `Timeout` wraps it; the deadline is watched by the
/// connection's own timer, kept from one exchange to the next
/// ([`super::deadline::LazyTimer`]).
#[inline(always)]
pub(crate) fn send<'a, C: Connection, B: Payload, S: ExtraLines>(
    home: &'a Arc<C::Home>,
    mut conn: C,
    req: Box<Request<B>>,
    set: &S,
    deadline: tokio::time::Instant,
    head_for: HeadFor,
) -> Exchange<'a, C, B> {
    let framing = write::request_framing(req.method(), req.headers(), req.body());
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let head = write::RequestHead {
        method: req.method(),
        target,
        headers: req.headers(),
        set,
    };
    write::request_head(conn.wire().out, &head, &framing);
    Exchange {
        home,
        is_head: req.method() == Method::HEAD,
        conn: Some(conn),
        req: Some(req),
        written: false,
        at: 0,
        body: framing.body,
        pump: None,
        write_error: None,
        deadline,
        head_for,
        failing: None,
    }
}

/// One request's exchange on one HTTP/1.1 connection; see [`send`].
pub(crate) struct Exchange<'a, C: Connection, B> {
    home: &'a Arc<C::Home>,
    /// Taken when the exchange ends.
    conn: Option<C>,
    /// The request; once its head is out (`written`), its head alone (the
    /// body went to the pump), kept until the answer's head: a failure
    /// hands it back, so that a replay needs no copy made in advance.
    req: Option<Box<Request<B>>>,
    written: bool,
    /// Bytes of the head written so far.
    at: usize,
    body: BodyKind,
    pump: Option<Pump<B>>,
    write_error: Option<io::Error>,
    deadline: tokio::time::Instant,
    is_head: bool,
    head_for: HeadFor,
    /// A failure held back for one turn of the scheduler (see
    /// [`Exchange::end`]).
    failing: Option<(Yield, Failure<B>)>,
}

type Yield = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What an exchange ends with.
type Exchanged<B> = Result<Box<Response<B>>, Failure<B>>;

impl<C: Connection, B> std::fmt::Debug for Exchange<'_, C, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("written", &self.written)
            .field("at", &self.at)
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

impl<C: Connection, B: Payload + FromUpstream<C>> std::future::Future for Exchange<'_, C, B> {
    type Output = Exchanged<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            if let Some((yielding, _)) = &mut this.failing {
                ready!(yielding.as_mut().poll(cx));
                let Some((_, failure)) = this.failing.take() else {
                    unreachable!("checked above")
                };
                return Poll::Ready(Err(failure));
            }
            let waited = ready!(this.poll_exchange(cx));
            if let Some(done) = this.end(waited) {
                return Poll::Ready(done);
            }
        }
    }
}

/// A body type that can carry a response body read from a `C` (the
/// gateway's `ProxyBody` from a pooled connection).
pub trait FromUpstream<C: Connection>: Sized {
    fn from_upstream(body: ResponseBody<C, Self>) -> Self;
}

impl<C: Connection, B: Payload + FromUpstream<C>> Exchange<'_, C, B> {
    /// Writes the head, then streams the body and waits for the answer's
    /// head, until the deadline.
    fn poll_exchange(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(Head, ResponseKind), Ended<B>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(Err(Ended::TimedOut));
        };
        if !self.written {
            let w = conn.wire();
            match write::poll_write_all(w.io, w.out, &mut self.at, cx) {
                Poll::Ready(Ok(())) => {
                    let Some(req) = self.req.as_mut() else {
                        return Poll::Ready(Err(Ended::TimedOut));
                    };
                    self.written = true;
                    let allowed = if self.body == BodyKind::Chunked
                        && req.headers().contains_key(http::header::TRAILER)
                    {
                        write::allowed_trailers(req.headers())
                    } else {
                        Vec::new()
                    };
                    let body = std::mem::take(req.body_mut());
                    self.pump = Some(Pump::new(body, self.body, allowed));
                }
                Poll::Ready(Err(e)) => {
                    let error = ProxyError::with_detail(ErrorKind::ConnectionLost, e);
                    if self.at == 0 {
                        if let Some(request) = self.req.take() {
                            return Poll::Ready(Err(Ended::NotSent(request, error)));
                        }
                    }
                    return Poll::Ready(Err(Ended::Sent(error)));
                }
                Poll::Pending => {
                    return if w.timer.poll_passed(self.deadline, cx) {
                        Poll::Ready(Err(Ended::TimedOut))
                    } else {
                        Poll::Pending
                    };
                }
            }
        }
        let Some(p) = self.pump.as_mut() else {
            return Poll::Ready(Err(Ended::TimedOut));
        };
        match poll_head(conn, p, &mut self.write_error, self.is_head, cx) {
            Poll::Ready(r) => Poll::Ready(r.map_err(Ended::Head)),
            Poll::Pending if conn.wire().timer.poll_passed(self.deadline, cx) => {
                Poll::Ready(Err(Ended::TimedOut))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// A failure after some of the request may have reached the backend,
    /// with the request's head when it is still here.
    fn sent(&mut self, error: ProxyError) -> Failure<B> {
        self.conn = None;
        let head = self.req.take().map(|r| Box::new(r.into_parts().0));
        Failure::Sent { error, head }
    }

    /// The exchange's result, or `None` when a failure waits for one turn
    /// of the scheduler first (`failing`).
    fn end(&mut self, waited: Result<(Head, ResponseKind), Ended<B>>) -> Option<Exchanged<B>> {
        let (head, kind) = match waited {
            Ok(found) => found,
            Err(Ended::NotSent(request, error)) => {
                self.conn = None;
                return Some(Err(Failure::NotSent { request, error }));
            }
            Err(Ended::Sent(error)) => return Some(Err(self.sent(error))),
            // The connection is dropped with the exchange: closed.
            Err(Ended::TimedOut) => {
                return Some(Err(self.sent(ProxyError::new(ErrorKind::UpstreamTimeout))))
            }
            Err(Ended::Head(fail)) => {
                let failure = self.sent(fail.into_error::<B>());
                if self.pump.take().is_some_and(|p| !p.ended) {
                    // The client's body is abandoned: dropped (above), then
                    // the client's connection sees that before the error
                    // answer is made (it drains the rest, or closes and
                    // says `Connection: close` in that answer). Answering
                    // first would let the client's connection send a
                    // keep-alive answer and close right after it, under a
                    // client that may already reuse the connection.
                    self.failing = Some((Box::pin(tokio::task::yield_now()), failure));
                    return None;
                }
                return Some(Err(failure));
            }
        };
        let Some(conn) = self.conn.take() else {
            return Some(Err(self.sent(ProxyError::new(ErrorKind::UpstreamTimeout))));
        };
        Some(self.answer(conn, head, kind))
    }

    /// The answer whose head `head` is at the start of `conn`'s buffer.
    fn answer(&mut self, mut conn: C, head: Head, kind: ResponseKind) -> Exchanged<B> {
        let pump = self.pump.take().filter(|p| !p.ended || !p.out.is_empty());
        let bytes = conn.wire().buf.split_to(head.len).freeze();
        let keeps_alive = head.keeps_alive();
        let made = match (self.head_for, &kind) {
            (HeadFor::Raw, ResponseKind::Final(_)) => raw_response::<B>(head, bytes),
            (to, _) => response::<B>(&head, &bytes, to == HeadFor::H2).map(|r| (r, None)),
        };
        let (mut resp, raw) = match made {
            Ok(r) => r,
            Err(e) => return Err(self.sent(HeadFail::Invalid(e).into_error::<B>())),
        };
        // The head went upstream: the request's box and header map serve
        // the thread's next request.
        if let Some(req) = self.req.take() {
            B::give_request(req);
        }
        let body = match kind {
            ResponseKind::Upgrade => {
                let (io, rest) = conn.into_upgraded();
                resp.extensions_mut().insert(Upgraded::new(io, rest));
                None
            }
            ResponseKind::Final(kind) => {
                let reusable = keeps_alive && kind != BodyKind::Close && self.write_error.is_none();
                ResponseBody::start(self.home, conn, kind, pump, reusable)
            }
            ResponseKind::Interim => None,
        };
        *resp.body_mut() = match (raw, body) {
            // A body read from the connection carries the head itself (no
            // second box).
            (raw, Some(mut b)) => {
                b.raw = raw;
                B::from_upstream(b)
            }
            (Some(raw), None) => B::with_raw_head(raw, B::default()),
            (None, None) => B::default(),
        };
        Ok(resp)
    }
}

/// How an exchange ended before a final response head.
enum Ended<B> {
    /// Writing the head failed before any byte went out.
    NotSent(Box<Request<B>>, ProxyError),
    /// Writing the head failed part-way.
    Sent(ProxyError),
    /// `timeouts.request` passed.
    TimedOut,
    /// The body or the wait for the response head failed.
    Head(HeadFail),
}

/// Streams the request body and reads until a final response head.
fn poll_head<C: Connection, B: Payload>(
    conn: &mut C,
    pump: &mut Pump<B>,
    write_error: &mut Option<io::Error>,
    is_head: bool,
    cx: &mut Context<'_>,
) -> Poll<Result<(Head, ResponseKind), HeadFail>> {
    if conn.killed(cx.waker()) {
        return Poll::Ready(Err(HeadFail::Killed));
    }
    let w = conn.wire();
    if write_error.is_none() {
        match pump.poll(w.io, cx) {
            Poll::Ready(Err(PumpError::Body(e))) => return Poll::Ready(Err(HeadFail::Body(e))),
            Poll::Ready(Err(PumpError::Length(what))) => {
                return Poll::Ready(Err(HeadFail::Length(what)))
            }
            // The backend stopped reading: it may have answered already.
            Poll::Ready(Err(PumpError::Io(e))) => *write_error = Some(e),
            Poll::Ready(Ok(())) | Poll::Pending => {}
        }
    }
    loop {
        if !w.buf.is_empty() {
            match head::parse_response(w.buf) {
                Ok(Some(h)) => match head::response_kind(&h, is_head) {
                    ResponseKind::Interim => {
                        w.buf.advance(h.len);
                        continue;
                    }
                    kind => return Poll::Ready(Ok((h, kind))),
                },
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(HeadFail::Invalid(e))),
            }
        }
        match ready!(poll_fill(w.io, w.buf, HEAD_READ, cx)) {
            Ok(0) => return Poll::Ready(Err(HeadFail::Closed(write_error.take()))),
            Ok(_) => {}
            Err(e) => return Poll::Ready(Err(HeadFail::Io(e))),
        }
    }
}

/// A connection whose exchange ended: back home when the exchange left it
/// `clean` (reusable, the request body sent) with nothing unread, closed
/// otherwise.
fn release<C: Connection>(home: &C::Home, mut conn: C, clean: bool) {
    if clean && conn.wire().buf.is_empty() {
        C::give_back(home, conn);
    }
}

/// Why a response body stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    #[error("backend connection closed before the end of the response body")]
    Closed,
    #[error("backend connection closed at a drain deadline")]
    Killed,
    #[error("reading the response body: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Chunked(#[from] super::chunked::ChunkError),
    #[error("invalid trailers: {0}")]
    Trailers(#[from] head::HeadError),
}

impl From<ReadError> for BodyError {
    fn from(e: ReadError) -> BodyError {
        match e {
            ReadError::Eof => BodyError::Closed,
            ReadError::Io(e) => BodyError::Io(e),
            ReadError::Chunked(e) => BodyError::Chunked(e),
            ReadError::Trailers(e) => BodyError::Trailers(e),
        }
    }
}

/// A response body read from its connection; see the module documentation.
/// `B` is the request's body type: the rest of the request body goes on
/// while the answer is read, when the answer came first.
pub struct ResponseBody<C: Connection, B> {
    home: Arc<C::Home>,
    conn: Option<C>,
    reading: Reading,
    /// The rest of the request body, when the answer came first.
    pump: Option<Pump<B>>,
    reusable: bool,
    /// The answer's head kept raw, until the writer takes it
    /// ([`Payload::raw_head`]).
    raw: Option<RawHead>,
}

impl<C: Connection, B> std::fmt::Debug for ResponseBody<C, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("reading", &self.reading)
            .field("reusable", &self.reusable)
            .finish_non_exhaustive()
    }
}

impl<C: Connection, B: Payload> ResponseBody<C, B> {
    /// The body of an answer framed as `kind`, or `None` when it has none
    /// (the connection then goes back at once, or is closed).
    fn start(
        home: &Arc<C::Home>,
        conn: C,
        kind: BodyKind,
        pump: Option<Pump<B>>,
        reusable: bool,
    ) -> Option<ResponseBody<C, B>> {
        let reading = Reading::of(kind);
        if reading.is_done() {
            // Nothing to read: the connection goes back at once.
            release::<C>(home, conn, reusable && pump.is_none());
            return None;
        }
        Some(ResponseBody {
            home: Arc::clone(home),
            conn: Some(conn),
            reading,
            pump,
            reusable,
            raw: None,
        })
    }

    /// The raw head this body carries ([`Payload::raw_head`]).
    pub fn raw_head(&self) -> Option<&RawHead> {
        self.raw.as_ref()
    }

    /// Takes the raw head off this body.
    pub fn take_raw_head(&mut self) -> Option<RawHead> {
        self.raw.take()
    }

    /// The body ended: the connection goes back home when nothing of this
    /// exchange is left on it, and is closed otherwise.
    fn finish(&mut self) {
        self.reading = Reading::Done;
        let Some(conn) = self.conn.take() else { return };
        release::<C>(&self.home, conn, self.reusable && self.pump.is_none());
    }

    /// Fails the body; the connection is closed.
    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.reading = Reading::Done;
        self.conn = None;
        self.pump = None;
        Poll::Ready(Some(Err(Box::new(e))))
    }

    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        if conn.killed(cx.waker()) {
            return self.fail(BodyError::Killed);
        }
        let w = conn.wire();
        if let Some(pump) = &mut self.pump {
            match pump.poll(w.io, cx) {
                Poll::Ready(Ok(())) => self.pump = None,
                Poll::Ready(Err(_)) => {
                    // Nothing more goes to the backend: the connection
                    // cannot be reused, the answer is still read.
                    self.pump = None;
                    self.reusable = false;
                }
                Poll::Pending => {}
            }
        }
        let io = w.io;
        let read = ready!(self
            .reading
            .poll_frame(w.buf, cx, |buf, want, cx| poll_fill(io, buf, want, cx)));
        match read {
            Some(Err(e)) => self.fail(e.into()),
            Some(Ok(frame)) => {
                if self.reading.is_done() {
                    self.finish();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            None => {
                self.finish();
                Poll::Ready(None)
            }
        }
    }

    pub fn is_end_stream(&self) -> bool {
        self.reading.is_done()
    }

    pub fn size_hint(&self) -> SizeHint {
        self.reading.size_hint()
    }
}
