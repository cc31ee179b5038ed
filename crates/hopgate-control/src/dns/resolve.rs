//! One resolution of a service's `discovery.dns` with hickory's stub
//! resolver, and what it came to ([`Answer`]).
//!
//! Owns the resolver's set-up — exactly the configured name servers over
//! UDP and TCP on their ports, else `/etc/resolv.conf`'s; no hosts file, no
//! cache (every refresh asks the server, so the records' TTLs are ours to
//! honour) — the A / AAAA / SRV lookups (an SRV target resolved to its
//! IPv4 and IPv6 addresses) and the classification of a failure into the
//! `result` label of `hopgate_dns_resolutions_total`.
//!
//! Must not touch: the last good set, the config, the snapshot (the loop in
//! the parent module decides what an answer changes).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts,
};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;

use hopgate_core::config::discovery::{
    address_targets, srv_targets, DnsDiscovery, DnsType, Resolved, SrvTarget,
};

/// How long one query may take, and how often it is tried, per server.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
const QUERY_ATTEMPTS: usize = 2;

/// What one resolution came to.
#[derive(Debug)]
pub(super) enum Answer {
    /// At least one address: the new set, and the smallest TTL seen.
    Ok(Vec<Resolved>, Option<Duration>),
    /// No usable failure, no address: `result` is the label (`empty`,
    /// `nxdomain`, `servfail`, `timeout`, `refused`, `error`), `detail` the
    /// resolver's words.
    Failed {
        result: &'static str,
        detail: String,
    },
}

/// A resolver for one service's discovery.
pub(super) struct Resolver {
    inner: TokioResolver,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    /// With `resolvers` set, exactly those servers (UDP, then TCP, each on
    /// its configured port); without, the system's configuration.
    pub(super) fn new(cfg: &DnsDiscovery) -> Result<Resolver, String> {
        let mut builder = if cfg.resolvers.is_empty() {
            TokioResolver::builder_tokio()
                .map_err(|e| format!("cannot read the system resolver config: {e}"))?
        } else {
            let servers = cfg
                .resolvers
                .iter()
                .map(|addr| {
                    let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                    for c in &mut ns.connections {
                        c.port = addr.port();
                    }
                    ns
                })
                .collect();
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(servers),
                TokioRuntimeProvider::default(),
            )
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.cache_size = 0;
        opts.use_hosts_file = ResolveHosts::Never;
        opts.timeout = QUERY_TIMEOUT;
        opts.attempts = QUERY_ATTEMPTS;
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.try_tcp_on_error = true;
        let inner = builder
            .build()
            .map_err(|e| format!("cannot build the resolver: {e}"))?;
        Ok(Resolver { inner })
    }

    /// Resolves the name once.
    pub(super) async fn resolve(&self, cfg: &DnsDiscovery) -> Answer {
        match cfg.kind {
            DnsType::A | DnsType::Aaaa => self.addresses(cfg).await,
            DnsType::Srv => self.srv(cfg).await,
        }
    }

    async fn addresses(&self, cfg: &DnsDiscovery) -> Answer {
        let rtype = if cfg.kind == DnsType::A {
            RecordType::A
        } else {
            RecordType::AAAA
        };
        let lookup = match self.inner.lookup(cfg.name.as_str(), rtype).await {
            Ok(l) => l,
            Err(e) => return failed(&e),
        };
        let mut ips = Vec::new();
        let mut ttl: Option<u32> = None;
        for r in lookup.answers() {
            let ip = match &r.data {
                RData::A(a) if rtype == RecordType::A => IpAddr::V4(a.0),
                RData::AAAA(a) if rtype == RecordType::AAAA => IpAddr::V6(a.0),
                _ => continue,
            };
            ips.push(ip);
            ttl = Some(ttl.map_or(r.ttl, |t| t.min(r.ttl)));
        }
        let port = cfg.port.unwrap_or_default();
        let set = address_targets(&ips, port);
        if set.is_empty() {
            return empty(&cfg.name);
        }
        Answer::Ok(set, ttl.map(|t| Duration::from_secs(u64::from(t))))
    }

    async fn srv(&self, cfg: &DnsDiscovery) -> Answer {
        let lookup = match self.inner.lookup(cfg.name.as_str(), RecordType::SRV).await {
            Ok(l) => l,
            Err(e) => return failed(&e),
        };
        let mut ttl: Option<u32> = None;
        let mut records = Vec::new();
        let mut failure = None;
        for r in lookup.answers() {
            let RData::SRV(srv) = &r.data else { continue };
            ttl = Some(ttl.map_or(r.ttl, |t| t.min(r.ttl)));
            // A target may be an address already (`127.0.0.1.`) in tests;
            // lookup_ip answers those without a query.
            let target = srv.target.to_string();
            let addrs = match self.inner.lookup_ip(target.as_str()).await {
                Ok(ips) => {
                    if let Some(until) = ips.valid_until().checked_duration_since(Instant::now()) {
                        let secs = u32::try_from(until.as_secs()).unwrap_or(u32::MAX);
                        ttl = Some(ttl.map_or(secs, |t| t.min(secs)));
                    }
                    ips.iter().collect()
                }
                Err(e) => {
                    tracing::debug!(target = %target, error = %e, "dns: an SRV target did not resolve");
                    failure.get_or_insert(e);
                    Vec::new()
                }
            };
            records.push(SrvTarget {
                priority: srv.priority,
                weight: srv.weight,
                port: srv.port,
                addrs,
            });
        }
        let set = srv_targets(&records);
        if set.is_empty() {
            // Every target failed to resolve: that failure is the result.
            return match failure {
                Some(e) => failed(&e),
                None => empty(&cfg.name),
            };
        }
        Answer::Ok(set, ttl.map(|t| Duration::from_secs(u64::from(t))))
    }
}

fn empty(name: &str) -> Answer {
    Answer::Failed {
        result: "empty",
        detail: format!("{name}: no address in the answer"),
    }
}

/// The `result` label of a failed lookup.
fn failed(e: &NetError) -> Answer {
    let result = match e {
        NetError::Dns(DnsError::NoRecordsFound(n)) if n.response_code == ResponseCode::NXDomain => {
            "nxdomain"
        }
        NetError::Dns(DnsError::NoRecordsFound(_)) => "empty",
        NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail)) => "servfail",
        NetError::Dns(DnsError::ResponseCode(ResponseCode::NXDomain)) => "nxdomain",
        NetError::Dns(DnsError::ResponseCode(ResponseCode::Refused)) => "refused",
        NetError::Timeout => "timeout",
        _ => "error",
    };
    Answer::Failed {
        result,
        detail: e.to_string(),
    }
}
