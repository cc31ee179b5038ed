//! Config canaries: a new config compiled beside the running one, a share
//! of the clients sent to it, a judge that compares both sides and rolls
//! the canary back or promotes it.
//!
//! Owns [`CanaryState`] (the baking or last decided canary, the decision
//! counters and their `/metrics` families, [`CanaryCollector`]), starting a canary
//! ([`start`]: validated and compiled exactly like an apply), the judge
//! task ([`judge`]: every `canary.interval`, over a sliding
//! `canary.window`), the verdict rule ([`verdict`]), ending a canary
//! ([`end_locked`]: promoted to a normal new version, or rolled back /
//! aborted with its nodes drained; each decision logged, counted and kept
//! in the version history), the admin API's answer ([`status_json`]) and
//! a baking canary as an upgrade or `state_dir` carries it ([`CarriedCanary`]).
//! Must not touch: the request path (it reads the arm this module installs
//! in the data plane's [`CanarySlot`]), sockets.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use serde_json::{json, Value};

use hopgate_core::config::{CanaryConfig, ConfigError, Format, RawConfig};
use hopgate_core::node::Health;
use hopgate_core::units;
use hopgate_proxy::Snapshot;
use hopgate_proxy::{CanaryArm, CanarySlot, SideCounts};

use crate::control::{content_hash, CanaryNote, Control, VersionRecord};
use crate::exposition::{counter, counters, gauge};

pub(crate) mod fleet;

/// Where a canary is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Promoted,
    RolledBack,
    Aborted,
}

impl Decision {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Decision::Promoted => "promoted",
            Decision::RolledBack => "rolled_back",
            Decision::Aborted => "aborted",
        }
    }

    pub(crate) fn from_label(s: &str) -> Option<Decision> {
        match s {
            "promoted" => Some(Decision::Promoted),
            "rolled_back" => Some(Decision::RolledBack),
            "aborted" => Some(Decision::Aborted),
            _ => None,
        }
    }
}

/// A canary started through etcd: its fleet-wide id and the revision of
/// the key that started it (the one compare-and-set that decides it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FleetRun {
    pub(crate) id: u64,
    pub(crate) revision: i64,
}

/// One canary, baking or decided.
struct Run {
    version: u64,
    percent: f64,
    bake: Duration,
    /// Unix milliseconds.
    started_ms: u64,
    /// `None` while baking.
    decision: Option<Decision>,
    reason: String,
    /// The data plane's view while baking.
    arm: Option<Arc<CanaryArm>>,
    raw: RawConfig,
    hash: String,
    /// Both sides' counts when it was decided (canary, baseline).
    totals: (SideCounts, SideCounts),
    /// Started through etcd (fleet mode).
    fleet: Option<FleetRun>,
}

/// A baking config canary.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct CarriedCanary {
    pub version: u64,
    pub percent: f64,
    /// Keys the side choice: the same clients stay on the same side.
    pub key: u64,
    /// When the bake ends (Unix milliseconds).
    pub bake_until: u64,
    pub raw: RawConfig,
}

/// The canary part of [`Control`].
#[derive(Default)]
pub(crate) struct CanaryState {
    slot: CanarySlot,
    run: Mutex<Option<Run>>,
    started: AtomicU64,
    promoted: AtomicU64,
    rolled_back: AtomicU64,
    aborted: AtomicU64,
}

impl CanaryState {
    /// The slot the request path loads the running canary from.
    pub(crate) fn slot(&self) -> CanarySlot {
        Arc::clone(&self.slot)
    }

    /// The baking canary's arm, if `version` still bakes.
    fn baking(&self, version: u64) -> Option<Arc<CanaryArm>> {
        self.run
            .lock()
            .as_ref()
            .filter(|r| r.version == version && r.decision.is_none())
            .and_then(|r| r.arm.clone())
    }

