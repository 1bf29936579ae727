//! Shared harness for tests against the real servers (the Iceberg REST fixture and the S3 server
//! that `scripts/test` starts). Every test works in its own namespace, pipeline and prefix, so
//! tests run in parallel against one catalog.
#![allow(dead_code)]

#[path = "../../examples/support/demo.rs"]
pub mod demo;
pub mod fault_proxy;
pub mod fleet;
pub mod forward;
pub mod hold_proxy;
pub mod logs;
pub mod metrics;
pub mod py;
pub mod relay;
pub mod s3_front;
pub mod store_faults;
pub mod tls;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use iceberg::table::Table;
use object_store::ObjectStore;
use thadam_iceberg::config::{Config, RegistrarConfig};
use thadam_iceberg::protocol::segment_log::SegmentLogWriter;
use thadam_iceberg::runtime::status::RegistrarStatus;
pub use thadam_iceberg::testing::segment;
use thadam_iceberg::testing::{RestClient, TableName};
use thadam_iceberg::{ChannelFeed, FeedSender, Registrar, RegistrarHandle, UploadedSegment};

/// Where the servers are. Fails loudly (never skips) when they are not running.
pub struct ServerEnv {
    pub catalog_uri: String,
    pub s3_endpoint: String,
    pub bucket: String,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the REST fixture and the S3 server. Run them with \
             `scripts/test` (installs and starts both), or start the servers with \
             `scripts/servers start DIR && source DIR/env` and run cargo test again"
        )
    })
}

impl ServerEnv {
    pub fn get() -> ServerEnv {
        ServerEnv {
            catalog_uri: var("THADAM_TEST_CATALOG_URI"),
            s3_endpoint: var("THADAM_TEST_S3_ENDPOINT"),
            bucket: var("THADAM_TEST_BUCKET"),
        }
    }
}

/// The catalogs the catalog-facing tests run against (`tests/catalogs.rs` runs each of its
/// tests on all three): the Apache Iceberg REST fixture, Project Nessie and SeaweedFS's own
/// catalog, all started by `scripts/servers`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Catalog {
    Fixture,
    Nessie,
    /// SeaweedFS's Iceberg catalog: tables in its table bucket, on its own S3 (the suite's S3
    /// server unless `THADAM_S3=s3s-fs`), authentication required.
    SeaweedFs,
}

impl Catalog {
    /// The catalog's REST base URI. Fails loudly when its server is not running.
    pub fn uri(self) -> String {
        match self {
            Catalog::Fixture => var("THADAM_TEST_CATALOG_URI"),
            Catalog::Nessie => var("THADAM_TEST_NESSIE_URI"),
            Catalog::SeaweedFs => var("THADAM_TEST_SEAWEEDFS_URI"),
        }
    }

    /// The S3 endpoint of the tables in this catalog (SeaweedFS's catalog reads and writes its
    /// own S3 only).
    pub fn s3_endpoint(self) -> String {
        match self {
            Catalog::Fixture | Catalog::Nessie => var("THADAM_TEST_S3_ENDPOINT"),
            Catalog::SeaweedFs => var("THADAM_TEST_SEAWEEDFS_S3_ENDPOINT"),
        }
    }

