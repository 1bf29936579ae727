//! One leaf column summed over the row groups of a file: sizes and value counts always, null
//! counts only while every row group has statistics, and a bound only while every row group's
//! is exactly known (a bound over part of the file would be wrong).

use iceberg::spec::{Datum, PrimitiveType};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::schema::types::ColumnDescriptor;

use super::bounds::{End, bound};

/// A bound aggregated over row groups: `Known(None)` means no row group had a value yet (all
/// null so far), `Unknown` that some row group's value is not exactly known.
#[derive(Debug, Clone, Default)]
pub(super) enum Agg {
    #[default]
    Unknown,
    Known(Option<Datum>),
}

/// One leaf column, aggregated over the row groups.
#[derive(Debug)]
pub(super) struct Column {
    pub(super) size: u64,
    pub(super) values: u64,
    pub(super) nulls: Option<u64>,
    pub(super) lower: Agg,
    pub(super) upper: Agg,
}

impl Default for Column {
    fn default() -> Self {
        Column {
            size: 0,
            values: 0,
            nulls: Some(0),
            lower: Agg::Known(None),
            upper: Agg::Known(None),
        }
    }
}

impl Column {
    pub(super) fn lose_stats(&mut self) {
        self.nulls = None;
        self.lower = Agg::Unknown;
        self.upper = Agg::Unknown;
    }

    pub(super) fn add(
        &mut self,
        chunk: &ColumnChunkMetaData,
        column: &ColumnDescriptor,
        bound_type: Option<&PrimitiveType>,
    ) {
        self.size += u64::try_from(chunk.compressed_size()).unwrap_or(0);
        let values = u64::try_from(chunk.num_values()).unwrap_or(0);
        self.values += values;
        let Some(stats) = chunk.statistics() else {
            self.lose_stats();
            return;
        };
        let nulls = stats.null_count_opt();
        self.nulls = match (self.nulls, nulls) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        let Some(ty) = bound_type else {
            self.lower = Agg::Unknown;
            self.upper = Agg::Unknown;
            return;
        };
        // A row group of nulls only has no min/max and needs none.
        let all_null = nulls == Some(values);
        merge(
            &mut self.lower,
            bound(stats, column, ty, End::Min),
            all_null,
            End::Min,
        );
        merge(
            &mut self.upper,
            bound(stats, column, ty, End::Max),
            all_null,
            End::Max,
        );
    }
}

