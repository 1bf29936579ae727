//! Manifest merging against the real servers: with merging (Java's default append) the manifest
//! list of the current snapshot stays short however many commits there were, every file stays
//! in the table exactly once, and merged entries keep the snapshot id and sequence numbers they
//! were added with; `commit.manifest-merge.enabled=false` keeps one manifest per commit; the
//! manifest lists are deflate-compressed and pyiceberg reads them; another writer's files are
//! merged along and kept.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Harness, one_per_commit, read_all, row_count};
use iceberg::spec::{ManifestEntry, ManifestStatus, SnapshotRef};
use iceberg::table::Table;

const DATASET: &str = "telemetry";

fn ident(h: &Harness) -> String {
    format!("{}.{DATASET}", h.namespace.join("."))
}

/// The manifest list of `snapshot`: how many manifests it names, its raw bytes, and every entry
/// of its manifests (sequence numbers and snapshot ids inherited as readers see them).
async fn snapshot_entries(
    table: &Table,
    snapshot: &SnapshotRef,
) -> (usize, Vec<u8>, Vec<ManifestEntry>) {
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .expect("manifest list");
    let bytes = table
        .file_io()
        .new_input(snapshot.manifest_list())
        .expect("input")
        .read()
        .await
        .expect("manifest list bytes")
        .to_vec();
    let mut entries = Vec::new();
    for listed in list.entries() {
        let manifest = listed
            .load_manifest(table.file_io())
            .await
            .expect("manifest");
        entries.extend(manifest.entries().iter().map(|e| e.as_ref().clone()));
    }
    (list.entries().len(), bytes, entries)
}

/// The Avro header names the deflate codec: `avro.codec` then the string "deflate" (zig-zag
/// length 7 = 0x0e).
fn is_deflate(container: &[u8]) -> bool {
    let needle = b"avro.codec\x0edeflate";
    container.windows(needle.len()).any(|w| w == needle)
}

