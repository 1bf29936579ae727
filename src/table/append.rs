//! The metadata-only append of a batch of segments: one data file per segment, its URI taken from
//! the recorded object key, and the keys written into the snapshot summary.

use std::collections::HashMap;

use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Struct};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};

use crate::catalog::{CommitError, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::footer::SegmentFooter;
use crate::protocol::segment::UploadedSegment;
use crate::table::committed::{
    CATALOG_SEQ, SEGMENT_COUNT, SEGMENT_IDS, WATERMARK_KEY, WRITER, encode_ids,
};
use crate::table::metrics::{MetricsConfig, file_metrics};
use crate::table::partition::{describe_spec, file_partition};

/// A segment ready to append: its catalog entry and its footer.
#[derive(Debug, Clone)]
pub struct ReadySegment {
    pub segment: UploadedSegment,
    pub footer: std::sync::Arc<SegmentFooter>,
}

/// The data file of one segment: row count, size, the column metrics its footer holds (keyed
/// by field ID, under the table's metrics mode; see `table::metrics`), and, in a partitioned
/// table, its partition value under the table's default spec (see `table::partition`). No I/O:
/// the footer was already read for the schema.
pub fn data_file(table: &Table, bucket: &str, ready: &ReadySegment) -> Result<DataFile> {
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec();
    let schema = metadata.current_schema();
    let partition = if spec.is_unpartitioned() {
        Struct::empty()
    } else {
        // Exact, untruncated bounds whatever the metrics mode: a truncated string bound would
        // give a wrong identity value.
        let exact = file_metrics(
            &ready.footer.metadata,
            schema,
            &MetricsConfig::full(),
            ready.footer.object_size,
        );
        file_partition(spec, schema, &exact).map_err(|m| {
            m.into_error(
                &table.identifier().to_string(),
                &ready.segment.object_key,
                &describe_spec(spec, schema),
            )
        })?
    };
    let config = MetricsConfig::from_properties(metadata.properties(), schema);
    let metrics = file_metrics(
        &ready.footer.metadata,
        schema,
        &config,
        ready.footer.object_size,
    );
    DataFileBuilder::default()
        .content(DataContentType::Data)
        .file_path(crate::store::object_uri(bucket, &ready.segment.object_key)?)
        .file_format(DataFileFormat::Parquet)
        .partition_spec_id(spec.spec_id())
        .partition(partition)
        .record_count(ready.footer.row_count())
        .file_size_in_bytes(ready.footer.object_size)
        .column_sizes(metrics.column_sizes)
        .value_counts(metrics.value_counts)
        .null_value_counts(metrics.null_value_counts)
        .nan_value_counts(metrics.nan_value_counts)
        .lower_bounds(metrics.lower_bounds)
        .upper_bounds(metrics.upper_bounds)
        .split_offsets(metrics.split_offsets)
        .build()
        .map_err(|e| Error::internal(format!("cannot describe data file: {e}")))
}

/// A transaction appending `batch` (already filtered against the committed set) in one snapshot,
/// and setting the batch's catalog watermark (`(property, value)`, from
/// [`crate::table::CommittedSet::watermark_update`]) in the same commit, and removing the
/// snapshots `expire` (from `table::retention`; empty: none).
/// The duplicate check of the library is off: it reads every manifest on every attempt, and the
/// committed set answers the same question from metadata alone.
pub fn append_transaction(
    table: &Table,
    bucket: &str,
    writer: &str,
    batch: &[ReadySegment],
    watermark: Option<&(String, String)>,
    expire: &[i64],
) -> Result<Transaction> {
    let files = batch
        .iter()
        .map(|r| data_file(table, bucket, r))
        .collect::<Result<Vec<_>>>()?;
    let mut summary = HashMap::new();
    summary.insert(
        SEGMENT_IDS.to_string(),
        encode_ids(batch.iter().map(|r| r.segment.object_key.as_str())),
    );
    summary.insert(SEGMENT_COUNT.to_string(), batch.len().to_string());
    if let Some(max_seq) = batch.iter().map(|r| r.segment.seq).max() {
        summary.insert(CATALOG_SEQ.to_string(), max_seq.to_string());
    }
    summary.insert(WRITER.to_string(), writer.to_string());
    if let Some((property, _)) = watermark {
        summary.insert(WATERMARK_KEY.to_string(), property.clone());
    }
    let mut tx = Transaction::new(table);
    if !expire.is_empty() {
        // Before the append: its requirement (main at the base snapshot) is checked against the
        // table as each action leaves it. Age-based selection pinned off, so exactly `expire`
        // goes (chosen by `table::retention::expirable`); metadata only.
        tx = tx
            .expire_snapshots()
            .expire_snapshot_ids(expire.iter().copied())
            .expire_older_than_ms(i64::MIN)
            .apply(tx)
            .map_err(|e| Error::internal(format!("cannot build the snapshot expiry: {e}")))?;
    }
    if let Some((property, value)) = watermark {
        tx = tx
            .update_table_properties()
            .set(property.clone(), value.clone())
            .apply(tx)
            .map_err(|e| Error::internal(format!("cannot build the watermark update: {e}")))?;
    }
    let action = tx
        .fast_append()
        .with_check_duplicate(false)
        .add_data_files(files)
        .set_snapshot_properties(summary);
    action
        .apply(tx)
        .map_err(|e| Error::internal(format!("cannot build the append: {e}")))
}

/// What a failure to build or send the append means when the catalog never answered: the
/// library failed before the request (writing manifests, reading the table's properties or
/// features). Classified by the error's kind: a table this client cannot write is permanent;
/// storage and other unexpected failures are retried.
pub fn preparation_failure(table: &TableName, e: &iceberg::Error) -> CommitError {
    use iceberg::ErrorKind;
    match e.kind() {
        ErrorKind::DataInvalid | ErrorKind::FeatureUnsupported | ErrorKind::PreconditionFailed => {
            CommitError::Fatal(Error::new(
                ErrorCode::TableUnsupported,
                format!(
                    "the append to {table} cannot be built: {}; fix the table property or \
                     feature it names (or register into a table this client can write)",
                    error_chain(e)
                ),
            ))
        }
        _ => match crate::store::classify_iceberg_io(e) {
            // Storage refused the manifests for good (read-only credentials, a bucket policy):
            // retrying would never succeed.
            Some(code) if !code.is_transient() => CommitError::Fatal(Error::new(
                code,
                format!(
                    "writing the manifests of the append to {table} was refused by the store: \
                     {}; check that the store credentials may write under the table location",
                    error_chain(e)
                ),
            )),
            _ => CommitError::NotApplied(Error::unavailable(format!(
                "preparing the append to {table} failed: {}",
                error_chain(e)
            ))),
        },
    }
}

/// An iceberg error's message and the messages of its sources, without the backtrace its
/// `Display` may carry.
fn error_chain(e: &iceberg::Error) -> String {
    let mut text = e.message().to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
