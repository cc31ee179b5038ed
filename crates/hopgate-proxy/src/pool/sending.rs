//! One request's send to a node ([`Pool::send`]): the exchange on a
//! pooled HTTP/1.1 connection held inline in the returned [`Sending`] (a
//! named future, no box per request), moving on to the next pooled
//! connection or a dial when one turns out dead before any byte was
//! written; dialling and HTTP/2 boxed. Kept apart from the connection
//! internals of [`super`].
//!
//! Must not touch: the idle set and dialling themselves (it calls
//! [`Pool`]'s), the exchange's wire format ([`crate::h1::client`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use hopgate_core::config::UpstreamProtocol;
use http::{Request, Response};

use super::{H1Conn, Pool, PoolSettings, SendFailure};
use crate::body::ProxyBody;
use crate::h1::client as h1;
use crate::headers::SetLines;

impl Pool {
    /// Sends `req` to `addr` over a pooled or new connection.
    ///
    /// Checking a pooled connection out and rendering the request head on
    /// it happen here, before the first poll; the returned [`Sending`]
    /// holds that exchange inline ([`h1::Exchange`], a named future: no
    /// box per request, the request stored once). Dialling and HTTP/2 are
    /// boxed, so their futures do not sit inside every request's future.
    /// The exchange keeps its own deadline (`timeouts.request`, from `now`
    /// on a pooled connection, from the end of dialling on a new one).
    ///
    /// `now` is the caller's clock reading (for the idle-timeout check and
    /// the request timeout). `head_for`: the form an HTTP/1.1 answer's
    /// head is handed on in ([`crate::h1::HeadFor`]): kept as the backend's bytes
    /// for a client connection that writes it as it is, or a header map.
    #[inline(always)]
    pub fn send<'a>(
        self: &'a Arc<Self>,
        addr: SocketAddr,
        req: Box<Request<ProxyBody>>,
        set: &'a SetLines,
        s: &'a PoolSettings,
        now: Instant,
        head_for: crate::h1::HeadFor,
    ) -> Sending<'a> {
        self.admission.configure(&s.limits);
        let at = SendAt {
            pool: self,
            addr,
            set,
            s,
            now,
            head_for,
        };
        let stage = if s.protocol == UpstreamProtocol::Http2 {
            let mut req = *req;
            set.apply(req.headers_mut());
            Stage::Boxed(Box::pin(self.send_h2(addr, req, s)))
        } else {
            at.next_h1(req)
        };
        Sending { at, stage }
    }
}

/// What [`Pool::send`] returns: the request's exchange on a pooled
/// HTTP/1.1 connection (moving on to the next pooled connection, or to a
/// new one, when a pooled one turns out dead before any byte of the
/// request was written), or a boxed dial or HTTP/2 send.
pub struct Sending<'a> {
    at: SendAt<'a>,
    stage: Stage<'a>,
}

/// Where a [`Sending`] goes, for its next connection.
struct SendAt<'a> {
    pool: &'a Arc<Pool>,
    addr: SocketAddr,
    set: &'a SetLines,
    s: &'a PoolSettings,
    now: Instant,
    head_for: crate::h1::HeadFor,
}

type SendResult = Result<Box<Response<ProxyBody>>, SendFailure>;

// The exchange is inline on purpose: it is the common case, and boxing
// it cost an allocation and a copy of the whole future per request.
#[allow(clippy::large_enum_variant)]
enum Stage<'a> {
    Exchange(h1::Exchange<'a, Box<H1Conn>, ProxyBody>),
    Boxed(Pin<Box<dyn Future<Output = SendResult> + Send + 'a>>),
}

impl<'a> SendAt<'a> {
    /// The exchange on the next reusable pooled connection, or a dial.
    #[inline(always)]
    fn next_h1(&self, req: Box<Request<ProxyBody>>) -> Stage<'a> {
        let pool = self.pool;
        match pool.checkout_h1(self.addr, self.s, self.now) {
            Some(conn) => {
                let deadline = tokio::time::Instant::from_std(self.now) + self.s.request_timeout;
                Stage::Exchange(h1::send(pool, conn, req, self.set, deadline, self.head_for))
            }
            None => Stage::Boxed(Box::pin(pool.dial_and_send_h1(
                self.addr,
                req,
                self.set,
                self.s,
                self.head_for,
            ))),
        }
    }
}

impl std::fmt::Debug for Sending<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match &self.stage {
            Stage::Exchange(e) => format!("{e:?}"),
            Stage::Boxed(_) => "boxed".to_owned(),
        };
        f.debug_struct("Sending")
            .field("addr", &self.at.addr)
            .field("stage", &stage)
            .finish()
    }
}

impl Future for Sending<'_> {
    type Output = SendResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<SendResult> {
        let this = self.get_mut();
        loop {
            match &mut this.stage {
                Stage::Exchange(e) => match ready!(Pin::new(e).poll(cx)) {
                    // A pooled connection that turned out dead before any
                    // byte of the request was written handed the request
                    // back: moving on to the next one is always safe.
                    Err(h1::Failure::NotSent { request, .. }) => {
                        this.stage = this.at.next_h1(request);
                    }
                    other => return Poll::Ready(other.map_err(SendFailure::from)),
                },
                Stage::Boxed(f) => return f.as_mut().poll(cx),
            }
        }
    }
}
