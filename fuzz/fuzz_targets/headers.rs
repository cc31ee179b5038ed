//! Header scanning: the request and response scans, hop-by-hop stripping,
//! `X-Forwarded-For` appending and session-token extraction (cookie or
//! header) over arbitrary header lists; never a panic, and stripping
//! leaves no hop-by-hop header behind.
#![no_main]

use std::sync::Arc;

use hopgate_core::config::SessionsConfig;
use hopgate_core::session::SessionKeys;
use hopgate_proxy::fuzzing::{append_forwarded_for, scan_request, scan_response, strip_request};
use hopgate_proxy::fuzzing::identify;
use hopgate_store::Sessions;
use hopgate_store::MemoryStore;
use http::header::CONNECTION;
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Lines of `name: value`, separated by '\n'.
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let _ = scan_response(&headers);
    let facts = scan_request(&headers);
    let sessions = Sessions {
        keys: SessionKeys::from_secrets(b"fuzzing-secret-of-32-bytes-long!", &[]),
        store: Arc::new(MemoryStore::new(1_000)),
    };
    let _ = identify(
        &sessions,
        &SessionsConfig::default(),
        &headers,
        1_800_000_000,
    );
    let mut parts = http::Request::new(()).into_parts().0;
    parts.headers = headers;
    strip_request(&mut parts.headers, &facts);
    assert!(!parts.headers.contains_key(CONNECTION));
    // A client's Hop-Maintenance never reaches a backend.
    assert!(!parts.headers.contains_key("hop-maintenance"));
    append_forwarded_for(&mut parts.headers, [127, 0, 0, 1].into());
});
