//! Phase 12: how a request's body is taken, and the copy it can be
//! replayed from.
//!
//! Owns the choice between an empty, buffered, already-arrived or streamed
//! body ([`capture`]), taking it each way ([`empty`], [`buffer`],
//! [`arrived`], [`streamed`]: a [`Taken`]), reading what has arrived of an HTTP/2 request's body
//! ([`take_arrived`], [`prefixed`]) and the replay copy ([`Replay`]: the
//! head without its extensions, the kept bytes, and whether it may follow
//! a send that may have reached a backend). Must not touch: node choice,
//! sends, retry decisions (`failure`), the answer.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderMap;
use http::Request;
use http_body_util::BodyExt;

use hopgate_core::config::{Config, UpstreamProtocol};
use hopgate_core::error::ErrorKind;

use super::grpc::GRPC_BODY_WAIT;
use super::plan::content_length;
use crate::body::RequestBody;
use crate::body::{ClientBody, ProxyBody};
use crate::headers::{HOP_SESSION_CONTEXT, X_HOP_FROM};

/// How the client's body is taken before the first attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Capture {
    /// No body. The (empty) copy exists when the request is replay-safe.
    Empty,
    /// Replay-safe with a declared length of at most `retries.buffer_body`:
    /// read whole before any node is chosen, and kept.
    Buffer,
    /// An HTTP/2 upstream, not an upgrade: what has arrived within `wait`
    /// is read, and kept only when it is the whole body (a refused stream
    /// or a gRPC UNAVAILABLE can then be replayed).
    Arrived { wait: Duration },
    /// Streamed as it comes, with no copy.
    Stream,
}

/// Decides how to take the body (checked in this order: empty, buffered,
/// already arrived, streamed). `keep_unsafe`: the service retries "not
/// processed" answers for every method (`services[].retries.on_status`),
/// so a small body is kept whatever the method.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) fn capture(
    body: &RequestBody,
    headers: &HeaderMap,
    replay_safe: bool,
    keep_unsafe: bool,
    buffer_body: u64,
    protocol: UpstreamProtocol,
    upgrade: bool,
    grpc: bool,
) -> Capture {
    use http_body::Body;
    capture_for(
        body.is_end_stream(),
        || {
            (replay_safe || keep_unsafe)
                && content_length(headers).is_some_and(|n| n <= buffer_body)
        },
        protocol == UpstreamProtocol::Http2 && !upgrade,
        grpc,
    )
}

/// [`capture`] on the facts it looks at: the body is already complete;
/// the request is replay-safe with a small declared length (asked only
/// for a body); its upstream speaks HTTP/2 and it is no upgrade; it is a
/// gRPC call.
fn capture_for(
    empty: bool,
    small_and_safe: impl FnOnce() -> bool,
    http2: bool,
    grpc: bool,
) -> Capture {
    if empty {
        Capture::Empty
    } else if small_and_safe() {
        Capture::Buffer
    } else if http2 {
        // An HTTP/2 backend may refuse a stream it never processed
        // (GOAWAY races). Keep a copy when the whole body has already
        // arrived — without waiting for it: a streaming client must not be
        // held up — so a refused stream can be replayed elsewhere.
        Capture::Arrived {
            wait: if grpc { GRPC_BODY_WAIT } else { Duration::ZERO },
        }
    } else {
        Capture::Stream
    }
}

/// What phase 12 hands the attempts: the body as they send it, the copy
/// kept of it (its bytes, and whether it may follow a send that may have
/// reached a backend) and, for a streamed body, what the client does with
/// it (read after a failed send, to tell the client's faults from the
/// node's).
pub(super) struct Taken {
    pub(super) body: ProxyBody,
    pub(super) kept: Option<(Bytes, bool)>,
    pub(super) watch: Option<Arc<ClientBody>>,
}

/// [`Capture::Empty`]: nothing to read (the ended body is dropped); the
/// empty copy exists when the request is replay-safe (then it may follow
/// any failure), or when `keep_unsafe` (then only an unprocessed one).
#[inline]
pub(super) fn empty(body: RequestBody, replay_safe: bool, keep_unsafe: bool) -> Taken {
    drop(body);
    Taken {
        body: ProxyBody::Empty,
        kept: (replay_safe || keep_unsafe).then(|| (Bytes::new(), replay_safe)),
        watch: None,
    }
}

/// [`Capture::Buffer`]: the body read whole, bounded by
/// `timeouts.request`, before any node is chosen, and kept (a copy that
/// may follow any failure when `replay_safe`, else only an unprocessed
/// one). A read that fails is the client's fault (**400**), one that
/// outlasts the bound **408**. The driver boxes this future: it runs for
/// few requests.
pub(super) async fn buffer(
    body: RequestBody,
    config: &Config,
    replay_safe: bool,
) -> Result<Taken, ErrorKind> {
    let read = ProxyBody::limited(body, config.retries.buffer_body).collect();
    match tokio::time::timeout(config.timeouts.request, read).await {
        Ok(Ok(b)) => {
            let b = b.to_bytes();
            Ok(Taken {
                body: ProxyBody::full(b.clone()),
                kept: Some((b, replay_safe)),
                watch: None,
            })
        }
        Ok(Err(e)) => Err(crate::body::read_error(&e)),
        Err(_) => Err(ErrorKind::ClientTimeout),
    }
}

