//! `hopgate validate`: every broken config in tests/configs/broken names
//! its field path and exits 1; every example exits 0.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::BIN;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn broken_configs_name_their_field_and_exit_1() {
    let dir = repo().join("tests/configs/broken");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect:"))
            .unwrap_or_else(|| panic!("{} has no '# expect:' line", path.display()))
            .trim()
            .to_owned();
        let out = Command::new(BIN)
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{} must be rejected",
            path.display()
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&expect),
            "{}: expected {expect:?} in:\n{stderr}",
            path.display()
        );
        assert!(!stderr.contains("panicked"), "{}", path.display());
        n += 1;
    }
    assert!(n >= 30, "the corpus has {n} files; want at least 30");
}

#[test]
fn examples_are_valid() {
    let dir = repo().join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if !matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "json")
        ) {
            continue;
        }
        let out = Command::new(BIN)
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
        n += 1;
    }
    assert!(n >= 3);
}

#[test]
fn missing_file_is_a_clear_error() {
    let out = Command::new(BIN)
        .args(["validate", "/nonexistent/hopgate.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn help_everywhere() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["validate", "--help"],
        &["demo", "--help"],
        &["backend", "--help"],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{args:?}"
        );
    }
}
