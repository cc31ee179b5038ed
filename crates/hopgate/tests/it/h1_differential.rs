//! The differential test of hopgate's own HTTP/1.1 server: one corpus of
//! raw requests sent over raw TCP to the gateway, in front of a raw-TCP
//! backend that records the exact bytes it receives, and to hyper's
//! HTTP/1.1 server on its own, the reference (hopgate once served HTTP/1.1
//! with it). The requests the backend receives must be the ones hyper read
//! (method, target, header lines less the hop-by-hop ones and the ones the
//! gateway sets, body, trailers), and the client must get the same status
//! lines; the ambiguous framing cases are answered 400 and never reach the
//! backend.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::harness::{dead_addr, Gateway};

/// A backend that records every request it reads, byte for byte, and
/// answers each with a 2-byte body (none to HEAD).
struct Recorder {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Recorder {
    async fn start() -> Recorder {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = Arc::clone(&got);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((s, _)) = l.accept().await {
                conns.spawn(record(s, Arc::clone(&g)));
            }
        });
        Recorder { addr, got, task }
    }

    fn take(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.got.lock())
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Where a chunked body that starts at `b[0]` ends (its trailer section
/// included), once it is all there.
fn chunked_end(b: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        let line = find(&b[at..], b"\r\n")?;
        let text = std::str::from_utf8(&b[at..at + line]).ok()?;
        let size = usize::from_str_radix(text.split(';').next()?.trim(), 16).ok()?;
        let after = at + line + 2;
        if size == 0 {
            if b.get(after..after + 2)? == b"\r\n" {
                return Some(after + 2);
            }
            return find(&b[after..], b"\r\n\r\n").map(|i| after + i + 4);
        }
        at = after + size + 2;
        if b.len() < at {
            return None;
        }
    }
}

/// The length of the request at the start of `b`, once it is all there.
fn request_len(b: &[u8]) -> Option<usize> {
    let head = find(b, b"\r\n\r\n")? + 4;
    let text = String::from_utf8_lossy(&b[..head]).to_ascii_lowercase();
    if text.contains("\r\ntransfer-encoding: chunked") {
        return chunked_end(&b[head..]).map(|n| head + n);
    }
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    (b.len() >= head + len).then_some(head + len)
}

async fn record(mut s: TcpStream, got: Arc<Mutex<Vec<Vec<u8>>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        while let Some(n) = request_len(&buf) {
            let req: Vec<u8> = buf.drain(..n).collect();
            let head = req.starts_with(b"HEAD ");
            let chunked = find(&req, b" /chunked").is_some_and(|i| i < 8);
            got.lock().push(req);
            let answer: &[u8] = if head {
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
            } else if chunked {
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-t\r\n\r\n5\r\nhello\r\n0\r\nx-t: 1\r\n\r\n"
            } else {
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
            };
            if s.write_all(answer).await.is_err() {
                return;
            }
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Sends `bytes` on a new connection and reads until the server closes it
/// (every case ends with a request that asks for the close, or is refused).
async fn exchange(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "no end of the answers to {:?}",
        String::from_utf8_lossy(bytes)
    );
    got
}

/// The status lines in what a client received (the bodies here never
/// contain `HTTP/1.`; a status line may follow a body with no line end).
fn status_lines(answer: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(answer);
    text.match_indices("HTTP/1.")
        .map(|(i, _)| {
            let line = &text[i..];
            line[..line.find("\r\n").unwrap_or(line.len())].to_owned()
        })
        .collect()
}

/// A request as the comparison sees it: method, target (origin form),
/// header lines (lower-case names, in order) less the hop-by-hop ones and
/// the ones the gateway sets, and body bytes. Not the trailers: the
/// gateway forwards only those its request's `Trailer` line announces, a
/// line it strips as hop-by-hop.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

/// Names left out of the comparison: hop-by-hop and framing lines (each
/// hop frames its own), the lines the gateway sets or replaces, and the
/// names a request's `Connection` lists; `Expect`, which the gateway
/// answers itself.
fn compared(headers: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let listed: Vec<String> = headers
        .iter()
        .filter(|(n, _)| n == "connection")
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .to_ascii_lowercase()
                .split(',')
                .map(|t| t.trim().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    const LEFT_OUT: &[&str] = &[
        // `Expect` is the gateway's to answer (`100 Continue`).
        "expect",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "content-length",
        "upgrade",
        "proxy-connection",
        "x-request-id",
        "x-forwarded-for",
        "x-forwarded-proto",
        "x-route-rule-id",
        "x-upstream-addr",
        "traceparent",
        "tracestate",
    ];
    headers
        .into_iter()
        .filter(|(n, _)| !LEFT_OUT.contains(&n.as_str()) && !listed.contains(n))
        .collect()
}

/// The reference: hyper's HTTP/1.1 server, recording each request it
/// reads and answering each with a 2-byte body.
struct Reference {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Reference {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Reference {
    async fn start() -> Reference {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = Arc::clone(&got);
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                let g = Arc::clone(&g);
                tokio::spawn(async move {
                    let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let g = Arc::clone(&g);
                        async move {
                            let seen = seen_by_hyper(req).await;
                            g.lock().push(seen);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from_static(b"ok"),
                            )))
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .await;
                });
            }
        });
        Reference { addr, got, task }
    }

    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.got.lock())
    }
}

