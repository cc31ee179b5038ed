//! Where log lines go: event lines straight to stderr, access lines through
//! a bounded buffer that a thread of its own writes out.
//!
//! Owns the [`MakeWriter`] the `tracing` fmt subscriber writes its event
//! lines through, and the sink the data plane hands its access lines to
//! (already formatted: `hopgate_proxy::access_log`):
//!
//! - an access line is appended to a bounded in-memory buffer, and the
//!   request goes on. The writer thread writes the buffer out in batches,
//!   every [`FLUSH_EVERY`] or as soon as [`WAKE_AT`] bytes are waiting. When
//!   the buffer holds [`CAPACITY`] bytes (the destination is slower than the
//!   traffic, or blocked), the line is dropped and counted in
//!   `hopgate_access_log_dropped_total`: a request never waits for the log.
//! - any other line (the event log: start, reloads, warnings, errors) first
//!   writes out the access lines waiting before it, then itself, on the
//!   calling thread, so stderr keeps the order in which lines were made and
//!   an event is visible at once.
//!
//! [`flush`] (and dropping the [`Flusher`] `main` holds) writes out what is
//! waiting, so the last access lines before an exit are not lost.
//!
//! The config's `access_log` block ([`configure`], at start and on every
//! applied config) chooses the access lines' destination (stderr, or a file
//! appended to, whose waiting lines are written to the previous destination
//! before a switch) and their format (text or JSON, or the process's
//! `--log-format`). [`reopen`] (SIGUSR1) has the writer thread write out
//! what is waiting to the open file, then open the path again: after a
//! rotation (`mv access.log access.log.1; kill -USR1`), new lines land in a
//! fresh file at the path and none is lost.
//!
//! Must not touch: the lines' format (the fmt subscriber's and the data
//! plane's), filtering (`RUST_LOG`), whether a request is logged.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tracing_subscriber::fmt::MakeWriter;

use hopgate_core::config::{AccessLogConfig, AccessLogFormat};

/// The most bytes of access lines waiting to be written; a line that does
/// not fit is dropped and counted.
pub(crate) const CAPACITY: usize = 1 << 20;
/// Waiting bytes that wake the writer thread before its timer does.
pub(crate) const WAKE_AT: usize = 64 << 10;
/// The longest an access line waits in the buffer while traffic is light.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The buffer shared by the request path, the writer thread and the event
/// log.
struct Shared {
    /// Access lines not yet written.
    pending: Mutex<Vec<u8>>,
    /// Held while writing, so batches and event lines never interleave
    /// and stay in order; holds the buffer swapped in for `pending` (so
    /// both keep their allocation) and the access lines' file.
    out: Mutex<Out>,
    /// Set by [`reopen`]; the next write-out reopens the file.
    reopen: AtomicBool,
    /// The writer thread, woken when [`WAKE_AT`] bytes are waiting.
    writer: OnceLock<Thread>,
}

/// The writing side.
struct Out {
    spare: Vec<u8>,
    /// `access_log.path` and the file open at it; `None`: stderr.
    file: Option<(PathBuf, File)>,
}

/// Opens `path` for appending, creating it (mode 0640) if needed.
fn open_log(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
}

impl Out {
    /// Writes `spare` (access lines) to their destination and clears it.
    fn write_spare(&mut self) -> io::Result<()> {
        if self.spare.is_empty() {
            return Ok(());
        }
        let res = match &mut self.file {
            Some((_, f)) => f.write_all(&self.spare),
            None => io::stderr().lock().write_all(&self.spare),
        };
        self.spare.clear();
        res
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

impl Shared {
    /// Appends one access line, or drops and counts it when the buffer is
    /// full. Never blocks on I/O.
    fn push(&self, line: &[u8]) {
        let mut p = lock(&self.pending);
        let before = p.len();
        if before + line.len() > CAPACITY {
            drop(p);
            hopgate_proxy::telemetry::access_log_dropped();
            return;
        }
        p.extend_from_slice(line);
        let wake = before < WAKE_AT && p.len() >= WAKE_AT;
        drop(p);
        if wake {
            if let Some(t) = self.writer.get() {
                t.unpark();
            }
        }
    }

    /// Moves the waiting access lines into `out.spare`.
    fn take_pending(&self, out: &mut Out) {
        let mut p = lock(&self.pending);
        if !p.is_empty() {
            if out.spare.is_empty() {
                std::mem::swap(&mut *p, &mut out.spare);
            } else {
                out.spare.extend_from_slice(&p);
                p.clear();
            }
        }
    }

    /// Writes out the waiting access lines, then `then` (an event line),
    /// and reopens the file if [`reopen`] asked for it.
    fn write_out(&self, then: &[u8]) -> io::Result<()> {
        let mut out = lock(&self.out);
        self.take_pending(&mut out);
        let res = out.write_spare();
        if self.reopen.swap(false, Ordering::Relaxed) {
            if let Some((path, file)) = &mut out.file {
                match open_log(path) {
                    Ok(f) => *file = f,
                    // Keep writing to the file still open; say so on the
                    // event log (not through `tracing`: this holds `out`).
                    Err(e) => {
                        let _ = writeln!(
                            io::stderr().lock(),
                            "hopgate: SIGUSR1: cannot reopen the access log {}: {e}; still writing to the file already open",
                            path.display()
                        );
                    }
                }
            }
        }
        if then.is_empty() {
            return res;
        }
        let r2 = io::stderr().lock().write_all(then);
        res.and(r2)
    }

    /// Switches the access lines to `path` (`None`: stderr), writing the
    /// waiting ones to the old destination first. Unchanged paths keep
    /// their file.
    fn set_path(&self, path: Option<&Path>) -> io::Result<()> {
        let mut out = lock(&self.out);
        let same = match (&out.file, path) {
            (Some((p, _)), Some(q)) => p == q,
            (None, None) => true,
            _ => false,
        };
        if same {
            return Ok(());
        }
        let next = match path {
            Some(p) => Some((p.to_path_buf(), open_log(p)?)),
            None => None,
        };
        self.take_pending(&mut out);
        let _ = out.write_spare();
        out.file = next;
        Ok(())
    }
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        pending: Mutex::new(Vec::with_capacity(2 * WAKE_AT)),
        out: Mutex::new(Out {
            spare: Vec::with_capacity(2 * WAKE_AT),
            file: None,
        }),
        reopen: AtomicBool::new(false),
        writer: OnceLock::new(),
    })
}

