//! Admission to one node's connections: a connection limit and a bounded
//! FIFO queue of requests waiting for a connection.
//!
//! Owns [`Admission`], [`Permit`] and [`Ticket`]. A [`Permit`] is one
//! connection slot (`pool.max_connections`); the pool acquires one before
//! it dials and stores it with the connection, so the slot comes back when
//! the connection closes, for whatever reason, by construction (dropping
//! the permit releases it; there is no release call to forget). When every
//! slot is taken, a request queues ([`Admission::enter`] gives a
//! [`Ticket`]); at most `pool.max_pending` wait, each for at most
//! `pool.queue_timeout`. The queue is fair: the first waiter gets the next
//! thing that frees up — a freed slot ([`Grant::Slot`]) or a connection
//! the pool hands over instead of parking it ([`Admission::offer`],
//! [`Grant::Handoff`]) — and a newcomer never overtakes a waiter.
//!
//! Generic over what the pool hands over (`T`), so it is tested here with
//! plain values. One short lock guards the counts and the queue; the
//! request path takes it only when it needs a new connection, and when a
//! connection is returned while someone waits.
//!
//! Must not touch: connections, dialling, the idle set (that is
//! [`crate::pool`]), errors and answers (the pool maps a [`Rejected`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hopgate_core::config::PoolLimits;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// What a waiter gets.
#[derive(Debug)]
pub(crate) enum Grant<T> {
    /// A connection slot: dial.
    Slot(Permit<T>),
    /// Something the pool handed over (a connection to reuse).
    Handoff(T),
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    /// `max_pending` requests were already waiting.
    Full,
    /// Nothing freed up within `queue_timeout`.
    Timeout,
}

/// The outcome of [`Admission::enter`].
#[derive(Debug)]
pub(crate) enum Entered<T> {
    /// A slot was free.
    Now(Permit<T>),
    /// Queued: wait with [`Ticket::wait`].
    Queued(Ticket<T>),
}

/// Counters of one admission, for the admin API and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct AdmissionStats {
    /// Slots taken (open connections and dials in progress).
    pub(crate) slots: usize,
    /// Requests waiting now.
    pub(crate) queued: usize,
    /// Requests that had to wait, ever.
    pub(crate) waits: u64,
    /// Requests refused because the queue was full.
    pub(crate) rejected_full: u64,
    /// Requests that waited `queue_timeout` in vain.
    pub(crate) rejected_timeout: u64,
}

struct Waiter<T> {
    ticket: u64,
    tx: oneshot::Sender<Grant<T>>,
}

struct State<T> {
    max_connections: usize,
    max_pending: usize,
    /// Slots out (permits alive).
    slots: usize,
    next_ticket: u64,
    waiters: VecDeque<Waiter<T>>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Mirrors of the limits, so [`Admission::configure`] costs two loads
    /// when nothing changed.
    max_connections: AtomicUsize,
    max_pending: AtomicUsize,
    queued: AtomicUsize,
    waits: AtomicU64,
    rejected_full: AtomicU64,
    rejected_timeout: AtomicU64,
}

/// One node's connection limit and queue.
pub(crate) struct Admission<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for Admission<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission")
            .field("stats", &self.stats())
            .finish()
    }
}

