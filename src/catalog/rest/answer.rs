//! How a commit's answer becomes the table the committer holds next, without parsing the table's
//! whole history again.
//!
//! The catalog answers a commit with the complete new `metadata.json`: every snapshot the table
//! keeps, each with its summary. Parsing that into iceberg's `TableMetadata` costs time and memory
//! in proportion to the table's history (at ~1,000 snapshots it was a quarter of the registrar's
//! CPU per commit, and dropping the previous copy another sixth). Yet after an append the answer
//! is, nearly always, exactly the table the commit was built on with the commit's own updates
//! applied. So the registrar applies its updates to the table it holds itself (iceberg's
//! `TableMetadataBuilder`, the same rules a catalog follows) and only *checks* the answer against
//! that: a lean pass over the JSON that allocates nothing per snapshot ([`Shape`]).
//!
//! What is checked is everything the registrar reads from table metadata: uuid, location, format
//! version, sequence numbers, schemas, partition specs, sort orders, properties (watermarks,
//! merge and metrics settings), refs (retention protects other branches and tags), and every
//! snapshot's id, parent, sequence number, timestamp, manifest list and schema id, plus the full
//! summary of the snapshots this commit added. When anything differs (another writer changed a
//! property, added a schema or a tag meanwhile; a catalog that rewrites something on commit), the
//! answer is parsed in full as before: correctness never depends on the shortcut. Not checked, and
//! taken from the local build: `last-updated-ms`, `snapshot-log`, `metadata-log` and statistics
//! files, which the registrar never reads and never writes back (it sends updates, never a whole
//! `metadata.json`).
//!
//! Only format version 2 takes the shortcut; v1 and v3 tables are always parsed in full.

use std::borrow::Cow;
use std::collections::HashMap;

use iceberg::TableUpdate;
use iceberg::spec::{
    FormatVersion, PartitionSpec, Schema, SnapshotReference, SortOrder, Summary, TableMetadata,
};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A table's refs (branches and tags), by name.
pub type Refs = HashMap<String, SnapshotReference>;

/// The commit answer, with the table metadata read only as far as the check needs.
#[derive(Deserialize)]
struct LeanAnswer<'a> {
    #[serde(rename = "metadata-location", borrow)]
    metadata_location: Cow<'a, str>,
    #[serde(borrow)]
    metadata: Shape<'a>,
}

/// The parts of a `metadata.json` the registrar reads. Snapshot summaries stay raw slices of
/// the input (no allocation per snapshot); the small parts (schemas, specs, sort orders,
/// properties, refs) are parsed in full. Unknown fields are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Shape<'a> {
    format_version: u8,
    table_uuid: uuid::Uuid,
    #[serde(borrow)]
    location: Cow<'a, str>,
    last_sequence_number: i64,
    last_column_id: i32,
    current_schema_id: i32,
    schemas: Vec<Schema>,
    default_spec_id: i32,
    partition_specs: Vec<PartitionSpec>,
    last_partition_id: i32,
    default_sort_order_id: i64,
    sort_orders: Vec<SortOrder>,
    #[serde(default)]
    properties: HashMap<String, String>,
    #[serde(default)]
    current_snapshot_id: Option<i64>,
    #[serde(default)]
    refs: Refs,
    #[serde(default, borrow)]
    snapshots: Vec<SnapshotShape<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct SnapshotShape<'a> {
    snapshot_id: i64,
    #[serde(default)]
    parent_snapshot_id: Option<i64>,
    sequence_number: i64,
    timestamp_ms: i64,
    #[serde(borrow)]
    manifest_list: Cow<'a, str>,
    #[serde(default)]
    schema_id: Option<i32>,
    #[serde(borrow)]
    summary: &'a RawValue,
}

/// Only the refs of a `metadata.json` (in a load or commit answer), for answers parsed in full.
#[derive(Deserialize)]
struct RefsOnly {
    metadata: RefsOfMetadata,
}

#[derive(Deserialize)]
struct RefsOfMetadata {
    #[serde(default)]
    refs: Refs,
}

