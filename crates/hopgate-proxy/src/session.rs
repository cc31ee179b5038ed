//! The data plane's side of sessions: who is this client, where is it
//! bound, and must it hop?
//!
//! Owns token extraction (cookie or header), verification with every
//! rejected token replaced by a fresh session (never an error, never
//! trusted, always counted; its id from the OS random source, or from the
//! session key should that fail: [`new_id`]), the per-service binding key, the hop decision
//! for a bound session, and the `Set-Cookie` answer. The store is read
//! synchronously (the memory store takes no lock on reads); nothing here
//! awaits.
//!
//! Must not touch: balancing (the forwarder picks the new node) or the
//! store's internals.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

use http::header::{HeaderMap, HeaderValue};

use hopgate_core::config::{DrainMode, SessionsConfig};
use hopgate_core::node::{CircuitState, Health};
use hopgate_core::session::{self, HopFacts, HopReason, SessionId, SessionKeys, TokenError};
use hopgate_store::Binding;
pub use hopgate_store::Sessions;

pub(crate) use hopgate_core::session::{binding_key, unix_now};

use crate::metrics::{TokenRejection, METRICS};
use crate::upstream::{CompiledService, Snapshot};

/// The session of one request.
#[derive(Debug, Clone)]
pub struct ClientSession {
    pub id: SessionId,
    /// The valid token (forwarded to the backend as the session header).
    pub token: HeaderValue,
    /// True when the client must be given `token` (new session, replaced
    /// token, or a token re-signed with the current key).
    pub issue: bool,
    /// The client came with a valid token: the session existed before this
    /// request (another replica may hold its binding). A session that is
    /// not known is never stored by this request (lazy binding) unless its
    /// backend hands it a context.
    pub known: bool,
    /// The token's node hint ([`session::node_hint`] of the node that
    /// served the session's first request): where an unbound known session
    /// goes first. (Kept in 8 bytes: a hint of exactly 0, one chance in
    /// 2^64, counts as none and the session is balanced.)
    pub hint: Option<NonZeroU64>,
}

fn token_from<'h>(cfg: &SessionsConfig, headers: &'h HeaderMap) -> Option<&'h str> {
    if let Some(v) = headers.get(&cfg.header).and_then(|v| v.to_str().ok()) {
        return Some(v.trim());
    }
    hopgate_core::cookie::value(headers, &cfg.cookie).map(|v| v.trim_matches('"'))
}

fn fresh(keys: &SessionKeys, now: u64) -> ClientSession {
    let id = new_id(keys);
    METRICS.sessions_created.fetch_add(1, Ordering::Relaxed);
    let token = session::mint(keys, id, now);
    ClientSession {
        id,
        token: HeaderValue::from_str(&token).expect("tokens are base64url"),
        issue: true,
        known: false,
        hint: None,
    }
}

/// A new session's id, from the operating system's random source. Should
/// that fail, the id is derived from the current session key instead
/// ([`SessionId::keyed`], over a clock reading, the process id and a
/// counter: unique, and unguessable without the key): the request is
/// served as usual (a session is never an error for the client) and
/// nothing on the request path panics.
#[inline]
fn new_id(keys: &SessionKeys) -> SessionId {
    match SessionId::try_random() {
        Ok(id) => id,
        Err(e) => keyed_id(keys, &e),
    }
}

