//! Reload cost: parse + validate + compile a config of N rules, and the
//! atomic swap readers see. The budget: compiling and swapping a 10,000-rule
//! config < 100 ms.

use std::sync::Arc;

use arc_swap::ArcSwap;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use hopgate_core::config::{load, Format};
use hopgate_core::node::NodeRegistry;
use hopgate_core::snapshot::Snapshot;

fn config_text(rules: usize) -> String {
    let mut s = String::from("listeners: [ { name: p, address: 127.0.0.1:8080 } ]\nservices:\n");
    for svc in 0..10 {
        s.push_str(&format!(
            "  - name: svc{svc}\n    nodes:\n      - {{ id: a, address: 127.0.0.1:{}, version: v1 }}\n      - {{ id: b, address: 127.0.0.1:{}, version: v2 }}\n",
            9000 + svc * 2,
            9001 + svc * 2
        ));
    }
    s.push_str("routes:\n");
    for r in 0..rules {
        let host = r % 1000;
        let svc = r % 10;
        match r % 10 {
            0 => s.push_str(&format!("  - {{ id: r{r}, match: {{ host: h{host}.example.com, path_regex: \"^/v[0-9]+/items/{r}$\" }}, service: svc{svc} }}\n")),
            1 => s.push_str(&format!("  - {{ id: r{r}, priority: 10, match: {{ host: h{host}.example.com, path_prefix: /api/{r}, headers: {{ X-Canary: \"1\" }} }}, service: svc{svc}, version: v2 }}\n")),
            2 => s.push_str(&format!("  - {{ id: r{r}, match: {{ host: \"*.w{host}.example.com\", path_prefix: /w/{r} }}, service: svc{svc}, split: [ {{ version: v1, weight: 90 }}, {{ version: v2, weight: 10 }} ] }}\n")),
            3 => s.push_str(&format!("  - {{ id: r{r}, match: {{ path: /exact/{r}, methods: [GET, POST], source_cidrs: [10.{}.0.0/16] }}, service: svc{svc} }}\n", r % 250)),
            _ => s.push_str(&format!("  - {{ id: r{r}, match: {{ host: h{host}.example.com, path_prefix: /p/{r} }}, service: svc{svc} }}\n")),
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("reload");
    g.sample_size(10);
    for rules in [1_000usize, 10_000] {
        let text = config_text(rules);
        let registry = NodeRegistry::new();
        let first = load(&text, Format::Yaml).expect("bench config is valid");
        let live = ArcSwap::from_pointee(Snapshot::compile(Arc::new(first), 1, &registry, None));
        g.bench_with_input(
            BenchmarkId::new("parse_validate_compile_swap", rules),
            &text,
            |b, text| {
                let mut v = 2;
                b.iter(|| {
                    let cfg = load(text, Format::Yaml).unwrap();
                    let prev = live.load_full();
                    let snap = Snapshot::compile(Arc::new(cfg), v, &registry, Some(&prev));
                    // What the writer does as it swaps a snapshot in.
                    snap.configure_nodes();
                    live.store(Arc::new(snap));
                    v += 1;
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("parse_only", rules), &text, |b, text| {
            b.iter(|| hopgate_core::config::parse(text, Format::Yaml).unwrap())
        });
        let raw = hopgate_core::config::parse(&text, Format::Yaml).unwrap();
        let json = serde_json::to_string(&raw).unwrap();
        g.bench_with_input(
            BenchmarkId::new("parse_only_json", rules),
            &json,
            |b, text| b.iter(|| hopgate_core::config::parse(text, Format::Json).unwrap()),
        );
        g.bench_with_input(BenchmarkId::new("validate_only", rules), &raw, |b, raw| {
            b.iter(|| hopgate_core::config::validate(raw).unwrap())
        });
        let cfg = Arc::new(load(&text, Format::Yaml).unwrap());
        g.bench_with_input(BenchmarkId::new("compile_only", rules), &cfg, |b, cfg| {
            b.iter(|| Snapshot::compile(Arc::clone(cfg), 2, &registry, None))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
