//! Schemas and merges for the tests of the merge's parts: short builders for types, fields and
//! schemas, and the two outcomes a test expects (an evolved schema, or its violations).

use std::sync::Arc;

use iceberg::spec::{
    ListType, MapType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};

use super::{FieldChange, MergeOutcome, Violation, merge};

pub(super) fn int() -> Type {
    Type::Primitive(PrimitiveType::Int)
}
pub(super) fn long() -> Type {
    Type::Primitive(PrimitiveType::Long)
}
pub(super) fn float() -> Type {
    Type::Primitive(PrimitiveType::Float)
}
pub(super) fn double() -> Type {
    Type::Primitive(PrimitiveType::Double)
}
pub(super) fn string() -> Type {
    Type::Primitive(PrimitiveType::String)
}
pub(super) fn decimal(precision: u32, scale: u32) -> Type {
    Type::Primitive(PrimitiveType::Decimal { precision, scale })
}
pub(super) fn req(id: i32, name: &str, ty: Type) -> NestedFieldRef {
    Arc::new(NestedField::required(id, name, ty))
}
pub(super) fn opt(id: i32, name: &str, ty: Type) -> NestedFieldRef {
    Arc::new(NestedField::optional(id, name, ty))
}
pub(super) fn strukt(fields: Vec<NestedFieldRef>) -> Type {
    Type::Struct(StructType::new(fields))
}
pub(super) fn list(element_id: i32, element: Type) -> Type {
    Type::List(ListType::new(Arc::new(NestedField::list_element(
        element_id, element, false,
    ))))
}
pub(super) fn map(key_id: i32, key: Type, value_id: i32, value: Type) -> Type {
    Type::Map(MapType::optional(key_id, key, value_id, value))
}
pub(super) fn schema(fields: Vec<NestedFieldRef>) -> Schema {
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
        .expect("test schema")
}

pub(super) fn evolved(table: &Schema, file: &Schema) -> (Schema, Vec<FieldChange>) {
    match merge(table, file, 7).expect("merge") {
        MergeOutcome::Evolved { schema, changes } => {
            assert_eq!(schema.schema_id(), 7);
            (schema, changes)
        }
        MergeOutcome::Unchanged => panic!("expected an evolved schema"),
    }
}

pub(super) fn violations(table: &Schema, file: &Schema) -> Vec<Violation> {
    match merge(table, file, 7) {
        Err(mismatch) => mismatch.violations,
        Ok(outcome) => panic!("expected a mismatch, got {outcome:?}"),
    }
}

pub(super) fn field_type(schema: &Schema, id: i32) -> Type {
    schema
        .field_by_id(id)
        .map(|f| (*f.field_type).clone())
        .expect("field present")
}

pub(super) fn promoted(path: &str, field_id: i32, from: &str, to: &str) -> FieldChange {
    FieldChange::Promoted {
        path: path.to_string(),
        field_id,
        from: from.to_string(),
        to: to.to_string(),
    }
}

pub(super) fn single_violation(table: Vec<NestedFieldRef>, file: Vec<NestedFieldRef>) -> Violation {
    let v = violations(&schema(table), &schema(file));
    assert_eq!(v.len(), 1, "{v:?}");
    v.into_iter().next().expect("one violation")
}
