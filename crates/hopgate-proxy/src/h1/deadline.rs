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
//! than the armed one re-arms it at once.
//!
//! Must not touch: what a passed deadline means (the caller decides).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;

use tokio::time::{Instant, Sleep};

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct LazyTimer(Option<Pin<Box<Sleep>>>);

impl LazyTimer {
    /// Has `deadline` passed? When not, the task is woken no later than
    /// at `deadline` (possibly earlier, once, to re-arm).
    pub(crate) fn poll_passed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let timer = match &mut self.0 {
            Some(t) => {
                if t.deadline() > deadline {
                    t.as_mut().reset(deadline);
                }
                t
            }
            None => self.0.insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        loop {
            if timer.as_mut().poll(cx).is_pending() {
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
}
