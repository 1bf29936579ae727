//! A fleet that loses its committer, against the real REST fixture and S3 server: the fleet's sole
//! committer, a standalone runner, is killed with SIGKILL while the others publish; they carry
//! on (committing what they published after their fallback, carrying everyone's, the dead
//! committer's published segments included), and when it comes back it registers what it had
//! not published, nothing twice. Every segment lands exactly once (read back by pyiceberg too),
//! and nothing of the fleet is left behind.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::fleet::*;
use common::{Harness, stop, wait_handled};
use thadam_iceberg::Tuning;
use thadam_iceberg::testing::Hooks;

/// The lane of the table's newest snapshot.
async fn newest_lane(h: &Harness) -> Option<String> {
    let table = h.table(DATASET).await?;
    let snapshot = table.metadata().current_snapshot()?;
    snapshot
        .summary()
        .additional_properties
        .get("thadam.lane")
        .cloned()
}

/// Waits (up to `cap`) until the table holds every key of `node`.
async fn holds_all(h: &Harness, node: &Node, cap: Duration) -> bool {
    let keys: BTreeSet<String> = node
        .keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    tokio::time::timeout(cap, async {
        loop {
            if let Some(t) = h.table(DATASET).await
                && keys.is_subset(&common::data_files(&t).await)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sole_committer_killed_the_others_carry_on_and_nothing_is_stranded() {
    let (h, _, mut nodes) = fleet(Harness::new("failover"), "f", 10);
    for node in nodes.iter_mut() {
        node.ship(&h).await;
    }
    // f0, a process, makes the table; the nine others, in-process, take the highest lanes, so
    // that f0's (random) lane is the lowest: the fleet's sole committer.
    let mut f0 = runner(&h, &nodes[0], "");
    assert!(
        holds_all(&h, &nodes[0], Duration::from_secs(60)).await,
        "f0 registered its first segment (hang guard: 60 s)"
    );
    let f0_lane = newest_lane(&h).await.expect("f0's lane");
    let mut handles = Vec::new();
    for (i, node) in nodes.iter().enumerate().skip(1) {
        let tuning = Tuning {
            hooks: Hooks {
                lane: Some(format!("ffffffff{i:04x}")),
                ..Hooks::default()
            },
            ..Tuning::default()
        };
        let handle = node.start(tuning).await;
        wait_handled(&handle, 1).await;
        handles.push(handle);
    }
    assert!(f0_lane.as_str() < "ffffffff", "f0 ranks lowest: {f0_lane}");

    // A live flow: f0 commits, carrying the others'.
    flow(&h, &mut nodes, 4, Duration::from_millis(300)).await;
    let uuid = table_uuid(&h).await;
    let carrying = tokio::time::timeout(Duration::from_secs(60), async {
        while newest_lane(&h).await.as_deref() != Some(f0_lane.as_str()) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(carrying.is_ok(), "f0 commits for the fleet (hang guard)");

    // f0 dies in the middle of the flow; the others' segments keep coming.
    f0.kill().expect("SIGKILL");
    f0.wait().expect("reaped");
    let killed = Instant::now();
    flow(&h, &mut nodes[1..], 6, Duration::from_millis(300)).await;
    let each = nodes[1].keys.len() as u64;
    for handle in &handles {
        wait_handled(handle, each).await;
    }
    let carried_on = killed.elapsed();
    let after_kill = newest_lane(&h).await.expect("a lane");
    assert_ne!(after_kill, f0_lane, "the others committed after f0 died");

    // f0 comes back (a new lane) and registers what it had not published: nothing twice.
    let mut f0 = runner(&h, &nodes[0], "");
    let back = holds_all(&h, &nodes[0], Duration::from_secs(120)).await;
    let _ = f0.kill();
    let _ = f0.wait();
    for handle in handles {
        stop(handle).await;
    }
    assert!(
        back,
        "f0's segments all landed once it was back (hang guard: 120 s)"
    );
    println!(
        "the committer killed: the nine others had registered all they were shipped {:.1} s later",
        carried_on.as_secs_f64()
    );
    assert_table_holds(&h, &nodes).await;
    assert_nothing_left(&h, &uuid).await;
}
