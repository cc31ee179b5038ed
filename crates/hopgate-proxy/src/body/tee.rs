//! A request body copied as it passes (a tee), for a route's mirror: the
//! primary side ([`Teed`]) yields the client's frames to the primary's
//! send as they come and hands a copy of each (data and trailers; the
//! bytes are shared, not copied) to the copy's side ([`Copied`]), the body
//! of the mirror's request.
//!
//! The primary never waits for the copy: the frames go through an
//! unbounded queue whose bytes are bounded by [`BUDGET`] instead. When a
//! frame would take the queue past it (the mirror cannot keep up), when
//! the client's body fails (an abort, a bad chunk, over the body limit),
//! or when the primary side is dropped before the body's end (the primary
//! gave up on it), the copy is aborted: its body ends in an error, so the
//! mirror's connection is closed (HTTP/1.1) or its stream reset (HTTP/2)
//! and the mirror target sees a truncated request, never a complete wrong
//! one; [`Tee::aborted`] wakes whoever waits on the copy's send. When the
//! copy's side is dropped first (the mirror's send ended: it failed, or it
//! answered before reading the body), the primary side stops copying.
//!
//! Owns both sides and what they share ([`Tee`]: the bytes queued, how the
//! copy ended). Must not touch: the frames themselves (the primary's
//! consumer gets exactly what the client's body yields), the client's
//! body's own accounting (its limit and fault flag stay inside it), the
//! mirror's counts (the caller's).

use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{mpsc, Notify};

use super::{BoxError, ProxyBody};

/// The most body bytes waiting for one copy's send. A copy also holds the
/// frame its send is writing (at most one read of the client's body: an
/// HTTP/2 DATA frame, or one read of an HTTP/1.1 connection).
pub(crate) const BUDGET: usize = 1 << 20;

/// What both sides of one tee share.
#[derive(Debug, Default)]
pub(crate) struct Tee {
    /// Data bytes in the queue: added by the primary side, taken off by
    /// the copy's.
    queued: AtomicUsize,
    /// [`Tee::OPEN`], then [`Tee::ENDED`] or [`Tee::ABORTED`], once.
    state: AtomicU8,
    /// Notified once, when the copy is aborted.
    abort: Notify,
}

impl Tee {
    const OPEN: u8 = 0;
    const ENDED: u8 = 1;
    const ABORTED: u8 = 2;

    /// Settles how the copy ends (the first call wins).
    fn settle(&self, to: u8) {
        let settled =
            self.state
                .compare_exchange(Tee::OPEN, to, Ordering::AcqRel, Ordering::Acquire);
        if settled.is_ok() && to == Tee::ABORTED {
            self.abort.notify_one();
        }
    }

    /// The copy was aborted.
    pub(crate) fn was_aborted(&self) -> bool {
        self.state.load(Ordering::Acquire) == Tee::ABORTED
    }

    /// Resolves once the copy is aborted (at once when it already was).
    pub(crate) async fn aborted(&self) {
        self.abort.notified().await;
    }
}

/// The copy's body ended in an error: see the module documentation.
#[derive(Debug, thiserror::Error)]
#[error("the mirror's copy of the request body was aborted")]
pub(crate) struct CopyAborted;

/// The primary side: the client's body, copied as it is read.
#[derive(Debug)]
pub struct Teed {
    inner: ProxyBody,
    /// The queue to the copy's side; `None` once the copy ended.
    copy: Option<(mpsc::UnboundedSender<Frame<Bytes>>, Arc<Tee>)>,
}

/// The copy's side: the mirror's request body.
#[derive(Debug)]
pub struct Copied {
    queue: mpsc::UnboundedReceiver<Frame<Bytes>>,
    tee: Arc<Tee>,
}

/// Splits `body` in two: the body the primary sends (`body`, copied as
/// it is read), the copy's body, and what they share.
pub(crate) fn split(body: ProxyBody) -> (ProxyBody, ProxyBody, Arc<Tee>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let tee = Arc::<Tee>::default();
    let primary = Teed {
        inner: body,
        copy: Some((tx, Arc::clone(&tee))),
    };
    let copy = Copied {
        queue: rx,
        tee: Arc::clone(&tee),
    };
    (
        ProxyBody::Teed(Box::new(primary)),
        ProxyBody::Copied(Box::new(copy)),
        tee,
    )
}

