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

use std::collections::{HashMap, HashSet};

use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType, Schema};
use parquet::basic::{ConvertedType, LogicalType, TimeUnit};
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData, RowGroupMetaData};
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescriptor;

use crate::runtime::warn_once;

/// The table property holding the default metrics mode.
pub(crate) const DEFAULT_MODE_PROPERTY: &str = "write.metadata.metrics.default";
/// The prefix of per-column metrics mode properties (`...column.<full column name>`).
pub(crate) const COLUMN_MODE_PREFIX: &str = "write.metadata.metrics.column.";

/// What metrics a column gets (the Iceberg spec's metrics modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricsMode {
    /// Nothing at all.
    None,
    /// Column size, value and null counts; no bounds.
    Counts,
    /// Counts and bounds; strings truncated to N code points, binary to N bytes.
    Truncate(usize),
    /// Counts and untruncated bounds.
    Full,
}

impl MetricsMode {
    /// Iceberg's default: `truncate(16)`.
    pub(crate) const DEFAULT: MetricsMode = MetricsMode::Truncate(16);

    /// Parses a mode as Iceberg spells it (case-insensitive): `none`, `counts`, `full`,
    /// `truncate(N)` with N > 0.
    pub(crate) fn parse(text: &str) -> Option<MetricsMode> {
        let text = text.trim().to_ascii_lowercase();
        match text.as_str() {
            "none" => Some(MetricsMode::None),
            "counts" => Some(MetricsMode::Counts),
            "full" => Some(MetricsMode::Full),
            other => {
                let n = other
                    .strip_prefix("truncate(")?
                    .strip_suffix(')')?
                    .trim()
                    .parse::<usize>()
                    .ok()?;
                (n > 0).then_some(MetricsMode::Truncate(n))
            }
        }
    }

    fn counts(self) -> bool {
        self != MetricsMode::None
    }

    fn bounds(self) -> bool {
        matches!(self, MetricsMode::Truncate(_) | MetricsMode::Full)
    }
}

/// The metrics mode of every column of a table, from its properties.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MetricsConfig {
    default: MetricsMode,
    columns: HashMap<i32, MetricsMode>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            default: MetricsMode::DEFAULT,
            columns: HashMap::new(),
        }
    }
}

impl MetricsConfig {
    /// Reads `write.metadata.metrics.default` and `write.metadata.metrics.column.<name>` (names
    /// resolved to field IDs in `schema`, nested names dotted). Like Iceberg's writers, an invalid
    /// value or an unknown column is ignored with a warning rather than failing the append.
    pub(crate) fn from_properties(properties: &HashMap<String, String>, schema: &Schema) -> Self {
        let mut config = MetricsConfig::default();
        if let Some(raw) = properties.get(DEFAULT_MODE_PROPERTY) {
            match MetricsMode::parse(raw) {
                Some(mode) => config.default = mode,
                None => warn_once::warn(format!(
                    "ignoring table property {DEFAULT_MODE_PROPERTY}={raw:?}: expected none, \
                     counts, full or truncate(N); using truncate(16)"
                )),
            }
        }
        for (key, raw) in properties {
            let Some(column) = key.strip_prefix(COLUMN_MODE_PREFIX) else {
                continue;
            };
            let Some(mode) = MetricsMode::parse(raw) else {
                warn_once::warn(format!(
                    "ignoring table property {key}={raw:?}: expected none, counts, full or \
                     truncate(N)"
                ));
                continue;
            };
            match schema.field_id_by_name(column) {
                Some(id) => {
                    config.columns.insert(id, mode);
                }
                None => warn_once::warn(format!(
                    "ignoring table property {key}: the table has no column {column:?}"
                )),
            }
        }
        config
    }

    /// Every column `full`: exact, untruncated bounds (what a partition value is decided from,
    /// whatever the table's metrics modes are).
    pub(crate) fn full() -> Self {
        MetricsConfig {
            default: MetricsMode::Full,
            columns: HashMap::new(),
        }
    }

    /// The mode of the column with this field ID.
    pub(crate) fn mode(&self, field_id: i32) -> MetricsMode {
        self.columns.get(&field_id).copied().unwrap_or(self.default)
    }
}

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

/// A bound aggregated over row groups: `Known(None)` means no row group had a value yet (all
/// null so far), `Unknown` that some row group's value is not exactly known.
#[derive(Debug, Clone, Default)]
enum Agg {
    #[default]
    Unknown,
    Known(Option<Datum>),
}