/// What pyiceberg reads: row count through `to_arrow`, and the planned file paths.
fn pyiceberg_view(ident: &str) -> (u64, Vec<String>) {
    let out = common::py::run(
        r#"
table = catalog.load_table(sys.argv[1])
tasks = list(table.scan().plan_files())
rows = table.scan().to_arrow().num_rows
print(json.dumps({"rows": rows, "files": [t.file.file_path for t in tasks]}))
"#,
        &[ident],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("pyiceberg json");
    let files = v["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().expect("path").to_string())
        .collect();
    (v["rows"].as_u64().expect("rows"), files)
}

/// (snapshot id, data sequence number, file sequence number) of each file, as it was ADDED,
/// across every snapshot of the table.
async fn as_added(table: &Table) -> BTreeMap<String, (i64, i64, i64)> {
    let mut added = BTreeMap::new();
    for snapshot in table.metadata().snapshots() {
        let (_, _, entries) = snapshot_entries(table, snapshot).await;
        for e in entries
            .iter()
            .filter(|e| e.status() == ManifestStatus::Added)
        {
            let ids = (
                e.snapshot_id.expect("snapshot id"),
                e.sequence_number.expect("sequence number"),
                e.file_sequence_number.expect("file sequence number"),
            );
            let before = added.insert(e.file_path().to_string(), ids);
            assert!(
                before.is_none_or(|b| b == ids),
                "{} added twice, or its ids changed: {before:?} then {ids:?}",
                e.file_path()
            );
        }
    }
    added
}

/// Every live entry of the current snapshot: each file exactly once, EXISTING entries with the
/// ids they were added with. Returns (live paths, how many are EXISTING).
async fn check_live(table: &Table) -> (Vec<String>, usize) {
    let added = as_added(table).await;
    let current = table
        .metadata()
        .current_snapshot()
        .expect("snapshot")
        .clone();
    let (_, _, entries) = snapshot_entries(table, &current).await;
    let mut live: Vec<String> = Vec::new();
    let mut existing = 0;
    for e in entries.iter().filter(|e| e.is_alive()) {
        live.push(e.file_path().to_string());
        let ids = (
            e.snapshot_id.expect("snapshot id"),
            e.sequence_number.expect("sequence number"),
            e.file_sequence_number.expect("file sequence number"),
        );
        assert_eq!(
            Some(&ids),
            added.get(e.file_path()),
            "{} ({:?}) keeps the snapshot id and sequence numbers it was added with",
            e.file_path(),
            e.status()
        );
        if e.status() == ManifestStatus::Existing {
            existing += 1;
        }
    }
    let distinct: BTreeSet<&String> = live.iter().collect();
    assert_eq!(distinct.len(), live.len(), "a file is live twice: {live:?}");
    live.sort();
    (live, existing)
}

fn expected_paths(h: &Harness, keys: &[String]) -> Vec<String> {
    let mut paths: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    paths.sort();
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_keeps_the_manifest_list_short_and_every_file_once() {
    const MIN_COUNT: usize = 5;
    let mut h = Harness::new("merge");
    let mut keys = vec![h.register_one().await];
    common::py::set_properties(
        &ident(&h),
        &[("commit.manifest.min-count-to-merge", &MIN_COUNT.to_string())],
    );
    keys.extend(h.ship_many(0, 24, 10).await);
    Harness::finish(h.start_with(h.config.clone(), one_per_commit()).await, 25).await;
    let table = h.table(DATASET).await.expect("table");
    let shipped_rows = 5 + 24 * 10;

    // One snapshot per segment; every manifest list short and deflate-compressed.
    let mut snapshots: Vec<_> = table.metadata().snapshots().cloned().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    assert_eq!(snapshots.len(), 25);
    let mut lengths = Vec::new();
    for snapshot in &snapshots {
        let (len, bytes, _) = snapshot_entries(&table, snapshot).await;
        assert!(
            is_deflate(&bytes),
            "manifest list {} is deflate-compressed",
            snapshot.manifest_list()
        );
        lengths.push(len);
    }
    assert!(
        lengths.iter().all(|&l| l <= MIN_COUNT),
        "every manifest list holds at most {MIN_COUNT} manifests: {lengths:?}"
    );
    let current = table.metadata().current_snapshot().expect("snapshot");
    assert!(*lengths.last().expect("a snapshot") <= MIN_COUNT);

    // Every segment's file exactly once; merged ones are EXISTING with their original ids.
    let (live, existing) = check_live(&table).await;
    assert_eq!(live, expected_paths(&h, &keys));
    assert!(
        existing >= 20,
        "most files were merged into EXISTING entries: {existing}"
    );

    // The summary counts what was shipped (merging adds no files).
    let summary = &current.summary().additional_properties;
    assert_eq!(summary["total-data-files"], "25");
    assert_eq!(summary["total-records"], shipped_rows.to_string());
    assert_eq!(summary["added-data-files"], "1");

    // Readers: the Rust client and pyiceberg read every row; pyiceberg plans one task per file.
    assert_eq!(row_count(&read_all(&table).await), shipped_rows);
    let (rows, mut files) = pyiceberg_view(&ident(&h));
    assert_eq!(rows as usize, shipped_rows);
    files.sort();
    assert_eq!(files, expected_paths(&h, &keys));
    eprintln!(
        "merging on: {} commits, manifest-list lengths {lengths:?}, current list {} bytes",
        snapshots.len(),
        snapshot_entries(&table, current).await.1.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_disabled_keeps_one_manifest_per_commit() {
    let mut h = Harness::new("nomerge");
    let mut keys = vec![h.register_one().await];
    common::py::set_properties(
        &ident(&h),
        &[
            ("commit.manifest-merge.enabled", "false"),
            ("commit.manifest.min-count-to-merge", "2"),
        ],
    );
    keys.extend(h.ship_many(0, 8, 10).await);
    Harness::finish(h.start_with(h.config.clone(), one_per_commit()).await, 9).await;
    let table = h.table(DATASET).await.expect("table");
    let current = table
        .metadata()
        .current_snapshot()
        .expect("snapshot")
        .clone();
    let (len, bytes, entries) = snapshot_entries(&table, &current).await;
    assert_eq!(len, 9, "one manifest per commit");
    assert!(is_deflate(&bytes));
    assert!(entries.iter().all(|e| e.status() == ManifestStatus::Added));
    let (live, existing) = check_live(&table).await;
    assert_eq!(live, expected_paths(&h, &keys));
    assert_eq!(existing, 0);
    let (rows, files) = pyiceberg_view(&ident(&h));
    assert_eq!(rows, 5 + 8 * 10);
    assert_eq!(files.len(), 9);
    eprintln!(
        "merging off: {} commits, current list {len} manifests, {} bytes",
        table.metadata().snapshots().count(),
        bytes.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writers_files_are_merged_along_and_kept() {
    let mut h = Harness::new("mergeother");
    let mut keys = vec![h.register_one().await];
    let ident = ident(&h);
    common::py::set_properties(&ident, &[("commit.manifest.min-count-to-merge", "3")]);
    // pyiceberg appends two files of its own (its manifests and uncompressed manifest lists).
    let out = common::py::run(
        r#"
import datetime
import pyarrow as pa
files = []
for i in range(2):
    table = catalog.load_table(sys.argv[1])
    data = [{"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
             "device": f"pyiceberg-{i}", "reading_seq": 10**9 + i * 7 + j,
             "temperature_c": 1.0, "battery_pct": 1, "_wal_epoch": 0, "_wal_pos": 0}
            for j in range(7)]
    table.append(pa.Table.from_pylist(data, schema=table.schema().as_arrow()))
table = catalog.load_table(sys.argv[1])
print(json.dumps([t.file.file_path for t in table.scan().plan_files()]))
"#,
        &[&ident],
    );
    let before: Vec<String> = serde_json::from_str(out.trim()).expect("json");
    let own = expected_paths(&h, &keys);
    let theirs: Vec<String> = before.into_iter().filter(|f| !own.contains(f)).collect();
    assert_eq!(theirs.len(), 2, "pyiceberg's two files");

    keys.extend(h.ship_many(0, 6, 10).await);
    Harness::finish(h.start_with(h.config.clone(), one_per_commit()).await, 7).await;
    let table = h.table(DATASET).await.expect("table");
    let (live, existing) = check_live(&table).await;
    let mut expected = expected_paths(&h, &keys);
    expected.extend(theirs.iter().cloned());
    expected.sort();
    assert_eq!(
        live, expected,
        "the registrar's and pyiceberg's files, each once"
    );
    assert!(existing > 0, "a merge happened");
    let current = table
        .metadata()
        .current_snapshot()
        .expect("snapshot")
        .clone();
    let (len, _, entries) = snapshot_entries(&table, &current).await;
    assert!(len <= 3, "the list stays short: {len}");
    // pyiceberg's files were rewritten into a merged manifest (EXISTING) or carried as they are.
    for path in &theirs {
        assert!(
            entries
                .iter()
                .any(|e| e.file_path() == path && e.is_alive())
        );
    }
    let (rows, files) = pyiceberg_view(&ident);
    assert_eq!(rows, 5 + 2 * 7 + 6 * 10);
    assert_eq!(files.len(), 9);
    assert_eq!(
        table
            .metadata()
            .current_snapshot()
            .expect("s")
            .summary()
            .additional_properties["total-data-files"],
        "9"
    );
}
