//! Batched commits against the real servers: a backlog becomes few snapshots within
//! `commit.max_segments` and `commit.max_bytes`; `commit.linger` gathers a trickle.

mod common;

use common::{Harness, Options, assert_exactly_once};
use iceberg::table::Table;
use thadam_iceberg::testing::{SEGMENT_IDS, decode_ids};

fn harness(test: &str, commit: &str) -> Harness {
    Harness::with(
        test,
        Options {
            extra_iceberg_yaml: format!("      commit: {commit}"),
            ..Options::default()
        },
    )
}

/// Segments per snapshot, oldest first.
fn batch_sizes(table: &Table) -> Vec<usize> {
    let mut snaps: Vec<_> = table.metadata().snapshots().collect();
    snaps.sort_by_key(|s| s.sequence_number());
    snaps
        .iter()
        .filter_map(|s| s.summary().additional_properties.get(SEGMENT_IDS))
        .map(|v| decode_ids(v).len())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_is_committed_in_batches_of_max_segments() {
    let mut h = harness("batch", "{ max_segments: 10 }");
    let mut keys = Vec::new();
    for n in 0..25 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    h.run_until_handled(25).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(batch_sizes(&table), vec![10, 10, 5]);
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_bounds_a_snapshot() {
    let mut h = harness("bytes", "{ max_segments: 100, max_bytes: 1 }");
    // Every segment is larger than max_bytes: each goes alone.
    let mut keys = Vec::new();
    for n in 0..4 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    h.run_until_handled(4).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(batch_sizes(&table), vec![1, 1, 1, 1]);
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linger_gathers_a_trickle_into_one_snapshot() {
    let mut h = harness("linger", "{ linger: 5s }");
    h.ship_telemetry(0, 10).await;
    let handle = h.start().await;
    // Two more arrive well within the linger of the first.
    for n in 1..3 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        h.ship_telemetry(n, 10).await;
    }
    Harness::finish(handle, 3).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(batch_sizes(&table), vec![3]);
}
