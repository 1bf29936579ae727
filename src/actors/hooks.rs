//! Seams for the project's own tests: a hook before each append commit and a clock, called by
//! the committer. Not part of the API (hidden from the docs); production code never sets them.
//! Tests reach them as `thadam_iceberg::testing::{BeforeAppend, Hooks}` through
//! [`Tuning::hooks`](crate::actors::tuning::Tuning::hooks).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;

use crate::catalog::TableName;
use crate::table::append::ReadySegment;

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
    /// for `snapshot_retention.max_age`).
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
