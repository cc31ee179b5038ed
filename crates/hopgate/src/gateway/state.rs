//! `state_dir`: the running state kept on disk, so that a plain restart
//! resumes what an upgrade would carry (config versions applied through
//! the admin API with their history, drains, maintenance state, a baking
//! canary).
//!
//! Owns the file `<state_dir>/state.json` (written whole to a temporary
//! file, synced, then renamed over the old one, so a crash leaves the old
//! or the new state, never half of one), the task that rewrites it when
//! the state changes ([`Keeper`]) and reading it back at start ([`load`]).
//! The document is the upgrade protocol's `STATE` block. Must not touch:
//! what resuming means (`Control::resume`, `main::resume_from`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use hopgate_control::{Carried, Control, Maintenance};

/// The file in `state_dir`.
const FILE: &str = "state.json";
/// How often the state is compared with what was last written.
const EVERY: Duration = Duration::from_secs(1);

/// What a new process (or a restart) resumes from: the control plane's
/// state with the maintenance intake's sequence numbers.
pub(crate) fn carry(control: &Control, maintenance: &Maintenance) -> Carried {
    let mut c = control.carry();
    maintenance.carry(&mut c.maintenance);
    c
}

/// `state_dir` resolved against the config file's directory.
pub(crate) fn dir(state_dir: &Path, config_path: Option<&Path>) -> PathBuf {
    super::config_dir(config_path).join(state_dir)
}

/// The state kept in `dir`, if any. A file that cannot be read back is
/// logged and set aside (renamed `state.json.bad`), and the process starts
/// from its config file.
pub(crate) fn load(dir: &Path) -> Option<Carried> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "state_dir: cannot read the kept state; starting from the config file");
            return None;
        }
    };
    match Carried::from_json(&bytes) {
        Ok(c) => {
            tracing::info!(path = %path.display(), version = c.running, "state_dir: resuming the kept state");
            Some(c)
        }
        Err(e) => {
            let aside = dir.join(format!("{FILE}.bad"));
            let _ = std::fs::rename(&path, &aside);
            tracing::warn!(path = %path.display(), error = %e, aside = %aside.display(), "state_dir: the kept state is unreadable; set aside, starting from the config file");
            None
        }
    }
}

/// Writes `state` into `dir` atomically.
fn write(dir: &Path, state: &Carried) -> std::io::Result<()> {
    use std::io::Write;
    let json = state.to_json().map_err(std::io::Error::other)?;
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(json.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(FILE))?;
    // The rename itself is durable once the directory is synced.
    std::fs::File::open(dir)?.sync_all()
}

/// The task keeping `state.json` in step with the running state.
pub(crate) struct Keeper {
    dir: PathBuf,
    control: Arc<Control>,
    maintenance: Arc<Maintenance>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Keeper {
    /// Creates `dir` when missing, writes the state once (so a directory
    /// that cannot be written stops the start, naming `state_dir`) and
    /// starts rewriting it whenever the state changes.
    pub(crate) fn start(
        dir: PathBuf,
        control: &Arc<Control>,
        maintenance: &Arc<Maintenance>,
    ) -> anyhow::Result<Keeper> {
        let fail = |e: std::io::Error| {
            anyhow::anyhow!(
                "state_dir: cannot write the state in {}: {e}",
                dir.display()
            )
        };
        std::fs::create_dir_all(&dir).map_err(fail)?;
        write(&dir, &carry(control, maintenance)).map_err(fail)?;
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(keep(
            dir.clone(),
            Arc::clone(control),
            Arc::clone(maintenance),
            rx,
        ));
        Ok(Keeper {
            dir,
            control: Arc::clone(control),
            maintenance: Arc::clone(maintenance),
            stop,
            task,
        })
    }

    /// Stops without a last write: after a handover the new process owns
    /// the file.
    pub(crate) fn abandon(self) {
        self.task.abort();
    }

    /// Stops and writes the final state (a clean shutdown).
    pub(crate) async fn finish(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let (dir, state) = (self.dir, carry(&self.control, &self.maintenance));
        let written = tokio::task::spawn_blocking(move || write(&dir, &state)).await;
        if let Ok(Err(e)) = written {
            tracing::warn!(error = %e, "state_dir: the final state was not written");
        }
    }
}

/// Every [`EVERY`], writes the state when its mark changed since the last
/// successful write (a failed write is tried again, and logged once until
/// one succeeds).
async fn keep(
    dir: PathBuf,
    control: Arc<Control>,
    maintenance: Arc<Maintenance>,
    mut stop: watch::Receiver<bool>,
) {
    let mut written = mark(&control, &maintenance);
    let mut failing = false;
    let mut tick = tokio::time::interval(EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let now = mark(&control, &maintenance);
        if now == written {
            continue;
        }
        let (d, state) = (dir.clone(), carry(&control, &maintenance));
        match tokio::task::spawn_blocking(move || write(&d, &state)).await {
            Ok(Ok(())) => {
                written = now;
                failing = false;
            }
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::warn!(dir = %dir.display(), error = %e, "state_dir: cannot write the state; trying again every second");
            }
            _ => {}
        }
    }
}

/// The control plane's mark with the maintenance intake's sequence numbers.
fn mark(control: &Control, maintenance: &Maintenance) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    control.state_mark().hash(&mut h);
    let mut seqs = Vec::new();
    maintenance.carry(&mut seqs);
    seqs.sort_by(|a, b| (&a.service, &a.node).cmp(&(&b.service, &b.node)));
    for s in seqs {
        (s.service, s.node, s.seq).hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_state_reads_back_and_a_broken_one_is_set_aside() {
        let dir = std::env::temp_dir().join(format!("hopgate-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let control = Control::new(
            hopgate_core::config::load(
                hopgate_core::config::EMBEDDED_DEFAULT,
                hopgate_core::config::Format::Yaml,
            )
            .unwrap(),
            hopgate_control::Source::Embedded,
        );
        write(&dir, &control.carry()).unwrap();
        let back = load(&dir).expect("the state reads back");
        assert_eq!(back.running, 1);
        std::fs::write(dir.join(FILE), b"{ not json").unwrap();
        assert!(load(&dir).is_none());
        assert!(dir.join("state.json.bad").exists());
        assert!(!dir.join(FILE).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
