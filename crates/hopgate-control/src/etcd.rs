//! etcd as a config source, discovery and fleet-wide operator actions
//! (see docs/fleet.md).
//!
//! Owns the key layout under `sources.etcd.prefix`:
//!
//! | key | what |
//! | --- | --- |
//! | `<prefix>config` | the shared runtime sections (YAML or JSON) |
//! | `<prefix>status/<replica_id>` | each replica's verdict on it (ACK/NACK) |
//! | `<prefix>nodes/<service>/<node_id>` | a discovered node (usually on a lease) |
//! | `<prefix>actions/drain/<service>/<node>` | a fleet-wide drain; deleted = undrained |
//! | `<prefix>actions/maintenance/<service>/<node>/<seq>` | a maintenance notice (on a lease) |
//!
//! and the [`EtcdHandle`] the admin API and metrics read. The watch loop is
//! in [`source`], the merge of discovered nodes in [`discovery`], operator
//! actions in [`actions`], the on-disk cache in [`cache`], the members of
//! an etcd cluster and its quorum in [`members`].
//!
//! Must not touch: the snapshot (only through [`crate::Control`]), the
//! request path (nothing here is awaited by a request).

mod actions;
mod cache;
mod discovery;
mod members;
mod source;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use hopgate_core::config::EtcdSourceConfig;

pub use discovery::boot_layer;
pub use source::{boot, Boot, EtcdSource};

/// The fleet canary's key under the prefix (`control/canary/fleet.rs`).
pub(crate) const CANARY_KEY: &str = "canary";

/// Dial and per-call timeout towards etcd.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// The connection state shown by `GET /admin/v1/fleet`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdState {
    Connected,
    /// Unreachable, without quorum (no member it reaches knows a leader),
    /// or not reached yet since start: the last good config and node set
    /// keep serving.
    Degraded,
}

impl EtcdState {
    fn as_str(self) -> &'static str {
        match self {
            EtcdState::Connected => "connected",
            EtcdState::Degraded => "degraded",
        }
    }
}

/// Shared between the watch loop, the admin API and the metrics.
pub struct EtcdHandle {
    pub(crate) prefix: String,
    pub(crate) endpoints: Vec<String>,
    pub(crate) replica_id: String,
    state: AtomicU8,
    revision: AtomicI64,
    last_error: Mutex<Option<String>>,
    client: Mutex<Option<Client>>,
    /// Removals held back by the burst rule.
    pub(crate) deferred_removals: AtomicU64,
    /// Full re-reads of the prefix (reconnects and compactions).
    pub(crate) resyncs: AtomicU64,
    pub(crate) booted_from_cache: AtomicBool,
    /// Every configured member's last status, and the quorum.
    pub(crate) members: members::Members,
    /// Drains applied here while etcd could not take them (`service/node`),
    /// published when it can again ([`actions`]).
    pub(crate) unshared: Mutex<BTreeMap<String, actions::Unshared>>,
}

