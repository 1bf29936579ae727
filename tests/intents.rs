//! Fleet intents against the real REST fixture and S3 server: nodes of a fleet that take turns on
//! one table publish what waits for their turn, and whoever commits next carries it
//! (`table::append::intents`). Every segment lands exactly once (read back by pyiceberg too),
//! intents are consumed, a node that cannot commit has its segments carried by the others and
//! registers nothing twice when it comes back, intents that must not be committed (corrupt,
//! foreign) are skipped, a node with `commit.intents: false` still lands everything beside nodes
//! that publish, and a lone registrar writes no intent at all.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use object_store::ObjectStore;

use common::fault_proxy::{FaultProxy, Kind};
use common::fleet::*;
use common::{Harness, stop, wait_handled};
use thadam_iceberg::testing::{BeforeAppend, Hooks, ReadySegment, TableName};
use thadam_iceberg::{RegistrarHandle, Tuning};

/// `commit.manifest.min-count-to-merge` of the first test's table.
const MIN_COUNT: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_carries_each_others_intents_and_skips_what_it_must_not_commit() {
    let (h, table, mut nodes) = fleet(Harness::new("intents"), "n", 4);
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 4]).await;
    let uuid = table_uuid(&h).await;
    // Each intent is a manifest of its own: the table's merge policy must still hold, or the
    // manifest list grows by one per intent (a reader then opens thousands of manifests).
    common::py::set_properties(
        &table,
        &[("commit.manifest.min-count-to-merge", &MIN_COUNT.to_string())],
    );

    // What no node may commit: a corrupt intent, one for another fleet's url, one naming a
    // manifest outside the table's metadata.
    let dir = intent_dir(&h, &uuid);
    let junk = [
        (dir.child("zz-corrupt.json"), b"{not an intent".to_vec()),
        (
            dir.child("zz-foreign-url.json"),
            foreign_intent(&uuid, "s3://elsewhere/x", "metadata/x-m0.avro"),
        ),
        (
            dir.child("zz-foreign-manifest.json"),
            foreign_intent(&uuid, &h.config.url.uri(), "../other/metadata/x-m0.avro"),
        ),
        // Intents that hold their data files: one outside the fleet's url, one whose file is
        // not a data file of the table.
        (
            dir.child("zz-foreign-file.json"),
            inline_intent(&uuid, &h.config.url.uri(), "s3://elsewhere/x/1.parquet"),
        ),
        (
            dir.child("zz-broken-file.json"),
            inline_intent(
                &uuid,
                &h.config.url.uri(),
                &format!("{}/x/1.parquet", h.config.url.uri()),
            ),
        ),
    ];
    for (key, body) in &junk {
        h.store
            .put(key, body.clone().into())
            .await
            .expect("put junk");
    }

    // 4 nodes × 2.5 segments/s for 12 s.
    flow(&h, &mut nodes, 30, Duration::from_millis(400)).await;
    let each = nodes[0].keys.len() as u64;
    let junk_keys: Vec<String> = junk.iter().map(|(k, _)| k.to_string()).collect();
    let (statuses, left) = settle_leaving(&h, &nodes, handles, &uuid, &junk_keys).await;
    let carried: u64 = statuses
        .iter()
        .flat_map(|s| s.tables.values().map(|t| t.carried))
        .sum();
    assert_table_holds(&h, &nodes).await;

    let published = counter(
        "thadam_iceberg_intents_published_total",
        &[("table", &table)],
    );
    let by_others = counter(
        "thadam_iceberg_intents_carried_total",
        &[("table", &table), ("whose", "other")],
    );
    println!(
        "fleet of 4 × {each} segments: intents published {published}, carried by another node \
         {by_others}, segments carried by others (status) {carried}"
    );
    assert!(published > 0, "nodes waiting for their turn publish");
    assert!(by_others > 0, "nodes carry each other's intents");
    assert!(
        carried > 0,
        "a node's status says its segments were carried"
    );
    assert_eq!(
        counter(
            "thadam_iceberg_segments_carried_by_others_total",
            &[("table", &table)]
        ),
        carried
    );
    for reason in ["malformed", "foreign"] {
        assert!(
            counter(
                "thadam_iceberg_intents_skipped_total",
                &[("table", &table), ("reason", reason)]
            ) >= 1,
            "a {reason} intent is skipped"
        );
    }
    // Intents are consumed by the commit that carries them; the junk is never touched.
    let mut junk_keys = junk_keys;
    junk_keys.sort();
    assert_eq!(left, junk_keys, "only the skipped intents are left");

    // The snapshots that carried name their publishers' lanes, each a lane some snapshot of
    // the table committed under (the foreign intent's lane never appears).
    let t = h.table(DATASET).await.expect("table");
    let summaries: Vec<_> = t
        .metadata()
        .snapshots()
        .map(|s| s.summary().additional_properties.clone())
        .collect();
    let lanes: std::collections::BTreeSet<&str> = summaries
        .iter()
        .filter_map(|p| p.get("thadam.lane").map(String::as_str))
        .collect();
    let carried_lanes: Vec<&str> = summaries
        .iter()
        .filter_map(|p| p.get("thadam.carried-lanes"))
        .flat_map(|l| l.split(','))
        .collect();
    assert!(!carried_lanes.is_empty(), "carrying snapshots name lanes");
    for lane in carried_lanes {
        assert!(lanes.contains(lane), "{lane} is a lane of the fleet");
    }

    // Carrying commits merge like any append: below the minimum count, or the last commit's
    // new manifests and one merge of the rest.
    let list = common::current_manifest_list(&t).await;
    let current = t.metadata().current_snapshot_id().expect("a snapshot");
    let new = list
        .entries()
        .iter()
        .filter(|m| m.added_snapshot_id == current && m.added_files_count.unwrap_or(0) > 0)
        .count();
    println!(
        "manifests in the current snapshot: {} ({new} of them new), min count {MIN_COUNT}",
        list.entries().len()
    );
    assert!(
        list.entries().len() <= MIN_COUNT.max(new + 1),
        "the manifest list stays short: {} manifests",
        list.entries().len()
    );
    // Carriers rewrite what they carry into their own manifest and delete the publishers':
    // every manifest left in the table's metadata is one some snapshot names, and the commits
    // that carried others' intents added fewer manifests than they carried intents.
    assert_eq!(orphan_manifests(&h, &t).await, Vec::<String>::new());
    let (commits, intents, manifests) = carrying_commits(&t).await;
    println!("{commits} commits carried {intents} intents of others in {manifests} new manifests");
    assert!(commits > 0 && manifests < intents);
}

