//! HTTP/1.x message heads parsed with `httparse` into byte ranges of the
//! read buffer, with the framing facts taken in the same pass.
//!
//! Strict on purpose: whatever two parsers could read differently is an
//! error, never a guess — a `Content-Length` next to a `Transfer-Encoding`,
//! differing `Content-Length` values, any transfer coding but a single
//! `chunked`, `Transfer-Encoding` in HTTP/1.0, obsolete line folding, a
//! bare LF line end, NUL or CR inside a value, too many header lines, a
//! head larger than the limit.

use std::mem::MaybeUninit;
use std::ops::{Deref, Range};

/// Most header lines a head may have (hyper's default too).
pub const MAX_HEADERS: usize = 100;
/// Largest head accepted, request line or status line included.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Why a head is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("malformed head: {0}")]
    Malformed(&'static str),
    #[error("more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    #[error("head larger than {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    #[error("a line ends in a bare LF")]
    BareLf,
    #[error("invalid Content-Length")]
    InvalidContentLength,
    #[error("differing Content-Length values")]
    ConflictingContentLength,
    #[error("both Content-Length and Transfer-Encoding")]
    LengthAndTransferEncoding,
    #[error("unsupported transfer coding (only a single `chunked` is accepted)")]
    UnsupportedTransferCoding,
    #[error("Transfer-Encoding in an HTTP/1.0 message")]
    TransferEncodingInHttp10,
}

impl From<httparse::Error> for HeadError {
    fn from(e: httparse::Error) -> HeadError {
        match e {
            httparse::Error::TooManyHeaders => HeadError::TooManyHeaders,
            httparse::Error::HeaderName => HeadError::Malformed("invalid header name"),
            httparse::Error::HeaderValue => HeadError::Malformed("invalid header value"),
            httparse::Error::NewLine => HeadError::Malformed("invalid line end"),
            httparse::Error::Status => HeadError::Malformed("invalid status"),
            httparse::Error::Token => HeadError::Malformed("invalid token"),
            httparse::Error::Version => HeadError::Malformed("invalid version"),
        }
    }
}

/// What a head says about its message's framing and connection, found in
/// the parsing pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Facts {
    pub content_length: Option<u64>,
    pub chunked: bool,
    /// `Connection: close`.
    pub close: bool,
    /// `Connection: keep-alive`.
    pub keep_alive: bool,
    /// `Connection: upgrade`.
    pub upgrade: bool,
    /// `Expect: 100-continue`.
    pub expect_continue: bool,
    /// `TE` lists `trailers` (the client takes trailer fields).
    pub te_trailers: bool,
}

/// One header line: its name and value as ranges of the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRange {
    pub name: Range<usize>,
    pub value: Range<usize>,
}

/// A parsed head. Ranges index the buffer that was parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Bytes of the head, its empty last line included.
    pub len: usize,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Requests: the method and the request target.
    pub method: Range<usize>,
    pub target: Range<usize>,
    /// Responses: the status code and the reason phrase.
    pub status: u16,
    pub reason: Range<usize>,
    pub headers: Lines,
    pub facts: Facts,
}