    /// The canary baking now, for a new process to resume (not one started
    /// through etcd: the fleet resumes those itself).
    pub(crate) fn carry(&self) -> Option<CarriedCanary> {
        let run = self.run.lock();
        let r = run
            .as_ref()
            .filter(|r| r.decision.is_none() && r.fleet.is_none())?;
        Some(CarriedCanary {
            version: r.version,
            percent: r.percent,
            key: r.arm.as_ref()?.key(),
            bake_until: r.started_ms + r.bake.as_millis() as u64,
            raw: r.raw.clone(),
        })
    }

    /// What [`CanaryState::carry`] depends on: the baking canary's version
    /// and bake.
    pub(crate) fn carry_mark(&self) -> Option<(u64, u64, u128)> {
        self.run
            .lock()
            .as_ref()
            .filter(|r| r.decision.is_none() && r.fleet.is_none())
            .map(|r| (r.version, r.started_ms, r.bake.as_millis()))
    }

    /// The fleet run of the canary baking now, and its local version.
    pub(crate) fn baking_fleet(&self) -> Option<(FleetRun, u64)> {
        self.run
            .lock()
            .as_ref()
            .filter(|r| r.decision.is_none())
            .and_then(|r| r.fleet.map(|f| (f, r.version)))
    }

    /// The fleet id of the last canary (baking or decided), its local
    /// version and whether it is decided.
    pub(crate) fn last_fleet(&self) -> Option<(FleetRun, u64, bool)> {
        self.run
            .lock()
            .as_ref()
            .and_then(|r| r.fleet.map(|f| (f, r.version, r.decision.is_some())))
    }

    /// A decided canary takes the fleet's decision (it ended here first,
    /// e.g. when the promoted document's apply arrived before the
    /// decision).
    pub(crate) fn relabel(
        &self,
        control: &Control,
        version: u64,
        decision: Decision,
        reason: &str,
    ) {
        let mut run = self.run.lock();
        let Some(r) = run.as_mut().filter(|r| r.version == version) else {
            return;
        };
        let Some(before) = r.decision.replace(decision) else {
            return;
        };
        if before != decision {
            self.counter(before).fetch_sub(1, Ordering::Relaxed);
            self.counter(decision).fetch_add(1, Ordering::Relaxed);
        }
        reason.clone_into(&mut r.reason);
        drop(run);
        control.renote_version(
            version,
            CanaryNote {
                state: decision.label(),
                reason: reason.to_owned(),
            },
        );
    }

    fn counter(&self, decision: Decision) -> &AtomicU64 {
        match decision {
            Decision::Promoted => &self.promoted,
            Decision::RolledBack => &self.rolled_back,
            Decision::Aborted => &self.aborted,
        }
    }

    /// The version of the canary baking now.
    pub(crate) fn baking_version(&self) -> Option<u64> {
        self.run
            .lock()
            .as_ref()
            .filter(|r| r.decision.is_none())
            .map(|r| r.version)
    }

    /// The canary families of `/metrics` (see [`CanaryCollector`]).
    fn encode_metrics(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        counter(
            enc,
            "hopgate_canary_started",
            "Config canaries started.",
            self.started.load(Ordering::Relaxed),
        )?;
        counters(
            enc,
            "hopgate_canary_decisions",
            "Config canaries decided, by outcome.",
            [
                ("promoted", &self.promoted),
                ("rolled_back", &self.rolled_back),
                ("aborted", &self.aborted),
            ]
            .map(|(outcome, n)| ([("outcome", outcome)], n.load(Ordering::Relaxed))),
        )?;
        gauge(
            enc,
            "hopgate_canary_baking",
            "1 while a config canary bakes.",
            i64::from(self.baking_version().is_some()),
        )
    }
}

/// The canary's decision counters and baking gauge, read at scrape time
/// (registered in the `/metrics` registry).
pub(crate) struct CanaryCollector(pub(crate) Arc<Control>);

impl std::fmt::Debug for CanaryCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CanaryCollector").finish_non_exhaustive()
    }
}

impl Collector for CanaryCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        self.0.canary.encode_metrics(&mut enc)
    }
}

