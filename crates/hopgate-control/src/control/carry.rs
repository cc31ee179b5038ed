//! What a binary upgrade carries from the running process to the next,
//! and what `state_dir` keeps across a plain restart: the running config
//! and its version number, the version history (so rollback and
//! `GET /admin/v1/config/versions` go on as before), the drains an
//! operator started, each node's maintenance state (the last notice's
//! sequence number, a MOVING's new address, relaxed timeouts still to
//! run) and a baking config canary (its document, share, side key and
//! the rest of its bake). The new process starts from these instead of
//! its config file; the file is applied only when it changes or on
//! SIGHUP.
//!
//! Owns [`Carried`] (its serialised form is the upgrade protocol's `STATE`
//! block and the `state_dir` file) and resuming a [`Control`] from it.
//! Times that must outlive the process are Unix milliseconds. Must not
//! touch: the socket handover (the binary's `upgrade` module), the
//! maintenance intake's sequence numbers (its own `carry`/`restore`).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use hopgate_core::config::{self, Config, ConfigError, RawConfig};

use hopgate_core::node::now_ms;

use super::canary::{unix_ms, CarriedCanary};
use super::{content_hash, unix_now, CanaryNote, Control, Source, VersionRecord, KEEP_VERSIONS};

/// The running state handed to a new process.
#[derive(Debug, Serialize, Deserialize)]
pub struct Carried {
    /// The version the running process serves.
    pub running: u64,
    /// The next version number it would have given out.
    pub next_version: u64,
    pub versions: Vec<CarriedVersion>,
    /// Nodes drained through the admin API or a fleet notice (removed
    /// nodes drain by themselves): `(service, node id)`.
    pub drained: Vec<(String, String)>,
    /// Nodes under maintenance (absent from a process that did not carry
    /// them).
    #[serde(default)]
    pub maintenance: Vec<CarriedNotice>,
    /// The canary baking when the state was taken.
    #[serde(default)]
    pub canary: Option<CarriedCanary>,
}

/// One node's maintenance state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CarriedNotice {
    pub service: String,
    pub node: String,
    /// The last notice's sequence number (0: none seen).
    pub seq: u64,
    /// Where a MOVING notice sent the node.
    pub moved_to: Option<SocketAddr>,
    /// Relaxed timeouts until then (Unix milliseconds; 0: not relaxed).
    pub relaxed_until: u64,
}

/// A monotonic deadline ([`now_ms`]) as Unix milliseconds (0 when past).
fn to_unix_ms(deadline_ms: u64) -> u64 {
    let now = now_ms();
    if deadline_ms <= now {
        0
    } else {
        unix_ms() + (deadline_ms - now)
    }
}

/// Unix milliseconds as a monotonic deadline (`None` when past).
fn from_unix_ms(unix: u64) -> Option<u64> {
    let left = unix.checked_sub(unix_ms()).filter(|&l| l > 0)?;
    Some(now_ms() + left)
}

/// One kept version.
#[derive(Debug, Serialize, Deserialize)]
pub struct CarriedVersion {
    pub version: u64,
    pub hash: String,
    pub source: String,
    pub applied_at: u64,
    /// A canary's decision: its state and reason.
    pub canary: Option<(String, String)>,
    pub raw: RawConfig,
}

impl Control {
    /// The state a new process resumes from.
    pub fn carry(&self) -> Carried {
        let snap = self.snapshot.load();
        let drained = self.drained();
        let versions = self
            .versions
            .lock()
            .iter()
            .map(|r| CarriedVersion {
                version: r.version,
                hash: r.hash.clone(),
                source: r.source.clone(),
                applied_at: r.applied_at,
                canary: r
                    .canary
                    .as_ref()
                    .map(|c| (c.state.to_owned(), c.reason.clone())),
                raw: r.raw.clone(),
            })
            .collect();
        Carried {
            running: snap.version,
            next_version: self.next_version.load(std::sync::atomic::Ordering::Relaxed),
            versions,
            drained,
            maintenance: self.maintenance_state(),
            canary: self.canary.carry(),
        }
    }

    /// Nodes drained through the admin API or a fleet notice.
    fn drained(&self) -> Vec<(String, String)> {
        let snap = self.snapshot.load();
        snap.services
            .iter()
            .flat_map(|s| {
                s.nodes
                    .iter()
                    .filter(|n| n.state.is_draining())
                    .map(|n| (s.name.clone(), n.id.clone()))
            })
            .collect()
    }

