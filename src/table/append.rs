//! The metadata-only append of a batch of segments: one data file per segment, its URI taken from
//! the recorded object key, and the keys written into the snapshot summary.

use std::collections::HashMap;

use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};

use crate::error::{Error, Result};
use crate::footer::SegmentFooter;
use crate::protocol::segment::UploadedSegment;
use crate::table::committed::{CATALOG_SEQ, SEGMENT_KEYS, WRITER, encode_keys};

/// A segment ready to append: its catalog entry and its footer.
#[derive(Debug, Clone)]
pub struct ReadySegment {
    pub segment: UploadedSegment,
    pub footer: std::sync::Arc<SegmentFooter>,
}

/// The data file of one segment. Only row count and size are filled (column metrics are a later
/// capability; see the README's limits).
pub fn data_file(table: &Table, bucket: &str, ready: &ReadySegment) -> Result<DataFile> {
    let spec_id = table.metadata().default_partition_spec_id();
    if !table.metadata().default_partition_spec().is_unpartitioned() {
        return Err(Error::config_invalid(format!(
            "table {} is partitioned; the registrar registers into unpartitioned tables only",
            table.identifier()
        )));
    }
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(format!("s3://{bucket}/{}", ready.segment.object_key))
        .file_format(DataFileFormat::Parquet)
        .partition_spec_id(spec_id)
        .record_count(ready.footer.row_count())
        .file_size_in_bytes(ready.footer.object_size)
        .build()
        .map_err(|e| Error::internal(format!("cannot describe data file: {e}")))
}

/// A transaction appending `batch` (already filtered against the committed set) in one snapshot.
/// The duplicate check of the library is off: it reads every manifest on every attempt, and the
/// committed set answers the same question from metadata alone.
pub fn append_transaction(
    table: &Table,
    bucket: &str,
    writer: &str,
    batch: &[ReadySegment],
) -> Result<Transaction> {
    let files = batch
        .iter()
        .map(|r| data_file(table, bucket, r))
        .collect::<Result<Vec<_>>>()?;
    let mut summary = HashMap::new();
    summary.insert(
        SEGMENT_KEYS.to_string(),
        encode_keys(batch.iter().map(|r| r.segment.object_key.as_str())),
    );
    if let Some(max_seq) = batch.iter().map(|r| r.segment.seq).max() {
        summary.insert(CATALOG_SEQ.to_string(), max_seq.to_string());
    }
    summary.insert(WRITER.to_string(), writer.to_string());
    let tx = Transaction::new(table);
    let action = tx
        .fast_append()
        .with_check_duplicate(false)
        .add_data_files(files)
        .set_snapshot_properties(summary);
    action
        .apply(tx)
        .map_err(|e| Error::internal(format!("cannot build the append: {e}")))
}
