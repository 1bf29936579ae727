//! The field IDs a table used before its current schema. Iceberg never reuses a field ID: files
//! written under a dropped column still hold values for it, which would reappear in a new column
//! with that ID. So the merge refuses a file field whose ID an earlier schema had, and this module
//! keeps what it needs to tell the two apart and to say which column the ID belonged to.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use iceberg::spec::{NestedFieldRef, Schema, Type};

use super::index::{Index, join};
use super::report::{Violation, describe_type};

/// The field IDs a table has used, from every schema its metadata keeps, with the path and
/// type each had (the latest schema's, when several had it), and its `last-column-id`.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldHistory {
    used: HashMap<i32, (i32, String, String)>,
    last_column_id: i32,
}

impl FieldHistory {
    /// The history of `metadata`'s table.
    pub(crate) fn of(metadata: &iceberg::spec::TableMetadata) -> Self {
        Self::of_schemas(
            metadata.schemas_iter().map(|s| s.as_ref()),
            metadata.last_column_id(),
        )
    }

    /// The history of a table with `schemas` and `last_column_id`.
    pub(crate) fn of_schemas<'a>(
        schemas: impl IntoIterator<Item = &'a Schema>,
        last_column_id: i32,
    ) -> Self {
        let mut history = FieldHistory {
            used: HashMap::new(),
            last_column_id,
        };
        for schema in schemas {
            let index = Index::new(schema);
            for (id, entry) in index.by_id {
                let newer = history
                    .used
                    .get(&id)
                    .is_none_or(|(seen, _, _)| *seen < schema.schema_id());
                if newer {
                    history.used.insert(
                        id,
                        (
                            schema.schema_id(),
                            entry.path,
                            describe_type(&entry.field.field_type),
                        ),
                    );
                }
            }
        }
        history
    }
}

