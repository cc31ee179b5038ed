//! Token costs on the request path: minting a new session's token, verifying
//! a valid one (current key, and a previous key after a rotation), and
//! rejecting a forged or malformed one.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use hopgate_core::session::{mint, verify, SessionId, SessionKeys};

const NOW: u64 = 1_700_000_000;
const TTL: u64 = 86_400;

fn tokens(c: &mut Criterion) {
    let keys = SessionKeys::from_secrets(b"bench secret, 32 bytes or more....", &[]);
    let rotated =
        SessionKeys::from_secrets(b"new secret", &[b"bench secret, 32 bytes or more...."]);
    let id = SessionId::from_bytes([0x5a; 16]);
    let valid = mint(&keys, id, NOW);
    // Same length and alphabet, last MAC character changed.
    let mut forged = valid.clone().into_bytes();
    let last = forged.len() - 1;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).expect("ascii token");
    let malformed = "not a token";

    let mut group = c.benchmark_group("session_token");
    group.bench_function("mint", |b| {
        b.iter(|| mint(black_box(&keys), black_box(id), black_box(NOW)))
    });
    group.bench_function("session_id_random", |b| b.iter(SessionId::random));
    group.bench_function("verify_valid", |b| {
        b.iter(|| verify(black_box(&keys), black_box(&valid), NOW, TTL))
    });
    group.bench_function("verify_valid_previous_key", |b| {
        b.iter(|| verify(black_box(&rotated), black_box(&valid), NOW, TTL))
    });
    group.bench_function("verify_forged", |b| {
        b.iter(|| verify(black_box(&keys), black_box(&forged), NOW, TTL))
    });
    group.bench_function("verify_malformed", |b| {
        b.iter(|| verify(black_box(&keys), black_box(malformed), NOW, TTL))
    });
    group.finish();
}

criterion_group!(benches, tokens);
criterion_main!(benches);
