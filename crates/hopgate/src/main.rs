//! The `hopgate` binary: command line, wiring and signals.
//!
//! Owns process concerns only — parsing arguments, building the runtime,
//! logging setup, and turning signals into shutdown and reload. The gateway
//! itself lives in the library crates; `anyhow` is used here and nowhere
//! else.

/// mimalloc instead of glibc's malloc: the request path allocates a few
/// times per request (the request future, header maps, hyper's buffers),
/// and mimalloc's thread-local free lists make each allocation and free a
/// fraction of glibc's cost (measured in docs/BENCHMARKS.md). Its 2.x
/// line (the `v2` feature): Rust's allocator interface always asks for an
/// aligned block, and 3.x serves an aligned block over 1 KiB whose size is
/// not a power of two by over-allocating (the request's future is one),
/// where 2.x takes its plain path.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "demo")]
mod backend;
#[cfg(feature = "demo")]
mod demo;
mod fdlimit;
mod gateway;
mod listenfd;
mod logwriter;
mod pidfile;
mod sdnotify;
mod upgrade;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use gateway::Resume;
use hopgate_control::FileWatch;
use hopgate_core::config::{self, Format};

/// The version line: the crate version and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HOPGATE_COMMIT"),
    ")"
);

const AFTER_HELP: &str = "\
Logging: --log-level sets the level of every target (error, warn, info, debug,
trace); without it RUST_LOG is read (for example
RUST_LOG=info,hopgate::access=off silences the access log), else `info`.

Check a config like `nginx -t`:  hopgate -t -c hopgate.yaml";

/// hopgate: a zero-downtime HTTP gateway.
#[derive(Parser, Debug)]
#[command(name = "hopgate", version = VERSION, about, long_about = None, after_help = AFTER_HELP)]
struct Cli {
    /// Log format for the event and access logs.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level (error, warn, info, debug, trace, or a RUST_LOG-style
    /// filter); overrides RUST_LOG.
    #[arg(long, global = true, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Check the config (-c FILE, else ./hopgate.yaml, else the embedded
    /// default) and exit, like `nginx -t`: 0 when valid, 1 with every error.
    #[arg(short = 't', long = "check")]
    check: bool,
    /// The config file for -t, or for running without a subcommand.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway.
    Run(RunArgs),
    /// Check a config file offline: exit 0 when valid, else print every error
    /// with its field path and exit 1.
    Validate {
        /// The config file (YAML, or JSON when it ends in .json).
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The config file, as a flag (same as the positional FILE).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    /// to standard output, e.g. `hopgate completions bash >
    /// /etc/bash_completion.d/hopgate`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the JSON Schema of the config file (for editors: YAML language
    /// servers read it through a `# yaml-language-server: $schema=` line).
    Schema,
    /// Start demo backends and the gateway in front of them, on loopback.
    #[cfg(feature = "demo")]
    Demo(demo::DemoArgs),
    /// A small demo/test backend (not a product feature).
    #[cfg(feature = "demo")]
    Backend(backend::BackendArgs),
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Config file. Without it: ./hopgate.yaml if present, else the
    /// embedded default (listener 127.0.0.1:8080, admin 127.0.0.1:9901).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Take over from the hopgate running with this config: receive its
    /// listening sockets over `upgrade.socket` once this process has
    /// started, then tell it to drain (a zero-downtime binary upgrade).
    #[arg(long)]
    upgrade: bool,
    /// Write the process id to this file once serving (removed at exit
    /// while it still names this process; a binary upgrade's new process
    /// writes its own).
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    hopgate_control::set_build_commit(env!("HOPGATE_COMMIT"));
    let command = match (cli.command, cli.check) {
        (Some(_), true) => {
            eprintln!("hopgate: -t/--check takes no subcommand (hopgate -t -c FILE)");
            return ExitCode::from(2);
        }
        (None, true) => return check(cli.config.as_deref()),
        (Some(c), false) => {
            if cli.config.is_some() {
                eprintln!("hopgate: put -c after the subcommand (hopgate run -c FILE)");
                return ExitCode::from(2);
            }
            c
        }
        // `hopgate -c FILE` runs, like `nginx -c FILE`.
        (None, false) => Command::Run(RunArgs {
            config: cli.config,
            upgrade: false,
            pid_file: None,
        }),
    };
    match command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "hopgate", &mut out);
            return print_out(&out);
        }
        Command::Schema => return print_out(format!("{}\n", config::json_schema()).as_bytes()),
        _ => {}
    }
    // Dropped last: writes out the access lines still waiting.
    let _flusher = init_logging(
        cli.log_format,
        cli.log_level.as_deref(),
        default_filter(&command),
    );
    match command {
        Command::Validate { file, config } => match file.or(config) {
            Some(f) => validate(&f),
            None => ExitCode::from(2),
        },
        Command::Run(args) => {
            // Read (and unset) before the runtime's threads exist: the
            // variables are removed from the environment.
            let systemd = if args.upgrade {
                listenfd::Inherited::none()
            } else {
                listenfd::Inherited::from_systemd()
            };
            block_on(run(args, cli.log_format, systemd))
        }
        Command::Completions { .. } | Command::Schema => ExitCode::SUCCESS,
        #[cfg(feature = "demo")]
        Command::Demo(args) => block_on(demo::run(args)),
        #[cfg(feature = "demo")]
        Command::Backend(args) => block_on(backend::run(args)),
    }
}

