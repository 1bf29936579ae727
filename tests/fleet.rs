//! Several registrars on one table, against the real REST fixture and S3 server: a fleet of edge
//! nodes (one segment log each) and an active-active pair tailing one log. Every segment lands
//! exactly once, every registrar finishes, and conflicts back off so that each makes progress.
//! Figures (commits, 409s, wall time) are printed for the record.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::demo;
use common::{Harness, assert_exactly_once, extended_batch};
use thadam_iceberg::Tuning;
use thadam_iceberg::config::RegistrarConfig;
use thadam_iceberg::protocol::segment_log::SegmentLogWriter;
use thadam_iceberg::{Registrar, RegistrarHandle};

/// The sum of `thadam_iceberg_commits_total{outcome=..}` for `table`.
fn commits(table: &str, outcome: &str) -> u64 {
    common::metrics::counter(
        "thadam_iceberg_commits_total",
        &[("table", table), ("outcome", outcome)],
    ) as u64
}

fn small_batches() -> Tuning {
    Tuning {
        max_batch: 20,
        ..Tuning::default()
    }
}

/// Waits until every registrar handled `each` segments, then stops it: per registrar, its
/// commits and the segments of its that other nodes carried (a fleet that carries intents has
/// one committer; the others' segments go in its commits).
async fn finish_all(handles: Vec<RegistrarHandle>, each: u64) -> Vec<(u64, u64)> {
    let mut commits = Vec::new();
    for handle in handles {
        let status = tokio::time::timeout(
            Duration::from_secs(240),
            handle.wait_until(|s| s.handled() >= each),
        )
        .await
        .expect("every registrar finishes (hang guard)")
        .expect("no fatal error");
        commits.push((
            status.tables.values().map(|t| t.commits).sum(),
            status.tables.values().map(|t| t.carried).sum(),
        ));
        handle.stop();
        handle.wait().await.expect("clean stop");
    }
    commits
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_edge_nodes_with_four_logs_register_into_one_table() {
    common::metrics::recorder();
    const NODES: usize = 4;
    const PER_NODE: u64 = 200;
    let h = Harness::new("fleet");
    let mut keys = Vec::new();
    let mut configs: Vec<RegistrarConfig> = Vec::new();
    let mut dirs = Vec::new();
    for node in 0..NODES {
        let dir = tempfile::tempdir().expect("tempdir");
        let path: PathBuf = dir.path().join("segment-catalog.log");
        let mut log = SegmentLogWriter::open(&path).expect("log");
        for j in 0..PER_NODE {
            let segment_id = format!("n{node}-{j:04}");
            let key = demo::object_key(&h.prefix, &h.pipeline, "telemetry", &segment_id);
            // Nodes 0 and 1 change the schema half-way (a new column).
            let batch = if node < 2 && j >= PER_NODE / 2 {
                extended_batch(j, 5)
            } else {
                demo::telemetry_batch(j, 5).expect("batch")
            };
            let parquet = demo::write_parquet(&[batch]).expect("parquet");
            demo::ship_segment(
                h.store.as_ref(),
                &mut log,
                "telemetry",
                &segment_id,
                &key,
                parquet,
                5,
            )
            .await
            .expect("ship");
            keys.push(key);
        }
        let mut config = h.config.clone();
        config.source.catalog = path;
        configs.push(config);
        dirs.push(dir);
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for config in &configs {
        let feed =
            thadam_iceberg::protocol::segment_log::SegmentLogTail::open(&config.source.catalog);
        handles.push(
            Registrar::builder(config.clone())
                .feed(feed)
                .tuning(small_batches())
                .start()
                .await
                .expect("start"),
        );
    }
    let per_node = finish_all(handles, PER_NODE).await;
    let wall = started.elapsed();
    let table_name = format!("{}.telemetry", h.namespace.join("."));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    assert!(
        table
            .metadata()
            .current_schema()
            .field_by_name("extra")
            .is_some()
    );
    let conflicts = commits(&table_name, "conflict");
    println!(
        "fleet of {NODES} logs x {PER_NODE} segments: wall {:.1}s, (commits, carried by others) \
         per registrar {per_node:?} (commits in all {}), 409s {conflicts}, snapshots {}",
        wall.as_secs_f64(),
        per_node.iter().map(|(c, _)| c).sum::<u64>(),
        table.metadata().snapshots().count()
    );
    // Progress: its own commits, or its segments carried by the fleet's committer (a node
    // whose every segment was carried commits nothing, and that is the design).
    assert!(
        per_node.iter().all(|(c, carried)| c + carried > 0),
        "each registrar made progress"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_active_active_pair_on_one_log_registers_every_segment_once() {
    common::metrics::recorder();
    let mut h = Harness::new("pair");
    let mut keys = Vec::new();
    for n in 0..100 {
        let batch = if n < 60 {
            demo::telemetry_batch(n, 5).expect("batch")
        } else {
            extended_batch(n, 5)
        };
        keys.push(h.ship("telemetry", &batch).await);
    }
    let started = Instant::now();
    // Both start on an absent table (create_table: true): they race to create it, then to
    // append, and both evolve the schema at segment 60.
    let a = h.start_with(h.config.clone(), small_batches()).await;
    let b = h.start_with(h.config.clone(), small_batches()).await;
    let per_registrar = finish_all(vec![a, b], 100).await;
    let wall = started.elapsed();
    let table_name = format!("{}.telemetry", h.namespace.join("."));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    let conflicts = commits(&table_name, "conflict");
    println!(
        "active-active pair on one log, 100 segments: wall {:.1}s, (commits, carried by others) per registrar \
         {per_registrar:?}, 409s {conflicts}, snapshots {}",
        wall.as_secs_f64(),
        table.metadata().snapshots().count()
    );
}
