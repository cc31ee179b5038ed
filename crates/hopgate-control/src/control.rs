//! The single snapshot writer and the version history.
//!
//! Owns [`Control`]: the `ArcSwap<Snapshot>` the data plane loads, the node
//! registry whose live state outlives snapshots, the writer lock held across
//! validate → compile → swap, the last N applied versions (with content
//! hash, source and time), the reload failure counter and the last error.
//! Its child [`canary`] is the other way a config reaches the data plane:
//! beside the running snapshot for a share of the clients, started and
//! ended under the same writer lock (an apply ends a baking canary, a
//! promotion is an apply), so the two know each other as parent and child.
//! Must not touch: sockets (the admin API and file watcher call in here).

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use serde::Serialize;
use sha2::{Digest, Sha256};

use hopgate_core::config::{self, Config, ConfigError, Format, RawConfig};
use hopgate_core::node::NodeKey;
use hopgate_proxy::{NodeRegistry, SharedSnapshot, Snapshot, TlsListeners, TlsMaterial};

use crate::health::HealthChecker;
use canary::CanaryState;

mod auth;
pub(crate) mod canary;
mod carry;
pub use canary::CarriedCanary;
pub use carry::{Carried, CarriedNotice};

/// How many applied versions are kept for listing and rollback.
pub(crate) const KEEP_VERSIONS: usize = 20;

/// Where a config came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Embedded,
    File(String),
    Signal(String),
    Admin,
    Rollback(u64),
    /// The shared document and discovered nodes in etcd (fleet mode).
    Etcd,
    /// Changed certificate, key or CA files, re-read without a config
    /// change.
    Certificates,
    /// Changed JWKS or htpasswd files (`routes[].auth`), re-read without
    /// a config change.
    AuthFiles,
    /// A DNS discovery record set changed (`services[].discovery.dns`).
    Dns,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Embedded => f.write_str("embedded"),
            Source::File(p) => write!(f, "file:{p}"),
            Source::Signal(p) => write!(f, "sighup:{p}"),
            Source::Admin => f.write_str("admin"),
            Source::Rollback(v) => write!(f, "rollback:{v}"),
            Source::Etcd => f.write_str("etcd"),
            Source::Certificates => f.write_str("certificates"),
            Source::AuthFiles => f.write_str("auth-files"),
            Source::Dns => f.write_str("dns"),
        }
    }
}

/// One applied configuration.
#[derive(Clone, Debug, Serialize)]
pub struct VersionRecord {
    pub version: u64,
    /// SHA-256 of the canonical JSON form of the document.
    pub hash: String,
    pub source: String,
    /// Seconds since the Unix epoch.
    pub applied_at: u64,
    /// A config canary's decision, for the version it was tried as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryNote>,
    #[serde(skip)]
    pub raw: RawConfig,
}

/// How a config canary ended, kept with its version.
#[derive(Clone, Debug, Serialize)]
pub struct CanaryNote {
    /// `promoted`, `rolled_back` or `aborted`.
    pub state: &'static str,
    pub reason: String,
}

/// The result of a successful apply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApplyOutcome {
    pub version: u64,
    pub hash: String,
    /// False when the document equals the running one (nothing changed).
    pub changed: bool,
}

/// The last reload failure, for the admin API.
#[derive(Clone, Debug, Serialize)]
pub struct LastError {
    pub source: String,
    pub at: u64,
    pub errors: Vec<ConfigError>,
}

/// The control plane's state.
pub struct Control {
    snapshot: SharedSnapshot,
    pub(crate) registry: NodeRegistry,
    pub(crate) writer: Mutex<()>,
    versions: Mutex<VecDeque<VersionRecord>>,
    last_error: Mutex<Option<LastError>>,
    pub(crate) next_version: AtomicU64,
    reload_failures: AtomicU64,
    reloads: AtomicU64,
    /// Whether the last document offered (file, API, etcd) went in, and
    /// when (Unix seconds): the first config counts as a success.
    last_reload_ok: AtomicBool,
    last_reload_at: AtomicU64,
    health: HealthChecker,
    applied: tokio::sync::watch::Sender<u64>,
    /// Fleet mode: the runtime sections (with discovered nodes merged) last
    /// applied from etcd. While set, every other source supplies only the
    /// bootstrap sections.
    runtime_layer: Mutex<Option<RawConfig>>,
    /// TLS: the listeners' certificates, where relative paths start (the
    /// config file's directory) and the files last read.
    tls: Arc<TlsListeners>,
    tls_base: Mutex<std::path::PathBuf>,
    tls_files: Mutex<Vec<std::path::PathBuf>>,
    /// `routes[].auth`: the keys and users read from their files.
    auth: Arc<hopgate_proxy::AuthKeys>,
    /// The config canary, baking or last decided.
    pub(crate) canary: CanaryState,
    /// DNS discovery's last good sets, merged into every apply.
    pub(crate) dns: crate::dns::state::Dns,
    /// The process's open-file limit ([`Control::set_fd_limit`]; `u64::MAX`:
    /// unlimited or not told), which an explicit `limits.max_connections`
    /// of an applied config must fit in.
    fd_limit: AtomicU64,
    /// Runs with each applied config right before it goes in
    /// ([`Control::on_apply`]).
    on_apply: std::sync::OnceLock<OnApply>,
}

