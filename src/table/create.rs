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
use crate::error::{Error, ErrorCode, Result};

/// The format version of tables the registrar creates.
pub const FORMAT_VERSION: u8 = 2;

/// The first metadata document of a new, unpartitioned, unsorted v2 table.
pub fn initial_metadata(
    schema: &Schema,
    location: &str,
    properties: HashMap<String, String>,
) -> Result<TableMetadata> {
    let schema = Schema::builder()
        .with_schema_id(0)
        .with_fields(schema.as_struct().fields().iter().cloned())
        .with_identifier_field_ids(schema.identifier_field_ids())
        .build()
        .map_err(|e| Error::internal(format!("cannot rebuild the footer schema: {e}")))?;
    let schema_json = serde_json::to_value(&schema)
        .map_err(|e| Error::internal(format!("cannot encode the schema: {e}")))?;
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
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
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
) -> Result<Table> {
    client.ensure_namespace(&table.namespace).await?;
    let metadata = initial_metadata(schema, location, properties)?;
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
        .map_err(|e| write_failure(&path, &e))?;
    let created = client.register_table(table, &path).await?;
    tracing::info!(table = %table, location, "created table with the segment's field IDs");
    Ok(created)
}

/// A failed write of the first metadata file, by the opendal error behind it: a refusal is
/// fatal (retrying would be refused again), an outage is retried.
fn write_failure(path: &str, e: &iceberg::Error) -> Error {
    match crate::store::classify_iceberg_io(e) {
        Some(ErrorCode::AuthFailed) => Error::auth_failed(format!(
            "writing table metadata {path} was refused by the store: {e}; creating a table needs \
             store credentials that may write under its location (store.access_key_id / \
             store.secret_access_key, or the ambient AWS chain): a catalog vends credentials \
             only for tables that exist, so create the table first when only it has them"
        )),
        Some(code) if !code.is_transient() => Error::new(
            code,
            format!("writing table metadata {path} was refused by the store: {e}"),
        ),
        _ => Error::unavailable(format!("writing table metadata {path} failed: {e}")),
    }
}
