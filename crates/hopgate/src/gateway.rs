//! Wiring: binds the listeners and the admin API of a config, runs them,
//! keeps the set of listeners in step with reloads, and shuts everything
//! down gracefully. Used by `hopgate run` and `hopgate demo`.

use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use hopgate_control::etcd::{Boot, EtcdHandle, EtcdSource};
use hopgate_control::{
    serve_admin, watch_file, watch_tls_files, Admin, Control, FileWatch, Fleet, Maintenance,
    SharedStoreStatus, Source,
};
use hopgate_core::config::{Config, EtcdSourceConfig, ListenerConfig};
use hopgate_core::session::unix_now;
use hopgate_core::session::SessionKeys;
use hopgate_proxy::{serve_listener, Forwarder, ListenerCtx, ListenerSettings};
use hopgate_store::{MemoryStore, RedisOptions, RedisStore, SessionStore, Sessions};

use crate::listenfd::{obtain, Inherited, Kind};

mod handover;
pub(crate) use handover::HandoverSource;

/// One running listener.
struct Running {
    name: String,
    /// The address as configured (may have port 0).
    configured: SocketAddr,
    bound: SocketAddr,
    settings: Arc<ArcSwap<ListenerSettings>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// A duplicate of the listening socket, to hand to a new process
    /// (closed with this value).
    fd: OwnedFd,
}

/// The listeners, reconciled with every applied config.
struct Listeners {
    forwarder: Forwarder,
    tls: Arc<hopgate_proxy::tls::TlsListeners>,
    running: Mutex<Vec<Running>>,
    /// Sockets from systemd or the previous process, claimed at start.
    inherited: parking_lot::Mutex<Inherited>,
    /// Derives `limits.max_connections` when a config leaves it unset.
    fds: crate::fdlimit::FdBudget,
}

impl Listeners {
    async fn start(&self, l: &ListenerConfig, cfg: &Config) -> anyhow::Result<Running> {
        let (sock, fd) = obtain(&self.inherited, Kind::Listener, &l.name, l.address).await?;
        let bound = sock.local_addr()?;
        let settings = Arc::new(ArcSwap::from_pointee(self.settings(l, cfg)));
        let (stop, rx) = watch::channel(false);
        let ctx = ListenerCtx {
            name: Arc::from(l.name.as_str()),
            forwarder: self.forwarder.clone(),
            settings: Arc::clone(&settings),
            tls: self.tls.listener(&l.name),
        };
        let task = tokio::spawn(serve_listener(sock, ctx, rx));
        Ok(Running {
            name: l.name.clone(),
            configured: l.address,
            bound,
            settings,
            stop,
            task,
            fd,
        })
    }

    fn settings(&self, l: &ListenerConfig, cfg: &Config) -> ListenerSettings {
        let max_connections = self.fds.max_connections(&cfg.limits, cfg.listeners.len());
        ListenerSettings::from_config(l, cfg, max_connections)
    }

    /// Adds, removes and retunes listeners to match `cfg`. A listener whose
    /// name and address are unchanged keeps its socket and connections.
    async fn reconcile(&self, cfg: &Config) {
        let mut running = self.running.lock().await;
        let mut keep = Vec::new();
        for r in running.drain(..) {
            match cfg
                .listeners
                .iter()
                .find(|l| l.name == r.name && l.address == r.configured)
            {
                Some(l) => {
                    let new = self.settings(l, cfg);
                    if **r.settings.load() != new {
                        r.settings.store(Arc::new(new));
                        tracing::info!(listener = %r.name, "listener settings updated");
                    }
                    keep.push(r);
                }
                None => {
                    tracing::info!(listener = %r.name, addr = %r.bound, "listener removed by reload; draining it");
                    let _ = r.stop.send(true);
                    // It drains in its own task; in-flight requests finish.
                }
            }
        }
        for l in &cfg.listeners {
            if keep.iter().any(|r| r.name == l.name) {
                continue;
            }
            match self.start(l, cfg).await {
                Ok(r) => {
                    print_line(&format!(
                        "hopgate listening name={} addr={}",
                        r.name, r.bound
                    ));
                    tracing::info!(listener = %r.name, addr = %r.bound, "listener added by reload");
                    keep.push(r);
                }
                Err(e) => {
                    tracing::error!(listener = %l.name, error = %format!("{e:#}"), "cannot start listener added by reload")
                }
            }
        }
        *running = keep;
    }

