//! A backend's response head made into what the rest of the gateway
//! reads, in the form the send asks for ([`HeadFor`]): an `http` response
//! with a header map ([`response`]; for an HTTP/2 client without its
//! hop-by-hop lines), or a response whose header map holds only what the
//! gateway adds while the head itself is kept as the backend sent it
//! ([`RawHead`], made by [`raw_response`], turned into map entries by
//! [`materialize`] for every consumer but hopgate's own HTTP/1.1 server);
//! and trailer sections as header maps ([`trailer_map`]).
//!
//! Must not touch: the socket or the exchange that read the head (that is
//! [`super::client`]), what the answer step changes in a head.

use std::ops::Range;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Response, StatusCode, Version};

use super::head::{self, Head, HeaderRange};
use super::Payload;

/// The status code of a head.
fn status_of(head: &Head) -> Result<StatusCode, head::HeadError> {
    StatusCode::from_u16(head.status).map_err(|_| head::HeadError::Malformed("invalid status"))
}

/// Which form a backend's response head is handed on in, for the client
/// connection it goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadFor {
    /// A header map of every line: subrequests, mirrors, upgrades and
    /// gRPC on an HTTP/1.1 client connection.
    Map,
    /// A final answer's head kept as the backend's bytes ([`RawHead`]),
    /// for hopgate's own HTTP/1.1 server.
    Raw,
    /// A header map for hyper's HTTP/2 server: a final answer's
    /// hop-by-hop lines are left out ([`response`]).
    H2,
}

/// The response head as an `http` response with an empty body (boxed:
/// the answer moves through the request's steps as a pointer). For an
/// HTTP/2 client (`to_h2`) a final answer's hop-by-hop lines are not put
/// into the map at all: the answer step would take them out again
/// (`headers::strip_response`), and so would hyper (its
/// `strip_connection_headers`); a `Connection` line naming anything but
/// `keep-alive` or `close` stays, so that the names it lists are taken out
/// by the answer step as before. A 101 keeps them all (the upgrade reads
/// them).
pub(super) fn response<B: Payload>(
    head: &Head,
    bytes: &Bytes,
    to_h2: bool,
) -> Result<Box<Response<B>>, head::HeadError> {
    let mut resp = B::response();
    *resp.status_mut() = status_of(head)?;
    *resp.version_mut() = version_of(head);
    let leave_hop = to_h2 && head.status != 101;
    let headers = resp.headers_mut();
    // Sized once: room for every line (a map holds 3/4 of its table).
    headers.reserve(head.headers.len());
    for h in &head.headers {
        let raw = &bytes[h.name.clone()];
        let name = match known(raw) {
            Known::Name(name) => name,
            Known::Hop if leave_hop => continue,
            Known::Connection if leave_hop && only_own(&bytes[h.value.clone()]) => continue,
            Known::Hop | Known::Connection | Known::Other => name_of(raw)?,
        };
        headers.append(name, value_of(bytes, h)?);
    }
    reason_into(&mut *resp, bytes, head.reason.clone());
    Ok(resp)
}

/// What a backend's header name is to [`response`].
enum Known {
    /// A standard name a backend often sends.
    Name(HeaderName),
    /// `Connection`.
    Connection,
    /// Another hop-by-hop name the answer step removes from every answer
    /// (`headers::strip_response`): `Keep-Alive`, `Proxy-Connection`,
    /// `TE`, `Transfer-Encoding`, `Upgrade`, `Trailer`,
    /// `Proxy-Authenticate`, `Proxy-Authorization`.
    Hop,
    /// Any other name: made by [`name_of`].
    Other,
}

