//! A timer kept for a connection's life and moved forward lazily: the
//! idle wait of a client connection between requests, and the request
//! timeout of an upstream exchange.
//!
//! A fresh `Sleep` per wait registers with tokio's timer wheel on its
//! first poll and leaves it when dropped (two trips to the wheel for every
//! request on a kept-alive connection). [`LazyTimer`] keeps one `Sleep`
//! armed for the deadline of an earlier wait; a later, farther deadline
//! does not touch it. When it fires before the current deadline it is
//! re-armed for that one, so a busy connection re-arms its timer about
//! once per timeout period instead of once per request. A nearer deadline
//! than the armed one re-arms it at once. A wait from the task whose
//! waker the armed timer already holds, before it fires, does not poll it
//! at all.
//!
//! Must not touch: what a passed deadline means (the caller decides).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Waker};

use tokio::time::{Instant, Sleep};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct LazyTimer {
    sleep: Option<Pin<Box<Sleep>>>,
    /// The waker the armed `Sleep` holds (from its last poll): while it is
    /// the caller's and the timer has not fired, a poll would change
    /// nothing and is skipped.
    waker: Option<Waker>,
}

impl LazyTimer {
    /// Has `deadline` passed? When not, the task is woken no later than
    /// at `deadline` (possibly earlier, once, to re-arm).
    pub fn poll_passed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let timer = match &mut self.sleep {
            Some(t) => {
                if t.deadline() > deadline {
                    t.as_mut().reset(deadline);
                    self.waker = None;
                }
                t
            }
            None => {
                self.waker = None;
                self.sleep
                    .insert(Box::pin(tokio::time::sleep_until(deadline)))
            }
        };
        if !timer.is_elapsed() && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return false;
        }
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                match &mut self.waker {
                    Some(w) => w.clone_from(cx.waker()),
                    None => self.waker = Some(cx.waker().clone()),
                }
                return false;
            }
            if timer.deadline() >= deadline {
                return true;
            }
            // Fired for an earlier wait's deadline: on to this one.
            timer.as_mut().reset(deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Poll;
    use std::time::Duration;

    /// Polls once: has `deadline` passed?
    async fn passed(t: &mut LazyTimer, deadline: Instant) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(t.poll_passed(deadline, cx))).await
    }

    /// Waits until `deadline` has passed.
    async fn until(t: &mut LazyTimer, deadline: Instant) {
        std::future::poll_fn(|cx| {
            if t.poll_passed(deadline, cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Paused time: a farther deadline leaves the armed timer alone and is
    /// reached through one early wake-up; a nearer one re-arms it at once;
    /// a deadline is never reported passed before it has.
    #[tokio::test(start_paused = true)]
    async fn deadlines_pass_when_they_pass() {
        let mut t = LazyTimer::default();
        let start = Instant::now();
        assert!(!passed(&mut t, start + Duration::from_secs(10)).await);
        let later = start + Duration::from_secs(15);
        assert!(!passed(&mut t, later).await);
        until(&mut t, later).await;
        assert_eq!(Instant::now(), later);
        let near = Instant::now() + Duration::from_millis(5);
        assert!(!passed(&mut t, Instant::now() + Duration::from_secs(60)).await);
        until(&mut t, near).await;
        assert_eq!(Instant::now(), near);
    }

    /// A timer polled by one task and then waited on by another (a pooled
    /// connection's timer, used by the next client's task) wakes the
    /// second: a poll from a new waker is never skipped.
    #[tokio::test(start_paused = true)]
    async fn a_new_task_is_woken_at_the_deadline() {
        let mut t = LazyTimer::default();
        let deadline = Instant::now() + Duration::from_secs(1);
        assert!(!passed(&mut t, deadline).await);
        let waited = tokio::spawn(async move {
            until(&mut t, deadline).await;
            Instant::now()
        });
        assert_eq!(waited.await.expect("the waiting task"), deadline);
    }
}