    /// Stops every accept loop and closes this process's duplicates of the
    /// sockets; returns the listeners' tasks, which end once drained.
    async fn stop_all(&self) -> Vec<JoinHandle<()>> {
        self.running
            .lock()
            .await
            .drain(..)
            .map(|r| {
                let _ = r.stop.send(true);
                r.task
            })
            .collect()
    }
}

/// Session keys (from the environment) and the store (the memory store,
/// loaded from its file when `store.path` is set, or the redis store over
/// a memory cache), plus the task that expires bindings and persists
/// them. Keys and store are fixed at start; `sessions.enabled` and the
/// cookie settings follow reloads.
/// The shortest session secret accepted: 32 bytes, the output size of
/// SHA-256, so the key is no weaker than the MAC.
const MIN_SECRET_BYTES: usize = 32;

async fn start_sessions(
    cfg: &Config,
    replica_id: &str,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<(Arc<Sessions>, JoinHandle<()>, Option<Arc<MemoryStore>>)> {
    let scfg = &cfg.sessions;
    let previous: Vec<Vec<u8>> = scfg
        .previous_secrets_env
        .as_ref()
        .and_then(|v| std::env::var(v).ok())
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec())
                .collect()
        })
        .unwrap_or_default();
    for (i, old) in previous.iter().enumerate() {
        if old.len() < MIN_SECRET_BYTES {
            // Accepted, so a weak key can be rotated away without logging
            // every client out; loud, because its tokens can be forged
            // more easily than the new key's.
            tracing::warn!(
                env = scfg.previous_secrets_env.as_deref().unwrap_or_default(),
                index = i,
                bytes = old.len(),
                "sessions: a previous secret is shorter than {MIN_SECRET_BYTES} bytes; tokens signed with it are still accepted (and re-signed with the current key) until you remove it"
            );
        }
    }
    let keys = match std::env::var(&scfg.secret_env) {
        Ok(secret) if !secret.is_empty() => {
            anyhow::ensure!(
                secret.len() >= MIN_SECRET_BYTES,
                "sessions: the secret in {} is {} bytes; it must be at least {MIN_SECRET_BYTES} bytes (an HMAC-SHA256 key; generate one with `openssl rand -base64 32`)",
                scfg.secret_env,
                secret.len()
            );
            let prev: Vec<&[u8]> = previous.iter().map(Vec::as_slice).collect();
            SessionKeys::from_secrets(secret.as_bytes(), &prev)
        }
        _ => {
            if scfg.enabled {
                tracing::warn!(
                    env = %scfg.secret_env,
                    "sessions: no secret in the environment; using a random per-process key (tokens will not survive a restart)"
                );
            }
            SessionKeys::random()
        }
    };
    let now = unix_now();
    let memory = match &cfg.store.path {
        Some(path) => {
            let (store, report) = MemoryStore::load_with_limit(path, now, cfg.store.max_sessions);
            if report.warning.is_some() {
                tracing::warn!("{report}");
            } else {
                tracing::info!("{report}");
            }
            store
        }
        None => MemoryStore::new(cfg.store.max_sessions),
    };
    // The file is saved only for the memory store (validation refuses
    // `store.path` with redis).
    type Stores = (
        Arc<dyn SessionStore>,
        Option<Arc<MemoryStore>>,
        Option<Arc<RedisStore>>,
    );
    let (store, saved, shared): Stores = match &cfg.store.redis {
        Some(r) => {
            let mut opts = RedisOptions::new(r.url.clone(), replica_id);
            opts.prefix = r.prefix.clone();
            opts.max_queue = r.max_queue;
            let redis = RedisStore::start(opts, memory)?;
            if !redis.wait_loaded(std::time::Duration::from_secs(1)).await {
                tracing::warn!(url = %r.url, "redis store: Redis not reached at start; serving local bindings until it is");
            }
            let redis = Arc::new(redis);
            (
                Arc::clone(&redis) as Arc<dyn SessionStore>,
                None,
                Some(redis),
            )
        }
        None => {
            let memory = Arc::new(memory);
            (
                Arc::clone(&memory) as Arc<dyn SessionStore>,
                Some(memory),
                None,
            )
        }
    };
    let sessions = Arc::new(Sessions {
        keys,
        store: Arc::clone(&store),
    });
    let path = cfg.store.path.clone();
    let interval = cfg.store.persist_interval;
    let handover = saved.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval.min(std::time::Duration::from_secs(60)));
        tick.tick().await;
        loop {
            let stopping = tokio::select! {
                _ = tick.tick() => false,
                _ = stop.wait_for(|s| *s) => true,
            };
            let expired = store.sweep(unix_now());
            if expired > 0 {
                tracing::debug!(expired, "expired session bindings removed");
            }
            if let (Some(p), Some(store)) = (&path, &saved) {
                let store = Arc::clone(store);
                let p = p.clone();
                let saved = tokio::task::spawn_blocking(move || store.save(&p)).await;
                match saved {
                    Ok(Ok(n)) => tracing::debug!(bindings = n, "sessions persisted"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot persist sessions"),
                    Err(e) => tracing::warn!(error = %e, "session persistence task failed"),
                }
            }
            if stopping {
                if let Some(redis) = &shared {
                    if !redis.flush(std::time::Duration::from_secs(1)).await {
                        tracing::warn!(
                            queued = redis.status().queued,
                            "redis store: writes not sent to Redis at shutdown"
                        );
                    }
                }
                return;
            }
        }
    });
    Ok((sessions, task, handover))
}