impl<T> Admission<T> {
    pub(crate) fn new(limits: &PoolLimits) -> Admission<T> {
        let max_connections = limits.max_connections.max(1);
        Admission {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    max_connections,
                    max_pending: limits.max_pending,
                    slots: 0,
                    next_ticket: 0,
                    waiters: VecDeque::new(),
                }),
                max_connections: AtomicUsize::new(max_connections),
                max_pending: AtomicUsize::new(limits.max_pending),
                queued: AtomicUsize::new(0),
                waits: AtomicU64::new(0),
                rejected_full: AtomicU64::new(0),
                rejected_timeout: AtomicU64::new(0),
            }),
        }
    }

    /// Applies (reloaded) limits. A raised connection limit admits waiters
    /// at once; a lowered one takes effect as connections close (open ones
    /// are never cut); a lowered queue bound refuses newcomers only.
    pub(crate) fn configure(&self, limits: &PoolLimits) {
        let s = &self.shared;
        let max_connections = limits.max_connections.max(1);
        if s.max_connections.load(Ordering::Relaxed) == max_connections
            && s.max_pending.load(Ordering::Relaxed) == limits.max_pending
        {
            return;
        }
        let mut st = s.state.lock();
        st.max_connections = max_connections;
        st.max_pending = limits.max_pending;
        s.max_connections.store(max_connections, Ordering::Relaxed);
        s.max_pending.store(limits.max_pending, Ordering::Relaxed);
        while st.slots < st.max_connections {
            let Some(w) = st.waiters.pop_front() else {
                break;
            };
            s.queued.fetch_sub(1, Ordering::Relaxed);
            st.slots += 1;
            if let Err(Grant::Slot(p)) = w.tx.send(Grant::Slot(self.permit())) {
                // Unreachable (a queued waiter's receiver is alive); give
                // the slot back without re-entering the lock.
                p.disarm();
                st.slots -= 1;
            }
        }
    }

    fn permit(&self) -> Permit<T> {
        Permit {
            shared: Some(Arc::clone(&self.shared)),
        }
    }

    /// A slot now, or a place in the queue, or [`Rejected::Full`].
    pub(crate) fn enter(&self) -> Result<Entered<T>, Rejected> {
        let s = &self.shared;
        let mut st = s.state.lock();
        if st.slots < st.max_connections && st.waiters.is_empty() {
            st.slots += 1;
            drop(st);
            return Ok(Entered::Now(self.permit()));
        }
        if st.waiters.len() >= st.max_pending {
            drop(st);
            s.rejected_full.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected::Full);
        }
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        let (tx, rx) = oneshot::channel();
        st.waiters.push_back(Waiter { ticket, tx });
        s.queued.fetch_add(1, Ordering::SeqCst);
        drop(st);
        // Pairs with the fence in `has_waiters`: a caller that looks for
        // an idle connection after entering, and a pool that parks one and
        // then asks `has_waiters`, cannot both miss each other.
        std::sync::atomic::fence(Ordering::SeqCst);
        s.waits.fetch_add(1, Ordering::Relaxed);
        Ok(Entered::Queued(Ticket {
            admission: Admission {
                shared: Arc::clone(s),
            },
            ticket,
            rx,
            done: false,
        }))
    }

    /// Hands `item` to the first waiter; gives it back when nobody waits.
    pub(crate) fn offer(&self, item: T) -> Result<(), T> {
        let s = &self.shared;
        let mut item = item;
        let mut st = s.state.lock();
        while let Some(w) = st.waiters.pop_front() {
            s.queued.fetch_sub(1, Ordering::Relaxed);
            match w.tx.send(Grant::Handoff(item)) {
                Ok(()) => return Ok(()),
                Err(Grant::Handoff(back)) => item = back,
                Err(Grant::Slot(p)) => {
                    // Never built here; kept exhaustive.
                    p.disarm();
                    return Ok(());
                }
            }
        }
        Err(item)
    }

    /// Whether anyone waits now. A pool that parked a connection and then
    /// finds a waiter here offers it a connection from the idle set (the
    /// waiter may have entered just after the pool's [`Admission::offer`]).
    pub(crate) fn has_waiters(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.shared.queued.load(Ordering::SeqCst) > 0
    }

    pub(crate) fn stats(&self) -> AdmissionStats {
        let s = &self.shared;
        AdmissionStats {
            slots: s.state.lock().slots,
            queued: s.queued.load(Ordering::Relaxed),
            waits: s.waits.load(Ordering::Relaxed),
            rejected_full: s.rejected_full.load(Ordering::Relaxed),
            rejected_timeout: s.rejected_timeout.load(Ordering::Relaxed),
        }
    }
}

/// One connection slot; dropping it frees the slot (to the first waiter,
/// if any).
pub(crate) struct Permit<T> {
    shared: Option<Arc<Shared<T>>>,
}

impl<T> std::fmt::Debug for Permit<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Permit")
    }
}

impl<T> Permit<T> {
    /// Forgets the permit without touching the counts (the caller already
    /// holds the lock and accounts for it).
    fn disarm(mut self) {
        self.shared = None;
    }
}

