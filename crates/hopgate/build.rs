//! Stamps the binary with the commit it was built from, for `--version`
//! and the `hopgate_build_info` metric: `HOPGATE_COMMIT` when set (builds
//! from a source archive), else `git rev-parse`, else `unknown`.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=HOPGATE_COMMIT");
    let commit = std::env::var("HOPGATE_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            // Rebuild when HEAD moves: HEAD itself and the branch it names
            // (its loose file, or the packed list). A path that does not
            // exist is not watched: cargo would take it as changed on
            // every build and relink the binary each time.
            let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
            watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
            for p in &watched {
                if let Some(path) = git(&["rev-parse", "--git-path", p]) {
                    if std::path::Path::new(&path).exists() {
                        println!("cargo:rerun-if-changed={path}");
                    }
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"])
        })
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HOPGATE_COMMIT={commit}");
}
