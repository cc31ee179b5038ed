//! W3C trace context (`traceparent`, `tracestate`) on the hop to the
//! backend.
//!
//! Owns [`propagate`]: a valid `traceparent` from the client is forwarded
//! with the same trace id and flags and a new parent id (the gateway's span
//! for the hop), `tracestate` left as it is; an absent or invalid one is
//! replaced by a new trace (random trace and parent ids, flags `00`: the
//! gateway records no spans) and any `tracestate` with it dropped, since it
//! belonged to no valid trace. The trace id is returned for the access log.
//! The only allocation is the header value written.
//!
//! Must not touch: any other header, span export (the gateway exports no
//! spans).

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// A trace id: 16 bytes, never all zero once set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceId(pub [u8; 16]);

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.hex(&mut [0u8; 32]))
    }
}

/// The fields of a valid `traceparent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub parent_id: [u8; 8],
    pub flags: u8,
}

fn unhex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// Lower-case hex digits only (the W3C grammar has no upper case).
fn parse_hex<const N: usize>(s: &[u8]) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *o = unhex(pair[0])? << 4 | unhex(pair[1])?;
    }
    Some(out)
}

fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
}

/// Parses a `traceparent` value: `version-traceid-parentid-flags`.
/// Version `00` is exactly 55 characters; a later version (not `ff`) may
/// carry more after a `-`, which is ignored (it is forwarded as `00`).
/// The trace and parent ids must not be all zeros.
pub fn parse(v: &[u8]) -> Option<Parent> {
    if v.len() < 55 {
        return None;
    }
    let version: [u8; 1] = parse_hex(&v[0..2])?;
    match version[0] {
        0xff => return None,
        0 if v.len() != 55 => return None,
        _ if v.len() > 55 && v[55] != b'-' => return None,
        _ => {}
    }
    if v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let trace_id: [u8; 16] = parse_hex(&v[3..35])?;
    let parent_id: [u8; 8] = parse_hex(&v[36..52])?;
    let flags: [u8; 1] = parse_hex(&v[53..55])?;
    if trace_id == [0; 16] || parent_id == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id,
        parent_id,
        flags: flags[0],
    })
}

/// `00-<trace>-<parent>-<flags>`.
fn render(trace_id: &[u8; 16], parent_id: &[u8; 8], flags: u8) -> HeaderValue {
    let mut buf = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex_into(trace_id, &mut buf[3..35]);
    hex_into(parent_id, &mut buf[36..52]);
    hex_into(&[flags], &mut buf[53..55]);
    HeaderValue::from_bytes(&buf).expect("hex digits and dashes are a valid header value")
}

/// Random bytes, never all zero.
fn nonzero<const N: usize>() -> [u8; N] {
    loop {
        let mut out = [0u8; N];
        for chunk in out.chunks_mut(8) {
            let r = fastrand::u64(..).to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
        if out != [0; N] {
            return out;
        }
    }
}

/// Sets the upstream request's `traceparent` (see the module doc) and
/// returns the trace id: one lookup of `traceparent`, and one of
/// `tracestate` when a new trace is started.
pub fn propagate(headers: &mut HeaderMap) -> TraceId {
    use http::header::Entry;
    let parent_id: [u8; 8] = nonzero();
    let (trace_id, started) = match headers.entry(&TRACEPARENT) {
        Entry::Occupied(mut e) => {
            let incoming = {
                let mut all = e.iter();
                match (all.next(), all.next()) {
                    // Exactly one: two `traceparent` lines are invalid.
                    (Some(v), None) => parse(v.as_bytes()),
                    _ => None,
                }
            };
            match incoming {
                Some(p) => {
                    e.insert(render(&p.trace_id, &parent_id, p.flags));
                    (p.trace_id, false)
                }
                None => {
                    let t: [u8; 16] = nonzero();
                    // Replaces every `traceparent` line.
                    e.insert(render(&t, &parent_id, 0));
                    (t, true)
                }
            }
        }
        Entry::Vacant(e) => {
            let t: [u8; 16] = nonzero();
            e.insert(render(&t, &parent_id, 0));
            (t, true)
        }
    };
    if started {
        headers.remove(&TRACESTATE);
    }
    TraceId(trace_id)
}

impl TraceId {
    /// The 32 hex digits, written into `buf`.
    pub fn hex<'a>(&self, buf: &'a mut [u8; 32]) -> &'a str {
        hex_into(&self.0, buf);
        std::str::from_utf8(buf).unwrap_or("-")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn valid_values_parse() {
        let p = parse(VALID.as_bytes()).unwrap();
        assert_eq!(
            TraceId(p.trace_id).to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(
            p.parent_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(p.flags, 1);
        // A later version may carry more fields.
        let future =
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds";
        assert!(parse(future.as_bytes()).is_some());
    }

    #[test]
    fn invalid_values_are_refused() {
        let bad = [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        ];
        for b in bad {
            assert_eq!(parse(b.as_bytes()), None, "{b}");
        }
    }

    #[test]
    fn a_valid_parent_keeps_its_trace_and_gets_a_new_parent_id() {
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(VALID));
        h.insert(&TRACESTATE, HeaderValue::from_static("congo=t61rcWkgMzE"));
        let id = propagate(&mut h);
        assert_eq!(id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let out = h.get(&TRACEPARENT).unwrap().to_str().unwrap().to_owned();
        let p = parse(out.as_bytes()).unwrap();
        assert_eq!(p.trace_id, parse(VALID.as_bytes()).unwrap().trace_id);
        assert_ne!(&out[36..52], "00f067aa0ba902b7");
        assert!(out.ends_with("-01"));
        assert_eq!(h.get(&TRACESTATE).unwrap(), "congo=t61rcWkgMzE");
    }

    #[test]
    fn an_absent_or_invalid_parent_starts_a_trace() {
        let mut h = HeaderMap::new();
        let a = propagate(&mut h);
        let out = h.get(&TRACEPARENT).unwrap().to_str().unwrap().to_owned();
        assert_eq!(parse(out.as_bytes()).unwrap().trace_id, a.0);
        assert!(out.starts_with("00-") && out.ends_with("-00"), "{out}");
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static("garbage"));
        h.insert(&TRACESTATE, HeaderValue::from_static("congo=t61rcWkgMzE"));
        let b = propagate(&mut h);
        assert_ne!(a, b);
        assert!(h.get(&TRACESTATE).is_none());
        assert_eq!(h.get_all(&TRACEPARENT).iter().count(), 1);
        // Two traceparent lines: invalid, replaced by one.
        let mut h = HeaderMap::new();
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        let c = propagate(&mut h);
        assert_ne!(c.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(h.get_all(&TRACEPARENT).iter().count(), 1);
    }
}