    /// The iceberg sink keys that reach this catalog, beyond `catalog_uri` (each line indented
    /// by six spaces): SeaweedFS's wants its table bucket as `warehouse` and the S3 keys as
    /// OAuth2 client credentials.
    pub fn connection_yaml(self) -> &'static str {
        match self {
            Catalog::Fixture | Catalog::Nessie => "",
            Catalog::SeaweedFs => {
                "      catalog_warehouse: \"${env:THADAM_TEST_SEAWEEDFS_WAREHOUSE}\"\n      \
                 catalog_credential:\n        \
                 client_id: \"${env:THADAM_TEST_S3_ACCESS_KEY}\"\n        \
                 client_secret: \"${env:THADAM_TEST_S3_SECRET_KEY}\"\n"
            }
        }
    }

    /// What pyiceberg needs, beyond the catalog URI, to reach this catalog and its tables'
    /// storage: environment variables [`py::PRELUDE`] reads.
    pub fn py_env(self) -> Vec<(&'static str, String)> {
        let mut env = vec![("THADAM_TEST_S3_ENDPOINT", self.s3_endpoint())];
        if self == Catalog::SeaweedFs {
            env.push((
                "THADAM_TEST_PY_WAREHOUSE",
                var("THADAM_TEST_SEAWEEDFS_WAREHOUSE"),
            ));
            env.push((
                "THADAM_TEST_PY_CREDENTIAL",
                format!(
                    "{}:{}",
                    var("THADAM_TEST_S3_ACCESS_KEY"),
                    var("THADAM_TEST_S3_SECRET_KEY")
                ),
            ));
        }
        env
    }

    /// Whether this run leaves the catalog out: only Nessie, and only when asked for with
    /// `THADAM_NESSIE=0` (scripts/servers then does not start it). Never silently.
    pub fn skipped(self) -> bool {
        let off = self == Catalog::Nessie && std::env::var("THADAM_NESSIE").as_deref() == Ok("0");
        if off {
            eprintln!("skipped: THADAM_NESSIE=0 leaves Project Nessie out of this run");
        }
        off
    }
}

/// No ambient AWS credentials may be what makes the registrar's S3 requests pass: the tests of
/// vended credentials and remote signing prove that what the catalog gives alone reaches S3.
pub fn assert_no_ambient_aws() {
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ] {
        assert!(
            std::env::var_os(var).is_none(),
            "{var} is set in the test process: unset it, this test proves that what the catalog \
             gives (vended credentials, remote signing) alone reaches S3"
        );
    }
    if let Some(home) = std::env::var_os("HOME").map(std::path::PathBuf::from) {
        assert!(
            !home.join(".aws/credentials").exists(),
            "~/.aws/credentials exists: this test proves that what the catalog gives alone \
             reaches S3"
        );
    }
}

/// A unique, catalog-safe name for this test run.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// A short unique name: `prefix` and 8 hex digits.
pub fn short_unique(prefix: &str) -> String {
    format!(
        "{prefix}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

pub struct Options {
    pub create_table: bool,
    pub datasets: Vec<&'static str>,
    /// Namespace levels (a unique first level is prepended).
    pub namespace_tail: Vec<&'static str>,
    pub unsigned: &'static str,
    pub extra_iceberg_yaml: String,
    /// The catalog the registrar (and pyiceberg, through [`Harness::py`]) talks to.
    pub catalog: Catalog,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_table: true,
            datasets: vec!["telemetry"],
            namespace_tail: vec![],
            unsigned: "signed",
            extra_iceberg_yaml: String::new(),
            catalog: Catalog::Fixture,
        }
    }
}

/// The pieces of a test config: a parquet sink, its shipper, and the iceberg sink.
pub struct YamlParts<'a> {
    pub dir: &'a std::path::Path,
    pub unsigned: &'a str,
    pub datasets: &'a [&'a str],
    pub pipeline: &'a str,
    pub bucket: &'a str,
    pub prefix: &'a str,
    pub catalog_uri: &'a str,
    pub namespace: &'a str,
    pub create_table: bool,
    pub s3_endpoint: &'a str,
    /// Extra keys of the iceberg sink, each line indented by six spaces.
    pub extra_iceberg_yaml: &'a str,
}

/// The thadam YAML of a test config (S3 keys as `${env:...}` references).
pub fn render_yaml(p: &YamlParts<'_>) -> String {
    format!(
        r#"
sinks:
  - id: local
    kind: parquet
    config:
      dir: {dir}
      unsigned: {unsigned}
      datasets: [{datasets}]
  - id: s3
    kind: object_store
    config:
      from: local
      pipeline: {pipeline}
      url: s3://{bucket}/{prefix}
  - id: iceberg
    kind: iceberg
    config:
      from: local
      pipeline: {pipeline}
      catalog_uri: {catalog}
      url: s3://{bucket}/{prefix}
      namespace: {namespace}
      create_table: {create}
      store:
        endpoint: {s3}
        region: us-east-1
        allow_http: true
        access_key_id: "${{env:THADAM_TEST_S3_ACCESS_KEY}}"
        secret_access_key: "${{env:THADAM_TEST_S3_SECRET_KEY}}"
      retry: {{ initial: 100ms, max: 2s, jitter: true }}
{extra}
"#,
        dir = p.dir.display(),
        unsigned = p.unsigned,
        datasets = p.datasets.join(", "),
        pipeline = p.pipeline,
        bucket = p.bucket,
        prefix = p.prefix,
        catalog = p.catalog_uri,
        namespace = p.namespace,
        create = p.create_table,
        s3 = p.s3_endpoint,
        extra = p.extra_iceberg_yaml,
    )
}

