//! Prometheus text exposition of the gateway's counters (`GET /metrics` on
//! the admin listener).
//!
//! Owns the metric names and the rendering; reads the data plane's atomics
//! ([`hopgate_proxy::metrics::METRICS`]), node live state, pool stats, the
//! control plane's reload counters and the session store size. Must not
//! touch: any of those values (read only).

use std::fmt::Write;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::Full;

use hopgate_core::error::Side;
use hopgate_core::node::{now_ms, CircuitState, Health};
use hopgate_core::stats::{AtomicHistogram, DURATION_BUCKETS};
use hopgate_proxy::metrics::{
    get, TokenRejection, ERROR_KIND_LIST, HOP_BUCKETS, METRICS, QUEUE_WAIT_BUCKETS,
};
use hopgate_store::Sessions;

use crate::control::Control;
use crate::fleet::Fleet;
use crate::maintenance::Maintenance;

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The whole exposition.
pub(crate) fn render(
    control: &Control,
    sessions: Option<&Sessions>,
    maintenance: Option<&Maintenance>,
    fleet: Option<&Fleet>,
) -> Response<Full<Bytes>> {
    let m = &*METRICS;
    let mut o = String::with_capacity(8 << 10);
    head(
        &mut o,
        "hopgate_requests_total",
        "counter",
        "Client requests handled.",
    );
    let _ = writeln!(o, "hopgate_requests_total {}", get(&m.requests));
    head(
        &mut o,
        "hopgate_responses_total",
        "counter",
        "Client responses by status class.",
    );
    for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
        let _ = writeln!(
            o,
            "hopgate_responses_total{{class=\"{class}\"}} {}",
            get(&m.responses[i + 1])
        );
    }
    head(
        &mut o,
        "hopgate_errors_total",
        "counter",
        "Requests that ended in an error the gateway answered, by kind.",
    );
    for (i, k) in ERROR_KIND_LIST.iter().enumerate() {
        let _ = writeln!(
            o,
            "hopgate_errors_total{{kind=\"{}\"}} {}",
            k.label(),
            get(&m.upstream_errors[i])
        );
    }
    head(
        &mut o,
        "hopgate_client_errors_total",
        "counter",
        "Requests the client got wrong (the subset of hopgate_errors_total on the client's side); never charged to a node.",
    );
    for (i, k) in ERROR_KIND_LIST.iter().enumerate() {
        if k.side() == Side::Downstream {
            let _ = writeln!(
                o,
                "hopgate_client_errors_total{{kind=\"{}\"}} {}",
                k.label(),
                get(&m.upstream_errors[i])
            );
        }
    }
    head(
        &mut o,
        "hopgate_retries_total",
        "counter",
        "Attempts after the first, on another node.",
    );
    let _ = writeln!(o, "hopgate_retries_total {}", get(&m.retries));
    head(
        &mut o,
        "hopgate_last_resort_picks_total",
        "counter",
        "Attempts on nodes only passive verdicts kept out, when nothing else was left.",
    );
    let _ = writeln!(
        o,
        "hopgate_last_resort_picks_total {}",
        get(&m.last_resort_picks)
    );
    head(
        &mut o,
        "hopgate_access_log_dropped_total",
        "counter",
        "Access log lines dropped because the log's buffer was full (its destination, stderr or access_log.path, slower than the traffic); requests never wait for the log.",
    );
    let _ = writeln!(
        o,
        "hopgate_access_log_dropped_total {}",
        get(&m.access_log_dropped)
    );

    head(
        &mut o,
        "hopgate_sessions_created_total",
        "counter",
        "Sessions minted.",
    );
    let _ = writeln!(
        o,
        "hopgate_sessions_created_total {}",
        get(&m.sessions_created)
    );
    head(
        &mut o,
        "hopgate_session_tokens_rejected_total",
        "counter",
        "Session tokens not trusted (replaced by a new session), by reason.",
    );
    for r in TokenRejection::ALL {
        let _ = writeln!(
            o,
            "hopgate_session_tokens_rejected_total{{reason=\"{}\"}} {}",
            r.label(),
            get(&m.tokens_rejected[r as usize])
        );
    }
    head(
        &mut o,
        "hopgate_sessions",
        "gauge",
        "Session bindings in the store.",
    );
    let _ = writeln!(
        o,
        "hopgate_sessions {}",
        sessions.map_or(0, |s| s.store.len())
    );
    head(
        &mut o,
        "hopgate_session_evictions_total",
        "counter",
        "Session bindings evicted (least recently used) to bind new sessions in a full store.",
    );
    let _ = writeln!(
        o,
        "hopgate_session_evictions_total {}",
        sessions.map_or(0, |s| s.store.evictions())
    );
    head(
        &mut o,
        "hopgate_session_contexts_total",
        "counter",
        "Hop-Session-Context headers stored, refused as oversized, and delivered after a hop.",
    );
    let _ = writeln!(
        o,
        "hopgate_session_contexts_total{{event=\"stored\"}} {}",
        get(&m.contexts_stored)
    );
    let _ = writeln!(
        o,
        "hopgate_session_contexts_total{{event=\"oversized\"}} {}",
        get(&m.contexts_oversized)
    );
    let _ = writeln!(
        o,
        "hopgate_session_contexts_total{{event=\"delivered\"}} {}",
        get(&m.contexts_delivered)
    );

    head(
        &mut o,
        "hopgate_hops_total",
        "counter",
        "Sessions moved to another node, by service and reason.",
    );
    for (svc, reason, n) in m.hops_by_reason() {
        let _ = writeln!(
            o,
            "hopgate_hops_total{{service=\"{}\",reason=\"{reason}\"}} {n}",
            esc(&svc)
        );
    }
    head(
        &mut o,
        "hopgate_hop_duration_seconds",
        "histogram",
        "From the hop decision to the new node's answer.",
    );
    let (buckets, count, sum) = m.hop_histogram();
    for (i, le) in HOP_BUCKETS.iter().enumerate() {
        let _ = writeln!(
            o,
            "hopgate_hop_duration_seconds_bucket{{le=\"{le}\"}} {}",
            buckets[i]
        );
    }
    let _ = writeln!(
        o,
        "hopgate_hop_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
    );
    let _ = writeln!(o, "hopgate_hop_duration_seconds_sum {sum}");
    let _ = writeln!(o, "hopgate_hop_duration_seconds_count {count}");

    let snap = control.snapshot().load();
    let now = now_ms();
    head(
        &mut o,
        "hopgate_node_up",
        "gauge",
        "1 when the node may take new requests.",
    );
    let mut health = String::new();
    let mut circuit = String::new();
    let mut draining = String::new();
    let mut inflight = String::new();
    let mut pool = String::new();
    let mut queue = String::new();
    let mut queue_waits = String::new();
    let mut queue_rejected = String::new();
    for svc in &snap.services {
        for n in &svc.nodes {
            let l = format!("service=\"{}\",node=\"{}\"", esc(&svc.name), esc(&n.id));
            let s = &n.state;
            let _ = writeln!(
                o,
                "hopgate_node_up{{{l}}} {}",
                u8::from(s.is_available(now))
            );
            let h = match s.health() {
                Health::Unknown => 0,
                Health::Healthy => 1,
                Health::Unhealthy => 2,
            };
            let _ = writeln!(health, "hopgate_node_health{{{l}}} {h}");
            let c = match s.circuit() {
                CircuitState::Closed => 0,
                CircuitState::Open => 1,
                CircuitState::HalfOpen => 2,
            };
            let _ = writeln!(circuit, "hopgate_node_circuit{{{l}}} {c}");
            let _ = writeln!(
                draining,
                "hopgate_node_draining{{{l}}} {}",
                u8::from(s.is_draining())
            );
            let _ = writeln!(inflight, "hopgate_node_in_flight{{{l}}} {}", s.in_flight());
            if let Some(p) = n.upstream.pool_if_set() {
                let st = p.stats();
                let _ = writeln!(
                    pool,
                    "hopgate_pool_connections{{{l},state=\"open\"}} {}",
                    st.open
                );
                let _ = writeln!(
                    pool,
                    "hopgate_pool_connections{{{l},state=\"idle\"}} {}",
                    st.idle
                );
                let _ = writeln!(queue, "hopgate_pool_queue_depth{{{l}}} {}", st.queued);
                let _ = writeln!(
                    queue_waits,
                    "hopgate_pool_queue_waits_total{{{l}}} {}",
                    st.queue_waits
                );
                let _ = writeln!(
                    queue_rejected,
                    "hopgate_pool_queue_rejected_total{{{l},reason=\"full\"}} {}",
                    st.queue_full
                );
                let _ = writeln!(
                    queue_rejected,
                    "hopgate_pool_queue_rejected_total{{{l},reason=\"timeout\"}} {}",
                    st.queue_timeouts
                );
            }
        }
    }
    head(
        &mut o,
        "hopgate_node_health",
        "gauge",
        "Active health: 0 unknown, 1 healthy, 2 unhealthy.",
    );
    o.push_str(&health);
    head(
        &mut o,
        "hopgate_node_circuit",
        "gauge",
        "Circuit breaker: 0 closed, 1 open, 2 half-open.",
    );
    o.push_str(&circuit);
    head(
        &mut o,
        "hopgate_node_draining",
        "gauge",
        "1 while the node drains.",
    );
    o.push_str(&draining);
    head(
        &mut o,
        "hopgate_node_in_flight",
        "gauge",
        "Requests in flight to the node.",
    );
    o.push_str(&inflight);
    head(
        &mut o,
        "hopgate_pool_connections",
        "gauge",
        "Upstream connections of the node's pool.",
    );
    o.push_str(&pool);
    head(
        &mut o,
        "hopgate_pool_queue_depth",
        "gauge",
        "Requests waiting for an upstream connection to the node (pool.max_connections reached).",
    );
    o.push_str(&queue);
    head(
        &mut o,
        "hopgate_pool_queue_waits_total",
        "counter",
        "Requests that had to wait for an upstream connection to the node.",
    );
    o.push_str(&queue_waits);
    head(
        &mut o,
        "hopgate_pool_queue_rejected_total",
        "counter",
        "Requests the node's queue turned away (503, tried on another node): full (pool.max_pending) or timeout (pool.queue_timeout).",
    );
    o.push_str(&queue_rejected);
    head(
        &mut o,
        "hopgate_pool_queue_wait_seconds",
        "histogram",
        "Time requests spent waiting for an upstream connection, admitted or not.",
    );
    for (i, le) in QUEUE_WAIT_BUCKETS.iter().enumerate() {
        let _ = writeln!(
            o,
            "hopgate_pool_queue_wait_seconds_bucket{{le=\"{le}\"}} {}",
            get(&m.queue_wait_buckets[i])
        );
    }
    let waits = get(&m.queue_wait_count);
    let _ = writeln!(
        o,
        "hopgate_pool_queue_wait_seconds_bucket{{le=\"+Inf\"}} {waits}"
    );
    let _ = writeln!(
        o,
        "hopgate_pool_queue_wait_seconds_sum {}",
        get(&m.queue_wait_sum_us) as f64 / 1e6
    );
    let _ = writeln!(o, "hopgate_pool_queue_wait_seconds_count {waits}");

    head(
        &mut o,
        "hopgate_maintenance_notifications_total",
        "counter",
        "Maintenance notifications by kind and result.",
    );
    if let Some(mt) = maintenance {
        for ((kind, result), n) in mt.stats.notifications.lock().iter() {
            let _ = writeln!(o, "hopgate_maintenance_notifications_total{{kind=\"{kind}\",result=\"{result}\"}} {n}");
        }
    }
    head(
        &mut o,
        "hopgate_maintenance_headers_ignored_total",
        "counter",
        "Hop-Maintenance headers ignored, by reason.",
    );
    let _ = writeln!(
        o,
        "hopgate_maintenance_headers_ignored_total{{reason=\"malformed\"}} {}",
        get(&m.maintenance_malformed)
    );
    let _ = writeln!(
        o,
        "hopgate_maintenance_headers_ignored_total{{reason=\"queue_full\"}} {}",
        get(&m.maintenance_dropped)
    );
    let _ = writeln!(
        o,
        "hopgate_maintenance_headers_ignored_total{{reason=\"in_band_off\"}} {}",
        get(&m.maintenance_in_band_off)
    );
    let _ = writeln!(
        o,
        "hopgate_maintenance_headers_ignored_total{{reason=\"request_carried\"}} {}",
        get(&m.maintenance_request_carried)
    );
    if let Some(mt) = maintenance {
        let st = &mt.stats;
        head(
            &mut o,
            "hopgate_handoffs_total",
            "counter",
            "Connection handoffs by outcome.",
        );
        let _ = writeln!(
            o,
            "hopgate_handoffs_total{{outcome=\"ok\"}} {}",
            get(&st.handoffs_ok)
        );
        let _ = writeln!(
            o,
            "hopgate_handoffs_total{{outcome=\"attempt_failed\"}} {}",
            get(&st.handoff_attempts_failed)
        );
        let _ = writeln!(
            o,
            "hopgate_handoffs_total{{outcome=\"exhausted\"}} {}",
            get(&st.handoffs_exhausted)
        );
        let _ = writeln!(
            o,
            "hopgate_handoffs_total{{outcome=\"queue_full\"}} {}",
            get(&st.handoff_queue_full)
        );
        let _ = writeln!(
            o,
            "hopgate_handoffs_total{{outcome=\"breaker_open\"}} {}",
            get(&st.handoff_breaker_rejections)
        );
        head(
            &mut o,
            "hopgate_handoff_workers",
            "gauge",
            "Handoff workers running.",
        );
        let _ = writeln!(
            o,
            "hopgate_handoff_workers {}",
            st.workers.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    head(
        &mut o,
        "hopgate_config_version",
        "gauge",
        "Version of the running config.",
    );
    let _ = writeln!(o, "hopgate_config_version {}", snap.version);
    head(
        &mut o,
        "hopgate_config_reloads_total",
        "counter",
        "Configs applied after the first.",
    );
    let _ = writeln!(o, "hopgate_config_reloads_total {}", control.reloads());
    head(
        &mut o,
        "hopgate_config_reload_failures_total",
        "counter",
        "Configs rejected (the running one kept).",
    );
    let _ = writeln!(
        o,
        "hopgate_config_reload_failures_total {}",
        control.reload_failures()
    );
    fleet_section(&mut o, fleet);
    traffic_section(&mut o, &snap);
    hopgate_proxy::tls::metrics::render(&mut o);
    control.canary.render_metrics(&mut o);

    let mut r = Response::new(Full::new(Bytes::from(o)));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// One histogram's series: `labels` (already escaped, comma-joined) on
/// every sample.
fn histogram(o: &mut String, name: &str, labels: &str, h: &AtomicHistogram) {
    let (buckets, count, sum) = h.read();
    for (le, n) in DURATION_BUCKETS.iter().zip(buckets) {
        let _ = writeln!(o, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(o, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
    let _ = writeln!(o, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(o, "{name}_count{{{labels}}} {count}");
}

/// The commit the binary was built from, set once at start
/// ([`set_build_commit`]).
static BUILD_COMMIT: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names the commit in `hopgate_build_info` (the binary knows it; this
/// crate does not).
pub fn set_build_commit(commit: &'static str) {
    let _ = BUILD_COMMIT.set(commit);
}

/// The build, connections and bytes, and the per-route families (the
/// route stats of the running snapshot, labelled with the route and its
/// service).
fn traffic_section(o: &mut String, snap: &hopgate_proxy::Snapshot) {
    let m = &*METRICS;
    head(
        o,
        "hopgate_build_info",
        "gauge",
        "Always 1; the labels name the running build.",
    );
    let _ = writeln!(
        o,
        "hopgate_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        esc(BUILD_COMMIT.get().copied().unwrap_or("unknown"))
    );
    let counters = [
        (
            "hopgate_connections_accepted_total",
            "Client connections accepted by the listeners.",
            &m.connections_accepted,
        ),
        (
            "hopgate_client_bytes_received_total",
            "Bytes read from client connections (listeners and the admin API), as sent.",
            &m.client_bytes_received,
        ),
        (
            "hopgate_client_bytes_sent_total",
            "Bytes written to client connections (listeners and the admin API).",
            &m.client_bytes_sent,
        ),
    ];
    for (name, help, c) in counters {
        head(o, name, "counter", help);
        let _ = writeln!(o, "{name} {}", get(c));
    }
    head(
        o,
        "hopgate_connections_open",
        "gauge",
        "Client connections of the listeners open now.",
    );
    let _ = writeln!(o, "hopgate_connections_open {}", get(&m.connections_open));

    head(
        o,
        "hopgate_route_responses_total",
        "counter",
        "Responses by route, its service and status class (requests that matched a route).",
    );
    let labels: Vec<String> = snap
        .routes
        .iter()
        .map(|r| {
            let svc = snap.services.get(r.service).map_or("", |s| s.name.as_str());
            format!("route=\"{}\",service=\"{}\"", esc(&r.id), esc(svc))
        })
        .collect();
    for (r, l) in snap.routes.iter().zip(&labels) {
        for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
            let _ = writeln!(
                o,
                "hopgate_route_responses_total{{{l},class=\"{class}\"}} {}",
                get(&r.stats.responses[i])
            );
        }
    }
    head(
        o,
        "hopgate_request_duration_seconds",
        "histogram",
        "From a request's arrival to its response head, by route and service.",
    );
    for (r, l) in snap.routes.iter().zip(&labels) {
        histogram(o, "hopgate_request_duration_seconds", l, &r.stats.duration);
    }
    head(
        o,
        "hopgate_upstream_duration_seconds",
        "histogram",
        "From sending a request to a node to its answer's head or failure, per attempt, by route and service.",
    );
    for (r, l) in snap.routes.iter().zip(&labels) {
        histogram(o, "hopgate_upstream_duration_seconds", l, &r.stats.upstream);
    }
}

/// `hopgate_fleet_*`: 1 up, 0 down; absent when that engine is off.
fn fleet_section(o: &mut String, fleet: Option<&Fleet>) {
    let Some(fleet) = fleet else { return };
    let (redis, etcd) = fleet.up();
    let gauges = [
        ("hopgate_fleet_redis_up", "the shared session store", redis),
        (
            "hopgate_fleet_etcd_up",
            "etcd (config, discovery, actions)",
            etcd,
        ),
    ];
    for (name, what, up) in gauges {
        if let Some(up) = up {
            head(o, name, "gauge", &format!("Whether {what} answers."));
            let _ = writeln!(o, "{name} {}", u8::from(up));
        }
    }
    if let Some(e) = fleet.etcd() {
        head(
            o,
            "hopgate_fleet_discovery_removals_deferred_total",
            "counter",
            "Node removals held back because they would have emptied a healthy service.",
        );
        let _ = writeln!(
            o,
            "hopgate_fleet_discovery_removals_deferred_total {}",
            e.deferred_removals()
        );
    }
}
