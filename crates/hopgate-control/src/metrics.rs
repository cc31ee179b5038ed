//! The gateway's metric families for `GET /metrics` on the admin listener,
//! and the one `prometheus-client` [`Registry`] that serves them.
//!
//! Owns the metric names, help texts and labels of the gateway's families
//! (requests, errors, sessions, hops, nodes, pools, maintenance, config,
//! build, connections and bytes, per-route responses and duration
//! histograms, route mirrors, fleet) as a [`Collector`] that reads, at scrape time, the data
//! plane's counters (through its door, [`hopgate_proxy::telemetry`], and
//! the route stats the running snapshot carries), node live state, pool stats, the control
//! plane's reload counters, the session store size and the fleet engines.
//! The registry ([`registry`]) also holds the TLS collector
//! ([`hopgate_proxy::TlsCollector`]), the canary's (`control::canary`) and
//! the auth checks' ([`hopgate_proxy::AuthCollector`]);
//! [`crate::exposition`] encodes it. Counter names are given without
//! `_total`, which the encoder appends.
//!
//! Must not touch: any of those values (read only), the request path (no
//! registration or lookup happens there: the hot path bumps plain atomics).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use hopgate_core::error::Side;
use hopgate_core::node::{now_ms, CircuitState, Health};
use hopgate_proxy::telemetry::{
    self, TokenRejection, ERROR_KIND_LIST, HOP_BUCKETS, QUEUE_WAIT_BUCKETS,
};
use hopgate_store::Sessions;

use crate::control::Control;
use crate::exposition::{counter, counters, gauge, gauges, Cumulative, Durations};
use crate::fleet::Fleet;
use crate::maintenance::Maintenance;

mod limits;
mod mirror;

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The registry behind `/metrics`, built once per admin API: the gateway's
/// families, then TLS, then the canary's. `fleet` may be filled in later
/// (the fleet engines start after the admin API).
pub(crate) fn registry(
    control: Arc<Control>,
    sessions: Option<Arc<Sessions>>,
    maintenance: Option<Arc<Maintenance>>,
    fleet: Arc<OnceLock<Arc<Fleet>>>,
) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(Gateway {
        control: control.clone(),
        sessions,
        maintenance,
        fleet,
    }));
    r.register_collector(Box::new(hopgate_proxy::TlsCollector));
    r.register_collector(Box::new(crate::dns::DnsCollector(control.clone())));
    let auth = Arc::clone(control.auth_keys());
    r.register_collector(Box::new(crate::control::canary::CanaryCollector(control)));
    r.register_collector(Box::new(hopgate_proxy::ProxyProtocolCollector));
    r.register_collector(Box::new(hopgate_proxy::AuthCollector(auth)));
    r
}

/// What the gateway's families are read from.
struct Gateway {
    control: Arc<Control>,
    sessions: Option<Arc<Sessions>>,
    maintenance: Option<Arc<Maintenance>>,
    fleet: Arc<OnceLock<Arc<Fleet>>>,
}

impl fmt::Debug for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Collector for Gateway {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        requests(&mut enc)?;
        sessions(&mut enc, self.sessions.as_deref())?;
        hops(&mut enc)?;
        retries_on_status(&mut enc)?;
        let snap = self.control.snapshot().load();
        nodes(&mut enc, &snap)?;
        maintenance(&mut enc, self.maintenance.as_deref())?;
        gauge(
            &mut enc,
            "hopgate_config_version",
            "Version of the running config.",
            i64::try_from(snap.version).unwrap_or(i64::MAX),
        )?;
        counter(
            &mut enc,
            "hopgate_config_reloads",
            "Configs applied after the first.",
            self.control.reloads(),
        )?;
        counter(
            &mut enc,
            "hopgate_config_reload_failures",
            "Configs rejected (the running one kept).",
            self.control.reload_failures(),
        )?;
        let (ok, at) = self.control.last_reload();
        gauge(
            &mut enc,
            "hopgate_config_last_reload_successful",
            "1 when the last config offered (file, admin API, etcd) was applied, 0 when it was rejected.",
            i64::from(ok),
        )?;
        gauge(
            &mut enc,
            "hopgate_config_last_reload_timestamp_seconds",
            "When the last config was offered (applied or rejected), Unix seconds; the start for the first.",
            i64::try_from(at).unwrap_or(i64::MAX),
        )?;
        fleet(&mut enc, self.fleet.get().map(|f| &**f))?;
        limits::rate_limits(&mut enc, &snap)?;
        mirror::mirrors(&mut enc, &snap)?;
        traffic(&mut enc, &snap)
    }
}

