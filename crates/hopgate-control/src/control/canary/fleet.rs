//! Config canaries across a fleet: started through etcd, judged by every
//! replica on counts summed in Redis, decided by one compare-and-set.
//!
//! Owns the key `<prefix>canary` (a JSON [`FleetDoc`]: the shared runtime
//! document tried, its share, bake, hash key, and its state and reason),
//! what a replica does when it changes ([`on_event`]: a new `baking`
//! document starts the canary here, a decided one ends it here the same
//! way), [`RedisCounts`] (each replica adds its counters' increase to one
//! hash per canary and reads the sums back, through the store crate's
//! `SharedCounters`: this crate holds no Redis client), and the
//! decision ([`cas`]: one etcd transaction comparing the key's
//! `mod_revision` with the one that started the bake; a promotion writes
//! the document to `<prefix>config` in the same transaction). A replica
//! that loses etcd during a bake rolls back on its own and never promotes
//! alone. Must not touch: the request path, the snapshot (through
//! [`Control`] only).

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use hopgate_core::config::{self, Config, ConfigError};
use hopgate_proxy::{CanaryArm, SideCounts};
use hopgate_store::{RedisTarget, SharedCounters};

use super::{decide, judge, start_with, status_json, unix_ms, Counts, Decision, FleetRun, Started};
use crate::control::Control;
use crate::etcd::{EtcdHandle, CALL_TIMEOUT, CANARY_KEY as KEY};

/// What `<prefix>canary` holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct FleetDoc {
    /// Tells one canary from the next (random).
    pub(crate) id: u64,
    /// The shared runtime document tried (as `<prefix>config` would hold it).
    pub(crate) text: String,
    pub(crate) percent: f64,
    pub(crate) bake_ms: u64,
    /// Keys the side choice: the same on every replica.
    pub(crate) key: u64,
    /// Unix milliseconds.
    pub(crate) started_ms: u64,
    /// The replica that wrote this state.
    pub(crate) by: String,
    /// `baking`, `promoted`, `rolled_back` or `aborted`.
    pub(crate) state: String,
    pub(crate) reason: String,
}

/// The shared runtime document `text` under this replica's bootstrap
/// sections, validated as an apply from etcd would be.
fn load_runtime(control: &Control, text: &str) -> Result<Config, Vec<ConfigError>> {
    let runtime = config::fleet::parse_runtime(text)?;
    let bootstrap = control.snapshot().load().config.raw.clone();
    config::validate(&config::fleet::compose(&bootstrap, &runtime))
}

