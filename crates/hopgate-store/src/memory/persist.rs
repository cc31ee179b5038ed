//! The memory store's snapshot file (`store.path`): written atomically,
//! read defensively.
//!
//! Layout (integers big-endian):
//!
//! ```text
//! magic "HOPGSESS" (8) | version u32 (4)
//! records, each starting with a tag byte:
//!   1 NAME     len u32 | UTF-8 bytes          -> next name index (0, 1, ...)
//!   2 BINDING  id (16) | bound_at u64 | expires_at u64 | hops u32
//!              | service index u32 | node index u32
//!              | context len u32 (0xFFFF_FFFF = none) | context bytes
//!   0 END      binding count u64
//! SHA-256 of every byte above (32)
//! ```
//!
//! Names are written once, before the first binding that uses them, so a
//! million sessions on ten nodes store ten names. Loading checks magic,
//! version and checksum before parsing, and never trusts a length beyond
//! the bytes actually present.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::MemoryStore;
use crate::{Binding, SessionId, SessionStore};

const MAGIC: &[u8; 8] = b"HOPGSESS";
/// The format version this build writes and reads.
pub(crate) const VERSION: u32 = 1;
const TAG_END: u8 = 0;
const TAG_NAME: u8 = 1;
const TAG_BINDING: u8 = 2;
const NO_CONTEXT: u32 = u32::MAX;
const HEADER_LEN: usize = MAGIC.len() + 4;
const CHECKSUM_LEN: usize = 32;

/// Why a snapshot file was not used. The store starts empty instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadWarning {
    #[error("cannot read the file: {0}")]
    Unreadable(String),
    #[error("not a hopgate session file (bad magic)")]
    NotASessionFile,
    #[error("unsupported session file version {found} (this build reads version {supported})")]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("truncated session file")]
    Truncated,
    #[error("checksum mismatch: the file is corrupt")]
    ChecksumMismatch,
    #[error("corrupt session file at byte {offset}: {what}")]
    Corrupt { offset: usize, what: &'static str },
}

/// What [`MemoryStore::load`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadReport {
    pub path: PathBuf,
    /// The file did not exist (a first start): not a warning.
    pub missing: bool,
    /// Bindings now in the store.
    pub loaded: usize,
    /// Bindings skipped because they had expired.
    pub expired: usize,
    /// Bindings skipped because the store's bound was reached.
    pub over_limit: usize,
    /// Set when the file was there but not used; the store is then empty.
    pub warning: Option<LoadWarning>,
}

impl LoadReport {
    fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            missing: false,
            loaded: 0,
            expired: 0,
            over_limit: 0,
            warning: None,
        }
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.display();
        if let Some(w) = &self.warning {
            write!(
                f,
                "session file {path}: {w}; starting with an empty session store"
            )
        } else if self.missing {
            write!(
                f,
                "session file {path} not found; starting with an empty session store"
            )
        } else {
            write!(
                f,
                "session file {path}: loaded {} sessions ({} expired skipped, {} over the limit skipped)",
                self.loaded, self.expired, self.over_limit
            )
        }
    }
}

/// A writer that hashes what passes through it.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub(super) fn save(store: &MemoryStore, path: &Path) -> io::Result<usize> {
    static TMP_SEQ: AtomicU64 = AtomicU64::new(0);
    let file_name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("session file path {} has no file name", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        file_name.to_string_lossy(),
        std::process::id(),
        TMP_SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write_file(store, &tmp).and_then(|n| {
        fs::rename(&tmp, path)?;
        // Make the rename itself durable. Best effort: some filesystems
        // refuse to fsync a directory, and the data is already synced.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(n)
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn write_file(store: &MemoryStore, tmp: &Path) -> io::Result<usize> {
    let file = OpenOptions::new().write(true).create_new(true).open(tmp)?;
    let mut w = Hashing {
        inner: BufWriter::with_capacity(1 << 16, file),
        hash: Sha256::new(),
    };
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_be_bytes())?;

    let mut names: HashMap<Arc<str>, u32> = HashMap::new();
    let mut count: u64 = 0;
    let mut failed: Option<io::Error> = None;
    store.for_each(&mut |id, b| {
        if failed.is_some() {
            return;
        }
        if let Err(e) = write_binding(&mut w, &mut names, id, b) {
            failed = Some(e);
        } else {
            count += 1;
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    w.write_all(&[TAG_END])?;
    w.write_all(&count.to_be_bytes())?;
    let digest = w.hash.finalize();
    let mut inner = w.inner;
    inner.write_all(&digest)?;
    let file = inner.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    usize::try_from(count).map_err(|_| io::Error::other("binding count overflows usize"))
}

fn len_u32(len: usize) -> io::Result<u32> {
    u32::try_from(len)
        .ok()
        .filter(|&l| l != NO_CONTEXT)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "field too large for the session file",
            )
        })
}

fn name_index<W: Write>(
    w: &mut W,
    names: &mut HashMap<Arc<str>, u32>,
    name: &Arc<str>,
) -> io::Result<u32> {
    if let Some(&i) = names.get(name) {
        return Ok(i);
    }
    let i = u32::try_from(names.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "too many distinct names"))?;
    w.write_all(&[TAG_NAME])?;
    w.write_all(&len_u32(name.len())?.to_be_bytes())?;
    w.write_all(name.as_bytes())?;
    names.insert(Arc::clone(name), i);
    Ok(i)
}

fn write_binding<W: Write>(
    w: &mut W,
    names: &mut HashMap<Arc<str>, u32>,
    id: &SessionId,
    b: &Binding,
) -> io::Result<()> {
    let service = name_index(w, names, &b.service)?;
    let node = name_index(w, names, &b.node)?;
    let mut rec = [0u8; 1 + 16 + 8 + 8 + 4 + 4 + 4 + 4];
    rec[0] = TAG_BINDING;
    rec[1..17].copy_from_slice(id.as_bytes());
    rec[17..25].copy_from_slice(&b.bound_at.to_be_bytes());
    rec[25..33].copy_from_slice(&b.expires_at.to_be_bytes());
    rec[33..37].copy_from_slice(&b.hops.to_be_bytes());
    rec[37..41].copy_from_slice(&service.to_be_bytes());
    rec[41..45].copy_from_slice(&node.to_be_bytes());
    let ctx_len = match &b.context {
        Some(c) => len_u32(c.len())?,
        None => NO_CONTEXT,
    };
    rec[45..49].copy_from_slice(&ctx_len.to_be_bytes());
    w.write_all(&rec)?;
    if let Some(c) = &b.context {
        w.write_all(c)?;
    }
    Ok(())
}

pub(super) fn load(path: &Path, now: u64, max_sessions: usize) -> (MemoryStore, LoadReport) {
    let mut report = LoadReport::new(path);
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            report.missing = true;
            return (MemoryStore::new(max_sessions), report);
        }
        Err(e) => {
            report.warning = Some(LoadWarning::Unreadable(e.to_string()));
            return (MemoryStore::new(max_sessions), report);
        }
    };
    let store = MemoryStore::new(max_sessions);
    match parse(&bytes, now, &store, &mut report) {
        Ok(()) => (store, report),
        Err(w) => {
            report.loaded = 0;
            report.expired = 0;
            report.over_limit = 0;
            report.warning = Some(w);
            (MemoryStore::new(max_sessions), report)
        }
    }
}

