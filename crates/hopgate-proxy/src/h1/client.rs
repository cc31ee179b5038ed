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
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use hopgate_core::error::{ErrorKind, ProxyError};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};

use super::chunked::{ChunkedDecoder, Step};
use super::head::{self, BodyKind, Head, HeaderRange, ResponseKind};
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
    req: Request<ProxyBody>,
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
    req: Option<Request<ProxyBody>>,
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
    type Output = Result<Response<ProxyBody>, SendFailure>;

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
                            return Poll::Ready(Err(Ended::NotSent(Box::new(request), error)));
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
    ) -> Option<Result<Response<ProxyBody>, SendFailure>> {
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
        self.req = None;
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

/// The status code of a head.
fn status_of(head: &Head) -> Result<StatusCode, head::HeadError> {
    StatusCode::from_u16(head.status).map_err(|_| head::HeadError::Malformed("invalid status"))
}

/// The response head as an `http` response with an empty body.
fn response(head: &Head, bytes: &Bytes) -> Result<Response<ProxyBody>, head::HeadError> {
    let mut resp = Response::new(ProxyBody::Empty);
    *resp.status_mut() = status_of(head)?;
    *resp.version_mut() = version_of(head);
    let headers = resp.headers_mut();
    headers.reserve(head.headers.len());
    for h in &head.headers {
        let (name, value) = header_of(bytes, h)?;
        headers.append(name, value);
    }
    reason_into(&mut resp, bytes, head.reason.clone());
    Ok(resp)
}

fn version_of(head: &Head) -> Version {
    if head.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    }
}

/// One header line of `bytes` as a name and a value (sharing `bytes`).
fn header_of(bytes: &Bytes, h: &HeaderRange) -> Result<(HeaderName, HeaderValue), head::HeadError> {
    let name = HeaderName::from_bytes(&bytes[h.name.clone()])
        .map_err(|_| head::HeadError::Malformed("invalid header name"))?;
    let value = HeaderValue::from_maybe_shared(bytes.slice(h.value.clone()))
        .map_err(|_| head::HeadError::Malformed("invalid header value"))?;
    Ok((name, value))
}

/// A reason phrase other than the status code's usual one is kept (and
/// written back as it came).
fn reason_into<B>(resp: &mut Response<B>, bytes: &Bytes, reason: Range<usize>) {
    let text = &bytes[reason.clone()];
    if !text.is_empty() && resp.status().canonical_reason().map(str::as_bytes) != Some(text) {
        if let Ok(r) = hyper::ext::ReasonPhrase::try_from(bytes.slice(reason)) {
            resp.extensions_mut().insert(r);
        }
    }
}

/// A response head kept as the backend sent it: the head's bytes and its
/// header lines as ranges of them, carried with the answer's body
/// ([`ProxyBody::Headed`]) while the response's header map holds only what
/// the gateway adds. hopgate's own HTTP/1.1 server writes such a head line
/// by line, as it came (names in the backend's case); every other consumer
/// turns it into header-map entries first ([`materialize`]). Made only for
/// a client connection on that server, and kept only when the answer step
/// has nothing to take out of the head ([`crate::headers::passes_raw`]).
#[derive(Clone, Debug)]
pub(crate) struct RawHead {
    /// The head, its empty last line included.
    bytes: Bytes,
    lines: head::Lines,
    reason: Range<usize>,
    /// The value of its `Content-Length` (checked by the parser).
    content_length: Option<u64>,
}