/// What the process does with an applied config before requests see it.
pub type OnApply = Box<dyn Fn(&Config) + Send + Sync>;

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("version", &self.snapshot.load().version)
            .finish()
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub(crate) fn content_hash(raw: &RawConfig) -> String {
    let canonical = serde_json::to_vec(raw).unwrap_or_default();
    let digest = Sha256::digest(&canonical);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Control {
    /// Starts the control plane with an already validated config as version 1.
    pub fn new(config: Config, source: Source) -> Arc<Control> {
        let record = VersionRecord {
            version: 1,
            hash: content_hash(&config.raw),
            source: source.to_string(),
            applied_at: unix_now(),
            canary: None,
            raw: config.raw.clone(),
        };
        Arc::new(Control::open(config, 1, VecDeque::from([record]), 2))
    }

    /// The control plane running `config` as `version`, with `versions` as
    /// its history and `next_version` the next number to give out.
    fn open(
        config: Config,
        version: u64,
        versions: VecDeque<VersionRecord>,
        next_version: u64,
    ) -> Control {
        let registry = NodeRegistry::default();
        let source = versions
            .iter()
            .find(|r| r.version == version)
            .map_or("", |r| r.source.as_str());
        tracing::info!(
            version,
            source,
            "config loaded: {}",
            config::summary::summary(&config)
        );
        let snap = Snapshot::compile(Arc::new(config), version, &registry, None);
        snap.configure_nodes();
        // Nodes a later reload adds to these services start under slow start.
        registry.mark_running(snap.services.iter().map(|s| s.name.as_str()));
        let control = Control {
            snapshot: Arc::new(ArcSwap::from_pointee(snap)),
            registry,
            writer: Mutex::new(()),
            versions: Mutex::new(versions),
            last_error: Mutex::new(None),
            next_version: AtomicU64::new(next_version),
            reload_failures: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            last_reload_ok: AtomicBool::new(true),
            last_reload_at: AtomicU64::new(unix_now()),
            health: HealthChecker::default(),
            applied: tokio::sync::watch::Sender::new(version),
            runtime_layer: Mutex::new(None),
            tls: Arc::default(),
            tls_base: Mutex::new(std::path::PathBuf::from(".")),
            tls_files: Mutex::new(Vec::new()),
            auth: Arc::default(),
            canary: CanaryState::default(),
            dns: crate::dns::state::Dns::default(),
            fd_limit: AtomicU64::new(u64::MAX),
            on_apply: std::sync::OnceLock::new(),
        };
        control.health.reconcile(&control.snapshot.load());
        control
    }

    /// Sets what runs with every applied config right before the first
    /// request sees it (the binary points the access log there, so the
    /// next access line after an apply follows the new `access_log`).
    /// Set once; later calls are ignored.
    pub fn on_apply(&self, f: OnApply) {
        let _ = self.on_apply.set(f);
    }

    /// Tells the control plane the process's open-file limit (`None`:
    /// unlimited): a reload whose explicit `limits.max_connections` would
    /// not fit is refused like at start.
    pub fn set_fd_limit(&self, nofile: Option<u64>) {
        self.fd_limit
            .store(nofile.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// `config`, or the error a start with it would have given.
    fn fits_fd_limit(&self, config: Config) -> Result<Config, Vec<ConfigError>> {
        let limit = Some(self.fd_limit.load(Ordering::Relaxed)).filter(|&n| n != u64::MAX);
        match config.limits.max_connections {
            Some(n) => config::check_fd_fit(config.listeners.len(), n, limit)
                .map(|()| config)
                .map_err(|e| vec![e]),
            None => Ok(config),
        }
    }

    /// Where the data plane finds a baking config canary
    /// ([`hopgate_proxy::Forwarder::with_canary`]).
    pub fn canary_slot(&self) -> hopgate_proxy::CanarySlot {
        self.canary.slot()
    }

    /// The pointer the data plane loads.
    pub fn snapshot(&self) -> &SharedSnapshot {
        &self.snapshot
    }

    /// Notified with the version of every applied snapshot (the wiring
    /// uses it to add, remove or retune listeners).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    pub fn registry(&self) -> &NodeRegistry {
        &self.registry
    }

    pub fn reload_failures(&self) -> u64 {
        self.reload_failures.load(Ordering::Acquire)
    }

    pub fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// Whether the last document offered went in, and when (Unix seconds).
    pub fn last_reload(&self) -> (bool, u64) {
        (
            self.last_reload_ok.load(Ordering::Relaxed),
            self.last_reload_at.load(Ordering::Relaxed),
        )
    }

    pub fn last_error(&self) -> Option<LastError> {
        self.last_error.lock().clone()
    }

    pub fn versions(&self) -> Vec<VersionRecord> {
        self.versions.lock().iter().cloned().collect()
    }

    /// Parses, validates, compiles and swaps in a document. On any error the
    /// running snapshot stays, the failure is counted and remembered.
    pub fn apply_text(
        &self,
        text: &str,
        format: Format,
        source: Source,
    ) -> Result<ApplyOutcome, Vec<ConfigError>> {
        let _writer = self.writer.lock();
        let result = self.load_locked(text, format);
        self.apply_locked(result, source)
    }

    /// Parses and validates a document as an apply would (in fleet mode:
    /// as the bootstrap sections under the running runtime layer).
    pub(crate) fn load_locked(
        &self,
        text: &str,
        format: Format,
    ) -> Result<Config, Vec<ConfigError>> {
        match self.runtime_layer.lock().as_ref() {
            None => config::load(text, format),
            Some(runtime) => config::parse_all(text, format).and_then(|local| {
                config::fleet::check_bootstrap(&local)?;
                config::validate(&config::fleet::compose(&local, runtime))
            }),
        }
    }

    /// Counts and remembers a rejected document.
    pub(crate) fn rejected(&self, errors: Vec<ConfigError>, source: &str) -> Vec<ConfigError> {
        // One line per rejected document, every error in it.
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        tracing::error!(
            source = %source,
            errors = errors.len(),
            "config rejected; keeping the running config: {}",
            all.join("; ")
        );
        // The error first, then the counters: whoever sees the failure
        // counted (Acquire in `reload_failures`) finds its error.
        *self.last_error.lock() = Some(LastError {
            source: source.to_owned(),
            at: unix_now(),
            errors: errors.clone(),
        });
        self.last_reload_ok.store(false, Ordering::Relaxed);
        self.last_reload_at.store(unix_now(), Ordering::Relaxed);
        self.reload_failures.fetch_add(1, Ordering::Release);
        errors
    }

    /// The content hash of the running snapshot's document.
    pub(crate) fn running_hash(&self, version: u64) -> Option<String> {
        self.versions
            .lock()
            .iter()
            .find(|v| v.version == version)
            .map(|v| v.hash.clone())
    }

    /// Replaces the canary note of a kept version.
    pub(crate) fn renote_version(&self, version: u64, note: CanaryNote) {
        for v in self.versions.lock().iter_mut() {
            if v.version == version && v.canary.is_some() {
                v.canary = Some(note.clone());
            }
        }
    }

    /// Keeps a record in the version history (the last [`KEEP_VERSIONS`]).
    pub(crate) fn record_version(&self, record: VersionRecord) {
        let mut versions = self.versions.lock();
        versions.push_back(record);
        while versions.len() > KEEP_VERSIONS {
            versions.pop_front();
        }
    }

    /// Fleet mode: applies new runtime sections (the etcd document with
    /// discovered nodes merged) under the running bootstrap sections. On
    /// success they become the runtime layer every later reload keeps.
    /// `runtime` is the parsed document, or why it could not be parsed
    /// (counted and remembered like any rejected reload).
    pub fn apply_runtime(
        &self,
        runtime: Result<RawConfig, Vec<ConfigError>>,
        source: Source,
    ) -> Result<ApplyOutcome, Vec<ConfigError>> {
        let _writer = self.writer.lock();
        let runtime = match runtime {
            Ok(r) => r,
            Err(errors) => return self.apply_locked(Err(errors), source),
        };
        let bootstrap = self.snapshot.load().config.raw.clone();
        let result = config::validate(&config::fleet::compose(&bootstrap, &runtime));
        let outcome = self.apply_locked(result, source)?;
        *self.runtime_layer.lock() = Some(runtime);
        Ok(outcome)
    }

    /// Re-applies an earlier version.
    pub fn rollback(&self, version: u64) -> Result<ApplyOutcome, Vec<ConfigError>> {
        let _writer = self.writer.lock();
        let raw = self
            .versions
            .lock()
            .iter()
            .find(|v| v.version == version)
            .map(|v| v.raw.clone());
        let Some(raw) = raw else {
            return Err(vec![ConfigError::new(
                "version",
                format!("version {version} is not in the kept history"),
            )]);
        };
        let result = config::validate(&raw);
        self.apply_locked(result, Source::Rollback(version))
    }

    /// The listeners' TLS state (the wiring hands each listener its own).
    pub fn tls_listeners(&self) -> &Arc<TlsListeners> {
        &self.tls
    }

    /// The certificate, key and CA files the running config read
    /// (resolved), for the file watcher.
    pub fn tls_files(&self) -> Vec<std::path::PathBuf> {
        self.tls_files.lock().clone()
    }

    /// Sets the directory relative TLS paths start from (the config file's)
    /// and reads the running config's files: at start, before the
    /// listeners are bound. An error is the config's.
    pub fn start_tls(&self, base: std::path::PathBuf) -> Result<(), Vec<ConfigError>> {
        let _writer = self.writer.lock();
        *self.tls_base.lock() = base;
        let snap = self.snapshot.load_full();
        let material = self.load_tls(&snap.config)?;
        let auth = self.load_auth(&snap.config)?;
        self.install_tls(&material, &snap);
        self.auth.install(auth);
        Ok(())
    }

    /// Re-reads the running config's TLS files (they changed on disk). A
    /// bad file is a rejected reload: counted, remembered, logged, and the
    /// certificates in use stay.
    pub fn reload_tls(&self) -> Result<(), Vec<ConfigError>> {
        let _writer = self.writer.lock();
        let snap = self.snapshot.load_full();
        match self.load_tls(&snap.config) {
            Ok(material) => {
                self.install_tls(&material, &snap);
                tracing::info!("tls: certificate files re-read");
                Ok(())
            }
            Err(errors) => Err(self.reject(errors, &Source::Certificates)),
        }
    }

    /// `config` with the files its route filters name read (from the
    /// config file's directory).
    pub(crate) fn read_files(&self, config: Config) -> Result<Config, Vec<ConfigError>> {
        let base = self.tls_base.lock().clone();
        hopgate_proxy::read_filter_bodies(config, &base)
    }

    pub(crate) fn load_tls(&self, config: &Config) -> Result<TlsMaterial, Vec<ConfigError>> {
        let base = self.tls_base.lock().clone();
        TlsMaterial::load(config, &base)
    }

    pub(crate) fn install_tls(&self, material: &TlsMaterial, snap: &Snapshot) {
        material.install(&self.tls, snap);
        *self.tls_files.lock() = material.files().to_vec();
    }

    /// Counts, remembers and logs a refused config.
    fn reject(&self, errors: Vec<ConfigError>, source: &Source) -> Vec<ConfigError> {
        self.rejected(errors, &source.to_string())
    }

    pub(crate) fn apply_locked(
        &self,
        result: Result<Config, Vec<ConfigError>>,
        source: Source,
    ) -> Result<ApplyOutcome, Vec<ConfigError>> {
        // DNS discovery's resolved nodes go into every document applied.
        let result = self
            .with_dns_nodes(result)
            .and_then(|c| self.fits_fd_limit(c))
            .and_then(|c| self.read_files(c));
        // The TLS files are read with every apply (a SIGHUP re-reads
        // rotated certificates); a bad one refuses the config.
        let loaded = result.and_then(|c| self.load_tls(&c).map(|m| (c, m)));
        // So are the auth files (`routes[].auth`).
        let loaded = loaded.and_then(|(c, m)| self.load_auth(&c).map(|a| (c, m, a)));
        let (config, tls, auth) = match loaded {
            Ok(x) => x,
            Err(errors) => return Err(self.rejected(errors, &source.to_string())),
        };
        let hash = content_hash(&config.raw);
        let current = self.snapshot.load_full();
        // Compared with the running version (the newest record may be a
        // canary that was rolled back).
        // A page file edited since (`body_file`) makes it a new version.
        if self.running_hash(current.version).as_deref() == Some(hash.as_str())
            && !hopgate_proxy::filter_bodies_differ(&current.config, &config)
        {
            self.install_tls(&tls, &current);
            self.auth.install(auth);
            // The running document offered again: nothing to swap, but the
            // offer was good.
            self.last_reload_ok.store(true, Ordering::Relaxed);
            self.last_reload_at.store(unix_now(), Ordering::Relaxed);
            return Ok(ApplyOutcome {
                version: current.version,
                hash,
                changed: false,
            });
        }
        // A normal apply during a bake ends the canary first.
        canary::end_for_apply(self, &hash, &source.to_string());
        let version = self.next_version.fetch_add(1, Ordering::Relaxed);
        let raw = config.raw.clone();
        let snap = Snapshot::compile(Arc::new(config), version, &self.registry, Some(&current));
        self.install_tls(&tls, &snap);
        self.auth.install(auth);
        self.install(
            Arc::new(snap),
            &current,
            raw,
            hash.clone(),
            source.to_string(),
            None,
        );
        Ok(ApplyOutcome {
            version,
            hash,
            changed: true,
        })
    }

    /// Swaps in a compiled snapshot (the writer lock is held): node
    /// parameters, moved and removed nodes, health checks, listeners, the
    /// version history.
    pub(crate) fn install(
        &self,
        snap: Arc<Snapshot>,
        current: &Snapshot,
        raw: RawConfig,
        hash: String,
        source: String,
        canary: Option<CanaryNote>,
    ) {
        let version = snap.version;
        let shutdown = snap.config.timeouts.shutdown;
        let changes = config::summary::diff(&current.config.raw, &raw);
        // A node whose configured address changed moves like a MOVING
        // handoff would: new requests go to the new address, connections to
        // the old one finish and close.
        for svc in &snap.services {
            let Some(old) = current.services.iter().find(|s| s.name == svc.name) else {
                continue;
            };
            for n in &svc.nodes {
                if let Some(prev) = old.nodes.iter().find(|p| p.id == n.id) {
                    if prev.address != n.address {
                        n.state.set_moved_to(None);
                        n.state.set_unreachable(false);
                        if let Some(pool) = n.upstream.pool_if_set() {
                            pool.drain(drain_deadline(shutdown));
                        }
                        tracing::info!(service = %svc.name, node = %n.id, from = %prev.address, to = %n.address, "node address changed by reload");
                    }
                }
            }
        }
        // Compiling wrote no live state; the nodes take the new parameters
        // now, as the snapshot goes in.
        snap.configure_nodes();
        if let Some(f) = self.on_apply.get() {
            f(&snap.config);
        }
        for policy in &snap.limits_reset {
            tracing::info!(policy = %policy, "rate limit policy changed by reload: its buckets start afresh");
        }
        self.snapshot.store(Arc::clone(&snap));
        self.reloads.fetch_add(1, Ordering::Relaxed);
        self.last_reload_ok.store(true, Ordering::Relaxed);
        self.last_reload_at.store(unix_now(), Ordering::Relaxed);
        self.health.reconcile(&snap);
        self.applied.send_replace(version);
        self.drain_all_but(&snap);
        self.record_version(VersionRecord {
            version,
            hash,
            source: source.clone(),
            applied_at: unix_now(),
            canary,
            raw,
        });
        tracing::info!(version, source = %source, "config applied: {changes}");
    }
}

impl Control {
    /// Nodes that are not in `snap` leave the registry and drain: requests
    /// already on them finish (they hold an older snapshot), their pooled
    /// connections close by the shutdown deadline.
    pub(crate) fn drain_all_but(&self, snap: &Snapshot) {
        let shutdown = snap.config.timeouts.shutdown;
        let keep: HashSet<NodeKey> = snap
            .services
            .iter()
            .flat_map(|s| s.nodes.iter().map(|n| n.state.key().clone()))
            .collect();
        for gone in self.registry.retain(&keep) {
            gone.state.set_removed();
            if let Some(pool) = gone.upstream.pool_if_set() {
                pool.drain(drain_deadline(shutdown));
            }
            let key = gone.state.key();
            tracing::info!(service = %key.service, node = %key.node, "node removed from config; draining");
        }
    }
}

fn drain_deadline(shutdown: Duration) -> Duration {
    shutdown.max(Duration::from_secs(1))
}
