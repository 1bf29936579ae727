//! A fleet of registrars on one table, for the fleet tests: nodes with their own segment logs
//! and configs, shipping real segments, and the checks that every segment is in the table once
//! and nothing of the fleet's is left behind.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use object_store::path::Path as ObjectPath;
use thadam_iceberg::config::{Config, RegistrarConfig};
use thadam_iceberg::protocol::segment_log::{SegmentLogTail, SegmentLogWriter};
use thadam_iceberg::{Registrar, RegistrarHandle, RegistrarStatus, Tuning};

use super::{Harness, YamlParts, assert_exactly_once, demo, render_yaml, stop, wait_handled};

pub const DATASET: &str = "telemetry";
pub const ROWS: u64 = 5;
/// One edge node: its own segment log and config.
pub struct Node {
    pub name: String,
    pub config: RegistrarConfig,
    pub log: SegmentLogWriter,
    pub keys: Vec<String>,
    pub dir: tempfile::TempDir,
}

impl Node {
    pub fn new(h: &Harness, name: &str) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let path: PathBuf = dir.path().join("segment-catalog.log");
        let log = SegmentLogWriter::open(&path).expect("log");
        let mut config = h.config.clone();
        config.source.catalog = path;
        Node {
            name: name.to_string(),
            config,
            log,
            keys: Vec::new(),
            dir,
        }
    }

    /// Ships this node's next segment (a real Parquet file through S3, then its record).
    pub async fn ship(&mut self, h: &Harness) -> String {
        let j = self.keys.len() as u64;
        let segment_id = format!("{}-{j:04}", self.name);
        let key = demo::object_key(&h.prefix, &h.pipeline, DATASET, &segment_id);
        let batch = demo::telemetry_batch(j, ROWS as usize).expect("batch");
        let parquet = demo::write_parquet(&[batch]).expect("parquet");
        demo::ship_segment(
            h.store.as_ref(),
            &mut self.log,
            DATASET,
            &segment_id,
            &key,
            parquet,
            ROWS,
        )
        .await
        .expect("ship");
        self.keys.push(key.clone());
        key
    }

    pub async fn start(&self, tuning: Tuning) -> RegistrarHandle {
        Registrar::builder(self.config.clone())
            .feed(SegmentLogTail::open(&self.config.source.catalog))
            .tuning(tuning)
            .start()
            .await
            .expect("registrar starts")
    }
}

/// A fleet of `n` nodes (`prefix0`, `prefix1`, ...) on the harness's table, with the metrics
/// recorder installed: the harness, the table's name and the nodes.
pub fn fleet(h: Harness, prefix: &str, n: usize) -> (Harness, String, Vec<Node>) {
    super::metrics::recorder();
    let table = format!("{}.{DATASET}", h.namespace.join("."));
    let nodes = (0..n)
        .map(|i| Node::new(&h, &format!("{prefix}{i}")))
        .collect();
    (h, table, nodes)
}

/// [`fleet`], each node with a sink id of its own (`sink-<name>`), which its snapshots'
/// `thadam.writer` names: how [`at_work`] tells which node commits in turn.
pub fn named_fleet(h: Harness, prefix: &str, n: usize) -> (Harness, String, Vec<Node>) {
    let (h, table, mut nodes) = fleet(h, prefix, n);
    for node in &mut nodes {
        node.config.id = format!("sink-{}", node.name);
    }
    (h, table, nodes)
}

/// Every shipped segment is in the table once (Rust reader and pyiceberg), and no intent is
/// left under the table's directory.
pub async fn assert_done(h: &Harness, nodes: &[Node], uuid: &str) {
    assert_table_holds(h, nodes).await;
    assert_nothing_left(h, uuid).await;
}

/// No intent is left under the table's intent directory, nor a manifest in its metadata that no
/// snapshot names. Deletes run behind the commits (and are retried after a failure): waits for
/// them, up to a minute.
pub async fn assert_nothing_left(h: &Harness, uuid: &str) {
    let mut left = (Vec::new(), Vec::new());
    for _ in 0..120 {
        let table = h.table(DATASET).await.expect("table");
        left = (
            intents_left(h, uuid).await,
            orphan_manifests(h, &table).await,
        );
        if left.0.is_empty() && left.1.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "left behind: intents {:?}, manifests no snapshot names {:?}",
        left.0, left.1
    );
}

pub fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    super::metrics::counter(name, labels) as u64
}

/// Every node registers its warm-up segment (the first creates the table), so that every node
/// has committed, and so shown its lane, before the measured flow: from then on they take turns.
pub async fn warm_up(
    h: &Harness,
    nodes: &mut [Node],
    tunings: Vec<Tuning>,
) -> Vec<RegistrarHandle> {
    for node in nodes.iter_mut() {
        node.ship(h).await;
    }
    let mut handles = Vec::new();
    for (node, tuning) in nodes.iter().zip(tunings) {
        let handle = node.start(tuning).await;
        wait_handled(&handle, 1).await;
        handles.push(handle);
    }
    handles
}

