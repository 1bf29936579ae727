//! The demo pipeline's shipper: writes real Parquet segments (telemetry with timestamps, ints,
//! floats and strings, every column with a field ID, signed policy), uploads them to the bucket of
//! the config's object_store sink, and records each as `Uploaded` in the parquet sink's segment
//! catalog — exactly what the registrar consumes.
//!
//! ```text
//! cargo run --example demo_shipper -- --config thadam.yaml --segments 5 --rows 1000
//! ```

use std::path::PathBuf;

use clap::Parser;
use thadam_iceberg::config::Config;
use thadam_iceberg::demo;
use thadam_iceberg::protocol::segment_log::SegmentLogWriter;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    config: PathBuf,
    /// How many segments to ship.
    #[arg(long, default_value_t = 5)]
    segments: u64,
    /// Rows per segment.
    #[arg(long, default_value_t = 1000)]
    rows: usize,
    /// The dataset (default: the parquet sink's first).
    #[arg(long)]
    dataset: Option<String>,
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
    let store = thadam_iceberg::store::object_store(&registrar.store, &registrar.url.bucket)?;
    let mut log = SegmentLogWriter::open(&registrar.source.catalog)?;
    let first = log.next_seq();
    for _ in 0..args.segments {
        // Segment ids continue across runs: the catalog's next sequence number is unique.
        let number = log.next_seq();
        let segment_id = format!("seg-{number:08}");
        let key = demo::object_key(
            &registrar.url.prefix,
            &registrar.pipeline,
            &dataset,
            &segment_id,
        );
        let batch = demo::telemetry_batch(number, args.rows)?;
        let parquet = demo::write_parquet(&[batch])?;
        demo::ship_segment(
            store.as_ref(),
            &mut log,
            &dataset,
            &segment_id,
            &key,
            parquet,
            args.rows as u64,
        )
        .await?;
        println!("shipped {key}");
    }
    println!(
        "shipped {} segments of {} rows to s3://{}/ (catalog records {}..{})",
        args.segments,
        args.rows,
        registrar.url.bucket,
        first,
        log.next_seq().saturating_sub(1)
    );
    Ok(())
}
