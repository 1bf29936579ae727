//! A field is its ID: one ID is one field wherever it appears. This module checks what would
//! break that: a field ID under another parent or in another role than in the table (a move),
//! one ID used twice in the file, and two fields ending up with one name (a rename onto a name
//! the table keeps), and it takes a struct field's new name, which is how a rename is merged.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::NestedFieldRef;

use super::FieldChange;
use super::index::{Role, join};
use super::report::{Violation, describe_type, kind};
use super::walk::Merger;

impl Merger<'_> {
    /// Two file fields with one ID. (A built iceberg `Schema` already refuses duplicate IDs, so
    /// this only guards against a future iceberg that does not; `convert::file_schema` reports
    /// duplicates in a footer before a `Schema` exists.)
    pub(super) fn check_duplicates(&mut self) {
        let duplicates = std::mem::take(&mut self.file.duplicates);
        for (path, field, earlier) in duplicates {
            self.reported.insert(field.id);
            let table_type = self
                .table
                .by_id
                .get(&field.id)
                .map(|entry| describe_type(&entry.field.field_type))
                .unwrap_or_else(|| "(absent)".to_string());
            self.violations.push(Violation {
                path,
                field_id: field.id,
                table_type,
                file_type: describe_type(&field.field_type),
                reason: format!("duplicate field id: the file also uses it for `{earlier}`"),
            });
        }
    }

    /// A field ID under another parent (or in another role) in the file than in the table.
    pub(super) fn check_moves(&mut self) {
        for id in &self.file.order {
            let (Some(f), Some(t)) = (self.file.by_id.get(id), self.table.by_id.get(id)) else {
                continue;
            };
            let moved = if t.parent != f.parent {
                true
            } else if t.role != f.role {
                // Same parent, different role: only a map's key and value swapping IDs reaches
                // here when the parent is a map in both. When the parent changed kind (struct in
                // the table, list in the file), the parent's kind change is the violation.
                t.parent.is_some_and(|p| {
                    match (self.table.by_id.get(&p), self.file.by_id.get(&p)) {
                        (Some(tp), Some(fp)) => {
                            kind(&tp.field.field_type) == kind(&fp.field.field_type)
                        }
                        _ => false,
                    }
                })
            } else {
                false
            };
            if !moved {
                continue;
            }
            let reason = if t.role == Role::StructField && f.role == Role::StructField {
                format!(
                    "moved to another struct (table: `{}`, {}; file: {})",
                    t.path,
                    self.table.location(t),
                    self.file.location(f)
                )
            } else {
                format!(
                    "moved to another place (table: `{}`, {}; file: {})",
                    t.path,
                    self.table.location(t),
                    self.file.location(f)
                )
            };
            self.violations.push(Violation {
                path: f.path.clone(),
                field_id: *id,
                table_type: describe_type(&t.field.field_type),
                file_type: describe_type(&f.field.field_type),
                reason,
            });
            self.reported.insert(*id);
        }
    }

    /// A renamed or added field taking the name of a table field the file no longer has.
    pub(super) fn check_name_clashes(&mut self, fields: &[NestedFieldRef], file_path: &str) {
        let mut by_name: HashMap<&str, &NestedFieldRef> = HashMap::new();
        for field in fields {
            if let Some(first) = by_name.get(field.name.as_str()) {
                let first = Arc::clone(first);
                self.violation(
                    &join(file_path, &field.name),
                    field.id,
                    &first.field_type,
                    &field.field_type,
                    format!(
                        "name clash: field ids {} and {} would both be named `{}`",
                        first.id, field.id, field.name
                    ),
                );
            } else {
                by_name.insert(field.name.as_str(), field);
            }
        }
    }

    /// The merged name of field `t`: a struct field the file names differently is renamed (the
    /// table takes the file's name); a list element or map key or value keeps its own.
    pub(super) fn merged_name(
        &mut self,
        t: &NestedFieldRef,
        f: &NestedFieldRef,
        role: Role,
        table_path: &str,
        file_path: &str,
    ) -> String {
        if role == Role::StructField && t.name != f.name {
            self.changes.push(FieldChange::Renamed {
                field_id: t.id,
                from: table_path.to_string(),
                to: file_path.to_string(),
            });
            return f.name.clone();
        }
        t.name.clone()
    }
}

#[cfg(test)]
mod tests {
    use iceberg::spec::Schema;

    use crate::table::schema::merge::FieldChange;
    use crate::table::schema::merge::fixtures::*;

