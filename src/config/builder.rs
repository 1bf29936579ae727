//! A registrar config made in code, for a host that keeps its settings elsewhere than in a
//! thadam YAML file: [`RegistrarConfig::builder`].
//!
//! The builder writes the same three sinks a YAML file has (the parquet sink, its object_store
//! shipper and the iceberg sink) and hands them to the same validation as [`super::Config::load`].
//! So a config made in code passes exactly the rules a file does, and fails with the same
//! `config.invalid` message naming the same key (`sinks` ids are those of the builder: see
//! [`ConfigBuilder::id`]). Keys without a setter of their own go through
//! [`ConfigBuilder::set`], by their YAML path.
//!
//! ```
//! use thadam_iceberg::config::{RegistrarConfig, Secret};
//! let config = RegistrarConfig::builder()
//!     .pipeline("edge-7")
//!     .segments_dir("/var/lib/thadam/segments")
//!     .dataset("telemetry")
//!     .url("s3://lake/raw")
//!     .catalog_uri("https://catalog.example/api/catalog")
//!     .catalog_token(Secret::new("t0ken"))
//!     .namespace("edge.raw")
//!     .set("commit.max_segments", 200)
//!     .set("store.region", "eu-west-1")
//!     .build()
//!     .expect("valid");
//! assert_eq!(config.commit.max_segments, 200);
//! assert_eq!(config.namespace, ["edge", "raw"]);
//! ```
//!
//! Values are YAML values, so `${env:NAME}` and `${file:PATH}` references are resolved as in a
//! file; relative paths are relative to [`ConfigBuilder::base_dir`] (default: the working
//! directory).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_yaml_ng::{Mapping, Value};

use super::raw::RawSink;
use super::secret::Secret;
use super::types::RegistrarConfig;
use super::validate;
use crate::error::{Error, Result};

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
