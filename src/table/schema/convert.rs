//! A segment's footer Arrow schema as an Iceberg schema, keeping the file's own field IDs.
//!
//! The conversion itself is iceberg's `arrow_schema_to_schema` (which reads `PARQUET:field_id`).
//! Before calling it, the Arrow schema is walked here (nested fields too) so that a segment iceberg
//! would reject gets one precise error listing every offending column: its path, field ID and
//! Arrow type, and what to do about it.

use std::collections::HashMap;

use arrow_schema::{DataType, Field, TimeUnit};
use iceberg::spec::Schema;

use crate::error::{Error, ErrorCode};

/// The Arrow field metadata key Parquet field IDs are read into (parquet's
/// `PARQUET_FIELD_ID_META_KEY`; spelled out to avoid depending on `parquet` here).
pub(crate) const PARQUET_FIELD_ID_KEY: &str = "PARQUET:field_id";

/// The highest decimal precision Iceberg supports.
const MAX_DECIMAL_PRECISION: u8 = 38;

/// Converts a segment's footer Arrow schema into an Iceberg schema with the file's field IDs.
///
/// Errors (never panics):
/// - `sink.iceberg_unsupported_type` for UInt64 columns (with the `unsigned: signed` fix), other
///   types Iceberg cannot represent, and fields without a usable `PARQUET:field_id` (every
///   offending column in one message);
/// - `sink.iceberg_schema_mismatch` when the only problem is two fields sharing one field ID.
pub fn file_schema(arrow: &arrow_schema::Schema, dataset: &str) -> Result<Schema, Error> {
    let mut walk = Walk::default();
    for field in arrow.fields() {
        walk.field(field, field.name().to_string());
    }
    if let Some(error) = walk.into_error(dataset) {
        return Err(error);
    }

    iceberg::arrow::arrow_schema_to_schema(arrow).map_err(|e| {
        Error::new(
            ErrorCode::UnsupportedType,
            format!(
                "dataset `{dataset}`: the segment's schema cannot be converted to an Iceberg \
                 schema: {e}"
            ),
        )
    })
}

/// Problems found walking the Arrow schema, each already formatted as one line.
#[derive(Default)]
struct Walk {
    uint64: Vec<String>,
    unsupported: Vec<String>,
    missing_ids: Vec<String>,
    duplicates: Vec<String>,
    /// Field ID -> the path of the first field using it.
    seen: HashMap<i32, String>,
}

impl Walk {
    /// A struct field, list element or map key/value: it carries a field ID.
    fn field(&mut self, field: &Field, path: String) {
        let id = match field.metadata().get(PARQUET_FIELD_ID_KEY) {
            None => {
                self.missing_ids
                    .push(format!("`{path}`: no `{PARQUET_FIELD_ID_KEY}`"));
                None
            }
            Some(raw) => match raw.trim().parse::<i32>() {
                Ok(id) => {
                    if let Some(first) = self.seen.get(&id) {
                        self.duplicates
                            .push(format!("`{path}` (field id {id}): also used by `{first}`"));
                    } else {
                        self.seen.insert(id, path.clone());
                    }
                    Some(id)
                }
                Err(_) => {
                    self.missing_ids.push(format!(
                        "`{path}`: `{PARQUET_FIELD_ID_KEY}` is not a 32-bit integer: {raw:?}"
                    ));
                    None
                }
            },
        };
        self.data_type(field.data_type(), &path, id);
    }

