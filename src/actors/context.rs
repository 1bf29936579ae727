//! What every actor of one registrar shares: settings, the catalog connection, the bucket, the
//! status board and the shutdown signal. Read-only after start.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use object_store::ObjectStore;

use crate::catalog::{RestClient, TableName};
use crate::config::{RegistrarConfig, RetryPolicy};
use crate::shutdown::Shutdown;
use crate::status::StatusBoard;
use crate::table::append::ReadySegment;

/// Tuning knobs with defaults; not (yet) part of the config file.
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Footer readers in the pool: how many footers are read at once.
    pub footer_readers: usize,
    /// How many footer reads one table keeps in flight (bounds memory per table).
    pub reads_per_table: usize,
    /// The most segments one snapshot carries.
    pub max_batch: usize,
    /// Test seams; none in production.
    pub hooks: Hooks,
}

/// Called by a committer right before it sends an append commit, with the table it is about to
/// commit on and the segments it is about to append. Lets tests make another writer win the race
/// deterministically (the spec's in-process conflict test).
#[async_trait]
pub trait BeforeAppend: Send + Sync {
    async fn before_append(&self, table: &TableName, base: &Table, batch: &[ReadySegment]);
}

#[derive(Clone, Default)]
pub struct Hooks {
    pub before_append: Option<Arc<dyn BeforeAppend>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("before_append", &self.before_append.is_some())
            .finish()
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            footer_readers: 8,
            reads_per_table: 32,
            max_batch: 100,
            hooks: Hooks::default(),
        }
    }
}

pub struct RegistrarContext {
    pub config: RegistrarConfig,
    pub client: RestClient,
    pub store: Arc<dyn ObjectStore>,
    pub status: StatusBoard,
    pub shutdown: Shutdown,
    pub tuning: Tuning,
}

impl RegistrarContext {
    pub fn retry(&self) -> &RetryPolicy {
        &self.config.retry
    }

    pub fn table_name(&self, dataset: &str) -> TableName {
        TableName {
            namespace: self.config.namespace.clone(),
            name: dataset.to_string(),
        }
    }

    /// `{url}/thadam/v1/{pipeline}/{dataset}`: the directory the shipper owns.
    pub fn table_location(&self, dataset: &str) -> String {
        self.config
            .url
            .table_location(&self.config.pipeline, dataset)
    }

    /// Recorded in every snapshot summary so operators can tell who wrote what.
    pub fn writer_id(&self) -> String {
        format!("thadam-iceberg/{}/{}", self.config.id, self.config.pipeline)
    }
}

pub type SharedContext = Arc<RegistrarContext>;
