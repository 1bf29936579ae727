//! Remote signing against a real catalog's signer: Project Nessie 0.99.0 answers `loadTable`
//! with `s3.remote-signing-enabled` and its own signer (`/iceberg/v1/{prefix}/s3sign/...`), and
//! vends no keys. A registrar whose `store` has no keys registers segments there: every footer
//! read, manifest, manifest list and metadata request is signed by Nessie (s3s-fs checks every
//! signature and refuses anonymous requests, and the process has no AWS credentials), and
//! pyiceberg reads the rows back. A signer that refuses stops the registrar with `auth.failed`
//! after one reload, never retrying forever.
//!
//! The table is created first, by pyiceberg, with the segments' field IDs (a registrar cannot
//! create it keyless: creation reads a footer before the catalog knows the table). Nessie
//! chooses its location, `{warehouse}/{namespace}/telemetry_{uuid}`, and signs reads only inside
//! the table's locations (and writes only inside its warehouse), so the segments are shipped
//! into the table's location.
//!
//! Needs `THADAM_TEST_NESSIE_URI` (and `THADAM_TEST_NESSIE_WAREHOUSE`,
//! `THADAM_TEST_NESSIE_LOCATION`), written by `scripts/servers start DIR` into `DIR/env`; each
//! test fails when they are missing, and skips with a printed reason only with THADAM_NESSIE=0.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use thadam_iceberg::ErrorCode;
use thadam_iceberg::config::{Config, RegistrarConfig};
use thadam_iceberg::protocol::segment_log::SegmentLogWriter;
use thadam_iceberg::testing::TableName;

use common::demo;

/// Where Nessie is, or why the test skips.
struct Nessie {
    uri: String,
    warehouse: String,
    /// The warehouse location, `s3://bucket/prefix`.
    location: String,
}

fn nessie(test: &str) -> Option<Nessie> {
    // Left out only when asked for (THADAM_NESSIE=0); otherwise a missing Nessie fails loudly.
    if common::Catalog::Nessie.skipped() {
        eprintln!("SKIPPED {test}");
        return None;
    }
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: Nessie is not running. Run the tests with scripts/test, or \
                 start the servers with `scripts/servers start DIR && source DIR/env` (without \
                 THADAM_NESSIE=0)"
            )
        })
    };
    Some(Nessie {
        uri: var("THADAM_TEST_NESSIE_URI"),
        warehouse: var("THADAM_TEST_NESSIE_WAREHOUSE"),
        location: var("THADAM_TEST_NESSIE_LOCATION"),
    })
}

/// A front before Nessie: forwards every request with its `Host` kept, so Nessie names the
/// front as its signer (`s3.signer.uri`) and sign requests pass here too. Counts the table's
/// loads and the sign requests; answers sign requests with `refuse` when set.
struct Front {
    uri: String,
    loads: Arc<AtomicUsize>,
    signs: Arc<AtomicUsize>,
    _task: tokio::task::JoinHandle<()>,
}

