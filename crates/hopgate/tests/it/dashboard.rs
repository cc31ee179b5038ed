//! The dashboard at `GET /` on the admin listener and its live feed,
//! `GET /admin/v1/events` (Server-Sent Events): what a subscriber receives
//! (config, nodes, hops, stats), how it authenticates when the admin API
//! has a token (bearer header or a ticket, never the token in the URL),
//! the no-JS rendering, and the stream's end at shutdown. The page in a
//! real browser: `dashboard_browser.rs`.

use std::time::Duration;

use serde_json::Value;

use crate::harness::{backends, client, config, json, Backend, Gateway, ROUTE_ALL};

/// Bound for waiting on one event (not a timing assertion).
const EVENT_BOUND: Duration = Duration::from_secs(20);

/// An open event stream, parsed as it arrives.
pub struct Events {
    resp: reqwest::Response,
    buf: String,
    /// The `id:` of the last event read that had one (what a browser sends
    /// back as `Last-Event-ID`).
    pub last_id: Option<u64>,
    /// The `id:` of the event `next` returned last, if it had one.
    pub id: Option<u64>,
    /// The `retry:` values received, in order.
    pub retries: Vec<u64>,
}

impl Events {
    pub async fn open(url: &str, bearer: Option<&str>) -> Events {
        Events::resume(url, bearer, None).await
    }

    /// Opens the stream with `Last-Event-ID: last_event_id` when given.
    pub async fn resume(url: &str, bearer: Option<&str>, last_event_id: Option<u64>) -> Events {
        let mut req = client().get(url);
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200, "events: {url}");
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Events {
            resp,
            buf: String::new(),
            last_id: None,
            id: None,
            retries: Vec::new(),
        }
    }

    /// The next event `(kind, data)`; `None` when the stream ended cleanly
    /// (a broken one fails the test).
    /// Comments (keep-alives) are skipped.
    pub async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let mut kind = String::new();
                let mut data = String::new();
                let mut id_seen = None;
                for line in frame.lines() {
                    if let Some(k) = line.strip_prefix("event: ") {
                        kind = k.to_owned();
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        data.push_str(d);
                    } else if let Some(id) = line.strip_prefix("id: ") {
                        self.last_id = Some(id.parse().expect("numeric event ids"));
                        id_seen = self.last_id;
                    } else if let Some(ms) = line.strip_prefix("retry: ") {
                        self.retries.push(ms.parse().expect("retry in ms"));
                    }
                }
                if kind.is_empty() {
                    continue;
                }
                self.id = id_seen;
                let v = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("event {kind}: not JSON ({e}): {data}"));
                return Some((kind, v));
            }
            let chunk = tokio::time::timeout(EVENT_BOUND, self.resp.chunk())
                .await
                .expect("no event within the bound")
                .unwrap_or_else(|e| panic!("the stream broke instead of ending: {e}"))?;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Reads events until `want` matches one; returns it.
    pub async fn until(&mut self, what: &str, want: impl Fn(&str, &Value) -> bool) -> Value {
        loop {
            match self.next().await {
                Some((k, v)) if want(&k, &v) => return v,
                Some(_) => {}
                None => panic!("stream ended before {what}"),
            }
        }
    }
}

async fn two_nodes(admin: &str) -> (Vec<Backend>, String) {
    let (b, svc) = backends(2).await;
    let yaml = config(&svc, ROUTE_ALL).replace("admin: { address: 127.0.0.1:0 }", admin)
        + "sessions: { enabled: true, secret_env: HG_SECRET }\n";
    (b, yaml)
}

const SECRET: (&str, &str) = ("HG_SECRET", "dashboard-secret-0123456789abcdefghij");

/// A session bound to a node (its second request carries the token); the
/// token and the node.
pub async fn bound_session(gw: &Gateway) -> (String, String) {
    let c = client();
    let r = c.get(gw.url("/?context=cart")).send().await.unwrap();
    let token = r.headers()["hop-session"].to_str().unwrap().to_owned();
    let first = json(r).await["node"].as_str().unwrap().to_owned();
    let r = c
        .get(gw.url("/"))
        .header("hop-session", &token)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r).await["node"], first.as_str(), "the session sticks");
    (token, first)
}

