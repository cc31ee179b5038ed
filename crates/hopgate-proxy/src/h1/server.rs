//! hopgate's own HTTP/1.1 server: one task per client connection reads
//! each request head with [`super::head::parse_request`], hands the request
//! to [`ClientConn::serve`], awaits its future in the same task and writes
//! the response itself (head, framing and body in as few vectored writes
//! as it can).
//!
//! What it does, in the order of a request:
//!
//! - **Heads.** Ambiguous framing (a `Content-Length` next to a
//!   `Transfer-Encoding`, differing `Content-Length`s, a transfer coding
//!   other than one `chunked`, obsolete line folding, a bare LF, NUL or CR
//!   in a value) is answered 400 and never forwarded; a head past the
//!   listener's buffer limit or with too many lines, 431. The first bytes
//!   of a connection are bounded by [`crate::client_io::ClientIo`]; a head
//!   begun and not finished within `timeouts.header_read` gets 408; an
//!   idle keep-alive connection is closed after `timeouts.idle`.
//! - **Bodies.** Content-Length and chunked request bodies (trailers
//!   included) stream to the forwarder as a [`ServerBody`], which writes
//!   `100 Continue` on its first read when the client asked for one.
//! - **Responses.** Content-Length, chunked (with trailers when the client
//!   sent `TE: trailers` and the response announces them in `Trailer`) or,
//!   for an HTTP/1.0 client and a body of unknown length, close-delimited;
//!   HEAD, 1xx, 204 and 304 answers carry no body.
//! - **Connections.** Keep-alive (HTTP/1.0 only when asked for), pipelined
//!   requests answered in order (the next head may already be in the
//!   buffer), a client that shuts its write side after a request still gets
//!   its answer, an upgrade answered 101 hands the socket (and any bytes
//!   read past the head) to the tunnel, and a draining listener or a
//!   handover closes the connection after the answer in flight (idle ones
//!   at once).
//!
//! Must not touch: routing and forwarding ([`crate::forward`]), protocol
//! selection ([`crate::listener`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, DATE, TE, TRAILER,
    TRANSFER_ENCODING,
};
use http::{Method, Request, Response, Uri, Version};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use super::head::{self, BodyKind, Head, HeadError};
use super::server_body::{ClientStream, Conn, RequestBody, ServerBody, Shared, Slot};
use super::write::{self, HeadWriter, Out};
use crate::body::ProxyBody;
use crate::forward::ClientConn;
use hopgate_core::error::ErrorKind;

/// Bytes asked of the kernel per read of a head.
const HEAD_READ: usize = 8 * 1024;
/// How long a closing connection keeps reading (and dropping) what the
/// client still sends, so that closing with unread bytes does not reset
/// the connection under the answer just written.
const LINGER: Duration = Duration::from_secs(2);
/// The most bytes a closing connection reads and drops.
const LINGER_BYTES: usize = 1 << 20;

/// The listener's limits as the server uses them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    pub max_header_bytes: usize,
    /// `limits.max_headers`: above the parser's own 100, heads are parsed
    /// with room for one more line than this, so that the gateway's check
    /// answers what lies between (as with hyper's cap).
    pub max_headers: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Settings {
    /// The most header lines the parser takes: its own 100, or one more
    /// than a higher `limits.max_headers`.
    fn head_lines(&self) -> usize {
        if self.max_headers > head::MAX_HEADERS {
            self.max_headers + 1
        } else {
            head::MAX_HEADERS
        }
    }

    /// The most bytes a head may take in the buffer before it is refused
    /// with 431: room above `limits.max_header_bytes`, so that the
    /// gateway's own check answers a head between the limit and this with
    /// its 431 page (what hyper's server did too).
    fn head_buffer(&self) -> usize {
        (self.max_header_bytes * 2).clamp(16 << 10, head::MAX_HEAD_BYTES)
    }
}

/// A connection's end before a request could be read.
enum NoHead {
    /// Closed, idle too long, or draining: close quietly.
    Quiet,
    /// Answer with this error, then close.
    Refuse(ErrorKind),
}

