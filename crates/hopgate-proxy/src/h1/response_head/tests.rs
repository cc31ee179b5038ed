//! Tests of the response head conversion.

use super::*;
use crate::h1::testing::TestBody;

/// The map `response` makes of a whole response head.
fn map_of(head: &[u8], to_h2: bool) -> HeaderMap {
    let bytes = Bytes::copy_from_slice(head);
    let parsed = head::parse_response(&bytes).unwrap().unwrap();
    let resp = response::<TestBody>(&parsed, &bytes, to_h2).unwrap();
    resp.headers().clone()
}

fn names(map: &HeaderMap) -> Vec<&str> {
    map.iter().map(|(n, _)| n.as_str()).collect()
}

/// Every name `known` resolves is the name `HeaderName::from_bytes`
/// makes, in any case; the hop-by-hop ones are the answer step's.
#[test]
fn known_names_are_http_s() {
    let standard = [
        "age",
        "via",
        "date",
        "etag",
        "vary",
        "link",
        "server",
        "expires",
        "location",
        "set-cookie",
        "content-type",
        "last-modified",
        "accept-ranges",
        "cache-control",
        "content-length",
        "content-encoding",
    ];
    let hop = [
        "te",
        "upgrade",
        "trailer",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "proxy-authenticate",
        "proxy-authorization",
    ];
    for lower in standard {
        for name in [lower.to_owned(), lower.to_uppercase(), capitalized(lower)] {
            match known(name.as_bytes()) {
                Known::Name(n) => {
                    assert_eq!(n, HeaderName::from_bytes(name.as_bytes()).unwrap());
                }
                _ => panic!("{name} not resolved"),
            }
        }
    }
    for lower in hop {
        for name in [lower.to_owned(), lower.to_uppercase(), capitalized(lower)] {
            assert!(matches!(known(name.as_bytes()), Known::Hop), "{name}");
        }
    }
    assert!(matches!(known(b"Connection"), Known::Connection));
    for other in [
        "x-date",
        "dates",
        "server-timing",
        "te2",
        "x",
        "content-types",
    ] {
        assert!(matches!(known(other.as_bytes()), Known::Other), "{other}");
    }
}

fn capitalized(lower: &str) -> String {
    let mut up = true;
    lower
        .chars()
        .map(|c| {
            let c = if up { c.to_ascii_uppercase() } else { c };
            up = c == '-';
            c
        })
        .collect()
}

/// An HTTP/2 client's final answer gets no hop-by-hop line; every
/// other line keeps its value and its order. For any other client
/// every line is in the map (the answer step strips).
#[test]
fn an_http2_answer_leaves_hop_by_hop_lines_out() {
    let head = b"HTTP/1.1 200 OK\r\nServer: nginx\r\nConnection: keep-alive\r\n\
        Keep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\n\
        Proxy-Authenticate: Basic\r\nProxy-Connection: close\r\nUpgrade: h2c\r\n\
        TE: trailers\r\nX-Custom: a\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\
        Content-Type: text/plain\r\n\r\n";
    let h2 = map_of(head, true);
    assert_eq!(
        names(&h2),
        [
            "server",
            "x-custom",
            "set-cookie",
            "set-cookie",
            "content-type"
        ]
    );
    assert_eq!(
        h2.get_all("set-cookie").iter().collect::<Vec<_>>(),
        ["a=1", "b=2"]
    );
    assert_eq!(h2["x-custom"], "a");
    let all = map_of(head, false);
    assert_eq!(all.len(), 13);
    assert_eq!(all["keep-alive"], "timeout=5");
}

/// A `Connection` line that names another header stays in an HTTP/2
/// client's map (the answer step takes the named header out because
/// of it, and then the line); one naming only `keep-alive` or `close`
/// does not. A 101 keeps every line: its upgrade reads them.
#[test]
fn connection_naming_others_and_upgrades_keep_their_lines() {
    let named = map_of(
        b"HTTP/1.1 200 OK\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\n\r\n",
        true,
    );
    assert_eq!(names(&named), ["connection", "x-secret"]);
    let own = map_of(
        b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive , close\r\nX-Secret: 1\r\n\r\n",
        true,
    );
    assert_eq!(names(&own), ["x-secret"]);
    let upgrade = map_of(
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
        true,
    );
    assert_eq!(names(&upgrade), ["connection", "upgrade"]);
}
