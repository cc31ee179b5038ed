//! `hopgate run --pid-file PATH`: the process id, for `kill -USR1
//! "$(cat PATH)"` and friends, so a signal reaches this gateway and not
//! every `hopgate` on the host.
//!
//! Owns writing the file (atomically: a temporary file renamed over it)
//! once the gateway serves, and removing it at exit only while it still
//! names this process: after a binary upgrade the new process has written
//! its own id there, and the old one must leave it. Must not touch:
//! signals.

use std::path::{Path, PathBuf};

/// The pid file this process wrote.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Writes this process's id to `path` (replacing what is there).
    pub(crate) fn write(path: &Path) -> std::io::Result<PidFile> {
        let pid = std::process::id();
        let tmp = path.with_file_name(format!(
            ".{}.{pid}.tmp",
            path.file_name().map_or_else(
                || "hopgate.pid".into(),
                |n| n.to_string_lossy().into_owned()
            )
        ));
        std::fs::write(&tmp, format!("{pid}\n"))?;
        if let Err(e) = std::fs::rename(&tmp, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }

    /// Removes the file if it still names this process.
    pub(crate) fn remove(self) {
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|t| t.trim().parse::<u32>().ok() == Some(self.pid));
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the pid file");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_whole_and_removed_only_while_it_is_ours() {
        let dir = std::env::temp_dir().join(format!("hopgate-pid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("hopgate.pid");
        let f = PidFile::write(&path).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{}\n", std::process::id())
        );
        f.remove();
        assert!(!path.exists());
        // A newer process (an upgrade) wrote its id: left alone.
        let f = PidFile::write(&path).unwrap();
        std::fs::write(&path, "4194301\n").unwrap();
        f.remove();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "4194301\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