/// Serves HTTP/1.x requests on `io` (whose first bytes, `read`, were
/// already read) until the client closes, a request asks to close, the
/// listener drains (`drain` turns true) or an error ends the connection.
pub(crate) async fn serve(
    io: Box<dyn ClientStream>,
    read: BytesMut,
    conn: Arc<ClientConn>,
    settings: Settings,
    mut drain: watch::Receiver<bool>,
) {
    let mut c = Conn { io, buf: read };
    let mut first = true;
    loop {
        let head = match read_head(&mut c, &settings, first, &mut drain).await {
            Ok(h) => h,
            Err(NoHead::Quiet) => return,
            Err(NoHead::Refuse(kind)) => return refuse(c, kind).await,
        };
        first = false;
        let bytes = c.buf.split_to(head.len).freeze();
        let mut req = match request(&head, &bytes) {
            Ok(r) => r,
            Err(kind) => return refuse(c, kind).await,
        };
        let is_head = req.method() == Method::HEAD;
        let connect = req.method() == Method::CONNECT;
        let trailers_ok = head.minor == 1 && te_trailers(req.headers());
        let mut keep = head.keeps_alive() && !connect;
        // An upgrade: the socket goes to the tunnel after a 101.
        let upgrade = crate::tunnel::upgrade_request(&req).map(|_| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            req.extensions_mut()
                .insert(crate::tunnel::NativeUpgrade::new(rx));
            tx
        });
        let (body, slot, held) = match head::request_body(&head) {
            BodyKind::Empty | BodyKind::Close => (RequestBody::Empty, None, Some(c)),
            kind => {
                let slot: Slot = Arc::new(parking_lot::Mutex::new(Shared {
                    conn: Some(c),
                    done: false,
                    answered: false,
                }));
                let (chunked, len) = match kind {
                    BodyKind::Length(n) => (false, n),
                    _ => (true, 0),
                };
                let expect = head.facts.expect_continue && head.minor == 1;
                let body = ServerBody::new(Arc::clone(&slot), chunked, len, expect);
                (RequestBody::Native(Box::new(body)), Some(slot), None)
            }
        };
        let req = req.map(|()| body);
        let mut unread = false;
        let resp = conn.serve(req).await;
        if draining(&drain) || crate::handover::handing_over() {
            keep = false;
        }
        let version = if head.minor == 0 {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let ask = Ask {
            version,
            is_head,
            trailers_ok,
        };
        let written = match (held, slot) {
            (Some(mut own), _) => {
                if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                    if let Some(tx) = upgrade {
                        if write_upgrade(&mut own.io, resp).await.is_ok() {
                            let _ = tx.send((own.io, own.buf.freeze()));
                        }
                    }
                    return;
                }
                let r = write_response(&mut own.io, resp, ask, &mut keep).await;
                r.map(|()| own)
            }
            (None, Some(slot)) => {
                // The body may still be reading: a backend that answers
                // while it reads (an echo) gets its answer streamed while
                // the client's body still comes, written through the slot;
                // the connection comes back after it.
                let reading = {
                    let mut shared = slot.lock();
                    shared.answered = true;
                    !shared.done && Arc::strong_count(&slot) > 1
                };
                let mut resp = Some(resp);
                let r = match if reading { resp.take() } else { None } {
                    Some(resp) => {
                        write_response(&mut SlotIo(Arc::clone(&slot)), resp, ask, &mut keep).await
                    }
                    None => Ok(()),
                };
                let (own, done) = {
                    let mut shared = slot.lock();
                    (shared.conn.take(), shared.done)
                };
                // A body not read to its end leaves bytes of it unread.
                if !done {
                    keep = false;
                    unread = true;
                }
                match (r, own) {
                    (Ok(()), Some(mut own)) if !reading => {
                        let r = match resp {
                            Some(resp) => write_response(&mut own.io, resp, ask, &mut keep).await,
                            None => Ok(()),
                        };
                        r.map(|()| own)
                    }
                    (Ok(()), Some(own)) => Ok(own),
                    (Err(e), _) => Err(e),
                    (Ok(()), None) => Err(io::ErrorKind::NotConnected.into()),
                }
            }
            (None, None) => return,
        };
        c = match written {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(peer = %conn.peer, error = %e, "writing a response failed");
                return;
            }
        };
        if !keep {
            let unread = unread || !c.buf.is_empty();
            return linger_close(c, unread).await;
        }
    }
}

/// Writes a 101 answer's head (the tunnel takes the connection after it).
async fn write_upgrade<W: AsyncWrite + Unpin>(
    io: &mut W,
    resp: Response<ProxyBody>,
) -> io::Result<()> {
    let ask = Ask {
        version: Version::HTTP_11,
        is_head: false,
        trailers_ok: false,
    };
    let (parts, _) = resp.into_parts();
    let mut date = [0u8; 29];
    let mut close = false;
    {
        let mut w = HeadWriter::with_lines(parts.headers.len() + 2);
        status_and_headers(&mut w, &parts, ask, &Framing::None, &mut date, &mut close);
        w.push(b"\r\n");
        w.write_to(io).await.map_err(|(e, _)| e)?;
    }
    io.flush().await
}

