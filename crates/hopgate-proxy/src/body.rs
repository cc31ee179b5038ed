//! Bodies that flow through the gateway, without boxing on the hot path.
//!
//! Owns [`ProxyBody`], the one body type used for upstream requests and
//! client responses: a streamed client body (optionally size-limited), a
//! body the gateway wrote itself, or nothing. Upstream response bodies
//! carry the pooled connection they came on and give it back when they end
//! (see [`crate::pool`]; HTTP/1.1 ones are read by [`crate::h1::client`]).
//! Also [`RequestBody`], a client's request body as either server hands it
//! over, and what `ProxyBody` is to the HTTP/1.1 codec
//! ([`crate::h1::Payload`], with the per-thread spares of the boxes a
//! request and its answer ride in: [`spare`]), and a request body
//! copied for a route's mirror as it passes ([`tee`]).
//!
//! Must not touch: routing, node state.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hopgate_core::error::ErrorKind;
use hopgate_core::node::{now_ms, NodeState};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::forward::AccessLine;
use crate::forward::LoggedBody;
use crate::h1::client::FromUpstream;
use crate::h1::{Payload, RawHead, ResponseBody, ServerBody};
use crate::pool::conn::H1Conn;
use crate::send_watch::SendWatch;

mod spare;
pub(crate) mod tee;

pub(crate) use crate::h1::BoxError;

/// An HTTP/1.1 upstream response body: read by the codec from a pooled
/// connection, which it gives back when the body ends.
#[derive(Debug)]
pub struct H1Body(ResponseBody<Box<H1Conn>, ProxyBody>);

/// The request body the forwarder takes: hyper's (HTTP/2), hopgate's own
/// HTTP/1.1 server's, or none.
#[derive(Debug)]
pub enum RequestBody {
    Empty,
    Hyper(Incoming),
    Native(Box<ServerBody>),
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Hyper(b) => Pin::new(b)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|e| Box::new(e) as BoxError))),
            RequestBody::Native(b) => Pin::new(b.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Hyper(b) => b.is_end_stream(),
            RequestBody::Native(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Hyper(b) => b.size_hint(),
            RequestBody::Native(b) => b.size_hint(),
        }
    }
}

/// The request body exceeded `limits.max_body_bytes`.
#[derive(Debug, thiserror::Error)]
#[error("request body larger than {limit} bytes")]
pub(crate) struct BodyTooLarge {
    pub limit: u64,
}

/// What the client's side of a streamed request body last did. Shared by
/// the body (inside the upstream send, where the client's errors show
/// first) and the request's driver, which asks it after a failed send
/// whether the fault was the client's ([`ClientBody::fault`]): a broken or
/// aborted body, or a send that timed out while waiting on the client, is
/// never charged to the node.
#[derive(Debug, Default)]
pub struct ClientBody(AtomicU8);

impl ClientBody {
    /// Bytes came, or nothing was asked yet.
    const FLOWING: u8 = 0;
    /// The last read found nothing: waiting on the client.
    const WAITING: u8 = 1;
    const ENDED: u8 = 2;
    const MALFORMED: u8 = 3;
    const ABORTED: u8 = 4;
    const TOO_LARGE: u8 = 5;

    /// A failure stays recorded: a body polled again after its error
    /// (what an HTTP/2 body read ahead passes on) does not clear it. The
    /// body is the only writer.
    fn set(&self, state: u8) {
        if self.0.load(Ordering::Relaxed) < ClientBody::MALFORMED {
            self.0.store(state, Ordering::Relaxed);
        }
    }

    /// Records an error of the client's body.
    pub(crate) fn failed(&self, e: &BoxError) {
        self.set(if body_error(e) == ErrorKind::MalformedBody {
            ClientBody::MALFORMED
        } else {
            ClientBody::ABORTED
        });
    }

    /// The client's fault behind a failed send, if it was one. With
    /// `timed_out` (no answer within `timeouts.request`), a body still
    /// waiting on the client is the client's fault too; a body the backend
    /// stopped reading, or one that ended, is not.
    pub(crate) fn fault(&self, timed_out: bool) -> Option<ErrorKind> {
        match self.0.load(Ordering::Relaxed) {
            ClientBody::MALFORMED => Some(ErrorKind::MalformedBody),
            ClientBody::ABORTED => Some(ErrorKind::ClientAborted),
            ClientBody::TOO_LARGE => Some(ErrorKind::BodyTooLarge),
            ClientBody::WAITING if timed_out => Some(ErrorKind::ClientTimeout),
            _ => None,
        }
    }
}

