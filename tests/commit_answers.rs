//! Commit answers against the real REST fixture: after an append the registrar takes the table it
//! built (its own updates applied) once the catalog's answer confirms it, instead of parsing the
//! table's whole history from the answer again (`catalog::rest::answer`); whatever another
//! writer changed meanwhile makes the answer differ, and then the answer is what the registrar
//! holds.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use common::{Harness, Options, assert_exactly_once, current_manifest_list, one_per_commit, py};
use iceberg::table::Table;
use thadam_iceberg::Tuning;
use thadam_iceberg::testing::ReadySegment;
use thadam_iceberg::testing::TableName;
use thadam_iceberg::testing::{BeforeAppend, Hooks};

fn answers(table: &str, how: &str) -> f64 {
    common::metrics::counter(
        "thadam_iceberg_commit_answers_total",
        &[("table", table), ("how", how)],
    )
}

/// Runs `script` (pyiceberg: blocking) once, before the `at`-th append of the run.
struct OtherWriter {
    at: usize,
    calls: AtomicUsize,
    ident: String,
    script: &'static str,
}

#[async_trait]
impl BeforeAppend for OtherWriter {
    async fn before_append(&self, _: &TableName, _: &Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 != self.at {
            return;
        }
        let (ident, script) = (self.ident.clone(), self.script);
        tokio::task::spawn_blocking(move || py::run(script, &[&ident]))
            .await
            .expect("pyiceberg ran");
    }
}

/// One segment per commit, pyiceberg running `script` on `ident` before the `at`-th append, on
/// a clock `clock_ahead` of the real one (for snapshot retention).
fn with_other_writer(
    at: usize,
    ident: &str,
    script: &'static str,
    clock_ahead: Duration,
) -> Tuning {
    let writer = OtherWriter {
        at,
        calls: AtomicUsize::new(0),
        ident: ident.to_string(),
        script,
    };
    let ahead = i64::try_from(clock_ahead.as_millis()).expect("ms");
    Tuning {
        max_batch: 1,
        hooks: Hooks {
            before_append: Some(Arc::new(writer)),
            clock: Some(Arc::new(move || {
                chrono::Utc::now().timestamp_millis() + ahead
            })),
            ..Hooks::default()
        },
        ..Default::default()
    }
}

/// A harness whose iceberg sink config has `extra` (YAML lines) and whose table exists (one
/// segment registered); returns it with that segment's key.
async fn harness(test: &str, extra: &str) -> (Harness, String) {
    common::metrics::recorder();
    let mut h = Harness::with(
        test,
        Options {
            extra_iceberg_yaml: extra.to_string(),
            ..Default::default()
        },
    );
    let key = h.register_one().await;
    (h, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_take_the_table_they_built_once_the_answer_confirms_it() {
    let (mut h, first) = harness("answers", "").await;
    let mut keys = vec![first];
    keys.extend(h.ship_many(0, 6, 10).await);
    let table = h.table_name("telemetry").to_string();
    let (confirmed, parsed) = (answers(&table, "confirmed"), answers(&table, "parsed"));

    Harness::finish(h.start_with(h.config.clone(), one_per_commit()).await, 7).await;

    // The restart loaded the table (refs known), then six appends, one per snapshot: each answer
    // was the table as built, in everything the registrar reads.
    assert_eq!(answers(&table, "confirmed") - confirmed, 6.0);
    assert_eq!(answers(&table, "parsed") - parsed, 0.0);
    let iceberg = h.table("telemetry").await.expect("table");
    assert_exactly_once(&iceberg, &h.env.bucket, &keys).await;
    assert_eq!(iceberg.metadata().snapshots().count(), 7);
    let rows = py::run(
        "print(len(catalog.load_table(sys.argv[1]).scan().to_arrow()))",
        &[&table],
    );
    assert_eq!(rows.trim(), "65", "pyiceberg reads every row");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_another_writer_adds_between_two_commits_keeps_its_snapshot_from_expiry() {
    let (mut h, first) = harness(
        "answertag",
        "      snapshot_retention: { max_age: 1m, min_snapshots: 2 }",
    )
    .await;
    let mut keys = vec![first];
    keys.extend(h.ship_many(0, 12, 10).await);
    let table = h.table_name("telemetry").to_string();
    let parsed = answers(&table, "parsed");
    // Before the 3rd append, pyiceberg tags the current snapshot (main does not move, so the
    // registrar's append goes through and its answer carries the tag).
    let tag = r#"
t = catalog.load_table(sys.argv[1])
t.manage_snapshots().create_tag(t.current_snapshot().snapshot_id, "audit").commit()
"#;
    let tuning = with_other_writer(3, &table, tag, Duration::from_secs(3600));
    Harness::finish(h.start_with(h.config.clone(), tuning).await, 13).await;

    assert!(
        answers(&table, "parsed") > parsed,
        "the answer with the tag was parsed in full"
    );
    let iceberg = h.table("telemetry").await.expect("table");
    let metadata = iceberg.metadata();
    let tagged = metadata
        .snapshot_for_ref("audit")
        .expect("the tag survived the registrar's expiry");
    // Snapshots older than the tag went, the tagged one stayed (retention never expires a ref).
    assert!(metadata.snapshot_by_id(tagged.snapshot_id()).is_some());
    assert!(
        metadata.snapshots().count() < 8,
        "retention ran: {} snapshots",
        metadata.snapshots().count()
    );
    assert_exactly_once(&iceberg, &h.env.bucket, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_property_another_writer_sets_between_two_commits_takes_effect_at_once() {
    let (mut h, first) = harness(
        "answerprop",
        "      table_properties: { commit.manifest.min-count-to-merge: \"3\" }",
    )
    .await;
    let mut keys = vec![first];
    keys.extend(h.ship_many(0, 8, 10).await);
    let table = h.table_name("telemetry").to_string();
    // Before the 3rd append, pyiceberg turns merging off (a property only: main does not move).
    let merge_off = r#"
t = catalog.load_table(sys.argv[1])
with t.transaction() as tx:
    tx.set_properties({"commit.manifest-merge.enabled": "false"})
"#;
    let tuning = with_other_writer(3, &table, merge_off, Duration::ZERO);
    Harness::finish(h.start_with(h.config.clone(), tuning).await, 9).await;

    let iceberg = h.table("telemetry").await.expect("table");
    assert_exactly_once(&iceberg, &h.env.bucket, &keys).await;
    // Merging every 3 manifests would keep the list at 1-3; from the 3rd append on it grows by
    // one per commit, because the registrar read the property from that append's answer.
    let manifests = current_manifest_list(&iceberg).await.entries().len();
    assert!(
        manifests >= 7,
        "merging stopped once another writer turned it off: {manifests} manifests"
    );
}
