//! Start-up: [`Gateway::start`] as a list of named steps, in the order it
//! runs them: admin token, access log, file-descriptor limit, control plane
//! and TLS files; then the admin socket is bound (its port names this
//! replica), the sessions start, the data plane is built and every
//! listener bound; then the admin API and the background tasks (in-band
//! maintenance intake, listener reconciliation, TLS and config file
//! watches) are spawned.
//!
//! Owns that order. Must not touch: what each part does once running
//! (`gateway.rs`, the control and proxy crates).

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use crate::fdlimit::FdBudget;
use hopgate_control::{
    serve_admin, watch_auth_files, watch_file, watch_tls_files, Admin, Carried, Control, FileWatch,
    Maintenance, Source,
};

/// What an upgrade's new process resumes from: the previous process's
/// state, and the new document it starts with (`None`: the carried
/// running one).
#[derive(Debug)]
pub(crate) struct Resume {
    pub carried: Carried,
    pub fresh: Option<Source>,
}
use hopgate_core::config::Config;
use hopgate_core::maintenance::Notification;
use hopgate_proxy::Forwarder;
use hopgate_store::Sessions;

use super::sessions::start_sessions;
use super::state;
use super::{config_dir, replica_id, Gateway, Listeners, OtlpTask};
use crate::listenfd::{obtain, Inherited, Kind};

impl Gateway {
    /// Binds every listener and the admin API and starts serving.
    pub(crate) async fn start(
        cfg: Config,
        source: Source,
        config_file: Option<FileWatch>,
        inherited: Inherited,
        resume: Option<Resume>,
    ) -> anyhow::Result<Gateway> {
        let config_path = config_file.as_ref().map(|w| w.path().to_path_buf());
        let token = admin_token(&cfg)?;
        open_access_log(&cfg)?;
        // The file's watch was armed before the file was read (`main`): an
        // edit made since is always seen as one.
        let file_watch = config_file;
        let fds = check_fd_limit(&cfg)?;
        let control = start_control(&cfg, source, resume.as_ref(), config_path.as_deref())?;
        control.set_fd_limit(fds.nofile);
        follow_access_log(&control);
        inherited.apply_health(&control.snapshot().load());
        let (shutdown, rx) = watch::channel(false);
        // Sessions stop after the listeners have drained, so the final save
        // includes the bindings of the last requests.
        // The admin socket is bound first: its port names this replica.
        let inherited = parking_lot::Mutex::new(inherited);
        let (admin_sock, admin_fd) =
            obtain(&inherited, Kind::Admin, "admin", cfg.admin.address).await?;
        let admin_addr = admin_sock.local_addr()?;
        let admin_configured = cfg.admin.address;
        let (session_stop, session_rx) = watch::channel(false);
        let replica = replica_id(&cfg, admin_addr);
        let (sessions, session_task, memory) = start_sessions(&cfg, &replica, session_rx).await?;
        let maintenance = new_maintenance(&cfg, &control);
        let state = resume_state(&cfg, resume, &control, &maintenance, config_path.as_deref())?;
        let plane = DataPlane::build(&control, &sessions, inherited, fds);
        let live = plane.live;
        let listeners = bind_listeners(&live, &cfg).await?;
        live.inherited.lock().close_rest();
        let admin = Admin::with_maintenance(
            Arc::clone(&control),
            token,
            Some(Arc::clone(&sessions)),
            Arc::clone(&maintenance),
        );
        // The admin API outlives the listeners' drain, so `/readyz` answers
        // 503 to load balancers while in-flight work finishes.
        let (admin_stop, admin_rx) = watch::channel(false);
        let admin_task = tokio::spawn(serve_admin(admin_sock, Arc::clone(&admin), admin_rx));
        let tasks = vec![
            spawn_maintenance_intake(Arc::clone(&maintenance), plane.maint_rx, rx.clone()),
            spawn_reconcile(&control, &live, &maintenance, cfg, rx.clone()),
            // rate_limits[].scope: fleet: shares synced with Redis.
            hopgate_control::start_fleet_limits(Arc::clone(&control), replica, rx.clone()),
        ];
        let tasks = spawn_watchers(tasks, &control, file_watch, &rx);
        Ok(Gateway {
            control,
            listeners,
            admin_addr,
            admin,
            sessions,
            maintenance,
            config_path,
            live,
            shutdown,
            tunnel_stop: plane.tunnel_stop,
            admin_fd: Arc::new(admin_fd),
            memory,
            tasks,
            session_stop,
            session_task,
            admin_stop,
            admin_task,
            admin_configured,
            otlp: plane.otlp,
            state,
        })
    }
}

