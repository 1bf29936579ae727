//! Exactly once, under every fault we can produce against the real REST fixture and S3 server:
//! lost answers, 5xx storms, a competing writer winning the race, and snapshot expiry.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::fault_proxy::{Fault, FaultProxy, Kind};
use common::{Harness, assert_exactly_once, data_file_list, one_per_commit};
use iceberg::table::Table;
use thadam_iceberg::Tuning;
use thadam_iceberg::testing::BeforeAppend;
use thadam_iceberg::testing::CommittedSet;
use thadam_iceberg::testing::TableName;
use thadam_iceberg::testing::{AppendAttempts, ReadySegment, prepare_append};
use thadam_iceberg::testing::{SEGMENT_IDS, WATERMARK_PREFIX, decode_ids};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_answer_converges_on_one_data_file() {
    let mut h = Harness::new("lost");
    let mut keys = vec![h.register_one().await];
    let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
    // The commit is applied by the catalog, but its answer never reaches the registrar.
    proxy.plan(Kind::Append, [Fault::ApplyThenDrop]);
    keys.extend(h.ship_many(0, 3, 20).await);
    let mut config = h.config.clone();
    config.catalog_uri = proxy.uri.parse().expect("url");
    common::metrics::recorder();
    let status = Harness::finish(h.start_with(config, Tuning::default()).await, 4).await;

    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    // The registrar reconciled instead of repeating: one append reached the catalog.
    assert_eq!(proxy.seen(Kind::Append), 1, "{:?}", proxy.log());
    assert_eq!(table.metadata().snapshots().count(), 2);
    let t = status.tables.values().next().expect("table status");
    // Its own commit, found in the table: registered (the one registered before it: skipped),
    // so that a node's counts add up to what its log put in the table.
    assert_eq!(
        (t.registered, t.skipped),
        (3, 1),
        "found its own lost commit in the table"
    );
    let name = format!("{}.telemetry", h.namespace.join("."));
    assert_eq!(
        common::metrics::counter(
            "thadam_iceberg_segments_registered_total",
            &[("table", &name)]
        ),
        3.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_storm_loses_nothing_and_doubles_nothing() {
    let mut h = Harness::new("storm");
    let mut keys = vec![h.register_one().await];
    let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
    // Some refused before the catalog saw them, some applied but answered with an error.
    proxy.plan(
        Kind::Append,
        [
            Fault::Refuse(503),
            Fault::ApplyThenFail(500),
            Fault::Refuse(500),
            Fault::ApplyThenFail(502),
            Fault::ApplyThenFail(503),
            Fault::Refuse(504),
            Fault::ApplyThenDrop,
        ],
    );
    keys.extend(h.ship_many(0, 6, 20).await);
    let mut config = h.config.clone();
    config.catalog_uri = proxy.uri.parse().expect("url");
    Harness::finish(h.start_with(config, one_per_commit()).await, 7).await;

    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    // Every shipped segment made exactly one snapshot (plus the one that created the table).
    assert_eq!(table.metadata().snapshots().count(), 7);
    let faults: Vec<Fault> = proxy.log().into_iter().map(|(_, f)| f).collect();
    assert!(faults.len() >= 7, "the whole plan was used: {faults:?}");
}

/// Commits the first segment of the registrar's batch as another writer would, just before the
/// registrar's own commit: the registrar's commit then meets a 409.
struct CompetingWriter {
    client: thadam_iceberg::testing::RestClient,
    bucket: String,
    calls: AtomicUsize,
    stolen: std::sync::Mutex<Option<String>>,
}

#[async_trait]
impl BeforeAppend for CompetingWriter {
    async fn before_append(&self, name: &TableName, base: &Table, batch: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            return;
        }
        let first = &batch[..1];
        let mut committed = CommittedSet::from_metadata(base.metadata());
        let watermark = committed.watermark_update(&[&first[0].segment]);
        let commit = prepare_append(
            base,
            &self.bucket,
            "competitor",
            first,
            watermark.as_ref(),
            &[],
        )
        .expect("competitor's append")
        .build(&mut AppendAttempts::default())
        .await
        .expect("competitor's manifests");
        self.client
            .commit(name, commit.requirements, commit.updates, Some(base))
            .await
            .expect("the competitor wins");
        *self.stolen.lock().expect("lock") = Some(first[0].segment.object_key.clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_competing_writer_wins_the_race_and_nothing_is_lost_or_doubled() {
    let mut h = Harness::new("conflict");
    let mut keys = vec![h.register_one().await];
    let new_keys = h.ship_many(0, 2, 20).await;
    keys.extend(new_keys.clone());
    let competitor = Arc::new(CompetingWriter {
        client: h.client().await,
        bucket: h.env.bucket.clone(),
        calls: AtomicUsize::new(0),
        stolen: std::sync::Mutex::new(None),
    });
    let mut tuning = Tuning::default();
    tuning.hooks.before_append = Some(competitor.clone());
    let status = Harness::finish(h.start_with(h.config.clone(), tuning).await, 3).await;

    // The registrar met the conflict, reloaded, skipped the stolen segment and appended the other.
    assert_eq!(
        competitor.calls.load(Ordering::SeqCst),
        2,
        "one retry after the conflict"
    );
    let stolen = competitor
        .stolen
        .lock()
        .expect("lock")
        .clone()
        .expect("stolen");
    assert_eq!(stolen, new_keys[0]);
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped), (1, 2));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    assert_eq!(table.metadata().snapshots().count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_expiry_does_not_make_the_registrar_register_again() {
    let mut h = Harness::new("expiry");
    let keys = h.ship_many(0, 3, 20).await;
    let handle = h.start_with(h.config.clone(), one_per_commit()).await;
    Harness::finish(handle, 3).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 3);

    // Table maintenance expires every snapshot but the current one.
    h.expire_all_but_current("telemetry").await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 1);
    // The surviving summary no longer lists the first two segments: keys alone would forget them.
    let listed: usize = table
        .metadata()
        .snapshots()
        .filter_map(|s| s.summary().additional_properties.get(SEGMENT_IDS).cloned())
        .map(|v| decode_ids(&v).len())
        .sum();
    assert_eq!(listed, 1);
    assert!(
        table
            .metadata()
            .properties()
            .keys()
            .any(|k| k.starts_with(WATERMARK_PREFIX)),
        "the watermark property is there"
    );

    // Restart over the same segment catalog: nothing is registered again.
    let status = h.run_until_handled(3).await;
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped), (0, 3));
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 1);
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    assert_eq!(data_file_list(&table).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_second_writer_appends_while_the_registrar_registers_200_segments() {
    let mut h = Harness::new("rival");
    let mut keys = vec![h.register_one().await];
    let handle = h.start().await;
    let ident = format!("{}.telemetry", h.namespace.join("."));

    // pyiceberg appends its own rows in a loop, retrying its own conflicts.
    const APPENDS: u64 = 12;
    const ROWS: u64 = 25;
    let rival = tokio::task::spawn_blocking({
        let ident = ident.clone();
        move || {
            common::py::run(
                r#"
import datetime
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
name, n, rows = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
appends = conflicts = io_errors = 0
for i in range(n):
    data = [{"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
             "device": f"pyiceberg-{i}", "reading_seq": 10**9 + i * rows + j,
             "temperature_c": 1.0, "battery_pct": 1, "_wal_epoch": 0, "_wal_pos": 0}
            for j in range(rows)]
    while True:
        table = catalog.load_table(name)
        try:
            table.append(pa.Table.from_pylist(data, schema=table.schema().as_arrow()))
            appends += 1
            break
        except CommitFailedException:
            conflicts += 1
        except OSError:
            # s3s-fs occasionally fails a multipart upload under load; a writer retries that.
            io_errors += 1
            if io_errors > 20:
                raise
print(json.dumps({"appends": appends, "conflicts": conflicts, "io_errors": io_errors}))
"#,
                &[&ident, &APPENDS.to_string(), &ROWS.to_string()],
            )
        }
    });

    // Meanwhile 200 segments arrive in waves.
    for wave in 0..20u64 {
        for i in 0..10 {
            keys.push(h.ship_telemetry(wave * 10 + i, 10).await);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(180), rival)
        .await
        .expect("pyiceberg finished in time (hang guard)")
        .expect("join");
    Harness::finish(handle, 201).await;
    println!("pyiceberg: {}", out.trim());
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(report["appends"], APPENDS);

    let table = h.table("telemetry").await.expect("table");
    let files = data_file_list(&table).await;
    let ours: Vec<String> = files
        .iter()
        .filter(|f| f.contains("/data/seg-"))
        .cloned()
        .collect();
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(ours, expected, "every segment exactly once");
    assert_eq!(
        files.len() - ours.len(),
        APPENDS as usize,
        "every pyiceberg append's file, once"
    );

    // Every row of the other writer is intact.
    let mut rival_seqs: Vec<i64> = Vec::new();
    for b in common::read_all(&table).await {
        let device = b
            .column_by_name("device")
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>())
            .expect("device");
        let seq = b
            .column_by_name("reading_seq")
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::Int64Array>())
            .expect("reading_seq");
        for i in 0..b.num_rows() {
            if device.value(i).starts_with("pyiceberg-") {
                rival_seqs.push(seq.value(i));
            }
        }
    }
    rival_seqs.sort_unstable();
    let want: Vec<i64> = (0..(APPENDS * ROWS) as i64)
        .map(|v| 1_000_000_000 + v)
        .collect();
    assert_eq!(rival_seqs, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_carry_an_idempotency_key_when_the_catalog_advertises_them() {
    let mut h = Harness::new("idem");
    let mut keys = vec![h.register_one().await];
    keys.extend(h.ship_many(0, 2, 20).await);
    let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
    proxy.advertise_idempotency();
    // One refused commit: it is resent as is, with the same key (the same request body); the
    // next append is a new body with its own key.
    proxy.plan(Kind::Append, [Fault::Refuse(503)]);
    let mut config = h.config.clone();
    config.catalog_uri = proxy.uri.parse().expect("url");
    Harness::finish(h.start_with(config, one_per_commit()).await, 3).await;
    let sent: Vec<String> = proxy
        .idempotency_keys()
        .into_iter()
        .map(|k| k.expect("a key on every commit"))
        .collect();
    assert_eq!(sent.len(), 3, "{:?}", proxy.log());
    assert_eq!(sent[0], sent[1], "the resend carries the same key");
    assert_ne!(sent[1], sent[2], "one key per request body");
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;

    // Without the advertisement, no key is sent.
    let mut h2 = Harness::new("noidem");
    h2.register_one().await;
    h2.ship_many(0, 1, 20).await;
    let plain = FaultProxy::start(&h2.env.catalog_uri, "telemetry").await;
    let mut config = h2.config.clone();
    config.catalog_uri = plain.uri.parse().expect("url");
    Harness::finish(h2.start_with(config, one_per_commit()).await, 2).await;
    assert_eq!(plain.idempotency_keys(), vec![None]);
}