/// `PUT /admin/v1/config?canary=P&bake=D` in fleet mode: the body is the
/// shared runtime document. Checked here like any apply, then written to
/// `<prefix>canary`; every replica (this one too) starts it from there.
/// The status once this replica bakes it, or an HTTP status and errors.
pub(crate) async fn start_from_admin(
    control: &Arc<Control>,
    etcd: &Arc<EtcdHandle>,
    text: String,
    percent: f64,
    bake: Duration,
) -> Result<Value, (u16, Vec<ConfigError>)> {
    if control.snapshot().load().config.store.redis.is_none() {
        return Err((
            400,
            vec![ConfigError::new(
                "canary",
                "in fleet mode both sides are counted in Redis: a canary needs store.kind: redis",
            )],
        ));
    }
    let (c, t) = (Arc::clone(control), text.clone());
    let checked = tokio::task::spawn_blocking(move || load_runtime(&c, &t).map(|_| ()))
        .await
        .unwrap_or_else(|_| Err(vec![ConfigError::new("", "the reload task failed")]));
    checked.map_err(|e| (400, e))?;
    let doc = FleetDoc {
        id: fastrand::u64(1..),
        text,
        percent,
        bake_ms: u64::try_from(bake.as_millis()).unwrap_or(u64::MAX),
        key: fastrand::u64(..),
        started_ms: unix_ms(),
        by: etcd.replica_id.clone(),
        state: "baking".to_owned(),
        reason: format!(
            "baking: {percent}% of clients for {}",
            hopgate_core::units::format_duration(bake)
        ),
    };
    put(etcd, &doc)
        .await
        .map_err(|e| (503, vec![ConfigError::new("canary", format!("etcd: {e}"))]))?;
    // Started here from the watch, like on every other replica.
    for _ in 0..100 {
        if let Some((f, _, _)) = control.canary.last_fleet() {
            if f.id == doc.id {
                return Ok(status_json(control).unwrap_or(Value::Null));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err((
        503,
        vec![ConfigError::new(
            "canary",
            "written to etcd, but this replica did not start it within 5 s (see its log)",
        )],
    ))
}

async fn put(etcd: &EtcdHandle, doc: &FleetDoc) -> Result<(), String> {
    let mut client = etcd.client().ok_or("etcd is not connected")?;
    let value = serde_json::to_string(doc).map_err(|e| e.to_string())?;
    tokio::time::timeout(CALL_TIMEOUT, client.put(etcd.key(KEY), value, None))
        .await
        .map_err(|_| "etcd write timed out".to_owned())?
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The canary document in etcd now.
async fn get(etcd: &EtcdHandle) -> Result<Option<FleetDoc>, String> {
    let mut client = etcd.client().ok_or("etcd is not connected")?;
    let resp = tokio::time::timeout(CALL_TIMEOUT, client.get(etcd.key(KEY), None))
        .await
        .map_err(|_| "etcd read timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(resp
        .kvs()
        .first()
        .and_then(|kv| kv.value_str().ok())
        .and_then(|v| serde_json::from_str(v).ok()))
}

/// Decides the fleet's canary: one transaction that succeeds only while
/// `<prefix>canary` is still the document that started the bake. A
/// promotion writes the canary's document to `<prefix>config` in the same
/// transaction. `Ok(false)`: another replica decided first.
pub(crate) async fn cas(
    etcd: &EtcdHandle,
    run: FleetRun,
    doc: &FleetDoc,
    decision: Decision,
    reason: &str,
) -> Result<bool, String> {
    let mut client = etcd.client().ok_or("etcd is not connected")?;
    let key = etcd.key(KEY);
    let decided = FleetDoc {
        state: decision.label().to_owned(),
        reason: reason.to_owned(),
        by: etcd.replica_id.clone(),
        ..doc.clone()
    };
    let value = serde_json::to_string(&decided).map_err(|e| e.to_string())?;
    let mut ops = vec![TxnOp::put(key.clone(), value, None)];
    if decision == Decision::Promoted {
        ops.push(TxnOp::put(etcd.key("config"), doc.text.clone(), None));
    }
    let txn = Txn::new()
        .when(vec![Compare::mod_revision(
            key,
            CompareOp::Equal,
            run.revision,
        )])
        .and_then(ops);
    let resp = tokio::time::timeout(CALL_TIMEOUT, client.txn(txn))
        .await
        .map_err(|_| "etcd transaction timed out".to_owned())?
        .map_err(|e| e.to_string())?;
    Ok(resp.succeeded())
}

/// A put of `<prefix>canary` seen by the watch (this replica's own writes
/// included).
pub(crate) fn on_event(control: &Arc<Control>, etcd: &Arc<EtcdHandle>, value: &str, revision: i64) {
    let doc: FleetDoc = match serde_json::from_str(value) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "etcd: the canary key is not a canary document; ignored");
            return;
        }
    };
    let last = control.canary.last_fleet();
    if doc.state == "baking" {
        if last.is_some_and(|(f, _, _)| f.id == doc.id) {
            return;
        }
        let run = FleetRun {
            id: doc.id,
            revision,
        };
        tokio::spawn(bake(Arc::clone(control), Arc::clone(etcd), doc, run));
        return;
    }
    let Some(decision) = Decision::from_label(&doc.state) else {
        tracing::warn!(state = %doc.state, "etcd: unknown canary state; ignored");
        return;
    };
    let Some((_, version, _)) = last.filter(|(f, _, _)| f.id == doc.id) else {
        return;
    };
    let control = Arc::clone(control);
    tokio::spawn(async move {
        let reason = doc.reason;
        let _ = tokio::task::spawn_blocking(move || {
            if !decide(&control, Some(version), decision, reason.clone()) {
                // Ended here already (e.g. by the promoted document's
                // apply, which came first): the fleet's decision is the
                // one kept.
                control.canary.relabel(&control, version, decision, &reason);
            }
        })
        .await;
    });
}

/// Starts a fleet canary here, judges it with the fleet's counts, and
/// proposes the decision.
async fn bake(control: Arc<Control>, etcd: Arc<EtcdHandle>, doc: FleetDoc, run: FleetRun) {
    let Some(redis) = control.snapshot().load().config.store.redis.clone() else {
        tracing::warn!("fleet canary not started here: store.kind is not redis");
        return;
    };
    let bake = Duration::from_millis(doc.bake_ms);
    let elapsed = Duration::from_millis(unix_ms().saturating_sub(doc.started_ms));
    let (c, d) = (Arc::clone(&control), doc.clone());
    let started = tokio::task::spawn_blocking(move || {
        start_with(
            &c,
            |c| load_runtime(c, &d.text),
            d.percent,
            bake,
            d.key,
            Some(run),
        )
    })
    .await;
    let mut started: Started = match started {
        Ok(Ok(s)) => s,
        Ok(Err(errors)) => {
            for e in &errors {
                tracing::warn!(error = %e, "fleet canary rejected on this replica");
            }
            return;
        }
        Err(_) => return,
    };
    // Judged until the end of the fleet's bake, not this replica's start.
    started.bake = bake.saturating_sub(elapsed).max(Duration::from_secs(1));
    let mut counts = match RedisCounts::new(&redis.target, &redis.prefix, doc.id, Arc::clone(&etcd))
    {
        Ok(c) => c,
        Err(e) => {
            let reason = format!("rolled back on this replica: redis: {e}");
            local(&control, started.version, Decision::RolledBack, reason).await;
            return;
        }
    };
    let Some((decision, reason)) = judge(&control, started, &mut counts).await else {
        return;
    };
    if !etcd.up() {
        local(&control, started.version, Decision::RolledBack, reason).await;
        return;
    }
    match cas(&etcd, run, &doc, decision, &reason).await {
        Ok(true) => tracing::info!(decision = decision.label(), "fleet canary decided here"),
        Ok(false) => {}
        Err(e) => {
            let reason =
                format!("rolled back on this replica: etcd: {e} (a replica never promotes alone)");
            local(&control, started.version, Decision::RolledBack, reason).await;
            return;
        }
    }
    // The decision arrives through the watch; without it, this replica
    // does not go on alone.
    for _ in 0..100 {
        if control.canary.baking(started.version).is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reason =
        "rolled back on this replica: the fleet's decision did not arrive from etcd within 10 s"
            .to_owned();
    local(&control, started.version, Decision::RolledBack, reason).await;
}

/// Ends the canary on this replica only.
async fn local(control: &Arc<Control>, version: u64, decision: Decision, reason: String) {
    let c = Arc::clone(control);
    let _ = tokio::task::spawn_blocking(move || decide(&c, Some(version), decision, reason)).await;
}

/// `POST /admin/v1/config/canary/promote` or `/abort` during a fleet
/// canary: the same compare-and-set the judges use. The status after, or
/// an HTTP status and errors.
pub(crate) async fn decide_from_admin(
    control: &Arc<Control>,
    etcd: &Arc<EtcdHandle>,
    promote: bool,
) -> Result<Value, (u16, Vec<ConfigError>)> {
    let conflict = || (409, vec![ConfigError::new("canary", "no canary is baking")]);
    let (run, version) = control.canary.baking_fleet().ok_or_else(conflict)?;
    let unavailable = |e: String| (503, vec![ConfigError::new("canary", format!("etcd: {e}"))]);
    let doc = get(etcd).await.map_err(unavailable)?.ok_or_else(conflict)?;
    if doc.id != run.id || doc.state != "baking" {
        return Err(conflict());
    }
    let (decision, reason) = if promote {
        (Decision::Promoted, "promoted by hand")
    } else {
        (Decision::Aborted, "aborted by hand")
    };
    if !cas(etcd, run, &doc, decision, reason)
        .await
        .map_err(unavailable)?
    {
        return Err(conflict());
    }
    for _ in 0..100 {
        if control.canary.baking(version).is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(status_json(control).unwrap_or(Value::Null))
}

/// The fleet's counts: this replica's increase since its last push added to
/// one Redis hash per canary (through the store crate's
/// [`SharedCounters`]), and the sums read back. Fields: `c:` (canary) or
/// `b:` (baseline), then `r` (requests), `e` (errors) or a latency bucket's
/// index.
struct RedisCounts {
    counters: SharedCounters,
    etcd: Arc<EtcdHandle>,
    pushed: (SideCounts, SideCounts),
}

impl RedisCounts {
    fn new(
        target: &RedisTarget,
        prefix: &str,
        id: u64,
        etcd: Arc<EtcdHandle>,
    ) -> Result<RedisCounts, String> {
        Ok(RedisCounts {
            counters: SharedCounters::canary(target, prefix, id, CALL_TIMEOUT)?,
            etcd,
            pushed: Default::default(),
        })
    }

    async fn exchange(
        &mut self,
        c: &SideCounts,
        b: &SideCounts,
    ) -> Result<(SideCounts, SideCounts), String> {
        let mut increases = Vec::new();
        for (side, now, before) in [("c", c, &self.pushed.0), ("b", b, &self.pushed.1)] {
            let d = now.since(before);
            increases.push((format!("{side}:r"), d.requests));
            increases.push((format!("{side}:e"), d.errors));
            for (i, n) in d
                .latency
                .buckets()
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
            {
                increases.push((format!("{side}:{i}"), *n));
            }
        }
        let all = self.counters.add_and_read(&increases).await?;
        self.pushed = (c.clone(), b.clone());
        Ok(sums(&all))
    }
}

/// The sums in a canary's Redis hash.
fn sums(all: &std::collections::HashMap<String, u64>) -> (SideCounts, SideCounts) {
    let (mut c, mut b) = (SideCounts::default(), SideCounts::default());
    for (field, n) in all {
        let Some((side, what)) = field.split_once(':') else {
            continue;
        };
        let s = match side {
            "c" => &mut c,
            "b" => &mut b,
            _ => continue,
        };
        match what {
            "r" => s.requests = *n,
            "e" => s.errors = *n,
            i => {
                if let Ok(slot) = i.parse::<usize>() {
                    s.latency.set(slot, *n);
                }
            }
        }
    }
    (c, b)
}

impl Counts for RedisCounts {
    fn lost(&self) -> Option<String> {
        (!self.etcd.up())
            .then(|| "etcd was lost during the bake (a replica never promotes alone)".to_owned())
    }

    async fn read(&mut self, arm: &CanaryArm) -> Option<(SideCounts, SideCounts)> {
        let (c, b) = (arm.canary.read(), arm.baseline.read());
        match self.exchange(&c, &b).await {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "fleet canary: redis counts unavailable this round");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_read_back_every_field() {
        let mut all = std::collections::HashMap::new();
        all.insert("c:r".to_owned(), 10);
        all.insert("c:e".to_owned(), 3);
        all.insert("c:5".to_owned(), 10);
        all.insert("b:r".to_owned(), 40);
        all.insert("b:127".to_owned(), 40);
        all.insert("b:128".to_owned(), 1);
        all.insert("junk".to_owned(), 1);
        let (c, b) = sums(&all);
        assert_eq!((c.requests, c.errors, c.latency.buckets()[5]), (10, 3, 10));
        assert_eq!(
            (b.requests, b.errors, b.latency.buckets()[127]),
            (40, 0, 40)
        );
        assert_eq!(b.latency.count(), 40, "b:128 is past the last bucket");
    }

    #[test]
    fn the_document_round_trips() {
        let doc = FleetDoc {
            id: 7,
            text: "services: []".to_owned(),
            percent: 12.5,
            bake_ms: 30_000,
            key: 99,
            started_ms: 1,
            by: "gw-a".to_owned(),
            state: "baking".to_owned(),
            reason: "baking".to_owned(),
        };
        let text = serde_json::to_string(&doc).unwrap();
        assert_eq!(serde_json::from_str::<FleetDoc>(&text).unwrap(), doc);
    }
}
