//! The socket of an upstream HTTP/1.1 connection: plain TCP, or TLS over
//! TCP. The plain variant reads through tokio's `AsyncRead` (a read that
//! does not fill the buffer marks the socket drained, so checking an idle
//! connection makes no system call until the reactor sees something on
//! it); the TLS variant reads through rustls.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// Most bytes asked of a TLS stream per read: one record's plaintext.
const TLS_READ: usize = 16 * 1024;

/// An upstream connection's byte stream.
#[derive(Debug)]
pub enum UpstreamIo {
    Plain(TcpStream),
    /// Boxed: the TLS state is large and most connections are plain.
    Tls(Box<TlsStream<TcpStream>>),
}

impl UpstreamIo {
    /// Reads what the connection has into `buf`'s spare room: `Ok(0)` at
    /// end of stream.
    pub(crate) fn poll_read_buf(
        &mut self,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match self {
            // Through `AsyncRead`: a read that leaves room in the buffer
            // tells tokio the socket is drained (edge-triggered epoll), so
            // the next readiness check — the pool's stale check at
            // checkout — costs no system call. (`try_read_buf` after
            // `poll_read_ready` kept the socket marked readable, and every
            // checkout paid a `recvfrom` that answered EAGAIN.)
            UpstreamIo::Plain(io) => tokio_util::io::poll_read_buf(Pin::new(io), cx, buf),
            UpstreamIo::Tls(io) => {
                // rustls hands out at most a record (16 KiB) at a time.
                let len = buf.len();
                let room = (buf.capacity() - len).clamp(512, TLS_READ);
                buf.resize(len + room, 0);
                let mut rb = ReadBuf::new(&mut buf[len..]);
                let r = Pin::new(&mut **io).poll_read(cx, &mut rb);
                let n = rb.filled().len();
                buf.truncate(len + n);
                ready!(r)?;
                Poll::Ready(Ok(n))
            }
        }
    }

    /// Whether the connection has something to read now (bytes, end of
    /// stream or an error) without waiting: an idle pooled connection
    /// that does cannot carry a request.
    pub(crate) fn has_news(&mut self, buf: &mut BytesMut) -> bool {
        match self {
            UpstreamIo::Plain(io) => match io.try_read_buf(buf) {
                Err(e) => e.kind() != io::ErrorKind::WouldBlock,
                Ok(_) => true,
            },
            UpstreamIo::Tls(_) => {
                let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
                !matches!(self.poll_read_buf(buf, &mut cx), Poll::Pending)
            }
        }
    }
}

impl AsyncRead for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_read(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(&mut **io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write(cx, buf),
            UpstreamIo::Tls(io) => Pin::new(&mut **io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(io) => Pin::new(&mut **io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Plain(io) => io.is_write_vectored(),
            UpstreamIo::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_flush(cx),
            UpstreamIo::Tls(io) => Pin::new(&mut **io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(io) => Pin::new(io).poll_shutdown(cx),
            UpstreamIo::Tls(io) => Pin::new(&mut **io).poll_shutdown(cx),
        }
    }
}
