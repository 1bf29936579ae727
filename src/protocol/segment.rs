//! What the registrar consumes: one uploaded segment, as recorded in a segment catalog.

use serde::{Deserialize, Serialize};

/// A Parquet segment that the object_store shipper has uploaded and durably recorded.
///
/// `seq` is the catalog's monotonic sequence number; `object_key` is the key inside the configured
/// bucket (no `s3://bucket/` prefix), exactly as the shipper wrote it. The data file URI
/// registered in Iceberg is derived from it, never from a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadedSegment {
    pub seq: u64,
    pub dataset: String,
    pub segment_id: String,
    pub object_key: String,
    pub file_size: u64,
    pub row_count: u64,
    /// When the upload was recorded, in milliseconds since the Unix epoch (for lag metrics).
    pub uploaded_at_ms: u64,
    /// The identity of the catalog `seq` belongs to (the segment log's id), when it has one.
    ///
    /// With it, the registrar keeps a per-catalog watermark in the table's properties: every
    /// segment of this catalog with `seq` at or below it is registered. That marker survives
    /// snapshot expiry, which erases the snapshot summaries the per-key check reads. A feed that
    /// sets it must deliver each dataset's segments in increasing `seq` order and must never reuse
    /// a `seq` under the same id.
    #[serde(default)]
    pub catalog_id: Option<String>,
}
