//! Races between writers of one table, made deterministic by a proxy that holds one request of
//! one registrar until another writer has acted; and a feed that breaks catalog order. Against
//! the real REST fixture and S3 server.

mod common;

use std::time::Duration;

use common::hold_proxy::{Hold, HoldProxy};
use common::{Harness, assert_exactly_once, extended_batch};
use thadam_iceberg::ErrorCode;
use thadam_iceberg::Tuning;
use thadam_iceberg::protocol::segment_log::{LogEntry, SegmentLogReader, SegmentLogWriter};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_registrars_racing_to_create_a_table_register_every_segment_once() {
    let mut h = Harness::new("create_race");
    let mut keys = Vec::new();
    for n in 0..5 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    // B finds the table absent and tries to create it; its register call is held.
    let proxy = HoldProxy::start(&h.env.catalog_uri, Hold::creation("telemetry")).await;
    let b = h
        .start_with(h.config_via(&proxy.uri), Tuning::default())
        .await;
    proxy.wait_held().await;
    // Meanwhile A (another registrar of the same log: a rolling deploy) creates the table and
    // registers everything.
    let a = h.run_until_handled(5).await;
    assert_eq!(a.registered(), 5);
    // B's register meets the table A created: 409; B must take A's table, with A's segments.
    assert_eq!(proxy.release().await, 409);
    let b = Harness::finish(b, 5).await;
    let t = b.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped), (0, 5));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_commit_that_brings_another_writers_snapshot_is_filtered_again() {
    let mut h = Harness::new("schema_race");
    let mut keys = vec![h.ship_telemetry(0, 10).await];
    assert_eq!(h.run_until_handled(1).await.registered(), 1);
    for n in 1..4 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    keys.push(h.ship("telemetry", &extended_batch(4, 10)).await);

    // B's batch (segments 2-5) needs a schema change for segment 5: the change is held.
    let proxy = HoldProxy::start(&h.env.catalog_uri, Hold::schema_commit("telemetry")).await;
    let b = h
        .start_with(h.config_via(&proxy.uri), Tuning::default())
        .await;
    proxy.wait_held().await;

    // Another writer (a registrar of a log holding the same uploads 2-4) appends them now.
    let other_dir = tempfile::tempdir().expect("tempdir");
    let mut other = h.config.clone();
    other.source.catalog = other_dir.path().join("segment-catalog.log");
    {
        let mut writer = SegmentLogWriter::open(&other.source.catalog).expect("other log");
        let mut reader = SegmentLogReader::open(&h.config.source.catalog).expect("reader");
        while let Some(record) = reader.next_record().expect("record") {
            if let LogEntry::Uploaded {
                dataset,
                segment_id,
                object_key,
                file_size,
                row_count,
                ..
            } = record.entry
                && keys[1..4].contains(&object_key)
            {
                writer
                    .append_uploaded(&dataset, &segment_id, &object_key, file_size, row_count)
                    .expect("append");
            }
        }
    }
    let handle = thadam_iceberg::Registrar::builder(other)
        .start()
        .await
        .expect("start");
    assert_eq!(Harness::finish(handle, 3).await.registered(), 3);

    // B's schema commit goes through (the schema did not change meanwhile); its answer carries
    // the other writer's snapshot, which already holds segments 2-4.
    assert_eq!(proxy.release().await, 200);
    let b = Harness::finish(b, 5).await;
    let t = b.tables.values().next().expect("status");
    assert_eq!(
        (t.registered, t.skipped),
        (1, 4),
        "B appends only segment 5"
    );
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_that_goes_back_in_seq_is_refused() {
    use thadam_iceberg::protocol::segment::UploadedSegment;

    let mut h = Harness::new("feed_order");
    let key = h.ship_telemetry(0, 10).await;
    let size = h
        .store
        .head(&object_store::path::Path::from(key.as_str()))
        .await
        .expect("head")
        .size;
    let segment = |seq: u64| UploadedSegment {
        file_size: size,
        row_count: 10,
        catalog_id: Some("embedded-catalog".into()),
        ..common::segment(seq, "telemetry", &key)
    };
    let (sender, handle) = h.start_fed(Tuning::default(), 4).await;
    sender.send(segment(7)).await.expect("send");
    // Seq 5 after 7: a watermark at 7 would cover it silently.
    let _ = sender.send(segment(5)).await;
    let err = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .expect("stops in time")
        .expect_err("refused");
    assert_eq!(err.code(), ErrorCode::FeedOutOfOrder, "{err}");
    assert!(
        err.message().contains("seq 5") && err.message().contains("after seq 7"),
        "{err}"
    );
}
