//! The old process's side of a binary upgrade: once it has handed its
//! listening sockets to the new process, its open connections move over
//! without a failed request.
//!
//! Owns the process-wide "handing over" flag. While it is set, every
//! HTTP/1.x response (but a `101`) carries `Connection: close`, so a
//! keep-alive client opens its next connection — which the new process
//! accepts from the shared socket — right after a complete response,
//! instead of racing the close of an idle connection; and a listener that
//! stops accepting first leaves its connections up to [`LINGER_MAX`] to end
//! that way before hyper's graceful shutdown closes the idle rest (HTTP/2
//! connections get GOAWAY then, which has no such race).
//!
//! Must not touch: accepting or the sockets themselves (the binary owns the
//! handover protocol).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

static HANDING_OVER: AtomicBool = AtomicBool::new(false);

/// The longest a draining listener waits for its connections to end on
/// their own (each after its next response) before closing the idle ones.
pub(crate) const LINGER_MAX: Duration = Duration::from_secs(1);

/// Marks this process as handing over to a new one (never cleared: the
/// process exits once it has drained).
pub fn begin_handover() {
    HANDING_OVER.store(true, Ordering::Relaxed);
}

/// Whether this process is handing over (one relaxed load).
pub(crate) fn handing_over() -> bool {
    HANDING_OVER.load(Ordering::Relaxed)
}

/// After a handing-over listener stopped accepting: waits until its
/// connections have ended, [`LINGER_MAX`] or half of `shutdown_timeout`
/// has passed, whichever comes first; returns how long it waited.
pub(crate) async fn linger(open: &AtomicUsize, shutdown_timeout: Duration) -> Duration {
    if !handing_over() {
        return Duration::ZERO;
    }
    let start = tokio::time::Instant::now();
    let until = start + LINGER_MAX.min(shutdown_timeout / 2);
    while open.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}
