//! The pool's side of admission (`pool.max_connections`, `max_pending`,
//! `queue_timeout`): getting a connection slot or a handed-over connection
//! for a request that found no usable connection, through the node's
//! queue. Kept apart from the connection internals of [`super`]; the queue
//! itself is [`crate::admission`].
//!
//! Must not touch: dialling and the idle set (it calls [`Pool`]'s), the
//! queue's internals.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopgate_core::error::{ErrorKind, ProxyError};

use super::{ConnState, H1Conn, H2Conn, Pool, PoolSettings};
use crate::admission::{Entered, Grant, Rejected, Ticket};

/// What a pool hands to a request waiting in its queue, besides a slot.
pub(super) enum Handoff {
    /// An HTTP/1.1 connection given back: reuse it.
    H1(Box<H1Conn>),
    /// A new shared HTTP/2 connection is up: look again.
    H2,
}

impl Pool {
    /// A connection slot, or what the queue hands over instead; waits at
    /// most `queue_timeout`. Counts and times the wait.
    pub(super) async fn admit(
        &self,
        queue_timeout: Duration,
    ) -> Result<Grant<Handoff>, ProxyError> {
        match self.admission.enter() {
            Ok(Entered::Now(permit)) => Ok(Grant::Slot(permit)),
            Ok(Entered::Queued(ticket)) => {
                wait_in_queue(ticket, Instant::now() + queue_timeout).await
            }
            Err(r) => Err(busy(r)),
        }
    }

    /// An HTTP/1.1 connection to `addr` for a request that found no idle
    /// one: a new one if a slot is free, else the first connection given
    /// back or slot freed while it waits in the queue.
    /// Says whether the connection was handed over (reused) or dialled.
    pub(super) async fn obtain_h1(
        &self,
        addr: SocketAddr,
        s: &PoolSettings,
    ) -> Result<(Box<H1Conn>, bool), ProxyError> {
        let deadline = Instant::now() + s.limits.queue_timeout;
        loop {
            let generation = self.generation.load(Ordering::Relaxed);
            let grant = match self.admission.enter().map_err(busy)? {
                Entered::Now(permit) => Grant::Slot(permit),
                Entered::Queued(ticket) => {
                    // One may have been parked just before we queued.
                    if let Some(conn) = self.checkout_h1(addr, s, Instant::now()) {
                        drop(ticket);
                        return Ok((conn, true));
                    }
                    wait_in_queue(ticket, deadline).await?
                }
            };
            match grant {
                Grant::Slot(permit) => {
                    let conn = self.dial_h1(addr, s, generation, permit).await?;
                    return Ok((conn, false));
                }
                Grant::Handoff(Handoff::H1(mut conn)) => {
                    if conn.meta.addr == addr
                        && conn.proxied_for == crate::proxy_protocol::client_ip(s.proxy_protocol)
                        && conn.meta.generation >= generation
                        && !conn.meta.killed()
                        && !super::is_stale(&mut conn)
                    {
                        conn.meta.set(ConnState::InUse);
                        return Ok((conn, true));
                    }
                    // Stale (a handoff moved the node, the backend closed
                    // it): its slot frees as it closes; queue again.
                    conn.meta.set(ConnState::Closed);
                }
                Grant::Handoff(Handoff::H2) => {}
            }
        }
    }

    /// Tells every queued request that a new HTTP/2 connection is up.
    pub(super) fn wake_h2_waiters(&self) {
        while self.admission.offer(Handoff::H2).is_ok() {}
    }

    /// The shared HTTP/2 connection to `addr` when there is none usable:
    /// a slot first (queueing if every slot is taken, until a slot frees or
    /// another request's new connection is up), then the dial lock.
    pub(super) async fn obtain_h2(
        &self,
        addr: SocketAddr,
        s: &PoolSettings,
        generation: u64,
    ) -> Result<Arc<H2Conn>, ProxyError> {
        let usable = |pool: &Pool| {
            pool.h2.load_full().filter(|c| {
                !c.sender.is_closed() && c.meta.addr == addr && c.meta.generation >= generation
            })
        };
        let deadline = Instant::now() + s.limits.queue_timeout;
        let permit = loop {
            let grant = match self.admission.enter().map_err(busy)? {
                Entered::Now(permit) => Grant::Slot(permit),
                Entered::Queued(ticket) => {
                    if let Some(c) = usable(self) {
                        return Ok(c);
                    }
                    wait_in_queue(ticket, deadline).await?
                }
            };
            match grant {
                Grant::Slot(permit) => break permit,
                Grant::Handoff(Handoff::H2) => {}
                // The service changed protocol under a reload.
                Grant::Handoff(Handoff::H1(conn)) => conn.meta.set(ConnState::Closed),
            }
            if let Some(c) = usable(self) {
                return Ok(c);
            }
        };
        let _guard = self.h2_dial.lock().await;
        // Someone may have dialled while we waited (our slot frees here).
        if let Some(c) = usable(self) {
            return Ok(c);
        }
        let c = Arc::new(Box::pin(self.dial_h2(addr, s, generation, permit)).await?);
        self.h2.store(Some(Arc::clone(&c)));
        self.wake_h2_waiters();
        Ok(c)
    }
}

/// The error for a request the node's queue turned away.
fn busy(r: Rejected) -> ProxyError {
    match r {
        Rejected::Full => ProxyError::new(ErrorKind::PoolQueueFull),
        Rejected::Timeout => ProxyError::new(ErrorKind::PoolQueueTimeout),
    }
}

/// Waits in the node's queue until `deadline`; counts and times the wait.
async fn wait_in_queue(
    ticket: Ticket<Handoff>,
    deadline: Instant,
) -> Result<Grant<Handoff>, ProxyError> {
    let started = Instant::now();
    let got = ticket
        .wait(deadline.saturating_duration_since(started))
        .await;
    crate::metrics::METRICS.queue_wait(started.elapsed());
    got.map_err(busy)
}
