//! A fleet's exactly once when the happy path does not hold, against the real REST fixture and
//! S3 server: intents left behind after snapshot retention expired the commits that carried
//! them, intent PUTs whose answer is lost after the object was stored, deletes that fail,
//! forged and unsigned intents, junk that sorts first, a publisher killed with an intent
//! waiting, a node with intents off in the lowest lane, and clocks ten minutes off. Every case
//! ends with every segment in the table once (read back by pyiceberg too) and nothing left: no
//! intent, no manifest that no snapshot names.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use common::fleet::*;
use common::store_faults::{Faults, FaultyStore};
use common::{Harness, stop, wait_handled};
use thadam_iceberg::config::SnapshotRetention;
use thadam_iceberg::testing::{
    BeforeAppend, Hooks, ReadySegment, SEGMENT_IDS, SegmentId, TableName, decode_ids,
};
use thadam_iceberg::{RegistrarHandle, Tuning};

/// The snapshot summaries of the test's table, oldest first.
async fn summaries(h: &Harness) -> Vec<BTreeMap<String, String>> {
    let table = h.table(DATASET).await.expect("table");
    let mut snapshots: Vec<_> = table.metadata().snapshots().cloned().collect();
    snapshots.sort_by_key(|s| s.sequence_number());
    snapshots
        .iter()
        .map(|s| {
            s.summary()
                .additional_properties
                .clone()
                .into_iter()
                .collect()
        })
        .collect()
}

/// Whether the table's snapshots list `id`.
fn listed(summaries: &[BTreeMap<String, String>], id: &SegmentId) -> bool {
    summaries
        .iter()
        .filter_map(|s| s.get(SEGMENT_IDS))
        .any(|ids| decode_ids(ids).contains(id))
}

