//! A deadline on a client connection's first bytes.
//!
//! Owns [`FirstBytes`], the I/O wrapper every accepted client connection
//! (public listeners and the admin API) is served through. hyper's
//! HTTP/1.1-or-h2c server first reads up to the 24 bytes of the HTTP/2
//! preface to tell the protocols apart, and hyper's own header-read timer
//! only starts after that. A client that sends nothing, or a part of the
//! preface, would hold its connection (and a file descriptor, and a
//! `max_connections` slot) forever. `FirstBytes` fails the read with
//! `TimedOut` when the protocol cannot be told by the deadline, which ends
//! the connection; once it can (24 bytes seen, or a byte that is not the
//! preface's), the timer is dropped and every later read is a plain
//! pass-through.
//!
//! Must not touch: parsing (it compares bytes with the preface only),
//! limits other than this deadline.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `io` with a deadline on telling its protocol; see the module doc.
pub struct FirstBytes<T> {
    io: T,
    /// Armed until the protocol can be told; `None` afterwards.
    deadline: Option<Pin<Box<Sleep>>>,
    seen: usize,
}

impl<T> FirstBytes<T> {
    pub fn new(io: T, within: Duration) -> FirstBytes<T> {
        FirstBytes {
            io,
            deadline: Some(Box::pin(tokio::time::sleep(within))),
            seen: 0,
        }
    }

    /// Whether the bytes read so far tell the protocol: a whole preface, or
    /// a byte that differs from it (HTTP/1.1, whose head hyper times).
    fn settles(&mut self, new: &[u8]) -> bool {
        for &b in new {
            if self.seen >= PREFACE.len() || b != PREFACE[self.seen] {
                return true;
            }
            self.seen += 1;
        }
        self.seen >= PREFACE.len()
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FirstBytes<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.deadline.is_none() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                // End of stream settles it too: hyper sees the EOF.
                if new.is_empty() || this.settles(new) {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within the header-read timeout",
                ))),
                _ => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for FirstBytes<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
