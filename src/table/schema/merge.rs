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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};

use crate::error::{Error, ErrorCode};

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

/// One reason a file's schema cannot be merged into the table's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The column's dotted path (the file's names; the table's when the file lacks the column).
    pub path: String,
    pub field_id: i32,
    pub table_type: String,
    pub file_type: String,
    pub reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (field id {}): table {}, file {}: {}",
            self.path, self.field_id, self.table_type, self.file_type, self.reason
        )
    }
}

/// Every reason a file's schema cannot be merged into the table's (never empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaMismatch {
    pub violations: Vec<Violation>,
}

impl SchemaMismatch {
    /// The fatal `sink.iceberg_schema_mismatch` error for `table`, listing every violation.
    pub(crate) fn into_error(self, table: &str) -> Error {
        Error::new(
            ErrorCode::SchemaMismatch,
            format!(
                "table {table}: the segment's schema cannot be merged: {self}\n\
                 Fix the dataset or the table, then restart; the segment stays in the segment catalog."
            ),
        )
    }
}

impl fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} violation(s):", self.violations.len())?;
        for violation in &self.violations {
            write!(f, "\n - {violation}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SchemaMismatch {}

/// A compact name for an Iceberg type: `int`, `decimal(10,2)`, `struct<a:int,b:string>`,
/// `list<int>`, `map<string,long>`.
pub(crate) fn describe_type(ty: &Type) -> String {
    match ty {
        Type::Primitive(p) => describe_primitive(p),
        Type::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .iter()
                .map(|field| format!("{}:{}", field.name, describe_type(&field.field_type)))
                .collect();
            format!("struct<{}>", fields.join(","))
        }
        Type::List(l) => format!("list<{}>", describe_type(&l.element_field.field_type)),
        Type::Map(m) => format!(
            "map<{},{}>",
            describe_type(&m.key_field.field_type),
            describe_type(&m.value_field.field_type)
        ),
    }
}

fn describe_primitive(p: &PrimitiveType) -> String {
    match p {
        PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        PrimitiveType::Fixed(len) => format!("fixed[{len}]"),
        // The remaining names are the Iceberg spec's (`int`, `timestamptz_ns`, ...).
        other => other.to_string(),
    }
}

fn kind(ty: &Type) -> &'static str {
    match ty {
        Type::Primitive(_) => "primitive",
        Type::Struct(_) => "struct",
        Type::List(_) => "list",
        Type::Map(_) => "map",
    }
}

/// [`merge_table`] for a table whose only schema is `table` (no field ID was ever dropped).
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

/// Where a field sits in its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    StructField,
    ListElement,
    MapKey,
    MapValue,
}

/// One field of a schema, indexed by ID.
struct Entry {
    path: String,
    /// The enclosing field's ID; `None` for a top-level column.
    parent: Option<i32>,
    role: Role,
    field: NestedFieldRef,
}

struct Index {
    by_id: HashMap<i32, Entry>,
    /// Field IDs in walk order (for deterministic reports).
    order: Vec<i32>,
    /// `(path, id, earlier path)` for every field ID seen a second time.
    duplicates: Vec<(String, NestedFieldRef, String)>,
}

