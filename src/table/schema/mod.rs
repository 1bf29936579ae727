//! Segment schemas: a footer as an Iceberg schema (`convert`), merged into the table's by field ID
//! (`merge`).

pub mod convert;
pub mod merge;