/// What a client body's read error means: a framing error (a bad chunk:
/// the decoder's `InvalidInput`/`InvalidData`) is a malformed body;
/// anything else (end of stream mid-body, a reset, an HTTP/2 stream reset
/// by the client) means the client went away.
pub(crate) fn client_error(e: &hyper::Error) -> ErrorKind {
    use std::error::Error as _;
    let mut src = e.source();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
                    ErrorKind::MalformedBody
                }
                _ => ErrorKind::ClientAborted,
            };
        }
        src = s.source();
    }
    if e.is_parse() {
        ErrorKind::MalformedBody
    } else {
        ErrorKind::ClientAborted
    }
}

/// What an error of a client's body means, from either server: hyper's
/// errors as [`client_error`] reads them; hopgate's own server's are
/// `io::Error`s of the same kinds (a bad chunk is `InvalidData`).
pub(crate) fn body_error(e: &BoxError) -> ErrorKind {
    if let Some(e) = e.downcast_ref::<hyper::Error>() {
        client_error(e)
    } else if let Some(io) = e.downcast_ref::<std::io::Error>() {
        match io.kind() {
            std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => {
                ErrorKind::MalformedBody
            }
            _ => ErrorKind::ClientAborted,
        }
    } else {
        ErrorKind::ClientAborted
    }
}

/// The error kind of a client body read that failed while the gateway
/// read it itself (a buffered body).
pub(crate) fn read_error(e: &BoxError) -> ErrorKind {
    if e.is::<hyper::Error>() || e.is::<std::io::Error>() {
        body_error(e)
    } else if e.is::<BodyTooLarge>() {
        ErrorKind::BodyTooLarge
    } else {
        ErrorKind::BadRequest
    }
}

/// A body streaming through the gateway.
#[derive(Debug, Default)]
pub enum ProxyBody {
    #[default]
    Empty,
    /// A complete body held in memory (error pages, replayed requests).
    Full(Option<Bytes>),
    /// A client request body (from hyper's server or hopgate's own),
    /// streamed, failing once it passes `limit` bytes;
    /// what it does is recorded in `watch`, when there is one.
    Limited {
        inner: RequestBody,
        seen: u64,
        limit: u64,
        watch: Option<Arc<ClientBody>>,
    },
    /// An HTTP/1.1 upstream response body read by hopgate's codec; it
    /// hands its connection back to the pool once read to the end.
    H1(Box<H1Body>),
    /// An upstream response body from hyper (HTTP/2: the connection is
    /// shared, nothing goes back to the pool when it ends).
    Upstream(Incoming),
    /// A body whose first bytes (and trailers) were already read, then the
    /// rest as it comes. Boxed, like every variant larger than a streamed
    /// request body: a `ProxyBody` is moved with every request and answer.
    Prefixed(Box<Prefixed>),
    /// A gRPC response stream from a node that may drain: at the service's
    /// drain deadline it ends with `grpc-status: 14` (UNAVAILABLE).
    Guarded(Box<Guarded>),
    /// An HTTP/2 client's response under the send stall limit.
    SendWatched(Box<SendWatch<ProxyBody>>),
    /// A client's response whose access line waits for its end.
    Logged(Box<LoggedBody<ProxyBody, dyn AccessLine>>),
    /// An answer whose head is kept as the backend's bytes
    /// ([`crate::h1::response_head::RawHead`]), and its body (an `H1` body carries
    /// the head itself). The head rides with the body (not in the
    /// response's extensions, a map and two allocations more per answer);
    /// it is taken off by the writer
    /// ([`ProxyBody::take_raw_head`]) or turned into header-map entries
    /// ([`crate::h1::response_head::materialize`]).
    Headed(Box<Headed>),
    /// An answer whose request counts against a rate limit's
    /// `max_in_flight` until its body ends ([`crate::limit::hold`]).
    Held(Box<HeldBody>),
    /// A client's request body copied for a route's mirror as it is read
    /// ([`tee`]).
    Teed(Box<tee::Teed>),
    /// The mirror's copy of a client's request body ([`tee`]).
    Copied(Box<tee::Copied>),
}

/// See [`ProxyBody::Held`].
#[derive(Debug)]
pub struct HeldBody {
    inner: ProxyBody,
    _held: hopgate_core::limit::Held,
}

