//! One socket write per turn of an HTTP/2 client connection's task.
//!
//! The h2 library writes a DATA frame whose payload is 256 bytes or more
//! by itself: it chains the payload behind the frame's head and flushes
//! the socket before it takes the next frame. A connection with ten 4 KiB
//! responses ready sends ten writes (ten TCP segments, ten wake-ups of the
//! client), where one would carry them all. [`Coalesced`] sits between
//! hyper's HTTP/2 server and the client's socket and keeps what hyper
//! writes during one poll of the connection's task ([`Polls`] counts the
//! polls); the first flush of a poll wakes the task again instead of
//! writing, and the next poll's flush writes what the task gathered in
//! between: the frames of the first poll and those of the responses that
//! became ready since, in one write. Past [`HIGH`] bytes it writes at
//! once. Shutdown writes what is kept first.
//!
//! Must not touch: the bytes (written unchanged, in order), the deadlines
//! on the socket ([`crate::client_io`], below this wrapper: it sees the
//! real writes).

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Kept bytes past which a write goes out at once.
pub(crate) const HIGH: usize = 64 << 10;

thread_local! {
    /// Polls of [`Polls`] futures on this thread: a flush tells "the poll
    /// that kept the bytes" from a later one.
    static TURN: Cell<u64> = const { Cell::new(1) };
}

fn turn() -> u64 {
    TURN.with(Cell::get)
}

/// Runs `serve` on `io` with its writes gathered per turn: a
/// [`Coalesced`] socket is made only here, inside the [`Polls`] future
/// that counts its turns (without them it would keep bytes until the
/// task woke for something else).
pub(crate) fn gathered<I, F>(io: I, serve: impl FnOnce(Coalesced<I>) -> F) -> Polls<Pin<Box<F>>>
where
    F: Future,
{
    Polls(Box::pin(serve(Coalesced::new(io))))
}

/// A future whose every poll starts a new turn for the [`Coalesced`]
/// sockets it drives.
pub(crate) struct Polls<F>(F);

impl<F: Future + Unpin> Future for Polls<F> {
    type Output = F::Output;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        TURN.with(|t| t.set(t.get().wrapping_add(1)));
        Pin::new(&mut self.0).poll(cx)
    }
}

/// `io` with its writes gathered per turn. See the module doc.
pub(crate) struct Coalesced<T> {
    io: T,
    /// Bytes accepted and not written yet; no room held while empty.
    buf: Vec<u8>,
    /// How much of `buf` the socket took already.
    sent: usize,
    /// The turn in which a flush was held back (the task woke itself
    /// then); 0 when none is.
    held: u64,
}

impl<T> Coalesced<T> {
    fn new(io: T) -> Coalesced<T> {
        Coalesced {
            io,
            buf: Vec::new(),
            sent: 0,
            held: 0,
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes what is kept; `Ready(Ok)` once all of it went out.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.buf.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        // Its room goes back: an idle connection holds none.
        self.buf = Vec::new();
        self.sent = 0;
        self.held = 0;
        Poll::Ready(Ok(()))
    }

    /// Keeps `bufs` (`len` bytes in all), or writes them through when the
    /// kept bytes would pass [`HIGH`].
    fn keep(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
        len: usize,
    ) -> Poll<io::Result<usize>> {
        if self.buf.len() + len > HIGH {
            ready!(self.drain(cx))?;
            if len > HIGH {
                return Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
            }
        }
        if self.buf.is_empty() {
            self.buf.reserve(len.max(16 << 10));
        }
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.keep(cx, &[io::IoSlice::new(buf)], buf.len())
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.keep(cx, bufs, len)
    }

    /// Gathered writes are copied: the h2 library may hand its frames as
    /// slices (it does for vectored sockets) and they are kept as one.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.sent < this.buf.len() {
            let now = turn();
            if this.held == 0 {
                // The first flush of this turn: the task runs again after
                // the tasks already woken (responses becoming ready), and
                // writes then.
                this.held = now;
                cx.waker().wake_by_ref();
                return Poll::Ready(Ok(()));
            }
            if this.held == now {
                // Woken again: a task moved to another thread may meet
                // the same count there (cheap for a running task).
                cx.waker().wake_by_ref();
                return Poll::Ready(Ok(()));
            }
            ready!(this.drain(cx))?;
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