/// An example binary (`target/<profile>/examples/NAME`), next to this test binary's `deps/`.
/// `cargo test --all-targets` (what scripts/test runs) builds the examples.
pub fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .expect("target dir")
        .join("examples")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: build the examples first (`cargo test --all-targets`, as scripts/test \
         does, or `cargo build --examples`)",
        bin.display()
    );
    bin
}

pub struct Harness {
    pub env: ServerEnv,
    pub dir: tempfile::TempDir,
    pub config: RegistrarConfig,
    pub store: Arc<dyn ObjectStore>,
    pub log: SegmentLogWriter,
    pub namespace: Vec<String>,
    pub pipeline: String,
    pub prefix: String,
    /// The YAML the config was loaded from (secrets as `${env:...}` references).
    pub yaml: String,
    pub catalog: Catalog,
    shipped: u64,
}

impl Harness {
    pub fn new(test: &str) -> Harness {
        Self::with(test, Options::default())
    }

    pub fn with(test: &str, opts: Options) -> Harness {
        let mut env = ServerEnv::get();
        env.catalog_uri = opts.catalog.uri();
        env.s3_endpoint = opts.catalog.s3_endpoint();
        let dir = tempfile::tempdir().expect("tempdir");
        let mut namespace = vec![unique(test)];
        namespace.extend(opts.namespace_tail.iter().map(|s| s.to_string()));
        // Short on purpose: s3s-fs stores multipart-upload state in a file named after the
        // base64 of the object key, so keys over ~127 characters fail there (pyiceberg uploads
        // metadata as multipart: `{prefix}/thadam/v1/{pipeline}/{dataset}/metadata/snap-...`).
        let pipeline = short_unique("p");
        let prefix = short_unique("l");
        let yaml = render_yaml(&YamlParts {
            dir: dir.path(),
            unsigned: opts.unsigned,
            datasets: &opts.datasets,
            pipeline: &pipeline,
            bucket: &env.bucket,
            prefix: &prefix,
            catalog_uri: &env.catalog_uri,
            namespace: &namespace.join("."),
            create_table: opts.create_table,
            s3_endpoint: &env.s3_endpoint,
            extra_iceberg_yaml: &format!(
                "{}{}",
                opts.catalog.connection_yaml(),
                opts.extra_iceberg_yaml
            ),
        });
        let config = Config::from_yaml_str(&yaml, dir.path())
            .expect("test config is valid")
            .registrars
            .remove(0);
        let store = thadam_iceberg::testing::object_store(&config.store, &config.url.bucket)
            .expect("object store");
        let log = SegmentLogWriter::open(&config.source.catalog).expect("segment log");
        Harness {
            env,
            dir,
            config,
            store,
            log,
            namespace,
            pipeline,
            prefix,
            yaml,
            catalog: opts.catalog,
            shipped: 0,
        }
    }

    /// This harness's config with the catalog reached through `catalog_uri` (a proxy).
    pub fn config_via(&self, catalog_uri: &str) -> RegistrarConfig {
        let mut config = self.config.clone();
        config.catalog_uri = catalog_uri.parse().expect("catalog uri");
        config
    }

    /// Writes the config to a file in the test's directory (for the standalone runner).
    pub fn config_file(&self) -> std::path::PathBuf {
        let path = self.dir.path().join("thadam.yaml");
        std::fs::write(&path, &self.yaml).expect("write config");
        path
    }

    pub fn table_name(&self, dataset: &str) -> TableName {
        TableName {
            namespace: self.namespace.clone(),
            name: dataset.to_string(),
        }
    }

