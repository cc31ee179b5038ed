//! The dashboard in a real browser: Debian's `chromium --headless`, driven
//! over the DevTools protocol. The page is opened, a session hops while it
//! is open (its node drained), and the DOM, dumped from the browser, must
//! show the hop, the nodes (the drained one draining) and the config
//! version — once with no admin token, once with one (given to the page in
//! the URL fragment, which never reaches the server); and after a network
//! blip (a relay the test cuts), the browser reconnects by itself with
//! `Last-Event-ID` and the hops missed meanwhile appear once each.

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::Message;

use crate::dashboard::bound_session;
use crate::harness::{
    backends, client, config, json, service, temp_path, Backend, Gateway, ROUTE_ALL,
};

/// Bound on waiting for the browser or for the page to show something.
const BOUND: Duration = Duration::from_secs(60);

/// A headless chromium in its own process group, killed (group and all)
/// on drop.
struct Browser {
    child: Child,
    profile: std::path::PathBuf,
    page: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
}

impl Browser {
    async fn start() -> Browser {
        let profile = temp_path("chromium");
        std::fs::create_dir_all(&profile).unwrap();
        let mut child = Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromium is needed for this test (scripts/deps.sh installs it)");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let ws = tokio::time::timeout(BOUND, async {
            while let Ok(Some(l)) = lines.next_line().await {
                if let Some(url) = l.split("DevTools listening on ").nth(1) {
                    return url.trim().to_owned();
                }
            }
            panic!("chromium exited before listening");
        })
        .await
        .expect("chromium did not start");
        // Keep reading stderr so chromium never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let port = ws
            .trim_start_matches("ws://127.0.0.1:")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        let targets: Value = client()
            .get(format!("http://127.0.0.1:{port}/json/list"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let page_ws = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .expect("a page target")["webSocketDebuggerUrl"]
            .as_str()
            .unwrap()
            .to_owned();
        let (page, _) = tokio_tungstenite::connect_async(page_ws).await.unwrap();
        Browser {
            child,
            profile,
            page,
            next_id: 0,
        }
    }

    /// One DevTools command; its result.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let v = self.try_call(method, &params).await;
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    /// One DevTools command; its whole answer (`result` or `error`).
    async fn try_call(&mut self, method: &str, params: &Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({ "id": id, "method": method, "params": params });
        self.page
            .send(Message::text(msg.to_string()))
            .await
            .unwrap();
        loop {
            let m = tokio::time::timeout(BOUND, self.page.next())
                .await
                .expect("DevTools answer within the bound")
                .expect("DevTools connection open")
                .unwrap();
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    async fn open(&mut self, url: &str) {
        self.call("Page.navigate", json!({ "url": url })).await;
    }

    /// Answers the page's next request matching `pattern` with `status`
    /// and `body` (DevTools' Fetch domain), as a server would.
    async fn answer_next(&mut self, pattern: &str, status: u16, body: &str) {
        self.call(
            "Fetch.enable",
            json!({ "patterns": [{ "urlPattern": pattern }] }),
        )
        .await;
        let request_id = loop {
            let m = tokio::time::timeout(BOUND, self.page.next())
                .await
                .expect("the page asked within the bound")
                .expect("DevTools connection open")
                .unwrap();
            let Message::Text(t) = m else { continue };
            let v: Value = serde_json::from_str(&t).unwrap();
            if v["method"] == "Fetch.requestPaused" {
                break v["params"]["requestId"].clone();
            }
        };
        self.call(
            "Fetch.fulfillRequest",
            json!({
                "requestId": request_id,
                "responseCode": status,
                "responseHeaders": [{ "name": "content-type", "value": "application/json" }],
                "body": base64(body.as_bytes()),
            }),
        )
        .await;
        self.call("Fetch.disable", json!({})).await;
    }

    /// A JS expression's value in the page.
    async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({ "expression": expr, "returnByValue": true }),
            )
            .await;
        r["result"]["value"].clone()
    }

    /// Waits (bounded) until `expr` is true in the page.
    async fn wait_for(&mut self, what: &str, expr: &str) {
        let deadline = tokio::time::Instant::now() + BOUND;
        while self.eval(&format!("!!({expr})")).await != json!(true) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the page never showed {what}; DOM:\n{}",
                self.dom().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The page's DOM through the DOM domain (works with scripts off).
    async fn dom_without_js(&mut self) -> String {
        // (A document being replaced answers with an error: empty, retry.)
        let doc = self
            .try_call("DOM.getDocument", &json!({ "depth": 0 }))
            .await;
        let id = doc["result"]["root"]["nodeId"].clone();
        let html = self
            .try_call("DOM.getOuterHTML", &json!({ "nodeId": id }))
            .await;
        html["result"]["outerHTML"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The page's DOM as the browser has it now.
    async fn dom(&mut self) -> String {
        self.eval("document.documentElement.outerHTML")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            // The browser and its helpers (renderer, zygote): its group.
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut o = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                o.push(char::from(A[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                o.push('=');
            }
        }
    }
    o
}

async fn gateway(admin: &str, env: &[(&str, &str)]) -> (Vec<Backend>, Gateway) {
    let (b, svc) = backends(2).await;
    let yaml = config(&svc, ROUTE_ALL).replace("admin: { address: 127.0.0.1:0 }", admin)
        + "sessions: { enabled: true, secret_env: HG_SECRET }\n";
    let mut all = vec![("HG_SECRET", "browser-secret-0123456789abcdefghijkl")];
    all.extend_from_slice(env);
    let gw = Gateway::start_with_env(&yaml, &all).await;
    (b, gw)
}

/// With the page open and live: a session hops off its drained node; the
/// dumped DOM shows it.
async fn drive_a_hop_and_check(gw: &Gateway, browser: &mut Browser, token: Option<&str>) {
    browser
        .wait_for("the live feed", "document.body.dataset.live === '1'")
        .await;
    browser
        .wait_for(
            "both nodes",
            "document.querySelector('tr[data-node=\"s/n0\"]') && document.querySelector('tr[data-node=\"s/n1\"]')",
        )
        .await;
    let (session_token, bound) = bound_session(gw).await;
    let mut drain = client().post(gw.admin_url(&format!("/admin/v1/nodes/s/{bound}/drain")));
    if let Some(t) = token {
        drain = drain.bearer_auth(t);
    }
    assert_eq!(drain.send().await.unwrap().status(), 200);
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", &session_token)
        .send()
        .await
        .unwrap();
    let other = json(r).await["node"].as_str().unwrap().to_owned();
    assert_ne!(other, bound);
    let hop = format!("hopped {bound} → {other} (draining), context kept");
    browser
        .wait_for(
            "the hop",
            &format!(
                "document.getElementById('hops').textContent.includes({})",
                json!(hop)
            ),
        )
        .await;
    browser
        .wait_for(
            "the drained node",
            &format!(
                "document.querySelector('tr[data-node=\"s/{bound}\"]').textContent.includes('draining')"
            ),
        )
        .await;
    browser
        .wait_for(
            "the stats",
            "document.getElementById('total').textContent !== '–'",
        )
        .await;
    let dom = browser.dom().await;
    assert!(dom.contains(&hop), "{dom}");
    assert!(dom.contains("data-node=\"s/n0\"") && dom.contains("data-node=\"s/n1\""));
    assert!(dom.contains("<b id=\"version\">v1</b>"), "{dom}");
    assert!(dom.contains("<span id=\"conn\">live</span>"), "{dom}");
    assert!(
        dom.contains("data-action=\"undrain\""),
        "the drained node offers undrain"
    );
}

#[tokio::test]
async fn the_dashboard_in_chromium_shows_a_hop_live() {
    let (_b, gw) = gateway("admin: { address: 127.0.0.1:0 }", &[]).await;
    let mut browser = Browser::start().await;
    browser.open(&gw.admin_url("/")).await;
    drive_a_hop_and_check(&gw, &mut browser, None).await;
    // The canary panel: hidden while GET /admin/v1/config/canary answers
    // 404 (this gateway), shown with the canary and baseline numbers when
    // it answers 200 (given to the page here as that endpoint would).
    assert_eq!(
        browser
            .eval("document.getElementById('canary').hidden")
            .await,
        json!(true)
    );
    let canary = json!({
        "state": "baking",
        "reason": "2 of 5 minutes",
        "canary": { "requests": 1234, "errors": 3, "p99": 0.042 },
        "baseline": { "requests": 56789, "errors": 10, "p99": 0.038 },
    });
    browser
        .answer_next("*/admin/v1/config/canary*", 200, &canary.to_string())
        .await;
    browser
        .wait_for(
            "the canary panel",
            "!document.getElementById('canary').hidden && document.getElementById('canary-state').textContent === 'baking'",
        )
        .await;
    let rows = browser
        .eval("document.getElementById('canary-rows').textContent")
        .await;
    let rows = rows.as_str().unwrap();
    assert!(
        rows.contains("canary123430.042") && rows.contains("baseline56789100.038"),
        "{rows}"
    );
    browser
        .wait_for(
            "the canary panel hidden again (404)",
            "document.getElementById('canary').hidden",
        )
        .await;
    // The page's drain button: undrain the drained node from the browser.
    browser
        .eval("document.querySelector('button[data-action=\"undrain\"]').click()")
        .await;
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let nodes = gw.admin_json("/admin/v1/nodes").await;
        let draining = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["draining"] == true);
        if !draining {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "undrain button did nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Without JS: the state the server rendered into the page.
    browser
        .call(
            "Emulation.setScriptExecutionDisabled",
            json!({ "value": true }),
        )
        .await;
    browser.open(&gw.admin_url("/")).await;
    let deadline = tokio::time::Instant::now() + BOUND;
    let dom = loop {
        let dom = browser.dom_without_js().await;
        // The new document (scripts off: never "live"), fully parsed.
        if dom.contains("</ol>") && dom.contains("<span id=\"conn\">static</span>") {
            break dom;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no page without JS: {dom}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        dom.contains("<tr data-node=\"s/n0\">") && dom.contains("<tr data-node=\"s/n1\">"),
        "{dom}"
    );
    assert!(dom.contains("<b id=\"version\">v1</b>"), "{dom}");
    assert!(dom.contains("(draining), context kept</li>"), "{dom}");
    assert!(dom.contains("<span id=\"conn\">static</span>"), "{dom}");
}

#[tokio::test]
async fn the_dashboard_in_chromium_with_an_admin_token() {
    const TOKEN: &str = "browser-admin-token-0123456789";
    let (_b, gw) = gateway(
        "admin: { address: 127.0.0.1:0, token_env: HG_ADMIN_TOKEN }",
        &[("HG_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    let mut browser = Browser::start().await;
    // Without the token the page asks for it.
    browser.open(&gw.admin_url("/")).await;
    browser
        .wait_for(
            "the token form",
            "!document.getElementById('auth-panel').hidden",
        )
        .await;
    // (Through about:blank: a new document, not a fragment change.)
    browser.open("about:blank").await;
    browser
        .open(&gw.admin_url(&format!("/#token={TOKEN}")))
        .await;
    drive_a_hop_and_check(&gw, &mut browser, Some(TOKEN)).await;
    assert_eq!(
        browser.eval("location.hash").await,
        json!(""),
        "the token leaves the address bar"
    );
    assert!(!gw.logs().contains(TOKEN));
}

#[tokio::test]
async fn the_dashboard_in_chromium_shows_the_fleet() {
    let redis = crate::redis_server::RedisServer::start();
    let b = Backend::start("n0").await;
    let yaml = config(
        &service("s", &[("n0", b.addr, "")]),
        "  - { id: r, match: { path_prefix: / }, service: s }",
    ) + "sessions: { enabled: true, secret_env: HG_SECRET }\n"
        + &format!("store: {{ kind: redis, url: \"{}\" }}\n", redis.url());
    let gw = Gateway::start_with_env(
        &yaml,
        &[("HG_SECRET", "browser-secret-0123456789abcdefghijkl")],
    )
    .await;
    let mut browser = Browser::start().await;
    browser.open(&gw.admin_url("/")).await;
    browser
        .wait_for(
            "the fleet panel with Redis connected",
            "document.getElementById('fleet').textContent.includes('replica') && document.getElementById('fleet').textContent.includes('redis connected')",
        )
        .await;
}

/// A TCP relay between the browser and the admin API that the test can
/// cut (every connection closed, new ones dropped at once) and restore: a
/// network blip. It keeps what the browser sent.
struct Relay {
    addr: std::net::SocketAddr,
    state: std::sync::Arc<parking_lot::Mutex<RelayState>>,
    accept: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct RelayState {
    down: bool,
    conns: Vec<tokio::task::AbortHandle>,
    sent: String,
}

impl Relay {
    async fn start(to: std::net::SocketAddr) -> Relay {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let state = std::sync::Arc::new(parking_lot::Mutex::new(RelayState::default()));
        let st = std::sync::Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = l.accept().await {
                if st.lock().down {
                    continue;
                }
                let st2 = std::sync::Arc::clone(&st);
                let conn = tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let Ok(upstream) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut ur, mut uw) = upstream.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n) = cr.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            st2.lock()
                                .sent
                                .push_str(&String::from_utf8_lossy(&buf[..n]));
                            if uw.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        let _ = uw.shutdown().await;
                    };
                    let down = async {
                        let _ = tokio::io::copy(&mut ur, &mut cw).await;
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(up, down);
                });
                st.lock().conns.push(conn.abort_handle());
            }
        });
        Relay {
            addr,
            state,
            accept,
        }
    }

    fn cut(&self) {
        let mut s = self.state.lock();
        s.down = true;
        for c in s.conns.drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.state.lock().down = false;
    }

    fn sent(&self) -> String {
        self.state.lock().sent.clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// `n` sessions bound to n0 (n1 drained meanwhile); then n0 drains and n1
/// comes back, so that each one's next request hops n0 → n1.
async fn sessions_about_to_hop(gw: &Gateway, n: usize) -> Vec<String> {
    let c = client();
    let post = |p: String| c.post(gw.admin_url(&p)).send();
    assert_eq!(
        post("/admin/v1/nodes/s/n1/drain".into())
            .await
            .unwrap()
            .status(),
        200
    );
    let mut tokens = Vec::new();
    for _ in 0..n {
        let r = c.get(gw.url("/")).send().await.unwrap();
        tokens.push(r.headers()["hop-session"].to_str().unwrap().to_owned());
        assert_eq!(json(r).await["node"], "n0");
    }
    assert_eq!(
        post("/admin/v1/nodes/s/n1/undrain".into())
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        post("/admin/v1/nodes/s/n0/drain".into())
            .await
            .unwrap()
            .status(),
        200
    );
    tokens
}

/// The session id of the hop the request with `token` makes.
async fn hop_with(gw: &Gateway, token: &str) -> String {
    let r = client()
        .get(gw.url("/"))
        .header("hop-session", token)
        .send()
        .await
        .unwrap();
    assert_eq!(json(r).await["node"], "n1");
    let hops = gw.admin_json("/admin/v1/hops?limit=1").await;
    hops["hops"][0]["session"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn after_a_network_blip_chromium_resumes_with_last_event_id_and_shows_each_missed_hop_once() {
    let (_b, gw) = gateway("admin: { address: 127.0.0.1:0 }", &[]).await;
    let tokens = sessions_about_to_hop(&gw, 3).await;
    let relay = Relay::start(gw.admin).await;
    let mut browser = Browser::start().await;
    browser.open(&format!("http://{}/", relay.addr)).await;
    browser
        .wait_for("the live feed", "document.body.dataset.live === '1'")
        .await;
    let count =
        |s: &str| format!("document.querySelectorAll('#hops li[data-session=\"{s}\"]').length");
    let first = hop_with(&gw, &tokens[0]).await;
    browser
        .wait_for("the first hop", &format!("{} === 1", count(&first)))
        .await;
    // The network goes away: the page notices and keeps trying.
    relay.cut();
    browser
        .wait_for("the lost feed", "document.body.dataset.live === '0'")
        .await;
    let missed = [
        hop_with(&gw, &tokens[1]).await,
        hop_with(&gw, &tokens[2]).await,
    ];
    assert!(
        !relay.sent().to_ascii_lowercase().contains("last-event-id"),
        "no resume yet"
    );
    // Back: the browser reconnects by itself with Last-Event-ID and the
    // missed hops come from the stream (marked new), each once.
    relay.restore();
    browser
        .wait_for("the feed back", "document.body.dataset.live === '1'")
        .await;
    for s in &missed {
        browser
            .wait_for(
                "a missed hop, from the stream",
                &format!("document.querySelector('#hops li.new[data-session=\"{s}\"]')"),
            )
            .await;
    }
    let sent = relay.sent().to_ascii_lowercase();
    assert!(
        sent.contains("get /admin/v1/events") && sent.contains("last-event-id: "),
        "the browser resumed with Last-Event-ID:\n{sent}"
    );
    for s in missed.iter().chain([&first]) {
        assert_eq!(browser.eval(&count(s)).await, json!(1), "{s} shown once");
    }
}

/// The rate-limit panel: each policy with its parameters, its refusals
/// and its fullest key, read from `GET /admin/v1/limits`.
#[tokio::test]
async fn the_dashboard_shows_rate_limit_policies_and_their_fullest_key() {
    let (_b, svc) = backends(1).await;
    let route = "  - { id: r, match: { path_prefix: / }, service: s, rate_limit: per-client }";
    let yaml = config(&svc, route)
        + "rate_limits:\n  - { name: per-client, key: [client_ip], rate: 1/h, burst: 2 }\n";
    let gw = Gateway::start(&yaml).await;
    let c = client();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(c.get(gw.url("/")).send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
    let mut browser = Browser::start().await;
    browser.open(&gw.admin_url("/")).await;
    browser
        .wait_for(
            "the rate-limit panel",
            "!document.getElementById('limits').hidden",
        )
        .await;
    let rows = browser
        .eval("document.getElementById('limits-rows').textContent")
        .await;
    assert_eq!(rows, json!("per-client1/h2enforce10127.0.0.1100 %"));
}
