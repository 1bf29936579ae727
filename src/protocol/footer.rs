//! [`SegmentFooter`]: what the registrar keeps of a segment's Parquet footer, as the footer
//! readers hand it to committers (`crate::io::footer` reads and decodes it).

use std::sync::Arc;

use parquet::file::metadata::ParquetMetaData;

/// What the registrar needs from a segment's footer.
#[derive(Debug, Clone)]
pub struct SegmentFooter {
    pub metadata: Arc<ParquetMetaData>,
    /// The file's schema as Arrow sees it, with `PARQUET:field_id` metadata on every field.
    pub arrow_schema: arrow_schema::SchemaRef,
    /// The object's size in bytes, as the store reports it.
    pub object_size: u64,
    /// How many footer bytes were read (for metrics).
    pub bytes_read: u64,
}

impl SegmentFooter {
    pub fn row_count(&self) -> u64 {
        u64::try_from(self.metadata.file_metadata().num_rows()).unwrap_or(0)
    }
}
