//! Watching the certificate, key and CA files of the running config's
//! `tls` blocks.
//!
//! Owns the loop that notices a rotated file the way the config watcher
//! does ([`crate::watch`]: size, modification time and inode, so a new
//! file renamed over the old one is seen; woken by inotify on the files'
//! directories, with the interval as the fallback), waits until every
//! file has held still (a certificate written before its key is never
//! loaded half-way), and asks [`Control::reload_tls`] to
//! re-read them. A bad pair is refused there and the running certificates
//! keep serving; the files are looked at again at the next change.
//!
//! The set of files follows the running config: after a reload the new
//! set is taken as it is (the reload has just read it).
//!
//! The loop itself ([`watch_set`]) takes the set of files and the re-read
//! as arguments: `routes[].auth`'s key and password files are watched the
//! same way (`crate::auth_watch`).
//!
//! Must not touch: the snapshot or the certificates (only through
//! `Control`).

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::control::Control;
use crate::watch::wake::DirWake;
use crate::watch::{stamp, Stamp, SETTLE};

type Stamps = Vec<(PathBuf, Option<Stamp>)>;

/// Which files to watch (they follow the running config), and how to
/// re-read them.
type Set = (fn(&Control) -> Vec<PathBuf>, fn(&Control));

fn stamps(files: &[PathBuf]) -> Stamps {
    files.iter().map(|f| (f.clone(), stamp(f))).collect()
}

/// Watches the TLS files until `shutdown` turns true: woken by the kernel
/// and at `sources.file.interval` (read at every tick). Runs whether or not
/// `sources.file.watch` is on: certificates rotate under a fixed config.
pub fn watch_tls_files(
    control: Arc<Control>,
    shutdown: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> {
    let reread = |c: &Control| {
        let _ = c.reload_tls();
    };
    watch_set(control, shutdown, Control::tls_files, reread)
}

/// Watches the files `set` names (it follows the running config) until
/// `shutdown` turns true, calling `reread` on a blocking thread once a
/// change has held still. The files' stamps are taken when this is
/// called, not when the future first runs: a change made once the
/// gateway is up is always seen as one.
pub(crate) fn watch_set(
    control: Arc<Control>,
    shutdown: watch::Receiver<bool>,
    set: fn(&Control) -> Vec<PathBuf>,
    reread: fn(&Control),
) -> impl std::future::Future<Output = ()> {
    let files = set(&control);
    let wake = DirWake::new(&files);
    let applied = stamps(&files);
    watch_loop(control, shutdown, (set, reread), (files, wake, applied))
}

async fn watch_loop(
    control: Arc<Control>,
    mut shutdown: watch::Receiver<bool>,
    (set, reread): Set,
    (mut files, mut wake, mut applied): (Vec<PathBuf>, DirWake, Stamps),
) {
    let mut pending: Option<Stamps> = None;
    loop {
        let interval = control.snapshot().load().config.sources.file_interval;
        let woke = tokio::select! {
            _ = tokio::time::sleep(interval) => false,
            () = wake.changed() => true,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let now_files = set(&control);
        if now_files != files {
            // A reload changed the set and read it: start from there.
            files = now_files;
            wake = DirWake::new(&files);
            applied = stamps(&files);
            pending = None;
            continue;
        }
        if files.is_empty() {
            continue;
        }
        let mut now = stamps(&files);
        if woke && now != applied && pending.as_ref() != Some(&now) {
            // A kernel event: rather than a whole interval, give the
            // writer a moment (a certificate and then its key) and look
            // again.
            pending = Some(now);
            tokio::time::sleep(SETTLE).await;
            now = stamps(&files);
        }
        if now == applied || now.iter().any(|(_, s)| s.is_none()) {
            // Unchanged, or a file missing (mid-rename).
            pending = None;
            continue;
        }
        if pending.as_ref() != Some(&now) {
            // Changed since the last look: wait until it holds still.
            pending = Some(now);
            continue;
        }
        pending = None;
        applied = now;
        let c = Arc::clone(&control);
        let _ = tokio::task::spawn_blocking(move || reread(&c)).await;
        // The reload may have read a different set (it cannot, for the
        // same config, but keep the two in step).
        files = set(&control);
    }
}
