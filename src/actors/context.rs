//! What every actor of one registrar shares: settings, the catalog connection, the bucket, the
//! status board and the shutdown signal. Read-only after start.

use std::sync::Arc;

use object_store::ObjectStore;

use crate::actors::tuning::Tuning;
use crate::catalog::{RestClient, TableName};
use crate::config::{RegistrarConfig, RetryPolicy};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::status::StatusBoard;
use crate::table::env::Env;

pub(crate) struct RegistrarContext {
    pub config: RegistrarConfig,
    pub client: RestClient,
    pub store: Arc<dyn ObjectStore>,
    pub status: StatusBoard,
    pub shutdown: Shutdown,
    pub tuning: Tuning,
    /// The feed's random access to its records, to check watermarks against (see
    /// `table::committed`); `None` for feeds whose catalog ids never reuse a seq.
    pub history: Option<Arc<dyn crate::protocol::feed::SegmentHistory>>,
    /// The quarantine file, when `on_bad_segment: quarantine` or when one exists (its open
    /// entries are then decided by files, never by a watermark: see `table::quarantine`).
    pub quarantine: Option<Arc<crate::table::quarantine::QuarantineStore>>,
}

impl RegistrarContext {
    pub(crate) fn retry(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// The most segments in one snapshot: the config's, capped by the tuning.
    pub(crate) fn max_segments(&self) -> usize {
        self.config
            .commit
            .max_segments
            .min(self.tuning.max_batch)
            .max(1)
    }

    /// The most data-file bytes in one snapshot.
    pub(crate) fn max_bytes(&self) -> u64 {
        self.config.commit.max_bytes
    }

    /// How long a batch that is not full may wait for more segments.
    pub(crate) fn linger(&self) -> std::time::Duration {
        self.config.commit.linger
    }

    /// How many footers one table holds (arrived and not committed) and reads in flight, together:
    /// twice a batch, so the next batch is read while one commits, and at least 64.
    pub(crate) fn footer_window(&self) -> usize {
        if self.tuning.reads_per_table > 0 {
            self.tuning.reads_per_table
        } else {
            self.max_segments().saturating_mul(2).max(64)
        }
    }

    /// A table's share of `memory.footer_bytes`: the budget split evenly between the datasets
    /// the parquet sink lists (each has one table).
    pub(crate) fn footer_bytes_per_table(&self) -> u64 {
        let tables = self.config.source.datasets.len().max(1) as u64;
        (self.config.memory.footer_bytes / tables).max(1 << 20)
    }

    /// How many footers are read at once.
    pub(crate) fn footer_readers(&self) -> usize {
        if self.tuning.footer_readers > 0 {
            self.tuning.footer_readers
        } else {
            self.config.footer_readers.max(1)
        }
    }

    pub(crate) fn table_name(&self, dataset: &str) -> TableName {
        TableName {
            namespace: self.config.namespace.clone(),
            name: dataset.to_string(),
        }
    }

    /// `{url}/thadam/v1/{pipeline}/{dataset}`: the directory the shipper owns.
    pub(crate) fn table_location(&self, dataset: &str) -> String {
        self.config
            .url
            .table_location(&self.config.pipeline, dataset)
    }

    /// What the table layer borrows to write this registrar's tables.
    pub(crate) fn env(&self) -> Env<'_> {
        Env {
            client: &self.client,
            config: &self.config,
            status: &self.status,
            shutdown: &self.shutdown,
            history: self.history.as_ref(),
            hooks: &self.tuning.hooks,
            store: &self.store,
        }
    }
}

pub(crate) type SharedContext = Arc<RegistrarContext>;