/// Over the snapshots that carried other nodes' intents: how many, the intents they carried,
/// and the manifests with new files they added.
async fn carrying_commits(table: &iceberg::table::Table) -> (usize, u64, u64) {
    let (mut commits, mut intents, mut manifests) = (0, 0u64, 0u64);
    for snapshot in table.metadata().snapshots() {
        let Some(carried) = snapshot
            .summary()
            .additional_properties
            .get("thadam.carried-intents")
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .expect("manifest list");
        commits += 1;
        intents += carried;
        manifests += list
            .entries()
            .iter()
            .filter(|m| {
                m.added_snapshot_id == snapshot.snapshot_id()
                    && m.added_files_count.unwrap_or(0) > 0
            })
            .count() as u64;
    }
    (commits, intents, manifests)
}

/// An intent of one segment as a node of another fleet (or a broken one) could leave, for this
/// table and `url`: `format`, with `manifest` and `files` as given.
fn junk_intent(
    uuid: &str,
    url: &str,
    format: &str,
    manifest: serde_json::Value,
    files: serde_json::Value,
) -> Vec<u8> {
    serde_json::json!({
        "format": format,
        "table_uuid": uuid,
        "url": url,
        "lane": "0123456789ab",
        "writer": "thadam-iceberg/x/y",
        "created_ms": 0,
        "manifest": manifest,
        "files": files,
        "segment_ids": "AAAAAAAAAAAAAAAA",
        "max_seq": 1
    })
    .to_string()
    .into_bytes()
}

/// A well-formed intent naming a manifest (`thadam-intent/1`) at `manifest` (relative to the
/// table's location).
fn foreign_intent(uuid: &str, url: &str, manifest: &str) -> Vec<u8> {
    let manifest = serde_json::json!({
        "path": format!("s3://bucket/somewhere/{manifest}"),
        "length": 100, "spec_id": 0, "schema_id": 0, "files": 1, "rows": 5, "bytes": 100
    });
    junk_intent(
        uuid,
        url,
        "thadam-intent/1",
        manifest,
        serde_json::json!([]),
    )
}

