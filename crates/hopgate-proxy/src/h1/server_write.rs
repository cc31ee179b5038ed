//! The response side of hopgate's own HTTP/1.1 server ([`super::server`]):
//! one response written to the client's socket, head, framing and body in
//! as few writes as it can (a small head and body as one buffer:
//! [`super::write`]).
//!
//! Owns: the framing of a response (the rules of hyper's server, so that
//! clients see what they saw before): Content-Length, kept or added;
//! chunked, with the trailers the response announces when the client
//! sent `TE: trailers`; close-delimited for an HTTP/1.0 client and a body
//! of unknown length; no body for HEAD, 1xx, 204 and 304. The status
//! line (a raw head's own when it is the same line), the header lines as
//! the response has them (framing lines
//! replaced by the gateway's own), `Date` when the response has none,
//! `Connection: close` / `keep-alive` as the connection's fate asks; a
//! body longer or shorter than its length ends the connection. A 101's
//! head ([`write_upgrade`]); writing through the body's slot while the
//! request body may still be read ([`SlotIo`]).
//!
//! Must not touch: reading requests, the connection loop and what it
//! decides (keep-alive, pipelining, drain: the writer only clears `keep`
//! when the response or its framing needs a close), routing and
//! forwarding.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::FutureExt;
use http::header::{HeaderName, CONTENT_LENGTH, TRAILER};
use http::{Response, Version};
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::response_head::RawHead;
use super::server_body::Slot;
use super::write::{self, HeadWriter, Out};
use super::{BoxError, Payload};

/// What the response depends on from its request.
#[derive(Clone, Copy)]
pub(super) struct Ask {
    pub(super) version: Version,
    pub(super) is_head: bool,
    /// The client sent `TE: trailers` (HTTP/1.1).
    pub(super) trailers_ok: bool,
}

/// Writes one response: head, then body. `keep`: the connection stays
/// open after it; cleared when the response or its framing needs a close.
pub(super) async fn write_response<W: AsyncWrite + Unpin, B: Payload>(
    io: &mut W,
    resp: Box<Response<B>>,
    ask: Ask,
    keep: &mut bool,
) -> io::Result<()> {
    let mut framing = framing(&resp, ask);
    if matches!(framing, Framing::Close) {
        *keep = false;
    }
    let mut resp = resp;
    let mut body = std::mem::take(resp.body_mut());
    let raw = body.take_raw_head();
    // The first body bytes, when they are there already: written with the
    // head in one write.
    let first = match &framing {
        Framing::Length { left, .. } if *left > 0 => first_data(&mut body),
        Framing::Chunked { .. } | Framing::Close => first_data(&mut body),
        _ => Ok(None),
    };
    let first = match first {
        Ok(f) => f,
        Err(e) => {
            *keep = false;
            return Err(io::Error::other(e));
        }
    };
    let mut bufs = HeadBufs::default();
    let overlong;
    {
        // A raw head's lines go in runs, one slice each: usually one or
        // two (its `Connection` line left out).
        let raw_runs = raw.as_ref().map_or(0, |_| 3);
        let mut w = HeadWriter::with_lines(resp.headers().len() + 4, raw_runs);
        let head = Head {
            resp: &resp,
            raw: raw.as_ref(),
            ask,
            first: first.as_ref(),
        };
        overlong = head_lines(&mut w, head, &mut framing, keep, &mut bufs);
        w.write_to(io).await.map_err(|(e, _)| e)?;
    }
    // The head is written: the answer's box serves the thread's next one.
    B::give_response(resp);
    if overlong {
        *keep = false;
        io.flush().await?;
        return Err(io::Error::other(
            "response body longer than its Content-Length",
        ));
    }
    write_body(io, &mut body, framing, keep).await
}

/// What a response head is written from.
struct Head<'a, B> {
    resp: &'a Response<B>,
    /// The backend's head, kept raw.
    raw: Option<&'a RawHead>,
    ask: Ask,
    /// The body's first bytes, when they were there already.
    first: Option<&'a Bytes>,
}

/// Bytes the head is written from that are made while writing it, kept
/// until the head is out.
#[derive(Default)]
struct HeadBufs {
    scratch: Scratch,
    digits: write::Digits,
    chunk_pre: [u8; 18],
}

