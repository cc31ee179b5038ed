//! The path a route is matched against: a request path in its normal form
//! (RFC 3986 §6.2.2), so that `/%61dmin`, `//admin`, `/./admin` and
//! `/api/../admin` all meet the rules written for `/admin`, the way a
//! backend that normalises paths will read them.
//!
//! Owns [`normalize_path`]: percent-encoded unreserved characters decoded,
//! other escapes in upper case, dot segments resolved, runs of slashes
//! merged; an encoded slash or backslash (`%2F`, `%5C`) or a broken escape
//! refused. A path already in normal form is returned borrowed, so the
//! common case allocates nothing. Must not touch: the query, the host.

use std::borrow::Cow;

use crate::units::hex_digit;

/// Why a path has no normal form the gateway will route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// `%2F` or `%5C`: a slash a backend may or may not decode.
    EncodedSlash,
    /// A `%` not followed by two hex digits.
    BadEscape,
}

/// `path` in normal form (see the module doc). A path that does not start
/// with `/` (`*`, or an empty one) is left as it is.
pub fn normalize_path(path: &str) -> Result<Cow<'_, str>, PathError> {
    if !path.starts_with('/') || is_normal(path.as_bytes()) {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode(path)?;
    Ok(Cow::Owned(resolve(&decoded)))
}

/// Whether `p` is already normal: escapes only of reserved characters,
/// in upper case; no empty segment, no `.` or `..` segment. One pass, no
/// allocation.
fn is_normal(p: &[u8]) -> bool {
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            b'%' => {
                let upper =
                    |b: Option<&u8>| b.is_some_and(|b| matches!(b, b'0'..=b'9' | b'A'..=b'F'));
                if !(upper(p.get(i + 1)) && upper(p.get(i + 2))) {
                    return false;
                }
                let b = hex_digit(p[i + 1]).unwrap_or(0) * 16 + hex_digit(p[i + 2]).unwrap_or(0);
                if unreserved(b) || b == b'/' || b == b'\\' {
                    return false;
                }
                i += 3;
                continue;
            }
            b'/' => {
                let rest = &p[i + 1..];
                let segment_end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
                let seg = &rest[..segment_end];
                // An empty segment is a doubled slash, unless it is the
                // trailing one.
                if (seg.is_empty() && segment_end < rest.len()) || seg == b"." || seg == b".." {
                    return false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    true
}

fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Escapes of unreserved characters decoded, the others upper-cased.
fn decode(path: &str) -> Result<String, PathError> {
    let p = path.as_bytes();
    let mut out = String::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        if p[i] != b'%' {
            // `path` is a str and only ASCII escapes are rewritten, so
            // every other byte is copied whole, character by character.
            let next = p[i..]
                .iter()
                .position(|&b| b == b'%')
                .map_or(p.len(), |n| i + n);
            out.push_str(&path[i..next]);
            i = next;
            continue;
        }
        let (Some(h), Some(l)) = (
            p.get(i + 1).copied().and_then(hex_digit),
            p.get(i + 2).copied().and_then(hex_digit),
        ) else {
            return Err(PathError::BadEscape);
        };
        let b = h * 16 + l;
        if b == b'/' || b == b'\\' {
            return Err(PathError::EncodedSlash);
        }
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(b"0123456789ABCDEF"[usize::from(h)]));
            out.push(char::from(b"0123456789ABCDEF"[usize::from(l)]));
        }
        i += 3;
    }
    Ok(out)
}

/// Dot segments resolved (a `..` never climbs above the root) and empty
/// segments dropped; a trailing slash is kept, and a path ending in `.` or
/// `..` ends with one.
fn resolve(path: &str) -> String {
    let mut segs: Vec<&str> = Vec::new();
    let mut trailing = false;
    let mut parts = path[1..].split('/').peekable();
    while let Some(seg) = parts.next() {
        let last = parts.peek().is_none();
        match seg {
            "." => {}
            ".." => {
                segs.pop();
            }
            "" => {}
            s => segs.push(s),
        }
        trailing = last && matches!(seg, "" | "." | "..");
    }
    let mut out = String::with_capacity(path.len());
    for s in &segs {
        out.push('/');
        out.push_str(s);
    }
    if trailing || segs.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_their_normal_form() {
        // input -> normal form (borrowed when unchanged)
        let table = [
            ("/", "/"),
            ("/admin", "/admin"),
            ("/admin/", "/admin/"),
            ("/a/b/c.txt", "/a/b/c.txt"),
            ("/a/.b/..c/...", "/a/.b/..c/..."),
            ("/%61dmin", "/admin"),
            ("/%41DMIN", "/ADMIN"),
            ("/%7e~%2d%2E%5f", "/~~-._"),
            ("//admin", "/admin"),
            ("///admin//x//", "/admin/x/"),
            ("/./admin", "/admin"),
            ("/api/../admin", "/admin"),
            ("/api/%2e%2e/admin", "/admin"),
            ("/api/.%2E/admin", "/admin"),
            ("/../../admin", "/admin"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/..", "/"),
            ("/..", "/"),
            ("/.", "/"),
            ("//", "/"),
            ("/a%20b", "/a%20b"),
            ("/a%3fb%3F", "/a%3Fb%3F"),
            ("/caf%C3%A9", "/caf%C3%A9"),
            ("/café/./x", "/café/x"),
            ("*", "*"),
            ("", ""),
        ];
        for (input, want) in table {
            let got = normalize_path(input).unwrap_or_else(|e| panic!("{input}: {e:?}"));
            assert_eq!(got, want, "{input}");
            assert_eq!(
                matches!(got, Cow::Borrowed(_)),
                input == want,
                "{input}: allocates only when it changes"
            );
        }
    }

    #[test]
    fn encoded_slashes_and_broken_escapes_are_refused() {
        for (input, want) in [
            ("/%2Fadmin", PathError::EncodedSlash),
            ("/a%2fb", PathError::EncodedSlash),
            ("/a%5Cb", PathError::EncodedSlash),
            ("/a%5cb", PathError::EncodedSlash),
            ("/a%", PathError::BadEscape),
            ("/a%4", PathError::BadEscape),
            ("/a%zz", PathError::BadEscape),
        ] {
            assert_eq!(normalize_path(input), Err(want), "{input}");
        }
    }

    /// The normal form is a fixed point, and never contains what it removes.
    #[test]
    fn normalizing_twice_changes_nothing() {
        let pieces = ["a", ".", "..", "", "%2e", "%61", "%20", "b~"];
        let mut rng = 7u64;
        for _ in 0..5_000 {
            let mut p = String::new();
            for _ in 0..(rng % 6) {
                rng = rng
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                p.push('/');
                p.push_str(pieces[(rng >> 33) as usize % pieces.len()]);
            }
            if p.is_empty() {
                continue;
            }
            let once = normalize_path(&p).unwrap().into_owned();
            assert!(
                matches!(normalize_path(&once), Ok(Cow::Borrowed(_))),
                "{p} -> {once}"
            );
            assert!(
                !once.contains("//") && !once.contains("/./"),
                "{p} -> {once}"
            );
        }
    }
}