/// Writes to the client's socket while it sits in the body's slot.
struct SlotIo(Slot);

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

/// What the response depends on from its request.
#[derive(Clone, Copy)]
struct Ask {
    version: Version,
    is_head: bool,
    /// The client sent `TE: trailers` (HTTP/1.1).
    trailers_ok: bool,
}

/// Does `TE` list `trailers`?
fn te_trailers(headers: &HeaderMap) -> bool {
    headers.get_all(TE).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"trailers"))
    })
}

/// Has the listener begun to drain? The drain signal only ever turns
/// true, so a change seen is the drain (an atomic load, no lock); a
/// listener gone is one too.
fn draining(drain: &watch::Receiver<bool>) -> bool {
    drain.has_changed().unwrap_or(true)
}

/// Reads until a whole request head is in the buffer.
async fn read_head(
    c: &mut Conn,
    s: &Settings,
    first: bool,
    drain: &mut watch::Receiver<bool>,
) -> Result<Head, NoHead> {
    // The head's clock: from its first byte (the first bytes of a
    // connection are bounded by `ClientIo`, and start it too).
    let mut began = (first || !c.buf.is_empty()).then(Instant::now);
    loop {
        if !c.buf.is_empty() {
            match head::parse_request_up_to(&c.buf, s.head_lines()) {
                Ok(Some(h)) => return Ok(h),
                Ok(None) => {}
                Err(e) => return Err(NoHead::Refuse(refusal(e))),
            }
            if c.buf.len() >= s.head_buffer() {
                return Err(NoHead::Refuse(ErrorKind::HeadersTooLarge));
            }
            began.get_or_insert_with(Instant::now);
        }
        let read = std::future::poll_fn(|cx| c.poll_fill(HEAD_READ, cx));
        let got = match began {
            Some(at) => match tokio::time::timeout_at(at + s.header_read_timeout, read).await {
                Ok(r) => r,
                // A head begun and not finished in time.
                Err(_) if !c.buf.is_empty() => {
                    return Err(NoHead::Refuse(ErrorKind::ClientTimeout))
                }
                Err(_) => return Err(NoHead::Quiet),
            },
            None => {
                // Between requests: idle until the next one, or drained.
                if draining(drain) {
                    return Err(NoHead::Quiet);
                }
                tokio::select! {
                    r = read => r,
                    () = tokio::time::sleep(s.idle_timeout) => return Err(NoHead::Quiet),
                    // The one change there is: false to true.
                    _ = drain.changed() => return Err(NoHead::Quiet),
                }
            }
        };
        match got {
            Ok(0) | Err(_) => return Err(NoHead::Quiet),
            Ok(_) => {}
        }
    }
}

/// The answer to a head that cannot be served.
fn refusal(e: HeadError) -> ErrorKind {
    match e {
        HeadError::TooManyHeaders | HeadError::TooLarge => ErrorKind::HeadersTooLarge,
        _ => ErrorKind::BadRequest,
    }
}

/// The request a head describes, its header values sharing `bytes`.
fn request(head: &Head, bytes: &Bytes) -> Result<Request<()>, ErrorKind> {
    let method =
        Method::from_bytes(&bytes[head.method.clone()]).map_err(|_| ErrorKind::BadRequest)?;
    let target = bytes.slice(head.target.clone());
    if target.len() >= usize::from(u16::MAX) {
        return Err(ErrorKind::UriTooLong);
    }
    let uri = Uri::from_maybe_shared(target).map_err(|_| ErrorKind::BadRequest)?;
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = if head.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let headers = req.headers_mut();
    // Room for the lines the gateway adds, so the map grows once.
    headers.reserve(head.headers.len() + 6);
    let mut length_seen = false;
    for h in &head.headers {
        let raw = &bytes[h.name.clone()];
        // Repeated `Content-Length` lines (the parser made sure they
        // agree) are forwarded as one, as hyper's server did.
        if raw.len() == 14 && raw.eq_ignore_ascii_case(b"content-length") {
            if length_seen {
                continue;
            }
            length_seen = true;
        }
        let name = HeaderName::from_bytes(raw).map_err(|_| ErrorKind::BadRequest)?;
        let value = HeaderValue::from_maybe_shared(bytes.slice(h.value.clone()))
            .map_err(|_| ErrorKind::BadRequest)?;
        headers.append(name, value);
    }
    Ok(req)
}

