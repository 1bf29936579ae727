//! Table-level operations: which segments a table already has, creating a table with the files'
//! own field IDs, building the metadata-only append of a batch of segments, and the column
//! metrics and partition values of its data files.

pub mod append;
pub mod committed;
pub mod create;
pub mod metrics;
pub mod partition;
pub mod quarantine;

pub use committed::CommittedSet;