/// The fmt subscriber's writer: [`MakeWriter::make_writer_for`] picks the
/// buffered path for access lines.
#[derive(Clone, Copy)]
pub(crate) struct LogWriter;

/// Writes out the waiting access lines when dropped.
pub(crate) struct Flusher(());

impl Drop for Flusher {
    fn drop(&mut self) {
        flush();
    }
}

/// Starts the writer thread (once), registers the buffer as the data
/// plane's access-line sink (JSON lines when `json`, the process's
/// `--log-format`, until the config says otherwise) and returns the writer
/// for the fmt subscriber, with the guard that flushes at exit.
pub(crate) fn start(json: bool) -> (LogWriter, Flusher) {
    CLI_JSON.store(json, Ordering::Relaxed);
    hopgate_proxy::set_access_log_json(json);
    hopgate_proxy::set_access_log_sink(push_access);
    let sh = shared();
    if sh.writer.get().is_none() {
        let spawned = std::thread::Builder::new()
            .name("hopgate-access-log".into())
            .spawn(move || loop {
                std::thread::park_timeout(FLUSH_EVERY);
                // A failed write (stderr closed) loses that batch, like a
                // failed synchronous write would; keep going.
                let _ = shared().write_out(&[]);
            });
        match spawned {
            Ok(h) => {
                let _ = sh.writer.set(h.thread().clone());
            }
            // Without the thread the timer never fires; event lines and
            // the exit still flush, and a full buffer drops and counts.
            Err(e) => eprintln!("hopgate: cannot start the access log writer thread: {e}"),
        }
    }
    (LogWriter, Flusher(()))
}

/// Writes out the access lines waiting in the buffer.
pub(crate) fn flush() {
    let _ = shared().write_out(&[]);
}

/// `--log-format json`: the access lines' format when the config names
/// none.
static CLI_JSON: AtomicBool = AtomicBool::new(false);

/// The data plane's sink: one access line into the buffer.
fn push_access(line: &[u8]) {
    shared().push(line);
}

/// Applies a config's `access_log` format and path. An error (the file
/// cannot be opened) leaves the destination as it was.
pub(crate) fn configure(cfg: &AccessLogConfig) -> io::Result<()> {
    hopgate_proxy::set_access_log_json(match cfg.format {
        None => CLI_JSON.load(Ordering::Relaxed),
        Some(AccessLogFormat::Text) => false,
        Some(AccessLogFormat::Json) => true,
    });
    shared().set_path(cfg.path.as_deref())
}

/// Has the writer thread write out what is waiting and reopen the access
/// log's file (SIGUSR1, after a rotation); nothing to do on stderr.
pub(crate) fn reopen() {
    let sh = shared();
    sh.reopen.store(true, Ordering::Relaxed);
    match sh.writer.get() {
        Some(t) => t.unpark(),
        None => flush(),
    }
}

/// An event line from the fmt subscriber (it writes each formatted line
/// with one `write_all`): the waiting access lines, then this one, to
/// stderr.
pub(crate) struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        shared().write_out(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Sink;

    fn make_writer(&'a self) -> Sink {
        Sink
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path under the temp directory, unique to this test run.
    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("hopgate-logwriter-{}-{name}", std::process::id()))
    }

    #[test]
    fn lines_follow_the_path_and_a_reopen_after_a_rename_loses_none() {
        let sh = Shared {
            pending: Mutex::new(Vec::new()),
            out: Mutex::new(Out {
                spare: Vec::new(),
                file: None,
            }),
            reopen: AtomicBool::new(false),
            writer: OnceLock::new(),
        };
        let (a, rotated, b) = (temp("a.log"), temp("a.log.1"), temp("b.log"));
        sh.set_path(Some(&a)).unwrap();
        sh.push(b"one\n");
        sh.push(b"two\n");
        std::fs::rename(&a, &rotated).unwrap();
        // Waiting lines go to the file open (the renamed one), then the
        // path is opened again.
        sh.reopen.store(true, Ordering::Relaxed);
        sh.write_out(&[]).unwrap();
        sh.push(b"three\n");
        sh.write_out(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(&rotated).unwrap(), "one\ntwo\n");
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "three\n");
        // A switch writes what waits to the old file first.
        sh.push(b"four\n");
        sh.set_path(Some(&b)).unwrap();
        sh.push(b"five\n");
        sh.write_out(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "three\nfour\n");
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "five\n");
        // A path that cannot be opened is an error and changes nothing.
        assert!(sh
            .set_path(Some(Path::new("/nonexistent-dir/x.log")))
            .is_err());
        sh.push(b"six\n");
        sh.write_out(&[]).unwrap();
        assert_eq!(std::fs::read_to_string(&b).unwrap(), "five\nsix\n");
        for p in [a, rotated, b] {
            let _ = std::fs::remove_file(p);
        }
    }
}
