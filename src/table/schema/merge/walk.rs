//! The field-ID merge itself: both schemas walked together, struct by struct, each table field
//! matched to the file field with its ID, and what the file adds, relaxes or widens applied to
//! the table's schema, while every reason it cannot be merged is recorded. The checks that a
//! field ID stays one field (`identity`), that a type may widen (`promotion`) and that a dropped
//! ID stays dropped (`history`) are asked from here.

use std::collections::HashSet;
use std::sync::Arc;

use iceberg::spec::{ListType, MapType, NestedField, NestedFieldRef, Schema, StructType, Type};

use super::FieldChange;
use super::history::FieldHistory;
use super::index::{Index, Role, join};
use super::promotion::promotion;
use super::report::{Violation, describe_type, kind};

/// One merge in progress: the two schemas indexed, and what the walk found so far.
pub(super) struct Merger<'h> {
    pub(super) table: Index,
    pub(super) file: Index,
    /// Field IDs already reported as moved or duplicated: the walk leaves them alone.
    pub(super) reported: HashSet<i32>,
    /// The table's identifier fields and the structs containing them: these can never become
    /// optional (Iceberg requires identifier fields and their parents to be required).
    pub(super) identifier_chain: HashSet<i32>,
    pub(super) violations: Vec<Violation>,
    pub(super) changes: Vec<FieldChange>,
    /// The IDs the table used before.
    pub(super) history: &'h FieldHistory,
}

impl<'h> Merger<'h> {
    pub(super) fn new(
        table_schema: &Schema,
        file_schema: &Schema,
        history: &'h FieldHistory,
    ) -> Self {
        let table = Index::new(table_schema);
        let file = Index::new(file_schema);

        let mut identifier_chain = HashSet::new();
        for id in table_schema.identifier_field_ids() {
            let mut current = Some(id);
            while let Some(id) = current {
                if !identifier_chain.insert(id) {
                    break;
                }
                current = table.by_id.get(&id).and_then(|entry| entry.parent);
            }
        }

        let mut merger = Merger {
            table,
            file,
            reported: HashSet::new(),
            identifier_chain,
            violations: Vec::new(),
            changes: Vec::new(),
            history,
        };
        merger.check_duplicates();
        merger.check_moves();
        merger
    }

    pub(super) fn violation(
        &mut self,
        path: &str,
        field_id: i32,
        table: &Type,
        file: &Type,
        reason: impl Into<String>,
    ) {
        self.violations.push(Violation {
            path: path.to_string(),
            field_id,
            table_type: describe_type(table),
            file_type: describe_type(file),
            reason: reason.into(),
        });
    }

    /// Merges the fields of one struct: the table's fields in the table's order (matched by ID),
    /// then the file's new fields in the file's order.
    pub(super) fn merge_struct(
        &mut self,
        table: &StructType,
        file: &StructType,
        table_path: &str,
        file_path: &str,
    ) -> StructType {
        let mut out: Vec<NestedFieldRef> = Vec::with_capacity(table.fields().len());

        for t in table.fields() {
            if self.reported.contains(&t.id) {
                out.push(t.clone());
                continue;
            }
            match file.field_by_id(t.id) {
                Some(f) => {
                    let merged = self.merge_field(
                        t,
                        f,
                        Role::StructField,
                        &join(table_path, &t.name),
                        &join(file_path, &f.name),
                    );
                    out.push(merged);
                }
                None => {
                    // Elsewhere in the file means moved, which `check_moves` reported.
                    if t.required && !self.file.by_id.contains_key(&t.id) {
                        self.violations.push(Violation {
                            path: join(table_path, &t.name),
                            field_id: t.id,
                            table_type: describe_type(&t.field_type),
                            file_type: "(absent)".to_string(),
                            reason: "required column missing from the file".to_string(),
                        });
                    }
                    out.push(t.clone());
                }
            }
        }

        for f in file.fields() {
            // In this struct: merged above. Elsewhere in the table: moved, reported.
            if table.field_by_id(f.id).is_some()
                || self.table.by_id.contains_key(&f.id)
                || self.reported.contains(&f.id)
            {
                continue;
            }
            let path = join(file_path, &f.name);
            let reused = self
                .history
                .reused_ids(f, &path, &self.table, &self.reported);
            if !reused.is_empty() {
                self.violations.extend(reused);
                continue;
            }
            self.changes.push(FieldChange::Added {
                path,
                field_id: f.id,
                ty: describe_type(&f.field_type),
            });
            // Always optional: rows written before the column existed read as null. Fields
            // nested inside it keep the file's requiredness (a null parent makes them null).
            let mut added = NestedField::clone(f);
            added.required = false;
            added.initial_default = None;
            added.write_default = None;
            out.push(Arc::new(added));
        }

        self.check_name_clashes(&out, file_path);
        StructType::new(out)
    }

