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
//!
//! Either way the table the catalog answers with is checked against the files
//! ([`renumbering`]): some catalogs assign fresh IDs to a new table's first schema whatever the
//! request says (Project Nessie 0.99.0 does, in a create transaction). A table the registrar
//! just created, with no snapshot yet, is then given the files' schema and spec back in one
//! more commit (later schemas keep their IDs on such catalogs); if the catalog renumbers that
//! too, the registrar stops with `sink.iceberg_field_ids_renumbered` and registers nothing: a
//! table whose IDs differ from its files' reads as nulls or as the wrong columns in every engine.

use std::collections::HashMap;

use iceberg::spec::{Schema, TableMetadata};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use serde_json::json;

use crate::catalog::{RestClient, Staged, TableName};
use crate::config::{PartitionTerm, TableLocation};
use crate::error::{Error, ErrorCode, Result};
use crate::table::append::retry::{Failure, classify};
use crate::table::partition::initial_spec;

/// The format version of tables the registrar creates.
pub(crate) const FORMAT_VERSION: u8 = 2;

/// Iceberg's table property: delete the oldest metadata file once more than
/// [`METADATA_PREVIOUS_VERSIONS_MAX`] previous ones are tracked (the catalog does it, on commit).
pub(crate) const METADATA_DELETE_AFTER_COMMIT: &str = "write.metadata.delete-after-commit.enabled";
/// Iceberg's table property: how many previous metadata files are tracked (and, with
/// [`METADATA_DELETE_AFTER_COMMIT`], kept).
pub(crate) const METADATA_PREVIOUS_VERSIONS_MAX: &str = "write.metadata.previous-versions-max";
/// The registrar's [`METADATA_PREVIOUS_VERSIONS_MAX`]. Every commit rewrites the whole metadata
/// file and the registrar commits often (seconds apart), so Java's default of 100 keeps 100
/// copies of an ever larger file while covering only minutes of history; 10 still leaves an
/// operator the last few versions to inspect or roll back to (register an older file).
pub(crate) const PREVIOUS_VERSIONS_KEPT: u32 = 10;