impl<T> Drop for Permit<T> {
    fn drop(&mut self) {
        let Some(shared) = self.shared.take() else {
            return;
        };
        let mut st = shared.state.lock();
        // The slot passes to the first waiter, unless a reload lowered the
        // limit below what is open.
        while st.slots <= st.max_connections {
            let Some(w) = st.waiters.pop_front() else {
                break;
            };
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            let next = Permit {
                shared: Some(Arc::clone(&shared)),
            };
            match w.tx.send(Grant::Slot(next)) {
                Ok(()) => return,
                Err(Grant::Slot(p)) => p.disarm(),
                Err(Grant::Handoff(_)) => {}
            }
        }
        st.slots -= 1;
    }
}

/// A place in the queue. Dropping it leaves the queue; a grant that
/// arrived meanwhile is passed on (a slot to the next waiter, a handed-over
/// item too, or dropped when nobody waits).
pub(crate) struct Ticket<T> {
    admission: Admission<T>,
    ticket: u64,
    rx: oneshot::Receiver<Grant<T>>,
    done: bool,
}

impl<T> std::fmt::Debug for Ticket<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl<T> Ticket<T> {
    /// Waits for a grant, at most `timeout`.
    pub(crate) async fn wait(mut self, timeout: Duration) -> Result<Grant<T>, Rejected> {
        let got = tokio::time::timeout(timeout, &mut self.rx).await;
        if let Ok(Ok(grant)) = got {
            self.done = true;
            return Ok(grant);
        }
        // Timed out: leave the queue, unless a grant was sent just now.
        if self.withdraw() {
            self.done = true;
            let s = &self.admission.shared;
            s.rejected_timeout.fetch_add(1, Ordering::Relaxed);
            return Err(Rejected::Timeout);
        }
        match self.rx.try_recv() {
            Ok(grant) => {
                self.done = true;
                Ok(grant)
            }
            Err(_) => {
                self.done = true;
                Err(Rejected::Timeout)
            }
        }
    }

    /// Removes this ticket from the queue; false when it was no longer
    /// there (a grant was sent to it).
    fn withdraw(&self) -> bool {
        let s = &self.admission.shared;
        let mut st = s.state.lock();
        match st.waiters.iter().position(|w| w.ticket == self.ticket) {
            Some(i) => {
                let w = st.waiters.remove(i);
                drop(st);
                s.queued.fetch_sub(1, Ordering::Relaxed);
                // Dropped outside the lock (its receiver is ours anyway).
                drop(w);
                true
            }
            None => false,
        }
    }
}

