//! Bounds encoding per type: a Parquet statistics value (as its physical type stores it, with the
//! logical type saying what it means) turned into a `Datum` of the *table's* type of the field.
//! Only faithful conversions give a bound; unit changes round outward so that the bound still
//! holds, and anything unclear (no unit, another decimal scale, a value out of range) gives none.

use iceberg::spec::{Datum, PrimitiveType};
use parquet::basic::{ConvertedType, LogicalType, TimeUnit};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescriptor;

/// Which end of a column's range a bound is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    Min,
    Max,
}

/// A statistics value as stored, before conversion to the table's type.
#[derive(Debug, Clone, Copy)]
enum Raw<'a> {
    Bool(bool),
    I32(i32),
    I64(i64),
    F32(f32),
    F64(f64),
    Bytes(&'a [u8]),
}

/// The exact min or max of a row group's statistics, converted to `ty`; `None` when it is absent,
/// inexact, or has no faithful conversion.
pub(super) fn bound(
    stats: &Statistics,
    column: &ColumnDescriptor,
    ty: &PrimitiveType,
    end: End,
) -> Option<Datum> {
    let exact = match end {
        End::Min => stats.min_is_exact(),
        End::Max => stats.max_is_exact(),
    };
    if !exact {
        return None;
    }
    let raw = raw_value(stats, end)?;
    convert(raw, column, ty, end)
}

fn raw_value(stats: &Statistics, end: End) -> Option<Raw<'_>> {
    fn pick<T>(min: Option<T>, max: Option<T>, end: End) -> Option<T> {
        match end {
            End::Min => min,
            End::Max => max,
        }
    }
    Some(match stats {
        Statistics::Boolean(s) => Raw::Bool(*pick(s.min_opt(), s.max_opt(), end)?),
        Statistics::Int32(s) => Raw::I32(*pick(s.min_opt(), s.max_opt(), end)?),
        Statistics::Int64(s) => Raw::I64(*pick(s.min_opt(), s.max_opt(), end)?),
        Statistics::Float(s) => Raw::F32(*pick(s.min_opt(), s.max_opt(), end)?),
        Statistics::Double(s) => Raw::F64(*pick(s.min_opt(), s.max_opt(), end)?),
        Statistics::ByteArray(_) | Statistics::FixedLenByteArray(_) => {
            Raw::Bytes(pick(stats.min_bytes_opt(), stats.max_bytes_opt(), end)?)
        }
        // INT96 timestamps: their statistics are unreliable (Iceberg ignores them too).
        Statistics::Int96(_) => return None,
    })
}

/// Converts a raw statistics value of `column` to a `Datum` of the table type `ty`. Unit changes
/// round outward (down for a min, up for a max) so the result still bounds the data.
fn convert(raw: Raw<'_>, column: &ColumnDescriptor, ty: &PrimitiveType, end: End) -> Option<Datum> {
    match (ty, raw) {
        (PrimitiveType::Boolean, Raw::Bool(v)) => Some(Datum::bool(v)),
        (PrimitiveType::Int, Raw::I32(v)) => {
            i32::try_from(int32_value(column, v)).ok().map(Datum::int)
        }
        (PrimitiveType::Long, Raw::I32(v)) => Some(Datum::long(int32_value(column, v))),
        (PrimitiveType::Long, Raw::I64(v)) => (!is_unsigned(column)).then(|| Datum::long(v)),
        (PrimitiveType::Float, Raw::F32(v)) => float_bound(f64::from(v), end).map(|v| {
            // Exact: the value came from an f32.
            Datum::float(v as f32)
        }),
        (PrimitiveType::Double, Raw::F32(v)) => float_bound(f64::from(v), end).map(Datum::double),
        (PrimitiveType::Double, Raw::F64(v)) => float_bound(v, end).map(Datum::double),
        (PrimitiveType::Date, Raw::I32(v)) => Some(Datum::date(v)),
        (PrimitiveType::Time, Raw::I32(v)) => {
            let micros = rescale(i64::from(v), time_unit(column)?, Unit::Micros, end)?;
            Datum::time_micros(micros).ok()
        }
        (PrimitiveType::Time, Raw::I64(v)) => {
            let micros = rescale(v, time_unit(column)?, Unit::Micros, end)?;
            Datum::time_micros(micros).ok()
        }
        (PrimitiveType::Timestamp, Raw::I64(v)) => {
            rescale(v, time_unit(column)?, Unit::Micros, end).map(Datum::timestamp_micros)
        }
        (PrimitiveType::Timestamptz, Raw::I64(v)) => {
            rescale(v, time_unit(column)?, Unit::Micros, end).map(Datum::timestamptz_micros)
        }
        (PrimitiveType::TimestampNs, Raw::I64(v)) => {
            rescale(v, time_unit(column)?, Unit::Nanos, end).map(Datum::timestamp_nanos)
        }
        (PrimitiveType::TimestamptzNs, Raw::I64(v)) => {
            rescale(v, time_unit(column)?, Unit::Nanos, end).map(Datum::timestamptz_nanos)
        }
        (PrimitiveType::String, Raw::Bytes(b)) => std::str::from_utf8(b).ok().map(Datum::string),
        (PrimitiveType::Binary, Raw::Bytes(b)) => Some(Datum::binary(b.iter().copied())),
        (PrimitiveType::Fixed(len), Raw::Bytes(b)) => {
            (u64::try_from(b.len()).ok() == Some(*len)).then(|| Datum::fixed(b.iter().copied()))
        }
        (PrimitiveType::Uuid, Raw::Bytes(b)) => {
            let bytes: [u8; 16] = b.try_into().ok()?;
            Some(Datum::uuid(uuid::Uuid::from_bytes(bytes)))
        }
        (PrimitiveType::Decimal { precision, scale }, raw) => {
            if decimal_scale(column)? != i64::from(*scale) {
                return None;
            }
            let unscaled = match raw {
                Raw::I32(v) => i128::from(v),
                Raw::I64(v) => i128::from(v),
                Raw::Bytes(b) => i128_from_be_signed(b)?,
                _ => return None,
            };
            if unscaled.unsigned_abs() >= 10u128.checked_pow(*precision)? {
                return None;
            }
            // The public way to make a decimal Datum of a given precision and scale.
            Datum::try_from_bytes(&unscaled.to_be_bytes(), ty.clone()).ok()
        }
        _ => None,
    }
}

