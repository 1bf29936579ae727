//! Creating a table whose columns keep the segment's own field IDs.
//!
//! REST `create_table` lets the server assign field IDs (the reference fixture renumbers them),
//! and iceberg's `TableMetadataBuilder::new` renumbers too. Field IDs are what the Parquet files
//! are read by, so the registrar authors the first metadata itself, with the file's IDs
//! ([`initial_metadata`]), and hands it to the catalog in one of two ways, per `table_location`:
//!
//! - `shipper` (the spec's rule): the table lives under the shipper's directory. The registrar
//!   writes the metadata file there and registers it (`POST .../register`).
//! - `catalog`: the catalog chooses the location, as Polaris, S3 Tables, Unity and others insist.
//!   A staged create (`stage-create: true`, nothing created) asks where; then one commit with the
//!   `assert-create` requirement creates the table from the authored metadata as a list of
//!   updates, the way Java's create transactions do. Servers apply `add-schema` as given, so the
//!   IDs survive. Data files stay where the shipper put them, registered by absolute URI.

use std::collections::HashMap;

use iceberg::spec::{Schema, TableMetadata};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use serde_json::json;

use crate::catalog::{CommitError, RestClient, Staged, TableName};
use crate::config::TableLocation;
use crate::error::{Error, ErrorCode, Result};
use crate::table::partition::{PartitionTerm, initial_spec};

/// The format version of tables the registrar creates.
pub const FORMAT_VERSION: u8 = 2;

/// Iceberg's table property: delete the oldest metadata file once more than
/// [`METADATA_PREVIOUS_VERSIONS_MAX`] previous ones are tracked (the catalog does it, on commit).
pub const METADATA_DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";
/// Iceberg's table property: how many previous metadata files are tracked (and, with
/// [`METADATA_DELETE_AFTER_COMMIT`], kept).
pub const METADATA_PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";
/// The registrar's [`METADATA_PREVIOUS_VERSIONS_MAX`]. Every commit rewrites the whole metadata
/// file and the registrar commits often (seconds apart), so Java's default of 100 keeps 100
/// copies of an ever larger file while covering only minutes of history; 10 still leaves an
/// operator the last few versions to inspect or roll back to (register an older file).
pub const PREVIOUS_VERSIONS_KEPT: u32 = 10;

/// The properties of a table the registrar creates: its defaults (old metadata files deleted
/// after commit, [`PREVIOUS_VERSIONS_KEPT`] kept), then the user's `table_properties` over them
/// (the user wins), then the registrar's own `thadam.*` properties (`own`).
pub fn creation_properties(
    user: &[(String, String)],
    own: HashMap<String, String>,
) -> HashMap<String, String> {
    let mut properties = HashMap::from([
        (METADATA_DELETE_AFTER_COMMIT.to_string(), "true".to_string()),
        (
            METADATA_PREVIOUS_VERSIONS_MAX.to_string(),
            PREVIOUS_VERSIONS_KEPT.to_string(),
        ),
    ]);
    properties.extend(user.iter().cloned());
    properties.extend(own);
    properties
}

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

/// The updates that build `metadata` from nothing, at `location` (the catalog's choice, which
/// replaces the one the metadata was authored with), in the order Java's `TableMetadata` lists
/// the changes of a new table: a spec binds to the current schema, so the schema comes first.
/// `-1` means "the one added by this commit".
pub fn creation_updates(metadata: &TableMetadata, location: &str) -> Vec<TableUpdate> {
    vec![
        TableUpdate::AssignUuid {
            uuid: metadata.uuid(),
        },
        TableUpdate::UpgradeFormatVersion {
            format_version: metadata.format_version(),
        },
        TableUpdate::AddSchema {
            schema: metadata.current_schema().as_ref().clone(),
        },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
        TableUpdate::AddSpec {
            spec: metadata
                .default_partition_spec()
                .as_ref()
                .clone()
                .into_unbound(),
        },
        TableUpdate::SetDefaultSpec { spec_id: -1 },
        TableUpdate::AddSortOrder {
            sort_order: metadata.default_sort_order().as_ref().clone(),
        },
        TableUpdate::SetDefaultSortOrder { sort_order_id: -1 },
        TableUpdate::SetLocation {
            location: location.to_string(),
        },
        TableUpdate::SetProperties {
            updates: metadata.properties().clone(),
        },
    ]
}

