//! The gateway's side of a binary upgrade: what the upgrade socket hands
//! to a new process ([`HandoverSource`]: duplicates of the listening
//! sockets, the session bindings to save, the nodes' health verdicts) and
//! how this process drains once the new one serves
//! ([`Gateway::handover_drain`]). The protocol is `crate::upgrade`'s.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use hopgate_control::{Control, Maintenance};
use hopgate_core::config::Health;
use hopgate_store::MemoryStore;

use super::{Gateway, Listeners};
use crate::listenfd::Kind;

/// What the upgrade socket gives a new process: the listening sockets and
/// the session bindings.
pub(crate) struct HandoverSource {
    live: Arc<Listeners>,
    /// The admin API's configured address (as at start) and socket.
    admin: (SocketAddr, Arc<OwnedFd>),
    memory: Option<(Arc<MemoryStore>, PathBuf)>,
    control: Arc<Control>,
    maintenance: Arc<Maintenance>,
}

impl HandoverSource {
    /// The running state a new process resumes from.
    pub(crate) fn carry(&self) -> hopgate_control::Carried {
        super::state::carry(&self.control, &self.maintenance)
    }

    /// The health verdicts of actively checked nodes: (service, node id,
    /// address, health), `unknown` left out.
    pub(crate) fn health(&self) -> Vec<(String, String, SocketAddr, Health)> {
        let snap = self.control.snapshot().load();
        snap.services
            .iter()
            .filter(|s| s.health.is_some())
            .flat_map(|s| {
                s.nodes.iter().filter_map(|n| {
                    let h = n.state.health();
                    (h != Health::Unknown).then(|| (s.name.clone(), n.id.clone(), n.address, h))
                })
            })
            .collect()
    }

    /// Duplicates of every listening socket: (kind, configured address,
    /// name, descriptor).
    pub(crate) async fn sockets(&self) -> anyhow::Result<Vec<(Kind, SocketAddr, String, OwnedFd)>> {
        let running = self.live.running.lock().await;
        let mut out = Vec::with_capacity(running.len() + 1);
        for r in running.iter() {
            out.push((
                Kind::Listener,
                r.configured,
                r.name.clone(),
                r.fd.try_clone()?,
            ));
        }
        out.push((
            Kind::Admin,
            self.admin.0,
            "admin".to_owned(),
            self.admin.1.try_clone()?,
        ));
        Ok(out)
    }

    /// Saves the memory store to `store.path` now, so the new process
    /// loads what this one knows; the number of bindings saved.
    pub(crate) async fn save_sessions(&self) -> Option<usize> {
        let (store, path) = self.memory.clone()?;
        match tokio::task::spawn_blocking(move || store.save(&path)).await {
            Ok(Ok(n)) => Some(n),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "upgrade: cannot save the session bindings for the new process");
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "upgrade: session save task failed");
                None
            }
        }
    }
}

/// How long tunnels get to send their 1012 close frames after the drain
/// deadline of a handover.
const TUNNEL_CLOSE_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

impl Gateway {
    /// The sockets and sessions the upgrade socket hands over.
    pub(crate) fn handover_source(&self) -> HandoverSource {
        let cfg = &self.control.snapshot().load().config;
        let memory = match (&self.memory, &cfg.store.path) {
            (Some(m), Some(p)) => Some((Arc::clone(m), p.clone())),
            _ => None,
        };
        HandoverSource {
            live: Arc::clone(&self.live),
            admin: (self.admin_configured, Arc::clone(&self.admin_fd)),
            memory,
            control: Arc::clone(&self.control),
            maintenance: Arc::clone(&self.maintenance),
        }
    }

    /// After a new process took the sockets: stops accepting at once (the
    /// new process already accepts from the same sockets, so there is no
    /// `shutdown_delay`), answers every HTTP/1.x request with
    /// `Connection: close`, lets in-flight requests finish and keeps
    /// tunnels open up to `timeouts.shutdown`, then closes the tunnels
    /// (WebSockets with 1012) and returns. Session bindings were saved for
    /// the new process at the handover; the memory store's file is the new
    /// process's from then on, so this one does not write it again.
    pub(crate) async fn handover_drain(self) {
        hopgate_proxy::begin_handover();
        // The new process owns `state_dir` from now on.
        if let Some(s) = self.state {
            s.abandon();
        }
        self.admin.set_ready(false);
        let timeout = self.control.snapshot().load().config.timeouts.shutdown;
        let deadline = tokio::time::Instant::now() + timeout;
        tracing::info!(
            timeout_ms = timeout.as_millis() as u64,
            "handed over to the new process: no new connections here; finishing in-flight requests and streams"
        );
        let _ = self.admin_stop.send(true);
        drop(self.admin_fd);
        let _ = self.shutdown.send(true);
        for task in self.live.stop_all().await {
            let _ = task.await;
        }
        // Tunnels (WebSockets) may run until the deadline; then 1012.
        hopgate_proxy::wait_closed(deadline.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        let _ = self.tunnel_stop.send(true);
        hopgate_proxy::wait_closed(TUNNEL_CLOSE_BOUND).await;
        self.otlp.flush().await;
        for t in self.tasks {
            let _ = t.await;
        }
        if self.memory.is_some() && self.control.snapshot().load().config.store.path.is_some() {
            self.session_task.abort();
        } else {
            // Redis: queued writes are flushed for the new process.
            let _ = self.session_stop.send(true);
            let _ = self.session_task.await;
        }
        let _ = self.admin_task.await;
        tracing::info!("drained after the handover; exiting");
    }
}
