//! The memory store's snapshot file: save → load keeps bindings; anything
//! wrong with the file gives an empty store and a warning, never a panic.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use hopgate_store::conformance::id;
use hopgate_store::{Binding, LoadWarning, MemoryStore, SessionStore};

const NOW: u64 = 1_700_000_000;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hopgate-store-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create temp dir");
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn sample_store() -> MemoryStore {
    let s = MemoryStore::default();
    for i in 0..1_000u64 {
        let mut b = Binding::new(
            format!("svc-{}", i % 3),
            format!("node-{}", i % 7),
            NOW - i,
            NOW + 60 + i,
        );
        b.hops = (i % 5) as u32;
        if i % 4 == 0 {
            b = b.with_context(format!("ctx-{i}").into_bytes());
        }
        if i % 100 == 1 {
            b = b.with_context(Vec::new());
        }
        s.put(id(i), b);
    }
    s
}

fn saved_sample(dir: &TempDir) -> PathBuf {
    let path = dir.path("sessions.snapshot");
    assert_eq!(sample_store().save(&path).expect("save"), 1_000);
    path
}

fn assert_empty_with(path: &Path, check: impl Fn(&LoadWarning) -> bool) {
    let (store, report) = MemoryStore::load(path, NOW);
    assert_eq!(store.len(), 0, "corrupt file loaded bindings");
    assert_eq!(report.loaded, 0);
    let w = report.warning.as_ref().expect("a warning for a bad file");
    assert!(check(w), "unexpected warning {w:?}");
    let msg = report.to_string();
    assert!(
        msg.contains("starting with an empty session store"),
        "{msg}"
    );
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn save_then_load_keeps_bindings() {
    let dir = TempDir::new();
    let original = sample_store();
    let path = dir.path("sessions.snapshot");
    assert_eq!(original.save(&path).expect("save"), 1_000);
    let (loaded, report) = MemoryStore::load(&path, NOW);
    assert_eq!(report.warning, None);
    assert!(!report.missing);
    assert_eq!(report.loaded, 1_000);
    assert_eq!(report.expired, 0);
    assert_eq!(loaded.len(), 1_000);
    for (sid, b) in original.iter_snapshot() {
        assert_eq!(loaded.get(&sid, NOW), Some(b), "binding {sid} changed");
    }
    assert_eq!(
        loaded.bindings_to("svc-0", "node-0"),
        original.bindings_to("svc-0", "node-0")
    );
    // No temporary file left behind.
    let leftovers: Vec<_> = fs::read_dir(&dir.0)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(
        leftovers,
        vec![std::ffi::OsString::from("sessions.snapshot")]
    );
    assert!(
        report.to_string().contains("loaded 1000 sessions"),
        "{report}"
    );
}

#[test]
fn load_skips_expired_and_respects_the_limit() {
    let dir = TempDir::new();
    let path = saved_sample(&dir);
    // Bindings i expire at NOW + 60 + i: at NOW + 560, 0..=500 are gone.
    let (store, report) = MemoryStore::load(&path, NOW + 560);
    assert_eq!(report.warning, None);
    assert_eq!(report.expired, 501);
    assert_eq!(report.loaded, 499);
    assert_eq!(store.len(), 499);
    assert_eq!(store.get(&id(500), NOW + 560), None);
    assert!(store.get(&id(501), NOW + 560).is_some());

    let (store, report) = MemoryStore::load_with_limit(&path, NOW, 100);
    assert_eq!(report.warning, None);
    assert_eq!((report.loaded, report.over_limit), (100, 900));
    assert_eq!(store.len(), 100);
    assert_eq!(store.max_sessions(), 100);
}

#[test]
fn save_replaces_an_existing_file_and_empty_round_trips() {
    let dir = TempDir::new();
    let path = saved_sample(&dir);
    let empty = MemoryStore::default();
    assert_eq!(empty.save(&path).expect("save over"), 0);
    let (store, report) = MemoryStore::load(&path, NOW);
    assert_eq!(report.warning, None);
    assert_eq!(store.len(), 0);
}

#[test]
fn missing_file_is_empty_without_warning() {
    let dir = TempDir::new();
    let (store, report) = MemoryStore::load(&dir.path("absent.snapshot"), NOW);
    assert_eq!(store.len(), 0);
    assert!(report.missing);
    assert_eq!(report.warning, None);
    assert!(report.to_string().contains("not found"), "{report}");
}

#[test]
fn garbage_is_not_a_session_file() {
    let dir = TempDir::new();
    let path = dir.path("garbage");
    fs::write(&path, b"{\"sessions\": [1, 2, 3]} this is not ours").expect("write");
    assert_empty_with(&path, |w| *w == LoadWarning::NotASessionFile);
    fs::write(&path, b"").expect("write");
    assert_empty_with(&path, |w| *w == LoadWarning::Truncated);
    fs::write(&path, fastrand_free_bytes(4096)).expect("write");
    assert_empty_with(&path, |w| *w == LoadWarning::NotASessionFile);
}

/// Deterministic pseudo-random bytes without a dependency.
fn fastrand_free_bytes(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn every_truncation_is_rejected() {
    let dir = TempDir::new();
    let path = saved_sample(&dir);
    let full = fs::read(&path).expect("read");
    let cut = dir.path("cut");
    let mut lens: Vec<usize> = (0..64).collect();
    lens.extend((64..full.len()).step_by(997));
    lens.push(full.len() - 1);
    for len in lens {
        fs::write(&cut, &full[..len]).expect("write");
        let (store, report) = MemoryStore::load(&cut, NOW);
        assert_eq!(store.len(), 0, "truncated at {len} loaded bindings");
        assert!(report.warning.is_some(), "truncated at {len}: no warning");
    }
}

#[test]
fn bad_checksum_is_rejected() {
    let dir = TempDir::new();
    let path = saved_sample(&dir);
    let full = fs::read(&path).expect("read");
    // A flipped bit in the body, then in the checksum itself.
    for pos in [20, full.len() / 2, full.len() - 40, full.len() - 1] {
        let mut bad = full.clone();
        bad[pos] ^= 0x10;
        fs::write(&path, &bad).expect("write");
        assert_empty_with(&path, |w| *w == LoadWarning::ChecksumMismatch);
    }
}

#[test]
fn wrong_version_is_rejected_with_a_clear_message() {
    let dir = TempDir::new();
    let path = saved_sample(&dir);
    let mut bytes = fs::read(&path).expect("read");
    bytes[8..12].copy_from_slice(&2u32.to_be_bytes());
    fs::write(&path, &bytes).expect("write");
    assert_empty_with(&path, |w| {
        *w == LoadWarning::UnsupportedVersion {
            found: 2,
            supported: 1,
        }
    });
    let (_, report) = MemoryStore::load(&path, NOW);
    assert!(
        report
            .to_string()
            .contains("unsupported session file version 2"),
        "{report}"
    );
}

#[test]
fn structurally_corrupt_body_with_a_valid_checksum_is_rejected() {
    use sha2::{Digest, Sha256};
    let dir = TempDir::new();
    let path = dir.path("forged");
    let seal = |body: Vec<u8>| {
        let mut out = body.clone();
        out.extend_from_slice(&Sha256::digest(&body));
        out
    };
    let header = |rest: &[u8]| {
        let mut v = b"HOPGSESS".to_vec();
        v.extend_from_slice(&1u32.to_be_bytes());
        v.extend_from_slice(rest);
        v
    };
    let binding_rec = |service: u32, node: u32, ctx_len: u32| {
        let mut r = vec![2u8];
        r.extend_from_slice(&[7u8; 16]);
        r.extend_from_slice(&NOW.to_be_bytes());
        r.extend_from_slice(&(NOW + 60).to_be_bytes());
        r.extend_from_slice(&0u32.to_be_bytes());
        r.extend_from_slice(&service.to_be_bytes());
        r.extend_from_slice(&node.to_be_bytes());
        r.extend_from_slice(&ctx_len.to_be_bytes());
        r
    };
    let name_rec = |name: &[u8]| {
        let mut r = vec![1u8];
        r.extend_from_slice(&(name.len() as u32).to_be_bytes());
        r.extend_from_slice(name);
        r
    };
    let end = |count: u64| {
        let mut r = vec![0u8];
        r.extend_from_slice(&count.to_be_bytes());
        r
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "undefined name",
            [binding_rec(0, 1, u32::MAX), end(1)].concat(),
        ),
        ("unknown tag", [vec![9u8], end(0)].concat()),
        (
            "huge name length",
            [
                name_rec(b"a")[..1].to_vec(),
                u32::MAX.to_be_bytes().to_vec(),
                end(0),
            ]
            .concat(),
        ),
        (
            "huge context length",
            [name_rec(b"a"), binding_rec(0, 0, 1 << 30), end(1)].concat(),
        ),
        ("non-UTF-8 name", [name_rec(b"\xff\xfe"), end(0)].concat()),
        (
            "count mismatch",
            [name_rec(b"a"), binding_rec(0, 0, u32::MAX), end(2)].concat(),
        ),
        ("trailing bytes", [end(0), vec![0u8; 3]].concat()),
        (
            "no end record",
            [name_rec(b"a"), name_rec(b"b"), name_rec(b"c")].concat(),
        ),
    ];
    for (what, rest) in cases {
        fs::write(&path, seal(header(&rest))).expect("write");
        let (store, report) = MemoryStore::load(&path, NOW);
        assert_eq!(store.len(), 0, "{what}: loaded bindings");
        assert!(
            matches!(report.warning, Some(LoadWarning::Corrupt { .. })),
            "{what}: {:?}",
            report.warning
        );
    }
    // The same hand-built format, well-formed, does load: the cases above
    // fail for the reason they name.
    let ok = [
        name_rec(b"svc"),
        name_rec(b"n1"),
        binding_rec(0, 1, 2),
        b"hi".to_vec(),
        end(1),
    ]
    .concat();
    fs::write(&path, seal(header(&ok))).expect("write");
    let (store, report) = MemoryStore::load(&path, NOW);
    assert_eq!(report.warning, None);
    let b = store
        .get(&hopgate_store::SessionId::from_bytes([7u8; 16]), NOW)
        .expect("hand-built binding");
    assert_eq!((&*b.service, &*b.node), ("svc", "n1"));
    assert_eq!(b.context.as_deref(), Some(&b"hi"[..]));
}

#[test]
fn unreadable_path_warns() {
    let dir = TempDir::new();
    // A directory where the file should be.
    let path = dir.path("is-a-dir");
    fs::create_dir(&path).expect("mkdir");
    assert_empty_with(&path, |w| matches!(w, LoadWarning::Unreadable(_)));
}

#[test]
fn save_into_a_missing_directory_fails_cleanly() {
    let dir = TempDir::new();
    let err = sample_store()
        .save(&dir.path("no/such/dir/sessions.snapshot"))
        .expect_err("save into a missing directory");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(
        sample_store().save(Path::new("/")).is_err(),
        "a path without a file name"
    );
}

#[test]
fn random_files_never_panic() {
    let dir = TempDir::new();
    let path = saved_sample(&dir);
    let full = fs::read(&path).expect("read");
    let noise = fastrand_free_bytes(full.len());
    let target = dir.path("fuzzed");
    // Keep the header, scramble slices of the rest.
    for (i, chunk) in noise.chunks(257).enumerate().take(40) {
        let mut bad = full.clone();
        let at = 12 + (i * 131) % (full.len() - 12 - chunk.len().min(full.len() - 12));
        let n = chunk.len().min(bad.len() - at);
        bad[at..at + n].copy_from_slice(&chunk[..n]);
        fs::write(&target, &bad).expect("write");
        let (store, report) = MemoryStore::load(&target, NOW);
        if report.warning.is_some() {
            assert_eq!(store.len(), 0);
        }
    }
}