/// Bounds-checked reading over the file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], LoadWarning> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or(LoadWarning::Corrupt {
                offset: self.pos,
                what,
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], LoadWarning> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, LoadWarning> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, LoadWarning> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, LoadWarning> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }

    fn corrupt(&self, what: &'static str) -> LoadWarning {
        LoadWarning::Corrupt {
            offset: self.pos,
            what,
        }
    }
}

fn parse(
    bytes: &[u8],
    now: u64,
    store: &MemoryStore,
    report: &mut LoadReport,
) -> Result<(), LoadWarning> {
    if bytes.len() < MAGIC.len() {
        return Err(if MAGIC.starts_with(bytes) {
            LoadWarning::Truncated
        } else {
            LoadWarning::NotASessionFile
        });
    }
    if &bytes[..MAGIC.len()] != MAGIC {
        return Err(LoadWarning::NotASessionFile);
    }
    if bytes.len() < HEADER_LEN {
        return Err(LoadWarning::Truncated);
    }
    let mut version = [0u8; 4];
    version.copy_from_slice(&bytes[MAGIC.len()..HEADER_LEN]);
    let version = u32::from_be_bytes(version);
    if version != VERSION {
        return Err(LoadWarning::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    // Smallest valid file: header, END record, checksum.
    if bytes.len() < HEADER_LEN + 1 + 8 + CHECKSUM_LEN {
        return Err(LoadWarning::Truncated);
    }
    let (body, checksum) = bytes.split_at(bytes.len() - CHECKSUM_LEN);
    if Sha256::digest(body).as_slice() != checksum {
        return Err(LoadWarning::ChecksumMismatch);
    }

    let max = store.max_sessions();
    let mut r = Reader {
        bytes: body,
        pos: HEADER_LEN,
    };
    let mut names: Vec<Arc<str>> = Vec::new();
    let mut seen: u64 = 0;
    loop {
        match r.u8("record tag")? {
            TAG_NAME => {
                let len = r.u32("name length")? as usize;
                let raw = r.take(len, "name")?;
                let name = std::str::from_utf8(raw).map_err(|_| r.corrupt("name is not UTF-8"))?;
                names.push(store.intern_str(name));
            }
            TAG_BINDING => {
                let id = SessionId::from_bytes(r.array("session id")?);
                let bound_at = r.u64("bound_at")?;
                let expires_at = r.u64("expires_at")?;
                let hops = r.u32("hops")?;
                let service = r.u32("service index")?;
                let node = r.u32("node index")?;
                let ctx_len = r.u32("context length")?;
                let context = if ctx_len == NO_CONTEXT {
                    None
                } else {
                    Some(r.take(ctx_len as usize, "context")?)
                };
                let lookup = |i: u32| names.get(i as usize).cloned();
                let (Some(service), Some(node)) = (lookup(service), lookup(node)) else {
                    return Err(r.corrupt("binding names an undefined service or node"));
                };
                seen += 1;
                let binding = Binding {
                    service,
                    node,
                    bound_at,
                    hops,
                    context: context.map(Arc::from),
                    expires_at,
                };
                if !binding.is_live(now) {
                    report.expired += 1;
                } else if report.loaded >= max {
                    report.over_limit += 1;
                } else {
                    store.insert_raw(id, binding);
                    report.loaded += 1;
                }
            }
            TAG_END => {
                let count = r.u64("binding count")?;
                if count != seen {
                    return Err(r.corrupt("binding count does not match the records"));
                }
                if r.pos != body.len() {
                    return Err(r.corrupt("bytes after the end record"));
                }
                // Duplicate ids (never written by `save`) collapse in the map.
                report.loaded = store.len();
                return Ok(());
            }
            _ => return Err(r.corrupt("unknown record tag")),
        }
    }
}