/// The log filter when neither `--log-level` nor `RUST_LOG` is set.
fn default_filter(command: &Command) -> &'static str {
    match command {
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::log_filter(args),
        _ => "info",
    }
}

/// Event lines to stderr through `tracing`; access lines (formatted by the
/// data plane) through the buffered writer of [`logwriter`], off the
/// request path.
fn init_logging(
    format: LogFormat,
    level: Option<&str>,
    default_filter: &str,
) -> logwriter::Flusher {
    let filter = match level {
        Some(l) => tracing_subscriber::EnvFilter::new(l),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
    };
    let (writer, flusher) = logwriter::start(matches!(format, LogFormat::Json));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    flusher
}

/// How many runtime worker threads, and why.
fn worker_threads() -> (usize, String) {
    let set = ["HOPGATE_WORKER_THREADS", "TOKIO_WORKER_THREADS"]
        .iter()
        .find_map(|k| {
            let n = std::env::var(k).ok()?.parse::<usize>().ok()?;
            (n > 0).then(|| (n, format!("{k}={n}")))
        });
    set.unwrap_or_else(|| {
        // Honours the CPU affinity mask (taskset, cpusets) and cgroup CPU
        // quotas on Linux.
        let n = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let s = if n == 1 { "" } else { "s" };
        (n, format!("{n} available CPU{s}"))
    })
}

/// Builds the runtime: `HOPGATE_WORKER_THREADS` (or `TOKIO_WORKER_THREADS`)
/// worker threads, else one per available CPU; one thread is a
/// current-thread runtime (no work stealing, no cross-thread wake-ups).
fn block_on(fut: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let (threads, why) = worker_threads();
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let rt = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("hopgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if threads == 1 {
        tracing::info!(workers = 1, "runtime: current-thread ({why})");
    } else {
        tracing::info!(workers = threads, "runtime: multi-thread ({why})");
    }
    let res = rt.block_on(fut);
    // The access lines of the last requests go before an error message.
    logwriter::flush();
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hopgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn format_of(path: &Path) -> Format {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Format::Json,
        _ => Format::Yaml,
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn print_out(bytes: &[u8]) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("hopgate: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

/// `hopgate -t [-c FILE]`: the file `run` would load, checked.
fn check(file: Option<&Path>) -> ExitCode {
    match file {
        Some(f) => validate(f),
        None if Path::new("hopgate.yaml").exists() => validate(Path::new("hopgate.yaml")),
        None => match config::load(config::EMBEDDED_DEFAULT, Format::Yaml) {
            Ok(_) => {
                println!("embedded default: ok");
                ExitCode::SUCCESS
            }
            Err(errors) => {
                for e in &errors {
                    eprintln!("embedded default: {e}");
                }
                ExitCode::FAILURE
            }
        },
    }
}

fn validate(file: &Path) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{}: cannot read: {e}", file.display());
            return ExitCode::FAILURE;
        }
    };
    // Fleet mode: the local file must hold bootstrap sections only.
    let loaded = config::load(&text, format_of(file)).and_then(|cfg| match &cfg.sources.etcd {
        Some(_) => config::fleet::check_bootstrap(&cfg.raw).map(|()| cfg),
        None => Ok(cfg),
    });
    // The files route filters name (`direct_response.body_file`).
    let loaded = loaded
        .and_then(|cfg| hopgate_proxy::read_filter_bodies(cfg, &gateway::config_dir(Some(file))));
    // The certificate, key and CA files the `tls` blocks name.
    let loaded = loaded.and_then(|cfg| {
        hopgate_proxy::TlsMaterial::load(&cfg, &gateway::config_dir(Some(file))).map(|_| cfg)
    });
    // What `run` would refuse: listeners × max_connections beyond the
    // open-file limit a started process has (the hard limit).
    let loaded = loaded.and_then(|cfg| match cfg.limits.max_connections {
        Some(n) => config::check_fd_fit(cfg.listeners.len(), n, fdlimit::hard_nofile())
            .map(|()| cfg)
            .map_err(|e| vec![e]),
        None => Ok(cfg),
    });
    // The JWKS and htpasswd files the routes' `auth` blocks name.
    let loaded = loaded.and_then(|cfg| {
        hopgate_proxy::AuthMaterial::load(&cfg, &gateway::config_dir(Some(file))).map(|_| cfg)
    });
    match loaded {
        Ok(cfg) => {
            println!(
                "{}: ok ({})",
                file.display(),
                config::summary::summary(&cfg)
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{}: {e}", file.display());
            }
            eprintln!("{}: {} error(s)", file.display(), errors.len());
            ExitCode::FAILURE
        }
    }
}

