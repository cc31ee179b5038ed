//! Writing HTTP/1.1 messages: a response head as a list of [`IoSlice`]s
//! sent with one write (partial writes resumed where they stopped), an
//! upstream request head rendered into its connection's buffer, the
//! framing an upstream request gets from its headers and body, and the
//! chunked encoding of body frames.
//!
//! A write of several slices up to [`FLAT_MOST`] bytes in all is copied
//! into the thread's spare buffer and goes out as one `send`, not one
//! `writev`: the kernel's vectored path (the iovec import, the file-write
//! checks) costs ~0.5 µs more per call on loopback than a plain send of
//! the same bytes (`bench/sendcost.py`), more than copying a few KiB.
//!
//! Must not touch: what the lines the caller adds to a request head say
//! ([`ExtraLines`]), sockets beyond the writes asked for.

use std::cell::Cell;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, CONTENT_LENGTH, TRAILER, TRANSFER_ENCODING};
use http::Method;
use http_body::Body;
use tokio::io::AsyncWrite;

use super::head::BodyKind;

/// Lines a caller adds to an upstream request head after the header
/// map's own (the gateway's `SetLines`), each handed to `line` as its
/// fixed start (`"\r\nname: "`, the previous line's end included) and its
/// value.
pub trait ExtraLines {
    fn each(&self, line: impl FnMut(&'static [u8], &[u8]));
}

/// No lines.
impl ExtraLines for () {
    fn each(&self, _: impl FnMut(&'static [u8], &[u8])) {}
}

/// A message head as slices of borrowed bytes, written in one go; the
/// list of slices is the thread's spare ([`super::spare`]).
#[derive(Debug, Default)]
pub(crate) struct HeadWriter<'a> {
    slices: Vec<IoSlice<'a>>,
    len: usize,
}

impl Drop for HeadWriter<'_> {
    fn drop(&mut self) {
        super::spare::give_slices(std::mem::take(&mut self.slices));
    }
}

impl<'a> HeadWriter<'a> {
    /// Room for `lines` header lines written one by one and `runs` more
    /// slices (a raw head's runs of lines).
    pub(crate) fn with_lines(lines: usize, runs: usize) -> HeadWriter<'a> {
        HeadWriter {
            slices: super::spare::slices(4 * lines + 8 + runs),
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, bytes: &'a [u8]) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.slices.push(IoSlice::new(bytes));
        }
    }

    /// `name: value` and its line end.
    pub(crate) fn header(&mut self, name: &'a [u8], value: &'a [u8]) {
        self.push(name);
        self.push(b": ");
        self.push(value);
        self.push(b"\r\n");
    }

    /// Writes the whole head. On failure, says how many bytes went out
    /// before it (none means the peer cannot have seen the message).
    pub(crate) async fn write_to<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
    ) -> Result<(), (io::Error, usize)> {
        let mut written = 0;
        if self.slices.len() > 1 && self.len <= FLAT_MOST {
            let all = &self.slices[..];
            written = std::future::poll_fn(|cx| poll_write_flat(&mut *w, all, self.len, cx))
                .await
                .map_err(|e| (e, 0))?;
            if written == 0 {
                return Err((io::ErrorKind::WriteZero.into(), 0));
            }
        }
        let mut slices = &mut self.slices[..];
        IoSlice::advance_slices(&mut slices, written);
        while !slices.is_empty() {
            let n = std::future::poll_fn(|cx| Pin::new(&mut *w).poll_write_vectored(cx, slices))
                .await
                .map_err(|e| (e, written))?;
            if n == 0 {
                return Err((io::ErrorKind::WriteZero.into(), written));
            }
            written += n;
            IoSlice::advance_slices(&mut slices, n);
        }
        Ok(())
    }
}

/// Writes of several slices up to this many bytes in all go out as one
/// buffer (see the module's docs); the thread keeps a buffer this large.
pub(crate) const FLAT_MOST: usize = 8 * 1024;

