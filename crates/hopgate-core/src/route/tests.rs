//! Tests of the compiled router: a matrix over every match dimension, and a
//! randomized differential test against [`linear_lookup`], the reference.
//!
//! Owns nothing but test fixtures. Must not touch: the router's internals
//! (only the public API is exercised, so the tests survive a rewrite).

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use regex::Regex;

use super::{linear_lookup, HostMatch, MatchSpec, PathMatch, RequestView, Router, RuleSpec};

// ---------------------------------------------------------------- fixtures

fn rule(host: HostMatch, path: PathMatch) -> RuleSpec {
    RuleSpec {
        matcher: MatchSpec {
            host,
            path,
            ..MatchSpec::default()
        },
        priority: 0,
        enabled: true,
    }
}

fn any() -> HostMatch {
    HostMatch::Any
}
fn exact(h: &str) -> HostMatch {
    HostMatch::Exact(h.to_owned())
}
fn wild(suffix: &str) -> HostMatch {
    HostMatch::Suffix(suffix.to_owned())
}
fn pfx(p: &str) -> PathMatch {
    PathMatch::Prefix(p.to_owned())
}
fn path(p: &str) -> PathMatch {
    PathMatch::Exact(p.to_owned())
}
fn re(r: &str) -> PathMatch {
    PathMatch::Regex(Regex::new(r).unwrap())
}
fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}

/// A request description; `lookup` turns it into a [`RequestView`].
struct Req {
    host: String,
    path: String,
    query: Option<String>,
    method: Method,
    headers: HeaderMap,
    ip: IpAddr,
}

fn req(host: &str, path: &str) -> Req {
    Req {
        host: host.to_owned(),
        path: path.to_owned(),
        query: None,
        method: Method::GET,
        headers: HeaderMap::new(),
        ip: "10.0.0.1".parse().unwrap(),
    }
}

impl Req {
    fn method(mut self, m: Method) -> Req {
        self.method = m;
        self
    }
    fn query(mut self, q: &str) -> Req {
        self.query = Some(q.to_owned());
        self
    }
    fn header(mut self, name: &'static str, value: &'static str) -> Req {
        self.headers.append(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
        self
    }
    fn ip(mut self, ip: &str) -> Req {
        self.ip = ip.parse().unwrap();
        self
    }
    fn view(&self) -> RequestView<'_> {
        RequestView {
            host: &self.host,
            path: &self.path,
            query: self.query.as_deref(),
            method: &self.method,
            headers: &self.headers,
            source_ip: self.ip,
        }
    }
}

/// Looks `r` up in both the compiled router and the reference, asserts they
/// agree, and returns the answer.
fn lookup(rules: &[RuleSpec], r: &Req) -> Option<usize> {
    let router = Router::build(rules.to_vec());
    let view = r.view();
    let want = linear_lookup(rules, &view);
    assert_eq!(
        router.lookup(&view),
        want,
        "host {:?} path {:?}",
        r.host,
        r.path
    );
    want
}

// ------------------------------------------------------------------ matrix

#[test]
fn empty_router() {
    let router = Router::build(Vec::new());
    assert!(router.is_empty());
    assert_eq!(router.len(), 0);
    assert_eq!(router.lookup(&req("a", "/").view()), None);
    assert_eq!(Router::default().lookup(&req("a", "/").view()), None);
}

#[test]
fn len_counts_disabled_rules() {
    let mut r = rule(any(), pfx("/"));
    r.enabled = false;
    let router = Router::build(vec![r.clone(), r]);
    assert_eq!(router.len(), 2);
    assert!(!router.is_empty());
}

#[test]
fn exact_host() {
    let rules = [rule(exact("api.example.com"), pfx("/"))];
    assert_eq!(lookup(&rules, &req("api.example.com", "/x")), Some(0));
    assert_eq!(lookup(&rules, &req("example.com", "/x")), None);
    assert_eq!(lookup(&rules, &req("x.api.example.com", "/x")), None);
    assert_eq!(lookup(&rules, &req("api.example.co", "/x")), None);
}

