//! Table-level operations: which segments a table already has, creating a table with the files'
//! own field IDs, building the metadata-only append of a batch of segments, and the column
//! metrics and partition values of its data files, and which old snapshots a commit expires.

pub(crate) mod append;
pub(crate) mod column_stats;
pub(crate) mod committed;
pub(crate) mod create;
pub(crate) mod data_files;
pub(crate) mod env;
pub(crate) mod fleet;
pub(crate) mod held;
pub(crate) mod hooks;
pub(crate) mod partition;
pub(crate) mod quarantine;
pub(crate) mod retention;
pub(crate) mod schema;
pub(crate) mod summary_keys;

pub use committed::CommittedSet;
