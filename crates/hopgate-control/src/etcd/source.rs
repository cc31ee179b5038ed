//! The etcd watch loop of one replica.
//!
//! Owns the read → watch → re-read cycle:
//!
//! 1. read the whole prefix at one revision R and replace the view with it
//!    (so deletions missed while away are seen), apply it;
//! 2. watch the prefix from R + 1 and apply each response's events in
//!    order;
//! 3. when the watch is canceled (a compaction passed the revision it
//!    needs, or etcd canceled it), go back to 1 at once; when the stream
//!    fails, ends, or the 2 s probe finds the member gone or without a
//!    leader, mark etcd degraded and go back to 1 after a backoff (250 ms
//!    doubling to 5 s). No event is ever skipped: every way out of 2 ends
//!    in a full re-read, which replaces the view (so a change missed while
//!    away, a deletion too, is seen) and replays the notices still in etcd.
//!
//! With several endpoints (an etcd cluster) each session reads and watches
//! through one member, chosen by asking every member for its status
//! ([`members`](super::members)): one that answers and knows a leader, the
//! same as last time while it does. Its client requires a leader, so a
//! member cut off from the others refuses the read and ends the watch
//! instead of serving stale data or hanging. The member dying (a leader
//! kill), or losing its leader, ends the session; the next one picks
//! another member. With no member knowing a leader (quorum lost) etcd is
//! degraded until one does. Drains applied here while etcd could not take
//! them are published before the session's read (`actions`).
//!
//! Applying goes through [`Control::apply_runtime`] (validate → compile →
//! swap, source `etcd`); each verdict on a new document is written to
//! `<prefix>status/<replica_id>`; each good one is cached on disk. A bad
//! document keeps the running config, and discovery goes on with the last
//! good one. While etcd is down nothing changes: the last good config and
//! node set keep serving.
//!
//! Must not touch: the request path; the snapshot except through `Control`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use hopgate_core::config::fleet;
use hopgate_core::config::raw::RawConfig;
use hopgate_core::config::{ConfigError, EtcdSourceConfig};

use super::actions::{apply_drains, intake_notice};
use super::cache::{self, Cached};
use super::discovery::Discovery;
use super::members::{self, Members};
use super::{classify, connect, Dirty, Doc, EtcdHandle, EtcdState, KeyKind, View, CALL_TIMEOUT};
use crate::control::{Control, Source};
use crate::maintenance::Maintenance;

const BACKOFF_MIN: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
const PROBE: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests;

/// Run between a session's full read (at the revision given) and its
/// watch: lets a test move etcd on, and compact it, in exactly that gap.
#[cfg(test)]
pub(super) type BeforeWatch = Box<
    dyn FnMut(i64) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync,
>;

/// Resolves once shutdown has been requested (the guard `wait_for` returns
/// must not live across the select's other arms).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// How a session with etcd ended.
enum End {
    Shutdown,
    /// Watch canceled (compaction): re-read now.
    Resync(String),
    /// etcd unreachable or the stream broke: re-read after a backoff.
    Lost(String),
}

/// The runtime layer to boot with, and where it came from.
#[derive(Debug)]
pub struct Boot {
    pub runtime: RawConfig,
    pub view: View,
    /// `Some(path)` when it came from the cache file.
    pub from_cache: Option<PathBuf>,
}

/// One replica's etcd source.
pub struct EtcdSource {
    control: Arc<Control>,
    maintenance: Arc<Maintenance>,
    handle: Arc<EtcdHandle>,
    cache: PathBuf,
    view: View,
    /// The last document applied (what the cache holds).
    good: Option<Doc>,
    /// The document revision whose verdict was last written.
    judged: Option<i64>,
    discovery: Discovery,
    drained: BTreeSet<String>,
    /// The member the last session went through.
    endpoint: Option<String>,
    #[cfg(test)]
    before_watch: Option<BeforeWatch>,
}

impl std::fmt::Debug for EtcdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSource")
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