/// Ships `rounds` segments to each node, one round every `every` (a live flow: batches wait for
/// their node's turn, which is when they are published).
pub async fn flow(h: &Harness, nodes: &mut [Node], rounds: usize, every: Duration) {
    for _ in 0..rounds {
        for node in nodes.iter_mut() {
            node.ship(h).await;
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits until every node has handled all it was shipped (each node is shipped as many as the
/// first), then stops them all: their statuses at that point.
pub async fn settle(nodes: &[Node], handles: Vec<RegistrarHandle>) -> Vec<RegistrarStatus> {
    let each = nodes[0].keys.len() as u64;
    let mut statuses = Vec::new();
    for handle in &handles {
        statuses.push(wait_handled(handle, each).await);
    }
    for handle in handles {
        stop(handle).await;
    }
    statuses
}

/// Like [`settle`], and before the nodes stop, waits (up to a minute) for the table's intent
/// directory to hold just `keep`: the deletes run behind the commits, so this is what a user
/// listing the directory while the fleet runs sees. Returns the statuses and the keys left.
pub async fn settle_leaving(
    h: &Harness,
    nodes: &[Node],
    handles: Vec<RegistrarHandle>,
    uuid: &str,
    keep: &[String],
) -> (Vec<RegistrarStatus>, Vec<String>) {
    let each = nodes[0].keys.len() as u64;
    let mut statuses = Vec::new();
    for handle in &handles {
        statuses.push(wait_handled(handle, each).await);
    }
    let mut keep = keep.to_vec();
    keep.sort();
    let mut left = Vec::new();
    for _ in 0..120 {
        left = intents_left(h, uuid).await;
        left.sort();
        if left == keep {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for handle in handles {
        stop(handle).await;
    }
    (statuses, left)
}

/// The UUID of the test's table.
pub async fn table_uuid(h: &Harness) -> String {
    h.table(DATASET)
        .await
        .expect("table")
        .metadata()
        .uuid()
        .to_string()
}

/// The objects under the table's intent directory.
pub async fn intents_left(h: &Harness, uuid: &str) -> Vec<String> {
    super::keys_under(h.store.as_ref(), intent_dir(h, uuid).as_ref()).await
}

pub fn intent_dir(h: &Harness, uuid: &str) -> ObjectPath {
    ObjectPath::from(format!("{}/_thadam-intents/{uuid}", h.prefix))
}

/// Checks the table with the Rust reader and with pyiceberg: exactly the shipped keys, once.
pub async fn assert_table_holds(h: &Harness, nodes: &[Node]) {
    let keys: Vec<String> = nodes.iter().flat_map(|n| n.keys.clone()).collect();
    let table = h.table(DATASET).await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    let view = h.py_view(DATASET);
    assert_eq!(
        view.rows,
        keys.len() as u64 * ROWS,
        "pyiceberg reads every row once"
    );
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(view.files, expected, "pyiceberg plans every file once");
}

/// Manifests under the table's metadata that no snapshot's manifest list names.
pub async fn orphan_manifests(h: &Harness, table: &iceberg::table::Table) -> Vec<String> {
    let (_, named) = super::referenced(table).await;
    super::metadata_objects(h, table)
        .await
        .into_iter()
        .filter(|p| p.ends_with(".avro") && !p.contains("/snap-") && !named.contains(p))
        .collect()
}

/// The standalone runner for `node`, with `extra` keys in its sink (YAML, six spaces deep).
pub fn runner(h: &Harness, node: &Node, extra: &str) -> std::process::Child {
    let yaml = render_yaml(&YamlParts {
        dir: node.dir.path(),
        unsigned: "signed",
        datasets: &[DATASET],
        pipeline: &h.pipeline,
        bucket: &h.env.bucket,
        prefix: &h.prefix,
        catalog_uri: &h.env.catalog_uri,
        namespace: &h.namespace.join("."),
        create_table: true,
        s3_endpoint: &h.env.s3_endpoint,
        extra_iceberg_yaml: extra,
    });
    let config = Config::from_yaml_str(&yaml, node.dir.path())
        .expect("valid")
        .registrars
        .remove(0);
    assert_eq!(
        config.source.catalog, node.config.source.catalog,
        "the runner reads the node's own log"
    );
    let path = node.dir.path().join("thadam.yaml");
    std::fs::write(&path, yaml).expect("config");
    let log = std::fs::File::create(node.dir.path().join("runner.log")).expect("log");
    Command::new(super::example_binary("registrar"))
        .arg("--config")
        .arg(&path)
        .env("RUST_LOG", "warn,thadam_iceberg=info")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("runner starts")
}
