//! Deadlines on a client connection's socket.
//!
//! Owns [`ClientIo`], the I/O wrapper every accepted client connection
//! (public listeners and the admin API) is served through, with two
//! deadlines hyper does not have:
//!
//! - **First bytes.** hyper's HTTP/1.1-or-h2c server first reads up to the
//!   24 bytes of the HTTP/2 preface to tell the protocols apart, and hyper's
//!   own header-read timer only starts after that. A client that sends
//!   nothing, or a part of the preface, would hold its connection (a file
//!   descriptor, a `max_connections` slot) forever. The read fails with
//!   `TimedOut` when the protocol cannot be told by the deadline; once it
//!   can (24 bytes seen, or a byte that is not the preface's), the timer is
//!   dropped and reads are a plain pass-through.
//! - **Stalled writes.** A client that stops reading (an HTTP/1.1 slow
//!   reader, an HTTP/2 client that never reads its socket) leaves the
//!   gateway's writes pending, and the response's upstream connection
//!   pinned. When a write has been pending for the stall limit without a
//!   byte accepted, it fails with `TimedOut`, which ends the connection and
//!   releases what it held. Any accepted byte restarts the clock.
//!
//! Must not touch: parsing (it compares bytes with the preface only),
//! HTTP semantics. A per-stream HTTP/2 stall (a zero flow-control window on
//! one stream while the socket is read) is not visible here: that is
//! [`crate::send_watch`]'s.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::metrics::METRICS;
use tokio::time::{Instant, Sleep};

/// Adds `n` bytes to a byte counter (skipped for 0: no atomic traffic
/// for an empty read).
fn count(c: &std::sync::atomic::AtomicU64, n: usize) {
    if n > 0 {
        c.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `io` with the deadlines of the module doc. Kept small (every client
/// connection holds one, idle ones too): the stall limit in milliseconds,
/// the preface's progress in a byte.
pub struct ClientIo<T> {
    io: T,
    /// Armed until the protocol can be told; `None` afterwards.
    first: Option<Pin<Box<Sleep>>>,
    /// Armed while a write is pending; created on the first stall.
    write_timer: Option<Pin<Box<Sleep>>>,
    /// How long a write may stay pending without progress, in
    /// milliseconds (rounded up).
    stall_ms: u32,
    /// How many bytes of the preface have been seen.
    seen: u8,
    /// Whether `write_timer` runs for the current pending write.
    write_pending: bool,
}

impl<T> ClientIo<T> {
    /// `first_bytes`: the deadline for the first bytes; `stall`: how long a
    /// write may stay pending without progress.
    pub fn new(io: T, first_bytes: Duration, stall: Duration) -> ClientIo<T> {
        let ms = stall.as_millis() + u128::from(!stall.subsec_nanos().is_multiple_of(1_000_000));
        ClientIo {
            io,
            first: Some(Box::pin(tokio::time::sleep(first_bytes))),
            write_timer: None,
            stall_ms: u32::try_from(ms).unwrap_or(u32::MAX),
            seen: 0,
            write_pending: false,
        }
    }

    /// Whether the bytes read so far tell the protocol: a whole preface, or
    /// a byte that differs from it (HTTP/1.1, whose head hyper times).
    fn settles(&mut self, new: &[u8]) -> bool {
        for &b in new {
            let at = usize::from(self.seen);
            if at >= PREFACE.len() || b != PREFACE[at] {
                return true;
            }
            self.seen += 1;
        }
        usize::from(self.seen) >= PREFACE.len()
    }

    /// Records the outcome of a write: progress stops the stall clock; a
    /// pending write starts it (once) and fails when it runs out.
    fn track<R>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        match r {
            Poll::Pending => {
                if !self.write_pending {
                    self.write_pending = true;
                    let at = Instant::now() + Duration::from_millis(self.stall_ms.into());
                    match self.write_timer.as_mut() {
                        Some(t) => t.as_mut().reset(at),
                        None => self.write_timer = Some(Box::pin(tokio::time::sleep_until(at))),
                    }
                }
                match self.write_timer.as_mut().map(|t| t.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client accepted no response bytes within the stall limit",
                    ))),
                    _ => Poll::Pending,
                }
            }
            ready => {
                self.write_pending = false;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for ClientIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        if this.first.is_none() {
            let r = Pin::new(&mut this.io).poll_read(cx, buf);
            count(&METRICS.client_bytes_received, buf.filled().len() - before);
            return r;
        }
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let new = &buf.filled()[before..];
                count(&METRICS.client_bytes_received, new.len());
                // End of stream settles it too: hyper sees the EOF.
                if new.is_empty() || this.settles(new) {
                    this.first = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.first.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no request within the header-read timeout",
                ))),
                _ => Poll::Pending,
            },
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ClientIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            count(&METRICS.client_bytes_sent, n);
        }
        this.track(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r {
            count(&METRICS.client_bytes_sent, n);
        }
        this.track(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.track(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