/// What an upgrade or `state_dir` carried beyond the control plane (the
/// maintenance intake's sequence numbers, a baking canary, once the
/// runtime runs), and the `state_dir` keeper (not in fleet mode: etcd
/// holds that state).
fn resume_state(
    cfg: &Config,
    resume: Option<Resume>,
    control: &Arc<Control>,
    maintenance: &Arc<Maintenance>,
    config_path: Option<&Path>,
) -> anyhow::Result<Option<state::Keeper>> {
    if let Some(r) = &resume {
        maintenance.restore(&r.carried.maintenance);
        control.resume_canary(&r.carried);
    }
    match (&cfg.state_dir, &cfg.sources.etcd) {
        (Some(d), None) => {
            state::Keeper::start(state::dir(d, config_path), control, maintenance).map(Some)
        }
        _ => Ok(None),
    }
}

/// The tasks that follow files and the applied configs: certificates,
/// auth files, key sets fetched from services (`routes[].auth.jwt.jwks`),
/// DNS discovery, and the config file when there is one.
fn spawn_watchers(
    mut tasks: Vec<JoinHandle<()>>,
    control: &Arc<Control>,
    file_watch: Option<FileWatch>,
    rx: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    tasks.extend([
        tokio::spawn(watch_tls_files(Arc::clone(control), rx.clone())),
        tokio::spawn(watch_auth_files(Arc::clone(control), rx.clone())),
        tokio::spawn(hopgate_proxy::fetch_jwks(
            Arc::clone(control.auth_keys()),
            Arc::clone(control.snapshot()),
            rx.clone(),
        )),
        hopgate_control::start_dns(Arc::clone(control), rx.clone()),
    ]);
    if let Some(armed) = file_watch {
        tasks.push(tokio::spawn(watch_file(
            Arc::clone(control),
            armed,
            rx.clone(),
        )));
    }
    tasks
}

/// The admin API's bearer token, from the variable `admin.token_env` names.
fn admin_token(cfg: &Config) -> anyhow::Result<Option<String>> {
    match &cfg.admin.token_env {
        Some(var) => Ok(Some(std::env::var(var).with_context(|| {
            format!("admin.token_env names {var}, which is not set")
        })?)),
        None => Ok(None),
    }
}

/// Points the access log where each applied config says, before the
/// config's first request (an error keeps it where it was).
fn follow_access_log(control: &Control) {
    control.on_apply(Box::new(|cfg: &Config| {
        if let Err(e) = crate::logwriter::configure(&cfg.access_log) {
            let p = cfg.access_log.path.as_deref().unwrap_or(Path::new("-"));
            tracing::error!(path = %p.display(), error = %e, "access_log.path: cannot open the file; access lines still go where they went");
        }
    }));
}

/// Points the access log at `access_log.path` (standard output for `-`).
fn open_access_log(cfg: &Config) -> anyhow::Result<()> {
    crate::logwriter::configure(&cfg.access_log).with_context(|| {
        let p = cfg.access_log.path.as_deref().unwrap_or(Path::new("-"));
        format!("access_log.path: cannot open {}", p.display())
    })
}

/// Raises the open-files limit and checks that the listeners and
/// `limits.max_connections` fit under it.
fn check_fd_limit(cfg: &Config) -> anyhow::Result<FdBudget> {
    let fds = FdBudget::at_start();
    fds.settle(&cfg.limits, cfg.listeners.len())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(fds)
}

/// The control plane, with the TLS files read before anything is bound: a
/// bad one stops the start like any config error.
fn start_control(
    cfg: &Config,
    source: Source,
    resume: Option<&Resume>,
    config_path: Option<&Path>,
) -> anyhow::Result<Arc<Control>> {
    let files = hopgate_proxy::read_filter_bodies(cfg.clone(), &config_dir(config_path));
    let control = files.map(|cfg| match resume {
        Some(r) => Control::resume(cfg, &r.carried, r.fresh.clone()),
        None => Control::new(cfg, source),
    });
    if let Err(errors) = control
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|c| c.start_tls(config_dir(config_path)))
    {
        for e in &errors {
            eprintln!("config error: {e}");
        }
        anyhow::bail!("the config has {} error(s); not starting", errors.len());
    }
    control.map_err(|_| anyhow::anyhow!("the config has errors; not starting"))
}

