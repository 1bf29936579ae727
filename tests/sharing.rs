//! Sharing a table with other writers, against the real REST fixture and S3 server: a pyiceberg
//! writer appending as fast as it can while the registrar merges manifests, a compaction
//! (overwrite) between two registrar commits, snapshot expiry by another writer, and a refused
//! attempt's files. What users are promised is checked with pyiceberg as an independent reader:
//! every segment's file live exactly once, none lost, none registered again, row counts.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{Harness, Options, assert_exactly_once, py};
use iceberg::table::Table;
use thadam_iceberg::RegistrarStatus;
use thadam_iceberg::Tuning;
use thadam_iceberg::testing::BeforeAppend;
use thadam_iceberg::testing::ReadySegment;
use thadam_iceberg::testing::TableName;

const DATASET: &str = "telemetry";

/// Iceberg sink keys: tables the registrar creates merge manifests once there are `n`.
fn merge_every(n: u32) -> String {
    format!("      table_properties: {{ \"commit.manifest.min-count-to-merge\": \"{n}\" }}")
}

fn harness(test: &str, extra_iceberg_yaml: String) -> Harness {
    Harness::with(
        test,
        Options {
            extra_iceberg_yaml,
            ..Options::default()
        },
    )
}

/// `namespace.telemetry`, as pyiceberg names the table.
fn ident(h: &Harness) -> String {
    format!("{}.{DATASET}", h.namespace.join("."))
}

fn batches_of(n: usize) -> Tuning {
    Tuning {
        max_batch: n,
        ..Tuning::default()
    }
}

/// The sum of `thadam_iceberg_commits_total{outcome}` for table `ident`.
fn commits(ident: &str, outcome: &str) -> u64 {
    common::metrics::counter(
        "thadam_iceberg_commits_total",
        &[("table", ident), ("outcome", outcome)],
    ) as u64
}

/// `(registered, skipped)` of the run's only table.
fn counts(status: &RegistrarStatus) -> (u64, u64) {
    let t = status.tables.values().next().expect("a table status");
    (t.registered, t.skipped)
}

/// `s3://bucket/key` of each key, sorted.
fn uris(h: &Harness, keys: &[String]) -> Vec<String> {
    let mut uris: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    uris.sort();
    uris
}

/// The registrar's data files (its object keys) among `files`, and the others.
fn split_ours(files: &[String]) -> (Vec<String>, Vec<String>) {
    files
        .iter()
        .cloned()
        .partition(|f| f.contains("/data/seg-"))
}

/// A pyiceberg writer sharing the table: appends one row per commit (pyiceberg's fast append,
/// one new manifest each), back to back with `pause` seconds between, until the file `stop`
/// exists; retries its own conflicts (pyiceberg retries a commit itself first). Prints a report.
const RIVAL: &str = r#"
import datetime, os, time
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
ident, stop, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
appends = conflicts = io_errors = 0
while not os.path.exists(stop):
    table = catalog.load_table(ident)
    rows = [{"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
             "device": "rival", "reading_seq": 10**9 + appends, "temperature_c": 1.0,
             "battery_pct": 1, "_wal_epoch": 0, "_wal_pos": 0}]
    try:
        table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
        appends += 1
    except CommitFailedException:
        conflicts += 1
    except OSError:
        # s3s-fs occasionally fails a multipart upload under load; a writer retries that.
        io_errors += 1
        if io_errors > 20:
            raise
    time.sleep(pause)
print(json.dumps({"appends": appends, "conflicts": conflicts, "io_errors": io_errors}))
"#;

/// Snapshots of the table not written by the registrar.
fn others_snapshots(table: &Table) -> usize {
    table
        .metadata()
        .snapshots()
        .filter(|s| {
            !s.summary()
                .additional_properties
                .contains_key("thadam.writer")
        })
        .count()
}

