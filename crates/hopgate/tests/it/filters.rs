//! Route filters end to end with parts this project did not write: Debian's
//! nginx as the origin, echoing the request line's target, the host and
//! chosen headers it received, and curl as the client, over HTTP/1.1 and
//! h2c. Each filter kind, the order of filters, rewrites with captures,
//! redirects as curl sees them, a direct response without any service (its
//! body from a file), the access line's rewritten path, and a reload with a
//! broken filter that keeps the running config.

use std::time::Duration;

use crate::harness::{client, curl, temp_path, within, Gateway, Nginx};

/// An nginx that answers every request with what it received.
async fn echo() -> Nginx {
    Nginx::start(
        &[],
        "",
        "location / { add_header X-Internal secret; return 200 \
         \"uri=$request_uri host=$host xa=$http_x_a xb=$http_x_b xc=$http_x_c \
         client=$http_x_client fhost=$http_x_forwarded_host fprefix=$http_x_forwarded_prefix\\n\"; }",
    )
    .await
}

const ROUTES: &str = "
  - id: hdr
    match: { path_prefix: /hdr }
    service: web
    filters:
      - request_headers: { set: { X-A: '1', X-Client: 'ip=${client_ip}' }, add: { X-B: '${route_id}' }, remove: [X-C] }
      - response_headers: { set: { Strict-Transport-Security: max-age=63072000, X-Route: '${route_id}' }, remove: [Server, X-Internal] }
  - id: strip
    match: { path_prefix: /api }
    service: web
    filters:
      - url_rewrite: { path: { replace_prefix: / }, host: app.internal }
  - id: re
    match: { path_prefix: /re }
    service: web
    filters:
      - url_rewrite: { path: { regex: '^/re/(?P<first>[^/]+)/(.*)$', replace: '/x/$2/${first}' } }
  - id: order
    match: { path_prefix: /order }
    service: web
    filters:
      - request_headers: { set: { X-A: one } }
      - request_headers: { remove: [X-A] }
      - request_headers: { add: { X-A: three } }
      - url_rewrite: { path: { replace_prefix: /v1 } }
      - url_rewrite: { path: { regex: '^/v1/(.*)$', replace: '/v2/$1' } }
  - id: https
    match: { path_prefix: /old }
    filters:
      - redirect: { scheme: https, status: 301 }
  - id: moved
    match: { path_prefix: /moved }
    filters:
      - redirect: { path: { replace_prefix: /new }, status: 308 }
  - id: maint
    match: { path_prefix: /maint }
    filters:
      - response_headers: { set: { Retry-After: '120' } }
      - direct_response: { status: 503, content_type: text/html, body: '<h1>maintenance</h1>' }
  - id: all
    match: { path_prefix: / }
    service: web
";

