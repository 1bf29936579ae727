//! One committer's append transaction, as the committer drives it, against the fake catalog and
//! an in-memory object store standing in for S3: the segments' bucket and the table's files
//! (manifests and manifest lists, written through the catalog client's FileIO) alike.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use async_trait::async_trait;
use futures::TryStreamExt;
use iceberg::spec::{FormatVersion, ManifestList, TableMetadataRef};
use object_store::ObjectStore;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use parquet::arrow::ArrowWriter;

use super::super::{AttemptInput, Attempted, BatchCommit, Schemas};
use super::fake_catalog::FakeCatalog;
use crate::catalog::TableName;
use crate::catalog::auth::NoAuth;
use crate::catalog::rest::{RestClient, RestClientSettings};
use crate::config::RegistrarConfig;
use crate::error::Result;
use crate::io::clients::S3Clients;
use crate::protocol::footer::SegmentFooter;
use crate::protocol::messages::SchemaReconciled;
use crate::protocol::segment::UploadedSegment;
use crate::runtime::shutdown::{Shutdown, ShutdownTrigger};
use crate::runtime::status::StatusBoard;
use crate::table::committed::SegmentId;
use crate::table::data_files::ReadySegment;
use crate::table::env::Env;
use crate::table::held::HeldTable;
use crate::table::hooks::Hooks;
use crate::table::schema::convert::PARQUET_FIELD_ID_KEY;
use crate::table::summary_keys::SEGMENT_IDS;

/// The table's bucket and location (those of `testing::metadata_with`), as store paths.
const TABLE_URI: &str = "s3://b/t";
const TABLE_KEY: &str = "t";

/// A committer's transaction on table `ns.t` (see the module docs).
pub(super) struct Harness {
    pub catalog: FakeCatalog,
    pub store: Arc<dyn ObjectStore>,
    pub held: HeldTable,
    pub commit: BatchCommit,
    client: RestClient,
    config: RegistrarConfig,
    status: StatusBoard,
    shutdown: Shutdown,
    _stop: ShutdownTrigger,
    hooks: Hooks,
}

impl Harness {
    /// The table empty (one long column `x`, unpartitioned), loaded as a committer starts;
    /// `keys`: the catalog advertises idempotency keys. Retry pauses without jitter, so that
    /// they can be compared: `retry.initial` is 1 s.
    ///
    /// `commit.intents` is off: on a table with no snapshot, a registrar with intents on calls
    /// the roll at its first attempt (`fleet::roll_call`, see [`Harness::with_intents`]), and
    /// these tests are about what the catalog's answers come to.
    pub(super) async fn new(keys: bool) -> Harness {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let catalog = FakeCatalog::start(crate::testing::metadata_with(&[]), keys).await;
        Harness::on(catalog, store, false).await
    }

    /// [`Harness::new`] with `commit.intents` on (the default), as a fleet's node.
    pub(super) async fn with_intents(keys: bool) -> Harness {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let catalog = FakeCatalog::start(crate::testing::metadata_with(&[]), keys).await;
        Harness::on(catalog, store, true).await
    }

    /// A fleet's node (`commit.intents` on) on the table `metadata`, as the catalog has it.
    pub(super) async fn on_table(metadata: iceberg::spec::TableMetadata) -> Harness {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let catalog = FakeCatalog::start(metadata, false).await;
        Harness::on(catalog, store, true).await
    }

    /// [`Harness::on_table`] on the clock `clock`, the node's wall clock and the one its
    /// intents are aged by (`Hooks::node_clock`, `Hooks::clock`).
    pub(super) async fn on_table_at(
        metadata: iceberg::spec::TableMetadata,
        clock: crate::table::hooks::Clock,
    ) -> Harness {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let catalog = FakeCatalog::start(metadata, false).await;
        let hooks = Hooks {
            clock: Some(Arc::clone(&clock)),
            node_clock: Some(clock),
            ..Hooks::default()
        };
        Harness::with_hooks(catalog, store, true, hooks).await
    }

