//! Partitioned tables: the spec a new table gets from its `partition_by` terms (the grammar is
//! config's, `config::partition_by`), and the partition value of one data file.
//!
//! The registrar never rewrites a file, so a file can be registered into a partitioned table only
//! if all of its rows fall into one partition. That is decided from the footer's exact
//! statistics (the ones the column metrics use, untruncated): for an order-preserving transform
//! (identity, year, month, day, hour, truncate) the transformed min and the transformed max must
//! be equal, and that value is the file's partition (a file spanning two timestamps of one hour is
//! one `hour` partition). A bucket transform is not monotonic, so it needs min == max. `void` is
//! always null. A column of nulls only is the null partition; nulls mixed with values are two
//! partitions and refused, as is a column without exact statistics: a file is never registered
//! under a wrong or guessed partition. The transforms themselves are iceberg-rust's.

use std::fmt;

use iceberg::spec::{
    Datum, Literal, PartitionSpec, PrimitiveLiteral, PrimitiveType, Schema, SchemaRef, Struct,
    Transform, Type,
};
use iceberg::transform::create_transform_function;

use crate::config::partition_by::{KEY, PartitionTerm};
use crate::error::{Error, ErrorCode};
use crate::table::column_stats::FileMetrics;

/// The spec (id 0, field IDs from 1000 as the Iceberg spec assigns them) a new table gets from
/// `terms`, resolved against its first schema. An unknown column, or a transform that cannot
/// apply to the column's type, is `config.invalid` naming the column.
pub(crate) fn initial_spec(
    terms: &[PartitionTerm],
    schema: &Schema,
) -> Result<PartitionSpec, Error> {
    let schema: SchemaRef = std::sync::Arc::new(schema.clone());
    let mut builder = PartitionSpec::builder(schema.clone()).with_spec_id(0);
    for term in terms {
        let Some(field) = schema.field_by_name(&term.column) else {
            return Err(Error::config_invalid(format!(
                "{KEY}: `{term}`: the table has no column `{}`; name a column of the dataset",
                term.column
            )));
        };
        if let Err(e) = term.transform.result_type(&field.field_type) {
            return Err(Error::config_invalid(format!(
                "{KEY}: `{term}`: column `{}` is {}, which {} cannot partition ({}); choose \
                 another transform or column",
                term.column,
                field.field_type,
                term.transform,
                e.message()
            )));
        }
        builder = builder
            .add_partition_field(&term.column, term.field_name(), term.transform)
            .map_err(|e| {
                Error::config_invalid(format!(
                    "{KEY}: `{term}` (column `{}`): {}",
                    term.column,
                    e.message()
                ))
            })?;
    }
    builder
        .build()
        .map_err(|e| Error::config_invalid(format!("{KEY}: {}", e.message())))
}

/// Whether a table's spec is what `terms` asks for (same source fields and transforms, in
/// order). Used to warn when `partition_by` is ignored because the table already exists.
pub(crate) fn spec_matches(terms: &[PartitionTerm], spec: &PartitionSpec, schema: &Schema) -> bool {
    spec.fields().len() == terms.len()
        && spec.fields().iter().zip(terms).all(|(field, term)| {
            schema.field_id_by_name(&term.column) == Some(field.source_id)
                && field.transform == term.transform
        })
}

/// Describes a spec as `partition_by` would spell it, e.g. `[hour(ts), device]`.
pub(crate) fn describe_spec(spec: &PartitionSpec, schema: &Schema) -> String {
    let terms: Vec<String> = spec
        .fields()
        .iter()
        .map(|f| {
            let column = schema
                .name_by_field_id(f.source_id)
                .map_or_else(|| format!("<field {}>", f.source_id), str::to_string);
            PartitionTerm {
                transform: f.transform,
                column,
            }
            .to_string()
        })
        .collect();
    format!("[{}]", terms.join(", "))
}

/// Why a file cannot be given one partition value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PartitionMismatch {
    /// The partition field, as `partition_by` spells it (`hour(ts)`).
    pub field: String,
    /// The source column's name.
    pub column: String,
    pub reason: NotOnePartition,
}

