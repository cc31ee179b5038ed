//! A client's request body read by hopgate's own HTTP/1.1 server
//! ([`super::server`]), and [`RequestBody`], the body type the forwarder
//! takes from either server.
//!
//! While a request with a body is in flight, the client connection (its
//! socket and read buffer) sits in a slot shared by the body and the
//! connection's loop: the body reads from it (and writes the interim
//! `100 Continue` on its first read when the client asked for one), and
//! the loop takes it back when the response is ready. A body read after
//! that fails as abandoned; one taken back unfinished makes the loop close
//! the connection after the response. Bytes past the body's end stay in
//! the buffer: they are the next pipelined request.
//!
//! Errors are `io::Error`s the forwarder classifies like hyper's: a bad
//! chunk is `InvalidData` (a malformed body), anything else (end of stream
//! mid-body, a reset) means the client went away.
//!
//! Must not touch: response writing, routing.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::io::{AsyncRead, AsyncWrite};

use super::chunked::{ChunkedDecoder, Step};
use crate::body::BoxError;

/// A client socket as the native server holds it (plain TCP or TLS, with
/// the connection's deadlines).
pub(crate) trait ClientStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> ClientStream for T {}

/// A client connection: its socket and what was read from it and not yet
/// used.
pub(crate) struct Conn {
    pub(crate) io: Box<dyn ClientStream>,
    pub(crate) buf: BytesMut,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("buffered", &self.buf.len())
            .finish()
    }
}

/// Bytes asked of the kernel per read of a body.
const BODY_READ: usize = 64 * 1024;

impl Conn {
    /// Reads what the socket has into the buffer: `Ok(0)` at end of stream.
    pub(crate) fn poll_fill(
        &mut self,
        want: usize,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < 512 {
            self.buf.reserve(want);
        }
        tokio_util::io::poll_read_buf(Pin::new(&mut *self.io), cx, &mut self.buf)
    }
}

/// What the body and the connection's loop share: the connection while
/// the body may read it, and whether the body was read to its end.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) conn: Option<Conn>,
    pub(crate) done: bool,
    /// The final answer is on its way: no `100 Continue` any more.
    pub(crate) answered: bool,
}

/// See [`Shared`].
pub(crate) type Slot = Arc<parking_lot::Mutex<Shared>>;

const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

#[derive(Debug)]
enum Reading {
    Length(u64),
    Chunked(ChunkedDecoder),
    Done,
}

/// A request body read from the client's connection.
#[derive(Debug)]
pub struct ServerBody {
    slot: Slot,
    reading: Reading,
    /// How much of `100 Continue` is still to be written (0: none).
    continue_left: u8,
}

impl ServerBody {
    /// `chunked` or `length` bytes; `expect_continue`: the client waits for
    /// `100 Continue` before sending it.
    pub(crate) fn new(slot: Slot, chunked: bool, length: u64, expect_continue: bool) -> ServerBody {
        ServerBody {
            slot,
            reading: if chunked {
                Reading::Chunked(ChunkedDecoder::new())
            } else {
                Reading::Length(length)
            },
            continue_left: if expect_continue {
                CONTINUE.len() as u8
            } else {
                0
            },
        }
    }

    fn fail(&mut self, e: io::Error) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.reading = Reading::Done;
        Poll::Ready(Some(Err(Box::new(e))))
    }

    fn poll_frame_inner(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if matches!(self.reading, Reading::Done) {
            return Poll::Ready(None);
        }
        let slot = Arc::clone(&self.slot);
        let mut guard = slot.lock();
        let shared = &mut *guard;
        let Some(conn) = shared.conn.as_mut() else {
            return self.fail(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the request body was abandoned: the response was already sent",
            ));
        };
        // The client waits for this before it sends the body: written on
        // the first read, as hyper does (never after the final answer).
        if shared.answered {
            self.continue_left = 0;
        }
        while self.continue_left > 0 {
            let at = CONTINUE.len() - self.continue_left as usize;
            match ready!(Pin::new(&mut *conn.io).poll_write(cx, &CONTINUE[at..])) {
                Ok(0) => return self.fail(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.continue_left -= n as u8,
                Err(e) => return self.fail(e),
            }
        }
        loop {
            let want = match &mut self.reading {
                Reading::Done => return Poll::Ready(None),
                Reading::Length(n) => {
                    if *n == 0 {
                        self.reading = Reading::Done;
                        shared.done = true;
                        return Poll::Ready(None);
                    }
                    if !conn.buf.is_empty() {
                        let take = (*n).min(conn.buf.len() as u64) as usize;
                        let data = conn.buf.split_to(take).freeze();
                        *n -= take as u64;
                        if *n == 0 {
                            self.reading = Reading::Done;
                            shared.done = true;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    (*n).min(BODY_READ as u64) as usize
                }
                Reading::Chunked(dec) => match dec.decode(&conn.buf) {
                    Err(e) => {
                        return self.fail(io::Error::new(io::ErrorKind::InvalidData, e.0));
                    }
                    Ok(Step::Data { start, len }) => {
                        conn.buf.advance(start);
                        let data = conn.buf.split_to(len).freeze();
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    Ok(Step::End { start, len }) => {
                        conn.buf.advance(start);
                        let section = conn.buf.split_to(len).freeze();
                        self.reading = Reading::Done;
                        shared.done = true;
                        return match super::response_head::trailer_map(&section) {
                            Ok(t) if t.is_empty() => Poll::Ready(None),
                            Ok(t) => Poll::Ready(Some(Ok(Frame::trailers(t)))),
                            Err(e) => self.fail(io::Error::new(io::ErrorKind::InvalidData, e)),
                        };
                    }
                    Ok(Step::Need { consumed }) => {
                        conn.buf.advance(consumed);
                        BODY_READ
                    }
                },
            };
            match ready!(conn.poll_fill(want, cx)) {
                Ok(0) => {
                    return self.fail(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client closed the connection before the end of the request body",
                    ))
                }
                Ok(_) => {}
                Err(e) => return self.fail(e),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.reading, Reading::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.reading {
            Reading::Length(n) => SizeHint::with_exact(n),
            Reading::Done => SizeHint::with_exact(0),
            Reading::Chunked(_) => SizeHint::default(),
        }
    }
}

/// The request body the forwarder takes: hyper's (HTTP/2, and HTTP/1.1 on
/// a listener set to `http1: hyper`), hopgate's own server's, or none.
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
            RequestBody::Native(b) => b.poll_frame_inner(cx),
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
