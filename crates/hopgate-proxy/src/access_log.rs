//! The access line: formatted on the request path straight into bytes and
//! handed to the process's log writer.
//!
//! Owns the line's two formats and their field order ([`Line`], [`write`]):
//! text, the `tracing` fmt subscriber's layout
//! (`<time>  INFO hopgate::access: access name=value ...`, strings quoted
//! and escaped like `{:?}` does), and JSON, one object per line in the
//! layout of its flattened JSON formatter (`timestamp`, `level`, `message`,
//! the fields, `target`). Going through `tracing`'s event dispatch cost
//! about as much as the formatting itself (the value set, the filter, the
//! per-field visitor: ~7 k instructions per line with twenty fields), so
//! the line skips it: one pass over the fields into a reused buffer, one
//! call of the sink the binary registered ([`set_sink`]: its buffered
//! writer). Whether a line is made at all is decided before, by the
//! snapshot's `access_log.enabled` and the `tracing` filter of the target
//! `hopgate::access` (`RUST_LOG`).
//!
//! Must not touch: where the bytes go (the sink's), the request.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The target the access log is filtered by.
pub const TARGET: &str = "hopgate::access";

static SINK: OnceLock<fn(&[u8])> = OnceLock::new();
static JSON: AtomicBool = AtomicBool::new(false);

/// Registers where access lines go (once per process; later calls are
/// ignored). Without a sink no line is made.
pub fn set_sink(sink: fn(&[u8])) {
    let _ = SINK.set(sink);
}

/// Whether a sink is registered.
pub fn has_sink() -> bool {
    SINK.get().is_some()
}

/// JSON (true) or text lines from now on.
pub fn set_json(json: bool) {
    JSON.store(json, Ordering::Relaxed);
}

/// One access line's fields, in the order they are written.
pub struct Line<'a> {
    pub listener: &'a str,
    pub peer: &'a str,
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub protocol: &'a str,
    pub request_id: &'a str,
    pub rule: &'a str,
    pub service: &'a str,
    pub node: &'a str,
    pub upstream: &'a str,
    pub retries: u64,
    pub hops: u64,
    pub status: u64,
    pub error: &'a str,
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    pub user_agent: &'a str,
    pub trace_id: &'a str,
    pub latency_us: u64,
}

/// A field's value.
enum V<'a> {
    /// Written as it is in text (a `Display` field of the old layout:
    /// listener, peer, method), quoted in JSON.
    Bare(&'a str),
    Str(&'a str),
    Num(u64),
}

impl Line<'_> {
    fn fields(&self) -> [(&'static str, Option<V<'_>>); 20] {
        [
            ("listener", Some(V::Bare(self.listener))),
            ("peer", Some(V::Bare(self.peer))),
            ("method", Some(V::Bare(self.method))),
            ("host", Some(V::Str(self.host))),
            ("path", Some(V::Str(self.path))),
            ("protocol", Some(V::Str(self.protocol))),
            ("request_id", Some(V::Str(self.request_id))),
            ("rule", Some(V::Str(self.rule))),
            ("service", Some(V::Str(self.service))),
            ("node", Some(V::Str(self.node))),
            ("upstream", Some(V::Str(self.upstream))),
            ("retries", Some(V::Num(self.retries))),
            ("hops", Some(V::Num(self.hops))),
            ("status", Some(V::Num(self.status))),
            ("error", Some(V::Str(self.error))),
            ("bytes_in", self.bytes_in.map(V::Num)),
            ("bytes_out", self.bytes_out.map(V::Num)),
            ("user_agent", Some(V::Str(self.user_agent))),
            ("trace_id", Some(V::Str(self.trace_id))),
            ("latency_us", Some(V::Num(self.latency_us))),
        ]
    }
}

