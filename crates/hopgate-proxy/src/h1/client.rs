//! One HTTP/1.1 exchange with a backend over a raw pooled socket, run by
//! the request's own task: no connection task, no channel.
//!
//! [`send`] writes the request head in one vectored write, streams the
//! request body while watching for the response head (a backend may answer
//! before it has read the whole body), skips interim 1xx answers and turns
//! the head into a `Response` whose body, a [`ResponseBody`], reads the
//! rest from the socket and hands the connection back to its pool when the
//! response ends cleanly on a connection that stays open (otherwise it is
//! closed). A 101 answer hands the socket, with any bytes read past the
//! head, to the tunnel ([`crate::tunnel::RawUpgrade`]).
//!
//! Every wait registers with the connection's kill waker and checks its
//! kill flag (`ConnMeta::killed`), which a drain's deadline sets.
//!
//! Must not touch: pool bookkeeping (that is [`crate::pool`]), routing,
//! retries.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use hopgate_core::error::{ErrorKind, ProxyError};
use http::header::HeaderName;
use http::{Method, Request, Response};
use http_body::{Body, Frame, SizeHint};

use super::chunked::{ChunkedDecoder, Step};
use super::head::{self, BodyKind, Head, ResponseKind};
use super::response_head::{raw_response, response, trailer_map, RawHead};
use super::write::{self, Out};
use crate::body::{BodyTooLarge, BoxError, ProxyBody};
use crate::headers::SetLines;
use crate::pool::{H1Conn, Pool, SendFailure};
use crate::tls::UpstreamIo;

/// Bytes asked of the kernel per read of a head.
const HEAD_READ: usize = 8 * 1024;
/// Bytes asked of the kernel per read of a body.
const BODY_READ: usize = 64 * 1024;

/// Reads what the socket has into `buf`: `Ok(0)` at end of stream.
fn poll_fill(
    io: &mut UpstreamIo,
    buf: &mut BytesMut,
    want: usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < 512 {
        buf.reserve(want);
    }
    io.poll_read_buf(buf, cx)
}

/// Has the backend closed an idle connection, or sent bytes nobody asked
/// for? Either way it cannot carry a request. Costs no system call when
/// the reactor has seen nothing on the socket.
pub(crate) fn is_stale(conn: &mut H1Conn) -> bool {
    if !conn.buf.is_empty() {
        return true;
    }
    conn.buf.reserve(HEAD_READ);
    conn.io.has_news(&mut conn.buf)
}

/// The request body on its way to the backend.
pub(crate) struct Pump {
    body: ProxyBody,
    kind: BodyKind,
    out: Out,
    allowed: Vec<HeaderName>,
    ended: bool,
}

impl std::fmt::Debug for Pump {
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

impl Pump {
    fn new(body: ProxyBody, kind: BodyKind, allowed: Vec<HeaderName>) -> Pump {
        Pump {
            body,
            kind,
            out: Out::default(),
            allowed,
            ended: kind == BodyKind::Empty,
        }
    }