thread_local! {
    /// The thread's spare line list: a head's list is made and dropped
    /// once per message, so one spare spares an allocation and a free.
    static LINES: std::cell::Cell<Vec<HeaderRange>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An empty line list with room for `n` lines: the thread's spare.
pub(crate) fn spare_lines(n: usize) -> Vec<HeaderRange> {
    let mut v = LINES.try_with(std::cell::Cell::take).unwrap_or_default();
    v.reserve(n);
    v
}

/// Keeps `v`, emptied, as the thread's spare line list (by the rule of
/// [`super::spare::keep`]).
pub(crate) fn give_lines(mut v: Vec<HeaderRange>) {
    v.clear();
    super::spare::keep(&LINES, v, super::spare::MOST_LINES);
}

/// The header lines of a head, in a list that goes back to the thread's
/// spare when dropped ([`spare_lines`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lines(Vec<HeaderRange>);

impl Lines {
    /// An empty list with room for `n` lines.
    pub fn with_capacity(n: usize) -> Lines {
        Lines(spare_lines(n))
    }

    fn push(&mut self, h: HeaderRange) {
        self.0.push(h);
    }
}

impl Deref for Lines {
    type Target = [HeaderRange];

    fn deref(&self) -> &[HeaderRange] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a Lines {
    type Item = &'a HeaderRange;
    type IntoIter = std::slice::Iter<'a, HeaderRange>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        give_lines(std::mem::take(&mut self.0));
    }
}

impl Head {
    /// Is the connection kept open after this message, as far as this head
    /// says?
    pub fn keeps_alive(&self) -> bool {
        if self.minor == 0 {
            self.facts.keep_alive && !self.facts.close
        } else {
            !self.facts.close
        }
    }
}

/// Where `part`, a slice httparse returned, lies in `buf`. An empty part
/// may be a static empty slice: it is the empty range.
fn range_of(buf: &[u8], part: &[u8]) -> Range<usize> {
    if part.is_empty() {
        return 0..0;
    }
    in_buf(buf, part)
}

/// [`range_of`] for a part that is never empty: a header name (a token,
/// one character or more, or `httparse` refuses the line), a method, a
/// request target.
#[inline(always)]
fn in_buf(buf: &[u8], part: &[u8]) -> Range<usize> {
    debug_assert!(!part.is_empty());
    let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
    debug_assert!(start + part.len() <= buf.len());
    start..start + part.len()
}

/// Parses a request head at the start of `buf`: `Ok(None)` when the head
/// is not complete yet.
pub fn parse_request(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    parse_request_into(buf, &mut slots)
}

/// [`parse_request`] for a listener that takes more than [`MAX_HEADERS`]
/// header lines: up to `max_lines`, parsed into slots on the heap (only
/// such a listener pays for them).
pub(crate) fn parse_request_up_to(buf: &[u8], max_lines: usize) -> Result<Option<Head>, HeadError> {
    if max_lines <= MAX_HEADERS {
        return parse_request(buf);
    }
    let mut slots: Vec<MaybeUninit<httparse::Header<'_>>> = Vec::with_capacity(max_lines);
    slots.resize_with(max_lines, MaybeUninit::uninit);
    parse_request_into(buf, &mut slots)
}

/// A request head parsed with `slots` for its header lines (their number
/// is the most lines taken). Inlined into both callers, so that
/// [`parse_request`] stays one function over its stack array.
#[inline(always)]
fn parse_request_into<'b>(
    buf: &'b [u8],
    slots: &mut [MaybeUninit<httparse::Header<'b>>],
) -> Result<Option<Head>, HeadError> {
    let mut req = httparse::Request::new(&mut []);
    let status = req.parse_with_uninit_headers(buf, slots);
    let len = match status {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return partial(buf),
        Err(e) => return Err(e.into()),
    };
    let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Malformed("incomplete request line"));
    };
    let mut head = Head {
        len,
        minor,
        method: in_buf(buf, method.as_bytes()),
        target: in_buf(buf, path.as_bytes()),
        status: 0,
        reason: 0..0,
        headers: Lines::with_capacity(req.headers.len()),
        facts: Facts::default(),
    };
    let at_start = head.method.start == 0;
    finish(buf, req.headers, &mut head, at_start, true)?;
    Ok(Some(head))
}

/// Parses a response head at the start of `buf`: `Ok(None)` when the head
/// is not complete yet.
pub fn parse_response(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut []);
    let status = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut slots);
    let len = match status {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return partial(buf),
        Err(e) => return Err(e.into()),
    };
    let (Some(code), Some(minor)) = (resp.code, resp.version) else {
        return Err(HeadError::Malformed("incomplete status line"));
    };
    let mut head = Head {
        len,
        minor,
        method: 0..0,
        target: 0..0,
        status: code,
        reason: resp.reason.map_or(0..0, |r| range_of(buf, r.as_bytes())),
        headers: Lines::with_capacity(resp.headers.len()),
        facts: Facts::default(),
    };
    finish(
        buf,
        resp.headers,
        &mut head,
        buf.starts_with(b"HTTP/"),
        false,
    )?;
    Ok(Some(head))
}

fn partial(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    if buf.len() >= MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    Ok(None)
}

