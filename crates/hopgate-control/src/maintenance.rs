//! Maintenance intake and connection handoff.
//!
//! Owns the single intake every source calls ([`Maintenance::intake`]: the
//! admin API, and the `Hop-Maintenance` response header through a channel
//! from the data plane): mode check, validation, per-node de-duplication by
//! sequence number (bounded by the number of nodes), pre-hooks (which may
//! change or drop a notification), applying it, post-hooks (built in: a
//! log line and counters). Applying means:
//!
//! - MIGRATING / FAILING_OVER: relaxed timeouts for the node and no passive
//!   ejection, for at most `max_relaxed` (a start without an end expires —
//!   go-redis can stay relaxed forever);
//! - MIGRATED / FAILED_OVER: normal timeouts again, after any post-handoff
//!   window;
//! - MOVING to=X in=T: the node keeps its identity (sessions stay bound);
//!   new requests go to X at once; idle pooled connections are closed and as
//!   many are dialled to X by handoff workers; busy ones finish on the old
//!   address and are not reused; what is left on the old address is closed
//!   after T; connections to X get relaxed timeouts for
//!   `post_handoff_relaxed`. Without `to`: reconnect to the same address
//!   after T/2.
//!
//! Handoff: a bounded queue, workers started on demand up to a maximum
//! (sized from the pool like go-redis does) and exiting after 15 s idle,
//! each dial bounded by `handoff_timeout`, at most `max_handoff_retries`
//! attempts with a delay of a third of the time left before T (at least
//! 500 ms), and a per-endpoint circuit breaker on dial failures: core's
//! [`Breaker`], the one nodes use, so its open → half-open step happens
//! where it is asked (`try_acquire`). A full queue
//! is logged and counted, never a panic: the connection is simply dialled
//! lazily by the next request. When every attempt to reach X failed, the
//! node is marked unreachable so its sessions hop.
//!
//! Must not touch: the request path (it only reads the node state this
//! module writes) and the snapshot (read only).

pub(crate) mod notice;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use tokio::sync::mpsc;

use hopgate_core::config::{CircuitConfig, MaintenanceConfig, MaintenanceMode};
use hopgate_core::maintenance::{self, Kind, Notification};
use hopgate_core::node::{now_ms, Breaker, NodeKey, NodeState};
use hopgate_proxy::SharedSnapshot;

use crate::control::CarriedNotice;
use hopgate_proxy::{Pool, PoolSettings};

/// Why a notification was not applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Refused {
    Disabled,
    Invalid(String),
    UnknownNode,
    /// Sequence number not above the last one seen for the node.
    Duplicate {
        last_seq: u64,
    },
    DroppedByHook,
    /// In-band (`Hop-Maintenance`), but the service does not take in-band
    /// notices (`services[].maintenance.in_band`).
    InBandOff,
    /// In-band, and `seq` is more than `max_jump` above the last one seen
    /// for the node (`services[].maintenance.max_seq_jump`).
    SeqJump {
        last_seq: u64,
        max_jump: u64,
    },
    /// In-band MOVING whose `to=` is outside
    /// `services[].maintenance.allow_to_cidrs`.
    ToNotAllowed {
        to: SocketAddr,
    },
}

/// Where a notification came from: an operator (the admin API, or another
/// replica's admin API through the fleet) is trusted as given; a backend's
/// `Hop-Maintenance` header is bound by its service's `maintenance`
/// settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Operator,
    InBand,
}

impl Refused {
    pub fn label(&self) -> &'static str {
        match self {
            Refused::Disabled => "disabled",
            Refused::Invalid(_) => "invalid",
            Refused::UnknownNode => "unknown_node",
            Refused::Duplicate { .. } => "duplicate",
            Refused::DroppedByHook => "dropped_by_hook",
            Refused::InBandOff => "in_band_off",
            Refused::SeqJump { .. } => "seq_jump",
            Refused::ToNotAllowed { .. } => "to_not_allowed",
        }
    }
}

/// What applying a notification did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub kind: Kind,
    pub action: String,
}

/// A pre-hook: may change the notification, or drop it (`None`).
pub(crate) type PreHook = Box<dyn Fn(Notification) -> Option<Notification> + Send + Sync>;
/// A post-hook: sees every notification that reached the handler, and the result.
pub(crate) type PostHook = Box<dyn Fn(&Notification, &Result<Applied, Refused>) + Send + Sync>;