    /// Ships one segment made of `batch` for `dataset`; returns its object key.
    pub async fn ship(&mut self, dataset: &str, batch: &RecordBatch) -> String {
        self.shipped += 1;
        let segment_id = format!("seg-{:06}", self.shipped);
        let key = demo::object_key(&self.prefix, &self.pipeline, dataset, &segment_id);
        let parquet = demo::write_parquet(std::slice::from_ref(batch)).expect("parquet");
        demo::ship_segment(
            self.store.as_ref(),
            &mut self.log,
            dataset,
            &segment_id,
            &key,
            parquet,
            batch.num_rows() as u64,
        )
        .await
        .expect("ship");
        key
    }

    /// Uploads telemetry segment number `n` (`rows` rows) as an embedding runtime does, with its
    /// own catalog: object `own-{n}` in the store, no segment log record. Returns its record, at
    /// `seq`, for the test to feed.
    pub async fn upload_own(&self, n: u64, rows: usize, seq: u64) -> UploadedSegment {
        let id = format!("own-{n}");
        let key = demo::object_key(&self.prefix, &self.pipeline, "telemetry", &id);
        let parquet = demo::write_parquet(&[demo::telemetry_batch(n, rows).expect("batch")])
            .expect("parquet");
        let size = parquet.len() as u64;
        self.store
            .put(
                &object_store::path::Path::from(key.as_str()),
                parquet.into(),
            )
            .await
            .expect("upload");
        UploadedSegment {
            segment_id: id,
            file_size: size,
            row_count: rows as u64,
            ..segment(seq, "telemetry", &key)
        }
    }

    /// Ships telemetry segment number `n` (rows `n*rows ..`).
    pub async fn ship_telemetry(&mut self, n: u64, rows: usize) -> String {
        let batch = demo::telemetry_batch(n, rows).expect("batch");
        self.ship("telemetry", &batch).await
    }

    /// Ships telemetry segments number `from..from + n`, `rows` rows each; returns their keys.
    pub async fn ship_many(&mut self, from: u64, n: u64, rows: usize) -> Vec<String> {
        let mut keys = Vec::new();
        for i in from..from + n {
            keys.push(self.ship_telemetry(i, rows).await);
        }
        keys
    }

    /// Creates the table through a first, fault-free registration of one extra segment (so
    /// fault plans hit what they name, not the creation); returns its key.
    pub async fn register_one(&mut self) -> String {
        let key = self.ship_telemetry(1000, 5).await;
        self.run_until_handled(1).await;
        key
    }

    pub async fn start(&self) -> RegistrarHandle {
        Registrar::builder(self.config.clone())
            .start()
            .await
            .expect("registrar starts")
    }

    /// Starts a registrar over this harness's segment log with `config` and `tuning`.
    pub async fn start_with(
        &self,
        config: RegistrarConfig,
        tuning: thadam_iceberg::Tuning,
    ) -> RegistrarHandle {
        let feed =
            thadam_iceberg::protocol::segment_log::SegmentLogTail::open(&config.source.catalog);
        Registrar::builder(config)
            .feed(feed)
            .tuning(tuning)
            .start()
            .await
            .expect("registrar starts")
    }

    /// Starts a registrar with `tuning` fed through a channel of `capacity`, as an embedding
    /// runtime with its own catalog feeds it (not from the segment log); returns the channel's
    /// sending end with it.
    pub async fn start_fed(
        &self,
        tuning: thadam_iceberg::Tuning,
        capacity: usize,
    ) -> (FeedSender, RegistrarHandle) {
        let (sender, feed) = ChannelFeed::new(capacity);
        let handle = Registrar::builder(self.config.clone())
            .feed(feed)
            .tuning(tuning)
            .start()
            .await
            .expect("start");
        (sender, handle)
    }

    /// Runs `handle` until it has handled `n` segments, then stops it cleanly.
    pub async fn finish(handle: RegistrarHandle, n: u64) -> RegistrarStatus {
        let status = wait_handled(&handle, n).await;
        stop(handle).await;
        status
    }

    /// Runs a registrar until it has handled `n` segments, then stops it cleanly.
    pub async fn run_until_handled(&self, n: u64) -> RegistrarStatus {
        Self::finish(self.start().await, n).await
    }

