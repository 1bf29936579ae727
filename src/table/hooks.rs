//! Seams for the project's own tests: a hook before each append commit (called by the
//! transaction), a clock (snapshot retention ages snapshots by it) and the node's wall clock
//! (the fleet's slot grid and its snapshots' timestamps). Production code never
//! sets them. Tests reach them as `thadam_iceberg::testing::{BeforeAppend, Hooks}` through
//! `Tuning::hooks`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::table::Table;

use crate::catalog::TableName;
use crate::table::data_files::ReadySegment;

/// Called right before an append commit is sent, with the table it is about to
/// commit on and the segments it is about to append. Lets tests make another writer win the race
/// deterministically (the spec's in-process conflict test).
#[async_trait]
pub trait BeforeAppend: Send + Sync {
    async fn before_append(&self, table: &TableName, base: &Table, batch: &[ReadySegment]);
}

/// The wall clock, in milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Wraps the store of the sink's `url` (footers, the fleet's intents) in a test's own, which
/// passes requests on to it and injects faults.
pub type StoreWrapper = Arc<
    dyn Fn(Arc<dyn object_store::ObjectStore>) -> Arc<dyn object_store::ObjectStore> + Send + Sync,
>;

/// Now by `clock` when a test set one, else by the system's clock (ms since the epoch).
pub(crate) fn now_ms(clock: Option<&Clock>) -> i64 {
    match clock {
        Some(clock) => clock(),
        None => chrono::Utc::now().timestamp_millis(),
    }
}

#[derive(Clone, Default)]
pub struct Hooks {
    pub before_append: Option<Arc<dyn BeforeAppend>>,
    /// The clock snapshot retention ages snapshots by (tests move it forward instead of waiting
    /// for `snapshot_retention.max_age`).
    pub clock: Option<Clock>,
    /// This node's wall clock: the grid a fleet's turns are cut on (`pacing`) and the
    /// timestamps of the snapshots it writes. Tests set it a few slots off to play a node
    /// whose clock is wrong; it is kept apart from `clock`, which leaps hours ahead.
    pub node_clock: Option<Clock>,
    /// Publishes intents as the releases before did: a manifest in the table's metadata and an
    /// intent naming it (`thadam-intent/1`), to play an older node in a fleet being upgraded.
    pub intents_name_manifests: bool,
    /// This node's lane instead of a random one (12 hex digits): tests that need a node to be
    /// the lowest lane of its fleet, or not.
    pub lane: Option<String>,
    /// Wraps the store of the sink's `url` (see [`StoreWrapper`]).
    pub wrap_store: Option<StoreWrapper>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("before_append", &self.before_append.is_some())
            .field("clock", &self.clock.is_some())
            .field("node_clock", &self.node_clock.is_some())
            .field("intents_name_manifests", &self.intents_name_manifests)
            .field("lane", &self.lane)
            .field("wrap_store", &self.wrap_store.is_some())
            .finish()
    }
}