/// An intent that holds its data file (`thadam-intent/2`), whose one file lies at `path` and
/// is no data file (it has no size, no rows, no format).
fn inline_intent(uuid: &str, url: &str, path: &str) -> Vec<u8> {
    let manifest = serde_json::json!({
        "path": "", "length": 0, "spec_id": 0, "schema_id": 0, "files": 1, "rows": 5, "bytes": 100
    });
    let files = serde_json::json!([{ "file_path": path, "content": 0 }]);
    junk_intent(uuid, url, "thadam-intent/2", manifest, files)
}

/// Holds every append of its node after the first until released: a node whose catalog link
/// is down while S3 still works.
struct Cutoff {
    calls: AtomicUsize,
    released: tokio::sync::watch::Receiver<bool>,
}

#[async_trait]
impl BeforeAppend for Cutoff {
    async fn before_append(&self, _: &TableName, _: &iceberg::table::Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return;
        }
        let mut released = self.released.clone();
        let _ = released.wait_for(|r| *r).await;
    }
}

/// How long a cut node's batches wait after its warm-up (`commit.min_interval`): longer than
/// the flow, so that everything it is fed is published before its first attempt hangs.
const HOLD_BACK: Duration = Duration::from_secs(15);

/// A tuning whose appends pass `hook` first.
fn hooked(hook: impl BeforeAppend + 'static) -> Tuning {
    Tuning {
        hooks: Hooks {
            before_append: Some(Arc::new(hook)),
            ..Hooks::default()
        },
        ..Tuning::default()
    }
}