async fn front(nessie: &str, table: &str, refuse: Option<u16>) -> Front {
    let (listener, uri) = common::relay::listen().await;
    let (loads, signs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (l, s) = (Arc::clone(&loads), Arc::clone(&signs));
    // The front's URI stands for Nessie's base (`.../iceberg`): the path is forwarded as is.
    let upstream = nessie
        .trim_end_matches('/')
        .trim_end_matches("/iceberg")
        .to_string();
    let suffix = format!("/tables/{table}");
    let client = reqwest::Client::new();
    let task = common::relay::serve(listener, move |parts, body| {
        let (client, upstream, suffix) = (client.clone(), upstream.clone(), suffix.clone());
        let (loads, signs) = (Arc::clone(&l), Arc::clone(&s));
        async move {
            let path = parts.uri.path();
            if parts.method == hyper::Method::GET && path.ends_with(&suffix) {
                loads.fetch_add(1, Ordering::SeqCst);
            }
            if parts.method == hyper::Method::POST && path.contains("/s3sign/") {
                signs.fetch_add(1, Ordering::SeqCst);
                if let Some(status) = refuse {
                    return Ok(common::relay::rest_error(
                        status,
                        "NotAuthorizedException",
                        "the test front refuses to sign",
                    ));
                }
            }
            common::relay::forward(&client, &upstream, &parts, body, true).await
        }
    });
    Front {
        uri: format!("{uri}/iceberg"),
        loads,
        signs,
        _task: task,
    }
}

/// A test's registrar config against Nessie, with its table under Nessie's warehouse location,
/// and what ships its segments.
struct Setup {
    _dir: tempfile::TempDir,
    /// With the S3 server's keys in `store`, straight to Nessie.
    config: RegistrarConfig,
    /// The data store segments are shipped with.
    store: Arc<dyn ObjectStore>,
    log: SegmentLogWriter,
    namespace: String,
    pipeline: String,
    /// The key prefix of the registrar's `url` (under the warehouse location).
    prefix: String,
    bucket: String,
    /// The table's location as a key prefix, once created.
    table_dir: Option<String>,
    shipped: u64,
}

impl Setup {
    fn new(test: &str, nessie: &Nessie) -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let (bucket, root) = nessie
            .location
            .strip_prefix("s3://")
            .and_then(|l| l.split_once('/'))
            .map(|(b, p)| (b.to_string(), p.trim_matches('/').to_string()))
            .expect("THADAM_TEST_NESSIE_LOCATION is s3://bucket/prefix");
        // Short: Nessie's warehouse prefix, s3s-fs's key-length limit.
        let prefix = format!("{root}/{}", common::short_unique("l"));
        let pipeline = common::short_unique("p");
        let namespace = common::short_unique(test);
        let extra = format!("      catalog_warehouse: {}\n", nessie.warehouse);
        let yaml = common::render_yaml(&common::YamlParts {
            dir: dir.path(),
            unsigned: "signed",
            datasets: &["telemetry"],
            pipeline: &pipeline,
            bucket: &bucket,
            prefix: &prefix,
            catalog_uri: &nessie.uri,
            namespace: &namespace,
            create_table: false,
            s3_endpoint: &std::env::var("THADAM_TEST_S3_ENDPOINT").expect("S3 endpoint"),
            extra_iceberg_yaml: &extra,
        });
        let config = Config::from_yaml_str(&yaml, dir.path())
            .expect("test config is valid")
            .registrars
            .remove(0);
        let store = thadam_iceberg::testing::object_store(&config.store, &bucket).expect("store");
        let log = SegmentLogWriter::open(&config.source.catalog).expect("segment log");
        Setup {
            _dir: dir,
            config,
            store,
            log,
            namespace,
            pipeline,
            prefix,
            bucket,
            table_dir: None,
            shipped: 0,
        }
    }

    /// The config without store keys, reaching Nessie through `front`: S3 access only through
    /// what the catalog gives.
    fn keyless_via(&self, front: &Front) -> RegistrarConfig {
        let mut config = self.config.clone();
        config.catalog_uri = front.uri.parse().expect("front uri");
        config.store.access_key_id = None;
        config.store.secret_access_key = None;
        config
    }

    fn table(&self) -> TableName {
        TableName {
            namespace: vec![self.namespace.clone()],
            name: "telemetry".into(),
        }
    }

    /// The shipper's key for segment `segment_id` (outside the table's location).
    fn shipper_key(&self, segment_id: &str) -> String {
        demo::object_key(&self.prefix, &self.pipeline, "telemetry", segment_id)
    }

    /// Ships telemetry segment `n` (`rows` rows) under `key`, else into the table's location
    /// once it exists, else under the shipper's key.
    async fn ship(&mut self, n: u64, rows: usize, key: Option<String>) -> String {
        self.shipped += 1;
        let segment_id = format!("seg-{:06}", self.shipped);
        let key = match (key, &self.table_dir) {
            (Some(key), _) => key,
            (None, Some(dir)) => format!("{dir}/data/{segment_id}.parquet"),
            (None, None) => self.shipper_key(&segment_id),
        };
        let batch = demo::telemetry_batch(n, rows).expect("batch");
        let parquet = demo::write_parquet(std::slice::from_ref(&batch)).expect("parquet");
        demo::ship_segment(
            self.store.as_ref(),
            &mut self.log,
            "telemetry",
            &segment_id,
            &key,
            parquet,
            rows as u64,
        )
        .await
        .expect("ship");
        key
    }

    /// Runs a registrar with `config` until it handled `n` segments.
    async fn register(&self, config: RegistrarConfig, n: u64) {
        let feed =
            thadam_iceberg::protocol::segment_log::SegmentLogTail::open(&config.source.catalog);
        let handle = thadam_iceberg::Registrar::builder(config)
            .feed(feed)
            .tuning(Default::default())
            .start()
            .await
            .expect("registrar starts");
        common::Harness::finish(handle, n).await;
    }

    /// Creates the table with pyiceberg (the telemetry schema, its field IDs) and learns where
    /// Nessie put it.
    async fn create_table(&mut self, nessie: &Nessie) {
        let ident = format!("{}.telemetry", self.namespace);
        let warehouse = nessie.warehouse.clone();
        let out = tokio::task::spawn_blocking(move || {
            common::py::run_bare(&format!("{PY_NESSIE}{PY_CREATE}"), &[&ident, &warehouse])
        })
        .await
        .expect("pyiceberg");
        let location = out.trim().to_string();
        let dir = location
            .strip_prefix(&format!("s3://{}/", self.bucket))
            .unwrap_or_else(|| panic!("{location} is in bucket {}", self.bucket));
        self.table_dir = Some(dir.trim_end_matches('/').to_string());
    }
}