fn pairs(map: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    map.iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

async fn seen_by_hyper(req: hyper::Request<hyper::body::Incoming>) -> Seen {
    let (parts, body) = req.into_parts();
    let collected = body.collect().await.unwrap();
    Seen {
        method: parts.method.to_string(),
        target: parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned(),
        headers: compared(pairs(&parts.headers)),
        body: collected.to_bytes().to_vec(),
    }
}

/// A request the backend recorded, as the comparison sees it.
fn seen_by_backend(req: &[u8]) -> Seen {
    let end = find(req, b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&req[..end - 4]).into_owned();
    let mut lines = head.split("\r\n");
    let start: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let headers: Vec<(String, Vec<u8>)> = req[..end - 4]
        .split(|b| *b == b'\n')
        .skip(1)
        .map(|l| {
            let l = l.strip_suffix(b"\r").unwrap_or(l);
            let at = l.iter().position(|b| *b == b':').unwrap();
            let v = &l[at + 1..];
            let v = v.trim_ascii();
            (
                String::from_utf8_lossy(&l[..at]).to_ascii_lowercase(),
                v.to_vec(),
            )
        })
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v == b"chunked");
    let body = if chunked {
        unchunk(&req[end..])
    } else {
        req[end..].to_vec()
    };
    Seen {
        method: start[0].to_owned(),
        target: start[1].to_owned(),
        headers: compared(headers),
        body,
    }
}

