//! Every message the actors exchange, in one place, so the flow can be read top to bottom:
//!
//! ```text
//! feed ──▶ watcher ──Route──▶ supervisor ──Segment──▶ committer (one per table)
//!                                                       │  ▲
//!                                      FooterPoolMsg::Read │  CommitterMsg::FooterRead
//!                                                       ▼  │
//!                                         footer pool ──▶ footer readers (N in parallel)
//! committer ──Reconcile (call)──▶ schema merger ──▶ catalog (create table / schema commit)
//! committer ──▶ catalog (append commit)
//! any actor ──Fatal──▶ supervisor ──▶ stops everything, reports the code
//! ```

use std::sync::Arc;

use iceberg::table::Table;
use ractor::{ActorRef, RpcReplyPort};

use crate::catalog::TableName;
use crate::error::{Error, Result};
use crate::footer::SegmentFooter;
use crate::protocol::segment::UploadedSegment;

/// To the supervisor.
pub enum SupervisorMsg {
    /// The watcher saw an uploaded segment: send it to its table's committer.
    Route(UploadedSegment),
    /// The feed ended for good (only embedded feeds end).
    FeedEnded,
    /// Something that retrying cannot fix: stop the service with this error.
    Fatal(Error),
}

/// To a table's committer.
pub enum CommitterMsg {
    /// Resolve the table (load it, or learn that it must be created) before anything else.
    Init,
    /// A segment of this committer's dataset, in catalog order.
    Segment(UploadedSegment),
    /// `commit.linger` has passed for the oldest waiting segment: commit what is ready.
    LingerElapsed,
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

/// To the schema merger.
pub enum SchemaMergerMsg {
    /// Make `table` (or a table to be created, when `None`) ready for a file with this footer:
    /// create it, or evolve its schema, as needed. Replies with the table to append to.
    Reconcile {
        table_name: TableName,
        dataset: String,
        table: Option<Table>,
        footer: Arc<SegmentFooter>,
        reply: RpcReplyPort<Result<Table>>,
    },
}