    fn merge_field(
        &mut self,
        t: &NestedFieldRef,
        f: &NestedFieldRef,
        role: Role,
        table_path: &str,
        file_path: &str,
    ) -> NestedFieldRef {
        let name = self.merged_name(t, f, role, table_path, file_path);

        let mut required = t.required;
        if t.required && !f.required {
            if role == Role::MapKey {
                self.violation(
                    file_path,
                    t.id,
                    &t.field_type,
                    &f.field_type,
                    "a map key may never become optional",
                );
            } else if self.identifier_chain.contains(&t.id) {
                self.violation(
                    file_path,
                    t.id,
                    &t.field_type,
                    &f.field_type,
                    "an identifier field (or a struct containing one) cannot become optional",
                );
            } else {
                self.changes.push(FieldChange::Relaxed {
                    path: file_path.to_string(),
                    field_id: t.id,
                });
                required = false;
            }
        }
        // Table optional, file required: compatible, nothing to change. Iceberg never tightens
        // a column (rows already in the table may hold nulls), and a file whose column has no
        // nulls reads fine through an optional column.

        let ty = self.merge_type(t.id, &t.field_type, &f.field_type, table_path, file_path);

        if name == t.name && required == t.required && ty == *t.field_type {
            return t.clone();
        }
        let mut merged = NestedField::clone(t);
        merged.name = name;
        merged.required = required;
        merged.field_type = Box::new(ty);
        Arc::new(merged)
    }

    /// The merged type of field `id`; the table's type when the file's cannot be merged (a
    /// violation is recorded then, so the result is never committed).
    fn merge_type(
        &mut self,
        id: i32,
        table: &Type,
        file: &Type,
        table_path: &str,
        file_path: &str,
    ) -> Type {
        match (table, file) {
            (Type::Primitive(t), Type::Primitive(f)) => {
                if t == f {
                    return table.clone();
                }
                match promotion(t, f) {
                    Ok(()) => {
                        self.changes.push(FieldChange::Promoted {
                            path: file_path.to_string(),
                            field_id: id,
                            from: describe_type(table),
                            to: describe_type(file),
                        });
                        file.clone()
                    }
                    Err(reason) => {
                        self.violation(file_path, id, table, file, reason);
                        table.clone()
                    }
                }
            }
            (Type::Struct(t), Type::Struct(f)) => {
                Type::Struct(self.merge_struct(t, f, table_path, file_path))
            }
            (Type::List(t), Type::List(f)) => {
                let Some(element) = self.merge_child(
                    &t.element_field,
                    &f.element_field,
                    Role::ListElement,
                    &join(table_path, "element"),
                    &join(file_path, "element"),
                ) else {
                    return table.clone();
                };
                Type::List(ListType::new(element))
            }
            (Type::Map(t), Type::Map(f)) => {
                let key = self.merge_child(
                    &t.key_field,
                    &f.key_field,
                    Role::MapKey,
                    &join(table_path, "key"),
                    &join(file_path, "key"),
                );
                let value = self.merge_child(
                    &t.value_field,
                    &f.value_field,
                    Role::MapValue,
                    &join(table_path, "value"),
                    &join(file_path, "value"),
                );
                match (key, value) {
                    (Some(key), Some(value)) => Type::Map(MapType::new(key, value)),
                    _ => table.clone(),
                }
            }
            _ => {
                self.violation(
                    file_path,
                    id,
                    table,
                    file,
                    format!("kind change from {} to {}", kind(table), kind(file)),
                );
                table.clone()
            }
        }
    }

