//! Metadata growth against the real servers: tables the registrar creates bound their metadata
//! files (the catalog deletes old ones), and `snapshot_retention` expires old snapshots in the
//! registrar's own appends, metadata only, without ever registering a segment twice.
//!
//! Instead of waiting for `max_age`, the registrar's clock (a test seam,
//! `Tuning.hooks.clock`) runs an hour ahead, so every snapshot is already old enough and only
//! `min_snapshots` and the watermark rule decide.

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Harness, Options, manifest_entries, py};
use object_store::ObjectStore;
use thadam_iceberg::Tuning;
use thadam_iceberg::testing::Hooks;
use thadam_iceberg::testing::WATERMARK_KEY;

const RETAIN: &str = "      snapshot_retention: { max_age: 1m, min_snapshots: 5 }";

/// One segment per commit, on a clock `ahead` of the real one.
fn tuning(ahead: Duration) -> Tuning {
    let ahead = i64::try_from(ahead.as_millis()).expect("ms");
    Tuning {
        max_batch: 1,
        hooks: Hooks {
            clock: Some(Arc::new(move || {
                chrono::Utc::now().timestamp_millis() + ahead
            })),
            ..Default::default()
        },
        ..Default::default()
    }
}

const HOUR: Duration = Duration::from_secs(3600);

fn harness(test: &str, extra: &str) -> Harness {
    Harness::with(
        test,
        Options {
            extra_iceberg_yaml: extra.to_string(),
            ..Default::default()
        },
    )
}

/// Every object key under the harness's prefix.
async fn objects(h: &Harness) -> BTreeSet<String> {
    common::keys_under(h.store.as_ref(), &h.prefix)
        .await
        .into_iter()
        .collect()
}

/// Runs a registrar with `tuning` until it has handled `n` segments; returns how many it
/// registered.
async fn run(h: &Harness, tuning: Tuning, n: u64) -> u64 {
    let handle = h.start_with(h.config.clone(), tuning).await;
    let status = Harness::finish(handle, n).await;
    status.tables.values().map(|t| t.registered).sum()
}

/// Rows pyiceberg reads from the table.
fn pyiceberg_rows(h: &Harness) -> u64 {
    let ident = format!("{}.telemetry", h.namespace.join("."));
    let out = py::run(
        "print(len(catalog.load_table(sys.argv[1]).scan().to_arrow()))",
        &[&ident],
    );
    out.trim().parse().expect("row count")
}