/// Copies every object that appears under `dir` while the returned flag is up.
fn copy_aside(
    store: Arc<dyn ObjectStore>,
    dir: ObjectPath,
) -> (
    Arc<AtomicBool>,
    tokio::task::JoinHandle<HashMap<ObjectPath, bytes::Bytes>>,
) {
    let running = Arc::new(AtomicBool::new(true));
    let up = Arc::clone(&running);
    let task = tokio::spawn(async move {
        let mut copies: HashMap<ObjectPath, bytes::Bytes> = HashMap::new();
        while up.load(Ordering::SeqCst) {
            let keys = common::keys_under(store.as_ref(), dir.as_ref()).await;
            for key in keys {
                let key = ObjectPath::from(key);
                if copies.contains_key(&key) {
                    continue;
                }
                if let Ok(got) = store.get(&key).await
                    && let Ok(body) = got.bytes().await
                {
                    copies.insert(key, body);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        copies
    });
    (running, task)
}

/// The segment ids an intent's body names.
fn intent_ids(body: &[u8]) -> Vec<SegmentId> {
    let v: serde_json::Value = serde_json::from_slice(body).expect("an intent is JSON");
    decode_ids(v["segment_ids"].as_str().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn intents_left_behind_after_their_snapshots_expired_are_never_carried_again() {
    let (h, _, mut nodes) = fleet(Harness::new("xo-expired"), "e", 10);
    for node in &mut nodes {
        node.config.snapshot_retention = Some(SnapshotRetention {
            max_age: Duration::from_secs(2),
            min_snapshots: 1,
        });
    }
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 10]).await;
    let uuid = table_uuid(&h).await;
    // Every intent seen during the run is kept aside, as if its delete had been lost.
    let (copying, copier) = copy_aside(Arc::clone(&h.store), intent_dir(&h, &uuid));
    flow(&h, &mut nodes, 12, Duration::from_millis(300)).await;
    let each = nodes[0].keys.len() as u64;
    for handle in &handles {
        wait_handled(handle, each).await;
    }
    copying.store(false, Ordering::SeqCst);
    let copies = copier.await.expect("copier");
    assert!(!copies.is_empty(), "intents were published");
    // Two more rounds, each past max_age, so that retention expires the carrying snapshots.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        flow(&h, &mut nodes, 1, Duration::ZERO).await;
        let each = nodes[0].keys.len() as u64;
        for handle in &handles {
            wait_handled(handle, each).await;
        }
    }
    for handle in handles {
        stop(handle).await;
    }
    let kept = summaries(&h).await;
    let expired = copies
        .values()
        .filter(|body| intent_ids(body).iter().all(|id| !listed(&kept, id)))
        .count();
    println!(
        "{} intents copied aside, {expired} of them carried by snapshots retention expired",
        copies.len()
    );
    assert!(expired > 0, "retention expired some carrying snapshots");

    // The lost deletes: every intent is back. The fleet restarts (new lanes) and goes on.
    for (key, body) in &copies {
        h.store
            .put(key, body.clone().into())
            .await
            .expect("put back");
    }
    let mut handles: Vec<RegistrarHandle> = Vec::new();
    for node in &nodes {
        handles.push(node.start(Tuning::default()).await);
    }
    flow(&h, &mut nodes, 3, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
}

/// A tuning whose store loses the answers of intent PUTs (after storing them) while `faults`
/// says so, and publishes `thadam-intent/1` (a manifest and an intent naming it) when
/// `manifests`.
fn faulty(faults: &Arc<Faults>, manifests: bool) -> Tuning {
    let faults = Arc::clone(faults);
    Tuning {
        hooks: Hooks {
            wrap_store: Some(Arc::new(move |inner| {
                FaultyStore::wrap(inner, Arc::clone(&faults))
            })),
            intents_name_manifests: manifests,
            ..Hooks::default()
        },
        ..Tuning::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn intent_puts_whose_answer_is_lost_and_deletes_that_fail_lose_and_double_nothing() {
    let (h, table, mut nodes) = fleet(Harness::new("xo-lost"), "l", 4);
    // l0 publishes manifests (a catch-up backlog's form) and l1 intents holding their files:
    // both hear an error for every intent they store. l2's deletes of intents fail.
    let (lost_manifests, lost_files, failing) = (
        Arc::new(Faults::default()),
        Arc::new(Faults::default()),
        Arc::new(Faults::default()),
    );
    let handles = warm_up(
        &h,
        &mut nodes,
        vec![
            faulty(&lost_manifests, true),
            faulty(&lost_files, false),
            faulty(&failing, false),
            Tuning::default(),
        ],
    )
    .await;
    let uuid = table_uuid(&h).await;
    lost_manifests
        .lose_intent_put_answers
        .store(true, Ordering::SeqCst);
    lost_files
        .lose_intent_put_answers
        .store(true, Ordering::SeqCst);
    failing.fail_intent_deletes.store(true, Ordering::SeqCst);
    flow(&h, &mut nodes, 16, Duration::from_millis(300)).await;
    let each = nodes[0].keys.len() as u64;
    for handle in &handles {
        wait_handled(handle, each).await;
    }
    // The store works again: what waits for a delete goes.
    failing.fail_intent_deletes.store(false, Ordering::SeqCst);
    flow(&h, &mut nodes, 2, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;
    println!(
        "lost answers: {} (manifests) {} (files); failed deletes {}; delete failures counted {}, \
         unknown publishes counted {}",
        lost_manifests.lost_answers.load(Ordering::SeqCst),
        lost_files.lost_answers.load(Ordering::SeqCst),
        failing.failed_deletes.load(Ordering::SeqCst),
        counter(
            "thadam_iceberg_intents_delete_failed_total",
            &[("table", &table)]
        ),
        counter(
            "thadam_iceberg_intents_publish_unknown_total",
            &[("table", &table)]
        ),
    );
    assert!(lost_manifests.lost_answers.load(Ordering::SeqCst) > 0);
    assert!(lost_files.lost_answers.load(Ordering::SeqCst) > 0);
    if failing.failed_deletes.load(Ordering::SeqCst) > 0 {
        assert!(
            counter(
                "thadam_iceberg_intents_delete_failed_total",
                &[("table", &table)]
            ) > 0,
            "failed deletes are counted"
        );
    }
    // Every segment once (no manifest missing: pyiceberg reads every file), nothing left.
    assert_done(&h, &nodes, &uuid).await;
}

/// An intent body for this table, as a forger with write access under the fleet's url would
/// write it: `files` as (object key, id key) pairs (a file and the key its id is taken from).
#[allow(clippy::too_many_arguments)]
async fn forged(
    h: &Harness,
    uuid: &str,
    lane: &str,
    log: &str,
    files: &[(&str, &str)],
    watermark: Option<(String, String)>,
    max_seq: u64,
    key: Option<&str>,
) -> Vec<u8> {
    let table = h.table(DATASET).await.expect("table");
    let metadata = table.metadata();
    let mut data_files = Vec::new();
    for (object_key, _) in files {
        let size = h
            .store
            .head(&ObjectPath::from(*object_key))
            .await
            .map_or(1000, |m| m.size);
        let file = iceberg::spec::DataFileBuilder::default()
            .content(iceberg::spec::DataContentType::Data)
            .file_path(format!("s3://{}/{object_key}", h.env.bucket))
            .file_format(iceberg::spec::DataFileFormat::Parquet)
            .partition_spec_id(metadata.default_partition_spec_id())
            .partition(iceberg::spec::Struct::empty())
            .record_count(ROWS)
            .file_size_in_bytes(size)
            .build()
            .expect("data file");
        let json = iceberg::spec::serialize_data_file_to_json(
            file,
            metadata.default_partition_type(),
            metadata.format_version(),
        )
        .expect("json");
        data_files.push(serde_json::from_str::<serde_json::Value>(&json).expect("json"));
    }
    let ids: String = files
        .iter()
        .map(|(_, id_key)| thadam_iceberg::testing::encode_ids([*id_key]))
        .collect();
    let mut body = serde_json::json!({
        "format": "thadam-intent/2",
        "table_uuid": uuid,
        "url": h.config.url.uri(),
        "lane": lane,
        "writer": "thadam-iceberg/forger/p",
        "created_ms": chrono::Utc::now().timestamp_millis(),
        "manifest": {
            "path": "", "length": 0, "spec_id": metadata.default_partition_spec_id(),
            "schema_id": metadata.current_schema_id(), "files": files.len(),
            "rows": ROWS * files.len() as u64, "bytes": 1000 * files.len() as u64
        },
        "files": data_files,
        "segment_ids": ids,
        "max_seq": max_seq,
        "log": log,
    });
    if let Some((property, value)) = watermark {
        body["watermark"] = serde_json::json!({ "property": property, "value": value });
    }
    let bytes = serde_json::to_vec(&body).expect("json");
    match key {
        Some(key) => thadam_iceberg::testing::sign_intent(key, &bytes),
        None => bytes,
    }
}

/// A real Parquet file under the fleet's url that no segment log names (a forger's upload).
async fn forgers_file(h: &Harness, name: &str) -> String {
    let key = common::demo::object_key(&h.prefix, &h.pipeline, DATASET, name);
    let batch = common::demo::telemetry_batch(9_000, ROWS as usize).expect("batch");
    let parquet = common::demo::write_parquet(&[batch]).expect("parquet");
    h.store
        .put(&ObjectPath::from(key.as_str()), parquet.into())
        .await
        .expect("upload");
    key
}

/// How many of the carrying snapshots (those that carried other nodes' intents) after the
/// `from`-th snapshot each lane wrote.
fn carriers(summaries: &[BTreeMap<String, String>], from: usize) -> BTreeMap<String, usize> {
    let mut by_lane = BTreeMap::new();
    for s in summaries.iter().skip(from) {
        if s.contains_key("thadam.carried-intents")
            && let Some(lane) = s.get("thadam.lane")
        {
            *by_lane.entry(lane.clone()).or_default() += 1;
        }
    }
    by_lane
}

/// Whether one lane wrote most (at least 80%) of `by_lane`'s carrying snapshots: the fleet has
/// its one committer, rather than every node committing after its fallback.
fn one_committer(by_lane: &BTreeMap<String, usize>) -> bool {
    let all: usize = by_lane.values().sum();
    let top = by_lane.values().max().copied().unwrap_or(0);
    all > 0 && top * 5 >= all * 4
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_and_unsigned_intents_are_skipped_and_leave_the_table_untouched() {
    const KEY: &str = "the fleet's shared intents key, 32+ bytes";
    let (h, table, mut nodes) = fleet(Harness::new("xo-forged"), "f", 10);
    for node in &mut nodes {
        node.config.commit.intents_key = Some(thadam_iceberg::config::Secret::new(KEY));
    }
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 10]).await;
    let uuid = table_uuid(&h).await;
    let dir = intent_dir(&h, &uuid);
    let t = h.table(DATASET).await.expect("table");
    let victim_mark: (String, String) = t
        .metadata()
        .properties()
        .iter()
        .find(|(k, _)| k.starts_with("thadam.watermark."))
        .map(|(k, v)| (k.clone(), v.clone()))
        .expect("a node's watermark");
    let victim_log = victim_mark
        .0
        .trim_start_matches("thadam.watermark.")
        .to_string();
    let registered = nodes[0].keys[0].clone();
    let upload = forgers_file(&h, "forger-0001").await;
    let upload2 = forgers_file(&h, "forger-0002").await;
    let victims_next = common::demo::object_key(
        &h.prefix,
        &h.pipeline,
        DATASET,
        &format!("{}-0001", nodes[1].name),
    );
    let raise = |log: &str| {
        (
            format!("thadam.watermark.{log}"),
            "999999:AAAAAAAAAAAAAAAA".to_string(),
        )
    };
    let bodies = [
        // Signed with the fleet key (a node's key leaked), but not bound to its publisher:
        // another log's watermark; an id that is not its file's key's (a victim's next
        // segment id on the forger's file); a registered file under a new id.
        (
            "another-log",
            forged(
                &h,
                &uuid,
                "0a0a0a0a0a0a",
                "forger-log",
                &[(&upload, &upload)],
                Some(raise(&victim_log)),
                999_999,
                Some(KEY),
            )
            .await,
        ),
        (
            "another-id",
            forged(
                &h,
                &uuid,
                "0a0a0a0a0a0a",
                "forger-log",
                &[(&upload, &victims_next)],
                None,
                1,
                Some(KEY),
            )
            .await,
        ),
        (
            "new-id",
            forged(
                &h,
                &uuid,
                "0a0a0a0a0a0a",
                "forger-log",
                &[(&registered, "a-new-id")],
                None,
                1,
                Some(KEY),
            )
            .await,
        ),
        // Unsigned, and tagged with another key: never taken.
        (
            "unsigned",
            forged(
                &h,
                &uuid,
                "0a0a0a0a0a0a",
                "forger-log",
                &[(&upload2, &upload2)],
                None,
                1,
                None,
            )
            .await,
        ),
        (
            "wrong-key",
            forged(
                &h,
                &uuid,
                "0a0a0a0a0a0a",
                "forger-log",
                &[(&upload2, &upload2)],
                None,
                1,
                Some("another key, also 32 bytes long"),
            )
            .await,
        ),
    ];
    for (name, body) in &bodies {
        h.store
            .put(&dir.child(format!("0-{name}.json")), body.clone().into())
            .await
            .expect("put forged");
    }
    // A valid, signed intent claiming the lowest lane: carried (its file is the forger's own
    // upload, under its own id), but the lane it claims never makes anyone hold back.
    let lowest = forgers_file(&h, "forger-0003").await;
    let fake_lane = "000000000000";
    let body = forged(
        &h,
        &uuid,
        fake_lane,
        "forger-log",
        &[(&lowest, &lowest)],
        None,
        1,
        Some(KEY),
    )
    .await;
    h.store
        .put(&dir.child("0-fake-lane.json"), body.into())
        .await
        .expect("put fake lane");
    let before = summaries(&h).await.len();

    flow(&h, &mut nodes, 20, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;

    // The table: every node's segment once, and of the forger's only the valid intent's file.
    let t = h.table(DATASET).await.expect("table");
    let files = common::data_files(&t).await;
    let uri = |key: &str| format!("s3://{}/{key}", h.env.bucket);
    assert!(
        files.contains(&uri(&lowest)),
        "the valid intent was carried"
    );
    assert!(!files.contains(&uri(&upload)) && !files.contains(&uri(&upload2)));
    let mut keys: Vec<String> = nodes.iter().flat_map(|n| n.keys.clone()).collect();
    keys.push(lowest.clone());
    common::assert_exactly_once(&t, &h.env.bucket, &keys).await;
    let view = h.py_view(DATASET);
    assert_eq!(
        view.rows,
        keys.len() as u64 * ROWS,
        "pyiceberg reads every row once"
    );
    let victim_now = t
        .metadata()
        .properties()
        .get(&victim_mark.0)
        .cloned()
        .unwrap_or_default();
    assert!(
        !victim_now.starts_with("999999:"),
        "the victim's watermark is its own: {victim_now}"
    );
    for reason in ["forged", "unsigned"] {
        let n = counter(
            "thadam_iceberg_intents_skipped_total",
            &[("table", &table), ("reason", reason)],
        );
        println!("skipped as {reason}: {n}");
        assert!(n > 0, "{reason} intents are counted");
    }
    // The claimed lane was carried, never committed, and the fleet kept its one committer.
    let all = summaries(&h).await;
    assert!(
        all.iter()
            .all(|s| s.get("thadam.lane").map(String::as_str) != Some(fake_lane))
    );
    let by_lane = carriers(&all, before);
    println!("carrying snapshots by lane since the forged intents: {by_lane:?}");
    assert!(!by_lane.contains_key(fake_lane));
    assert!(
        one_committer(&by_lane),
        "one committer carried the fleet: {by_lane:?}"
    );
    // Only the forged intents are left (an hour before they age out).
    let mut left = intents_left(&h, &uuid).await;
    left.sort();
    let mut expected: Vec<String> = bodies
        .iter()
        .map(|(name, _)| dir.child(format!("0-{name}.json")).to_string())
        .collect();
    expected.sort();
    assert_eq!(left, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_and_one_junk_keys_that_sort_first_hide_no_intent() {
    let (h, table, mut nodes) = fleet(Harness::new("xo-junk"), "j", 10);
    let handles = warm_up(&h, &mut nodes, vec![Tuning::default(); 10]).await;
    let uuid = table_uuid(&h).await;
    let dir = intent_dir(&h, &uuid);
    // More than one page of S3's LIST, all before the fleet's keys.
    let junk: Vec<ObjectPath> = (0..1_001)
        .map(|i| dir.child(format!("0-junk-{i:04}.json")))
        .collect();
    futures::future::join_all(junk.chunks(100).map(|chunk| {
        let store = Arc::clone(&h.store);
        let chunk = chunk.to_vec();
        async move {
            for key in chunk {
                store
                    .put(&key, bytes::Bytes::from_static(b"not an intent").into())
                    .await
                    .expect("put junk");
            }
        }
    }))
    .await;
    let before = summaries(&h).await.len();
    flow(&h, &mut nodes, 20, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;
    assert_table_holds(&h, &nodes).await;
    let carried = counter(
        "thadam_iceberg_intents_carried_total",
        &[("table", &table), ("whose", "other")],
    );
    let read = counter(
        "thadam_iceberg_intents_skipped_total",
        &[("table", &table), ("reason", "malformed")],
    );
    let by_lane = carriers(&summaries(&h).await, before);
    println!(
        "intents carried by others {carried}; junk skipped {read} times; carriers {by_lane:?}"
    );
    assert!(carried > 0, "the fleet's intents were found past the junk");
    assert!(
        one_committer(&by_lane),
        "one committer carried the fleet: {by_lane:?}"
    );
    // Each node that lists reads the junk once, not at every listing.
    assert!(read <= 1_001 * 10, "junk is read once per node: {read}");
    let mut left = intents_left(&h, &uuid).await;
    left.sort();
    let mut junk: Vec<String> = junk.iter().map(ToString::to_string).collect();
    junk.sort();
    assert_eq!(
        left, junk,
        "only the junk is left (it is not the fleet's to delete)"
    );
}

/// Holds every append of its node after the first while shut: a node that can publish but not
/// commit (its catalog link is down).
struct Cutoff {
    calls: AtomicUsize,
    open: tokio::sync::watch::Receiver<bool>,
}

#[async_trait]
impl BeforeAppend for Cutoff {
    async fn before_append(&self, _: &TableName, _: &iceberg::table::Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            return;
        }
        let mut open = self.open.clone();
        let _ = tokio::time::timeout(Duration::from_secs(120), open.wait_for(|o| *o)).await;
    }
}

fn cut_off(open: &tokio::sync::watch::Receiver<bool>) -> Tuning {
    Tuning {
        hooks: Hooks {
            before_append: Some(Arc::new(Cutoff {
                calls: AtomicUsize::new(0),
                open: open.clone(),
            })),
            ..Hooks::default()
        },
        ..Tuning::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_publisher_killed_with_an_intent_waiting_strands_nothing_when_it_comes_back() {
    // Nine nodes in-process in the lowest lanes (one of them the fleet's committer), and k0, a
    // process, which only publishes.
    let (h, _, mut nodes) = fleet(Harness::new("xo-kill"), "k", 10);
    let (open, opened) = tokio::sync::watch::channel(true);
    for node in nodes.iter_mut() {
        node.ship(&h).await;
    }
    let mut handles = Vec::new();
    for (i, node) in nodes.iter().enumerate().skip(1) {
        let mut tuning = cut_off(&opened);
        tuning.hooks.lane = Some(format!("{:012x}", 0xc00 + i));
        let handle = node.start(tuning).await;
        wait_handled(&handle, 1).await;
        handles.push(handle);
    }
    let mut k0 = runner(&h, &nodes[0], "");
    let uuid = loop {
        if let Some(t) = h.table(DATASET).await
            && common::data_files(&t)
                .await
                .contains(&format!("s3://{}/{}", h.env.bucket, nodes[0].keys[0]))
        {
            break t.metadata().uuid().to_string();
        }
        assert!(k0.try_wait().expect("status").is_none(), "k0 exited");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The others lose their catalog link (nobody carries); k0 publishes three segments.
    open.send(false).expect("cut");
    for _ in 0..3 {
        nodes[0].ship(&h).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let published = |n: usize| {
        let h = &h;
        let uuid = &uuid;
        async move {
            tokio::time::timeout(Duration::from_secs(60), async {
                while intents_left(h, uuid).await.len() < n {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
            .await
            .is_ok()
        }
    };
    assert!(published(1).await, "k0 published (hang guard: 60 s)");
    tokio::time::sleep(Duration::from_secs(1)).await;
    k0.kill().expect("SIGKILL");
    k0.wait().expect("reaped");
    let old = intents_left(&h, &uuid).await;
    println!("k0 killed with {} intent(s) waiting", old.len());

    // Two more arrive while it is down; it comes back (a new lane) and publishes its batch, the
    // three waiting and the two new, in an intent of its new lane; then the others' link too.
    for _ in 0..2 {
        nodes[0].ship(&h).await;
    }
    let mut k0 = runner(&h, &nodes[0], "");
    if !published(old.len() + 1).await {
        let log =
            std::fs::read_to_string(nodes[0].dir.path().join("runner.log")).unwrap_or_default();
        panic!("k0 did not publish again (hang guard: 60 s); its log:\n{log}");
    }
    let new_lane = intents_left(&h, &uuid)
        .await
        .into_iter()
        .find(|k| !old.contains(k))
        .and_then(|k| k.rsplit('/').next().map(|name| name[..12].to_string()))
        .expect("k0's new intent");
    open.send(true).expect("reopen");
    for _ in 0..3 {
        for node in nodes.iter_mut().skip(1) {
            node.ship(&h).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let each = nodes[1].keys.len() as u64;
    for handle in &handles {
        wait_handled(handle, each).await;
    }
    let k0_keys: BTreeSet<String> = nodes[0]
        .keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    let landed = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let t = h.table(DATASET).await.expect("table");
            if k0_keys.is_subset(&common::data_files(&t).await) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let _ = k0.kill();
    let _ = k0.wait();
    for handle in handles {
        stop(handle).await;
    }
    assert!(landed.is_ok(), "k0's segments landed (hang guard: 120 s)");
    // The committer carried what k0 published again beside its old intents (the rest that the
    // old ones did not hold): k0 never had to commit anything itself after coming back.
    let all = summaries(&h).await;
    let by_new_lane = all
        .iter()
        .filter(|s| s.get("thadam.lane") == Some(&new_lane))
        .count();
    println!("k0's new lane {new_lane} committed {by_new_lane} snapshot(s)");
    assert_eq!(
        by_new_lane, 0,
        "k0's segments were carried, none stranded until its fallback"
    );
    assert_done(&h, &nodes, &uuid).await;
}

/// A tuning with this node's lane set.
fn in_lane(lane: &str) -> Tuning {
    Tuning {
        hooks: Hooks {
            lane: Some(lane.to_string()),
            ..Hooks::default()
        },
        ..Tuning::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_with_intents_off_in_the_lowest_lane_never_holds_the_fleet() {
    let (h, _, mut nodes) = fleet(Harness::new("xo-off"), "o", 10);
    nodes[0].config.commit.intents = false;
    let mut tunings = vec![in_lane("000000000000")];
    tunings.extend((1..10).map(|i| in_lane(&format!("{:012x}", 0xa00 + i))));
    let handles = warm_up(&h, &mut nodes, tunings).await;
    let uuid = table_uuid(&h).await;
    let before = summaries(&h).await.len();
    flow(&h, &mut nodes, 20, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
    let by_lane = carriers(&summaries(&h).await, before);
    println!("carrying snapshots by lane: {by_lane:?}");
    assert!(
        !by_lane.contains_key("000000000000"),
        "a node with intents off carries nothing"
    );
    assert!(
        one_committer(&by_lane),
        "one committer carried the fleet: {by_lane:?}"
    );
    assert_eq!(
        by_lane
            .iter()
            .max_by_key(|(_, n)| **n)
            .map(|(l, _)| l.as_str()),
        Some("000000000a01"),
        "the committer is the lowest lane that carries"
    );
}

/// A tuning with this node's wall clock `by` ms off, in lane `lane`.
fn skewed(by: i64, lane: &str) -> Tuning {
    Tuning {
        hooks: Hooks {
            node_clock: Some(Arc::new(move || chrono::Utc::now().timestamp_millis() + by)),
            lane: Some(lane.to_string()),
            ..Hooks::default()
        },
        ..Tuning::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_ten_minutes_ahead_and_behind_neither_hide_others_nor_hold_the_fleet() {
    const TEN_MINUTES: i64 = 600_000;
    let (h, _, mut nodes) = fleet(Harness::new("xo-clocks"), "c", 10);
    // The lowest lane (the committer) runs ten minutes ahead, the next ten minutes behind.
    let mut tunings = vec![
        skewed(TEN_MINUTES, "000000000b01"),
        skewed(-TEN_MINUTES, "000000000b02"),
    ];
    tunings.extend((3..=10).map(|i| skewed(0, &format!("{:012x}", 0xb00 + i))));
    let handles = warm_up(&h, &mut nodes, tunings).await;
    let uuid = table_uuid(&h).await;
    let before = summaries(&h).await.len();
    flow(&h, &mut nodes, 20, Duration::from_millis(300)).await;
    settle(&nodes, handles).await;
    assert_done(&h, &nodes, &uuid).await;
    // Never a stamp before the last one (the catalog keeps the snapshot log in order).
    let t = h.table(DATASET).await.expect("table");
    let mut log: Vec<i64> = t
        .metadata()
        .history()
        .iter()
        .map(|e| e.timestamp_ms)
        .collect();
    let sorted = {
        let mut s = log.clone();
        s.sort();
        s
    };
    assert_eq!(log, sorted, "the snapshot log never goes backwards");
    log.dedup();
    let by_lane = carriers(&summaries(&h).await, before);
    println!("carrying snapshots by lane: {by_lane:?}");
    assert!(
        one_committer(&by_lane),
        "one committer carried the fleet: {by_lane:?}"
    );
}
