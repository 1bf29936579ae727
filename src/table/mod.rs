//! Table-level operations: which segments a table already has, creating a table with the files'
//! own field IDs, building the metadata-only append of a batch of segments, and the column
//! metrics and partition values of its data files, and which old snapshots a commit expires.

pub mod append;
pub mod column_stats;
pub mod committed;
pub mod create;
pub mod partition;
pub mod quarantine;
pub mod retention;
pub mod schema;

pub use committed::CommittedSet;
