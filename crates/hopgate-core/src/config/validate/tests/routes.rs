//! Routes: ids, priorities, matches, services, versions and splits.

use super::*;

#[test]
fn route_ids() {
    only(
        &with_routes("  - { id: \"\", service: api }\n"),
        "routes[0].id",
        "needs an id",
    );
    only(
        &with_routes("  - { service: api }\n"),
        "routes[0].id",
        "needs an id",
    );
    only(
        &with_routes("  - { id: a, service: api }\n  - { id: b, service: api }\n  - { id: a, service: api }\n"),
        "routes[2].id",
        "duplicate route id \"a\" (also routes[0])",
    );
    only(
        &with_routes("  - { id: \"my route\", service: api }\n"),
        "routes[0].id",
        "invalid route id \"my route\"",
    );
    only(
        &with_routes("  - { id: \"rüte\", service: api }\n"),
        "routes[0].id",
        "visible ASCII",
    );
}

#[test]
fn route_priority() {
    let prio = |p: &str| with_routes(&format!("  - {{ id: r, service: api, priority: {p} }}\n"));
    assert_eq!(ok(&prio("100")).routes[0].priority, 100);
    assert_eq!(ok(&prio("-5")).routes[0].priority, -5);
    assert_eq!(ok(&prio("2147483647")).routes[0].priority, i32::MAX);
    assert_eq!(ok(&prio("-2147483648")).routes[0].priority, i32::MIN);
    assert_eq!(ok(&prio("\"42\"")).routes[0].priority, 42);
    only(
        &prio("2147483648"),
        "routes[0].priority",
        "\"2147483648\" is out of range: expected an integer from -2147483648 to 2147483647",
    );
    only(&prio("-3000000000"), "routes[0].priority", "out of range");
    only(&prio("1.5"), "routes[0].priority", "not an integer");
    only(
        &prio("high"),
        "routes[0].priority",
        "\"high\" is not an integer",
    );
    only(&prio("\"\""), "routes[0].priority", "not an integer");
    only(&prio("\"-\""), "routes[0].priority", "not an integer");
}

#[test]
fn route_enabled_defaults_to_true() {
    assert!(ok(&with_routes("  - { id: r, service: api }\n")).routes[0].enabled);
    assert!(
        !ok(&with_routes(
            "  - { id: r, service: api, enabled: false }\n"
        ))
        .routes[0]
            .enabled
    );
    assert!(ok(&with_routes("  - { id: r, service: api, enabled: true }\n")).routes[0].enabled);
}

#[test]
fn host_matches() {
    let host = |h: &str| {
        ok(&matching(&format!("{{ host: \"{h}\" }}"))).routes[0]
            .matcher
            .host
            .clone()
    };
    assert_eq!(
        host("api.example.com"),
        HostMatch::Exact("api.example.com".into())
    );
    assert_eq!(
        host("API.Example.COM"),
        HostMatch::Exact("api.example.com".into())
    );
    assert_eq!(
        host("*.Example.com"),
        HostMatch::Suffix(".example.com".into())
    );
    assert_eq!(host("localhost"), HostMatch::Exact("localhost".into()));
    assert_eq!(host("10.0.0.1"), HostMatch::Exact("10.0.0.1".into()));
    assert_eq!(host("[::1]"), HostMatch::Exact("[::1]".into()));
    assert_eq!(
        host("my_host.internal"),
        HostMatch::Exact("my_host.internal".into())
    );
    let bad = [
        ("", "must not be empty"),
        ("*", "leave host out"),
        ("api.*.com", "only allowed as a leading \"*.\""),
        ("*api.example.com", "only allowed as a leading"),
        ("*.*.example.com", "only allowed as a leading"),
        ("api.example.*", "only allowed as a leading"),
        ("*.", "empty label"),
        ("api..example.com", "empty label"),
        (".example.com", "empty label"),
        ("example.com.", "empty label"),
        ("api.example.com:8080", "must not include a port"),
        ("[::1]:8080", "must not include a port"),
        ("api example.com", "expected letters, digits"),
        ("api/example", "expected letters, digits"),
    ];
    for (h, needle) in bad {
        only(
            &matching(&format!("{{ host: \"{h}\" }}")),
            "routes[0].match.host",
            needle,
        );
    }
}

