//! Every message the actors exchange, in one place, so the flow can be read top to bottom:
//!
//! ```text
//! feed ──▶ watcher ──Route──▶ supervisor ──Segment──▶ committer (one per table, with its merger)
//!                                                       │  ▲
//!                                      FooterPoolMsg::Read │  CommitterMsg::FooterRead
//!                                                       ▼  │
//!                                         footer pool ──▶ footer readers (N in parallel)
//! committer ──Reconcile (call)──▶ its schema merger ──▶ catalog (create table)
//! committer ──▶ catalog (schema commits and appends)
//! any actor ──Fatal──▶ supervisor ──▶ stops everything, reports the code
//! ```

use std::sync::Arc;

use iceberg::spec::TableMetadataRef;
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use ractor::{ActorRef, RpcReplyPort};

use crate::error::{Error, Result};
use crate::protocol::footer::SegmentFooter;
use crate::protocol::segment::UploadedSegment;

/// A segment's share of the `memory.segments` budget. The watcher takes one before it reads the
/// next record from the feed, and it travels with the segment to its committer, which drops it
/// when it is done with the segment (committed, found registered, quarantined, superseded, or its
/// table stopped): so the feed is read only as fast as segments leave, and a backlog of any
/// length holds at most the budget in memory. Counted in `thadam_iceberg_segments_in_memory`.
pub struct SegmentPermit {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl SegmentPermit {
    /// Waits for room in `budget`; `None` once the budget is closed.
    pub async fn acquire(budget: &Arc<tokio::sync::Semaphore>) -> Option<SegmentPermit> {
        let permit = Arc::clone(budget).acquire_owned().await.ok()?;
        metrics::gauge!("thadam_iceberg_segments_in_memory").increment(1.0);
        Some(SegmentPermit { _permit: permit })
    }
}

impl Drop for SegmentPermit {
    fn drop(&mut self) {
        metrics::gauge!("thadam_iceberg_segments_in_memory").decrement(1.0);
    }
}

/// To the supervisor.
pub enum SupervisorMsg {
    /// The watcher saw an uploaded segment: send it to its table's committer.
    Route(UploadedSegment, SegmentPermit),
    /// The feed ended for good (only embedded feeds end).
    FeedEnded,
    /// Something that retrying cannot fix: stop the service with this error.
    Fatal(Error),
}

/// To a table's committer.
pub enum CommitterMsg {
    /// Resolve the table (load it, or learn that it must be created) before anything else.
    Init,
    /// A segment of this committer's dataset, in catalog order, with its share of the memory
    /// budget (released when the committer is done with it).
    Segment(UploadedSegment, SegmentPermit),
    /// `commit.linger` has passed for the oldest waiting segment: commit what is ready.
    LingerElapsed,
    /// `commit.min_interval` (or the table's adaptive pace) has passed since the last commit
    /// started: commit what is ready.
    PaceElapsed,
    /// The pause after a failed append attempt is over: try again with what is ready now.
    RetryElapsed,
    /// An attempt ended: the messages that arrived during it were taken in (this comes behind
    /// them), and the committer goes on with what is ready now.
    AttemptEnded,
    /// Time to read the quarantine file for the operator's retries and discards.
    QuarantinePoll,
    /// The backoff after a read that found the object missing is over: read it again.
    RereadFooter { seq: u64 },
    /// A footer read finished.
    FooterRead {
        seq: u64,
        result: Result<Arc<SegmentFooter>>,
    },
}

/// One footer to read, and who wants it.
pub struct FooterRequest {
    pub seq: u64,
    pub object_key: String,
    /// The size the segment catalog recorded; the object must have exactly this size.
    pub file_size: u64,
    /// The store to read it from when not the pipeline's: one signing with the credentials the
    /// catalog vended for the table (see `catalog::access`).
    pub store: Option<Arc<dyn object_store::ObjectStore>>,
    pub reply_to: ActorRef<CommitterMsg>,
}

/// To the footer reader pool.
pub enum FooterPoolMsg {
    Read(FooterRequest),
    /// A worker finished its request and can take another.
    WorkerIdle(usize),
}

/// To one footer reader.
pub enum FooterReaderMsg {
    Read(FooterRequest),
}

/// To a table's schema merger (one per table, a child of the table's committer).
pub enum SchemaMergerMsg {
    /// Make the table ready for a file with this footer: create it (when `current` is `None`),
    /// and say which schema change it needs, if any. `current` is the metadata of the table the
    /// committer holds, lent read-only: the committer stays the only owner of its table, adopts
    /// the table the reply carries, and sends the schema commit itself (with its appends, so
    /// that every commit of a table is sent, classified and retried in one place).
    Reconcile {
        current: Option<TableMetadataRef>,
        footer: Arc<SegmentFooter>,
        reply: RpcReplyPort<Result<SchemaReconciled>>,
    },
}

/// A schema merger's answer to [`SchemaMergerMsg::Reconcile`].
pub struct SchemaReconciled {
    /// The table as the merger found or made it (created by us, or found created by another
    /// writer), for the committer to adopt; `None`: the committer's version stands.
    pub table: Option<Box<Table>>,
    /// The schema commit that makes the table fit the file; `None` when it fits already.
    pub change: Option<SchemaChange>,
}

/// A schema commit: `add-schema` and `set-current-schema` behind the requirements that the
/// table is still the one the change was derived from.
pub struct SchemaChange {
    pub requirements: Vec<TableRequirement>,
    pub updates: Vec<TableUpdate>,
}
