//! Route filters' `mirror` on the request path: a copy of a sampled share
//! of a route's requests, as the upstream sees them (method, rewritten
//! path and headers, the lines the gateway sets, the body), sent to
//! another service through its own balancer and pools by a task of its
//! own. The client's request never waits for the copy and never fails
//! because of it; the copy's answer is read and discarded.
//!
//! Owns the sampling roll ([`sample`], made before the body is taken: a
//! sampled request with a body of declared length up to
//! `retries.buffer_body` has it read whole, [`capture`]), the copy and its
//! task ([`launch`]), and the bound of copies in flight per route (over
//! it a copy is dropped). Counts every sampled copy in the route's
//! [`MirrorStats`] (`hopgate_mirror_total{route,result}`).
//!
//! A route without a mirror pays the test of its filters' pointer once,
//! in [`sample`], and one byte test after the body is taken. Must not
//! touch: the client's request, body or answer; the mirror service's
//! node verdicts (a copy's failure does not eject a node or open its
//! breaker); retries of the copy (one send, no replay).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;

use crate::upstream::{CompiledNode, CompiledService, Snapshot};
use hopgate_core::filter::Mirror;
use hopgate_core::node::now_ms;
use hopgate_core::snapshot::GroupRef;
use hopgate_core::stats::{MirrorResult, RouteStats};

use super::attempt;
use super::filters;
use super::plan::content_length;
use super::replay::{Capture, Taken};
use crate::body::ProxyBody;
use crate::headers::SetLines;
use crate::pool::PoolSettings;

/// A request's mirror decision, made before its body is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Mirroring {
    /// No copy: the route has no mirror, the roll missed, or an upgrade.
    #[default]
    Off,
    /// A copy goes out once the body is taken.
    Sampled,
    /// A copy goes out, and the body is read whole only for it (it would
    /// have been streamed): no replay copy is kept of it, so retries
    /// behave as they would without the mirror.
    ForCopy,
}

/// The mirror of route `route`, if it has one.
#[inline]
fn of(snap: &Snapshot, route: usize) -> Option<&Mirror> {
    filters::of(snap, route).and_then(|f| f.mirror.as_ref())
}

/// Is this request copied? A roll against the mirror's share; never an
/// upgrade (a WebSocket cannot be duplicated).
#[inline]
pub(super) fn sample(snap: &Snapshot, route: usize, upgrade: bool) -> Mirroring {
    match filters::of(snap, route) {
        None => Mirroring::Off,
        Some(_) => roll(snap, route, upgrade),
    }
}

#[cold]
fn roll(snap: &Snapshot, route: usize, upgrade: bool) -> Mirroring {
    match of(snap, route) {
        Some(m) if !upgrade && m.samples(fastrand::u32(..Mirror::ALL)) => Mirroring::Sampled,
        _ => Mirroring::Off,
    }
}

/// How a sampled request's body is taken: read whole (as a retryable
/// one's is) when its declared length is at most `buffer_body`, so the
/// copy has it; otherwise as it would have been (a streamed body is not
/// copied: `too_large`). [`Mirroring::ForCopy`] when a body that would
/// have been streamed is read whole only for the copy.
#[cold]
pub(super) fn capture(
    how: Capture,
    headers: &http::HeaderMap,
    buffer_body: u64,
) -> (Capture, Mirroring) {
    let fits = || content_length(headers).is_some_and(|n| n <= buffer_body);
    match how {
        Capture::Stream if fits() => (Capture::Buffer, Mirroring::ForCopy),
        Capture::Arrived { .. } if fits() => (Capture::Buffer, Mirroring::Sampled),
        how => (how, Mirroring::Sampled),
    }
}