/// Why a file's rows do not have one partition value under a field (or why it cannot be told):
/// the `reason` of a [`PartitionMismatch`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NotOnePartition {
    /// Transformed min and max differ: the rows span several partitions.
    Spans(Box<Span>),
    /// A bucket (non-monotonic) transform over a file whose min and max differ.
    NotSingleValue { min: Datum, max: Datum },
    /// Some rows are null and some are not: the null partition and another one.
    NullsAndValues { nulls: u64, values: u64 },
    /// No exact statistics (missing, inexact/truncated, or the column is not in the file).
    NoStatistics(&'static str),
    /// The transform cannot be computed on this value.
    Transform(String),
}

/// The values of a file whose rows span several partitions.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Span {
    pub min: Datum,
    pub max: Datum,
    pub min_partition: Datum,
    pub max_partition: Datum,
}

impl fmt::Display for NotOnePartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotOnePartition::Spans(span) => write!(
                f,
                "the rows span several partitions: min {} is in partition {}, max {} in \
                 partition {}",
                show(&span.min),
                show(&span.min_partition),
                show(&span.max),
                show(&span.max_partition)
            ),
            NotOnePartition::NotSingleValue { min, max } => write!(
                f,
                "a bucket partition needs one value per file, but min is {} and max is {}",
                show(min),
                show(max)
            ),
            NotOnePartition::NullsAndValues { nulls, values } => write!(
                f,
                "{nulls} of its {values} values are null: nulls and non-nulls are two partitions"
            ),
            NotOnePartition::NoStatistics(what) => {
                write!(f, "the footer has no exact statistics for it ({what})")
            }
            NotOnePartition::Transform(why) => write!(f, "the transform cannot be computed: {why}"),
        }
    }
}

impl PartitionMismatch {
    /// The fatal error for segment `key` of `table` under `spec` (described).
    pub(crate) fn into_error(self, table: &str, key: &str, spec: &str) -> Error {
        Error::new(
            ErrorCode::PartitionMismatch,
            format!(
                "segment {key} cannot be registered into table {table} (partition spec {spec}): \
                 partition field {} on column `{}`: {}; the shipper must write one partition \
                 per segment (with exact statistics on partition source columns), or the \
                 table's partition spec must change",
                self.field, self.column, self.reason
            ),
        )
    }
}

/// The partition value of a file under `spec`, from its exact, untruncated column statistics
/// (`stats`, computed under `metrics::MetricsConfig::full()` against the table's `schema`).
pub(crate) fn file_partition(
    spec: &PartitionSpec,
    schema: &Schema,
    stats: &FileMetrics,
) -> Result<Struct, Box<PartitionMismatch>> {
    let mut values = Vec::with_capacity(spec.fields().len());
    for field in spec.fields() {
        let column = schema
            .name_by_field_id(field.source_id)
            .map_or_else(|| format!("<field {}>", field.source_id), str::to_string);
        let described = PartitionTerm {
            transform: field.transform,
            column: column.clone(),
        }
        .to_string();
        let value =
            field_value(field.source_id, field.transform, schema, stats).map_err(|reason| {
                PartitionMismatch {
                    field: described,
                    column,
                    reason,
                }
            })?;
        values.push(value.map(|d| Literal::Primitive(d.literal().clone())));
    }
    Ok(Struct::from_iter(values))
}

