//! Resuming the admin event stream (`GET /admin/v1/events`): events carry
//! ids, a client that reconnects with `Last-Event-ID` (the header a
//! browser's `EventSource` sends on its own reconnection, or
//! `?last_event_id=`) gets exactly the events it missed, in order and none
//! twice, then the live stream; an id older than the ring gets a `lagged`
//! event with how many were lost, then the state and the live stream
//! (checked with curl, a third-party SSE reader).

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::dashboard::Events;
use crate::harness::{backends, client, json, session_gateway, Gateway};

const SECRET: (&str, &str) = ("HG_SECRET", "events-resume-secret-0123456789abcdef");
const SESSIONS: &str = "sessions: { enabled: true, secret_env: HG_SECRET }\n";
/// The journal's ring (`hopgate-control/src/events/journal.rs`).
const RING: usize = 512;

async fn admin_post(gw: &Gateway, path: &str) {
    let r = client().post(gw.admin_url(path)).send().await.unwrap();
    assert_eq!(r.status(), 200, "{path}");
}

/// `n` sessions bound to n0 (n1 drained meanwhile); then n0 drains and n1
/// comes back, so that each session's next request hops n0 → n1.
async fn sessions_about_to_hop(gw: &Gateway, n: usize) -> Vec<String> {
    admin_post(gw, "/admin/v1/nodes/s/n1/drain").await;
    let c = client();
    let mut tokens = Vec::with_capacity(n);
    for _ in 0..n {
        let r = c.get(gw.url("/")).send().await.unwrap();
        let t = r.headers()["hop-session"].to_str().unwrap().to_owned();
        assert_eq!(json(r).await["node"], "n0");
        tokens.push(t);
    }
    admin_post(gw, "/admin/v1/nodes/s/n1/undrain").await;
    admin_post(gw, "/admin/v1/nodes/s/n0/drain").await;
    tokens
}

/// One request with the session `token`: it hops to n1.
async fn hop(gw: &Gateway, token: &str) {
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", token)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r).await["node"], "n1");
}

