//! The last good shared document and node set on disk
//! (`sources.etcd.cache`), so a replica that starts while etcd is down
//! boots from them.
//!
//! Owns the file format (JSON) and the atomic write: a temp file in the
//! same folder, fsync'd, renamed over the old one, so a crash never leaves
//! half a cache. Must not touch: etcd, the snapshot.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Doc;

/// What the cache file holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Cached {
    /// The etcd revision it was read at.
    pub revision: i64,
    /// The last document this replica applied.
    pub config: Doc,
    /// `service/node_id` → registration JSON.
    pub nodes: BTreeMap<String, String>,
    pub drains: BTreeSet<String>,
}

fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp{}", std::process::id()));
    path.with_file_name(name)
}

/// Writes `cached` to `path` atomically.
pub(super) fn save(path: &Path, cached: &Cached) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(cached).map_err(std::io::Error::other)?;
    let tmp = temp_path(path);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Reads a cache file; the error says why it cannot be used.
pub(super) fn load(path: &Path) -> Result<Cached, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: not a cache file: {e}", path.display()))
}
