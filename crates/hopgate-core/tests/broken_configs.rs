//! The broken-config corpus (`tests/configs/broken/`) and the shipped
//! examples (`examples/`), run through the public `load` entry point.
//!
//! Each broken file has exactly one problem and names, on its first line
//! (`# expect: <field path>`), the path the error must carry; `# expect: line`
//! means a syntax error whose message must give a line number.

use std::fs;
use std::path::{Path, PathBuf};

use hopgate_core::config::{self, Format};

const BROKEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/configs/broken");
const EXAMPLES_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");

fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {dir}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

fn name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Checks one broken file; `Err` describes how it failed the expectation.
fn check_broken(path: &Path) -> Result<(), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("unreadable: {e}"))?;
    let expect = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# expect:"))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .ok_or("first line must be `# expect: <field path>`")?;
    let errors = match config::load(&text, Format::Yaml) {
        Ok(_) => return Err("validated, but should have failed".to_owned()),
        Err(errors) => errors,
    };
    let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
    if config::parse(&text, Format::Yaml).is_err() {
        // Stage one: the structural error comes first and its text names
        // the place (an unknown field is set aside and the rest still
        // validated, which may add errors after it).
        let needle = if expect == "line" { "line " } else { expect };
        if rendered[0].contains(needle) {
            return Ok(());
        }
        return Err(format!(
            "expected a parse error mentioning {needle:?}, got {rendered:?}"
        ));
    }
    // Stage two: the file has one problem, so exactly one error, at its path.
    if errors.len() == 1 && errors[0].path == expect {
        return Ok(());
    }
    Err(format!(
        "expected one error at {expect:?}, got {rendered:?}"
    ))
}

#[test]
fn every_broken_config_fails_at_its_expected_path() {
    let files = yaml_files(BROKEN_DIR);
    assert!(
        files.len() >= 30,
        "the corpus should hold at least 30 files, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        if let Err(why) = check_broken(f) {
            failures.push(format!("{}: {why}", name(f)));
        }
    }
    assert!(
        failures.is_empty(),
        "broken configs not rejected as expected:\n{}",
        failures.join("\n")
    );
}

#[test]
fn broken_config_messages_are_short_and_quote_the_value() {
    // Messages are one line; a whole regex error dump or a Debug struct is not.
    for f in yaml_files(BROKEN_DIR) {
        let text = fs::read_to_string(&f).expect("readable");
        if let Err(errors) = config::load(&text, Format::Yaml) {
            for e in errors {
                assert!(
                    !e.message.contains('\n'),
                    "{}: multi-line message {e}",
                    name(&f)
                );
                assert!(e.message.len() < 300, "{}: long message {e}", name(&f));
            }
        }
    }
}

#[test]
fn every_example_validates() {
    let files = yaml_files(EXAMPLES_DIR);
    let names: Vec<String> = files.iter().map(|f| name(f)).collect();
    for required in ["minimal.yaml", "canary.yaml", "full.yaml"] {
        assert!(
            names.iter().any(|n| n == required),
            "examples/{required} is missing"
        );
    }
    let mut failures = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("readable");
        if let Err(errors) = config::load(&text, Format::Yaml) {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            failures.push(format!("{}:\n  {}", name(f), list.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "examples that do not validate:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_embedded_default_validates() {
    let config = config::load(config::EMBEDDED_DEFAULT, Format::Yaml).expect("valid");
    assert_eq!(config.listeners[0].address.to_string(), "127.0.0.1:8080");
    assert_eq!(config.admin.address.to_string(), "127.0.0.1:9901");
}
