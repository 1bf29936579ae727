//! Column metrics of a data file, taken from the Parquet footer the registrar already read for the
//! schema (no extra I/O): per field ID, column sizes, value counts, null counts and lower/upper
//! bounds, plus the row groups' split offsets. Query engines skip files by these.
//!
//! The rules follow Iceberg's own Parquet writers (Java `ParquetUtil.footerMetrics`):
//! - a column whose statistics are missing in any row group gets no null count and no bounds:
//!   an aggregate over part of the file would be wrong, and nothing is guessed;
//! - bounds come only from exact statistics (`min_is_exact` / `max_is_exact`), are converted to
//!   the *table's* type of the field (an int file column under a long table column gives long
//!   bounds), and exist only for primitive leaves reached through structs alone (not inside a list
//!   or map);
//! - the metrics mode (`write.metadata.metrics.default`, `write.metadata.metrics.column.<name>`)
//!   chooses none / counts / truncate(N) / full; truncated upper bounds are rounded up, and left
//!   out when no rounding up exists.
//!
//! Parquet 58 has no NaN counts in its statistics, so `nan_value_counts` stays empty.
//!
//! The parts: this module walks the footer's leaf columns; `aggregate` sums one column over the
//! row groups, `bounds` turns a statistics value into a bound of the table's type, `mode` reads
//! the metrics modes from the table's properties, and `truncate` shortens bounds as a mode asks.

mod aggregate;
mod bounds;
mod mode;
mod truncate;

#[cfg(test)]
mod fixtures;

use std::collections::{HashMap, HashSet};

use iceberg::spec::{Datum, Schema};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};

use aggregate::{Agg, Column};
pub(crate) use mode::{MetricsConfig, MetricsMode};
use truncate::{truncate_lower, truncate_upper};

/// The metrics of one data file, keyed by field ID, ready for `DataFileBuilder`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FileMetrics {
    pub column_sizes: HashMap<i32, u64>,
    pub value_counts: HashMap<i32, u64>,
    pub null_value_counts: HashMap<i32, u64>,
    /// Always empty: parquet 58 statistics carry no NaN counts.
    pub nan_value_counts: HashMap<i32, u64>,
    pub lower_bounds: HashMap<i32, Datum>,
    pub upper_bounds: HashMap<i32, Datum>,
    /// Row-group starts, ascending; `None` when the footer gives no usable offsets.
    pub split_offsets: Option<Vec<i64>>,
}

/// Computes the metrics of a Parquet file from its footer, for a table whose current schema is
/// `schema`. `file_size` bounds the split offsets. Never fails: what cannot be derived exactly is
/// left out.
pub(crate) fn file_metrics(
    metadata: &ParquetMetaData,
    schema: &Schema,
    config: &MetricsConfig,
    file_size: u64,
) -> FileMetrics {
    let mut out = FileMetrics {
        split_offsets: split_offsets(metadata.row_groups(), file_size),
        ..FileMetrics::default()
    };
    let descr = metadata.file_metadata().schema_descr();
    let mut seen = HashSet::new();
    let mut duplicated = HashSet::new();
    for i in 0..descr.num_columns() {
        let column = descr.column(i);
        let info = column.self_type().get_basic_info();
        if !info.has_id() {
            continue;
        }
        let id = info.id();
        if !seen.insert(id) {
            // Two leaves with one ID: the file is malformed; describe neither.
            duplicated.insert(id);
            continue;
        }
        // Fields the table does not know are ignored, as Iceberg's writers do.
        let Some(field) = schema.field_by_id(id) else {
            continue;
        };
        let mode = config.mode(id);
        if !mode.counts() {
            continue;
        }
        // Bounds only for primitive leaves outside lists and maps (no repetition above them).
        let bound_type = field
            .field_type
            .as_primitive_type()
            .filter(|_| mode.bounds() && column.max_rep_level() == 0);
        let mut acc = Column::default();
        for group in metadata.row_groups() {
            match group.columns().get(i) {
                Some(chunk) => acc.add(chunk, &column, bound_type),
                None => acc.lose_stats(),
            }
        }
        out.column_sizes.insert(id, acc.size);
        out.value_counts.insert(id, acc.values);
        if let Some(nulls) = acc.nulls {
            out.null_value_counts.insert(id, nulls);
        }
        if let Agg::Known(Some(lower)) = acc.lower
            && let Some(lower) = truncate_lower(lower, mode)
        {
            out.lower_bounds.insert(id, lower);
        }
        if let Agg::Known(Some(upper)) = acc.upper
            && let Some(upper) = truncate_upper(upper, mode)
        {
            out.upper_bounds.insert(id, upper);
        }
    }
    for id in duplicated {
        out.column_sizes.remove(&id);
        out.value_counts.remove(&id);
        out.null_value_counts.remove(&id);
        out.lower_bounds.remove(&id);
        out.upper_bounds.remove(&id);
    }
    out
}

