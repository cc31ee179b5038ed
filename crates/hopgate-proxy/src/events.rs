//! A live feed that costs nothing while nobody listens (the hop feed,
//! `metrics::HOPS`, is one).
//!
//! Owns [`Feed`]: a bounded broadcast and the count of its subscribers.
//! Publishing costs one atomic load while nobody listens; a subscriber
//! that falls more than [`FEED_CAPACITY`] items behind is told how many it
//! missed (tokio's `Lagged`).
//!
//! Must not touch: what is fed (it knows no record type), formats, I/O.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::broadcast;

/// Items a subscriber may fall behind before it misses some.
pub(crate) const FEED_CAPACITY: usize = 256;

/// A broadcast that does nothing while nobody listens.
pub(crate) struct Feed<T> {
    tx: broadcast::Sender<Arc<T>>,
    listeners: AtomicUsize,
}

/// One subscriber: receives what is published after it subscribed.
pub struct Subscription<T: 'static> {
    pub rx: broadcast::Receiver<Arc<T>>,
    feed: &'static Feed<T>,
}

impl<T> Drop for Subscription<T> {
    fn drop(&mut self) {
        self.feed.listeners.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<T> Feed<T> {
    pub(crate) fn new() -> Feed<T> {
        Feed {
            tx: broadcast::channel(FEED_CAPACITY).0,
            listeners: AtomicUsize::new(0),
        }
    }

    /// Whether anyone listens.
    pub(crate) fn active(&self) -> bool {
        self.listeners.load(Ordering::Relaxed) > 0
    }

    /// Sends `make()` to every subscriber; `make` runs only when there is one.
    pub(crate) fn publish(&self, make: impl FnOnce() -> T) {
        if self.active() {
            let _ = self.tx.send(Arc::new(make()));
        }
    }

    pub(crate) fn subscribe(&'static self) -> Subscription<T> {
        self.listeners.fetch_add(1, Ordering::Relaxed);
        Subscription {
            rx: self.tx.subscribe(),
            feed: self,
        }
    }

    #[cfg(test)]
    fn subscribers(&self) -> usize {
        self.listeners.load(Ordering::Relaxed)
    }
}

impl<T> Default for Feed<T> {
    fn default() -> Feed<T> {
        Feed::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::LazyLock;

    static FEED: LazyLock<Feed<u32>> = LazyLock::new(Feed::new);

    #[tokio::test]
    async fn nothing_is_made_without_subscribers_and_laggards_are_told() {
        let mut made = 0;
        FEED.publish(|| {
            made += 1;
            1
        });
        assert_eq!(made, 0, "no subscriber: nothing built");
        let mut sub = FEED.subscribe();
        assert_eq!(FEED.subscribers(), 1);
        for i in 0..(FEED_CAPACITY as u32 + 10) {
            FEED.publish(|| i);
        }
        match sub.rx.recv().await {
            Err(broadcast::error::RecvError::Lagged(n)) => assert_eq!(n, 10),
            other => panic!("expected a lag, got {other:?}"),
        }
        assert_eq!(*sub.rx.recv().await.unwrap(), 10);
        drop(sub);
        assert_eq!(FEED.subscribers(), 0);
    }
}
