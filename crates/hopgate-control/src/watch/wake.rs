//! A nudge from the kernel when a watched file may have changed.
//!
//! Owns one `notify` watcher (inotify on Linux) on the *directories*
//! holding a set of files (the config file; the certificate, key and CA
//! files) — editors and config-management tools write a new file and
//! rename it over the old one, which replaces the inode a watch on the file
//! itself would follow — filtered to events that name the file. An event
//! only wakes the poll loop early: the loop still decides, by size,
//! modification time and inode, whether the file changed and has held
//! still. Where the watcher cannot be had (no inotify instances left, an
//! unsupported file system), the loop keeps polling at its interval.
//!
//! Must not touch: the file's contents, the config.

use std::collections::{BTreeSet, HashSet};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

/// Wakes [`DirWake::changed`] when an event names one of the files.
pub(crate) struct DirWake {
    notify: Arc<Notify>,
    /// Held for its `Drop`, which stops the kernel watch with the loop.
    #[cfg_attr(not(test), expect(dead_code, reason = "held for its Drop"))]
    watcher: Option<RecommendedWatcher>,
}

impl DirWake {
    /// Watches the directories of `files`; on failure logs why and wakes
    /// never (the caller's interval still runs). No files: never wakes.
    pub(crate) fn new(files: &[PathBuf]) -> DirWake {
        let notify = Arc::new(Notify::new());
        let watcher = if files.is_empty() {
            None
        } else {
            Self::watch(files, Arc::clone(&notify))
                .inspect_err(|e| {
                    tracing::warn!(path = %files[0].display(), error = %e, "cannot watch the files' directories for changes; polling only");
                })
                .ok()
        };
        DirWake { notify, watcher }
    }

    fn watch(files: &[PathBuf], notify: Arc<Notify>) -> notify::Result<RecommendedWatcher> {
        let names: HashSet<OsString> = files
            .iter()
            .filter_map(|f| f.file_name().map(Into::into))
            .collect();
        let dirs: BTreeSet<PathBuf> = files
            .iter()
            .map(|f| match f.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            })
            .collect();
        let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            // An error (queue overflow) may have hidden a change: look.
            let names_file = ev.map_or(true, |ev| {
                ev.paths
                    .iter()
                    .any(|p| p.file_name().is_some_and(|n| names.contains(n)))
            });
            if names_file {
                notify.notify_one();
            }
        })?;
        for dir in &dirs {
            w.watch(dir, RecursiveMode::NonRecursive)?;
        }
        Ok(w)
    }

    /// Resolves after the next event naming the file (at once when one came
    /// since the last call).
    pub(crate) async fn changed(&self) {
        self.notify.notified().await;
    }

    /// Whether a kernel watch is in place.
    #[cfg(test)]
    fn active(&self) -> bool {
        self.watcher.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_rename_over_the_file_wakes_and_a_neighbour_does_not() {
        let dir = std::env::temp_dir().join(format!("hopgate-wake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hopgate.yaml");
        std::fs::write(&file, "a").unwrap();
        let wake = DirWake::new(std::slice::from_ref(&file));
        assert!(wake.active());
        std::fs::write(dir.join("other.txt"), "x").unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(300), wake.changed()).await;
        assert!(quiet.is_err(), "an unrelated file woke the watcher");
        std::fs::write(dir.join("hopgate.yaml.tmp"), "b").unwrap();
        std::fs::rename(dir.join("hopgate.yaml.tmp"), &file).unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(10), wake.changed()).await;
        let _ = std::fs::remove_dir_all(&dir);
        assert!(woke.is_ok(), "the rename was not seen");
    }
}
