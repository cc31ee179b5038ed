use super::*;

/// The line-end check looks only where lines end; it must say what a
/// scan of every byte says. Every mix of CRLF and bare LF over the
/// start line, three header lines (one with trailing whitespace, one
/// empty) and the empty line, with and without empty lines before the
/// start line, for requests and responses.
#[test]
fn line_ends_agree_with_a_full_scan() {
    let lines: [&[u8]; 4] = [b"X-A: 1", b"X-B: two  ", b"X-C:", b""];
    for start in [&b"GET /p HTTP/1.1"[..], b"HTTP/1.1 200 OK"] {
        for lead in [&b""[..], b"\r\n", b"\n"] {
            for mask in 0u32..32 {
                let mut text = lead.to_vec();
                text.extend_from_slice(start);
                for (i, line) in std::iter::once(&b""[..]).chain(lines).enumerate() {
                    if i > 0 {
                        text.extend_from_slice(line);
                    }
                    let eol: &[u8] = if mask & (1 << i) != 0 { b"\n" } else { b"\r\n" };
                    text.extend_from_slice(eol);
                }
                let parsed = if start.starts_with(b"HTTP/") {
                    parse_response(&text)
                } else {
                    parse_request(&text)
                };
                let bare = mask != 0 || lead == b"\n";
                assert_eq!(no_bare_lf(&text).is_err(), bare);
                let shown = String::from_utf8_lossy(&text);
                match parsed {
                    Err(HeadError::BareLf) => assert!(bare, "{shown:?}"),
                    Ok(Some(h)) => assert!(!bare && h.len == text.len(), "{shown:?}"),
                    other => panic!("{other:?}: {shown:?}"),
                }
            }
        }
    }
}

#[test]
fn more_lines_only_when_asked_for() {
    let many: String = (0..150).map(|i| format!("x-h{i}: v\r\n")).collect();
    let raw = format!("GET / HTTP/1.1\r\nhost: a\r\n{many}\r\n");
    assert_eq!(
        parse_request(raw.as_bytes()),
        Err(HeadError::TooManyHeaders)
    );
    assert_eq!(
        parse_request_up_to(raw.as_bytes(), 100),
        Err(HeadError::TooManyHeaders)
    );
    let head = parse_request_up_to(raw.as_bytes(), 200).unwrap().unwrap();
    assert_eq!(head.headers.len(), 151);
    assert_eq!(
        parse_request_up_to(raw.as_bytes(), 150),
        Err(HeadError::TooManyHeaders)
    );
}

fn req(text: &[u8]) -> Result<Option<Head>, HeadError> {
    parse_request(text)
}

fn resp(text: &[u8]) -> Result<Option<Head>, HeadError> {
    parse_response(text)
}

#[test]
fn a_request_head_is_ranges_of_the_buffer() {
    let buf = b"GET /a?b=c HTTP/1.1\r\nHost: x\r\nX-Two: 1 2\r\n\r\nbody";
    let h = req(buf).unwrap().unwrap();
    assert_eq!(h.len, buf.len() - 4);
    assert_eq!(&buf[h.method.clone()], b"GET");
    assert_eq!(&buf[h.target.clone()], b"/a?b=c");
    assert_eq!(h.minor, 1);
    assert_eq!(h.headers.len(), 2);
    assert_eq!(&buf[h.headers[1].name.clone()], b"X-Two");
    assert_eq!(&buf[h.headers[1].value.clone()], b"1 2");
    assert_eq!(request_body(&h), BodyKind::Empty);
    assert!(h.keeps_alive());
}

