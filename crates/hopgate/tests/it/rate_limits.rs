//! Rate limits (`rate_limits[]`, `routes[].rate_limit`), end to end: real
//! gateway and backend processes, real clients (reqwest, curl, a
//! WebSocket). Every rate is chosen so the outcome does not depend on the
//! machine's speed: `1/m` or `1/h` with a small burst, so the bucket does
//! not refill during a test.

use std::time::Duration;

use crate::harness::{client, config, within, Backend, Gateway};

/// One backend, the service `s`, and the route `app` (every path) using
/// the policy `rl` defined by `policy` (a flow mapping's inside).
async fn gateway_with(policy: &str) -> (Backend, Gateway) {
    let b = Backend::start("n0").await;
    let yaml = yaml_for(&b, policy, "");
    (b, Gateway::start(&yaml).await)
}

fn yaml_for(b: &Backend, policy: &str, more_routes: &str) -> String {
    let svc = crate::harness::service("s", &[("n0", b.addr, "")]);
    let routes = format!(
        "{more_routes}  - {{ id: app, match: {{ path_prefix: / }}, service: s, rate_limit: rl }}"
    );
    config(&svc, &routes) + &format!("rate_limits:\n  - {{ name: rl, {policy} }}\n")
}

async fn status(c: &reqwest::Client, url: &str, key: Option<&str>) -> reqwest::Response {
    let mut r = c.get(url);
    if let Some(k) = key {
        r = r.header("x-api-key", k);
    }
    r.send().await.unwrap()
}

/// The series `hopgate_rate_limited_total{policy="rl",mode=…,limit=…}`.
async fn limited(gw: &Gateway, mode: &str, limit: &str) -> u64 {
    let text = gw.metrics().await;
    let series =
        format!("hopgate_rate_limited_total{{policy=\"rl\",mode=\"{mode}\",limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// 1/m with burst 3: three pass, the fourth is a 429 with `Retry-After`
/// and the IETF `RateLimit-Policy` / `RateLimit` fields; counted.
#[tokio::test]
async fn over_the_limit_is_429_with_retry_after_and_ratelimit_headers() {
    let (_b, gw) = gateway_with("key: [client_ip], rate: 1/m, burst: 3").await;
    let c = client();
    for i in 0..3 {
        assert_eq!(
            status(&c, &gw.url("/x"), None).await.status(),
            200,
            "request {i}"
        );
    }
    let r = status(&c, &gw.url("/x"), None).await;
    assert_eq!(r.status(), 429);
    let h = r.headers();
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    assert_eq!(h["ratelimit-policy"], "\"rl\";q=3;w=60");
    assert_eq!(
        h["ratelimit"].to_str().unwrap(),
        format!("\"rl\";r=0;t={retry}")
    );
    assert!(r.text().await.unwrap().contains("rate limit exceeded"));
    assert_eq!(limited(&gw, "enforce", "rate").await, 1);
}

/// A header key gives each client its own bucket.
#[tokio::test]
async fn a_header_key_separates_clients() {
    let (_b, gw) = gateway_with("key: [{ header: X-Api-Key }], rate: 1/h, burst: 2").await;
    let c = client();
    let url = gw.url("/");
    for _ in 0..2 {
        assert_eq!(status(&c, &url, Some("alice")).await.status(), 200);
    }
    assert_eq!(status(&c, &url, Some("alice")).await.status(), 429);
    assert_eq!(
        status(&c, &url, Some("bob")).await.status(),
        200,
        "bob has his own bucket"
    );
    assert_eq!(
        status(&c, &url, None).await.status(),
        200,
        "no header: one more key"
    );
}

/// Mode log lets everything through and counts what enforce would refuse.
#[tokio::test]
async fn log_mode_passes_everything_and_counts() {
    let (_b, gw) = gateway_with("key: [client_ip], rate: 1/h, burst: 1, mode: log").await;
    let c = client();
    for _ in 0..5 {
        assert_eq!(status(&c, &gw.url("/"), None).await.status(), 200);
    }
    assert_eq!(limited(&gw, "log", "rate").await, 4);
    assert_eq!(limited(&gw, "enforce", "rate").await, 0);
    assert!(
        within(Duration::from_secs(10), || async {
            gw.logs().contains("rate limit exceeded (mode log")
        })
        .await,
        "the excess was never logged"
    );
}

/// `max_in_flight: 2` with slow backend requests (10 s each, plenty for
/// the third request to be sent meanwhile): a third concurrent one is a
/// 429; once they end, requests pass again.
#[tokio::test]
async fn max_in_flight_refuses_concurrent_requests_until_they_end() {
    let (b, gw) = gateway_with("key: [client_ip], max_in_flight: 2").await;
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let url = gw.url("/?sleep_ms=10000");
            tokio::spawn(async move { client().get(url).send().await })
        })
        .collect();
    let c = client();
    let stats = b.url("/control/stats");
    let both = within(Duration::from_secs(20), || async {
        let s: serde_json::Value = c.get(&stats).send().await.unwrap().json().await.unwrap();
        s["in_flight"] == 2
    })
    .await;
    assert!(both, "the two slow requests never reached the backend");
    let r = status(&c, &gw.url("/"), None).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(
        r.headers().get("ratelimit").is_none(),
        "no quota to announce"
    );
    assert_eq!(limited(&gw, "enforce", "in_flight").await, 1);
    for t in slow {
        assert_eq!(t.await.unwrap().unwrap().status(), 200);
    }
    let passes = within(Duration::from_secs(20), || async {
        status(&c, &gw.url("/"), None).await.status() == 200
    })
    .await;
    assert!(passes, "the slots were never given back");
}