impl RawHead {
    /// The header lines: name and value, as the backend wrote them.
    pub(crate) fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.lines
            .iter()
            .map(|h| (&self.bytes[h.name.clone()], &self.bytes[h.value.clone()]))
    }

    /// The `Content-Length` the head declares.
    pub(crate) fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The header lines whose names `keep` says yes to, handed to `out`
    /// as runs of whole lines (line ends included), one slice per run: a
    /// head with one line left out is written in two pieces.
    pub(crate) fn kept_runs<'a>(
        &'a self,
        mut keep: impl FnMut(&[u8]) -> bool,
        mut out: impl FnMut(&'a [u8]),
    ) {
        let mut run = None;
        for h in &self.lines {
            if keep(&self.bytes[h.name.clone()]) {
                run.get_or_insert(h.name.start);
            } else if let Some(start) = run.take() {
                out(&self.bytes[start..h.name.start]);
            }
        }
        if let Some(start) = run {
            // Up to the empty line that ends the head.
            out(&self.bytes[start..self.bytes.len() - 2]);
        }
    }

    /// The reason phrase as the backend wrote it.
    pub(crate) fn reason(&self) -> &[u8] {
        &self.bytes[self.reason.clone()]
    }

    /// The backend's status line, line end included, when it is the line
    /// the gateway would write for `status` to a client of HTTP/1.`minor`:
    /// that version, that code, a reason phrase (`httparse` took exactly
    /// one space after the version and after the code, and the parse
    /// refused bare LFs, so the line is version, space, code, space,
    /// reason, CRLF).
    pub(crate) fn status_line(&self, status: u16, minor: u8) -> Option<&[u8]> {
        let version: &[u8] = if minor == 0 {
            b"HTTP/1.0 "
        } else {
            b"HTTP/1.1 "
        };
        let end = self.reason.end + 2;
        let line = self.bytes.get(..end)?;
        let code = [
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        (!self.reason.is_empty()
            && line.starts_with(version)
            && line.get(9..13) == Some(&[code[0], code[1], code[2], b' '])
            && line.ends_with(b"\r\n"))
        .then_some(line)
    }

    /// The raw head of a whole response head in `bytes`.
    #[cfg(test)]
    pub(crate) fn parsed(bytes: &[u8]) -> RawHead {
        let bytes = Bytes::copy_from_slice(bytes);
        let head = head::parse_response(&bytes)
            .expect("a valid head")
            .expect("a whole head");
        RawHead {
            lines: head.headers,
            reason: head.reason,
            content_length: head.facts.content_length,
            bytes,
        }
    }
}

/// The response head as an `http` response with an empty header map, and
/// the head kept raw ([`RawHead`]) for its body to carry.
fn raw_response(
    head: Head,
    bytes: Bytes,
) -> Result<(Response<ProxyBody>, Option<RawHead>), head::HeadError> {
    let mut resp = Response::new(ProxyBody::Empty);
    *resp.status_mut() = status_of(&head)?;
    *resp.version_mut() = version_of(&head);
    let raw = RawHead {
        bytes,
        lines: head.headers,
        reason: head.reason,
        content_length: head.facts.content_length,
    };
    Ok((resp, Some(raw)))
}

/// Turns a response's raw head ([`RawHead`]), if its body carries one,
/// into header-map entries, placed before the ones the gateway added (whose
/// names never repeat one of the backend's but `Set-Cookie`: the answer
/// step materializes first otherwise). A line that does not convert —
/// none can: `httparse` takes the same name and value bytes as `http` —
/// is dropped.
pub(crate) fn materialize(resp: &mut Response<ProxyBody>) {
    let Some(raw) = resp.body_mut().take_raw_head() else {
        return;
    };
    let added = std::mem::take(resp.headers_mut());
    let headers = resp.headers_mut();
    headers.reserve(raw.lines.len() + added.len());
    for h in &raw.lines {
        if let Ok((name, value)) = header_of(&raw.bytes, h) {
            headers.append(name, value);
        }
    }
    let mut last = None;
    for (name, value) in added {
        if let Some(n) = name {
            last = Some(n);
        }
        if let Some(n) = &last {
            headers.append(n.clone(), value);
        }
    }
    reason_into(resp, &raw.bytes, raw.reason);
}

/// Trailer lines as a header map.
pub(crate) fn trailer_map(section: &Bytes) -> Result<HeaderMap, head::HeadError> {
    let mut map = HeaderMap::new();
    for h in head::parse_trailers(section)? {
        let name = HeaderName::from_bytes(&section[h.name.clone()])
            .map_err(|_| head::HeadError::Malformed("invalid trailer name"))?;
        let value = HeaderValue::from_maybe_shared(section.slice(h.value.clone()))
            .map_err(|_| head::HeadError::Malformed("invalid trailer value"))?;
        map.append(name, value);
    }
    Ok(map)
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
