//! The foundation, end to end against the real REST fixture and S3 server: shipped segments are
//! registered, read back, never registered twice, and the documented failures happen.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Schema};
use common::demo::field;
use common::{Harness, Options, data_files, read_all, row_count};
use thadam_iceberg::ErrorCode;
use thadam_iceberg::testing::{SEGMENT_IDS, SegmentId, decode_ids};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_segments_are_registered_and_read_back() {
    let mut h = Harness::with(
        "reg",
        Options {
            namespace_tail: vec!["edge"],
            ..Options::default()
        },
    );
    let mut keys = Vec::new();
    for n in 0..3 {
        keys.push(h.ship_telemetry(n, 500).await);
    }
    let status = h.run_until_handled(3).await;
    assert_eq!(status.handled(), 3);

    let table = h.table("telemetry").await.expect("table was created");
    // Two namespace levels were created.
    assert_eq!(table.identifier().namespace().as_ref().len(), 2);
    assert_eq!(table.metadata().format_version() as u8, 2);
    assert!(table.metadata().default_partition_spec().is_unpartitioned());
    assert!(
        table
            .metadata()
            .location()
            .ends_with(&format!("thadam/v1/{}/telemetry", h.pipeline)),
        "location {}",
        table.metadata().location()
    );

    // One data file per segment, at the recorded object keys.
    let files = data_files(&table).await;
    let expected: std::collections::BTreeSet<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    assert_eq!(files, expected);

    // The table keeps the files' own field IDs.
    let schema = table.metadata().current_schema();
    let ids: HashMap<String, i32> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| (f.name.clone(), f.id))
        .collect();
    for (name, id) in [
        ("ts", 1),
        ("device", 2),
        ("reading_seq", 3),
        ("temperature_c", 4),
        ("battery_pct", 5),
        ("_wal_epoch", 6),
        ("_wal_pos", 7),
    ] {
        assert_eq!(ids.get(name), Some(&id), "field id of {name}");
    }

    // Values read back: reading_seq runs 0..1500 exactly once each; devices are as written.
    let batches = read_all(&table).await;
    assert_eq!(row_count(&batches), 1500);
    let mut seqs: Vec<i64> = Vec::new();
    let mut devices = std::collections::BTreeSet::new();
    for b in &batches {
        let col = b
            .column_by_name("reading_seq")
            .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
            .expect("reading_seq is long");
        seqs.extend(col.values().iter());
        let dev = b
            .column_by_name("device")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .expect("device is string");
        devices.extend((0..dev.len()).map(|i| dev.value(i).to_string()));
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (0..1500).collect::<Vec<i64>>());
    assert_eq!(devices.len(), 7);
    assert!(devices.contains("robot-00") && devices.contains("robot-06"));

    // Every snapshot the registrar made records its segments, 16 bytes each.
    let summaries: Vec<String> = table
        .metadata()
        .snapshots()
        .filter_map(|s| s.summary().additional_properties.get(SEGMENT_IDS).cloned())
        .collect();
    assert_eq!(
        summaries.iter().map(String::len).sum::<usize>(),
        16 * keys.len()
    );
    let mut recorded: Vec<String> = summaries
        .iter()
        .flat_map(|v| decode_ids(v))
        .map(|id| format!("{id:?}"))
        .collect();
    recorded.sort();
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("{:?}", SegmentId::of(k)))
        .collect();
    expected.sort();
    assert_eq!(recorded, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_registrar_appends_nothing_twice() {
    let mut h = Harness::new("restart");
    h.ship_telemetry(0, 100).await;
    let first = h.run_until_handled(1).await;
    assert_eq!(first.tables.values().map(|t| t.registered).sum::<u64>(), 1);

    // Same segment catalog, new registrar: the segment is found in the table and skipped.
    let second = h.run_until_handled(1).await;
    assert_eq!(second.tables.values().map(|t| t.registered).sum::<u64>(), 0);
    assert_eq!(second.tables.values().map(|t| t.skipped).sum::<u64>(), 1);

    let table = h.table("telemetry").await.expect("table");
    assert_eq!(
        table.metadata().snapshots().count(),
        1,
        "exactly one snapshot"
    );
    assert_eq!(data_files(&table).await.len(), 1, "exactly one data file");
    assert_eq!(row_count(&read_all(&table).await), 100);

    // A new segment after the restart is registered as usual.
    h.ship_telemetry(1, 100).await;
    h.run_until_handled(2).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 2);
    assert_eq!(data_files(&table).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_table_without_create_table_fails_clearly() {
    let mut h = Harness::with(
        "absent",
        Options {
            create_table: false,
            ..Options::default()
        },
    );
    h.ship_telemetry(0, 10).await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::TableMissing, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("telemetry") && text.contains("create_table"),
        "{text}"
    );
    assert!(h.table("telemetry").await.is_none(), "nothing was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uint64_dataset_fails_with_unsupported_type() {
    let mut h = Harness::with(
        "uint64",
        Options {
            unsigned: "native",
            ..Options::default()
        },
    );
    // What the `unsigned: native` policy writes: UInt64 lineage columns.
    let schema = Arc::new(Schema::new(vec![
        field("device", DataType::Utf8, false, 1),
        field("_wal_epoch", DataType::UInt64, false, 2),
        field("_wal_pos", DataType::UInt64, false, 3),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(UInt64Array::from(vec![1, 1])),
            Arc::new(UInt64Array::from(vec![7, 8])),
        ],
    )
    .expect("batch");
    h.ship("telemetry", &batch).await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::UnsupportedType, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("_wal_epoch") && text.contains("_wal_pos"),
        "{text}"
    );
    assert!(text.contains("unsigned: signed"), "names the fix: {text}");
    assert!(h.table("telemetry").await.is_none(), "no table was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preexisting_mismatched_table_fails_and_registers_nothing() {
    let mut h = Harness::new("mismatch");
    // Create the table from a segment whose reading_seq (id 3) is a string.
    let schema = Arc::new(Schema::new(vec![
        field("device", DataType::Utf8, false, 2),
        field("reading_seq", DataType::Utf8, false, 3),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a"])),
            Arc::new(StringArray::from(vec!["x"])),
        ],
    )
    .expect("batch");
    h.ship("telemetry", &batch).await;
    h.run_until_handled(1).await;
    let before = h.table("telemetry").await.expect("table");

    // Now a telemetry segment: reading_seq (id 3) is a long there, and string -> long is no
    // allowed change.
    h.ship_telemetry(1, 10).await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::SchemaMismatch, "{err}");
    let text = err.to_string();
    assert!(text.contains("reading_seq") && text.contains('3'), "{text}");

    let after = h.table("telemetry").await.expect("table");
    assert_eq!(
        after.metadata().snapshots().count(),
        before.metadata().snapshots().count()
    );
    assert_eq!(
        after.metadata().current_schema_id(),
        before.metadata().current_schema_id()
    );
    assert_eq!(data_files(&after).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_catalog_is_retried_until_it_answers() {
    let mut h = Harness::new("transient");
    h.ship_telemetry(0, 50).await;
    // Point the registrar at a port where nothing listens yet.
    let port = common::forward::reserve_port();
    let upstream = common::forward::socket_of(&h.env.catalog_uri);
    let mut config = h.config.clone();
    config.catalog_uri = format!("http://127.0.0.1:{port}").parse().expect("url");
    let starting = tokio::spawn(thadam_iceberg::Registrar::builder(config).start());
    // The registrar keeps retrying (backoff 100ms..2s); bring the catalog up after a while.
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(
        !starting.is_finished(),
        "start must wait for the catalog, not fail"
    );
    let _forward = common::forward::Forward::start(port, upstream).await;
    let handle = tokio::time::timeout(std::time::Duration::from_secs(60), starting)
        .await
        .expect("connected in time (hang guard)")
        .expect("task")
        .expect("started once the catalog answered");
    let status = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        handle.wait_until(|s| s.handled() >= 1),
    )
    .await
    .expect("hang guard")
    .expect("registered");
    assert_eq!(status.tables.values().map(|t| t.registered).sum::<u64>(), 1);
    handle.stop();
    handle.wait().await.expect("clean stop");
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(data_files(&table).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedding_runtime_feeds_its_own_catalog() {
    use thadam_iceberg::Tuning;

    let h = Harness::new("embedded");
    // The runtime uploads files itself and keeps its own catalog: no segment log file at all.
    let mut uploaded = Vec::new();
    for n in 0..2u64 {
        uploaded.push(h.upload_own(n, 20, 100 + n).await);
    }
    for round in 0..2 {
        let (sender, handle) = h.start_fed(Tuning::default(), 16).await;
        // On every start the runtime replays what its catalog holds.
        for segment in &uploaded {
            sender.send(segment.clone()).await.expect("send");
        }
        let status = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            handle.wait_until(|s| s.handled() >= 2),
        )
        .await
        .expect("hang guard")
        .expect("handled");
        let registered: u64 = status.tables.values().map(|t| t.registered).sum();
        assert_eq!(registered, if round == 0 { 2 } else { 0 }, "round {round}");
        handle.stop();
        handle.wait().await.expect("clean stop");
    }
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(data_files(&table).await.len(), 2);
    assert_eq!(row_count(&read_all(&table).await), 40);
}
