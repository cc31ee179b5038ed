//! The send-side stall limit of HTTP/2 responses.
//!
//! An HTTP/2 client that opens a stream and never grants it flow-control
//! window stops hyper from taking more of the response body: hyper holds
//! one chunk, waits for window that never comes, and never polls the body
//! again. The socket is read all along, so the connection-level write stall
//! ([`crate::client_io::ClientIo`]) never fires, and the upstream connection
//! the body came on stays pinned. [`SendWatch`] wraps such a response body;
//! a small watchdog task notices when a chunk handed to hyper has not been
//! followed by another poll for the stall limit (`timeouts.idle`, the same
//! limit as the connection-level write stall), and then:
//!
//! - drops the upstream body, which releases the upstream connection (an
//!   HTTP/1.1 connection is closed, its pool slot freed; an HTTP/2 upstream
//!   stream is reset with CANCEL);
//! - counts `client_stalled` (a client error, never the node's);
//! - closes the client connection through its `close` signal: hyper gives
//!   no handle to reset a single stream that waits for window, and a client
//!   that advertises window it never grants is broken or hostile. If hyper
//!   polls the body before that (window arrived just then), the stream is
//!   reset with CANCEL.
//!
//! A body waiting on its upstream (a slow backend, a long poll) is not a
//! stall: only a chunk the client has not taken counts. The watchdog ends
//! with the body.
//!
//! Must not touch: what the body carries (frames pass through unchanged).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};

use hopgate_core::error::ErrorKind;
use hopgate_core::node::now_ms;

use crate::h1::BoxError;
use crate::metrics::METRICS;

/// A response body under the stall limit. See the module doc. `B`: the
/// body watched (the gateway's own body type, which holds this one).
#[derive(Debug)]
pub struct SendWatch<B> {
    shared: Arc<Shared<B>>,
    /// Dropping it ends the watchdog.
    _done: oneshot::Sender<()>,
}

#[derive(Debug)]
struct Shared<B> {
    /// The upstream body; taken (and dropped) by the watchdog on a stall.
    body: Mutex<B>,
    /// 1 + [`now_ms`] when a data chunk was handed to hyper and hyper has
    /// not polled since; 0 when nothing is owed.
    owed_since: AtomicU64,
    stalled: AtomicBool,
}

impl<B> SendWatch<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Default + Send + Unpin + 'static,
{
    /// Wraps `body`; `close` is the client connection's close signal.
    pub(crate) fn new(body: B, stall: Duration, close: Arc<Notify>) -> SendWatch<B> {
        let shared = Arc::new(Shared {
            body: Mutex::new(body),
            owed_since: AtomicU64::new(0),
            stalled: AtomicBool::new(false),
        });
        let (done, ended) = oneshot::channel();
        tokio::spawn(watchdog(Arc::clone(&shared), stall, ended, close));
        SendWatch {
            shared,
            _done: done,
        }
    }

    /// Whether the stall limit cut this body.
    #[cfg(test)]
    fn stalled(&self) -> bool {
        self.shared.stalled.load(Ordering::Relaxed)
    }
}

async fn watchdog<B: Default>(
    shared: Arc<Shared<B>>,
    stall: Duration,
    mut ended: oneshot::Receiver<()>,
    close: Arc<Notify>,
) {
    let stall_ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
    let mut wait = stall;
    loop {
        tokio::select! {
            _ = &mut ended => return,
            () = tokio::time::sleep(wait) => {}
        }
        let since = shared.owed_since.load(Ordering::Relaxed);
        if since == 0 {
            wait = stall;
            continue;
        }
        let owed_for = (now_ms() + 1).saturating_sub(since);
        if owed_for < stall_ms {
            wait = Duration::from_millis(stall_ms - owed_for);
            continue;
        }
        shared.stalled.store(true, Ordering::Relaxed);
        // Dropped outside the lock: releases the upstream connection.
        let body = std::mem::take(&mut *shared.body.lock());
        drop(body);
        METRICS.error(ErrorKind::ClientStalled);
        tracing::info!(
            stalled_ms = owed_for,
            "HTTP/2 client accepted no response data for the stall limit (timeouts.idle); upstream released, client connection closed"
        );
        close.notify_one();
        return;
    }
}

/// The stream's error after a stall: hyper resets the stream with its
/// reason, CANCEL.
fn cancelled() -> BoxError {
    Box::new(h2::Error::from(h2::Reason::CANCEL))
}

impl<B> Body for SendWatch<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let shared = &self.shared;
        shared.owed_since.store(0, Ordering::Relaxed);
        if shared.stalled.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(cancelled())));
        }
        let mut body = shared.body.lock();
        let polled = Pin::new(&mut *body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if frame.data_ref().is_some_and(|d| !d.is_empty()) && !body.is_end_stream() {
                shared.owed_since.store(now_ms() + 1, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        !self.shared.stalled.load(Ordering::Relaxed) && self.shared.body.lock().is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.shared.body.lock().size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::testing::TestBody;
    use http_body_util::BodyExt;

    /// A body whose chunk is taken and never followed by another poll is
    /// cut at the limit: the inner body is dropped, the connection's close
    /// signal fires, and a later poll gets the CANCEL error.
    #[tokio::test]
    async fn a_chunk_never_followed_up_is_cut_at_the_limit() {
        let close = Arc::new(Notify::new());
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-end", http::HeaderValue::from_static("1"));
        // A chunk, and more to come (the trailers).
        let inner = TestBody::prefixed(
            Some(Bytes::from_static(b"first")),
            Some(trailers),
            TestBody::Empty,
        );
        let mut body = SendWatch::new(inner, Duration::from_millis(100), Arc::clone(&close));
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"first");
        // Like hyper waiting for window: no further poll.
        tokio::time::timeout(Duration::from_secs(10), close.notified())
            .await
            .expect("the close signal fires after the stall limit");
        assert!(body.stalled());
        assert!(
            matches!(*body.shared.body.lock(), TestBody::Empty),
            "the upstream body was dropped"
        );
        let err = body.frame().await.unwrap().unwrap_err();
        let h2 = err.downcast_ref::<h2::Error>().unwrap();
        assert_eq!(h2.reason(), Some(h2::Reason::CANCEL));
    }

    /// A body that waits on its upstream is never cut, however long.
    #[tokio::test]
    async fn waiting_on_the_upstream_is_not_a_stall() {
        let close = Arc::new(Notify::new());
        let mut body = SendWatch::new(TestBody::Empty, Duration::from_millis(50), close);
        // Nothing owed: the watchdog wakes and goes back to sleep.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!body.stalled());
        assert!(body.frame().await.is_none());
    }
}
