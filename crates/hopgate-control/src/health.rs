//! Active health checks.
//!
//! Owns one checking task per node of every service that has a `health`
//! section: an HTTP GET of the configured path on a fresh connection (over
//! TLS, with the connector the node's pool dials with, when the service
//! has a `tls` block; after a PROXY protocol `LOCAL` header when it has
//! `proxy_protocol`) every
//! `interval` (jittered ±10 % so checks of many nodes do not align), bounded
//! by `timeout`; `rise` consecutive passes make a node healthy, `fall`
//! consecutive failures make it unhealthy. Results go into the node's live
//! state, which the balancers read.
//!
//! Must not touch: the snapshot (it is handed in), the request path. Tasks
//! are reconciled after every applied config: unchanged nodes keep their
//! task and counters, changed ones restart, removed ones stop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::task::JoinHandle;

use hopgate_core::config::{HealthConfig, ProxyProtocolVersion};
use hopgate_core::node::{Health, NodeKey, NodeState};
use hopgate_proxy::{Snapshot, Upstream, UpstreamConnector};

/// The running checks, keyed by node identity.
#[derive(Default)]
pub(crate) struct HealthChecker {
    tasks: Mutex<HashMap<NodeKey, (Probe, JoinHandle<()>)>>,
}

impl std::fmt::Debug for HealthChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthChecker")
            .field("tasks", &self.tasks.lock().len())
            .finish()
    }
}

/// What one task checks; a change restarts the task.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Probe {
    addr: SocketAddr,
    cfg: HealthConfig,
    /// `services[].proxy_protocol`: each check starts with a v2 `LOCAL`
    /// (v1 `UNKNOWN`) header, as HAProxy's `check-send-proxy` does.
    proxy_protocol: Option<ProxyProtocolVersion>,
}

impl HealthChecker {
    /// Starts, keeps, restarts or stops tasks to match `snap`. Must be
    /// called from within a tokio runtime.
    pub(crate) fn reconcile(&self, snap: &Snapshot) {
        let mut wanted: HashMap<NodeKey, (Probe, Arc<NodeState>, Arc<Upstream>)> = HashMap::new();
        for svc in &snap.services {
            let Some(cfg) = &svc.health else { continue };
            for n in &svc.nodes {
                wanted.insert(
                    n.state.key().clone(),
                    (
                        Probe {
                            addr: n.address,
                            cfg: cfg.clone(),
                            proxy_protocol: svc.proxy_protocol,
                        },
                        Arc::clone(&n.state),
                        Arc::clone(&n.upstream),
                    ),
                );
            }
        }
        let mut tasks = self.tasks.lock();
        tasks.retain(|key, (probe, handle)| {
            let keep = wanted.get(key).is_some_and(|(p, _, _)| p == probe);
            if !keep {
                handle.abort();
                // No longer checked: forget the verdict rather than keep a
                // node out forever on the strength of a check that is gone.
                if !wanted.contains_key(key) {
                    if let Some(state) = snap
                        .services
                        .iter()
                        .flat_map(|s| s.nodes.iter())
                        .find(|n| n.state.key() == key)
                        .map(|n| &n.state)
                    {
                        state.set_health(Health::Unknown);
                    }
                }
            }
            keep
        });
        for (key, (probe, state, upstream)) in wanted {
            if tasks.contains_key(&key) {
                continue;
            }
            let handle = tokio::spawn(run(probe.clone(), state, upstream));
            tasks.insert(key, (probe, handle));
        }
    }
}

impl Drop for HealthChecker {
    fn drop(&mut self) {
        for (_, (_, h)) in self.tasks.lock().drain() {
            h.abort();
        }
    }
}

async fn run(probe: Probe, state: Arc<NodeState>, upstream: Arc<Upstream>) {
    let cfg = &probe.cfg;
    let mut passes = 0u32;
    let mut failures = 0u32;
    // A first check soon after start, spread over one interval.
    tokio::time::sleep(jitter(cfg.interval / 4)).await;
    loop {
        // A node moved by maintenance is checked where it lives now.
        let addr = state.moved_to().unwrap_or(probe.addr);
        // Over TLS when the service's nodes are (`services[].tls`), with
        // the connector its pool dials with.
        let tls = upstream.pool_if_set().and_then(|p| p.tls());
        let result = tokio::time::timeout(
            cfg.timeout,
            check(addr, &cfg.path, tls, probe.proxy_protocol),
        )
        .await;
        let ok = match &result {
            Ok(Ok(status)) => (cfg.expect_status.0..=cfg.expect_status.1).contains(status),
            _ => false,
        };
        let key = state.key();
        if ok {
            passes += 1;
            failures = 0;
            // A passing check is evidence too: end a passive ejection and
            // let an open breaker's probes decide (like Envoy's
            // successful_active_health_check_uneject_host).
            if passes >= cfg.rise {
                state.recover();
            }
            if passes >= cfg.rise && state.health() != Health::Healthy {
                state.set_health(Health::Healthy);
                tracing::info!(service = %key.service, node = %key.node, "health check: node healthy");
            }
        } else {
            failures += 1;
            passes = 0;
            if failures >= cfg.fall && state.health() != Health::Unhealthy {
                state.set_health(Health::Unhealthy);
                let why = match result {
                    Err(_) => "timeout".to_owned(),
                    Ok(Err(e)) => e,
                    Ok(Ok(s)) => format!("status {s}"),
                };
                tracing::warn!(service = %key.service, node = %key.node, reason = %why, "health check: node unhealthy");
            }
        }
        tokio::time::sleep(jitter(cfg.interval)).await;
    }
}

/// `d` ± 10 %.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(0.9 + fastrand::f64() * 0.2)
}

/// One check: GET `path` on a new connection (TLS with `tls`); the
/// status, or why it failed.
async fn check(
    addr: SocketAddr,
    path: &str,
    tls: Option<Arc<UpstreamConnector>>,
    proxy_protocol: Option<ProxyProtocolVersion>,
) -> Result<u16, String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    if let Some(v) = proxy_protocol {
        use tokio::io::AsyncWriteExt;
        let header = hopgate_proxy::proxy_protocol_header(v, None, addr);
        stream
            .write_all(&header)
            .await
            .map_err(|e| format!("PROXY header: {e}"))?;
    }
    match tls {
        None => get(stream, addr, path).await,
        Some(tls) => {
            let stream = tls
                .connect(addr, stream)
                .await
                .map_err(|e| format!("tls: {e}"))?;
            get(stream, addr, path).await
        }
    }
}

async fn get<I>(stream: I, addr: SocketAddr, path: &str) -> Result<u16, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let driver = tokio::spawn(conn);
    let req = http::Request::get(path)
        .header(http::header::HOST, addr.to_string())
        .header(http::header::USER_AGENT, "hopgate-health-check")
        .header(http::header::CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("request: {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    driver.abort();
    Ok(status)
}