/// See [`ProxyBody::Headed`]. Its box is kept for the thread's next
/// answer when the head is taken off ([`spare::headed`]): a
/// box freed and asked for again at once took the allocator's slow path
/// on every answer (~150 instructions). `raw` is `None` only in a spare.
#[derive(Debug)]
pub struct Headed {
    pub(crate) raw: Option<RawHead>,
    pub(crate) body: ProxyBody,
}

/// See [`ProxyBody::Prefixed`].
#[derive(Debug)]
pub struct Prefixed {
    pub head: Option<Bytes>,
    pub trailers: Option<http::HeaderMap>,
    pub rest: ProxyBody,
}

/// See [`ProxyBody::Guarded`].
#[derive(Debug)]
pub struct Guarded {
    inner: ProxyBody,
    node: Arc<NodeState>,
    deadline: Duration,
    /// The call's own deadline (`grpc-timeout`), if it has one.
    until: Option<tokio::time::Instant>,
    tick: Pin<Box<tokio::time::Sleep>>,
    ended: bool,
}

/// How often a guarded stream looks at its node's drain state.
const DRAIN_POLL: Duration = Duration::from_millis(100);

impl Guarded {
    fn due(&self) -> bool {
        self.node
            .draining_since()
            .is_some_and(|since| now_ms() >= since + self.deadline.as_millis() as u64)
    }

    fn deadline_exceeded() -> Frame<Bytes> {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", http::HeaderValue::from_static("4"));
        t.insert(
            "grpc-message",
            http::HeaderValue::from_static("hopgate%3A%20deadline%20exceeded"),
        );
        Frame::trailers(t)
    }

    fn unavailable() -> Frame<Bytes> {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", http::HeaderValue::from_static("14"));
        t.insert(
            "grpc-message",
            http::HeaderValue::from_static("node%20drained%3B%20retry%20elsewhere"),
        );
        Frame::trailers(t)
    }
}

/// A streamed client body's next frame, failing once more than `limit`
/// bytes came; what the client did is recorded in `watch`.
fn poll_limited(
    inner: &mut RequestBody,
    seen: &mut u64,
    limit: u64,
    watch: Option<&ClientBody>,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
    let polled = Pin::new(inner).poll_frame(cx);
    let state = match &polled {
        Poll::Ready(Some(Ok(frame))) => {
            *seen += frame.data_ref().map_or(0, |d| d.len() as u64);
            if *seen > limit {
                if let Some(w) = watch {
                    w.set(ClientBody::TOO_LARGE);
                }
                return Poll::Ready(Some(Err(Box::new(BodyTooLarge { limit }))));
            }
            ClientBody::FLOWING
        }
        Poll::Ready(Some(Err(e))) if body_error(e) == ErrorKind::MalformedBody => {
            ClientBody::MALFORMED
        }
        Poll::Ready(Some(Err(_))) => ClientBody::ABORTED,
        Poll::Ready(None) => ClientBody::ENDED,
        Poll::Pending => ClientBody::WAITING,
    };
    if let Some(w) = watch {
        w.set(state);
    }
    polled
}

