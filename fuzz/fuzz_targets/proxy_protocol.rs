//! PROXY protocol headers (v1 and v2) as an untrusted peer sends them:
//! finding where a header ends never claims more bytes than arrived or
//! than the protocol allows, parsing never panics, and every header the
//! gateway itself writes to a node (built from fuzzed addresses) is found
//! whole and read back as the client it carries.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hopgate_core::config::ProxyProtocolVersion;
use hopgate_proxy::fuzzing::{header_for, proxy_protocol_read};
use libfuzzer_sys::fuzz_target;

/// Two addresses of one family from the first bytes (`None`: too short).
fn addresses(d: &[u8]) -> Option<(SocketAddr, SocketAddr)> {
    let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    if d.first()? % 2 == 0 {
        let b = d.get(1..13)?;
        let a = |x: &[u8]| IpAddr::V4(Ipv4Addr::new(x[0], x[1], x[2], x[3]));
        Some((
            SocketAddr::new(a(&b[0..4]), port(&b[4..6])),
            SocketAddr::new(a(&b[6..10]), port(&b[10..12])),
        ))
    } else {
        let b = d.get(1..37)?;
        let a = |x: &[u8]| {
            let o: [u8; 16] = x.try_into().unwrap_or([0; 16]);
            IpAddr::V6(Ipv6Addr::from(o))
        };
        Some((
            SocketAddr::new(a(&b[0..16]), port(&b[16..18])),
            SocketAddr::new(a(&b[18..34]), port(&b[34..36])),
        ))
    }
}

fuzz_target!(|data: &[u8]| {
    let (extent, parsed) = proxy_protocol_read(data);
    if let Some((len, version)) = extent {
        assert!(len <= data.len(), "a header ends inside what arrived");
        match version {
            1 => {
                assert!(data.starts_with(b"PROXY "));
                assert!(len <= 107, "v1 is at most 107 bytes");
                assert!(data[..len].ends_with(b"\r\n"));
            }
            2 => {
                assert!(data.starts_with(b"\r\n\r\n\0\r\nQUIT\n"));
                assert!((16..=4096).contains(&len));
            }
            v => panic!("version {v}"),
        }
        assert!(parsed.is_some());
    }
    let Some((client, node)) = addresses(data) else {
        return;
    };
    for (version, v) in [(ProxyProtocolVersion::V1, 1), (ProxyProtocolVersion::V2, 2)] {
        let header = header_for(version, Some(client), node);
        let (extent, parsed) = proxy_protocol_read(&header);
        assert_eq!(extent, Some((header.len(), v)), "{header:?}");
        assert_eq!(parsed, Some(Ok(Some(client))), "{header:?}");
        // What follows the header is not part of it.
        let mut more = header.clone();
        more.extend_from_slice(data);
        assert_eq!(proxy_protocol_read(&more).0, Some((header.len(), v)));
    }
});
