//! Wiring: binds the listeners and the admin API of a config, runs them,
//! keeps the set of listeners in step with reloads, and shuts everything
//! down gracefully. Used by `hopgate run` and `hopgate demo`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use hopgate_control::admin::{serve_admin, Admin};
use hopgate_control::watch::watch_file;
use hopgate_control::{Control, Source};
use hopgate_core::config::{Config, ListenerConfig};
use hopgate_proxy::{serve_listener, Forwarder, ListenerCtx, ListenerSettings};

/// One running listener.
struct Running {
    name: String,
    /// The address as configured (may have port 0).
    configured: SocketAddr,
    bound: SocketAddr,
    settings: Arc<ArcSwap<ListenerSettings>>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The listeners, reconciled with every applied config.
struct Listeners {
    forwarder: Forwarder,
    running: Mutex<Vec<Running>>,
}

impl Listeners {
    async fn start(&self, l: &ListenerConfig, cfg: &Config) -> anyhow::Result<Running> {
        let sock = TcpListener::bind(l.address)
            .await
            .with_context(|| format!("cannot listen on {} (listener {:?})", l.address, l.name))?;
        let bound = sock.local_addr()?;
        let settings = Arc::new(ArcSwap::from_pointee(ListenerSettings::from_config(l, cfg)));
        let (stop, rx) = watch::channel(false);
        let ctx = ListenerCtx {
            name: Arc::from(l.name.as_str()),
            forwarder: self.forwarder.clone(),
            settings: Arc::clone(&settings),
        };
        let task = tokio::spawn(serve_listener(sock, ctx, rx));
        Ok(Running {
            name: l.name.clone(),
            configured: l.address,
            bound,
            settings,
            stop,
            task,
        })
    }

    /// Adds, removes and retunes listeners to match `cfg`. A listener whose
    /// name and address are unchanged keeps its socket and connections.
    async fn reconcile(&self, cfg: &Config) {
        let mut running = self.running.lock().await;
        let mut keep = Vec::new();
        for r in running.drain(..) {
            match cfg.listeners.iter().find(|l| l.name == r.name && l.address == r.configured) {
                Some(l) => {
                    let new = ListenerSettings::from_config(l, cfg);
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
                    print_line(&format!("hopgate listening name={} addr={}", r.name, r.bound));
                    tracing::info!(listener = %r.name, addr = %r.bound, "listener added by reload");
                    keep.push(r);
                }
                Err(e) => tracing::error!(listener = %l.name, error = %format!("{e:#}"), "cannot start listener added by reload"),
            }
        }
        *running = keep;
    }
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A running gateway.
pub(crate) struct Gateway {
    pub(crate) control: Arc<Control>,
    /// The listeners at start: (name, bound address).
    pub(crate) listeners: Vec<(String, SocketAddr)>,
    pub(crate) admin_addr: SocketAddr,
    admin: Arc<Admin>,
    config_path: Option<PathBuf>,
    live: Arc<Listeners>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Binds every listener and the admin API and starts serving.
    pub(crate) async fn start(cfg: Config, source: Source, config_path: Option<PathBuf>) -> anyhow::Result<Gateway> {
        let token = match &cfg.admin.token_env {
            Some(var) => Some(std::env::var(var).with_context(|| {
                format!("admin.token_env names {var}, which is not set")
            })?),
            None => None,
        };
        let control = Control::new(cfg.clone(), source);
        let (shutdown, rx) = watch::channel(false);
        let live = Arc::new(Listeners {
            forwarder: Forwarder::new(Arc::clone(control.snapshot())),
            running: Mutex::new(Vec::new()),
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
        let admin_sock = TcpListener::bind(cfg.admin.address)
            .await
            .with_context(|| format!("cannot listen on {} (admin)", cfg.admin.address))?;
        let admin_addr = admin_sock.local_addr()?;
        let admin = Admin::new(Arc::clone(&control), token);
        let mut tasks = vec![tokio::spawn(serve_admin(admin_sock, Arc::clone(&admin), rx.clone()))];

        // Keep listeners in step with applied configs.
        let mut applied = control.subscribe();
        let (c, l, mut stop) = (Arc::clone(&control), Arc::clone(&live), rx.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = applied.changed() => if r.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                }
                let snap = c.snapshot().load_full();
                if snap.config.admin.address != cfg.admin.address && snap.config.admin.address.port() != 0 {
                    tracing::warn!("admin.address changed by reload: takes effect at the next restart");
                }
                l.reconcile(&snap.config).await;
            }
        }));
        if let Some(path) = &config_path {
            tasks.push(tokio::spawn(watch_file(Arc::clone(&control), path.clone(), rx.clone())));
        }
        Ok(Gateway {
            control,
            listeners,
            admin_addr,
            admin,
            config_path,
            live,
            shutdown,
            tasks,
        })
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
                let _ = self.control.apply_text(&text, format, Source::Signal(path.display().to_string()));
            }
            Err(e) => tracing::error!(path = %path.display(), error = %e, "SIGHUP: cannot read the config file; keeping the running config"),
        }
    }

    /// Stops accepting, lets in-flight requests finish (up to
    /// `timeouts.shutdown`), then returns.
    pub(crate) async fn shutdown(self) {
        tracing::info!("shutting down: no new connections; finishing in-flight requests");
        self.admin.set_ready(false);
        let _ = self.shutdown.send(true);
        let running: Vec<Running> = self.live.running.lock().await.drain(..).collect();
        for r in &running {
            let _ = r.stop.send(true);
        }
        for r in running {
            let _ = r.task.await;
        }
        for t in self.tasks {
            let _ = t.await;
        }
        tracing::info!("shutdown complete");
    }
}

/// Waits for SIGTERM or SIGINT; reloads the config file on SIGHUP meanwhile.
pub(crate) async fn wait_for_signals(gw: &Gateway) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; running until killed");
        std::future::pending::<()>().await;
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM"); return; }
            _ = int.recv() => { tracing::info!("SIGINT"); return; }
            _ = hup.recv() => { tracing::info!("SIGHUP: reloading the config file"); gw.reload_file(); }
        }
    }
}