    fn data_type(&mut self, data_type: &DataType, path: &str, id: Option<i32>) {
        let column = match id {
            Some(id) => format!("`{path}` (field id {id})"),
            None => format!("`{path}` (no field id)"),
        };
        let unsupported = |why: &str| format!("{column}: Arrow type {data_type}: {why}");

        match data_type {
            DataType::UInt64 => self.uint64.push(format!(
                "{column}: UInt64: Iceberg has no unsigned 64-bit type"
            )),

            // What iceberg 0.10.1 converts (UInt8/16 -> int, UInt32 -> long).
            DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Float32
            | DataType::Float64
            | DataType::Date32
            | DataType::Time64(TimeUnit::Microsecond)
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View => {}

            DataType::Decimal128(precision, scale) => {
                if *precision == 0 || *precision > MAX_DECIMAL_PRECISION {
                    self.unsupported.push(unsupported(
                        "Iceberg decimals have a precision from 1 to 38",
                    ));
                } else if *scale < 0 {
                    self.unsupported
                        .push(unsupported("Iceberg decimals cannot have a negative scale"));
                }
            }
            DataType::Timestamp(unit, tz) => {
                if !matches!(unit, TimeUnit::Microsecond | TimeUnit::Nanosecond) {
                    self.unsupported.push(unsupported(
                        "Iceberg timestamps are in microseconds or nanoseconds",
                    ));
                } else if let Some(tz) = tz
                    && !matches!(tz.as_ref(), "UTC" | "+00:00")
                {
                    self.unsupported.push(unsupported(
                        "Iceberg timestamps with a time zone are stored in UTC (`UTC` or `+00:00`)",
                    ));
                }
            }
            DataType::Time32(_) | DataType::Time64(_) => self
                .unsupported
                .push(unsupported("Iceberg times are in microseconds")),

            DataType::List(element)
            | DataType::LargeList(element)
            | DataType::FixedSizeList(element, _) => self.field(element, format!("{path}.element")),
            DataType::Map(entries, _) => match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => {
                    self.field(&kv[0], format!("{path}.key"));
                    self.field(&kv[1], format!("{path}.value"));
                }
                _ => self.unsupported.push(unsupported(
                    "a map's entries must be a struct of a key and a value",
                )),
            },
            DataType::Struct(fields) => {
                for child in fields {
                    self.field(child, format!("{path}.{}", child.name()));
                }
            }
            // iceberg converts a dictionary as its value type.
            DataType::Dictionary(_, value) => self.data_type(value, path, id),

            _ => self
                .unsupported
                .push(unsupported("Iceberg has no equivalent type")),
        }
    }

    fn into_error(self, dataset: &str) -> Option<Error> {
        let problems = self.uint64.len()
            + self.unsupported.len()
            + self.missing_ids.len()
            + self.duplicates.len();
        if problems == 0 {
            return None;
        }
        // Duplicate IDs alone are a schema mismatch (the file's IDs contradict each other);
        // anything else is a type or ID Iceberg cannot take.
        let code = if problems == self.duplicates.len() {
            ErrorCode::SchemaMismatch
        } else {
            ErrorCode::UnsupportedType
        };

        let mut message = format!(
            "dataset `{dataset}`: the segment's schema cannot be registered in Iceberg: \
             {problems} problem(s):"
        );
        for line in self
            .uint64
            .iter()
            .chain(&self.unsupported)
            .chain(&self.missing_ids)
            .chain(&self.duplicates)
        {
            message.push_str("\n - ");
            message.push_str(line);
        }
        if !self.uint64.is_empty() {
            message.push_str(&format!(
                "\nFix: run dataset `{dataset}`'s Parquet sink with `unsigned: signed` \
                 (Iceberg has no unsigned 64-bit type)."
            ));
        }
        if !self.unsupported.is_empty() {
            message.push_str(&format!(
                "\nFix: change these columns of dataset `{dataset}` to types Iceberg supports."
            ));
        }
        if !self.missing_ids.is_empty() {
            message.push_str(
                "\nThe segment has no stable field IDs (every field needs \
                 `PARQUET:field_id`), so it cannot be matched to the table by field ID.",
            );
        }
        if !self.duplicates.is_empty() {
            message.push_str(
                "\nThe segment's field IDs are not unique, so it cannot be matched to the table \
                 by field ID.",
            );
        }
        Some(Error::new(code, message))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_schema::{Field, Fields, Schema as ArrowSchema};
    use iceberg::spec::{PrimitiveType, Type};

    use super::*;

    fn with_id(field: Field, id: i32) -> Field {
        field.with_metadata(HashMap::from([(
            PARQUET_FIELD_ID_KEY.to_string(),
            id.to_string(),
        )]))
    }
    fn col(name: &str, data_type: DataType, nullable: bool, id: i32) -> Field {
        with_id(Field::new(name, data_type, nullable), id)
    }
    fn message(result: Result<Schema, Error>) -> (ErrorCode, String) {
        let error = result.expect_err("conversion must fail");
        (error.code(), error.message().to_string())
    }
    fn primitive(schema: &Schema, id: i32) -> PrimitiveType {
        let field = schema.field_by_id(id).expect("field");
        field
            .field_type
            .as_primitive_type()
            .cloned()
            .expect("primitive")
    }

    #[test]
    fn converts_a_normal_schema_keeping_the_ids() {
        let arrow = ArrowSchema::new(vec![
            col("i", DataType::Int32, false, 10),
            col("l", DataType::Int64, true, 11),
            col("f", DataType::Float32, true, 12),
            col("d", DataType::Float64, true, 13),
            col("s", DataType::Utf8, true, 14),
            col(
                "ts",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
                15,
            ),
            col("dec", DataType::Decimal128(10, 2), true, 16),
            col(
                "st",
                DataType::Struct(Fields::from(vec![col("x", DataType::Int64, true, 21)])),
                true,
                20,
            ),
        ]);
        let schema = file_schema(&arrow, "telemetry").expect("converts");
        assert_eq!(primitive(&schema, 10), PrimitiveType::Int);
        assert!(schema.field_by_id(10).expect("i").required);
        assert_eq!(primitive(&schema, 11), PrimitiveType::Long);
        assert!(!schema.field_by_id(11).expect("l").required);
        assert_eq!(primitive(&schema, 12), PrimitiveType::Float);
        assert_eq!(primitive(&schema, 13), PrimitiveType::Double);
        assert_eq!(primitive(&schema, 14), PrimitiveType::String);
        assert_eq!(primitive(&schema, 15), PrimitiveType::Timestamptz);
        assert_eq!(
            primitive(&schema, 16),
            PrimitiveType::Decimal {
                precision: 10,
                scale: 2
            }
        );
        assert_eq!(primitive(&schema, 21), PrimitiveType::Long);
        assert_eq!(schema.field_id_by_name("st.x"), Some(21));
        assert_eq!(schema.field_by_id(15).expect("ts").name, "ts");
        assert_eq!(schema.highest_field_id(), 21);
    }

    #[test]
    fn converts_lists_and_maps_with_their_ids() {
        let entries = Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                col("keys", DataType::Utf8, false, 4),
                col("values", DataType::Int64, true, 5),
            ])),
            false,
        );
        let arrow = ArrowSchema::new(vec![
            col(
                "tags",
                DataType::List(Arc::new(col("item", DataType::Utf8, true, 2))),
                true,
                1,
            ),
            col("m", DataType::Map(Arc::new(entries), false), true, 3),
        ]);
        let schema = file_schema(&arrow, "telemetry").expect("converts");
        let Type::List(list) = schema.field_by_id(1).expect("tags").field_type.as_ref() else {
            panic!("tags is a list");
        };
        assert_eq!(list.element_field.id, 2);
        let Type::Map(map) = schema.field_by_id(3).expect("m").field_type.as_ref() else {
            panic!("m is a map");
        };
        assert_eq!((map.key_field.id, map.value_field.id), (4, 5));
    }

    #[test]
    fn uint64_top_level_and_nested_are_all_reported_with_the_fix() {
        let arrow = ArrowSchema::new(vec![
            col("_wal_epoch", DataType::UInt64, false, 1),
            col("ok", DataType::Int64, false, 2),
            col(
                "inner",
                DataType::Struct(Fields::from(vec![col(
                    "_wal_pos",
                    DataType::UInt64,
                    false,
                    4,
                )])),
                true,
                3,
            ),
            col(
                "counts",
                DataType::List(Arc::new(col("element", DataType::UInt64, true, 6))),
                true,
                5,
            ),
        ]);
        let (code, message) = message(file_schema(&arrow, "telemetry"));
        assert_eq!(code, ErrorCode::UnsupportedType);
        assert!(message.contains("dataset `telemetry`"), "{message}");
        assert!(message.contains("3 problem(s)"), "{message}");
        assert!(
            message.contains("`_wal_epoch` (field id 1): UInt64"),
            "{message}"
        );
        assert!(
            message.contains("`inner._wal_pos` (field id 4): UInt64"),
            "{message}"
        );
        assert!(
            message.contains("`counts.element` (field id 6): UInt64"),
            "{message}"
        );
        assert!(!message.contains("`ok`"), "{message}");
        assert!(
            message.contains(
                "run dataset `telemetry`'s Parquet sink with `unsigned: signed` \
                 (Iceberg has no unsigned 64-bit type)"
            ),
            "{message}"
        );
    }

    #[test]
    fn missing_field_id_is_reported() {
        let arrow = ArrowSchema::new(vec![
            col("a", DataType::Int32, false, 1),
            Field::new("b", DataType::Int32, false),
            col(
                "s",
                DataType::Struct(Fields::from(vec![Field::new("c", DataType::Utf8, true)])),
                true,
                3,
            ),
        ]);
        let (code, message) = message(file_schema(&arrow, "telemetry"));
        assert_eq!(code, ErrorCode::UnsupportedType);
        assert!(message.contains("`b`: no `PARQUET:field_id`"), "{message}");
        assert!(
            message.contains("`s.c`: no `PARQUET:field_id`"),
            "{message}"
        );
        assert!(message.contains("no stable field IDs"), "{message}");
        assert!(!message.contains("unsigned"), "{message}");
    }

    #[test]
    fn unparsable_field_id_is_reported() {
        let field = Field::new("a", DataType::Int32, false).with_metadata(HashMap::from([(
            PARQUET_FIELD_ID_KEY.to_string(),
            "x1".to_string(),
        )]));
        let (code, message) = message(file_schema(&ArrowSchema::new(vec![field]), "d"));
        assert_eq!(code, ErrorCode::UnsupportedType);
        assert!(message.contains("is not a 32-bit integer"), "{message}");
    }

    #[test]
    fn other_unsupported_types_name_the_column_and_arrow_type() {
        let arrow = ArrowSchema::new(vec![
            col(
                "ms",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                true,
                1,
            ),
            col(
                "berlin",
                DataType::Timestamp(TimeUnit::Microsecond, Some("Europe/Berlin".into())),
                true,
                2,
            ),
            col("half", DataType::Float16, true, 3),
            col("neg", DataType::Decimal128(10, -2), true, 4),
        ]);
        let (code, message) = message(file_schema(&arrow, "telemetry"));
        assert_eq!(code, ErrorCode::UnsupportedType);
        assert!(message.contains("4 problem(s)"), "{message}");
        assert!(
            message.contains("`ms` (field id 1): Arrow type Timestamp("),
            "{message}"
        );
        assert!(message.contains("microseconds or nanoseconds"), "{message}");
        assert!(message.contains("`berlin` (field id 2)"), "{message}");
        assert!(message.contains("Europe/Berlin"), "{message}");
        assert!(
            message.contains("`half` (field id 3): Arrow type Float16"),
            "{message}"
        );
        assert!(message.contains("`neg` (field id 4)"), "{message}");
        assert!(!message.contains("unsigned"), "{message}");
    }

    #[test]
    fn dictionaries_are_checked_as_their_value_type() {
        let dict = |value| DataType::Dictionary(Box::new(DataType::Int32), Box::new(value));
        let ok = ArrowSchema::new(vec![col("s", dict(DataType::Utf8), true, 1)]);
        let schema = file_schema(&ok, "telemetry").expect("converts");
        assert_eq!(primitive(&schema, 1), PrimitiveType::String);

        let bad = ArrowSchema::new(vec![col("u", dict(DataType::UInt64), true, 1)]);
        let (code, message) = message(file_schema(&bad, "telemetry"));
        assert_eq!(code, ErrorCode::UnsupportedType);
        assert!(message.contains("`u` (field id 1): UInt64"), "{message}");
    }

    #[test]
    fn duplicate_field_ids_are_a_schema_mismatch() {
        let arrow = ArrowSchema::new(vec![
            col("a", DataType::Int32, false, 1),
            col(
                "s",
                DataType::Struct(Fields::from(vec![col("b", DataType::Utf8, true, 1)])),
                true,
                2,
            ),
        ]);
        let (code, message) = message(file_schema(&arrow, "telemetry"));
        assert_eq!(code, ErrorCode::SchemaMismatch);
        assert!(
            message.contains("`s.b` (field id 1): also used by `a`"),
            "{message}"
        );
    }

    #[test]
    fn every_problem_kind_in_one_error() {
        let arrow = ArrowSchema::new(vec![
            col("u", DataType::UInt64, false, 1),
            col("h", DataType::Float16, false, 2),
            Field::new("n", DataType::Int32, false),
            col("dup", DataType::Int32, false, 1),
        ]);
        let (code, message) = message(file_schema(&arrow, "telemetry"));
        assert_eq!(code, ErrorCode::UnsupportedType);
        assert!(message.contains("4 problem(s)"), "{message}");
        assert_eq!(message.matches("\n - ").count(), 4, "{message}");
    }
}