thread_local! {
    /// The line being built, reused.
    static BUF: RefCell<String> = RefCell::new(String::with_capacity(512));
    /// `YYYY-MM-DDTHH:MM:SS.` of the last second a line was written in.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Formats `line` and hands it to the sink (nothing without one).
pub fn write(line: &Line<'_>) {
    let Some(sink) = SINK.get() else { return };
    let json = JSON.load(Ordering::Relaxed);
    BUF.with(|cell| {
        // Re-entered only if the sink logged an access line itself.
        let Ok(mut out) = cell.try_borrow_mut() else {
            return;
        };
        out.clear();
        if json {
            json_line(&mut out, line);
        } else {
            text_line(&mut out, line);
        }
        sink(out.as_bytes());
    });
}

/// No character `{:?}` would escape (and none JSON would).
fn plain(s: &str) -> bool {
    s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

fn push_u64(out: &mut String, v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut v = v;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or("0"));
}

fn text_line(out: &mut String, line: &Line<'_>) {
    push_timestamp(out);
    out.push_str("  INFO hopgate::access: access");
    for (name, value) in line.fields() {
        let Some(value) = value else { continue };
        out.push(' ');
        out.push_str(name);
        out.push('=');
        match value {
            V::Bare(s) => out.push_str(s),
            V::Str(s) if plain(s) => {
                out.push('"');
                out.push_str(s);
                out.push('"');
            }
            V::Str(s) => {
                let _ = write!(out, "{s:?}");
            }
            V::Num(n) => push_u64(out, n),
        }
    }
    out.push('\n');
}

/// A JSON string: quotes, backslashes and control characters escaped.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    if plain(s) {
        out.push_str(s);
    } else {
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

fn json_line(out: &mut String, line: &Line<'_>) {
    out.push_str("{\"timestamp\":\"");
    push_timestamp(out);
    out.push_str("\",\"level\":\"INFO\",\"message\":\"access\"");
    for (name, value) in line.fields() {
        let Some(value) = value else { continue };
        out.push_str(",\"");
        out.push_str(name);
        out.push_str("\":");
        match value {
            V::Bare(s) | V::Str(s) => push_json_str(out, s),
            V::Num(n) => push_u64(out, n),
        }
    }
    out.push_str(",\"target\":\"hopgate::access\"}\n");
}

/// `2026-11-30T21:55:00.123456Z` (UTC), the part up to the second
/// computed once per second.
fn push_timestamp(out: &mut String) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs();
    SECOND.with(|cell| match cell.try_borrow_mut() {
        Ok(mut c) => {
            if c.0 != secs {
                *c = (secs, second_prefix(secs));
            }
            out.push_str(&c.1);
        }
        Err(_) => out.push_str(&second_prefix(secs)),
    });
    let mut digits = [b'0'; 6];
    let mut m = d.subsec_micros();
    for slot in digits.iter_mut().rev() {
        *slot = b'0' + (m % 10) as u8;
        m /= 10;
    }
    out.push_str(std::str::from_utf8(&digits).unwrap_or("000000"));
    out.push('Z');
}

/// `YYYY-MM-DDTHH:MM:SS.` (UTC) of a Unix second.
fn second_prefix(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let mut s = String::with_capacity(24);
    let _ = write!(
        s,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    );
    s
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

    /// The line without its timestamp.
    fn untimed(s: &str) -> &str {
        s.split_once(' ').map_or(s, |(_, rest)| rest)
    }

    #[test]
    fn dates_from_day_counts() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(951_782_400 / 86_400), (2000, 2, 29));
        assert_eq!(civil_from_days(4_102_444_800 / 86_400), (2100, 1, 1));
        assert_eq!(second_prefix(1_796_074_500), "2026-11-30T21:35:00.");
    }

    #[test]
    fn the_text_line() {
        let mut out = String::new();
        text_line(&mut out, &sample("curl/7.88.1", Some(683)));
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
        out.clear();
        text_line(&mut out, &sample("a \"b\"\\\u{1b}[31m\n", None));
        assert!(
            out.contains(" user_agent=\"a \\\"b\\\"\\\\\\u{1b}[31m\\n\" "),
            "{out}"
        );
        assert!(!out.contains("bytes_out"), "{out}");
        assert_eq!(out.matches('\n').count(), 1);
    }

    #[test]
    fn the_json_line_is_one_object_with_every_field() {
        let mut out = String::new();
        json_line(&mut out, &sample("a \"b\"\\\u{1}\n\té", Some(683)));
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
}