/// Folds one row group's bound into `agg` (the lower of two for a min, the higher for a max).
fn merge(agg: &mut Agg, value: Option<Datum>, all_null: bool, end: End) {
    let Agg::Known(current) = agg else {
        return;
    };
    let Some(value) = value else {
        if !all_null {
            *agg = Agg::Unknown;
        }
        return;
    };
    let keep_current = match current {
        None => false,
        Some(cur) => match Datum::partial_cmp(cur, &value) {
            Some(std::cmp::Ordering::Less) => end == End::Min,
            Some(std::cmp::Ordering::Greater) => end == End::Max,
            Some(std::cmp::Ordering::Equal) => true,
            None => {
                *agg = Agg::Unknown;
                return;
            }
        },
    };
    if !keep_current {
        *current = Some(value);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{Datum, PrimitiveType};
    use parquet::file::statistics::Statistics;

    use crate::table::column_stats::fixtures::*;

    #[test]
    fn counts_and_bounds_aggregate_over_row_groups_in_the_table_type() {
        // File: int32 under a table long (promotion), int64 with negatives, over two row groups.
        let meta = footer(
            "message m { optional int32 small = 1; required int64 neg = 2; }",
            vec![
                vec![
                    (
                        10,
                        Some(Statistics::int32(Some(-3), Some(7), None, Some(2), false)),
                    ),
                    (10, i64s(-900, -100, 0)),
                ],
                vec![
                    (
                        5,
                        Some(Statistics::int32(Some(-8), Some(4), None, Some(1), false)),
                    ),
                    (5, i64s(-1000, -200, 0)),
                ],
            ],
        );
        let s = schema(vec![
            prim(1, "small", PrimitiveType::Long),
            prim(2, "neg", PrimitiveType::Long),
        ]);
        let m = metrics(&meta, &s);
        assert_eq!(m.column_sizes, HashMap::from([(1, 200), (2, 200)]));
        assert_eq!(m.value_counts, HashMap::from([(1, 15), (2, 15)]));
        assert_eq!(m.null_value_counts, HashMap::from([(1, 3), (2, 0)]));
        assert_eq!(m.lower_bounds[&1], Datum::long(-8));
        assert_eq!(m.upper_bounds[&1], Datum::long(7));
        assert_eq!(m.lower_bounds[&2], Datum::long(-1000));
        assert_eq!(m.upper_bounds[&2], Datum::long(-100));
        assert!(m.nan_value_counts.is_empty());
        assert_eq!(m.split_offsets, Some(vec![4, 1004]));
    }

    #[test]
    fn missing_or_inexact_statistics_are_left_out() {
        let meta = footer(
            "message m { optional int64 a = 1; optional binary s (STRING) = 2; \
             optional int64 b = 3; }",
            vec![
                vec![
                    (10, i64s(1, 2, 0)),
                    (10, bytes(b"a", b"b", false)),
                    (10, i64s(5, 6, 1)),
                ],
                vec![
                    (10, None),
                    (10, bytes(b"a", b"b", true)),
                    (10, i64s(1, 9, 0)),
                ],
            ],
        );
        let s = schema(vec![
            prim(1, "a", PrimitiveType::Long),
            prim(2, "s", PrimitiveType::String),
            prim(3, "b", PrimitiveType::Long),
        ]);
        let m = metrics(&meta, &s);
        // No stats in one row group: sizes and value counts stay, null count and bounds go.
        assert_eq!(m.value_counts[&1], 20);
        assert!(!m.null_value_counts.contains_key(&1));
        assert!(!m.lower_bounds.contains_key(&1) && !m.upper_bounds.contains_key(&1));
        // Inexact string stats (a writer truncated them): no bounds, null count kept.
        assert_eq!(m.null_value_counts[&2], 0);
        assert!(!m.lower_bounds.contains_key(&2) && !m.upper_bounds.contains_key(&2));
        assert_eq!(m.lower_bounds[&3], Datum::long(1));
        assert_eq!(m.upper_bounds[&3], Datum::long(9));
    }

    #[test]
    fn an_all_null_row_group_needs_no_bounds_but_a_valueless_one_does() {
        let no_minmax = |nulls| Some(Statistics::int64(None, None, None, Some(nulls), false));
        let msg = "message m { optional int64 a = 1; }";
        let s = schema(vec![prim(1, "a", PrimitiveType::Long)]);
        let meta = footer(msg, vec![vec![(4, i64s(3, 5, 0))], vec![(6, no_minmax(6))]]);
        let m = metrics(&meta, &s);
        assert_eq!(m.null_value_counts[&1], 6);
        assert_eq!(m.lower_bounds[&1], Datum::long(3));
        assert_eq!(m.upper_bounds[&1], Datum::long(5));
        // Values but no min/max (e.g. all NaN, or not written): no bounds.
        let meta = footer(msg, vec![vec![(4, i64s(3, 5, 0))], vec![(6, no_minmax(2))]]);
        let m = metrics(&meta, &s);
        assert!(!m.lower_bounds.contains_key(&1) && !m.upper_bounds.contains_key(&1));
        // Nulls only: no bounds at all, and the null count says why.
        let meta = footer(msg, vec![vec![(6, no_minmax(6))]]);
        let m = metrics(&meta, &s);
        assert!(m.lower_bounds.is_empty() && m.upper_bounds.is_empty());
        assert_eq!(m.null_value_counts[&1], 6);
    }
}
