//! W3C trace context (`traceparent`, `tracestate`) on the hop to the
//! backend.
//!
//! Owns [`propagate_beside`]: a valid `traceparent` from the client is forwarded
//! with the same trace id and flags and a new parent id (the gateway's span
//! for the hop), `tracestate` left as it is; an absent or invalid one is
//! replaced by a new trace (random trace and parent ids) and any
//! `tracestate` with it dropped, since it belonged to no valid trace. A new
//! trace's sampled flag is `00` unless span export is on and its
//! [`Sampler`] picks it. The trace id is returned for the access log, and
//! the ids and the sampled flag for span export ([`crate::otlp`]). The
//! value sent is a [`ParentLine`], written as it is: no allocation.
//!
//! Must not touch: any other header, span export itself (`otlp`).

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

/// `bytes` as lower-case hex digits into `out` (two per byte).
pub(crate) fn hex_into(bytes: &[u8], out: &mut [u8]) {
    // A byte at a time from a table of digit pairs (a digit at a time
    // takes twice the instructions: ids are written on every request).
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut t = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
            i += 1;
        }
        t
    };
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair.copy_from_slice(&PAIRS[usize::from(*b)]);
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

/// A `traceparent` value as it is sent: 55 bytes of lower-case hex digits
/// and dashes, written as they are (no header value is made for it, and
/// so no allocation and no check, unless an HTTP/2 send puts it into a
/// header map).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ParentLine([u8; 55]);

impl ParentLine {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Some line, for tests elsewhere.
    #[cfg(test)]
    pub(crate) fn for_test() -> ParentLine {
        render(&[1; 16], &[2; 8], 1)
    }

    pub(crate) fn to_value(self) -> HeaderValue {
        HeaderValue::from_bytes(&self.0).expect("hex digits and dashes are a valid header value")
    }
}

impl std::fmt::Debug for ParentLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// `00-<trace>-<parent>-<flags>`.
fn render(trace_id: &[u8; 16], parent_id: &[u8; 8], flags: u8) -> ParentLine {
    let mut buf = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex_into(trace_id, &mut buf[3..35]);
    hex_into(parent_id, &mut buf[36..52]);
    hex_into(&[flags], &mut buf[53..55]);
    ParentLine(buf)
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

/// Decides, from its id, whether a trace the gateway starts is recorded:
/// the id's last 8 bytes (random) read as a number, below a threshold.
/// The same trace id always gets the same answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampler {
    /// Sampled when the number is below this; `None`: always.
    below: Option<u64>,
}

impl Sampler {
    /// `ratio` from 0 (never) to 1 (always); out-of-range values are
    /// clamped (validation refuses them).
    pub fn new(ratio: f64) -> Sampler {
        if ratio >= 1.0 {
            return Sampler { below: None };
        }
        let ratio = if ratio.is_nan() { 0.0 } else { ratio.max(0.0) };
        // 2^64 × ratio; the cast saturates.
        Sampler {
            below: Some((ratio * 18_446_744_073_709_551_616.0) as u64),
        }
    }

    pub fn samples(&self, trace_id: &[u8; 16]) -> bool {
        let Some(below) = self.below else {
            return true;
        };
        let mut low = [0u8; 8];
        low.copy_from_slice(&trace_id[8..]);
        u64::from_be_bytes(low) < below
    }
}

/// What [`propagate`] decided, for the access log and span export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Propagated {
    pub trace_id: TraceId,
    /// The parent id sent to the backend: the gateway's span for the hop.
    pub span_id: [u8; 8],
    /// The client's span, when it sent a valid `traceparent`.
    pub parent: Option<[u8; 8]>,
    /// The flags sent on (bit 0: sampled).
    pub flags: u8,
}