/// A canary that was started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    pub(crate) version: u64,
    /// How the judge looks (the running config's `canary:`).
    pub(crate) judge: CanaryConfig,
    pub(crate) bake: Duration,
}

/// `percent` as the admin API takes it: a number above 0 and at most 100.
pub(crate) fn parse_percent(s: &str) -> Result<f64, ConfigError> {
    match s.trim().parse::<f64>() {
        Ok(p) if p.is_finite() && p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(ConfigError::new(
            "canary",
            format!("canary={s:?}: expected a percentage above 0 and at most 100"),
        )),
    }
}

/// `bake` as the admin API takes it: a duration from 1s to 24h.
pub(crate) fn parse_bake(s: &str) -> Result<Duration, ConfigError> {
    match units::parse_duration(s) {
        Ok(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(86_400) => Ok(d),
        Ok(_) => Err(ConfigError::new(
            "bake",
            format!("bake={s:?}: expected a duration from 1s to 24h"),
        )),
        Err(e) => Err(ConfigError::new("bake", format!("bake={s:?}: {e}"))),
    }
}

/// Validates and compiles `text` beside the running config and sends
/// `percent` % of the clients to it. A canary already baking is aborted.
/// `key` keys the side choice (the same on every replica of a fleet).
pub(crate) fn start(
    control: &Control,
    text: &str,
    format: Format,
    percent: f64,
    bake: Duration,
    key: u64,
) -> Result<Started, Vec<ConfigError>> {
    start_with(
        control,
        |c| c.load_locked(text, format),
        percent,
        bake,
        key,
        None,
    )
}

/// [`start`] with the document loaded by `load` (under the writer lock).
pub(crate) fn start_with(
    control: &Control,
    load: impl FnOnce(&Control) -> Result<hopgate_core::config::Config, Vec<ConfigError>>,
    percent: f64,
    bake: Duration,
    key: u64,
    fleet: Option<FleetRun>,
) -> Result<Started, Vec<ConfigError>> {
    let _writer = control.writer.lock();
    let source = format!("canary:{percent}%");
    let config = control
        .with_dns_nodes(load(control))
        .and_then(|c| control.read_files(c))
        .map_err(|e| control.rejected(e, &source))?;
    // Its services' upstream TLS files are read like an apply reads them
    // (the listeners keep the running config's certificates while baking).
    let tls = control
        .load_tls(&config)
        .map_err(|e| control.rejected(e, &source))?;
    // Its auth files are checked the same way; the baking side checks
    // against the running config's keys until it is promoted.
    control
        .load_auth(&config)
        .map_err(|e| control.rejected(e, &source))?;
    let current = control.snapshot().load_full();
    let hash = content_hash(&config.raw);
    if control.running_hash(current.version).as_deref() == Some(hash.as_str()) {
        return Err(vec![ConfigError::new(
            "canary",
            "the document equals the running config: there is nothing to try",
        )]);
    }
    let version = control.next_version.fetch_add(1, Ordering::Relaxed);
    end_locked(
        control,
        None,
        Decision::Aborted,
        format!("aborted: replaced by canary version {version}"),
    );
    let raw = config.raw.clone();
    let snap = Snapshot::compile(Arc::new(config), version, &control.registry, Some(&current));
    tls.install_upstreams(&snap);
    configure_new_nodes(&snap, &current);
    let judge = current.config.canary;
    let arm = Arc::new(CanaryArm::new(
        Arc::new(snap),
        current.version,
        percent,
        key,
    ));
    *control.canary.run.lock() = Some(Run {
        version,
        percent,
        bake,
        started_ms: unix_ms(),
        decision: None,
        reason: format!(
            "baking: {percent}% of clients for {}",
            units::format_duration(bake)
        ),
        arm: Some(Arc::clone(&arm)),
        raw,
        hash,
        totals: Default::default(),
        fleet,
    });
    control.canary.slot.store(Some(arm));
    control.canary.started.fetch_add(1, Ordering::Relaxed);
    tracing::info!(
        version,
        baseline = current.version,
        percent,
        bake = %units::format_duration(bake),
        "config canary started"
    );
    Ok(Started {
        version,
        judge,
        bake,
    })
}

/// Nodes the canary brings (not in the running snapshot) take their
/// parameters now; nodes both share keep the running config's until the
/// canary is promoted.
fn configure_new_nodes(canary: &Snapshot, current: &Snapshot) {
    for svc in &canary.services {
        for node in &svc.nodes {
            let shared = current
                .services
                .iter()
                .flat_map(|s| s.nodes.iter())
                .any(|n| Arc::ptr_eq(&n.state, &node.state));
            if shared {
                continue;
            }
            node.state.configure(&svc.circuit);
            if let Some(h) = &svc.health {
                if h.initial == Health::Healthy && node.state.health() == Health::Unknown {
                    node.state.set_health(Health::Healthy);
                }
            }
        }
    }
}

/// Unix milliseconds now.
pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Ends the baking canary (`version`, or whichever bakes when `None`) with
/// `decision`, the writer lock held. Promoted: its snapshot becomes the
/// running config as a normal new version. Otherwise the baseline stays and
/// the canary's own nodes drain. Either way the decision is logged,
/// counted and kept in the version history. False when nothing (or another
/// version) was baking.
pub(crate) fn end_locked(
    control: &Control,
    version: Option<u64>,
    decision: Decision,
    reason: String,
) -> bool {
    end_run(control, version, decision, reason, true)
}

/// An apply (of `hash`, from `source`) is about to swap in a new config:
/// a baking canary of the same document is promoted by it (in a fleet,
/// the promoted document arrives from etcd this way), any other is
/// aborted first.
pub(crate) fn end_for_apply(control: &Control, hash: &str, source: &str) {
    let same = control
        .canary
        .run
        .lock()
        .as_ref()
        .is_some_and(|r| r.decision.is_none() && r.hash == hash);
    if same {
        let reason = format!("promoted: its document was applied ({source})");
        end_run(control, None, Decision::Promoted, reason, false);
    } else {
        let reason = format!("aborted: a new config was applied ({source})");
        end_run(control, None, Decision::Aborted, reason, true);
    }
}

/// [`end_locked`]; a promotion installs the canary's snapshot only when
/// `install` (and the canary is not a fleet's: there the same
/// compare-and-set wrote its document to `<prefix>config`, which arrives
/// as a normal apply from etcd).
fn end_run(
    control: &Control,
    version: Option<u64>,
    decision: Decision,
    reason: String,
    install: bool,
) -> bool {
    let state = &control.canary;
    let mut run = state.run.lock();
    let Some(r) = run
        .as_mut()
        .filter(|r| r.decision.is_none() && version.is_none_or(|v| v == r.version))
    else {
        return false;
    };
    let Some(arm) = r.arm.take() else {
        return false;
    };
    state.slot.store(None);
    r.totals = (arm.canary.read(), arm.baseline.read());
    r.decision = Some(decision);
    r.reason.clone_from(&reason);
    let note = CanaryNote {
        state: decision.label(),
        reason: reason.clone(),
    };
    let (raw, hash, v, fleet) = (r.raw.clone(), r.hash.clone(), r.version, r.fleet);
    drop(run);
    let current = control.snapshot().load_full();
    match decision {
        Decision::Promoted if fleet.is_some() || !install => {
            state.promoted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(version = v, reason = %reason, "config canary promoted (as the document is applied)");
            control.record_version(VersionRecord {
                version: v,
                hash,
                source: "canary".to_owned(),
                applied_at: crate::control::unix_now(),
                canary: Some(note),
                raw,
            });
        }
        Decision::Promoted => {
            state.promoted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(version = v, reason = %reason, "config canary promoted");
            // The listeners take the promoted config's certificates (read
            // again: a file may have changed during the bake).
            match control.load_tls(&arm.snapshot.config) {
                Ok(tls) => control.install_tls(&tls, &arm.snapshot),
                Err(errors) => {
                    for e in &errors {
                        tracing::warn!(error = %e, "config canary promoted, but its certificates cannot be read; the listeners keep theirs");
                    }
                }
            }
            // So do its routes' auth keys.
            match control.load_auth(&arm.snapshot.config) {
                Ok(auth) => control.auth_keys().install(auth),
                Err(errors) => {
                    for e in &errors {
                        tracing::warn!(error = %e, "config canary promoted, but its auth files cannot be read; routes keep their keys");
                    }
                }
            }
            control.install(
                Arc::clone(&arm.snapshot),
                &current,
                raw,
                hash,
                "canary".to_owned(),
                Some(note),
            );
        }
        Decision::RolledBack | Decision::Aborted => {
            let counter = if decision == Decision::RolledBack {
                &state.rolled_back
            } else {
                &state.aborted
            };
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(version = v, decision = decision.label(), reason = %reason, "config canary ended; the running config stays");
            control.drain_all_but(&current);
            control.record_version(VersionRecord {
                version: v,
                hash,
                source: "canary".to_owned(),
                applied_at: crate::control::unix_now(),
                canary: Some(note),
                raw,
            });
        }
    }
    true
}

/// Ends the baking canary by hand (`POST /admin/v1/config/canary/promote`
/// or `/abort`). False when none bakes.
pub(crate) fn decide(
    control: &Control,
    version: Option<u64>,
    decision: Decision,
    reason: String,
) -> bool {
    let _writer = control.writer.lock();
    end_locked(control, version, decision, reason)
}

/// What the judge concluded from one window.
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// The canary is worse than the thresholds allow.
    Breach(String),
    /// Both sides have enough requests and the canary is within bounds.
    Clean(String),
    /// One side has fewer than `min_requests` requests.
    TooLittle(String),
}

fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// Judges a window of both sides against the thresholds.
pub(crate) fn verdict(cfg: &CanaryConfig, canary: &SideCounts, baseline: &SideCounts) -> Verdict {
    if canary.requests < cfg.min_requests || baseline.requests < cfg.min_requests {
        return Verdict::TooLittle(format!(
            "too little data: canary {} and baseline {} requests in the window, {} needed on each side",
            canary.requests, baseline.requests, cfg.min_requests
        ));
    }
    let (ce, be) = (canary.error_rate(), baseline.error_rate());
    if ce >= cfg.max_error_ratio * be && ce >= be + cfg.min_error_delta {
        return Verdict::Breach(format!(
            "error rate: canary {:.2}% ({} of {}) against baseline {:.2}% ({} of {})",
            ce * 100.0,
            canary.errors,
            canary.requests,
            be * 100.0,
            baseline.errors,
            baseline.requests
        ));
    }
    let (cp, bp) = (canary.p99(), baseline.p99());
    if cp.as_secs_f64() >= cfg.max_p99_ratio * bp.as_secs_f64() && cp >= bp + cfg.min_p99_delta {
        return Verdict::Breach(format!(
            "p99: canary {} against baseline {}",
            secs(cp),
            secs(bp)
        ));
    }
    Verdict::Clean(format!(
        "clean: canary {:.2}% errors, p99 {} over {} requests; baseline {:.2}% errors, p99 {} over {} requests",
        ce * 100.0,
        secs(cp),
        canary.requests,
        be * 100.0,
        secs(bp),
        baseline.requests
    ))
}

