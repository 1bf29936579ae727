//! What a node holds of the table between its loads (see `HeldTable::thin`): a node the fleet
//! carries keeps the current snapshot alone, and everything it decided from the others; a
//! commit is only ever built on the whole table.

use serde_json::json;

use super::super::Outcome;
use super::harness::{Harness, ids, ready};
use crate::table::committed::{Decision, encode_ids};
use crate::table::summary_keys::{CARRIED_INTENTS, CARRIED_LANES, LANE, SEGMENT_IDS, WRITER};

#[tokio::test]
async fn a_node_the_fleet_carries_holds_the_current_snapshot_alone_between_its_loads() {
    // Lane 0000, the lowest, carries a fleet of more nodes than take turns: any other node
    // is carried, and publishes.
    let now = chrono::Utc::now().timestamp_millis();
    let old = ready(100);
    let carried: Vec<String> = (1..=12).map(|lane| format!("{lane:04x}")).collect();
    let carrier = |ids: String| {
        json!({WRITER: "w", LANE: "0000", CARRIED_INTENTS: "12",
               CARRIED_LANES: carried.join(","), SEGMENT_IDS: ids})
    };
    let snapshots = [
        (
            carrier(encode_ids([old.segment.object_key.as_str()])),
            now - 3_000,
        ),
        (carrier(encode_ids(["seg/other.parquet"])), now - 2_000),
        (carrier(encode_ids(["seg/more.parquet"])), now - 1_000),
    ];
    let mut h = Harness::on_table(crate::testing::metadata_with(&snapshots)).await;
    let loads = h.catalog.loads();

    let deferred = h.attempt(&[ready(1)]).await.expect("an attempt");
    assert!(
        matches!(deferred.outcome, Outcome::Deferred),
        "{deferred:?}"
    );
    assert_eq!(h.intents_left().await.len(), 1, "the batch is published");
    assert_eq!(
        h.catalog.loads(),
        loads,
        "left to the committer without a load"
    );

    let held = h.held.table().expect("a table held").metadata();
    assert_eq!(
        held.snapshots()
            .map(|s| s.snapshot_id())
            .collect::<Vec<_>>(),
        [3],
        "only the current snapshot is held"
    );
    assert_eq!(held.current_snapshot_id(), Some(3));
    assert_eq!(held.current_schema().highest_field_id(), 1);
    assert!(h.held.is_thin());
    // What was decided from the snapshots dropped stays decided.
    assert_eq!(h.held.judge(&old.segment), Decision::Registered);
    assert_eq!(h.held.judge(&ready(1).segment), Decision::Missing);
}

#[tokio::test]
async fn a_commit_is_built_on_the_whole_table_loaded_again() {
    let mut h = Harness::new(false).await;
    let (one, two, three) = ([ready(1)], [ready(2)], [ready(3)]);
    for batch in [&one, &two] {
        let landed = h.attempt(batch).await.expect("an attempt");
        assert!(
            matches!(landed.outcome, Outcome::Landed { .. }),
            "{landed:?}"
        );
    }
    let version = h.held.version();
    let loads = h.catalog.loads();
    h.held.thin();
    assert!(h.held.is_thin());
    assert_eq!(h.held.version(), version, "the same version, thinner");
    let held = h.held.table().expect("a table held").metadata();
    assert_eq!(held.snapshots().count(), 1);

    // A lone registrar builds on its own last commit without a load; not on a thinned table.
    let landed = h.attempt(&three).await.expect("an attempt");
    assert!(
        matches!(landed.outcome, Outcome::Landed { .. }),
        "{landed:?}"
    );
    assert_eq!(h.catalog.loads(), loads + 1, "loaded before the build");
    assert_eq!(h.registered(), [ids(&one), ids(&two), ids(&three)]);
    assert!(!h.held.is_thin());
    let held = h.held.table().expect("a table held").metadata();
    assert_eq!(
        held.snapshots().count(),
        3,
        "the table after the commit, whole"
    );
}