/// This replica's id: `replica_id` from the config, else hostname and the
/// bound admin port (`web-3-9901`), so two replicas on one host differ.
pub(crate) fn replica_id(cfg: &Config, admin: SocketAddr) -> String {
    if let Some(id) = &cfg.replica_id {
        return id.clone();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && !h.contains(['/', ' ']))
        .unwrap_or_else(|| "hopgate".to_owned());
    format!("{host}-{}", admin.port())
}

/// The directory a config file's relative paths (TLS files) start from:
/// the file's own, or the working directory for the embedded default.
pub(crate) fn config_dir(config: Option<&std::path::Path>) -> PathBuf {
    config
        .and_then(std::path::Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), std::path::Path::to_path_buf)
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// What fleet mode boots with.
pub(crate) struct FleetBoot {
    pub(crate) config: EtcdSourceConfig,
    /// The cache file, resolved.
    pub(crate) cache: PathBuf,
    /// The runtime layer read at start (from etcd or the cache).
    pub(crate) boot: Option<Boot>,
}

/// A running gateway.
pub(crate) struct Gateway {
    pub(crate) control: Arc<Control>,
    /// The listeners at start: (name, bound address).
    pub(crate) listeners: Vec<(String, SocketAddr)>,
    pub(crate) admin_addr: SocketAddr,
    admin: Arc<Admin>,
    sessions: Arc<Sessions>,
    maintenance: Arc<Maintenance>,
    config_path: Option<PathBuf>,
    live: Arc<Listeners>,
    shutdown: watch::Sender<bool>,
    /// Ends tunnels (WebSockets get 1012): with `shutdown` on SIGTERM, at
    /// the drain deadline after a handover.
    tunnel_stop: watch::Sender<bool>,
    /// The admin API's socket (a duplicate, for a handover).
    admin_fd: Arc<OwnedFd>,
    /// The memory store, saved for a new process at a handover.
    memory: Option<Arc<MemoryStore>>,
    tasks: Vec<JoinHandle<()>>,
    session_stop: watch::Sender<bool>,
    session_task: JoinHandle<()>,
    admin_stop: watch::Sender<bool>,
    admin_task: JoinHandle<()>,
    /// `admin.address` as configured at start.
    admin_configured: SocketAddr,
    /// Span export (`tracing.otlp`): flushed after the listeners drain.
    otlp: OtlpTask,
}