/// Counters of the maintenance machinery.
#[derive(Default, Debug)]
pub struct MaintStats {
    /// (kind, result label) → count.
    pub notifications: Mutex<BTreeMap<(String, &'static str), u64>>,
    pub malformed_headers: AtomicU64,
    pub handoffs_ok: AtomicU64,
    pub handoff_attempts_failed: AtomicU64,
    pub handoffs_exhausted: AtomicU64,
    pub handoff_queue_full: AtomicU64,
    pub handoff_breaker_rejections: AtomicU64,
    pub workers: AtomicUsize,
}

/// The maintenance intake.
pub struct Maintenance {
    snapshot: SharedSnapshot,
    cfg: RwLock<MaintenanceConfig>,
    seen: Mutex<HashMap<NodeKey, u64>>,
    /// Per node: relaxed timeouts last at least until here (post-handoff).
    post_handoff: Mutex<HashMap<NodeKey, u64>>,
    pre: RwLock<Vec<PreHook>>,
    post: RwLock<Vec<PostHook>>,
    pub stats: Arc<MaintStats>,
    handoff: Handoff,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Handoff workers: the configured number, else go-redis's sizing from the
/// pool size `p` (`min(p/2, max(10, p/3))`, at least 1). A configured value
/// is used as given — never silently raised (go-redis raises it to `p/2`).
pub(crate) fn worker_count(p: usize, configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    (p / 2).min((p / 3).max(10)).max(1)
}

/// Handoff queue: the configured size, else go-redis's sizing from workers
/// `w` and pool size `p` (`max(20w, p)` capped at `5p`, at least 2).
pub(crate) fn queue_size(w: usize, p: usize, configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    (20 * w).max(p).min((5 * p).max(2)).max(2)
}

impl Maintenance {
    /// `pool_size`: the largest `pool.max_idle` of the services at start.
    pub fn new(
        snapshot: SharedSnapshot,
        cfg: MaintenanceConfig,
        pool_size: usize,
    ) -> Arc<Maintenance> {
        let workers = worker_count(pool_size, cfg.workers);
        let queue = queue_size(workers, pool_size, cfg.queue);
        let stats = Arc::new(MaintStats::default());
        let m = Maintenance {
            snapshot,
            cfg: RwLock::new(cfg),
            seen: Mutex::new(HashMap::new()),
            post_handoff: Mutex::new(HashMap::new()),
            pre: RwLock::new(Vec::new()),
            post: RwLock::new(Vec::new()),
            handoff: Handoff::new(queue, workers, Arc::clone(&stats)),
            stats,
        };
        // Built-in post-hooks: a log line and counters for every notification.
        m.add_post_hook(Box::new(|n, r| match r {
            Ok(a) => tracing::info!(service = %n.service, node = %n.node, kind = %n.kind, seq = n.seq, action = %a.action, "maintenance notification applied"),
            Err(e) => tracing::warn!(service = %n.service, node = %n.node, kind = %n.kind, seq = n.seq, refused = e.label(), "maintenance notification not applied"),
        }));
        let counts = Arc::clone(&m.stats);
        m.add_post_hook(Box::new(move |n, r| {
            let label = match r {
                Ok(_) => "applied",
                Err(e) => e.label(),
            };
            *counts
                .notifications
                .lock()
                .entry((n.kind.as_str().to_owned(), label))
                .or_insert(0) += 1;
        }));
        tracing::info!(workers, queue, "maintenance handoff sized");
        Arc::new(m)
    }

    /// Adds the last sequence number seen per node to the maintenance state
    /// a new process resumes from (a node with only a sequence number gets
    /// an entry of its own, so a repeated notice stays a duplicate).
    pub fn carry(&self, notices: &mut Vec<CarriedNotice>) {
        for (key, &seq) in self.seen.lock().iter() {
            match notices
                .iter_mut()
                .find(|c| c.service == key.service && c.node == key.node)
            {
                Some(c) => c.seq = seq,
                None => notices.push(CarriedNotice {
                    service: key.service.clone(),
                    node: key.node.clone(),
                    seq,
                    moved_to: None,
                    relaxed_until: 0,
                }),
            }
        }
    }

    /// The sequence numbers the previous process had seen.
    pub fn restore(&self, notices: &[CarriedNotice]) {
        let mut seen = self.seen.lock();
        for c in notices.iter().filter(|c| c.seq > 0) {
            seen.insert(
                NodeKey {
                    service: c.service.clone(),
                    node: c.node.clone(),
                },
                c.seq,
            );
        }
    }

