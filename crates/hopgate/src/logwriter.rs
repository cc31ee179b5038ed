//! Where log lines go: event lines straight to stderr, access lines through
//! a bounded buffer that a thread of its own writes out.
//!
//! Owns the [`MakeWriter`] the `tracing` fmt subscriber writes through. The
//! subscriber formats every line as before (text or JSON, same fields); only
//! the write differs:
//!
//! - an access line (target `hopgate::access`) is appended to a bounded
//!   in-memory buffer, and the request goes on. The writer thread writes the
//!   buffer to stderr in batches, every [`FLUSH_EVERY`] or as soon as
//!   [`WAKE_AT`] bytes are waiting. When the buffer holds [`CAPACITY`] bytes
//!   (stderr is slower than the traffic, or blocked), the line is dropped
//!   and counted in `hopgate_access_log_dropped_total`: a request never
//!   waits for the log.
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
//! before a switch) and their format ([`Formats`]: text or JSON, or the
//! process's `--log-format`). [`reopen`] (SIGUSR1) has the writer thread
//! write out what is waiting to the open file, then open the path again:
//! after a rotation (`mv access.log access.log.1; kill -USR1`), new lines
//! land in a fresh file at the path and none is lost.
//!
//! Must not touch: filtering (`RUST_LOG`), whether a request is logged
//! (`access_log.enabled`, read by the data plane from its snapshot).

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tracing_subscriber::fmt::MakeWriter;

use hopgate_core::config::{AccessLogConfig, AccessLogFormat};
use hopgate_proxy::metrics::METRICS;

/// The target of the access log lines.
const ACCESS_TARGET: &str = "hopgate::access";
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
            METRICS.access_log_dropped.fetch_add(1, Ordering::Relaxed);
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

/// Starts the writer thread (once) and returns the writer for the fmt
/// subscriber, with the guard that flushes at exit.
pub(crate) fn start() -> (LogWriter, Flusher) {
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

/// The access lines' format: 0 the process's `--log-format`, 1 text,
/// 2 JSON.
static ACCESS_FORMAT: AtomicU8 = AtomicU8::new(0);

/// Applies a config's `access_log` format and path. An error (the file
/// cannot be opened) leaves the destination as it was.
pub(crate) fn configure(cfg: &AccessLogConfig) -> io::Result<()> {
    ACCESS_FORMAT.store(
        match cfg.format {
            None => 0,
            Some(AccessLogFormat::Text) => 1,
            Some(AccessLogFormat::Json) => 2,
        },
        Ordering::Relaxed,
    );
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

/// The fmt subscriber's event format: the process's (`--log-format`) for
/// event lines; for access lines the one `access_log.format` chooses,
/// without ANSI colours (they may go to a file).
pub(crate) struct Formats {
    json_default: bool,
    text: TextFormat,
    json: tracing_subscriber::fmt::format::Format<tracing_subscriber::fmt::format::Json>,
}

impl Formats {
    pub(crate) fn new(json_default: bool) -> Formats {
        Formats {
            json_default,
            text: TextFormat::default(),
            json: tracing_subscriber::fmt::format().json().flatten_event(true),
        }
    }
}

thread_local! {
    /// An access line formatted without colours when the writer has them.
    static PLAIN: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Formats
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if event.metadata().target() != ACCESS_TARGET {
            return if self.json_default {
                self.json.format_event(ctx, writer, event)
            } else {
                self.text.format_event(ctx, writer, event)
            };
        }
        let json = match ACCESS_FORMAT.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => self.json_default,
        };
        if !writer.has_ansi_escapes() {
            return if json {
                self.json.format_event(ctx, writer, event)
            } else {
                self.text.format_event(ctx, writer, event)
            };
        }
        let plain = PLAIN.with(|cell| {
            let Ok(mut line) = cell.try_borrow_mut() else {
                return None;
            };
            line.clear();
            let w = tracing_subscriber::fmt::format::Writer::new(&mut *line);
            let r = if json {
                self.json.format_event(ctx, w, event)
            } else {
                self.text.format_event(ctx, w, event)
            };
            Some(r.and_then(|()| writer.write_str(&line)))
        });
        plain.unwrap_or_else(|| self.text.format_event(ctx, writer, event))
    }
}

