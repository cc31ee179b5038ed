//! Requests the gateway makes on its own behalf to a hopgate service:
//! forward auth's checks and the fetch of a JWKS. They go where a client's
//! request would: the service's balancer picks a node (health, drain,
//! ejection and slow start apply), its breaker admits it, the node counts
//! the request in flight (a drain waits for it), the node's pool sends it
//! (its connection limits and queue apply), and the outcome is recorded on
//! the node like any attempt's ([`crate::outcome::account`]). A failed
//! attempt, or a 5xx, is tried again on another node, up to
//! [`ATTEMPTS`] nodes, within one deadline for the whole call.
//!
//! The request has no body (the method is the caller's, `GET` for both
//! uses); the answer's body is read whole, at most `max_body` bytes.
//!
//! Owns [`ask`], [`Asked`] and [`Unanswered`]. Must not touch: the client's
//! request (the caller builds what is asked), a node's state beyond what
//! an attempt records, connections outside the node's pool.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderMap, Method, Request, StatusCode, Uri, Version};
use http_body_util::BodyExt;

use hopgate_core::config::UpstreamProtocol;
use hopgate_core::node::{now_ms, Observation};
use hopgate_core::snapshot::GroupRef;

use crate::body::ProxyBody;
use crate::h1::HeadFor;
use crate::headers::SetLines;
use crate::pool::PoolSettings;
use crate::upstream::{CompiledNode, CompiledService, SharedSnapshot};

/// The most nodes one call tries.
pub(crate) const ATTEMPTS: usize = 3;

/// What the service answered (below 500).
#[derive(Debug)]
pub(crate) struct Asked {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Why a call has no usable answer.
#[derive(Debug)]
pub(crate) enum Unanswered {
    /// The running config has no service of that name.
    NoService,
    /// No node could be tried (none healthy, every breaker open).
    NoNode,
    /// The deadline passed.
    Timeout,
    /// Every node tried failed (a connect error, a reset, a body past the
    /// limit) or answered 5xx (its status).
    Failed(Option<StatusCode>),
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unanswered::NoService => f.write_str("no such service in the running config"),
            Unanswered::NoNode => f.write_str("no node of the service can take a request"),
            Unanswered::Timeout => f.write_str("no answer in time"),
            Unanswered::Failed(Some(s)) => write!(f, "the service answered {s}"),
            Unanswered::Failed(None) => f.write_str("the service's nodes failed"),
        }
    }
}

/// What is asked: the method, the path and query, the headers.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
}

/// Asks `service` (by name, in the snapshot running now) and reads its
/// answer, within `timeout` for the whole call.
pub(crate) async fn ask(
    snapshot: &SharedSnapshot,
    service: &str,
    ask: &Ask,
    timeout: Duration,
    max_body: usize,
) -> Result<Asked, Unanswered> {
    let deadline = Instant::now() + timeout;
    let snap = snapshot.load_full();
    let Some(svc) = snap.services.iter().find(|s| s.name == service) else {
        return Err(Unanswered::NoService);
    };
    let mut tried = [usize::MAX; ATTEMPTS];
    let mut last = Unanswered::NoNode;
    for n in 0..ATTEMPTS {
        let now = now_ms();
        let Some(idx) = svc
            .pick(GroupRef::All, now, None, &tried[..n])
            .filter(|i| !tried[..n].contains(i))
        else {
            break;
        };
        tried[n] = idx;
        let node = &svc.nodes[idx];
        if !node.state.try_acquire(now) {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Unanswered::Timeout);
        }
        let mut settings = PoolSettings::of(&snap, svc);
        settings.request_timeout = left;
        let sent_at = Instant::now();
        let inflight = node.state.begin_request();
        let attempt = tokio::time::timeout(left, once(svc, node, ask, &settings, max_body)).await;
        drop(inflight);
        let (seen, outcome) = match attempt {
            Ok(Ok(asked)) if asked.status.is_server_error() => (
                Observation::ServerError,
                Err(Unanswered::Failed(Some(asked.status))),
            ),
            Ok(Ok(asked)) => {
                let took = sent_at.elapsed().as_micros() as u64;
                node.state.observe_latency_us(took);
                (Observation::Success, Ok(asked))
            }
            Ok(Err(())) => (Observation::Failure, Err(Unanswered::Failed(None))),
            Err(_) => (Observation::Failure, Err(Unanswered::Timeout)),
        };
        crate::outcome::account(svc, node, seen, now_ms());
        match outcome {
            Ok(asked) => return Ok(asked),
            Err(Unanswered::Timeout) => return Err(Unanswered::Timeout),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// One attempt on `node`: the send through its pool and the whole body.
async fn once(
    svc: &CompiledService,
    node: &CompiledNode,
    ask: &Ask,
    settings: &PoolSettings,
    max_body: usize,
) -> Result<Asked, ()> {
    let req = request(svc, node, ask).ok_or(())?;
    let addr = node.state.moved_to().unwrap_or(node.address);
    let pool = node.upstream.pool(settings.max_idle);
    let set = SetLines::default();
    let resp = pool
        .send(
            addr,
            Box::new(req),
            &set,
            settings,
            Instant::now(),
            HeadFor::Map,
        )
        .await
        .map_err(|_| ())?;
    let (parts, body) = resp.into_parts();
    let body = http_body_util::Limited::new(body, max_body)
        .collect()
        .await
        .map_err(|_| ())?
        .to_bytes();
    Ok(Asked {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// The request for `node`, in the form its protocol wants.
fn request(svc: &CompiledService, node: &CompiledNode, ask: &Ask) -> Option<Request<ProxyBody>> {
    let mut req = Request::new(ProxyBody::Empty);
    *req.method_mut() = ask.method.clone();
    *req.headers_mut() = ask.headers.clone();
    match svc.protocol {
        UpstreamProtocol::Http1 => {
            *req.version_mut() = Version::HTTP_11;
            *req.uri_mut() = ask.path.parse::<Uri>().ok()?;
            let host = http::HeaderValue::from_str(node.authority.as_str()).ok()?;
            req.headers_mut().insert(HOST, host);
        }
        UpstreamProtocol::Http2 => {
            *req.version_mut() = Version::HTTP_2;
            *req.uri_mut() = Uri::builder()
                .scheme("http")
                .authority(node.authority.clone())
                .path_and_query(ask.path.as_str())
                .build()
                .ok()?;
        }
    }
    Some(req)
}