    /// Another registrar (a lane of its own) writing the same table, through the same catalog
    /// and store.
    pub(super) async fn beside(&self) -> Harness {
        Harness::on(self.catalog.clone(), Arc::clone(&self.store), false).await
    }

    async fn on(catalog: FakeCatalog, store: Arc<dyn ObjectStore>, intents: bool) -> Harness {
        Harness::with_hooks(catalog, store, intents, Hooks::default()).await
    }

    async fn with_hooks(
        catalog: FakeCatalog,
        store: Arc<dyn ObjectStore>,
        intents: bool,
        hooks: Hooks,
    ) -> Harness {
        let config = RegistrarConfig::builder()
            .id("lake")
            .pipeline("p1")
            .segments_dir("/data/seg")
            .dataset("t")
            .url("s3://b/seg")
            .catalog_uri(catalog.uri.clone())
            .namespace("ns")
            .retry_jitter(false)
            .commit_intents(intents)
            .build()
            .expect("a valid config");
        let client = RestClient::connect(RestClientSettings {
            catalog_uri: catalog.uri.parse().expect("a URL"),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("an HTTP client"),
            tokens: Arc::new(NoAuth),
            storage_props: HashMap::new(),
            warehouse: None,
            headers: Vec::new(),
            sigv4: None,
        })
        .await
        .expect("connected to the fake catalog")
        .with_s3_clients(Arc::new(S3Clients::fixed(Arc::clone(&store))));
        let name = TableName {
            namespace: vec!["ns".into()],
            name: "t".into(),
        };
        let (stop, shutdown) = crate::runtime::shutdown::channel();
        let mut harness = Harness {
            catalog,
            store,
            held: HeldTable::new(name.clone()),
            commit: BatchCommit::new(name, &config.commit, &hooks),
            client,
            config,
            status: StatusBoard::default(),
            shutdown,
            _stop: stop,
            hooks,
        };
        let (env, held, _) = harness.parts();
        held.load(env, false).await.expect("the table loads");
        harness
    }

    /// What an attempt borrows, and the transaction's own parts, at once.
    fn parts(&mut self) -> (Env<'_>, &mut HeldTable, &mut BatchCommit) {
        let env = Env {
            client: &self.client,
            config: &self.config,
            status: &self.status,
            shutdown: &self.shutdown,
            history: None,
            hooks: &self.hooks,
            store: &self.store,
        };
        (env, &mut self.held, &mut self.commit)
    }

    /// The keys under the table's intent directory (`<url>/_thadam-intents/`).
    pub(super) async fn intents_left(&self) -> Vec<String> {
        use futures::TryStreamExt;
        let dir = object_store::path::Path::from("seg/_thadam-intents");
        self.store
            .list(Some(&dir))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .expect("the in-memory store lists")
    }

    /// The committer stops: the intents' deletes are done.
    pub(super) async fn stop(&mut self) {
        let (env, held, commit) = self.parts();
        commit.abandon(env, held).await;
    }

    /// One attempt at `batch`, as the committer makes it (no pause is waited: the next
    /// attempt may be made at once, whatever `retry_at` says).
    pub(super) async fn attempt(&mut self, batch: &[ReadySegment]) -> Result<Attempted> {
        let (env, held, commit) = self.parts();
        let local = |_: u64, _: &str| -> Option<SegmentId> { None };
        let input = AttemptInput {
            batch,
            waiting: batch.len(),
            local: &local,
        };
        commit.attempt(env, held, &Fits, input).await
    }

    /// The segment ids each snapshot of the table registers (its summary's
    /// `thadam.segment-ids`), oldest first.
    pub(super) fn registered(&self) -> Vec<Vec<SegmentId>> {
        let metadata = self.catalog.metadata();
        let mut snapshots: Vec<_> = metadata.snapshots().collect();
        snapshots.sort_by_key(|s| s.sequence_number());
        snapshots
            .iter()
            .map(|s| {
                let ids = s.summary().additional_properties.get(SEGMENT_IDS);
                ids.map(|v| crate::testing::decode_ids(v))
                    .unwrap_or_default()
            })
            .collect()
    }