/// The refs in a load or commit answer (`{"metadata": {..., "refs": {...}}, ...}`), read without
/// building the rest of it.
pub fn refs_of(answer: &[u8]) -> serde_json::Result<Refs> {
    serde_json::from_slice::<RefsOnly>(answer).map(|r| r.metadata.refs)
}

/// The table after a commit, built locally and confirmed by the answer.
#[derive(Debug)]
pub struct Adopted {
    pub metadata: TableMetadata,
    pub metadata_location: String,
    pub refs: Refs,
}

/// Why an answer was not adopted as built: it must be parsed in full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch(pub String);

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn mismatch(what: impl Into<String>) -> Mismatch {
    Mismatch(what.into())
}

/// The table `base` (last written at `base_location`, with refs `base_refs`) after `updates`,
/// when `answer` (the catalog's answer to the commit of those updates) confirms it; see the
/// module docs for what is compared.
pub fn adopt(
    base: &TableMetadata,
    base_location: &str,
    base_refs: &Refs,
    updates: &[TableUpdate],
    answer: &[u8],
) -> Result<Adopted, Mismatch> {
    if base.format_version() != FormatVersion::V2 {
        return Err(mismatch("only format version 2 is checked leanly"));
    }
    let lean: LeanAnswer =
        serde_json::from_slice(answer).map_err(|e| mismatch(format!("lean parse: {e}")))?;
    let expected = apply(base, base_location, updates)?;
    let refs = expected_refs(base_refs, updates, &expected);
    compare(&lean.metadata, &expected, &refs, updates)?;
    Ok(Adopted {
        metadata: expected,
        metadata_location: lean.metadata_location.into_owned(),
        refs,
    })
}

/// `updates` applied to `base` by iceberg's builder, as a catalog applies them.
fn apply(
    base: &TableMetadata,
    base_location: &str,
    updates: &[TableUpdate],
) -> Result<TableMetadata, Mismatch> {
    let mut builder = base.clone().into_builder(Some(base_location.to_string()));
    for update in updates {
        builder = update
            .clone()
            .apply(builder)
            .map_err(|e| mismatch(format!("applying the updates locally: {}", e.message())))?;
    }
    builder
        .build()
        .map(|built| built.metadata)
        .map_err(|e| mismatch(format!("building the metadata locally: {}", e.message())))
}

/// `base_refs` after `updates`; refs to snapshots that are gone go too (as the builder does).
fn expected_refs(base_refs: &Refs, updates: &[TableUpdate], expected: &TableMetadata) -> Refs {
    let mut refs = base_refs.clone();
    for update in updates {
        match update {
            TableUpdate::SetSnapshotRef {
                ref_name,
                reference,
            } => {
                refs.insert(ref_name.clone(), reference.clone());
            }
            TableUpdate::RemoveSnapshotRef { ref_name } => {
                refs.remove(ref_name);
            }
            _ => {}
        }
    }
    refs.retain(|_, r| expected.snapshot_by_id(r.snapshot_id).is_some());
    refs
}