/// The status line, the header lines and the first body bytes, into `w`
/// (written in one write); says whether those bytes ran past the
/// declared length (the rest of them is left out). Called once per
/// answer: inlined into it (a call and the moves of its arguments cost
/// ~20 instructions per request).
#[inline(always)]
fn head_lines<'a, B>(
    w: &mut HeadWriter<'a>,
    head: Head<'a, B>,
    framing: &mut Framing,
    keep: &mut bool,
    bufs: &'a mut HeadBufs,
) -> bool {
    let Head {
        resp,
        raw,
        ask,
        first,
    } = head;
    let HeadBufs {
        scratch,
        digits,
        chunk_pre,
    } = bufs;
    let mut close = false;
    let mut overlong = false;
    status_and_headers(w, resp, raw, ask, framing, scratch, &mut close);
    if close {
        *keep = false;
    }
    match &*framing {
        Framing::Length { left, add: true } => {
            w.header(b"content-length", digits.of(*left));
        }
        Framing::Chunked { .. } => w.header(b"transfer-encoding", b"chunked"),
        _ => {}
    }
    if !close {
        if ask.version == Version::HTTP_10 && *keep {
            w.header(b"connection", b"keep-alive");
        } else if ask.version == Version::HTTP_11 && !*keep {
            w.header(b"connection", b"close");
        }
    }
    w.push(b"\r\n");
    if let Some(d) = first {
        match framing {
            Framing::Length { left, .. } => {
                let take = (d.len() as u64).min(*left) as usize;
                overlong = take < d.len();
                *left -= take as u64;
                w.push(&d[..take]);
            }
            Framing::Chunked { .. } => {
                let n = write::chunk_prefix(d.len(), chunk_pre);
                w.push(&chunk_pre[..n]);
                w.push(d);
                w.push(b"\r\n");
            }
            Framing::Close => w.push(d),
            Framing::None => {}
        }
    }
    overlong
}

/// Writes the rest of the body as `framing` frames it, and its end.
async fn write_body<W: AsyncWrite + Unpin, B: Payload>(
    io: &mut W,
    body: &mut B,
    mut framing: Framing,
    keep: &mut bool,
) -> io::Result<()> {
    let mut out = Out::default();
    loop {
        let more = match &framing {
            Framing::None => false,
            Framing::Length { left, .. } => *left > 0 || !body.is_end_stream(),
            _ => true,
        };
        if !more {
            break;
        }
        let frame = match body.frame().await {
            None => break,
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                *keep = false;
                return Err(io::Error::other(e));
            }
        };
        match frame.into_data() {
            Ok(d) if d.is_empty() => {}
            Ok(d) => match &mut framing {
                Framing::Length { left, .. } => {
                    if d.len() as u64 > *left {
                        *keep = false;
                        return Err(io::Error::other(
                            "response body longer than its Content-Length",
                        ));
                    }
                    *left -= d.len() as u64;
                    out.raw(d);
                }
                Framing::Chunked { .. } => out.chunk(d),
                Framing::Close => out.raw(d),
                Framing::None => {}
            },
            Err(frame) => {
                if let (Ok(t), Framing::Chunked { allowed }) = (frame.into_trailers(), &framing) {
                    out.last_chunk(write::encode_trailers(&t, allowed));
                    std::future::poll_fn(|cx| out.poll_write(io, cx)).await?;
                    framing = Framing::None;
                    break;
                }
                continue;
            }
        }
        std::future::poll_fn(|cx| out.poll_write(io, cx)).await?;
    }
    end_body(io, &mut out, framing, keep).await
}

/// The body's end: the last chunk, or the check that the declared length
/// was all written; then the flush.
async fn end_body<W: AsyncWrite + Unpin>(
    io: &mut W,
    out: &mut Out,
    framing: Framing,
    keep: &mut bool,
) -> io::Result<()> {
    match framing {
        Framing::Chunked { .. } => {
            out.last_chunk(Bytes::new());
            std::future::poll_fn(|cx| out.poll_write(io, cx)).await?;
        }
        Framing::Length { left, .. } if left > 0 => {
            *keep = false;
            io.flush().await?;
            return Err(io::Error::other(
                "response body shorter than its Content-Length",
            ));
        }
        _ => {}
    }
    io.flush().await
}

/// Writes a 101 answer's head (the tunnel takes the connection after it).
pub(super) async fn write_upgrade<W: AsyncWrite + Unpin, B: Payload>(
    io: &mut W,
    resp: Box<Response<B>>,
) -> io::Result<()> {
    let ask = Ask {
        version: Version::HTTP_11,
        is_head: false,
        trailers_ok: false,
    };
    let mut scratch = Scratch::default();
    let mut close = false;
    {
        let mut w = HeadWriter::with_lines(resp.headers().len() + 2, 0);
        status_and_headers(
            &mut w,
            &resp,
            None,
            ask,
            &Framing::None,
            &mut scratch,
            &mut close,
        );
        w.push(b"\r\n");
        w.write_to(io).await.map_err(|(e, _)| e)?;
    }
    io.flush().await
}

