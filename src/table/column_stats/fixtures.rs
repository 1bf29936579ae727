//! Footers and schemas for the tests of the metrics' parts: footer metadata built directly
//! (row groups with chosen statistics, no file written), and short builders for statistics.

use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};
use parquet::data_type::ByteArray;
use parquet::file::metadata::{
    ColumnChunkMetaData, FileMetaData, ParquetMetaData, RowGroupMetaData,
};
use parquet::file::statistics::{Statistics, ValueStatistics};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::SchemaDescriptor;

use super::{FileMetrics, MetricsConfig, MetricsMode, file_metrics};

pub(super) const TRUNC16: MetricsMode = MetricsMode::Truncate(16);

/// Footer metadata for `message`, with one entry per row group and leaf: (value count,
/// statistics). Column sizes are 100 per chunk; row group `g` starts at `4 + 1000 * g`.
pub(super) fn footer(
    message: &str,
    groups: Vec<Vec<(i64, Option<Statistics>)>>,
) -> ParquetMetaData {
    let descr = Arc::new(SchemaDescriptor::new(Arc::new(
        parse_message_type(message).expect("schema"),
    )));
    let mut rows = 0;
    let row_groups = groups
        .into_iter()
        .enumerate()
        .map(|(g, chunks)| {
            let num_rows = chunks.first().map(|c| c.0).unwrap_or(0);
            rows += num_rows;
            let columns = chunks
                .into_iter()
                .enumerate()
                .map(|(i, (values, stats))| {
                    let mut b = ColumnChunkMetaData::builder(descr.column(i))
                        .set_num_values(values)
                        .set_total_compressed_size(100)
                        .set_data_page_offset(4 + 1000 * g as i64 + 100 * i as i64);
                    if let Some(stats) = stats {
                        b = b.set_statistics(stats);
                    }
                    b.build().expect("chunk")
                })
                .collect();
            RowGroupMetaData::builder(Arc::clone(&descr))
                .set_num_rows(num_rows)
                .set_column_metadata(columns)
                .build()
                .expect("row group")
        })
        .collect();
    ParquetMetaData::new(
        FileMetaData::new(2, rows, None, None, descr, None),
        row_groups,
    )
}

pub(super) fn schema(fields: Vec<NestedField>) -> Schema {
    Schema::builder()
        .with_fields(fields.into_iter().map(Arc::new))
        .build()
        .expect("schema")
}

pub(super) fn prim(id: i32, name: &str, ty: PrimitiveType) -> NestedField {
    NestedField::optional(id, name, Type::Primitive(ty))
}

pub(super) fn i64s(min: i64, max: i64, nulls: u64) -> Option<Statistics> {
    Some(Statistics::int64(
        Some(min),
        Some(max),
        None,
        Some(nulls),
        false,
    ))
}

pub(super) fn bytes(min: &[u8], max: &[u8], exact: bool) -> Option<Statistics> {
    Some(Statistics::ByteArray(
        ValueStatistics::new(
            Some(ByteArray::from(min.to_vec())),
            Some(ByteArray::from(max.to_vec())),
            None,
            Some(0),
            false,
        )
        .with_min_is_exact(exact)
        .with_max_is_exact(exact),
    ))
}

pub(super) fn metrics(meta: &ParquetMetaData, schema: &Schema) -> FileMetrics {
    file_metrics(meta, schema, &MetricsConfig::default(), 1 << 20)
}
