//! Route filters: header value templates (`${name}` variables) and path
//! rewrites. For any template text, parsing never panics, and a parsed
//! template expands to a valid header value for plain variables; for any
//! path, every kind of rewrite gives a path that starts with `/` and is a
//! valid request target with the query put back, and a redirect's
//! `Location` is a valid header value.
#![no_main]

use hopgate_core::filter::{PathRewrite, Redirect, Template, Vars};
use http::uri::PathAndQuery;
use http::HeaderValue;
use libfuzzer_sys::fuzz_target;

fn rewrites() -> Vec<PathRewrite> {
    vec![
        PathRewrite::replace_prefix("/api", "/"),
        PathRewrite::replace_prefix("/", "/v2"),
        PathRewrite::replace_prefix("/a/", "/b/c"),
        PathRewrite::Full("/fixed".to_owned()),
        PathRewrite::Regex {
            re: regex::Regex::new("^/(?P<a>[^/]*)/(.*)$").unwrap(),
            replace: "/x/$2/${a}".to_owned(),
        },
        PathRewrite::Regex {
            re: regex::Regex::new("(.)").unwrap(),
            replace: "$1$1".to_owned(),
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (template, path) = text.split_once('\n').unwrap_or((&text, "/"));
    let vars = Vars {
        client_ip: "192.0.2.1".parse().unwrap(),
        request_id: "0123456789abcdef",
        route_id: "route",
        host: "example.com:8080",
        https: true,
    };
    if let Ok(t) = Template::parse(template) {
        // Every literal part is header text and every variable here is
        // too: the expansion always succeeds.
        assert!(t.expand(&vars).is_some(), "{template:?}");
    }
    // A path as a server would hand it over: a valid request target.
    let Ok(pq) = path.parse::<PathAndQuery>() else {
        return;
    };
    if !pq.path().starts_with('/') {
        return;
    }
    for rw in rewrites() {
        if let Some(out) = rw.apply(pq.path()) {
            assert!(out.starts_with('/'), "{out:?}");
            let with_query = format!("{out}?{}", pq.query().unwrap_or(""));
            assert!(with_query.parse::<PathAndQuery>().is_ok(), "{with_query:?}");
        }
        let redirect = Redirect {
            https: Some(true),
            host: None,
            port: None,
            path: Some(rw),
            status: 301,
        };
        let loc = redirect.location(false, "example.com:80", pq.path(), pq.query());
        assert!(HeaderValue::from_str(&loc).is_ok(), "{loc:?}");
    }
});
