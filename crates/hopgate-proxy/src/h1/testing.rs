//! A body type for the codec's own tests: the few shapes of the gateway's
//! body the tests need (empty, whole, data and trailers already read, a
//! raw head carried along), without naming the gateway's.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

use super::response_head::RawHead;
use super::{BoxError, Payload};

#[derive(Debug, Default)]
pub(crate) enum TestBody {
    #[default]
    Empty,
    Full(Option<Bytes>),
    /// Data and trailers already read, then the rest: of unknown length.
    Prefixed(Option<Bytes>, Option<HeaderMap>, Box<TestBody>),
    Headed(Option<RawHead>, Box<TestBody>),
}

impl TestBody {
    pub(crate) fn full(b: impl Into<Bytes>) -> TestBody {
        TestBody::Full(Some(b.into()))
    }

    pub(crate) fn prefixed(
        head: Option<Bytes>,
        trailers: Option<HeaderMap>,
        rest: TestBody,
    ) -> TestBody {
        TestBody::Prefixed(head, trailers, Box::new(rest))
    }
}

// The test bodies never wait: `cx` is only handed on.
#[allow(clippy::only_used_in_recursion)]
impl Body for TestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            TestBody::Empty => Poll::Ready(None),
            TestBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            TestBody::Prefixed(head, trailers, rest) => {
                if let Some(b) = head.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                if let Some(t) = trailers.take() {
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                Pin::new(rest.as_mut()).poll_frame(cx)
            }
            TestBody::Headed(_, body) => Pin::new(body.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            TestBody::Empty => true,
            TestBody::Full(b) => b.is_none(),
            TestBody::Prefixed(h, t, rest) => h.is_none() && t.is_none() && rest.is_end_stream(),
            TestBody::Headed(_, body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            TestBody::Empty => SizeHint::with_exact(0),
            TestBody::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            TestBody::Prefixed(..) => SizeHint::default(),
            TestBody::Headed(_, body) => body.size_hint(),
        }
    }
}

impl Payload for TestBody {
    fn with_raw_head(raw: RawHead, body: TestBody) -> TestBody {
        TestBody::Headed(Some(raw), Box::new(body))
    }

    fn raw_head(&self) -> Option<&RawHead> {
        match self {
            TestBody::Headed(raw, _) => raw.as_ref(),
            _ => None,
        }
    }

    fn take_raw_head(&mut self) -> Option<RawHead> {
        match std::mem::take(self) {
            TestBody::Headed(raw, body) => {
                *self = *body;
                raw
            }
            other => {
                *self = other;
                None
            }
        }
    }

    fn take_whole(&mut self) -> Option<Option<Bytes>> {
        match self {
            TestBody::Full(b) => Some(b.take()),
            _ => None,
        }
    }

    fn after_trailers(trailers: HeaderMap, rest: TestBody) -> TestBody {
        TestBody::prefixed(None, Some(trailers), rest)
    }
}
