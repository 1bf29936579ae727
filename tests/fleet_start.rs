//! A fleet that starts together, against the real REST fixture and S3 server: nodes that find
//! no committer at work in the table at their start call the roll (`table::fleet::roll_call`)
//! and pick one committer before anyone commits, instead of committing their first segments at
//! once into each other's commits. Every segment lands exactly once (read back by pyiceberg
//! too), and nothing of the fleet is left behind.

mod common;

use std::time::Duration;

use common::fleet::*;
use common::{Harness, stop, wait_handled};
use thadam_iceberg::Tuning;

/// Nodes in the fleet: more than the eight that all take turns, so that one committer carries
/// the others (the mode a fleet of hundreds runs in).
const NODES: usize = 10;

fn conflicts(table: &str) -> u64 {
    counter(
        "thadam_iceberg_commits_total",
        &[("table", table), ("outcome", "conflict")],
    )
}

fn landed(table: &str) -> u64 {
    counter(
        "thadam_iceberg_commits_total",
        &[("table", table), ("outcome", "ok")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_started_together_picks_its_committer_before_anyone_commits() {
    let (h, table, mut nodes) = fleet(Harness::new("fleet-start"), "s", NODES);
    // The table was made by a registrar of another log that has stopped (as a fleet's table
    // looks after an outage longer than the lane memory, or before a fleet's first start): no
    // committer at work in it. This one does not carry intents, so it never ranks as one.
    let mut maker = Node::new(&h, "maker");
    maker.config.commit.intents = false;
    maker.ship(&h).await;
    let handle = maker.start(Tuning::default()).await;
    wait_handled(&handle, 1).await;
    stop(handle).await;
    let before = (conflicts(&table), landed(&table));

    // Every node has segments waiting when the fleet starts, all at once.
    for node in nodes.iter_mut() {
        node.ship(&h).await;
        node.ship(&h).await;
    }
    let handles = futures::future::join_all(nodes.iter().map(|n| n.start(Tuning::default()))).await;
    flow(&h, &mut nodes, 4, Duration::from_millis(300)).await;
    let uuid = table_uuid(&h).await;
    let (statuses, left) = settle_leaving(&h, &nodes, handles, &uuid, &[]).await;

    let mut all = nodes;
    all.push(maker);
    assert_table_holds(&h, &all).await;
    assert_eq!(left, Vec::<String>::new(), "every intent is deleted");
    let conflicted = conflicts(&table) - before.0;
    let commits = landed(&table) - before.1;
    let carried: u64 = statuses
        .iter()
        .flat_map(|s| s.tables.values())
        .map(|t| t.carried)
        .sum();
    eprintln!(
        "{NODES} nodes started together: {commits} commits landed, {conflicted} 409s, \
         {carried} segments carried"
    );
    // Without the roll call, each node took itself for alone and committed at once: one commit
    // landed per round of 409s, 10 nodes made 9 of them in the first round alone.
    assert!(
        conflicted <= 1,
        "the nodes picked one committer before committing: {conflicted} 409s"
    );
    assert!(
        carried >= (NODES as u64 - 1) * 2,
        "the committer carried the others' first segments: {carried} carried"
    );
}