/// A whole chunked body's data.
fn unchunk(mut b: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    loop {
        let line_end = find(b, b"\r\n").unwrap();
        let line = String::from_utf8_lossy(&b[..line_end]).into_owned();
        let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16).unwrap();
        b = &b[line_end + 2..];
        if size == 0 {
            return data;
        }
        data.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Requests every server must forward as they are.
const SAME: &[(&str, &[u8])] = &[
    (
        "plain GET",
        b"GET /a?x=1 HTTP/1.1\r\nhost: example\r\nuser-agent: diff\r\nconnection: close\r\n\r\n",
    ),
    (
        "POST with a length",
        b"POST /p HTTP/1.1\r\nhost: example\r\ncontent-type: text/plain\r\ncontent-length: 11\r\nconnection: close\r\n\r\nhello world",
    ),
    (
        "chunked POST with trailers",
        b"POST /c HTTP/1.1\r\nhost: example\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\nconnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 42\r\n\r\n",
    ),
    (
        "chunked POST with an extension and no trailers",
        b"POST /c2 HTTP/1.1\r\nhost: example\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\n",
    ),
    ("HTTP/1.0", b"GET /old HTTP/1.0\r\nhost: example\r\n\r\n"),
    (
        "HTTP/1.0 keep-alive, then a second request",
        b"GET /k1 HTTP/1.0\r\nhost: example\r\nconnection: keep-alive\r\n\r\nGET /k2 HTTP/1.0\r\nhost: example\r\n\r\n",
    ),
    (
        "HTTP/1.0 without Host",
        b"GET /nohost HTTP/1.0\r\n\r\n",
    ),
    (
        "a pipelined pair",
        b"GET /1 HTTP/1.1\r\nhost: example\r\n\r\nPOST /2 HTTP/1.1\r\nhost: example\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc",
    ),
    (
        "three pipelined, bodies between",
        b"PUT /u1 HTTP/1.1\r\nhost: example\r\ncontent-length: 2\r\n\r\nxyPOST /u2 HTTP/1.1\r\nhost: example\r\ntransfer-encoding: chunked\r\n\r\n1\r\nz\r\n0\r\n\r\nGET /u3 HTTP/1.1\r\nhost: example\r\nconnection: close\r\n\r\n",
    ),
    (
        "Expect: 100-continue",
        b"POST /e HTTP/1.1\r\nhost: example\r\nexpect: 100-continue\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbody",
    ),
    (
        "odd but legal headers",
        b"GET /odd%20path?q=a%2Fb HTTP/1.1\r\nHost: example\r\nX-Mixed-Case: Value\r\nx-empty:\r\nx-tab:\tleading tab\r\nx-dup: 1\r\nx-dup: 2\r\nx-obs: caf\xe9\r\nx-spaces:   padded   \r\nAccept: */*\r\nX-Forwarded-For: 192.0.2.1\r\nconnection: close\r\n\r\n",
    ),
    (
        "absolute-form target",
        b"GET http://example/abs?y=2 HTTP/1.1\r\nhost: example\r\nconnection: close\r\n\r\n",
    ),
    (
        "HEAD",
        b"HEAD /h HTTP/1.1\r\nhost: example\r\nconnection: close\r\n\r\n",
    ),
    (
        "hop-by-hop headers named in Connection",
        b"GET /hop HTTP/1.1\r\nhost: example\r\nconnection: x-private, close\r\nx-private: secret\r\nkeep-alive: timeout=5\r\nte: trailers\r\n\r\n",
    ),
    (
        "repeated equal Content-Length",
        b"POST /cl HTTP/1.1\r\nhost: example\r\ncontent-length: 3\r\ncontent-length: 3\r\nconnection: close\r\n\r\nabc",
    ),
    (
        "the lines the gateway sets, sent by the client",
        b"GET /own HTTP/1.1\r\nhost: example\r\nX-Route-Rule-Id: forged\r\nx-upstream-addr: 10.9.9.9:1\r\nX-Forwarded-Proto: https\r\ntraceparent: not-a-trace\r\ntracestate: k=v\r\nconnection: close\r\n\r\n",
    ),
    (
        "an empty body with Content-Length: 0",
        b"POST /zero HTTP/1.1\r\nhost: example\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    ),
];

/// Framing two parsers could read differently: refused, never forwarded.
const AMBIGUOUS: &[(&str, &[u8])] = &[
    (
        "Content-Length and Transfer-Encoding",
        b"POST /x HTTP/1.1\r\nhost: example\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "differing Content-Lengths",
        b"POST /x HTTP/1.1\r\nhost: example\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd",
    ),
    (
        "a Content-Length list that disagrees",
        b"POST /x HTTP/1.1\r\nhost: example\r\ncontent-length: 3, 4\r\n\r\nabcd",
    ),
    (
        "an unknown transfer coding",
        b"POST /x HTTP/1.1\r\nhost: example\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "identity transfer coding",
        b"POST /x HTTP/1.1\r\nhost: example\r\ntransfer-encoding: identity\r\n\r\nabc",
    ),
    (
        "chunked twice",
        b"POST /x HTTP/1.1\r\nhost: example\r\ntransfer-encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "Transfer-Encoding in HTTP/1.0",
        b"POST /x HTTP/1.0\r\nhost: example\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    (
        "obsolete line folding",
        b"GET /x HTTP/1.1\r\nhost: example\r\nx-fold: a\r\n b\r\n\r\n",
    ),
    ("bare LF line ends", b"GET /x HTTP/1.1\nhost: example\n\n"),
    (
        "a bare LF inside the head",
        b"GET /x HTTP/1.1\r\nhost: example\nx-a: b\r\n\r\n",
    ),
    (
        "NUL in a value",
        b"GET /x HTTP/1.1\r\nhost: example\r\nx-nul: a\0b\r\n\r\n",
    ),
    (
        "CR in a value",
        b"GET /x HTTP/1.1\r\nhost: example\r\nx-cr: a\rb\r\n\r\n",
    ),
    (
        "a signed Content-Length",
        b"POST /x HTTP/1.1\r\nhost: example\r\ncontent-length: +3\r\n\r\nabc",
    ),
    (
        "a space before the colon",
        b"GET /x HTTP/1.1\r\nhost: example\r\ntransfer-encoding : chunked\r\n\r\n0\r\n\r\n",
    ),
];

#[tokio::test]
async fn the_gateway_forwards_what_hyper_reads_and_refuses_ambiguous_framing() {
    let backend = Recorder::start().await;
    let reference = Reference::start().await;
    let native = dead_addr();
    let yaml = format!(
        "listeners:\n  - {{ name: native, address: \"{native}\", http1: native }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ shutdown: 5s }}\nlimits: {{ max_connections: 1000 }}\nservices:\n  - name: app\n    nodes:\n      - {{ id: n1, address: \"{}\" }}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        backend.addr
    );
    let _gw = Gateway::start(&yaml).await;

    for (name, bytes) in SAME {
        let a = exchange(native, bytes).await;
        let got_native: Vec<Seen> = backend.take().iter().map(|r| seen_by_backend(r)).collect();
        let b = exchange(reference.addr, bytes).await;
        let got_hyper = reference.take();
        assert!(
            !got_native.is_empty(),
            "{name}: nothing reached the backend"
        );
        assert_eq!(
            got_native, got_hyper,
            "{name}: the backend received other requests than hyper read (gateway, then hyper)"
        );
        assert_eq!(
            status_lines(&a),
            status_lines(&b),
            "{name}: different status lines (gateway, then hyper)\ngateway: {}\nhyper: {}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        );
    }

    for (name, bytes) in AMBIGUOUS {
        let a = exchange(native, bytes).await;
        assert_eq!(
            status_lines(&a).first().map(String::as_str),
            Some("HTTP/1.1 400 Bad Request"),
            "{name}: native answered {}",
            String::from_utf8_lossy(&a)
        );
        assert!(
            backend.take().is_empty(),
            "{name}: the native server forwarded it"
        );
        // hyper's answer, for the record: not asserted (it reads some of
        // these one way where the native server refuses them).
        let mut r = TcpStream::connect(reference.addr).await.unwrap();
        r.write_all(bytes).await.unwrap();
        let mut b = Vec::new();
        // hyper may keep such a connection open: what came in a moment.
        let _ = tokio::time::timeout(Duration::from_millis(300), r.read_to_end(&mut b)).await;
        let read = reference.take().len();
        eprintln!("{name}: hyper {:?}, read {read}", status_lines(&b));
    }
}

/// A client's own lines of the names the gateway sets reach the backend
/// as the gateway's, once each; a valid `traceparent` keeps its trace and
/// its `tracestate`.
#[tokio::test]
async fn the_lines_the_gateway_sets_replace_the_clients() {
    let backend = Recorder::start().await;
    let gw = native_gateway(&backend).await;
    let lines_of = |req: &[u8], name: &str| -> Vec<String> {
        String::from_utf8_lossy(req)
            .split("\r\n")
            .filter_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .collect()
    };
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    for (traceparent, kept_state) in [("not-a-trace", false), (trace, true)] {
        let req = format!(
            "GET /own HTTP/1.1\r\nhost: example\r\nX-Route-Rule-Id: forged\r\nx-upstream-addr: 10.9.9.9:1\r\nX-Forwarded-Proto: https\r\nTraceparent: {traceparent}\r\ntracestate: k=v\r\nconnection: close\r\n\r\n"
        );
        exchange(gw.addr, req.as_bytes()).await;
        let got = backend.take();
        assert_eq!(got.len(), 1);
        let r = &got[0];
        let text = String::from_utf8_lossy(r);
        assert_eq!(lines_of(r, "x-route-rule-id"), ["all"], "{text}");
        assert_eq!(
            lines_of(r, "x-upstream-addr"),
            [backend.addr.to_string()],
            "{text}"
        );
        assert_eq!(lines_of(r, "x-forwarded-proto"), ["http"], "{text}");
        assert_eq!(lines_of(r, "x-forwarded-for"), ["127.0.0.1"], "{text}");
        let sent = lines_of(r, "traceparent");
        assert_eq!(sent.len(), 1, "{text}");
        assert_ne!(
            sent[0], traceparent,
            "a new parent id or a new trace: {text}"
        );
        assert_eq!(sent[0][..35] == trace[..35], kept_state, "{text}");
        let state = lines_of(r, "tracestate");
        assert_eq!(
            state,
            if kept_state {
                vec!["k=v".to_owned()]
            } else {
                vec![]
            },
            "{text}"
        );
    }
}

/// A one-listener gateway on the native server in front of a recorder,
/// with short head and idle deadlines.
async fn native_gateway(backend: &Recorder) -> Gateway {
    Gateway::start(&format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\ntimeouts: {{ shutdown: 5s, header_read: 1s, idle: 2s }}\nservices:\n  - name: app\n    nodes:\n      - {{ id: n1, address: \"{}\" }}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        backend.addr
    ))
    .await
}

/// The connection is closed by the server within `bound` (a bound against
/// a hang, not a timing assertion).
async fn closed_within(s: &mut TcpStream, bound: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let r = tokio::time::timeout(bound, s.read_to_end(&mut got)).await;
    assert!(
        r.is_ok(),
        "the server left the connection open: {}",
        String::from_utf8_lossy(&got)
    );
    got
}

#[tokio::test]
async fn native_server_connection_rules() {
    let backend = Recorder::start().await;
    let gw = native_gateway(&backend).await;

    // Half-close: the client shuts its write side after a whole request
    // and still gets the answer.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /half HTTP/1.1\r\nhost: example\r\n\r\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let got = closed_within(&mut s, Duration::from_secs(20)).await;
    assert_eq!(
        status_lines(&got),
        ["HTTP/1.1 200 OK"],
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(got.ends_with(b"ok"));
    backend.take();

    // A head begun and not finished within header_read: 408, closed.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nhost: exa")
        .await
        .unwrap();
    let got = closed_within(&mut s, Duration::from_secs(20)).await;
    assert_eq!(
        status_lines(&got),
        ["HTTP/1.1 408 Request Timeout"],
        "{}",
        String::from_utf8_lossy(&got)
    );

    // An idle keep-alive connection is closed after timeouts.idle.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"GET /idle HTTP/1.1\r\nhost: example\r\n\r\n")
        .await
        .unwrap();
    let got = closed_within(&mut s, Duration::from_secs(30)).await;
    assert_eq!(status_lines(&got), ["HTTP/1.1 200 OK"]);
    backend.take();

    // Too many header lines: 431, never forwarded.
    let many: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let got = exchange(
        gw.addr,
        format!("GET /many HTTP/1.1\r\nhost: example\r\n{many}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        status_lines(&got),
        ["HTTP/1.1 431 Request Header Fields Too Large"]
    );
    assert!(backend.take().is_empty());

    // A head larger than the buffer limit: 431, never forwarded.
    let big = "a".repeat(200 << 10);
    let got = exchange(
        gw.addr,
        format!("GET /big HTTP/1.1\r\nhost: example\r\nx-big: {big}\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(
        status_lines(&got),
        ["HTTP/1.1 431 Request Header Fields Too Large"]
    );
    assert!(backend.take().is_empty());

    // An answer of unknown length to an HTTP/1.0 client: close-delimited,
    // no chunked coding it could not read.
    let got = exchange(gw.addr, b"GET /chunked HTTP/1.0\r\nhost: example\r\n\r\n").await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.starts_with("http/1.0 200 ok\r\n"), "{text}");
    assert!(!text.contains("transfer-encoding"), "{text}");
    assert!(text.ends_with("\r\n\r\nhello"), "{text}");

    // Chunked to an HTTP/1.1 client. The backend's `Trailer` header is
    // hop-by-hop, so its trailers stay behind even for a client that sent
    // `TE: trailers` (as with hyper's server): the body still ends well.
    let got = exchange(
        gw.addr,
        b"GET /chunked HTTP/1.1\r\nhost: example\r\nconnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert!(text.ends_with("\r\n5\r\nhello\r\n0\r\n\r\n"), "{text}");
    let got = exchange(
        gw.addr,
        b"GET /chunked HTTP/1.1\r\nhost: example\r\nte: trailers\r\nconnection: close\r\n\r\n",
    )
    .await;
    let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(text.ends_with("\r\n5\r\nhello\r\n0\r\n\r\n"), "{text}");

    backend.take();

    // Pipelined requests whose heads arrive in one segment are answered
    // in order, each once.
    let got = exchange(
        gw.addr,
        b"GET /p1 HTTP/1.1\r\nhost: example\r\n\r\nGET /chunked HTTP/1.1\r\nhost: example\r\n\r\nGET /p3 HTTP/1.1\r\nhost: example\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(
        status_lines(&got).len(),
        3,
        "{}",
        String::from_utf8_lossy(&got)
    );
    let order: Vec<String> = backend
        .take()
        .iter()
        .map(|r| {
            String::from_utf8_lossy(&r[..r.iter().position(|b| *b == b'\r').unwrap_or(0)])
                .into_owned()
        })
        .collect();
    assert_eq!(
        order,
        [
            "GET /p1 HTTP/1.1",
            "GET /chunked HTTP/1.1",
            "GET /p3 HTTP/1.1"
        ]
    );
    let text = String::from_utf8_lossy(&got);
    let (a, b) = (text.find("ok").unwrap(), text.find("hello").unwrap());
    assert!(a < b, "answers out of order: {text}");

    // Expect: 100-continue: the interim answer comes before the body is
    // sent, then the final one.
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(b"POST /e HTTP/1.1\r\nhost: example\r\nexpect: 100-continue\r\ncontent-length: 4\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut interim = Vec::new();
    let mut chunk = [0u8; 256];
    while !interim.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut chunk))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before 100 Continue");
        interim.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    s.write_all(b"body").await.unwrap();
    let got = closed_within(&mut s, Duration::from_secs(20)).await;
    assert_eq!(status_lines(&got), ["HTTP/1.1 200 OK"]);
    let got = backend.take();
    assert!(
        got[0].ends_with(b"\r\n\r\nbody"),
        "{:?}",
        String::from_utf8_lossy(&got[0])
    );
}

#[tokio::test]
async fn native_server_takes_more_than_100_header_lines_when_the_limit_allows() {
    let backend = Recorder::start().await;
    let gw = Gateway::start(&format!(
        "listeners:\n  - {{ name: public, address: 127.0.0.1:0 }}\nadmin: {{ address: 127.0.0.1:0 }}\nlimits: {{ max_headers: 200 }}\nservices:\n  - name: app\n    nodes:\n      - {{ id: n1, address: \"{}\" }}\nroutes:\n  - {{ id: all, match: {{ path_prefix: / }}, service: app }}\n",
        backend.addr
    ))
    .await;
    let lines = |n: usize| -> String { (0..n).map(|i| format!("x-h{i}: v\r\n")).collect() };
    // 150 lines: under the raised limit, forwarded.
    let got = exchange(
        gw.addr,
        format!(
            "GET /150 HTTP/1.1\r\nhost: example\r\nconnection: close\r\n{}\r\n",
            lines(150)
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        status_lines(&got),
        ["HTTP/1.1 200 OK"],
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(backend.take().len(), 1);
    // 250 lines: above it, 431 and never forwarded.
    let got = exchange(
        gw.addr,
        format!(
            "GET /250 HTTP/1.1\r\nhost: example\r\nconnection: close\r\n{}\r\n",
            lines(250)
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        status_lines(&got),
        ["HTTP/1.1 431 Request Header Fields Too Large"]
    );
    assert!(backend.take().is_empty());
}