#[test]
fn path_matches() {
    let path = |m: &str| ok(&matching(m)).routes[0].matcher.path.clone();
    assert_eq!(path("{ path: /exact }"), PathMatch::Exact("/exact".into()));
    assert_eq!(
        path("{ path_prefix: /api }"),
        PathMatch::Prefix("/api".into())
    );
    assert_eq!(path("{ path_prefix: / }"), PathMatch::Prefix("/".into()));
    assert_eq!(path("{}"), PathMatch::Prefix("/".into()));
    match path("{ path_regex: \"^/v[0-9]+/\" }") {
        PathMatch::Regex(r) => assert_eq!(r.as_str(), "^/v[0-9]+/"),
        other => panic!("expected a regex, got {other:?}"),
    }

    let p = "routes[0].match";
    only(
        &matching("{ path: /a, path_prefix: /a }"),
        p,
        "at most one of path, path_prefix and path_regex is allowed (found path and path_prefix)",
    );
    only(
        &matching("{ path_prefix: /a, path_regex: a }"),
        p,
        "found path_prefix and path_regex",
    );
    only(
        &matching("{ path: /a, path_prefix: /a, path_regex: a }"),
        p,
        "found path and path_prefix and path_regex",
    );

    only(
        &matching("{ path: api }"),
        "routes[0].match.path",
        "path \"api\" must start with \"/\"",
    );
    only(
        &matching("{ path: \"\" }"),
        "routes[0].match.path",
        "must start with",
    );
    only(
        &matching("{ path_prefix: api/ }"),
        "routes[0].match.path_prefix",
        "must start with \"/\"",
    );
    only(
        &matching("{ path_prefix: \"/a?b=1\" }"),
        "routes[0].match.path_prefix",
        "match.query",
    );
    only(
        &matching("{ path: \"/a b\" }"),
        "routes[0].match.path",
        "whitespace",
    );

    only(
        &matching("{ path_regex: \"^/v[0-9+/\" }"),
        "routes[0].match.path_regex",
        "invalid regex \"^/v[0-9+/\": unclosed character class",
    );
    only(
        &matching("{ path_regex: \"(\" }"),
        "routes[0].match.path_regex",
        "unclosed group",
    );
    only(
        &matching("{ path_regex: \"a{99999}{99999}\" }"),
        "routes[0].match.path_regex",
        "invalid regex",
    );
    // Every problem of one match is reported, not only the first.
    let errs = errors(&matching("{ path: x, path_regex: \"(\" }"));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].match",
            "routes[0].match.path",
            "routes[0].match.path_regex"
        ]
    );
}

#[test]
fn regex_errors_are_one_short_line() {
    for re in ["(", "[", "a{2,1}", "\\p{Nope}", "(?P<>a)", "*"] {
        let m = compile_regex(re).unwrap_err();
        assert!(!m.contains('\n') && m.len() < 200, "{m}");
        assert!(m.starts_with(&format!("invalid regex {re:?}: ")), "{m}");
    }
}

#[test]
fn method_matches() {
    let c = ok(&matching("{ methods: [get, Post, PURGE, GET] }"));
    assert_eq!(
        c.routes[0].matcher.methods,
        [
            Method::GET,
            Method::POST,
            Method::from_bytes(b"PURGE").unwrap()
        ]
    );
    only(
        &matching("{ methods: [GET, \"\"] }"),
        "routes[0].match.methods[1]",
        "must not be empty",
    );
    only(
        &matching("{ methods: [\"GE T\"] }"),
        "routes[0].match.methods[0]",
        "invalid method \"GE T\"",
    );
    only(
        &matching("{ methods: [GET, POST, \"G(ET\"] }"),
        "routes[0].match.methods[2]",
        "invalid method",
    );
    only(
        &matching("{ methods: [\"GÉT\"] }"),
        "routes[0].match.methods[0]",
        "invalid method",
    );
}

