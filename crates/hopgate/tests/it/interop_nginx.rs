//! hopgate's own HTTP/1.1 upstream client against a server this project did
//! not write (nginx, the Debian package), driven by a client it did not
//! write either (curl): length-delimited and chunked (gzip) bodies, HEAD,
//! error statuses and several requests over kept-alive connections.

use crate::harness::{config, curl, Gateway, Nginx};

/// An nginx serving a 200 KiB text (gzip answers it chunked) and a small
/// one.
async fn start_nginx() -> Nginx {
    let text: String = (0..6_000)
        .map(|i| format!("line {i} of the nginx interop file\n"))
        .collect();
    Nginx::start(
        &[("big.txt", &text), ("small.txt", "hello from nginx\n")],
        "gzip on; gzip_types text/plain; gzip_min_length 1;",
        "root {root}; keepalive_requests 1000;",
    )
    .await
}

#[tokio::test]
async fn curl_through_hopgate_to_nginx_sees_what_nginx_serves() {
    let n = start_nginx().await;
    let svc = format!(
        "  - name: web\n    nodes:\n      - {{ id: nginx, address: \"{}\" }}\n",
        n.addr
    );
    let gw = Gateway::start(&config(
        &svc,
        "  - { id: all, match: { path_prefix: / }, service: web }",
    ))
    .await;
    let direct = |p: &str| format!("http://{}{p}", n.addr);
    let via = |p: &str| gw.url(p);

    // Length-delimited and gzip-chunked bodies arrive byte for byte.
    for (path, extra) in [("/big.txt", None), ("/big.txt", Some("--compressed"))] {
        let mut a = vec![];
        if let Some(e) = extra {
            a.push(e);
        }
        let d = direct(path);
        let v = via(path);
        let mut da = a.clone();
        da.push(&d);
        let mut va = a.clone();
        va.push(&v);
        let want = curl(&da).await;
        assert_eq!(want.lines().count(), 6_000, "{path}");
        assert!(want.starts_with("line 0 of the nginx interop file\n"));
        assert_eq!(curl(&va).await, want, "{path} {extra:?}");
    }
    // The compressed answer really was chunked on nginx's side.
    let head = curl(&[
        "-D",
        "-",
        "-o",
        "/dev/null",
        "--compressed",
        &direct("/big.txt"),
    ])
    .await;
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );

    // HEAD, 404 and 405 pass through with nginx's status; HEAD has no body.
    let status = |args: Vec<String>| async move {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.extend(["-o", "/dev/null", "-w", "%{http_code} %{size_download}"]);
        curl(&a).await
    };
    assert_eq!(status(vec!["-I".into(), via("/small.txt")]).await, "200 0");
    assert_eq!(
        status(vec![via("/missing.txt")]).await.split(' ').next(),
        Some("404")
    );
    assert_eq!(
        status(vec!["-X".into(), "DELETE".into(), via("/small.txt")])
            .await
            .split(' ')
            .next(),
        Some("405")
    );

    // Several requests on one client connection, each answered in full.
    let urls: Vec<String> = (0..5).map(|_| via("/small.txt")).collect();
    let mut args: Vec<&str> = vec![];
    for u in &urls {
        args.push(u);
    }
    assert_eq!(curl(&args).await, "hello from nginx\n".repeat(5));
}