/// [`request`] for a head parsed from `head_bytes` (a copy is taken): the
/// fuzz target's way in.
pub fn request_from_head(head: &Head, head_bytes: &[u8]) -> Result<Request<()>, ErrorKind> {
    request(head, &Bytes::copy_from_slice(head_bytes))
}

/// Answers `kind` (no request was made of the bytes), then closes.
async fn refuse(mut c: Conn, kind: ErrorKind) {
    let mut resp = crate::respond::error_response(kind, None);
    resp.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    let ask = Ask {
        version: Version::HTTP_11,
        is_head: false,
        trailers_ok: false,
    };
    let mut keep = false;
    if write_response(&mut c.io, resp, ask, &mut keep)
        .await
        .is_ok()
    {
        linger_close(c, true).await;
    }
}

/// Shuts the write side; when the client may still be sending (`unread`:
/// a body or pipelined requests left unread), reads and drops what it
/// sends (bounded in time and bytes) before the socket is closed, so that
/// the close does not reset the connection under the answer.
async fn linger_close(mut c: Conn, unread: bool) {
    if c.io.shutdown().await.is_err() || !unread {
        return;
    }
    let until = Instant::now() + LINGER;
    let mut dropped = 0;
    while dropped < LINGER_BYTES {
        c.buf.clear();
        let read = std::future::poll_fn(|cx| c.poll_fill(HEAD_READ, cx));
        match tokio::time::timeout_at(until, read).await {
            Ok(Ok(n)) if n > 0 => dropped += n,
            _ => return,
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
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    let mut all = headers.get_all(CONTENT_LENGTH).iter();
    let first = all.next()?;
    if all.next().is_some() {
        return None;
    }
    let s = first.to_str().ok()?.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Decides a response's framing (the rules of hyper's server, so clients
/// see what they saw before).
fn framing(resp: &Response<ProxyBody>, ask: Ask) -> Framing {
    let status = resp.status().as_u16();
    if ask.is_head || status < 200 || status == 204 || status == 304 {
        return Framing::None;
    }
    if let Some(n) = declared_length(resp.headers()) {
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

/// The status line and header lines of a response, with the framing,
/// connection and date lines it needs. `close`: says whether the response
/// itself asks to close.
fn status_and_headers<'a>(
    w: &mut HeadWriter<'a>,
    parts: &'a http::response::Parts,
    ask: Ask,
    framing: &Framing,
    date: &'a mut [u8; 29],
    close: &mut bool,
) {
    let status = &parts.status;
    w.push(if ask.version == Version::HTTP_10 {
        b"HTTP/1.0 "
    } else {
        b"HTTP/1.1 "
    });
    w.push(status.as_str().as_bytes());
    w.push(b" ");
    let reason = parts
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| r.as_bytes())
        .or_else(|| status.canonical_reason().map(str::as_bytes))
        .unwrap_or(b"");
    w.push(reason);
    w.push(b"\r\n");
    // 1xx and 204 never carry framing lines.
    let no_framing = status.is_informational() || status.as_u16() == 204;
    let mut has_date = false;
    for (name, value) in &parts.headers {
        if no_framing && (name == CONTENT_LENGTH || name == TRANSFER_ENCODING) {
            continue;
        }
        if matches!(framing, Framing::Chunked { .. } | Framing::Close) && name == CONTENT_LENGTH {
            continue;
        }
        if name == TRANSFER_ENCODING {
            // The gateway frames the body itself.
            continue;
        }
        if name == CONNECTION
            && value
                .as_bytes()
                .split(|b| *b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
        {
            *close = true;
        }
        has_date |= name == DATE;
        w.header(name.as_str().as_bytes(), value.as_bytes());
    }
    if !has_date {
        *date = crate::h1::date::now();
        w.header(b"date", &date[..]);
    }
}

/// Writes one response: head, then body. `keep`: the connection stays
/// open after it; cleared when the response or its framing needs a close.
async fn write_response<W: AsyncWrite + Unpin>(
    io: &mut W,
    resp: Response<ProxyBody>,
    ask: Ask,
    keep: &mut bool,
) -> io::Result<()> {
    let mut framing = framing(&resp, ask);
    if matches!(framing, Framing::Close) {
        *keep = false;
    }
    let (parts, mut body) = resp.into_parts();
    // The first body bytes, when they are there already: written with the
    // head in one vectored write.
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
    let mut date = [0u8; 29];
    let mut close = false;
    let mut digits = write::Digits::default();
    let mut chunk_pre = [0u8; 18];
    let mut overlong = false;
    {
        let mut w = HeadWriter::with_lines(parts.headers.len() + 4);
        status_and_headers(&mut w, &parts, ask, &framing, &mut date, &mut close);
        if close {
            *keep = false;
        }
        match &framing {
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
        if let Some(d) = &first {
            match &mut framing {
                Framing::Length { left, .. } => {
                    let take = (d.len() as u64).min(*left) as usize;
                    overlong = take < d.len();
                    *left -= take as u64;
                    w.push(&d[..take]);
                }
                Framing::Chunked { .. } => {
                    let n = chunk_prefix(d.len(), &mut chunk_pre);
                    w.push(&chunk_pre[..n]);
                    w.push(d);
                    w.push(b"\r\n");
                }
                Framing::Close => w.push(d),
                Framing::None => {}
            }
        }
        w.write_to(io).await.map_err(|(e, _)| e)?;
    }
    drop(parts);
    if overlong {
        *keep = false;
        io.flush().await?;
        return Err(io::Error::other(
            "response body longer than its Content-Length",
        ));
    }
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

/// A body's first data frame when it is ready without waiting.
fn first_data(body: &mut ProxyBody) -> Result<Option<Bytes>, crate::body::BoxError> {
    if let ProxyBody::Full(b) = body {
        return Ok(b.take());
    }
    match body.frame().now_or_never() {
        Some(Some(Ok(f))) => match f.into_data() {
            Ok(d) => Ok(Some(d)),
            // Trailers first: put back as a body of their own.
            Err(f) => {
                let rest = std::mem::take(body);
                *body = ProxyBody::Prefixed {
                    head: None,
                    trailers: f.into_trailers().ok(),
                    rest: Box::new(rest),
                };
                Ok(None)
            }
        },
        Some(Some(Err(e))) => Err(e),
        _ => Ok(None),
    }
}

/// A chunk's size line (hex digits and CRLF) into `buf`; returns its length.
fn chunk_prefix(n: usize, buf: &mut [u8; 18]) -> usize {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    let len = digits.len() - i;
    buf[..len].copy_from_slice(&digits[i..]);
    buf[len..len + 2].copy_from_slice(b"\r\n");
    len + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(version: Version, is_head: bool, trailers_ok: bool) -> Ask {
        Ask {
            version,
            is_head,
            trailers_ok,
        }
    }

    /// A body of unknown length: `data`, then `trailers`.
    fn streamed(data: &'static [u8], trailers: Option<HeaderMap>) -> ProxyBody {
        ProxyBody::Prefixed {
            head: Some(Bytes::from_static(data)),
            trailers,
            rest: Box::new(ProxyBody::Empty),
        }
    }

    async fn written(resp: Response<ProxyBody>, ask: Ask) -> (String, bool) {
        let mut out: Vec<u8> = Vec::new();
        let mut keep = true;
        write_response(&mut out, resp, ask, &mut keep)
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

    #[tokio::test]
    async fn answers_are_framed_as_hyper_framed_them() {
        // A known length is added; the body goes with the head.
        let (t, keep) = written(
            Response::new(ProxyBody::full("hi")),
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
        let mut r = Response::new(ProxyBody::Empty);
        r.headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from_static("1000"));
        let (t, _) = written(r, ask(Version::HTTP_11, true, false)).await;
        assert_eq!(
            t,
            "HTTP/1.1 200 OK\r\ncontent-length: 1000\r\ndate: *\r\n\r\n"
        );
        // 204: no framing lines at all.
        let mut r = Response::new(ProxyBody::Empty);
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
            Response::new(ProxyBody::Empty),
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
            Response::new(ProxyBody::Empty),
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
        let res = write_response(&mut out, r, ask(Version::HTTP_11, false, false), &mut keep).await;
        assert!(res.is_err());
        assert!(!keep);
        assert!(
            out.ends_with(b"\r\n\r\ntoo"),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
    }

    #[test]
    fn heads_become_requests_sharing_their_bytes() {
        let raw = b"POST /p?q=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 3\r\nContent-Length: 3\r\nx-v: caf\xe9\r\n\r\n";
        let head = head::parse_request(raw).unwrap().unwrap();
        let req = request_from_head(&head, raw).unwrap();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri(), "/p?q=1");
        assert_eq!(req.version(), Version::HTTP_11);
        assert_eq!(req.headers().get_all(CONTENT_LENGTH).iter().count(), 1);
        assert_eq!(req.headers()["x-v"].as_bytes(), b"caf\xe9");
        let bad = b"G(T / HTTP/1.1\r\nhost: a\r\n\r\n";
        if let Ok(Some(h)) = head::parse_request(bad) {
            assert!(request_from_head(&h, bad).is_err());
        }
    }
}