    /// Takes the settings of a newly applied config.
    pub fn set_config(&self, cfg: MaintenanceConfig) {
        *self.cfg.write() = cfg;
    }

    pub fn add_pre_hook(&self, hook: PreHook) {
        self.pre.write().push(hook);
    }

    pub fn add_post_hook(&self, hook: PostHook) {
        self.post.write().push(hook);
    }

    /// The entry point of the operator's sources (admin API, fleet): the
    /// notification is trusted as given.
    pub fn intake(self: &Arc<Self>, n: Notification) -> Result<Applied, Refused> {
        self.intake_from(n, Source::Operator)
    }

    /// The entry point of a backend's `Hop-Maintenance` header: refused
    /// unless the service takes in-band notices, its `seq` stays within
    /// `max_seq_jump` of the last one seen for the node, and a MOVING
    /// `to=` falls in `allow_to_cidrs`.
    pub fn intake_in_band(self: &Arc<Self>, n: Notification) -> Result<Applied, Refused> {
        self.intake_from(n, Source::InBand)
    }

    /// The one path every source takes.
    pub fn intake_from(
        self: &Arc<Self>,
        n: Notification,
        source: Source,
    ) -> Result<Applied, Refused> {
        let cfg = *self.cfg.read();
        if cfg.mode == MaintenanceMode::Disabled {
            let r = Err(Refused::Disabled);
            self.run_post(&n, &r);
            return r;
        }
        if let Err(e) = maintenance::check(&n) {
            let r = Err(Refused::Invalid(e));
            self.run_post(&n, &r);
            return r;
        }
        let mut n = n;
        for hook in self.pre.read().iter() {
            match hook(n.clone()) {
                Some(changed) => n = changed,
                None => return Err(Refused::DroppedByHook),
            }
        }
        let r = self.apply(&n, &cfg, source);
        self.run_post(&n, &r);
        r
    }

    fn run_post(&self, n: &Notification, r: &Result<Applied, Refused>) {
        for hook in self.post.read().iter() {
            hook(n, r);
        }
    }