/// The standard names backends send on nearly every answer, and the
/// hop-by-hop ones, told by length and a word-at-a-time compare
/// ([`head::name_is`]; the parser took the name's bytes as token
/// characters): no lower-cased copy of the name and no walk through
/// `http`'s table of every standard name, which `HeaderName::from_bytes`
/// makes for each line. A test holds each to `HeaderName::from_bytes`.
#[inline]
fn known(name: &[u8]) -> Known {
    use http::header as h;
    let is = |n: &[u8]| head::name_is(name, n);
    match name.len() {
        2 if is(b"te") => Known::Hop,
        3 if is(b"age") => Known::Name(h::AGE),
        3 if is(b"via") => Known::Name(h::VIA),
        4 if is(b"date") => Known::Name(h::DATE),
        4 if is(b"etag") => Known::Name(h::ETAG),
        4 if is(b"vary") => Known::Name(h::VARY),
        4 if is(b"link") => Known::Name(h::LINK),
        6 if is(b"server") => Known::Name(h::SERVER),
        7 if is(b"expires") => Known::Name(h::EXPIRES),
        7 if is(b"upgrade") || is(b"trailer") => Known::Hop,
        8 if is(b"location") => Known::Name(h::LOCATION),
        10 if is(b"connection") => Known::Connection,
        10 if is(b"keep-alive") => Known::Hop,
        10 if is(b"set-cookie") => Known::Name(h::SET_COOKIE),
        12 if is(b"content-type") => Known::Name(h::CONTENT_TYPE),
        13 if is(b"last-modified") => Known::Name(h::LAST_MODIFIED),
        13 if is(b"accept-ranges") => Known::Name(h::ACCEPT_RANGES),
        13 if is(b"cache-control") => Known::Name(h::CACHE_CONTROL),
        14 if is(b"content-length") => Known::Name(h::CONTENT_LENGTH),
        16 if is(b"content-encoding") => Known::Name(h::CONTENT_ENCODING),
        16 if is(b"proxy-connection") => Known::Hop,
        17 if is(b"transfer-encoding") => Known::Hop,
        18 if is(b"proxy-authenticate") => Known::Hop,
        19 if is(b"proxy-authorization") => Known::Hop,
        _ => Known::Other,
    }
}

/// A `Connection` value naming nothing but `keep-alive` and `close`
/// (nearly every backend's): nothing else to take out because of it. The
/// usual values are compared a word at a time first, no token walk (a
/// value holds no CR, the one byte that folds onto `-`).
fn only_own(value: &[u8]) -> bool {
    if head::name_is(value, b"keep-alive") || head::name_is(value, b"close") {
        return true;
    }
    value.split(|b| *b == b',').all(|t| {
        let t = t.trim_ascii();
        t.is_empty() || t.eq_ignore_ascii_case(b"keep-alive") || t.eq_ignore_ascii_case(b"close")
    })
}

fn version_of(head: &Head) -> Version {
    if head.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    }
}

/// One header line of `bytes` as a name and a value (sharing `bytes`).
fn header_of(bytes: &Bytes, h: &HeaderRange) -> Result<(HeaderName, HeaderValue), head::HeadError> {
    Ok((name_of(&bytes[h.name.clone()])?, value_of(bytes, h)?))
}

/// A header name the parser took.
fn name_of(name: &[u8]) -> Result<HeaderName, head::HeadError> {
    HeaderName::from_bytes(name).map_err(|_| head::HeadError::Malformed("invalid header name"))
}

/// A header line's value, sharing `bytes`. Checked again by `http`
/// although the parser admitted exactly the bytes `http` does (HTAB,
/// 0x20–0x7E, 0x80–0xFF): its unchecked constructor is an `unsafe fn`,
/// and the workspace forbids unsafe code. The check is one vectorised
/// pass over the value.
fn value_of(bytes: &Bytes, h: &HeaderRange) -> Result<HeaderValue, head::HeadError> {
    HeaderValue::from_maybe_shared(bytes.slice(h.value.clone()))
        .map_err(|_| head::HeadError::Malformed("invalid header value"))
}

/// A reason phrase other than the status code's usual one is kept (and
/// written back as it came).
fn reason_into<B>(resp: &mut Response<B>, bytes: &Bytes, reason: Range<usize>) {
    let text = &bytes[reason.clone()];
    if !text.is_empty() && resp.status().canonical_reason().map(str::as_bytes) != Some(text) {
        if let Ok(r) = hyper::ext::ReasonPhrase::try_from(bytes.slice(reason)) {
            resp.extensions_mut().insert(r);
        }
    }
}

/// A response head kept as the backend sent it: the head's bytes and its
/// header lines as ranges of them, carried with the answer's body
/// ([`Payload::with_raw_head`]) while the response's header map holds only what
/// the gateway adds. hopgate's own HTTP/1.1 server writes such a head line
/// by line, as it came (names in the backend's case); every other consumer
/// turns it into header-map entries first ([`materialize`]). Made only for
/// a client connection on that server, and kept only when the answer step
/// has nothing to take out of the head (the gateway's `passes_raw`).
#[derive(Clone, Debug)]
pub struct RawHead {
    /// The head, its empty last line included.
    bytes: Bytes,
    lines: head::Lines,
    reason: Range<usize>,
    /// The value of its `Content-Length` (checked by the parser).
    content_length: Option<u64>,
}

impl RawHead {
    /// The header lines: name and value, as the backend wrote them.
    pub(crate) fn lines(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.lines
            .iter()
            .map(|h| (&self.bytes[h.name.clone()], &self.bytes[h.value.clone()]))
    }

