//! hopgate's HTTP/1.1 codec: the request and response head parsers, the
//! server's request built from a parsed head, and the chunked decoder over
//! arbitrary bytes. Never a panic; a parsed head's ranges lie inside the
//! head and its framing is never ambiguous; a request built from it has at
//! most its lines and one `Content-Length`; the chunked decoder gives the
//! same body, trailers and verdict however its input is split.
#![no_main]

use hopgate_proxy::fuzzing::http1::{
    parse_request, parse_response, request_body, request_from_head, response_kind,
    ChunkedDecoder, Head, Step,
};
use libfuzzer_sys::fuzz_target;

fn check_head(data: &[u8], head: &Head) {
    assert!(head.len <= data.len());
    for r in [&head.method, &head.target, &head.reason] {
        assert!(r.end <= head.len);
    }
    for h in &head.headers {
        assert!(h.name.end <= head.len && h.value.end <= head.len);
        assert!(!h.name.is_empty());
        assert!(!data[h.value.clone()].iter().any(|b| matches!(b, b'\0' | b'\r' | b'\n')));
    }
    // Never both a length and chunked.
    assert!(!(head.facts.chunked && head.facts.content_length.is_some()));
    // No bare LF anywhere in an accepted head.
    let bytes = &data[..head.len];
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            assert!(i > 0 && bytes[i - 1] == b'\r');
        }
    }
}

/// Decodes `input` fed `step` bytes at a time: the body, the trailer
/// section and whether it ended, or `None` on an error.
fn chunked(input: &[u8], step: usize) -> Option<(Vec<u8>, Vec<u8>, bool)> {
    let mut dec = ChunkedDecoder::new();
    let mut buf: Vec<u8> = Vec::new();
    let mut body = Vec::new();
    let mut fed = 0;
    loop {
        match dec.decode(&buf).ok()? {
            Step::Data { start, len } => {
                assert!(len > 0 && start + len <= buf.len());
                body.extend_from_slice(&buf[start..start + len]);
                buf.drain(..start + len);
            }
            Step::End { start, len } => {
                assert!(start + len <= buf.len());
                let trailers = buf[start..start + len].to_vec();
                return Some((body, trailers, true));
            }
            Step::Need { consumed } => {
                assert!(consumed <= buf.len());
                buf.drain(..consumed);
                if fed == input.len() {
                    return Some((body, Vec::new(), false));
                }
                let n = step.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(head)) = parse_request(data) {
        check_head(data, &head);
        let _ = request_body(&head);
        if let Ok(req) = request_from_head(&head, data) {
            assert!(req.headers().len() <= head.headers.len());
            assert!(req.headers().get_all(http::header::CONTENT_LENGTH).iter().count() <= 1);
        }
    }
    if let Ok(Some(head)) = parse_response(data) {
        check_head(data, &head);
        let _ = response_kind(&head, false);
        let _ = response_kind(&head, true);
    }
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let whole = chunked(rest, rest.len().max(1));
    let pieces = chunked(rest, usize::from(split % 16) + 1);
    match (&whole, &pieces) {
        // An error may show earlier or later, never be missed: both err.
        (None, None) => {}
        (Some(a), Some(b)) if a.2 && b.2 => assert_eq!(a, b),
        // Unfinished input: what was decoded agrees as far as it went.
        (Some(a), Some(b)) => {
            let n = a.0.len().min(b.0.len());
            assert_eq!(a.0[..n], b.0[..n]);
        }
        _ => panic!("split-dependent verdict: {whole:?} vs {pieces:?}"),
    }
});