/// The registrar's log on the test's output when `RUST_LOG` is set (e.g.
/// `RUST_LOG=thadam_iceberg=info`), to see what a slow run was doing.
fn log_if_asked() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// How long the registrar may go without handling a segment beside the busy rival before it
/// counts as starved: well over what adaptive pacing leaves between two commits of a shared
/// table (at most 1.5 times its 30 s ceiling).
const NO_PROGRESS_GUARD: Duration = Duration::from_secs(120);
/// The whole run's hang guard.
const WHOLE_RUN_GUARD: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_rival_writer_does_not_starve_the_registrar() {
    log_if_asked();
    common::metrics::recorder();
    const SEGMENTS: u64 = 40;
    // Every registrar commit merges: the rival's manifests pile up between two of them.
    let mut h = harness("starve", merge_every(4));
    let mut keys = vec![h.register_one().await];
    let ident = ident(&h);
    let stop = h.dir.path().join("rival.stop");
    let stop_arg = stop.to_str().expect("utf-8 temp path").to_string();
    let mut rival = py::spawn(RIVAL, &[&ident, &stop_arg, "0"]);
    // The rival is under way before the trickle starts (python takes a while to start).
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let table = h.table(DATASET).await.expect("table");
            if others_snapshots(&table) >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the rival appends (hang guard)");

    let conflicts_before = commits(&ident, "conflict");
    let started = std::time::Instant::now();
    let handle = h.start_with(h.config.clone(), batches_of(5)).await;
    // A live trickle, ~10 segments a second.
    for i in 0..SEGMENTS {
        keys.push(h.ship_telemetry(i, 5).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Hang guards only, on progress rather than on the whole run: a starved registrar handles
    // nothing more, ever; one that shares the table keeps handling segments, however its
    // commits are paced. Then say how far it got.
    let status = loop {
        let handled = handle.status().handled();
        if handled > SEGMENTS {
            break handle.status();
        }
        let progress = tokio::time::timeout(
            NO_PROGRESS_GUARD,
            handle.wait_until(|s| s.handled() > handled),
        )
        .await;
        if let Ok(progress) = progress {
            progress.expect("registrar ran without a fatal error");
            assert!(
                started.elapsed() < WHOLE_RUN_GUARD,
                "the registrar is still registering after {:?} (hang guard)",
                started.elapsed()
            );
            continue;
        }
        let status = handle.status();
        let table = h.table(DATASET).await.expect("table");
        panic!(
            "starved: the registrar handled no segment for {NO_PROGRESS_GUARD:?} beside the \
             rival (hang guard), {:?} into its run: {} of {} segments handled, {} commits ok, \
             {} conflicts (409); the rival has {} snapshots; last error: {:?}",
            started.elapsed(),
            status.handled(),
            SEGMENTS + 1,
            status.tables.values().map(|t| t.commits).sum::<u64>(),
            commits(&ident, "conflict") - conflicts_before,
            others_snapshots(&table),
            status
                .tables
                .values()
                .next()
                .and_then(|t| t.last_error.clone()),
        );
    };
    let took = started.elapsed();
    handle.stop();
    handle.wait().await.expect("clean stop");
    // The rival was never paused: the registrar got every segment in while it kept appending.
    assert!(
        rival.try_wait().expect("rival's state").is_none(),
        "the rival writer stopped early"
    );
    std::fs::write(&stop, b"").expect("stop file");
    let output = tokio::time::timeout(Duration::from_secs(60), rival.wait_with_output())
        .await
        .expect("the rival stops (hang guard)")
        .expect("the rival ran");
    assert!(
        output.status.success(),
        "the rival failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the rival's report");
    let t = status.tables.values().next().expect("status");
    eprintln!(
        "registrar: {} commits ok, {} conflicts (409), {} segments in {took:?}; rival: {report}",
        t.commits,
        commits(&ident, "conflict") - conflicts_before,
        t.registered,
    );
    assert_eq!(
        counts(&status),
        (SEGMENTS, 1),
        "the first run's segment is replayed"
    );
    let appends = report["appends"].as_u64().expect("appends");

    // pyiceberg, an independent reader: every segment exactly once, every rival append once.
    let view = py::view(&ident);
    let (ours, theirs) = split_ours(&view.files);
    assert_eq!(ours, uris(&h, &keys), "every segment exactly once");
    assert_eq!(
        theirs.len() as u64,
        appends,
        "every rival append's file, once"
    );
    assert_eq!(view.rows, 5 + SEGMENTS * 5 + appends);

    // They took turns: the rival committed between the registrar's first and last commits of
    // the trickle (sequence numbers are the catalog's commit order).
    let table = h.table(DATASET).await.expect("table");
    let mut ours_seq = Vec::new();
    let mut theirs_seq = Vec::new();
    for s in table.metadata().snapshots() {
        if s.summary()
            .additional_properties
            .contains_key("thadam.writer")
        {
            ours_seq.push(s.sequence_number());
        } else {
            theirs_seq.push(s.sequence_number());
        }
    }
    ours_seq.sort_unstable();
    // The first is the first run's (register_one).
    let (first, last) = (ours_seq[1], *ours_seq.last().expect("a commit"));
    let between = theirs_seq
        .iter()
        .filter(|s| (first..last).contains(*s))
        .count();
    eprintln!(
        "{} registrar snapshots of the trickle, {between} rival snapshots between its first and last",
        ours_seq.len() - 1
    );
    assert!(
        between > 0,
        "the rival made progress while the registrar registered"
    );
}

/// Replaces every row of the table with the same rows in one new data file (a compaction, as
/// `table.overwrite(table.scan().to_arrow())`); prints the rows and the live files after it.
const COMPACT: &str = r#"
table = catalog.load_table(sys.argv[1])
rows = table.scan().to_arrow()
table.overwrite(rows)
table = catalog.load_table(sys.argv[1])
files = [t.file.file_path for t in table.scan().plan_files()]
print(json.dumps({"rows": rows.num_rows, "files": files}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_between_two_registrar_commits_registers_nothing_again() {
    common::metrics::recorder();
    // Merging too: the registrar's merges read the overwrite's manifests (DELETED entries).
    let mut h = harness("compact", merge_every(3));
    let ident = ident(&h);
    let mut keys = h.ship_many(0, 10, 5).await;
    let handle = h.start_with(h.config.clone(), batches_of(3)).await;
    common::wait_handled(&handle, 10).await;

    // The registrar is running and idle; another writer rewrites every row into one file.
    let out = py::run(COMPACT, &[&ident]);
    let compacted: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(compacted["rows"], 50);
    let compacted_files: Vec<String> = compacted["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().expect("path").to_string())
        .collect();
    assert_eq!(compacted_files.len(), 1, "one file after the compaction");
    assert!(
        !compacted_files[0].contains("/data/seg-"),
        "the registrar's files are no longer live: {compacted_files:?}"
    );

    // More segments while the registrar still runs: its next commit meets a table it has not
    // seen (a 409, then a reload that rebuilds the committed set).
    keys.extend(h.ship_many(10, 5, 5).await);
    let first = Harness::finish(handle, 15).await;
    eprintln!(
        "after the compaction: {} conflicts (409) met by the running registrar",
        commits(&ident, "conflict")
    );
    assert_eq!(counts(&first), (15, 0));
    let view = py::view(&ident);
    let mut want = compacted_files.clone();
    want.extend(uris(&h, &keys[10..]));
    want.sort();
    assert_eq!(view.files, want, "the compacted file and the new segments");
    assert_eq!(view.rows, 75);

    // Stopped, more segments recorded, restarted: the log is replayed from its start.
    keys.extend(h.ship_many(15, 5, 5).await);
    let second = h.start_with(h.config.clone(), batches_of(3)).await;
    let second = Harness::finish(second, 20).await;
    assert_eq!(
        counts(&second),
        (5, 15),
        "only the new segments are registered"
    );

    let view = py::view(&ident);
    let mut want = compacted_files.clone();
    want.extend(uris(&h, &keys[10..]));
    want.sort();
    assert_eq!(
        view.files, want,
        "no compacted segment is live again; every new one exactly once"
    );
    assert_eq!(view.rows, 50 + 10 * 5, "compacted rows plus new rows");
    let old = uris(&h, &keys[..10]);
    assert!(view.files.iter().all(|f| !old.contains(f)));
    // The Rust client agrees.
    let table = h.table(DATASET).await.expect("table");
    assert_eq!(common::data_file_list(&table).await, want);
}

/// Expires every snapshot but the current one with pyiceberg (metadata only); prints how many
/// snapshots the table keeps.
const EXPIRE: &str = r#"
import datetime
table = catalog.load_table(sys.argv[1])
table.maintenance.expire_snapshots().older_than(
    datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)).commit()
print(len(catalog.load_table(sys.argv[1]).metadata.snapshots))
"#;

fn expire(ident: &str) -> usize {
    py::run(EXPIRE, &[ident])
        .trim()
        .parse()
        .expect("snapshots kept")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rival_expiring_snapshots_meanwhile_loses_nothing() {
    let mut h = harness("expire", merge_every(3));
    let ident = ident(&h);
    let mut keys = h.ship_many(0, 6, 5).await;
    let handle = h
        .start_with(h.config.clone(), common::one_per_commit())
        .await;
    common::wait_handled(&handle, 6).await;

    // Between two registrar commits: another writer expires all but the current snapshot.
    assert_eq!(expire(&ident), 1);
    keys.extend(h.ship_many(6, 3, 5).await);
    // And once more while segments arrive (the registrar may be committing).
    expire(&ident);
    keys.extend(h.ship_many(9, 3, 5).await);
    let first = Harness::finish(handle, 12).await;
    assert_eq!(counts(&first), (12, 0));

    // Expired again while the registrar is stopped; more segments; a restart replays the log.
    assert_eq!(expire(&ident), 1);
    keys.extend(h.ship_many(12, 6, 5).await);
    let second = h
        .start_with(h.config.clone(), common::one_per_commit())
        .await;
    let second = Harness::finish(second, 18).await;
    assert_eq!(
        counts(&second),
        (6, 12),
        "expired registrations are not registered again"
    );

    let view = py::view(&ident);
    assert_eq!(view.files, uris(&h, &keys), "every segment exactly once");
    assert_eq!(view.rows, 18 * 5);
    let table = h.table(DATASET).await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}

/// Appends one row with pyiceberg (one snapshot).
const APPEND_ONE: &str = r#"
import datetime
import pyarrow as pa
table = catalog.load_table(sys.argv[1])
rows = [{"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), "device": "rival",
         "reading_seq": 10**9, "temperature_c": 1.0, "battery_pct": 1, "_wal_epoch": 0,
         "_wal_pos": 0}]
table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
"#;

/// Right before the registrar's first append attempt, pyiceberg appends a row: that attempt
/// (its manifests and manifest list already written) is answered 409.
struct RivalFirst {
    ident: String,
    calls: AtomicUsize,
}

#[async_trait]
impl BeforeAppend for RivalFirst {
    async fn before_append(&self, _: &TableName, _: &Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            return;
        }
        let ident = self.ident.clone();
        tokio::task::spawn_blocking(move || py::run(APPEND_ONE, &[&ident]))
            .await
            .expect("the rival's append");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_leaves_no_files_behind() {
    common::metrics::recorder();
    // Merging from the second manifest on: the refused attempt writes a merged manifest too.
    let mut h = harness("orphans", merge_every(2));
    let ident = ident(&h);
    let mut keys = vec![h.register_one().await];
    keys.extend(h.ship_many(0, 3, 5).await);
    let rival = Arc::new(RivalFirst {
        ident: ident.clone(),
        calls: AtomicUsize::new(0),
    });
    let mut tuning = Tuning::default();
    tuning.hooks.before_append = Some(rival.clone());
    let status = Harness::finish(h.start_with(h.config.clone(), tuning).await, 4).await;
    assert_eq!(counts(&status), (3, 1));
    assert_eq!(
        rival.calls.load(Ordering::SeqCst),
        2,
        "one refused attempt, then the one that landed"
    );
    assert_eq!(
        commits(&ident, "conflict"),
        1,
        "the first attempt met a 409"
    );

    let view = py::view(&ident);
    let (ours, theirs) = split_ours(&view.files);
    assert_eq!(ours, uris(&h, &keys), "every segment exactly once");
    assert_eq!(theirs.len(), 1, "the rival's file");

    let table = h.table(DATASET).await.expect("table");
    let (lists, manifests) = common::referenced(&table).await;
    let objects = common::metadata_objects(&h, &table).await;
    let orphans: Vec<&String> = objects
        .iter()
        .filter(|path| path.ends_with(".avro"))
        .filter(|path| {
            let name = path.rsplit('/').next().unwrap_or_default();
            if name.starts_with("snap-") {
                !lists.contains(*path)
            } else {
                !manifests.contains(*path)
            }
        })
        .collect();
    eprintln!(
        "metadata/: {} objects, {} manifest lists and {} manifests referenced",
        objects.len(),
        lists.len(),
        manifests.len()
    );
    assert!(
        orphans.is_empty(),
        "files under metadata/ that no snapshot references (left by a refused attempt): \
         {orphans:#?}"
    );
}
