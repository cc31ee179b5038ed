//! Phase 16 for an answer whose body is still on its way: the access line
//! is written when the body has ended, with the bytes passed on.
//!
//! Owns [`LoggedBody`]: the client's response body (outermost, so it
//! counts what went to the client's connection), the count of its data
//! bytes, and the [`PendingLine`] it writes once: at the body's end (its
//! last frame, trailers, or the end of the stream), at a body error (the
//! line's `error` is `upstream_reset`, or `client_stalled` when the client
//! stopped reading an HTTP/2 stream), or when the body is dropped before
//! its end (the client went away: `client_aborted`). The status stays the
//! one the client was sent; `bytes_out` is what was passed on until then.
//! Streamed answers of unknown length (chunked or close-delimited HTTP/1.1,
//! HTTP/2, gRPC, Server-Sent Events) get their `bytes_out` this way.
//!
//! Must not touch: the frames (passed on as they are), the connection's
//! return to its pool (the inner body's).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use hopgate_core::error::ErrorKind;

use super::done::PendingLine;
use crate::body::{BoxError, ProxyBody};

/// See the module documentation.
pub struct LoggedBody {
    inner: ProxyBody,
    /// Data bytes passed on so far.
    sent: u64,
    /// `None` once the line is written.
    line: Option<PendingLine>,
}

impl std::fmt::Debug for LoggedBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoggedBody")
            .field("inner", &self.inner)
            .field("sent", &self.sent)
            .field("pending", &self.line.is_some())
            .finish()
    }
}

impl LoggedBody {
    pub(super) fn wrap(inner: ProxyBody, line: PendingLine) -> ProxyBody {
        ProxyBody::Logged(Box::new(LoggedBody {
            inner,
            sent: 0,
            line: Some(line),
        }))
    }

    pub(crate) fn inner(&self) -> &ProxyBody {
        &self.inner
    }

    pub(crate) fn inner_mut(&mut self) -> &mut ProxyBody {
        &mut self.inner
    }

    fn end(&mut self, cut: Option<ErrorKind>) {
        if let Some(line) = self.line.take() {
            line.write(self.sent, cut);
        }
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
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
                let stalled = matches!(self.inner, ProxyBody::SendWatched(_))
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

    pub(crate) fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    /// Dropped before its end: the client went away (or its connection
    /// was closed under it).
    fn drop(&mut self) {
        self.end(Some(ErrorKind::ClientAborted));
    }
}