/// Creates `table` with `schema`'s own field IDs, where `placement` says. `shipper_location` is
/// the spec's `{url}/thadam/v1/{pipeline}/{dataset}`. A table another writer created meanwhile is
/// returned as it is (the caller merges into it like into any existing table).
pub async fn create_table(
    client: &RestClient,
    table: &TableName,
    schema: &Schema,
    placement: TableLocation,
    shipper_location: &str,
    properties: HashMap<String, String>,
    partition_by: &[PartitionTerm],
) -> Result<Table> {
    // Checked before anything is created: a partition_by the schema cannot take is a config error.
    let metadata = initial_metadata(schema, shipper_location, properties, partition_by)?;
    client.ensure_namespace(&table.namespace).await?;
    let created = match placement {
        TableLocation::Shipper => register_at_shipper_location(client, table, metadata).await?,
        TableLocation::Catalog => create_where_catalog_says(client, table, metadata).await?,
    };
    tracing::info!(
        table = %table,
        location = %created.metadata().location(),
        partition_by = %crate::table::partition::describe_spec(
            created.metadata().default_partition_spec(),
            created.metadata().current_schema(),
        ),
        "created table with the segment's field IDs"
    );
    Ok(created)
}

/// What to tell a user whose catalog refused the shipper's location.
const LOCATION_ADVICE: &str = "if the catalog only allows table locations it chooses (Polaris, S3 \
     Tables, Unity, ...), set table_location: catalog on the sink (data files stay where the \
     shipper put them), or allow this location in the catalog";

/// `table_location: shipper`: writes the first metadata file under `{location}/metadata/` and
/// registers it.
async fn register_at_shipper_location(
    client: &RestClient,
    table: &TableName,
    metadata: TableMetadata,
) -> Result<Table> {
    let location = metadata.location().to_string();
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
    let created = client
        .register_table(table, &path)
        .await
        .map_err(|e| match e.code() {
            // Refused (not a fault): most often a location outside what the catalog allows.
            ErrorCode::CatalogRejected | ErrorCode::AuthFailed => e
                .context(format!("registering table {table} at {location}"))
                .with_advice(LOCATION_ADVICE),
            _ => e,
        })?;
    Ok(created)
}

/// `table_location: catalog`: a staged create for the location, then one `assert-create` commit.
async fn create_where_catalog_says(
    client: &RestClient,
    table: &TableName,
    metadata: TableMetadata,
) -> Result<Table> {
    let location = match client
        .stage_create(table, metadata.current_schema(), None)
        .await?
    {
        Staged::Accepted { location, .. } => location,
        Staged::Refused { status, message } | Staged::Unsupported { status, message } => {
            return Err(Error::new(
                ErrorCode::CatalogRejected,
                format!(
                    "the catalog answered {status} when asked where to create table {table} \
                     (a staged create): {message}; check that the registrar may create tables in \
                     this namespace, or create the table yourself"
                ),
            ));
        }
    };
    let updates = creation_updates(&metadata, &location);
    match client
        .commit(table, vec![TableRequirement::NotExist], updates, None, None)
        .await
    {
        Ok(created) => Ok(created),
        // Another writer created it first; or our own create was applied and its answer lost.
        // Either way the table exists now: take it as it is.
        Err(CommitError::Conflict(_)) | Err(CommitError::Unknown(_))
            if let Some(existing) = client.load_table(table).await? =>
        {
            Ok(existing)
        }
        Err(CommitError::Unknown(e)) | Err(CommitError::NotApplied(e)) => Err(e),
        Err(CommitError::Conflict(message)) => Err(Error::unavailable(format!(
            "creating table {table}: the catalog reported a conflict ({message}) but has no \
             such table; retrying"
        ))
        .with_retry_hint("conflict", None)),
        Err(CommitError::Fatal(e)) => {
            Err(e.context(format!("creating table {table} at {location}")))
        }
    }
}