impl Teed {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if self.copy.is_some() {
            match &polled {
                Poll::Ready(Some(Ok(frame))) => self.pass(frame),
                Poll::Ready(Some(Err(_))) => self.stop(Tee::ABORTED),
                Poll::Ready(None) => self.stop(Tee::ENDED),
                Poll::Pending => {}
            }
        }
        polled
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }

    /// Queues a copy of `frame`, unless that takes the queue past
    /// [`BUDGET`] (the copy is aborted); ends the copy with the body.
    fn pass(&mut self, frame: &Frame<Bytes>) {
        let Some((tx, tee)) = &self.copy else { return };
        let copy = if let Some(data) = frame.data_ref() {
            let queued = tee.queued.fetch_add(data.len(), Ordering::AcqRel) + data.len();
            if queued > BUDGET {
                return self.stop(Tee::ABORTED);
            }
            Frame::data(data.clone())
        } else if let Some(trailers) = frame.trailers_ref() {
            Frame::trailers(trailers.clone())
        } else {
            return;
        };
        if tx.send(copy).is_err() {
            // The copy's send ended: nothing more to copy.
            self.copy = None;
        } else if self.inner.is_end_stream() {
            self.stop(Tee::ENDED);
        }
    }

    /// Ends the copy (`how`: ended or aborted); the queue closes.
    fn stop(&mut self, how: u8) {
        if let Some((_, tee)) = self.copy.take() {
            tee.settle(how);
        }
    }
}

/// Dropped before the body's end: the copy is aborted.
impl Drop for Teed {
    fn drop(&mut self) {
        self.stop(Tee::ABORTED);
    }
}

impl Copied {
    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.tee.was_aborted() {
            return Poll::Ready(Some(Err(Box::new(CopyAborted))));
        }
        match ready!(self.queue.poll_recv(cx)) {
            Some(frame) => {
                let n = frame.data_ref().map_or(0, Bytes::len);
                self.tee.queued.fetch_sub(n, Ordering::AcqRel);
                Poll::Ready(Some(Ok(frame)))
            }
            None if self.tee.state.load(Ordering::Acquire) == Tee::ENDED => Poll::Ready(None),
            None => Poll::Ready(Some(Err(Box::new(CopyAborted)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A client's body of `chunks`, then its end, or an error when
    /// `fails` (a copy's side, fed by hand, is such a body).
    fn client(chunks: &[&'static str], fails: bool) -> ProxyBody {
        let (tx, rx) = mpsc::unbounded_channel();
        let tee = Arc::<Tee>::default();
        for c in chunks {
            tee.queued.fetch_add(c.len(), Ordering::Relaxed);
            tx.send(Frame::data(Bytes::from_static(c.as_bytes())))
                .unwrap();
        }
        if !fails {
            tee.settle(Tee::ENDED);
        }
        ProxyBody::Copied(Box::new(Copied { queue: rx, tee }))
    }

    /// Both sides get every byte, in order, and the copy ends cleanly.
    #[tokio::test]
    async fn both_sides_get_the_whole_body() {
        let (primary, copy, tee) = split(client(&["ab", "cd", "e"], false));
        let got = primary.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"abcde");
        let copied = copy.collect().await.unwrap().to_bytes();
        assert_eq!(&copied[..], b"abcde");
        assert!(!tee.was_aborted());
        assert_eq!(tee.queued.load(Ordering::Relaxed), 0);
    }

    /// The client's error reaches the primary as it is and aborts the copy.
    #[tokio::test]
    async fn a_failed_client_body_aborts_the_copy() {
        let (primary, copy, tee) = split(client(&["ab"], true));
        assert!(primary.collect().await.is_err());
        assert!(tee.was_aborted());
        tee.aborted().await;
        let err = copy.collect().await.unwrap_err();
        assert!(err.is::<CopyAborted>(), "{err}");
    }

    /// A copy that falls more than the budget behind is aborted; the
    /// primary still gets everything.
    #[tokio::test]
    async fn a_copy_that_falls_behind_is_aborted() {
        let chunk: &'static str = Box::leak("x".repeat(BUDGET / 2 + 1).into_boxed_str());
        let (primary, copy, tee) = split(client(&[chunk, chunk, chunk], false));
        let got = primary.collect().await.unwrap().to_bytes();
        assert_eq!(got.len(), 3 * chunk.len());
        assert!(tee.was_aborted());
        assert!(copy.collect().await.is_err());
    }

    /// The primary side dropped before the body's end aborts the copy; a
    /// copy's side dropped first leaves the primary alone.
    #[tokio::test]
    async fn an_abandoned_primary_aborts_and_an_abandoned_copy_does_not() {
        let (primary, copy, tee) = split(client(&["ab", "cd"], false));
        drop(primary);
        assert!(tee.was_aborted());
        assert!(copy.collect().await.is_err());

        let (primary, copy, tee) = split(client(&["ab", "cd"], false));
        drop(copy);
        let got = primary.collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"abcd");
        assert!(!tee.was_aborted());
    }
}
