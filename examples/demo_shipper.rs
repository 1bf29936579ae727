//! The demo pipeline's shipper: writes real Parquet segments (telemetry with timestamps, ints,
//! floats and strings, every column with a field ID, signed policy), uploads them to the bucket of
//! the config's object_store sink, and records each as `Uploaded` in the parquet sink's segment
//! catalog — exactly what the registrar consumes.
//!
//! ```text
//! cargo run --example demo_shipper -- --config thadam.yaml --segments 5 --rows 1000
//! cargo run --example demo_shipper -- --config thadam.yaml --segments 2000 --rows 100 --concurrency 8 --quiet
//! cargo run --example demo_shipper -- --config thadam.yaml --rate 20 --duration 60s --rows 100
//! ```
//!
//! Three ways to ship:
//! - one by one (default): `Finalized`, upload, `Uploaded`, the order of a real pipeline;
//! - `--concurrency N` (a backlog, fast): up to N uploads in flight; as each finishes (in segment
//!   order) its `Finalized` and `Uploaded` records are appended together with one sync, so the
//!   catalog still lists the segments in order, but `Finalized` follows the upload;
//! - `--rate R --duration D` (steady flow): segment `i` is shipped one by one at `start + i / R`,
//!   `R × D` segments in all. A segment shipped late (the previous one took longer than `1 / R`)
//!   is shipped at once, never dropped; the summary line says how far behind schedule it got.
//!   `uploaded_at_ms` is stamped when the `Uploaded` record is written in every mode, so
//!   registration latency is measured from the real upload time either way.

#[path = "support/demo.rs"]
mod demo;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::Parser;
use futures::StreamExt;
use object_store::ObjectStore;
use thadam_iceberg::config::Config;
use thadam_iceberg::protocol::segment_log::{LogEntry, SegmentLogWriter};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    config: PathBuf,
    /// How many segments to ship (ignored with --rate).
    #[arg(long, default_value_t = 5)]
    segments: u64,
    /// Rows per segment.
    #[arg(long, default_value_t = 1000)]
    rows: usize,
    /// The dataset (default: the parquet sink's first).
    #[arg(long)]
    dataset: Option<String>,
    /// Uploads in flight at once (all-at-once mode only; 1 = one by one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    concurrency: u64,
    /// Ship at this many segments per second, for --duration.
    #[arg(long, requires = "duration")]
    rate: Option<f64>,
    /// How long to ship at --rate (e.g. 60s).
    #[arg(long, requires = "rate", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Print only the summary line, not one line per segment.
    #[arg(long)]
    quiet: bool,
}

/// What every mode needs to ship a segment.
struct Shipper {
    store: Arc<dyn ObjectStore>,
    log: SegmentLogWriter,
    prefix: String,
    pipeline: String,
    dataset: String,
    rows: usize,
    quiet: bool,
}

/// One encoded segment, ready to upload.
struct Segment {
    id: String,
    key: String,
    parquet: Bytes,
}

impl Shipper {
    /// Segment `number`'s id, key and Parquet bytes. Numbers come from the catalog's sequence
    /// numbers, so ids stay unique across runs.
    fn segment(&self, number: u64) -> Result<Segment, Box<dyn std::error::Error>> {
        let id = format!("seg-{number:08}");
        let key = demo::object_key(&self.prefix, &self.pipeline, &self.dataset, &id);
        let batch = demo::telemetry_batch(number, self.rows)?;
        let parquet = demo::write_parquet(&[batch])?;
        Ok(Segment { id, key, parquet })
    }

    /// Ships the next segment the way a pipeline does: `Finalized`, upload, `Uploaded`.
    async fn ship_one(&mut self) -> Result<(), Box<dyn std::error::Error>> {
        let segment = self.segment(self.log.next_seq())?;
        demo::ship_segment(
            self.store.as_ref(),
            &mut self.log,
            &self.dataset,
            &segment.id,
            &segment.key,
            segment.parquet,
            self.rows as u64,
        )
        .await?;
        if !self.quiet {
            println!("shipped {}", segment.key);
        }
        Ok(())
    }

