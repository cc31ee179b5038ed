//! Wiring: binds the listeners and the admin API of a config, runs them,
//! keeps the set of listeners in step with reloads, and shuts everything
//! down gracefully. Used by `hopgate run` and `hopgate demo`.
//!
//! Start-up's steps are in `gateway/start.rs` (their order) and
//! `gateway/sessions.rs` (keys, store, sweep task); an upgrade's side is in
//! `gateway/handover.rs`.

use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use hopgate_control::etcd::{Boot, EtcdHandle, EtcdSource};
use hopgate_control::{Admin, Control, Fleet, Maintenance, SharedStoreStatus, Source};
use hopgate_core::config::{Config, EtcdSourceConfig, ListenerConfig};
use hopgate_proxy::{serve_listener, Forwarder, ListenerCtx, ListenerSettings};
use hopgate_store::{MemoryStore, Sessions};

use crate::listenfd::{obtain, Inherited, Kind};

mod handover;
mod sessions;
mod start;
pub(crate) mod state;

pub(crate) use handover::HandoverSource;
pub(crate) use start::Resume;

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
    tls: Arc<hopgate_proxy::TlsListeners>,
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
    /// `state_dir`: keeps the running state on disk.
    state: Option<state::Keeper>,
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
        if let Some(s) = self.state {
            s.finish().await;
        }
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
