//! The send-side stall limit of HTTP/2 responses.
//!
//! An HTTP/2 client that opens a stream and never grants it flow-control
//! window stops hyper from taking more of the response body: hyper holds
//! one chunk, waits for window that never comes, and never polls the body
//! again. The socket is read all along, so the connection-level write stall
//! ([`crate::client_io::ClientIo`]) never fires, and the upstream connection
//! the body came on stays pinned. [`SendWatch`] wraps such a response body
//! and notes when a chunk handed to hyper has not been followed by another
//! poll; the connection's [`SendWatches`] registry keeps every watched body
//! of one client connection, and one sweep per connection
//! ([`SendWatches::stalled`], awaited by the listener's connection task:
//! no task, timer or channel per response) finds a body that has owed its
//! chunk for the stall limit (the route's `timeouts.idle`, the same limit
//! as the connection-level write stall), and then:
//!
//! - drops the upstream body, which releases the upstream connection (an
//!   HTTP/1.1 connection is closed, its pool slot freed; an HTTP/2 upstream
//!   stream is reset with CANCEL);
//! - counts `client_stalled` (a client error, never the node's);
//! - ends, and the listener closes the client connection: hyper gives no
//!   handle to reset a single stream that waits for window, and a client
//!   that advertises window it never grants is broken or hostile. If hyper
//!   polls the body before that (window arrived just then), the stream is
//!   reset with CANCEL.
//!
//! A body waiting on its upstream (a slow backend, a long poll) is not a
//! stall: only a chunk the client has not taken counts. The sweep sleeps
//! until the earliest moment a body could have stalled: the earliest owed
//! chunk's deadline, or one stall limit from now (a body not owing at a
//! sweep cannot stall sooner). A connection that never streamed a watched
//! body never wakes for it, and a wake of the connection task for anything
//! else (hyper's frames) does not poll the sweep: the sweep runs under
//! its own waker, which opens a gate ([`Stalled`]); while it is shut a poll
//! is a compare and a load.
//!
//! Must not touch: what the body carries (frames pass through unchanged).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http_body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::Notify;

use hopgate_core::error::ErrorKind;
use hopgate_core::node::now_ms;

use crate::h1::BoxError;
use crate::metrics::METRICS;

/// A response body under the stall limit. See the module doc. `B`: the
/// body watched (the gateway's own body type, which holds this one).
#[derive(Debug)]
pub struct SendWatch<B> {
    shared: Arc<Shared<B>>,
    /// The connection's registry, left on drop.
    watches: Arc<SendWatches<B>>,
    slot: usize,
}

#[derive(Debug)]
struct Shared<B> {
    /// The upstream body; taken (and dropped) by the sweep on a stall.
    body: Mutex<B>,
    /// 1 + [`now_ms`] when a data chunk was handed to hyper and hyper has
    /// not polled since; 0 when nothing is owed.
    owed_since: AtomicU64,
    stalled: AtomicBool,
    /// The stall limit, milliseconds.
    stall_ms: u64,
}

/// One client connection's watched bodies and their sweep. See the module
/// doc.
#[derive(Debug)]
pub(crate) struct SendWatches<B> {
    slots: Mutex<Slots<B>>,
    /// Wakes the sweep for a body whose limit is shorter than any it saw.
    wake: Notify,
}

#[derive(Debug)]
struct Slots<B> {
    entries: Vec<Option<Arc<Shared<B>>>>,
    /// Indexes of the empty entries.
    free: Vec<usize>,
    /// The shortest stall limit of the bodies at the last sweep (kept when
    /// none was registered), or of a body registered since: the sweep
    /// wakes at least that often. `u64::MAX`: no body yet, the sweep waits
    /// for one.
    horizon_ms: u64,
}

impl<B> Default for SendWatches<B> {
    fn default() -> SendWatches<B> {
        SendWatches {
            slots: Mutex::new(Slots {
                entries: Vec::new(),
                free: Vec::new(),
                horizon_ms: u64::MAX,
            }),
            wake: Notify::new(),
        }
    }
}

/// What one sweep found.
enum Sweep<B> {
    /// This body owed its chunk past its limit.
    Stalled(Arc<Shared<B>>, u64),
    /// Nothing stalled; the next sweep is due in this many milliseconds
    /// (`None`: when a body is registered).
    Wait(Option<u64>),
}

