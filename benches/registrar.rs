//! Micro-benchmarks of the registrar's per-segment and per-commit work.
//!
//! - `committed_set/rebuild`: rebuilding the committed set from table metadata with N snapshots
//!   (startup, and after every failed commit). It reads snapshot summaries and properties only,
//!   so its cost follows the metadata, never the number of data files.
//! - `committed_set/contains`: the per-segment skip check on a table with 10,000 snapshots.
//! - `footer/decode_and_convert`: decoding a segment footer and converting its schema.
//! - `schema/merge`: merging a file schema that adds a column into the table schema.
//!
//! `cargo bench --bench registrar` (criterion; reports medians).

#[path = "../examples/support/demo.rs"]
mod demo;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use iceberg::spec::TableMetadata;
use parquet::arrow::parquet_to_arrow_schema;
use parquet::file::metadata::ParquetMetaDataReader;
use serde_json::json;
use thadam_iceberg::protocol::segment::UploadedSegment;
use thadam_iceberg::table::CommittedSet;
use thadam_iceberg::table::committed::{SEGMENT_IDS, WATERMARK_PREFIX, encode_ids};
use thadam_iceberg::table::schema::convert::file_schema;
use thadam_iceberg::table::schema::merge::merge;

fn key(i: u64) -> String {
    format!("lake/thadam/v1/edge-capture/telemetry/data/seg-{i:08}.parquet")
}

/// Table metadata with `snapshots` registrar snapshots of `per_snapshot` segments each.
fn metadata(snapshots: u64, per_snapshot: u64) -> TableMetadata {
    let schema =
        serde_json::to_value(file_schema(&demo::telemetry_schema(), "telemetry").expect("schema"))
            .expect("json");
    let snaps: Vec<_> = (1..=snapshots)
        .map(|s| {
            let keys: Vec<String> = (0..per_snapshot)
                .map(|k| key(s * per_snapshot + k))
                .collect();
            let mut snap = json!({
                "snapshot-id": s,
                "sequence-number": s,
                "timestamp-ms": 1_767_225_600_000u64 + s,
                "manifest-list": format!("s3://warehouse/lake/metadata/snap-{s}.avro"),
                "schema-id": 0,
                "summary": { "operation": "append", SEGMENT_IDS: encode_ids(keys.iter().map(String::as_str)) },
            });
            if s > 1 {
                snap["parent-snapshot-id"] = json!(s - 1);
            }
            snap
        })
        .collect();
    let doc = json!({
        "format-version": 2,
        "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
        "location": "s3://warehouse/lake/thadam/v1/edge-capture/telemetry",
        "last-sequence-number": snapshots,
        "last-updated-ms": 1_767_225_600_000u64,
        "last-column-id": 7,
        "current-schema-id": 0,
        "schemas": [schema],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": { format!("{WATERMARK_PREFIX}log-1"): (snapshots * per_snapshot).to_string() },
        "current-snapshot-id": snapshots,
        "refs": {"main": {"snapshot-id": snapshots, "type": "branch"}},
        "snapshots": snaps,
        "snapshot-log": [],
        "metadata-log": [],
    });
    serde_json::from_value(doc).expect("valid metadata")
}

fn committed_set(c: &mut Criterion) {
    let mut group = c.benchmark_group("committed_set/rebuild");
    group.sample_size(20);
    for snapshots in [1_000u64, 10_000] {
        let md = metadata(snapshots, 1);
        group.bench_with_input(BenchmarkId::from_parameter(snapshots), &md, |b, md| {
            b.iter(|| black_box(CommittedSet::from_metadata(md)))
        });
    }
    group.finish();

    let set = CommittedSet::from_metadata(&metadata(10_000, 1));
    let probe = UploadedSegment {
        seq: 20_000,
        dataset: "telemetry".into(),
        segment_id: "x".into(),
        object_key: key(20_000),
        file_size: 1,
        row_count: 1,
        uploaded_at_ms: 0,
        catalog_id: Some("log-2".into()),
    };
    c.bench_function("committed_set/contains (10k snapshots, miss)", |b| {
        b.iter(|| black_box(set.contains(black_box(&probe))))
    });
}

fn footer(c: &mut Criterion) {
    let file =
        demo::write_parquet(&[demo::telemetry_batch(0, 10_000).expect("batch")]).expect("parquet");
    let n = file.len();
    let len = u32::from_le_bytes([file[n - 8], file[n - 7], file[n - 6], file[n - 5]]) as usize;
    let footer = file.slice(n - 8 - len..n - 8);
    c.bench_function("footer/decode_and_convert", |b| {
        b.iter(|| {
            let md = ParquetMetaDataReader::decode_metadata(black_box(&footer)).expect("decode");
            let fm = md.file_metadata();
            let arrow =
                parquet_to_arrow_schema(fm.schema_descr(), fm.key_value_metadata()).expect("arrow");
            black_box(file_schema(&arrow, "telemetry").expect("iceberg"))
        })
    });
}

fn schema_merge(c: &mut Criterion) {
    let table = file_schema(&demo::telemetry_schema(), "telemetry").expect("table schema");
    let mut fields: Vec<arrow_schema::Field> = demo::telemetry_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(demo::field(
        "humidity",
        arrow_schema::DataType::Float64,
        true,
        8,
    ));
    let file = file_schema(&arrow_schema::Schema::new(fields), "telemetry").expect("file schema");
    c.bench_function("schema/merge (adds a column)", |b| {
        b.iter(|| black_box(merge(black_box(&table), black_box(&file), 1)))
    });
    c.bench_function("schema/merge (identical)", |b| {
        b.iter(|| black_box(merge(black_box(&table), black_box(&table), 1)))
    });
}

criterion_group!(benches, committed_set, footer, schema_merge);
criterion_main!(benches);
