//! Bad segments that do not stall the pipeline: the `on_bad_segment` policy (`policy.rs`, pure:
//! what a committer does with a segment it cannot register, [`action`]) and the quarantine file
//! (`store.rs`, fsync'd: where a quarantined segment is recorded until the operator retries or
//! discards it, [`QuarantineStore`]).
//!
//! # Exactly-once
//!
//! A table's watermark says "every segment of this log up to seq N is decided" and lets a
//! committer skip those segments after snapshot expiry erased their summaries. The committer
//! lets the watermark pass a quarantined seq (segments 6-20 committed after a quarantined 5
//! raise it to 20, so 6-20 stay protected after expiry) and instead never decides an open
//! quarantined segment by a watermark: a segment whose key has an open entry here is decided by
//! the snapshot summaries and, when a watermark covers its seq, by the table's live data files
//! ([`crate::table::CommittedSet::decide_by_files`]). The order makes it sound: the entry is on
//! disk before any commit that could raise a watermark past its seq. A `registered` line follows
//! the commit that registered it; a crash in between leaves an open entry whose key the live files
//! (or summaries) show as registered, so it is skipped, not appended twice. A `discarded` segment
//! is decided (left out for good): the watermark may cover it. The quarantine file is therefore
//! part of the registrar's durable state, like the segment catalog it sits next to: deleting it
//! while entries are open would let a watermark that passed them count them as registered.

mod policy;
mod store;

pub(crate) use policy::{Action, action, is_about_the_file, stops_table_only};
pub use store::{Entry, Line, QuarantineStore, Resolution, now_ms};
