//! What a merge that fails says: every [`Violation`], gathered in one [`SchemaMismatch`], which
//! becomes the fatal `sink.iceberg_schema_mismatch` error. Types are named compactly
//! ([`describe_type`]) so that one line of the error says what the table has and what the file
//! brings.

use std::fmt;

use iceberg::spec::{PrimitiveType, Type};

use crate::error::{Error, ErrorCode};

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
pub fn describe_type(ty: &Type) -> String {
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

pub(super) fn describe_primitive(p: &PrimitiveType) -> String {
    match p {
        PrimitiveType::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
        PrimitiveType::Fixed(len) => format!("fixed[{len}]"),
        // The remaining names are the Iceberg spec's (`int`, `timestamptz_ns`, ...).
        other => other.to_string(),
    }
}

/// The kind of a type, for a violation that changes it.
pub(super) fn kind(ty: &Type) -> &'static str {
    match ty {
        Type::Primitive(_) => "primitive",
        Type::Struct(_) => "struct",
        Type::List(_) => "list",
        Type::Map(_) => "map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::schema::merge::fixtures::*;
    use crate::table::schema::merge::merge;

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
}