/// [`Capture::Arrived`]: what has arrived within `wait` ([`take_arrived`]),
/// kept when it is the whole body (only for a replay after a refusal),
/// then the rest streamed, limited to `limit` (the route's body limit).
/// Boxed by the driver, like [`buffer`].
pub(super) async fn arrived(
    body: RequestBody,
    config: &Config,
    limit: u64,
    wait: Duration,
) -> Taken {
    let watch = Arc::<ClientBody>::default();
    let keep = config.retries.buffer_body;
    let (body, whole) = take_arrived(body, keep, limit, wait, Arc::clone(&watch)).await;
    Taken {
        body,
        kept: whole.map(|b| (b, false)),
        watch: Some(watch),
    }
}

/// [`Capture::Stream`]: streamed as it comes, limited to `max_body`, with
/// no copy.
#[inline]
pub(super) fn streamed(body: RequestBody, max_body: u64) -> Taken {
    let watch = Arc::<ClientBody>::default();
    Taken {
        body: ProxyBody::watched(body, max_body, Arc::clone(&watch)),
        kept: None,
        watch: Some(watch),
    }
}

/// Which failures a request's copy may be replayed after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CopyKind {
    /// No copy: the body was streamed.
    Absent,
    /// The whole body had arrived (HTTP/2): only after the backend refused
    /// the request unprocessed.
    Unprocessed,
    /// Replay-safe, with its body kept: after any failure.
    Any,
}

/// A copy of a request kept so that it can be sent again elsewhere.
pub(super) struct Replay {
    /// The head, copied before the first send; `None` when the send hands
    /// it back with its failure (HTTP/1.1: [`SendFailure::SentWithHead`],
    /// or the request itself when it was not sent), so no copy is made
    /// for a request that never needs one.
    ///
    /// [`SendFailure::SentWithHead`]: crate::pool::SendFailure::SentWithHead
    /// Boxed: the copy sits in every request's future.
    head: Option<Box<http::request::Parts>>,
    body: Bytes,
    /// Replay-safe: may be sent again even after a send that may have
    /// reached a backend. Otherwise only after the backend refused it
    /// unprocessed.
    after_sent: bool,
}

impl Replay {
    pub(super) fn new<B>(req: &Request<B>, body: Bytes, after_sent: bool) -> Replay {
        let head = head_of(req.method(), req.uri(), req.version(), req.headers());
        Replay {
            head: Some(Box::new(head)),
            body,
            after_sent,
        }
    }

    /// A copy whose head will come back from the failed send.
    pub(super) fn handed_back(body: Bytes, after_sent: bool) -> Replay {
        Replay {
            head: None,
            body,
            after_sent,
        }
    }

    /// What a request with this copy (or none) may be replayed after.
    pub(super) fn kind(copy: Option<&Replay>) -> CopyKind {
        match copy {
            None => CopyKind::Absent,
            Some(r) if r.after_sent => CopyKind::Any,
            Some(_) => CopyKind::Unprocessed,
        }
    }

    /// A new request from the copy (boxed, like every upstream request):
    /// from the copied head, or from the head the failed send handed back
    /// (`sent`), cleared of the headers an attempt adds only for its own
    /// node (the next attempt sets its own; the rest it replaces). `None`
    /// when there is no head.
    pub(super) fn request(
        &self,
        sent: Option<Box<http::request::Parts>>,
    ) -> Option<Box<Request<ProxyBody>>> {
        let head = match &self.head {
            Some(h) => copy_head(h),
            None => {
                let mut h = *sent?;
                h.headers.remove(&X_HOP_FROM);
                h.headers.remove(&HOP_SESSION_CONTEXT);
                h
            }
        };
        let body = if self.body.is_empty() {
            ProxyBody::Empty
        } else {
            ProxyBody::full(self.body.clone())
        };
        Some(Box::new(Request::from_parts(head, body)))
    }
}

/// A copy of a request head for replays: method, URI, version and headers
/// (not the extensions, which hold per-connection state and cost a clone
/// each).
fn copy_head(p: &http::request::Parts) -> http::request::Parts {
    head_of(&p.method, &p.uri, p.version, &p.headers)
}

/// A request head of copies of these.
fn head_of(
    method: &http::Method,
    uri: &http::Uri,
    version: http::Version,
    headers: &http::HeaderMap,
) -> http::request::Parts {
    let mut r = Request::new(());
    *r.method_mut() = method.clone();
    *r.uri_mut() = uri.clone();
    *r.version_mut() = version;
    *r.headers_mut() = headers.clone();
    r.into_parts().0
}