/// [`new_id`] without the OS random source. Logged at the first failure
/// and every 1024th after.
#[cold]
fn keyed_id(keys: &SessionKeys, error: &session::RandomError) -> SessionId {
    static FAILURES: AtomicU64 = AtomicU64::new(0);
    let n = FAILURES.fetch_add(1, Ordering::Relaxed);
    if n.is_multiple_of(1024) {
        tracing::error!(%error, failures = n + 1, "new session id derived from the session key: the OS random source failed");
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut input = [0u8; 28];
    input[..16].copy_from_slice(&nanos.to_le_bytes());
    input[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    input[20..].copy_from_slice(&n.to_le_bytes());
    SessionId::keyed(keys, &input)
}

/// Identifies the client: its verified session, or a new one.
pub fn identify(
    s: &Sessions,
    cfg: &SessionsConfig,
    headers: &HeaderMap,
    now: u64,
) -> ClientSession {
    let Some(raw) = token_from(cfg, headers) else {
        return fresh(&s.keys, now);
    };
    match session::verify(&s.keys, raw, now, cfg.ttl.as_secs()) {
        Ok(t) if t.rotated => {
            // Signed with a previous key: honoured, and re-signed (hint kept).
            let token = session::remint(&s.keys, &t);
            ClientSession {
                id: t.id,
                token: HeaderValue::from_str(&token).expect("tokens are base64url"),
                issue: true,
                known: true,
                hint: t.hint.and_then(NonZeroU64::new),
            }
        }
        Ok(t) => ClientSession {
            id: t.id,
            token: HeaderValue::from_str(raw).expect("a verified token is base64url"),
            issue: false,
            known: true,
            hint: t.hint.and_then(NonZeroU64::new),
        },
        Err(e) => {
            METRICS.token_rejected(match e {
                TokenError::Malformed => TokenRejection::Malformed,
                TokenError::BadSignature => TokenRejection::BadSignature,
                TokenError::Expired => TokenRejection::Expired,
                TokenError::FromTheFuture => TokenRejection::FromTheFuture,
            });
            tracing::info!(
                reason = e.label(),
                "session token rejected; issuing a new session"
            );
            fresh(&s.keys, now)
        }
    }
}

/// What the binding of a session says about this request.
#[derive(Debug)]
pub(crate) enum Stickiness {
    /// No binding: balance, then bind.
    Unbound,
    /// Stay on this node.
    Stay { node: usize, binding: Binding },
    /// The bound node cannot serve: hop.
    Hop { binding: Binding, reason: HopReason },
}

/// Decides whether a bound session stays on its node.
pub(crate) fn stickiness(
    snap: &Snapshot,
    route: usize,
    svc: &CompiledService,
    binding: Option<Binding>,
    now_ms_: u64,
) -> Stickiness {
    let Some(b) = binding else {
        return Stickiness::Unbound;
    };
    let Some(i) = svc.nodes.iter().position(|n| *n.id == *b.node) else {
        return Stickiness::Hop {
            binding: b,
            reason: HopReason::Removed,
        };
    };
    let st = &svc.nodes[i].state;
    let drain_must_leave = st.is_draining()
        && match svc.drain.mode {
            DrainMode::Migrate => true,
            DrainMode::Finish => st
                .draining_since()
                .is_none_or(|since| now_ms_ >= since + svc.drain.deadline.as_millis() as u64),
        };
    let facts = HopFacts {
        removed: false,
        maintenance: st.is_unreachable(),
        unhealthy: st.health() == Health::Unhealthy,
        ejected: st.is_ejected(now_ms_),
        circuit_open: st.circuit() == CircuitState::Open && !st.is_available(now_ms_),
        drain_must_leave,
        version_changed: !snap.route_allows_node(route, i),
    };
    match session::hop_reason(&facts) {
        None => Stickiness::Stay {
            node: i,
            binding: b,
        },
        Some(reason) => Stickiness::Hop { binding: b, reason },
    }
}

/// A known session without a binding in `svc` whose token names one of
/// its nodes: the binding it would have had, had its first answer been
/// stored (that node, no hop, no context; bound now). `None`
/// when the hint names no node of `svc` (another service's node, or one
/// that left the config): the session is then balanced like a new one.
pub(crate) fn hinted_binding(
    svc: &CompiledService,
    cs: &ClientSession,
    now_unix: u64,
    ttl_secs: u64,
) -> Option<Binding> {
    let hint = cs.hint?.get();
    let node = svc
        .nodes
        .iter()
        .find(|n| session::node_hint(&svc.name, &n.id) == hint)?;
    Some(Binding::new(
        std::sync::Arc::clone(&svc.shared_name),
        std::sync::Arc::clone(&node.shared_id),
        now_unix,
        now_unix + ttl_secs,
    ))
}

/// The token of a session new with this request (minted at `now_unix`,
/// the request's clock) once `node` of `service` serves it: a v2 token
/// naming that node. Deterministic (same session, time, node and key: same
/// token), so the attempt on `node` sends the backend exactly the token
/// its answer hands the client.
pub(crate) fn first_token(
    keys: &SessionKeys,
    cs: &ClientSession,
    now_unix: u64,
    service: &str,
    node: &str,
) -> HeaderValue {
    let t = session::mint_hinted(keys, cs.id, now_unix, session::node_hint(service, node));
    HeaderValue::from_str(&t).expect("tokens are base64url")
}

/// The `Set-Cookie` value carrying `token`.
pub(crate) fn set_cookie(
    cfg: &SessionsConfig,
    token: &HeaderValue,
    tls: bool,
) -> Option<HeaderValue> {
    let mut v = format!(
        "{}={}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax",
        cfg.cookie,
        token.to_str().ok()?,
        cfg.ttl.as_secs()
    );
    if tls {
        v.push_str("; Secure");
    }
    HeaderValue::from_str(&v).ok()
}