impl<T> Drop for Ticket<T> {
    fn drop(&mut self) {
        if self.done || self.withdraw() {
            return;
        }
        match self.rx.try_recv() {
            // Frees the slot, to the next waiter if any.
            Ok(Grant::Slot(permit)) => drop(permit),
            Ok(Grant::Handoff(item)) => {
                let _ = self.admission.offer(item);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_connections: usize, max_pending: usize) -> PoolLimits {
        PoolLimits {
            max_connections,
            max_pending,
            queue_timeout: Duration::from_secs(5),
        }
    }

    fn queued(a: &Admission<u32>) -> Ticket<u32> {
        match a.enter() {
            Ok(Entered::Queued(t)) => t,
            Ok(Entered::Now(_)) => panic!("admitted at once"),
            Err(e) => panic!("rejected: {e:?}"),
        }
    }

    fn now(a: &Admission<u32>) -> Permit<u32> {
        match a.enter() {
            Ok(Entered::Now(p)) => p,
            other => panic!("not admitted at once: {other:?}"),
        }
    }

    #[tokio::test]
    async fn slots_up_to_the_limit_then_a_bounded_queue() {
        let a: Admission<u32> = Admission::new(&limits(2, 1));
        let p1 = now(&a);
        let _p2 = now(&a);
        let t = queued(&a);
        assert_eq!(a.enter().err(), Some(Rejected::Full));
        let st = a.stats();
        assert_eq!(
            (st.slots, st.queued, st.waits, st.rejected_full),
            (2, 1, 1, 1)
        );
        drop(p1);
        // The freed slot went to the waiter, not back to the pool of slots.
        assert_eq!(a.stats().slots, 2);
        assert!(matches!(
            t.wait(Duration::from_secs(5)).await,
            Ok(Grant::Slot(_))
        ));
        // ...and came back when the waiter's permit was dropped.
        assert_eq!(a.stats().slots, 1);
        assert_eq!(a.stats().queued, 0);
    }

    #[tokio::test]
    async fn waiters_are_served_first_come_first_served() {
        let a: Admission<u32> = Admission::new(&limits(1, 10));
        let p = now(&a);
        let tickets: Vec<_> = (0..5).map(|_| queued(&a)).collect();
        // A newcomer never overtakes: it queues behind them.
        let newcomer = queued(&a);
        for i in 0..5 {
            assert!(a.offer(i).is_ok());
        }
        assert!(a.offer(5).is_ok());
        assert_eq!(a.offer(99), Err(99), "nobody waits any more");
        let mut tickets = tickets;
        tickets.push(newcomer);
        for (i, t) in tickets.into_iter().enumerate() {
            match t.wait(Duration::from_secs(5)).await {
                Ok(Grant::Handoff(n)) => assert_eq!(n as usize, i),
                other => panic!("{other:?}"),
            }
        }
        drop(p);
        assert_eq!(a.stats().slots, 0);
    }

    #[tokio::test]
    async fn a_wait_ends_at_the_timeout_and_leaves_the_queue() {
        let a: Admission<u32> = Admission::new(&limits(1, 1));
        let _p = now(&a);
        let t = queued(&a);
        assert_eq!(
            t.wait(Duration::from_millis(100)).await.err(),
            Some(Rejected::Timeout)
        );
        let st = a.stats();
        assert_eq!((st.queued, st.rejected_timeout), (0, 1));
        // The place is free again.
        let _t = queued(&a);
    }

    #[tokio::test]
    async fn permits_free_their_slot_when_dropped_anywhere() {
        let a: Admission<u32> = Admission::new(&limits(3, 0));
        let permits: Vec<_> = (0..3).map(|_| now(&a)).collect();
        assert_eq!(a.enter().err(), Some(Rejected::Full), "no queue at all");
        // Held by tasks that end (a connection's driver, say).
        let tasks: Vec<_> = permits
            .into_iter()
            .map(|p| tokio::spawn(async move { drop(p) }))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(a.stats().slots, 0);
        let _again = now(&a);
    }

    #[tokio::test]
    async fn a_dropped_ticket_passes_its_grant_on() {
        let a: Admission<u32> = Admission::new(&limits(1, 5));
        let p = now(&a);
        let first = queued(&a);
        let second = queued(&a);
        drop(p); // the slot goes to `first`...
        drop(first); // ...which gave up: it passes to `second`.
        assert!(matches!(
            second.wait(Duration::from_secs(5)).await,
            Ok(Grant::Slot(_))
        ));
        assert_eq!(a.stats().slots, 0);
        // A handed-over item is passed on the same way.
        let p = now(&a);
        let first = queued(&a);
        let second = queued(&a);
        assert!(a.offer(7).is_ok());
        drop(first);
        assert!(matches!(
            second.wait(Duration::from_secs(5)).await,
            Ok(Grant::Handoff(7))
        ));
        drop(p);
        // A ticket dropped while still waiting just leaves.
        let p = now(&a);
        drop(queued(&a));
        assert_eq!(a.stats().queued, 0);
        drop(p);
        assert_eq!(a.stats().slots, 0);
    }

    #[tokio::test]
    async fn reconfigure_raises_and_lowers_the_limits() {
        let a: Admission<u32> = Admission::new(&limits(1, 1));
        let p = now(&a);
        let t = queued(&a);
        assert_eq!(a.enter().err(), Some(Rejected::Full));
        // Raised: the waiter is admitted at once, newcomers may queue.
        a.configure(&limits(2, 4));
        assert!(matches!(
            t.wait(Duration::from_secs(5)).await,
            Ok(Grant::Slot(_))
        ));
        let p2 = now(&a);
        let t2 = queued(&a);
        // Lowered below what is open: nothing is cut, but a freed slot is
        // not passed on until the count is under the new limit.
        a.configure(&limits(1, 4));
        drop(p);
        assert_eq!(a.stats().slots, 1);
        assert_eq!(a.stats().queued, 1);
        drop(p2);
        assert!(matches!(
            t2.wait(Duration::from_secs(5)).await,
            Ok(Grant::Slot(_))
        ));
        assert_eq!(a.stats().slots, 0);
    }
}