/// The current snapshot's data files hold exactly `keys`, one manifest entry each.
async fn assert_live_once(h: &Harness, keys: &[String]) {
    let table = h.table("telemetry").await.expect("table");
    let mut paths: Vec<String> = manifest_entries(&table)
        .await
        .into_iter()
        .map(|(_, f)| f.file_path().to_string())
        .filter(|p| p.contains("/data/seg-") || keys.iter().any(|k| p.ends_with(k.as_str())))
        .collect();
    paths.sort();
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(paths, expected, "every segment live exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_snapshots_go_in_the_registrars_commits_and_no_file_is_deleted() {
    let mut h = harness("retain", RETAIN);
    let keys = h.ship_many(0, 30, 10).await;
    let before = objects(&h).await;
    assert_eq!(before.len(), 30, "the shipped segments");

    assert_eq!(run(&h, tuning(HOUR), 30).await, 30);

    let table = h.table("telemetry").await.expect("table");
    let metadata = table.metadata();
    // Each commit expired what was beyond the 5 newest: those 5 and its own remain.
    assert_eq!(metadata.snapshots().count(), 6);
    let current = metadata.current_snapshot().expect("current");
    assert!(
        current
            .summary()
            .additional_properties
            .contains_key(WATERMARK_KEY),
        "the summary names its watermark"
    );
    assert_live_once(&h, &keys).await;
    assert_eq!(pyiceberg_rows(&h), 300, "pyiceberg reads every row");

    // Nothing was deleted but old metadata.json files (the catalog, per the table's properties):
    // every data file, every manifest list and manifest (of retained and expired snapshots).
    let after = objects(&h).await;
    assert!(before.is_subset(&after), "a shipped file was deleted");
    let avro = after.iter().filter(|k| k.ends_with(".avro")).count();
    assert_eq!(
        avro, 60,
        "a manifest list and a manifest per commit, all kept"
    );
    for snapshot in metadata.snapshots() {
        let list = snapshot.manifest_list();
        let key = list
            .strip_prefix(&format!("s3://{}/", h.env.bucket))
            .expect("in the bucket");
        assert!(after.contains(key), "manifest list {list} is gone");
    }

    // Created with bounded metadata files, and the fixture honours them.
    let props = metadata.properties();
    assert_eq!(
        props
            .get("write.metadata.delete-after-commit.enabled")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        props
            .get("write.metadata.previous-versions-max")
            .map(String::as_str),
        Some("10")
    );
    let versions = after
        .iter()
        .filter(|k| k.ends_with(".metadata.json"))
        .count();
    println!("metadata.json files after 31 versions: {versions}");
    assert_eq!(versions, 11, "the current one and 10 previous");
    assert!(metadata.metadata_log().len() <= 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_table_property_wins_over_the_registrars_default() {
    let mut h = harness(
        "retainprops",
        "      table_properties: { write.metadata.previous-versions-max: 3 }",
    );
    h.ship_many(0, 6, 5).await;
    assert_eq!(run(&h, tuning(Duration::ZERO), 6).await, 6);
    let table = h.table("telemetry").await.expect("table");
    let props = table.metadata().properties();
    assert_eq!(
        props
            .get("write.metadata.previous-versions-max")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(
        props
            .get("write.metadata.delete-after-commit.enabled")
            .map(String::as_str),
        Some("true")
    );
    let versions = objects(&h)
        .await
        .iter()
        .filter(|k| k.ends_with(".metadata.json"))
        .count();
    assert_eq!(versions, 4, "the current one and 3 previous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_expiry_registers_nothing_twice() {
    let mut h = harness("retainrestart", RETAIN);
    let mut keys = h.ship_many(0, 12, 10).await;
    assert_eq!(run(&h, tuning(HOUR), 12).await, 12);
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 6, "6 expired");

    // The same segment catalog, replayed from its start: the watermark answers for the
    // expired snapshots' segments, and what is shipped now registers.
    keys.extend(h.ship_many(12, 5, 10).await);
    assert_eq!(run(&h, tuning(HOUR), 17).await, 5);
    assert_live_once(&h, &keys).await;
    assert_eq!(pyiceberg_rows(&h), 170);
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 6);
}

/// A shipper that records a key again after a crash (a re-ship of a file the table already
/// holds) must not make it a second data file, even when the snapshot that registered it was
/// expired meanwhile and a restart replays the log: the first record is seen (covered by the
/// watermark) before the second, and the registrar remembers the keys it found registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reship_after_its_snapshot_expired_is_not_registered_twice() {
    let mut h = harness(
        "retainreship",
        "      snapshot_retention: { max_age: 1s, min_snapshots: 1 }",
    );
    let mut keys = h.ship_many(0, 6, 10).await;
    assert_eq!(run(&h, tuning(HOUR), 6).await, 6);
    let table = h.table("telemetry").await.expect("table");
    let summaries: Vec<String> = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            s.summary()
                .additional_properties
                .get(thadam_iceberg::testing::SEGMENT_IDS)
                .cloned()
        })
        .collect();
    let first = thadam_iceberg::testing::encode_ids([keys[0].as_str()]);
    assert!(
        !summaries.iter().any(|ids| ids.contains(&first)),
        "the first segment's snapshot was expired"
    );

    // The shipper records the first segment again (same key, same file), then ships a new one.
    let head = h
        .store
        .head(&object_store::path::Path::from(keys[0].as_str()))
        .await
        .expect("head");
    h.log
        .append_uploaded("telemetry", "seg-000001", &keys[0], head.size, 10)
        .expect("record again");
    keys.extend(h.ship_many(6, 1, 10).await);
    assert_eq!(run(&h, tuning(HOUR), 8).await, 1, "only the new segment");
    assert_live_once(&h, &keys).await;
    assert_eq!(pyiceberg_rows(&h), 70);
}