    /// A number that changes when what [`Control::carry`] returns would
    /// (without copying the kept documents): the running and next version,
    /// the kept version numbers, drains, maintenance state and the baking
    /// canary. `state_dir` is rewritten when it changes.
    pub fn state_mark(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.snapshot.load().version.hash(&mut h);
        self.next_version
            .load(std::sync::atomic::Ordering::Relaxed)
            .hash(&mut h);
        for r in self.versions.lock().iter() {
            (r.version, r.canary.as_ref().map(|c| c.state)).hash(&mut h);
        }
        self.drained().hash(&mut h);
        // The monotonic deadline: the Unix one drifts by a millisecond.
        let now = now_ms();
        for s in &self.snapshot.load().services {
            for n in &s.nodes {
                let relaxed = n.state.relaxed_until();
                (n.state.moved_to(), (relaxed > now).then_some(relaxed)).hash(&mut h);
            }
        }
        self.canary.carry_mark().hash(&mut h);
        h.finish()
    }

    /// Nodes moved by a MOVING notice or with relaxed timeouts still to
    /// run (sequence numbers are the maintenance intake's to add).
    fn maintenance_state(&self) -> Vec<CarriedNotice> {
        let snap = self.snapshot.load();
        snap.services
            .iter()
            .flat_map(|s| {
                s.nodes.iter().filter_map(|n| {
                    let moved_to = n.state.moved_to();
                    let relaxed_until = to_unix_ms(n.state.relaxed_until());
                    (moved_to.is_some() || relaxed_until > 0).then(|| CarriedNotice {
                        service: s.name.clone(),
                        node: n.id.clone(),
                        seq: 0,
                        moved_to,
                        relaxed_until,
                    })
                })
            })
            .collect()
    }

    /// Starts the control plane where the previous process left off, with
    /// the carried history and drains. `fresh` is `None` when `config` is
    /// the carried running document (it runs as the carried version);
    /// `Some(source)` when it is a new document (the config file, changed
    /// since it was last applied), which becomes the next version.
    pub fn resume(config: Config, carried: &Carried, fresh: Option<Source>) -> Arc<Control> {
        let mut versions: VecDeque<VersionRecord> = carried
            .versions
            .iter()
            .map(|v| VersionRecord {
                version: v.version,
                hash: v.hash.clone(),
                source: v.source.clone(),
                applied_at: v.applied_at,
                canary: v.canary.as_ref().map(|(state, reason)| CanaryNote {
                    state: canary_state(state),
                    reason: reason.clone(),
                }),
                raw: v.raw.clone(),
            })
            .collect();
        let mut next = carried.next_version.max(carried.running + 1);
        // A baking canary keeps its version number (it is given out again
        // when the canary resumes); a new document replaces the canary.
        let canary = carried.canary.as_ref().filter(|_| fresh.is_none());
        if let Some(c) = canary.filter(|c| c.version > carried.running) {
            next = c.version;
        }
        let version = match fresh {
            None => carried.running,
            Some(source) => {
                versions.push_back(VersionRecord {
                    version: next,
                    hash: content_hash(&config.raw),
                    source: source.to_string(),
                    applied_at: unix_now(),
                    canary: None,
                    raw: config.raw.clone(),
                });
                while versions.len() > KEEP_VERSIONS {
                    versions.pop_front();
                }
                next += 1;
                next - 1
            }
        };
        let control = Control::open(config, version, versions, next);
        control.restore_drains(&carried.drained);
        control.restore_maintenance(&carried.maintenance);
        Arc::new(control)
    }

    /// Moves and relaxes again the nodes a MOVING, MIGRATING or FAILING_OVER
    /// notice left so in the previous process.
    fn restore_maintenance(&self, notices: &[CarriedNotice]) {
        let snap = self.snapshot.load();
        for c in notices {
            let Some(n) = snap
                .services
                .iter()
                .find(|s| s.name == c.service)
                .and_then(|s| s.nodes.iter().find(|n| n.id == c.node))
            else {
                continue;
            };
            if let Some(to) = c.moved_to {
                n.state.set_moved_to(Some(to));
            }
            if let Some(until) = from_unix_ms(c.relaxed_until) {
                n.state.relax_until(until);
            }
            tracing::info!(service = %c.service, node = %c.node, moved_to = ?c.moved_to, relaxed = c.relaxed_until > 0, "maintenance state from the previous process restored");
        }
    }

