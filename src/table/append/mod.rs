//! The metadata-only append of a batch of segments: one data file per segment, its URI taken from
//! the recorded object key, and the keys written into the snapshot summary.
//!
//! Start at `transaction`: [`BatchCommit::attempt`] is one attempt of a batch's append, top to
//! bottom, and names every part below in the order it uses them:
//!
//! - `retry`: what a failed commit means and what comes next (pure policies);
//! - `pacing`: when the table's next batch may start (the fleet's slots, the adaptive pace);
//! - `producer`: the snapshot itself (iceberg-rust 0.10.1's fast append has no manifest
//!   merging), with `merge` (the merge policy, Java's `MergeAppend`) and `manifest_list` (the
//!   manifest list, deflate-compressed);
//! - `attempts`: what a batch's attempts wrote, kept from one attempt to the next, and what of
//!   it may be deleted;
//! - `hooks`: the test seams an attempt calls.

pub(crate) mod attempts;
pub(crate) mod hooks;
pub(crate) mod intents;
pub(crate) mod manifest_list;
pub mod merge;
mod pacing;
pub(crate) mod producer;
pub(crate) mod retry;
pub(crate) mod transaction;

pub use attempts::AppendAttempts;
pub use producer::prepare_append;
pub(crate) use transaction::{AttemptInput, Attempted, BatchCommit, Outcome, Schemas};

use iceberg::spec::{DataContentType, DataFile, DataFileBuilder, DataFileFormat, Struct};
use iceberg::table::Table;

use crate::error::{Error, Result};
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
pub(crate) fn data_file(table: &Table, bucket: &str, ready: &ReadySegment) -> Result<DataFile> {
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