/// Reads the request body frames that have already arrived, waiting at
/// most `wait` for more (a unary gRPC call's DATA frame typically trails its
/// HEADERS by microseconds; a streaming client is never held up longer).
/// Returns the body to send and, when the whole body (at most `keep` bytes,
/// data frames only) arrived in time, a copy of it.
async fn take_arrived(
    mut body: RequestBody,
    keep: u64,
    limit: u64,
    wait: Duration,
    watch: Arc<ClientBody>,
) -> (ProxyBody, Option<Bytes>) {
    let mut got = bytes::BytesMut::new();
    let until = tokio::time::Instant::now() + wait;
    loop {
        let next = match tokio::time::timeout_at(until, body.frame()).await {
            Ok(f) => f,
            Err(_) => return (prefixed(got.freeze(), None, body, limit, watch), None),
        };
        match next {
            // The body is complete.
            None => {
                let b = got.freeze();
                return (ProxyBody::full(b.clone()), Some(b));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(d) if (got.len() + d.len()) as u64 <= keep => got.extend_from_slice(&d),
                Ok(d) => {
                    got.extend_from_slice(&d);
                    return (prefixed(got.freeze(), None, body, limit, watch), None);
                }
                // Request trailers: passed on; no copy is kept.
                Err(frame) => {
                    return (
                        prefixed(got.freeze(), frame.into_trailers().ok(), body, limit, watch),
                        None,
                    )
                }
            },
            // An error: the client's fault, recorded; stream what we have
            // and let the send fail.
            Some(Err(e)) => {
                watch.failed(&e);
                return (prefixed(got.freeze(), None, body, limit, watch), None);
            }
        }
    }
}

/// What was read of a body, then the rest, limited to `limit` in all.
fn prefixed(
    head: Bytes,
    trailers: Option<HeaderMap>,
    rest: RequestBody,
    limit: u64,
    watch: Arc<ClientBody>,
) -> ProxyBody {
    let rest = ProxyBody::watched(rest, limit.saturating_sub(head.len() as u64), watch);
    if head.is_empty() && trailers.is_none() {
        rest
    } else {
        ProxyBody::prefixed((!head.is_empty()).then_some(head), trailers, rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Phase 12's order: an empty body, then a small replay-safe one, then
    /// an HTTP/2 upstream's, else streamed.
    #[test]
    fn how_a_body_is_taken() {
        let arrived = Capture::Arrived {
            wait: Duration::ZERO,
        };
        let grpc_arrived = Capture::Arrived {
            wait: GRPC_BODY_WAIT,
        };
        // (empty, replay-safe and small, HTTP/2 and no upgrade, gRPC) -> capture
        let cases = [
            ((true, false, false, false), Capture::Empty),
            ((true, true, true, true), Capture::Empty),
            ((false, true, false, false), Capture::Buffer),
            ((false, true, true, true), Capture::Buffer),
            ((false, false, true, false), arrived),
            ((false, false, true, true), grpc_arrived),
            ((false, false, false, false), Capture::Stream),
            ((false, false, false, true), Capture::Stream),
        ];
        for ((empty, safe, http2, grpc), want) in cases {
            assert_eq!(
                capture_for(empty, || safe, http2, grpc),
                want,
                "empty={empty} safe={safe} http2={http2} grpc={grpc}"
            );
        }
    }

    #[test]
    fn a_copy_says_what_it_may_follow() {
        let head = Request::new(());
        let safe = Replay::new(&head, Bytes::from_static(b"x"), true);
        let arrived = Replay::new(&head, Bytes::new(), false);
        assert_eq!(Replay::kind(None), CopyKind::Absent);
        assert_eq!(Replay::kind(Some(&safe)), CopyKind::Any);
        assert_eq!(Replay::kind(Some(&arrived)), CopyKind::Unprocessed);
        let copied = arrived.request(None).expect("a copied head");
        assert!(matches!(copied.into_body(), ProxyBody::Empty));
    }

    /// An HTTP/1.1 copy takes the head its failed send handed back, less
    /// the headers an attempt adds for its own node.
    #[test]
    fn a_handed_back_head_is_replayed_without_the_attempts_own_headers() {
        let copy = Replay::handed_back(Bytes::from_static(b"body"), true);
        assert_eq!(Replay::kind(Some(&copy)), CopyKind::Any);
        assert!(copy.request(None).is_none(), "no head, no replay");
        let mut sent = Request::builder()
            .uri("/p?q")
            .header("x-keep", "1")
            .header(&X_HOP_FROM, "n1")
            .header(&HOP_SESSION_CONTEXT, "ctx")
            .body(())
            .unwrap()
            .into_parts()
            .0;
        sent.headers.append("x-keep", "2".parse().unwrap());
        let again = copy.request(Some(Box::new(sent))).expect("a head");
        assert_eq!(again.uri(), "/p?q");
        let names: Vec<_> = again
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(names, [("x-keep", "1"), ("x-keep", "2")]);
        assert!(matches!(again.into_body(), ProxyBody::Full(_)));
    }
}
