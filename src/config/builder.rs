//! A registrar config made in code, for a host that keeps its settings elsewhere than in a
//! thadam YAML file: [`RegistrarConfig::builder`].
//!
//! The builder writes the same three sinks a YAML file has (the parquet sink, its object_store
//! shipper and the iceberg sink) and hands them to the same validation as [`super::Config::load`].
//! So a config made in code passes exactly the rules a file does, and fails with the same
//! `config.invalid` message naming the same key (`sinks` ids are those of the builder: see
//! [`ConfigBuilder::id`]).
//!
//! The common keys have typed setters (`commit_max_segments(200)`, `commit_linger(Duration)`,
//! `on_bad_segment(BadSegmentPolicy::Quarantine)`, ...), so the compiler checks the type. A typed
//! setter only writes its value as YAML under the key's path: the rules on the value (greater
//! than 0, at most an hour, http endpoints only with `store_allow_http(true)`, ...) are checked by
//! `build` in one place, the same place a file's are. Every other key goes through
//! [`ConfigBuilder::set`], by its YAML path; a later setter of a key replaces an earlier one,
//! whichever way each was written.
//!
//! ```
//! use std::time::Duration;
//!
//! use thadam_iceberg::config::{BadSegmentPolicy, RegistrarConfig, Secret};
//! let config = RegistrarConfig::builder()
//!     .pipeline("edge-7")
//!     .segments_dir("/var/lib/thadam/segments")
//!     .dataset("telemetry")
//!     .url("s3://lake/raw")
//!     .catalog_uri("https://catalog.example/api/catalog")
//!     .catalog_token(Secret::new("t0ken"))
//!     .namespace("edge.raw")
//!     .commit_max_segments(200)
//!     .commit_linger(Duration::from_secs(2))
//!     .store_region("eu-west-1")
//!     .on_bad_segment(BadSegmentPolicy::Quarantine)
//!     .set("catalog_headers.X-Iceberg-Access-Delegation", "vended-credentials")
//!     .build()
//!     .expect("valid");
//! assert_eq!(config.commit.max_segments, 200);
//! assert_eq!(config.commit.linger, Duration::from_secs(2));
//! assert_eq!(config.namespace, ["edge", "raw"]);
//! ```
//!
//! Values are YAML values, so `${env:NAME}` and `${file:PATH}` references are resolved as in a
//! file; relative paths are relative to [`ConfigBuilder::base_dir`] (default: the working
//! directory).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_yaml_ng::{Mapping, Value};

use super::partition_by::PartitionTerm;
use super::raw::RawSink;
use super::types::{BadSegmentPolicy, RegistrarConfig, SnapshotRetention, TableLocation};
use super::validate;
use crate::error::{Error, Result};
use crate::secret::Secret;

/// The parquet and object_store sinks' ids in a built config (they appear in error messages).
const SOURCE_ID: &str = "segments";
const SHIPPER_ID: &str = "shipper";

/// Builds a [`RegistrarConfig`] in code; see the module docs.
#[derive(Clone)]
pub struct ConfigBuilder {
    id: String,
    base_dir: Option<PathBuf>,
    source: Mapping,
    datasets: Vec<Value>,
    shipper_url: Option<Value>,
    iceberg: Mapping,
    /// The first `set` whose value could not be made a YAML value, reported by `build`.
    invalid: Option<Error>,
}

/// Keys only: values may be secrets.
impl fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<String> = self
            .iceberg
            .keys()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
        f.debug_struct("ConfigBuilder")
            .field("id", &self.id)
            .field("keys", &keys)
            .finish_non_exhaustive()
    }
}

impl RegistrarConfig {
    /// A config made in code, checked by the same rules as a YAML file.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            id: "iceberg".to_string(),
            base_dir: None,
            source: Mapping::new(),
            datasets: Vec::new(),
            shipper_url: None,
            iceberg: Mapping::new(),
            invalid: None,
        }
    }
}

