//! DNS discovery: nodes from `services[].discovery.dns` (docs/config.md,
//! docs/fleet.md "Discover nodes by DNS").
//!
//! Owns the driver of the state kept in [`Control`] (`state::Dns`: per
//! service with `discovery.dns` the last good set of resolved addresses,
//! the last result and when it succeeded, and the
//! `hopgate_dns_resolutions_total{service,result}` counts). [`start`] runs one task that follows every applied config and
//! keeps one resolver task per such service (started, restarted when the
//! block changes, stopped when it goes). A resolver task resolves, waits the
//! answer's TTL clamped to `[refresh_min, refresh_max]` (after a failure:
//! `refresh_min`), and resolves again.
//!
//! A failed, SERVFAIL, timed-out, NXDOMAIN or empty answer keeps the last
//! good set: DNS never empties a service. An answer with a different set
//! re-applies the running config under the writer lock
//! ([`Control::apply_dns`], source `dns`), and every apply from any source
//! merges the last good sets in ([`Control::with_dns_nodes`], called by the
//! writer before it compiles): a node whose address left the set leaves the
//! snapshot and drains like any node a reload removes (in-flight requests
//! finish, sessions hop with their context, WebSockets get 1012 at the drain
//! deadline); a new one joins. In fleet mode every replica resolves on its
//! own, and the resolved nodes sit beside the ones etcd discovery merged
//! into the runtime layer.
//!
//! Must not touch: the snapshot except through [`Control`]'s writer; the
//! request path (everything here runs on the control plane's tasks).

mod resolve;
pub(crate) mod state;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::Value;

use hopgate_core::config::discovery::{merge_dns, DnsDiscovery};
use hopgate_core::config::{self, Config, ConfigError};

use crate::control::{unix_now, ApplyOutcome, Control, Source};
use resolve::{Answer, Resolver};

impl Control {
    /// The writer's hook: `result` with every service's last good DNS set
    /// merged in (re-validated only when that changes the document).
    pub(crate) fn with_dns_nodes(
        &self,
        result: Result<Config, Vec<ConfigError>>,
    ) -> Result<Config, Vec<ConfigError>> {
        let config = result?;
        if config.services.iter().all(|s| s.discovery.is_none()) {
            return Ok(config);
        }
        let mut raw = config.raw.clone();
        if !merge_dns(&mut raw, &self.dns.resolved()) {
            return Ok(config);
        }
        config::validate(&raw)
    }

    /// How many addresses the last good DNS set of `service` holds (the
    /// etcd burst rule counts them as nodes the service keeps).
    pub(crate) fn dns_nodes_of(&self, service: &str) -> usize {
        self.dns
            .resolved()
            .get(service)
            .map_or(0, |(_, set)| set.len())
    }

    /// Re-applies the running config with the DNS sets as they are now
    /// (source `dns`), under the writer lock.
    pub(crate) fn apply_dns(&self) -> Result<ApplyOutcome, Vec<ConfigError>> {
        let _writer = self.writer.lock();
        let mut raw = self.snapshot().load().config.raw.clone();
        merge_dns(&mut raw, &self.dns.resolved());
        let result = config::validate(&raw);
        self.apply_locked(result, Source::Dns)
    }
}

/// Starts DNS discovery: one task following the applied configs, one
/// resolver task per service with `discovery.dns`; all end when `shutdown`
/// turns true.
pub fn start(
    control: Arc<Control>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        tokio::select! {
            () = follow(control) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
    })
}

/// A resolver task that ends when dropped.
struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn follow(control: Arc<Control>) {
    let mut applied = control.subscribe();
    let mut tasks: HashMap<String, (DnsDiscovery, Task)> = HashMap::new();
    loop {
        let wanted: HashMap<String, DnsDiscovery> = control
            .snapshot()
            .load()
            .config
            .services
            .iter()
            .filter_map(|s| Some((s.name.clone(), s.discovery.clone()?)))
            .collect();
        tasks.retain(|s, (cfg, _)| wanted.get(s) == Some(cfg));
        control.dns.retain(&wanted);
        for (service, cfg) in wanted {
            if tasks.contains_key(&service) {
                continue;
            }
            tracing::info!(service = %service, name = %cfg.name, kind = cfg.kind.as_str(), "dns: discovery started");
            let task = tokio::spawn(resolve_loop(control.clone(), service.clone(), cfg.clone()));
            tasks.insert(service, (cfg, Task(task)));
        }
        if applied.changed().await.is_err() {
            return;
        }
    }
}

async fn resolve_loop(control: Arc<Control>, service: String, cfg: DnsDiscovery) {
    let resolver = loop {
        match Resolver::new(&cfg) {
            Ok(r) => break r,
            Err(detail) => {
                tracing::warn!(service = %service, error = %detail, "dns: no resolver; retrying");
                let answer = Answer::Failed {
                    result: "error",
                    detail,
                };
                control.dns.record(&service, &cfg, &answer, unix_now());
                tokio::time::sleep(cfg.refresh_max).await;
            }
        }
    };
    loop {
        let answer = resolver.resolve(&cfg).await;
        let ttl = match &answer {
            Answer::Ok(_, ttl) => *ttl,
            Answer::Failed { result, detail } => {
                tracing::warn!(service = %service, name = %cfg.name, result, error = %detail, "dns: resolution failed; keeping the last good set");
                None
            }
        };
        if control.dns.record(&service, &cfg, &answer, unix_now()) {
            if let Answer::Ok(set, _) = &answer {
                let addrs: Vec<String> = set.iter().map(|r| r.addr.to_string()).collect();
                tracing::info!(service = %service, name = %cfg.name, addresses = %addrs.join(","), "dns: the record set changed; applying");
            }
            let c = control.clone();
            let applied = tokio::task::spawn_blocking(move || c.apply_dns()).await;
            if let Ok(Err(errors)) = applied {
                let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
                tracing::error!(service = %service, "dns: the resolved nodes were refused: {}", all.join("; "));
            }
        }
        tokio::time::sleep(cfg.next_refresh(ttl)).await;
    }
}

/// The `dns` piece of `GET /admin/v1/nodes`: per service with DNS
/// discovery, the name, type, last result (and error), when it last
/// succeeded and was tried (Unix seconds), and the addresses in use.
pub(crate) fn admin_json(control: &Control) -> Value {
    control.dns.admin_json()
}

/// `hopgate_dns_*` for `/metrics`.
pub(crate) struct DnsCollector(pub(crate) Arc<Control>);

impl fmt::Debug for DnsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DnsCollector").finish_non_exhaustive()
    }
}

impl Collector for DnsCollector {
    fn encode(&self, enc: DescriptorEncoder) -> fmt::Result {
        self.0.dns.encode(enc)
    }
}
