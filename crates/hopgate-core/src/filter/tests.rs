use super::*;

#[test]
fn replace_prefix_follows_gateway_api() {
    let cases = [
        ("/api", "/", "/api/users", Some("/users")),
        ("/api", "/", "/api", Some("/")),
        ("/api/", "/v2", "/api/users", Some("/v2/users")),
        ("/api", "/v2/", "/api/users?x", Some("/v2/users%3Fx")),
        ("/api", "/v2", "/other", None),
        ("/", "/v2", "/a/b", Some("/v2/a/b")),
    ];
    for (prefix, with, path, want) in cases {
        let rw = PathRewrite::replace_prefix(prefix, with);
        assert_eq!(rw.apply(path).as_deref(), want, "{prefix} {with} {path}");
    }
}

#[test]
fn regex_rewrites_use_captures() {
    let rw = PathRewrite::Regex {
        re: Regex::new("^/a/(?P<rest>.*)$").unwrap(),
        replace: "/b/${rest}/$1".to_owned(),
    };
    assert_eq!(rw.apply("/a/x/y").as_deref(), Some("/b/x/y/x/y"));
    assert_eq!(rw.apply("/c").as_deref(), None);
    let rw = PathRewrite::Regex {
        re: Regex::new("^/(.*)$").unwrap(),
        replace: "$1".to_owned(),
    };
    assert_eq!(rw.apply("/x").as_deref(), Some("/x"));
}

#[test]
fn redirect_locations() {
    let r = |https, host: Option<&str>, port, status| Redirect {
        https,
        host: host.map(str::to_owned),
        port,
        path: None,
        status,
    };
    let to_https = r(Some(true), None, None, 301);
    assert_eq!(
        to_https.location(false, "example.com:8080", "/a", Some("q=1")),
        "https://example.com/a?q=1"
    );
    let same = r(None, Some("new.example"), None, 302);
    assert_eq!(
        same.location(false, "example.com:8080", "/a", None),
        "http://new.example:8080/a"
    );
    let ported = r(Some(true), None, Some(8443), 308);
    assert_eq!(
        ported.location(false, "[::1]:80", "/", None),
        "https://[::1]:8443/"
    );
    let mut moved = r(None, None, None, 302);
    moved.path = Some(PathRewrite::replace_prefix("/old", "/new"));
    assert_eq!(moved.location(true, "h", "/old/x", None), "https://h/new/x");
}

#[test]
fn header_edits_set_add_remove() {
    let mut edits = HeaderEdits::default();
    let name = |n: &str| HeaderName::from_bytes(n.as_bytes()).unwrap();
    edits.set.push((name("x-a"), Template::parse("1").unwrap()));
    edits
        .add
        .push((name("x-b"), Template::parse("${route_id}").unwrap()));
    edits.remove.push(name("server"));
    let mut h = HeaderMap::new();
    h.append("x-a", HeaderValue::from_static("old"));
    h.append("x-a", HeaderValue::from_static("old2"));
    h.append("x-b", HeaderValue::from_static("first"));
    h.append("server", HeaderValue::from_static("nginx"));
    let vars = Vars {
        client_ip: "127.0.0.1".parse().unwrap(),
        request_id: "r",
        route_id: "web",
        host: "h",
        https: false,
    };
    edits.apply(&mut h, &vars);
    assert_eq!(h.get_all("x-a").iter().collect::<Vec<_>>(), ["1"]);
    assert_eq!(
        h.get_all("x-b").iter().collect::<Vec<_>>(),
        ["first", "web"]
    );
    assert!(h.get("server").is_none());
}