#[test]
fn host_with_port_and_upper_case() {
    let rules = [rule(exact("api.example.com"), pfx("/"))];
    assert_eq!(lookup(&rules, &req("api.example.com:8080", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("API.Example.COM", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("Api.EXAMPLE.com:443", "/")), Some(0));
    // Not a port: kept as part of the host.
    assert_eq!(lookup(&rules, &req("api.example.com:80a", "/")), None);
    // A rule host with upper case never matches (hosts are compared lowercase).
    let upper = [rule(exact("API.example.com"), pfx("/"))];
    assert_eq!(lookup(&upper, &req("API.example.com", "/")), None);
    let upper_wild = [rule(wild(".Example.com"), pfx("/"))];
    assert_eq!(lookup(&upper_wild, &req("a.example.com", "/")), None);
}

#[test]
fn long_host() {
    let long = format!("{}.example.com", "a".repeat(300));
    let rules = [
        rule(exact(&long), path("/exact")),
        rule(wild(".example.com"), pfx("/")),
    ];
    let shouting = long.to_ascii_uppercase();
    assert_eq!(lookup(&rules, &req(&shouting, "/exact")), Some(0));
    assert_eq!(
        lookup(&rules, &req(&format!("{shouting}:1"), "/other")),
        Some(1)
    );
}

#[test]
fn ipv6_literal_host() {
    let rules = [
        rule(exact("[::1]"), pfx("/v6")),
        rule(exact("127.0.0.1"), pfx("/")),
    ];
    assert_eq!(lookup(&rules, &req("[::1]:8080", "/v6/x")), Some(0));
    assert_eq!(lookup(&rules, &req("[::1]", "/v6")), Some(0));
    assert_eq!(lookup(&rules, &req("[::1]:8080", "/other")), None);
    assert_eq!(lookup(&rules, &req("127.0.0.1:9000", "/")), Some(1));
    // A host that needs no port stripping must not lose its last group.
    assert_eq!(lookup(&rules, &req("[::2]:8080", "/v6")), None);
}

#[test]
fn wildcard_host() {
    let rules = [rule(wild(".example.com"), pfx("/"))];
    assert_eq!(lookup(&rules, &req("a.example.com", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("a.b.example.com", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("A.B.Example.Com:80", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("example.com", "/")), None);
    assert_eq!(lookup(&rules, &req("aexample.com", "/")), None);
    assert_eq!(lookup(&rules, &req("a.example.com.evil", "/")), None);
}

#[test]
fn wildcard_longest_suffix_first() {
    let rules = [
        rule(wild(".example.com"), pfx("/")),
        rule(wild(".b.example.com"), pfx("/")),
    ];
    assert_eq!(lookup(&rules, &req("a.b.example.com", "/")), Some(1));
    assert_eq!(lookup(&rules, &req("a.c.example.com", "/")), Some(0));
    // Longest suffix wins even against a higher priority on a shorter one.
    let mut rules = rules;
    rules[0].priority = 100;
    assert_eq!(lookup(&rules, &req("x.b.example.com", "/")), Some(1));
}

#[test]
fn undotted_suffix_keys_behave_like_the_reference() {
    // `Suffix` without a leading dot is plain `ends_with`; not produced by
    // config validation, but the router must still agree.
    let rules = [
        rule(wild("ample.com"), pfx("/")),
        rule(wild(""), pfx("/only-empty")),
        rule(wild(".com"), pfx("/dot")),
    ];
    assert_eq!(lookup(&rules, &req("example.com", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("x.org", "/only-empty")), Some(1));
    assert_eq!(lookup(&rules, &req("x.com", "/dot")), Some(2));
    assert_eq!(lookup(&rules, &req("example.com", "/dot")), Some(0));
}

#[test]
fn exact_path() {
    let rules = [rule(any(), path("/health"))];
    assert_eq!(lookup(&rules, &req("h", "/health")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/health/")), None);
    assert_eq!(lookup(&rules, &req("h", "/healt")), None);
    assert_eq!(lookup(&rules, &req("h", "/HEALTH")), None);
}

#[test]
fn prefix_path_is_a_byte_prefix() {
    let rules = [rule(any(), pfx("/api"))];
    assert_eq!(lookup(&rules, &req("h", "/api")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/api/v1")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/apix")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/ap")), None);
    assert_eq!(lookup(&rules, &req("h", "/API")), None);
    let root = [rule(any(), pfx(""))];
    assert_eq!(lookup(&root, &req("h", "")), Some(0));
    assert_eq!(lookup(&root, &req("h", "anything")), Some(0));
}

#[test]
fn longest_prefix_wins_on_equal_priority() {
    let rules = [
        rule(any(), pfx("/")),
        rule(any(), pfx("/api/v1")),
        rule(any(), pfx("/api")),
        rule(any(), pfx("/api/v2")),
    ];
    assert_eq!(lookup(&rules, &req("h", "/api/v1/users")), Some(1));
    assert_eq!(lookup(&rules, &req("h", "/api/v2")), Some(3));
    assert_eq!(lookup(&rules, &req("h", "/api/v3")), Some(2));
    assert_eq!(lookup(&rules, &req("h", "/about")), Some(0));
}

#[test]
fn regex_path_uses_leftmost_match_length() {
    let rules = [
        rule(any(), re("^/users/[0-9]+$")),
        rule(any(), pfx("/users/")),
        rule(any(), re("[0-9]+")),
    ];
    // Regex 0 matches the whole 10-byte path: longer than the 7-byte prefix.
    assert_eq!(lookup(&rules, &req("h", "/users/123")), Some(0));
    // Regex 0 fails; rule 2 matches "12" (2 bytes) < prefix (7 bytes).
    assert_eq!(lookup(&rules, &req("h", "/users/12x")), Some(1));
    // Leftmost match "1" (1 byte) beats nothing else.
    assert_eq!(lookup(&rules, &req("h", "/v1/x22222")), Some(2));
    assert_eq!(lookup(&rules, &req("h", "/nothing")), None);
}

#[test]
fn exact_beats_shorter_prefix_and_ties_by_order() {
    let rules = [
        rule(any(), pfx("/a")),
        rule(any(), path("/a")),
        rule(any(), pfx("/")),
    ];
    // Same length (2): declaration order.
    assert_eq!(lookup(&rules, &req("h", "/a")), Some(0));
    let rules = [rule(any(), path("/a")), rule(any(), pfx("/a"))];
    assert_eq!(lookup(&rules, &req("h", "/a")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/ab")), Some(1));
}

#[test]
fn methods() {
    let mut r = rule(any(), pfx("/"));
    r.matcher.methods = vec![Method::GET, Method::HEAD];
    let mut ext = rule(any(), pfx("/"));
    ext.matcher.methods = vec![Method::from_bytes(b"PURGE").unwrap()];
    let rules = [r, ext];
    assert_eq!(lookup(&rules, &req("h", "/")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/").method(Method::HEAD)), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/").method(Method::POST)), None);
    let purge = Method::from_bytes(b"PURGE").unwrap();
    assert_eq!(lookup(&rules, &req("h", "/").method(purge)), Some(1));
    let other = Method::from_bytes(b"PURGEX").unwrap();
    assert_eq!(lookup(&rules, &req("h", "/").method(other)), None);
}

#[test]
fn headers_with_multiple_values() {
    let mut r = rule(any(), pfx("/"));
    r.matcher.headers = vec![
        (
            HeaderName::from_static("x-env"),
            HeaderValue::from_static("canary"),
        ),
        (
            HeaderName::from_static("x-team"),
            HeaderValue::from_static("blue"),
        ),
    ];
    let rules = [r, rule(any(), path("/fallback"))];
    let ok = req("h", "/")
        .header("x-env", "canary")
        .header("x-team", "blue");
    assert_eq!(lookup(&rules, &ok), Some(0));
    // Any of several values of the same header will do.
    let multi = req("h", "/")
        .header("x-env", "prod")
        .header("x-env", "canary")
        .header("x-team", "blue");
    assert_eq!(lookup(&rules, &multi), Some(0));
    // All listed headers are required; values compare exactly.
    assert_eq!(
        lookup(&rules, &req("h", "/").header("x-env", "canary")),
        None
    );
    let wrong_case = req("h", "/")
        .header("x-env", "Canary")
        .header("x-team", "blue");
    assert_eq!(lookup(&rules, &wrong_case), None);
}

#[test]
fn query_present_absent_empty() {
    let mut r = rule(any(), pfx("/"));
    r.matcher.query = vec![("debug".to_owned(), "1".to_owned())];
    let mut empty = rule(any(), pfx("/"));
    empty.matcher.query = vec![("flag".to_owned(), String::new())];
    let rules = [r, empty];
    assert_eq!(lookup(&rules, &req("h", "/").query("a=b&debug=1")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/").query("debug=2")), None);
    assert_eq!(lookup(&rules, &req("h", "/").query("debug")), None);
    assert_eq!(lookup(&rules, &req("h", "/")), None);
    assert_eq!(lookup(&rules, &req("h", "/").query("")), None);
    // Empty expected value: `flag` or `flag=`.
    assert_eq!(lookup(&rules, &req("h", "/").query("flag")), Some(1));
    assert_eq!(lookup(&rules, &req("h", "/").query("x=1&flag=")), Some(1));
    assert_eq!(lookup(&rules, &req("h", "/").query("flag=on")), None);
}

#[test]
fn source_cidrs_v4_and_v6() {
    let mut v4 = rule(any(), pfx("/"));
    v4.matcher.source_cidrs = vec![net("10.0.0.0/8"), net("192.168.1.0/24")];
    let mut v6 = rule(any(), pfx("/"));
    v6.matcher.source_cidrs = vec![net("2001:db8::/32")];
    // More networks than the inline list holds: goes through a CidrSet.
    let mut many = rule(any(), pfx("/many"));
    many.matcher.source_cidrs = (0..20).map(|i| net(&format!("172.{i}.0.0/16"))).collect();
    many.matcher.source_cidrs.push(net("fd00::/8"));
    many.priority = 1;
    let rules = [v4, v6, many];
    assert_eq!(lookup(&rules, &req("h", "/").ip("10.1.2.3")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/").ip("192.168.1.77")), Some(0));
    assert_eq!(lookup(&rules, &req("h", "/").ip("192.168.2.1")), None);
    assert_eq!(lookup(&rules, &req("h", "/").ip("2001:db8::1")), Some(1));
    assert_eq!(lookup(&rules, &req("h", "/").ip("2001:db9::1")), None);
    // An IPv4-mapped IPv6 address is not in an IPv4 network.
    assert_eq!(lookup(&rules, &req("h", "/").ip("::ffff:10.0.0.1")), None);
    assert_eq!(lookup(&rules, &req("h", "/many").ip("172.19.3.4")), Some(2));
    assert_eq!(lookup(&rules, &req("h", "/many").ip("fd12::1")), Some(2));
    assert_eq!(lookup(&rules, &req("h", "/many").ip("172.20.0.1")), None);
}

#[test]
fn priority_beats_length_and_order() {
    let mut low = rule(any(), pfx("/api/v1/users"));
    low.priority = -5;
    let mut high = rule(any(), pfx("/"));
    high.priority = 10;
    let mut high_later = rule(any(), pfx("/api"));
    high_later.priority = 10;
    let rules = [low.clone(), high.clone()];
    assert_eq!(lookup(&rules, &req("h", "/api/v1/users/7")), Some(1));
    // Equal priority: longest match.
    let rules = [low, high, high_later];
    assert_eq!(lookup(&rules, &req("h", "/api/v1/users/7")), Some(2));
}

#[test]
fn declaration_order_breaks_full_ties() {
    let rules = [
        rule(any(), pfx("/x")),
        rule(any(), pfx("/x")),
        rule(any(), re("^/x")),
        rule(any(), path("/x")),
    ];
    assert_eq!(lookup(&rules, &req("h", "/x")), Some(0));
    let rules = [rule(any(), re("^/x")), rule(any(), pfx("/x"))];
    assert_eq!(lookup(&rules, &req("h", "/x")), Some(0));
}

#[test]
fn higher_priority_rule_with_failing_predicate_is_skipped() {
    let mut gated = rule(any(), pfx("/api"));
    gated.priority = 5;
    gated.matcher.methods = vec![Method::POST];
    let rules = [gated, rule(any(), pfx("/api")), rule(any(), pfx("/"))];
    assert_eq!(lookup(&rules, &req("h", "/api/x")), Some(1));
    assert_eq!(
        lookup(&rules, &req("h", "/api/x").method(Method::POST)),
        Some(0)
    );
}

#[test]
fn disabled_rules_never_match() {
    let mut off = rule(exact("a.com"), pfx("/"));
    off.enabled = false;
    off.priority = 100;
    let rules = [off, rule(any(), pfx("/"))];
    assert_eq!(lookup(&rules, &req("a.com", "/")), Some(1));
    let mut off_re = rule(any(), re("."));
    off_re.enabled = false;
    assert_eq!(lookup(&[off_re], &req("a.com", "/")), None);
}

#[test]
fn tier_fall_through() {
    let mut host_post = rule(exact("a.example.com"), pfx("/"));
    host_post.matcher.methods = vec![Method::POST];
    let mut wild_hdr = rule(wild(".example.com"), pfx("/"));
    wild_hdr.matcher.headers = vec![(
        HeaderName::from_static("x-a"),
        HeaderValue::from_static("1"),
    )];
    let mut any_low = rule(any(), pfx("/"));
    any_low.priority = -100;
    let rules = [host_post, wild_hdr, any_low];
    let r = |m: Method| req("a.example.com", "/").method(m);
    // Exact host tier wins when its rule holds, even at lower priority.
    assert_eq!(lookup(&rules, &r(Method::POST).header("x-a", "1")), Some(0));
    // Exact tier fails → wildcard tier.
    assert_eq!(lookup(&rules, &r(Method::GET).header("x-a", "1")), Some(1));
    // Both fail → rules without a host.
    assert_eq!(lookup(&rules, &r(Method::GET)), Some(2));
    // A host tier whose path does not match falls through too.
    let rules = [rule(exact("a.com"), path("/only")), rule(any(), pfx("/"))];
    assert_eq!(lookup(&rules, &req("a.com", "/other")), Some(1));
    assert_eq!(lookup(&rules, &req("a.com", "/only")), Some(0));
}

#[test]
fn many_hosts_and_prefixes() {
    let mut rules = Vec::new();
    for h in 0..200 {
        for p in 0..5 {
            rules.push(rule(
                exact(&format!("h{h}.example.com")),
                pfx(&format!("/svc{p}/")),
            ));
        }
    }
    rules.push(rule(any(), pfx("/")));
    let router = Router::build(rules.clone());
    for (host, p, want) in [
        ("h17.example.com", "/svc3/x", Some(17 * 5 + 3)),
        ("H199.EXAMPLE.COM:8443", "/svc0/", Some(199 * 5)),
        ("h17.example.com", "/svc9/x", Some(1000)),
        ("nope.example.com", "/svc1/x", Some(1000)),
    ] {
        let r = req(host, p);
        assert_eq!(router.lookup(&r.view()), want, "{host}{p}");
        assert_eq!(linear_lookup(&rules, &r.view()), want);
    }
}

// ------------------------------------------------------------- randomized

const HOSTS: &[&str] = &[
    "example.com",
    "a.example.com",
    "b.a.example.com",
    "api.example.org",
    "[::1]",
    "127.0.0.1",
    "x",
    "",
    "ample.com",
    ".example.com",
];
const SUFFIXES: &[&str] = &[
    ".example.com",
    ".a.example.com",
    ".com",
    ".org",
    "ample.com",
    "",
    ".",
    ".Example.com",
];
const PATHS: &[&str] = &[
    "",
    "/",
    "/a",
    "/ab",
    "/a/b",
    "/a/b/c",
    "/api",
    "/api/v1",
    "/api/v1/users",
    "/api/v2/",
    "/x%20y",
    "/é",
    "/users/42",
];
const REGEXES: &[&str] = &[
    "^/a",
    "b",
    "^/api/v[0-9]+",
    "[0-9]+$",
    "^$",
    "x*",
    "/(a|ab)",
];
const HEADERS: &[(&str, &str)] = &[("x-a", "1"), ("x-a", "2"), ("x-b", "yes")];
const QUERIES: &[(&str, &str)] = &[("debug", "1"), ("flag", ""), ("debug", "")];
const RAW_QUERIES: &[&str] = &["debug=1", "flag", "flag=&debug=1", "debug=", "a=b", ""];
const NETS: &[&str] = &[
    "10.0.0.0/8",
    "10.1.0.0/16",
    "0.0.0.0/0",
    "192.168.0.1/32",
    "2001:db8::/32",
    "::/0",
    "10.9.9.9/8",
];
const IPS: &[&str] = &[
    "10.1.2.3",
    "10.2.0.1",
    "192.168.0.1",
    "8.8.8.8",
    "2001:db8::5",
    "::1",
];
const METHODS: &[&str] = &["GET", "POST", "HEAD", "PURGE"];

fn pick<T: Copy>(rng: &mut fastrand::Rng, xs: &[T]) -> T {
    xs[rng.usize(..xs.len())]
}

fn random_case(rng: &mut fastrand::Rng, s: &str) -> String {
    s.chars()
        .map(|c| {
            if rng.bool() {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

fn random_rule(rng: &mut fastrand::Rng) -> RuleSpec {
    let host = match rng.u8(..10) {
        0..=2 => HostMatch::Any,
        3..=6 => {
            let h = pick(rng, HOSTS);
            // Occasionally an upper-case rule host (never matches).
            HostMatch::Exact(if rng.u8(..20) == 0 {
                h.to_ascii_uppercase()
            } else {
                h.to_string()
            })
        }
        _ => HostMatch::Suffix(pick(rng, SUFFIXES).to_string()),
    };
    let path = match rng.u8(..10) {
        0..=2 => PathMatch::Exact(pick(rng, PATHS).to_string()),
        3..=7 => PathMatch::Prefix(pick(rng, PATHS).to_string()),
        _ => PathMatch::Regex(Regex::new(pick(rng, REGEXES)).unwrap()),
    };
    let mut m = MatchSpec {
        host,
        path,
        ..MatchSpec::default()
    };
    if rng.u8(..4) == 0 {
        m.methods = (0..rng.usize(1..3))
            .map(|_| Method::from_bytes(pick(rng, METHODS).as_bytes()).unwrap())
            .collect();
    }
    if rng.u8(..4) == 0 {
        m.headers = (0..rng.usize(1..3))
            .map(|_| {
                let (k, v) = pick(rng, HEADERS);
                (HeaderName::from_static(k), HeaderValue::from_static(v))
            })
            .collect();
    }
    if rng.u8(..5) == 0 {
        let (k, v) = pick(rng, QUERIES);
        m.query = vec![(k.to_string(), v.to_string())];
    }
    if rng.u8(..5) == 0 {
        // Sometimes past the inline-list limit, to exercise the CidrSet path.
        let n = if rng.bool() {
            rng.usize(1..3)
        } else {
            rng.usize(9..12)
        };
        m.source_cidrs = (0..n).map(|_| net(pick(rng, NETS))).collect();
    }
    RuleSpec {
        matcher: m,
        priority: rng.i32(-1..=1),
        enabled: rng.u8(..10) != 0,
    }
}

fn random_request(rng: &mut fastrand::Rng) -> Req {
    let host = match rng.u8(..10) {
        0 => format!("zz.{}", pick(rng, HOSTS)),
        1 => "unknown.net".to_owned(),
        _ => pick(rng, HOSTS).to_string(),
    };
    let mut host = random_case(rng, &host);
    if rng.u8(..3) == 0 {
        host.push_str(":8080");
    }
    let mut path = pick(rng, PATHS).to_string();
    if rng.bool() {
        path.push_str(pick(rng, &["", "/", "x", "/1", "b", "/v1"]));
    }
    let mut r =
        req(&host, &path).method(Method::from_bytes(pick(rng, METHODS).as_bytes()).unwrap());
    for _ in 0..rng.usize(..3) {
        let (k, v) = pick(rng, HEADERS);
        r.headers
            .append(HeaderName::from_static(k), HeaderValue::from_static(v));
    }
    if rng.bool() {
        r = r.query(pick(rng, RAW_QUERIES));
    }
    r.ip(pick(rng, IPS))
}

#[test]
fn randomized_differential_against_linear_lookup() {
    let mut rng = fastrand::Rng::with_seed(0x0068_6f70_6761_7465);
    let mut matched = 0usize;
    let mut total = 0usize;
    for set in 0..3000 {
        let n = rng.usize(1..=if set % 10 == 0 { 80 } else { 16 });
        let rules: Vec<RuleSpec> = (0..n).map(|_| random_rule(&mut rng)).collect();
        let router = Router::build(rules.clone());
        assert_eq!(router.len(), n);
        for _ in 0..40 {
            let r = random_request(&mut rng);
            let view = r.view();
            let want = linear_lookup(&rules, &view);
            let got = router.lookup(&view);
            assert_eq!(
                got, want,
                "set {set}: host {:?} path {:?} query {:?} method {} ip {} headers {:?}\nrules: {rules:#?}",
                r.host, r.path, r.query, r.method, r.ip, r.headers
            );
            total += 1;
            matched += usize::from(want.is_some());
        }
    }
    // The generator must exercise both outcomes substantially.
    assert!(
        matched > total / 5 && matched < total * 4 / 5,
        "{matched}/{total}"
    );
}

#[test]
fn host_without_port_matches_its_original_definition() {
    // The definition `host_without_port` had before it was made one-pass.
    fn original(host: &str) -> &str {
        if let Some(rest) = host.strip_prefix('[') {
            return match rest.find(']') {
                Some(end) => &host[..end + 2],
                None => host,
            };
        }
        match host.rfind(':') {
            Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &host[..i],
            _ => host,
        }
    }
    let alphabet = ['a', '1', ':', '[', ']', '.', 'é'];
    let mut rng = fastrand::Rng::with_seed(5);
    for _ in 0..20_000 {
        let s: String = (0..rng.usize(..8))
            .map(|_| alphabet[rng.usize(..alphabet.len())])
            .collect();
        assert_eq!(super::host_without_port(&s), original(&s), "{s:?}");
    }
    for s in [
        "", ":", "a:", "a:1", "a:1:2", "::1", "[::1]:80", "[::1", "1:2a", "é:9",
    ] {
        assert_eq!(super::host_without_port(s), original(s), "{s:?}");
    }
}
