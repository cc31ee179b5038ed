use std::net::SocketAddr;

use hopgate_core::config::ProxyProtocolVersion;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::header_for;
use super::metrics::Outcome;
use super::read::{extent, header, parse, Accepts, Extent};

const BOTH: Accepts = Accepts { v1: true, v2: true };

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("address")
}

#[test]
fn extent_finds_the_end_of_either_version() {
    let v1 = b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\nGET / HTTP/1.1\r\n";
    assert_eq!(extent(v1), Extent::Header(41, 1));
    assert_eq!(extent(&v1[..20]), Extent::More);
    assert_eq!(extent(b"PRO"), Extent::More);
    assert_eq!(extent(b"GET / HTTP/1.1\r\n"), Extent::Bad);
    assert_eq!(extent(&[b'A'; 200]), Extent::Bad);
    let mut long = b"PROXY ".to_vec();
    long.extend([b'1'; 120]);
    assert_eq!(extent(&long), Extent::Bad);
    let v2 = header_for(
        ProxyProtocolVersion::V2,
        Some(addr("203.0.113.7:5555")),
        addr("10.0.0.1:80"),
    );
    assert_eq!(v2.len(), 28);
    assert_eq!(extent(&v2), Extent::Header(28, 2));
    assert_eq!(extent(&v2[..15]), Extent::More);
    assert_eq!(extent(&v2[..20]), Extent::More);
    // A length beyond the bound.
    let mut huge = v2[..14].to_vec();
    huge.extend([0xff, 0xff]);
    assert_eq!(extent(&huge), Extent::Bad);
}

#[test]
fn headers_written_parse_back() {
    let c4 = addr("203.0.113.7:5555");
    let c6 = addr("[2001:db8::7]:5555");
    let n4 = addr("10.0.0.1:80");
    for v in [ProxyProtocolVersion::V1, ProxyProtocolVersion::V2] {
        let h = header_for(v, Some(c4), n4);
        assert_eq!(parse(&h, BOTH), Ok(Some(c4)), "{v:?}");
        let h = header_for(v, Some(c6), n4);
        assert_eq!(parse(&h, BOTH), Ok(Some(c6)), "{v:?}");
        // Mixed families: the IPv4 client as IPv4-mapped IPv6.
        let h = header_for(v, Some(c4), addr("[2001:db8::1]:80"));
        let got = parse(&h, BOTH).expect("valid").expect("an address");
        assert_eq!(got.ip().to_canonical(), c4.ip());
        // No client: LOCAL / UNKNOWN.
        let h = header_for(v, None, n4);
        assert_eq!(parse(&h, BOTH), Ok(None), "{v:?}");
    }
    assert_eq!(
        header_for(ProxyProtocolVersion::V1, Some(c4), n4),
        b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80\r\n"
    );
}

#[test]
fn versions_not_accepted_and_garbage_are_refused() {
    let c = addr("203.0.113.7:5555");
    let n = addr("10.0.0.1:80");
    let v1 = header_for(ProxyProtocolVersion::V1, Some(c), n);
    let v2 = header_for(ProxyProtocolVersion::V2, Some(c), n);
    let only1 = Accepts {
        v1: true,
        v2: false,
    };
    let only2 = Accepts {
        v1: false,
        v2: true,
    };
    assert_eq!(parse(&v2, only1), Err(Outcome::Version));
    assert_eq!(parse(&v1, only2), Err(Outcome::Version));
    assert_eq!(parse(&v1, only1), Ok(Some(c)));
    for bad in [
        &b"PROXY TCP4 203.0.113.7 10.0.0.1 5555\r\n"[..],
        b"PROXY TCP4 999.0.113.7 10.0.0.1 5555 80\r\n",
        b"PROXY TCP6 203.0.113.7 10.0.0.1 5555 80\r\n",
        b"PROXY UDP4 203.0.113.7 10.0.0.1 5555 80\r\n",
        b"PROXY TCP4 203.0.113.7 10.0.0.1 5555 80 \r\n",
    ] {
        assert_eq!(
            parse(bad, BOTH),
            Err(Outcome::Malformed),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    // A v2 header whose version nibble is 3, or whose command is 2.
    let mut b = v2.clone();
    b[12] = 0x31;
    assert_eq!(parse(&b, BOTH), Err(Outcome::Malformed));
    b[12] = 0x22;
    assert_eq!(parse(&b, BOTH), Err(Outcome::Malformed));
    // Every prefix and every single-byte change of a v2 header: never a
    // panic.
    for i in 0..v2.len() {
        let _ = parse(&v2[..i], BOTH);
        for x in [0u8, 0x0f, 0x10, 0x7f, 0xff] {
            let mut b = v2.clone();
            b[i] = x;
            let _ = extent(&b);
            let _ = parse(&b, BOTH);
        }
    }
}

/// A connected pair of loopback sockets: (client, server side).
async fn pair() -> (tokio::net::TcpStream, tokio::net::TcpStream) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let c = tokio::net::TcpStream::connect(l.local_addr().expect("addr"))
        .await
        .expect("connect");
    let (s, _) = l.accept().await.expect("accept");
    (c, s)
}

#[tokio::test]
async fn a_split_header_is_read_exactly_and_the_rest_stays() {
    let c = addr("203.0.113.7:5555");
    for v in [ProxyProtocolVersion::V1, ProxyProtocolVersion::V2] {
        let (mut client, mut server) = pair().await;
        let h = header_for(v, Some(c), addr("10.0.0.1:80"));
        let writer = tokio::spawn(async move {
            for chunk in h.chunks(5) {
                client.write_all(chunk).await.expect("write");
                client.flush().await.expect("flush");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            client
                .write_all(b"GET / HTTP/1.1\r\n")
                .await
                .expect("write");
            client
        });
        assert_eq!(header(&mut server, BOTH).await, Ok(Some(c)), "{v:?}");
        let _client = writer.await.expect("writer");
        let mut rest = [0u8; 16];
        server.read_exact(&mut rest).await.expect("rest");
        assert_eq!(&rest, b"GET / HTTP/1.1\r\n");
    }
}

#[tokio::test]
async fn a_peer_that_closes_early_or_sends_http_is_refused() {
    let (mut client, mut server) = pair().await;
    client.write_all(b"PROXY TCP4 1.2").await.expect("write");
    drop(client);
    assert_eq!(header(&mut server, BOTH).await, Err(Outcome::Closed));
    let (mut client, mut server) = pair().await;
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(header(&mut server, BOTH).await, Err(Outcome::Malformed));
}
