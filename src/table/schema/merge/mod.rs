//! Merging a segment's schema into its table's schema, by field ID.
//!
//! Every Parquet segment carries stable field IDs, so the table and the file are matched by ID,
//! never by name or position. [`merge`] walks both schemas (recursing into structs, list elements
//! and map keys and values by their own IDs) and either returns the evolved table schema and the
//! list of changes it made, or *every* reason the file cannot be merged.
//!
//! The rules:
//! - a field ID the table lacks (at any depth) is added with that ID, at the end of its parent
//!   struct, always as optional (rows written before it read as null);
//! - the same ID under another name is a rename (the table takes the file's name); order within a
//!   struct does not matter (the table's order is kept), but a field ID under another parent is a
//!   violation;
//! - int -> long, float -> double and decimal(P,S) -> decimal(P',S) with P' > P are promotions (the
//!   table takes the file's wider type); anything else that differs is a violation;
//! - table required + file optional relaxes the table column to optional; table optional + file
//!   required changes nothing;
//! - a table field missing from the file is fine when optional, a violation when required;
//! - a file field ID the current schema lacks but an earlier schema of the table had (a dropped
//!   column) is a violation: Iceberg never reuses a field ID, because files written under the
//!   old column still hold values for it, which would reappear in the new one. An ID no schema
//!   of the table ever had is new, even below `last-column-id`: thadam's datasets assign sparse,
//!   stable IDs (a struct's fields may sit in a gap), and such an ID was never in a file.
//!
//! The parts: `walk` merges two schemas field by field (the rules above), `identity` checks that
//! a field ID stays one field (renames, moves, duplicates, name clashes), `promotion` says which
//! type changes Iceberg allows, `history` keeps the IDs earlier schemas used, `index` finds a
//! field by ID, and `report` describes what cannot be merged and the error that stops the
//! service.

mod history;
mod identity;
mod index;
mod promotion;
mod report;
mod walk;

#[cfg(test)]
mod fixtures;

use std::fmt;

use iceberg::spec::{Schema, Type};

pub(crate) use history::FieldHistory;
pub use report::{SchemaMismatch, Violation, describe_type};
use walk::Merger;

/// What merging a segment's schema into the table's schema does to the table.
// One outcome per segment, moved once: boxing the schema would only make matching on it clumsier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum MergeOutcome {
    /// The table already accepts the file as it is: nothing to commit.
    Unchanged,
    /// The table's schema must become `schema` (with the next schema ID) before the append.
    Evolved {
        schema: Schema,
        changes: Vec<FieldChange>,
    },
}

/// One change the merge makes to a field of the table's schema (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldChange {
    /// A field ID the table did not have, added as optional at the end of its parent struct.
    Added {
        path: String,
        field_id: i32,
        ty: String,
    },
    /// The same field ID under another name: the table takes the file's name.
    Renamed {
        field_id: i32,
        from: String,
        to: String,
    },
    /// A type widened to the file's type (int -> long, float -> double, decimal precision).
    Promoted {
        path: String,
        field_id: i32,
        from: String,
        to: String,
    },
    /// A required table column the file has as optional: the table column becomes optional.
    Relaxed { path: String, field_id: i32 },
}

impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldChange::Added { path, field_id, ty } => {
                write!(f, "added `{path}` (field id {field_id}) as optional {ty}")
            }
            FieldChange::Renamed { field_id, from, to } => {
                write!(f, "renamed field id {field_id} from `{from}` to `{to}`")
            }
            FieldChange::Promoted {
                path,
                field_id,
                from,
                to,
            } => write!(
                f,
                "promoted `{path}` (field id {field_id}) from {from} to {to}"
            ),
            FieldChange::Relaxed { path, field_id } => write!(
                f,
                "relaxed `{path}` (field id {field_id}) from required to optional"
            ),
        }
    }
}

/// `merge_table` for a table whose only schema is `table` (no field ID was ever dropped).
pub fn merge(
    table: &Schema,
    file: &Schema,
    next_schema_id: i32,
) -> Result<MergeOutcome, SchemaMismatch> {
    merge_table(
        table,
        &FieldHistory::of_schemas([table], table.highest_field_id()),
        file,
        next_schema_id,
    )
}

