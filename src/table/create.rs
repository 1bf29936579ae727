//! Creating a table whose columns keep the segment's own field IDs.
//!
//! REST `create_table` lets the server assign field IDs (the reference fixture renumbers them),
//! and iceberg's `TableMetadataBuilder::new` renumbers too. Field IDs are what the Parquet files
//! are read by, so the registrar writes the first metadata file itself, with the file's IDs, and
//! registers it (`POST .../register`).

use std::collections::HashMap;

use iceberg::spec::{Schema, TableMetadata};
use iceberg::table::Table;
use serde_json::json;

use crate::catalog::{RestClient, TableName};
use crate::error::{Error, Result};
use crate::table::partition::{PartitionTerm, initial_spec};

/// The format version of tables the registrar creates.
pub const FORMAT_VERSION: u8 = 2;

/// The first metadata document of a new, unsorted v2 table, partitioned by `partition_by`
/// (unpartitioned when empty; partition field IDs from 1000, as the Iceberg spec assigns them).
pub fn initial_metadata(
    schema: &Schema,
    location: &str,
    properties: HashMap<String, String>,
    partition_by: &[PartitionTerm],
) -> Result<TableMetadata> {
    let schema = Schema::builder()
        .with_schema_id(0)
        .with_fields(schema.as_struct().fields().iter().cloned())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .build()
        .map_err(|e| Error::internal(format!("cannot rebuild the footer schema: {e}")))?;
    let schema_json = serde_json::to_value(&schema)
        .map_err(|e| Error::internal(format!("cannot encode the schema: {e}")))?;
    let spec = initial_spec(partition_by, &schema)?;
    // 999 when unpartitioned: the spec's "no partition field yet".
    let last_partition_id = spec.highest_field_id().unwrap_or(999);
    let spec_json = serde_json::to_value(&spec)
        .map_err(|e| Error::internal(format!("cannot encode the partition spec: {e}")))?;
    let document = json!({
        "format-version": FORMAT_VERSION,
        "table-uuid": uuid::Uuid::new_v4().to_string(),
        "location": location,
        "last-sequence-number": 0,
        "last-updated-ms": chrono::Utc::now().timestamp_millis(),
        "last-column-id": schema.highest_field_id(),
        "current-schema-id": 0,
        "schemas": [schema_json],
        "default-spec-id": 0,
        "partition-specs": [spec_json],
        "last-partition-id": last_partition_id,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": properties,
        "snapshots": [],
        "snapshot-log": [],
        "metadata-log": [],
        "refs": {},
    });
    // Parsing our own document back validates it with iceberg's own rules.
    serde_json::from_value(document)
        .map_err(|e| Error::internal(format!("the authored table metadata is not valid: {e}")))
}

/// Writes the first metadata file under `{location}/metadata/` and registers it.
pub async fn create_table(
    client: &RestClient,
    table: &TableName,
    schema: &Schema,
    location: &str,
    properties: HashMap<String, String>,
    partition_by: &[PartitionTerm],
) -> Result<Table> {
    // Checked before anything is created: a partition_by the schema cannot take is a config error.
    let metadata = initial_metadata(schema, location, properties, partition_by)?;
    client.ensure_namespace(&table.namespace).await?;
    let path = format!(
        "{}/metadata/00000-{}.metadata.json",
        location.trim_end_matches('/'),
        uuid::Uuid::new_v4()
    );
    let bytes = serde_json::to_vec(&metadata)
        .map_err(|e| Error::internal(format!("cannot encode table metadata: {e}")))?;
    let file_io = client.file_io(HashMap::new());
    file_io
        .new_output(&path)
        .map_err(|e| Error::config_invalid(format!("cannot write to {path}: {e}")))?
        .write(bytes.into())
        .await
        .map_err(|e| Error::unavailable(format!("writing table metadata {path} failed: {e}")))?;
    let created = client.register_table(table, &path).await?;
    tracing::info!(
        table = %table,
        location,
        partition_by = %crate::table::partition::describe_spec(
            created.metadata().default_partition_spec(),
            created.metadata().current_schema(),
        ),
        "created table with the segment's field IDs"
    );
    Ok(created)
}