async fn run(
    args: RunArgs,
    log_format: LogFormat,
    systemd: listenfd::Inherited,
) -> anyhow::Result<()> {
    let (text, format, source, watch) = read_config(args.config.as_deref())?;
    let path = watch.as_ref().map(|w| w.path().to_path_buf());
    let cfg = config::load(&text, format).or_else(|errors| {
        for e in &errors {
            eprintln!("config error: {e}");
        }
        anyhow::bail!("the config has {} error(s); not starting", errors.len())
    })?;
    let (cfg, source, fleet) = match cfg.sources.etcd.clone() {
        None => (cfg, source, None),
        Some(etcd) => fleet_boot(cfg, source, etcd, path.as_deref()).await?,
    };
    // Sockets: from the running process (--upgrade), else from systemd.
    let socket = upgrade::socket_path(
        cfg.upgrade.socket.as_deref(),
        cfg.replica_id.as_deref(),
        path.as_deref(),
    );
    let (taking, inherited, carried) = if args.upgrade {
        let (t, i, c) = upgrade::connect(&socket).await?;
        (Some(t), i, c)
    } else {
        (None, systemd, None)
    };
    // Without a previous process's state, the state kept in `state_dir`.
    let carried = match (carried, &cfg.state_dir) {
        (None, Some(dir)) if fleet.is_none() => {
            gateway::state::load(&gateway::state::dir(dir, path.as_deref()))
        }
        (carried, _) => carried,
    };
    let (cfg, resume) = resume_from(cfg, &source, carried, fleet.is_some());
    let mut gw = match gateway::Gateway::start(cfg, source, watch, inherited, resume).await {
        Ok(gw) => gw,
        Err(e) => {
            if let Some(t) = taking {
                t.fail(format!("{e:#}")).await;
            }
            return Err(e);
        }
    };
    let replica_id = gateway::replica_id(&gw.control.snapshot().load().config, gw.admin_addr);
    gw.start_fleet(replica_id, fleet);
    if let Some(t) = taking {
        if let Err(e) = t.take_over().await {
            // This process serves either way; the old one may linger.
            tracing::warn!(error = %format!("{e:#}"), "upgrade: the previous process did not confirm the drain");
        }
    }
    let (handed_tx, handed_rx) = tokio::sync::oneshot::channel();
    let server = upgrade::Server::start(&socket, gw.handover_source(), handed_tx);
    let (handed, pid) = serve(&gw, handed_rx, &args, path.as_deref(), log_format).await;
    if handed {
        gw.handover_drain().await;
    } else {
        if let Some(s) = server {
            s.stop();
        }
        sdnotify::notify("STOPPING=1");
        gw.shutdown().await;
    }
    if let Some(f) = pid {
        f.remove();
    }
    Ok(())
}

/// The config document `run` starts from: `--config`, else
/// `./hopgate.yaml`, else the embedded default. A file's watch is armed
/// before the file is read, so that an edit made from then on is seen as
/// one (`FileWatch`).
fn read_config(
    config: Option<&Path>,
) -> anyhow::Result<(String, Format, hopgate_control::Source, Option<FileWatch>)> {
    let file = match config {
        Some(p) => p.to_path_buf(),
        None if Path::new("hopgate.yaml").exists() => PathBuf::from("hopgate.yaml"),
        None => {
            tracing::info!("no --config and no ./hopgate.yaml: using the embedded default");
            return Ok((
                config::EMBEDDED_DEFAULT.to_owned(),
                Format::Yaml,
                hopgate_control::Source::Embedded,
                None,
            ));
        }
    };
    let watch = FileWatch::arm(file.clone());
    let text = std::fs::read_to_string(&file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    Ok((
        text,
        format_of(&file),
        hopgate_control::Source::File(file.display().to_string()),
        Some(watch),
    ))
}

/// Serves until SIGTERM/SIGINT (`false`) or until a new process took the
/// sockets (`true`); SIGUSR2 starts that new process. Every handler is
/// installed before the ready lines, so a signal right after them is never
/// the default action (exit); and one future spans all SIGUSR2s, so no
/// SIGTERM falls between two. The pid file is written once serving.
async fn serve(
    gw: &gateway::Gateway,
    mut handed_rx: tokio::sync::oneshot::Receiver<()>,
    args: &RunArgs,
    path: Option<&Path>,
    log_format: LogFormat,
) -> (bool, Option<pidfile::PidFile>) {
    let signals = gateway::wait_for_signals(gw);
    tokio::pin!(signals);
    let mut usr2 =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2()).ok();
    gw.print_ready();
    let pid = args
        .pid_file
        .as_deref()
        .and_then(|p| match pidfile::PidFile::write(p) {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "cannot write the pid file");
                None
            }
        });
    if args.upgrade {
        sdnotify::notify(&format!("MAINPID={}\nREADY=1", std::process::id()));
    } else {
        sdnotify::notify("READY=1");
    }
    let handed = loop {
        let usr2 = async {
            match usr2.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut signals => break false,
            Ok(()) = &mut handed_rx => break true,
            _ = usr2 => {
                tracing::info!("SIGUSR2: starting a new process to take over");
                upgrade::spawn_new(path, args.pid_file.as_deref(), log_format.as_str());
            }
        }
    };
    (handed, pid)
}