fn text_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads the prefix once, for booting: from etcd when it answers, else from
/// the cache file. `None` when neither has a document that parses.
pub async fn boot(cfg: &EtcdSourceConfig, cache_path: &std::path::Path) -> Option<Boot> {
    let from_etcd = async {
        let found = Members::new(&cfg.endpoints).probe(&cfg.endpoints).await;
        let endpoint = members::pick(&found, None).ok_or_else(|| members::summary(&found))?;
        let mut client = connect(&[endpoint], true).await?;
        read_prefix(&mut client, &cfg.prefix).await
    };
    let reason = match from_etcd.await {
        Ok((view, _)) => match view.config.as_ref().map(|d| fleet::parse_runtime(&d.text)) {
            Some(Ok(runtime)) => {
                return Some(Boot {
                    runtime,
                    view,
                    from_cache: None,
                })
            }
            Some(Err(e)) => format!(
                "the document in etcd is invalid ({})",
                e.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            None => format!("etcd has no {}config yet", cfg.prefix),
        },
        Err(e) => format!("etcd unreachable ({e})"),
    };
    match cache::load(cache_path) {
        Ok(c) => match fleet::parse_runtime(&c.config.text) {
            Ok(runtime) => {
                tracing::warn!(reason = %reason, cache = %cache_path.display(), revision = c.revision, "etcd: booting from the cached last good config");
                Some(Boot {
                    runtime,
                    view: View {
                        revision: c.revision,
                        config: Some(c.config),
                        nodes: c.nodes,
                        drains: c.drains,
                    },
                    from_cache: Some(cache_path.to_owned()),
                })
            }
            Err(_) => {
                tracing::warn!(reason = %reason, cache = %cache_path.display(), "etcd: the cache holds no usable document");
                None
            }
        },
        Err(e) => {
            tracing::warn!(reason = %reason, cache = %e, "etcd: no config from etcd or the cache");
            None
        }
    }
}

/// Keys per page of the full read.
const PAGE: i64 = 100;
/// Largest gRPC message accepted from etcd (a page of big values, or a
/// watch response carrying many events); tonic's default is 4 MiB.
const MAX_MESSAGE: usize = 64 << 20;

/// The end of the key range holding every key that starts with `prefix`.
pub(crate) fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The whole prefix at one revision, with the maintenance notices in it,
/// read in pages (all at the revision of the first) so a large prefix
/// never exceeds a message limit.
async fn read_prefix(
    client: &mut Client,
    prefix: &str,
) -> Result<(View, Vec<(String, String)>), String> {
    let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    let end = range_end(prefix);
    let mut from = prefix.as_bytes().to_vec();
    let mut view = View::default();
    let mut notices = Vec::new();
    loop {
        let mut opts = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
        if view.revision > 0 {
            opts = opts.with_revision(view.revision);
        }
        let resp = tokio::time::timeout(CALL_TIMEOUT, kv.get(from.clone(), Some(opts)))
            .await
            .map_err(|_| "read timed out".to_owned())?
            .map_err(|e| format!("read: {e}"))?;
        if view.revision == 0 {
            view.revision = resp.header().map_or(0, |h| h.revision());
        }
        for kv in resp.kvs() {
            let (Ok(key), Ok(value)) = (kv.key_str(), kv.value_str()) else {
                tracing::warn!("etcd: ignoring a key or value that is not UTF-8");
                continue;
            };
            if let KeyKind::Maintenance(_) = classify(prefix, key) {
                notices.push((key.to_owned(), value.to_owned()));
            }
            view.update(prefix, key, Some(value), kv.mod_revision());
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok((view, notices)),
        }
    }
}

impl EtcdSource {
    /// `boot`: what the gateway started with (its nodes count as served,
    /// its document as the last good one).
    pub fn new(
        control: Arc<Control>,
        maintenance: Arc<Maintenance>,
        handle: Arc<EtcdHandle>,
        cache: PathBuf,
        boot: Option<&Boot>,
    ) -> EtcdSource {
        let mut source = EtcdSource {
            control,
            maintenance,
            handle,
            cache,
            view: View::default(),
            good: None,
            judged: None,
            discovery: Discovery::default(),
            drained: BTreeSet::new(),
            endpoint: None,
            #[cfg(test)]
            before_watch: None,
        };
        if let Some(b) = boot {
            source.view = b.view.clone();
            source.good = b.view.config.clone();
            let planned =
                source
                    .discovery
                    .plan(b.runtime.clone(), &b.view, &source.control, &source.handle);
            source.discovery.commit(planned);
            if b.from_cache.is_some() {
                source
                    .handle
                    .booted_from_cache
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            source.handle.set_revision(b.view.revision);
            apply_drains(&source.control, &b.view.drains, &mut source.drained);
        }
        source
    }

    /// Runs until `shutdown` turns true.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let mut backoff = BACKOFF_MIN;
        let mut first = true;
        // A re-read right after a canceled watch is immediate once; a watch
        // canceled again at once (not a compaction, then) waits the backoff.
        let mut resynced = false;
        loop {
            let end = self.session(&mut shutdown, &mut backoff, first).await;
            first = false;
            match end {
                End::Shutdown => return,
                End::Resync(why) => {
                    self.handle
                        .resyncs
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::info!(reason = %why, "etcd: watch canceled; re-reading the prefix");
                    if !std::mem::replace(&mut resynced, true) {
                        continue;
                    }
                }
                End::Lost(why) => {
                    resynced = false;
                    self.handle.set_state(EtcdState::Degraded, Some(why));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stopped(&mut shutdown) => return,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    async fn session(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
        backoff: &mut Duration,
        first: bool,
    ) -> End {
        let found = self.handle.members.probe(&self.handle.endpoints).await;
        let Some(endpoint) = members::pick(&found, self.endpoint.as_deref()) else {
            return End::Lost(members::summary(&found));
        };
        let mut client = match connect(std::slice::from_ref(&endpoint), true).await {
            Ok(c) => c,
            Err(e) => return End::Lost(e),
        };
        if self.endpoint.as_ref() != Some(&endpoint) && self.handle.endpoints.len() > 1 {
            tracing::info!(endpoint = %endpoint, "etcd: reading and watching through this member");
        }
        self.endpoint = Some(endpoint.clone());
        self.handle.publish_unshared(&mut client).await;
        let (view, mut notices) = match read_prefix(&mut client, &self.handle.prefix).await {
            Ok(v) => v,
            Err(e) => return End::Lost(e),
        };
        // Keys sort as text (".../10" before ".../2"); replay by sequence
        // number so each node's notices come in the order they were sent.
        notices.sort_by_key(|(key, _)| {
            key.rsplit('/')
                .next()
                .and_then(|seq| seq.parse::<u64>().ok())
                .unwrap_or(0)
        });
        if !first && self.handle.state() == EtcdState::Degraded {
            // A reconnect (a compaction's re-read is counted by `run`).
            self.handle
                .resyncs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let revision = view.revision;
        self.view = view;
        self.handle.set_revision(revision);
        self.handle.set_client(client.clone());
        self.handle.set_state(EtcdState::Connected, None);
        *backoff = BACKOFF_MIN;
        self.reconcile(Dirty {
            config: true,
            nodes: true,
            drains: true,
        })
        .await;
        for (key, value) in &notices {
            intake_notice(&self.maintenance, key, value);
        }
        #[cfg(test)]
        if let Some(hook) = self.before_watch.as_mut() {
            hook(revision).await;
        }
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(revision + 1)
            .with_progress_notify();
        let mut watcher = client.watch_client().max_decoding_message_size(MAX_MESSAGE);
        let mut stream = match watcher.watch(self.handle.prefix.as_str(), Some(opts)).await {
            Ok(s) => s,
            Err(e) => return End::Lost(format!("watch: {e}")),
        };
        let mut probe = tokio::time::interval(PROBE);
        probe.tick().await;
        let mut held = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                msg = stream.message() => {
                    let resp = match msg {
                        Ok(Some(r)) => r,
                        Ok(None) => return End::Lost("watch stream ended".to_owned()),
                        Err(e) => return End::Lost(format!("watch: {e}")),
                    };
                    if resp.canceled() && resp.compact_revision() == 0 && resp.cancel_reason().contains("leader") {
                        // The member lost its leader: not a compaction.
                        return End::Lost(format!("watch: {}", resp.cancel_reason()));
                    }
                    if resp.canceled() || resp.compact_revision() > 0 {
                        return End::Resync(format!(
                            "compacted at {} ({})",
                            resp.compact_revision(),
                            resp.cancel_reason()
                        ));
                    }
                    let mut dirty = Dirty::default();
                    for ev in resp.events() {
                        let Some(kv) = ev.kv() else { continue };
                        let Ok(key) = kv.key_str() else { continue };
                        let value = match ev.event_type() {
                            EventType::Put => match kv.value_str() {
                                Ok(v) => Some(v),
                                Err(_) => continue,
                            },
                            EventType::Delete => None,
                        };
                        match (classify(&self.handle.prefix, key), value) {
                            (KeyKind::Maintenance(_), Some(v)) => {
                                intake_notice(&self.maintenance, key, v);
                            }
                            (KeyKind::Canary, Some(v)) => crate::control::canary::fleet::on_event(
                                &self.control,
                                &self.handle,
                                v,
                                kv.mod_revision(),
                            ),
                            _ => {}
                        }
                        let d = self.view.update(&self.handle.prefix, key, value, kv.mod_revision());
                        dirty.config |= d.config;
                        dirty.nodes |= d.nodes;
                        dirty.drains |= d.drains;
                    }
                    if let Some(h) = resp.header() {
                        self.view.revision = h.revision();
                        self.handle.set_revision(h.revision());
                    }
                    if dirty.config || dirty.nodes || dirty.drains {
                        self.reconcile(dirty).await;
                    }
                }
                _ = probe.tick() => {
                    let found = self.handle.members.probe(&self.handle.endpoints).await;
                    if let Some(why) = members::lost(&found, &endpoint) {
                        return End::Lost(why);
                    }
                }
                _ = held.tick(), if self.discovery.has_held() => {
                    self.reconcile(Dirty { nodes: true, ..Dirty::default() }).await;
                }
                _ = stopped(shutdown) => return End::Shutdown,
            }
        }
    }

    /// Applies what changed in the view.
    async fn reconcile(&mut self, dirty: Dirty) {
        if dirty.config || dirty.nodes {
            self.apply(dirty.config).await;
        }
        // After any apply too: a reload may have brought a drained node.
        apply_drains(&self.control, &self.view.drains, &mut self.drained);
        if dirty.drains && !(dirty.config || dirty.nodes) {
            if let Some(good) = self.good.clone() {
                self.save_cache(&good).await;
            }
        }
    }

    async fn apply(&mut self, config_changed: bool) {
        let current = self.view.config.clone();
        if current.is_none() && config_changed {
            tracing::warn!(key = %self.handle.key("config"), "etcd: no shared document; keeping the running config");
        }
        // A document not judged yet.
        let fresh =
            current.filter(|d| Some(d) != self.good.as_ref() && self.judged != Some(d.revision));
        if let Some(doc) = fresh {
            if self.try_apply(doc).await {
                return;
            }
        }
        // Nodes changed, or the new document was refused: the nodes go on
        // with the last good document.
        if let Some(good) = self.good.clone() {
            self.try_apply(good).await;
        }
    }

    /// Applies `doc` with the view's nodes; whether it was applied.
    async fn try_apply(&mut self, doc: Doc) -> bool {
        let (input, planned) = match fleet::parse_runtime(&doc.text) {
            Ok(runtime) => {
                let p = self
                    .discovery
                    .plan(runtime, &self.view, &self.control, &self.handle);
                (Ok(p.layer.clone()), Some(p))
            }
            Err(e) => (Err(e), None),
        };
        let control = Arc::clone(&self.control);
        let result =
            tokio::task::spawn_blocking(move || control.apply_runtime(input, Source::Etcd))
                .await
                .unwrap_or_else(|_| Err(vec![ConfigError::new("", "the reload task failed")]));
        // A verdict is owed once per revision of the document in etcd (not
        // for the last good one re-applied with new nodes).
        let owed = self.judged != Some(doc.revision) && self.view.config.as_ref() == Some(&doc);
        if owed {
            self.judged = Some(doc.revision);
        }
        let (version, errors) = match &result {
            Ok(o) => (o.version, Vec::new()),
            Err(e) => (self.control.snapshot().load().version, e.clone()),
        };
        if owed {
            let status = json!({
                "version": version,
                "hash": text_hash(&doc.text),
                "revision": doc.revision,
                "ok": result.is_ok(),
                "errors": errors,
            });
            self.write_status(&doc, status).await;
        }
        let Ok(outcome) = result else {
            return false;
        };
        if let Some(p) = planned {
            self.discovery.commit(p);
        }
        self.good = Some(doc.clone());
        if outcome.changed || owed {
            self.save_cache(&doc).await;
        }
        true
    }

    async fn write_status(&self, doc: &Doc, status: serde_json::Value) {
        let Some(mut client) = self.handle.client() else {
            return;
        };
        let key = self
            .handle
            .key(&format!("status/{}", self.handle.replica_id));
        let put =
            tokio::time::timeout(CALL_TIMEOUT, client.put(key, status.to_string(), None)).await;
        match put {
            Ok(Ok(_)) => tracing::debug!(revision = doc.revision, "etcd: verdict written"),
            Ok(Err(e)) => tracing::warn!(error = %e, "etcd: cannot write this replica's verdict"),
            Err(_) => tracing::warn!("etcd: writing this replica's verdict timed out"),
        }
    }

    async fn save_cache(&self, doc: &Doc) {
        let cached = Cached {
            revision: self.view.revision,
            config: doc.clone(),
            nodes: self.view.nodes.clone(),
            drains: self.view.drains.clone(),
        };
        let path = self.cache.clone();
        let saved = tokio::task::spawn_blocking(move || cache::save(&path, &cached)).await;
        if !matches!(saved, Ok(Ok(()))) {
            tracing::warn!(cache = %self.cache.display(), "etcd: cannot write the cache file");
        }
    }
}
