//! The data files of segments, and the manifests that hold them: one data file per segment
//! (its URI taken from the recorded object key, its metrics and partition from the footer), the
//! checks the library makes of added files, and the manifest writer of the table's format
//! version. Below both the append (`table::append`), which commits them, and the fleet
//! (`table::fleet`), whose intents carry them from one node to another.

use iceberg::spec::{
    DataContentType, DataFile, DataFileBuilder, DataFileFormat, FormatVersion, ManifestFile,
    ManifestWriter, ManifestWriterBuilder, PartitionSpecRef, Struct, TableMetadata,
};
use iceberg::table::Table;
use iceberg::{Error as IcebergError, ErrorKind};

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

/// The library's checks of added files: data content and a partition value of the default
/// spec's arity. (The spec id is not readable from a `DataFile`: [`data_file`] sets the default
/// spec's.)
pub(crate) fn validate_files(metadata: &TableMetadata, files: &[DataFile]) -> iceberg::Result<()> {
    let spec_id = metadata.default_partition_spec_id();
    let arity = metadata.default_partition_type().fields().len();
    for file in files {
        if file.content_type() != iceberg::spec::DataContentType::Data {
            return Err(IcebergError::new(
                ErrorKind::DataInvalid,
                "only data files can be appended",
            ));
        }
        if file.partition().fields().len() != arity {
            return Err(IcebergError::new(
                ErrorKind::DataInvalid,
                format!(
                    "data file {} does not match the table's default partition spec {spec_id}",
                    file.file_path()
                ),
            ));
        }
    }
    Ok(())
}

/// A data manifest writer of the table's format version, for `spec` (the default spec when
/// `None`) over the current schema.
pub(crate) fn manifest_writer(
    table: &Table,
    path: &str,
    snapshot_id: Option<i64>,
    spec: Option<&PartitionSpecRef>,
) -> iceberg::Result<ManifestWriter> {
    let metadata = table.metadata();
    let spec = spec.unwrap_or_else(|| metadata.default_partition_spec());
    let builder = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        snapshot_id,
        metadata.current_schema().clone(),
        spec.as_ref().clone(),
    );
    Ok(match metadata.format_version() {
        FormatVersion::V1 => builder.build_v1(),
        FormatVersion::V2 => builder.build_v2_data(),
        FormatVersion::V3 => builder.build_v3_data(),
    })
}

/// The data files of `batch` as the table's default spec takes them (one per segment), for a
/// manifest whose entries inherit the snapshot that commits them, or for an intent that holds
/// them itself (`table::fleet::intents`).
pub(crate) fn inherited_files(
    table: &Table,
    bucket: &str,
    batch: &[ReadySegment],
) -> iceberg::Result<Vec<DataFile>> {
    let files = batch
        .iter()
        .map(|r| data_file(table, bucket, r))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| IcebergError::new(ErrorKind::DataInvalid, e.to_string()))?;
    validate_files(table.metadata(), &files)?;
    Ok(files)
}

/// Writes the manifest of an intent (see `table::fleet::intents`): the data files of `batch` as ADDED
/// entries without a snapshot id or sequence numbers, so that they inherit those of whichever
/// snapshot commits the manifest (format v2 and later), in the table's metadata directory.
pub(crate) async fn write_inherited_manifest(
    table: &Table,
    bucket: &str,
    batch: &[ReadySegment],
) -> iceberg::Result<ManifestFile> {
    let files = inherited_files(table, bucket, batch)?;
    let metadata = table.metadata();
    let path = format!(
        "{}/{}-m0.avro",
        metadata_root(metadata),
        uuid::Uuid::new_v4()
    );
    let mut writer = manifest_writer(table, &path, None, None)?;
    for file in files {
        writer.add_file(file, -1)?;
    }
    writer.write_manifest_file().await
}

/// The table's metadata directory.
pub(crate) fn metadata_root(metadata: &TableMetadata) -> String {
    format!("{}/metadata", metadata.location().trim_end_matches('/'))
}