/// An answer's streamed body and a WebSocket tunnel hold their request's
/// place until they end.
#[tokio::test]
async fn streamed_bodies_and_tunnels_hold_their_place() {
    let (_b, gw) = gateway_with("key: [client_ip], max_in_flight: 1").await;
    let c = client();
    // A body of three chunks 5 s apart: its head is here, its body is not
    // over for another 10 s.
    let streaming = status(&c, &gw.url("/?bytes=40000&chunk_delay_ms=5000"), None).await;
    assert_eq!(streaming.status(), 200);
    assert_eq!(status(&client(), &gw.url("/"), None).await.status(), 429);
    assert_eq!(streaming.bytes().await.unwrap().len(), 40000);
    let freed = within(Duration::from_secs(20), || async {
        status(&client(), &gw.url("/"), None).await.status() == 200
    })
    .await;
    assert!(freed, "the streamed answer's place was never given back");

    // The request that found the place free may still hold it for a
    // moment after its answer reached the client: try until one upgrade
    // gets through.
    let mut tunnel = None;
    for _ in 0..200 {
        let url = format!("ws://{}/ws", gw.addr);
        tunnel = tokio_tungstenite::connect_async(url).await.ok();
        if tunnel.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (ws, resp) = tunnel.expect("no WebSocket upgrade got through once the place was free");
    assert_eq!(resp.status(), 101);
    assert_eq!(status(&client(), &gw.url("/"), None).await.status(), 429);
    drop(ws);
    let freed = within(Duration::from_secs(20), || async {
        status(&client(), &gw.url("/"), None).await.status() == 200
    })
    .await;
    assert!(freed, "the tunnel's place was never given back");
}

async fn put_config(gw: &Gateway, yaml: &str) {
    let r = client()
        .put(gw.admin_url("/admin/v1/config"))
        .body(yaml.to_owned())
        .send()
        .await
        .unwrap();
    let status = r.status();
    assert_eq!(status, 200, "{}", r.text().await.unwrap());
}

/// A reload that keeps the policy keeps its buckets (a client that used
/// its burst stays limited); one that changes it starts afresh, logged.
#[tokio::test]
async fn reloads_keep_unchanged_policies_and_reset_changed_ones() {
    let policy = "key: [client_ip], rate: 1/h, burst: 2";
    let (b, gw) = gateway_with(policy).await;
    let c = client();
    for _ in 0..2 {
        assert_eq!(status(&c, &gw.url("/"), None).await.status(), 200);
    }
    assert_eq!(status(&c, &gw.url("/"), None).await.status(), 429);
    // Another route added, the policy as it was.
    let other = "  - { id: other, match: { path_prefix: /other }, service: s }\n";
    put_config(&gw, &yaml_for(&b, policy, other)).await;
    assert_eq!(
        status(&c, &gw.url("/"), None).await.status(),
        429,
        "the reload kept the policy, so its buckets"
    );
    assert!(!gw.logs().contains("buckets start afresh"));
    // The burst changed: new buckets.
    put_config(
        &gw,
        &yaml_for(&b, "key: [client_ip], rate: 1/h, burst: 3", other),
    )
    .await;
    assert_eq!(status(&c, &gw.url("/"), None).await.status(), 200);
    let logged = within(Duration::from_secs(10), || async {
        gw.logs()
            .lines()
            .any(|l| l.contains("buckets start afresh") && l.contains("rl"))
    })
    .await;
    assert!(logged, "the reset was not logged:\n{}", gw.logs());
}

/// `GET /admin/v1/limits`: the policies, their parameters and routes, and
/// the fullest keys; a header's value is never shown.
#[tokio::test]
async fn admin_lists_policies_and_their_fullest_keys() {
    let (_b, gw) =
        gateway_with("key: [client_ip, { header: X-Api-Key }], rate: 1/m, burst: 4").await;
    let c = client();
    for _ in 0..3 {
        status(&c, &gw.url("/"), Some("secret-token")).await;
    }
    status(&c, &gw.url("/"), Some("other-token")).await;
    let doc = gw.admin_json("/admin/v1/limits").await;
    let p = &doc["policies"][0];
    assert_eq!(p["name"], "rl");
    assert_eq!(p["rate"], "1/m");
    assert_eq!(p["burst"], 4);
    assert_eq!(p["mode"], "enforce");
    assert_eq!(p["scope"], "local");
    assert_eq!(
        p["key"],
        serde_json::json!(["client_ip", { "header": "x-api-key" }])
    );
    assert_eq!(p["routes"], serde_json::json!(["app"]));
    let keys = p["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{doc}");
    assert_eq!(keys[0]["bucket"], 4);
    assert_eq!(keys[0]["used"], 3);
    assert_eq!(keys[0]["remaining"], 1);
    assert_eq!(keys[0]["fill"], 0.75);
    assert_eq!(keys[0]["client_ip"], "127.0.0.1");
    assert_eq!(keys[0]["hash"].as_str().unwrap().len(), 8);
    assert_eq!(keys[1]["used"], 1);
    assert!(!doc.to_string().contains("secret-token"), "{doc}");
    let top1 = gw.admin_json("/admin/v1/limits?top=1").await;
    assert_eq!(top1["policies"][0]["keys"].as_array().unwrap().len(), 1);
}

/// A third-party client (curl) sees the 429 and its headers on the wire.
#[tokio::test]
async fn curl_sees_the_429_and_its_headers() {
    let (_b, gw) = gateway_with("key: [client_ip], rate: 1/m, burst: 2").await;
    let url = gw.url("/");
    let mut codes = Vec::new();
    let mut last_head = String::new();
    for _ in 0..3 {
        let out = tokio::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "--noproxy", "*", &url])
            .output()
            .await
            .expect("curl runs");
        last_head = String::from_utf8_lossy(&out.stdout).to_lowercase();
        let code = last_head
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_owned();
        codes.push(code);
    }
    assert_eq!(codes, ["200", "200", "429"], "{last_head}");
    assert!(last_head.contains("retry-after: "), "{last_head}");
    assert!(
        last_head.contains("ratelimit-policy: \"rl\";q=2;w=60"),
        "{last_head}"
    );
    assert!(
        last_head.contains("ratelimit: \"rl\";r=0;t="),
        "{last_head}"
    );
}

