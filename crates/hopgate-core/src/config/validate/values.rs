//! Value checkers shared by every section: integers and sizes in range,
//! durations, labels, header-name characters, and "did you mean" hints.
//! Each returns the message of its error; the caller records it under the
//! field path. Pure functions: no I/O, no panic.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};

use crate::config::raw::Text;
use crate::units;

/// An integer from `min` to `max` inclusive.
pub(super) fn int_in(t: &Text, min: i64, max: i64) -> Result<i64, String> {
    let s = t.0.as_str();
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{s:?} is not an integer: expected an integer from {min} to {max}"
        ));
    }
    match s.parse::<i64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?} is out of range: expected an integer from {min} to {max}"
        )),
    }
}

/// A size (units::parse_size) from `min` to `max` bytes; `lo`/`hi` spell the
/// bounds for the message (`hi` empty: no upper bound).
pub(super) fn size_in(t: &Text, min: u64, max: u64, lo: &str, hi: &str) -> Result<u64, String> {
    let n = units::parse_size(&t.0)?;
    if (min..=max).contains(&n) {
        return Ok(n);
    }
    Err(if hi.is_empty() {
        format!("size {:?} is out of range: expected at least {lo}", t.0)
    } else {
        format!("size {:?} is out of range: expected {lo} to {hi}", t.0)
    })
}

pub(super) fn positive_duration(t: &Text) -> Result<Duration, String> {
    let d = units::parse_duration(&t.0)?;
    if d.is_zero() {
        return Err(format!("duration {:?} must be greater than 0", t.0));
    }
    Ok(d)
}

pub(super) fn parse_method(m: &str) -> Result<Method, String> {
    if m.is_empty() {
        return Err("method must not be empty".to_owned());
    }
    let upper = m.to_ascii_uppercase();
    if !upper.bytes().all(is_tchar) {
        return Err(format!(
            "invalid method {m:?}: expected a token like GET or POST"
        ));
    }
    Method::from_bytes(upper.as_bytes())
        .map_err(|_| format!("invalid method {m:?}: expected a token like GET or POST"))
}

pub(super) fn parse_header_name(n: &str) -> Result<HeaderName, String> {
    if n.is_empty() {
        return Err("header name must not be empty".to_owned());
    }
    HeaderName::from_bytes(n.as_bytes())
        .map_err(|_| format!("invalid header name {n:?}: expected a token like \"X-Canary\""))
}

pub(super) fn parse_header_value(v: &str) -> Result<HeaderValue, String> {
    if v.starts_with([' ', '\t']) || v.ends_with([' ', '\t']) {
        return Err(format!(
            "header value {v:?} must not start or end with whitespace (it would never match)"
        ));
    }
    HeaderValue::from_str(v)
        .map_err(|_| format!("invalid header value {v:?}: control characters are not allowed"))
}

/// Node ids, versions and zones: non-empty, no whitespace, `/` or control
/// characters (they appear in admin URLs and logs).
pub(super) fn check_label(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} must not be empty (leave it out instead)"));
    }
    if s.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '/')
    {
        return Err(format!(
            "invalid {what} {s:?}: it must not contain whitespace, '/' or control characters"
        ));
    }
    Ok(())
}

/// Route ids travel in the `X-Route-Rule-Id` header.
pub(super) fn check_route_id(id: &str) -> Result<(), String> {
    if id.bytes().all(|b| b.is_ascii_graphic()) {
        Ok(())
    } else {
        Err(format!(
            "invalid route id {id:?}: use visible ASCII without spaces (it is sent as a header)"
        ))
    }
}

pub(super) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// An RFC 9110 token character.
pub(super) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

pub(super) fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `unknown lb policy "smoth_wrr" (did you mean "smooth_wrr"?): expected one of ...`
pub(super) fn unknown_choice(what: &str, got: &str, choices: &[&str]) -> String {
    let mut m = format!("unknown {what} {got:?}");
    if let Some(near) = closest(got, choices.iter().copied()) {
        m.push_str(&format!(" (did you mean {near:?}?)"));
    }
    m.push_str(&format!(": expected one of {}", choices.join(", ")));
    m
}

/// The candidate nearest to `name` within edit distance 2 (ignoring ASCII
/// case), if any; ties go to the first.
pub(super) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    const MAX_LEN: usize = 64;
    if name.len() > MAX_LEN {
        return None;
    }
    let name = name.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c.len() > MAX_LEN {
            continue;
        }
        let d = edit_distance(&name, &c.to_ascii_lowercase());
        if d <= 2 && !matches!(best, Some((bd, _)) if bd <= d) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance over chars.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

pub(super) fn to_usize(n: impl TryInto<usize>) -> usize {
    n.try_into().unwrap_or(usize::MAX)
}

pub(super) fn to_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