/// The checks and facts common to requests and responses. `at_start`:
/// the start line begins at the buffer's first byte (no empty lines
/// before it). `request`: the head is a request's (`TE` and `Expect`
/// are looked at only there).
#[inline(always)]
fn finish(
    buf: &[u8],
    headers: &[httparse::Header<'_>],
    head: &mut Head,
    at_start: bool,
    request: bool,
) -> Result<(), HeadError> {
    if head.len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    line_ends(&buf[..head.len], headers, at_start)?;
    let mut te = false;
    for h in headers {
        head.headers.push(HeaderRange {
            name: in_buf(buf, h.name.as_bytes()),
            value: range_of(buf, h.value),
        });
        // httparse refuses every control character but HTAB in a value (a
        // CR only ends a line, before its LF); the bare LF check above
        // covers LF. The unit test `every_control_character_in_a_value_is_an_error`
        // holds httparse to that, so no second scan of each value is made.
        debug_assert!(!h.value.iter().any(|b| matches!(b, b'\0' | b'\r' | b'\n')));
        let name = h.name.as_bytes();
        match name.len() {
            14 if name_is(name, b"content-length") => {
                content_length(h.value, &mut head.facts.content_length)?;
            }
            17 if name_is(name, b"transfer-encoding") => {
                te = true;
                transfer_encoding(h.value, &mut head.facts.chunked)?;
            }
            10 if name_is(name, b"connection") => {
                for token in list(h.value) {
                    if token.eq_ignore_ascii_case(b"close") {
                        head.facts.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        head.facts.keep_alive = true;
                    } else if token.eq_ignore_ascii_case(b"upgrade") {
                        head.facts.upgrade = true;
                    }
                }
            }
            2 if request
                && name_is(name, b"te")
                && list(h.value).any(|t| t.eq_ignore_ascii_case(b"trailers")) =>
            {
                head.facts.te_trailers = true;
            }
            6 if request
                && name_is(name, b"expect")
                && h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue") =>
            {
                head.facts.expect_continue = true;
            }
            _ => {}
        }
    }
    if te {
        if head.minor == 0 {
            return Err(HeadError::TransferEncodingInHttp10);
        }
        if head.facts.content_length.is_some() {
            return Err(HeadError::LengthAndTransferEncoding);
        }
        if !head.facts.chunked {
            return Err(HeadError::UnsupportedTransferCoding);
        }
    }
    Ok(())
}

/// Every LF of a head `httparse` took must follow a CR. In such a head an
/// LF only ends a line (the start line and the values hold none, and
/// obsolete line folding is refused), so the line ends are all there is
/// to look at: the two bytes before each header line, and the last four
/// (the last line's end and the empty line). A head with empty lines
/// before its start line (`at_start` false) is scanned whole.
fn line_ends(
    head: &[u8],
    headers: &[httparse::Header<'_>],
    at_start: bool,
) -> Result<(), HeadError> {
    if !at_start {
        return no_bare_lf(head);
    }
    let crlf_before = |h: &httparse::Header<'_>| {
        let start = in_buf(head, h.name.as_bytes()).start;
        start >= 2 && head[start - 2..start] == *b"\r\n"
    };
    if head.ends_with(b"\r\n\r\n") && headers.iter().all(crlf_before) {
        Ok(())
    } else {
        Err(HeadError::BareLf)
    }
}

/// Every LF of `head` must follow a CR: the LFs are found with `memchr`
/// (a word or a vector at a time) and only their neighbours are looked
/// at.
fn no_bare_lf(head: &[u8]) -> Result<(), HeadError> {
    for i in memchr::memchr_iter(b'\n', head) {
        if i == 0 || head[i - 1] != b'\r' {
            return Err(HeadError::BareLf);
        }
    }
    Ok(())
}

/// The elements of a comma-separated list, trimmed, empty ones skipped.
/// Is the header name `name` (token characters, as `httparse` took them)
/// `lower` (lower-case letters, digits and `-`) in any case? Compared 8
/// bytes at a time with the case bit set: for token characters `b | 0x20`
/// is one of those only when `b` is that character or its upper case (the
/// one other byte that would fold to `-`, CR, is never in a name). Every
/// head's names are compared to a few known ones on the request path;
/// this takes a fraction of a byte-by-byte case-insensitive compare.
#[inline(always)]
pub(crate) fn name_is(name: &[u8], lower: &[u8]) -> bool {
    const FOLD: u64 = 0x2020_2020_2020_2020;
    debug_assert!(lower
        .iter()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-'));
    let n = name.len();
    if n != lower.len() {
        return false;
    }
    if n < 4 {
        return name.eq_ignore_ascii_case(lower);
    }
    if n < 8 {
        // Two 4-byte words, overlapping when the length is not 4.
        const FOLD4: u32 = 0x2020_2020;
        let word = |b: &[u8], at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[at..at + 4]);
            u32::from_le_bytes(w)
        };
        return word(name, 0) | FOLD4 == word(lower, 0)
            && word(name, n - 4) | FOLD4 == word(lower, n - 4);
    }
    let word = |b: &[u8], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let mut at = 0;
    while at + 8 < n {
        if word(name, at) | FOLD != word(lower, at) {
            return false;
        }
        at += 8;
    }
    // The last 8 bytes (overlapping the word before when the length is
    // not a multiple of 8).
    word(name, n - 8) | FOLD == word(lower, n - 8)
}

