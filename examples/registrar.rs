//! The standalone registrar: runs every `kind: iceberg` sink of a thadam config.
//!
//! ```text
//! cargo run --example registrar -- --config thadam.yaml [--sink ID] [--until-caught-up]
//!     [--metrics-addr 0.0.0.0:9464] [--progress-interval 10s] [--json-logs]
//! cargo run --example registrar -- --config thadam.yaml --check
//! cargo run --example registrar -- --version
//! cargo run --example registrar -- --config thadam.yaml --quarantine list
//! cargo run --example registrar -- --config thadam.yaml --quarantine retry --key K | --code C | --all
//! cargo run --example registrar -- --config thadam.yaml --quarantine discard --key K --reason "..."
//! ```
//!
//! `--quarantine` works on the quarantine file of each selected sink (`quarantine_file`) and
//! exits; a running registrar picks up retries and discards within a second.
//!
//! `--metrics-addr` serves `/metrics` (Prometheus), `/healthz` and `/readyz`, and prints
//! `listening on http://ADDR` on stdout once bound (port 0 picks a free port). Logs go to stderr.
//!
//! Exit codes: 0 stopped cleanly (SIGINT/SIGTERM, or caught up with `--until-caught-up`), or
//! every `--check` passed; 2 `config.invalid`; 3 `auth.failed`; 4 `sink.iceberg_schema_mismatch`
//! or `sink.iceberg_unsupported_type`; 1 any other fatal error. A failed `--check` exits with the
//! code of its first failing check.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use thadam_iceberg::config::{Config, RegistrarConfig};
use thadam_iceberg::ops::catch_up::{self, CatchUp};
use thadam_iceberg::ops::health::Health;
use thadam_iceberg::ops::{check, http, progress};
use thadam_iceberg::protocol::segment_log::SegmentLogTail;
use thadam_iceberg::runtime::build_info;
use thadam_iceberg::{Error, ErrorCode, RegistrarHandle};
use thadam_iceberg::{Registrar, Tuning};
use tokio::sync::watch;

#[derive(Parser)]
#[command(
    name = "registrar",
    about = "Registers shipped Parquet segments into Iceberg tables",
    // `registrar --version`: the crate version and the git commit it was built from.
    version = build_info::VERSION_LINE
)]
struct Args {
    /// The thadam YAML config.
    #[arg(long)]
    config: PathBuf,
    /// Run only this iceberg sink (default: all of them).
    #[arg(long)]
    sink: Option<String>,
    /// Exit 0 once every segment already in the segment catalog at start is handled:
    /// registered, already in the table, or held in quarantine (see --quarantine list).
    #[arg(long)]
    until_caught_up: bool,
    /// Validate the config and connectivity, print one line per check, exit 0 if all pass.
    #[arg(long)]
    check: bool,
    /// Serve /metrics, /healthz and /readyz on this address (e.g. 0.0.0.0:9464).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
    /// How often to log a progress line while there is a backlog.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    progress_interval: Duration,
    /// The most segments one snapshot carries (tuning; default 100).
    #[arg(long)]
    max_batch: Option<usize>,
    /// Log JSON lines instead of human-readable text.
    #[arg(long)]
    json_logs: bool,
    /// Quarantine commands: list, retry (with --key, --code or --all), discard (with --key and
    /// --reason).
    #[arg(long, value_enum)]
    quarantine: Option<QuarantineCommand>,
    /// With --quarantine retry/discard: the object key.
    #[arg(long)]
    key: Option<String>,
    /// With --quarantine retry: every open entry with this error code.
    #[arg(long)]
    code: Option<String>,
    /// With --quarantine retry: every open entry.
    #[arg(long)]
    all: bool,
    /// With --quarantine discard: why the segment is given up (recorded).
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum QuarantineCommand {
    List,
    Retry,
    Discard,
}

/// glibc gives every thread that allocates its own malloc arena (up to 8 per core), and memory
/// freed in one arena is not reused by another: on an edge machine that fragmentation was ~10% of
/// the registrar's RSS under a backlog (74 -> 67 MiB at 100,000 segments with 2 arenas). Two
/// arenas unless the operator set `MALLOC_ARENA_MAX` (glibc reads that itself).
///
/// glibc also raises its mmap threshold (from 128 KiB up to 32 MiB) each time a large block is
/// freed, after which the megabyte-sized buffers of every commit (the catalog's answer, its parse,
/// a manifest) come from the heap and leave it fragmented. A fixed threshold keeps them in their
/// own mappings, returned to the system when freed (unless `MALLOC_MMAP_THRESHOLD_` is set).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt only changes allocator settings; called before any thread starts.
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, 2);
            }
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe {
                libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            }
        }
    }
}