/// A control-plane or route counter now.
fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Requests, responses, errors, retries and the access log.
fn requests(enc: &mut DescriptorEncoder) -> fmt::Result {
    let m = telemetry::counters();
    counter(
        enc,
        "hopgate_requests",
        "Client requests handled.",
        m.requests,
    )?;
    counters(
        enc,
        "hopgate_responses",
        "Client responses by status class.",
        CLASSES
            .iter()
            .enumerate()
            .map(|(i, class)| ([("class", *class)], m.responses[i + 1])),
    )?;
    counters(
        enc,
        "hopgate_errors",
        "Requests that ended in an error the gateway answered, by kind.",
        ERROR_KIND_LIST
            .iter()
            .zip(m.upstream_errors)
            .map(|(k, n)| ([("kind", k.label())], n)),
    )?;
    counters(
        enc,
        "hopgate_client_errors",
        "Requests the client got wrong (the subset of hopgate_errors_total on the client's side); never charged to a node.",
        ERROR_KIND_LIST
            .iter()
            .zip(m.upstream_errors)
            .filter(|(k, _)| k.side() == Side::Downstream)
            .map(|(k, n)| ([("kind", k.label())], n)),
    )?;
    counter(
        enc,
        "hopgate_retries",
        "Attempts after the first, on another node.",
        m.retries,
    )?;
    counter(
        enc,
        "hopgate_last_resort_picks",
        "Attempts on nodes only passive verdicts kept out, when nothing else was left.",
        m.last_resort_picks,
    )?;
    counter(
        enc,
        "hopgate_access_log_dropped",
        "Access log lines dropped because the log's buffer was full (its destination, stderr or access_log.path, slower than the traffic); requests never wait for the log.",
        m.access_log_dropped,
    )
}

/// Sessions: minted, refused tokens, the store, contexts.
fn sessions(enc: &mut DescriptorEncoder, sessions: Option<&Sessions>) -> fmt::Result {
    let m = telemetry::counters();
    counter(
        enc,
        "hopgate_sessions_created",
        "Sessions minted.",
        m.sessions_created,
    )?;
    counters(
        enc,
        "hopgate_session_tokens_rejected",
        "Session tokens not trusted (replaced by a new session), by reason.",
        TokenRejection::ALL
            .iter()
            .map(|r| ([("reason", r.label())], m.tokens_rejected[*r as usize])),
    )?;
    gauge(
        enc,
        "hopgate_sessions",
        "Session bindings in the store.",
        sessions.map_or(0, |s| i64::try_from(s.store.len()).unwrap_or(i64::MAX)),
    )?;
    counter(
        enc,
        "hopgate_session_evictions",
        "Session bindings evicted (least recently used) to bind new sessions in a full store.",
        sessions.map_or(0, |s| s.store.evictions()),
    )?;
    counters(
        enc,
        "hopgate_session_contexts",
        "Hop-Session-Context headers stored, refused as oversized, and delivered after a hop.",
        [
            ("stored", m.contexts_stored),
            ("oversized", m.contexts_oversized),
            ("delivered", m.contexts_delivered),
        ]
        .map(|(event, n)| ([("event", event)], n)),
    )
}

