//! The access line: formatted on the request path straight into bytes and
//! handed to the process's log writer.
//!
//! Owns the line's two formats and their field order ([`Line`], [`write`],
//! one walk over the fields for both, [`write_line`]):
//! text, the `tracing` fmt subscriber's layout
//! (`<time>  INFO hopgate::access: access name=value ...`, strings quoted
//! and escaped like `{:?}` does), and JSON, one object per line in the
//! layout of its flattened JSON formatter (`timestamp`, `level`, `message`,
//! the fields, `target`). Going through `tracing`'s event dispatch cost
//! about as much as the formatting itself, so the line skips it: one
//! straight pass over the fields into a reused buffer, one call of the sink
//! the binary registered ([`set_sink`]: its buffered writer). Whether a
//! line is made at all is decided before, by the snapshot's
//! `access_log.enabled` and the `tracing` filter of the target
//! `hopgate::access` (`RUST_LOG`).
//!
//! What keeps a line cheap (~1 k instructions; it was ~4.5 k with a loop
//! over the fields and a per-character escape check): the constant parts
//! between values are merged into one copy each; the date and time up to
//! the second are formatted once per second, the microseconds from a table
//! of digit pairs; integers go through `itoa`; the escape check looks at
//! eight bytes at a time ([`plain`]); values the gateway makes itself (the
//! protocol, the request id, the upstream address, the error label, the
//! trace id) are not checked at all. No allocation per line: the buffer
//! and the cached second live in a thread-local.
//!
//! Must not touch: where the bytes go (the sink's), the request.

use std::cell::RefCell;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

static SINK: OnceLock<fn(&[u8])> = OnceLock::new();
static JSON: AtomicBool = AtomicBool::new(false);

/// Registers where access lines go (once per process; later calls are
/// ignored). Without a sink no line is made.
pub fn set_sink(sink: fn(&[u8])) {
    let _ = SINK.set(sink);
}

/// Whether access lines are made at all: a sink is registered and the
/// `tracing` filter lets the target through at INFO. The filter is fixed
/// when the process sets up its subscriber, before it serves a request, so
/// it is asked once (asking costs ~100 instructions a time).
pub(crate) fn wanted() -> bool {
    const UNKNOWN: u8 = 0;
    const ON: u8 = 1;
    const OFF: u8 = 2;
    static FILTER: AtomicU8 = AtomicU8::new(UNKNOWN);
    if SINK.get().is_none() {
        return false;
    }
    match FILTER.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = tracing::enabled!(target: "hopgate::access", tracing::Level::INFO);
            FILTER.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// JSON (true) or text lines from now on.
pub fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// One access line's fields, in the order they are written.
///
/// Fields marked *made by the gateway* are written without an escape
/// check: they must hold only printable ASCII other than `"` and `\`
/// (checked in debug builds).
pub(crate) struct Line<'a> {
    pub listener: &'a str,
    /// Made by the gateway (a socket address).
    pub peer: &'a str,
    /// A token (`http::Method` allows nothing else).
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    /// The path sent upstream, when a route filter rewrote it.
    pub upstream_path: Option<&'a str>,
    /// Made by the gateway.
    pub protocol: &'a str,
    /// Made by the gateway, or a client's id it checked (letters, digits,
    /// `.`, `_`, `:`, `-`).
    pub request_id: &'a str,
    pub rule: &'a str,
    pub service: &'a str,
    pub node: &'a str,
    /// Made by the gateway (a socket address).
    pub upstream: &'a str,
    pub retries: u64,
    pub hops: u64,
    pub status: u64,
    /// Made by the gateway (an error label or `-`).
    pub error: &'a str,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub user_agent: &'a str,
    /// Made by the gateway (hex digits or `-`).
    pub trace_id: &'a str,
    pub latency_us: u64,
}

/// The thread's reused buffer and its cached second.
struct Scratch {
    line: Vec<u8>,
    clock: Clock,
}

/// `YYYY-MM-DDTHH:MM:SS.` of the last second a line was written in.
struct Clock {
    second: u64,
    prefix: [u8; 20],
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            line: Vec::new(),
            clock: Clock { second: u64::MAX, prefix: [b'0'; 20] },
        })
    };
}