/// pyiceberg connected to Nessie (`sys.argv[2]`: the warehouse) with the S3 server's keys: an
/// independent writer and reader.
const PY_NESSIE: &str = r#"
import json, os, sys
from pyiceberg.catalog import load_catalog
catalog = load_catalog("nessie", **{
    "uri": os.environ["THADAM_TEST_NESSIE_URI"],
    "warehouse": sys.argv[2],
    "s3.endpoint": os.environ["THADAM_TEST_S3_ENDPOINT"],
    "s3.access-key-id": os.environ["THADAM_TEST_S3_ACCESS_KEY"],
    "s3.secret-access-key": os.environ["THADAM_TEST_S3_SECRET_KEY"],
    "s3.region": os.environ.get("THADAM_TEST_S3_REGION", "us-east-1"),
    "s3.path-style-access": "true",
})
"#;

/// Creates table `sys.argv[1]` (and its namespace) with the telemetry schema and its field IDs
/// (`examples/support/demo.rs`); prints its location.
const PY_CREATE: &str = r#"
from pyiceberg.schema import Schema
from pyiceberg.types import (NestedField, TimestamptzType, StringType, LongType, DoubleType,
    IntegerType)
namespace, name = sys.argv[1].split(".")
catalog.create_namespace_if_not_exists(namespace)
schema = Schema(
    NestedField(1, "ts", TimestamptzType(), required=True),
    NestedField(2, "device", StringType(), required=True),
    NestedField(3, "reading_seq", LongType(), required=True),
    NestedField(4, "temperature_c", DoubleType(), required=False),
    NestedField(5, "battery_pct", IntegerType(), required=False),
    NestedField(6, "_wal_epoch", LongType(), required=True),
    NestedField(7, "_wal_pos", LongType(), required=True),
)
table = catalog.create_table(sys.argv[1], schema=schema)
ids = {f.name: f.field_id for f in table.schema().fields}
assert ids == {"ts": 1, "device": 2, "reading_seq": 3, "temperature_c": 4, "battery_pct": 5,
    "_wal_epoch": 6, "_wal_pos": 7}, ids
print(table.location())
"#;

