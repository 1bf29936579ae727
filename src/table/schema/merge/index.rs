//! A schema indexed by field ID: where each ID sits (its dotted path, its parent and its role
//! there) and which IDs a schema uses twice. The merge looks fields up by ID, never by name or
//! position, so both schemas are indexed once before the walk.

use std::collections::HashMap;

use iceberg::spec::{NestedFieldRef, Schema, StructType, Type};

/// Where a field sits in its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    StructField,
    ListElement,
    MapKey,
    MapValue,
}

/// One field of a schema, indexed by ID.
pub(super) struct Entry {
    pub(super) path: String,
    /// The enclosing field's ID; `None` for a top-level column.
    pub(super) parent: Option<i32>,
    pub(super) role: Role,
    pub(super) field: NestedFieldRef,
}

/// Every field of one schema, by ID.
pub(super) struct Index {
    pub(super) by_id: HashMap<i32, Entry>,
    /// Field IDs in walk order (for deterministic reports).
    pub(super) order: Vec<i32>,
    /// `(path, id, earlier path)` for every field ID seen a second time.
    pub(super) duplicates: Vec<(String, NestedFieldRef, String)>,
}

impl Index {
    pub(super) fn new(schema: &Schema) -> Self {
        let mut index = Index {
            by_id: HashMap::new(),
            order: Vec::new(),
            duplicates: Vec::new(),
        };
        index.add_struct(schema.as_struct(), None, "");
        index
    }

    fn add_struct(&mut self, s: &StructType, parent: Option<i32>, prefix: &str) {
        for field in s.fields() {
            self.add(field, parent, Role::StructField, join(prefix, &field.name));
        }
    }

    fn add(&mut self, field: &NestedFieldRef, parent: Option<i32>, role: Role, path: String) {
        if let Some(earlier) = self.by_id.get(&field.id) {
            self.duplicates
                .push((path.clone(), field.clone(), earlier.path.clone()));
        } else {
            self.order.push(field.id);
            self.by_id.insert(
                field.id,
                Entry {
                    path: path.clone(),
                    parent,
                    role,
                    field: field.clone(),
                },
            );
        }
        let me = Some(field.id);
        match field.field_type.as_ref() {
            Type::Primitive(_) => {}
            Type::Struct(s) => self.add_struct(s, me, &path),
            Type::List(l) => self.add(
                &l.element_field,
                me,
                Role::ListElement,
                join(&path, "element"),
            ),
            Type::Map(m) => {
                self.add(&m.key_field, me, Role::MapKey, join(&path, "key"));
                self.add(&m.value_field, me, Role::MapValue, join(&path, "value"));
            }
        }
    }

    /// The highest field ID indexed (0 for none).
    pub(super) fn max_id(&self) -> i32 {
        self.order.iter().copied().max().unwrap_or(0)
    }

    /// "a top-level column", "a field of struct `s`", "the element of list `l`", ...
    pub(super) fn location(&self, entry: &Entry) -> String {
        let Some(parent) = entry.parent else {
            return "a top-level column".to_string();
        };
        let parent_path = self
            .by_id
            .get(&parent)
            .map(|p| p.path.as_str())
            .unwrap_or("?");
        match entry.role {
            Role::StructField => format!("a field of struct `{parent_path}`"),
            Role::ListElement => format!("the element of list `{parent_path}`"),
            Role::MapKey => format!("the key of map `{parent_path}`"),
            Role::MapValue => format!("the value of map `{parent_path}`"),
        }
    }
}

/// `prefix.name`, or `name` at the top level.
pub(super) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}