    /// A list element or map key/value: the same position must keep the same field ID.
    fn merge_child(
        &mut self,
        t: &NestedFieldRef,
        f: &NestedFieldRef,
        role: Role,
        table_path: &str,
        file_path: &str,
    ) -> Option<NestedFieldRef> {
        if t.id == f.id {
            return Some(self.merge_field(t, f, role, table_path, file_path));
        }
        if !self.reported.contains(&f.id) {
            let what = match role {
                Role::ListElement => "list element",
                Role::MapKey => "map key",
                Role::MapValue => "map value",
                Role::StructField => "field",
            };
            self.violation(
                file_path,
                f.id,
                &t.field_type,
                &f.field_type,
                format!(
                    "the {what} has field id {} in the file but {} in the table",
                    f.id, t.id
                ),
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::schema::merge::fixtures::*;

    #[test]
    fn adds_a_top_level_field_as_optional_with_its_id() {
        let table = schema(vec![req(1, "a", int())]);
        let file = schema(vec![req(1, "a", int()), req(5, "b", string())]);
        let (schema, changes) = evolved(&table, &file);
        let added = schema.field_by_id(5).expect("added");
        assert_eq!(added.name, "b");
        assert!(!added.required, "an added column must be optional");
        assert_eq!(schema.highest_field_id(), 5);
        assert_eq!(schema.as_struct().fields()[1].id, 5);
        assert_eq!(
            changes,
            vec![FieldChange::Added {
                path: "b".to_string(),
                field_id: 5,
                ty: "string".to_string(),
            }]
        );
    }

    #[test]
    fn adds_a_nested_struct_field_as_optional_at_the_end() {
        let table = schema(vec![
            opt(1, "s", strukt(vec![req(2, "a", int())])),
            opt(3, "z", int()),
        ]);
        let file = schema(vec![
            opt(
                1,
                "s",
                strukt(vec![req(9, "new", long()), req(2, "a", int())]),
            ),
            opt(3, "z", int()),
        ]);
        let (schema, changes) = evolved(&table, &file);
        let added = schema.field_by_id(9).expect("added");
        assert!(!added.required);
        assert_eq!(schema.highest_field_id(), 9);
        let Type::Struct(s) = field_type(&schema, 1) else {
            panic!("s is a struct");
        };
        let ids: Vec<i32> = s.fields().iter().map(|f| f.id).collect();
        assert_eq!(ids, vec![2, 9], "added at the end of its parent");
        assert_eq!(
            changes,
            vec![FieldChange::Added {
                path: "s.new".to_string(),
                field_id: 9,
                ty: "long".to_string(),
            }]
        );
    }

    #[test]
    fn adds_a_new_struct_with_its_nested_ids() {
        let table = schema(vec![req(1, "a", int())]);
        let file = schema(vec![
            req(1, "a", int()),
            req(
                10,
                "s",
                strukt(vec![req(11, "x", int()), opt(12, "l", list(13, string()))]),
            ),
        ]);
        let (schema, changes) = evolved(&table, &file);
        assert!(!schema.field_by_id(10).expect("s").required);
        // Inside the added struct the file's own requiredness is kept: a null parent reads null.
        assert!(schema.field_by_id(11).expect("x").required);
        assert!(schema.field_by_id(13).is_some());
        assert_eq!(schema.highest_field_id(), 13);
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    #[test]
    fn relaxes_required_to_optional() {
        let table = schema(vec![
            req(1, "a", int()),
            opt(2, "s", strukt(vec![req(3, "b", int())])),
        ]);
        let file = schema(vec![
            opt(1, "a", int()),
            opt(2, "s", strukt(vec![opt(3, "b", int())])),
        ]);
        let (schema, changes) = evolved(&table, &file);
        assert!(!schema.field_by_id(1).expect("a").required);
        assert!(!schema.field_by_id(3).expect("b").required);
        assert_eq!(
            changes,
            vec![
                FieldChange::Relaxed {
                    path: "a".to_string(),
                    field_id: 1
                },
                FieldChange::Relaxed {
                    path: "s.b".to_string(),
                    field_id: 3
                },
            ]
        );
    }

    #[test]
    fn map_key_may_never_become_optional() {
        let table = schema(vec![opt(1, "m", map(2, string(), 3, int()))]);
        let optional_key = Type::Map(MapType::new(
            Arc::new(NestedField::optional(2, "key", string())),
            Arc::new(NestedField::map_value_element(3, int(), false)),
        ));
        let file = schema(vec![opt(1, "m", optional_key)]);
        let v = violations(&table, &file);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].path, "m.key");
        assert_eq!(v[0].reason, "a map key may never become optional");
    }

    #[test]
    fn identifier_field_cannot_be_relaxed() {
        let table = Schema::builder()
            .with_identifier_field_ids([2])
            .with_fields(vec![req(1, "k", strukt(vec![req(2, "id", int())]))])
            .build()
            .expect("table");
        let file = schema(vec![opt(1, "k", strukt(vec![opt(2, "id", int())]))]);
        let v = violations(&table, &file);
        let ids: Vec<i32> = v.iter().map(|v| v.field_id).collect();
        assert_eq!(ids, vec![1, 2], "{v:?}");
        assert!(v[0].reason.contains("identifier"), "{}", v[0].reason);
    }

    #[test]
    fn primitive_to_struct_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "a", int())],
            vec![opt(1, "a", strukt(vec![opt(2, "x", int())]))],
        );
        assert_eq!(v.reason, "kind change from primitive to struct");
        assert_eq!(v.file_type, "struct<x:int>");
    }

    #[test]
    fn list_to_map_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "a", list(2, int()))],
            vec![opt(1, "a", map(2, string(), 3, int()))],
        );
        assert_eq!(v.reason, "kind change from list to map");
        assert_eq!(
            (v.table_type.as_str(), v.file_type.as_str()),
            ("list<int>", "map<string,int>")
        );
    }

    #[test]
    fn struct_to_list_reports_only_the_kind_change() {
        let v = single_violation(
            vec![opt(1, "a", strukt(vec![opt(2, "x", int())]))],
            vec![opt(1, "a", list(2, int()))],
        );
        assert_eq!(v.field_id, 1);
        assert_eq!(v.reason, "kind change from struct to list");
    }

    #[test]
    fn required_column_missing_is_a_violation() {
        let v = single_violation(
            vec![req(1, "a", int()), opt(2, "b", int())],
            vec![opt(2, "b", int())],
        );
        assert_eq!(v.path, "a");
        assert_eq!(v.field_id, 1);
        assert_eq!(v.file_type, "(absent)");
        assert_eq!(v.reason, "required column missing from the file");
    }

    #[test]
    fn list_element_with_a_new_id_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "l", list(2, int()))],
            vec![opt(1, "l", list(9, int()))],
        );
        assert_eq!(v.path, "l.element");
        assert_eq!(v.field_id, 9);
        assert!(
            v.reason.contains("has field id 9 in the file but 2"),
            "{}",
            v.reason
        );
    }
}