/// An embedded feed without catalog ids: no watermark, so nothing may be expired (a restart
/// could not tell those segments registered). This is the test that fails if the
/// watermark-coverage rule is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_no_watermark_covers_are_never_expired() {
    let h = harness(
        "retainnoid",
        "      snapshot_retention: { max_age: 1m, min_snapshots: 1 }",
    );
    let mut uploaded = Vec::new();
    let mut keys = Vec::new();
    for n in 0..6u64 {
        let segment = h.upload_own(n, 10, n + 1).await;
        keys.push(segment.object_key.clone());
        uploaded.push(segment);
    }
    for round in 0..2 {
        let (sender, handle) = h.start_fed(tuning(HOUR), 16).await;
        // The runtime replays what its catalog holds on every start.
        for segment in &uploaded {
            sender.send(segment.clone()).await.expect("send");
        }
        let status = Harness::finish(handle, 6).await;
        let registered: u64 = status.tables.values().map(|t| t.registered).sum();
        assert_eq!(registered, if round == 0 { 6 } else { 0 }, "round {round}");
    }
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 6, "none expired");
    assert_live_once(&h, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writers_old_snapshot_is_expired_and_its_files_stay_live() {
    let mut h = harness(
        "retainpy",
        "      snapshot_retention: { max_age: 1m, min_snapshots: 2 }",
    );
    let mut keys = h.ship_many(0, 1, 10).await;
    assert_eq!(run(&h, tuning(Duration::ZERO), 1).await, 1);

    let ident = format!("{}.telemetry", h.namespace.join("."));
    let out = py::run(
        r#"
import datetime
import pyarrow as pa
table = catalog.load_table(sys.argv[1])
data = [{"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
         "device": "pyiceberg", "reading_seq": 10**9 + j, "temperature_c": 1.0,
         "battery_pct": 1, "_wal_epoch": 0, "_wal_pos": 0} for j in range(7)]
table.append(pa.Table.from_pylist(data, schema=table.schema().as_arrow()))
table = catalog.load_table(sys.argv[1])
snap = table.current_snapshot()
files = [t.file.file_path for t in table.scan().plan_files()]
print(json.dumps({"id": snap.snapshot_id, "files": files}))
"#,
        &[&ident],
    );
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    let theirs = report["id"].as_i64().expect("snapshot id");
    let their_files: Vec<String> = report["files"]
        .as_array()
        .expect("files")
        .iter()
        .filter_map(|f| f.as_str())
        .filter(|f| !f.contains("/data/seg-"))
        .map(str::to_string)
        .collect();
    assert_eq!(their_files.len(), 1, "pyiceberg wrote one data file");

    // An hour later, by the registrar's clock: everything beyond the 2 newest goes.
    keys.extend(h.ship_many(1, 4, 10).await);
    assert_eq!(run(&h, tuning(HOUR), 5).await, 4);
    let table = h.table("telemetry").await.expect("table");
    assert!(
        table.metadata().snapshot_by_id(theirs).is_none(),
        "pyiceberg's old snapshot was expired"
    );
    assert_eq!(table.metadata().snapshots().count(), 3);
    let live: Vec<String> = manifest_entries(&table)
        .await
        .into_iter()
        .map(|(_, f)| f.file_path().to_string())
        .collect();
    assert_eq!(
        live.iter().filter(|f| **f == their_files[0]).count(),
        1,
        "its data file is still live, once"
    );
    assert_live_once(&h, &keys).await;
    assert_eq!(pyiceberg_rows(&h), 57);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_snapshot_retention_nothing_is_expired() {
    let mut h = harness("retainoff", "");
    let keys = h.ship_many(0, 10, 5).await;
    assert_eq!(run(&h, tuning(HOUR), 10).await, 10);
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 10);
    assert_live_once(&h, &keys).await;
}

/// A catalog that manages snapshots itself refuses `remove-snapshots` (Project Nessie answers
/// 500, which on a commit reads as "outcome unknown"; others may answer 400). The registrar
/// tells that from what happens: the same append without the removal lands, so retention turns
/// off for the table with one warning and a metric, and no later commit carries a removal. The
/// fault proxy answers every removal as the catalog would, without forwarding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_refusing_to_remove_snapshots_turns_retention_off_for_the_table() {
    use common::fault_proxy::{Fault, FaultProxy, Kind};
    common::metrics::recorder();
    for (status, test) in [(500, "retref500"), (400, "retref400")] {
        let mut h = harness(test, RETAIN);
        // Six snapshots of the registrar's, so that retention has something to remove.
        let mut keys = h.ship_many(0, 6, 5).await;
        assert_eq!(run(&h, tuning(Duration::ZERO), 6).await, 6);
        let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
        proxy.plan(
            Kind::Expire,
            std::iter::repeat_n(Fault::Refuse(status), 100),
        );
        let name = h.table_name("telemetry").to_string();
        let refused = || {
            common::metrics::counter(
                "thadam_iceberg_snapshot_retention_refused_total",
                &[("table", name.as_str())],
            )
        };
        let before = refused();
        keys.extend(h.ship_many(6, 4, 5).await);
        let handle = h.start_with(h.config_via(&proxy.uri), tuning(HOUR)).await;
        let status_after = Harness::finish(handle, 10).await;
        assert_eq!(
            status_after.registered(),
            4,
            "{status}: the new segments, once each"
        );
        assert_eq!(
            proxy.seen(Kind::Expire),
            1,
            "{status}: one removal refused, none sent after it"
        );
        assert_eq!(refused() - before, 1.0, "{status}: counted once");
        assert_live_once(&h, &keys).await;
        let table = h.table("telemetry").await.expect("table");
        assert_eq!(
            table.metadata().snapshots().count(),
            10,
            "{status}: nothing expired"
        );
        assert_eq!(pyiceberg_rows(&h), 50);
    }
}
