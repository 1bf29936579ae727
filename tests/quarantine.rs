//! `on_bad_segment` against the real servers: with `quarantine`, a bad file (missing object,
//! not Parquet, truncated, no field IDs, UInt64) is recorded with its code while the good
//! segments of its dataset and of another dataset register, and it is registered after a fix
//! (a retry, or a re-ship that supersedes it); with `stop` (the default) it is fatal and the
//! table is untouched. Exactly-once holds across a quarantine, a retry, snapshot expiry and a
//! restart.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use common::demo;
use common::{Harness, Options, assert_exactly_once};
use object_store::path::Path as ObjectPath;
use thadam_iceberg::ErrorCode;
use thadam_iceberg::runtime::status::RegistrarStatus;
use thadam_iceberg::testing::QuarantineStore;

fn quarantine_harness(test: &str) -> Harness {
    Harness::with(
        test,
        Options {
            datasets: vec!["telemetry", "other"],
            extra_iceberg_yaml: "      on_bad_segment: quarantine".to_string(),
            ..Options::default()
        },
    )
}

fn key(h: &Harness, dataset: &str, id: &str) -> String {
    demo::object_key(&h.prefix, &h.pipeline, dataset, id)
}

async fn put(h: &Harness, key: &str, bytes: Bytes) {
    h.store
        .put(&ObjectPath::parse(key).expect("key"), bytes.into())
        .await
        .expect("upload");
}

fn good_bytes(n: u64, rows: usize) -> Bytes {
    demo::write_parquet(&[demo::telemetry_batch(n, rows).expect("batch")]).expect("parquet")
}

fn write_batch(batch: &RecordBatch) -> Bytes {
    demo::write_parquet(std::slice::from_ref(batch)).expect("parquet")
}

