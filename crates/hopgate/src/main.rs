//! The `hopgate` binary: command line, wiring and signals.
//!
//! Owns process concerns only — parsing arguments, building the runtime,
//! logging setup, and turning signals into shutdown and reload. The gateway
//! itself lives in the library crates; `anyhow` is used here and nowhere
//! else.

/// mimalloc instead of glibc's malloc: the request path allocates a few
/// times per request (the request future, header maps, hyper's buffers),
/// and mimalloc's thread-local free lists make each allocation and free a
/// fraction of glibc's cost (measured in docs/BENCHMARKS.md).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(feature = "demo")]
mod backend;
#[cfg(feature = "demo")]
mod demo;
mod fdlimit;
mod gateway;
mod logwriter;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use hopgate_core::config::{self, Format};

/// hopgate: a zero-downtime HTTP gateway.
#[derive(Parser, Debug)]
#[command(name = "hopgate", version, about, long_about = None)]
struct Cli {
    /// Log format for the event and access logs.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the gateway.
    Run(RunArgs),
    /// Check a config file offline: exit 0 when valid, else print every error
    /// with its field path and exit 1.
    Validate {
        /// The config file (YAML, or JSON when it ends in .json).
        file: PathBuf,
    },
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Dropped last: writes out the access lines still waiting.
    let _flusher = init_logging(cli.log_format, default_filter(&cli.command));
    match cli.command {
        Command::Validate { file } => validate(&file),
        Command::Run(args) => block_on(run(args)),
        #[cfg(feature = "demo")]
        Command::Demo(args) => block_on(demo::run(args)),
        #[cfg(feature = "demo")]
        Command::Backend(args) => block_on(backend::run(args)),
    }
}

/// The log filter when `RUST_LOG` is not set.
fn default_filter(command: &Command) -> &'static str {
    match command {
        #[cfg(feature = "demo")]
        Command::Demo(args) => demo::log_filter(args),
        _ => "info",
    }
}

/// Everything to stderr through `tracing`; access lines through the
/// buffered writer of [`logwriter`], off the request path.
fn init_logging(format: LogFormat, default_filter: &str) -> logwriter::Flusher {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let (writer, flusher) = logwriter::start();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer);
    match format {
        LogFormat::Text => builder
            .event_format(logwriter::TextFormat::default())
            .init(),
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
    match loaded {
        Ok(cfg) => {
            println!(
                "{}: ok ({} listeners, {} services, {} routes)",
                file.display(),
                cfg.listeners.len(),
                cfg.services.len(),
                cfg.routes.len()
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

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let (text, format, source, path) = match args.config {
        Some(p) => {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", p.display()))?;
            let f = format_of(&p);
            (
                text,
                f,
                hopgate_control::Source::File(p.display().to_string()),
                Some(p),
            )
        }
        None if Path::new("hopgate.yaml").exists() => {
            let p = PathBuf::from("hopgate.yaml");
            let text = std::fs::read_to_string(&p)?;
            (
                text,
                Format::Yaml,
                hopgate_control::Source::File("hopgate.yaml".into()),
                Some(p),
            )
        }
        None => {
            tracing::info!("no --config and no ./hopgate.yaml: using the embedded default");
            (
                config::EMBEDDED_DEFAULT.to_owned(),
                Format::Yaml,
                hopgate_control::Source::Embedded,
                None,
            )
        }
    };
    let cfg = match config::load(&text, format) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors {
                eprintln!("config error: {e}");
            }
            anyhow::bail!("the config has {} error(s); not starting", errors.len());
        }
    };
    let (cfg, source, fleet) = match cfg.sources.etcd.clone() {
        None => (cfg, source, None),
        Some(etcd) => fleet_boot(cfg, source, etcd, path.as_deref()).await?,
    };
    let mut gw = gateway::Gateway::start(cfg, source, path).await?;
    let replica_id = gateway::replica_id(&gw.control.snapshot().load().config, gw.admin_addr);
    gw.start_fleet(replica_id, fleet);
    gw.print_ready();
    gateway::wait_for_signals(&gw).await;
    gw.shutdown().await;
    Ok(())
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