/// A failed write of the first metadata file, by the storage error behind it: a refusal is
/// fatal (retrying would be refused again), an outage is retried.
fn write_failure(path: &str, e: &iceberg::Error) -> Error {
    match crate::io::store::classify_iceberg_io(e) {
        Some(ErrorCode::AuthFailed) => Error::auth_failed(format!(
            "writing table metadata {path} was refused by the store: {e}; creating a table at the \
             shipper's location needs store credentials that may write there \
             (store.access_key_id / store.secret_access_key, or instance metadata credentials). A catalog \
             vends credentials only for tables that exist: with vended credentials only, set \
             table_location: catalog (the catalog writes the first metadata) or create the table \
             first"
        )),
        Some(code) if !code.is_transient() => Error::new(
            code,
            format!("writing table metadata {path} was refused by the store: {e}"),
        ),
        _ => Error::unavailable(format!("writing table metadata {path} failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{NestedField, PrimitiveType, Type};

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(7, "ts", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(3, "device", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .expect("schema")
    }

    #[test]
    fn created_tables_bound_their_metadata_files_unless_the_user_says_otherwise() {
        let own = HashMap::from([("thadam.dataset".to_string(), "d".to_string())]);
        let props = creation_properties(&[], own.clone());
        assert_eq!(props[METADATA_DELETE_AFTER_COMMIT], "true");
        assert_eq!(props[METADATA_PREVIOUS_VERSIONS_MAX], "10");
        assert_eq!(props["thadam.dataset"], "d");
        let user = [
            (METADATA_PREVIOUS_VERSIONS_MAX.to_string(), "3".to_string()),
            (
                METADATA_DELETE_AFTER_COMMIT.to_string(),
                "false".to_string(),
            ),
            ("write.format.default".to_string(), "parquet".to_string()),
        ];
        let props = creation_properties(&user, own);
        assert_eq!(props[METADATA_PREVIOUS_VERSIONS_MAX], "3", "the user wins");
        assert_eq!(props[METADATA_DELETE_AFTER_COMMIT], "false");
        assert_eq!(props["write.format.default"], "parquet");
        assert_eq!(props.len(), 4);
    }

    #[test]
    fn creation_updates_carry_the_files_field_ids_and_the_chosen_location() {
        let metadata = initial_metadata(
            &schema(),
            "s3://warehouse/ns/t",
            HashMap::from([("k".to_string(), "v".to_string())]),
            &[],
        )
        .expect("metadata");
        let updates = creation_updates(&metadata, "s3://warehouse/ns/t");
        let json = serde_json::to_value(&updates).expect("json");
        let actions: Vec<&str> = json
            .as_array()
            .expect("array")
            .iter()
            .map(|u| u["action"].as_str().expect("action"))
            .collect();
        assert_eq!(
            actions,
            [
                "assign-uuid",
                "upgrade-format-version",
                "add-schema",
                "set-current-schema",
                "add-spec",
                "set-default-spec",
                "add-sort-order",
                "set-default-sort-order",
                "set-location",
                "set-properties",
            ]
        );
        let ids: Vec<i64> = json[2]["schema"]["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|f| f["id"].as_i64().expect("id"))
            .collect();
        assert_eq!(ids, [7, 3], "the file's own field IDs, not renumbered");
        assert_eq!(json[8]["location"], "s3://warehouse/ns/t");
        assert_eq!(json[9]["updates"]["k"], "v");
        assert_eq!(json[1]["format-version"], 2);
    }
}