/// The sessions of the last `n` hops the gateway recorded, oldest first.
async fn recorded_hops(gw: &Gateway, n: usize) -> Vec<String> {
    let v = gw.admin_json(&format!("/admin/v1/hops?limit={n}")).await;
    let mut s: Vec<String> = v["hops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["session"].as_str().unwrap().to_owned())
        .collect();
    s.reverse();
    s
}

/// Reads events until the hop of session `until`; every event read with
/// its id (stats carry none and are left out).
async fn read_through(ev: &mut Events, until: &str) -> Vec<(u64, String, Value)> {
    let mut got = Vec::new();
    loop {
        let (kind, v) = ev.next().await.expect("the stream goes on");
        if kind == "stats" {
            assert_eq!(ev.id, None, "stats carry no id");
            continue;
        }
        let id = ev.id.unwrap_or_else(|| panic!("{kind} without an id: {v}"));
        let last = kind == "hop" && v["session"] == until;
        got.push((id, kind, v));
        if last {
            return got;
        }
    }
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_exactly_the_missed_events_then_the_live_ones() {
    let (_b, svc) = backends(2).await;
    let gw = session_gateway(&svc, SESSIONS, SECRET.1, &[]).await;
    let tokens = sessions_about_to_hop(&gw, 5).await;
    let url = gw.admin_url("/admin/v1/events");

    // A first subscriber: the state carries the current id, a hop the next.
    let mut ev = Events::open(&url, None).await;
    let (kind, _) = ev.next().await.unwrap();
    assert_eq!(kind, "config");
    let start = ev.id.expect("the state carries the id it is as of");
    assert_eq!(ev.retries.len(), 1, "retry: once, first");
    hop(&gw, &tokens[0]).await;
    let first = recorded_hops(&gw, 1).await[0].clone();
    let seen = read_through(&mut ev, &first).await;
    let last = seen.last().unwrap().0;
    assert!(last > start);
    let ids: Vec<u64> = seen.iter().map(|e| e.0).collect();
    assert!(ids.windows(2).all(|w| w[0] <= w[1]), "{ids:?}");
    drop(ev);

    // Three hops while nobody listens.
    for t in &tokens[1..4] {
        hop(&gw, t).await;
    }
    let missed = recorded_hops(&gw, 3).await;

    // Back with Last-Event-ID: no state, the missed events, then live.
    let mut ev = Events::resume(&url, None, Some(last)).await;
    hop(&gw, &tokens[4]).await;
    let live = recorded_hops(&gw, 1).await[0].clone();
    let got = read_through(&mut ev, &live).await;
    assert_eq!(ev.retries.len(), 1, "retry: once");
    let ids: Vec<u64> = got.iter().map(|e| e.0).collect();
    let want: Vec<u64> = (last + 1..=last + ids.len() as u64).collect();
    assert_eq!(ids, want, "every event after {last}, in order, none twice");
    assert!(
        got.iter().all(|(_, k, _)| k != "config"),
        "no state on a resume: {got:?}"
    );
    let hops: Vec<&str> = got
        .iter()
        .filter(|(_, k, _)| k == "hop")
        .map(|(_, _, v)| v["session"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = missed.iter().map(String::as_str).collect();
    want.push(&live);
    assert_eq!(hops, want, "exactly the missed hops, then the live one");
    for (_, k, v) in &got {
        if k == "hop" {
            assert_eq!((&v["from"], &v["to"]), (&"n0".into(), &"n1".into()));
            assert_eq!(v["reason"], "draining");
        }
    }
    drop(ev);

    // The same through the query parameter (for clients that cannot set
    // headers): the same replay.
    let mut ev = Events::open(&format!("{url}?last_event_id={last}"), None).await;
    let again = read_through(&mut ev, &live).await;
    let again_ids: Vec<u64> = again.iter().map(|e| e.0).collect();
    assert_eq!(again_ids[..ids.len()], ids[..], "{again:?}");
    let again_hops: Vec<&str> = again
        .iter()
        .filter(|(_, k, _)| k == "hop")
        .map(|(_, _, v)| v["session"].as_str().unwrap())
        .collect();
    assert_eq!(again_hops, want);
}

/// `curl -N` with a `Last-Event-ID` header, read line by line.
struct Curl {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Curl {
    fn open(url: &str, last_event_id: u64) -> Curl {
        let mut child = tokio::process::Command::new("curl")
            .args(["-sS", "-N", "-H"])
            .arg(format!("Last-Event-ID: {last_event_id}"))
            .arg(url)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("curl");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Curl { child, lines }
    }

    /// The next event `(id, kind, data)` (frames without an event name,
    /// like `retry:`, and comments are skipped).
    async fn next(&mut self) -> (Option<u64>, String, Value) {
        let (mut id, mut kind, mut data) = (None, String::new(), String::new());
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .expect("an event within the bound")
                .unwrap()
                .expect("curl still reading");
            if line.is_empty() {
                if !kind.is_empty() {
                    return (id, kind, serde_json::from_str(&data).unwrap());
                }
                id = None;
                continue;
            }
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.parse().unwrap());
            } else if let Some(v) = line.strip_prefix("event: ") {
                kind = v.to_owned();
            } else if let Some(v) = line.strip_prefix("data: ") {
                data.push_str(v);
            }
        }
    }
}

impl Drop for Curl {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

#[tokio::test]
async fn an_id_older_than_the_ring_gets_lagged_with_the_count_then_the_state_and_live_events() {
    let (_b, svc) = backends(2).await;
    let gw = session_gateway(&svc, SESSIONS, SECRET.1, &[]).await;
    let tokens = sessions_about_to_hop(&gw, RING + 20).await;
    let url = gw.admin_url("/admin/v1/events");
    let mut ev = Events::open(&url, None).await;
    assert_eq!(ev.next().await.unwrap().0, "config");
    let start = ev.id.unwrap();
    drop(ev);
    // More hops than the ring keeps, while nobody listens.
    let (last, rest) = tokens.split_last().unwrap();
    for t in rest {
        hop(&gw, t).await;
    }
    let hopped: HashSet<String> = recorded_hops(&gw, rest.len()).await.into_iter().collect();
    assert_eq!(hopped.len(), rest.len());

    let mut curl = Curl::open(&url, start);
    let (id, kind, lagged) = curl.next().await;
    assert_eq!(kind, "lagged", "{lagged}");
    assert_eq!(id, None);
    // Then the state, as of the newest id.
    let (head, kind, config) = curl.next().await;
    assert_eq!(kind, "config", "{config}");
    let head = head.expect("the state carries its id");
    assert_eq!(
        lagged["missed"].as_u64().unwrap(),
        head - start,
        "every event since {start} was lost"
    );
    assert!(head - start >= rest.len() as u64, "{head} {start}");
    for node in ["n0", "n1"] {
        let (id, kind, v) = curl.next().await;
        assert_eq!((id, kind.as_str()), (Some(head), "node"), "{v}");
        assert_eq!(v["id"], node);
        assert_eq!(v["draining"], node == "n0", "the current state: {v}");
    }
    // Then live: the next hop, with the next id.
    hop(&gw, last).await;
    loop {
        let (id, kind, v) = curl.next().await;
        if kind == "hop" {
            assert!(id.unwrap() > head);
            assert!(!hopped.contains(v["session"].as_str().unwrap()));
            break;
        }
    }
}