/// The OTLP export task and its stop switch.
struct OtlpTask {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl OtlpTask {
    /// Sends what is still queued (the last requests' spans) and ends.
    async fn flush(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl Gateway {
    /// Binds every listener and the admin API and starts serving.
    pub(crate) async fn start(
        cfg: Config,
        source: Source,
        config_file: Option<FileWatch>,
        inherited: Inherited,
    ) -> anyhow::Result<Gateway> {
        let config_path = config_file.as_ref().map(|w| w.path().to_path_buf());
        let token = match &cfg.admin.token_env {
            Some(var) => Some(
                std::env::var(var)
                    .with_context(|| format!("admin.token_env names {var}, which is not set"))?,
            ),
            None => None,
        };
        crate::logwriter::configure(&cfg.access_log).with_context(|| {
            let p = cfg.access_log.path.as_deref().unwrap_or(Path::new("-"));
            format!("access_log.path: cannot open {}", p.display())
        })?;
        // The file's watch was armed before the file was read (`main`): an
        // edit made since is always seen as one.
        let file_watch = config_file;
        let fds = crate::fdlimit::FdBudget::at_start();
        fds.settle(&cfg.limits, cfg.listeners.len())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let control = Control::new(cfg.clone(), source);
        // TLS files are read before anything is bound: a bad one stops the
        // start like any config error.
        if let Err(errors) = control.start_tls(config_dir(config_path.as_deref())) {
            for e in &errors {
                eprintln!("config error: {e}");
            }
            anyhow::bail!("the config has {} error(s); not starting", errors.len());
        }
        inherited.apply_health(&control.snapshot().load());
        let (shutdown, rx) = watch::channel(false);
        // Sessions stop after the listeners have drained, so the final save
        // includes the bindings of the last requests.
        // The admin socket is bound first: its port names this replica.
        let inherited = parking_lot::Mutex::new(inherited);
        let (admin_sock, admin_fd) =
            obtain(&inherited, Kind::Admin, "admin", cfg.admin.address).await?;
        let admin_addr = admin_sock.local_addr()?;
        let admin_configured = cfg.admin.address;
        let (session_stop, session_rx) = watch::channel(false);
        let (sessions, session_task, memory) =
            start_sessions(&cfg, &replica_id(&cfg, admin_addr), session_rx).await?;
        let pool_size = cfg
            .services
            .iter()
            .map(|s| s.pool.max_idle)
            .max()
            .unwrap_or(64);
        let maintenance =
            Maintenance::new(Arc::clone(control.snapshot()), cfg.maintenance, pool_size);
        let (maint_tx, mut maint_rx) = tokio::sync::mpsc::channel(1024);
        let (tunnel_stop, tunnel_rx) = watch::channel(false);
        let (otlp_stop, otlp_rx) = watch::channel(false);
        let (exporter, otlp_task) =
            hopgate_proxy::otlp::start(Arc::clone(control.snapshot()), otlp_rx);
        let live = Arc::new(Listeners {
            forwarder: Forwarder::new(Arc::clone(control.snapshot()), Some(Arc::clone(&sessions)))
                .with_stopping(tunnel_rx)
                .with_maintenance(maint_tx)
                .with_canary(control.canary_slot())
                .with_otlp(exporter),
            tls: Arc::clone(control.tls_listeners()),
            running: Mutex::new(Vec::new()),
            inherited,
            fds,
        });
        let mut listeners = Vec::new();
        {
            let mut running = live.running.lock().await;
            for l in &cfg.listeners {
                let r = live.start(l, &cfg).await?;
                listeners.push((r.name.clone(), r.bound));
                running.push(r);
            }
        }
        live.inherited.lock().close_rest();
        let admin = Admin::with_maintenance(
            Arc::clone(&control),
            token,
            Some(Arc::clone(&sessions)),
            Arc::clone(&maintenance),
        );
        // The admin API outlives the listeners' drain, so `/readyz` answers
        // 503 to load balancers while in-flight work finishes.
        let (admin_stop, admin_rx) = watch::channel(false);
        let admin_task = tokio::spawn(serve_admin(admin_sock, Arc::clone(&admin), admin_rx));
        let mut tasks = Vec::new();
        // Notifications from backends' Hop-Maintenance headers.
        let m = Arc::clone(&maintenance);
        let mut stop = rx.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    n = maint_rx.recv() => match n {
                        Some(n) => { let _ = m.intake_in_band(n); }
                        None => return,
                    },
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        }));