/// Blocks from this size up get their own mapping (twice glibc's initial 128 KiB, kept fixed).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: libc::c_int = 256 * 1024;

/// Returns freed heap memory to the system (glibc keeps it otherwise).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn main() -> ExitCode {
    // Library errors capture a backtrace when RUST_BACKTRACE is set, and a dependency that logs
    // a retried error with `{:?}` prints it (opendal's retry layer, under the FileIO the
    // registrar once used, printed ~1,700 lines for a 20 s S3 outage). RUST_LIB_BACKTRACE=0 turns off capture in library errors
    // only; panics still print their backtrace under RUST_BACKTRACE. Set before any thread starts
    // (the runtime is built below), which is what makes `set_var` sound.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: single-threaded at this point; nothing reads the environment concurrently.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    limit_malloc_arenas();
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(async_main()),
        Err(e) => {
            eprintln!("error: internal: cannot start the tokio runtime: {e}");
            ExitCode::from(1)
        }
    }
}

async fn async_main() -> ExitCode {
    let args = Args::parse();
    init_logs(args.json_logs);
    if args.check {
        let report = check::check_file(&args.config, args.sink.as_deref()).await;
        print!("{report}");
        return match report.first_failure() {
            None if report.passed() => ExitCode::SUCCESS,
            None => ExitCode::from(1),
            Some(code) => ExitCode::from(exit_code(code)),
        };
    }
    if let Some(command) = args.quarantine {
        return match quarantine(command, &args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(exit_code(e.code()))
            }
        };
    }
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(code = %e.code(), "{}", e.message());
            eprintln!("error: {e}");
            ExitCode::from(exit_code(e.code()))
        }
    }
}