    fn apply(
        self: &Arc<Self>,
        n: &Notification,
        cfg: &MaintenanceConfig,
        source: Source,
    ) -> Result<Applied, Refused> {
        let snap = self.snapshot.load_full();
        let Some(svc) = snap.services.iter().find(|s| s.name == n.service) else {
            return Err(Refused::UnknownNode);
        };
        let Some(node) = svc.nodes.iter().find(|x| x.id == n.node) else {
            return Err(Refused::UnknownNode);
        };
        let guard = (source == Source::InBand).then_some(&svc.maintenance);
        if let Some(g) = guard {
            if !g.in_band {
                return Err(Refused::InBandOff);
            }
            if let Some(to) = n.to.filter(|to| !g.allows_to(to.ip())) {
                tracing::warn!(service = %n.service, node = %n.node, %to, "Hop-Maintenance MOVING refused: to= is outside services[].maintenance.allow_to_cidrs");
                return Err(Refused::ToNotAllowed { to });
            }
        }
        let key = node.state.key().clone();
        {
            let mut seen = self.seen.lock();
            let last = seen.get(&key).copied();
            if let Some(last) = last.filter(|&last| n.seq <= last) {
                return Err(Refused::Duplicate { last_seq: last });
            }
            if let Some(g) = guard {
                let last = last.unwrap_or(0);
                if n.seq - last > g.max_seq_jump {
                    tracing::warn!(service = %n.service, node = %n.node, seq = n.seq, last_seq = last, max_seq_jump = g.max_seq_jump, "Hop-Maintenance refused: seq jumps too far above the last one seen");
                    return Err(Refused::SeqJump {
                        last_seq: last,
                        max_jump: g.max_seq_jump,
                    });
                }
            }
            seen.insert(key.clone(), n.seq);
            // Bounded: forget nodes that left the config.
            let live = snap.services.iter().map(|s| s.nodes.len()).sum::<usize>();
            if seen.len() > 2 * live + 16 {
                seen.retain(|k, _| {
                    snap.services
                        .iter()
                        .any(|s| s.name == k.service && s.nodes.iter().any(|x| x.id == k.node))
                });
            }
        }
        let state = &node.state;
        let now = now_ms();
        let action = match n.kind {
            Kind::Migrating | Kind::FailingOver => {
                state.relax_until(now + cfg.max_relaxed.as_millis() as u64);
                format!(
                    "relaxed timeouts ({}s) for at most {}s",
                    cfg.relaxed_timeout.as_secs_f64(),
                    cfg.max_relaxed.as_secs()
                )
            }
            Kind::Migrated | Kind::FailedOver => {
                let post = self.post_handoff.lock().get(&key).copied().unwrap_or(0);
                state.unrelax_at(post.max(now));
                "normal timeouts".to_owned()
            }
            Kind::Moving => {
                let within = Duration::from_secs(n.in_secs.unwrap_or(0));
                let pool = Arc::clone(node.upstream.pool(svc.pool.max_idle));
                // Relaxed like a request to a relaxed node, but each dial
                // bounded by the handoff timeout.
                let settings = PoolSettings {
                    connect_timeout: cfg.handoff_timeout,
                    ..PoolSettings::of(&snap, svc).relaxed(cfg.relaxed_timeout)
                };
                match n.to {
                    Some(to) => {
                        state.set_moved_to(Some(to));
                        state.set_unreachable(false);
                        let post_until = now + cfg.post_handoff_relaxed.as_millis() as u64;
                        state.relax_until(post_until);
                        self.post_handoff.lock().insert(key.clone(), post_until);
                        let idle = pool.drain(within);
                        let group = Arc::new(JobGroup::default());
                        let deadline = Instant::now() + within;
                        for _ in 0..idle.max(1) {
                            self.handoff.submit(Job {
                                state: Arc::clone(state),
                                pool: Arc::clone(&pool),
                                endpoint: to,
                                settings,
                                attempt: 0,
                                max_attempts: cfg.max_handoff_retries,
                                timeout: cfg.handoff_timeout,
                                deadline,
                                group: Arc::clone(&group),
                                breaker: endpoint_breaker(cfg),
                            });
                        }
                        format!("moved to {to}; {idle} idle connections handed off; old ones closed in {}s", within.as_secs())
                    }
                    None => {
                        let half = within / 2;
                        tokio::spawn(async move {
                            tokio::time::sleep(half).await;
                            pool.mark_all_for_replacement();
                            tracing::info!(
                                "MOVING without an address: reconnected to the same address"
                            );
                        });
                        format!("reconnect to the same address in {}s", half.as_secs_f64())
                    }
                }
            }
        };
        Ok(Applied {
            kind: n.kind,
            action,
        })
    }
}

/// Jobs moving one node's connections share this.
#[derive(Default)]
struct JobGroup {
    succeeded: AtomicBool,
    failed: AtomicUsize,
}

struct Job {
    state: Arc<NodeState>,
    pool: Arc<Pool>,
    endpoint: SocketAddr,
    settings: PoolSettings,
    attempt: u32,
    max_attempts: u32,
    timeout: Duration,
    /// The MOVING deadline.
    deadline: Instant,
    group: Arc<JobGroup>,
    /// Parameters of the endpoint's dial breaker.
    breaker: CircuitConfig,
}

/// Probes a half-open endpoint breaker admits (and successes that close it).
const EP_PROBES: u32 = 3;

/// The per-endpoint dial breaker's parameters: `breaker_failures`
/// consecutive dial failures (default 5) open it for `breaker_reset` (60 s);
/// then the asking path turns it half-open and admits 3 probes; 3 successes
/// close it, a failure reopens it.
fn endpoint_breaker(cfg: &MaintenanceConfig) -> CircuitConfig {
    CircuitConfig {
        enabled: true,
        failure_threshold: cfg.breaker_failures,
        reset_timeout: cfg.breaker_reset,
        max_requests: EP_PROBES,
    }
}

/// Runs `f` on the dial breaker of `job`'s endpoint (created on first
/// use), tuned to the job's parameters.
fn with_breaker<R>(breakers: &Breakers, job: &Job, f: impl FnOnce(&Breaker) -> R) -> R {
    let mut map = breakers.lock();
    let b = map
        .entry(job.endpoint)
        .or_insert_with(|| Breaker::new(&job.breaker));
    b.configure(&job.breaker);
    f(b)
}

/// The dial breakers, one per endpoint.
type Breakers = Mutex<HashMap<SocketAddr, Breaker>>;

/// Bounded queue + on-demand workers + per-endpoint breakers.
struct Handoff {
    tx: mpsc::Sender<Job>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    max_workers: usize,
    stats: Arc<MaintStats>,
    breakers: Arc<Breakers>,
}

/// How long an idle handoff worker waits before it exits.
const WORKER_IDLE: Duration = Duration::from_secs(15);

impl Handoff {
    fn new(capacity: usize, max_workers: usize, stats: Arc<MaintStats>) -> Handoff {
        let (tx, rx) = mpsc::channel(capacity);
        Handoff {
            tx,
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
            max_workers,
            stats,
            breakers: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn submit(&self, job: Job) {
        submit(
            &self.tx,
            &self.rx,
            &self.stats,
            &self.breakers,
            self.max_workers,
            job,
        );
    }
}

fn submit(
    tx: &mpsc::Sender<Job>,
    rx: &Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    stats: &Arc<MaintStats>,
    breakers: &Arc<Breakers>,
    max_workers: usize,
    job: Job,
) {
    match tx.try_send(job) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(job)) | Err(mpsc::error::TrySendError::Closed(job)) => {
            stats.handoff_queue_full.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(endpoint = %job.endpoint, "handoff queue full; the connection will be dialled by the next request instead");
            return;
        }
    }
    // Start a worker if there is room.
    let n = stats.workers.load(Ordering::Relaxed);
    if n < max_workers
        && stats
            .workers
            .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        let (tx, rx, stats, breakers) = (
            tx.clone(),
            Arc::clone(rx),
            Arc::clone(stats),
            Arc::clone(breakers),
        );
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut r = rx.lock().await;
                    tokio::time::timeout(WORKER_IDLE, r.recv()).await
                };
                let job = match next {
                    Ok(Some(job)) => job,
                    _ => break,
                };
                run_job(job, &tx, &rx, &stats, &breakers, max_workers).await;
            }
            stats.workers.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

async fn run_job(
    mut job: Job,
    tx: &mpsc::Sender<Job>,
    rx: &Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    stats: &Arc<MaintStats>,
    breakers: &Arc<Breakers>,
    max_workers: usize,
) {
    let allowed = with_breaker(breakers, &job, |b| b.try_acquire(now_ms()).passed());
    if !allowed {
        stats
            .handoff_breaker_rejections
            .fetch_add(1, Ordering::Relaxed);
        finish_failed(&job, stats, "endpoint circuit open");
        return;
    }
    job.attempt += 1;
    let dialled =
        tokio::time::timeout(job.timeout, job.pool.prewarm(job.endpoint, &job.settings)).await;
    match dialled {
        Ok(Ok(())) => {
            with_breaker(breakers, &job, Breaker::success);
            stats.handoffs_ok.fetch_add(1, Ordering::Relaxed);
            job.group.succeeded.store(true, Ordering::Relaxed);
            job.state.set_unreachable(false);
        }
        failed => {
            with_breaker(breakers, &job, |b| b.failure(now_ms()));
            stats
                .handoff_attempts_failed
                .fetch_add(1, Ordering::Relaxed);
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => "handoff timeout".to_owned(),
            };
            if job.attempt >= job.max_attempts {
                finish_failed(&job, stats, &why);
                return;
            }
            // A third of the time left before the MOVING deadline, at least 500 ms.
            let left = job.deadline.saturating_duration_since(Instant::now());
            let delay = (left / 3).max(Duration::from_millis(500));
            tracing::debug!(endpoint = %job.endpoint, attempt = job.attempt, error = %why, ?delay, "handoff dial failed; retrying");
            let (tx, rx, stats, breakers) = (
                tx.clone(),
                Arc::clone(rx),
                Arc::clone(stats),
                Arc::clone(breakers),
            );
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                submit(&tx, &rx, &stats, &breakers, max_workers, job);
            });
        }
    }
}

