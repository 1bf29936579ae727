//! Table-level operations: which segments a table already has, creating a table with the files'
//! own field IDs, and building the metadata-only append of a batch of segments.

pub mod append;
pub mod committed;
pub mod create;

pub use committed::CommittedSet;