    /// Runs a registrar expecting it to stop on a fatal error, which is returned.
    pub async fn run_until_fatal(&self) -> thadam_iceberg::Error {
        let handle = self.start().await;
        let result = tokio::time::timeout(Duration::from_secs(120), handle.wait())
            .await
            .expect("registrar stopped in time (hang guard)");
        result.expect_err("the registrar should have stopped with a fatal error")
    }

    pub async fn client(&self) -> RestClient {
        thadam_iceberg::testing::connect(&self.config)
            .await
            .expect("catalog connection")
    }

    /// Table maintenance: expires every snapshot of `dataset`'s table but the current one
    /// (`remove-snapshots`, metadata only), as an expiry job would.
    pub async fn expire_all_but_current(&self, dataset: &str) {
        let table = self.table(dataset).await.expect("table");
        let current = table.metadata().current_snapshot_id().expect("current");
        let expired: Vec<i64> = table
            .metadata()
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| *id != current)
            .collect();
        self.client()
            .await
            .commit(
                &self.table_name(dataset),
                vec![iceberg::TableRequirement::UuidMatch {
                    uuid: table.metadata().uuid(),
                }],
                vec![iceberg::TableUpdate::RemoveSnapshots {
                    snapshot_ids: expired,
                }],
                None,
            )
            .await
            .expect("expire snapshots");
    }

    /// Runs `script` in pyiceberg (after [`py::PRELUDE`]) connected to this harness's catalog.
    pub fn py(&self, script: &str, args: &[&str]) -> String {
        py::run_for(self.catalog, &self.env.catalog_uri, script, args)
    }

    /// What pyiceberg reads of `dataset`'s table in this harness's catalog.
    pub fn py_view(&self, dataset: &str) -> py::View {
        py::view_for(
            self.catalog,
            &self.env.catalog_uri,
            &self.table_name(dataset).to_string(),
        )
    }

    pub async fn table(&self, dataset: &str) -> Option<Table> {
        self.client()
            .await
            .load_table(&self.table_name(dataset))
            .await
            .expect("load table")
    }
}

/// The data file paths a scan of the current snapshot plans, optionally filtered (pruned by the
/// files' column metrics), sorted, duplicates included: a file registered twice appears twice.
pub async fn planned_files(table: &Table, filter: Option<iceberg::expr::Predicate>) -> Vec<String> {
    if table.metadata().current_snapshot().is_none() {
        return Vec::new();
    }
    let mut scan = table.scan();
    if let Some(filter) = filter {
        scan = scan.with_filter(filter);
    }
    let mut files: Vec<String> = scan
        .build()
        .expect("scan")
        .plan_files()
        .await
        .expect("plan")
        .map_ok(|t| t.data_file_path().to_string())
        .try_collect()
        .await
        .expect("files");
    files.sort();
    files
}

/// The manifest list of the table's current snapshot.
pub async fn current_manifest_list(table: &Table) -> iceberg::spec::ManifestList {
    let snapshot = table
        .metadata()
        .current_snapshot()
        .expect("a snapshot")
        .clone();
    table
        .manifest_list_reader(&snapshot)
        .load()
        .await
        .expect("manifest list")
}

/// Every manifest entry's data file in the current snapshot, with the spec ID of the manifest
/// that holds it (read from the manifests themselves, not through scan planning).
pub async fn manifest_entries(table: &Table) -> Vec<(i32, iceberg::spec::DataFile)> {
    let list = current_manifest_list(table).await;
    let mut files = Vec::new();
    for listed in list.entries() {
        let manifest = listed
            .load_manifest(table.file_io())
            .await
            .expect("manifest");
        files.extend(
            manifest
                .entries()
                .iter()
                .map(|e| (listed.partition_spec_id, e.data_file().clone())),
        );
    }
    files
}

/// Every data file path of the current snapshot, duplicates included.
pub async fn data_file_list(table: &Table) -> Vec<String> {
    planned_files(table, None).await
}

/// The distinct data files of the table's current snapshot.
pub async fn data_files(table: &Table) -> BTreeSet<String> {
    planned_files(table, None).await.into_iter().collect()
}