    fn poll(&mut self, io: &mut UpstreamIo, cx: &mut Context<'_>) -> Poll<Result<(), PumpError>> {
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
    fn into_error(self) -> ProxyError {
        match self {
            HeadFail::Killed => killed_error(),
            HeadFail::Body(e) => match e.downcast_ref::<BodyTooLarge>() {
                Some(t) => ProxyError::with_detail(ErrorKind::BodyTooLarge, t),
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
/// the socket is handed back as [`SendFailure::NotSent`].
///
/// The head is rendered into the connection's own buffer here, before the
/// first poll; the rest of the exchange (head, body, response head,
/// deadline) is the returned [`Exchange`], a named future: it can sit
/// inline in its caller's future (no box per request) and holds the
/// request once. No `Timeout` wraps it; the deadline is watched by the
/// connection's own timer, kept from one exchange to the next
/// ([`super::deadline::LazyTimer`]).
#[inline(always)]
pub(crate) fn send<'a>(
    pool: &'a Arc<Pool>,
    mut conn: Box<H1Conn>,
    req: Box<Request<ProxyBody>>,
    set: &SetLines,
    deadline: tokio::time::Instant,
    raw_head: bool,
) -> Exchange<'a> {
    let framing = write::request_framing(req.method(), req.headers(), req.body());
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let head = write::RequestHead {
        method: req.method(),
        target,
        headers: req.headers(),
        set,
    };
    write::request_head(&mut conn.out, &head, &framing);
    Exchange {
        pool,
        is_head: req.method() == Method::HEAD,
        conn: Some(conn),
        req: Some(req),
        written: false,
        at: 0,
        body: framing.body,
        pump: None,
        write_error: None,
        deadline,
        raw_head,
        failing: None,
    }
}

/// One request's exchange on one HTTP/1.1 connection; see [`send`].
pub(crate) struct Exchange<'a> {
    pool: &'a Arc<Pool>,
    /// Taken when the exchange ends.
    conn: Option<Box<H1Conn>>,
    /// The request; once its head is out (`written`), its head alone (the
    /// body went to the pump), kept until the answer's head: a failure
    /// hands it back, so that a replay needs no copy made in advance.
    req: Option<Box<Request<ProxyBody>>>,
    written: bool,
    /// Bytes of the head written so far.
    at: usize,
    body: BodyKind,
    pump: Option<Pump>,
    write_error: Option<io::Error>,
    deadline: tokio::time::Instant,
    is_head: bool,
    raw_head: bool,
    /// A failure held back for one turn of the scheduler (see
    /// [`Exchange::end`]).
    failing: Option<(Yield, SendFailure)>,
}

type Yield = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl std::fmt::Debug for Exchange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("written", &self.written)
            .field("at", &self.at)
            .field("body", &self.body)
            .finish_non_exhaustive()
    }
}

impl std::future::Future for Exchange<'_> {
    type Output = Result<Box<Response<ProxyBody>>, SendFailure>;

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

impl Exchange<'_> {
    /// Writes the head, then streams the body and waits for the answer's
    /// head, until the deadline.
    fn poll_exchange(&mut self, cx: &mut Context<'_>) -> Poll<Result<(Head, ResponseKind), Ended>> {
        let Some(conn) = self.conn.as_deref_mut() else {
            return Poll::Ready(Err(Ended::TimedOut));
        };
        if !self.written {
            match write::poll_write_all(&mut conn.io, &conn.out, &mut self.at, cx) {
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
                    let body = std::mem::replace(req.body_mut(), ProxyBody::Empty);
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
                    return if conn.timer.poll_passed(self.deadline, cx) {
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
            Poll::Pending if conn.timer.poll_passed(self.deadline, cx) => {
                Poll::Ready(Err(Ended::TimedOut))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// A failure after some of the request may have reached the backend,
    /// with the request's head when it is still here.
    fn sent(&mut self, error: ProxyError) -> SendFailure {
        self.conn = None;
        SendFailure::sent(error, self.req.take().map(|r| r.into_parts().0))
    }

    /// The exchange's result, or `None` when a failure waits for one turn
    /// of the scheduler first (`failing`).
    fn end(
        &mut self,
        waited: Result<(Head, ResponseKind), Ended>,
    ) -> Option<Result<Box<Response<ProxyBody>>, SendFailure>> {
        let (head, kind) = match waited {
            Ok(found) => found,
            Err(Ended::NotSent(request, error)) => {
                self.conn = None;
                return Some(Err(SendFailure::NotSent { request, error }));
            }
            Err(Ended::Sent(error)) => return Some(Err(self.sent(error))),
            // The connection is dropped with the exchange: closed.
            Err(Ended::TimedOut) => {
                return Some(Err(self.sent(ProxyError::new(ErrorKind::UpstreamTimeout))))
            }
            Err(Ended::Head(fail)) => {
                let failure = self.sent(fail.into_error());
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
        let Some(mut conn) = self.conn.take() else {
            return Some(Err(self.sent(ProxyError::new(ErrorKind::UpstreamTimeout))));
        };
        let pump = self.pump.take().filter(|p| !p.ended || !p.out.is_empty());
        let bytes = conn.buf.split_to(head.len).freeze();
        let keeps_alive = head.keeps_alive();
        let made = if self.raw_head && matches!(kind, ResponseKind::Final(_)) {
            raw_response(head, bytes)
        } else {
            response(&head, &bytes).map(|r| (r, None))
        };
        let (mut resp, raw) = match made {
            Ok(r) => r,
            Err(e) => return Some(Err(self.sent(HeadFail::Invalid(e).into_error()))),
        };
        // The head went upstream: the request's box and header map serve
        // the thread's next request.
        if let Some(req) = self.req.take() {
            super::spare::give_request(req);
        }
        let body = match kind {
            ResponseKind::Upgrade => {
                let (io, rest) = (*conn).into_upgraded();
                resp.extensions_mut()
                    .insert(crate::tunnel::RawUpgrade::new(io, rest));
                ProxyBody::Empty
            }
            ResponseKind::Final(kind) => {
                let reusable = keeps_alive && kind != BodyKind::Close && self.write_error.is_none();
                ResponseBody::start(self.pool, conn, kind, pump, reusable)
            }
            ResponseKind::Interim => ProxyBody::Empty,
        };
        *resp.body_mut() = match (raw, body) {
            // A body read from the connection carries the head itself (no
            // second box).
            (Some(raw), ProxyBody::H1(mut b)) => {
                b.raw = Some(raw);
                ProxyBody::H1(b)
            }
            (Some(raw), body) => ProxyBody::with_raw_head(raw, body),
            (None, body) => body,
        };
        Some(Ok(resp))
    }
}

/// How an exchange ended before a final response head.
enum Ended {
    /// Writing the head failed before any byte went out.
    NotSent(Box<Request<ProxyBody>>, ProxyError),
    /// Writing the head failed part-way.
    Sent(ProxyError),
    /// `timeouts.request` passed.
    TimedOut,
    /// The body or the wait for the response head failed.
    Head(HeadFail),
}

/// Streams the request body and reads until a final response head.
fn poll_head(
    conn: &mut H1Conn,
    pump: &mut Pump,
    write_error: &mut Option<io::Error>,
    is_head: bool,
    cx: &mut Context<'_>,
) -> Poll<Result<(Head, ResponseKind), HeadFail>> {
    conn.meta.register(cx.waker());
    if conn.meta.killed() {
        return Poll::Ready(Err(HeadFail::Killed));
    }
    if write_error.is_none() {
        match pump.poll(&mut conn.io, cx) {
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
        if !conn.buf.is_empty() {
            match head::parse_response(&conn.buf) {
                Ok(Some(h)) => match head::response_kind(&h, is_head) {
                    ResponseKind::Interim => {
                        conn.buf.advance(h.len);
                        continue;
                    }
                    kind => return Poll::Ready(Ok((h, kind))),
                },
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(HeadFail::Invalid(e))),
            }
        }
        match ready!(poll_fill(&mut conn.io, &mut conn.buf, HEAD_READ, cx)) {
            Ok(0) => return Poll::Ready(Err(HeadFail::Closed(write_error.take()))),
            Ok(_) => {}
            Err(e) => return Poll::Ready(Err(HeadFail::Io(e))),
        }
    }
}

/// A connection whose exchange ended: back to its pool when the exchange
/// left it `clean` (reusable, the request body sent) with nothing unread,
/// closed otherwise.
fn release(pool: &Pool, conn: Box<H1Conn>, clean: bool) {
    if clean && conn.buf.is_empty() {
        pool.give_back(conn);
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

#[derive(Debug)]
enum Reading {
    Length(u64),
    Chunked(ChunkedDecoder),
    Close,
    Done,
}

/// A response body read from its connection; see the module documentation.
#[derive(Debug)]
pub struct ResponseBody {
    pool: Arc<Pool>,
    conn: Option<Box<H1Conn>>,
    reading: Reading,
    /// The rest of the request body, when the answer came first.
    pump: Option<Pump>,
    reusable: bool,
    /// The answer's head kept raw, until the writer takes it
    /// ([`ProxyBody::raw_head`]).
    pub(crate) raw: Option<RawHead>,
}

impl ResponseBody {
    fn start(
        pool: &Arc<Pool>,
        conn: Box<H1Conn>,
        kind: BodyKind,
        pump: Option<Pump>,
        reusable: bool,
    ) -> ProxyBody {
        let reading = match kind {
            BodyKind::Empty | BodyKind::Length(0) => {
                // Nothing to read: the connection goes back at once.
                release(pool, conn, reusable && pump.is_none());
                return ProxyBody::Empty;
            }
            BodyKind::Length(n) => Reading::Length(n),
            BodyKind::Chunked => Reading::Chunked(ChunkedDecoder::new()),
            BodyKind::Close => Reading::Close,
        };
        ProxyBody::H1(Box::new(ResponseBody {
            pool: Arc::clone(pool),
            conn: Some(conn),
            reading,
            pump,
            reusable,
            raw: None,
        }))
    }

    /// The body ended: the connection goes back to its pool when nothing
    /// of this exchange is left on it, and is closed otherwise.
    fn finish(&mut self) {
        self.reading = Reading::Done;
        let Some(conn) = self.conn.take() else { return };
        release(&self.pool, conn, self.reusable && self.pump.is_none());
    }

    /// Fails the body; the connection is closed.
    fn fail(&mut self, e: BodyError) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.reading = Reading::Done;
        self.conn = None;
        self.pump = None;
        Poll::Ready(Some(Err(Box::new(e))))
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let Some(conn) = self.conn.as_mut() else {
            return Poll::Ready(None);
        };
        conn.meta.register(cx.waker());
        if conn.meta.killed() {
            return self.fail(BodyError::Killed);
        }
        if let Some(pump) = &mut self.pump {
            match pump.poll(&mut conn.io, cx) {
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
        loop {
            let conn = match self.conn.as_mut() {
                Some(c) => c,
                None => return Poll::Ready(None),
            };
            let want = match &mut self.reading {
                Reading::Done => return Poll::Ready(None),
                Reading::Length(n) => {
                    if !conn.buf.is_empty() {
                        let take = (*n).min(conn.buf.len() as u64) as usize;
                        let data = conn.buf.split_to(take).freeze();
                        *n -= take as u64;
                        if *n == 0 {
                            self.finish();
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    (*n).min(BODY_READ as u64) as usize
                }
                Reading::Chunked(dec) => match dec.decode(&conn.buf) {
                    Err(e) => return self.fail(e.into()),
                    Ok(Step::Data { start, len }) => {
                        conn.buf.advance(start);
                        let data = conn.buf.split_to(len).freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(Step::End { start, len }) => {
                        conn.buf.advance(start);
                        let section = conn.buf.split_to(len).freeze();
                        let trailers = match trailer_map(&section) {
                            Ok(t) => t,
                            Err(e) => return self.fail(e.into()),
                        };
                        self.finish();
                        if trailers.is_empty() {
                            return Poll::Ready(None);
                        }
                        return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                    }
                    Ok(Step::Need { consumed }) => {
                        conn.buf.advance(consumed);
                        BODY_READ
                    }
                },
                Reading::Close => {
                    if !conn.buf.is_empty() {
                        let data = conn.buf.split().freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    BODY_READ
                }
            };
            match poll_fill(&mut conn.io, &mut conn.buf, want, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    if matches!(self.reading, Reading::Close) {
                        self.reusable = false;
                        self.finish();
                        return Poll::Ready(None);
                    }
                    return self.fail(BodyError::Closed);
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return self.fail(e.into()),
            }
        }
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        matches!(self.reading, Reading::Done)
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self.reading {
            Reading::Length(n) => SizeHint::with_exact(n),
            Reading::Done => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}