#[test]
fn header_matches() {
    let c = ok(&matching(
        "{ headers: { X-Canary: \"1\", Accept: \"text/html; q=0.9\" } }",
    ));
    let h = &c.routes[0].matcher.headers;
    assert_eq!(h.len(), 2);
    assert!(h.contains(&(
        HeaderName::from_static("x-canary"),
        HeaderValue::from_static("1")
    )));
    ok(&matching("{ headers: { X-Empty: \"\" } }"));
    only(
        &matching("{ headers: { \"X Canary\": \"1\" } }"),
        "routes[0].match.headers.X Canary",
        "invalid header name \"X Canary\"",
    );
    only(
        &matching("{ headers: { \"X-Ça\": \"1\" } }"),
        "routes[0].match.headers.X-Ça",
        "invalid header name",
    );
    only(
        &matching("{ headers: { \"\": \"1\" } }"),
        "routes[0].match.headers.",
        "must not be empty",
    );
    only(
        &matching("{ headers: { X-A: \"a\\nb\" } }"),
        "routes[0].match.headers.X-A",
        "invalid header value",
    );
    // obs-text (non-ASCII bytes) is legal in a header value.
    ok(&matching("{ headers: { X-A: \"é\" } }"));
    only(
        &matching("{ headers: { X-A: \"\\u007f\" } }"),
        "routes[0].match.headers.X-A",
        "control characters",
    );
    only(
        &matching("{ headers: { X-A: \" 1\" } }"),
        "routes[0].match.headers.X-A",
        "whitespace",
    );
    only(
        &matching("{ headers: { X-A: \"1\", x-a: \"2\" } }"),
        "routes[0].match.headers.x-a",
        "listed twice",
    );
    // A bad name and a bad value are both reported.
    let errs = errors(&matching("{ headers: { \"X A\": \"\\u0001\" } }"));
    assert_eq!(errs.len(), 2, "{}", render(&errs));
}

#[test]
fn query_matches() {
    let c = ok(&matching("{ query: { beta: \"true\", flag: \"\" } }"));
    assert_eq!(
        c.routes[0].matcher.query,
        [
            ("beta".into(), "true".into()),
            ("flag".into(), String::new())
        ]
    );
    only(
        &matching("{ query: { \"\": x } }"),
        "routes[0].match.query",
        "must not be empty",
    );
    only(
        &matching("{ query: { \"a=b\": x } }"),
        "routes[0].match.query.a=b",
        "invalid query parameter name",
    );
    only(
        &matching("{ query: { a: \"x&y\" } }"),
        "routes[0].match.query.a",
        "invalid query value \"x&y\"",
    );
}

#[test]
fn source_cidrs() {
    let c = ok(&matching(
        "{ source_cidrs: [10.0.0.0/8, 192.168.1.7, \"::1\", \"fd00::/8\", 10.1.2.3/16] }",
    ));
    let want: Vec<IpNet> = [
        "10.0.0.0/8",
        "192.168.1.7/32",
        "::1/128",
        "fd00::/8",
        "10.1.0.0/16",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    assert_eq!(c.routes[0].matcher.source_cidrs, want);
    let errs = errors(&matching(
        "{ source_cidrs: [10.0.0.0/8, 10.0.0/8, \"\", 1.2.3.4/33, \"::1/129\", 10.0.0.0/8/8] }",
    ));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].match.source_cidrs[1]",
            "routes[0].match.source_cidrs[2]",
            "routes[0].match.source_cidrs[3]",
            "routes[0].match.source_cidrs[4]",
            "routes[0].match.source_cidrs[5]",
        ]
    );
    assert_eq!(errs[0].message, "invalid CIDR \"10.0.0/8\": expected a network like \"10.0.0.0/8\" or \"fd00::/8\", or a bare IP");
}

#[test]
fn route_services_must_exist() {
    let c = ok(&format!(
        "{LISTENER}services:\n  - {{ name: web, nodes: [ {{ id: a, address: 127.0.0.1:8081 }} ] }}\n  - {{ name: api, nodes: [ {{ id: a, address: 127.0.0.1:8082 }} ] }}\n{DEFAULT_ROUTE}"
    ));
    assert_eq!(c.routes[0].service, 1);
    only(
        &with_routes("  - { id: r, service: apii }\n"),
        "routes[0].service",
        "unknown service \"apii\" (did you mean \"api\"?)",
    );
    only(
        &with_routes("  - { id: r, service: ap }\n"),
        "routes[0].service",
        "(did you mean \"api\"?)",
    );
    only(
        &with_routes("  - { id: r, service: API }\n"),
        "routes[0].service",
        "(did you mean \"api\"?)",
    );
    let errs = errors(&with_routes("  - { id: r, service: billing }\n"));
    assert_eq!(
        render(&errs),
        "routes[0].service: unknown service \"billing\""
    );
    only(
        &with_routes("  - { id: r }\n"),
        "routes[0].service",
        "required",
    );
}

#[test]
fn closest_names() {
    assert_eq!(closest("apii", ["api", "web"]), Some("api"));
    assert_eq!(closest("wbe", ["api", "web"]), Some("web"));
    assert_eq!(closest("billing", ["api", "web"]), None);
    assert_eq!(closest("api2", ["api1", "api"]), Some("api1"));
    assert_eq!(closest(&"x".repeat(1000), ["x"]), None);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
    assert_eq!(edit_distance("", "abc"), 3);
    assert_eq!(edit_distance("é", "e"), 1);
}