/// Hops by service and reason, and their duration.
fn hops(enc: &mut DescriptorEncoder) -> fmt::Result {
    let by_reason = telemetry::hops_by_reason();
    counters(
        enc,
        "hopgate_hops",
        "Sessions moved to another node, by service and reason.",
        by_reason
            .iter()
            .map(|(svc, reason, n)| ([("service", svc.as_str()), ("reason", reason)], *n)),
    )?;
    let (buckets, count, sum) = telemetry::hop_histogram();
    let me = enc.encode_descriptor(
        "hopgate_hop_duration",
        "From the hop decision to the new node's answer.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    Cumulative {
        bounds: &HOP_BUCKETS,
        cumulative: &buckets,
        count,
        sum,
    }
    .encode(me)
}

/// Answers a service lists as "not processed", retried on another node.
fn retries_on_status(enc: &mut DescriptorEncoder) -> fmt::Result {
    let rows = telemetry::retries_on_status();
    let statuses: Vec<String> = rows
        .iter()
        .map(|(_, status, _)| status.to_string())
        .collect();
    counters(
        enc,
        "hopgate_retries_on_status",
        "Answers whose status the service lists as not processed (services[].retries), retried on another node, by service and status.",
        rows.iter()
            .zip(&statuses)
            .map(|((svc, _, n), status)| ([("service", svc.as_str()), ("status", status.as_str())], *n)),
    )
}

/// One node's state and pool, read once per scrape.
struct NodeRow<'a> {
    labels: [(&'static str, &'a str); 2],
    up: bool,
    health: i64,
    circuit: i64,
    draining: bool,
    in_flight: u32,
    pool: Option<hopgate_proxy::PoolStats>,
}

/// Reads one per-node gauge from a [`NodeRow`].
type NodeValue = fn(&NodeRow) -> i64;

/// Node state, pools and the queue-wait histogram.
fn nodes(enc: &mut DescriptorEncoder, snap: &hopgate_proxy::Snapshot) -> fmt::Result {
    let now = now_ms();
    let rows: Vec<NodeRow> = snap
        .services
        .iter()
        .flat_map(|svc| {
            svc.nodes.iter().map(move |n| {
                let s = &n.state;
                NodeRow {
                    labels: [("service", svc.name.as_str()), ("node", n.id.as_str())],
                    up: s.is_available(now),
                    health: match s.health() {
                        Health::Unknown => 0,
                        Health::Healthy => 1,
                        Health::Unhealthy => 2,
                    },
                    circuit: match s.circuit() {
                        CircuitState::Closed => 0,
                        CircuitState::Open => 1,
                        CircuitState::HalfOpen => 2,
                    },
                    draining: s.is_draining(),
                    in_flight: s.in_flight(),
                    pool: n.upstream.pool_if_set().map(|p| p.stats()),
                }
            })
        })
        .collect();
    let per_node: [(&str, &str, NodeValue); 5] = [
        (
            "hopgate_node_up",
            "1 when the node may take new requests.",
            |r| i64::from(r.up),
        ),
        (
            "hopgate_node_health",
            "Active health: 0 unknown, 1 healthy, 2 unhealthy.",
            |r| r.health,
        ),
        (
            "hopgate_node_circuit",
            "Circuit breaker: 0 closed, 1 open, 2 half-open.",
            |r| r.circuit,
        ),
        ("hopgate_node_draining", "1 while the node drains.", |r| {
            i64::from(r.draining)
        }),
        (
            "hopgate_node_in_flight",
            "Requests in flight to the node.",
            |r| i64::from(r.in_flight),
        ),
    ];
    for (name, help, value) in per_node {
        gauges(
            enc,
            name,
            help,
            None,
            rows.iter().map(|r| (r.labels, value(r))),
        )?;
    }
    let pools = || {
        rows.iter()
            .filter_map(|r| r.pool.as_ref().map(|p| (r.labels, p)))
    };
    let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    gauges(
        enc,
        "hopgate_pool_connections",
        "Upstream connections of the node's pool.",
        None,
        pools().flat_map(|(l, p)| {
            [("open", p.open), ("idle", p.idle)].map(|(state, v)| ((l, [("state", state)]), n(v)))
        }),
    )?;
    gauges(
        enc,
        "hopgate_pool_queue_depth",
        "Requests waiting for an upstream connection to the node (pool.max_connections reached).",
        None,
        pools().map(|(l, p)| (l, n(p.queued))),
    )?;
    counters(
        enc,
        "hopgate_pool_queue_waits",
        "Requests that had to wait for an upstream connection to the node.",
        pools().map(|(l, p)| (l, p.queue_waits)),
    )?;
    counters(
        enc,
        "hopgate_pool_queue_rejected",
        "Requests the node's queue turned away (503, tried on another node): full (pool.max_pending) or timeout (pool.queue_timeout).",
        pools().flat_map(|(l, p)| {
            [("full", p.queue_full), ("timeout", p.queue_timeouts)]
                .map(|(reason, v)| ((l, [("reason", reason)]), v))
        }),
    )?;
    let m = telemetry::counters();
    let cumulative = m.queue_wait_buckets;
    let me = enc.encode_descriptor(
        "hopgate_pool_queue_wait",
        "Time requests spent waiting for an upstream connection, admitted or not.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    Cumulative {
        bounds: &QUEUE_WAIT_BUCKETS,
        cumulative: &cumulative,
        count: m.queue_wait_count,
        sum: m.queue_wait_sum_us as f64 / 1e6,
    }
    .encode(me)
}