/// Writes to the client's socket while it sits in the body's slot.
pub(super) struct SlotIo(pub(super) Slot);

impl AsyncWrite for SlotIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.lock().conn.as_mut() {
            Some(c) => Pin::new(&mut *c.io).poll_write(cx, buf),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.0.lock().conn.as_mut() {
            Some(c) => Pin::new(&mut *c.io).poll_write_vectored(cx, bufs),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.lock().conn.as_mut() {
            Some(c) => Pin::new(&mut *c.io).poll_flush(cx),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.lock().conn.as_mut() {
            Some(c) => Pin::new(&mut *c.io).poll_shutdown(cx),
            None => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

/// How a response body is delimited on the wire.
enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    None,
    /// The response's own `Content-Length`, or one the gateway adds
    /// (`add`).
    Length { left: u64, add: bool },
    /// `Transfer-Encoding: chunked`, with the trailer fields the response
    /// announces (when the client accepts trailers).
    Chunked { allowed: Vec<HeaderName> },
    /// Until the connection closes (an HTTP/1.0 client, unknown length).
    Close,
}

/// `Content-Length` of a response when it is one valid value.
fn declared_length<B: Payload>(resp: &Response<B>) -> Option<u64> {
    let value = match resp.body().raw_head() {
        // At most one line (the answer step made sure), checked by the
        // parser.
        Some(raw) => return raw.content_length(),
        None => {
            let mut all = resp.headers().get_all(CONTENT_LENGTH).iter();
            let first = all.next()?;
            if all.next().is_some() {
                return None;
            }
            Some(first.as_bytes())
        }
    };
    let s = value?.trim_ascii();
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// The header lines the writer looks at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Line {
    ContentLength,
    TransferEncoding,
    Connection,
    KeepAlive,
    Date,
    Other,
}

/// Which of them a name is, in any case.
#[inline]
fn line_kind(name: &[u8]) -> Line {
    let is = |n: &[u8]| super::head::name_is(name, n);
    match name.len() {
        14 if is(b"content-length") => Line::ContentLength,
        17 if is(b"transfer-encoding") => Line::TransferEncoding,
        10 if is(b"connection") => Line::Connection,
        10 if is(b"keep-alive") => Line::KeepAlive,
        4 if is(b"date") => Line::Date,
        _ => Line::Other,
    }
}

/// Decides a response's framing (the rules of hyper's server, so clients
/// see what they saw before).
fn framing<B: Payload>(resp: &Response<B>, ask: Ask) -> Framing {
    let status = resp.status().as_u16();
    if ask.is_head || status < 200 || status == 204 || status == 304 {
        return Framing::None;
    }
    if let Some(n) = declared_length(resp) {
        return Framing::Length {
            left: n,
            add: false,
        };
    }
    let body = resp.body();
    if body.is_end_stream() {
        return Framing::Length { left: 0, add: true };
    }
    if let Some(n) = body.size_hint().exact() {
        return Framing::Length { left: n, add: true };
    }
    if ask.version == Version::HTTP_11 {
        let allowed = if ask.trailers_ok && resp.headers().contains_key(TRAILER) {
            write::allowed_trailers(resp.headers())
        } else {
            Vec::new()
        };
        Framing::Chunked { allowed }
    } else {
        Framing::Close
    }
}

/// Bytes a response head is written from that are made while writing it
/// (the status code's digits, a `Date` value), kept by the caller until
/// the head is out.
#[derive(Default)]
struct Scratch {
    date: [u8; 29],
    code: [u8; 3],
}

/// The status line and header lines of a response, with the framing,
/// connection and date lines it needs. `close`: says whether the response
/// itself asks to close.
fn status_and_headers<'a, B>(
    w: &mut HeadWriter<'a>,
    resp: &'a Response<B>,
    raw: Option<&'a RawHead>,
    ask: Ask,
    framing: &Framing,
    scratch: &'a mut Scratch,
    close: &mut bool,
) {
    let Scratch { date, code } = scratch;
    let status = resp.status();
    let minor = u8::from(ask.version != Version::HTTP_10);
    // The backend's own status line when it is the line the code below
    // would make: one slice instead of five.
    match raw.and_then(|r| r.status_line(status.as_u16(), minor)) {
        Some(line) => w.push(line),
        None => {
            w.push(if minor == 0 {
                b"HTTP/1.0 "
            } else {
                b"HTTP/1.1 "
            });
            code.copy_from_slice(status.as_str().as_bytes());
            let code: &'a [u8] = code;
            w.push(code);
            w.push(b" ");
            let reason = raw
                .map(RawHead::reason)
                .filter(|r| !r.is_empty())
                .or_else(|| {
                    resp.extensions()
                        .get::<hyper::ext::ReasonPhrase>()
                        .map(|r| r.as_bytes())
                })
                .or_else(|| status.canonical_reason().map(str::as_bytes))
                .unwrap_or(b"");
            w.push(reason);
            w.push(b"\r\n");
        }
    }
    let mut lines = Lines {
        // 1xx and 204 never carry framing lines.
        no_framing: status.is_informational() || status.as_u16() == 204,
        own_length: matches!(framing, Framing::Chunked { .. } | Framing::Close),
        has_date: false,
    };
    // The backend's lines as it wrote them, in runs of whole lines, less
    // the hop-by-hop ones the answer step would have taken out (a raw head
    // has no others) and the framing lines the gateway replaces.
    if let Some(raw) = raw {
        raw.kept_runs(
            |name| match line_kind(name) {
                Line::Connection | Line::KeepAlive | Line::TransferEncoding => false,
                Line::ContentLength => !(lines.no_framing || lines.own_length),
                Line::Date => {
                    lines.has_date = true;
                    true
                }
                Line::Other => true,
            },
            |run| w.push(run),
        );
    }
    for (name, value) in resp.headers() {
        let name = name.as_str().as_bytes();
        lines.write(w, line_kind(name), name, value.as_bytes(), close);
    }
    if !lines.has_date {
        *date = super::date::now();
        w.header(b"date", &date[..]);
    }
}

/// The rules every header line of a response head is written by.
struct Lines {
    no_framing: bool,
    /// The body is framed by chunks or by the close: no length line.
    own_length: bool,
    has_date: bool,
}

impl Lines {
    fn write<'a>(
        &mut self,
        w: &mut HeadWriter<'a>,
        kind: Line,
        name: &'a [u8],
        value: &'a [u8],
        close: &mut bool,
    ) {
        match kind {
            // The gateway frames the body itself.
            Line::TransferEncoding => return,
            Line::ContentLength if self.no_framing || self.own_length => return,
            Line::Connection
                if value
                    .split(|b| *b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close")) =>
            {
                *close = true;
            }
            Line::Date => self.has_date = true,
            _ => {}
        }
        w.header(name, value);
    }
}

/// A body's first data frame when it is ready without waiting.
fn first_data<B: Payload>(body: &mut B) -> Result<Option<Bytes>, BoxError> {
    if let Some(whole) = body.take_whole() {
        return Ok(whole);
    }
    match body.frame().now_or_never() {
        Some(Some(Ok(f))) => match f.into_data() {
            Ok(d) => Ok(Some(d)),
            // Trailers first: put back as a body of their own.
            Err(f) => {
                if let Ok(trailers) = f.into_trailers() {
                    let rest = std::mem::take(body);
                    *body = B::after_trailers(trailers, rest);
                }
                Ok(None)
            }
        },
        Some(Some(Err(e))) => Err(e),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::testing::TestBody;
    use http::header::{HeaderMap, HeaderValue};

    fn ask(version: Version, is_head: bool, trailers_ok: bool) -> Ask {
        Ask {
            version,
            is_head,
            trailers_ok,
        }
    }

    /// A body of unknown length: `data`, then `trailers`.
    fn streamed(data: &'static [u8], trailers: Option<HeaderMap>) -> TestBody {
        TestBody::prefixed(Some(Bytes::from_static(data)), trailers, TestBody::Empty)
    }

    async fn written(resp: Response<TestBody>, ask: Ask) -> (String, bool) {
        let mut out: Vec<u8> = Vec::new();
        let mut keep = true;
        write_response(&mut out, Box::new(resp), ask, &mut keep)
            .await
            .unwrap();
        // The date varies: blank it.
        let text = String::from_utf8(out).unwrap();
        let text = text
            .split("\r\n")
            .map(|l| {
                if l.starts_with("date: ") {
                    "date: *"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\r\n");
        (text, keep)
    }

    /// A backend's head kept raw: its lines go out byte for byte as they
    /// came (case and spacing kept), less `Connection` and `Keep-Alive`; the framing and `Date`
    /// rules are those of a header map; what the gateway added follows.
    #[tokio::test]
    async fn a_raw_head_is_written_as_the_backend_wrote_it() {
        let head = b"HTTP/1.1 200 Fine\r\nServer: nginx\r\nConnection: keep-alive\r\n\
            Keep-Alive: timeout=5\r\nContent-Length: 2\r\nX-Mixed-Case:A  \r\n\r\n";
        let raw = || {
            let mut r = Response::new(TestBody::with_raw_head(
                RawHead::parsed(head),
                TestBody::full("ok"),
            ));
            r.headers_mut()
                .append("set-cookie", HeaderValue::from_static("s=1"));
            r
        };
        let (t, keep) = written(raw(), ask(Version::HTTP_11, false, false)).await;
        assert_eq!(
            t,
            "HTTP/1.1 200 Fine\r\nServer: nginx\r\nContent-Length: 2\r\nX-Mixed-Case:A  \r\n\
             set-cookie: s=1\r\ndate: *\r\n\r\nok"
        );
        assert!(keep);
        // Its own `Date` is kept; HEAD keeps the length and sends no body.
        let dated = b"HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\n\
            Content-Length: 7\r\n\r\n";
        let r = Response::new(TestBody::with_raw_head(
            RawHead::parsed(dated),
            TestBody::Empty,
        ));
        let (t, _) = written(r, ask(Version::HTTP_11, true, false)).await;
        assert_eq!(
            t,
            "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 10:00:00 GMT\r\nContent-Length: 7\r\n\r\n"
        );
        // Unknown length to HTTP/1.1: chunked; the backend's
        // `Transfer-Encoding` is not repeated. An empty reason phrase is
        // the code's own.
        let chunked = b"HTTP/1.1 404 \r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n";
        let mut r = Response::new(TestBody::with_raw_head(
            RawHead::parsed(chunked),
            streamed(b"hello", None),
        ));
        *r.status_mut() = http::StatusCode::NOT_FOUND;
        let (t, _) = written(r, ask(Version::HTTP_11, false, false)).await;
        assert_eq!(t, "HTTP/1.1 404 Not Found\r\nX-A: 1\r\ndate: *\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        // Materialized, the same head becomes map entries before the
        // added ones, with its reason phrase kept.
        let mut r = raw();
        super::super::response_head::materialize(&mut r);
        assert!(r.body().raw_head().is_none());
        let names: Vec<_> = r.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "server",
                "connection",
                "keep-alive",
                "content-length",
                "x-mixed-case",
                "set-cookie"
            ]
        );
        let (t, _) = written(r, ask(Version::HTTP_11, false, false)).await;
        assert!(t.starts_with("HTTP/1.1 200 Fine\r\n"), "{t}");
    }

    /// The backend's status line goes out as it came only when it is the
    /// line the writer would have made: the client's version, the
    /// answer's code (the gateway may have changed it), a reason phrase.
    #[tokio::test]
    async fn a_raw_status_line_is_used_only_when_it_is_the_same_line() {
        let of = |head: &'static [u8], code: u16, version| async move {
            let mut r = Response::new(TestBody::with_raw_head(
                RawHead::parsed(head),
                TestBody::Empty,
            ));
            *r.status_mut() = http::StatusCode::from_u16(code).unwrap();
            let (t, _) = written(r, ask(version, false, false)).await;
            t.split("\r\n").next().unwrap().to_owned()
        };
        let v11 = Version::HTTP_11;
        let head = b"HTTP/1.1 200  Fine  \r\nContent-Length: 0\r\n\r\n";
        let raw = RawHead::parsed(head);
        assert_eq!(
            raw.status_line(200, 1),
            Some(&b"HTTP/1.1 200  Fine  \r\n"[..])
        );
        assert_eq!(raw.status_line(201, 1), None);
        assert_eq!(raw.status_line(200, 0), None);
        assert_eq!(of(head, 200, v11).await, "HTTP/1.1 200  Fine  ");
        // Another code: the line is made (the backend's reason phrase kept,
        // as before).
        assert_eq!(of(head, 502, v11).await, "HTTP/1.1 502  Fine  ");
        assert_eq!(
            of(head, 200, Version::HTTP_10).await,
            "HTTP/1.0 200  Fine  "
        );
        let bare = b"HTTP/1.1 204\r\n\r\n";
        assert_eq!(RawHead::parsed(bare).status_line(204, 1), None);
        assert_eq!(of(bare, 204, v11).await, "HTTP/1.1 204 No Content");
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(of(old, 200, v11).await, "HTTP/1.1 200 OK");
        assert_eq!(of(old, 200, Version::HTTP_10).await, "HTTP/1.0 200 OK");
    }

    #[tokio::test]
    async fn answers_are_framed_as_hyper_framed_them() {
        // A known length is added; the body goes with the head.
        let (t, keep) = written(
            Response::new(TestBody::full("hi")),
            ask(Version::HTTP_11, false, false),
        )
        .await;
        assert_eq!(
            t,
            "HTTP/1.1 200 OK\r\ndate: *\r\ncontent-length: 2\r\n\r\nhi"
        );
        assert!(keep);
        // Unknown length to HTTP/1.1: chunked.
        let (t, _) = written(
            Response::new(streamed(b"hello", None)),
            ask(Version::HTTP_11, false, false),
        )
        .await;
        assert_eq!(t, "HTTP/1.1 200 OK\r\ndate: *\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        // Trailers: only those the answer announces, only to a client
        // that sent `TE: trailers`.
        let mut tr = HeaderMap::new();
        tr.insert("x-sum", HeaderValue::from_static("42"));
        tr.insert("x-other", HeaderValue::from_static("no"));
        let announced = || {
            let mut r = Response::new(streamed(b"hello", Some(tr.clone())));
            r.headers_mut()
                .insert(TRAILER, HeaderValue::from_static("x-sum"));
            r
        };
        let (t, _) = written(announced(), ask(Version::HTTP_11, false, true)).await;
        assert!(
            t.ends_with("\r\n\r\n5\r\nhello\r\n0\r\nx-sum: 42\r\n\r\n"),
            "{t}"
        );
        let (t, _) = written(announced(), ask(Version::HTTP_11, false, false)).await;
        assert!(t.ends_with("\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), "{t}");
        // Unknown length to HTTP/1.0: close-delimited, and the connection
        // closes after it.
        let (t, keep) = written(
            Response::new(streamed(b"hello", None)),
            ask(Version::HTTP_10, false, false),
        )
        .await;
        assert_eq!(t, "HTTP/1.0 200 OK\r\ndate: *\r\n\r\nhello");
        assert!(!keep);
        // HEAD keeps the length it was given and sends no body.
        let mut r = Response::new(TestBody::Empty);
        r.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("1000"));
        let (t, _) = written(r, ask(Version::HTTP_11, true, false)).await;
        assert_eq!(
            t,
            "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\ndate: *\r\n\r\n"
        );
        // 204: no framing lines at all.
        let mut r = Response::new(TestBody::Empty);
        *r.status_mut() = http::StatusCode::NO_CONTENT;
        r.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
        let (t, _) = written(r, ask(Version::HTTP_11, false, false)).await;
        assert_eq!(t, "HTTP/1.1 204 No Content\r\ndate: *\r\n\r\n");
        // Closing: `Connection: close` on HTTP/1.1, `keep-alive` said to
        // an HTTP/1.0 client that keeps the connection.
        let mut out: Vec<u8> = Vec::new();
        let mut keep = false;
        write_response(
            &mut out,
            Box::new(Response::new(TestBody::Empty)),
            ask(Version::HTTP_11, false, false),
            &mut keep,
        )
        .await
        .unwrap();
        assert!(String::from_utf8_lossy(&out).contains("\r\nconnection: close\r\n"));
        let mut out: Vec<u8> = Vec::new();
        let mut keep = true;
        write_response(
            &mut out,
            Box::new(Response::new(TestBody::Empty)),
            ask(Version::HTTP_10, false, false),
            &mut keep,
        )
        .await
        .unwrap();
        assert!(String::from_utf8_lossy(&out).contains("\r\nconnection: keep-alive\r\n"));
    }

    #[tokio::test]
    async fn a_body_longer_than_its_length_is_cut_and_closes() {
        let mut r = Response::new(streamed(b"too long", None));
        r.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("3"));
        let mut out: Vec<u8> = Vec::new();
        let mut keep = true;
        let res = write_response(
            &mut out,
            Box::new(r),
            ask(Version::HTTP_11, false, false),
            &mut keep,
        )
        .await;
        assert!(res.is_err());
        assert!(!keep);
        assert!(
            out.ends_with(b"\r\n\r\ntoo"),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
    }
}
