//! The metadata-only append of a batch of segments: one data file per segment, its URI taken from
//! the recorded object key, and the keys written into the snapshot summary.
//!
//! Start at `transaction`: [`BatchCommit::attempt`] is one attempt of a batch's append, top to
//! bottom, and names every part below in the order it uses them:
//!
//! - `retry`: what a failed commit means and what comes next (pure policies);
//! - `pacing`: when the table's next batch may start (the adaptive pace, and the fleet's turns
//!   by the lanes and slot rules of `table::fleet`);
//! - `producer`: the snapshot itself (iceberg-rust 0.10.1's fast append has no manifest
//!   merging), with `merge` (the merge policy, Java's `MergeAppend`) and `manifest_list` (the
//!   manifest list, deflate-compressed);
//! - `attempts`: what a batch's attempts wrote, kept from one attempt to the next, and what of
//!   it may be deleted.
//!
//! Below it: the fleet (`table::fleet`: lanes, slot rules, intents), the data files of segments
//! (`table::data_files`), the summary keys (`table::summary_keys`) and the test seams
//! (`table::hooks`).

pub(crate) mod attempts;
pub(crate) mod manifest_list;
pub mod merge;
mod pacing;
pub(crate) mod producer;
pub(crate) mod retry;
pub(crate) mod transaction;

pub use attempts::AppendAttempts;
pub use producer::prepare_append;
pub(crate) use transaction::{AttemptInput, Attempted, BatchCommit, Outcome, Schemas};

pub use crate::table::data_files::ReadySegment;