    #[test]
    fn renames_top_level_by_id() {
        let table = schema(vec![req(1, "old", int()), opt(2, "b", int())]);
        let file = schema(vec![req(1, "new", int()), opt(2, "b", int())]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(schema.field_by_id(1).expect("renamed").name, "new");
        assert_eq!(schema.field_id_by_name("new"), Some(1));
        assert_eq!(schema.field_id_by_name("old"), None);
        assert_eq!(
            changes,
            vec![FieldChange::Renamed {
                field_id: 1,
                from: "old".to_string(),
                to: "new".to_string(),
            }]
        );
    }

    #[test]
    fn renames_a_field_inside_a_map_value_by_id() {
        let table = schema(vec![opt(
            1,
            "m",
            map(2, string(), 3, strukt(vec![opt(4, "old", int())])),
        )]);
        let file = schema(vec![opt(
            1,
            "m",
            map(2, string(), 3, strukt(vec![opt(4, "new", long())])),
        )]);
        let (schema, changes) = evolved(&table, &file);
        let field = schema.field_by_id(4).expect("renamed");
        assert_eq!(field.name, "new");
        assert_eq!(*field.field_type, long());
        assert_eq!(
            changes,
            vec![
                FieldChange::Renamed {
                    field_id: 4,
                    from: "m.value.old".to_string(),
                    to: "m.value.new".to_string(),
                },
                promoted("m.value.new", 4, "int", "long"),
            ]
        );
    }

    #[test]
    fn rename_onto_a_kept_name_is_a_clash() {
        // Table keeps `b` (id 2, optional, absent from the file); the file renames id 1 to `b`.
        let table = schema(vec![opt(1, "a", int()), opt(2, "b", int())]);
        let file = schema(vec![opt(1, "b", int())]);
        let v = violations(&table, &file);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].field_id, 2);
        assert!(v[0].reason.contains("name clash"), "{}", v[0].reason);
    }

    #[test]
    fn moving_to_another_parent_is_a_violation() {
        let v = single_violation(
            vec![
                opt(1, "s", strukt(vec![opt(2, "x", int())])),
                opt(3, "t", strukt(vec![opt(4, "y", int())])),
            ],
            vec![
                opt(1, "s", strukt(vec![])),
                opt(3, "t", strukt(vec![opt(4, "y", int()), opt(2, "x", int())])),
            ],
        );
        assert_eq!(v.path, "t.x");
        assert_eq!(v.field_id, 2);
        assert!(
            v.reason.starts_with("moved to another struct"),
            "{}",
            v.reason
        );
        assert!(v.reason.contains("`s.x`"), "{}", v.reason);
    }

    #[test]
    fn moving_out_of_a_struct_to_the_top_level_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "s", strukt(vec![opt(2, "x", int())]))],
            vec![opt(2, "x", int())],
        );
        assert_eq!(v.path, "x");
        assert!(
            v.reason.starts_with("moved to another struct"),
            "{}",
            v.reason
        );
    }

    #[test]
    fn table_id_reused_in_another_role_is_a_violation() {
        // Table id 2 is a top-level column; the file uses id 2 as a list element.
        let table = schema(vec![opt(1, "l", list(5, int())), opt(2, "x", int())]);
        let file = schema(vec![opt(1, "l", list(2, int())), opt(2 + 100, "y", int())]);
        let v = violations(&table, &file);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].path, "l.element");
        assert_eq!(v[0].field_id, 2);
        assert!(
            v[0].reason.starts_with("moved to another place"),
            "{}",
            v[0].reason
        );
    }

    #[test]
    fn map_key_and_value_swapping_ids_is_a_violation() {
        let table = schema(vec![opt(1, "m", map(2, string(), 3, string()))]);
        let file = schema(vec![opt(1, "m", map(3, string(), 2, string()))]);
        let v = violations(&table, &file);
        let ids: Vec<i32> = v.iter().map(|v| v.field_id).collect();
        assert_eq!(ids, vec![3, 2], "{v:?}");
    }

    #[test]
    fn duplicate_ids_cannot_reach_merge() {
        // iceberg's builder refuses two fields with one ID, so `merge` never sees them; footers
        // with duplicate IDs are reported by `convert::file_schema` instead.
        let built = Schema::builder()
            .with_fields(vec![opt(1, "a", int()), opt(1, "b", int())])
            .build();
        assert!(built.is_err());
    }
}
