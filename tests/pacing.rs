//! Commit pacing (`commit.min_interval`) and sharing a table with another writer: a trickle is
//! committed at most once per interval, and a pyiceberg writer appending in a loop on the same
//! table gets every append through while the registrar registers every segment exactly once.

mod common;

use std::time::Duration;

use common::{Harness, Options, assert_exactly_once};

fn paced(test: &str, min_interval: &str) -> Harness {
    Harness::with(
        test,
        Options {
            extra_iceberg_yaml: format!("      commit: {{ min_interval: {min_interval} }}"),
            ..Options::default()
        },
    )
}

/// The registrar's snapshots of the table, oldest first: (timestamp ms, segments).
fn registrar_snapshots(table: &iceberg::table::Table) -> Vec<(i64, usize)> {
    let mut snaps: Vec<(i64, usize)> = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            let n = s.summary().additional_properties.get("thadam.segments")?;
            Some((s.timestamp_ms(), n.parse().ok()?))
        })
        .collect();
    snaps.sort();
    snaps
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_interval_spaces_a_trickles_commits_and_batches_what_arrives_meanwhile() {
    let mut h = paced("pace", "1s");
    assert_eq!(h.config.commit.min_interval, Duration::from_secs(1));
    let mut keys = vec![h.register_one().await];
    let handle = h.start().await;
    // A trickle: one segment every 150 ms, 12 in all (~1.8 s).
    for i in 0..12 {
        keys.push(h.ship_telemetry(i, 5).await);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    // 13 handled: the first run's segment, found registered on replay, and the 12 of the
    // trickle (waiting for 12 returned early whenever the last segment had a snapshot alone).
    let status = Harness::finish(handle, 13).await;
    assert_eq!(status.registered(), 12);
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    let snaps = registrar_snapshots(&table);
    // The first run's snapshot, then the paced ones (the run's first commit is not paced).
    let paced = &snaps[1..];
    assert_eq!(paced.iter().map(|s| s.1).sum::<usize>(), 12);
    assert!(
        paced.len() < 12,
        "segments arriving within an interval share a snapshot: {paced:?}"
    );
    for pair in paced.windows(2) {
        // Pacing spaces the starts of commits; a snapshot's timestamp is taken while its commit
        // is built (after the schema check and the manifest writes), so two timestamps are
        // min_interval apart give or take the difference of two build times, which a loaded
        // machine stretches. Unpaced, this trickle's commits are ~150 ms apart.
        assert!(
            pair[1].0 - pair[0].0 >= 600,
            "two commits of one table much less than min_interval apart: {paced:?}"
        );
    }
}

/// Appends `n` files with pyiceberg, one snapshot each, each retried (reload, then again) up to
/// `tries` times on a conflict, as a writer sharing the table would; prints the outcome.
const APPENDER: &str = r#"
import datetime, random, time
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
ident, n, tries = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
done, conflicts, gave_up = 0, 0, 0
for i in range(n):
    for attempt in range(tries):
        table = catalog.load_table(ident)
        rows = [{"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
                 "device": "pyiceberg", "reading_seq": 10**9 + i, "temperature_c": 1.0,
                 "battery_pct": 1, "_wal_epoch": 0, "_wal_pos": 0}]
        try:
            table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
            done += 1
            break
        except CommitFailedException:
            conflicts += 1
            time.sleep(random.uniform(0.05, 0.2))
    else:
        gave_up += 1
print(json.dumps({"done": done, "conflicts": conflicts, "gave_up": gave_up}))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_writer_appending_in_a_loop_gets_through_paced_commits() {
    const APPENDS: u64 = 8;
    const SEGMENTS: u64 = 40;
    // Unpaced (0s), pyiceberg gave up on 1 of 8 appends in each of 2 runs here (with 20
    // segments it passed unpaced: too short to contend);
    // 300ms was enough on an idle machine but not under the whole suite's load, where a
    // pyiceberg append takes longer: 1s leaves it room.
    let min_interval = "1s";
    let mut h = paced("share", min_interval);
    let mut keys = vec![h.register_one().await];
    // A backlog committed one segment per snapshot: the registrar would commit back to back.
    keys.extend(h.ship_many(0, SEGMENTS, 5).await);
    let ident = format!("{}.telemetry", h.namespace.join("."));
    let python = std::env::var("THADAM_TEST_PYTHON").expect("THADAM_TEST_PYTHON (scripts/test)");
    let writer = tokio::process::Command::new(python)
        .arg("-c")
        .arg(format!("{}\n{APPENDER}", common::py::PRELUDE))
        // pyiceberg's own retries only (commit.retry.num-retries, 4 by default): no extra tries.
        .args([ident.as_str(), &APPENDS.to_string(), "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("pyiceberg writer starts");
    let handle = h
        .start_with(h.config.clone(), common::one_per_commit())
        .await;
    let output = tokio::time::timeout(Duration::from_secs(180), writer.wait_with_output())
        .await
        .expect("pyiceberg writer finished in time (hang guard)")
        .expect("pyiceberg writer ran");
    assert!(
        output.status.success(),
        "pyiceberg writer failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status = Harness::finish(handle, SEGMENTS + 1).await;
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the writer's report");
    eprintln!("pyiceberg writer (min_interval {min_interval}): {report}");
    assert_eq!(
        report["done"], APPENDS,
        "every pyiceberg append went through: {report}"
    );

    let t = status.tables.values().next().expect("status");
    assert_eq!(
        (t.registered, t.skipped),
        (SEGMENTS, 1),
        "the first run's segment is replayed"
    );
    let table = h.table("telemetry").await.expect("table");
    // The registrar's files exactly once; pyiceberg's files (its own names) besides.
    let ours: Vec<String> = common::data_file_list(&table)
        .await
        .into_iter()
        .filter(|f| f.contains("/data/seg-"))
        .collect();
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(ours, expected, "every segment exactly once");
    let theirs = table
        .metadata()
        .snapshots()
        .filter(|s| {
            !s.summary()
                .additional_properties
                .contains_key("thadam.writer")
        })
        .count();
    assert_eq!(
        theirs, APPENDS as usize,
        "one snapshot per pyiceberg append"
    );
    let rows = common::row_count(&common::read_all(&table).await);
    assert_eq!(rows as u64, 5 + SEGMENTS * 5 + APPENDS);
}