impl Propagated {
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// Random span ids for the gateway's spans: never all zero.
pub fn new_span_id() -> [u8; 8] {
    nonzero()
}

/// [`propagate`] for a request whose `traceparent` goes beside its header
/// map ([`crate::headers::SetLines`]): `traceparent` and `tracestate` say
/// whether the client sent those headers (no lookup is made otherwise);
/// the client's `traceparent` lines are taken out of `headers` and the
/// value to send is returned with the decision.
pub(crate) fn propagate_beside(
    headers: &mut HeaderMap,
    traceparent: bool,
    tracestate: bool,
    sampler: Option<Sampler>,
) -> (Propagated, ParentLine) {
    let parent_id: [u8; 8] = nonzero();
    let incoming = if traceparent {
        let mut all = headers.get_all(&TRACEPARENT).iter();
        // Exactly one: two `traceparent` lines are invalid.
        let p = match (all.next(), all.next()) {
            (Some(v), None) => parse(v.as_bytes()),
            _ => None,
        };
        headers.remove(&TRACEPARENT);
        p
    } else {
        None
    };
    let (trace_id, parent, flags) = match incoming {
        Some(p) => (p.trace_id, Some(p.parent_id), p.flags),
        None => {
            let t: [u8; 16] = nonzero();
            let flags = u8::from(sampler.is_some_and(|s| s.samples(&t)));
            (t, None, flags)
        }
    };
    if parent.is_none() && tracestate {
        headers.remove(&TRACESTATE);
    }
    let value = render(&trace_id, &parent_id, flags);
    let decided = Propagated {
        trace_id: TraceId(trace_id),
        span_id: parent_id,
        parent,
        flags,
    };
    (decided, value)
}

/// The `traceparent` value for a trace's span.
pub(crate) fn parent_value(trace_id: &TraceId, parent_id: &[u8; 8], flags: u8) -> ParentLine {
    render(&trace_id.0, parent_id, flags)
}

/// Sets `traceparent` in `headers` (see the module doc) and returns what
/// it decided: [`propagate_beside`] with the two lookups it is spared on
/// the request path, the value put into the map. `sampler` is `Some` while
/// span export is on: it decides a new trace's sampled flag. The fuzz
/// target's way in (and the tests').
pub fn propagate(headers: &mut HeaderMap, sampler: Option<Sampler>) -> Propagated {
    let traceparent = headers.contains_key(&TRACEPARENT);
    let tracestate = headers.contains_key(&TRACESTATE);
    let (decided, value) = propagate_beside(headers, traceparent, tracestate, sampler);
    headers.insert(&TRACEPARENT, value.to_value());
    decided
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
    fn every_byte_in_lower_case_hex() {
        for b in 0..=255u8 {
            let mut out = [0u8; 2];
            hex_into(&[b], &mut out);
            assert_eq!(std::str::from_utf8(&out).unwrap(), format!("{b:02x}"));
        }
    }

    /// Ids of 1, 8, 9, 16 and 25 bytes: the same digits as each byte
    /// written alone, every byte value in every position.
    #[test]
    fn ids_in_lower_case_hex() {
        let mut ids: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b; 25]).collect();
        ids.push((0..25).collect());
        ids.push((0..25).map(|i| 255 - i * 10).collect());
        for _ in 0..1000 {
            ids.push((0..25).map(|_| fastrand::u8(..)).collect());
        }
        for id in &ids {
            for len in [1, 8, 9, 16, 25] {
                let mut out = vec![0u8; 2 * len];
                hex_into(&id[..len], &mut out);
                let want: String = id[..len].iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(std::str::from_utf8(&out).unwrap(), want);
            }
        }
    }

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
        let id = propagate(&mut h, None).trace_id;
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
        let a = propagate(&mut h, None).trace_id;
        let out = h.get(&TRACEPARENT).unwrap().to_str().unwrap().to_owned();
        assert_eq!(parse(out.as_bytes()).unwrap().trace_id, a.0);
        assert!(out.starts_with("00-") && out.ends_with("-00"), "{out}");
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static("garbage"));
        h.insert(&TRACESTATE, HeaderValue::from_static("congo=t61rcWkgMzE"));
        let b = propagate(&mut h, None).trace_id;
        assert_ne!(a, b);
        assert!(h.get(&TRACESTATE).is_none());
        assert_eq!(h.get_all(&TRACEPARENT).iter().count(), 1);
        // Two traceparent lines: invalid, replaced by one.
        let mut h = HeaderMap::new();
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        h.append(&TRACEPARENT, HeaderValue::from_static(VALID));
        let c = propagate(&mut h, None).trace_id;
        assert_ne!(c.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(h.get_all(&TRACEPARENT).iter().count(), 1);
    }

    #[test]
    fn the_sampler_follows_its_ratio() {
        let id = |low: u64| {
            let mut t = [0xabu8; 16];
            t[8..].copy_from_slice(&low.to_be_bytes());
            t
        };
        let (never, always, half) = (Sampler::new(0.0), Sampler::new(1.0), Sampler::new(0.5));
        for low in [0, 1, u64::MAX / 2, u64::MAX / 2 + 1, u64::MAX] {
            assert!(!never.samples(&id(low)));
            assert!(always.samples(&id(low)));
        }
        assert!(half.samples(&id(0)));
        assert!(half.samples(&id(u64::MAX / 2)));
        assert!(!half.samples(&id(u64::MAX / 2 + 1)));
        assert!(!half.samples(&id(u64::MAX)));
        // Nonsense ratios are clamped, never a panic.
        assert_eq!(Sampler::new(f64::NAN), never);
        assert_eq!(Sampler::new(-3.0), never);
        assert_eq!(Sampler::new(7.0), always);
        // Over many random traces, about the ratio.
        let quarter = Sampler::new(0.25);
        let n = 20_000;
        let hits = (0..n).filter(|_| quarter.samples(&nonzero())).count();
        assert!((4_000..6_000).contains(&hits), "{hits} of {n}");
    }

    #[test]
    fn a_started_trace_is_sampled_only_by_the_sampler() {
        let mut h = HeaderMap::new();
        let p = propagate(&mut h, None);
        assert!(!p.sampled() && p.parent.is_none());
        let mut h = HeaderMap::new();
        let p = propagate(&mut h, Some(Sampler::new(1.0)));
        assert!(p.sampled());
        let out = h.get(&TRACEPARENT).unwrap().to_str().unwrap().to_owned();
        assert!(out.ends_with("-01"), "{out}");
        assert_eq!(out[36..52], hex8(&p.span_id));
        let mut h = HeaderMap::new();
        assert!(!propagate(&mut h, Some(Sampler::new(0.0))).sampled());
        assert!(h
            .get(&TRACEPARENT)
            .unwrap()
            .to_str()
            .unwrap()
            .ends_with("-00"));
        // A client's flag decides for its own trace, whatever the sampler.
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(VALID));
        let p = propagate(&mut h, Some(Sampler::new(0.0)));
        assert!(p.sampled());
        assert_eq!(p.parent, Some(parse(VALID.as_bytes()).unwrap().parent_id));
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        let mut h = HeaderMap::new();
        h.insert(&TRACEPARENT, HeaderValue::from_static(unsampled));
        assert!(!propagate(&mut h, Some(Sampler::new(1.0))).sampled());
        // A retry's own parent id, same trace and flags.
        let p = propagate(&mut h, None);
        let retry = new_span_id();
        let v = parent_value(&p.trace_id, &retry, p.flags);
        let again = parse(v.as_bytes()).unwrap();
        assert_eq!(
            (again.trace_id, again.parent_id, again.flags),
            (p.trace_id.0, retry, 0)
        );
    }

    fn hex8(b: &[u8; 8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }
}