        // Keep listeners in step with applied configs.
        let mut applied = control.subscribe();
        let (c, l, mut stop) = (Arc::clone(&control), Arc::clone(&live), rx.clone());
        let maint = Arc::clone(&maintenance);
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = applied.changed() => if r.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                }
                let snap = c.snapshot().load_full();
                if snap.config.admin.address != cfg.admin.address
                    && snap.config.admin.address.port() != 0
                {
                    tracing::warn!(
                        "admin.address changed by reload: takes effect at the next restart"
                    );
                }
                if let Err(e) = crate::logwriter::configure(&snap.config.access_log) {
                    let p = snap.config.access_log.path.as_deref().unwrap_or(Path::new("-"));
                    tracing::error!(path = %p.display(), error = %e, "access_log.path: cannot open the file; access lines still go where they went");
                }
                l.reconcile(&snap.config).await;
                maint.set_config(snap.config.maintenance);
            }
        }));
        tasks.push(tokio::spawn(watch_tls_files(
            Arc::clone(&control),
            rx.clone(),
        )));
        // services[].discovery.dns: resolver tasks follow the applied configs.
        tasks.push(hopgate_control::start_dns(Arc::clone(&control), rx.clone()));
        if let Some(armed) = file_watch {
            tasks.push(tokio::spawn(watch_file(
                Arc::clone(&control),
                armed,
                rx.clone(),
            )));
        }
        Ok(Gateway {
            control,
            listeners,
            admin_addr,
            admin,
            sessions,
            maintenance,
            config_path,
            live,
            shutdown,
            tunnel_stop,
            admin_fd: Arc::new(admin_fd),
            memory,
            tasks,
            session_stop,
            session_task,
            admin_stop,
            admin_task,
            admin_configured,
            otlp: OtlpTask {
                stop: otlp_stop,
                task: otlp_task,
            },
        })
    }

    /// Fleet mode: installs the fleet view on the admin API and,
    /// with `sources.etcd`, starts the etcd source (config, discovery,
    /// fleet-wide actions). `boot` is what the gateway started from.
    pub(crate) fn start_fleet(&mut self, replica_id: String, etcd: Option<FleetBoot>) {
        let handle = etcd
            .as_ref()
            .map(|e| Arc::new(EtcdHandle::new(&e.config, &replica_id)));
        tracing::info!(replica_id = %replica_id, etcd = handle.is_some(), "fleet view ready");
        let fleet = Fleet::new(replica_id, handle.clone());
        if self.sessions.store.redis_status().is_some() {
            fleet.set_redis(Arc::new(SharedStoreStatus(Arc::clone(
                &self.sessions.store,
            ))));
        }
        self.admin.set_fleet(fleet);
        let (Some(e), Some(handle)) = (etcd, handle) else {
            return;
        };
        let layer = match &e.boot {
            Some(b) => {
                hopgate_control::etcd::boot_layer(b.runtime.clone(), &b.view, &e.config.prefix)
            }
            None => hopgate_core::config::RawConfig::default(),
        };
        // The gateway already runs this layer: this only records it, so
        // file and SIGHUP reloads keep it under their bootstrap sections.
        if let Err(errors) = self
            .control
            .apply_runtime(Ok(layer), hopgate_control::Source::Etcd)
        {
            for err in errors {
                tracing::warn!(error = %err, "etcd: boot layer refused");
            }
        }
        let source = EtcdSource::new(
            Arc::clone(&self.control),
            Arc::clone(&self.maintenance),
            handle,
            e.cache,
            e.boot.as_ref(),
        );
        self.tasks
            .push(tokio::spawn(source.run(self.shutdown.subscribe())));
    }

    /// Prints the lines scripts and tests wait for.
    pub(crate) fn print_ready(&self) {
        for (name, addr) in &self.listeners {
            print_line(&format!("hopgate listening name={name} addr={addr}"));
        }
        print_line(&format!("hopgate admin listening addr={}", self.admin_addr));
    }

    /// Re-reads the config file (SIGHUP).
    pub(crate) fn reload_file(&self) {
        let Some(path) = &self.config_path else {
            tracing::warn!("SIGHUP: no config file to reload (running the embedded default)");
            return;
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let format = if path.extension().is_some_and(|e| e == "json") {
                    hopgate_core::config::Format::Json
                } else {
                    hopgate_core::config::Format::Yaml
                };
                let (c, source) = (
                    Arc::clone(&self.control),
                    Source::Signal(path.display().to_string()),
                );
                // Off the runtime's threads, like every other reload.
                tokio::task::spawn_blocking(move || {
                    let _ = c.apply_text(&text, format, source);
                });
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "SIGHUP: cannot read the config file; keeping the running config")
            }
        }
    }

    /// Turns `/readyz` to 503 and keeps serving for
    /// `timeouts.shutdown_delay` (a second SIGTERM/SIGINT cuts it short),
    /// then stops accepting, lets in-flight requests finish (up to
    /// `timeouts.shutdown`), and returns.
    pub(crate) async fn shutdown(self) {
        self.admin.set_ready(false);
        let delay = self
            .control
            .snapshot()
            .load()
            .config
            .timeouts
            .shutdown_delay;
        if !delay.is_zero() {
            let second = next_stop_signal();
            tracing::info!(
                delay_ms = delay.as_millis() as u64,
                "shutting down: /readyz answers 503; still serving until the delay ends (a second signal skips it)"
            );
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = second => tracing::info!("second signal: skipping the rest of the shutdown delay"),
            }
        }
        tracing::info!("shutting down: no new connections; finishing in-flight requests");
        let _ = self.shutdown.send(true);
        let _ = self.tunnel_stop.send(true);
        let deadline = self.control.snapshot().load().config.timeouts.shutdown;
        for task in self.live.stop_all().await {
            let _ = task.await;
        }
        // Upgraded connections (WebSockets) are not part of hyper's graceful
        // shutdown: give them time to send their 1012 close frames.
        hopgate_proxy::wait_closed(deadline).await;
        self.otlp.flush().await;
        for t in self.tasks {
            let _ = t.await;
        }
        let _ = self.session_stop.send(true);
        let _ = self.session_task.await;
        let _ = self.admin_stop.send(true);
        let _ = self.admin_task.await;
        tracing::info!("shutdown complete");
    }
}

/// Resolves on the next SIGTERM or SIGINT after this call (never, if the
/// handlers cannot be installed). The handlers are registered at once, not
/// when the future is first polled, so no signal sent after the call is
/// missed.
fn next_stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// Waits for SIGTERM or SIGINT; reloads the config file on SIGHUP and
/// reopens the access log's file on SIGUSR1 meanwhile.
/// The handlers are installed at the call, not at the first poll, so a
/// signal sent right after the ready lines is never the default action.
pub(crate) fn wait_for_signals(gw: &Gateway) -> impl std::future::Future<Output = ()> + '_ {
    use tokio::signal::unix::{signal, SignalKind};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
    );
    async move {
        let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1)) = handlers else {
            tracing::error!("cannot install signal handlers; running until killed");
            std::future::pending::<()>().await;
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => { tracing::info!("SIGTERM"); return; }
                _ = int.recv() => { tracing::info!("SIGINT"); return; }
                _ = hup.recv() => { tracing::info!("SIGHUP: reloading the config file"); gw.reload_file(); }
                _ = usr1.recv() => { tracing::info!("SIGUSR1: reopening the access log file"); crate::logwriter::reopen(); }
            }
        }
    }
}