#[test]
fn route_versions() {
    let c = ok(&with_routes("  - { id: r, service: api, version: v2 }\n"));
    assert_eq!(c.routes[0].target, Target::Version("v2".into()));
    only(
        &with_routes("  - { id: r, service: api, version: v3 }\n"),
        "routes[0].version",
        "service \"api\" has no node with version \"v3\" (versions: v1, v2)",
    );
    only(
        &with_routes("  - { id: r, service: api, version: \"\" }\n"),
        "routes[0].version",
        "must not be empty",
    );
    let unversioned =
        with_services("  - name: api\n    nodes: [ { id: a, address: 127.0.0.1:8081 } ]\n");
    let doc = unversioned.replace("service: api\n", "service: api\n    version: v1\n");
    only(&doc, "routes[0].version", "its nodes have no version");
    // An unknown service is reported once, not again for its version.
    only(
        &with_routes("  - { id: r, service: nope, version: v1 }\n"),
        "routes[0].service",
        "unknown service",
    );
}

#[test]
fn route_splits() {
    let split = |arms: &str| {
        with_routes(&format!(
            "  - id: r\n    service: api\n    split: [ {arms} ]\n"
        ))
    };
    let c = ok(&split(
        "{ version: v1, weight: 90 }, { version: v2, weight: 10 }",
    ));
    assert_eq!(
        c.routes[0].target,
        Target::Split(vec![("v1".into(), 90), ("v2".into(), 10)])
    );
    // Zero-weight arms are valid and carry no traffic.
    let c = ok(&split(
        "{ version: v1, weight: 0 }, { version: v2, weight: 10000 }",
    ));
    assert_eq!(
        c.routes[0].target,
        Target::Split(vec![("v2".into(), 10_000)])
    );

    only(&split(""), "routes[0].split", "at least one");
    only(
        &split("{ version: v1, weight: 0 }, { version: v2, weight: 0 }"),
        "routes[0].split",
        "every weight is 0",
    );
    only(
        &split("{ version: v1, weight: 90 }, { version: v3, weight: 10 }"),
        "routes[0].split[1].version",
        "no node with version \"v3\"",
    );
    only(
        &split("{ version: v1, weight: 50 }, { version: v1, weight: 50 }"),
        "routes[0].split[1].version",
        "duplicate version \"v1\" (also split[0])",
    );
    only(
        &split("{ version: \"\", weight: 50 }, { version: v1, weight: 50 }"),
        "routes[0].split[0].version",
        "must not be empty",
    );
    only(
        &split("{ version: v1, weight: 10001 }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "\"10001\" is out of range: expected an integer from 0 to 10000",
    );
    only(
        &split("{ version: v1, weight: -1 }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "out of range",
    );
    only(
        &split("{ version: v1, weight: half }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "not an integer",
    );
    only(
        &split("{ version: v1 }, { version: v2, weight: 1 }"),
        "routes[0].split[0].weight",
        "required",
    );
    // A bad weight is not also reported as "every weight is 0".
    only(
        &split("{ version: v1, weight: x }, { version: v2, weight: 0 }"),
        "routes[0].split[0].weight",
        "not an integer",
    );
    // version and split together: one error, both still checked.
    let both =
        "  - id: r\n    service: api\n    version: v1\n    split: [ { version: v1, weight: 1 } ]\n";
    only(&with_routes(both), "routes[0].split", "mutually exclusive");
    let both_bad =
        "  - id: r\n    service: api\n    version: v7\n    split: [ { version: v8, weight: 1 } ]\n";
    let errs = errors(&with_routes(both_bad));
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "routes[0].split",
            "routes[0].version",
            "routes[0].split[0].version"
        ]
    );
}

#[test]
fn strict_version_needs_a_version() {
    only(
        &with_routes("  - { id: r, service: api, strict_version: true }\n"),
        "routes[0].strict_version",
        "requires version or split",
    );
    assert!(
        ok(&with_routes(
            "  - { id: r, service: api, version: v1, strict_version: true }\n"
        ))
        .routes[0]
            .strict_version
    );
    let split = "  - id: r\n    service: api\n    strict_version: true\n    split: [ { version: v1, weight: 1 } ]\n";
    assert!(ok(&with_routes(split)).routes[0].strict_version);
}