/// Where each row group starts, ascending: the first column chunk's dictionary or data page (as
/// Iceberg's Java writer computes it; some writers store a wrong `file_offset`), else the row
/// group's `file_offset`. `None` unless every offset lies inside the file.
fn split_offsets(groups: &[RowGroupMetaData], file_size: u64) -> Option<Vec<i64>> {
    if groups.is_empty() {
        return None;
    }
    let size = i64::try_from(file_size).ok()?;
    let mut offsets = groups
        .iter()
        .map(|g| {
            let start = g.columns().first().map(|c| {
                let data = c.data_page_offset();
                match c.dictionary_page_offset() {
                    Some(dict) if dict > 0 && dict < data => dict,
                    _ => data,
                }
            });
            start.or_else(|| g.file_offset())
        })
        .collect::<Option<Vec<i64>>>()?;
    if offsets.iter().any(|&o| o < 4 || o >= size) {
        return None;
    }
    offsets.sort_unstable();
    offsets.dedup();
    Some(offsets)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{Int32Builder, ListBuilder};
    use arrow_array::{
        ArrayRef, Int32Array, RecordBatch, StringArray, StructArray, TimestampNanosecondArray,
    };
    use arrow_schema::{DataType, Fields, TimeUnit as ArrowUnit};
    use iceberg::spec::PrimitiveType;
    use parquet::file::metadata::ParquetMetaDataReader;

    use super::fixtures::*;
    use super::*;
    use crate::demo::field;

    #[test]
    fn split_offsets_are_sorted_and_inside_the_file() {
        let msg = "message m { optional int64 a = 1; }";
        let meta = footer(
            msg,
            vec![vec![(1, i64s(1, 1, 0))], vec![(1, i64s(1, 1, 0))]],
        );
        let s = schema(vec![prim(1, "a", PrimitiveType::Long)]);
        assert_eq!(metrics(&meta, &s).split_offsets, Some(vec![4, 1004]));
        let small = file_metrics(&meta, &s, &MetricsConfig::default(), 500);
        assert_eq!(
            small.split_offsets, None,
            "an offset past the end is not trusted"
        );
    }

    /// A real file from the Arrow writer: nested leaves keep their own field IDs; a list's
    /// element gets counts but no bounds; a struct's leaf gets bounds.
    #[test]
    fn a_real_footer_with_nested_fields() {
        let point = Fields::from(vec![field("x", DataType::Int32, true, 4)]);
        let item = field("item", DataType::Int32, true, 6);
        let arrow = Arc::new(arrow_schema::Schema::new(vec![
            field(
                "ts",
                DataType::Timestamp(ArrowUnit::Nanosecond, Some("UTC".into())),
                false,
                1,
            ),
            field("name", DataType::Utf8, true, 2),
            field("point", DataType::Struct(point.clone()), true, 3),
            field("tags", DataType::List(Arc::new(item.clone())), true, 5),
        ]));
        let mut tags = ListBuilder::new(Int32Builder::new()).with_field(Arc::new(item.clone()));
        tags.append_value([Some(1), Some(2)]);
        tags.append_null();
        tags.append_value([None, Some(9)]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(
                TimestampNanosecondArray::from(vec![-1_500, 2_000, 3_001]).with_timezone("UTC"),
            ),
            Arc::new(StringArray::from(vec![
                Some("a-very-long-device-name-0001"),
                None,
                Some("b"),
            ])),
            Arc::new(StructArray::new(
                point,
                vec![Arc::new(Int32Array::from(vec![Some(-7), Some(3), None])) as ArrayRef],
                None,
            )),
            Arc::new(tags.finish()),
        ];
        let batch = RecordBatch::try_new(arrow, columns).expect("batch");
        let bytes = crate::demo::write_parquet(std::slice::from_ref(&batch)).expect("parquet");
        let meta = ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .expect("footer");
        let table = iceberg::arrow::arrow_schema_to_schema(&batch.schema()).expect("schema");
        let m = file_metrics(&meta, &table, &MetricsConfig::default(), bytes.len() as u64);
        let mut ids: Vec<i32> = m.value_counts.keys().copied().collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            vec![1, 2, 4, 6],
            "one entry per leaf, by its own field ID"
        );
        assert_eq!(m.value_counts[&1], 3);
        assert_eq!(
            m.value_counts[&6], 5,
            "list entries, a null list and a null element"
        );
        assert_eq!(m.null_value_counts[&2], 1);
        assert_eq!(m.null_value_counts[&4], 1);
        assert_eq!(m.null_value_counts[&6], 2);
        assert_eq!(m.lower_bounds[&1], Datum::timestamptz_nanos(-1_500));
        assert_eq!(m.upper_bounds[&1], Datum::timestamptz_nanos(3_001));
        assert_eq!(m.lower_bounds[&2], Datum::string("a-very-long-devi"));
        assert_eq!(m.upper_bounds[&2], Datum::string("b"));
        assert_eq!(m.lower_bounds[&4], Datum::int(-7));
        assert_eq!(m.upper_bounds[&4], Datum::int(3));
        assert!(!m.lower_bounds.contains_key(&6) && !m.upper_bounds.contains_key(&6));
        assert!(m.column_sizes.values().all(|&s| s > 0));
        assert_eq!(m.split_offsets, Some(vec![4]));
    }
}