/// What pyiceberg reads of `ident` in Nessie: rows and the data files its scan plans.
fn pyiceberg_view(nessie: &Nessie, ident: &str) -> (u64, Vec<String>) {
    let out = common::py::run_bare(
        &format!(
            "{PY_NESSIE}{}",
            r#"
table = catalog.load_table(sys.argv[1])
files = sorted(t.file.file_path for t in table.scan().plan_files())
rows = table.scan().to_arrow().num_rows
print(json.dumps({"rows": rows, "files": files}))
"#
        ),
        &[ident, &nessie.warehouse],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("pyiceberg's json");
    let files = v["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f.as_str().expect("a path").to_string())
        .collect();
    (v["rows"].as_u64().expect("rows"), files)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_keys_registers_through_nessie_s_signer_and_pyiceberg_reads_it() {
    let Some(nessie) = nessie("a_store_without_keys_registers_through_nessie_s_signer") else {
        return;
    };
    common::assert_no_ambient_aws();
    let mut s = Setup::new("rsok", &nessie);
    s.create_table(&nessie).await;
    let mut keys = Vec::new();
    for n in 0..4 {
        keys.push(s.ship(n, 10, None).await);
    }
    let front = front(&nessie.uri, "telemetry", None).await;
    s.register(s.keyless_via(&front), 4).await;
    let signed = front.signs.load(Ordering::SeqCst);
    // Four footer reads, and the manifest and manifest list of the append: every one through
    // Nessie's signer.
    assert!(signed >= 6, "only {signed} requests were signed by Nessie");

    // The catalog client keeps the signer with the table, and the table is as registered.
    let client = thadam_iceberg::testing::connect(&s.keyless_via(&front))
        .await
        .expect("catalog");
    let table = client
        .load_table(&s.table())
        .await
        .expect("load")
        .expect("the table exists");
    let access = client.access(&s.table()).expect("Nessie gives access");
    assert!(access.has_remote_signing(), "{access:?}");
    let location = table.metadata().location().to_string();
    assert!(
        location.starts_with(&nessie.location),
        "{location} lies in Nessie's warehouse"
    );
    // Read back with the keyless client too: manifests read through the signer.
    common::assert_exactly_once(&table, &s.bucket, &keys).await;

    let ident = format!("{}.telemetry", s.namespace);
    let (rows, files) = tokio::task::spawn_blocking({
        let nessie = Nessie {
            uri: nessie.uri.clone(),
            warehouse: nessie.warehouse.clone(),
            location: nessie.location.clone(),
        };
        move || pyiceberg_view(&nessie, &ident)
    })
    .await
    .expect("pyiceberg");
    assert_eq!(rows, 4 * 10);
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", s.bucket))
        .collect();
    expected.sort();
    assert_eq!(files, expected);
}

/// Runs a keyless registrar through `front` expecting it to stop; returns the error and how
/// long it took.
async fn run_until_fatal(s: &Setup, front: &Front) -> (thadam_iceberg::Error, Duration) {
    let config = s.keyless_via(front);
    let feed = thadam_iceberg::protocol::segment_log::SegmentLogTail::open(&config.source.catalog);
    let started = Instant::now();
    let handle = thadam_iceberg::Registrar::builder(config)
        .feed(feed)
        .tuning(Default::default())
        .start()
        .await
        .expect("registrar starts");
    let err = tokio::time::timeout(Duration::from_secs(120), handle.wait())
        .await
        .expect("the registrar stopped in time (hang guard: a refusal must not be retried forever)")
        .expect_err("the registrar stops when the signer refuses");
    (err, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nessie_refusing_to_sign_outside_the_table_stops_the_registrar_with_auth_failed() {
    let Some(nessie) = nessie("nessie_refusing_to_sign_outside_the_table") else {
        return;
    };
    common::assert_no_ambient_aws();
    let mut s = Setup::new("rsout", &nessie);
    s.create_table(&nessie).await;
    // A segment recorded outside the table's location (inside the warehouse: the shipper's
    // own key): Nessie signs only for the table's own locations.
    let outside = s.shipper_key("seg-x");
    s.ship(1, 10, Some(outside.clone())).await;
    let front = front(&nessie.uri, "telemetry", None).await;
    let (err, took) = run_until_fatal(&s, &front).await;
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    let text = err.to_string();
    assert!(text.contains("URI not allowed for signing"), "{text}");
    assert!(text.contains(&outside), "{text}");
    assert!(
        text.contains(&format!("{}.telemetry", s.namespace)),
        "{text}"
    );
    assert_eq!(
        front.loads.load(Ordering::SeqCst),
        2,
        "one load at start and exactly one reload for a fresh signer"
    );
    assert_eq!(
        front.signs.load(Ordering::SeqCst),
        2,
        "asked to sign once, and once more after the reload"
    );
    assert!(took < Duration::from_secs(60), "stopped in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_answering_401_or_403_stops_the_registrar_with_auth_failed_after_one_reload() {
    let Some(nessie) = nessie("a_signer_answering_401_or_403") else {
        return;
    };
    common::assert_no_ambient_aws();
    for status in [401, 403] {
        let mut s = Setup::new("rsref", &nessie);
        s.create_table(&nessie).await;
        s.ship(1, 10, None).await;
        let front = front(&nessie.uri, "telemetry", Some(status)).await;
        let (err, took) = run_until_fatal(&s, &front).await;
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{status}: {err}");
        let text = err.to_string();
        assert!(text.contains("the test front refuses to sign"), "{text}");
        assert!(text.contains(&format!("{status}")), "{text}");
        assert_eq!(front.loads.load(Ordering::SeqCst), 2, "{status}");
        assert_eq!(front.signs.load(Ordering::SeqCst), 2, "{status}");
        assert!(
            took < Duration::from_secs(60),
            "{status}: stopped in {took:?}"
        );
        // Nothing was registered.
        let client = thadam_iceberg::testing::connect(&s.config)
            .await
            .expect("catalog");
        let table = client
            .load_table(&s.table())
            .await
            .expect("load")
            .expect("table");
        assert_eq!(common::data_files(&table).await.len(), 0, "{status}");
    }
}