fn finish_failed(job: &Job, stats: &MaintStats, why: &str) {
    stats.handoffs_exhausted.fetch_add(1, Ordering::Relaxed);
    job.group.failed.fetch_add(1, Ordering::Relaxed);
    let key = job.state.key();
    tracing::warn!(service = %key.service, node = %key.node, endpoint = %job.endpoint, error = %why, "handoff gave up on a connection");
    if !job.group.succeeded.load(Ordering::Relaxed) {
        // Nothing reached the new address: the node cannot serve; its
        // sessions hop to healthy nodes.
        job.state.set_unreachable(true);
        tracing::warn!(service = %key.service, node = %key.node, "node unreachable after MOVING; its sessions will hop");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intake_for_tests() -> Arc<Maintenance> {
        let text = "listeners: [ { name: p, address: 127.0.0.1:0 } ]\nadmin: { address: 127.0.0.1:0 }\nservices: [ { name: s, nodes: [ { id: a, address: 127.0.0.1:9 } ] } ]\nroutes: [ { id: r, service: s } ]\n";
        let cfg = hopgate_core::config::load(text, hopgate_core::config::Format::Yaml).unwrap();
        let registry = hopgate_proxy::NodeRegistry::default();
        let snap = hopgate_proxy::Snapshot::compile(Arc::new(cfg.clone()), 1, &registry, None);
        let shared = Arc::new(arc_swap::ArcSwap::from_pointee(snap));
        Maintenance::new(shared, cfg.maintenance, 64)
    }

    fn note(kind: Kind, seq: u64) -> Notification {
        Notification {
            service: "s".into(),
            node: "a".into(),
            kind,
            seq,
            to: None,
            in_secs: None,
        }
    }

    #[test]
    fn hooks_see_modify_and_drop() {
        let m = intake_for_tests();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = Arc::clone(&seen);
        m.add_post_hook(Box::new(move |n, r| s2.lock().push((n.seq, r.is_ok()))));
        // A pre-hook that drops seq 13 and renumbers seq 20 to 21.
        m.add_pre_hook(Box::new(|mut n| match n.seq {
            13 => None,
            20 => {
                n.seq = 21;
                Some(n)
            }
            _ => Some(n),
        }));
        assert_eq!(
            m.intake(note(Kind::Migrating, 13)),
            Err(Refused::DroppedByHook)
        );
        assert!(m.intake(note(Kind::Migrating, 20)).is_ok());
        assert_eq!(
            m.intake(note(Kind::Migrated, 21)),
            Err(Refused::Duplicate { last_seq: 21 }),
            "the hook's renumbering was applied"
        );
        assert_eq!(
            *seen.lock(),
            vec![(21, true), (21, false)],
            "post-hooks see what reached the handler, dropped ones not"
        );
        assert_eq!(
            m.intake(note(Kind::Migrating, 0)),
            Err(Refused::Invalid("seq must be at least 1".into()))
        );
    }

    #[test]
    fn relaxed_without_an_end_expires() {
        let m = intake_for_tests();
        let mut cfg = *m.cfg.read();
        cfg.max_relaxed = Duration::from_millis(1);
        m.set_config(cfg);
        m.intake(note(Kind::Migrating, 1)).unwrap();
        let state = Arc::clone(&m.snapshot.load().services[0].nodes[0].state);
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !state.is_relaxed(now_ms()),
            "a start without an end does not relax forever"
        );
    }

    #[test]
    fn sizing_follows_go_redis() {
        assert_eq!(worker_count(100, 0), 33);
        assert_eq!(queue_size(33, 100, 0), 500);
        assert_eq!(worker_count(64, 0), 21);
        // The default pool (docs/maintenance.md quotes these).
        assert_eq!(worker_count(256, 0), 85);
        assert_eq!(queue_size(85, 256, 0), 1280);
        assert_eq!(worker_count(1, 0), 1);
        assert!(queue_size(1, 1, 0) >= 2);
        assert_eq!(worker_count(10, 20), 20);
        assert_eq!(
            worker_count(100, 3),
            3,
            "a configured value is used as given"
        );
        assert_eq!(queue_size(5, 100, 300), 300);
        assert_eq!(queue_size(5, 100, 7), 7);
    }

    #[test]
    fn endpoint_breaker_really_half_opens() {
        let cfg = MaintenanceConfig::default();
        let p = endpoint_breaker(&cfg);
        assert_eq!(
            (p.failure_threshold, p.reset_timeout),
            (5, Duration::from_secs(60))
        );
        let b = Breaker::new(&p);
        let t0 = now_ms();
        let reset = p.reset_timeout.as_millis() as u64;
        for _ in 0..p.failure_threshold {
            assert!(b.try_acquire(t0).passed());
            b.failure(t0);
        }
        assert!(!b.try_acquire(t0).passed(), "open");
        let later = t0 + reset;
        for _ in 0..EP_PROBES {
            assert!(b.try_acquire(later).passed(), "half-open admits probes");
        }
        assert!(!b.try_acquire(later).passed(), "only max probes");
        b.failure(later);
        assert!(
            !b.try_acquire(later + 1000).passed(),
            "a half-open failure reopens"
        );
        let again = later + reset;
        assert!(b.try_acquire(again).passed());
        for _ in 0..EP_PROBES {
            b.success();
        }
        assert!((0..4).all(|_| b.try_acquire(again).passed()), "closed");
    }
}