impl FieldHistory {
    /// A violation for every ID of the added field `f` (itself and everything nested in it)
    /// that an earlier schema of the table had, unless already `reported`. IDs still in the
    /// table's current schema (`table`) are moves, which `check_moves` reports.
    pub(super) fn reused_ids(
        &self,
        f: &NestedFieldRef,
        path: &str,
        table: &Index,
        reported: &HashSet<i32>,
    ) -> Vec<Violation> {
        let mut found = Vec::new();
        let mut stack = vec![(Arc::clone(f), path.to_string())];
        while let Some((field, path)) = stack.pop() {
            if !table.by_id.contains_key(&field.id)
                && !reported.contains(&field.id)
                && let Some((schema_id, old_path, old_type)) = self.used.get(&field.id)
            {
                let last = self.last_column_id.max(table.max_id());
                found.push(Violation {
                    path: path.clone(),
                    field_id: field.id,
                    table_type: "(not in the current schema)".to_string(),
                    file_type: describe_type(&field.field_type),
                    reason: format!(
                        "field id {id} was `{old_path}` ({old_type}) in the table's schema \
                         {schema_id} and is not in the current one (the column was dropped); \
                         Iceberg never reuses a field id, or files written under the old column \
                         would show their values in this one. Give the column a new field id \
                         above the table's last-column-id {last} in the dataset, or stop \
                         writing it",
                        id = field.id
                    ),
                });
            }
            match field.field_type.as_ref() {
                Type::Primitive(_) => {}
                Type::Struct(s) => {
                    for child in s.fields().iter().rev() {
                        stack.push((Arc::clone(child), join(&path, &child.name)));
                    }
                }
                Type::List(l) => stack.push((Arc::clone(&l.element_field), join(&path, "element"))),
                Type::Map(m) => {
                    stack.push((Arc::clone(&m.value_field), join(&path, "value")));
                    stack.push((Arc::clone(&m.key_field), join(&path, "key")));
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::table::schema::merge::fixtures::*;
    use crate::table::schema::merge::{FieldChange, MergeOutcome, merge, merge_table};

    /// A table whose earlier schema 0 is `before` and whose current schema is `table`.
    fn history(before: Vec<NestedFieldRef>, table: &Schema) -> FieldHistory {
        let before = schema(before);
        let last = before.highest_field_id().max(table.highest_field_id());
        FieldHistory::of_schemas([&before, table], last)
    }

    fn schema_with_id(id: i32, fields: Vec<NestedFieldRef>) -> Schema {
        Schema::builder()
            .with_schema_id(id)
            .with_fields(fields)
            .build()
            .expect("test schema")
    }

    /// A table that had `c` (field ID 3, a long) in schema 0 and dropped it in schema 1, and its
    /// history.
    fn dropped_c() -> (Schema, FieldHistory) {
        let table = schema_with_id(1, vec![opt(1, "a", int()), opt(2, "b", string())]);
        let past = history(
            vec![
                opt(1, "a", int()),
                opt(2, "b", string()),
                opt(3, "c", long()),
            ],
            &table,
        );
        (table, past)
    }

    #[test]
    fn a_dropped_field_id_is_not_added_back() {
        let (table, past) = dropped_c();
        let file = schema(vec![
            opt(1, "a", int()),
            opt(2, "b", string()),
            opt(3, "c2", long()),
        ]);
        let mismatch = merge_table(&table, &past, &file, 7).expect_err("a reused id");
        assert_eq!(mismatch.violations.len(), 1, "{mismatch}");
        let v = &mismatch.violations[0];
        assert_eq!((v.path.as_str(), v.field_id), ("c2", 3));
        assert_eq!(v.table_type, "(not in the current schema)");
        assert_eq!(v.file_type, "long");
        for needle in [
            "field id 3 was `c` (long) in the table's schema 0",
            "never reuses a field id",
            "new field id above the table's last-column-id 3",
        ] {
            assert!(v.reason.contains(needle), "{needle}: {}", v.reason);
        }
        let error = mismatch.into_error("ns.t");
        assert_eq!(error.code(), ErrorCode::SchemaMismatch);
        assert!(
            error.message().contains("c2 (field id 3)"),
            "{}",
            error.message()
        );
        // Without the history (a table that never had id 3) the same file evolves it.
        assert!(matches!(
            merge(&table, &file, 7),
            Ok(MergeOutcome::Evolved { .. })
        ));
    }

    #[test]
    fn an_id_no_schema_had_is_new_even_below_last_column_id() {
        // thadam's datasets use sparse, stable IDs: 3 sits in a gap the table never used.
        let table = schema(vec![opt(1, "a", int()), opt(5, "e", int())]);
        let past = FieldHistory::of_schemas([&table], 9);
        let file = schema(vec![
            opt(1, "a", int()),
            opt(5, "e", int()),
            opt(3, "c", int()),
        ]);
        match merge_table(&table, &past, &file, 7).expect("merge") {
            MergeOutcome::Evolved { changes, .. } => assert_eq!(changes.len(), 1, "{changes:?}"),
            other => panic!("expected an evolved schema, got {other:?}"),
        }
    }

    #[test]
    fn ids_above_last_column_id_are_still_added() {
        let (table, past) = dropped_c();
        let file = schema(vec![
            opt(1, "a", int()),
            opt(2, "b", string()),
            opt(4, "d", long()),
        ]);
        match merge_table(&table, &past, &file, 7).expect("merge") {
            MergeOutcome::Evolved { schema, changes } => {
                assert_eq!(schema.highest_field_id(), 4);
                assert_eq!(
                    changes,
                    vec![FieldChange::Added {
                        path: "d".to_string(),
                        field_id: 4,
                        ty: "long".to_string()
                    }]
                );
            }
            other => panic!("expected an evolved schema, got {other:?}"),
        }
    }

    #[test]
    fn reused_ids_nested_in_an_added_field_are_each_named() {
        // Schema 0 had s.y (5), n.p (4) and a list element 6; schema 1 dropped them. A file adds
        // a new struct (10) holding 4 and a list with element 6 again, and s.y (5) back.
        let table = schema_with_id(
            1,
            vec![
                opt(1, "a", int()),
                opt(2, "s", strukt(vec![opt(3, "x", int())])),
            ],
        );
        let past = history(
            vec![
                opt(1, "a", int()),
                opt(2, "s", strukt(vec![opt(3, "x", int()), opt(5, "y", int())])),
                opt(4, "p", int()),
                opt(7, "l", list(6, int())),
            ],
            &table,
        );
        let file = schema(vec![
            opt(1, "a", int()),
            opt(2, "s", strukt(vec![opt(3, "x", int()), opt(5, "y", int())])),
            opt(
                10,
                "n",
                strukt(vec![opt(4, "p", int()), opt(11, "q", list(6, int()))]),
            ),
        ]);
        let mismatch = merge_table(&table, &past, &file, 7).expect_err("reused ids");
        let named: Vec<(&str, i32)> = mismatch
            .violations
            .iter()
            .map(|v| (v.path.as_str(), v.field_id))
            .collect();
        assert_eq!(
            named,
            vec![("s.y", 5), ("n.p", 4), ("n.q.element", 6)],
            "{mismatch}"
        );
    }
}