/// Where the judge reads both sides' counts: this process's counters, or
/// (in a fleet) the sums of every replica's.
pub(crate) trait Counts: Send {
    /// Why this replica must stop judging and roll back on its own (it
    /// lost the fleet's coordination), if it must.
    fn lost(&self) -> Option<String> {
        None
    }

    /// Cumulative counts since the canary started (canary, baseline);
    /// `None` when they cannot be read now.
    fn read(
        &mut self,
        arm: &CanaryArm,
    ) -> impl std::future::Future<Output = Option<(SideCounts, SideCounts)>> + Send;
}

/// This process's own counters.
pub(crate) struct LocalCounts;

impl Counts for LocalCounts {
    async fn read(&mut self, arm: &CanaryArm) -> Option<(SideCounts, SideCounts)> {
        Some((arm.canary.read(), arm.baseline.read()))
    }
}

/// What the judge decided, when it decided.
pub(crate) type Judged = Option<(Decision, String)>;

/// Judges a baking canary every `cfg.interval` over the last `cfg.window`
/// until it breaches (rolled back at once) or its bake ends (promoted when
/// clean, rolled back with too little data). Returns the decision, or
/// `None` when the canary was decided elsewhere (by hand, by an apply).
pub(crate) async fn judge<C: Counts>(
    control: &Control,
    started: Started,
    counts: &mut C,
) -> Judged {
    let cfg = started.judge;
    let begun = Instant::now();
    let bake_end = begun + started.bake;
    let mut ring: VecDeque<(Instant, SideCounts, SideCounts)> = VecDeque::new();
    ring.push_back((begun, SideCounts::default(), SideCounts::default()));
    loop {
        let now = Instant::now();
        let wait = cfg.interval.min(bake_end.saturating_duration_since(now));
        tokio::time::sleep(wait).await;
        let arm = control.canary.baking(started.version)?;
        if let Some(why) = counts.lost() {
            return Some((
                Decision::RolledBack,
                format!("rolled back on this replica: {why}"),
            ));
        }
        let Some((c, b)) = counts.read(&arm).await else {
            if Instant::now() >= bake_end {
                return Some((
                    Decision::RolledBack,
                    "rolled back at the end of the bake: the counts could not be read".to_owned(),
                ));
            }
            continue;
        };
        let now = Instant::now();
        ring.push_back((now, c.clone(), b.clone()));
        // The oldest reading kept is the newest one at least a window old.
        while ring.len() > 2 && now.duration_since(ring[1].0) >= cfg.window {
            ring.pop_front();
        }
        let (wc, wb) = (c.since(&ring[0].1), b.since(&ring[0].2));
        let end = now >= bake_end;
        match verdict(&cfg, &wc, &wb) {
            Verdict::Breach(reason) => {
                return Some((Decision::RolledBack, format!("rolled back: {reason}")))
            }
            Verdict::Clean(reason) if end => {
                return Some((
                    Decision::Promoted,
                    format!("promoted after a clean bake: {reason}"),
                ))
            }
            Verdict::TooLittle(reason) if end => {
                return Some((
                    Decision::RolledBack,
                    format!("rolled back at the end of the bake: {reason}"),
                ))
            }
            _ => {}
        }
    }
}

