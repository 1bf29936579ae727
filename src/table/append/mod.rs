//! The metadata-only append of a batch of segments: one data file per segment, its URI taken from
//! the recorded object key, and the keys written into the snapshot summary.
//!
//! `producer` builds the snapshot itself (iceberg-rust 0.10.1's fast append has no manifest
//! merging), `merge` is the merge policy (Java's `MergeAppend`), `manifest_list` writes the
//! manifest list deflate-compressed.

pub mod attempts;
pub mod manifest_list;
pub mod merge;
pub mod producer;

pub use attempts::AppendAttempts;
pub use producer::{AppendCommit, PreparedAppend, prepare_append};

use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Struct};
use iceberg::table::Table;

use crate::catalog::{CommitError, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::footer::SegmentFooter;
use crate::protocol::segment::UploadedSegment;
use crate::table::column_stats::{MetricsConfig, file_metrics};
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
        .file_path(crate::io::keys::object_uri(
            bucket,
            &ready.segment.object_key,
        )?)
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
        _ => match crate::io::classify::classify_iceberg_io(e) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableName {
        TableName {
            namespace: vec!["ns".to_string()],
            name: "t".to_string(),
        }
    }

    #[test]
    fn a_table_the_producer_cannot_write_is_fatal_and_anything_else_is_retried() {
        // e.g. a manifest to merge whose live entries lack sequence numbers (DataInvalid).
        for kind in [
            iceberg::ErrorKind::DataInvalid,
            iceberg::ErrorKind::FeatureUnsupported,
            iceberg::ErrorKind::PreconditionFailed,
        ] {
            match preparation_failure(&table(), &iceberg::Error::new(kind, "cannot merge")) {
                CommitError::Fatal(e) => {
                    assert_eq!(e.code(), ErrorCode::TableUnsupported);
                    assert!(e.message().contains("cannot merge"), "{e}");
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
        let e = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "store hiccup");
        assert!(matches!(
            preparation_failure(&table(), &e),
            CommitError::NotApplied(_)
        ));
    }
}