/// The first difference between the answer and the expected table, if any.
fn compare(
    got: &Shape,
    expected: &TableMetadata,
    refs: &Refs,
    updates: &[TableUpdate],
) -> Result<(), Mismatch> {
    let same = |what: &str, equal: bool| {
        if equal { Ok(()) } else { Err(mismatch(what)) }
    };
    same("format-version", got.format_version == 2)?;
    same("table-uuid", got.table_uuid == expected.uuid())?;
    same("location", got.location == expected.location())?;
    same(
        "last-sequence-number",
        got.last_sequence_number == expected.last_sequence_number(),
    )?;
    same(
        "last-column-id",
        got.last_column_id == expected.last_column_id(),
    )?;
    same(
        "current-schema-id",
        got.current_schema_id == expected.current_schema_id(),
    )?;
    same(
        "schemas",
        same_items(&got.schemas, expected.schemas_iter().len(), |s| {
            expected.schema_by_id(s.schema_id()).map(AsRef::as_ref)
        }),
    )?;
    same(
        "default-spec-id",
        got.default_spec_id == expected.default_partition_spec_id(),
    )?;
    same(
        "partition-specs",
        same_items(
            &got.partition_specs,
            expected.partition_specs_iter().len(),
            |s| {
                expected
                    .partition_spec_by_id(s.spec_id())
                    .map(AsRef::as_ref)
            },
        ),
    )?;
    same(
        "last-partition-id",
        got.last_partition_id == expected.last_partition_id(),
    )?;
    same(
        "default-sort-order-id",
        got.default_sort_order_id == expected.default_sort_order_id(),
    )?;
    same(
        "sort-orders",
        same_items(&got.sort_orders, expected.sort_orders_iter().len(), |o| {
            expected.sort_order_by_id(o.order_id).map(AsRef::as_ref)
        }),
    )?;
    same("properties", &got.properties == expected.properties())?;
    // Java writes -1 for "no current snapshot".
    let current = got.current_snapshot_id.filter(|id| *id != -1);
    same(
        "current-snapshot-id",
        current == expected.current_snapshot_id(),
    )?;
    same("refs", &got.refs == refs)?;
    same(
        "snapshot count",
        got.snapshots.len() == expected.snapshots().len(),
    )?;
    for s in &got.snapshots {
        let Some(e) = expected.snapshot_by_id(s.snapshot_id) else {
            return Err(mismatch(format!("snapshot {} unexpected", s.snapshot_id)));
        };
        same(
            "a snapshot's fields",
            s.parent_snapshot_id == e.parent_snapshot_id()
                && s.sequence_number == e.sequence_number()
                && s.timestamp_ms == e.timestamp_ms()
                && s.manifest_list == e.manifest_list()
                && s.schema_id == e.schema_id(),
        )?;
    }
    // The snapshots this commit added: their summaries too (the committed set and retention
    // read them).
    for update in updates {
        if let TableUpdate::AddSnapshot { snapshot } = update {
            let Some(s) = got
                .snapshots
                .iter()
                .find(|s| s.snapshot_id == snapshot.snapshot_id())
            else {
                return Err(mismatch("the added snapshot is missing"));
            };
            let summary: Summary = serde_json::from_str(s.summary.get())
                .map_err(|e| mismatch(format!("the added snapshot's summary: {e}")))?;
            same(
                "the added snapshot's summary",
                &summary == snapshot.summary(),
            )?;
        }
    }
    Ok(())
}