/// Maintenance notifications, ignored headers and handoffs.
fn maintenance(enc: &mut DescriptorEncoder, mt: Option<&Maintenance>) -> fmt::Result {
    let notifications: Vec<((String, &'static str), u64)> = mt
        .map(|mt| {
            mt.stats
                .notifications
                .lock()
                .iter()
                .map(|(k, n)| (k.clone(), *n))
                .collect()
        })
        .unwrap_or_default();
    counters(
        enc,
        "hopgate_maintenance_notifications",
        "Maintenance notifications by kind and result.",
        notifications
            .iter()
            .map(|((kind, result), n)| ([("kind", kind.as_str()), ("result", result)], *n)),
    )?;
    let m = telemetry::counters();
    counters(
        enc,
        "hopgate_maintenance_headers_ignored",
        "Hop-Maintenance headers ignored, by reason.",
        [
            ("malformed", m.maintenance_malformed),
            ("queue_full", m.maintenance_dropped),
            ("in_band_off", m.maintenance_in_band_off),
            ("request_carried", m.maintenance_request_carried),
        ]
        .map(|(reason, n)| ([("reason", reason)], n)),
    )?;
    let Some(mt) = mt else { return Ok(()) };
    let st = &mt.stats;
    counters(
        enc,
        "hopgate_handoffs",
        "Connection handoffs by outcome.",
        [
            ("ok", &st.handoffs_ok),
            ("attempt_failed", &st.handoff_attempts_failed),
            ("exhausted", &st.handoffs_exhausted),
            ("queue_full", &st.handoff_queue_full),
            ("breaker_open", &st.handoff_breaker_rejections),
        ]
        .map(|(outcome, n)| ([("outcome", outcome)], get(n))),
    )?;
    gauge(
        enc,
        "hopgate_handoff_workers",
        "Handoff workers running.",
        i64::try_from(st.workers.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(i64::MAX),
    )
}

/// The commit the binary was built from, set once at start
/// ([`set_build_commit`]).
static BUILD_COMMIT: OnceLock<&'static str> = OnceLock::new();

/// Names the commit in `hopgate_build_info` (the binary knows it; this
/// crate does not).
pub fn set_build_commit(commit: &'static str) {
    let _ = BUILD_COMMIT.set(commit);
}

/// The build, connections and bytes, and the per-route families (the
/// route stats of the running snapshot, labelled with the route and its
/// service).
fn traffic(enc: &mut DescriptorEncoder, snap: &hopgate_proxy::Snapshot) -> fmt::Result {
    let m = telemetry::counters();
    // An info metric: `hopgate_build_info` in both formats (typed `info`
    // in OpenMetrics, `gauge` in Prometheus text).
    enc.encode_descriptor(
        "hopgate_build",
        "Always 1; the labels name the running build.",
        None,
        MetricType::Info,
    )?
    .encode_info(&[
        ("version", env!("CARGO_PKG_VERSION")),
        ("commit", BUILD_COMMIT.get().copied().unwrap_or("unknown")),
    ])?;
    counter(
        enc,
        "hopgate_connections_accepted",
        "Client connections accepted by the listeners.",
        m.connections_accepted,
    )?;
    counter(
        enc,
        "hopgate_client_bytes_received",
        "Bytes read from client connections (listeners and the admin API), as sent.",
        m.client_bytes_received,
    )?;
    counter(
        enc,
        "hopgate_client_bytes_sent",
        "Bytes written to client connections (listeners and the admin API).",
        m.client_bytes_sent,
    )?;
    gauge(
        enc,
        "hopgate_connections_open",
        "Client connections of the listeners open now.",
        i64::try_from(m.connections_open).unwrap_or(i64::MAX),
    )?;

    let routes = || {
        snap.routes.iter().map(|r| {
            let svc = snap.services.get(r.service).map_or("", |s| s.name.as_str());
            ([("route", r.id.as_str()), ("service", svc)], &r.stats)
        })
    };
    counters(
        enc,
        "hopgate_route_responses",
        "Responses by route, its service and status class (requests that matched a route).",
        routes().flat_map(|(l, stats)| {
            CLASSES
                .iter()
                .zip(&stats.responses)
                .map(move |(class, n)| ((l, [("class", *class)]), get(n)))
        }),
    )?;
    let mut me = enc.encode_descriptor(
        "hopgate_request_duration",
        "From a request's arrival to its response head, by route and service.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for (l, stats) in routes() {
        Durations(&stats.duration).encode(me.encode_family(&l)?)?;
    }
    let mut me = enc.encode_descriptor(
        "hopgate_upstream_duration",
        "From sending a request to a node to its answer's head or failure, per attempt, by route and service.",
        Some(&Unit::Seconds),
        MetricType::Histogram,
    )?;
    for (l, stats) in routes() {
        Durations(&stats.upstream).encode(me.encode_family(&l)?)?;
    }
    Ok(())
}

/// `hopgate_fleet_*`: 1 up, 0 down; absent when that engine is off.
fn fleet(enc: &mut DescriptorEncoder, fleet: Option<&Fleet>) -> fmt::Result {
    let Some(fleet) = fleet else { return Ok(()) };
    let (redis, etcd) = fleet.up();
    if let Some(up) = redis {
        gauge(
            enc,
            "hopgate_fleet_redis_up",
            "Whether the shared session store answers.",
            i64::from(up),
        )?;
    }
    if let Some(up) = etcd {
        gauge(
            enc,
            "hopgate_fleet_etcd_up",
            "Whether etcd (config, discovery, actions) answers.",
            i64::from(up),
        )?;
    }
    if let Some(e) = fleet.etcd() {
        if let Some(quorum) = e.quorum() {
            gauge(
                enc,
                "hopgate_fleet_etcd_quorum",
                "Whether a reachable etcd member knows a leader (the cluster can take writes), as last probed.",
                i64::from(quorum),
            )?;
            let (reachable, _) = e.members_reachable();
            gauge(
                enc,
                "hopgate_fleet_etcd_members_reachable",
                "etcd members that answered the last status probe.",
                i64::try_from(reachable).unwrap_or(i64::MAX),
            )?;
        }
        counter(
            enc,
            "hopgate_fleet_discovery_removals_deferred",
            "Node removals held back because they would have emptied a healthy service.",
            e.deferred_removals(),
        )?;
    }
    Ok(())
}
