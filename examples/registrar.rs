//! The standalone registrar: runs every `kind: iceberg` sink of a thadam config.
//!
//! ```text
//! cargo run --example registrar -- --config thadam.yaml [--sink ID] [--until-caught-up]
//!     [--metrics-addr 0.0.0.0:9464] [--progress-interval 10s] [--json-logs]
//! cargo run --example registrar -- --config thadam.yaml --check
//! ```
//!
//! `--metrics-addr` serves `/metrics` (Prometheus), `/healthz` and `/readyz`, and prints
//! `listening on http://ADDR` on stdout once bound (port 0 picks a free port). Logs go to stderr.
//!
//! Exit codes: 0 stopped cleanly (SIGINT/SIGTERM, or caught up with `--until-caught-up`), or
//! every `--check` passed; 2 `config.invalid`; 3 `auth.failed`; 4 `sink.iceberg_schema_mismatch`
//! or `sink.iceberg_unsupported_type`; 1 any other fatal error. A failed `--check` exits with the
//! code of its first failing check.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use thadam_iceberg::actors::context::Tuning;
use thadam_iceberg::config::{Config, RegistrarConfig};
use thadam_iceberg::ops::health::Health;
use thadam_iceberg::ops::{check, http, progress};
use thadam_iceberg::protocol::segment_log::{LogEntry, SegmentLogReader, SegmentLogTail};
use thadam_iceberg::{Error, ErrorCode, RegistrarHandle};
use tokio::sync::watch;

#[derive(Parser)]
#[command(about = "Registers shipped Parquet segments into Iceberg tables")]
struct Args {
    /// The thadam YAML config.
    #[arg(long)]
    config: PathBuf,
    /// Run only this iceberg sink (default: all of them).
    #[arg(long)]
    sink: Option<String>,
    /// Exit 0 once every segment already in the segment catalog at start is registered.
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
}

fn main() -> ExitCode {
    // Library errors capture a backtrace when RUST_BACKTRACE is set: opendal's retry layer (S3
    // writes of iceberg's FileIO) logs each retried error with `{:?}`, which prints it, so a 20 s
    // S3 outage printed ~1,700 lines. RUST_LIB_BACKTRACE=0 turns off capture in library errors
    // only; panics still print their backtrace under RUST_BACKTRACE. Set before any thread starts
    // (the runtime is built below), which is what makes `set_var` sound.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: single-threaded at this point; nothing reads the environment concurrently.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
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
        let metrics = http::install_prometheus()?;
        let listener = http::bind(addr).await?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::internal(format!("the metrics listener has no address: {e}")))?;
        let endpoints = http::Endpoints {
            metrics: Some(metrics),
            health: health.clone(),
        };
        let mut until = stop.clone();
        http::serve(listener, endpoints, async move {
            let _ = until.wait_for(|s| *s).await;
        });
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
        let target = if args.until_caught_up {
            uploaded_so_far(&registrar.source.catalog)?
        } else {
            0
        };
        let sink = registrar.id.clone();
        tracing::info!(
            sink = %registrar.id,
            catalog = %thadam_iceberg::catalog::redacted_url(&registrar.catalog_uri),
            "starting"
        );
        let feed = Box::new(SegmentLogTail::open(&registrar.source.catalog));
        let mut stopped = stop.clone();
        let started = tokio::select! {
            started = health.start(registrar, feed, tuning.clone()) => started,
            _ = stopped.wait_for(|s| *s) => {
                tracing::info!("stop requested while starting");
                return stop_all(running, &health).await;
            }
        };
        match started {
            Ok(handle) => running.push(Running {
                sink,
                handle,
                target,
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
    loop {
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
                .all(|r| r.handle.status().handled() >= r.target)
        {
            tracing::info!("caught up");
            break;
        }
        tokio::select! {
            _ = stopped.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    progress_task.abort();
    stop_all(running, &health).await
}

/// One started sink.
struct Running {
    sink: String,
    handle: RegistrarHandle,
    /// With `--until-caught-up`: the segments to handle before exiting.
    target: u64,
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

/// How many `Uploaded` records the segment catalog holds now.
fn uploaded_so_far(path: &std::path::Path) -> Result<u64, Error> {
    if !path.exists() {
        return Ok(0);
    }
    let records = SegmentLogReader::open(path)?.read_to_end()?;
    Ok(records
        .iter()
        .filter(|r| matches!(r.entry, LogEntry::Uploaded { .. }))
        .count() as u64)
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