/// Whether `got` holds as many items as the expected table (`expected_len`), each equal to the
/// expected item with its id (`expected`).
fn same_items<'e, T: PartialEq + 'e>(
    got: &[T],
    expected_len: usize,
    expected: impl Fn(&T) -> Option<&'e T>,
) -> bool {
    got.len() == expected_len && got.iter().all(|g| expected(g).is_some_and(|e| e == g))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{
        MAIN_BRANCH, Operation, Snapshot, SnapshotReference, SnapshotRetention, Summary,
    };
    use iceberg_catalog_rest::CommitTableResponse;
    use serde_json::{Value, json};

    use super::*;

    const LOCATION: &str = "s3://b/t/metadata/00003-x.metadata.json";

    /// A v2 table with snapshots 1..=n (each the parent of the next), a tag on 1 and properties.
    fn base(n: i64) -> TableMetadata {
        let snapshots: Vec<Value> = (1..=n)
            .map(|id| {
                let mut s = json!({
                    "snapshot-id": id,
                    "sequence-number": id,
                    "timestamp-ms": 1_700_000_000_000i64 + id,
                    "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"),
                    "summary": {"operation": "append", "thadam.segment-ids": "AAAAAAAAAAAAAAAA"},
                    "schema-id": 0,
                });
                if id > 1 {
                    s["parent-snapshot-id"] = json!(id - 1);
                }
                s
            })
            .collect();
        serde_json::from_value(json!({
            "format-version": 2,
            "table-uuid": "5f4a6c48-0c3a-4a2c-9e61-3c1b8f2d1e11",
            "location": "s3://b/t",
            "last-sequence-number": n,
            "last-updated-ms": 1_700_000_000_000i64 + n,
            "last-column-id": 2,
            "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "x", "required": false, "type": "long"},
                {"id": 2, "name": "s", "required": false, "type": "string"}]}],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": {"thadam.watermark.log": "3:AAAAAAAAAAAAAAAA", "k": "v"},
            "current-snapshot-id": n,
            "snapshots": snapshots,
            "snapshot-log": (1..=n).map(|id| json!({"snapshot-id": id, "timestamp-ms": 1_700_000_000_000i64 + id})).collect::<Vec<_>>(),
            "metadata-log": [],
            "refs": {
                "main": {"snapshot-id": n, "type": "branch"},
                "keep": {"snapshot-id": 1, "type": "tag"},
            },
        }))
        .expect("base metadata")
    }

    fn base_refs(n: i64) -> Refs {
        HashMap::from([
            (
                MAIN_BRANCH.to_string(),
                SnapshotReference::new(n, SnapshotRetention::branch(None, None, None)),
            ),
            (
                "keep".to_string(),
                SnapshotReference::new(
                    1,
                    SnapshotRetention::Tag {
                        max_ref_age_ms: None,
                    },
                ),
            ),
        ])
    }

    /// What the registrar's append sends: a watermark, a snapshot on `main`, expired snapshots.
    fn updates(base: &TableMetadata, expire: &[i64]) -> Vec<TableUpdate> {
        let parent = base.current_snapshot_id();
        let id = 1000;
        let snapshot = Snapshot::builder()
            .with_snapshot_id(id)
            .with_parent_snapshot_id(parent)
            .with_sequence_number(base.next_sequence_number())
            .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
            .with_manifest_list("s3://b/t/metadata/snap-1000.avro")
            .with_schema_id(0)
            .with_summary(Summary {
                operation: Operation::Append,
                additional_properties: HashMap::from([(
                    "thadam.segment-ids".to_string(),
                    "BBBBBBBBBBBBBBBB".to_string(),
                )]),
            })
            .build();
        let mut out = vec![
            TableUpdate::SetProperties {
                updates: HashMap::from([(
                    "thadam.watermark.log".to_string(),
                    "9:BBBBBBBBBBBBBBBB".to_string(),
                )]),
            },
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(id, SnapshotRetention::branch(None, None, None)),
            },
        ];
        if !expire.is_empty() {
            out.push(TableUpdate::RemoveSnapshots {
                snapshot_ids: expire.to_vec(),
            });
        }
        out
    }

    /// The catalog's answer: the updates applied by iceberg's builder (as a catalog would), as
    /// JSON, edited by `edit` (another writer's change, a catalog's own rewrite).
    fn answer(base: &TableMetadata, updates: &[TableUpdate], edit: impl Fn(&mut Value)) -> Vec<u8> {
        let metadata = apply(base, LOCATION, updates).expect("server-side apply");
        let mut json = serde_json::to_value(CommitTableResponse {
            metadata_location: "s3://b/t/metadata/00004-y.metadata.json".to_string(),
            metadata,
        })
        .expect("answer json");
        edit(&mut json["metadata"]);
        serde_json::to_vec(&json).expect("bytes")
    }

    #[test]
    fn an_answer_that_is_the_base_plus_the_updates_is_adopted_as_built() {
        let base = base(5);
        let updates = updates(&base, &[2, 3]);
        let bytes = answer(&base, &updates, |_| {});
        let adopted = adopt(&base, LOCATION, &base_refs(5), &updates, &bytes).expect("adopted");
        assert_eq!(
            adopted.metadata_location,
            "s3://b/t/metadata/00004-y.metadata.json"
        );
        // The same table as parsing the answer in full, in everything the registrar reads.
        let full: CommitTableResponse = serde_json::from_slice(&bytes).expect("full parse");
        let (a, f) = (&adopted.metadata, &full.metadata);
        assert_eq!(a.current_snapshot_id(), Some(1000));
        assert_eq!(a.current_snapshot_id(), f.current_snapshot_id());
        assert_eq!(a.properties(), f.properties());
        assert_eq!(a.last_sequence_number(), f.last_sequence_number());
        let ids = |m: &TableMetadata| {
            let mut ids: Vec<i64> = m.snapshots().map(|s| s.snapshot_id()).collect();
            ids.sort();
            ids
        };
        assert_eq!(ids(a), vec![1, 4, 5, 1000]);
        assert_eq!(ids(a), ids(f));
        for s in f.snapshots() {
            assert_eq!(
                a.snapshot_by_id(s.snapshot_id()).map(|x| x.as_ref()),
                Some(s.as_ref())
            );
        }
        assert_eq!(adopted.refs, refs_of(&bytes).expect("refs"));
        assert_eq!(adopted.refs["main"].snapshot_id, 1000);
        assert_eq!(adopted.refs["keep"].snapshot_id, 1);
    }

    #[test]
    fn any_difference_the_registrar_would_read_means_a_full_parse() {
        let base = base(5);
        let updates = updates(&base, &[2]);
        let refs = base_refs(5);
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Edit)> = vec![
            (
                "properties",
                Box::new(|m| m["properties"]["commit.manifest-merge.enabled"] = json!("false")),
            ),
            (
                "refs",
                Box::new(|m| m["refs"]["new-tag"] = json!({"snapshot-id": 4, "type": "tag"})),
            ),
            (
                "schemas",
                Box::new(|m| {
                    let mut s = m["schemas"][0].clone();
                    s["schema-id"] = json!(1);
                    m["schemas"].as_array_mut().expect("array").push(s);
                }),
            ),
            (
                "current-schema-id",
                Box::new(|m| m["current-schema-id"] = json!(7)),
            ),
            (
                "snapshot count",
                Box::new(|m| {
                    let arr = m["snapshots"].as_array_mut().expect("array");
                    arr.retain(|s| s["snapshot-id"] != json!(1));
                }),
            ),
            (
                "a snapshot's fields",
                Box::new(|m| {
                    for s in m["snapshots"].as_array_mut().expect("array") {
                        if s["snapshot-id"] == json!(4) {
                            s["manifest-list"] = json!("s3://b/t/metadata/other.avro");
                        }
                    }
                }),
            ),
            (
                "the added snapshot's summary",
                Box::new(|m| {
                    for s in m["snapshots"].as_array_mut().expect("array") {
                        if s["snapshot-id"] == json!(1000) {
                            s["summary"]["server-added"] = json!("x");
                        }
                    }
                }),
            ),
            (
                "last-sequence-number",
                Box::new(|m| m["last-sequence-number"] = json!(99)),
            ),
            (
                "table-uuid",
                Box::new(|m| m["table-uuid"] = json!("00000000-0000-4000-8000-000000000000")),
            ),
        ];
        for (what, edit) in cases {
            let bytes = answer(&base, &updates, edit);
            let err = adopt(&base, LOCATION, &refs, &updates, &bytes).expect_err(what);
            assert!(err.0.starts_with(what), "{what}: {err}");
        }
        // Refs the registrar had wrong (a tag it did not know of) are caught too.
        let bytes = answer(&base, &updates, |_| {});
        let mut stale = refs.clone();
        stale.remove("keep");
        assert_eq!(
            adopt(&base, LOCATION, &stale, &updates, &bytes)
                .expect_err("stale refs")
                .0,
            "refs"
        );
        // What the registrar never reads does not matter.
        let bytes = answer(&base, &updates, |m| {
            m["last-updated-ms"] = json!(1);
            m["snapshot-log"] = json!([]);
            m["statistics"] = json!([]);
            m["some-future-field"] = json!({"a": 1});
        });
        assert!(adopt(&base, LOCATION, &refs, &updates, &bytes).is_ok());
    }

    #[test]
    fn other_format_versions_and_broken_answers_are_parsed_in_full() {
        let base = base(2);
        let updates = updates(&base, &[]);
        assert!(adopt(&base, LOCATION, &base_refs(2), &updates, b"{}").is_err());
        assert!(adopt(&base, LOCATION, &base_refs(2), &updates, b"not json").is_err());
        let v3: TableMetadata = {
            let mut json = serde_json::to_value(&base).expect("json");
            json["format-version"] = json!(3);
            json["next-row-id"] = json!(0);
            serde_json::from_value(json).expect("v3")
        };
        let bytes = answer(&base, &updates, |_| {});
        assert_eq!(
            adopt(&v3, LOCATION, &base_refs(2), &updates, &bytes)
                .expect_err("v3")
                .0,
            "only format version 2 is checked leanly"
        );
    }
}
