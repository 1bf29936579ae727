//! The standalone registrar: runs every `kind: iceberg` sink of a thadam config.
//!
//! ```text
//! cargo run --example registrar -- --config thadam.yaml [--sink ID] [--until-caught-up] [--json-logs]
//! ```
//!
//! Exit codes: 0 stopped cleanly (SIGINT/SIGTERM, or caught up with `--until-caught-up`);
//! 2 `config.invalid`; 3 `auth.failed`; 4 `sink.iceberg_schema_mismatch` or
//! `sink.iceberg_unsupported_type`; 1 any other fatal error.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use thadam_iceberg::config::Config;
use thadam_iceberg::protocol::segment_log::{LogEntry, SegmentLogReader};
use thadam_iceberg::{Error, ErrorCode, Registrar};

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
    /// Log JSON lines instead of human-readable text.
    #[arg(long)]
    json_logs: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    init_logs(args.json_logs);
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(code = %e.code(), "{}", e.message());
            eprintln!("error: {e}");
            ExitCode::from(exit_code(&e))
        }
    }
}

fn exit_code(e: &Error) -> u8 {
    match e.code() {
        ErrorCode::ConfigInvalid => 2,
        ErrorCode::AuthFailed => 3,
        ErrorCode::SchemaMismatch | ErrorCode::UnsupportedType => 4,
        _ => 1,
    }
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let config = Config::load(&args.config)?;
    let selected: Vec<_> = config
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
    let mut running = Vec::new();
    for registrar in selected {
        let target = if args.until_caught_up {
            Some(uploaded_so_far(&registrar.source.catalog)?)
        } else {
            None
        };
        tracing::info!(sink = %registrar.id, catalog = %registrar.catalog_uri, "starting");
        running.push((Registrar::start(registrar).await?, target));
    }
    if args.until_caught_up {
        for (handle, target) in &running {
            let target = target.unwrap_or(0);
            let status = handle.wait_until(|s| s.handled() >= target).await?;
            tracing::info!(handled = status.handled(), "caught up");
        }
    } else {
        shutdown_signal().await;
        tracing::info!("stopping");
    }
    let mut first_error = None;
    for (handle, _) in running {
        handle.stop();
        if let Err(e) = handle.wait().await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
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
