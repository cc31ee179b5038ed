//! Phase 16 for an answer whose body is still on its way: the access line
//! is written when the body has ended, with the bytes passed on.
//!
//! Owns [`LoggedBody`]: the client's response body (outermost, so it
//! counts what went to the client's connection), the count of its data
//! bytes, and the [`AccessLine`] it writes once (`done`'s `PendingLine`,
//! behind the trait so that the body type, which holds this one, need not
//! name the request's step): at the body's end (its
//! last frame, trailers, or the end of the stream), at a body error (the
//! line's `error` is `upstream_reset`, or `client_stalled` when the client
//! stopped reading an HTTP/2 stream), or when the body is dropped before
//! its end (the client went away: `client_aborted`). The status stays the
//! one the client was sent; `bytes_out` is what was passed on until then.
//! Streamed answers of unknown length (chunked or close-delimited HTTP/1.1,
//! HTTP/2, gRPC, Server-Sent Events) get their `bytes_out` this way.
//!
//! Must not touch: the frames (passed on as they are), the connection's
//! return to its pool (the inner body's), what a line says (the line's).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use hopgate_core::error::ErrorKind;

use crate::h1::BoxError;

/// An access line waiting for the end of its answer's body.
pub trait AccessLine: Send {
    /// Writes the line (called once): `bytes_out` body bytes were passed
    /// on; `cut` says why the body did not end.
    fn write(&mut self, bytes_out: u64, cut: Option<ErrorKind>);
}

/// See the module documentation. `L` is the line, last so that the body
/// type can hold a `LoggedBody<_, dyn AccessLine>` in the one box.
pub struct LoggedBody<B, L: AccessLine + ?Sized> {
    inner: B,
    /// Data bytes passed on so far.
    sent: u64,
    /// The inner body is an HTTP/2 client's under the send stall limit: a
    /// CANCEL error is the client's stall.
    watched: bool,
    /// The line was written.
    written: bool,
    line: L,
}

impl<B: std::fmt::Debug, L: AccessLine + ?Sized> std::fmt::Debug for LoggedBody<B, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoggedBody")
            .field("inner", &self.inner)
            .field("sent", &self.sent)
            .field("pending", &!self.written)
            .finish()
    }
}

impl<B, L: AccessLine> LoggedBody<B, L> {
    /// `inner` with `line` to write at its end; `watched`: see the field.
    pub(crate) fn new(inner: B, line: L, watched: bool) -> LoggedBody<B, L> {
        LoggedBody {
            inner,
            sent: 0,
            watched,
            written: false,
            line,
        }
    }
}

impl<B, L: AccessLine + ?Sized> LoggedBody<B, L> {
    pub(crate) fn inner(&self) -> &B {
        &self.inner
    }

    pub(crate) fn inner_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    fn end(&mut self, cut: Option<ErrorKind>) {
        if !self.written {
            self.written = true;
            self.line.write(self.sent, cut);
        }
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>>
    where
        B: Body<Data = Bytes, Error = BoxError> + Unpin,
    {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    self.sent += d.len() as u64;
                }
                // The server stops polling once the body says it ended.
                if frame.is_trailers() || self.inner.is_end_stream() {
                    self.end(None);
                }
            }
            Poll::Ready(Some(Err(e))) => {
                let stalled = self.watched
                    && e.downcast_ref::<h2::Error>()
                        .and_then(h2::Error::reason)
                        .is_some_and(|r| r == h2::Reason::CANCEL);
                self.end(Some(if stalled {
                    ErrorKind::ClientStalled
                } else {
                    ErrorKind::UpstreamReset
                }));
            }
            Poll::Ready(None) => self.end(None),
            Poll::Pending => {}
        }
        polled
    }

    pub(crate) fn is_end_stream(&self) -> bool
    where
        B: Body,
    {
        self.inner.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint
    where
        B: Body,
    {
        self.inner.size_hint()
    }
}

impl<B, L: AccessLine + ?Sized> Drop for LoggedBody<B, L> {
    /// Dropped before its end: the client went away (or its connection
    /// was closed under it).
    fn drop(&mut self) {
        self.end(Some(ErrorKind::ClientAborted));
    }
}