/// Maintenance intake, its handoff pools sized like the largest idle pool.
fn new_maintenance(cfg: &Config, control: &Control) -> Arc<Maintenance> {
    let pool_size = cfg
        .services
        .iter()
        .map(|s| s.pool.max_idle)
        .max()
        .unwrap_or(64);
    Maintenance::new(Arc::clone(control.snapshot()), cfg.maintenance, pool_size)
}

/// The data plane before any listener is bound: the forwarder (with its
/// tunnel stop switch, in-band maintenance channel, canary slot and span
/// exporter) inside the listener set.
struct DataPlane {
    live: Arc<Listeners>,
    /// Notifications from backends' `Hop-Maintenance` headers.
    maint_rx: mpsc::Receiver<Notification>,
    tunnel_stop: watch::Sender<bool>,
    otlp: OtlpTask,
}

impl DataPlane {
    /// Starts the span exporter's task; binds nothing.
    fn build(
        control: &Control,
        sessions: &Arc<Sessions>,
        inherited: parking_lot::Mutex<Inherited>,
        fds: FdBudget,
    ) -> DataPlane {
        let (maint_tx, maint_rx) = mpsc::channel(1024);
        let (tunnel_stop, tunnel_rx) = watch::channel(false);
        let (otlp_stop, otlp_rx) = watch::channel(false);
        let (exporter, otlp_task) =
            hopgate_proxy::start_otlp_export(Arc::clone(control.snapshot()), otlp_rx);
        let live = Arc::new(Listeners {
            forwarder: Forwarder::new(Arc::clone(control.snapshot()), Some(Arc::clone(sessions)))
                .with_stopping(tunnel_rx)
                .with_maintenance(maint_tx)
                .with_canary(control.canary_slot())
                .with_auth(Arc::clone(control.auth_keys()))
                .with_otlp(exporter),
            tls: Arc::clone(control.tls_listeners()),
            running: Mutex::new(Vec::new()),
            inherited,
            fds,
        });
        DataPlane {
            live,
            maint_rx,
            tunnel_stop,
            otlp: OtlpTask {
                stop: otlp_stop,
                task: otlp_task,
            },
        }
    }
}

/// Binds and starts every configured listener, in order; returns their
/// names and bound addresses.
async fn bind_listeners(
    live: &Listeners,
    cfg: &Config,
) -> anyhow::Result<Vec<(String, std::net::SocketAddr)>> {
    let mut listeners = Vec::new();
    let mut running = live.running.lock().await;
    for l in &cfg.listeners {
        let r = live.start(l, cfg).await?;
        listeners.push((r.name.clone(), r.bound));
        running.push(r);
    }
    Ok(listeners)
}

/// Feeds notifications from backends' `Hop-Maintenance` headers to the
/// intake until `stop`.
fn spawn_maintenance_intake(
    m: Arc<Maintenance>,
    mut maint_rx: mpsc::Receiver<Notification>,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                n = maint_rx.recv() => match n {
                    Some(n) => { let _ = m.intake_in_band(n); }
                    None => return,
                },
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    })
}

/// Keeps the listeners and the maintenance settings in step with every
/// applied config until `stop` (the access log follows it as it is
/// applied: [`follow_access_log`]). `cfg` is the config at
/// start (a changed `admin.address` only takes effect at a restart).
fn spawn_reconcile(
    control: &Arc<Control>,
    live: &Arc<Listeners>,
    maintenance: &Arc<Maintenance>,
    cfg: Config,
    mut stop: watch::Receiver<bool>,
) -> JoinHandle<()> {
    let mut applied = control.subscribe();
    let (c, l, maint) = (
        Arc::clone(control),
        Arc::clone(live),
        Arc::clone(maintenance),
    );
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = applied.changed() => if r.is_err() { return },
                _ = stop.wait_for(|s| *s) => return,
            }
            let snap = c.snapshot().load_full();
            if snap.config.admin.address != cfg.admin.address
                && snap.config.admin.address.port() != 0
            {
                tracing::warn!("admin.address changed by reload: takes effect at the next restart");
            }
            l.reconcile(&snap.config).await;
            maint.set_config(snap.config.maintenance);
        }
    })
}
