//! The access line of a streamed answer: written when the body has ended,
//! with the bytes passed on (`bytes_out`), for answers of unknown length
//! (a chunked upstream body, to an HTTP/1.1 and an HTTP/2 client, with
//! trailers too) and for a client that goes away mid-body (the status it
//! was sent, the bytes passed on until then, `error: client_aborted`).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{client, config, h2_client, service, temp_path, Backend, Gateway};

async fn json_logging_gateway(b: &Backend, log: &Path) -> Gateway {
    let yaml = format!(
        "{}access_log: {{ format: json, path: {} }}\n",
        config(
            &service("svc", &[("n1", b.addr, "")]),
            "  - { id: all, match: { path_prefix: / }, service: svc }"
        ),
        log.display()
    );
    Gateway::start(&yaml).await
}

/// The JSON access line of request `id`, once it is in `log` (bounded
/// wait).
async fn line_of(log: &Path, id: &str) -> serde_json::Value {
    for _ in 0..800 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(id)) {
            return serde_json::from_str(line).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "no access line for {id} in {}:\n{}",
        log.display(),
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

#[tokio::test]
async fn a_chunked_answer_is_logged_with_the_bytes_sent_over_http1_and_http2() {
    let b = Backend::start("n1").await;
    let log = temp_path("access-chunked.json");
    let gw = json_logging_gateway(&b, &log).await;
    // 100,000 bytes in 16 KiB chunks, no Content-Length.
    let cases = [
        ("chunked-h1", client(), "/big?bytes=100000&chunked=1"),
        ("chunked-h2", h2_client(), "/big?bytes=100000&chunked=1"),
        (
            "chunked-h2-trailers",
            h2_client(),
            "/big?bytes=100000&trailers=1",
        ),
    ];
    for (id, c, path) in &cases {
        let r = c
            .get(gw.url(path))
            .header("x-request-id", *id)
            .header("te", "trailers")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{id}");
        assert!(r.content_length().is_none(), "{id}: the length is unknown");
        assert_eq!(r.bytes().await.unwrap().len(), 100_000, "{id}");
    }
    for (id, _, _) in &cases {
        let v = line_of(&log, id).await;
        assert_eq!(v["bytes_out"], 100_000, "{id}: {v}");
        assert_eq!(v["status"], 200, "{id}: {v}");
        assert_eq!(v["error"], "-", "{id}: {v}");
    }
    let v = line_of(&log, "chunked-h2").await;
    assert_eq!(v["protocol"], "HTTP/2.0", "{v}");
    // A HEAD answer has no body to wait for: logged at once, not as cut.
    let r = client()
        .head(gw.url("/big?bytes=5000&chunked=1"))
        .header("x-request-id", "head-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v = line_of(&log, "head-1").await;
    assert_eq!(v["bytes_out"], 0, "{v}");
    assert_eq!(v["error"], "-", "{v}");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_client_that_goes_away_mid_body_is_logged_with_what_was_sent() {
    let b = Backend::start("n1").await;
    let log = temp_path("access-cut.json");
    let gw = json_logging_gateway(&b, &log).await;
    // 10 MB in 16 KiB chunks, 20 ms apart: ~12 s if read to the end.
    const TOTAL: u64 = 10_000_000;
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(
        format!(
            "GET /slow?bytes={TOTAL}&chunked=1&chunk_delay_ms=20 HTTP/1.1\r\n\
             Host: cut.example\r\nx-request-id: cut-1\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Read the head and some of the body, then go away.
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while got.len() < 40_000 {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("the body flows")
            .unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200 "), "{:?}", &got[..40]);
    drop(s);
    let v = line_of(&log, "cut-1").await;
    assert_eq!(v["status"], 200, "{v}");
    assert_eq!(v["error"], "client_aborted", "{v}");
    assert_eq!(v["host"], "cut.example", "{v}");
    let sent = v["bytes_out"].as_u64().expect("bytes_out is a number");
    // At least what the client read (minus the head and chunk framing),
    // far less than the whole body.
    assert!((16_384..TOTAL).contains(&sent), "{v}");
    let _ = std::fs::remove_file(&log);
}