    /// The objects under the table's metadata directory: the manifests and manifest lists the
    /// attempts wrote (the fake catalog keeps its metadata in memory).
    pub(super) async fn table_files(&self) -> BTreeSet<String> {
        let prefix = ObjectPath::from(format!("{TABLE_KEY}/metadata"));
        self.store
            .list(Some(&prefix))
            .map_ok(|meta| format!("s3://b/{}", meta.location))
            .try_collect()
            .await
            .expect("the store lists")
    }

    /// The files the table's snapshots reference under its metadata directory: their manifest
    /// lists and the manifests those list.
    pub(super) async fn referenced(&self) -> BTreeSet<String> {
        let metadata = self.catalog.metadata();
        let mut files = BTreeSet::new();
        for snapshot in metadata.snapshots() {
            let list = snapshot.manifest_list().to_string();
            let key = list
                .strip_prefix("s3://b/")
                .expect("a manifest list in the table's bucket");
            let bytes = self
                .store
                .get(&ObjectPath::from(key))
                .await
                .expect("the manifest list is stored")
                .bytes()
                .await
                .expect("read");
            let entries = ManifestList::parse_with_version(&bytes, FormatVersion::V2)
                .expect("a manifest list");
            files.extend(
                entries
                    .entries()
                    .iter()
                    .map(|m| m.manifest_path.clone())
                    .filter(|p| p.starts_with(TABLE_URI)),
            );
            files.insert(list);
        }
        files
    }
}

/// The ids the summary of a snapshot that registers `batch` names, in order.
pub(super) fn ids(batch: &[ReadySegment]) -> Vec<SegmentId> {
    batch
        .iter()
        .map(|r| SegmentId::of(&r.segment.object_key))
        .collect()
}

/// The seqs of `segments`.
pub(super) fn seqs(segments: &[ReadySegment]) -> Vec<u64> {
    segments.iter().map(|r| r.segment.seq).collect()
}

/// The seqs of `segments`, as a set.
pub(super) fn seq_set(segments: &[UploadedSegment]) -> HashSet<u64> {
    segments.iter().map(|s| s.seq).collect()
}

/// Segment `seq` of table `t`: a Parquet file of one row of `x` (field id 1, the table's long
/// column) at `seg/{seq}.parquet`, with its footer as the committer reads it.
pub(super) fn ready(seq: u64) -> ReadySegment {
    let field = Field::new("x", DataType::Int64, true).with_metadata(HashMap::from([(
        PARQUET_FIELD_ID_KEY.to_string(),
        "1".to_string(),
    )]));
    let schema = Arc::new(Schema::new(vec![field]));
    let column: ArrayRef = Arc::new(Int64Array::from(vec![seq as i64]));
    let batch = RecordBatch::try_new(Arc::clone(&schema), vec![column]).expect("a batch");
    let mut file = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut file, schema, None).expect("a writer");
    writer.write(&batch).expect("written");
    writer.close().expect("closed");
    let key = format!("seg/{seq}.parquet");
    let (metadata, arrow_schema) = crate::io::footer::decode_file(&key, &file).expect("its footer");
    let size = file.len() as u64;
    ReadySegment {
        segment: UploadedSegment {
            file_size: size,
            ..crate::testing::segment(seq, "t", &key)
        },
        footer: Arc::new(SegmentFooter {
            metadata: Arc::new(metadata),
            arrow_schema: Arc::new(arrow_schema),
            object_size: size,
            bytes_read: size,
        }),
    }
}

/// The schema merger of a table whose schema takes every file as it is: no creation, no
/// schema commit.
struct Fits;

#[async_trait]
impl Schemas for Fits {
    async fn reconcile(
        &self,
        _current: Option<TableMetadataRef>,
        _footer: Arc<SegmentFooter>,
    ) -> Result<SchemaReconciled> {
        Ok(SchemaReconciled {
            table: None,
            change: None,
        })
    }
}