impl ConfigBuilder {
    /// The iceberg sink's id (default `iceberg`): errors name it, and `id` is part of the
    /// writer id recorded in every snapshot.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Where relative paths (and `${file:}` references) are resolved from.
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// The parquet sink's `dir`: where the pipeline writes segments. Its segment catalog is
    /// `{dir}/segment-catalog.log` unless [`ConfigBuilder::segment_catalog`] says otherwise.
    pub fn segments_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.source.insert("dir".into(), path_value(dir.as_ref()));
        self
    }

    /// The parquet sink's `catalog`: the segment catalog log the registrar tails.
    pub fn segment_catalog(mut self, path: impl AsRef<Path>) -> Self {
        self.source
            .insert("catalog".into(), path_value(path.as_ref()));
        self
    }

    /// One dataset of the parquet sink (its table is `{namespace}.{name}`); call once per dataset.
    pub fn dataset(mut self, name: impl Into<String>) -> Self {
        self.datasets.push(Value::String(name.into()));
        self
    }

    /// `pipeline`, the shipper's and the registrar's.
    pub fn pipeline(mut self, pipeline: impl Into<String>) -> Self {
        let pipeline = Value::String(pipeline.into());
        self.iceberg.insert("pipeline".into(), pipeline);
        self
    }

    /// `url`: the shipper's `s3://bucket[/prefix]`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        let url = Value::String(url.into());
        self.shipper_url = Some(url.clone());
        self.iceberg.insert("url".into(), url);
        self
    }

    /// `catalog_uri`: the REST catalog.
    pub fn catalog_uri(self, uri: impl Into<String>) -> Self {
        self.set("catalog_uri", uri.into())
    }

    /// `catalog_token`: a static bearer token.
    pub fn catalog_token(self, token: Secret) -> Self {
        self.set("catalog_token", token.expose())
    }

    /// `namespace`: its levels joined by `.` (`edge.raw`).
    pub fn namespace(self, namespace: impl Into<String>) -> Self {
        self.set("namespace", namespace.into())
    }

    /// `create_table`.
    pub fn create_table(self, create: bool) -> Self {
        self.set("create_table", create)
    }

    /// `catalog_warehouse`: the warehouse sent on `GET /v1/config`.
    pub fn catalog_warehouse(self, warehouse: impl Into<String>) -> Self {
        self.set("catalog_warehouse", warehouse.into())
    }

    /// `table_location`: who chooses where a created table lives.
    pub fn table_location(self, location: TableLocation) -> Self {
        self.set("table_location", location.as_str())
    }

    /// `partition_by`: the partition terms of a table the registrar creates, in order.
    pub fn partition_by(self, terms: impl IntoIterator<Item = PartitionTerm>) -> Self {
        let terms: Vec<String> = terms.into_iter().map(|t| t.to_string()).collect();
        self.set("partition_by", terms)
    }

    /// `commit.max_segments`: the most segments in one snapshot.
    pub fn commit_max_segments(self, segments: usize) -> Self {
        self.set("commit.max_segments", segments)
    }

    /// `commit.max_bytes`: the most bytes of data files in one snapshot.
    pub fn commit_max_bytes(self, bytes: u64) -> Self {
        self.set("commit.max_bytes", bytes)
    }

    /// `commit.linger`: how long a batch that is not full may wait for more segments.
    pub fn commit_linger(self, linger: Duration) -> Self {
        self.set("commit.linger", duration_text(linger))
    }

    /// `commit.intents`: whether this node publishes intents in a fleet that takes turns.
    pub fn commit_intents(self, on: bool) -> Self {
        self.set("commit.intents", on)
    }

    /// `commit.intents_key`: the fleet's shared key for tagging intents (at least 16 bytes).
    pub fn commit_intents_key(self, key: Secret) -> Self {
        self.set("commit.intents_key", key.expose())
    }

    /// `commit.min_interval`: the least time between the starts of two commits of one table.
    pub fn commit_min_interval(self, interval: Duration) -> Self {
        self.set("commit.min_interval", duration_text(interval))
    }

    /// `retry.initial`: the first backoff delay.
    pub fn retry_initial(self, initial: Duration) -> Self {
        self.set("retry.initial", duration_text(initial))
    }

    /// `retry.max`: the backoff's cap.
    pub fn retry_max(self, max: Duration) -> Self {
        self.set("retry.max", duration_text(max))
    }

    /// `retry.jitter`: whether backoff delays are jittered.
    pub fn retry_jitter(self, jitter: bool) -> Self {
        self.set("retry.jitter", jitter)
    }

    /// `footer_readers`: how many footers are read at once.
    pub fn footer_readers(self, readers: usize) -> Self {
        self.set("footer_readers", readers)
    }

    /// `memory.segments`: the most uploaded segments held at once.
    pub fn memory_segments(self, segments: usize) -> Self {
        self.set("memory.segments", segments)
    }

    /// `memory.footer_bytes`: the most footer bytes held, across tables.
    pub fn memory_footer_bytes(self, bytes: u64) -> Self {
        self.set("memory.footer_bytes", bytes)
    }

    /// `unready_after`: how long a table may keep failing before `/readyz` answers 503.
    pub fn unready_after(self, after: Duration) -> Self {
        self.set("unready_after", duration_text(after))
    }

    /// `on_bad_segment`: stop, or quarantine a segment that cannot be registered.
    pub fn on_bad_segment(self, policy: BadSegmentPolicy) -> Self {
        self.set("on_bad_segment", policy.as_str())
    }

    /// `quarantine_file`: where quarantined segments are recorded.
    pub fn quarantine_file(mut self, path: impl AsRef<Path>) -> Self {
        insert_path(
            &mut self.iceberg,
            "quarantine_file",
            path_value(path.as_ref()),
        );
        self
    }

    /// `snapshot_retention`: `max_age` and `min_snapshots` (both required by the rules).
    pub fn snapshot_retention(self, retention: SnapshotRetention) -> Self {
        self.set(
            "snapshot_retention.max_age",
            duration_text(retention.max_age),
        )
        .set("snapshot_retention.min_snapshots", retention.min_snapshots)
    }

    /// `store.endpoint`: a custom S3 endpoint (MinIO, SeaweedFS); absent means AWS.
    pub fn store_endpoint(self, endpoint: impl Into<String>) -> Self {
        self.set("store.endpoint", endpoint.into())
    }

    /// `store.region`.
    pub fn store_region(self, region: impl Into<String>) -> Self {
        self.set("store.region", region.into())
    }

    /// `store.allow_http`: whether an `http://` endpoint is allowed.
    pub fn store_allow_http(self, allow: bool) -> Self {
        self.set("store.allow_http", allow)
    }

    /// `store.access_key_id` and `store.secret_access_key`: the store's own S3 keys.
    pub fn store_keys(self, access_key_id: Secret, secret_access_key: Secret) -> Self {
        self.set("store.access_key_id", access_key_id.expose())
            .set("store.secret_access_key", secret_access_key.expose())
    }

    /// Any key of the iceberg sink's `config:` by its YAML path, e.g. `"commit.linger"`,
    /// `"store.endpoint"`, `"catalog_credential.client_secret"`; a later `set` of a key
    /// replaces an earlier one.
    pub fn set(mut self, key: &str, value: impl Serialize) -> Self {
        match serde_yaml_ng::to_value(value) {
            Ok(value) => insert_path(&mut self.iceberg, key, value),
            Err(e) => {
                // serde's message names the type, not the value.
                self.invalid.get_or_insert_with(|| {
                    Error::config_invalid(format!(
                        "sink \"{}\": config.{key}: cannot be a YAML value: {e}",
                        self.id
                    ))
                });
            }
        }
        self
    }

    /// Validates the config by the YAML rules.
    pub fn build(self) -> Result<RegistrarConfig> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let base_dir = match self.base_dir {
            Some(dir) => dir,
            None => std::env::current_dir().map_err(|e| {
                Error::config_invalid(format!(
                    "cannot resolve relative paths: the working directory is unreadable ({e}); \
                     set ConfigBuilder::base_dir"
                ))
            })?,
        };
        let mut source = self.source;
        if !self.datasets.is_empty() {
            source.insert("datasets".into(), Value::Sequence(self.datasets));
        }
        let mut shipper = Mapping::new();
        shipper.insert("from".into(), SOURCE_ID.into());
        if let Some(pipeline) = self.iceberg.get("pipeline") {
            shipper.insert("pipeline".into(), pipeline.clone());
        }
        if let Some(url) = self.shipper_url {
            shipper.insert("url".into(), url);
        }
        let mut iceberg = self.iceberg;
        iceberg.insert("from".into(), SOURCE_ID.into());
        let sinks = [
            sink(SOURCE_ID, "parquet", source),
            sink(SHIPPER_ID, "object_store", shipper),
            sink(&self.id, "iceberg", iceberg),
        ];
        validate::registrar(&sinks[2], &sinks, &base_dir)
    }
}

