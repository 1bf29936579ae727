//! The pipelines of the simulated nodes: node k's segment i is due at `t0 + (i + k/N) / rate`
//! (nodes evenly out of phase, as `benches/contention.sh`'s feeders schedule them), written as
//! a real Parquet file with field IDs, PUT through S3, then sent to that node's registrar as an
//! `Uploaded` entry stamped at that moment, as a pipeline's shipper records it. A segment that
//! is late (the previous PUT took longer) ships late, never dropped.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use object_store::ObjectStore;
use serde::Serialize;
use thadam_iceberg::{Error, FeedSender, Result, UploadedSegment};

use crate::demo;

/// What one node's pipeline ships.
#[derive(Clone)]
pub struct Plan {
    pub dataset: String,
    /// `{url prefix}/thadam/v1/{pipeline}/{dataset}/data`, where the runners' shippers put theirs.
    pub key_prefix: String,
    pub rows: usize,
    pub rate: f64,
    pub count: u64,
    pub nodes: usize,
}

/// One shipped segment, as the run's analysis reads it (the fields of a segment catalog log's
/// `uploaded` record that `benches/contention/contention.py` uses).
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub segment_id: String,
    pub object_key: String,
    pub uploaded_at_ms: u64,
    pub seq: u64,
}

/// How one node's pipeline kept its schedule.
#[derive(Debug, Default, Clone, Serialize)]
pub struct NodeFed {
    pub shipped: u64,
    pub max_behind_s: f64,
    pub ship_p50_ms: Option<f64>,
    pub ship_max_ms: Option<f64>,
}

/// The pipelines' own S3 client, as the processes' feeders have theirs: straight to the server
/// named by `scripts/servers`' `THADAM_TEST_S3_*` (not through any front), and outside the
/// registrars' request counters (`thadam_iceberg_store_requests_total` counts the nodes' own).
pub fn pipeline_store() -> Result<Arc<dyn ObjectStore>> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| Error::config_invalid(format!("{name} is not set")))
    };
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(var("THADAM_TEST_S3_ENDPOINT")?)
        .with_region(var("THADAM_TEST_S3_REGION")?)
        .with_bucket_name(var("THADAM_TEST_BUCKET")?)
        .with_access_key_id(var("THADAM_TEST_S3_ACCESS_KEY")?)
        .with_secret_access_key(var("THADAM_TEST_S3_SECRET_KEY")?)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .build()
        .map_err(|e| Error::config_invalid(format!("the pipelines' S3 client: {e}")))?;
    Ok(Arc::new(store))
}

/// The catalog id of node k's log: its watermark's key in the table, as a segment log's id is.
pub fn catalog_id(node: usize) -> String {
    format!("fleet-sim-n{node:04}")
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Ships one segment of node `node` and hands it to its registrar.
pub async fn ship_one(
    store: &dyn ObjectStore,
    feed: &FeedSender,
    plan: &Plan,
    node: usize,
    seq: u64,
    segment_id: String,
    number: u64,
) -> Result<Record> {
    let batch = demo::telemetry_batch(number, plan.rows)?;
    let parquet = demo::write_parquet(&[batch])?;
    let size = parquet.len() as u64;
    let object_key = format!("{}/{segment_id}.parquet", plan.key_prefix);
    store
        .put(
            &thadam_iceberg::testing::object_path(&object_key)?,
            parquet.into(),
        )
        .await
        .map_err(|e| Error::unavailable(format!("uploading {object_key} failed: {e}")))?;
    let uploaded_at_ms = now_ms();
    feed.send(UploadedSegment {
        seq,
        dataset: plan.dataset.clone(),
        segment_id: segment_id.clone(),
        object_key: object_key.clone(),
        file_size: size,
        row_count: plan.rows as u64,
        uploaded_at_ms,
        catalog_id: Some(catalog_id(node)),
    })
    .await?;
    Ok(Record {
        segment_id,
        object_key,
        uploaded_at_ms,
        seq,
    })
}

/// Node `node`'s load: `plan.count` segments on its schedule from `t0` (seconds since the
/// epoch), after the `first_seq - 1` entries its feed already had.
pub async fn feed_node(
    store: Arc<dyn ObjectStore>,
    feed: FeedSender,
    plan: Arc<Plan>,
    node: usize,
    t0: f64,
    first_seq: u64,
) -> Result<(NodeFed, Vec<Record>)> {
    let mut fed = NodeFed::default();
    let mut took = Vec::with_capacity(plan.count as usize);
    let mut records = Vec::with_capacity(plan.count as usize);
    for i in 0..plan.count {
        let due = t0 + (i as f64 + node as f64 / plan.nodes as f64) / plan.rate;
        let now = now_ms() as f64 / 1000.0;
        if due > now {
            tokio::time::sleep(Duration::from_secs_f64(due - now)).await;
        } else {
            fed.max_behind_s = fed.max_behind_s.max(now - due);
        }
        let started = std::time::Instant::now();
        let number = node as u64 * 1_000_000 + i;
        let id = format!("n{node:04}-{i:05}");
        records.push(ship_one(&*store, &feed, &plan, node, first_seq + i, id, number).await?);
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        fed.shipped += 1;
    }
    took.sort_by(f64::total_cmp);
    fed.ship_p50_ms = took.get(took.len().saturating_sub(1) / 2).copied();
    fed.ship_max_ms = took.last().copied();
    Ok((fed, records))
}