impl<B: Default + Send> SendWatches<B> {
    /// Resolves when one of the connection's watched bodies stalled past
    /// its limit, after cutting it (the body dropped, `client_stalled`
    /// counted); the caller then closes the connection. Pending forever on
    /// a connection whose bodies all keep moving. Polled by the connection
    /// task on each of its wakes, it sweeps only when its own timer or a
    /// newly registered body woke it ([`Stalled`]).
    pub(crate) fn stalled(&self) -> Stalled<'_> {
        let gate = Arc::new(Gate {
            open: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Stalled {
            sweeps: Box::pin(self.sweeps()),
            own: Waker::from(Arc::clone(&gate)),
            gate,
            task: None,
        }
    }

    /// The sweep loop [`SendWatches::stalled`] runs.
    async fn sweeps(&self) {
        loop {
            match self.sweep(now_ms()) {
                Sweep::Stalled(shared, owed_for) => return cut(&shared, owed_for),
                Sweep::Wait(None) => self.wake.notified().await,
                Sweep::Wait(Some(ms)) => {
                    tokio::select! {
                        () = self.wake.notified() => {}
                        () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    }
                }
            }
        }
    }

    /// Looks at every watched body once, at `now` ([`now_ms`]).
    fn sweep(&self, now: u64) -> Sweep<B> {
        let mut slots = self.slots.lock();
        let mut next = u64::MAX;
        let mut horizon = u64::MAX;
        for shared in slots.entries.iter().flatten() {
            horizon = horizon.min(shared.stall_ms);
            let since = shared.owed_since.load(Ordering::Relaxed);
            if since == 0 {
                continue;
            }
            let deadline = (since - 1).saturating_add(shared.stall_ms);
            if deadline <= now {
                return Sweep::Stalled(Arc::clone(shared), now + 1 - since);
            }
            next = next.min(deadline);
        }
        if horizon == u64::MAX {
            horizon = slots.horizon_ms;
        }
        slots.horizon_ms = horizon;
        let next = next.min(now.saturating_add(horizon));
        Sweep::Wait((next != u64::MAX).then(|| next - now))
    }
}

/// The connection's sweep ([`SendWatches::stalled`]) behind a gate: the
/// sweep's timer and the registry's wake-up hold this future's own waker,
/// which opens the gate and then wakes the connection task; every other
/// wake of that task (hyper's frames, the client's window) finds the gate
/// shut and polls nothing (a poll of the sweep itself locks the `Notify`'s
/// waiter list and looks at its timer: ~670 instructions per request at
/// one stream per connection). Boxed once per connection: the sweep's
/// future holds a `Notified` and a `Sleep`, which must stay pinned.
pub(crate) struct Stalled<'a> {
    sweeps: Pin<Box<dyn Future<Output = ()> + Send + 'a>>,
    gate: Arc<Gate>,
    /// The waker the sweep is polled with: [`Gate`]'s.
    own: Waker,
    /// The connection task's waker the gate last handed on to, to tell a
    /// poll from a new task (polled at once, as on a first poll).
    task: Option<Waker>,
}

/// The gate of [`Stalled`]: open when the sweep was woken since its last
/// poll; the task to wake then.
struct Gate {
    open: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Gate {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.open.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Future for Stalled<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let same_task = this.task.as_ref().is_some_and(|t| t.will_wake(cx.waker()));
        if same_task && !this.gate.open.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        // Shut before the sweep is polled: a wake from here on opens it
        // again. The task's waker is registered anew each time (the gate's
        // wake takes it).
        this.gate.open.store(false, Ordering::Relaxed);
        this.gate.task.register(cx.waker());
        if !same_task {
            this.task = Some(cx.waker().clone());
        }
        this.sweeps
            .as_mut()
            .poll(&mut Context::from_waker(&this.own))
    }
}

/// Cuts a stalled body: see the module doc.
fn cut<B: Default>(shared: &Shared<B>, owed_for: u64) {
    shared.stalled.store(true, Ordering::Relaxed);
    // Dropped outside the lock: releases the upstream connection.
    let body = std::mem::take(&mut *shared.body.lock());
    drop(body);
    METRICS.error(ErrorKind::ClientStalled);
    tracing::info!(
        stalled_ms = owed_for,
        "HTTP/2 client accepted no response data for the stall limit (timeouts.idle); upstream released, client connection closed"
    );
}

impl<B> SendWatch<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    /// Wraps `body` and registers it with its connection's `watches`.
    pub(crate) fn new(body: B, stall: Duration, watches: &Arc<SendWatches<B>>) -> SendWatch<B> {
        let stall_ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
        let shared = Arc::new(Shared {
            body: Mutex::new(body),
            owed_since: AtomicU64::new(0),
            stalled: AtomicBool::new(false),
            stall_ms,
        });
        let (slot, wake) = {
            let mut slots = watches.slots.lock();
            let entry = Some(Arc::clone(&shared));
            let slot = match slots.free.pop() {
                Some(i) => {
                    slots.entries[i] = entry;
                    i
                }
                None => {
                    slots.entries.push(entry);
                    slots.entries.len() - 1
                }
            };
            // The sweep sleeps at most its horizon: only a shorter limit
            // must wake it.
            let wake = stall_ms < slots.horizon_ms;
            if wake {
                slots.horizon_ms = stall_ms;
            }
            (slot, wake)
        };
        if wake {
            watches.wake.notify_one();
        }
        SendWatch {
            shared,
            watches: Arc::clone(watches),
            slot,
        }
    }

    /// Whether the stall limit cut this body.
    #[cfg(test)]
    fn stalled(&self) -> bool {
        self.shared.stalled.load(Ordering::Relaxed)
    }
}

