//! Route lookup cost at 10, 1,000 and 10,000 rules, hits and misses.
//!
//! Owns the synthetic rule sets and request mixes; must not touch anything
//! but the public routing API. The mix per 10 rules: 8 rules on one exact
//! host (prefixes, an exact path, a header-gated canary prefix with higher
//! priority, a method-gated prefix, a source-CIDR-gated prefix or, on every
//! fourth host, a regex), 1 wildcard-host rule (`*.tN.example.net`, 100
//! rules per wildcard tier) and 1 rule without a host (its prefixes pile up
//! in one tier: 1,000 of them at 10,000 rules).
//!
//! Run: `cargo bench -p hopgate-core --bench route_lookup -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hopgate_core::route::{
    linear_lookup, HostMatch, MatchSpec, PathMatch, RequestView, Router, RuleSpec,
};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use regex::Regex;

/// Requests per mix; a power of two, cycled through by the benchmark loop.
const MIX: usize = 1024;

fn rules(n: usize) -> Vec<RuleSpec> {
    (0..n)
        .map(|i| {
            let host = i / 10;
            let mut m = MatchSpec {
                host: HostMatch::Exact(format!("svc{host}.example.com")),
                ..MatchSpec::default()
            };
            let mut priority = 0;
            m.path = match i % 10 {
                0 => PathMatch::Prefix("/api/v1/".into()),
                1 => {
                    priority = 10;
                    m.headers = vec![(
                        HeaderName::from_static("x-canary"),
                        HeaderValue::from_static("always"),
                    )];
                    PathMatch::Prefix("/api/v2/".into())
                }
                2 => PathMatch::Prefix("/api/v2/".into()),
                3 => PathMatch::Prefix("/static/".into()),
                4 => PathMatch::Exact("/health".into()),
                5 => {
                    m.methods = vec![Method::GET, Method::HEAD];
                    PathMatch::Prefix("/users/".into())
                }
                6 if host % 4 == 0 => {
                    PathMatch::Regex(Regex::new("^/users/[0-9]+/orders$").unwrap())
                }
                6 => {
                    m.source_cidrs = vec!["10.0.0.0/8".parse().unwrap()];
                    PathMatch::Prefix("/admin/".into())
                }
                7 => PathMatch::Prefix("/".into()),
                8 => {
                    m.host = HostMatch::Suffix(format!(".t{}.example.net", i / 100));
                    PathMatch::Prefix(format!("/app/{}/", host % 10))
                }
                _ => {
                    m.host = HostMatch::Any;
                    PathMatch::Prefix(format!("/.well-known/{host}/"))
                }
            };
            RuleSpec {
                matcher: m,
                priority,
                enabled: true,
            }
        })
        .collect()
}

struct Req {
    host: String,
    path: String,
    query: Option<String>,
    method: Method,
    headers: HeaderMap,
    ip: IpAddr,
}

impl Req {
    fn new(host: String, path: &str) -> Req {
        Req {
            host,
            path: path.to_owned(),
            query: Some("page=2&sort=asc".to_owned()),
            method: Method::GET,
            headers: HeaderMap::new(),
            ip: "192.0.2.7".parse().unwrap(),
        }
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

/// Requests that match a rule, spread over every host of the set.
fn hits(n: usize, rng: &mut fastrand::Rng) -> Vec<Req> {
    let hosts = n.div_ceil(10);
    (0..MIX)
        .map(|k| {
            let h = rng.usize(..hosts);
            match k % 6 {
                0 => Req::new(format!("svc{h}.example.com"), "/api/v1/items/42"),
                1 => {
                    let mut r = Req::new(format!("SVC{h}.Example.com:8443"), "/api/v2/things");
                    r.headers
                        .insert("x-canary", HeaderValue::from_static("always"));
                    r.headers
                        .insert("user-agent", HeaderValue::from_static("bench"));
                    r
                }
                2 => Req::new(format!("svc{}.example.com", h - h % 4), "/users/123/orders"),
                3 => Req::new(format!("svc{h}.example.com"), "/health"),
                4 => Req::new(
                    format!("a.t{}.example.net", h / 10),
                    &format!("/app/{}/x", h % 10),
                ),
                _ => Req::new(format!("svc{h}.example.com"), "/static/css/site.css"),
            }
        })
        .collect()
}

/// Requests that match nothing: unknown hosts, and wildcard hosts whose
/// path falls through every tier.
fn misses(n: usize, rng: &mut fastrand::Rng) -> Vec<Req> {
    let hosts = n.div_ceil(10);
    (0..MIX)
        .map(|k| {
            let h = rng.usize(..hosts);
            match k % 3 {
                0 => Req::new(format!("unknown{h}.example.org"), "/api/v1/items/42"),
                1 => Req::new(format!("b.t{}.example.net", h / 10), "/nothing/here"),
                _ => Req::new(format!("svc{h}.example.com.evil.io"), "/.well-known/x"),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut group = c.benchmark_group("route_lookup");
    for n in [10usize, 1_000, 10_000] {
        let specs = rules(n);
        let router = Router::build(specs.clone());
        for (kind, reqs) in [("hit", hits(n, &mut rng)), ("miss", misses(n, &mut rng))] {
            // The mixes are what they claim, and the router agrees with the reference.
            for r in &reqs {
                let got = router.lookup(&r.view());
                assert_eq!(got.is_some(), kind == "hit", "{} {}", r.host, r.path);
                assert_eq!(got, linear_lookup(&specs, &r.view()));
            }
            group.bench_with_input(BenchmarkId::new(kind, n), &reqs, |b, reqs| {
                let mut i = 0usize;
                b.iter(|| {
                    i = i.wrapping_add(1);
                    black_box(router.lookup(&reqs[i % MIX].view()))
                });
            });
            if n <= 1_000 && kind == "hit" {
                group.bench_with_input(BenchmarkId::new("linear_hit", n), &reqs, |b, reqs| {
                    let mut i = 0usize;
                    b.iter(|| {
                        i = i.wrapping_add(1);
                        black_box(linear_lookup(&specs, &reqs[i % MIX].view()))
                    });
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
