//! Embedding the registrar in a host runtime that keeps its own segment catalog (here an
//! in-memory one) and feeds it through a `ChannelFeed`, instead of the file the parquet sink
//! writes.
//!
//! ```text
//! cargo run --example embedded -- --config thadam.yaml --segments 3 --rows 1000
//! ```
//!
//! The host ships `--segments` demo telemetry segments to the config's bucket, records each in
//! its catalog, starts the registrar, replays every `Uploaded` entry it holds into the feed (a
//! feed replays from the start on every registrar start: the registrar keeps no cursor and skips
//! what the table already has), waits until all are handled, prints the status, stops.

#[path = "support/demo.rs"]
mod demo;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use object_store::ObjectStore;
// Everything a host needs is at the crate root.
use thadam_iceberg::{ChannelFeed, Config, Error, FeedSender, Registrar, UploadedSegment};

#[derive(Parser)]
struct Args {
    /// A thadam config with a `kind: iceberg` sink (its first one is used).
    #[arg(long)]
    config: PathBuf,
    /// How many segments the host ships before starting the registrar.
    #[arg(long, default_value_t = 3)]
    segments: u64,
    /// Rows per segment.
    #[arg(long, default_value_t = 1000)]
    rows: usize,
}

/// The host's own record of shipped segments, in catalog order. A real host keeps this
/// durable (its database, its WAL); what matters to the registrar is that every `Uploaded`
/// entry is replayed on each start, in order, with a stable `seq`.
#[derive(Default, Clone)]
struct HostCatalog {
    entries: Arc<Mutex<Vec<UploadedSegment>>>,
}

impl HostCatalog {
    fn record(&self, mut segment: UploadedSegment) -> Result<(), Error> {
        let mut entries = self
            .entries
            .lock()
            .map_err(|_| Error::internal("host catalog lock poisoned"))?;
        segment.seq = entries.len() as u64 + 1;
        entries.push(segment);
        Ok(())
    }

    fn snapshot(&self) -> Vec<UploadedSegment> {
        self.entries.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Replays every entry into the registrar's feed; a real host would keep sending new
    /// entries as its shipper records them.
    async fn replay_into(&self, feed: &FeedSender) -> Result<(), Error> {
        for segment in self.snapshot() {
            feed.send(segment).await?;
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Config::load(&args.config)?
        .registrars
        .into_iter()
        .next()
        .ok_or("the config has no iceberg sink")?;
    let dataset = config
        .source
        .datasets
        .first()
        .map(|d| d.name.clone())
        .ok_or("the parquet sink lists no dataset")?;

    // The host's shipper: upload, then record in the host's own catalog.
    let store = thadam_iceberg::testing::object_store(&config.store, &config.url.bucket)?;
    let catalog = HostCatalog::default();
    let run = uuid::Uuid::new_v4().simple().to_string();
    for n in 0..args.segments {
        let segment_id = format!("host-{}-{n:04}", &run[..8]);
        let key = demo::object_key(&config.url.prefix, &config.pipeline, &dataset, &segment_id);
        let parquet = demo::write_parquet(&[demo::telemetry_batch(n, args.rows)?])?;
        let file_size = parquet.len() as u64;
        store
            .put(&thadam_iceberg::testing::object_path(&key)?, parquet.into())
            .await?;
        catalog.record(UploadedSegment {
            seq: 0, // assigned by the catalog
            dataset: dataset.clone(),
            segment_id,
            object_key: key,
            file_size,
            row_count: args.rows as u64,
            uploaded_at_ms: u64::try_from(chrono::Utc::now().timestamp_millis())?,
            // No catalog identity: the registrar relies on the keys in the table alone.
            catalog_id: None,
        })?;
    }
    println!("host shipped {} segments", args.segments);

    // Start the registrar on a channel feed and replay the host catalog into it.
    let (sender, feed) = ChannelFeed::new(1024);
    let registrar = Registrar::builder(config).feed(feed).start().await?;
    catalog.replay_into(&sender).await?;

    let total = catalog.snapshot().len() as u64;
    let status = tokio::time::timeout(
        Duration::from_secs(300),
        registrar.wait_until(|s| s.handled() >= total),
    )
    .await
    .map_err(|_| "the registrar did not catch up within 5 minutes")??;
    for (table, t) in &status.tables {
        println!(
            "{table}: registered {}, skipped {}, backlog {}, commits {}, last error {}",
            t.registered,
            t.skipped,
            t.backlog,
            t.commits,
            t.last_error.as_deref().unwrap_or("none")
        );
    }

    // Stop: the host drops its sender (ends the feed) and asks the registrar to stop.
    drop(sender);
    registrar.stop();
    registrar.wait().await?;
    Ok(())
}