fn field_value(
    source_id: i32,
    transform: Transform,
    schema: &Schema,
    stats: &FileMetrics,
) -> Result<Option<Datum>, NotOnePartition> {
    if transform == Transform::Void {
        return Ok(None);
    }
    if !matches!(
        schema.field_by_id(source_id).map(|f| &*f.field_type),
        Some(Type::Primitive(_))
    ) {
        return Err(NotOnePartition::NoStatistics(
            "the table has no such primitive column",
        ));
    }
    let Some(&values) = stats.value_counts.get(&source_id) else {
        return Err(NotOnePartition::NoStatistics(
            "the column is not in the file",
        ));
    };
    let Some(&nulls) = stats.null_value_counts.get(&source_id) else {
        return Err(NotOnePartition::NoStatistics("no null count"));
    };
    if nulls == values {
        // Nulls only (or no rows): every transform maps null to null.
        return Ok(None);
    }
    if nulls > 0 {
        return Err(NotOnePartition::NullsAndValues { nulls, values });
    }
    let (Some(min), Some(max)) = (
        stats.lower_bounds.get(&source_id),
        stats.upper_bounds.get(&source_id),
    ) else {
        return Err(NotOnePartition::NoStatistics(
            "no exact min/max: missing, or truncated by the writer",
        ));
    };
    let min_partition = apply(transform, min)?;
    if transform.preserves_order() {
        let max_partition = apply(transform, max)?;
        if min_partition != max_partition {
            return Err(NotOnePartition::Spans(Box::new(Span {
                min: min.clone(),
                max: max.clone(),
                min_partition,
                max_partition,
            })));
        }
    } else if min != max {
        return Err(NotOnePartition::NotSingleValue {
            min: min.clone(),
            max: max.clone(),
        });
    }
    Ok(Some(min_partition))
}

/// iceberg-rust's transform of one value, guarded against the inputs its code would panic on
/// (dates outside chrono's range under year/month; truncation overflowing at the type's minimum).
fn apply(transform: Transform, value: &Datum) -> Result<Datum, NotOnePartition> {
    let out_of_range = match (transform, value.data_type(), value.literal()) {
        (Transform::Year | Transform::Month, PrimitiveType::Date, PrimitiveLiteral::Int(days)) => {
            chrono::DateTime::from_timestamp(i64::from(*days) * 86_400, 0).is_none()
        }
        (Transform::Truncate(w), _, PrimitiveLiteral::Int(v)) => i32::try_from(w)
            .ok()
            .and_then(|w| v.checked_sub(v.rem_euclid(w)))
            .is_none(),
        (Transform::Truncate(w), _, PrimitiveLiteral::Long(v)) => {
            v.checked_sub(v.rem_euclid(i64::from(w))).is_none()
        }
        // Its decimal result goes through rust_decimal, which holds 96 bits.
        (Transform::Truncate(_), _, PrimitiveLiteral::Int128(v)) => v.unsigned_abs() >= 1 << 95,
        _ => false,
    };
    if out_of_range {
        return Err(NotOnePartition::Transform(format!(
            "{} is out of the range {transform} supports",
            show(value)
        )));
    }
    let function = create_transform_function(&transform)
        .map_err(|e| NotOnePartition::Transform(e.to_string()))?;
    function
        .transform_literal(value)
        .map_err(|e| NotOnePartition::Transform(e.message().to_string()))?
        .ok_or_else(|| NotOnePartition::Transform(format!("no value for {}", show(value))))
}