/// Formats `line` and hands it to the sink (nothing without one).
pub(crate) fn write(line: &Line<'_>) {
    let Some(sink) = SINK.get() else { return };
    let json = JSON.load(Ordering::Relaxed);
    SCRATCH.with(|cell| {
        // Re-entered only if the sink logged an access line itself.
        let Ok(mut s) = cell.try_borrow_mut() else {
            return;
        };
        let Scratch { line: out, clock } = &mut *s;
        out.clear();
        if json {
            write_line::<Json>(out, clock, line);
        } else {
            write_line::<Text>(out, clock, line);
        }
        sink(out);
    });
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// Whether the eight bytes of `w` are all printable ASCII other than `"`
/// and `\` (the bit tricks of "Bit Twiddling Hacks": a byte below `n`,
/// a zero byte after an XOR; each is exact about whether any byte hits).
fn word_plain(w: u64) -> bool {
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v;
    let quote = zero(w ^ (ONES * u64::from(b'"')));
    let backslash = zero(w ^ (ONES * u64::from(b'\\')));
    let del = zero(w ^ (ONES * 0x7f));
    ((below_space | quote | backslash | del) & HIGH) | (w & HIGH) == 0
}

/// Bytes [`plain`] accepts.
const PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        t[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    t
};

/// No character `{:?}` would escape (and none JSON would): eight bytes at
/// a time (the last word overlapping the one before it), a string shorter
/// than eight bytes by a table.
fn plain(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(last) = b.len().checked_sub(8) else {
        return b.iter().all(|&c| PLAIN[usize::from(c)]);
    };
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        word_plain(u64::from_le_bytes(w))
    };
    (0..last).step_by(8).all(word) && word(last)
}

/// A value the gateway made itself, written as it is.
fn trusted(s: &str) -> &[u8] {
    debug_assert!(plain(s), "{s:?}");
    s.as_bytes()
}

