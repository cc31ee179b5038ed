//! Watching the config file.
//!
//! Owns the loop that notices a changed `--config` file — by size,
//! modification time and inode, so editors that write a new file and rename
//! it over the old one are seen — woken by inotify ([`wake`]) within
//! milliseconds of a change and by its polling interval as the fallback,
//! waits until the file has held still (debounce: a half-written file is
//! never applied), and
//! hands the text to [`Control::apply_text`]. Identical content is a no-op
//! there. A missing or unreadable file is logged and retried; the running
//! config stays.
//!
//! Must not touch: the snapshot (only through `Control`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use hopgate_core::config::Format;

use crate::control::{Control, Source};

pub(crate) mod wake;

/// After a kernel event, how long the file must hold still before it is
/// read (editors write in several steps).
pub(crate) const SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

/// What identifies one version of the file on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    len: u64,
    mtime_ns: i128,
    inode: u64,
}

pub(crate) fn stamp(path: &PathBuf) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        inode: m.ino(),
    })
}

/// The watch of a config file, armed: the stamp of the file and the kernel
/// watch on its directory, both taken by [`FileWatch::arm`] before the file
/// is read for the running config. An edit that lands after the stamp —
/// while the file is read, checked and the gateway binds — is seen as a
/// change and applied (at worst the text just read is applied once more).
/// (Taken in the watching task instead, an edit made between the start and
/// that task's first run was taken for the loaded file and never applied.)
pub struct FileWatch {
    path: PathBuf,
    applied: Option<Stamp>,
    wake: wake::DirWake,
}

impl FileWatch {
    /// Call right before the file is read for the running config.
    pub fn arm(path: PathBuf) -> FileWatch {
        FileWatch {
            wake: wake::DirWake::new(std::slice::from_ref(&path)),
            applied: stamp(&path),
            path,
        }
    }

    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Watches the file until `shutdown` turns true. `sources.file.watch` and
/// `sources.file.interval` are read from the running config at every
/// tick, so a reload can turn watching off or on.
pub async fn watch_file(
    control: Arc<Control>,
    armed: FileWatch,
    mut shutdown: watch::Receiver<bool>,
) {
    let FileWatch {
        path,
        mut applied,
        wake,
    } = armed;
    let format = if path.extension().is_some_and(|e| e == "json") {
        Format::Json
    } else {
        Format::Yaml
    };
    let mut pending: Option<Stamp> = None;
    loop {
        let sources = control.snapshot().load().config.sources.clone();
        let woke = tokio::select! {
            _ = tokio::time::sleep(sources.file_interval) => false,
            () = wake.changed() => true,
            _ = shutdown.wait_for(|s| *s) => return,
        };
        if !sources.file_watch {
            // Off: changes wait for SIGHUP; remember what is on disk so
            // turning watching back on does not replay old edits.
            applied = stamp(&path);
            pending = None;
            continue;
        }
        let mut now = stamp(&path);
        if woke && now.is_some() && now != applied && pending != now {
            // A kernel event: rather than a whole interval, give the writer
            // a moment and look again.
            pending = now;
            tokio::time::sleep(SETTLE).await;
            now = stamp(&path);
        }
        if now.is_none() || now == applied {
            // Missing (mid-rename) or unchanged.
            pending = None;
            continue;
        }
        if pending != now {
            // Changed since the last look: wait until it holds still.
            pending = now;
            continue;
        }
        pending = None;
        applied = now;
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let (c, source) = (
                    Arc::clone(&control),
                    Source::File(path.display().to_string()),
                );
                let _ =
                    tokio::task::spawn_blocking(move || c.apply_text(&text, format, source)).await;
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "config file changed but cannot be read; keeping the running config");
            }
        }
    }
}