impl Guarded {
    /// The stream's next frame, or its end at the call's own deadline or
    /// at the node's drain deadline.
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        loop {
            if self.until.is_some_and(|u| tokio::time::Instant::now() >= u) {
                self.ended = true;
                self.inner = ProxyBody::Empty;
                return Poll::Ready(Some(Ok(Guarded::deadline_exceeded())));
            }
            if self.due() {
                self.ended = true;
                // Dropping the upstream body resets its stream.
                self.inner = ProxyBody::Empty;
                tracing::info!(node = %self.node.key().node, "gRPC stream ended at the drain deadline");
                return Poll::Ready(Some(Ok(Guarded::unavailable())));
            }
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(other) => return Poll::Ready(other),
                Poll::Pending => {}
            }
            match self.tick.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.tick
                        .as_mut()
                        .reset(tokio::time::Instant::now() + DRAIN_POLL);
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl ProxyBody {
    /// `inner`, holding `held` (a place in a rate limit's
    /// `max_in_flight`) until it ends or is dropped.
    pub(crate) fn held(inner: ProxyBody, held: hopgate_core::limit::Held) -> ProxyBody {
        ProxyBody::Held(Box::new(HeldBody { inner, _held: held }))
    }

    pub fn full(b: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Full(Some(b.into()))
    }

    /// Wraps a gRPC response so it ends with UNAVAILABLE once `node` has
    /// been draining for `deadline`.
    pub fn guarded(
        inner: ProxyBody,
        node: Arc<NodeState>,
        deadline: Duration,
        until: Option<tokio::time::Instant>,
    ) -> ProxyBody {
        ProxyBody::Guarded(Box::new(Guarded {
            inner,
            node,
            deadline,
            until,
            tick: Box::pin(tokio::time::sleep(DRAIN_POLL)),
            ended: false,
        }))
    }

    pub fn limited(inner: RequestBody, limit: u64) -> ProxyBody {
        ProxyBody::Limited {
            inner,
            seen: 0,
            limit,
            watch: None,
        }
    }

    /// [`ProxyBody::limited`], recording what the client does in `watch`.
    pub(crate) fn watched(inner: RequestBody, limit: u64, watch: Arc<ClientBody>) -> ProxyBody {
        ProxyBody::Limited {
            inner,
            seen: 0,
            limit,
            watch: Some(watch),
        }
    }

    /// `body` with the head it came with kept raw ([`ProxyBody::Headed`]).
    #[inline]
    pub(crate) fn with_raw_head(raw: RawHead, body: ProxyBody) -> ProxyBody {
        let mut h = spare::headed();
        h.raw = Some(raw);
        h.body = body;
        ProxyBody::Headed(h)
    }

    /// The raw head this answer's body carries, if any (under the access
    /// log's wrapper too).
    #[inline]
    pub(crate) fn raw_head(&self) -> Option<&RawHead> {
        match self {
            ProxyBody::Headed(h) => h.raw.as_ref(),
            ProxyBody::H1(b) => b.0.raw_head(),
            ProxyBody::Logged(l) => l.inner().raw_head(),
            ProxyBody::Held(h) => h.inner.raw_head(),
            _ => None,
        }
    }

    /// Replaces the body of `resp` with `f` of it, in place (an answer
    /// is boxed; `Response::map` would move it out and back).
    pub(crate) fn wrap_in(
        resp: &mut http::Response<ProxyBody>,
        f: impl FnOnce(ProxyBody) -> ProxyBody,
    ) {
        let body = std::mem::replace(resp.body_mut(), ProxyBody::Empty);
        *resp.body_mut() = f(body);
    }

    /// Puts `body` where an empty placeholder usually is (a request's
    /// body, set apart until its first attempt): the placeholder owns
    /// nothing and is not dropped (a call to the body's drop glue per
    /// request); anything else there is dropped as usual.
    #[inline]
    pub(crate) fn put_into(place: &mut ProxyBody, body: ProxyBody) {
        let old = std::mem::replace(place, body);
        if matches!(old, ProxyBody::Empty) {
            // Owns nothing: nothing to free.
            std::mem::forget(old);
        } else {
            drop(old);
        }
    }

    /// Takes the raw head off this answer's body, leaving the body.
    #[inline]
    pub(crate) fn take_raw_head(&mut self) -> Option<RawHead> {
        match self {
            ProxyBody::Headed(h) => {
                let raw = h.raw.take();
                // The body moves out of its box once, and the box (empty
                // now) goes back to the thread's spare: no placeholder
                // body is made and dropped on the way.
                let body = std::mem::take(&mut h.body);
                if let ProxyBody::Headed(h) = std::mem::replace(self, body) {
                    spare::give_headed(h);
                }
                raw
            }
            ProxyBody::H1(b) => b.0.take_raw_head(),
            ProxyBody::Logged(l) => l.inner_mut().take_raw_head(),
            ProxyBody::Held(h) => h.inner.take_raw_head(),
            _ => None,
        }
    }

    /// A body whose first bytes (`head`, when not empty) and `trailers`
    /// were already read, then `rest`.
    pub fn prefixed(
        head: Option<Bytes>,
        trailers: Option<http::HeaderMap>,
        rest: ProxyBody,
    ) -> ProxyBody {
        ProxyBody::Prefixed(Box::new(Prefixed {
            head,
            trailers,
            rest,
        }))
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Limited {
                inner,
                seen,
                limit,
                watch,
            } => poll_limited(inner, seen, *limit, watch.as_deref(), cx),
            ProxyBody::H1(b) => b.0.poll_frame(cx),
            ProxyBody::Upstream(inner) => Pin::new(inner)
                .poll_frame(cx)
                .map_err(|e| Box::new(e) as BoxError),
            ProxyBody::Prefixed(p) => {
                if let Some(b) = p.head.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                if let Some(t) = p.trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                Pin::new(&mut p.rest).poll_frame(cx)
            }
            ProxyBody::SendWatched(w) => Pin::new(w.as_mut()).poll_frame(cx),
            ProxyBody::Logged(l) => l.poll_frame(cx),
            ProxyBody::Headed(h) => Pin::new(&mut h.body).poll_frame(cx),
            ProxyBody::Guarded(g) => g.poll_frame(cx),
            ProxyBody::Held(h) => Pin::new(&mut h.inner).poll_frame(cx),
            ProxyBody::Teed(t) => t.poll_frame(cx),
            ProxyBody::Copied(c) => c.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Limited { inner, .. } => inner.is_end_stream(),
            ProxyBody::Upstream(inner) => inner.is_end_stream(),
            ProxyBody::H1(b) => b.0.is_end_stream(),
            // A gRPC answer that is complete with its head (trailers-only:
            // `grpc-status` in the HEADERS frame with END_STREAM) must say
            // so, or hyper sends the head without END_STREAM and an empty
            // DATA frame after it, which C-core clients (grpcio, grpc-go's
            // peers) report as UNKNOWN "Stream removed" instead of the
            // status the server sent.
            ProxyBody::Guarded(g) => g.ended || g.inner.is_end_stream(),
            ProxyBody::SendWatched(w) => w.is_end_stream(),
            ProxyBody::Logged(l) => l.is_end_stream(),
            ProxyBody::Headed(h) => h.body.is_end_stream(),
            ProxyBody::Held(h) => h.inner.is_end_stream(),
            ProxyBody::Teed(t) => t.is_end_stream(),
            ProxyBody::Copied(_) => false,
            ProxyBody::Prefixed(p) => {
                p.head.is_none() && p.trailers.is_none() && p.rest.is_end_stream()
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Limited { inner, .. } => inner.size_hint(),
            ProxyBody::Upstream(inner) => inner.size_hint(),
            ProxyBody::SendWatched(w) => w.size_hint(),
            ProxyBody::Logged(l) => l.size_hint(),
            ProxyBody::Headed(h) => h.body.size_hint(),
            ProxyBody::H1(b) => b.0.size_hint(),
            ProxyBody::Held(h) => h.inner.size_hint(),
            ProxyBody::Teed(t) => t.size_hint(),
            ProxyBody::Guarded(_) | ProxyBody::Prefixed(_) | ProxyBody::Copied(_) => {
                SizeHint::default()
            }
        }
    }
}

/// What the HTTP/1.1 codec needs of the gateway's body: the thread's
/// spare boxes, the raw head an answer carries, a whole body's bytes at
/// hand.
impl Payload for ProxyBody {
    fn request() -> Box<Request<ProxyBody>> {
        spare::request()
    }