/// Asserts every key is registered exactly once and nothing else is in the table.
pub async fn assert_exactly_once(table: &Table, bucket: &str, keys: &[String]) {
    let files = data_file_list(table).await;
    let mut expected: Vec<String> = keys.iter().map(|k| format!("s3://{bucket}/{k}")).collect();
    expected.sort();
    let mut dedup = files.clone();
    dedup.dedup();
    assert_eq!(dedup.len(), files.len(), "a data file is registered twice");
    assert_eq!(
        files, expected,
        "the table holds exactly the shipped segments"
    );
}

/// Every row of the table, read through the Iceberg Rust client.
pub async fn read_all(table: &Table) -> Vec<RecordBatch> {
    if table.metadata().current_snapshot().is_none() {
        return Vec::new();
    }
    table
        .scan()
        .build()
        .expect("scan")
        .to_arrow()
        .await
        .expect("arrow stream")
        .try_collect()
        .await
        .expect("batches")
}

pub fn row_count(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

/// Telemetry segment `n` with one more column, `extra` (field ID 8, nullable long): a schema
/// change that every later writer of the table can agree on.
pub fn extended_batch(n: u64, rows: usize) -> RecordBatch {
    let base = demo::telemetry_batch(n, rows).expect("batch");
    let mut fields: Vec<arrow_schema::FieldRef> = base.schema().fields().iter().cloned().collect();
    fields.push(Arc::new(demo::field(
        "extra",
        arrow_schema::DataType::Int64,
        true,
        8,
    )));
    let mut columns = base.columns().to_vec();
    columns.push(Arc::new(arrow_array::Int64Array::from_iter_values(
        0..rows as i64,
    )));
    RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns)
        .expect("extended batch")
}

/// One segment per commit, so a fault plan maps onto commits one to one.
pub fn one_per_commit() -> thadam_iceberg::Tuning {
    thadam_iceberg::Tuning {
        max_batch: 1,
        ..Default::default()
    }
}

/// Waits (hang guard only) until `handle` has handled `n` segments; leaves it running.
pub async fn wait_handled(handle: &RegistrarHandle, n: u64) -> RegistrarStatus {
    tokio::time::timeout(
        Duration::from_secs(180),
        handle.wait_until(|s| s.handled() >= n),
    )
    .await
    .expect("registrar caught up in time (hang guard)")
    .expect("registrar ran without a fatal error")
}

/// Stops `handle` and waits until it stopped cleanly.
pub async fn stop(handle: RegistrarHandle) {
    handle.stop();
    handle.wait().await.expect("clean stop");
}

/// The keys of every object under `prefix` in the test bucket.
pub async fn keys_under(store: &dyn ObjectStore, prefix: &str) -> Vec<String> {
    store
        .list(Some(&object_store::path::Path::from(prefix)))
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list the bucket")
}

/// Every object under the table's `metadata/` folder, as `s3://bucket/key`.
pub async fn metadata_objects(h: &Harness, table: &iceberg::table::Table) -> Vec<String> {
    let root = format!("s3://{}/", h.env.bucket);
    let location = table.metadata().location().trim_end_matches('/');
    let relative = location
        .strip_prefix(&root)
        .expect("the table lives in the test bucket");
    let prefix = object_store::path::Path::from(format!("{relative}/metadata"));
    let objects: Vec<object_store::ObjectMeta> = h
        .store
        .list(Some(&prefix))
        .try_collect()
        .await
        .expect("list the metadata folder");
    objects
        .iter()
        .map(|o| format!("{root}{}", o.location))
        .collect()
}

/// The manifest lists of the table's snapshots, and the manifests they name.
pub async fn referenced(
    table: &iceberg::table::Table,
) -> (
    std::collections::BTreeSet<String>,
    std::collections::BTreeSet<String>,
) {
    let mut lists = std::collections::BTreeSet::new();
    let mut manifests = std::collections::BTreeSet::new();
    for snapshot in table.metadata().snapshots() {
        lists.insert(snapshot.manifest_list().to_string());
        let list = table
            .manifest_list_reader(snapshot)
            .load()
            .await
            .expect("manifest list");
        manifests.extend(list.entries().iter().map(|m| m.manifest_path.clone()));
    }
    (lists, manifests)
}