    /// The `Content-Length` the head declares.
    pub(crate) fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The header lines whose names `keep` says yes to, handed to `out`
    /// as runs of whole lines (line ends included), one slice per run: a
    /// head with one line left out is written in two pieces.
    #[inline]
    pub(crate) fn kept_runs<'a>(
        &'a self,
        mut keep: impl FnMut(&[u8]) -> bool,
        mut out: impl FnMut(&'a [u8]),
    ) {
        let mut run = None;
        for h in &self.lines {
            if keep(&self.bytes[h.name.clone()]) {
                run.get_or_insert(h.name.start);
            } else if let Some(start) = run.take() {
                out(&self.bytes[start..h.name.start]);
            }
        }
        if let Some(start) = run {
            // Up to the empty line that ends the head.
            out(&self.bytes[start..self.bytes.len() - 2]);
        }
    }

    /// The reason phrase as the backend wrote it.
    pub(crate) fn reason(&self) -> &[u8] {
        &self.bytes[self.reason.clone()]
    }

    /// The backend's status line, line end included, when it is the line
    /// the gateway would write for `status` to a client of HTTP/1.`minor`:
    /// that version, that code, a reason phrase (`httparse` took exactly
    /// one space after the version and after the code, and the parse
    /// refused bare LFs, so the line is version, space, code, space,
    /// reason, CRLF).
    #[inline]
    pub(crate) fn status_line(&self, status: u16, minor: u8) -> Option<&[u8]> {
        let version: &[u8] = if minor == 0 {
            b"HTTP/1.0 "
        } else {
            b"HTTP/1.1 "
        };
        let end = self.reason.end + 2;
        let line = self.bytes.get(..end)?;
        let code = [
            b'0' + (status / 100) as u8,
            b'0' + (status / 10 % 10) as u8,
            b'0' + (status % 10) as u8,
        ];
        (!self.reason.is_empty()
            && line.starts_with(version)
            && line.get(9..13) == Some(&[code[0], code[1], code[2], b' '])
            && line.ends_with(b"\r\n"))
        .then_some(line)
    }

    /// The raw head of a whole response head in `bytes`.
    #[cfg(test)]
    pub(crate) fn parsed(bytes: &[u8]) -> RawHead {
        let bytes = Bytes::copy_from_slice(bytes);
        let head = head::parse_response(&bytes)
            .expect("a valid head")
            .expect("a whole head");
        RawHead {
            lines: head.headers,
            reason: head.reason,
            content_length: head.facts.content_length,
            bytes,
        }
    }
}

/// The response head as an `http` response with an empty header map, and
/// the head kept raw ([`RawHead`]) for its body to carry.
#[allow(clippy::type_complexity)]
pub(super) fn raw_response<B: Payload>(
    head: Head,
    bytes: Bytes,
) -> Result<(Box<Response<B>>, Option<RawHead>), head::HeadError> {
    let mut resp = B::response();
    *resp.status_mut() = status_of(&head)?;
    *resp.version_mut() = version_of(&head);
    let raw = RawHead {
        bytes,
        lines: head.headers,
        reason: head.reason,
        content_length: head.facts.content_length,
    };
    Ok((resp, Some(raw)))
}

/// Turns a response's raw head ([`RawHead`]), if its body carries one,
/// into header-map entries, placed before the ones the gateway added (whose
/// names never repeat one of the backend's but `Set-Cookie`: the answer
/// step materializes first otherwise). A line that does not convert —
/// none can: `httparse` takes the same name and value bytes as `http` —
/// is dropped.
pub(crate) fn materialize<B: Payload>(resp: &mut Response<B>) {
    let Some(raw) = resp.body_mut().take_raw_head() else {
        return;
    };
    let added = std::mem::take(resp.headers_mut());
    let headers = resp.headers_mut();
    headers.reserve(raw.lines.len() + added.len());
    for h in &raw.lines {
        if let Ok((name, value)) = header_of(&raw.bytes, h) {
            headers.append(name, value);
        }
    }
    let mut last = None;
    for (name, value) in added {
        if let Some(n) = name {
            last = Some(n);
        }
        if let Some(n) = &last {
            headers.append(n.clone(), value);
        }
    }
    reason_into(resp, &raw.bytes, raw.reason);
}

/// Trailer lines as a header map.
pub(crate) fn trailer_map(section: &Bytes) -> Result<HeaderMap, head::HeadError> {
    let mut map = HeaderMap::new();
    for h in head::parse_trailers(section)? {
        let name = HeaderName::from_bytes(&section[h.name.clone()])
            .map_err(|_| head::HeadError::Malformed("invalid trailer name"))?;
        let value = HeaderValue::from_maybe_shared(section.slice(h.value.clone()))
            .map_err(|_| head::HeadError::Malformed("invalid trailer value"))?;
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests;
