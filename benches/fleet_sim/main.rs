//! The fleet simulator: many registrars in one process, each a node of a fleet on one table.
//!
//! Every node is a whole registrar started through the public API ([`Registrar::builder`] with
//! a [`ChannelFeed`]), with its own configuration (sink id, so its own writer id), its own lane
//! (each registrar draws its own) and its own segment log (a catalog id per node), all in one
//! tokio runtime; the node's pipeline (`ship.rs`) ships real Parquet segments through S3 on
//! `benches/contention.sh`'s schedule and feeds them in. What the nodes share is what a host
//! embedding many registrars shares: the process, its runtime and its metrics recorder (the
//! counters add up over the nodes, as a fleet's sum would).
//!
//! It is driven by `benches/contention.sh --in-process` (see its header), which makes the
//! table, reads the results back with pyiceberg and prints the same tables as for a fleet of
//! processes. The exchange with the driver goes through files in `--state`:
//!
//! 1. prints `listening on http://ADDR` (its `/metrics`) on stdout, starts the nodes (with
//!    `--warm-up`, each ships and registers one segment), then writes `sim-ready.json` (the
//!    process's memory before and after the nodes started);
//! 2. waits for `sim-start` (the load's t0, seconds since the epoch), then ships each node's
//!    segments; when all are shipped writes `sim-records.jsonl` (one line per segment) and
//!    `sim-fed.json` (how each node kept its schedule);
//! 3. on SIGTERM (the driver saw every segment handled, or gave up) stops every node, waits
//!    for each and writes `sim-exit.json` (each node's outcome, the memory at the end).

#[path = "../../examples/support/demo.rs"]
mod demo;
mod memory;
mod ship;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use serde::Serialize;
use thadam_iceberg::ops::http;
use thadam_iceberg::{ChannelFeed, Config, Error, FeedSender, Registrar, RegistrarHandle, Result};

#[derive(Parser)]
struct Args {
    /// The node's configuration (its first iceberg sink): every node gets a copy of its own.
    #[arg(long)]
    config: PathBuf,
    /// Where `/metrics` is served (port 0 picks one; the address is printed).
    #[arg(long)]
    metrics_addr: SocketAddr,
    /// Nodes (registrars) in this process.
    #[arg(long)]
    nodes: usize,
    /// Segments a second per node.
    #[arg(long)]
    rate: f64,
    /// The load's length in seconds.
    #[arg(long)]
    seconds: f64,
    /// Rows per segment.
    #[arg(long, default_value_t = 100)]
    rows: usize,
    /// The directory the exchange with the driver goes through.
    #[arg(long)]
    state: PathBuf,
    /// Every node ships one segment (`w-<node>`) and registers it before the load.
    #[arg(long)]
    warm_up: bool,
    /// How many nodes start (connect to the catalog) at once.
    #[arg(long, default_value_t = 32)]
    start_concurrency: usize,
}

/// A running node: its registrar and its pipeline's end of the feed.
struct Node {
    handle: RegistrarHandle,
    feed: FeedSender,
}

#[derive(Serialize)]
struct Ready {
    nodes: usize,
    before_nodes: memory::Rss,
    started: memory::Rss,
    start_s: f64,
    warm_up_s: Option<f64>,
}

#[derive(Serialize)]
struct Fed {
    t0: f64,
    ended: f64,
    per_node: u64,
    nodes: Vec<ship::NodeFed>,
    cpu_s: f64,
    processes: usize,
}

