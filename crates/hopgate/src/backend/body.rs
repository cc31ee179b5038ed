//! Response bodies: a full buffer (the JSON), a generated pattern (`bytes=N`)
//! or the request body streamed back (`echo=1`); all hashed on the way out
//! so `trailers=1` can end them with `x-checksum`.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::HeaderMap;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Sleep;

use super::InFlight;

/// `bytes=N` bodies are sent in chunks of this size.
const CHUNK: usize = 16 * 1024;
/// The pattern: byte `i` of a `bytes=N` body is `ALPHABET[i % 64]`.
const ALPHABET: &[u8; 64] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_";
/// One chunk of the pattern; CHUNK is a multiple of 64, so every chunk
/// starts at the same phase and is a prefix of this.
static PATTERN: [u8; CHUNK] = {
    let mut chunk = [0u8; CHUNK];
    let mut i = 0;
    while i < CHUNK {
        chunk[i] = ALPHABET[i % ALPHABET.len()];
        i += 1;
    }
    chunk
};

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// FNV-1a 64, fed chunk by chunk.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fnv(u64);

impl Fnv {
    pub(super) fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    pub(super) fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(super) fn finish(self) -> u64 {
        self.0
    }
}

enum Source {
    Full(Option<Bytes>),
    Pattern {
        remaining: u64,
        delay: Duration,
        started: bool,
        pause: Option<Pin<Box<Sleep>>>,
    },
    Echo {
        /// The first frame, read before answering (see [`RespBody::echo`]).
        first: Option<Frame<Bytes>>,
        rest: Incoming,
    },
}

/// The body of every answer the backend gives.
pub(super) struct RespBody {
    source: Source,
    /// Some while the body should end with checksum trailers.
    checksum: Option<Fnv>,
    /// Whether the length is announced (else chunked on HTTP/1.1).
    exact: bool,
    done: bool,
    _in_flight: Option<InFlight>,
}

impl RespBody {
    fn new(source: Source) -> Self {
        Self {
            source,
            checksum: None,
            exact: true,
            done: false,
            _in_flight: None,
        }
    }

    pub(super) fn empty() -> Self {
        let mut body = Self::new(Source::Full(None));
        body.done = true;
        body
    }

    pub(super) fn full(bytes: Bytes) -> Self {
        Self::new(Source::Full(Some(bytes)))
    }

    pub(super) fn pattern(len: u64, delay: Duration) -> Self {
        Self::new(Source::Pattern {
            remaining: len,
            delay,
            started: false,
            pause: None,
        })
    }

    /// Streams the request body back. The caller has already read its
    /// first frame (`first`, None when the body was empty): reading before
    /// answering is what makes hyper send `100 Continue` to a client that
    /// waits for it.
    pub(super) fn echo(first: Option<Frame<Bytes>>, rest: Incoming) -> Self {
        match first {
            Some(first) => Self::new(Source::Echo {
                first: Some(first),
                rest,
            }),
            None => Self::new(Source::Full(None)),
        }
    }

    /// Announce the length (when known) or not (`chunked=1`, trailers).
    pub(super) fn exact(mut self, exact: bool) -> Self {
        self.exact = exact;
        self
    }

    pub(super) fn with_trailers(mut self, trailers: bool) -> Self {
        self.checksum = trailers.then(Fnv::new);
        self
    }

    pub(super) fn in_flight(mut self, guard: InFlight) -> Self {
        self._in_flight = Some(guard);
        self
    }

    fn data(&mut self, bytes: Bytes) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(hash) = &mut self.checksum {
            hash.write(&bytes);
        }
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    /// The end: our trailers if asked for, else `passed` (the request's
    /// own trailers when echoing), else nothing.
    fn end(&mut self, passed: Option<HeaderMap>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.done = true;
        self._in_flight = None;
        if let Some(hash) = self.checksum.take() {
            let mut trailers = HeaderMap::new();
            let checksum = format!("{:016x}", hash.finish());
            if let Ok(value) = HeaderValue::from_str(&checksum) {
                trailers.insert("x-checksum", value);
            }
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        match passed {
            Some(trailers) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            None => Poll::Ready(None),
        }
    }
}

impl Body for RespBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match &mut this.source {
            Source::Full(bytes) => match bytes.take() {
                Some(bytes) if !bytes.is_empty() => this.data(bytes),
                _ => this.end(None),
            },
            Source::Pattern {
                remaining,
                delay,
                started,
                pause,
            } => {
                if *remaining == 0 {
                    return this.end(None);
                }
                if *started && !delay.is_zero() {
                    let sleep = pause.get_or_insert_with(|| Box::pin(tokio::time::sleep(*delay)));
                    ready!(sleep.as_mut().poll(cx));
                    *pause = None;
                }
                *started = true;
                let len = usize::try_from(*remaining).map_or(CHUNK, |left| left.min(CHUNK));
                *remaining -= len as u64;
                this.data(Bytes::from_static(&PATTERN[..len]))
            }
            Source::Echo { first, rest } => {
                let next = match first.take() {
                    Some(frame) => Some(Ok(frame)),
                    None => ready!(Pin::new(rest).poll_frame(cx)),
                };
                this.echoed(next)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        if self.done {
            return SizeHint::with_exact(0);
        }
        if !self.exact {
            return SizeHint::default();
        }
        match &self.source {
            Source::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Source::Pattern { remaining, .. } => SizeHint::with_exact(*remaining),
            Source::Echo { first, rest } => {
                let first = first
                    .as_ref()
                    .and_then(Frame::data_ref)
                    .map_or(0, |data| data.len() as u64);
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower().saturating_add(first));
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper.saturating_add(first));
                }
                hint
            }
        }
    }
}

impl RespBody {
    /// One frame of the request body, passed on.
    fn echoed(
        &mut self,
        next: Option<Result<Frame<Bytes>, hyper::Error>>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match next {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(bytes) => self.data(bytes),
                // Request trailers end the request body.
                Err(frame) => self.end(frame.into_trailers().ok()),
            },
            Some(Err(error)) => {
                self.done = true;
                Poll::Ready(Some(Err(error.into())))
            }
            None => self.end(None),
        }
    }
}

/// The announced length of a request body, when there is one.
pub(super) fn exact_len(body: &Incoming) -> Option<u64> {
    body.size_hint().exact()
}
