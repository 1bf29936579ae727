//! What every actor of one registrar shares: settings, the catalog connection, the bucket, the
//! status board and the shutdown signal. Read-only after start.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;
use object_store::ObjectStore;

use crate::catalog::{RestClient, TableName};
use crate::config::{RegistrarConfig, RetryPolicy};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::status::StatusBoard;
use crate::table::append::ReadySegment;

/// Knobs beside the config file: caps for tests and the runner's flags, and test seams. The
/// defaults defer to the config (`commit`, `footer_readers`).
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Overrides the config's `footer_readers` when non-zero.
    pub footer_readers: usize,
    /// Overrides the footer window when non-zero: how many footers one table holds (arrived,
    /// not committed) and reads in flight together. Default: twice `commit.max_segments`, at
    /// least 64 (see [`RegistrarContext::footer_window`]).
    pub reads_per_table: usize,
    /// Caps the config's `commit.max_segments` (e.g. `--max-batch`, or 1 in tests that map
    /// faults onto commits one to one). Default: no cap.
    pub max_batch: usize,
    /// How often a committer holding quarantined segments reads the quarantine file for the
    /// operator's `retry` and `discarded` lines.
    pub quarantine_poll: std::time::Duration,
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

/// The wall clock, in milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

#[derive(Clone, Default)]
pub struct Hooks {
    pub before_append: Option<Arc<dyn BeforeAppend>>,
    /// The clock snapshot retention ages snapshots by (tests move it forward instead of waiting
    /// for `snapshot_retention.max_age`, which is at least a minute).
    pub clock: Option<Clock>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("before_append", &self.before_append.is_some())
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl Tuning {
    /// Now, by the test clock when there is one.
    pub fn now_ms(&self) -> i64 {
        match &self.hooks.clock {
            Some(clock) => clock(),
            None => chrono::Utc::now().timestamp_millis(),
        }
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            footer_readers: 0,
            reads_per_table: 0,
            max_batch: usize::MAX,
            quarantine_poll: std::time::Duration::from_secs(1),
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
    /// The feed's random access to its records, to check watermarks against (see
    /// `table::committed`); `None` for feeds whose catalog ids never reuse a seq.
    pub history: Option<Arc<dyn crate::protocol::feed::SegmentHistory>>,
    /// The quarantine file, when `on_bad_segment: quarantine` or when one exists (its open
    /// entries are then decided by files, never by a watermark: see `table::quarantine`).
    pub quarantine: Option<Arc<crate::table::quarantine::QuarantineStore>>,
}

impl RegistrarContext {
    pub fn retry(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// The most segments in one snapshot: the config's, capped by the tuning.
    pub fn max_segments(&self) -> usize {
        self.config
            .commit
            .max_segments
            .min(self.tuning.max_batch)
            .max(1)
    }

    /// The most data-file bytes in one snapshot.
    pub fn max_bytes(&self) -> u64 {
        self.config.commit.max_bytes
    }

    /// How long a batch that is not full may wait for more segments.
    pub fn linger(&self) -> std::time::Duration {
        self.config.commit.linger
    }

    /// How many footers one table holds (arrived and not committed) and reads in flight, together:
    /// twice a batch, so the next batch is read while one commits, and at least 64.
    pub fn footer_window(&self) -> usize {
        if self.tuning.reads_per_table > 0 {
            self.tuning.reads_per_table
        } else {
            self.max_segments().saturating_mul(2).max(64)
        }
    }

    /// A table's share of `memory.footer_bytes`: the budget split evenly between the datasets
    /// the parquet sink lists (each has one table).
    pub fn footer_bytes_per_table(&self) -> u64 {
        let tables = self.config.source.datasets.len().max(1) as u64;
        (self.config.memory.footer_bytes / tables).max(1 << 20)
    }

    /// How many footers are read at once.
    pub fn footer_readers(&self) -> usize {
        if self.tuning.footer_readers > 0 {
            self.tuning.footer_readers
        } else {
            self.config.footer_readers.max(1)
        }
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
