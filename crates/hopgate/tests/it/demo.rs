//! `hopgate demo --drive`: the story told end to end by the real binary —
//! backends and gateway start, traffic with sessions, a node restarted and
//! another drained, every hop narrated with its context kept, the final
//! count with 0 errors — and the process exits by itself.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::harness::BIN;

/// Bound on the whole demo run (it takes a few seconds).
const RUN_BOUND: Duration = Duration::from_secs(180);

async fn demo(extra: &[&str]) -> (String, String) {
    let child = Command::new(BIN)
        .args([
            "demo",
            "--drive",
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(RUN_BOUND, child.wait_with_output())
        .await
        .expect("hopgate demo --drive ends by itself")
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// `(from, to, reason, tail)` of a narrated hop line.
type Hop<'a> = (&'a str, &'a str, &'a str, &'a str);

fn hop_line(l: &str) -> Option<Hop<'_>> {
    let rest = l.strip_prefix("session ")?;
    let (id, rest) = rest.split_once("… hopped ")?;
    assert_eq!(id.len(), 4, "{l}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{l}");
    let (from, rest) = rest.split_once(" → ")?;
    let (to, rest) = rest.split_once(" (")?;
    let (reason, tail) = rest.split_once("), ")?;
    Some((from, to, reason, tail))
}

#[tokio::test]
async fn the_demo_tells_the_story_and_ends_by_itself() {
    let (out, err) = demo(&[]).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() < 60, "{} lines:\n{out}", lines.len());
    assert!(out.contains("dashboard: http://127.0.0.1:"), "{out}");
    let step = |needle: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no line {needle:?}:\n{out}"))
    };
    let (drive, restart, back, drain) = (
        step("driving 2,000 requests from 16 sessions"),
        step("restarting node-1"),
        step("node-1 is back"),
        step("draining node-2"),
    );
    assert!(drive < restart && restart < back && back < drain, "{out}");
    let hops: Vec<(usize, Hop<'_>)> = lines
        .iter()
        .enumerate()
        .filter_map(|(i, l)| hop_line(l).map(|h| (i, h)))
        .collect();
    assert!(!hops.is_empty(), "{out}");
    for (_, (from, to, _, tail)) in &hops {
        assert_ne!(from, to);
        assert_eq!(*tail, "context kept", "{out}");
    }
    assert!(
        hops.iter()
            .any(|(i, (from, _, _, _))| *i > restart && *i < drain && *from == "node-1"),
        "sessions hop off the restarted node:\n{out}"
    );
    assert!(
        hops.iter().any(|(i, (from, _, reason, _))| *i > drain
            && *from == "node-2"
            && *reason == "draining"),
        "sessions hop off the drained node:\n{out}"
    );
    let last = lines.last().unwrap();
    let n: usize = last
        .strip_prefix("2,000 requests, 0 errors, ")
        .and_then(|r| r.strip_suffix(" hops"))
        .unwrap_or_else(|| panic!("final count: {last:?}\n{out}"))
        .parse()
        .unwrap();
    assert_eq!(n, hops.len(), "every hop narrated:\n{out}");
    assert!(err.is_empty(), "quiet: no logs, no access log:\n{err}");
}

#[tokio::test]
async fn the_demo_writes_the_access_log_when_asked() {
    let (out, err) = demo(&["--access-log", "--requests", "200", "--sessions", "4"]).await;
    assert!(
        out.lines()
            .last()
            .unwrap()
            .starts_with("200 requests, 0 errors, "),
        "{out}"
    );
    // One line per request, naming the node that answered.
    let access = err.lines().filter(|l| l.contains("node-")).count();
    assert!(access >= 200, "{access} access lines:\n{err}");
}

#[tokio::test]
async fn without_drive_the_demo_keeps_running_until_a_signal() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mut child = Command::new(BIN)
        .args(["demo", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
        .args(["--requests", "200", "--sessions", "4"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut dashboard = None;
    tokio::time::timeout(RUN_BOUND, async {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(url) = l.strip_prefix("dashboard: ") {
                dashboard = Some(url.to_owned());
            }
            if l.starts_with("still running") {
                return;
            }
        }
        panic!("the demo ended before its story did");
    })
    .await
    .expect("the story ends within the bound");
    let dashboard = dashboard.expect("the dashboard URL is printed");
    // Still serving: the dashboard answers, with the demo's nodes, node-2
    // undrained again.
    let html = crate::harness::client()
        .get(&dashboard)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains("<tr data-node=\"demo/node-2\"><td>node-2</td>"),
        "{html}"
    );
    assert!(
        !html.contains("<td>draining</td>"),
        "node-2 undrained after the story"
    );
    assert!(child.try_wait().unwrap().is_none(), "keeps running");
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(RUN_BOUND, child.wait())
        .await
        .expect("a signal stops it")
        .unwrap();
    assert!(status.success(), "{status:?}");
}