/// `TE` and `Expect` are a request's lines: a response's are not
/// taken as facts (nothing reads them there).
#[test]
fn te_and_expect_are_facts_of_requests_only() {
    let r = req(
        b"POST / HTTP/1.1\r\nTE: trailers\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
    )
    .unwrap()
    .unwrap();
    assert!(r.facts.te_trailers && r.facts.expect_continue);
    let a = resp(b"HTTP/1.1 200 OK\r\nTE: trailers\r\nExpect: 100-continue\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!a.facts.te_trailers && !a.facts.expect_continue);
}

#[test]
fn partial_heads_ask_for_more() {
    assert_eq!(req(b"GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
    assert_eq!(resp(b"HTTP/1.1 200 OK\r\n"), Ok(None));
    assert_eq!(resp(b""), Ok(None));
}

/// `name_is` answers what a case-insensitive compare answers for every
/// token name against the names it is used with, and their near
/// misses (every byte changed to every token character).
#[test]
fn name_is_agrees_with_a_case_insensitive_compare() {
    let tchars: Vec<u8> = (0u8..=127)
        .filter(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
        .collect();
    for lower in [
        &b"te"[..],
        b"host",
        b"date",
        b"range",
        b"accept",
        b"expect",
        b"upgrade",
        b"connection",
        b"keep-alive",
        b"content-type",
        b"content-length",
        b"x-route-rule-id",
        b"transfer-encoding",
        b"proxy-authorization",
        b"hop-session-context",
        b"a-name-longer-than-twenty-four-bytes",
    ] {
        let upper = lower.to_ascii_uppercase();
        assert!(name_is(lower, lower) && name_is(&upper, lower));
        for at in 0..lower.len() {
            for &c in &tchars {
                let mut name = lower.to_vec();
                name[at] = c;
                assert_eq!(
                    name_is(&name, lower),
                    name.eq_ignore_ascii_case(lower),
                    "{:?} {:?}",
                    String::from_utf8_lossy(&name),
                    String::from_utf8_lossy(lower)
                );
            }
        }
        assert!(!name_is(&lower[1..], lower));
    }
}

#[test]
fn framing_facts_come_with_the_parse() {
    let buf = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nConnection: Keep-Alive, Upgrade\r\nExpect: 100-Continue\r\n\r\n";
    let h = req(buf).unwrap().unwrap();
    assert_eq!(h.facts.content_length, Some(5));
    assert!(h.facts.keep_alive && h.facts.upgrade && h.facts.expect_continue);
    assert!(!h.facts.te_trailers);
    assert_eq!(request_body(&h), BodyKind::Length(5));
    // `TE` lists `trailers` on any of its lines, in any case.
    for (buf, takes) in [
        (&b"GET / HTTP/1.1\r\nTE: gzip, Trailers\r\n\r\n"[..], true),
        (b"GET / HTTP/1.1\r\nte: gzip\r\nTe: trailers\r\n\r\n", true),
        (b"GET / HTTP/1.1\r\nTE: gzip, trailersx\r\n\r\n", false),
        (b"GET / HTTP/1.1\r\nX-TE: trailers\r\n\r\n", false),
    ] {
        assert_eq!(req(buf).unwrap().unwrap().facts.te_trailers, takes);
    }
    let buf = b"POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n";
    let h = req(buf).unwrap().unwrap();
    assert_eq!(request_body(&h), BodyKind::Chunked);
    // Repeated equal lengths, and lists of them, are one length.
    let buf = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\ncontent-length: 7, 7\r\n\r\n";
    let h = resp(buf).unwrap().unwrap();
    assert_eq!(
        response_kind(&h, false),
        ResponseKind::Final(BodyKind::Length(7))
    );
}

#[test]
fn ambiguous_framing_is_an_error() {
    let cases: &[(&[u8], HeadError)] = &[
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            HeadError::LengthAndTransferEncoding,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            HeadError::ConflictingContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
            HeadError::ConflictingContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            HeadError::InvalidContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
            HeadError::InvalidContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            HeadError::InvalidContentLength,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            HeadError::UnsupportedTransferCoding,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
            HeadError::UnsupportedTransferCoding,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
            HeadError::UnsupportedTransferCoding,
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
            HeadError::UnsupportedTransferCoding,
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            HeadError::TransferEncodingInHttp10,
        ),
        (b"GET / HTTP/1.1\nHost: x\r\n\r\n", HeadError::BareLf),
        (b"GET / HTTP/1.1\r\nHost: x\n\r\n", HeadError::BareLf),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\n", HeadError::BareLf),
    ];
    for (text, want) in cases {
        assert_eq!(req(text), Err(*want), "{}", String::from_utf8_lossy(text));
    }
    // Responses follow the same rules.
    assert_eq!(
        resp(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
        Err(HeadError::LengthAndTransferEncoding)
    );
    assert_eq!(
        resp(b"HTTP/1.1 200 OK\nContent-Length: 1\r\n\r\n"),
        Err(HeadError::BareLf)
    );
}

/// Names, methods and targets are never empty (the ranges of them are
/// taken without the empty slice's check): `httparse` refuses such a
/// head.
#[test]
fn empty_names_methods_and_targets_are_errors() {
    for bad in [
        &b"GET / HTTP/1.1\r\n: x\r\n\r\n"[..],
        b"GET  HTTP/1.1\r\nHost: x\r\n\r\n",
        b" / HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        assert!(req(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    assert!(resp(b"HTTP/1.1 200 OK\r\n: x\r\n\r\n").is_err());
}

#[test]
fn obs_fold_and_control_characters_are_errors() {
    for text in [
        &b"GET / HTTP/1.1\r\nX-A: one\r\n two\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nX-A: one\r\n\ttwo\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: o\0ne\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: o\rne\r\n\r\n",
        b"GET / HTTP/1.1\r\nX A: one\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A : one\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
    ] {
        assert!(
            matches!(req(text), Err(HeadError::Malformed(_))),
            "{:?}: {:?}",
            String::from_utf8_lossy(text),
            req(text)
        );
    }
    assert!(matches!(
        resp(b"HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\n\r\n"),
        Err(HeadError::Malformed(_))
    ));
    assert!(matches!(
        resp(b"HTTP/1.1 200 OK\r\nX-A: o\0ne\r\n\r\n"),
        Err(HeadError::Malformed(_))
    ));
}

#[test]
fn every_control_character_in_a_value_is_an_error() {
    for c in (0u8..0x20).chain([0x7f]).filter(|c| *c != b'\t') {
        let mut r = b"GET / HTTP/1.1\r\nX-A: o".to_vec();
        r.push(c);
        r.extend_from_slice(b"ne\r\n\r\n");
        assert!(req(&r).is_err(), "request, byte {c:#04x}");
        let mut p = b"HTTP/1.1 200 OK\r\nX-A: o".to_vec();
        p.push(c);
        p.extend_from_slice(b"ne\r\n\r\n");
        assert!(resp(&p).is_err(), "response, byte {c:#04x}");
    }
}

#[test]
fn limits() {
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..=MAX_HEADERS {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(req(&many), Err(HeadError::TooManyHeaders));
    let mut big = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
    big.resize(MAX_HEAD_BYTES + 10, b'a');
    // Incomplete and already over the limit: refused without waiting.
    assert_eq!(req(&big), Err(HeadError::TooLarge));
    big.extend_from_slice(b"\r\n\r\n");
    assert_eq!(req(&big), Err(HeadError::TooLarge));
}

#[test]
fn response_framing() {
    let kind = |text: &[u8], head_req: bool| response_kind(&resp(text).unwrap().unwrap(), head_req);
    assert_eq!(
        kind(b"HTTP/1.1 100 Continue\r\n\r\n", false),
        ResponseKind::Interim
    );
    assert_eq!(
        kind(b"HTTP/1.1 103 Early Hints\r\n\r\n", false),
        ResponseKind::Interim
    );
    assert_eq!(
        kind(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n",
            false
        ),
        ResponseKind::Upgrade
    );
    assert_eq!(
        kind(
            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
            false
        ),
        ResponseKind::Final(BodyKind::Empty)
    );
    assert_eq!(
        kind(b"HTTP/1.1 304 Not Modified\r\n\r\n", false),
        ResponseKind::Final(BodyKind::Empty)
    );
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true),
        ResponseKind::Final(BodyKind::Empty)
    );
    assert_eq!(
        kind(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false
        ),
        ResponseKind::Final(BodyKind::Chunked)
    );
    assert_eq!(
        kind(b"HTTP/1.1 200 OK\r\n\r\n", false),
        ResponseKind::Final(BodyKind::Close)
    );
    // HTTP/1.0: kept alive only when asked.
    let h = resp(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!h.keeps_alive());
    let h = resp(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.keeps_alive());
    let h = resp(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(!h.keeps_alive());
    // No reason phrase at all.
    let buf = b"HTTP/1.1 200\r\n\r\n";
    let h = resp(buf).unwrap().unwrap();
    assert_eq!(h.status, 200);
    assert!(h.reason.is_empty());
}

#[test]
fn trailers() {
    let buf = b"X-Sum: 1\r\nX-Other: two\r\n\r\n";
    let t = parse_trailers(buf).unwrap();
    assert_eq!(t.len(), 2);
    assert_eq!(&buf[t[1].value.clone()], b"two");
    assert!(parse_trailers(b"\r\n").unwrap().is_empty());
    assert_eq!(parse_trailers(b"X-Sum: 1\n\r\n"), Err(HeadError::BareLf));
}

/// The thread's spare line list is reused, not reallocated; one grown for
/// a rare large head is let go.
#[test]
fn the_spare_line_list_comes_back() {
    let v = spare_lines(8);
    let at = v.as_ptr() as usize;
    give_lines(v);
    let again = spare_lines(4);
    assert_eq!(again.as_ptr() as usize, at);
    assert!(again.is_empty());
    give_lines(Vec::with_capacity(65));
    assert!(spare_lines(0).capacity() <= 64);
}