fn gateway_config(origin: std::net::SocketAddr, routes: &str) -> String {
    format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
         timeouts: {{ shutdown: 10s }}\nservices:\n  - name: web\n    nodes:\n      - {{ id: nginx, address: \"{origin}\" }}\nroutes:{routes}"
    )
}

/// curl's view of one exchange: the head (lowercased) and the body.
async fn fetch(h2: bool, extra: &[&str], url: &str) -> (String, String) {
    let mut args = vec!["-D", "-"];
    if h2 {
        args.push("--http2-prior-knowledge");
    }
    args.extend(extra);
    args.push(url);
    let out = curl(&args).await;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test]
async fn each_filter_kind_over_http1_and_h2c() {
    let n = echo().await;
    let gw = Gateway::start(&gateway_config(n.addr, ROUTES)).await;
    let port = gw.addr.port();
    for h2 in [false, true] {
        let proto = if h2 { "h2c" } else { "HTTP/1.1" };
        // Without filters: what nginx saw, its own headers back.
        let (head, body) = fetch(h2, &["-H", "X-C: c"], &gw.url("/plain?q=1")).await;
        assert!(
            body.starts_with("uri=/plain?q=1 host=127.0.0.1 xa= xb= xc=c "),
            "{proto}: {body}"
        );
        assert!(head.contains("\nserver: nginx"), "{proto}: {head}");
        assert!(head.contains("\nx-internal: secret"), "{proto}: {head}");

        // Request and response header edits, with variables.
        let (head, body) = fetch(h2, &["-H", "X-C: c"], &gw.url("/hdr/x")).await;
        assert!(
            body.starts_with(
                "uri=/hdr/x host=127.0.0.1 xa=1 xb=hdr xc= client=ip=127.0.0.1 fhost= fprefix="
            ),
            "{proto}: {body}"
        );
        assert!(
            head.contains("\nstrict-transport-security: max-age=63072000"),
            "{proto}: {head}"
        );
        assert!(head.contains("\nx-route: hdr"), "{proto}: {head}");
        assert!(!head.contains("\nserver:"), "{proto}: {head}");
        assert!(!head.contains("\nx-internal:"), "{proto}: {head}");

        // Prefix stripped and host rewritten, the originals forwarded, the
        // query kept.
        let (_, body) = fetch(h2, &[], &gw.url("/api/users?id=7")).await;
        assert!(
            body.starts_with(&format!(
                "uri=/users?id=7 host=app.internal xa= xb= xc= client= fhost=127.0.0.1:{port} fprefix=/api"
            )),
            "{proto}: {body}"
        );
        let (_, body) = fetch(h2, &[], &gw.url("/api")).await;
        assert!(
            body.starts_with("uri=/ host=app.internal"),
            "{proto}: {body}"
        );

        // A regex with a named and a numbered capture.
        let (_, body) = fetch(h2, &[], &gw.url("/re/aa/b/c?z")).await;
        assert!(
            body.starts_with("uri=/x/b/c/aa?z host=127.0.0.1"),
            "{proto}: {body}"
        );

        // Filters run in the order written: set, remove, add; then two
        // rewrites, the second seeing the first's path.
        let (_, body) = fetch(h2, &["-H", "X-A: client"], &gw.url("/order/p")).await;
        assert!(
            body.starts_with("uri=/v2/p host=127.0.0.1 xa=three "),
            "{proto}: {body}"
        );

        // Redirects, as curl sees them.
        let loc = curl_redirect(h2, &gw.url("/old/x?q=1")).await;
        assert_eq!(loc, "301 https://127.0.0.1/old/x?q=1", "{proto}");
        let loc = curl_redirect(h2, &gw.url("/moved/x?q=1")).await;
        assert_eq!(
            loc,
            format!("308 http://127.0.0.1:{port}/new/x?q=1"),
            "{proto}"
        );

        // A direct response, no service behind it.
        let (head, body) = fetch(h2, &[], &gw.url("/maint/anything")).await;
        assert!(
            head.starts_with("http/1.1 503") || head.starts_with("http/2 503"),
            "{proto}: {head}"
        );
        assert!(
            head.contains("\ncontent-type: text/html"),
            "{proto}: {head}"
        );
        assert!(head.contains("\nretry-after: 120"), "{proto}: {head}");
        assert_eq!(body, "<h1>maintenance</h1>", "{proto}");
    }
    // The access line names the path the client asked for and the one sent
    // upstream; a line of a route without a rewrite has no upstream_path.
    let logged = || gw.logs().contains("path=\"/maint/anything\"");
    within(Duration::from_secs(10), || async { logged() }).await;
    let logs = gw.logs();
    let line = logs
        .lines()
        .find(|l| l.contains("path=\"/api/users\""))
        .unwrap_or_else(|| panic!("no access line for /api/users:\n{logs}"));
    assert!(line.contains("upstream_path=\"/users\""), "{line}");
    let plain = logs
        .lines()
        .find(|l| l.contains("path=\"/plain\""))
        .unwrap();
    assert!(!plain.contains("upstream_path"), "{plain}");
}

/// `STATUS LOCATION` as curl reports a redirect (not followed).
async fn curl_redirect(h2: bool, url: &str) -> String {
    let mut args = vec!["-o", "/dev/null", "-w", "%{http_code} %{redirect_url}"];
    if h2 {
        args.push("--http2-prior-knowledge");
    }
    args.push(url);
    curl(&args).await
}

/// A config with no service at all: one route answering from a file, one
/// redirecting to HTTPS. A broken filter config offered by reload is
/// refused with its field path and the running config keeps answering; an
/// edited page file is read again by the next reload.
#[tokio::test]
async fn direct_responses_need_no_service_and_bad_reloads_keep_the_running_config() {
    let page = temp_path("html");
    std::fs::write(&page, "<h1>back soon</h1>\n").unwrap();
    let doc = |body_file: &str, extra: &str| {
        format!(
            "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
             routes:\n  - id: page\n    match: {{ path_prefix: /page }}\n    filters:\n      \
             - direct_response: {{ status: 503, content_type: text/html, body_file: \"{body_file}\" }}\n{extra}  \
             - id: rest\n    match: {{ path_prefix: / }}\n    filters:\n      - redirect: {{ scheme: https }}\n"
        )
    };
    let good = doc(&page.display().to_string(), "");
    let gw = Gateway::start(&good).await;
    let (head, body) = fetch(false, &[], &gw.url("/page")).await;
    assert!(head.starts_with("http/1.1 503"), "{head}");
    assert_eq!(body, "<h1>back soon</h1>\n");
    assert_eq!(
        curl_redirect(false, &gw.url("/a?b")).await,
        "302 https://127.0.0.1/a?b"
    );

    let c = client();
    let broken = [
        (
            doc(
                &page.display().to_string(),
                "      - request_headers: { set: { X-A: '1' } }\n",
            ),
            "routes[0].filters[1].request_headers: never runs",
        ),
        (
            doc("/nonexistent/hopgate-page.html", ""),
            "routes[0].filters[0].direct_response.body_file: cannot read",
        ),
        (
            good.replace("scheme: https", "scheme: https, status: 200"),
            "routes[1].filters[0].redirect.status",
        ),
    ];
    for (text, expect) in broken {
        let r = c
            .put(gw.admin_url("/admin/v1/config"))
            .body(text)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{expect}");
        let v: serde_json::Value = r.json().await.unwrap();
        let named = v["errors"].as_array().unwrap().iter().any(|e| {
            format!(
                "{}: {}",
                e["path"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            )
            .contains(expect)
        });
        assert!(named, "{expect:?} not in {v}");
        let (_, body) = fetch(false, &[], &gw.url("/page")).await;
        assert_eq!(body, "<h1>back soon</h1>\n", "still serving after {expect}");
    }
    // A new page under a new name: the reload reads it.
    let page2 = temp_path("html");
    std::fs::write(&page2, "<h1>new page</h1>\n").unwrap();
    let r = c
        .put(gw.admin_url("/admin/v1/config"))
        .body(doc(&page2.display().to_string(), ""))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{:?}", r.text().await);
    let (_, body) = fetch(false, &[], &gw.url("/page")).await;
    assert_eq!(body, "<h1>new page</h1>\n");
    // The same document again: nothing changes while the page is the
    // same; once the page file is edited, the same document is a new
    // version answering the new page.
    let same = doc(&page2.display().to_string(), "");
    let put = |text: String| {
        let c = c.clone();
        let url = gw.admin_url("/admin/v1/config");
        async move {
            let r = c.put(url).body(text).send().await.unwrap();
            assert!(r.status().is_success());
            r.json::<serde_json::Value>().await.unwrap()
        }
    };
    let v1 = put(same.clone()).await;
    let v2 = put(same.clone()).await;
    assert_eq!(v1["version"], v2["version"], "{v1} {v2}");
    std::fs::write(&page2, "<h1>edited page</h1>\n").unwrap();
    let v3 = put(same).await;
    assert_ne!(v3["version"], v2["version"], "{v3}");
    let (_, body) = fetch(false, &[], &gw.url("/page")).await;
    assert_eq!(body, "<h1>edited page</h1>\n");
    let _ = std::fs::remove_file(&page);
    let _ = std::fs::remove_file(&page2);
}

/// `hopgate validate` on every document of the filter corpus (the one
/// core's unit test reads): exit 1, the field path and the reason on
/// stderr. Then a `body_file` that does not exist.
#[test]
fn hopgate_validate_names_each_broken_filter() {
    let corpus = include_str!("../../../hopgate-core/src/config/validate/filters/corpus.yaml");
    let base = "listeners:\n  - { name: public, address: 127.0.0.1:8080 }\nservices:\n  - name: api\n    nodes:\n      - { id: api-1, address: 127.0.0.1:8081, version: v1 }\n";
    let mut n = 0;
    let mut docs: Vec<(String, String)> = corpus
        .split("\n---\n")
        .map(|doc| {
            let head = doc.lines().next().unwrap().trim_start_matches("# ");
            let (path, needle) = head.split_once(" :: ").unwrap();
            (format!("{path}: "), format!("{base}{doc}\n# {needle}"))
        })
        .collect();
    docs.push((
        "routes[0].filters[0].direct_response.body_file: cannot read \"no-such-page.html\"".into(),
        format!("{base}routes:\n  - id: r\n    match: {{ path_prefix: / }}\n    filters:\n      - direct_response: {{ body_file: no-such-page.html }}\n"),
    ));
    for (expect, doc) in docs {
        let path = temp_path("yaml");
        std::fs::write(&path, &doc).unwrap();
        let out = std::process::Command::new(crate::harness::BIN)
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(out.status.code(), Some(1), "must be rejected:\n{doc}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&expect),
            "expected {expect:?} in:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{doc}");
        n += 1;
    }
    assert!(n > 20, "{n} documents");
}

/// Retries replay the rewritten request, and a split's every version gets
/// it: a dead node first in the service (every request that picks it is
/// retried on another), two nginx versions behind a weighted split.
#[tokio::test]
async fn retries_and_splits_send_the_rewritten_request() {
    let (a, b) = (echo().await, echo().await);
    let dead = crate::harness::dead_addr();
    let cfg = format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\n\
         services:\n  - name: web\n    nodes:\n      - {{ id: dead, address: \"{dead}\", version: a }}\n      \
         - {{ id: na, address: \"{}\", version: a }}\n      - {{ id: nb, address: \"{}\", version: b }}\n\
         routes:\n  - id: api\n    match: {{ path_prefix: /api }}\n    service: web\n    \
         split: [ {{ version: a, weight: 50 }}, {{ version: b, weight: 50 }} ]\n    filters:\n      \
         - url_rewrite: {{ path: {{ replace_prefix: /v2 }} }}\n      - request_headers: {{ set: {{ X-A: rewritten }} }}\n",
        a.addr, b.addr
    );
    let gw = Gateway::start(&cfg).await;
    for i in 0..12 {
        let (_, body) = fetch(i % 2 == 1, &[], &gw.url(&format!("/api/n{i}?k=v"))).await;
        assert!(
            body.starts_with(&format!("uri=/v2/n{i}?k=v host=127.0.0.1 xa=rewritten ")),
            "request {i}: {body}"
        );
    }
}

/// A WebSocket upgrade gets the request-side filters: its path is
/// rewritten to the backend's echo endpoint, and the tunnel works.
#[tokio::test]
async fn a_websocket_upgrade_is_rewritten() {
    use futures_util::{SinkExt, StreamExt};
    let be = crate::harness::Backend::start("ws").await;
    let cfg = crate::harness::config(
        &crate::harness::service("web", &[("ws", be.addr, "")]),
        "  - id: sock\n    match: { path_prefix: /socket }\n    service: web\n    filters:\n      \
         - url_rewrite: { path: { full: /ws } }\n      - request_headers: { set: { X-A: '1' } }",
    );
    let gw = Gateway::start(&cfg).await;
    let (mut ws, resp) = tokio_tungstenite::connect_async(format!("ws://{}/socket/x", gw.addr))
        .await
        .expect("upgrade through the rewritten path");
    assert_eq!(resp.status(), 101);
    ws.send(tokio_tungstenite::tungstenite::Message::text("hello"))
        .await
        .unwrap();
    let echoed = ws.next().await.unwrap().unwrap();
    assert_eq!(echoed.into_text().unwrap().as_str(), "hello");
}