fn sink(id: &str, kind: &str, config: Mapping) -> RawSink {
    RawSink {
        id: id.to_string(),
        kind: kind.to_string(),
        config: Value::Mapping(config),
    }
}

/// A duration as the YAML rules read it (humantime, exact to the nanosecond: `1m 30s`,
/// `250ms`, `0s`).
fn duration_text(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

fn path_value(path: &Path) -> Value {
    Value::String(path.to_string_lossy().into_owned())
}

/// Sets `a.b.c` in `map`, making the mappings on the way (a non-mapping on the way is replaced).
fn insert_path(map: &mut Mapping, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            map.insert(key.into(), value);
        }
        Some((head, rest)) => {
            let entry = map
                .entry(head.into())
                .or_insert_with(|| Value::Mapping(Mapping::new()));
            if !entry.is_mapping() {
                *entry = Value::Mapping(Mapping::new());
            }
            if let Value::Mapping(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn minimal() -> ConfigBuilder {
        RegistrarConfig::builder()
            .pipeline("p1")
            .segments_dir("/data/seg")
            .dataset("telemetry")
            .url("s3://bucket/prefix")
            .catalog_uri("http://127.0.0.1:8181")
            .namespace("ns")
    }

    #[test]
    fn a_built_config_equals_the_same_config_in_yaml() {
        let built = minimal()
            .set("commit.max_segments", 50)
            .set("commit.linger", "2s")
            .build()
            .expect("valid");
        let yaml = r#"
sinks:
  - id: segments
    kind: parquet
    config: { dir: /data/seg, datasets: [telemetry] }
  - id: shipper
    kind: object_store
    config: { from: segments, pipeline: p1, url: "s3://bucket/prefix" }
  - id: iceberg
    kind: iceberg
    config:
      from: segments
      pipeline: p1
      url: "s3://bucket/prefix"
      catalog_uri: "http://127.0.0.1:8181"
      namespace: ns
      commit: { max_segments: 50, linger: 2s }
"#;
        let loaded = crate::config::Config::from_yaml_str(yaml, Path::new("/"))
            .expect("valid yaml")
            .registrars
            .remove(0);
        assert_eq!(format!("{built:?}"), format!("{loaded:?}"));
        assert_eq!(
            built.source.catalog,
            Path::new("/data/seg/segment-catalog.log")
        );
    }

    #[test]
    fn the_yaml_rules_apply_and_name_the_key() {
        let err = minimal()
            .set("commit.max_segments", 0)
            .build()
            .expect_err("zero");
        assert_eq!(err.code(), ErrorCode::ConfigInvalid);
        assert!(err.message().contains("commit.max_segments"), "{err}");
        let err = minimal()
            .set("comit.linger", "1s")
            .build()
            .expect_err("typo");
        assert!(err.message().contains("comit"), "{err}");
        let err = RegistrarConfig::builder()
            .pipeline("p1")
            .segments_dir("/data/seg")
            .dataset("telemetry")
            .url("s3://bucket/prefix")
            .build()
            .expect_err("no catalog_uri");
        assert!(err.message().contains("catalog_uri"), "{err}");
    }

    #[test]
    fn a_fleet_key_is_a_secret_of_at_least_16_bytes() {
        let config = minimal()
            .commit_intents_key(Secret::new("fleet-SECRET-0123456789"))
            .build()
            .expect("valid");
        assert_eq!(
            config.commit.intents_key.as_ref().map(Secret::expose),
            Some("fleet-SECRET-0123456789")
        );
        assert!(!format!("{config:?}").contains("SECRET"));
        let err = minimal()
            .commit_intents_key(Secret::new("short-SECRET"))
            .build()
            .expect_err("too short");
        assert!(err.message().contains("config.commit.intents_key"), "{err}");
        assert!(!err.message().contains("SECRET"), "{err}");
    }

    #[test]
    fn secrets_stay_out_of_debug_and_errors() {
        let builder = minimal()
            .catalog_token(Secret::new("tok-SECRET-1"))
            .set("store.access_key_id", "AKID-SECRET-3")
            .set("store.secret_access_key", "s3-SECRET-2");
        assert!(!format!("{builder:?}").contains("SECRET"), "{builder:?}");
        let built = builder.clone().build().expect("valid");
        assert!(!format!("{built:?}").contains("SECRET"));
        // A bad value next to them names keys only.
        let err = builder
            .set("commit.linger", "soon")
            .build()
            .expect_err("bad duration");
        assert!(!err.message().contains("SECRET"), "{err}");
    }

    #[test]
    fn typed_setters_equal_the_same_keys_set_by_path() {
        let typed = minimal()
            .catalog_warehouse("lake")
            .table_location(TableLocation::Catalog)
            .partition_by(
                ["hour(ts)", "bucket(16, device)"].map(|t| PartitionTerm::parse(t).expect("term")),
            )
            .commit_max_segments(200)
            .commit_max_bytes(64 << 20)
            .commit_linger(Duration::from_millis(1500))
            .commit_min_interval(Duration::from_secs(90))
            .retry_initial(Duration::from_millis(250))
            .retry_max(Duration::from_secs(30))
            .retry_jitter(false)
            .footer_readers(4)
            .memory_segments(4096)
            .memory_footer_bytes(16 << 20)
            .unready_after(Duration::from_secs(120))
            .on_bad_segment(BadSegmentPolicy::Quarantine)
            .quarantine_file("/data/q")
            .snapshot_retention(SnapshotRetention {
                max_age: Duration::from_secs(86_400),
                min_snapshots: 10,
            })
            .store_endpoint("http://127.0.0.1:9000")
            .store_region("eu-west-1")
            .store_allow_http(true)
            .store_keys(Secret::new("AKID"), Secret::new("sk"))
            .build()
            .expect("valid");
        let by_path = minimal()
            .set("catalog_warehouse", "lake")
            .set("table_location", "catalog")
            .set("partition_by", ["hour(ts)", "bucket(16, device)"])
            .set("commit.max_segments", 200)
            .set("commit.max_bytes", "64MiB")
            .set("commit.linger", "1500ms")
            .set("commit.min_interval", "90s")
            .set(
                "retry",
                std::collections::BTreeMap::from([("initial", "250ms"), ("max", "30s")]),
            )
            .set("retry.jitter", false)
            .set("footer_readers", 4)
            .set("memory.segments", 4096)
            .set("memory.footer_bytes", "16MiB")
            .set("unready_after", "2m")
            .set("on_bad_segment", "quarantine")
            .set("quarantine_file", "/data/q")
            .set("snapshot_retention.max_age", "1d")
            .set("snapshot_retention.min_snapshots", 10)
            .set("store.endpoint", "http://127.0.0.1:9000")
            .set("store.region", "eu-west-1")
            .set("store.allow_http", true)
            .set("store.access_key_id", "AKID")
            .set("store.secret_access_key", "sk")
            .build()
            .expect("valid");
        assert_eq!(typed, by_path);
        assert_eq!(typed.commit.linger, Duration::from_millis(1500));
        assert_eq!(typed.on_bad_segment, BadSegmentPolicy::Quarantine);
        assert_eq!(typed.table_location, TableLocation::Catalog);
        let shown: Vec<String> = typed.partition_by.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["hour(ts)", "bucket(16, device)"]);
        // Durations survive the YAML text exactly, to the nanosecond.
        let odd = Duration::new(3_723, 4_005_006);
        assert_eq!(
            minimal().retry_max(odd).build().expect("valid").retry.max,
            odd
        );
        // The default values write the defaults.
        let defaults = minimal()
            .table_location(TableLocation::default())
            .on_bad_segment(BadSegmentPolicy::default())
            .build()
            .expect("valid");
        assert_eq!(defaults, minimal().build().expect("valid"));
    }

    #[test]
    fn typed_setters_are_checked_by_the_yaml_rules() {
        for (builder, key, says) in [
            (
                minimal().commit_max_segments(0),
                "config.commit.max_segments",
                "greater than 0",
            ),
            (
                minimal().commit_linger(Duration::from_secs(7200)),
                "config.commit.linger",
                "over an hour",
            ),
            (
                minimal().retry_initial(Duration::ZERO),
                "config.retry.initial",
                "greater than 0",
            ),
            (
                minimal()
                    .retry_initial(Duration::from_secs(10))
                    .retry_max(Duration::from_secs(1)),
                "config.retry.max",
                "less than retry.initial",
            ),
            (
                minimal().store_endpoint("http://127.0.0.1:9000"),
                "config.store.endpoint",
                "allow_http",
            ),
            (
                minimal().snapshot_retention(SnapshotRetention {
                    max_age: Duration::from_millis(10),
                    min_snapshots: 1,
                }),
                "config.snapshot_retention.max_age",
                "at least 1s",
            ),
            (
                minimal().memory_segments(0),
                "config.memory.segments",
                "greater than 0",
            ),
        ] {
            let err = builder.build().expect_err(key);
            assert_eq!(err.code(), ErrorCode::ConfigInvalid, "{key}");
            assert!(
                err.message().contains(key) && err.message().contains(says),
                "{key}: {err}"
            );
        }
        // A later setter of a key replaces an earlier one, typed or by path.
        let config = minimal()
            .commit_max_segments(0)
            .set("commit.max_segments", 7)
            .build()
            .expect("valid");
        assert_eq!(config.commit.max_segments, 7);
        let config = minimal()
            .set("commit.max_segments", 0)
            .commit_max_segments(9)
            .build()
            .expect("valid");
        assert_eq!(config.commit.max_segments, 9);
    }

    #[test]
    fn nested_keys_make_their_mappings() {
        let mut map = Mapping::new();
        insert_path(&mut map, "a.b.c", Value::from(1));
        insert_path(&mut map, "a.b.d", Value::from(2));
        insert_path(&mut map, "a", Value::from(3));
        insert_path(&mut map, "a.x", Value::from(4));
        let text = serde_yaml_ng::to_string(&map).expect("yaml");
        assert_eq!(text.trim(), "a:\n  x: 4");
    }
}