/// A node whose catalog link goes down after its warm-up: the sender that brings it back, and
/// the node's tuning.
fn cut_off() -> (tokio::sync::watch::Sender<bool>, Tuning) {
    let (release, released) = tokio::sync::watch::channel(false);
    let tuning = hooked(Cutoff {
        calls: AtomicUsize::new(0),
        released,
    });
    (release, tuning)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_cannot_commit_is_carried_and_registers_nothing_twice_when_back() {
    let (h, table, mut nodes) = fleet(Harness::new("intents-cut"), "c", 3);
    let (release, cutoff) = cut_off();
    // The cut node warms up last, so that its warm-up commit shows it the others' lanes: it
    // takes turns (and so publishes) from its first batch on. Its batches wait 15 s after its
    // warm-up (`commit.min_interval`), so that it publishes the flow before its first attempt
    // hangs: its slot could otherwise come before its first batch had waited at all.
    nodes[2].config.commit.min_interval = HOLD_BACK;
    let handles = warm_up(
        &h,
        &mut nodes,
        vec![Tuning::default(), Tuning::default(), cutoff],
    )
    .await;
    let cut_uuid = table_uuid(&h).await;
    flow(&h, &mut nodes, 12, Duration::from_millis(300)).await;
    let each = nodes[0].keys.len() as u64;
    wait_handled(&handles[0], each).await;
    wait_handled(&handles[1], each).await;

    // Node c2 has not committed since its warm-up, yet its published segments are in the table.
    let c2: Vec<String> = nodes[2].keys[1..]
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    let in_table = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let table = h.table(DATASET).await.expect("table");
            let files = common::data_files(&table).await;
            let n = c2.iter().filter(|k| files.contains(*k)).count();
            if n > 0 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the fleet carries the intents of a node that cannot commit");
    println!(
        "{in_table} of c2's {} segments carried while it could not commit",
        c2.len()
    );
    assert!(
        counter(
            "thadam_iceberg_intents_carried_total",
            &[("table", &table), ("whose", "other")]
        ) >= 1
    );

    // The link comes back; c2 finishes (what was carried counts as handled), then restarts as
    // a new process and finds everything registered.
    release.send(true).expect("release");
    let status = wait_handled(&handles[2], each).await;
    let carried: u64 = status.tables.values().map(|t| t.carried).sum();
    assert!(
        carried as usize >= in_table,
        "c2's status counts what others carried"
    );
    for handle in handles {
        stop(handle).await;
    }
    let again = nodes[2].start(Tuning::default()).await;
    let status = wait_handled(&again, each).await;
    let registered: u64 = status.tables.values().map(|t| t.registered).sum();
    assert_eq!(registered, 0, "the restarted node registers nothing twice");
    stop(again).await;
    assert_done(&h, &nodes, &cut_uuid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mixed_fleet_lands_everything_and_a_lone_registrar_writes_no_intent() {
    let (h, table, mut nodes) = fleet(Harness::new("intents-mixed"), "m", 3);
    // m2 runs with the feature off (as an older version would): it neither publishes nor carries.
    nodes[2].config.commit.intents = false;
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 3]).await;
    let uuid = table_uuid(&h).await;
    flow(&h, &mut nodes, 20, Duration::from_millis(300)).await;
    let (statuses, left) = settle_leaving(&h, &nodes, handles, &uuid, &[]).await;
    assert_table_holds(&h, &nodes).await;
    assert_eq!(left, Vec::<String>::new(), "every intent is deleted");
    let off: u64 = statuses[2].tables.values().map(|t| t.carried).sum();
    assert_eq!(off, 0, "nobody carries for a node that publishes nothing");
    assert!(
        counter(
            "thadam_iceberg_intents_carried_total",
            &[("table", &table), ("whose", "other")]
        ) > 0,
        "the nodes that publish carry each other"
    );

    // A lone registrar on its own table: no intent, ever.
    let lone = Harness::new("intents-lone");
    let lone_table = format!("{}.{DATASET}", lone.namespace.join("."));
    let mut node = Node::new(&lone, "l0");
    node.ship(&lone).await;
    let handle = node.start(Tuning::default()).await;
    for _ in 0..15 {
        node.ship(&lone).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_handled(&handle, node.keys.len() as u64).await;
    stop(handle).await;
    let lone_uuid = table_uuid(&lone).await;
    assert_eq!(
        counter(
            "thadam_iceberg_intents_published_total",
            &[("table", &lone_table)]
        ),
        0
    );
    assert!(intents_left(&lone, &lone_uuid).await.is_empty());
    assert_table_holds(&lone, std::slice::from_ref(&node)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_upgraded_node_by_node_carries_intents_of_both_forms() {
    let (h, table, mut nodes) = fleet(Harness::new("intents-forms"), "f", 4);
    // f0 and f1 publish as the releases before did: a manifest in the table's metadata and an
    // intent naming it. f2 and f3 put the data files in the intent.
    let older = || Tuning {
        hooks: Hooks {
            intents_name_manifests: true,
            ..Hooks::default()
        },
        ..Tuning::default()
    };
    let tunings = vec![older(), older(), Tuning::default(), Tuning::default()];
    let handles = warm_up(&h, &mut nodes, tunings).await;
    let uuid = table_uuid(&h).await;
    flow(&h, &mut nodes, 20, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
    let published = |form: &str| {
        counter(
            "thadam_iceberg_intents_published_total",
            &[("table", &table), ("form", form)],
        )
    };
    let (files, manifests) = (published("files"), published("manifest"));
    println!("intents published holding their files {files}, naming a manifest {manifests}");
    assert!(files > 0 && manifests > 0, "both forms are published");
    assert!(
        counter(
            "thadam_iceberg_intents_carried_total",
            &[("table", &table), ("whose", "other")]
        ) > 0,
        "the nodes carry each other"
    );
    // The older nodes' manifests are rewritten into the carriers' own and deleted, or named by
    // a snapshot: none is left behind.
    let t = h.table(DATASET).await.expect("table");
    assert_eq!(orphan_manifests(&h, &t).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_nessie_which_keeps_one_snapshot_a_fleet_lands_everything_once() {
    if common::Catalog::Nessie.skipped() {
        return;
    }
    let (h, table, mut nodes) = fleet(
        Harness::with(
            "intents-nessie",
            common::Options {
                catalog: common::Catalog::Nessie,
                ..common::Options::default()
            },
        ),
        "s",
        3,
    );
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 3]).await;
    let uuid = table_uuid(&h).await;
    flow(&h, &mut nodes, 10, Duration::from_millis(300)).await;
    let (_, left) = settle_leaving(&h, &nodes, handles, &uuid, &[]).await;
    assert_table_holds(&h, &nodes).await;
    // Nessie shows only the current snapshot, so a node sees the others' lanes one load at a
    // time (and may take turns, and publish, or pace itself adaptively): either way every
    // segment lands once and no intent is left.
    println!(
        "on Nessie: intents published {}, carried by another node {}",
        counter(
            "thadam_iceberg_intents_published_total",
            &[("table", &table)]
        ),
        counter(
            "thadam_iceberg_intents_carried_total",
            &[("table", &table), ("whose", "other")]
        )
    );
    assert_eq!(left, Vec::<String>::new(), "every intent is deleted");
}

/// Holds the first append of its node at a barrier the other carrier also reaches, so that both
/// commits are built on one table version and sent together (hang guard: a minute).
struct Together {
    calls: AtomicUsize,
    barrier: Arc<tokio::sync::Barrier>,
    met: Arc<AtomicUsize>,
}

#[async_trait]
impl BeforeAppend for Together {
    async fn before_append(&self, _: &TableName, _: &iceberg::table::Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) != 0 {
            return;
        }
        if tokio::time::timeout(Duration::from_secs(60), self.barrier.wait())
            .await
            .is_ok()
        {
            self.met.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn conflicts(table: &str) -> u64 {
    counter(
        "thadam_iceberg_commits_total",
        &[("table", table), ("outcome", "conflict")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_that_commit_the_same_intent_at_once_register_it_once() {
    let (h, table, mut nodes) = fleet(Harness::new("intents-race"), "r", 3);
    let (release, cutoff) = cut_off();
    // r0 and r1 warm up and stop; r2 (the publisher) warms up last, so it sees their lanes and
    // takes turns: its next batch is published while it waits (held back, see HOLD_BACK), and
    // then it cannot commit (its catalog link is down).
    nodes[2].config.commit.min_interval = HOLD_BACK;
    let mut handles = warm_up(
        &h,
        &mut nodes,
        vec![Tuning::default(), Tuning::default(), cutoff],
    )
    .await;
    let publisher = handles.pop().expect("r2");
    for handle in handles {
        stop(handle).await;
    }
    let uuid = table_uuid(&h).await;
    nodes[2].ship(&h).await;
    nodes[2].ship(&h).await;
    let published = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let left = intents_left(&h, &uuid).await;
            if !left.is_empty() {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the publisher publishes its waiting batch");
    println!("published: {published:?}");

    // r0 and r1 come back after the intent was published, so both list it at their first
    // commit; both commits wait for each other right before they are sent: one version, two
    // carriers of one intent.
    let before = conflicts(&table);
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let met = Arc::new(AtomicUsize::new(0));
    let mut carriers = Vec::new();
    for node in nodes.iter_mut().take(2) {
        node.ship(&h).await;
        let together = hooked(Together {
            calls: AtomicUsize::new(0),
            barrier: Arc::clone(&barrier),
            met: Arc::clone(&met),
        });
        carriers.push(node.start(together).await);
    }
    for (handle, node) in carriers.iter().zip(&nodes) {
        wait_handled(handle, node.keys.len() as u64).await;
    }
    assert_eq!(
        met.load(Ordering::SeqCst),
        2,
        "both carriers' commits were sent on one table version"
    );
    assert!(
        conflicts(&table) > before,
        "one of the two commits is refused (409)"
    );
    assert!(
        counter(
            "thadam_iceberg_intents_carried_total",
            &[("table", &table), ("whose", "other")]
        ) >= 1,
        "the intent was carried"
    );
    // The publisher's segments are in the table while it still cannot commit, once.
    let r2: Vec<String> = nodes[2].keys[1..]
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    let table_now = h.table(DATASET).await.expect("table");
    let files = common::data_file_list(&table_now).await;
    for key in &r2 {
        assert_eq!(
            files.iter().filter(|f| *f == key).count(),
            1,
            "{key} is in the table once"
        );
    }

    // The publisher's link comes back: its held commit is refused, and it registers nothing.
    release.send(true).expect("release");
    let status = wait_handled(&publisher, nodes[2].keys.len() as u64).await;
    let registered: u64 = status.tables.values().map(|t| t.registered).sum();
    assert_eq!(registered, 1, "the publisher registers only its warm-up");
    for handle in carriers {
        stop(handle).await;
    }
    stop(publisher).await;
    assert_done(&h, &nodes, &uuid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_with_nodes_whose_clocks_are_slots_off_lands_everything_once() {
    let (h, table, mut nodes) = fleet(Harness::new("intents-skew"), "k", 4);
    // Each node its own sink id, so that its snapshots can be told apart by `thadam.writer`.
    for node in &mut nodes {
        node.config.id = format!("sink-{}", node.name);
    }
    // k0's clock runs 2.5 s ahead and k1's 1.3 s behind: many slots (100 ms to a few hundred)
    // off the grid the others cut their turns on, and their snapshots are stamped so.
    let skewed = |by: i64| Tuning {
        hooks: Hooks {
            node_clock: Some(Arc::new(move || chrono::Utc::now().timestamp_millis() + by)),
            ..Hooks::default()
        },
        ..Tuning::default()
    };
    let handles = warm_up(
        &h,
        &mut nodes,
        vec![
            skewed(2_500),
            skewed(-1_300),
            Tuning::default(),
            Tuning::default(),
        ],
    )
    .await;
    let uuid = table_uuid(&h).await;
    flow(&h, &mut nodes, 20, Duration::from_millis(250)).await;
    let statuses = settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;

    // The skew was real, and no stamp went backwards: a snapshot of k0 (2.5 s ahead) is
    // followed by another node's stamped no earlier (the catalog keeps the snapshot log in
    // order), and k1's (1.3 s behind) never go before their parent's.
    let t = h.table(DATASET).await.expect("table");
    let metadata = t.metadata();
    let writer = |s: &iceberg::spec::Snapshot| {
        s.summary()
            .additional_properties
            .get("thadam.writer")
            .cloned()
            .unwrap_or_default()
    };
    let mut after_k0 = 0;
    for child in metadata.snapshots() {
        let Some(parent) = child
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p))
        else {
            continue;
        };
        assert!(
            child.timestamp_ms() >= parent.timestamp_ms(),
            "snapshot {} is stamped before its parent",
            child.snapshot_id()
        );
        if writer(parent).contains("sink-k0") && !writer(child).contains("sink-k0") {
            after_k0 += 1;
        }
    }
    assert!(after_k0 > 0, "other nodes committed after k0");
    for (node, status) in nodes.iter().zip(&statuses) {
        let t = status.tables.values().next().expect("one table");
        println!(
            "{}: registered {} carried by others {}",
            node.name, t.registered, t.carried
        );
    }
    println!(
        "409s {} commits {} carried by another node {}",
        conflicts(&table),
        counter(
            "thadam_iceberg_commits_total",
            &[("table", &table), ("outcome", "ok")]
        ),
        counter(
            "thadam_iceberg_intents_carried_total",
            &[("table", &table), ("whose", "other")]
        )
    );
}

/// A node's catalog link, as the test holds it: appends pass while it is open, and wait while
/// it is shut (hang guard: two minutes).
struct Gate {
    open: tokio::sync::watch::Receiver<bool>,
}

#[async_trait]
impl BeforeAppend for Gate {
    async fn before_append(&self, _: &TableName, _: &iceberg::table::Table, _: &[ReadySegment]) {
        let mut open = self.open.clone();
        let _ = tokio::time::timeout(Duration::from_secs(120), open.wait_for(|o| *o)).await;
    }
}

/// The lane that commits in turn (the lowest of those the table shows), and the sink id of the
/// node it belongs to (from `thadam.writer`: each node of these tests has its own).
fn committer(table: &iceberg::table::Table) -> (String, String) {
    let mut lanes: Vec<(String, String)> = table
        .metadata()
        .snapshots()
        .filter_map(|s| {
            let summary = &s.summary().additional_properties;
            Some((
                summary.get("thadam.lane")?.clone(),
                summary.get("thadam.writer")?.clone(),
            ))
        })
        .collect();
    lanes.sort();
    lanes.into_iter().next().expect("a lane")
}

/// A fleet of more than 8 nodes at work: every node warmed up (with `tunings`, in order),
/// `rounds` rounds of a flow landed by all, and the node that commits in turn (its index).
/// Returns the handles, the table's UUID and that index.
async fn at_work(
    h: &Harness,
    nodes: &mut [Node],
    tunings: Vec<Tuning>,
    rounds: usize,
) -> (Vec<RegistrarHandle>, String, usize) {
    let handles = warm_up(h, nodes, tunings).await;
    let uuid = table_uuid(h).await;
    flow(h, nodes, rounds, Duration::from_millis(300)).await;
    for handle in &handles {
        wait_handled(handle, nodes[0].keys.len() as u64).await;
    }
    let (lane, writer) = committer(&h.table(DATASET).await.expect("table"));
    let at = nodes
        .iter()
        .position(|n| writer.contains(&format!("sink-{}/", n.name)))
        .expect("the committer's node");
    println!("the committer: lane {lane}, node {}", nodes[at].name);
    (handles, uuid, at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_committer_cannot_commit_the_others_land_everything_themselves() {
    // More nodes than take turns all at once (8): one commits, the others publish.
    const N: usize = 10;
    let (h, table, mut nodes) = named_fleet(Harness::new("intents-committer"), "m", N);
    let gates: Vec<_> = (0..N).map(|_| tokio::sync::watch::channel(true)).collect();
    let tunings = gates
        .iter()
        .map(|(_, open)| hooked(Gate { open: open.clone() }))
        .collect();
    // One lane commits in turn, the others publish: shut the committer's link.
    let (handles, uuid, cut) = at_work(&h, &mut nodes, tunings, 4).await;
    gates[cut].0.send(false).expect("shut");
    let before = conflicts(&table);
    let shut_at = std::time::Instant::now();
    flow(&h, &mut nodes, 6, Duration::from_millis(300)).await;

    // The others find nothing carried for a fallback (5 s) and commit what they published
    // themselves, each such commit carrying everyone's, the cut node's included.
    let each = nodes[0].keys.len() as u64;
    for (i, handle) in handles.iter().enumerate() {
        if i != cut {
            tokio::time::timeout(Duration::from_secs(90), wait_handled(handle, each))
                .await
                .expect("the other nodes land their segments without the committer");
        }
    }
    println!(
        "without the committer: the others landed theirs {:.1} s after its link went down, {} 409s",
        shut_at.elapsed().as_secs_f64(),
        conflicts(&table) - before
    );
    let t = h.table(DATASET).await.expect("table");
    let cut_keys: Vec<String> = nodes[cut].keys[1..]
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    let files = common::data_files(&t).await;
    assert!(
        cut_keys.iter().any(|k| files.contains(k)),
        "what the cut committer published was carried by the others"
    );

    // Its link back, it finishes (what was carried counts as handled); nothing is twice.
    gates[cut].0.send(true).expect("open");
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleets_carrying_snapshots_expire_once_their_short_guards_are_covered() {
    let (h, table, mut nodes) = fleet(
        Harness::with(
            "intents-retain",
            common::Options {
                extra_iceberg_yaml: "      snapshot_retention: { max_age: 1m, min_snapshots: 5 }"
                    .to_string(),
                ..common::Options::default()
            },
        ),
        "e",
        3,
    );
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 3]).await;
    flow(&h, &mut nodes, 8, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;

    // Each carrying snapshot names, per carried log, its watermark and the seq it must reach,
    // in the short form: `~` and the log's UUID in base64.
    let carrying = |t: &iceberg::table::Table| -> Vec<String> {
        t.metadata()
            .snapshots()
            .filter_map(|s| {
                s.summary()
                    .additional_properties
                    .get("thadam.carried-marks")
                    .cloned()
            })
            .collect()
    };
    let t = h.table(DATASET).await.expect("table");
    let marks = carrying(&t);
    assert!(!marks.is_empty(), "the fleet carried intents");
    for value in &marks {
        for entry in value.split(',') {
            let (short, seq) = entry.rsplit_once('=').expect("property=seq");
            let id = short.strip_prefix('~').expect("the short form");
            let bytes =
                base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, id)
                    .expect("base64");
            let property = format!(
                "thadam.watermark.{}",
                uuid::Uuid::from_slice(&bytes).expect("a UUID")
            );
            let mark = t
                .metadata()
                .properties()
                .get(&property)
                .expect("a watermark of the fleet");
            let reached: u64 = mark
                .split(':')
                .next()
                .and_then(|s| s.parse().ok())
                .expect("mark");
            assert!(
                reached >= seq.parse::<u64>().expect("seq"),
                "{property} covers {entry}"
            );
        }
    }

    // An hour later (its retention clock), a node's next commit expires what the guards allow:
    // every carrying snapshot but the newest few.
    let hour_ahead = Tuning {
        hooks: Hooks {
            clock: Some(Arc::new(|| {
                chrono::Utc::now().timestamp_millis() + 3_600_000
            })),
            ..Hooks::default()
        },
        ..Tuning::default()
    };
    nodes[0].ship(&h).await;
    let later = nodes[0].start(hour_ahead).await;
    wait_handled(&later, nodes[0].keys.len() as u64).await;
    stop(later).await;
    let t = h.table(DATASET).await.expect("table");
    let left = carrying(&t).len();
    println!(
        "carrying snapshots: {} before the expiry, {left} after ({} snapshots in all)",
        marks.len(),
        t.metadata().snapshots().count()
    );
    assert!(
        left < marks.len() && left <= 5,
        "covered carrying snapshots were expired"
    );
    assert_table_holds(&h, &nodes).await;

    // A node restarted after the expiry registers nothing twice: the watermarks say so.
    let again = nodes[1].start(Tuning::default()).await;
    let status = wait_handled(&again, nodes[1].keys.len() as u64).await;
    stop(again).await;
    let registered: u64 = status.tables.values().map(|t| t.registered).sum();
    assert_eq!(registered, 0, "nothing registered twice after the expiry");
    println!("409s {}", conflicts(&table));
}

/// Every append of its node waits `by` first: a catalog whose commits take longer than the
/// sole committer's cadence (200 ms), as a busy one does.
struct Slow {
    by: Duration,
}

#[async_trait]
impl BeforeAppend for Slow {
    async fn before_append(&self, _: &TableName, _: &iceberg::table::Table, _: &[ReadySegment]) {
        tokio::time::sleep(self.by).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_committer_whose_cycles_outlast_its_cadence_still_takes_in_its_own_segments() {
    // More nodes than take turns all at once (8): one commits, carrying the others' intents in
    // cycles that each take longer than its cadence, back to back while the others publish.
    // Its own segments arrive as messages between those cycles; before, it went from one cycle
    // to the next without reading them, and its own segments waited until the others stopped
    // (5.8 s at 128 nodes in benches/contention.sh, the run's max).
    const N: usize = 10;
    let (h, _table, mut nodes) = named_fleet(Harness::new("intents-busy-committer"), "b", N);
    let tunings = (0..N)
        .map(|_| {
            hooked(Slow {
                by: Duration::from_millis(300),
            })
        })
        .collect();
    let (handles, uuid, busy) = at_work(&h, &mut nodes, tunings, 3).await;

    // The others publish all along (a round every 100 ms, for ~10 s); meanwhile the committer
    // is shipped one segment of its own, which must land while they still publish.
    let mut own = nodes.remove(busy);
    let others_done = AtomicBool::new(false);
    let publishing = async {
        flow(&h, &mut nodes, 40, Duration::from_millis(100)).await;
        others_done.store(true, Ordering::SeqCst);
    };
    let own_segment = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        own.ship(&h).await;
        let shipped = std::time::Instant::now();
        wait_handled(&handles[busy], own.keys.len() as u64).await;
        let late = others_done.load(Ordering::SeqCst);
        println!(
            "the committer's own segment landed {:.2} s after it was shipped (the others still \
             publishing: {})",
            shipped.elapsed().as_secs_f64(),
            !late
        );
        late
    };
    let ((), late) = tokio::join!(publishing, own_segment);
    assert!(
        !late,
        "the committer took in its own segment between its cycles, while the others published"
    );

    // Everyone even again, everything lands once.
    for _ in own.keys.len()..nodes[0].keys.len() {
        own.ship(&h).await;
    }
    nodes.insert(busy, own);
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_coming_to_a_batch_after_an_idle_spell_leave_it_to_the_committer_without_a_load() {
    // A fleet's nodes come to their first attempts together: their segments arrive together
    // after an idle spell (every node's fallback has passed), and each node that only publishes
    // would load the whole table to learn what the committer will carry anyway (128 nodes
    // loaded it 113 times in two seconds). Such a node publishes and leaves the batch without
    // a load. Each node goes through its own proxy, which counts its loads of the table.
    const N: usize = 10;
    let (h, _table, mut nodes) = fleet(Harness::new("intents-no-load"), "d", N);
    let mut proxies = Vec::new();
    for node in &mut nodes {
        let proxy = FaultProxy::start(&h.env.catalog_uri, DATASET).await;
        let catalog = node.config.source.catalog.clone();
        node.config = h.config_via(&proxy.uri);
        node.config.source.catalog = catalog;
        node.config.id = format!("sink-{}", node.name);
        proxies.push(proxy);
    }
    let tunings = (0..N).map(|_| Tuning::default()).collect();
    let (handles, uuid, committing) = at_work(&h, &mut nodes, tunings, 3).await;

    // Idle for longer than any node's fallback (5 s, spread up to 1.5 times that), then one
    // segment each, all at once: the table holds them all before any node that only publishes
    // has loaded it.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let loads_before: Vec<usize> = proxies.iter().map(|p| p.seen(Kind::Load)).collect();
    let mut round = Vec::new();
    for node in nodes.iter_mut() {
        round.push(format!("s3://{}/{}", h.env.bucket, node.ship(&h).await));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let files = common::data_files(&h.table(DATASET).await.expect("table")).await;
        if round.iter().all(|k| files.contains(k)) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the round lands (hang guard)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let loads: Vec<usize> = proxies
        .iter()
        .zip(&loads_before)
        .map(|(p, before)| p.seen(Kind::Load) - before)
        .collect();
    println!("loads of the table per node while the round landed: {loads:?}");
    for (i, n) in loads.iter().enumerate() {
        if i != committing {
            assert_eq!(
                *n, 0,
                "node {} published its segment and left it to the committer without a load",
                nodes[i].name
            );
        }
    }
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
}