#[derive(Serialize)]
struct Exit {
    /// One per node: `ok`, or the error that stopped it (with its code).
    outcomes: Vec<String>,
    memory: memory::Rss,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // `cargo test --all-targets` and `cargo bench` run every bench target, with no arguments or
    // with `--bench`: the simulator needs the servers and the driver, so it says so and passes.
    if !std::env::args().any(|a| a == "--config") {
        eprintln!("fleet_sim: run by benches/contention.sh --in-process (see its header)");
        return std::process::ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet_sim: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    if args.nodes == 0 || args.rate <= 0.0 || args.seconds < 0.0 {
        return Err(Error::config_invalid(
            "--nodes must be at least 1, --rate above 0 and --seconds not negative",
        ));
    }
    serve_metrics(args.metrics_addr).await?;
    let template = Config::load(&args.config)?
        .registrars
        .into_iter()
        .next()
        .ok_or_else(|| Error::config_invalid("the config has no iceberg sink"))?;
    let plan = Arc::new(plan_for(&args, &template)?);
    let store = ship::pipeline_store()?;

    memory::release_freed();
    let before_nodes = memory::now();
    let started_at = Instant::now();
    let nodes = start_nodes(&args, &template).await?;
    let start_s = started_at.elapsed().as_secs_f64();
    let mut records = Vec::new();
    let warm_up_s = if args.warm_up {
        let at = Instant::now();
        records = warm_up(&nodes, &store, &plan).await?;
        Some(at.elapsed().as_secs_f64())
    } else {
        None
    };
    memory::release_freed();
    write_json(
        &args.state.join("sim-ready.json"),
        &Ready {
            nodes: nodes.len(),
            before_nodes,
            started: memory::now(),
            start_s,
            warm_up_s,
        },
    )?;
    eprintln!(
        "fleet_sim: {} nodes started in {start_s:.1} s; waiting for the start",
        nodes.len()
    );

    let t0 = wait_for_start(&args.state.join("sim-start")).await?;
    let first_seq = if args.warm_up { 2 } else { 1 };
    let cpu0 = cpu_s();
    let (fed, shipped) = feed_all(&nodes, &store, &plan, t0, first_seq).await?;
    records.extend(shipped);
    write_records(&args.state.join("sim-records.jsonl"), &records)?;
    write_json(
        &args.state.join("sim-fed.json"),
        &Fed {
            t0,
            ended: ship::now_ms() as f64 / 1000.0,
            per_node: plan.count,
            nodes: fed,
            cpu_s: cpu_s() - cpu0,
            processes: 0,
        },
    )?;
    eprintln!("fleet_sim: every segment shipped; running until SIGTERM");

    stop_signal().await;
    let outcomes = stop_all(nodes).await;
    write_json(
        &args.state.join("sim-exit.json"),
        &Exit {
            outcomes,
            memory: memory::now(),
        },
    )
}

/// Serves `/metrics` (every node's series, added up) and prints where.
async fn serve_metrics(addr: SocketAddr) -> Result<()> {
    let endpoints = http::Endpoints {
        metrics: Some(http::install_prometheus()?),
        health: Default::default(),
    };
    let bound = http::serve_at(addr, endpoints, std::future::pending()).await?;
    println!("listening on http://{bound} (/metrics)");
    Ok(())
}

/// What each node's pipeline ships: the config's first dataset, under the keys its shipper
/// would use.
fn plan_for(args: &Args, template: &thadam_iceberg::RegistrarConfig) -> Result<ship::Plan> {
    let dataset = template
        .source
        .datasets
        .first()
        .map(|d| d.name.clone())
        .ok_or_else(|| Error::config_invalid("the parquet sink has no dataset"))?;
    let prefix = template.url.prefix.trim_matches('/');
    Ok(ship::Plan {
        key_prefix: format!(
            "{prefix}{}thadam/v1/{}/{dataset}/data",
            if prefix.is_empty() { "" } else { "/" },
            template.pipeline
        ),
        dataset,
        rows: args.rows,
        rate: args.rate,
        count: (args.rate * args.seconds).round() as u64,
        nodes: args.nodes,
    })
}

/// Every node's load, all at once: how each kept its schedule, and every segment shipped.
async fn feed_all(
    nodes: &[Node],
    store: &Arc<dyn object_store::ObjectStore>,
    plan: &Arc<ship::Plan>,
    t0: f64,
    first_seq: u64,
) -> Result<(Vec<ship::NodeFed>, Vec<ship::Record>)> {
    let mut feeding = tokio::task::JoinSet::new();
    for (k, node) in nodes.iter().enumerate() {
        let pipeline = ship::feed_node(
            Arc::clone(store),
            node.feed.clone(),
            Arc::clone(plan),
            k,
            t0,
            first_seq,
        );
        feeding.spawn(async move { (k, pipeline.await) });
    }
    let mut fed = vec![ship::NodeFed::default(); nodes.len()];
    let mut records = Vec::new();
    while let Some(done) = feeding.join_next().await {
        let (k, shipped) =
            done.map_err(|e| Error::internal(format!("a pipeline task failed: {e}")))?;
        let (node_fed, node_records) = shipped?;
        fed[k] = node_fed;
        records.extend(node_records);
    }
    Ok((fed, records))
}

/// Stops every node and waits for each: `ok`, or the error that stopped it (with its code).
async fn stop_all(nodes: Vec<Node>) -> Vec<String> {
    for node in &nodes {
        node.handle.stop();
    }
    let mut outcomes = Vec::with_capacity(nodes.len());
    for node in nodes {
        outcomes.push(match node.handle.wait().await {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{}: {}", e.code(), e.message()),
        });
    }
    outcomes
}

/// One JSON object per line.
fn write_records(path: &Path, records: &[ship::Record]) -> Result<()> {
    let mut body = Vec::new();
    for record in records {
        serde_json::to_writer(&mut body, record)
            .map_err(|e| Error::internal(format!("cannot encode a record: {e}")))?;
        body.push(b'\n');
    }
    write_atomically(path, &body)
}

/// Starts every node, `--start-concurrency` at a time (each start connects to the catalog).
async fn start_nodes(args: &Args, template: &thadam_iceberg::RegistrarConfig) -> Result<Vec<Node>> {
    let starts = futures::stream::iter(0..args.nodes).map(|k| {
        let mut config = template.clone();
        // Its own sink id: the writer id in its snapshot summaries and its log lines.
        config.id = format!("{}-n{k:04}", template.id);
        config.quarantine_file = args.state.join(format!("quarantine-n{k:04}.log"));
        async move {
            // Room for a burst of a node's segments while its committer is busy.
            let (feed, channel) = ChannelFeed::new(64);
            let handle = Registrar::builder(config).feed(channel).start().await?;
            Ok::<_, Error>((k, Node { handle, feed }))
        }
    });
    let mut started: Vec<(usize, Node)> = starts
        .buffer_unordered(args.start_concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    started.sort_by_key(|(k, _)| *k);
    Ok(started.into_iter().map(|(_, node)| node).collect())
}

/// Every node ships one segment and registers it, so that each has loaded the table and
/// committed (or been carried) before anything is timed, as the processes' warm-up does.
async fn warm_up(
    nodes: &[Node],
    store: &Arc<dyn object_store::ObjectStore>,
    plan: &ship::Plan,
) -> Result<Vec<ship::Record>> {
    let mut records = Vec::with_capacity(nodes.len());
    for (k, node) in nodes.iter().enumerate() {
        let id = format!("w-n{k:04}");
        records.push(
            ship::ship_one(&**store, &node.feed, plan, k, 1, id, 3_000_000 + k as u64).await?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120 + nodes.len() as u64 / 4);
    loop {
        let waiting = nodes
            .iter()
            .filter(|n| n.handle.status().handled() < 1)
            .count();
        if waiting == 0 {
            return Ok(records);
        }
        if let Some(node) = nodes.iter().find(|n| n.handle.is_finished()) {
            let fatal = node.handle.status().fatal.unwrap_or_default();
            return Err(Error::internal(format!(
                "a node stopped in the warm-up: {fatal}"
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::unavailable(format!(
                "warm-up: {waiting} of {} nodes had not registered their segment in time",
                nodes.len()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_for_start(path: &Path) -> Result<f64> {
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text.trim().parse().map_err(|e| {
                Error::config_invalid(format!("{} is not a time: {e}", path.display()))
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The process's CPU seconds (user + system) so far.
fn cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    let body = serde_json::to_vec(value)
        .map_err(|e| Error::internal(format!("cannot encode {}: {e}", path.display())))?;
    write_atomically(path, &body)
}

/// Written whole or not at all: the driver polls for these files.
fn write_atomically(path: &Path, body: &[u8]) -> Result<()> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, body)
        .and_then(|()| std::fs::rename(&partial, path))
        .map_err(|e| Error::internal(format!("cannot write {}: {e}", path.display())))
}
