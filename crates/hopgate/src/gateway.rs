//! Wiring: binds the listeners and the admin API of a config, runs them, and
//! shuts them down gracefully. Used by `hopgate run` and `hopgate demo`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use hopgate_control::admin::{serve_admin, Admin};
use hopgate_control::{Control, Source};
use hopgate_core::config::Config;
use hopgate_proxy::{serve_listener, Forwarder, ListenerCtx};

/// A running gateway.
pub(crate) struct Gateway {
    pub(crate) control: Arc<Control>,
    pub(crate) listeners: Vec<(String, SocketAddr)>,
    pub(crate) admin_addr: SocketAddr,
    admin: Arc<Admin>,
    config_path: Option<PathBuf>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Binds every listener and the admin API and starts serving.
    pub(crate) async fn start(
        cfg: Config,
        source: Source,
        config_path: Option<PathBuf>,
    ) -> anyhow::Result<Gateway> {
        let token = match &cfg.admin.token_env {
            Some(var) => Some(
                std::env::var(var)
                    .with_context(|| format!("admin.token_env names {var}, which is not set"))?,
            ),
            None => None,
        };
        let control = Control::new(cfg.clone(), source);
        let (shutdown, rx) = watch::channel(false);
        let forwarder = Forwarder::new(Arc::clone(control.snapshot()));
        let mut listeners = Vec::new();
        let mut tasks = Vec::new();
        for l in &cfg.listeners {
            let sock = TcpListener::bind(l.address).await.with_context(|| {
                format!("cannot listen on {} (listener {:?})", l.address, l.name)
            })?;
            let addr = sock.local_addr()?;
            let ctx = ListenerCtx {
                name: Arc::from(l.name.as_str()),
                debug_headers: l.debug_headers,
                forwarder: forwarder.clone(),
                max_connections: cfg.limits.max_connections,
                max_header_bytes: cfg.limits.max_header_bytes,
                header_read_timeout: cfg.timeouts.header_read,
                idle_timeout: cfg.timeouts.idle,
                shutdown_timeout: cfg.timeouts.shutdown,
            };
            tasks.push(tokio::spawn(serve_listener(sock, ctx, rx.clone())));
            listeners.push((l.name.clone(), addr));
        }
        let admin_sock = TcpListener::bind(cfg.admin.address)
            .await
            .with_context(|| format!("cannot listen on {} (admin)", cfg.admin.address))?;
        let admin_addr = admin_sock.local_addr()?;
        let admin = Admin::new(Arc::clone(&control), token);
        tasks.push(tokio::spawn(serve_admin(
            admin_sock,
            Arc::clone(&admin),
            rx.clone(),
        )));
        Ok(Gateway {
            control,
            listeners,
            admin_addr,
            admin,
            config_path,
            shutdown,
            tasks,
        })
    }

    /// Prints the lines scripts and tests wait for.
    pub(crate) fn print_ready(&self) {
        let mut out = std::io::stdout().lock();
        for (name, addr) in &self.listeners {
            let _ = writeln!(out, "hopgate listening name={name} addr={addr}");
        }
        let _ = writeln!(out, "hopgate admin listening addr={}", self.admin_addr);
        let _ = out.flush();
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
                let _ = self.control.apply_text(
                    &text,
                    format,
                    Source::Signal(path.display().to_string()),
                );
            }
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "SIGHUP: cannot read the config file; keeping the running config")
            }
        }
    }

    /// Stops accepting, lets in-flight requests finish (up to
    /// `timeouts.shutdown`), then returns.
    pub(crate) async fn shutdown(self) {
        tracing::info!("shutting down: no new connections; finishing in-flight requests");
        self.admin.set_ready(false);
        let _ = self.shutdown.send(true);
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