fn list(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value
        .split(|b| *b == b',')
        .map(|t| t.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// `Content-Length`: digits only; a list or repeated lines must all agree.
fn content_length(value: &[u8], seen: &mut Option<u64>) -> Result<(), HeadError> {
    let mut any = false;
    for item in value.split(|b| *b == b',').map(|t| t.trim_ascii()) {
        if item.is_empty() || item.len() > 19 || !item.iter().all(u8::is_ascii_digit) {
            return Err(HeadError::InvalidContentLength);
        }
        let n = item.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
        match *seen {
            Some(prev) if prev != n => return Err(HeadError::ConflictingContentLength),
            _ => *seen = Some(n),
        }
        any = true;
    }
    if !any {
        return Err(HeadError::InvalidContentLength);
    }
    Ok(())
}

/// `Transfer-Encoding`: exactly one `chunked`, across every line, and
/// nothing else.
fn transfer_encoding(value: &[u8], chunked: &mut bool) -> Result<(), HeadError> {
    for coding in list(value) {
        if !coding.eq_ignore_ascii_case(b"chunked") || *chunked {
            return Err(HeadError::UnsupportedTransferCoding);
        }
        *chunked = true;
    }
    Ok(())
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body.
    Empty,
    Length(u64),
    Chunked,
    /// Until the connection closes (responses only).
    Close,
}

/// What follows a response head, given the request it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// A 1xx other than 101: an interim answer, skipped.
    Interim,
    /// 101: the connection now speaks another protocol.
    Upgrade,
    Final(BodyKind),
}

/// RFC 9112 §6.3 for a response: HEAD answers, 1xx, 204 and 304 have no
/// body; then chunked, then a length, then close-delimited.
pub fn response_kind(head: &Head, request_was_head: bool) -> ResponseKind {
    match head.status {
        101 => ResponseKind::Upgrade,
        100..=199 => ResponseKind::Interim,
        204 | 304 => ResponseKind::Final(BodyKind::Empty),
        _ if request_was_head => ResponseKind::Final(BodyKind::Empty),
        _ if head.facts.chunked => ResponseKind::Final(BodyKind::Chunked),
        _ => match head.facts.content_length {
            Some(n) => ResponseKind::Final(BodyKind::Length(n)),
            None => ResponseKind::Final(BodyKind::Close),
        },
    }
}

/// RFC 9112 §6.3 for a request: chunked, a length, or no body.
pub fn request_body(head: &Head) -> BodyKind {
    if head.facts.chunked {
        BodyKind::Chunked
    } else {
        match head.facts.content_length {
            Some(0) | None => BodyKind::Empty,
            Some(n) => BodyKind::Length(n),
        }
    }
}

/// Parses a chunked body's trailer section (`buf` is the whole section,
/// its final empty line included) into name and value ranges.
pub fn parse_trailers(buf: &[u8]) -> Result<Vec<HeaderRange>, HeadError> {
    no_bare_lf(buf)?;
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    match httparse::parse_headers(buf, &mut slots)? {
        httparse::Status::Complete((_, headers)) => Ok(headers
            .iter()
            .map(|h| HeaderRange {
                name: range_of(buf, h.name.as_bytes()),
                value: range_of(buf, h.value),
            })
            .collect()),
        httparse::Status::Partial => Err(HeadError::Malformed("incomplete trailer section")),
    }
}

#[cfg(test)]
mod tests;