/// Starts the single-process judge of a started canary and carries out
/// its decision.
pub(crate) fn spawn_judge(control: Arc<Control>, started: Started) {
    tokio::spawn(async move {
        let Some((decision, reason)) = judge(&control, started, &mut LocalCounts).await else {
            return;
        };
        let c = Arc::clone(&control);
        let _ = tokio::task::spawn_blocking(move || {
            decide(&c, Some(started.version), decision, reason)
        })
        .await;
    });
}

/// Starts a canary from the admin API (validation and compilation off the
/// runtime's threads) and its judge; the canary's status.
pub(crate) async fn start_from_admin(
    control: &Arc<Control>,
    text: String,
    format: Format,
    percent: f64,
    bake: Duration,
) -> Result<Value, Vec<ConfigError>> {
    let c = Arc::clone(control);
    let started = tokio::task::spawn_blocking(move || {
        start(&c, &text, format, percent, bake, fastrand::u64(..))
    })
    .await
    .unwrap_or_else(|_| Err(vec![ConfigError::new("", "the reload task failed")]))?;
    spawn_judge(Arc::clone(control), started);
    Ok(status_json(control).unwrap_or(Value::Null))
}

/// `POST /admin/v1/config/canary/promote` or `/abort`: the status after,
/// or `None` when no canary bakes.
pub(crate) async fn decide_from_admin(control: &Arc<Control>, promote: bool) -> Option<Value> {
    let c = Arc::clone(control);
    let decided = tokio::task::spawn_blocking(move || {
        if promote {
            decide(&c, None, Decision::Promoted, "promoted by hand".to_owned())
        } else {
            decide(&c, None, Decision::Aborted, "aborted by hand".to_owned())
        }
    })
    .await
    .unwrap_or(false);
    decided.then(|| status_json(control)).flatten()
}