/// A policy with `scope: fleet` on a gateway without the Redis store is
/// refused with its field path, and the running config stays.
#[tokio::test]
async fn fleet_scope_without_redis_is_refused_with_its_path() {
    let (b, gw) = gateway_with("key: [client_ip], rate: 10/s").await;
    let r = client()
        .put(gw.admin_url("/admin/v1/config"))
        .body(yaml_for(
            &b,
            "key: [client_ip], rate: 10/s, scope: fleet",
            "",
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let doc: serde_json::Value = r.json().await.unwrap();
    assert_eq!(doc["errors"][0]["path"], "rate_limits[0].scope");
    assert_eq!(
        doc["errors"][0]["message"],
        "scope: fleet shares the rate through Redis: it needs store.kind: redis"
    );
}

/// Sends one keep-alive request on `s`; the answer's status line, or
/// `None` when the gateway closed the connection without answering.
async fn exchange(s: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET /x HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .ok()?;
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.ok()?;
    (n > 0).then(|| {
        String::from_utf8_lossy(&buf[..n])
            .lines()
            .next()
            .unwrap_or("")
            .to_owned()
    })
}

/// `limits.max_connections_per_client: 2`: a client with two connections
/// open has a third closed at once, unanswered and counted; once one of
/// the two is closed it may open another.
#[tokio::test]
async fn a_client_over_its_connection_bound_is_closed_and_counted() {
    use tokio::net::TcpStream;
    let b = Backend::start("n0").await;
    let yaml = yaml_for(&b, "key: [client_ip], rate: 1000/s", "")
        + "limits: { max_connections_per_client: 2 }\n";
    let gw = Gateway::start(&yaml).await;
    let mut one = TcpStream::connect(gw.addr).await.unwrap();
    let mut two = TcpStream::connect(gw.addr).await.unwrap();
    for s in [&mut one, &mut two] {
        let line = exchange(s).await.expect("served");
        assert!(line.contains(" 200 "), "{line}");
    }
    let mut three = TcpStream::connect(gw.addr).await.unwrap();
    assert_eq!(exchange(&mut three).await, None, "a third is closed");
    let text = gw.metrics().await;
    assert!(
        text.contains(
            "hopgate_client_connections_refused_total{limit=\"max_connections_per_client\"} 1"
        ),
        "{text}"
    );
    drop(one);
    let served_again = within(Duration::from_secs(5), || async {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        exchange(&mut s).await.is_some_and(|l| l.contains(" 200 "))
    })
    .await;
    assert!(served_again, "no new connection served after one closed");
    assert!(
        exchange(&mut two).await.is_some(),
        "the second stays served"
    );
}
