//! Segment schemas: a footer as an Iceberg schema (`convert`), merged into the table's by field ID
//! (`merge`).

pub(crate) mod convert;
pub mod merge;