/// A file whose columns carry no `PARQUET:field_id`.
fn no_field_ids() -> Bytes {
    let schema = Arc::new(Schema::new(vec![
        Field::new("device", DataType::Utf8, false),
        Field::new("value", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a"])),
            Arc::new(Int64Array::from(vec![1])),
        ],
    )
    .expect("batch");
    write_batch(&batch)
}

/// What `unsigned: native` writes.
fn uint64_file() -> Bytes {
    let schema = Arc::new(Schema::new(vec![
        demo::field("device", DataType::Utf8, false, 1),
        demo::field("_wal_pos", DataType::UInt64, false, 3),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a"])),
            Arc::new(UInt64Array::from(vec![7])),
        ],
    )
    .expect("batch");
    write_batch(&batch)
}

/// Records an upload of `key` with `size` and `rows` (the object may or may not be there).
fn record(h: &mut Harness, dataset: &str, id: &str, key: &str, size: u64, rows: u64) -> u64 {
    h.log
        .append_uploaded(dataset, id, key, size, rows)
        .expect("record")
}

fn quarantined(s: &RegistrarStatus) -> u64 {
    s.tables.values().map(|t| t.quarantined).sum()
}

async fn wait(
    handle: &thadam_iceberg::RegistrarHandle,
    what: impl Fn(&RegistrarStatus) -> bool,
) -> RegistrarStatus {
    tokio::time::timeout(Duration::from_secs(180), handle.wait_until(what))
        .await
        .expect("in time (hang guard)")
        .expect("no fatal error")
}

/// The runner's `--quarantine ...` on this harness's config.
fn runner_quarantine(h: &Harness, args: &[&str]) -> String {
    let out = std::process::Command::new(common::example_binary("registrar"))
        .arg("--config")
        .arg(h.config_file())
        .arg("--quarantine")
        .args(args)
        .output()
        .expect("runner");
    assert!(
        out.status.success(),
        "runner --quarantine {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_bad_file_is_quarantined_and_registered_after_a_fix() {
    let mut h = quarantine_harness("quar_kinds");
    let mut good = vec![h.ship_telemetry(0, 10).await];
    // Missing: recorded with the size of good bytes that were never uploaded.
    let missing = key(&h, "telemetry", "missing");
    let missing_bytes = good_bytes(50, 10);
    record(
        &mut h,
        "telemetry",
        "missing",
        &missing,
        missing_bytes.len() as u64,
        10,
    );
    // Not Parquet.
    let text = key(&h, "telemetry", "text");
    put(
        &h,
        &text,
        Bytes::from_static(b"this is not a parquet file at all"),
    )
    .await;
    record(&mut h, "telemetry", "text", &text, 33, 1);
    // Truncated: half the bytes, recorded as such.
    let cut = key(&h, "telemetry", "cut");
    let full = good_bytes(51, 10);
    let half = full.slice(..full.len() / 2);
    put(&h, &cut, half.clone()).await;
    record(&mut h, "telemetry", "cut", &cut, half.len() as u64, 10);
    // No field IDs; UInt64.
    let noids = key(&h, "telemetry", "noids");
    let noids_bytes = no_field_ids();
    put(&h, &noids, noids_bytes.clone()).await;
    record(
        &mut h,
        "telemetry",
        "noids",
        &noids,
        noids_bytes.len() as u64,
        1,
    );
    let uint = key(&h, "telemetry", "uint");
    let uint_bytes = uint64_file();
    put(&h, &uint, uint_bytes.clone()).await;
    record(
        &mut h,
        "telemetry",
        "uint",
        &uint,
        uint_bytes.len() as u64,
        1,
    );
    // Good segments after them, and in another dataset.
    good.push(h.ship_telemetry(1, 10).await);
    good.push(h.ship_telemetry(2, 10).await);
    let other = vec![
        h.ship("other", &demo::telemetry_batch(3, 10).expect("batch"))
            .await,
    ];

    let handle = h.start().await;
    wait(&handle, |s| s.registered() >= 4 && quarantined(s) >= 5).await;
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &good).await;
    let other_table = h.table("other").await.expect("other table");
    assert_exactly_once(&other_table, &h.env.bucket, &other).await;

    let state = QuarantineStore::open(&h.config.quarantine_file)
        .expect("quarantine file")
        .state();
    let code_of = |k: &str| state.get("telemetry", k).map(|e| e.code.clone());
    assert_eq!(
        code_of(&missing).as_deref(),
        Some(ErrorCode::ObjectMissing.as_str())
    );
    for k in [&text, &cut] {
        assert_eq!(
            code_of(k).as_deref(),
            Some(ErrorCode::FooterInvalid.as_str()),
            "{k}"
        );
    }
    for k in [&noids, &uint] {
        assert_eq!(
            code_of(k).as_deref(),
            Some(ErrorCode::UnsupportedType.as_str()),
            "{k}"
        );
    }
    assert_eq!(state.open().count(), 5);
    let listed = runner_quarantine(&h, &["list"]);
    assert!(listed.contains("5 segment(s) in quarantine"), "{listed}");

    // Fixes: the missing object is uploaded (same bytes as recorded) and retried; the truncated
    // one is re-shipped whole under a new record (it supersedes, no retry needed); the others
    // are re-shipped as good files under new records too.
    put(&h, &missing, missing_bytes).await;
    runner_quarantine(&h, &["retry", "--key", &missing]);
    put(&h, &cut, full.clone()).await;
    record(&mut h, "telemetry", "cut", &cut, full.len() as u64, 10);
    for (k, n) in [(&text, 52u64), (&noids, 53), (&uint, 54)] {
        let bytes = good_bytes(n, 10);
        put(&h, k, bytes.clone()).await;
        record(&mut h, "telemetry", "fix", k, bytes.len() as u64, 10);
    }
    wait(&handle, |s| s.registered() >= 9 && quarantined(s) == 0).await;
    handle.stop();
    handle.wait().await.expect("clean stop");

    let mut all = good.clone();
    all.extend([missing.clone(), text, cut, noids, uint]);
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &all).await;
    let state = QuarantineStore::open(&h.config.quarantine_file)
        .expect("quarantine file")
        .state();
    assert_eq!(state.open().count(), 0, "every entry closed: {state:?}");
    // A restart registers nothing twice.
    let status = h.run_until_handled(all.len() as u64 + 1).await;
    assert_eq!(status.registered(), 0);
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stop_a_bad_file_is_fatal_and_the_table_untouched() {
    let mut h = Harness::new("quar_stop");
    let text = key(&h, "telemetry", "text");
    put(&h, &text, Bytes::from_static(b"not parquet, stop here")).await;
    record(&mut h, "telemetry", "text", &text, 22, 1);
    h.ship_telemetry(1, 10).await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::FooterInvalid, "{err}");
    assert!(h.table("telemetry").await.is_none(), "nothing registered");
    assert!(
        !h.config.quarantine_file.exists(),
        "stop keeps no quarantine file"
    );
    // The record is kept: the same failure again.
    assert_eq!(h.run_until_fatal().await.code(), ErrorCode::FooterInvalid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reship_supersedes_the_earlier_record_under_stop() {
    let mut h = Harness::new("quar_reship");
    let k = key(&h, "telemetry", "reship");
    let full = good_bytes(7, 40);
    let half = full.slice(..full.len() / 2);
    // Recorded truncated (the old record), then re-shipped whole under a new record.
    put(&h, &k, half.clone()).await;
    record(&mut h, "telemetry", "reship", &k, half.len() as u64, 40);
    put(&h, &k, full.clone()).await;
    record(&mut h, "telemetry", "reship", &k, full.len() as u64, 40);
    let after = h.ship_telemetry(2, 10).await;
    let status = h.run_until_handled(2).await;
    assert_eq!(status.registered(), 2);
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &[k.clone(), after.clone()]).await;
    assert_eq!(common::row_count(&common::read_all(&table).await), 50);
    // Restart: the earlier record is superseded, the key registered once.
    h.run_until_handled(2).await;
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &[k, after]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seq_5_quarantined_then_fixed_is_in_the_table_once_after_expiry_and_restart() {
    let mut h = quarantine_harness("quar_seq5");
    let mut keys = h.ship_many(1, 4, 5).await;
    let five = key(&h, "telemetry", "five");
    let five_bytes = good_bytes(5, 5);
    // The fifth segment (its seq in the log is higher: each ship also records its segment).
    record(
        &mut h,
        "telemetry",
        "five",
        &five,
        five_bytes.len() as u64,
        5,
    );
    keys.extend(h.ship_many(6, 15, 5).await);
    let handle = h.start().await;
    wait(&handle, |s| s.registered() >= 19 && quarantined(s) == 1).await;
    // 6-20 are in, and the watermark passed 5.
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    let text = runner_quarantine(&h, &["list"]);
    assert!(text.contains(&format!("key {five} code")), "{text}");
    assert!(text.contains(ErrorCode::ObjectMissing.as_str()), "{text}");

    put(&h, &five, five_bytes).await;
    let marked = runner_quarantine(&h, &["retry", "--all"]);
    assert!(marked.starts_with("1 segment(s) marked"), "{marked}");
    wait(&handle, |s| s.registered() >= 20 && quarantined(s) == 0).await;
    handle.stop();
    handle.wait().await.expect("clean stop");
    keys.push(five.clone());
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;

    h.expire_all_but_current("telemetry").await;
    let status = h.run_until_handled(20).await;
    assert_eq!(status.registered(), 0, "nothing registered twice");
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    assert_eq!(common::row_count(&common::read_all(&table).await), 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_discarded_segment_is_decided_and_never_registered() {
    let mut h = quarantine_harness("quar_discard");
    let first = h.ship_telemetry(1, 5).await;
    let gone = key(&h, "telemetry", "gone");
    record(&mut h, "telemetry", "gone", &gone, 1234, 5);
    let last = h.ship_telemetry(3, 5).await;
    let handle = h.start().await;
    wait(&handle, |s| s.registered() >= 2 && quarantined(s) == 1).await;
    let out = runner_quarantine(&h, &["discard", "--key", &gone, "--reason", "lost upload"]);
    assert!(out.starts_with("1 segment(s) discarded"), "{out}");
    wait(&handle, |s| quarantined(s) == 0).await;
    handle.stop();
    handle.wait().await.expect("clean stop");
    let listed = runner_quarantine(&h, &["list"]);
    assert!(listed.contains("discarded at_ms"), "{listed}");
    assert!(listed.contains("lost upload"), "{listed}");
    // A restart does not attempt it again.
    let status = h.run_until_handled(2).await;
    assert_eq!(quarantined(&status), 0);
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &[first, last]).await;
}

/// Per-table isolation: with `quarantine`, a table whose commits cannot succeed for a reason
/// about the table (here: absent, with `create_table: false`) stops alone, reported in the
/// status board and `/readyz`, while another table keeps registering; with `stop` the same
/// configuration stops the whole service with `sink.iceberg_table_missing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_error_stops_that_table_only_under_quarantine() {
    let mut h = Harness::with(
        "quar_isolate",
        Options {
            datasets: vec!["telemetry", "other"],
            create_table: false,
            extra_iceberg_yaml: "      on_bad_segment: quarantine".to_string(),
            ..Options::default()
        },
    );
    // `telemetry` exists (created by a first run that may create tables); `other` does not.
    let first = h.ship_telemetry(0, 10).await;
    let mut creating = h.config.clone();
    creating.create_table = true;
    let handle = h.start_with(creating, Default::default()).await;
    Harness::finish(handle, 1).await;

    let other_key = h
        .ship("other", &demo::telemetry_batch(1, 5).expect("batch"))
        .await;
    let mut keys = vec![first];
    for n in 2..5 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    let handle = h.start().await;
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        handle.wait_until(|s: &RegistrarStatus| {
            s.tables
                .get(&format!("{}.telemetry", h.namespace.join(".")))
                .is_some_and(|t| t.handled() >= 4)
                && s.tables
                    .get(&format!("{}.other", h.namespace.join(".")))
                    .is_some_and(|t| t.stopped.is_some())
        }),
    )
    .await
    .expect("telemetry registered while other stopped (hang guard)")
    .expect("no fatal error: the missing table stops alone");
    let other = &status.tables[&format!("{}.other", h.namespace.join("."))];
    let stopped = other.stopped.as_deref().expect("stopped");
    assert!(
        stopped.starts_with(ErrorCode::TableMissing.as_str()),
        "{stopped}"
    );
    assert!(status.fatal.is_none());
    let unready = status
        .readiness()
        .expect_err("a stopped table makes /readyz answer 503");
    assert!(unready.contains(".other stopped"), "{unready}");
    handle.stop();
    handle.wait().await.expect("clean stop: no fatal error");

    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    assert!(
        h.table("other").await.is_none(),
        "nothing created for other"
    );

    // The same with the default policy: the whole service stops with the table's code.
    let mut stopping = h.config.clone();
    stopping.on_bad_segment = Default::default();
    let err = tokio::time::timeout(Duration::from_secs(60), async {
        match thadam_iceberg::Registrar::builder(stopping).start().await {
            Err(e) => e,
            Ok(handle) => handle.wait().await.expect_err("fatal under stop"),
        }
    })
    .await
    .expect("fatal at once (hang guard)");
    assert_eq!(err.code(), ErrorCode::TableMissing, "{err}");
    let _ = other_key;
}

/// The two bad-file kinds that depend on the table: a schema that cannot be merged into it (a
/// string column arriving as a long) and a file whose rows span two partitions of its spec. Both
/// are quarantined with their codes while the good segments register; a re-ship of the
/// partition misfit (one hour only) supersedes it and is registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_and_partition_misfits_are_quarantined_and_a_reship_registers() {
    use arrow_array::TimestampMicrosecondArray;
    let mut h = Harness::with(
        "quar_misfit",
        Options {
            extra_iceberg_yaml: "      on_bad_segment: quarantine\n      partition_by: [hour(ts)]"
                .to_string(),
            ..Options::default()
        },
    );
    // Segment 0: seconds 0-9 of 2026-01-01, hour 0.
    let mut good = vec![h.ship_telemetry(0, 10).await];
    // Segment 171 with 21 rows: seconds 3591-3611, across hours 0 and 1.
    let spans = key(&h, "telemetry", "spans");
    let spanning = write_batch(&demo::telemetry_batch(171, 21).expect("batch"));
    put(&h, &spans, spanning.clone()).await;
    record(
        &mut h,
        "telemetry",
        "spans",
        &spans,
        spanning.len() as u64,
        21,
    );
    // `device` (field 2) is a string in the table; here it is a long.
    let misfit = key(&h, "telemetry", "misfit");
    let schema = Arc::new(Schema::new(vec![
        demo::field(
            "ts",
            DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, Some("UTC".into())),
            false,
            1,
        ),
        demo::field("device", DataType::Int64, false, 2),
    ]));
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(
                TimestampMicrosecondArray::from(vec![1_767_225_600_000_000i64])
                    .with_timezone("UTC"),
            ),
            Arc::new(Int64Array::from(vec![7])),
        ],
    )
    .expect("batch");
    let misfit_bytes = write_batch(&batch);
    put(&h, &misfit, misfit_bytes.clone()).await;
    record(
        &mut h,
        "telemetry",
        "misfit",
        &misfit,
        misfit_bytes.len() as u64,
        1,
    );
    good.push(h.ship_telemetry(1, 10).await);

    let handle = h.start().await;
    wait(&handle, |s| s.registered() >= 2 && quarantined(s) >= 2).await;
    let state = QuarantineStore::open(&h.config.quarantine_file)
        .expect("quarantine file")
        .state();
    let code_of = |k: &str| state.get("telemetry", k).map(|e| e.code.clone());
    assert_eq!(
        code_of(&spans).as_deref(),
        Some(ErrorCode::PartitionMismatch.as_str())
    );
    assert_eq!(
        code_of(&misfit).as_deref(),
        Some(ErrorCode::SchemaMismatch.as_str())
    );

    // Re-ship the spanning segment's first 9 rows (seconds 3591-3599, hour 0) to the same key.
    let fixed = write_batch(&demo::telemetry_batch(171, 21).expect("batch").slice(0, 9));
    put(&h, &spans, fixed.clone()).await;
    record(&mut h, "telemetry", "spans", &spans, fixed.len() as u64, 9);
    wait(&handle, |s| s.registered() >= 3).await;
    handle.stop();
    handle.wait().await.expect("clean stop");
    good.push(spans.clone());
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &good).await;
    assert_eq!(
        common::row_count(&common::read_all(&table).await),
        29,
        "the re-shipped rows, not the spanning ones"
    );
}

