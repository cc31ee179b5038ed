//! A pooled HTTP/1.1 connection as the codec sees it: [`H1Conn`], and
//! what makes it the codec's [`Connection`] (its wire, its kill flag, its
//! way back to the [`Pool`]) over an [`UpstreamIo`] socket.
//!
//! Must not touch: the idle set, admission, dialling (the pool's); the
//! exchange on the wire (the codec's, [`crate::h1::client`]).

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::{ConnMeta, LiveGuard, Pool};
use crate::h1::client::{Connection, Socket, Wire, HEAD_READ};
use crate::h1::deadline::LazyTimer;
use crate::tls::UpstreamIo;

/// An HTTP/1.1 upstream connection: the socket and the bytes read from it
/// and not used yet. Dropping it closes the socket and takes it out of the
/// pool's registry.
#[derive(Debug)]
pub(crate) struct H1Conn {
    pub meta: Arc<ConnMeta>,
    pub io: UpstreamIo,
    pub buf: BytesMut,
    /// The head of the request being sent, rendered (kept, with its
    /// capacity, for the next request).
    pub out: Vec<u8>,
    /// The request timeout's timer, kept from one exchange to the next.
    pub timer: LazyTimer,
    /// When it was last parked in the idle set.
    pub(super) idle_since: Instant,
    /// The client address its PROXY protocol header named (the service's
    /// `proxy_protocol`): it serves only that client's requests.
    pub(crate) proxied_for: Option<std::net::IpAddr>,
    pub(super) _live: LiveGuard,
}

impl H1Conn {
    /// The socket and its unread bytes, leaving the pool for good (an
    /// upgrade): the connection no longer counts as open.
    pub(crate) fn into_upgraded(self) -> (UpstreamIo, Bytes) {
        let H1Conn { io, buf, .. } = self;
        (io, buf.freeze())
    }
}

/// Has the backend closed an idle connection, or sent bytes nobody asked
/// for? Either way it cannot carry a request. Costs no system call when
/// the reactor has seen nothing on the socket.
pub(super) fn is_stale(conn: &mut H1Conn) -> bool {
    if !conn.buf.is_empty() {
        return true;
    }
    conn.buf.reserve(HEAD_READ);
    conn.io.has_news(&mut conn.buf)
}

impl Socket for UpstreamIo {
    fn poll_read_buf(
        &mut self,
        buf: &mut BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        UpstreamIo::poll_read_buf(self, buf, cx)
    }
}

/// A pooled connection is boxed: handing one from the idle set to a
/// request, its answer's body and back moves a pointer.
impl Connection for Box<H1Conn> {
    type Io = UpstreamIo;
    type Home = Pool;

    #[inline]
    fn wire(&mut self) -> Wire<'_, UpstreamIo> {
        let c = &mut **self;
        Wire {
            io: &mut c.io,
            buf: &mut c.buf,
            out: &mut c.out,
            timer: &mut c.timer,
        }
    }

    #[inline]
    fn killed(&self, waker: &Waker) -> bool {
        self.meta.register(waker);
        self.meta.killed()
    }

    fn give_back(home: &Pool, conn: Box<H1Conn>) {
        home.give_back(conn);
    }

    fn into_upgraded(self) -> (UpstreamIo, Bytes) {
        (*self).into_upgraded()
    }
}
