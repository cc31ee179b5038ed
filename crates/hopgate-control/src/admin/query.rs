//! The admin API's one query-string reader: `application/x-www-form-urlencoded`
//! pairs, percent-decoded (and `+` as a space) by the `form_urlencoded`
//! crate. Every endpoint that reads its query (`?limit=`, `?ticket=`,
//! `?last_event_id=`, `?canary=&bake=`) goes through [`Query`].
//!
//! Must not touch: what a value means (each endpoint parses its own).

use std::borrow::Cow;

use http::Uri;

/// A request's query, decoded once.
#[derive(Debug, Default)]
pub(crate) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// The pairs of `query` (the part after `?`), in order; empty pairs
    /// are skipped, a pair without `=` has an empty value.
    pub(crate) fn parse(query: Option<&str>) -> Query {
        let pairs = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .map(|(k, v)| (Cow::into_owned(k), Cow::into_owned(v)))
            .collect();
        Query { pairs }
    }

    /// The query of `uri`.
    pub(crate) fn of(uri: &Uri) -> Query {
        Query::parse(uri.query())
    }

    /// Every `(name, value)`, in the order written.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The first value of `name`.
    pub(crate) fn first(&self, name: &str) -> Option<&str> {
        self.pairs().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_percent_decoded_and_the_first_wins() {
        let q = Query::parse(Some("limit=5&x&ticket=a%2Eb&limit=7&&last_event_id=%2042"));
        assert_eq!(q.first("limit"), Some("5"));
        assert_eq!(q.first("x"), Some(""));
        assert_eq!(q.first("ticket"), Some("a.b"));
        assert_eq!(q.first("last_event_id"), Some(" 42"));
        assert_eq!(q.first("nope"), None);
        let names: Vec<&str> = q.pairs().map(|(k, _)| k).collect();
        assert_eq!(names, ["limit", "x", "ticket", "limit", "last_event_id"]);
        assert!(Query::parse(None).pairs().next().is_none());
    }
}