fn side_json(c: &SideCounts) -> Value {
    json!({
        "requests": c.requests,
        "errors": c.errors,
        "error_rate": c.error_rate(),
        "p99": c.p99().as_secs_f64(),
    })
}

/// `GET /admin/v1/config/canary`: the baking canary, or the last decided
/// one; `None` when there has never been one.
pub(crate) fn status_json(control: &Control) -> Option<Value> {
    let run = control.canary.run.lock();
    let r = run.as_ref()?;
    let (c, b) = match &r.arm {
        Some(arm) => (arm.canary.read(), arm.baseline.read()),
        None => r.totals.clone(),
    };
    Some(json!({
        "state": r.decision.map_or("baking", Decision::label),
        "reason": r.reason,
        "percent": r.percent,
        "bake": units::format_duration(r.bake),
        "started": r.started_ms,
        "version": r.version,
        "canary": side_json(&c),
        "baseline": side_json(&b),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(requests: u64, errors: u64, latency: Duration) -> SideCounts {
        let s = hopgate_proxy::SideStats::default();
        for i in 0..requests {
            s.record(if i < errors { 502 } else { 200 }, latency);
        }
        s.read()
    }

    #[test]
    fn the_verdict_follows_the_thresholds() {
        let cfg = CanaryConfig::default();
        let ms = Duration::from_millis;
        // Too few requests on either side.
        assert!(matches!(
            verdict(&cfg, &side(49, 0, ms(1)), &side(500, 0, ms(1))),
            Verdict::TooLittle(_)
        ));
        assert!(matches!(
            verdict(&cfg, &side(100, 0, ms(1)), &side(49, 0, ms(1))),
            Verdict::TooLittle(_)
        ));
        // A dead canary.
        assert!(matches!(
            verdict(&cfg, &side(100, 100, ms(1)), &side(400, 0, ms(1))),
            Verdict::Breach(r) if r.starts_with("error rate")
        ));
        // Twice the baseline's rate but less than a point above it: clean.
        assert!(matches!(
            verdict(&cfg, &side(1000, 2, ms(1)), &side(1000, 1, ms(1))),
            Verdict::Clean(_)
        ));
        // A point above, but under twice the baseline's rate: clean.
        assert!(matches!(
            verdict(&cfg, &side(100, 15, ms(1)), &side(100, 10, ms(1))),
            Verdict::Clean(_)
        ));
        // Both: breach.
        assert!(matches!(
            verdict(&cfg, &side(100, 25, ms(1)), &side(100, 10, ms(1))),
            Verdict::Breach(_)
        ));
        // p99 twice the baseline's and more than min_p99_delta above it.
        assert!(matches!(
            verdict(&cfg, &side(100, 0, ms(300)), &side(100, 0, ms(10))),
            Verdict::Breach(r) if r.starts_with("p99")
        ));
        // Twice, but within min_p99_delta: clean.
        assert!(matches!(
            verdict(&cfg, &side(100, 0, ms(3)), &side(100, 0, ms(1))),
            Verdict::Clean(_)
        ));
    }

    #[test]
    fn percent_and_bake_are_checked() {
        assert!(parse_percent("10").is_ok());
        assert!(parse_percent("0.5").is_ok());
        for bad in ["0", "-1", "101", "NaN", "ten", ""] {
            assert_eq!(parse_percent(bad).unwrap_err().path, "canary", "{bad}");
        }
        assert_eq!(parse_bake("30s").unwrap(), Duration::from_secs(30));
        for bad in ["0s", "500ms", "2d", "soon"] {
            assert_eq!(parse_bake(bad).unwrap_err().path, "bake", "{bad}");
        }
    }
}