impl<B> Drop for SendWatch<B> {
    fn drop(&mut self) {
        let entry = {
            let mut slots = self.watches.slots.lock();
            slots.free.push(self.slot);
            slots.entries[self.slot].take()
        };
        drop(entry);
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

    /// A body with a chunk and more to come (trailers).
    fn chunk_then_trailers() -> TestBody {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-end", http::HeaderValue::from_static("1"));
        TestBody::prefixed(
            Some(Bytes::from_static(b"first")),
            Some(trailers),
            TestBody::Empty,
        )
    }

    /// A body whose chunk is taken and never followed by another poll is
    /// cut at the limit by the connection's sweep, which was already
    /// waiting when the body came: the inner body is dropped, the sweep
    /// ends (the listener then closes the connection), and a later poll
    /// gets the CANCEL error.
    #[tokio::test]
    async fn a_chunk_never_followed_up_is_cut_at_the_limit() {
        let watches = Arc::new(SendWatches::default());
        let sweep = tokio::spawn({
            let watches = Arc::clone(&watches);
            async move { watches.stalled().await }
        });
        tokio::task::yield_now().await;
        let mut body = SendWatch::new(chunk_then_trailers(), Duration::from_millis(100), &watches);
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"first");
        // Like hyper waiting for window: no further poll.
        tokio::time::timeout(Duration::from_secs(10), sweep)
            .await
            .expect("the sweep ends after the stall limit")
            .unwrap();
        assert!(body.stalled());
        assert!(
            matches!(*body.shared.body.lock(), TestBody::Empty),
            "the upstream body was dropped"
        );
        let err = body.frame().await.unwrap().unwrap_err();
        let h2 = err.downcast_ref::<h2::Error>().unwrap();
        assert_eq!(h2.reason(), Some(h2::Reason::CANCEL));
    }

    /// A body that waits on its upstream is never cut, however long, and
    /// neither is one whose client keeps taking its chunks, while another
    /// body of the same connection that owes its chunk is.
    #[tokio::test]
    async fn only_the_body_owing_a_chunk_is_cut() {
        let watches = Arc::new(SendWatches::default());
        let limit = Duration::from_millis(50);
        let mut waiting = SendWatch::new(TestBody::Empty, limit, &watches);
        let mut moving = SendWatch::new(chunk_then_trailers(), limit, &watches);
        // Nothing owed: the sweep wakes and goes back to sleep.
        let quiet = tokio::time::timeout(Duration::from_millis(300), watches.stalled()).await;
        assert!(quiet.is_err(), "a body owing nothing was cut");
        assert!(!waiting.stalled());
        // Taken chunk, then polled again at once: nothing owed.
        moving.frame().await.unwrap().unwrap();
        moving.frame().await.unwrap().unwrap();
        let mut owing = SendWatch::new(chunk_then_trailers(), limit, &watches);
        owing.frame().await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(10), watches.stalled())
            .await
            .expect("the owing body is cut");
        assert!(owing.stalled());
        assert!(!waiting.stalled() && !moving.stalled());
        assert!(waiting.frame().await.is_none());
    }

    /// A body registered with a shorter limit than the sweep sleeps for
    /// wakes it: the cut comes at that body's limit, not the longer one.
    #[tokio::test]
    async fn a_shorter_limit_wakes_the_sleeping_sweep() {
        let watches = Arc::new(SendWatches::default());
        let _long = SendWatch::new(TestBody::Empty, Duration::from_secs(3600), &watches);
        let sweep = tokio::spawn({
            let watches = Arc::clone(&watches);
            async move { watches.stalled().await }
        });
        tokio::task::yield_now().await;
        let mut short = SendWatch::new(chunk_then_trailers(), Duration::from_millis(50), &watches);
        short.frame().await.unwrap().unwrap();
        tokio::time::timeout(Duration::from_secs(10), sweep)
            .await
            .expect("cut long before the hour-long limit")
            .unwrap();
        assert!(short.stalled());
    }

    /// A body that ends leaves the registry: its slot is reused, so a
    /// connection serving many streams in turn keeps one entry.
    #[test]
    fn ended_bodies_leave_the_registry() {
        let watches = Arc::new(SendWatches::<TestBody>::default());
        for _ in 0..1000 {
            drop(SendWatch::new(
                TestBody::Empty,
                Duration::from_secs(1),
                &watches,
            ));
        }
        let slots = watches.slots.lock();
        assert_eq!(slots.entries.len(), 1);
        assert!(slots.entries[0].is_none());
    }
}
