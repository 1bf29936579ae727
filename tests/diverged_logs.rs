//! A segment catalog restored from a backup, or cloned onto a second node, keeps its log id but
//! hands out sequence numbers again that the table's watermark already covers. Against the real
//! REST fixture and S3 server: every segment ends up in the table exactly once, before and after
//! snapshot expiry.

mod common;

use std::path::{Path, PathBuf};

use common::demo;
use common::{Harness, assert_exactly_once};
use thadam_iceberg::protocol::segment_log::SegmentLogWriter;
use thadam_iceberg::testing::WATERMARK_PREFIX;

async fn ship(h: &mut Harness, n: u64) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..n {
        let i = keys.len() as u64;
        keys.push(h.ship_telemetry(i, 10).await);
    }
    keys
}

/// Puts `bytes` back as the harness's segment log, as an operator restoring a backup does: the
/// writer is closed first, and a new writer opens the restored file.
fn restore(h: &mut Harness, bytes: &[u8]) {
    let path = h.config.source.catalog.clone();
    // Dropping the old writer releases its lock.
    h.log = SegmentLogWriter::open(h.dir.path().join("scratch.log")).expect("scratch");
    std::fs::write(&path, bytes).expect("restore the backup");
    h.log = SegmentLogWriter::open(&path).expect("writer on the restored log");
}

fn watermarks(props: &std::collections::HashMap<String, String>) -> Vec<(String, String)> {
    let mut marks: Vec<(String, String)> = props
        .iter()
        .filter(|(k, _)| k.starts_with(WATERMARK_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    marks.sort();
    marks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_restored_from_backup_loses_no_new_upload() {
    let mut h = Harness::new("restore");
    let mut keys = ship(&mut h, 10).await;
    let backup = std::fs::read(&h.config.source.catalog).expect("backup");
    keys.extend(ship(&mut h, 10).await);
    let status = h.run_until_handled(20).await;
    assert_eq!(status.registered(), 20);

    // The backup goes back; the writer hands out seqs 21.. again, under the same log id.
    restore(&mut h, &backup);
    let new_keys: Vec<String> = {
        let mut k = Vec::new();
        for i in 100..105 {
            k.push(h.ship_telemetry(i, 10).await);
        }
        k
    };
    let status = h.run_until_handled(15).await;
    let t = status.tables.values().next().expect("status");
    assert_eq!(
        (t.registered, t.skipped),
        (5, 10),
        "the 5 new uploads are registered, the 10 restored ones skipped"
    );
    let mut all = keys.clone();
    all.extend(new_keys.clone());
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &all).await;
    let marks = watermarks(table.metadata().properties());
    assert_eq!(
        marks.len(),
        2,
        "the old history's mark and this log's fork: {marks:?}"
    );

    // Restore, then expiry: a restart recognises everything from the fork's watermark.
    h.expire_all_but_current("telemetry").await;
    let status = h.run_until_handled(15).await;
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped), (0, 15));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &all).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_restored_after_its_snapshots_expired_registers_nothing_twice() {
    let mut h = Harness::new("restore_exp");
    let mut keys = ship(&mut h, 6).await;
    let backup = std::fs::read(&h.config.source.catalog).expect("backup");
    keys.extend(ship(&mut h, 6).await);
    let tuning = thadam_iceberg::Tuning {
        max_batch: 3,
        ..Default::default()
    };
    let handle = h.start_with(h.config.clone(), tuning.clone()).await;
    Harness::finish(handle, 12).await;
    // Expiry first: the summaries of the first snapshots (segments 1-9) are gone.
    h.expire_all_but_current("telemetry").await;
    restore(&mut h, &backup);
    for i in 100..104 {
        keys.push(h.ship_telemetry(i, 10).await);
    }
    let handle = h.start_with(h.config.clone(), tuning).await;
    let status = Harness::finish(handle, 10).await;
    let t = status.tables.values().next().expect("status");
    assert_eq!(
        (t.registered, t.skipped),
        (4, 6),
        "the restored segments are found among the table's live files"
    );
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}

/// Node B: a copy of node A's log (a disk image), with a writer and registrar of its own.
struct Node {
    config: thadam_iceberg::config::RegistrarConfig,
    log: SegmentLogWriter,
    _dir: tempfile::TempDir,
}

fn clone_node(h: &Harness) -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    let path: PathBuf = dir.path().join("segment-catalog.log");
    std::fs::copy(&h.config.source.catalog, &path).expect("clone the log");
    let mut config = h.config.clone();
    config.source.catalog = path.clone();
    let log = SegmentLogWriter::open(Path::new(&path)).expect("writer on the clone");
    Node {
        config,
        log,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_cloned_from_one_image_each_register_their_own_segments() {
    let mut h = Harness::new("clone");
    let mut keys = ship(&mut h, 5).await;
    let mut b = clone_node(&h);
    // Both nodes go on writing under the same log id and the same seqs.
    for i in 0..5 {
        keys.push(h.ship_telemetry(10 + i, 10).await);
    }
    for i in 0..5u64 {
        let segment_id = format!("b-{i}");
        let key = demo::object_key(&h.prefix, &h.pipeline, "telemetry", &segment_id);
        let batch = demo::telemetry_batch(50 + i, 10).expect("batch");
        let parquet = demo::write_parquet(&[batch]).expect("parquet");
        demo::ship_segment(
            h.store.as_ref(),
            &mut b.log,
            "telemetry",
            &segment_id,
            &key,
            parquet,
            10,
        )
        .await
        .expect("ship on node B");
        keys.push(key);
    }
    let status = h.run_until_handled(10).await;
    assert_eq!(status.registered(), 10);
    let handle = thadam_iceberg::Registrar::builder(b.config.clone())
        .start()
        .await
        .expect("node B starts");
    let status = Harness::finish(handle, 10).await;
    let t = status.tables.values().next().expect("status");
    assert_eq!(
        (t.registered, t.skipped),
        (5, 5),
        "node B registers its own 5, skips the 5 of the image"
    );
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;

    // Both restart after expiry: nothing again.
    h.expire_all_but_current("telemetry").await;
    assert_eq!(h.run_until_handled(10).await.registered(), 0);
    let handle = thadam_iceberg::Registrar::builder(b.config.clone())
        .start()
        .await
        .expect("node B restarts");
    assert_eq!(Harness::finish(handle, 10).await.registered(), 0);
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}
