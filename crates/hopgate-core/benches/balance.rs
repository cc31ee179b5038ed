//! One pick per balancing policy, over groups of 3 and 50 nodes, all
//! available and idle (the fast path); plus the build cost per policy
//! (what a reload pays per group).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use hopgate_core::balance::{hash_key, Balancer, Member, PickCtx};
use hopgate_core::config::LbPolicy;
use hopgate_core::node::{NodeKey, NodeState};

const POLICIES: [(&str, LbPolicy); 5] = [
    ("wrr_ring", LbPolicy::WrrRing),
    ("smooth_wrr", LbPolicy::SmoothWrr),
    ("random", LbPolicy::Random),
    ("p2c", LbPolicy::P2c),
    ("hash", LbPolicy::Hash),
];

fn members(n: usize) -> Vec<Member> {
    (0..n)
        .map(|i| Member {
            state: Arc::new(NodeState::new(NodeKey {
                service: "bench".into(),
                node: format!("node-{i}"),
            })),
            weight: (i as u32 % 5 + 1) * 10,
        })
        .collect()
}

fn pick(c: &mut Criterion) {
    let keys: Vec<u64> = (0..1024u32).map(|k| hash_key(&k.to_le_bytes())).collect();
    let mut group = c.benchmark_group("pick");
    for n in [3, 50] {
        for (name, policy) in POLICIES {
            let b = Balancer::build(policy, members(n), None);
            let mut k = 0;
            group.bench_function(format!("{name}/{n}"), |bench| {
                bench.iter(|| {
                    k = (k + 1) & 1023;
                    let ctx = PickCtx {
                        now_ms: 1_000,
                        hash: Some(keys[k]),
                        exclude: &[],
                    };
                    black_box(b.pick(black_box(&ctx)))
                })
            });
        }
    }
    group.finish();
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    for (name, policy) in POLICIES {
        let m = members(50);
        group.bench_function(format!("{name}/50"), |bench| {
            bench.iter(|| black_box(Balancer::build(policy, m.clone(), None)))
        });
    }
    group.finish();
}

criterion_group!(benches, pick, build);
criterion_main!(benches);