/// A value for a message. `Datum`'s own `Display` panics on dates and timestamps outside
/// chrono's range, on pre-1970 timestamps with a fraction of a second, and on decimals wider
/// than 96 bits, all of which a footer can hold; those are written here without it.
pub(crate) fn show(value: &Datum) -> String {
    use chrono::{DateTime, SecondsFormat, TimeDelta};
    let tz = |t: DateTime<chrono::Utc>| t.to_rfc3339_opts(SecondsFormat::AutoSi, true);
    let text = match (value.data_type(), value.literal()) {
        (PrimitiveType::Date, PrimitiveLiteral::Int(v)) => TimeDelta::try_days(i64::from(*v))
            .and_then(|d| DateTime::UNIX_EPOCH.checked_add_signed(d))
            .map(|t| t.date_naive().to_string()),
        (PrimitiveType::Timestamp, PrimitiveLiteral::Long(v)) => {
            DateTime::from_timestamp_micros(*v).map(|t| t.naive_utc().to_string())
        }
        (PrimitiveType::Timestamptz, PrimitiveLiteral::Long(v)) => {
            DateTime::from_timestamp_micros(*v).map(tz)
        }
        (PrimitiveType::TimestampNs, PrimitiveLiteral::Long(v)) => {
            Some(DateTime::from_timestamp_nanos(*v).naive_utc().to_string())
        }
        (PrimitiveType::TimestamptzNs, PrimitiveLiteral::Long(v)) => {
            Some(tz(DateTime::from_timestamp_nanos(*v)))
        }
        (PrimitiveType::Time, PrimitiveLiteral::Long(v)) => u32::try_from(v.div_euclid(1_000_000))
            .ok()
            .zip(u32::try_from(v.rem_euclid(1_000_000) * 1000).ok())
            .and_then(|(s, n)| chrono::NaiveTime::from_num_seconds_from_midnight_opt(s, n))
            .map(|t| t.to_string()),
        (PrimitiveType::Decimal { scale, .. }, PrimitiveLiteral::Int128(v)) => {
            let scale = usize::try_from(*scale).unwrap_or(0);
            let digits = format!("{:0>width$}", v.unsigned_abs(), width = scale + 1);
            let (int, frac) = digits.split_at(digits.len() - scale);
            let sign = if *v < 0 { "-" } else { "" };
            Some(if scale == 0 {
                format!("{sign}{int}")
            } else {
                format!("{sign}{int}.{frac}")
            })
        }
        _ => Some(value.to_string()),
    };
    text.unwrap_or_else(|| format!("{:?}", value.literal()))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{NestedField, UnboundPartitionField};

    use super::*;

    fn term(t: &str) -> PartitionTerm {
        PartitionTerm::parse(t).expect("parses")
    }

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "ts", Type::Primitive(PrimitiveType::Timestamptz)).into(),
                NestedField::optional(2, "device", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(3, "n", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(4, "d", Type::Primitive(PrimitiveType::Date)).into(),
                NestedField::optional(5, "ok", Type::Primitive(PrimitiveType::Boolean)).into(),
            ])
            .build()
            .expect("schema")
    }

    #[test]
    fn the_initial_spec_gets_ids_from_1000_and_checks_columns() {
        let s = schema();
        let spec = initial_spec(
            &[term("hour(ts)"), term("device"), term("bucket(8, n)")],
            &s,
        )
        .expect("spec");
        let fields: Vec<(i32, i32, &str, Transform)> = spec
            .fields()
            .iter()
            .map(|f| (f.field_id, f.source_id, f.name.as_str(), f.transform))
            .collect();
        assert_eq!(
            fields,
            [
                (1000, 1, "ts_hour", Transform::Hour),
                (1001, 2, "device", Transform::Identity),
                (1002, 3, "n_bucket", Transform::Bucket(8)),
            ]
        );
        assert_eq!(spec.spec_id(), 0);
        assert!(spec_matches(
            &[term("hour(ts)"), term("device"), term("bucket(8, n)")],
            &spec,
            &s
        ));
        assert!(!spec_matches(
            &[term("day(ts)"), term("device"), term("bucket(8, n)")],
            &spec,
            &s
        ));
        assert!(!spec_matches(&[], &spec, &s));
        assert_eq!(describe_spec(&spec, &s), "[hour(ts), device, bucket(8, n)]");

        for (t, says) in [
            ("hour(nope)", "no column `nope`"),
            ("hour(d)", "column `d`"),
            ("bucket(4, ok)", "column `ok`"),
            ("truncate(4, ts)", "column `ts`"),
        ] {
            let e = initial_spec(&[term(t)], &s).expect_err(t);
            assert_eq!(e.code(), ErrorCode::ConfigInvalid, "{t}");
            assert!(
                e.message().contains(KEY) && e.message().contains(says),
                "{t}: {e}"
            );
        }
        // Two time transforms of one column are redundant (iceberg's own rule).
        let e = initial_spec(&[term("hour(ts)"), term("day(ts)")], &s).expect_err("redundant");
        assert!(e.message().contains("column `ts`"), "{e}");
    }

    const HOUR_US: i64 = 3_600_000_000;
    const T0: i64 = 1_767_225_600_000_000; // 2026-01-01T00:00:00Z

    /// Field ID, value count, null count, exact (min, max).
    type Col = (i32, u64, u64, Option<(Datum, Datum)>);

    fn stats(cols: &[Col]) -> FileMetrics {
        let mut m = FileMetrics::default();
        for (id, values, nulls, bounds) in cols {
            m.value_counts.insert(*id, *values);
            m.null_value_counts.insert(*id, *nulls);
            if let Some((lo, hi)) = bounds {
                m.lower_bounds.insert(*id, lo.clone());
                m.upper_bounds.insert(*id, hi.clone());
            }
        }
        m
    }

    fn spec_of(fields: &[(i32, Transform)]) -> PartitionSpec {
        let s = std::sync::Arc::new(schema());
        let mut b = PartitionSpec::builder(s);
        for (i, (source_id, transform)) in fields.iter().enumerate() {
            b = b
                .add_unbound_field(UnboundPartitionField {
                    source_id: *source_id,
                    field_id: None,
                    name: format!("p{i}"),
                    transform: *transform,
                })
                .expect("field");
        }
        b.build().expect("spec")
    }

    fn ts(us: i64) -> Datum {
        Datum::timestamptz_micros(us)
    }

    fn lit(d: Datum) -> Option<Literal> {
        Some(Literal::Primitive(d.literal().clone()))
    }

    #[test]
    fn a_file_within_one_partition_gets_its_transformed_value() {
        let s = schema();
        let spec = spec_of(&[
            (1, Transform::Hour),
            (1, Transform::Void),
            (2, Transform::Identity),
            (3, Transform::Bucket(16)),
        ]);
        // Two timestamps in the same hour: one hour partition, though min != max.
        let m = stats(&[
            (1, 10, 0, Some((ts(T0 + 5), ts(T0 + HOUR_US - 1)))),
            (
                2,
                10,
                0,
                Some((Datum::string("robot-1"), Datum::string("robot-1"))),
            ),
            (3, 10, 0, Some((Datum::long(7), Datum::long(7)))),
        ]);
        let bucket = create_transform_function(&Transform::Bucket(16))
            .and_then(|f| f.transform_literal_result(&Datum::long(7)))
            .expect("bucket");
        let value = file_partition(&spec, &s, &m).expect("one partition");
        assert_eq!(
            value,
            Struct::from_iter([
                lit(Datum::int(490_896)),
                None,
                lit(Datum::string("robot-1")),
                lit(bucket),
            ])
        );

        // Day of a timestamp is a date; a column of nulls only is the null partition.
        let spec = spec_of(&[(1, Transform::Day), (4, Transform::Month)]);
        let m = stats(&[
            (1, 3, 0, Some((ts(T0), ts(T0 + 23 * HOUR_US)))),
            (4, 3, 3, None),
        ]);
        assert_eq!(
            file_partition(&spec, &s, &m).expect("one partition"),
            Struct::from_iter([lit(Datum::date(20_454)), None])
        );
    }

    fn mismatch(spec: &PartitionSpec, m: &FileMetrics) -> PartitionMismatch {
        *file_partition(spec, &schema(), m).expect_err("refused")
    }

    #[test]
    fn files_spanning_partitions_or_without_exact_statistics_are_refused() {
        let hour = spec_of(&[(1, Transform::Hour)]);
        // One microsecond into the next hour.
        let m = stats(&[(1, 2, 0, Some((ts(T0), ts(T0 + HOUR_US))))]);
        let e = mismatch(&hour, &m);
        assert_eq!((e.field.as_str(), e.column.as_str()), ("hour(ts)", "ts"));
        assert!(matches!(e.reason, NotOnePartition::Spans(_)), "{e:?}");
        let text = e
            .into_error("ns.t", "k/seg.parquet", "[hour(ts)]")
            .to_string();
        for part in [
            "sink.iceberg_partition_mismatch",
            "k/seg.parquet",
            "ns.t",
            "[hour(ts)]",
            "hour(ts)",
            "`ts`",
            "490896",
            "490897",
            "2026-01-01",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }

        // Bucket needs one value, even when both happen to hash alike.
        let bucket = spec_of(&[(3, Transform::Bucket(1))]);
        let m = stats(&[(3, 2, 0, Some((Datum::long(1), Datum::long(2))))]);
        assert!(matches!(
            mismatch(&bucket, &m).reason,
            NotOnePartition::NotSingleValue { .. }
        ));

        let ident = spec_of(&[(2, Transform::Identity)]);
        let abc = Some((Datum::string("a"), Datum::string("a")));
        let mixed = stats(&[(2, 5, 2, abc.clone())]);
        assert_eq!(
            mismatch(&ident, &mixed).reason,
            NotOnePartition::NullsAndValues {
                nulls: 2,
                values: 5
            }
        );
        // No bounds (inexact or truncated statistics leave them out), no null count, no column.
        let no_bounds = stats(&[(2, 5, 0, None)]);
        assert!(matches!(
            mismatch(&ident, &no_bounds).reason,
            NotOnePartition::NoStatistics(_)
        ));
        let mut no_nulls = stats(&[(2, 5, 0, abc)]);
        no_nulls.null_value_counts.clear();
        assert!(matches!(
            mismatch(&ident, &no_nulls).reason,
            NotOnePartition::NoStatistics(_)
        ));
        assert!(matches!(
            mismatch(&ident, &FileMetrics::default()).reason,
            NotOnePartition::NoStatistics(_)
        ));
    }

    #[test]
    fn values_show_without_panicking() {
        assert_eq!(show(&ts(-1)), "1969-12-31T23:59:59.999999Z");
        assert_eq!(show(&Datum::timestamp_micros(0)), "1970-01-01 00:00:00");
        assert_eq!(show(&Datum::date(-1)), "1969-12-31");
        assert_eq!(show(&Datum::date(i32::MIN)), "Int(-2147483648)");
        assert_eq!(
            show(&Datum::time_micros(1_500_000).expect("time")),
            "00:00:01.500"
        );
        assert_eq!(show(&Datum::string("a")), "\"a\"");
        let dec = |v: i128, s: u32| {
            Datum::try_from_bytes(
                &v.to_be_bytes(),
                PrimitiveType::Decimal {
                    precision: 38,
                    scale: s,
                },
            )
            .expect("decimal")
        };
        assert_eq!(show(&dec(-5, 2)), "-0.05");
        assert_eq!(show(&dec(12345, 2)), "123.45");
        assert_eq!(show(&dec(i128::MAX / 10, 0)), (i128::MAX / 10).to_string());
    }

    #[test]
    fn values_the_transforms_would_panic_on_are_refused() {
        let spec = spec_of(&[(4, Transform::Year)]);
        let m = stats(&[(
            4,
            1,
            0,
            Some((Datum::date(i32::MAX), Datum::date(i32::MAX))),
        )]);
        let e = mismatch(&spec, &m);
        assert!(matches!(e.reason, NotOnePartition::Transform(_)));
        assert!(e.reason.to_string().contains("Int(2147483647)"), "{e:?}");
        let spec = spec_of(&[(3, Transform::Truncate(10))]);
        let m = stats(&[(
            3,
            1,
            0,
            Some((Datum::long(i64::MIN), Datum::long(i64::MIN))),
        )]);
        assert!(matches!(
            mismatch(&spec, &m).reason,
            NotOnePartition::Transform(_)
        ));
        // In range, truncate rounds toward negative infinity.
        let m = stats(&[(3, 2, 0, Some((Datum::long(-9), Datum::long(-1))))]);
        let value = file_partition(&spec, &schema(), &m).expect("one partition");
        assert_eq!(value, Struct::from_iter([lit(Datum::long(-10))]));
    }
}
