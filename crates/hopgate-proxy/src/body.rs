//! Bodies that flow through the gateway, without boxing on the hot path.
//!
//! Owns [`ProxyBody`], the one body type used for upstream requests and
//! client responses: a streamed hyper body (optionally size-limited), a body
//! the gateway wrote itself, or nothing. Upstream response bodies carry the
//! pooled connection they came on and give it back when they end (see
//! [`crate::pool`]).
//!
//! Must not touch: routing, node state.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hopgate_core::node::{now_ms, NodeState};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use crate::pool::Returner;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request body exceeded `limits.max_body_bytes`.
#[derive(Debug, thiserror::Error)]
#[error("request body larger than {limit} bytes")]
pub(crate) struct BodyTooLarge {
    pub limit: u64,
}

/// A body streaming through the gateway.
#[derive(Debug, Default)]
pub enum ProxyBody {
    #[default]
    Empty,
    /// A complete body held in memory (error pages, replayed requests).
    Full(Option<Bytes>),
    /// A client request body, streamed, failing once it passes `limit` bytes.
    Limited {
        inner: Incoming,
        seen: u64,
        limit: u64,
    },
    /// An upstream response body; `returner` hands the connection back to
    /// its pool once the body has been read to the end.
    Upstream {
        inner: Incoming,
        returner: Option<Returner>,
    },
    /// A request body whose first bytes were already read (`head`), then
    /// the rest as it comes.
    Prefixed {
        head: Option<Bytes>,
        trailers: Option<http::HeaderMap>,
        rest: Box<ProxyBody>,
    },
    /// A gRPC response stream from a node that may drain: at the service's
    /// drain deadline it ends with `grpc-status: 14` (UNAVAILABLE).
    Guarded(Box<Guarded>),
}

/// See [`ProxyBody::Guarded`].
#[derive(Debug)]
pub struct Guarded {
    inner: ProxyBody,
    node: Arc<NodeState>,
    deadline: Duration,
    /// The call's own deadline (`grpc-timeout`), if it has one.
    until: Option<tokio::time::Instant>,
    tick: Pin<Box<tokio::time::Sleep>>,
    ended: bool,
}

/// How often a guarded stream looks at its node's drain state.
const DRAIN_POLL: Duration = Duration::from_millis(100);

impl Guarded {
    fn due(&self) -> bool {
        self.node
            .draining_since()
            .is_some_and(|since| now_ms() >= since + self.deadline.as_millis() as u64)
    }

    fn deadline_exceeded() -> Frame<Bytes> {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", http::HeaderValue::from_static("4"));
        t.insert(
            "grpc-message",
            http::HeaderValue::from_static("hopgate%3A%20deadline%20exceeded"),
        );
        Frame::trailers(t)
    }

    fn unavailable() -> Frame<Bytes> {
        let mut t = http::HeaderMap::new();
        t.insert("grpc-status", http::HeaderValue::from_static("14"));
        t.insert(
            "grpc-message",
            http::HeaderValue::from_static("node%20drained%3B%20retry%20elsewhere"),
        );
        Frame::trailers(t)
    }
}

impl ProxyBody {
    pub fn full(b: impl Into<Bytes>) -> ProxyBody {
        ProxyBody::Full(Some(b.into()))
    }

    /// Wraps a gRPC response so it ends with UNAVAILABLE once `node` has
    /// been draining for `deadline`.
    pub fn guarded(
        inner: ProxyBody,
        node: Arc<NodeState>,
        deadline: Duration,
        until: Option<tokio::time::Instant>,
    ) -> ProxyBody {
        ProxyBody::Guarded(Box::new(Guarded {
            inner,
            node,
            deadline,
            until,
            tick: Box::pin(tokio::time::sleep(DRAIN_POLL)),
            ended: false,
        }))
    }

    pub fn limited(inner: Incoming, limit: u64) -> ProxyBody {
        ProxyBody::Limited {
            inner,
            seen: 0,
            limit,
        }
    }