impl Index {
    fn new(schema: &Schema) -> Self {
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
    fn max_id(&self) -> i32 {
        self.order.iter().copied().max().unwrap_or(0)
    }

    /// "a top-level column", "a field of struct `s`", "the element of list `l`", ...
    fn location(&self, entry: &Entry) -> String {
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

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

struct Merger<'h> {
    table: Index,
    file: Index,
    /// Field IDs already reported as moved or duplicated: the walk leaves them alone.
    reported: HashSet<i32>,
    /// The table's identifier fields and the structs containing them: these can never become
    /// optional (Iceberg requires identifier fields and their parents to be required).
    identifier_chain: HashSet<i32>,
    violations: Vec<Violation>,
    changes: Vec<FieldChange>,
    /// The IDs the table used before.
    history: &'h FieldHistory,
}

impl<'h> Merger<'h> {
    fn new(table_schema: &Schema, file_schema: &Schema, history: &'h FieldHistory) -> Self {
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

    /// Two file fields with one ID. (A built iceberg `Schema` already refuses duplicate IDs, so
    /// this only guards against a future iceberg that does not; `convert::file_schema` reports
    /// duplicates in a footer before a `Schema` exists.)
    fn check_duplicates(&mut self) {
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
    fn check_moves(&mut self) {
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

    fn violation(
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
    fn merge_struct(
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
            if self.check_reused_ids(f, &path) {
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

    /// Records a violation for every ID of the added field `f` (itself and everything nested in
    /// it) that an earlier schema of the table had; returns whether there was one. IDs still in
    /// the table's schema are moves, which `check_moves` reports.
    fn check_reused_ids(&mut self, f: &NestedFieldRef, path: &str) -> bool {
        let mut found = false;
        let mut stack = vec![(Arc::clone(f), path.to_string())];
        while let Some((field, path)) = stack.pop() {
            if !self.table.by_id.contains_key(&field.id)
                && !self.reported.contains(&field.id)
                && let Some((schema_id, old_path, old_type)) = self.history.used.get(&field.id)
            {
                found = true;
                let last = self.history.last_column_id.max(self.table.max_id());
                self.violations.push(Violation {
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

    /// A renamed or added field taking the name of a table field the file no longer has.
    fn check_name_clashes(&mut self, fields: &[NestedFieldRef], file_path: &str) {
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

    fn merge_field(
        &mut self,
        t: &NestedFieldRef,
        f: &NestedFieldRef,
        role: Role,
        table_path: &str,
        file_path: &str,
    ) -> NestedFieldRef {
        let mut name = t.name.clone();
        if role == Role::StructField && t.name != f.name {
            self.changes.push(FieldChange::Renamed {
                field_id: t.id,
                from: table_path.to_string(),
                to: file_path.to_string(),
            });
            name = f.name.clone();
        }

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

/// Whether Iceberg allows widening a column from `table` to `file` (format v2 promotions), and if
/// not, why.
fn promotion(table: &PrimitiveType, file: &PrimitiveType) -> Result<(), String> {
    use PrimitiveType as P;
    let t = describe_primitive(table);
    let f = describe_primitive(file);
    match (table, file) {
        (P::Int, P::Long) | (P::Float, P::Double) => Ok(()),
        (P::Long, P::Int) | (P::Double, P::Float) => Err(format!("narrowing from {t} to {f}")),
        (
            P::Decimal {
                precision: tp,
                scale: ts,
            },
            P::Decimal {
                precision: fp,
                scale: fs,
            },
        ) => {
            if ts != fs {
                Err(format!(
                    "decimal scale change from {ts} to {fs} (only the precision may widen)"
                ))
            } else if fp > tp {
                Ok(())
            } else {
                Err(format!("narrowing from {t} to {f}"))
            }
        }
        _ => Err(format!(
            "incompatible types: Iceberg cannot change {t} into {f}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int() -> Type {
        Type::Primitive(PrimitiveType::Int)
    }
    fn long() -> Type {
        Type::Primitive(PrimitiveType::Long)
    }
    fn float() -> Type {
        Type::Primitive(PrimitiveType::Float)
    }
    fn double() -> Type {
        Type::Primitive(PrimitiveType::Double)
    }
    fn string() -> Type {
        Type::Primitive(PrimitiveType::String)
    }
    fn decimal(precision: u32, scale: u32) -> Type {
        Type::Primitive(PrimitiveType::Decimal { precision, scale })
    }
    fn req(id: i32, name: &str, ty: Type) -> NestedFieldRef {
        Arc::new(NestedField::required(id, name, ty))
    }
    fn opt(id: i32, name: &str, ty: Type) -> NestedFieldRef {
        Arc::new(NestedField::optional(id, name, ty))
    }
    fn strukt(fields: Vec<NestedFieldRef>) -> Type {
        Type::Struct(StructType::new(fields))
    }
    fn list(element_id: i32, element: Type) -> Type {
        Type::List(ListType::new(Arc::new(NestedField::list_element(
            element_id, element, false,
        ))))
    }
    fn map(key_id: i32, key: Type, value_id: i32, value: Type) -> Type {
        Type::Map(MapType::optional(key_id, key, value_id, value))
    }
    fn schema(fields: Vec<NestedFieldRef>) -> Schema {
        Schema::builder()
            .with_schema_id(0)
            .with_fields(fields)
            .build()
            .expect("test schema")
    }

    fn evolved(table: &Schema, file: &Schema) -> (Schema, Vec<FieldChange>) {
        match merge(table, file, 7).expect("merge") {
            MergeOutcome::Evolved { schema, changes } => {
                assert_eq!(schema.schema_id(), 7);
                (schema, changes)
            }
            MergeOutcome::Unchanged => panic!("expected an evolved schema"),
        }
    }

    fn violations(table: &Schema, file: &Schema) -> Vec<Violation> {
        match merge(table, file, 7) {
            Err(mismatch) => mismatch.violations,
            Ok(outcome) => panic!("expected a mismatch, got {outcome:?}"),
        }
    }

    fn field_type(schema: &Schema, id: i32) -> Type {
        schema
            .field_by_id(id)
            .map(|f| (*f.field_type).clone())
            .expect("field present")
    }

    fn promoted(path: &str, field_id: i32, from: &str, to: &str) -> FieldChange {
        FieldChange::Promoted {
            path: path.to_string(),
            field_id,
            from: from.to_string(),
            to: to.to_string(),
        }
    }

    // ---- describe_type ----

    #[test]
    fn describe_type_is_compact() {
        assert_eq!(describe_type(&int()), "int");
        assert_eq!(describe_type(&long()), "long");
        assert_eq!(describe_type(&decimal(10, 2)), "decimal(10,2)");
        assert_eq!(
            describe_type(&Type::Primitive(PrimitiveType::Fixed(16))),
            "fixed[16]"
        );
        assert_eq!(describe_type(&list(2, int())), "list<int>");
        assert_eq!(
            describe_type(&map(2, string(), 3, long())),
            "map<string,long>"
        );
        assert_eq!(
            describe_type(&strukt(vec![
                opt(2, "a", int()),
                opt(3, "b", list(4, string()))
            ])),
            "struct<a:int,b:list<string>>"
        );
    }

    // ---- unchanged ----

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

    // ---- promotions ----

    #[test]
    fn promotes_int_to_long_top_level() {
        let table = schema(vec![req(1, "a", int())]);
        let file = schema(vec![req(1, "a", long())]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 1), long());
        assert!(schema.field_by_id(1).expect("a").required);
        assert_eq!(changes, vec![promoted("a", 1, "int", "long")]);
    }

    #[test]
    fn promotes_float_to_double_top_level() {
        let table = schema(vec![opt(1, "a", float())]);
        let file = schema(vec![opt(1, "a", double())]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 1), double());
        assert_eq!(changes, vec![promoted("a", 1, "float", "double")]);
    }

    #[test]
    fn promotes_decimal_precision_top_level() {
        let table = schema(vec![opt(1, "a", decimal(10, 2))]);
        let file = schema(vec![opt(1, "a", decimal(12, 2))]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 1), decimal(12, 2));
        assert_eq!(
            changes,
            vec![promoted("a", 1, "decimal(10,2)", "decimal(12,2)")]
        );
    }

    #[test]
    fn promotes_inside_a_struct() {
        let table = schema(vec![opt(
            1,
            "s",
            strukt(vec![
                opt(2, "i", int()),
                opt(3, "f", float()),
                opt(4, "d", decimal(9, 3)),
            ]),
        )]);
        let file = schema(vec![opt(
            1,
            "s",
            strukt(vec![
                opt(2, "i", long()),
                opt(3, "f", double()),
                opt(4, "d", decimal(18, 3)),
            ]),
        )]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 2), long());
        assert_eq!(field_type(&schema, 3), double());
        assert_eq!(field_type(&schema, 4), decimal(18, 3));
        assert_eq!(
            changes,
            vec![
                promoted("s.i", 2, "int", "long"),
                promoted("s.f", 3, "float", "double"),
                promoted("s.d", 4, "decimal(9,3)", "decimal(18,3)"),
            ]
        );
    }

    #[test]
    fn promotes_list_elements() {
        for (from, to) in [
            (int(), long()),
            (float(), double()),
            (decimal(5, 1), decimal(7, 1)),
        ] {
            let table = schema(vec![opt(1, "l", list(2, from.clone()))]);
            let file = schema(vec![opt(1, "l", list(2, to.clone()))]);
            let (schema, changes) = evolved(&table, &file);
            assert_eq!(field_type(&schema, 2), to);
            assert_eq!(field_type(&schema, 1), list(2, to.clone()));
            assert_eq!(
                changes,
                vec![promoted(
                    "l.element",
                    2,
                    &describe_type(&from),
                    &describe_type(&to)
                )]
            );
        }
    }

    #[test]
    fn promotes_map_values_and_keys() {
        for (from, to) in [
            (int(), long()),
            (float(), double()),
            (decimal(5, 1), decimal(7, 1)),
        ] {
            let table = schema(vec![opt(1, "m", map(2, string(), 3, from.clone()))]);
            let file = schema(vec![opt(1, "m", map(2, string(), 3, to.clone()))]);
            let (schema, changes) = evolved(&table, &file);
            assert_eq!(field_type(&schema, 3), to);
            assert_eq!(
                changes,
                vec![promoted(
                    "m.value",
                    3,
                    &describe_type(&from),
                    &describe_type(&to)
                )]
            );
        }
        // A key may be promoted like any field (and stays required).
        let table = schema(vec![opt(1, "m", map(2, int(), 3, string()))]);
        let file = schema(vec![opt(1, "m", map(2, long(), 3, string()))]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 2), long());
        assert!(schema.field_by_id(2).expect("key").required);
        assert_eq!(changes, vec![promoted("m.key", 2, "int", "long")]);
    }

    // ---- additions ----

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

    // ---- renames ----

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

    // ---- requiredness ----

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

    // ---- identifier fields ----

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

    // ---- violations ----

    fn single_violation(table: Vec<NestedFieldRef>, file: Vec<NestedFieldRef>) -> Violation {
        let v = violations(&schema(table), &schema(file));
        assert_eq!(v.len(), 1, "{v:?}");
        v.into_iter().next().expect("one violation")
    }

    #[test]
    fn narrowing_long_to_int_is_a_violation() {
        let v = single_violation(vec![opt(1, "a", long())], vec![opt(1, "a", int())]);
        assert_eq!(
            v,
            Violation {
                path: "a".to_string(),
                field_id: 1,
                table_type: "long".to_string(),
                file_type: "int".to_string(),
                reason: "narrowing from long to int".to_string(),
            }
        );
    }

    #[test]
    fn narrowing_double_to_float_is_a_violation() {
        let v = single_violation(vec![opt(1, "a", double())], vec![opt(1, "a", float())]);
        assert_eq!(v.reason, "narrowing from double to float");
        assert_eq!(
            (v.table_type.as_str(), v.file_type.as_str()),
            ("double", "float")
        );
    }

    #[test]
    fn decimal_narrowing_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "a", decimal(12, 2))],
            vec![opt(1, "a", decimal(10, 2))],
        );
        assert_eq!(v.reason, "narrowing from decimal(12,2) to decimal(10,2)");
    }

    #[test]
    fn decimal_scale_change_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "a", decimal(10, 2))],
            vec![opt(1, "a", decimal(12, 3))],
        );
        assert!(
            v.reason.starts_with("decimal scale change from 2 to 3"),
            "{}",
            v.reason
        );
        assert_eq!(v.file_type, "decimal(12,3)");
    }

    #[test]
    fn string_to_int_is_a_violation() {
        let v = single_violation(vec![opt(1, "a", string())], vec![opt(1, "a", int())]);
        assert!(v.reason.starts_with("incompatible types"), "{}", v.reason);
        assert_eq!(
            (v.table_type.as_str(), v.file_type.as_str()),
            ("string", "int")
        );
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

    #[test]
    fn duplicate_ids_cannot_reach_merge() {
        // iceberg's builder refuses two fields with one ID, so `merge` never sees them; footers
        // with duplicate IDs are reported by `convert::file_schema` instead.
        let built = Schema::builder()
            .with_fields(vec![opt(1, "a", int()), opt(1, "b", int())])
            .build();
        assert!(built.is_err());
    }

    #[test]
    fn every_violation_is_listed_in_one_error() {
        let table = schema(vec![
            opt(1, "a", long()),
            opt(2, "b", string()),
            req(3, "c", int()),
            opt(4, "s", strukt(vec![opt(5, "d", double())])),
            opt(6, "l", list(7, decimal(10, 2))),
            opt(8, "m", map(9, string(), 10, long())),
        ]);
        let file = schema(vec![
            opt(1, "a", int()),
            opt(2, "b", strukt(vec![opt(20, "x", int())])),
            opt(4, "s", strukt(vec![opt(5, "d", float())])),
            opt(6, "l", list(7, decimal(10, 3))),
            opt(8, "m", map(9, string(), 10, int())),
        ]);
        let mismatch = merge(&table, &file, 1).expect_err("mismatch");
        assert_eq!(mismatch.violations.len(), 6, "{mismatch}");

        let error = mismatch.into_error("robotics.telemetry");
        assert_eq!(error.code(), ErrorCode::SchemaMismatch);
        let expected = "table robotics.telemetry: the segment's schema cannot be merged: 6 violation(s):\n \
             - a (field id 1): table long, file int: narrowing from long to int\n \
             - b (field id 2): table string, file struct<x:int>: kind change from primitive to struct\n \
             - c (field id 3): table int, file (absent): required column missing from the file\n \
             - s.d (field id 5): table double, file float: narrowing from double to float\n \
             - l.element (field id 7): table decimal(10,2), file decimal(10,3): decimal scale change from 2 to 3 (only the precision may widen)\n \
             - m.value (field id 10): table long, file int: narrowing from long to int\n\
             Fix the dataset or the table, then restart; the segment stays in the segment catalog.";
        assert_eq!(error.message(), expected);
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

    // ---- field IDs are never reused ----

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

    #[test]
    fn a_dropped_field_id_is_not_added_back() {
        // The table had c (3) in schema 0 and dropped it in schema 1.
        let table = schema_with_id(1, vec![opt(1, "a", int()), opt(2, "b", string())]);
        let past = history(
            vec![
                opt(1, "a", int()),
                opt(2, "b", string()),
                opt(3, "c", long()),
            ],
            &table,
        );
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
        let table = schema_with_id(1, vec![opt(1, "a", int()), opt(2, "b", string())]);
        let past = history(
            vec![
                opt(1, "a", int()),
                opt(2, "b", string()),
                opt(3, "c", long()),
            ],
            &table,
        );
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
