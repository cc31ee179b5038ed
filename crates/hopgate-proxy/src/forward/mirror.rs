//! Route filters' `mirror` on the request path: a copy of a sampled share
//! of a route's requests, as the upstream sees them (method, rewritten
//! path and headers, the lines the gateway sets, the body), sent to
//! another service through its own balancer and pools by a task of its
//! own. The client's request never waits for the copy and never fails
//! because of it; the copy's answer is read and discarded.
//!
//! Owns the sampling roll ([`sample`], made before the body is taken, which
//! it does not change), the copy and its task ([`launch`]), and the bound
//! of copies in flight per route (over it a copy is dropped). The copy's
//! body is the kept copy when phase 12 kept one (a buffered or wholly
//! arrived body), else the client's body as it passes to the primary
//! ([`crate::body::tee`]: bounded, never holding the primary up; a copy
//! that falls behind, or whose client body fails or is abandoned, is
//! aborted). Counts every sampled copy in the route's [`MirrorStats`]
//! (`hopgate_mirror_total{route,result}`).
//!
//! A route without a mirror pays the test of its filters' pointer once,
//! in [`sample`], and one byte test after the body is taken. Must not
//! touch: the client's request, body or answer (the tee hands the
//! primary exactly what the client sent); the mirror service's node
//! verdicts (a copy's failure does not eject a node or open its breaker);
//! retries of the copy (one send, no replay: a retry or replay of the
//! primary sends no copy again).
//!
//! [`MirrorStats`]: hopgate_core::stats::MirrorStats

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response};
use http_body_util::BodyExt;

use crate::upstream::{CompiledNode, CompiledService, Snapshot};
use hopgate_core::filter::Mirror;
use hopgate_core::node::now_ms;
use hopgate_core::snapshot::GroupRef;
use hopgate_core::stats::{MirrorResult, RouteStats};

use super::attempt;
use super::filters;
use super::replay::Taken;
use crate::body::tee::{self, Tee};
use crate::body::ProxyBody;
use crate::h1::HeadFor;
use crate::headers::SetLines;
use crate::pool::{PoolSettings, SendFailure};

/// A request's mirror decision, made before its body is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Mirroring {
    /// No copy: the route has no mirror, the roll missed, or an upgrade.
    #[default]
    Off,
    /// A copy goes out once the body is taken.
    Sampled,
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

/// Sends the copy of a sampled request of route `route`: `request` is its
/// head as planned (filters applied), `set` the lines the gateway sets,
/// `taken` its body as phase 12 took it (a streamed body is split there:
/// the primary sends it on, copied as it is read), `peer` the client (for
/// a service that sends the PROXY protocol). Counts `dropped` over the
/// route's `max_in_flight` and `failed` when the service has no node to
/// take it; the task counts `sent`, `failed` or `aborted`.
#[cold]
pub(super) fn launch(
    snap: &Snapshot,
    route: usize,
    request: &Request<ProxyBody>,
    set: &SetLines,
    taken: &mut Taken,
    peer: SocketAddr,
) {
    let Some(m) = of(snap, route) else {
        return;
    };
    let stats = Arc::clone(&snap.routes[route].stats);
    if !stats.mirror.enter(u64::from(m.max_in_flight)) {
        return;
    }
    let svc = &snap.services[m.service];
    let Some(idx) = svc.pick(GroupRef::All, now_ms(), None, &[]) else {
        finish(&stats, MirrorResult::Failed);
        return;
    };
    let node = &svc.nodes[idx];
    let (body, tee) = body_of(taken);
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
        let within = settings.request_timeout;
        let sent = pool.send(addr, copy, &set, &settings, Instant::now(), HeadFor::Map);
        let result = match tee {
            None => answered(sent.await, within).await,
            Some(tee) => {
                let result = tokio::select! {
                    r = async { answered(sent.await, within).await } => r,
                    () = tee.aborted() => MirrorResult::Aborted,
                };
                if tee.was_aborted() {
                    MirrorResult::Aborted
                } else {
                    result
                }
            }
        };
        drop(inflight);
        finish(&stats, result);
    });
}

/// What became of a copy's send: `sent` once its answer was read (at most
/// for `within`), `failed` without one.
async fn answered(
    sent: Result<Box<Response<ProxyBody>>, SendFailure>,
    within: Duration,
) -> MirrorResult {
    match sent {
        Ok(resp) => {
            discard(resp.into_body(), within).await;
            MirrorResult::Sent
        }
        Err(_) => MirrorResult::Failed,
    }
}

/// Counts a copy that took a place in flight, and gives the place back.
fn finish(stats: &RouteStats, result: MirrorResult) {
    stats.mirror.count(result);
    stats.mirror.leave();
}

/// The body the copy sends: the kept copy, nothing for an empty body, or
/// the copy's side of the streamed body, which is split in `taken` (with
/// the tee both sides share).
fn body_of(taken: &mut Taken) -> (ProxyBody, Option<Arc<Tee>>) {
    match (&taken.kept, &taken.body) {
        (Some((b, _)), _) if b.is_empty() => (ProxyBody::Empty, None),
        (Some((b, _)), _) => (ProxyBody::full(b.clone()), None),
        (None, ProxyBody::Empty) => (ProxyBody::Empty, None),
        (None, _) => {
            let (primary, copy, tee) = tee::split(std::mem::take(&mut taken.body));
            taken.body = primary;
            (copy, Some(tee))
        }
    }
}

/// The copy of `request` with `body`, pointed at `node`.
fn copy_of(
    request: &Request<ProxyBody>,
    body: ProxyBody,
    node: &CompiledNode,
    svc: &CompiledService,
) -> Box<Request<ProxyBody>> {
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
    use bytes::Bytes;

    /// The copy's body: the kept bytes, nothing for an empty body, the
    /// copy's side of a streamed one (the primary's turned into the
    /// copied side).
    #[test]
    fn the_copy_has_the_kept_body_or_the_streamed_ones_copy() {
        let mut kept = Taken {
            body: ProxyBody::full(Bytes::from_static(b"abc")),
            kept: Some((Bytes::from_static(b"abc"), false)),
            watch: None,
        };
        let (body, tee) = body_of(&mut kept);
        assert!(matches!(body, ProxyBody::Full(Some(b)) if &b[..] == b"abc"));
        assert!(tee.is_none() && matches!(kept.body, ProxyBody::Full(_)));
        let mut empty = Taken {
            body: ProxyBody::Empty,
            kept: None,
            watch: None,
        };
        assert!(matches!(body_of(&mut empty), (ProxyBody::Empty, None)));
        let mut streamed = Taken {
            body: ProxyBody::prefixed(Some(Bytes::from_static(b"abc")), None, ProxyBody::Empty),
            kept: None,
            watch: None,
        };
        let (body, tee) = body_of(&mut streamed);
        assert!(matches!(body, ProxyBody::Copied(_)));
        assert!(tee.is_some() && matches!(streamed.body, ProxyBody::Teed(_)));
    }
}