thread_local! {
    static FLAT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Writes `slices` (`len` bytes in all, at most [`FLAT_MOST`]) copied
/// into the thread's spare buffer, with one plain write.
fn poll_write_flat<W: AsyncWrite + Unpin>(
    w: &mut W,
    slices: &[IoSlice<'_>],
    len: usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    let mut flat = FLAT.try_with(Cell::take).unwrap_or_default();
    flat.clear();
    flat.reserve(len);
    for s in slices {
        flat.extend_from_slice(s);
    }
    let r = Pin::new(w).poll_write(cx, &flat);
    super::spare::keep(&FLAT, flat, FLAT_MOST);
    r
}

/// The version text of a request line.
/// The end of a request line but its line end, which the next line's
/// start carries (see [`request_head`]).
const HTTP_11: &[u8] = b" HTTP/1.1";

/// How an upstream request's head is written: which of its own framing
/// headers are left out and which line is added. The same rules as
/// hyper's client, so backends see what they saw before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestFraming {
    pub body: BodyKind,
    skip_te: bool,
    skip_cl: bool,
    add: Added,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Added {
    Nothing,
    Chunked,
    Length(u64),
}

/// Decides the framing of a request with `headers` and `body`:
/// no body when it has already ended; chunked when a `Transfer-Encoding`
/// is given; a given valid `Content-Length`; a body of known size gets its
/// `Content-Length`; one of unknown size is sent chunked, except for GET,
/// HEAD and CONNECT, which are sent without a body.
pub(crate) fn request_framing<B: Body>(
    method: &Method,
    headers: &HeaderMap,
    body: &B,
) -> RequestFraming {
    let none = RequestFraming {
        body: BodyKind::Empty,
        skip_te: true,
        skip_cl: false,
        add: Added::Nothing,
    };
    if body.is_end_stream() {
        return none;
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        return RequestFraming {
            body: BodyKind::Chunked,
            skip_te: true,
            skip_cl: true,
            add: Added::Chunked,
        };
    }
    if let Some(n) = content_length(headers) {
        return RequestFraming {
            body: if n == 0 {
                BodyKind::Empty
            } else {
                BodyKind::Length(n)
            },
            skip_te: false,
            skip_cl: false,
            add: Added::Nothing,
        };
    }
    match body.size_hint().exact() {
        Some(n) => RequestFraming {
            body: if n == 0 {
                BodyKind::Empty
            } else {
                BodyKind::Length(n)
            },
            skip_te: false,
            skip_cl: true,
            add: Added::Length(n),
        },
        None if matches!(*method, Method::GET | Method::HEAD | Method::CONNECT) => RequestFraming {
            skip_te: false,
            ..none
        },
        None => RequestFraming {
            body: BodyKind::Chunked,
            skip_te: false,
            skip_cl: true,
            add: Added::Chunked,
        },
    }
}

/// All `Content-Length` values, when they parse and agree.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    let mut seen = None;
    for v in headers.get_all(CONTENT_LENGTH) {
        for item in v.as_bytes().split(|b| *b == b',') {
            let item = item.trim_ascii();
            if item.is_empty() || item.len() > 19 || !item.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let n = item.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            if seen.is_some_and(|s| s != n) {
                return None;
            }
            seen = Some(n);
        }
    }
    seen
}

/// Scratch space for the digits of an added `Content-Length`.
#[derive(Debug, Default)]
pub(crate) struct Digits([u8; 20], usize);

impl Digits {
    pub(crate) fn of(&mut self, mut n: u64) -> &[u8] {
        let mut i = self.0.len();
        loop {
            i -= 1;
            self.0[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.1 = i;
        &self.0[i..]
    }
}

/// What an upstream request head is rendered from.
pub(crate) struct RequestHead<'a, S> {
    pub method: &'a Method,
    /// Origin form (or `*`, or the authority of a CONNECT).
    pub target: &'a str,
    pub headers: &'a HeaderMap,
    /// The lines the gateway sets, written after the map's.
    pub set: &'a S,
}

/// Renders the head of an upstream request into `out` (cleared first):
/// request line, the headers (minus the framing ones `framing` replaces),
/// the lines the gateway sets, the added framing line. One contiguous
/// buffer, kept by the connection from one request to the next, costs
/// less than a slice per piece: after the connection's first request it
/// has room already, so each copy below only compares.
pub(crate) fn request_head<S: ExtraLines>(
    out: &mut Vec<u8>,
    head: &RequestHead<'_, S>,
    framing: &RequestFraming,
) {
    out.clear();
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.target.as_bytes());
    out.extend_from_slice(HTTP_11);
    // Each line starts with the end of the one before it, so that a
    // fixed start (the line end, a set line's name and `: `) is one copy.
    for (name, value) in head.headers {
        if (framing.skip_te && name == TRANSFER_ENCODING)
            || (framing.skip_cl && name == CONTENT_LENGTH)
        {
            continue;
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
    }
    head.set.each(|start, value| {
        out.extend_from_slice(start);
        out.extend_from_slice(value);
    });
    match framing.add {
        Added::Nothing => {}
        Added::Chunked => out.extend_from_slice(b"\r\ntransfer-encoding: chunked"),
        Added::Length(n) => {
            out.extend_from_slice(b"\r\ncontent-length: ");
            out.extend_from_slice(Digits::default().of(n));
        }
    }
    out.extend_from_slice(b"\r\n\r\n");
}

/// Writes `buf[*at..]` until all of it is out; `*at` counts what went
/// out (none means the peer cannot have seen the message).
pub(crate) fn poll_write_all<W: AsyncWrite + Unpin>(
    w: &mut W,
    buf: &[u8],
    at: &mut usize,
    cx: &mut Context<'_>,
) -> Poll<io::Result<()>> {
    while *at < buf.len() {
        let n = ready!(Pin::new(&mut *w).poll_write(cx, &buf[*at..]))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        *at += n;
    }
    Poll::Ready(Ok(()))
}

/// The trailer fields a chunked request may carry: those its `Trailer`
/// header announces, minus the ones never allowed in trailers.
pub(crate) fn allowed_trailers(headers: &HeaderMap) -> Vec<HeaderName> {
    headers
        .get_all(TRAILER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|s| HeaderName::from_bytes(s.trim().as_bytes()).ok())
        .filter(|n| {
            !matches!(
                *n,
                http::header::AUTHORIZATION
                    | http::header::CACHE_CONTROL
                    | http::header::CONTENT_ENCODING
                    | http::header::CONTENT_LENGTH
                    | http::header::CONTENT_RANGE
                    | http::header::CONTENT_TYPE
                    | http::header::HOST
                    | http::header::MAX_FORWARDS
                    | http::header::SET_COOKIE
                    | http::header::TRAILER
                    | http::header::TRANSFER_ENCODING
                    | http::header::TE
            )
        })
        .collect()
}

/// A chunk's size line (hex digits and CRLF) into `buf`; returns its length.
pub(crate) fn chunk_prefix(n: usize, buf: &mut [u8; 18]) -> usize {
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

/// Bytes waiting to go out: a framing prefix, data, a framing suffix.
#[derive(Debug, Default)]
pub(crate) struct Out {
    pre: [u8; 18],
    pre_at: u8,
    pre_len: u8,
    data: Bytes,
    post: &'static [u8],
}

impl Out {
    pub(crate) fn is_empty(&self) -> bool {
        self.pre_at == self.pre_len && self.data.is_empty() && self.post.is_empty()
    }

    /// `data` as it is.
    pub(crate) fn raw(&mut self, data: Bytes) {
        self.data = data;
    }

    /// `data` as one chunk.
    pub(crate) fn chunk(&mut self, data: Bytes) {
        self.pre_len = chunk_prefix(data.len(), &mut self.pre) as u8;
        self.pre_at = 0;
        self.data = data;
        self.post = b"\r\n";
    }

    /// The last chunk, with `trailers` (already encoded lines) if any.
    pub(crate) fn last_chunk(&mut self, trailers: Bytes) {
        self.pre[..3].copy_from_slice(b"0\r\n");
        self.pre_at = 0;
        self.pre_len = 3;
        self.data = trailers;
        self.post = b"\r\n";
    }

    /// Writes what is pending.
    pub(crate) fn poll_write<W: AsyncWrite + Unpin>(
        &mut self,
        w: &mut W,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while !self.is_empty() {
            let slices = [
                IoSlice::new(&self.pre[self.pre_at as usize..self.pre_len as usize]),
                IoSlice::new(&self.data),
                IoSlice::new(self.post),
            ];
            let n = ready!(poll_write_slices(w, &slices, cx))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let mut n = n;
            let pre = (self.pre_len - self.pre_at) as usize;
            let step = n.min(pre);
            self.pre_at += step as u8;
            n -= step;
            let step = n.min(self.data.len());
            let _ = self.data.split_to(step);
            n -= step;
            self.post = &self.post[n.min(self.post.len())..];
        }
        Poll::Ready(Ok(()))
    }
}

/// Writes a prefix, data and a suffix, any of them empty: a plain write
/// when only one has bytes, one buffer when they are small
/// ([`FLAT_MOST`]), else a vectored write.
fn poll_write_slices<W: AsyncWrite + Unpin>(
    w: &mut W,
    slices: &[IoSlice<'_>; 3],
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    let len = slices.iter().map(|s| s.len()).sum::<usize>();
    if let Some(only) = slices.iter().find(|s| s.len() == len) {
        return Pin::new(w).poll_write(cx, only);
    }
    if len <= FLAT_MOST {
        return poll_write_flat(w, slices, len, cx);
    }
    Pin::new(w).poll_write_vectored(cx, slices)
}

/// Encodes trailer fields as header lines.
pub(crate) fn encode_trailers(trailers: &HeaderMap, allowed: &[HeaderName]) -> Bytes {
    let mut v = Vec::new();
    for (name, value) in trailers {
        if allowed.contains(name) {
            v.extend_from_slice(name.as_str().as_bytes());
            v.extend_from_slice(b": ");
            v.extend_from_slice(value.as_bytes());
            v.extend_from_slice(b"\r\n");
        }
    }
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::h1::testing::TestBody;
    use http::HeaderValue;

    fn head(method: Method, headers: &HeaderMap, body: &TestBody) -> (Vec<u8>, BodyKind) {
        let framing = request_framing(&method, headers, body);
        let mut v = b"left from the last request".to_vec();
        let rh = RequestHead {
            method: &method,
            target: "/p?q",
            headers,
            set: &(),
        };
        request_head(&mut v, &rh, &framing);
        (v, framing.body)
    }

    #[test]
    fn request_heads_and_their_framing() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("x"));
        h.append("x-multi", HeaderValue::from_static("1"));
        h.append("x-multi", HeaderValue::from_static("2"));
        let (v, kind) = head(Method::GET, &h, &TestBody::Empty);
        assert_eq!(
            v,
            b"GET /p?q HTTP/1.1\r\nhost: x\r\nx-multi: 1\r\nx-multi: 2\r\n\r\n"
        );
        assert_eq!(kind, BodyKind::Empty);
        // A body of known size gets its length.
        let (v, kind) = head(Method::PUT, &h, &TestBody::full("hello"));
        assert!(
            v.ends_with(b"x-multi: 2\r\ncontent-length: 5\r\n\r\n"),
            "{}",
            String::from_utf8_lossy(&v)
        );
        assert_eq!(kind, BodyKind::Length(5));
        // A given length is kept as it is.
        let mut with_len = h.clone();
        with_len.insert(CONTENT_LENGTH, HeaderValue::from_static("5"));
        let (v, kind) = head(Method::POST, &with_len, &TestBody::full("hello"));
        assert_eq!(
            v.windows(17).filter(|w| w == b"content-length: 5").count(),
            1
        );
        assert_eq!(kind, BodyKind::Length(5));
        // A given Transfer-Encoding means chunked, and drops the length.
        let mut te = with_len.clone();
        te.insert(TRANSFER_ENCODING, HeaderValue::from_static("gzip"));
        let (v, kind) = head(Method::POST, &te, &TestBody::full("hello"));
        let text = String::from_utf8_lossy(&v);
        assert!(
            !text.contains("content-length") && !text.contains("gzip"),
            "{text}"
        );
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert_eq!(kind, BodyKind::Chunked);
        // An ended body drops a Transfer-Encoding.
        let (v, kind) = head(Method::POST, &te, &TestBody::Empty);
        assert!(!String::from_utf8_lossy(&v).contains("transfer-encoding"));
        assert_eq!(kind, BodyKind::Empty);
        // Unknown size: chunked, except GET/HEAD/CONNECT.
        let unknown = TestBody::prefixed(Some(Bytes::from_static(b"x")), None, TestBody::Empty);
        let (v, kind) = head(Method::POST, &h, &unknown);
        assert!(String::from_utf8_lossy(&v).contains("transfer-encoding: chunked\r\n"));
        assert_eq!(kind, BodyKind::Chunked);
        let (_, kind) = head(Method::GET, &h, &unknown);
        assert_eq!(kind, BodyKind::Empty);
    }

    #[test]
    fn digits() {
        let mut d = Digits::default();
        assert_eq!(d.of(0), b"0");
        assert_eq!(d.of(1234567), b"1234567");
        assert_eq!(d.of(u64::MAX), u64::MAX.to_string().as_bytes());
    }

    /// A writer that takes at most `max` bytes per call.
    struct Trickle {
        got: Vec<u8>,
        max: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.max);
            self.got.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn partial_writes_resume() {
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("example"));
        let framing = request_framing(&Method::GET, &h, &TestBody::Empty);
        let mut want = Vec::new();
        let rh = RequestHead {
            method: &Method::GET,
            target: "/",
            headers: &h,
            set: &(),
        };
        request_head(&mut want, &rh, &framing);
        let mut t = Trickle {
            got: Vec::new(),
            max: 3,
        };
        let mut at = 0;
        std::future::poll_fn(|cx| poll_write_all(&mut t, &want, &mut at, cx))
            .await
            .unwrap();
        assert_eq!(t.got, want);
        assert_eq!(at, want.len());

        let mut out = Out::default();
        let mut t = Trickle {
            got: Vec::new(),
            max: 2,
        };
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        out.chunk(Bytes::from(vec![b'a'; 300]));
        assert!(out.poll_write(&mut t, &mut cx).is_ready());
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sum", HeaderValue::from_static("9"));
        trailers.insert("host", HeaderValue::from_static("no"));
        out.last_chunk(encode_trailers(
            &trailers,
            &[HeaderName::from_static("x-sum")],
        ));
        assert!(out.poll_write(&mut t, &mut cx).is_ready());
        let mut want = b"12c\r\n".to_vec();
        want.extend(std::iter::repeat_n(b'a', 300));
        want.extend_from_slice(b"\r\n0\r\nx-sum: 9\r\n\r\n");
        assert_eq!(t.got, want);
    }

    /// Counts plain and vectored writes, taking everything.
    #[derive(Default)]
    struct Counting {
        got: Vec<u8>,
        plain: usize,
        vectored: usize,
    }

    impl AsyncWrite for Counting {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.plain += 1;
            self.got.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            self.vectored += 1;
            let mut n = 0;
            for b in bufs {
                self.got.extend_from_slice(b);
                n += b.len();
            }
            Poll::Ready(Ok(n))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A head of several slices up to FLAT_MOST bytes goes out as one
    /// plain write; a larger one as a vectored write; a body frame with
    /// no framing bytes as a plain write of the frame.
    #[tokio::test]
    async fn small_writes_go_out_as_one_buffer() {
        let body = vec![b'b'; 100];
        let mut w = HeadWriter::with_lines(2, 0);
        w.push(b"HTTP/1.1 200 OK\r\n");
        w.header(b"content-length", b"100");
        w.push(b"\r\n");
        w.push(&body);
        let mut t = Counting::default();
        w.write_to(&mut t).await.unwrap();
        let mut want = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n".to_vec();
        want.extend_from_slice(&body);
        assert_eq!((t.plain, t.vectored), (1, 0));
        assert_eq!(t.got, want);

        let big = vec![b'c'; FLAT_MOST];
        let mut w = HeadWriter::with_lines(0, 0);
        w.push(b"HTTP/1.1 200 OK\r\n\r\n");
        w.push(&big);
        let mut t = Counting::default();
        w.write_to(&mut t).await.unwrap();
        assert_eq!((t.plain, t.vectored), (0, 1));
        assert_eq!(t.got.len(), 19 + FLAT_MOST);

        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        for (data, plain, vectored) in [(100, 1, 0), (FLAT_MOST * 2, 1, 0)] {
            let mut t = Counting::default();
            let mut out = Out::default();
            out.raw(Bytes::from(vec![b'd'; data]));
            assert!(out.poll_write(&mut t, &mut cx).is_ready());
            assert_eq!((t.plain, t.vectored, t.got.len()), (plain, vectored, data));
        }
        for (data, plain, vectored) in [(100, 1, 0), (FLAT_MOST * 2, 0, 1)] {
            let mut t = Counting::default();
            let mut out = Out::default();
            out.chunk(Bytes::from(vec![b'e'; data]));
            assert!(out.poll_write(&mut t, &mut cx).is_ready());
            assert_eq!((t.plain, t.vectored), (plain, vectored), "chunk of {data}");
        }
    }

    #[test]
    fn trailers_need_an_announcement() {
        let mut h = HeaderMap::new();
        assert!(allowed_trailers(&h).is_empty());
        h.insert(TRAILER, HeaderValue::from_static("X-Sum, Content-Length"));
        assert_eq!(allowed_trailers(&h), [HeaderName::from_static("x-sum")]);
    }
}