/// The properties of a table the registrar creates: its defaults (old metadata files deleted
/// after commit, [`PREVIOUS_VERSIONS_KEPT`] kept), then the user's `table_properties` over them
/// (the user wins), then the registrar's own `thadam.*` properties (`own`).
pub(crate) fn creation_properties(
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
pub(crate) fn initial_metadata(
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

/// The bytes of a first metadata file, in Java's conventions: iceberg-rust leaves
/// `current-snapshot-id` out of a table without snapshots, while Java writes `-1` and strict
/// parsers require the field (Project Nessie's `register` answers 500 "Cannot build
/// IcebergTableMetadata, some of required attributes are not set \[currentSnapshotId\]"). The
/// lists and maps Java always writes are written too, empty.
pub(crate) fn metadata_file_bytes(metadata: &TableMetadata) -> Result<Vec<u8>> {
    let mut document = serde_json::to_value(metadata)
        .map_err(|e| Error::internal(format!("cannot encode table metadata: {e}")))?;
    if let Some(fields) = document.as_object_mut() {
        fields
            .entry("current-snapshot-id")
            .or_insert_with(|| json!(-1));
        for (key, empty) in [
            ("snapshots", json!([])),
            ("snapshot-log", json!([])),
            ("metadata-log", json!([])),
            ("refs", json!({})),
            ("statistics", json!([])),
            ("partition-statistics", json!([])),
        ] {
            fields.entry(key).or_insert(empty);
        }
    }
    serde_json::to_vec(&document)
        .map_err(|e| Error::internal(format!("cannot encode table metadata: {e}")))
}

/// How the table a catalog created differs from what the registrar asked for (`authored`):
/// `None` when its current schema carries the files' field IDs (names, types and nesting) and
/// its default spec partitions by the same source IDs and transforms. Otherwise a sentence
/// naming each column whose ID moved, for the error.
pub(crate) fn renumbering(authored: &TableMetadata, created: &TableMetadata) -> Option<String> {
    let (want, got) = (authored.current_schema(), created.current_schema());
    let mut differences = Vec::new();
    if want.as_struct() != got.as_struct() {
        let mut ids: Vec<(&i32, &String)> = want.field_id_to_name_map().iter().collect();
        ids.sort();
        for (id, name) in ids {
            match got.field_id_by_name(name) {
                Some(other) if other == *id => {}
                Some(other) => differences.push(format!("{name}: file ID {id}, table ID {other}")),
                None => differences.push(format!("{name}: file ID {id}, not in the table")),
            }
        }
        if differences.is_empty() {
            differences.push("the schema differs in types or nesting".to_string());
        }
    }
    let terms = |spec: &iceberg::spec::PartitionSpec| -> Vec<(i32, String)> {
        spec.fields()
            .iter()
            .map(|f| (f.source_id, f.transform.to_string()))
            .collect()
    };
    let (want_spec, got_spec) = (
        terms(authored.default_partition_spec()),
        terms(created.default_partition_spec()),
    );
    if want_spec != got_spec {
        differences.push(format!(
            "partition spec by (source ID, transform) {want_spec:?}, table has {got_spec:?}"
        ));
    }
    (!differences.is_empty()).then(|| differences.join("; "))
}

/// The updates that give a table the registrar just created, with no snapshot yet, the files'
/// schema and spec back after the catalog renumbered them: the authored schema and spec added
/// under fresh IDs and made current. Catalogs that renumber only a new table's first schema
/// keep these as given. A spec the table already has as its default (always so for an
/// unpartitioned table) is not sent: catalogs reuse the existing spec for an identical one, and
/// then `set-default-spec -1` ("the spec added by this commit") names none, which Project Nessie
/// refuses with 400 "No previously added partition spec".
pub(crate) fn restoring_updates(
    authored: &TableMetadata,
    created: &TableMetadata,
) -> Result<Vec<TableUpdate>> {
    let schema_id = created
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        + 1;
    let spec_id = created
        .partition_specs_iter()
        .map(|s| s.spec_id())
        .max()
        .unwrap_or(0)
        + 1;
    let schema = authored
        .current_schema()
        .as_ref()
        .clone()
        .into_builder()
        .with_schema_id(schema_id)
        .build()
        .map_err(|e| Error::internal(format!("cannot rebuild the files' schema: {e}")))?;
    let mut updates = vec![
        TableUpdate::AddSchema { schema },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    let (wanted, current) = (
        authored.default_partition_spec(),
        created.default_partition_spec(),
    );
    if wanted.fields() != current.fields() {
        updates.push(TableUpdate::AddSpec {
            spec: wanted.as_ref().clone().into_unbound().with_spec_id(spec_id),
        });
        updates.push(TableUpdate::SetDefaultSpec { spec_id: -1 });
    }
    Ok(updates)
}

/// The updates that build `metadata` from nothing, at `location` (the catalog's choice, which
/// replaces the one the metadata was authored with), in the order Java's `TableMetadata` lists
/// the changes of a new table: a spec binds to the current schema, so the schema comes first.
/// `-1` means "the one added by this commit".
pub(crate) fn creation_updates(metadata: &TableMetadata, location: &str) -> Vec<TableUpdate> {
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
pub(crate) async fn create_table(
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
        TableLocation::Shipper => {
            register_at_shipper_location(client, table, metadata.clone()).await?
        }
        TableLocation::Catalog => {
            create_where_catalog_says(client, table, metadata.clone()).await?
        }
    };
    let created = keep_the_files_ids(client, table, &metadata, created).await?;
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

/// Checks the table a create answered with against the authored metadata (see
/// [`renumbering`]). A table someone else created meanwhile (another UUID) is returned as it
/// is: the schema merger judges it like any existing table. Ours, renumbered and still without
/// a snapshot, gets the files' schema and spec back in one commit, checked again.
async fn keep_the_files_ids(
    client: &RestClient,
    table: &TableName,
    authored: &TableMetadata,
    created: Table,
) -> Result<Table> {
    let ours = created.metadata().uuid() == authored.uuid();
    let Some(how) = renumbering(authored, created.metadata()) else {
        return Ok(created);
    };
    if !ours {
        return Ok(created);
    }
    let refused = |detail: String| {
        Error::new(
            ErrorCode::FieldIdsRenumbered,
            format!(
                "the catalog created table {table} with field IDs other than its files' \
                 ({detail}) and did not take the files' IDs back; nothing was registered. A table \
                 whose IDs differ from its files' reads as nulls or as the wrong columns. Drop \
                 the empty table and create it with table_location: shipper (the registrar \
                 writes the metadata and registers it, which catalogs keep as written), or \
                 create it yourself with the files' field IDs"
            ),
        )
    };
    if created.metadata().current_snapshot().is_some() {
        return Err(refused(how));
    }
    tracing::warn!(
        table = %table,
        "the catalog renumbered the new table's field IDs ({how}); giving it the files' schema \
         and partition spec back"
    );
    let current = created.metadata();
    let requirements = vec![
        TableRequirement::UuidMatch {
            uuid: current.uuid(),
        },
        TableRequirement::CurrentSchemaIdMatch {
            current_schema_id: current.current_schema_id(),
        },
        TableRequirement::LastAssignedFieldIdMatch {
            last_assigned_field_id: current.last_column_id(),
        },
        TableRequirement::DefaultSpecIdMatch {
            default_spec_id: current.default_partition_spec_id(),
        },
    ];
    let updates = restoring_updates(authored, current)?;
    let restored = match client
        .commit(table, requirements, updates, None)
        .await
        .map_err(classify)
    {
        Ok(restored) => restored,
        Err(Failure::Fatal(e)) => {
            return Err(refused(format!("{how}; the catalog refused the fix: {e}")));
        }
        // A conflict or a lost answer: the table as it is now decides.
        Err(Failure::Conflict(_) | Failure::Unknown(_) | Failure::NotApplied(_)) => {
            client.load_table(table).await?.ok_or_else(|| {
                Error::unavailable(format!(
                    "table {table} disappeared right after it was created; retrying"
                ))
            })?
        }
    };
    match renumbering(authored, restored.metadata()) {
        None => Ok(restored),
        Some(still) => Err(refused(still)),
    }
}

/// What to tell a user whose catalog refused the shipper's location.
const LOCATION_ADVICE: &str = "if the catalog only allows table locations it chooses (SeaweedFS \
     keeps every table inside its table bucket; Polaris, S3 Tables, Unity, ...), set \
     table_location: catalog on the sink (data files stay where the shipper put them), or allow \
     this location in the catalog";

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
    let bytes = metadata_file_bytes(&metadata)?;
    let file_io = client.file_io(HashMap::new());
    file_io
        .new_output(&path)
        .map_err(|e| Error::config_invalid(format!("cannot write to {path}: {e}")))?
        .write(bytes.into())
        .await
        .map_err(|e| write_failure(&path, &e))?;
    let created = match client.register_table(table, &path).await {
        Ok(created) => created,
        // Refused (not a fault): most often a location outside what the catalog allows.
        Err(e) if matches!(e.code(), ErrorCode::CatalogRejected | ErrorCode::AuthFailed) => {
            // The catalog answered, and no: the file is the registrar's own and no table names
            // it, so it goes (a restart writes a new one). Any other failure may have been
            // applied with its answer lost: then the file stays, a table may name it.
            if let Err(delete) = file_io.delete(&path).await {
                tracing::warn!(
                    table = %table,
                    path = %path,
                    error = %delete,
                    "could not delete the refused table's first metadata file; it is no table's \
                     and may be deleted"
                );
            }
            return Err(e
                .context(format!("registering table {table} at {location}"))
                .with_advice(LOCATION_ADVICE));
        }
        Err(e) => return Err(e),
    };
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
        .commit(table, vec![TableRequirement::NotExist], updates, None)
        .await
        .map_err(classify)
    {
        Ok(created) => Ok(created),
        // Another writer created it first; or our own create was applied and its answer lost.
        // Either way the table exists now: take it as it is.
        Err(Failure::Conflict(_)) | Err(Failure::Unknown(_))
            if let Some(existing) = client.load_table(table).await? =>
        {
            Ok(existing)
        }
        Err(Failure::Unknown(e)) | Err(Failure::NotApplied(e)) => Err(e),
        Err(Failure::Conflict(message)) => Err(Error::unavailable(format!(
            "creating table {table}: the catalog reported a conflict ({message}) but has no \
             such table; retrying"
        ))
        .with_retry_hint("conflict", None)),
        Err(Failure::Fatal(e)) => Err(e.context(format!("creating table {table} at {location}"))),
    }
}

/// A failed write of the first metadata file, by the storage error behind it: a refusal is
/// fatal (retrying would be refused again), an outage is retried.
fn write_failure(path: &str, e: &iceberg::Error) -> Error {
    match crate::io::classify::classify_iceberg_io(e) {
        Some(ErrorCode::AuthFailed) => Error::auth_failed(format!(
            "writing table metadata {path} was refused by the store: {e}; creating a table at the \
             shipper's location needs store credentials that may write there \
             (store.access_key_id / store.secret_access_key, or store.credentials: instance_metadata). A catalog \
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

    fn metadata(schema: &Schema, partition_by: &[PartitionTerm]) -> TableMetadata {
        initial_metadata(schema, "s3://warehouse/ns/t", HashMap::new(), partition_by)
            .expect("metadata")
    }

    #[test]
    fn a_first_metadata_file_says_there_is_no_current_snapshot() {
        let bytes = metadata_file_bytes(&metadata(&schema(), &[])).expect("bytes");
        let json: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        assert_eq!(
            json["current-snapshot-id"], -1,
            "Java's convention; Nessie requires it"
        );
        assert_eq!(json["snapshots"], json!([]));
        assert_eq!(json["refs"], json!({}));
        let ids: Vec<i64> = json["schemas"][0]["fields"]
            .as_array()
            .expect("fields")
            .iter()
            .map(|f| f["id"].as_i64().expect("id"))
            .collect();
        assert_eq!(ids, [7, 3]);
        // iceberg reads it back as a table without a snapshot.
        let back: TableMetadata = serde_json::from_slice(&bytes).expect("parses");
        assert!(back.current_snapshot().is_none());
    }

    /// The table as a renumbering catalog creates it: the same columns, IDs from 1.
    fn renumbered() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "ts", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "device", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .expect("schema")
    }

    #[test]
    fn a_renumbered_table_is_told_apart_and_named_column_by_column() {
        let terms = crate::config::partition_by::parse_all(&["identity(device)".to_string()])
            .expect("terms");
        let authored = metadata(&schema(), &terms);
        assert_eq!(renumbering(&authored, &authored), None);
        let created = metadata(&renumbered(), &terms);
        let how = renumbering(&authored, &created).expect("renumbered");
        assert!(how.contains("device: file ID 3, table ID 2"), "{how}");
        assert!(how.contains("ts: file ID 7, table ID 1"), "{how}");
        assert!(how.contains("partition spec"), "{how}");
        // Only the spec differs: still a renumbering.
        let unpartitioned = metadata(&schema(), &[]);
        let how = renumbering(&authored, &unpartitioned).expect("spec differs");
        assert!(how.starts_with("partition spec"), "{how}");
    }

    #[test]
    fn restoring_adds_the_files_schema_and_spec_under_fresh_ids() {
        let terms = crate::config::partition_by::parse_all(&["identity(device)".to_string()])
            .expect("terms");
        let authored = metadata(&schema(), &terms);
        let created = metadata(&renumbered(), &terms);
        let updates = restoring_updates(&authored, &created).expect("updates");
        let json = serde_json::to_value(&updates).expect("json");
        assert_eq!(json[0]["action"], "add-schema");
        assert_eq!(json[0]["schema"]["schema-id"], 1);
        assert_eq!(json[0]["schema"]["fields"][0]["id"], 7);
        assert_eq!(json[1]["schema-id"], -1);
        assert_eq!(json[2]["spec"]["spec-id"], 1);
        assert_eq!(json[2]["spec"]["fields"][0]["source-id"], 3);
        assert_eq!(json[3]["spec-id"], -1);
    }

    #[test]
    fn restoring_an_unpartitioned_table_sends_no_spec() {
        let authored = metadata(&schema(), &[]);
        let created = metadata(&renumbered(), &[]);
        let updates = restoring_updates(&authored, &created).expect("updates");
        let json = serde_json::to_value(&updates).expect("json");
        let actions: Vec<&str> = json
            .as_array()
            .expect("a list")
            .iter()
            .map(|u| u["action"].as_str().expect("an action"))
            .collect();
        assert_eq!(actions, ["add-schema", "set-current-schema"]);
    }
}