#[tokio::test]
async fn a_carried_node_loads_the_recent_history_and_builds_only_on_the_whole_table() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};
    // A fleet's table with more carrying snapshots than a node's view reads
    // (`LANES_LOOKBACK`): the oldest registered `old`.
    let now = chrono::Utc::now().timestamp_millis();
    let clock = Arc::new(AtomicI64::new(now));
    let node_clock: crate::table::hooks::Clock = {
        let clock = Arc::clone(&clock);
        Arc::new(move || clock.load(Ordering::Relaxed))
    };
    let old = ready(100);
    let carried: Vec<String> = (1..=12).map(|lane| format!("{lane:04x}")).collect();
    let carrier = |key: &str| {
        json!({WRITER: "w", LANE: "0000", CARRIED_INTENTS: "12",
               CARRIED_LANES: carried.join(","), SEGMENT_IDS: encode_ids([key])})
    };
    let mut snapshots: Vec<_> = (0..300_i64)
        .map(|i| {
            let key = if i == 0 {
                old.segment.object_key.clone()
            } else {
                format!("seg/other-{i}.parquet")
            };
            (carrier(&key), now - 30_000 + i * 10)
        })
        .collect();
    let mut h = Harness::on_table_at(crate::testing::metadata_with(&snapshots), node_clock).await;

    // Published and left to the committer, which carries it.
    let deferred = h.attempt(&[ready(1)]).await.expect("an attempt");
    assert!(
        matches!(deferred.outcome, Outcome::Deferred),
        "{deferred:?}"
    );
    snapshots.push((carrier(&ready(1).segment.object_key), now - 20));
    h.catalog.replace(crate::testing::metadata_with(&snapshots));

    // Past its patience the node loads, with the history cut to its view's chain, and finds
    // its segment registered: nothing is built.
    clock.fetch_add(25_000, Ordering::Relaxed);
    let loads = h.catalog.loads();
    let found = h.attempt(&[ready(1)]).await.expect("an attempt");
    assert!(
        matches!(found.outcome, Outcome::AlreadyRegistered),
        "{found:?}"
    );
    assert_eq!(h.catalog.loads(), loads + 1, "one load");
    assert!(h.held.is_thin());
    let held = h.held.table().expect("a table held").metadata();
    assert_eq!(
        held.snapshots()
            .map(|s| s.snapshot_id())
            .collect::<Vec<_>>(),
        [301],
        "between its loads, the current snapshot alone"
    );
    // What the snapshots cut registered is known all the same.
    assert_eq!(h.held.judge(&old.segment), Decision::Registered);
    assert_eq!(h.held.judge(&ready(1).segment), Decision::Registered);

    // A segment the committers leave past the node's patience: the node commits it itself,
    // on the whole table, loaded again for the build.
    empty_manifest_list(&h, 301).await;
    let deferred = h.attempt(&[ready(2)]).await.expect("an attempt");
    assert!(
        matches!(deferred.outcome, Outcome::Deferred),
        "{deferred:?}"
    );
    clock.fetch_add(25_000, Ordering::Relaxed);
    let loads = h.catalog.loads();
    let landed = h.attempt(&[ready(2)]).await.expect("an attempt");
    assert!(
        matches!(landed.outcome, Outcome::Landed { .. }),
        "{landed:?}"
    );
    assert_eq!(
        h.catalog.loads(),
        loads + 2,
        "the recent history, then the whole"
    );
    assert_eq!(h.registered().last(), Some(&ids(&[ready(2)])));
}

/// An empty manifest list where `metadata_with`'s snapshot `id` names one, so that a commit can
/// be built on it.
async fn empty_manifest_list(h: &Harness, id: i64) {
    let memory = crate::table::append::manifest_list::MemoryFile::default();
    let mut list =
        iceberg::spec::ManifestListWriter::v2(Box::new(memory.clone()), id, Some(id - 1), id);
    list.add_manifests(std::iter::empty())
        .expect("no manifests");
    list.close().await.expect("written");
    let table = h.held.table().expect("a table held");
    table
        .file_io()
        .new_output(format!("s3://b/t/metadata/snap-{id}.avro"))
        .expect("an output")
        .write(memory.bytes().into())
        .await
        .expect("written to the store");
}