/// A float bound usable by Iceberg: NaN is no bound, and a zero is widened to the sign that
/// bounds both zeros (-0.0 for a min, +0.0 for a max), as the Parquet spec asks readers to do.
fn float_bound(v: f64, end: End) -> Option<f64> {
    if v.is_nan() {
        return None;
    }
    if v == 0.0 {
        return Some(match end {
            End::Min => -0.0,
            End::Max => 0.0,
        });
    }
    Some(v)
}

/// An INT32 statistic as a number: unsigned logical types are stored as their bit pattern.
fn int32_value(column: &ColumnDescriptor, v: i32) -> i64 {
    if is_unsigned(column) {
        i64::from(v.cast_unsigned())
    } else {
        i64::from(v)
    }
}

fn is_unsigned(column: &ColumnDescriptor) -> bool {
    match column.logical_type_ref() {
        Some(LogicalType::Integer { is_signed, .. }) => !is_signed,
        _ => matches!(
            column.converted_type(),
            ConvertedType::UINT_8
                | ConvertedType::UINT_16
                | ConvertedType::UINT_32
                | ConvertedType::UINT_64
        ),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Millis,
    Micros,
    Nanos,
}

impl Unit {
    fn per_second(self) -> i64 {
        match self {
            Unit::Millis => 1_000,
            Unit::Micros => 1_000_000,
            Unit::Nanos => 1_000_000_000,
        }
    }
}

/// The unit of a time or timestamp column; `None` when the file does not say (then the values
/// cannot be interpreted).
fn time_unit(column: &ColumnDescriptor) -> Option<Unit> {
    let unit = match column.logical_type_ref() {
        Some(LogicalType::Timestamp { unit, .. }) | Some(LogicalType::Time { unit, .. }) => unit,
        _ => {
            return match column.converted_type() {
                ConvertedType::TIMESTAMP_MILLIS | ConvertedType::TIME_MILLIS => Some(Unit::Millis),
                ConvertedType::TIMESTAMP_MICROS | ConvertedType::TIME_MICROS => Some(Unit::Micros),
                _ => None,
            };
        }
    };
    Some(match unit {
        TimeUnit::MILLIS => Unit::Millis,
        TimeUnit::MICROS => Unit::Micros,
        TimeUnit::NANOS => Unit::Nanos,
    })
}

/// Converts `v` between units; a coarser target rounds down for a min and up for a max, so the
/// bound still holds; `None` on overflow.
fn rescale(v: i64, from: Unit, to: Unit, end: End) -> Option<i64> {
    let (f, t) = (from.per_second(), to.per_second());
    if f <= t {
        v.checked_mul(t / f)
    } else {
        let d = f / t;
        Some(match end {
            End::Min => v.div_euclid(d),
            End::Max => v.div_euclid(d) + i64::from(v.rem_euclid(d) != 0),
        })
    }
}

fn decimal_scale(column: &ColumnDescriptor) -> Option<i64> {
    match column.logical_type_ref() {
        Some(LogicalType::Decimal { scale, .. }) => Some(i64::from(*scale)),
        _ if column.converted_type() == ConvertedType::DECIMAL => {
            Some(i64::from(column.self_type().get_scale()))
        }
        _ => None,
    }
}

/// A big-endian two's-complement integer of any length, if it fits in an i128.
fn i128_from_be_signed(bytes: &[u8]) -> Option<i128> {
    let negative = *bytes.first()? & 0x80 != 0;
    let fill = if negative { 0xFF } else { 0x00 };
    let (extra, tail) = bytes.split_at(bytes.len().saturating_sub(16));
    // Longer than 16 bytes: what precedes the last 16 must be sign extension only.
    if extra.iter().any(|&b| b != fill) {
        return None;
    }
    if !extra.is_empty() && tail.first().is_some_and(|&b| (b & 0x80 != 0) != negative) {
        return None;
    }
    let mut buf = [fill; 16];
    buf[16 - tail.len()..].copy_from_slice(tail);
    Some(i128::from_be_bytes(buf))
}

#[cfg(test)]
mod tests {
    use iceberg::spec::PrimitiveLiteral;
    use parquet::data_type::FixedLenByteArray;
    use parquet::file::statistics::ValueStatistics;

    use super::*;
    use crate::table::column_stats::fixtures::*;

    #[test]
    fn units_rescale_outward() {
        use End::{Max, Min};
        assert_eq!(rescale(-1_500, Unit::Nanos, Unit::Micros, Min), Some(-2));
        assert_eq!(rescale(-1_500, Unit::Nanos, Unit::Micros, Max), Some(-1));
        assert_eq!(rescale(3_000, Unit::Nanos, Unit::Micros, Max), Some(3));
        assert_eq!(rescale(-7, Unit::Millis, Unit::Micros, Min), Some(-7_000));
        assert_eq!(rescale(i64::MAX, Unit::Micros, Unit::Nanos, Max), None);
    }

    #[test]
    fn big_endian_decimals_decode_with_sign() {
        assert_eq!(i128_from_be_signed(&[0xFF, 0x85]), Some(-123));
        assert_eq!(i128_from_be_signed(&[0x00, 0x85]), Some(133));
        let mut wide = vec![0xFF; 4];
        wide.extend((-5i128).to_be_bytes());
        assert_eq!(i128_from_be_signed(&wide), Some(-5));
        let mut too_big = vec![0x01];
        too_big.extend([0u8; 16]);
        assert_eq!(i128_from_be_signed(&too_big), None);
        assert_eq!(i128_from_be_signed(&[]), None);
    }

    #[test]
    fn floats_skip_nan_and_widen_zeros() {
        let msg = "message m { optional float f = 1; optional double d = 2; }";
        let meta = footer(
            msg,
            vec![vec![
                (
                    3,
                    Some(Statistics::float(
                        Some(0.0),
                        Some(-0.0),
                        None,
                        Some(0),
                        false,
                    )),
                ),
                (
                    3,
                    Some(Statistics::double(
                        Some(f64::NAN),
                        Some(2.5),
                        None,
                        Some(0),
                        false,
                    )),
                ),
            ]],
        );
        let s = schema(vec![
            prim(1, "f", PrimitiveType::Float),
            prim(2, "d", PrimitiveType::Double),
        ]);
        let m = metrics(&meta, &s);
        let lower = m.lower_bounds[&1].to_bytes().expect("bytes");
        assert_eq!(lower.as_ref(), (-0.0f32).to_le_bytes());
        let upper = m.upper_bounds[&1].to_bytes().expect("bytes");
        assert_eq!(upper.as_ref(), 0.0f32.to_le_bytes());
        assert!(!m.lower_bounds.contains_key(&2));
        assert_eq!(m.upper_bounds[&2], Datum::double(2.5));
        // A float file column under a double table column.
        let s = schema(vec![prim(1, "f", PrimitiveType::Double)]);
        let meta = footer(
            "message m { optional float f = 1; }",
            vec![vec![(
                2,
                Some(Statistics::float(
                    Some(-1.5),
                    Some(3.25),
                    None,
                    Some(0),
                    false,
                )),
            )]],
        );
        let m = metrics(&meta, &s);
        assert_eq!(m.lower_bounds[&1], Datum::double(-1.5));
        assert_eq!(m.upper_bounds[&1], Datum::double(3.25));
    }

    #[test]
    fn decimals_keep_precision_and_scale() {
        let flba = |min: i128, max: i128| {
            Some(Statistics::FixedLenByteArray(
                ValueStatistics::new(
                    Some(FixedLenByteArray::from(min.to_be_bytes()[6..].to_vec())),
                    Some(FixedLenByteArray::from(max.to_be_bytes()[6..].to_vec())),
                    None,
                    Some(0),
                    false,
                )
                .with_min_is_exact(true)
                .with_max_is_exact(true),
            ))
        };
        let meta = footer(
            "message m { optional fixed_len_byte_array(10) big (DECIMAL(20,4)) = 1; \
             optional int32 small (DECIMAL(7,2)) = 2; }",
            vec![vec![
                (3, flba(-123_456_789_012_345, 99)),
                (
                    3,
                    Some(Statistics::int32(
                        Some(-12_345),
                        Some(9_999_999),
                        None,
                        Some(0),
                        false,
                    )),
                ),
            ]],
        );
        let dec = |precision, scale| PrimitiveType::Decimal { precision, scale };
        let s = schema(vec![
            prim(1, "big", dec(20, 4)),
            prim(2, "small", dec(9, 2)),
        ]);
        let m = metrics(&meta, &s);
        let lit = |d: &Datum| d.literal().clone();
        assert_eq!(
            lit(&m.lower_bounds[&1]),
            PrimitiveLiteral::Int128(-123_456_789_012_345)
        );
        assert_eq!(m.lower_bounds[&1].data_type(), &dec(20, 4));
        assert_eq!(lit(&m.upper_bounds[&1]), PrimitiveLiteral::Int128(99));
        assert_eq!(lit(&m.lower_bounds[&2]), PrimitiveLiteral::Int128(-12_345));
        assert_eq!(m.upper_bounds[&2].data_type(), &dec(9, 2));
        // The spec's encoding: minimal two's-complement big-endian bytes.
        assert_eq!(
            m.lower_bounds[&2].to_bytes().expect("bytes").as_ref(),
            [0xCF, 0xC7]
        );
        // A different scale in the file would mean a different value: no bounds.
        let s = schema(vec![
            prim(1, "big", dec(20, 3)),
            prim(2, "small", dec(9, 2)),
        ]);
        let m = metrics(&meta, &s);
        assert!(!m.lower_bounds.contains_key(&1));
        // A value beyond the table's precision is not a valid bound.
        let s = schema(vec![
            prim(1, "big", dec(20, 4)),
            prim(2, "small", dec(6, 2)),
        ]);
        let m = metrics(&meta, &s);
        assert!(!m.upper_bounds.contains_key(&2));
        assert!(m.lower_bounds.contains_key(&2));
    }

    #[test]
    fn timestamps_follow_the_table_unit() {
        let msg = "message m { required int64 ns (TIMESTAMP(NANOS,true)) = 1; \
                   required int64 us (TIMESTAMP(MICROS,false)) = 2; \
                   required int64 ms (TIMESTAMP(MILLIS,true)) = 3; \
                   required int64 raw = 4; }";
        let meta = footer(
            msg,
            vec![vec![
                (2, i64s(-1_000_001, 5_000_001, 0)),
                (2, i64s(-5, 5, 0)),
                (2, i64s(-2, 3, 0)),
                (2, i64s(1, 2, 0)),
            ]],
        );
        let s = schema(vec![
            prim(1, "ns", PrimitiveType::Timestamptz),
            prim(2, "us", PrimitiveType::TimestampNs),
            prim(3, "ms", PrimitiveType::Timestamptz),
            prim(4, "raw", PrimitiveType::Timestamptz),
        ]);
        let m = metrics(&meta, &s);
        assert_eq!(m.lower_bounds[&1], Datum::timestamptz_micros(-1001));
        assert_eq!(m.upper_bounds[&1], Datum::timestamptz_micros(5001));
        assert_eq!(m.lower_bounds[&2], Datum::timestamp_nanos(-5000));
        assert_eq!(m.upper_bounds[&2], Datum::timestamp_nanos(5000));
        assert_eq!(m.lower_bounds[&3], Datum::timestamptz_micros(-2000));
        // A plain int64 has no unit: no bounds rather than a guess.
        assert!(!m.lower_bounds.contains_key(&4));
        // Nanos under a nanos table: unchanged.
        let s = schema(vec![prim(1, "ns", PrimitiveType::TimestamptzNs)]);
        let m = metrics(&meta, &s);
        assert_eq!(m.lower_bounds[&1], Datum::timestamptz_nanos(-1_000_001));
    }
}
