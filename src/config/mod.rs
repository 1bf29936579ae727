//! The registrar's configuration: thadam's YAML `sinks:` list, read, resolved and validated into
//! one [`RegistrarConfig`] per `kind: iceberg` sink.
//!
//! Loading does all checks that can be done without the network: required keys and their
//! defaults, unknown keys (refused on the iceberg kind), the `from` parquet sink and its
//! object_store shipper, URLs, the PEM files of the catalog connection, `${file:}`/`${env:}`
//! references. Every failure is [`ErrorCode::ConfigInvalid`](crate::error::ErrorCode) and names
//! the sink and key path and says how to fix it; no message and no `Debug` output contains a
//! secret ([`Secret`]).
//!
//! Only the top-level `sinks:` list is read; parquet and object_store sinks are read only for
//! the keys the registrar shares with them, and only `${...}` references in keys the registrar
//! reads are resolved (an unset variable used only by another sink is not the registrar's
//! concern).

mod builder;
mod field;
mod interpolate;
pub mod partition_by;
mod raw;
mod secret_url;
mod source;
mod store;
mod tls;
mod types;
mod urls;
mod validate;

use std::path::Path;

pub use crate::runtime::backoff::RetryPolicy;
pub use crate::secret::Secret;
pub use builder::ConfigBuilder;
pub use partition_by::PartitionTerm;
pub use secret_url::SecretUrl;
pub use types::StoreCredentials;
pub use types::{
    BadSegmentPolicy, CatalogAuth, ClientAuth, ClientIdentity, CommitPolicy,
    DEFAULT_FOOTER_READERS, DEFAULT_UNREADY_AFTER, DatasetConfig, MemoryBudget, OAuth2Credential,
    ParquetSource, RegistrarConfig, SigV4Credential, SnapshotRetention, StoreConfig, TableLocation,
    TableRoot, UnsignedPolicy,
};

use crate::error::{Error, Result};

/// A loaded configuration: the registrars to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// One per `kind: iceberg` sink, in file order. Empty when the file has none; whether that
    /// is an error is the caller's decision.
    pub registrars: Vec<RegistrarConfig>,
}

impl Config {
    /// Reads, parses, resolves and validates the file at `path`. Relative paths in it (and in
    /// its `${file:}` references) are relative to the file's directory. Errors are prefixed with
    /// the file's path.
    pub fn load(path: &Path) -> Result<Config> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::config_invalid(format!("{shown}: cannot read the config file: {e}"))
        })?;
        // Absolute, so resolved paths do not depend on a later change of working directory.
        let absolute = std::path::absolute(path)
            .map_err(|e| Error::config_invalid(format!("{shown}: cannot resolve the path: {e}")))?;
        let base_dir = absolute.parent().unwrap_or(Path::new("/"));
        Self::parse(&text, base_dir).map_err(|e| e.context(shown))
    }

    /// Parses and validates YAML text; relative paths are relative to `base_dir`.
    pub fn from_yaml_str(yaml: &str, base_dir: &Path) -> Result<Config> {
        Self::parse(yaml, base_dir)
    }

    fn parse(yaml: &str, base_dir: &Path) -> Result<Config> {
        let sinks = raw::parse_sinks(yaml)?;
        let registrars = sinks
            .iter()
            .filter(|s| s.kind == "iceberg")
            .map(|s| validate::registrar(s, &sinks, base_dir))
            .collect::<Result<Vec<_>>>()?;
        Ok(Config { registrars })
    }
}
