//! Writing and shipping real Parquet segments, the way a thadam pipeline does: Arrow data with a
//! stable `PARQUET:field_id` on every column, written to Parquet, uploaded through object_store,
//! then recorded as `Uploaded` in the segment catalog. Used by the demo shipper, the embedded
//! example, the tests and the benchmarks (each includes this file with `#[path]`); it is not part
//! of the library: a real pipeline has its own sink and shipper.

// Each includer uses a different part.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use bytes::Bytes;
use object_store::ObjectStore;
use parquet::arrow::{ArrowWriter, PARQUET_FIELD_ID_META_KEY};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use thadam_iceberg::protocol::segment_log::{LogEntry, SegmentLogWriter};
use thadam_iceberg::{Error, Result};

/// An Arrow field carrying its Parquet field ID.
pub fn field(name: &str, data_type: DataType, nullable: bool, id: i32) -> Field {
    Field::new(name, data_type, nullable).with_metadata(HashMap::from([(
        PARQUET_FIELD_ID_META_KEY.to_string(),
        id.to_string(),
    )]))
}

/// The telemetry schema of the demo (signed policy: lineage columns are Int64).
pub fn telemetry_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        field(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
            1,
        ),
        field("device", DataType::Utf8, false, 2),
        field("reading_seq", DataType::Int64, false, 3),
        field("temperature_c", DataType::Float64, true, 4),
        field("battery_pct", DataType::Int32, true, 5),
        field("_wal_epoch", DataType::Int64, false, 6),
        field("_wal_pos", DataType::Int64, false, 7),
    ]))
}

/// `rows` telemetry rows of segment number `segment`; values are deterministic so tests can
/// check them after reading the table back: `reading_seq` runs from `segment * rows`.
pub fn telemetry_batch(segment: u64, rows: usize) -> Result<RecordBatch> {
    let base = segment * rows as u64;
    let start_us: i64 = 1_767_225_600_000_000 + (base as i64) * 1_000_000; // 2026-01-01 UTC
    let idx = 0..rows as i64;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                idx.clone().map(|i| start_us + i * 1_000_000),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from_iter_values(
            idx.clone().map(|i| format!("robot-{:02}", i % 7)),
        )),
        Arc::new(Int64Array::from_iter_values(
            idx.clone().map(|i| base as i64 + i),
        )),
        Arc::new(Float64Array::from_iter(
            idx.clone()
                .map(|i| (i % 11 != 0).then_some(20.0 + (i % 50) as f64 / 10.0)),
        )),
        Arc::new(Int32Array::from_iter(
            idx.clone()
                .map(|i| (i % 13 != 0).then_some(100 - (i % 100) as i32)),
        )),
        Arc::new(Int64Array::from_iter_values(idx.clone().map(|_| 1))),
        Arc::new(Int64Array::from_iter_values(idx.map(|i| base as i64 + i))),
    ];
    RecordBatch::try_new(telemetry_schema(), columns)
        .map_err(|e| Error::internal(format!("cannot build the demo batch: {e}")))
}

/// Encodes batches as one Parquet file (zstd), keeping the field IDs.
pub fn write_parquet(batches: &[RecordBatch]) -> Result<Bytes> {
    let schema = batches
        .first()
        .map(|b| b.schema())
        .ok_or_else(|| Error::internal("no batch to write"))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buf, schema, Some(props))
        .map_err(|e| Error::internal(format!("cannot start a Parquet file: {e}")))?;
    for batch in batches {
        writer
            .write(batch)
            .map_err(|e| Error::internal(format!("cannot write Parquet: {e}")))?;
    }
    writer
        .close()
        .map_err(|e| Error::internal(format!("cannot finish Parquet: {e}")))?;
    Ok(Bytes::from(buf))
}

/// The object key the shipper uses: `{prefix}/thadam/v1/{pipeline}/{dataset}/data/{segment}.parquet`.
pub fn object_key(prefix: &str, pipeline: &str, dataset: &str, segment_id: &str) -> String {
    let prefix = prefix.trim_matches('/');
    let tail = format!("thadam/v1/{pipeline}/{dataset}/data/{segment_id}.parquet");
    if prefix.is_empty() {
        tail
    } else {
        format!("{prefix}/{tail}")
    }
}

/// Uploads one segment and records it: `Finalized`, upload, then `Uploaded` (the order of the
/// real commit-then-ship chain). Returns the `Uploaded` record's sequence number.
pub async fn ship_segment(
    store: &dyn ObjectStore,
    log: &mut SegmentLogWriter,
    dataset: &str,
    segment_id: &str,
    key: &str,
    parquet: Bytes,
    rows: u64,
) -> Result<u64> {
    let size = parquet.len() as u64;
    log.append(LogEntry::Finalized {
        dataset: dataset.to_string(),
        segment_id: segment_id.to_string(),
        path: format!("{segment_id}.parquet"),
        row_count: rows,
        file_size: size,
    })?;
    store
        .put(&thadam_iceberg::testing::object_path(key)?, parquet.into())
        .await
        .map_err(|e| Error::unavailable(format!("uploading {key} failed: {e}")))?;
    log.append_uploaded(dataset, segment_id, key, size, rows)
}
