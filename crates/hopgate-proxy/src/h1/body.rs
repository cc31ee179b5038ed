//! The one body reader of both sides: a message body framed by a length,
//! by chunks (trailers included) or by the connection's close, taken out
//! of a connection's read buffer as `http_body` frames. The client reads
//! a backend's answer with it ([`super::client::ResponseBody`]), the
//! server a client's request ([`super::server_body::ServerBody`]); each
//! brings its own socket (`fill`) and says what the body's end and its
//! errors mean for its connection.
//!
//! Must not touch: sockets (reads go through the caller's `fill`), what
//! happens to a connection after its body, what an error is called.

use std::io;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use super::chunked::{ChunkError, ChunkedDecoder, Step};
use super::head::{BodyKind, HeadError};
use super::response_head::trailer_map;

/// Bytes asked of the kernel per read of a body.
pub(crate) const BODY_READ: usize = 64 * 1024;

/// Where a body's reading stands.
#[derive(Debug)]
pub(crate) enum Reading {
    /// Bytes left of a `Content-Length` body.
    Length(u64),
    Chunked(ChunkedDecoder),
    /// Until the connection closes.
    Close,
    Done,
}

/// Why a body could not be read to its end.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The connection ended before the body did.
    Eof,
    Io(io::Error),
    Chunked(ChunkError),
    Trailers(HeadError),
}

impl Reading {
    /// The reading of a body framed as `kind`.
    pub(crate) fn of(kind: BodyKind) -> Reading {
        match kind {
            BodyKind::Empty | BodyKind::Length(0) => Reading::Done,
            BodyKind::Length(n) => Reading::Length(n),
            BodyKind::Chunked => Reading::Chunked(ChunkedDecoder::new()),
            BodyKind::Close => Reading::Close,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        matches!(self, Reading::Done)
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        match self {
            Reading::Length(n) => SizeHint::with_exact(*n),
            Reading::Done => SizeHint::with_exact(0),
            Reading::Chunked(_) | Reading::Close => SizeHint::default(),
        }
    }

    /// The body's next frame, out of `buf`, reading more into it with
    /// `fill` (`Ok(0)`: end of stream) when it holds too little. Bytes past
    /// the body's end stay in `buf`. After the last frame, and after an
    /// error, the reading is [`Reading::Done`].
    pub(crate) fn poll_frame<F>(
        &mut self,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
        mut fill: F,
    ) -> Poll<Option<Result<Frame<Bytes>, ReadError>>>
    where
        F: FnMut(&mut BytesMut, usize, &mut Context<'_>) -> Poll<io::Result<usize>>,
    {
        loop {
            let want = match self.take(buf) {
                Ok(want) => want,
                Err(frame) => return Poll::Ready(frame),
            };
            match ready!(fill(buf, want, cx)) {
                Ok(0) => {
                    let until_close = matches!(self, Reading::Close);
                    *self = Reading::Done;
                    return Poll::Ready((!until_close).then_some(Err(ReadError::Eof)));
                }
                Ok(_) => {}
                Err(e) => {
                    *self = Reading::Done;
                    return Poll::Ready(Some(Err(ReadError::Io(e))));
                }
            }
        }
    }

    /// What `buf` holds of the body: a frame, the end, an error (`Err`),
    /// or how many bytes to ask for next (`Ok`).
    #[allow(clippy::type_complexity)]
    fn take(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<usize, Option<Result<Frame<Bytes>, ReadError>>> {
        match self {
            Reading::Done => Err(None),
            Reading::Length(0) => {
                *self = Reading::Done;
                Err(None)
            }
            Reading::Length(n) if !buf.is_empty() => {
                let take = (*n).min(buf.len() as u64) as usize;
                let data = buf.split_to(take).freeze();
                *n -= take as u64;
                if *n == 0 {
                    *self = Reading::Done;
                }
                Err(Some(Ok(Frame::data(data))))
            }
            Reading::Length(n) => Ok((*n).min(BODY_READ as u64) as usize),
            Reading::Chunked(dec) => match dec.decode(buf) {
                Err(e) => {
                    *self = Reading::Done;
                    Err(Some(Err(ReadError::Chunked(e))))
                }
                Ok(Step::Data { start, len }) => {
                    buf.advance(start);
                    Err(Some(Ok(Frame::data(buf.split_to(len).freeze()))))
                }
                Ok(Step::End { start, len }) => {
                    buf.advance(start);
                    let section = buf.split_to(len).freeze();
                    *self = Reading::Done;
                    match trailer_map(&section) {
                        Ok(t) if t.is_empty() => Err(None),
                        Ok(t) => Err(Some(Ok(Frame::trailers(t)))),
                        Err(e) => Err(Some(Err(ReadError::Trailers(e)))),
                    }
                }
                Ok(Step::Need { consumed }) => {
                    buf.advance(consumed);
                    Ok(BODY_READ)
                }
            },
            Reading::Close if !buf.is_empty() => Err(Some(Ok(Frame::data(buf.split().freeze())))),
            Reading::Close => Ok(BODY_READ),
        }
    }
}
