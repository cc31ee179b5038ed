//! A client's request body read by hopgate's own HTTP/1.1 server
//! ([`super::server`]) with the one body reader ([`super::body`]).
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

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite};

use super::body::{ReadError, Reading};
use super::chunked::ChunkedDecoder;
use super::spare;
use super::BoxError;

/// A client socket as the native server holds it (plain TCP or TLS, with
/// the connection's deadlines).
pub trait ClientStream: AsyncRead + AsyncWrite + Send + Unpin {}
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

/// Reads what `io` has into `buf`: `Ok(0)` at end of stream. A buffer
/// with no room at all (an idle connection's) is one of the thread's
/// spares from then on.
fn fill(
    io: &mut Box<dyn ClientStream>,
    buf: &mut BytesMut,
    want: usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() == 0 {
        *buf = spare::buffer();
    }
    if buf.capacity() - buf.len() < 512 {
        buf.reserve(want);
    }
    tokio_util::io::poll_read_buf(Pin::new(&mut **io), cx, buf)
}

impl Conn {
    /// Reads what the socket has into the buffer: `Ok(0)` at end of stream.
    pub(crate) fn poll_fill(
        &mut self,
        want: usize,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        fill(&mut self.io, &mut self.buf, want, cx)
    }

    /// [`Conn::poll_fill`] for a connection between requests: when no
    /// bytes come (or the stream ends), the buffer goes back to the
    /// thread's spares, and the next read borrows one ([`fill`]), so a
    /// waiting connection holds no buffer.
    pub(crate) fn poll_fill_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let r = fill(&mut self.io, &mut self.buf, spare::READ_BUFFER, cx);
        if !matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            spare::give_buffer(std::mem::take(&mut self.buf));
        }
        r
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
            // A length of 0 too is read (to its end at once): the loop
            // learns from the read that the body ended.
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

    /// Writes what is left of `100 Continue`, unless the final answer is
    /// on its way.
    fn poll_continue(
        &mut self,
        conn: &mut Conn,
        answered: bool,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if answered {
            self.continue_left = 0;
        }
        while self.continue_left > 0 {
            let at = CONTINUE.len() - self.continue_left as usize;
            match ready!(Pin::new(&mut *conn.io).poll_write(cx, &CONTINUE[at..])) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.continue_left -= n as u8,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// What a read error of a request body is to the forwarder: a framing
/// error is `InvalidData` (a malformed body), the end of the stream
/// mid-body `UnexpectedEof` (the client went away).
fn client_error(e: ReadError) -> io::Error {
    match e {
        ReadError::Eof => io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the client closed the connection before the end of the request body",
        ),
        ReadError::Io(e) => e,
        ReadError::Chunked(e) => io::Error::new(io::ErrorKind::InvalidData, e.0),
        ReadError::Trailers(e) => io::Error::new(io::ErrorKind::InvalidData, e),
    }
}

impl Body for ServerBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.reading.is_done() {
            return Poll::Ready(None);
        }
        let slot = Arc::clone(&this.slot);
        let mut guard = slot.lock();
        let shared = &mut *guard;
        let Some(conn) = shared.conn.as_mut() else {
            return this.fail(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the request body was abandoned: the response was already sent",
            ));
        };
        // The client waits for this before it sends the body: written on
        // the first read, as hyper does (never after the final answer).
        if let Err(e) = ready!(this.poll_continue(conn, shared.answered, cx)) {
            return this.fail(e);
        }
        let Conn { io, buf } = conn;
        let read = ready!(this
            .reading
            .poll_frame(buf, cx, |buf, want, cx| fill(io, buf, want, cx)));
        // Read to its end (a bad trailer section too: its bytes are used):
        // the connection may carry the next request.
        let used = matches!(read, None | Some(Ok(_)) | Some(Err(ReadError::Trailers(_))));
        if this.reading.is_done() && used {
            shared.done = true;
        }
        Poll::Ready(read.map(|r| r.map_err(|e| Box::new(client_error(e)) as BoxError)))
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_done()
    }

    fn size_hint(&self) -> SizeHint {
        self.reading.size_hint()
    }
}