    fn give_request(req: Box<Request<ProxyBody>>) {
        spare::give_request(req);
    }

    fn response() -> Box<Response<ProxyBody>> {
        spare::response()
    }

    fn give_response(resp: Box<Response<ProxyBody>>) {
        spare::give_response(resp);
    }

    #[inline]
    fn with_raw_head(raw: RawHead, body: ProxyBody) -> ProxyBody {
        ProxyBody::with_raw_head(raw, body)
    }

    #[inline]
    fn raw_head(&self) -> Option<&RawHead> {
        ProxyBody::raw_head(self)
    }

    #[inline]
    fn take_raw_head(&mut self) -> Option<RawHead> {
        ProxyBody::take_raw_head(self)
    }

    fn take_whole(&mut self) -> Option<Option<Bytes>> {
        match self {
            ProxyBody::Full(b) => Some(b.take()),
            _ => None,
        }
    }

    fn after_trailers(trailers: HeaderMap, rest: ProxyBody) -> ProxyBody {
        ProxyBody::prefixed(None, Some(trailers), rest)
    }

    fn own_error(e: &BoxError) -> Option<ErrorKind> {
        e.is::<BodyTooLarge>().then_some(ErrorKind::BodyTooLarge)
    }
}

impl FromUpstream<Box<H1Conn>> for ProxyBody {
    fn from_upstream(body: ResponseBody<Box<H1Conn>, ProxyBody>) -> ProxyBody {
        ProxyBody::H1(Box::new(H1Body(body)))
    }
}