    /// `count` segments, up to `concurrency` uploads in flight; records appended in order.
    async fn ship_concurrently(
        &mut self,
        count: u64,
        concurrency: usize,
    ) -> Result<(), Box<dyn std::error::Error>> {
        // Each segment takes two sequence numbers (Finalized, Uploaded), as one by one: the
        // writer holds the log's lock, so nobody else can take numbers meanwhile.
        let first = self.log.next_seq();
        let segments = (0..count)
            .map(|i| self.segment(first + 2 * i))
            .collect::<Result<Vec<_>, _>>()?;
        let store = self.store.as_ref();
        let mut uploads = futures::stream::iter(segments)
            .map(|segment| async move {
                let size = segment.parquet.len() as u64;
                store
                    .put(
                        &thadam_iceberg::testing::object_path(&segment.key)
                            .map_err(|e| e.to_string())?,
                        segment.parquet.into(),
                    )
                    .await
                    .map_err(|e| format!("uploading {} failed: {e}", segment.key))?;
                Ok::<_, String>((segment.id, segment.key, size))
            })
            .buffered(concurrency);
        while let Some(done) = uploads.next().await {
            let (id, key, size) = done?;
            let rows = self.rows as u64;
            self.log.append_all([
                LogEntry::Finalized {
                    dataset: self.dataset.clone(),
                    segment_id: id.clone(),
                    path: format!("{id}.parquet"),
                    row_count: rows,
                    file_size: size,
                },
                LogEntry::Uploaded {
                    dataset: self.dataset.clone(),
                    segment_id: id,
                    object_key: key.clone(),
                    file_size: size,
                    row_count: rows,
                    uploaded_at_ms: now_ms(),
                },
            ])?;
            if !self.quiet {
                println!("shipped {key}");
            }
        }
        Ok(())
    }

    /// `rate × duration` segments, one by one, segment `i` at `start + i / rate`.
    async fn ship_at_rate(
        &mut self,
        rate: f64,
        duration: Duration,
    ) -> Result<String, Box<dyn std::error::Error>> {
        let count = (rate * duration.as_secs_f64()).round() as u64;
        let start = Instant::now();
        let mut max_behind = Duration::ZERO;
        for i in 0..count {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            let now = Instant::now();
            if due > now {
                tokio::time::sleep_until(due.into()).await;
            } else {
                max_behind = max_behind.max(now - due);
            }
            self.ship_one().await?;
        }
        let took = start.elapsed().as_secs_f64();
        Ok(format!(
            "shipped {count} segments of {} rows in {took:.1} s ({:.2}/s from the first to the \
             last, target {rate}/s); at most {} ms behind schedule",
            self.rows,
            count.saturating_sub(1) as f64 / took.max(f64::EPSILON),
            max_behind.as_millis()
        ))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let config = Config::load(&args.config)?;
    let registrar = config
        .registrars
        .first()
        .ok_or("the config has no iceberg sink")?;
    let dataset = match args.dataset {
        Some(d) => d,
        None => registrar
            .source
            .datasets
            .first()
            .map(|d| d.name.clone())
            .ok_or("the parquet sink lists no dataset")?,
    };
    let store = thadam_iceberg::testing::object_store(&registrar.store, &registrar.url.bucket)?;
    let log = SegmentLogWriter::open(&registrar.source.catalog)?;
    let first = log.next_seq();
    let mut shipper = Shipper {
        store,
        log,
        prefix: registrar.url.prefix.clone(),
        pipeline: registrar.pipeline.clone(),
        dataset,
        rows: args.rows,
        quiet: args.quiet,
    };
    let summary = match (args.rate, args.duration) {
        (Some(rate), Some(duration)) => {
            if !(rate.is_finite() && rate > 0.0) {
                return Err(format!("--rate must be a positive number, not {rate}").into());
            }
            shipper.ship_at_rate(rate, duration).await?
        }
        _ => {
            let start = Instant::now();
            if args.concurrency > 1 {
                shipper
                    .ship_concurrently(args.segments, args.concurrency as usize)
                    .await?;
            } else {
                for _ in 0..args.segments {
                    shipper.ship_one().await?;
                }
            }
            format!(
                "shipped {} segments of {} rows in {:.1} s",
                args.segments,
                args.rows,
                start.elapsed().as_secs_f64()
            )
        }
    };
    println!(
        "{summary} to s3://{}/ (catalog records {}..{})",
        registrar.url.bucket,
        first,
        shipper.log.next_seq().saturating_sub(1)
    );
    Ok(())
}