/// Merges `file` (a segment's footer schema) into `table` (the table's current schema) by field
/// ID. `history` holds the IDs the table used before: a file field with one of them that is not
/// in `table` (a dropped column) is refused, never added back.
///
/// On success the evolved schema (if any) has schema ID `next_schema_id`, the table's identifier
/// field IDs, and a highest field ID that covers every added field. On failure every violation is
/// listed, not only the first.
pub(crate) fn merge_table(
    table: &Schema,
    history: &FieldHistory,
    file: &Schema,
    next_schema_id: i32,
) -> Result<MergeOutcome, SchemaMismatch> {
    let mut merger = Merger::new(table, file, history);
    let merged = merger.merge_struct(table.as_struct(), file.as_struct(), "", "");

    if !merger.violations.is_empty() {
        return Err(SchemaMismatch {
            violations: merger.violations,
        });
    }
    if merger.changes.is_empty() {
        return Ok(MergeOutcome::Unchanged);
    }

    let schema = Schema::builder()
        .with_schema_id(next_schema_id)
        .with_fields(merged.fields().iter().cloned())
        .with_identifier_field_ids(table.identifier_field_ids())
        .build()
        .map_err(|e| SchemaMismatch {
            // The checks above are meant to make this unreachable; if iceberg still refuses the
            // result, report it as a mismatch rather than committing or panicking.
            violations: vec![Violation {
                path: "(schema)".to_string(),
                field_id: 0,
                table_type: describe_type(&Type::Struct(table.as_struct().clone())),
                file_type: describe_type(&Type::Struct(file.as_struct().clone())),
                reason: format!("the merged schema is not a valid Iceberg schema: {e}"),
            }],
        })?;

    Ok(MergeOutcome::Evolved {
        schema,
        changes: merger.changes,
    })
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn identical_schema_is_unchanged() {
        let fields = vec![
            req(1, "id", long()),
            opt(2, "s", strukt(vec![opt(3, "a", int())])),
            opt(4, "l", list(5, double())),
            opt(6, "m", map(7, string(), 8, decimal(10, 2))),
        ];
        let table = schema(fields.clone());
        let file = schema(fields);
        assert_eq!(merge(&table, &file, 1), Ok(MergeOutcome::Unchanged));
    }

    #[test]
    fn optional_table_required_file_is_unchanged() {
        let table = schema(vec![
            opt(1, "a", int()),
            opt(2, "s", strukt(vec![opt(3, "b", int())])),
        ]);
        let file = schema(vec![
            req(1, "a", int()),
            req(2, "s", strukt(vec![req(3, "b", int())])),
        ]);
        assert_eq!(merge(&table, &file, 1), Ok(MergeOutcome::Unchanged));
    }

    #[test]
    fn optional_table_column_missing_from_file_is_unchanged() {
        let table = schema(vec![req(1, "a", int()), opt(2, "b", string())]);
        let file = schema(vec![req(1, "a", int())]);
        assert_eq!(merge(&table, &file, 1), Ok(MergeOutcome::Unchanged));
    }

    #[test]
    fn reordered_fields_follow_the_id_and_keep_table_order() {
        let table = schema(vec![opt(1, "a", int()), opt(2, "b", string())]);
        let file = schema(vec![opt(2, "b", string()), opt(1, "a", int())]);
        assert_eq!(merge(&table, &file, 1), Ok(MergeOutcome::Unchanged));
    }

    #[test]
    fn identifier_field_ids_are_preserved() {
        let table = Schema::builder()
            .with_schema_id(3)
            .with_identifier_field_ids([1])
            .with_fields(vec![req(1, "id", int()), opt(2, "v", float())])
            .build()
            .expect("table");
        let file = schema(vec![
            req(1, "id", long()),
            opt(2, "v", double()),
            opt(3, "w", int()),
        ]);
        let (schema, _) = evolved(&table, &file);
        let ids: Vec<i32> = schema.identifier_field_ids().collect();
        assert_eq!(ids, vec![1]);
        assert_eq!(field_type(&schema, 1), long());
    }

    #[test]
    fn a_violation_anywhere_discards_the_changes() {
        let table = schema(vec![opt(1, "a", int()), opt(2, "b", long())]);
        let file = schema(vec![
            opt(1, "a", long()),
            opt(2, "b", int()),
            opt(3, "c", int()),
        ]);
        let v = violations(&table, &file);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field_id, 2);
    }

    #[test]
    fn changes_display_for_logs() {
        let table = schema(vec![req(1, "a", int()), req(2, "b", int())]);
        let file = schema(vec![
            req(1, "a2", long()),
            opt(2, "b", int()),
            opt(3, "c", string()),
        ]);
        let (_, changes) = evolved(&table, &file);
        let lines: Vec<String> = changes.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            vec![
                "renamed field id 1 from `a` to `a2`",
                "promoted `a2` (field id 1) from int to long",
                "relaxed `b` (field id 2) from required to optional",
                "added `c` (field id 3) as optional string",
            ]
        );
    }
}