#[tokio::test]
async fn the_event_stream_carries_config_nodes_hops_and_stats_and_ends_at_shutdown() {
    let (_b, yaml) = two_nodes("admin: { address: 127.0.0.1:0 }").await;
    let mut gw = Gateway::start_with_env(&yaml, &[SECRET]).await;
    let mut ev = Events::open(&gw.admin_url("/admin/v1/events"), None).await;
    // On connect: the config and every node.
    let (kind, config) = ev.next().await.unwrap();
    assert_eq!(kind, "config");
    assert_eq!(config["version"], 1);
    assert!(
        config["source"].as_str().unwrap().starts_with("file:"),
        "{config}"
    );
    for id in ["n0", "n1"] {
        let n = ev.until("a node event", |k, _| k == "node").await;
        assert_eq!(n["id"], id);
        assert_eq!(n["draining"], false);
        assert_eq!(n["health"], "unknown");
    }
    // A session with a context hops off a draining node.
    let (token, bound) = bound_session(&gw).await;
    let r = client()
        .post(gw.admin_url(&format!("/admin/v1/nodes/s/{bound}/drain")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", &token)
        .send()
        .await
        .unwrap();
    let other = json(r).await["node"].as_str().unwrap().to_owned();
    assert_ne!(other, bound);
    let hop = ev.until("the hop", |k, _| k == "hop").await;
    assert_eq!(hop["from"], bound.as_str());
    assert_eq!(hop["to"], other.as_str());
    assert_eq!(hop["reason"], "draining");
    assert_eq!(hop["service"], "s");
    assert_eq!(hop["context_bytes"], 4, "the context (\"cart\") went along");
    let node = ev
        .until("the drained node", |k, v| {
            k == "node" && v["id"] == bound.as_str()
        })
        .await;
    assert_eq!(node["draining"], true);
    let stats = ev
        .until("stats counting the requests", |k, v| {
            k == "stats" && v["requests_total"].as_u64() >= Some(3)
        })
        .await;
    for field in ["rps", "errors_per_s", "window_s"] {
        assert!(stats[field].is_number(), "{field}: {stats}");
    }
    assert_eq!(stats["errors_total"], 0);
    assert!(stats.get("p50_ms").is_some() && stats.get("p99_ms").is_some());
    // p50/p99 of a window with requests in it.
    for _ in 0..5 {
        client().get(gw.url("/")).send().await.unwrap();
    }
    let stats = ev
        .until("a window with requests", |k, v| {
            k == "stats" && v["rps"].as_f64() > Some(0.0)
        })
        .await;
    let (p50, p99) = (
        stats["p50_ms"].as_f64().unwrap(),
        stats["p99_ms"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p50 <= p99, "{stats}");
    // A config applied through the admin API.
    let r = client()
        .put(gw.admin_url("/admin/v1/config"))
        .header("content-type", "application/yaml")
        .body(yaml.replace("- { id: r,", "- { id: r2,"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let config = ev.until("the new config", |k, _| k == "config").await;
    assert_eq!(config["version"], 2);
    assert_eq!(config["source"], "admin");
    // A maintenance notice: the node is relaxed, with the time left.
    let r = client()
        .post(gw.admin_url("/admin/v1/maintenance"))
        .json(&serde_json::json!({"service": "s", "node": "n1", "kind": "MIGRATING", "seq": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let n1 = ev
        .until("the relaxed node", |k, v| {
            k == "node" && v["id"] == "n1" && v["maintenance"]["relaxed_left_s"].is_u64()
        })
        .await;
    assert!(
        n1["maintenance"]["relaxed_left_s"].as_u64().unwrap() > 0,
        "{n1}"
    );
    // The page, rendered on the server (readable without JS).
    let page = client().get(gw.admin_url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>"));
    assert!(html.contains("<b id=\"version\">v2</b> from <span id=\"source\">admin</span>"));
    assert!(html.contains(&format!("<tr data-node=\"s/{bound}\"><td>{bound}</td>")));
    assert!(html.contains(&format!(
        "hopped {bound} → {other} (draining), context kept</li>"
    )));
    assert!(html.contains("data-auth=\"none\""));
    assert!(
        html.contains(" s left</td>"),
        "the relaxed node's time left"
    );
    // Shutdown ends the stream (the client sees its end).
    gw.sigterm();
    while ev.next().await.is_some() {}
    assert_eq!(gw.wait().await, Some(0));
}

#[tokio::test]
async fn with_an_admin_token_events_need_it_or_a_ticket_and_the_page_shows_nothing_without_it() {
    const TOKEN: &str = "dash-token-abcdef0123456789";
    let (_b, yaml) = two_nodes("admin: { address: 127.0.0.1:0, token_env: HG_ADMIN_TOKEN }").await;
    let gw = Gateway::start_with_env(&yaml, &[SECRET, ("HG_ADMIN_TOKEN", TOKEN)]).await;
    let c = client();
    // The page is served to anyone, without the state.
    let html = c
        .get(gw.admin_url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("data-auth=\"required\""));
    assert!(html.contains("id=\"locked\""));
    assert!(!html.contains("data-node="), "no state without the token");
    let html = c
        .get(gw.admin_url("/"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("<tr data-node=\"s/n0\">"));
    // The stream: refused without the token, with a bad ticket, and with
    // the token in the URL (it never goes there).
    for path in [
        "/admin/v1/events".to_owned(),
        "/admin/v1/events?ticket=garbage".to_owned(),
        format!("/admin/v1/events?ticket={}.{}", u64::MAX, "0".repeat(64)),
        format!("/admin/v1/events?token={TOKEN}"),
    ] {
        let r = c.get(gw.admin_url(&path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let r = c
        .post(gw.admin_url("/admin/v1/events/ticket"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "a ticket needs the token");
    let r = c
        .post(gw.admin_url("/admin/v1/events/ticket"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let t: Value = r.json().await.unwrap();
    assert_eq!(t["expires_in"], 60);
    let ticket = t["ticket"].as_str().unwrap().to_owned();
    assert!(!ticket.contains(TOKEN));
    let mut ev = Events::open(
        &gw.admin_url(&format!("/admin/v1/events?ticket={ticket}")),
        None,
    )
    .await;
    assert_eq!(ev.next().await.unwrap().0, "config");
    assert_eq!(ev.id, Some(0), "the state as of no event yet");
    // The page's reopening after a ticket expired: a ticket and the last
    // id seen, in the query. Nothing was missed: no state, just live.
    let mut resumed = Events::open(
        &gw.admin_url(&format!("/admin/v1/events?ticket={ticket}&last_event_id=0")),
        None,
    )
    .await;
    let (kind, _) = resumed.next().await.unwrap();
    assert_ne!(kind, "config", "a resume sends no state");
    // A tampered ticket is refused.
    let mut bad = ticket.clone().into_bytes();
    let last = bad.len() - 1;
    bad[last] = if bad[last] == b'0' { b'1' } else { b'0' };
    let bad = String::from_utf8(bad).unwrap();
    let r = c
        .get(gw.admin_url(&format!("/admin/v1/events?ticket={bad}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // The bearer header works too (curl -N).
    let mut ev2 = Events::open(&gw.admin_url("/admin/v1/events"), Some(TOKEN)).await;
    assert_eq!(ev2.next().await.unwrap().0, "config");
    assert!(!gw.logs().contains(TOKEN), "the token is never logged");
    assert!(!gw.logs().contains(&ticket), "tickets are never logged");
}

#[tokio::test]
async fn in_fleet_mode_stats_carry_the_fleet_state() {
    let redis = crate::redis_server::RedisServer::start();
    let (_b, yaml) = two_nodes("admin: { address: 127.0.0.1:0 }").await;
    let yaml = yaml + &format!("store: {{ kind: redis, url: \"{}\" }}\n", redis.url());
    let gw = Gateway::start_with_env(&yaml, &[SECRET]).await;
    let mut ev = Events::open(&gw.admin_url("/admin/v1/events"), None).await;
    let stats = ev
        .until("stats with Redis connected", |k, v| {
            k == "stats" && v["fleet"]["redis"]["state"] == "connected"
        })
        .await;
    assert!(stats["fleet"]["replica_id"].is_string(), "{stats}");
}

/// The page's first render, before any script runs, already shows the
/// fleet box and the traffic figures (no placeholders).
#[tokio::test]
async fn the_first_render_shows_the_fleet_and_the_traffic_without_the_script() {
    let redis = crate::redis_server::RedisServer::start();
    let (_b, yaml) = two_nodes("admin: { address: 127.0.0.1:0 }").await;
    let yaml = yaml + &format!("store: {{ kind: redis, url: \"{}\" }}\n", redis.url());
    let gw = Gateway::start_with_env(&yaml, &[SECRET]).await;
    for _ in 0..5 {
        let r = client().get(gw.url("/x")).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // Redis is connected by the time the stream says so; the page then too.
    let mut ev = Events::open(&gw.admin_url("/admin/v1/events"), None).await;
    ev.until("stats with Redis connected", |k, v| {
        k == "stats" && v["fleet"]["redis"]["state"] == "connected"
    })
    .await;
    let page = client()
        .get(gw.admin_url("/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!page.contains(">single replica<"), "{page}");
    assert!(page.contains("<div>replica <b>"), "{page}");
    assert!(
        page.contains("<div>redis <span class=\"pill \">connected</span></div>"),
        "{page}"
    );
    assert!(
        page.contains("<div>etcd <span class=\"pill \">off</span></div>"),
        "{page}"
    );
    let total = page
        .split("<b id=\"total\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("a number of requests in {page}"));
    assert!(total >= 5, "{total}");
    for id in ["rps", "eps", "inflight"] {
        assert!(
            !page.contains(&format!("<b id=\"{id}\">–</b>")),
            "{id}: {page}"
        );
    }
}