    /// Wraps an upstream response body; if it is already complete the
    /// connection goes back to the pool right away.
    pub fn upstream(inner: Incoming, returner: Returner) -> ProxyBody {
        if inner.is_end_stream() {
            returner.give_back();
            ProxyBody::Upstream {
                inner,
                returner: None,
            }
        } else {
            ProxyBody::Upstream {
                inner,
                returner: Some(returner),
            }
        }
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Empty => Poll::Ready(None),
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Limited { inner, seen, limit } => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(d) = frame.data_ref() {
                        *seen += d.len() as u64;
                        if *seen > *limit {
                            return Poll::Ready(Some(Err(Box::new(BodyTooLarge {
                                limit: *limit,
                            }))));
                        }
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            ProxyBody::Upstream { inner, returner } => match Pin::new(&mut *inner).poll_frame(cx) {
                Poll::Ready(None) => {
                    if let Some(r) = returner.take() {
                        r.give_back();
                    }
                    Poll::Ready(None)
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if inner.is_end_stream() {
                        if let Some(r) = returner.take() {
                            r.give_back();
                        }
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => {
                    // The connection is broken: dropping the returner closes it.
                    returner.take();
                    Poll::Ready(Some(Err(Box::new(e))))
                }
                Poll::Pending => Poll::Pending,
            },
            ProxyBody::Prefixed {
                head,
                trailers,
                rest,
            } => {
                if let Some(b) = head.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                if let Some(t) = trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                Pin::new(rest.as_mut()).poll_frame(cx)
            }
            ProxyBody::Guarded(g) => {
                if g.ended {
                    return Poll::Ready(None);
                }
                loop {
                    if g.until.is_some_and(|u| tokio::time::Instant::now() >= u) {
                        g.ended = true;
                        g.inner = ProxyBody::Empty;
                        return Poll::Ready(Some(Ok(Guarded::deadline_exceeded())));
                    }
                    if g.due() {
                        g.ended = true;
                        // Dropping the upstream body resets its stream.
                        g.inner = ProxyBody::Empty;
                        tracing::info!(node = %g.node.key().node, "gRPC stream ended at the drain deadline");
                        return Poll::Ready(Some(Ok(Guarded::unavailable())));
                    }
                    match Pin::new(&mut g.inner).poll_frame(cx) {
                        Poll::Ready(None) => {
                            g.ended = true;
                            return Poll::Ready(None);
                        }
                        Poll::Ready(other) => return Poll::Ready(other),
                        Poll::Pending => {}
                    }
                    match g.tick.as_mut().poll(cx) {
                        Poll::Ready(()) => {
                            g.tick
                                .as_mut()
                                .reset(tokio::time::Instant::now() + DRAIN_POLL);
                        }
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Empty => true,
            ProxyBody::Full(b) => b.is_none(),
            ProxyBody::Limited { inner, .. } | ProxyBody::Upstream { inner, .. } => {
                inner.is_end_stream()
            }
            // A gRPC answer that is complete with its head (trailers-only:
            // `grpc-status` in the HEADERS frame with END_STREAM) must say
            // so, or hyper sends the head without END_STREAM and an empty
            // DATA frame after it, which C-core clients (grpcio, grpc-go's
            // peers) report as UNKNOWN "Stream removed" instead of the
            // status the server sent.
            ProxyBody::Guarded(g) => g.ended || g.inner.is_end_stream(),
            ProxyBody::Prefixed {
                head,
                trailers,
                rest,
            } => head.is_none() && trailers.is_none() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Empty => SizeHint::with_exact(0),
            ProxyBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ProxyBody::Limited { inner, .. } | ProxyBody::Upstream { inner, .. } => {
                inner.size_hint()
            }
            ProxyBody::Guarded(_) | ProxyBody::Prefixed { .. } => SizeHint::default(),
        }
    }
}