/// One line from the fmt subscriber (it writes each formatted line with
/// one `write_all`).
pub(crate) enum Sink {
    /// An access line: into the buffer.
    Access,
    /// Any other line: the waiting access lines, then this one, to stderr.
    Event,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Access => shared().push(buf),
            Sink::Event => shared().write_out(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = Sink;

    fn make_writer(&'a self) -> Sink {
        Sink::Event
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Sink {
        if meta.target() == ACCESS_TARGET {
            Sink::Access
        } else {
            Sink::Event
        }
    }
}

/// The text event format: the default one (`Format<Full, SystemTime>`,
/// the same for every line), with a fast path for access lines that writes
/// the very same bytes without the default formatter's per-field styling
/// machinery (two ANSI "paints" and a `write!` per field, most of the
/// ~19 k instructions an access line cost). Anything the fast path does
/// not know for certain it would write identically (ANSI colours, spans,
/// another value type, a character that needs escaping) goes to the
/// default formatter.
#[derive(Default)]
pub(crate) struct TextFormat {
    inner: tracing_subscriber::fmt::format::Format,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for TextFormat
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if event.metadata().target() == ACCESS_TARGET
            && !writer.has_ansi_escapes()
            && ctx.event_scope().is_none()
        {
            let done = FAST_LINE.with(|cell| {
                let Ok(mut line) = cell.try_borrow_mut() else {
                    return None;
                };
                line.clear();
                fast_text_line(&mut line, event).then(|| writer.write_str(&line))
            });
            if let Some(res) = done {
                return res;
            }
        }
        self.inner.format_event(ctx, writer, event)
    }
}

use std::fmt::Write as _;

thread_local! {
    /// The line the fast path builds, reused.
    static FAST_LINE: std::cell::RefCell<String> = std::cell::RefCell::new(String::with_capacity(512));
    /// `YYYY-MM-DDTHH:MM:SS.` of the last second a line was written in.
    static SECOND: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((u64::MAX, String::new())) };
}

/// The access line as the default text formatter writes it without ANSI
/// colours and without spans; false when it cannot be sure of that.
fn fast_text_line(out: &mut String, event: &tracing::Event<'_>) -> bool {
    let meta = event.metadata();
    if !push_timestamp(out) {
        return false;
    }
    out.push(' ');
    out.push_str(match *meta.level() {
        tracing::Level::TRACE => "TRACE",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::INFO => " INFO",
        tracing::Level::WARN => " WARN",
        tracing::Level::ERROR => "ERROR",
    });
    out.push(' ');
    out.push_str(meta.target());
    out.push_str(": ");
    let mut v = FastVisitor {
        out,
        first: true,
        ok: true,
    };
    event.record(&mut v);
    if !v.ok {
        return false;
    }
    out.push('\n');
    true
}

/// The default timer's `2026-11-30T21:55:00.123456Z`, with the part up to
/// the second computed once per second.
fn push_timestamp(out: &mut String) -> bool {
    let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) else {
        return false;
    };
    let secs = d.as_secs();
    let ok = SECOND.with(|cell| {
        let Ok(mut c) = cell.try_borrow_mut() else {
            return false;
        };
        if c.0 != secs {
            let Some(prefix) = second_prefix(secs) else {
                return false;
            };
            *c = (secs, prefix);
        }
        out.push_str(&c.1);
        true
    });
    if !ok {
        return false;
    }
    let micros = d.subsec_micros();
    let mut digits = [b'0'; 6];
    let mut m = micros;
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (m % 10) as u8;
        m /= 10;
    }
    out.push_str(std::str::from_utf8(&digits).unwrap_or("000000"));
    out.push('Z');
    true
}

/// `YYYY-MM-DDTHH:MM:SS.` (UTC) of a Unix second, years 0 to 9999 only.
fn second_prefix(secs: u64) -> Option<String> {
    let days = i64::try_from(secs / 86_400).ok()?;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let mut s = String::with_capacity(20);
    let _ = write!(
        s,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    Some(s)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The default formatter's field visitor, for the value types an access
/// line has: `name="str"`, `name=123`, `name=Display` and the message.
struct FastVisitor<'a> {
    out: &'a mut String,
    first: bool,
    ok: bool,
}

impl FastVisitor<'_> {
    /// The separator and `name=`; false (and not ok) for names the
    /// default formatter treats specially.
    fn name(&mut self, field: &tracing::field::Field) -> bool {
        let name = field.name();
        if !self.ok || name.starts_with("r#") || name.starts_with("log.") {
            self.ok = false;
            return false;
        }
        if !self.first {
            self.out.push(' ');
        }
        self.first = false;
        if name != "message" {
            self.out.push_str(name);
            self.out.push('=');
        }
        true
    }
}

/// No character that `Debug` or the ANSI sanitiser would escape.
fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