impl std::fmt::Debug for EtcdHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdHandle")
            .field("prefix", &self.prefix)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl EtcdHandle {
    pub fn new(cfg: &EtcdSourceConfig, replica_id: &str) -> EtcdHandle {
        EtcdHandle {
            prefix: cfg.prefix.clone(),
            endpoints: cfg.endpoints.clone(),
            replica_id: replica_id.to_owned(),
            state: AtomicU8::new(0),
            revision: AtomicI64::new(0),
            last_error: Mutex::new(None),
            client: Mutex::new(None),
            deferred_removals: AtomicU64::new(0),
            resyncs: AtomicU64::new(0),
            booted_from_cache: AtomicBool::new(false),
            members: members::Members::new(&cfg.endpoints),
            unshared: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn state(&self) -> EtcdState {
        match self.state.load(Ordering::Relaxed) {
            1 => EtcdState::Connected,
            _ => EtcdState::Degraded,
        }
    }

    pub fn up(&self) -> bool {
        self.state() == EtcdState::Connected
    }

    /// The last etcd revision this replica has seen.
    pub fn revision(&self) -> i64 {
        self.revision.load(Ordering::Relaxed)
    }

    pub fn deferred_removals(&self) -> u64 {
        self.deferred_removals.load(Ordering::Relaxed)
    }

    pub(crate) fn set_revision(&self, rev: i64) {
        self.revision.fetch_max(rev, Ordering::Relaxed);
    }

    /// Records a state change, logging each transition once.
    pub(crate) fn set_state(&self, state: EtcdState, error: Option<String>) {
        let code = match state {
            EtcdState::Degraded => 0,
            EtcdState::Connected => 1,
        };
        let before = self.state.swap(code, Ordering::Relaxed);
        if state != EtcdState::Connected {
            *self.client.lock() = None;
        }
        if before != code {
            match (state, &error) {
                (EtcdState::Connected, _) => tracing::info!(
                    endpoints = ?self.endpoints,
                    revision = self.revision(),
                    "etcd: connected"
                ),
                (_, Some(e)) => tracing::warn!(
                    state = state.as_str(),
                    error = %e,
                    "etcd: unreachable; the last good config and node set keep serving"
                ),
                (_, None) => tracing::info!(state = state.as_str(), "etcd: state changed"),
            }
        }
        if error.is_some() {
            *self.last_error.lock() = error;
        }
    }

    pub(crate) fn set_client(&self, client: Client) {
        *self.client.lock() = Some(client);
    }

    /// The connected client, for the admin API's writes.
    pub(crate) fn client(&self) -> Option<Client> {
        self.client.lock().clone()
    }

    /// Whether etcd has quorum, as last probed; `None` before the first
    /// probe.
    pub fn quorum(&self) -> Option<bool> {
        self.members.quorum()
    }

    /// Members that answered the last probe, and how many there are.
    pub fn members_reachable(&self) -> (usize, usize) {
        let members = self.members.seen();
        (
            members.iter().filter(|m| m.reachable).count(),
            members.len(),
        )
    }

    /// Why a config write that goes through etcd is refused now (503), or
    /// `None` while this replica is connected to a member with a leader.
    pub fn write_refusal(&self) -> Option<String> {
        if self.up() {
            return None;
        }
        let why = match self.quorum() {
            Some(false) => self.members.summary(),
            Some(true) => "this replica is reconnecting to etcd".to_owned(),
            None => "etcd has not been reached yet".to_owned(),
        };
        Some(format!(
            "{why}: the fleet's config is changed through etcd and cannot be until it answers with a leader; the running config keeps serving"
        ))
    }

    /// What to say of an action etcd did not take: the quorum when it is
    /// the cause, else `error`.
    pub(crate) fn not_taken(&self, error: String) -> String {
        match self.quorum() {
            Some(false) => self.members.summary(),
            _ => error,
        }
    }

    /// The `etcd` part of `GET /admin/v1/fleet`.
    pub fn json(&self) -> Value {
        let members = self.members.seen();
        json!({
            "state": self.state().as_str(),
            "revision": self.revision(),
            "endpoints": self.endpoints,
            "prefix": self.prefix,
            "last_error": *self.last_error.lock(),
            "resyncs": self.resyncs.load(Ordering::Relaxed),
            "deferred_removals": self.deferred_removals(),
            "booted_from_cache": self.booted_from_cache.load(Ordering::Relaxed),
            "quorum": self.quorum(),
            "members_reachable": members.iter().filter(|m| m.reachable).count(),
            "members": members,
            "unshared_drains": self.unshared_json(),
        })
    }

    pub(crate) fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }
}

/// Connects with the timeouts the loop relies on to notice a dead etcd.
/// With `require_leader`, a member that knows no leader refuses calls at
/// once and ends open watches (etcd's `hasleader` metadata) instead of
/// hanging.
pub(crate) async fn connect(endpoints: &[String], require_leader: bool) -> Result<Client, String> {
    let opts = ConnectOptions::new()
        .with_connect_timeout(CALL_TIMEOUT)
        .with_timeout(CALL_TIMEOUT)
        .with_keep_alive(Duration::from_secs(2), CALL_TIMEOUT)
        .with_require_leader(require_leader);
    tokio::time::timeout(CALL_TIMEOUT * 2, Client::connect(endpoints, Some(opts)))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))
}

/// What a key under the prefix is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyKind<'a> {
    Config,
    /// `service/node_id`.
    Node(&'a str),
    /// `service/node`.
    Drain(&'a str),
    /// `service/node/seq`.
    Maintenance(&'a str),
    /// The fleet's config canary.
    Canary,
    /// Status keys and anything else: not ours to act on.
    Other,
}

pub(crate) fn classify<'a>(prefix: &str, key: &'a str) -> KeyKind<'a> {
    let Some(rest) = key.strip_prefix(prefix) else {
        return KeyKind::Other;
    };
    if rest == "config" {
        KeyKind::Config
    } else if rest == CANARY_KEY {
        KeyKind::Canary
    } else if let Some(r) = rest.strip_prefix("nodes/") {
        KeyKind::Node(r)
    } else if let Some(r) = rest.strip_prefix("actions/drain/") {
        KeyKind::Drain(r)
    } else if let Some(r) = rest.strip_prefix("actions/maintenance/") {
        KeyKind::Maintenance(r)
    } else {
        KeyKind::Other
    }
}

/// The shared document as last read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doc {
    pub text: String,
    /// Its etcd mod revision.
    pub revision: i64,
}

/// What this replica knows from the prefix (besides maintenance notices,
/// which are events, not state).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct View {
    pub revision: i64,
    pub config: Option<Doc>,
    /// `service/node_id` → registration JSON.
    pub nodes: BTreeMap<String, String>,
    /// `service/node` of every fleet-wide drain.
    pub drains: BTreeSet<String>,
}

/// What a change to the view touched.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Dirty {
    pub(crate) config: bool,
    pub(crate) nodes: bool,
    pub(crate) drains: bool,
}

impl View {
    /// Applies one key's put (`Some(value)`) or delete (`None`).
    pub(crate) fn update(
        &mut self,
        prefix: &str,
        key: &str,
        value: Option<&str>,
        mod_revision: i64,
    ) -> Dirty {
        let mut d = Dirty::default();
        match classify(prefix, key) {
            KeyKind::Config => {
                self.config = value.map(|v| Doc {
                    text: v.to_owned(),
                    revision: mod_revision,
                });
                d.config = true;
            }
            KeyKind::Node(rest) => {
                match value {
                    Some(v) => self.nodes.insert(rest.to_owned(), v.to_owned()),
                    None => self.nodes.remove(rest),
                };
                d.nodes = true;
            }
            KeyKind::Drain(rest) => {
                match value {
                    Some(_) => self.drains.insert(rest.to_owned()),
                    None => self.drains.remove(rest),
                };
                d.drains = true;
            }
            KeyKind::Maintenance(_) | KeyKind::Canary | KeyKind::Other => {}
        }
        d
    }
}

#[cfg(test)]
mod tests;