/// One leaf column, aggregated over the row groups.
#[derive(Debug)]
struct Column {
    size: u64,
    values: u64,
    nulls: Option<u64>,
    lower: Agg,
    upper: Agg,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Min,
    Max,
}

impl Column {
    fn lose_stats(&mut self) {
        self.nulls = None;
        self.lower = Agg::Unknown;
        self.upper = Agg::Unknown;
    }

    fn add(
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
fn bound(
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

/// The lower bound kept under `mode`: strings and binaries are cut to the truncation length (a
/// prefix is never greater than the value).
fn truncate_lower(bound: Datum, mode: MetricsMode) -> Option<Datum> {
    let MetricsMode::Truncate(n) = mode else {
        return Some(bound);
    };
    Some(match (bound.data_type(), bound.literal()) {
        (PrimitiveType::String, PrimitiveLiteral::String(s)) => {
            Datum::string(truncate_str_min(s, n))
        }
        (PrimitiveType::Binary, PrimitiveLiteral::Binary(b)) => {
            Datum::binary(b.iter().take(n).copied())
        }
        (PrimitiveType::Fixed(_), PrimitiveLiteral::Binary(b)) => {
            Datum::fixed(b.iter().take(n).copied())
        }
        _ => bound,
    })
}

/// The upper bound kept under `mode`: a value longer than the truncation length is cut and its
/// last incrementable character (or byte) incremented; without one there is no bound.
fn truncate_upper(bound: Datum, mode: MetricsMode) -> Option<Datum> {
    let MetricsMode::Truncate(n) = mode else {
        return Some(bound);
    };
    match (bound.data_type(), bound.literal()) {
        (PrimitiveType::String, PrimitiveLiteral::String(s)) => {
            truncate_str_max(s, n).map(Datum::string)
        }
        (PrimitiveType::Binary, PrimitiveLiteral::Binary(b)) => {
            truncate_bytes_max(b, n).map(Datum::binary)
        }
        (PrimitiveType::Fixed(_), PrimitiveLiteral::Binary(b)) => {
            truncate_bytes_max(b, n).map(Datum::fixed)
        }
        _ => Some(bound),
    }
}

/// The first `n` Unicode code points of `s`.
pub(crate) fn truncate_str_min(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// An upper bound for `s` of at most `n` code points: `s` itself when it is short enough, else its
/// first `n` code points with the last one that can be incremented incremented (and what follows
/// it dropped); `None` when every kept code point is U+10FFFF. Strings compare by code point,
/// which is UTF-8 byte order.
pub(crate) fn truncate_str_max(s: &str, n: usize) -> Option<String> {
    let prefix = truncate_str_min(s, n);
    if prefix.len() == s.len() {
        return Some(s.to_string());
    }
    let chars: Vec<char> = prefix.chars().collect();
    for i in (0..chars.len()).rev() {
        if let Some(next) = next_char(chars[i]) {
            let mut out: String = chars[..i].iter().collect();
            out.push(next);
            return Some(out);
        }
    }
    None
}

/// The next Unicode scalar value: surrogates are not characters, so U+D7FF is followed by U+E000.
fn next_char(c: char) -> Option<char> {
    let next = u32::from(c) + 1;
    let next = if (0xD800..=0xDFFF).contains(&next) {
        0xE000
    } else {
        next
    };
    char::from_u32(next)
}

/// Like [`truncate_str_max`] for bytes (unsigned lexicographic order): cut to `n` bytes and
/// increment the last byte below 0xFF, dropping what follows it.
pub(crate) fn truncate_bytes_max(b: &[u8], n: usize) -> Option<Vec<u8>> {
    if b.len() <= n {
        return Some(b.to_vec());
    }
    let mut out = b[..n].to_vec();
    while let Some(last) = out.pop() {
        if last < 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
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
    use iceberg::spec::{NestedField, Type};
    use parquet::data_type::{ByteArray, FixedLenByteArray};
    use parquet::file::metadata::{FileMetaData, ParquetMetaDataReader};
    use parquet::file::statistics::ValueStatistics;
    use parquet::schema::parser::parse_message_type;
    use parquet::schema::types::SchemaDescriptor;

    use super::*;
    use crate::demo::field;

    const TRUNC16: MetricsMode = MetricsMode::Truncate(16);

    /// Footer metadata for `message`, with one entry per row group and leaf: (value count,
    /// statistics). Column sizes are 100 per chunk; row group `g` starts at `4 + 1000 * g`.
    fn footer(message: &str, groups: Vec<Vec<(i64, Option<Statistics>)>>) -> ParquetMetaData {
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

    fn schema(fields: Vec<NestedField>) -> Schema {
        Schema::builder()
            .with_fields(fields.into_iter().map(Arc::new))
            .build()
            .expect("schema")
    }

    fn prim(id: i32, name: &str, ty: PrimitiveType) -> NestedField {
        NestedField::optional(id, name, Type::Primitive(ty))
    }

    fn i64s(min: i64, max: i64, nulls: u64) -> Option<Statistics> {
        Some(Statistics::int64(
            Some(min),
            Some(max),
            None,
            Some(nulls),
            false,
        ))
    }

    fn bytes(min: &[u8], max: &[u8], exact: bool) -> Option<Statistics> {
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

    fn metrics(meta: &ParquetMetaData, schema: &Schema) -> FileMetrics {
        file_metrics(meta, schema, &MetricsConfig::default(), 1 << 20)
    }

    #[test]
    fn modes_parse_as_iceberg_spells_them() {
        assert_eq!(MetricsMode::parse("none"), Some(MetricsMode::None));
        assert_eq!(MetricsMode::parse("Counts"), Some(MetricsMode::Counts));
        assert_eq!(MetricsMode::parse(" full "), Some(MetricsMode::Full));
        assert_eq!(MetricsMode::parse("truncate(16)"), Some(TRUNC16));
        assert_eq!(
            MetricsMode::parse("TRUNCATE( 3 )"),
            Some(MetricsMode::Truncate(3))
        );
        for bad in [
            "truncate(0)",
            "truncate(-1)",
            "truncate()",
            "truncate16",
            "most",
            "",
        ] {
            assert_eq!(MetricsMode::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn config_reads_default_and_column_overrides_by_name() {
        let s = schema(vec![
            prim(1, "a", PrimitiveType::Long),
            NestedField::optional(
                2,
                "loc",
                Type::Struct(iceberg::spec::StructType::new(vec![Arc::new(prim(
                    3,
                    "lat",
                    PrimitiveType::Double,
                ))])),
            ),
        ]);
        let props = HashMap::from([
            (DEFAULT_MODE_PROPERTY.to_string(), "counts".to_string()),
            (format!("{COLUMN_MODE_PREFIX}loc.lat"), "full".to_string()),
            (format!("{COLUMN_MODE_PREFIX}nope"), "full".to_string()),
        ]);
        let c = MetricsConfig::from_properties(&props, &s);
        assert_eq!(c.mode(1), MetricsMode::Counts);
        assert_eq!(c.mode(3), MetricsMode::Full);
        // An invalid default falls back to truncate(16), an invalid column mode to the default.
        let props = HashMap::from([
            (DEFAULT_MODE_PROPERTY.to_string(), "most".to_string()),
            (format!("{COLUMN_MODE_PREFIX}a"), "truncate(x)".to_string()),
        ]);
        let c = MetricsConfig::from_properties(&props, &s);
        assert_eq!(c.mode(1), TRUNC16);
        assert_eq!(
            MetricsConfig::from_properties(&HashMap::new(), &s).mode(3),
            TRUNC16
        );
    }

    #[test]
    fn strings_truncate_by_code_point_and_round_up() {
        // 17 code points, multibyte: cut after 16 code points, never inside a character.
        let s = "αβγδεζηθικλμνξοπρ";
        assert_eq!(truncate_str_min(s, 16), "αβγδεζηθικλμνξοπ");
        assert_eq!(truncate_str_max(s, 16).as_deref(), Some("αβγδεζηθικλμνξορ"));
        // Short enough: unchanged, both ways.
        assert_eq!(truncate_str_min("short", 16), "short");
        assert_eq!(truncate_str_max("short", 16).as_deref(), Some("short"));
        let exactly16 = "abcdefghijklmnop";
        assert_eq!(truncate_str_max(exactly16, 16).as_deref(), Some(exactly16));
        // The last kept code point is the maximum: the one before it is incremented.
        let max = char::MAX;
        let s = format!("{}{max}tail", "a".repeat(15));
        assert_eq!(
            truncate_str_max(&s, 16),
            Some(format!("{}b", "a".repeat(14)))
        );
        // Nothing can be incremented: no upper bound.
        let s: String = std::iter::repeat_n(max, 17).collect();
        assert_eq!(truncate_str_max(&s, 16), None);
        // U+D7FF is followed by U+E000 (surrogates are not characters).
        let s = format!("{}\u{D7FF}zz", "a".repeat(15));
        assert_eq!(
            truncate_str_max(&s, 16),
            Some(format!("{}\u{E000}", "a".repeat(15)))
        );
        // The result is a valid upper bound in UTF-8 byte order.
        for s in [
            "zzzzzzzzzzzzzzzzzz",
            "ÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿ",
            "a\u{10FFFF}\u{10FFFF}",
        ] {
            if let Some(up) = truncate_str_max(s, 2) {
                assert!(up.as_bytes() > s.as_bytes(), "{s:?} -> {up:?}");
            }
        }
    }

    #[test]
    fn binaries_truncate_by_byte_and_round_up() {
        let long: Vec<u8> = (0u8..20).collect();
        assert_eq!(
            truncate_bytes_max(&long, 16),
            Some((0u8..15).chain([16]).collect())
        );
        let mut ff = vec![7u8; 14];
        ff.extend([0xFF, 0xFF, 0x00]);
        let mut want = vec![7u8; 13];
        want.push(8);
        assert_eq!(truncate_bytes_max(&ff, 16), Some(want));
        assert_eq!(truncate_bytes_max(&[0xFF; 17], 16), None);
        assert_eq!(truncate_bytes_max(&[0xFF; 16], 16), Some(vec![0xFF; 16]));
    }

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

    #[test]
    fn modes_choose_what_is_kept() {
        let long = "ααααααααααααααααααααα"; // 21 code points
        let meta = footer(
            "message m { optional binary s (STRING) = 1; optional int64 n = 2; }",
            vec![vec![
                (3, bytes(long.as_bytes(), long.as_bytes(), true)),
                (3, i64s(1, 2, 0)),
            ]],
        );
        let s = schema(vec![
            prim(1, "s", PrimitiveType::String),
            prim(2, "n", PrimitiveType::Long),
        ]);
        let run = |default: &str, column: Option<&str>| {
            let mut props =
                HashMap::from([(DEFAULT_MODE_PROPERTY.to_string(), default.to_string())]);
            if let Some(mode) = column {
                props.insert(format!("{COLUMN_MODE_PREFIX}n"), mode.to_string());
            }
            file_metrics(
                &meta,
                &s,
                &MetricsConfig::from_properties(&props, &s),
                1 << 20,
            )
        };
        let none = run("none", None);
        assert!(none.column_sizes.is_empty() && none.value_counts.is_empty());
        assert!(none.null_value_counts.is_empty() && none.lower_bounds.is_empty());
        assert_eq!(
            none.split_offsets,
            Some(vec![4]),
            "split offsets are not metrics"
        );
        let counts = run("counts", None);
        assert_eq!(counts.value_counts.len(), 2);
        assert_eq!(counts.null_value_counts.len(), 2);
        assert!(counts.lower_bounds.is_empty() && counts.upper_bounds.is_empty());
        let full = run("full", None);
        assert_eq!(full.lower_bounds[&1], Datum::string(long));
        assert_eq!(full.upper_bounds[&1], Datum::string(long));
        let trunc = run("truncate(16)", None);
        assert_eq!(trunc.lower_bounds[&1], Datum::string("α".repeat(16)));
        assert_eq!(
            trunc.upper_bounds[&1],
            Datum::string(format!("{}β", "α".repeat(15)))
        );
        // A column override wins over the default.
        let mixed = run("none", Some("full"));
        assert_eq!(mixed.lower_bounds.keys().collect::<Vec<_>>(), vec![&2]);
        assert!(!mixed.value_counts.contains_key(&1));
    }

    #[test]
    fn binary_bounds_with_ff_bytes() {
        let mut max = vec![0x10u8; 15];
        max.extend([0xFF, 0xFF, 0xFF]);
        let meta = footer(
            "message m { optional binary b = 1; }",
            vec![vec![(2, bytes(&[0u8; 20], &max, true))]],
        );
        let s = schema(vec![prim(1, "b", PrimitiveType::Binary)]);
        let m = metrics(&meta, &s);
        assert_eq!(m.lower_bounds[&1], Datum::binary(vec![0u8; 16]));
        let mut want = vec![0x10u8; 14];
        want.push(0x11);
        assert_eq!(m.upper_bounds[&1], Datum::binary(want));
        let meta = footer(
            "message m { optional binary b = 1; }",
            vec![vec![(2, bytes(&[1], &[0xFF; 17], true))]],
        );
        let m = metrics(&meta, &s);
        assert!(m.lower_bounds.contains_key(&1));
        assert!(
            !m.upper_bounds.contains_key(&1),
            "no byte can be incremented"
        );
    }

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