/// Sends the copy of a sampled request of route `route`: `request` is its
/// head as planned (filters applied), `set` the lines the gateway sets,
/// `taken` its body as phase 12 took it (its replay copy dropped when it
/// was kept only for the copy, `how`), `peer` the client (for a service
/// that sends the PROXY protocol). Counts `too_large` when the body was
/// not kept whole, `dropped` over the route's `max_in_flight`, `failed`
/// when the service has no node to take it; the task counts `sent` or
/// `failed`.
#[cold]
pub(super) fn launch(
    snap: &Snapshot,
    route: usize,
    request: &Request<ProxyBody>,
    set: &SetLines,
    taken: &mut Taken,
    peer: SocketAddr,
    how: Mirroring,
) {
    let Some(m) = of(snap, route) else {
        return;
    };
    let stats = Arc::clone(&snap.routes[route].stats);
    let body = body_of(taken);
    if how == Mirroring::ForCopy {
        // Kept only for the copy: the request is not retried differently.
        taken.kept = None;
    }
    let Some(body) = body else {
        stats.mirror.count(MirrorResult::TooLarge);
        return;
    };
    if !stats.mirror.enter(u64::from(m.max_in_flight)) {
        return;
    }
    let svc = &snap.services[m.service];
    let Some(idx) = svc.pick(GroupRef::All, now_ms(), None, &[]) else {
        finish(&stats, MirrorResult::Failed);
        return;
    };
    let node = &svc.nodes[idx];
    let copy = copy_of(request, body, node, svc);
    let mut set = set.clone();
    set.upstream_addr = Some(node.address_header.clone());
    let mut settings = PoolSettings::of(snap, svc);
    if let Some(p) = &mut settings.proxy_protocol {
        p.client = Some(peer);
    }
    let addr = node.state.moved_to().unwrap_or(node.address);
    let pool = Arc::clone(attempt::pool_of(node, settings.max_idle));
    let inflight = node.state.begin_request();
    tokio::spawn(async move {
        let sent = pool.send(addr, copy, &set, &settings, Instant::now(), false);
        let result = match sent.await {
            Ok(resp) => {
                discard(resp.into_body(), settings.request_timeout).await;
                MirrorResult::Sent
            }
            Err(_) => MirrorResult::Failed,
        };
        drop(inflight);
        finish(&stats, result);
    });
}

/// Counts a copy that took a place in flight, and gives the place back.
fn finish(stats: &RouteStats, result: MirrorResult) {
    stats.mirror.count(result);
    stats.mirror.leave();
}

/// The body the copy sends: the kept copy, or nothing for an empty body;
/// `None` when the body is streamed (no copy of it exists).
fn body_of(taken: &Taken) -> Option<Bytes> {
    match (&taken.kept, &taken.body) {
        (Some((b, _)), _) => Some(b.clone()),
        (None, ProxyBody::Empty) => Some(Bytes::new()),
        _ => None,
    }
}

/// The copy of `request` with `body`, pointed at `node`.
fn copy_of(
    request: &Request<ProxyBody>,
    body: Bytes,
    node: &CompiledNode,
    svc: &CompiledService,
) -> Box<Request<ProxyBody>> {
    let body = if body.is_empty() {
        ProxyBody::Empty
    } else {
        ProxyBody::full(body)
    };
    let mut copy = Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    attempt::retarget(&mut copy, node, svc);
    Box::new(copy)
}

/// Reads the copy's answer to its end (so its connection can be pooled
/// again), at most for `within`, and drops it.
async fn discard(mut body: ProxyBody, within: std::time::Duration) {
    let read = async {
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sampled request whose declared body fits `retries.buffer_body`
    /// is read whole; a larger or undeclared one is taken as it would
    /// have been.
    #[test]
    fn a_sampled_small_body_is_read_whole() {
        let mut small = http::HeaderMap::new();
        small.insert(http::header::CONTENT_LENGTH, "10".parse().unwrap());
        let mut large = http::HeaderMap::new();
        large.insert(http::header::CONTENT_LENGTH, "100".parse().unwrap());
        let none = http::HeaderMap::new();
        let arrived = Capture::Arrived {
            wait: std::time::Duration::ZERO,
        };
        let (sampled, for_copy) = (Mirroring::Sampled, Mirroring::ForCopy);
        assert_eq!(
            capture(Capture::Stream, &small, 10),
            (Capture::Buffer, for_copy)
        );
        assert_eq!(capture(arrived, &small, 10), (Capture::Buffer, sampled));
        assert_eq!(
            capture(Capture::Stream, &large, 10),
            (Capture::Stream, sampled)
        );
        assert_eq!(capture(arrived, &none, 10), (arrived, sampled));
        assert_eq!(
            capture(Capture::Empty, &small, 10),
            (Capture::Empty, sampled)
        );
    }

    /// The copy's body: the kept bytes, nothing for an empty body, none
    /// for a streamed one.
    #[test]
    fn the_copy_has_the_kept_body_or_none() {
        let kept = Taken {
            body: ProxyBody::full(Bytes::from_static(b"abc")),
            kept: Some((Bytes::from_static(b"abc"), false)),
            watch: None,
        };
        assert_eq!(body_of(&kept).as_deref(), Some(&b"abc"[..]));
        let empty = Taken {
            body: ProxyBody::Empty,
            kept: None,
            watch: None,
        };
        assert_eq!(body_of(&empty).as_deref(), Some(&b""[..]));
        let streamed = Taken {
            body: ProxyBody::full(Bytes::from_static(b"abc")),
            kept: None,
            watch: None,
        };
        assert!(body_of(&streamed).is_none());
    }
}
