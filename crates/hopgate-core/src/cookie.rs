//! Reading one cookie from a request's `Cookie` lines: what session
//! tokens, consistent hashing on a cookie, rate-limit keys and forward
//! auth's decision cache all read the same way.
//!
//! Owns the parsing rule: every `Cookie` line, split on `;`, each pair
//! trimmed, the first whose name matches exactly wins; lines that are not
//! visible ASCII are skipped. The value is returned as sent (a quoted
//! value keeps its quotes; the caller decides).
//!
//! Must not touch: what a cookie means (sessions, limits and routing own
//! that), `Set-Cookie` (the session layer writes it).

use http::HeaderMap;

/// The value of cookie `name` in the request's `Cookie` lines, if sent.
pub fn value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for l in lines {
            h.append(http::header::COOKIE, HeaderValue::from_str(l).unwrap());
        }
        h
    }

    #[test]
    fn finds_a_cookie_in_any_line_and_position() {
        let h = headers(&["a=1; sid=xyz", "b=2;c=3"]);
        assert_eq!(value(&h, "sid"), Some("xyz"));
        assert_eq!(value(&h, "c"), Some("3"));
        assert_eq!(value(&h, "a"), Some("1"));
    }

    #[test]
    fn names_match_exactly_and_the_first_wins() {
        let h = headers(&["sidx=1; SID=2; sid=first", "sid=second"]);
        assert_eq!(value(&h, "sid"), Some("first"));
        assert_eq!(value(&h, "si"), None);
    }

    #[test]
    fn values_come_as_sent_and_pairs_without_equals_are_skipped() {
        let h = headers(&["flag; q=\"quoted\"; empty="]);
        assert_eq!(value(&h, "q"), Some("\"quoted\""));
        assert_eq!(value(&h, "empty"), Some(""));
        assert_eq!(value(&h, "flag"), None);
        assert_eq!(value(&HeaderMap::new(), "q"), None);
    }
}
