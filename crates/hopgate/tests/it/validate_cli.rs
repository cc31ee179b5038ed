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
        &["completions", "--help"],
        &["schema", "--help"],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Usage"),
            "{args:?}"
        );
    }
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// `hopgate -t -c FILE` checks like `nginx -t`; `validate -c` is the same
/// check; `-t` alone checks the embedded default.
#[test]
fn check_flag_and_config_flag() {
    let good = repo().join("examples/minimal.yaml");
    let bad = repo().join("tests/configs/broken/03-unknown-nested-field.yaml");
    let (good, bad) = (good.to_str().unwrap(), bad.to_str().unwrap());
    for args in [
        &["-t", "-c", good][..],
        &["--check", "--config", good],
        &["validate", "-c", good],
    ] {
        let out = run(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(": ok (1 listener,"),
            "{args:?}"
        );
    }
    let out = run(&["-t", "-c", bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("routes[0].match.hots"));
    let out = run(&["-t"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("embedded default: ok"));
    // A subcommand with -t is a usage error, not a silent run.
    assert_eq!(run(&["-t", "run"]).status.code(), Some(2));
}

/// Three typos in one file: all three reported, each with its guess, and
/// the file's other error too.
#[test]
fn every_unknown_field_is_reported_with_did_you_mean() {
    let dir = std::env::temp_dir().join(format!("hopgate-typos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("typos.yaml");
    std::fs::write(
        &f,
        "listeners: [{name: p, address: \"127.0.0.1:1\", debug_header: true}]\n\
         services: [{name: api, lb: p2c, nodes: [{id: a, adress: \"127.0.0.1:2\"}]}]\n\
         routes: [{id: r, match: {path_prefx: /}, service: nope}]\n",
    )
    .unwrap();
    let out = run(&["validate", f.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "listeners[0].debug_header: unknown field `debug_header` (did you mean `debug_headers`?)",
        "services[0].nodes[0].adress: unknown field `adress` (did you mean `address`?)",
        "routes[0].match.path_prefx: unknown field `path_prefx` (did you mean `path_prefix`?)",
        "routes[0].service: unknown service \"nope\"",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

/// `--version` names the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    let v = String::from_utf8_lossy(&out.stdout).into_owned();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    assert!(v.starts_with("hopgate ") && v.contains("(commit "), "{v}");
    if let Some(head) = head {
        assert!(v.contains(&head), "{v} should name {head}");
    }
}

/// The bash completion script is valid bash (checked by bash itself) and
/// completes the subcommands; zsh and fish scripts are produced too.
#[test]
fn shell_completions() {
    let out = run(&["completions", "bash"]);
    assert!(out.status.success());
    let script = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(script.contains("validate") && script.contains("completions"));
    let dir = std::env::temp_dir().join(format!("hopgate-compl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("hopgate.bash");
    std::fs::write(&f, &script).unwrap();
    // Source it and ask bash what `hopgate va<TAB>` completes to.
    let probe = format!(
        "source {}; COMP_WORDS=(hopgate va); COMP_CWORD=1; COMP_LINE='hopgate va'; COMP_POINT=10; _hopgate hopgate va hopgate; echo \"${{COMPREPLY[@]}}\"",
        f.display()
    );
    let out = Command::new("bash").args(["-c", &probe]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "validate");
    for shell in ["zsh", "fish"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
}

/// `hopgate schema` is a JSON Schema that a third-party validator (python
/// jsonschema) accepts every shipped example against, and that rejects a
/// misspelt field.
#[test]
fn json_schema_accepts_the_examples_and_rejects_a_typo() {
    let out = run(&["schema"]);
    assert!(out.status.success());
    let dir = std::env::temp_dir().join(format!("hopgate-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("schema.json");
    std::fs::write(&schema, &out.stdout).unwrap();
    let typo = dir.join("typo.yaml");
    std::fs::write(&typo, "listeners: [{name: p, adress: x}]\n").unwrap();
    let script = r#"
import glob, json, sys, yaml, jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
v = jsonschema.Draft202012Validator(schema)
n = 0
for f in sorted(glob.glob(sys.argv[2] + "/*.yaml")):
    errs = list(v.iter_errors(yaml.safe_load(open(f))))
    if errs:
        print(f, [e.message for e in errs]); sys.exit(1)
    n += 1
bad = list(v.iter_errors(yaml.safe_load(open(sys.argv[3]))))
print(n, "examples valid;", len(bad), "error(s) in the typo file:", bad[0].message if bad else "")
sys.exit(0 if n >= 3 and bad else 1)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&schema)
        .arg(repo().join("examples"))
        .arg(&typo)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