fn push_u64(out: &mut Vec<u8>, v: u64) {
    if v < 10 {
        out.push(b'0' + v as u8);
    } else {
        out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
}

/// One of the line's two formats: the constant parts between its values
/// and how a string from the client or the config is written. The line's
/// one walk over the fields, [`write_line`], is generic over it, so each
/// format gets its own straight-line copy with its parts as constants.
trait Format {
    const GAPS: Gaps;
    /// The listener's name.
    fn push_listener(out: &mut Vec<u8>, s: &str);
    /// A string value between the quotes `out` already ends with and the
    /// ones the next part starts with, escaped when it must be.
    fn push_str(out: &mut Vec<u8>, s: &str);
}

/// Defines [`Gaps`] and the text and JSON ones from one table: a part's
/// name, then its text and JSON bytes.
macro_rules! gaps {
    ($($part:ident: $text:literal, $json:literal;)*) => {
        /// The constant parts of a line, each written with one copy:
        /// `open` before the timestamp, `end` after the last value, each
        /// other one before its field's value.
        struct Gaps {
            $($part: &'static [u8],)*
        }
        const TEXT_GAPS: Gaps = Gaps { $($part: $text,)* };
        const JSON_GAPS: Gaps = Gaps { $($part: $json,)* };
    };
}

gaps! {
    open:       b"",                 b"{\"timestamp\":\"";
    listener:   b"  INFO hopgate::access: access listener=",
                b"\",\"level\":\"INFO\",\"message\":\"access\",\"listener\":\"";
    peer:       b" peer=",           b"\",\"peer\":\"";
    method:     b" method=",         b"\",\"method\":\"";
    host:       b" host=\"",         b"\",\"host\":\"";
    path:       b"\" path=\"",       b"\",\"path\":\"";
    upstream_path: b"\" upstream_path=\"", b"\",\"upstream_path\":\"";
    protocol:   b"\" protocol=\"",   b"\",\"protocol\":\"";
    request_id: b"\" request_id=\"", b"\",\"request_id\":\"";
    rule:       b"\" rule=\"",       b"\",\"rule\":\"";
    service:    b"\" service=\"",    b"\",\"service\":\"";
    node:       b"\" node=\"",       b"\",\"node\":\"";
    upstream:   b"\" upstream=\"",   b"\",\"upstream\":\"";
    retries:    b"\" retries=",      b"\",\"retries\":";
    hops:       b" hops=",           b",\"hops\":";
    status:     b" status=",         b",\"status\":";
    error:      b" error=\"",        b",\"error\":\"";
    bytes_in:   b" bytes_in=",       b",\"bytes_in\":";
    bytes_out:  b" bytes_out=",      b",\"bytes_out\":";
    user_agent: b" user_agent=\"",   b",\"user_agent\":\"";
    trace_id:   b"\" trace_id=\"",   b"\",\"trace_id\":\"";
    latency_us: b"\" latency_us=",   b"\",\"latency_us\":";
    end:        b"\n",               b",\"target\":\"hopgate::access\"}\n";
}

/// The `tracing` fmt subscriber's layout: strings quoted and escaped like
/// `{:?}`, the listener bare.
struct Text;

impl Format for Text {
    const GAPS: Gaps = TEXT_GAPS;

    #[inline(always)]
    fn push_listener(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(s.as_bytes());
    }

    #[inline(always)]
    fn push_str(out: &mut Vec<u8>, s: &str) {
        if plain(s) {
            out.extend_from_slice(s.as_bytes());
        } else {
            // `{:?}` writes its own quotes: replace the opening one, drop
            // its closing one.
            out.pop();
            let _ = write!(out, "{s:?}");
            out.pop();
        }
    }
}

/// One JSON object: quotes, backslashes and control characters escaped.
struct Json;

impl Format for Json {
    const GAPS: Gaps = JSON_GAPS;

    #[inline(always)]
    fn push_listener(out: &mut Vec<u8>, s: &str) {
        Json::push_str(out, s);
    }

    #[inline(always)]
    fn push_str(out: &mut Vec<u8>, s: &str) {
        if plain(s) {
            out.extend_from_slice(s.as_bytes());
            return;
        }
        for c in s.chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                '\n' => out.extend_from_slice(b"\\n"),
                '\r' => out.extend_from_slice(b"\\r"),
                '\t' => out.extend_from_slice(b"\\t"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
    }
}

/// The line in format `F`: its parts and values in field order.
fn write_line<F: Format>(out: &mut Vec<u8>, clock: &mut Clock, l: &Line<'_>) {
    let g = &F::GAPS;
    out.extend_from_slice(g.open);
    push_timestamp(out, clock);
    out.extend_from_slice(g.listener);
    F::push_listener(out, l.listener);
    out.extend_from_slice(g.peer);
    out.extend_from_slice(trusted(l.peer));
    out.extend_from_slice(g.method);
    out.extend_from_slice(trusted(l.method));
    out.extend_from_slice(g.host);
    F::push_str(out, l.host);
    out.extend_from_slice(g.path);
    F::push_str(out, l.path);
    if let Some(p) = l.upstream_path {
        out.extend_from_slice(g.upstream_path);
        F::push_str(out, p);
    }
    out.extend_from_slice(g.protocol);
    out.extend_from_slice(trusted(l.protocol));
    out.extend_from_slice(g.request_id);
    out.extend_from_slice(trusted(l.request_id));
    out.extend_from_slice(g.rule);
    F::push_str(out, l.rule);
    out.extend_from_slice(g.service);
    F::push_str(out, l.service);
    out.extend_from_slice(g.node);
    F::push_str(out, l.node);
    out.extend_from_slice(g.upstream);
    out.extend_from_slice(trusted(l.upstream));
    out.extend_from_slice(g.retries);
    push_u64(out, l.retries);
    out.extend_from_slice(g.hops);
    push_u64(out, l.hops);
    out.extend_from_slice(g.status);
    push_u64(out, l.status);
    out.extend_from_slice(g.error);
    out.extend_from_slice(trusted(l.error));
    out.push(b'"');
    if let Some(n) = l.bytes_in {
        out.extend_from_slice(g.bytes_in);
        push_u64(out, n);
    }
    if let Some(n) = l.bytes_out {
        out.extend_from_slice(g.bytes_out);
        push_u64(out, n);
    }
    out.extend_from_slice(g.user_agent);
    F::push_str(out, l.user_agent);
    out.extend_from_slice(g.trace_id);
    out.extend_from_slice(trusted(l.trace_id));
    out.extend_from_slice(g.latency_us);
    push_u64(out, l.latency_us);
    out.extend_from_slice(g.end);
}

/// `00`, `01`, … `99`.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// The two digits of `n % 100`.
fn pair(n: u64) -> [u8; 2] {
    let i = (n % 100) as usize * 2;
    [PAIRS[i], PAIRS[i + 1]]
}

/// `2026-11-30T21:55:00.123456Z` (UTC), the part up to the second
/// formatted once per second.
fn push_timestamp(out: &mut Vec<u8>, clock: &mut Clock) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    if clock.second != secs {
        clock.second = secs;
        clock.prefix = second_prefix(secs);
    }
    out.extend_from_slice(&clock.prefix);
    let m = u64::from(d.subsec_micros());
    let (a, b, c) = (pair(m / 10_000), pair(m / 100), pair(m));
    out.extend_from_slice(&[a[0], a[1], b[0], b[1], c[0], c[1], b'Z']);
}

/// `YYYY-MM-DDTHH:MM:SS.` (UTC) of a Unix second.
fn second_prefix(secs: u64) -> [u8; 20] {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let y = y.clamp(0, 9999) as u64;
    let (c, yy, m, d) = (pair(y / 100), pair(y), pair(m.into()), pair(d.into()));
    let (h, min, s) = (pair(rem / 3600), pair(rem / 60 % 60), pair(rem % 60));
    [
        c[0], c[1], yy[0], yy[1], b'-', m[0], m[1], b'-', d[0], d[1], b'T', h[0], h[1], b':',
        min[0], min[1], b':', s[0], s[1], b'.',
    ]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(user_agent: &'a str, bytes_out: Option<u64>) -> Line<'a> {
        Line {
            listener: "public",
            peer: "127.0.0.1:42120",
            method: "GET",
            host: "shop.example",
            path: "/cart",
            upstream_path: None,
            protocol: "HTTP/1.1",
            request_id: "bced105b0b0786900000000000000005",
            rule: "default",
            service: "app",
            node: "app-2",
            upstream: "10.0.0.12:8080",
            retries: 0,
            hops: 1,
            status: 200,
            error: "-",
            bytes_in: Some(0),
            bytes_out,
            user_agent,
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
            latency_us: 1644,
        }
    }

    fn text(line: &Line<'_>) -> String {
        let mut out = Vec::new();
        let mut clock = Clock {
            second: u64::MAX,
            prefix: [0; 20],
        };
        write_line::<Text>(&mut out, &mut clock, line);
        String::from_utf8(out).unwrap()
    }

    fn json(line: &Line<'_>) -> String {
        let mut out = Vec::new();
        let mut clock = Clock {
            second: u64::MAX,
            prefix: [0; 20],
        };
        write_line::<Json>(&mut out, &mut clock, line);
        String::from_utf8(out).unwrap()
    }

    /// The line without its timestamp.
    fn untimed(s: &str) -> &str {
        s.split_once(' ').map_or(s, |(_, rest)| rest)
    }

    #[test]
    fn dates_from_day_counts() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(951_782_400 / 86_400), (2000, 2, 29));
        assert_eq!(civil_from_days(4_102_444_800 / 86_400), (2100, 1, 1));
        assert_eq!(&second_prefix(1_796_074_500), b"2026-11-30T21:35:00.");
        assert_eq!(&second_prefix(0), b"1970-01-01T00:00:00.");
        assert_eq!(&second_prefix(951_868_799), b"2000-02-29T23:59:59.");
    }

    #[test]
    fn the_text_line() {
        let out = text(&sample("curl/7.88.1", Some(683)));
        assert_eq!(
            untimed(&out),
            " INFO hopgate::access: access listener=public peer=127.0.0.1:42120 method=GET \
             host=\"shop.example\" path=\"/cart\" protocol=\"HTTP/1.1\" \
             request_id=\"bced105b0b0786900000000000000005\" rule=\"default\" service=\"app\" \
             node=\"app-2\" upstream=\"10.0.0.12:8080\" retries=0 hops=1 status=200 error=\"-\" \
             bytes_in=0 bytes_out=683 user_agent=\"curl/7.88.1\" \
             trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\" latency_us=1644\n"
        );
        let ts = out.split(' ').next().unwrap();
        assert_eq!(ts.len(), 27, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
        // Escaped like `{:?}`; an unknown length is left out.
        let out = text(&sample("a \"b\"\\\u{1b}[31m\n", None));
        assert!(
            out.contains(" user_agent=\"a \\\"b\\\"\\\\\\u{1b}[31m\\n\" "),
            "{out}"
        );
        assert!(!out.contains("bytes_out"), "{out}");
        assert_eq!(out.matches('\n').count(), 1);
    }

    #[test]
    fn the_json_line_is_one_object_with_every_field() {
        let out = json(&sample("a \"b\"\\\u{1}\n\té", Some(683)));
        assert!(
            out.ends_with("}\n") && out.matches('\n').count() == 1,
            "{out}"
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["user_agent"], "a \"b\"\\\u{1}\n\té");
        assert_eq!(v["bytes_out"], 683);
        assert_eq!(v["message"], "access");
        assert_eq!(v["target"], "hopgate::access");
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 24, "{keys:?}");
        assert!(out.starts_with("{\"timestamp\":\"2"), "{out}");
        assert!(out.contains(
            "\"level\":\"INFO\",\"message\":\"access\",\"listener\":\"public\",\"peer\":\"127.0.0.1:42120\",\"method\":\"GET\",\"host\":\"shop.example\""
        ));
    }

    /// The slow reference: a character at a time.
    fn plain_reference(s: &str) -> bool {
        s.bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    }

    /// Strings around every lane of the eight-byte check: each byte value
    /// at each position of strings up to 19 bytes long.
    fn edge_strings() -> Vec<String> {
        let mut all = Vec::new();
        for len in 1..20 {
            for at in 0..len {
                for b in 0u8..=255 {
                    let mut v = vec![b'a'; len];
                    v[at] = b;
                    all.push(String::from_utf8_lossy(&v).into_owned());
                }
            }
        }
        for c in ['é', '\u{7f}', '\u{85}', '\u{200b}', '\u{301}', '€', '😀'] {
            all.push(format!("abcdefg{c}hij"));
            all.push(format!("{c}"));
        }
        all
    }

    #[test]
    fn the_word_check_agrees_with_the_byte_check() {
        for s in edge_strings() {
            assert_eq!(plain(&s), plain_reference(&s), "{s:?}");
        }
        assert!(plain(""));
        assert!(plain(
            "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 ~!@#$%^&*()'`"
        ));
    }

    #[test]
    fn text_values_are_escaped_like_debug_and_json_values_round_trip() {
        for s in edge_strings() {
            let line = sample(&s, Some(1));
            let t = text(&line);
            assert!(
                t.contains(&format!(" user_agent={s:?} trace_id=")),
                "{s:?}: {t}"
            );
            assert_eq!(t.matches('\n').count(), 1, "{s:?}: {t}");
            let j = json(&line);
            assert_eq!(j.matches('\n').count(), 1, "{s:?}: {j}");
            let v: serde_json::Value = serde_json::from_str(&j).unwrap();
            assert_eq!(v["user_agent"], s.as_str(), "{j}");
        }
    }

    #[test]
    fn every_client_field_is_escaped() {
        let mut line = sample("ua", None);
        line.host = "h\"ost";
        line.path = "/a\\b\u{0}";
        line.rule = "r\n";
        line.service = "s\t";
        line.node = "n\u{1b}";
        let t = text(&line);
        for (name, v) in [
            ("host", line.host),
            ("path", line.path),
            ("rule", line.rule),
            ("service", line.service),
            ("node", line.node),
        ] {
            assert!(t.contains(&format!(" {name}={v:?} ")), "{name}: {t}");
        }
        line.listener = "l\"1";
        let v: serde_json::Value = serde_json::from_str(&json(&line)).unwrap();
        for (name, want) in [
            ("listener", "l\"1"),
            ("host", "h\"ost"),
            ("path", "/a\\b\u{0}"),
            ("rule", "r\n"),
            ("service", "s\t"),
            ("node", "n\u{1b}"),
        ] {
            assert_eq!(v[name], want, "{name}");
        }
    }

    #[test]
    fn very_long_values_are_written_whole() {
        let long = "/x".repeat(20_000) + "\"";
        let mut line = sample(&long, Some(u64::MAX));
        line.path = &long[..40_000];
        line.latency_us = 1_234_567_890;
        let t = text(&line);
        assert!(t.contains(&format!(" path=\"{}\" ", &long[..40_000])));
        assert!(t.contains(&format!(" user_agent={long:?} ")));
        assert!(
            t.contains(" bytes_out=18446744073709551615 "),
            "{}",
            &t[t.len() - 200..]
        );
        assert!(t.ends_with(" latency_us=1234567890\n"));
        let v: serde_json::Value = serde_json::from_str(&json(&line)).unwrap();
        assert_eq!(v["user_agent"], long.as_str());
        assert_eq!(v["bytes_out"], u64::MAX);
        assert_eq!(v["latency_us"], 1_234_567_890u64);
    }

    #[test]
    fn numbers_and_the_time_of_day() {
        for n in [0, 7, 9, 10, 99, 100, 999, 1000, 65_535, 1_000_000] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
        let mut clock = Clock {
            second: u64::MAX,
            prefix: [0; 20],
        };
        let mut out = Vec::new();
        push_timestamp(&mut out, &mut clock);
        let ts = String::from_utf8(out).unwrap();
        assert_eq!(ts.len(), 27, "{ts}");
        assert!(ts.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'.',
            26 => b == b'Z',
            _ => b.is_ascii_digit(),
        }));
        assert_eq!(&ts.as_bytes()[..20], &clock.prefix);
    }
}