/// Per-table isolation for a catalog that refuses one table's commits (400): that table stops
/// alone with `sink.iceberg_catalog_rejected`, the other registers everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_refusing_one_tables_commits_stops_that_table_only() {
    let mut h = quarantine_harness("quar_refused");
    let (listener, front) = common::relay::listen().await;
    let upstream = h.env.catalog_uri.clone();
    let client = reqwest::Client::new();
    common::relay::serve(listener, move |parts, body| {
        let (client, upstream) = (client.clone(), upstream.clone());
        async move {
            if parts.method == hyper::Method::POST && parts.uri.path().ends_with("/tables/other") {
                return Ok(common::relay::rest_error(
                    400,
                    "BadRequestException",
                    "commits to this table are not allowed",
                ));
            }
            common::relay::forward(&client, &upstream, &parts, body, false).await
        }
    });
    let mut keys = Vec::new();
    for n in 0..3 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    h.ship("other", &demo::telemetry_batch(9, 5).expect("batch"))
        .await;
    keys.push(h.ship_telemetry(3, 10).await);
    let handle = h.start_with(h.config_via(&front), Default::default()).await;
    let ns = h.namespace.join(".");
    let status = wait(&handle, |s| {
        s.tables
            .get(&format!("{ns}.telemetry"))
            .is_some_and(|t| t.handled() >= 4)
            && s.tables
                .get(&format!("{ns}.other"))
                .is_some_and(|t| t.stopped.is_some())
    })
    .await;
    let stopped = status.tables[&format!("{ns}.other")]
        .stopped
        .clone()
        .expect("stopped");
    assert!(
        stopped.starts_with(ErrorCode::CatalogRejected.as_str()),
        "{stopped}"
    );
    assert!(
        stopped.contains("not allowed"),
        "the catalog's words: {stopped}"
    );
    assert!(status.readiness().is_err());
    handle.stop();
    handle.wait().await.expect("clean stop: no fatal error");
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    let other = h
        .table("other")
        .await
        .expect("created, then its append refused");
    assert!(
        common::data_files(&other).await.is_empty(),
        "nothing appended to other"
    );
}
