//! Micro-benchmarks of the registrar's per-segment and per-commit work.
//!
//! - `committed_set/rebuild`: rebuilding the committed set from table metadata with N snapshots
//!   (startup, and after every failed commit). It reads snapshot summaries and properties only,
//!   so its cost follows the metadata, never the number of data files.
//! - `committed_set/contains`: the per-segment skip check on a table with 10,000 snapshots.
//! - `footer/decode_and_convert`: decoding a segment footer and converting its schema.
//! - `schema/merge`: merging a file schema that adds a column into the table schema.
//! - `commit_answer`: taking a catalog's answer to an append, at 1,000 one-segment snapshots (a
//!   trickle under retention) and at 200 snapshots of 500 segments (a backlog): parsing it in full
//!   into iceberg's `TableMetadata` (and dropping the previous one), as the registrar did, against
//!   building the table from the commit's own updates and checking the answer (`adopt`).
//!
//! `cargo bench --bench registrar` (criterion; reports medians).

#[path = "../examples/support/demo.rs"]
mod demo;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use std::collections::HashMap;

use iceberg::TableUpdate;
use iceberg::spec::{
    MAIN_BRANCH, Operation, Snapshot, SnapshotReference, SnapshotRetention, Summary, TableMetadata,
};
use iceberg_catalog_rest::CommitTableResponse;
use parquet::arrow::parquet_to_arrow_schema;
use parquet::file::metadata::ParquetMetaDataReader;
use serde_json::json;
use thadam_iceberg::protocol::segment::UploadedSegment;
use thadam_iceberg::testing::CommittedSet;
use thadam_iceberg::testing::file_schema;
use thadam_iceberg::testing::merge;
use thadam_iceberg::testing::{
    CATALOG_SEQ, SEGMENT_COUNT, SEGMENT_IDS, WATERMARK_KEY, WATERMARK_PREFIX, WRITER, encode_ids,
};

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
                // What a registrar snapshot's summary holds (the totals, the registrar's keys).
                "summary": {
                    "operation": "append",
                    SEGMENT_IDS: encode_ids(keys.iter().map(String::as_str)),
                    SEGMENT_COUNT: per_snapshot.to_string(),
                    CATALOG_SEQ: (s * per_snapshot).to_string(),
                    WRITER: "iceberg/edge-capture",
                    WATERMARK_KEY: format!("{WATERMARK_PREFIX}log-1"),
                    "added-data-files": per_snapshot.to_string(),
                    "added-records": (100 * per_snapshot).to_string(),
                    "added-files-size": (4460 * per_snapshot).to_string(),
                    "changed-partition-count": "1",
                    "total-records": (100 * s * per_snapshot).to_string(),
                    "total-files-size": (4460 * s * per_snapshot).to_string(),
                    "total-data-files": (s * per_snapshot).to_string(),
                    "total-delete-files": "0",
                    "total-position-deletes": "0",
                    "total-equality-deletes": "0",
                },
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
        "snapshot-log": (1..=snapshots)
            .map(|s| json!({"snapshot-id": s, "timestamp-ms": 1_767_225_600_000u64 + s}))
            .collect::<Vec<_>>(),
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

/// The updates of the next append to `base` (a watermark, a snapshot of `per_snapshot`
/// segments on `main`) and the catalog's answer to them (the same updates applied, as JSON).
fn append_and_answer(base: &TableMetadata, per_snapshot: u64) -> (Vec<TableUpdate>, Vec<u8>) {
    let id = 1_000_000;
    let keys: Vec<String> = (0..per_snapshot).map(|k| key(id as u64 + k)).collect();
    let snapshot = Snapshot::builder()
        .with_snapshot_id(id)
        .with_parent_snapshot_id(base.current_snapshot_id())
        .with_sequence_number(base.next_sequence_number())
        .with_timestamp_ms(1_767_225_700_000)
        .with_manifest_list("s3://warehouse/lake/metadata/snap-next.avro")
        .with_schema_id(0)
        .with_summary(Summary {
            operation: Operation::Append,
            additional_properties: HashMap::from([(
                SEGMENT_IDS.to_string(),
                encode_ids(keys.iter().map(String::as_str)),
            )]),
        })
        .build();
    let updates = vec![
        TableUpdate::SetProperties {
            updates: HashMap::from([(format!("{WATERMARK_PREFIX}log-1"), "9".to_string())]),
        },
        TableUpdate::AddSnapshot { snapshot },
        TableUpdate::SetSnapshotRef {
            ref_name: MAIN_BRANCH.to_string(),
            reference: SnapshotReference::new(id, SnapshotRetention::branch(None, None, None)),
        },
    ];
    let mut builder = base.clone().into_builder(Some(LOCATION.to_string()));
    for u in &updates {
        builder = u.clone().apply(builder).expect("apply");
    }
    let answer = CommitTableResponse {
        metadata_location: "s3://warehouse/lake/metadata/00002.metadata.json".to_string(),
        metadata: builder.build().expect("build").metadata,
    };
    (updates, serde_json::to_vec(&answer).expect("json"))
}

const LOCATION: &str = "s3://warehouse/lake/metadata/00001.metadata.json";

fn commit_answer(c: &mut Criterion) {
    for (snapshots, per_snapshot) in [(1000, 1), (200, 500)] {
        let base = metadata(snapshots, per_snapshot);
        let refs = thadam_iceberg::testing::refs_of(
            &serde_json::to_vec(&json!({ "metadata": base })).expect("json"),
        )
        .expect("refs");
        let (updates, answer) = append_and_answer(&base, per_snapshot);
        let shape = format!("{snapshots} snapshots x {per_snapshot} segments");
        c.bench_with_input(
            BenchmarkId::new("commit_answer/parse in full", &shape),
            &answer,
            |b, answer| {
                b.iter(|| {
                    let parsed: CommitTableResponse =
                        serde_json::from_slice(black_box(answer)).expect("parse");
                    parsed
                })
            },
        );
        c.bench_with_input(
            BenchmarkId::new("commit_answer/build and check", &shape),
            &answer,
            |b, answer| {
                b.iter(|| {
                    thadam_iceberg::testing::adopt(
                        &base,
                        LOCATION,
                        &refs,
                        &updates,
                        black_box(answer),
                    )
                    .expect("confirmed")
                })
            },
        );
    }
}

criterion_group!(benches, committed_set, footer, schema_merge, commit_answer);
criterion_main!(benches);