    /// Starts again the canary that baked in the previous process, with
    /// the rest of its bake (at least a second), its share and its side
    /// key. Counts start again from zero. Call once the runtime runs.
    pub fn resume_canary(self: &Arc<Self>, carried: &Carried) {
        let Some(c) = &carried.canary else {
            return;
        };
        if self.next_version.load(std::sync::atomic::Ordering::Relaxed) != c.version {
            return;
        }
        let left = Duration::from_millis(c.bake_until.saturating_sub(unix_ms()))
            .max(Duration::from_secs(1));
        let raw = c.raw.clone();
        match super::canary::start_with(
            self,
            |_| config::validate(&raw),
            c.percent,
            left,
            c.key,
            None,
        ) {
            Ok(started) => {
                tracing::info!(version = c.version, percent = c.percent, bake_left = ?left, "the canary baking in the previous process goes on");
                super::canary::spawn_judge(Arc::clone(self), started);
            }
            Err(errors) => {
                for e in &errors {
                    tracing::warn!("the previous process's canary is refused by this binary: {e}");
                }
            }
        }
    }

    /// Drains again the nodes an operator drained in the previous process.
    fn restore_drains(&self, drained: &[(String, String)]) {
        let snap = self.snapshot.load();
        for (service, node) in drained {
            let found = snap
                .services
                .iter()
                .find(|s| &s.name == service)
                .and_then(|s| s.nodes.iter().find(|n| &n.id == node));
            if let Some(n) = found {
                n.state.set_draining(true);
                tracing::info!(
                    service,
                    node,
                    "upgrade: the drain started in the previous process goes on"
                );
            }
        }
    }
}

impl Carried {
    /// Whether `file_cfg`, read from `source` (the config file), is the
    /// document that file gave when it was last applied: then the new
    /// process keeps what runs (admin changes since included); otherwise
    /// the file was edited for this upgrade and is what it starts with.
    pub fn file_unchanged(&self, file_cfg: &Config, source: &Source) -> bool {
        let Source::File(path) = source else {
            return false;
        };
        let (file, sighup) = (format!("file:{path}"), format!("sighup:{path}"));
        let hash = content_hash(&file_cfg.raw);
        self.versions
            .iter()
            .rev()
            .find(|v| v.source == file || v.source == sighup)
            .is_some_and(|v| v.hash == hash)
    }

    /// The upgrade protocol's `STATE` block.
    pub fn to_json(&self) -> Result<String, String> {
        serde_json::to_string(self).map_err(|e| e.to_string())
    }

    /// A `STATE` block read back.
    pub fn from_json(block: &[u8]) -> Result<Carried, String> {
        serde_json::from_slice(block).map_err(|e| e.to_string())
    }

    /// The running document, validated again by this binary (a newer one
    /// may check more): the config the new process starts with.
    pub fn config(&self) -> Result<Config, Vec<ConfigError>> {
        let running = self
            .versions
            .iter()
            .find(|v| v.version == self.running)
            .ok_or_else(|| {
                vec![ConfigError::new(
                    "",
                    format!("the carried history has no version {}", self.running),
                )]
            })?;
        config::validate(&running.raw)
    }
}

/// A canary decision's name as the history keeps it.
fn canary_state(s: &str) -> &'static str {
    match s {
        "promoted" => "promoted",
        "rolled_back" => "rolled_back",
        _ => "aborted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "listeners:\n  - { name: public, address: 127.0.0.1:0 }\nservices:\n  - name: app\n    nodes:\n      - { id: a, address: \"127.0.0.1:1\" }\n      - { id: b, address: \"127.0.0.1:2\" }\nroutes:\n  - { id: all, match: { path_prefix: / }, service: app }\n";

    #[test]
    fn history_running_version_and_drains_survive_a_round_trip() {
        let old = Control::new(
            config::load(DOC, config::Format::Yaml).unwrap(),
            Source::Embedded,
        );
        let second = DOC.replace("127.0.0.1:2", "127.0.0.1:3");
        old.apply_text(&second, config::Format::Yaml, Source::Admin)
            .unwrap();
        old.snapshot().load().services[0].nodes[0]
            .state
            .set_draining(true);
        let wire = old.carry().to_json().unwrap();

        let carried = Carried::from_json(wire.as_bytes()).unwrap();
        let new = Control::resume(carried.config().unwrap(), &carried, None);
        let snap = new.snapshot().load();
        assert_eq!(snap.version, 2);
        assert_eq!(snap.services[0].nodes[1].address.port(), 3);
        assert!(snap.services[0].nodes[0].state.is_draining());
        assert!(!snap.services[0].nodes[1].state.is_draining());
        let history: Vec<(u64, String)> = new
            .versions()
            .iter()
            .map(|r| (r.version, r.source.clone()))
            .collect();
        assert_eq!(history, [(1, "embedded".into()), (2, "admin".into())]);
        // Rollback still reaches the first version; numbering goes on.
        let back = new.rollback(1).unwrap();
        assert_eq!(back.version, 3);
    }
}