impl tracing::field::Visit for FastVisitor<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if !plain(value) {
            self.ok = false;
            return;
        }
        if self.name(field) {
            if field.name() == "message" {
                self.out.push_str(value);
            } else {
                self.out.push('"');
                self.out.push_str(value);
                self.out.push('"');
            }
        }
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if self.name(field) {
            let mut buf = [0u8; 20];
            let mut i = buf.len();
            let mut v = value;
            loop {
                i -= 1;
                buf[i] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            }
            self.out
                .push_str(std::str::from_utf8(&buf[i..]).unwrap_or("0"));
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if self.name(field) {
            let start = self.out.len();
            // `%value` (Display) and the message arrive here; the default
            // formatter writes them with `{:?}` too.
            if write!(self.out, "{value:?}").is_err() {
                self.ok = false;
                return;
            }
            // A control character would be escaped in a message by the
            // default formatter: leave such a line to it.
            if self.out.as_bytes()[start..]
                .iter()
                .any(|b| *b < 0x20 || *b == 0x7f)
            {
                self.ok = false;
            }
        }
    }

    fn record_i64(&mut self, _: &tracing::field::Field, _: i64) {
        self.ok = false;
    }

    fn record_f64(&mut self, _: &tracing::field::Field, _: f64) {
        self.ok = false;
    }

    fn record_bool(&mut self, _: &tracing::field::Field, _: bool) {
        self.ok = false;
    }

    fn record_error(&mut self, _: &tracing::field::Field, _: &(dyn std::error::Error + 'static)) {
        self.ok = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn dates_from_day_counts() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(951_782_400 / 86_400), (2000, 2, 29));
        assert_eq!(civil_from_days(4_102_444_800 / 86_400), (2100, 1, 1));
        assert_eq!(civil_from_days(1_795_996_800 / 86_400), (2026, 11, 30));
        assert_eq!(
            second_prefix(1_796_074_500).as_deref(),
            Some("2026-11-30T21:35:00.")
        );
    }

    /// Lines written by a fmt subscriber with `format`, `ansi` on or off.
    fn lines_with<E>(format: E, emit: impl Fn()) -> String
    where
        E: for<'w> tracing_subscriber::fmt::FormatEvent<
                tracing_subscriber::Registry,
                tracing_subscriber::fmt::format::DefaultFields,
            > + Send
            + Sync
            + 'static,
    {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .event_format(format)
            .with_writer(move || SharedBuf(sink.clone()))
            .finish();
        tracing::subscriber::with_default(sub, emit);
        let text = String::from_utf8(lock(&buf).clone()).unwrap();
        text
    }

    struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl Write for SharedBuf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// The line without its timestamp (the two runs differ in time only).
    fn untimed(text: &str) -> Vec<String> {
        text.lines()
            .map(|l| l.split_once(' ').map_or(l, |(_, rest)| rest).to_owned())
            .collect()
    }

    fn emit_access_lines() {
        let peer: std::net::SocketAddr = "127.0.0.1:42120".parse().unwrap();
        let listener: Arc<str> = Arc::from("public");
        for (id, rule, error) in [
            ("bced105b0b0786900000000000000005", "default", "-"),
            ("caller.id:7_x-y", "-", "connect_failed"),
            // needs escaping: the default formatter's own line
            ("with \"quote\"", "r\u{1b}[31m", "-"),
        ] {
            tracing::info!(
                target: "hopgate::access",
                listener = %listener,
                peer = %peer,
                method = %"GET",
                request_id = id,
                rule,
                service = "app",
                node = "app-2",
                retries = 1usize.saturating_sub(1),
                hops = u8::from(true),
                status = 200u16,
                error,
                latency_us = 1644u64,
                "access"
            );
        }
        tracing::warn!(target: "hopgate::gateway", n = 3, "not an access line");
    }

    #[test]
    fn the_fast_access_line_is_byte_for_byte_the_default_formatters() {
        let default = lines_with(
            tracing_subscriber::fmt::format::Format::default(),
            emit_access_lines,
        );
        let fast = lines_with(TextFormat::default(), emit_access_lines);
        assert_eq!(untimed(&fast), untimed(&default));
        assert_eq!(fast.lines().count(), 4, "{fast}");
        assert!(
            untimed(&fast)[0].starts_with(
                " INFO hopgate::access: access listener=public peer=127.0.0.1:42120 method=GET \
                 request_id=\"bced105b0b0786900000000000000005\" rule=\"default\""
            ),
            "{fast}"
        );
        // The timestamps have the same shape: 2026-11-30T21:35:00.123456Z
        for (a, b) in fast.lines().zip(default.lines()) {
            let (ta, tb) = (a.split(' ').next().unwrap(), b.split(' ').next().unwrap());
            assert_eq!(ta.len(), tb.len(), "{ta} / {tb}");
            assert_eq!(&ta[..13], &tb[..13], "{ta} / {tb}");
        }
    }

    #[test]
    fn the_cached_second_matches_the_default_timer() {
        use tracing_subscriber::fmt::time::FormatTime;
        for _ in 0..10 {
            let mut ours = String::new();
            assert!(push_timestamp(&mut ours));
            let mut theirs = String::new();
            tracing_subscriber::fmt::time::SystemTime
                .format_time(&mut tracing_subscriber::fmt::format::Writer::new(
                    &mut theirs,
                ))
                .unwrap();
            // Equal up to the second unless a second boundary fell between.
            if ours[..20] == theirs[..20] {
                assert_eq!(ours.len(), theirs.len());
                return;
            }
        }
        panic!("the timestamps never agreed to the second");
    }
}