/// An upgrade's new process resumes the previous one's state (version
/// history, drains, maintenance state, a baking canary), and so does a
/// restart with `state_dir` from the state kept there. It starts from the
/// previous process's running config
/// (admin changes included) unless its config file was edited since that
/// file was last applied: then the edited file is what it runs, as the
/// next version. The file also wins when the carried document no longer
/// validates, and in fleet mode etcd holds the config.
fn resume_from(
    file_cfg: config::Config,
    source: &hopgate_control::Source,
    carried: Option<hopgate_control::Carried>,
    fleet: bool,
) -> (config::Config, Option<Resume>) {
    let Some(carried) = carried else {
        return (file_cfg, None);
    };
    if fleet {
        tracing::info!(
            "upgrade: fleet mode; the config comes from etcd, not from the previous process"
        );
        return (file_cfg, None);
    }
    if matches!(source, hopgate_control::Source::File(_))
        && !carried.file_unchanged(&file_cfg, source)
    {
        tracing::info!("upgrade: the config file changed since it was last applied; starting from it, with the previous process's history and drains");
        return (
            file_cfg,
            Some(Resume {
                carried,
                fresh: Some(source.clone()),
            }),
        );
    }
    match carried.config() {
        Ok(cfg) => {
            tracing::info!(
                version = carried.running,
                "upgrade: starting from the previous process's running config (an unchanged config file is applied again on SIGHUP)"
            );
            (
                cfg,
                Some(Resume {
                    carried,
                    fresh: None,
                }),
            )
        }
        Err(errors) => {
            for e in &errors {
                tracing::warn!("upgrade: the carried config is refused by this binary: {e}");
            }
            tracing::warn!("upgrade: starting from the config file instead");
            (
                file_cfg,
                Some(Resume {
                    carried,
                    fresh: Some(source.clone()),
                }),
            )
        }
    }
}

/// Fleet mode at start: the local file holds only bootstrap sections; the
/// runtime ones come from etcd, or from the cache when etcd is down.
async fn fleet_boot(
    local: config::Config,
    source: hopgate_control::Source,
    etcd: config::EtcdSourceConfig,
    path: Option<&Path>,
) -> anyhow::Result<(
    config::Config,
    hopgate_control::Source,
    Option<gateway::FleetBoot>,
)> {
    if let Err(errors) = config::fleet::check_bootstrap(&local.raw) {
        for e in &errors {
            eprintln!("config error: {e}");
        }
        anyhow::bail!("the config has {} error(s); not starting", errors.len());
    }
    let dir = path
        .and_then(Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let cache = dir.join(
        etcd.cache
            .clone()
            .unwrap_or_else(|| PathBuf::from(config::DEFAULT_ETCD_CACHE)),
    );
    let boot = hopgate_control::etcd::boot(&etcd, &cache).await;
    let mut cfg = local.clone();
    let mut src = source;
    if let Some(b) = &boot {
        let layer = hopgate_control::etcd::boot_layer(b.runtime.clone(), &b.view, &etcd.prefix);
        match config::validate(&config::fleet::compose(&local.raw, &layer)) {
            Ok(c) => {
                cfg = c;
                src = hopgate_control::Source::Etcd;
            }
            Err(errors) => {
                for e in &errors {
                    tracing::warn!(error = %e, "etcd: the boot document is invalid; starting with the local file only");
                }
            }
        }
    } else {
        tracing::warn!(
            "etcd: no shared config yet; starting with the local file only until etcd answers"
        );
    }
    let fleet = gateway::FleetBoot {
        config: etcd,
        cache,
        boot,
    };
    Ok((cfg, src, Some(fleet)))
}