fn exit_code(code: ErrorCode) -> u8 {
    match code {
        ErrorCode::ConfigInvalid => 2,
        ErrorCode::AuthFailed => 3,
        ErrorCode::SchemaMismatch | ErrorCode::UnsupportedType => 4,
        _ => 1,
    }
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // stderr: stdout is for --check's report and the endpoint address.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let stop = stop_on_signal();
    let health = Health::default();
    if let Some(addr) = args.metrics_addr {
        let endpoints = http::Endpoints {
            metrics: Some(http::install_prometheus()?),
            health: health.clone(),
        };
        let mut until = stop.clone();
        let bound = http::serve_at(addr, endpoints, async move {
            let _ = until.wait_for(|s| *s).await;
        })
        .await?;
        println!("listening on http://{bound} (/metrics, /healthz, /readyz)");
        tracing::info!(%bound, "serving /metrics, /healthz and /readyz");
    }

    let config = Config::load(&args.config)?;
    let selected: Vec<RegistrarConfig> = config
        .registrars
        .into_iter()
        .filter(|r| args.sink.as_ref().is_none_or(|s| &r.id == s))
        .collect();
    if selected.is_empty() {
        return Err(Error::config_invalid(format!(
            "{} has no iceberg sink{}",
            args.config.display(),
            args.sink
                .map(|s| format!(" with id {s}"))
                .unwrap_or_default()
        )));
    }
    let mut tuning = Tuning::default();
    if let Some(max) = args.max_batch {
        tuning.max_batch = max.max(1);
    }

    // Start every sink; a stop request during a start (e.g. a catalog still unreachable) ends
    // the process cleanly.
    let mut running: Vec<Running> = Vec::new();
    for registrar in selected {
        let targets = if args.until_caught_up {
            let targets = catch_up::targets(&registrar.source.catalog, &registrar.namespace)?;
            // Counting went through a set of every distinct key (~30 MB for a million): hand
            // the freed memory back, or glibc keeps it for the whole run.
            release_freed_memory();
            targets
        } else {
            BTreeMap::new()
        };
        // The registrar logs its own start-up line (sink, catalog, version and commit).
        let sink = registrar.id.clone();
        let feed = SegmentLogTail::open(&registrar.source.catalog);
        let builder = Registrar::builder(registrar)
            .feed(feed)
            .tuning(tuning.clone());
        let mut stopped = stop.clone();
        let started = tokio::select! {
            started = health.start(builder) => started,
            _ = stopped.wait_for(|s| *s) => {
                tracing::info!("stop requested while starting");
                return stop_all(running, &health).await;
            }
        };
        match started {
            Ok(handle) => running.push(Running {
                sink,
                handle,
                targets,
            }),
            Err(e) => {
                // Stop what already runs before reporting the error.
                let _ = stop_all(running, &health).await;
                return Err(e);
            }
        }
    }

    let progress_task = tokio::spawn(progress::report(
        running
            .iter()
            .map(|r| (r.sink.clone(), r.handle.status_board()))
            .collect(),
        args.progress_interval,
    ));

    let mut stopped = stop.clone();
    // Woken by any registrar's status change (no polling); a registrar that stops on its own
    // also reports its fatal error there, and the 1 s tick covers one that stops otherwise.
    let mut changes: Vec<_> = running
        .iter()
        .map(|r| r.handle.status_board().subscribe())
        .collect();
    loop {
        for rx in &mut changes {
            rx.borrow_and_update();
        }
        if *stopped.borrow() {
            tracing::info!("stop requested; stopping");
            break;
        }
        // A registrar that stopped on its own stopped on a fatal error: stop the others.
        if running.iter().any(|r| r.handle.is_finished()) {
            break;
        }
        if args.until_caught_up
            && running
                .iter()
                .all(|r| catch_up::caught_up(&r.targets, &r.handle.status()))
        {
            tracing::info!("caught up");
            break;
        }
        // `running` is never empty here (no sink selected is an error above).
        let any_change =
            futures::future::select_all(changes.iter_mut().map(|rx| Box::pin(rx.changed())));
        tokio::select! {
            _ = stopped.changed() => {}
            _ = any_change => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    progress_task.abort();
    stop_all(running, &health).await
}

/// `--quarantine ...` on the quarantine file of every selected sink.
fn quarantine(command: QuarantineCommand, args: &Args) -> Result<(), Error> {
    use thadam_iceberg::ops::quarantine::{Selector, discard, list, retry};
    let config = Config::load(&args.config)?;
    let files: Vec<PathBuf> = config
        .registrars
        .iter()
        .filter(|r| args.sink.as_ref().is_none_or(|s| &r.id == s))
        .map(|r| r.quarantine_file.clone())
        .collect();
    if files.is_empty() {
        return Err(Error::config_invalid(format!(
            "{} has no iceberg sink to run --quarantine on",
            args.config.display()
        )));
    }
    for file in files {
        match command {
            QuarantineCommand::List => print!("{}", list(&file)?),
            QuarantineCommand::Retry => {
                let selector = match (&args.key, &args.code, args.all) {
                    (Some(k), None, false) => Selector::Key(k.clone()),
                    (None, Some(c), false) => Selector::Code(c.clone()),
                    (None, None, true) => Selector::All,
                    _ => {
                        return Err(Error::config_invalid(
                            "--quarantine retry takes exactly one of --key K, --code C, --all",
                        ));
                    }
                };
                let n = retry(&file, &selector)?;
                println!("{n} segment(s) marked for retry in {}", file.display());
            }
            QuarantineCommand::Discard => {
                let (Some(key), Some(reason)) = (&args.key, &args.reason) else {
                    return Err(Error::config_invalid(
                        "--quarantine discard needs --key K and --reason \"...\"",
                    ));
                };
                let n = discard(&file, key, reason)?;
                println!("{n} segment(s) discarded in {}", file.display());
            }
        }
    }
    Ok(())
}

/// One started sink.
struct Running {
    sink: String,
    handle: RegistrarHandle,
    /// With `--until-caught-up`: what each table must have handled before exiting.
    targets: BTreeMap<String, CatchUp>,
}

/// Stops every registrar and waits for all of them; the first fatal error wins.
async fn stop_all(running: Vec<Running>, health: &Health) -> Result<(), Error> {
    health.stopping();
    for r in &running {
        r.handle.stop();
    }
    let mut first_error = None;
    for r in running {
        if let Err(e) = r.handle.wait().await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// A flag that turns true on SIGINT or SIGTERM.
fn stop_on_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tx.send_replace(true);
        // Keep the sender: receivers then see the value, not a closed channel.
        std::future::pending::<()>().await;
    });
    rx
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
