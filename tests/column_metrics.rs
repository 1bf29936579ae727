//! Column metrics on registered data files, against the real REST fixture and S3 server: the
//! manifests carry what each file's footer holds (checked by an independent reader, pyarrow +
//! pyiceberg), an independent engine (pyiceberg) prunes files by them, and edge-case bounds
//! (long multibyte strings, pre-1970 timestamps, negative decimals and numbers) round-trip through
//! the spec's binary encoding.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, Decimal128Array, Float32Array, Int32Array,
    Int64Array, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Fields, Schema, TimeUnit};
use bytes::Bytes;
use common::Harness;
use common::demo::{self, field};
use iceberg::expr::Reference;
use iceberg::spec::{DataFile, Datum, PrimitiveLiteral};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

const ROWS: usize = 250;
/// Three row groups per segment, so metrics aggregate across row groups.
const ROWS_PER_GROUP: usize = 100;
/// The writer truncates statistics longer than this (then they are inexact).
const STATS_TRUNCATE: usize = 200;
/// Strings of this column exceed [`STATS_TRUNCATE`]: its statistics are inexact.
const INEXACT_ID: i32 = 15;

fn edge_schema() -> Arc<Schema> {
    let point = Fields::from(vec![field("x", DataType::Float32, true, 12)]);
    let tag = field("element", DataType::Utf8, true, 14);
    Arc::new(Schema::new(vec![
        field(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
            1,
        ),
        field("device", DataType::Utf8, true, 2),
        field("label", DataType::Utf8, false, 3),
        field("seq", DataType::Int64, false, 4),
        field("amount", DataType::Decimal128(20, 4), false, 5),
        field("price", DataType::Decimal128(9, 2), true, 6),
        field("day", DataType::Date32, false, 7),
        field("flag", DataType::Boolean, false, 8),
        field("small", DataType::Int32, true, 9),
        field("blob", DataType::Binary, false, 10),
        field("point", DataType::Struct(point), true, 11),
        field("tags", DataType::List(Arc::new(tag)), true, 13),
        field("note", DataType::Utf8, false, INEXACT_ID),
        field("maxed", DataType::Utf8, false, 16),
    ]))
}

const TS0: i64 = -1_000_000_000; // 1969-12-31T23:43:20Z: bounds below the epoch
const MAX_CP: char = char::MAX;

/// Segment `seed`: every column has edge values; `seed` shifts them so files differ.
fn edge_batch(seed: i64) -> RecordBatch {
    let n = ROWS as i64;
    let idx = || 0..n;
    let label = |i: i64| {
        if i == 17 {
            // The maximum: after truncation to 16 code points its last 15 are U+10FFFF, so the
            // upper bound must increment the first one instead.
            format!("\u{10FFFE}{}more", MAX_CP.to_string().repeat(15))
        } else {
            format!("label-{i:04}-αβγδεζηθ-{seed}")
        }
    };
    let mut tags = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(field(
        "element",
        DataType::Utf8,
        true,
        14,
    )));
    for i in idx() {
        if i % 9 == 0 {
            tags.append_null();
        } else {
            tags.append_value([Some(format!("t{}", i % 4)), None]);
        }
    }
    let point_fields = Fields::from(vec![field("x", DataType::Float32, true, 12)]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                idx().map(|i| TS0 + seed * 10_000_000_000 + i * 1_000_003),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from_iter(idx().map(|i| {
            (i % 7 != 3).then(|| format!("设备-{:03}-温度传感器-ßeta-{seed}", i % 50))
        }))),
        Arc::new(StringArray::from_iter_values(idx().map(label))),
        Arc::new(Int64Array::from_iter_values(
            idx().map(|i| -(i * 1_000_000_007) - seed),
        )),
        Arc::new(
            Decimal128Array::from_iter_values(
                idx().map(|i| (i128::from(i) - 125) * 123_456_789_012 + i128::from(seed)),
            )
            .with_precision_and_scale(20, 4)
            .expect("decimal"),
        ),
        Arc::new(
            Decimal128Array::from_iter(
                idx().map(|i| (i % 11 != 0).then_some((i128::from(i) - 100) * 101)),
            )
            .with_precision_and_scale(9, 2)
            .expect("decimal"),
        ),
        Arc::new(Date32Array::from_iter_values(
            idx().map(|i| -1000 + i32::try_from(i + seed).expect("small")),
        )),
        Arc::new(BooleanArray::from_iter(idx().map(|i| Some(i % 3 == 0)))),
        Arc::new(Int32Array::from_iter(idx().map(|i| {
            (i % 5 != 0).then(|| i32::try_from(i % 50 - 25).expect("small"))
        }))),
        Arc::new(BinaryArray::from_iter_values(idx().map(|i| {
            if i == 42 {
                // The maximum: 0xFE then 0xFF bytes; its upper bound is the single byte 0xFF.
                let mut v = vec![0xFEu8];
                v.extend([0xFF; 19]);
                v
            } else {
                vec![u8::try_from(i % 200).expect("byte"); 20]
            }
        }))),
        Arc::new(StructArray::new(
            point_fields,
            vec![Arc::new(Float32Array::from_iter(idx().map(|i| {
                Some(if i == 7 {
                    f32::NAN
                } else {
                    (i as f32 - 100.0) / 4.0
                })
            }))) as ArrayRef],
            Some(idx().map(|i| i % 13 != 5).collect()),
        )),
        Arc::new(tags.finish()),
        Arc::new(StringArray::from_iter_values(
            idx().map(|i| format!("{i:04}{}", "n".repeat(STATS_TRUNCATE))),
        )),
        Arc::new(StringArray::from_iter_values(
            idx().map(|_| MAX_CP.to_string().repeat(17)),
        )),
    ];
    RecordBatch::try_new(edge_schema(), columns).expect("batch")
}

fn parquet(batch: &RecordBatch) -> Bytes {
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROWS_PER_GROUP))
        .set_statistics_truncate_length(Some(STATS_TRUNCATE))
        .build();
    let mut buf = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).expect("writer");
    writer.write(batch).expect("write");
    writer.close().expect("close");
    Bytes::from(buf)
}

/// Ships `batch` as segment `id` with several row groups; returns its object key.
async fn ship(h: &mut Harness, id: &str, batch: &RecordBatch) -> String {
    let key = demo::object_key(&h.prefix, &h.pipeline, "telemetry", id);
    demo::ship_segment(
        h.store.as_ref(),
        &mut h.log,
        "telemetry",
        id,
        &key,
        parquet(batch),
        batch.num_rows() as u64,
    )
    .await
    .expect("ship");
    key
}

/// Recomputes every file's metrics from its footer with pyarrow (an independent Parquet reader)
/// and Iceberg's rules written out again in Python, encodes the bounds per the spec's binary
/// single-value serialization, and compares with what pyiceberg reads from the manifests.
const PY_COMPARE: &str = r#"
import json, os, struct, sys
import pyarrow as pa, pyarrow.parquet as pq
from pyiceberg.types import (BooleanType, IntegerType, LongType, FloatType, DoubleType, DateType,
    TimestampType, TimestamptzType, StringType, BinaryType, DecimalType)

table_id, inexact = sys.argv[1], set(json.loads(sys.argv[2]))
table = catalog.load_table(table_id)
schema = table.schema()
TRUNC = 16
MAXCP = 0x10FFFF

def leaves(arrow_schema):
    # Parquet leaf order is the depth-first order of the Arrow fields; each leaf: (field id,
    # whether a list/map is above it).
    out = []
    def walk(f, repeated):
        t = f.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), repeated)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_field, True)
        elif pa.types.is_map(t):
            walk(t.key_field, True); walk(t.item_field, True)
        else:
            out.append((int(f.metadata[b"PARQUET:field_id"]), repeated))
    for f in arrow_schema:
        walk(f, False)
    return out

def trunc_str_max(s):
    if len(s) <= TRUNC:
        return s
    cps = [ord(c) for c in s[:TRUNC]]
    for i in range(len(cps) - 1, -1, -1):
        nxt = cps[i] + 1
        if 0xD800 <= nxt <= 0xDFFF:
            nxt = 0xE000
        if nxt <= MAXCP:
            return "".join(map(chr, cps[:i])) + chr(nxt)
    return None

def trunc_bin_max(b):
    if len(b) <= TRUNC:
        return b
    b = bytearray(b[:TRUNC])
    while b:
        last = b.pop()
        if last < 0xFF:
            b.append(last + 1)
            return bytes(b)
    return None

def decimal_bytes(v):
    return v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big", signed=True)

def value(t, raw):
    # A statistic as stored (pyarrow's min_raw/max_raw) as a Python value that orders like the
    # table's Iceberg type: decimals as integers (their bytes are signed), strings as str.
    if isinstance(t, DecimalType):
        return raw if isinstance(raw, int) else int.from_bytes(raw, "big", signed=True)
    if isinstance(t, StringType) and isinstance(raw, bytes):
        return raw.decode("utf-8")
    return raw

def encode(t, v, col):
    # The spec's binary single-value serialization.
    if isinstance(t, BooleanType): return b"\x01" if v else b"\x00"
    if isinstance(t, (IntegerType, DateType)): return struct.pack("<i", v)
    if isinstance(t, (LongType, TimestampType, TimestamptzType)):
        unit = col.logical_type.to_json()
        assert "milliseconds" not in unit and "nanoseconds" not in unit, unit
        return struct.pack("<q", v)
    if isinstance(t, FloatType): return struct.pack("<f", v)
    if isinstance(t, DoubleType): return struct.pack("<d", v)
    if isinstance(t, StringType): return v.encode("utf-8")
    if isinstance(t, BinaryType): return v
    if isinstance(t, DecimalType): return decimal_bytes(v)
    raise AssertionError(f"no encoding for {t}")

def expected(data, size):
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    ids = leaves(pq.read_schema(pa.BufferReader(data)))
    assert len(ids) == md.num_columns, (ids, md.num_columns)
    sizes, values, nulls, lower, upper = {}, {}, {}, {}, {}
    for c, (fid, repeated) in enumerate(ids):
        t = schema.find_field(fid).field_type
        sizes[fid] = sum(md.row_group(g).column(c).total_compressed_size for g in range(md.num_row_groups))
        values[fid] = sum(md.row_group(g).column(c).num_values for g in range(md.num_row_groups))
        chunks = [md.row_group(g).column(c) for g in range(md.num_row_groups)]
        if all(ch.is_stats_set and ch.statistics.has_null_count for ch in chunks):
            nulls[fid] = sum(ch.statistics.null_count for ch in chunks)
        if repeated or fid in inexact:
            continue
        lo = hi = None; ok = True
        for ch in chunks:
            st = ch.statistics
            if st is None or not st.has_min_max:
                ok = ok and st is not None and st.null_count == ch.num_values
                continue
            mn, mx = value(t, st.min_raw), value(t, st.max_raw)
            if isinstance(mn, float) and (mn != mn or mx != mx):
                ok = False; continue
            lo = mn if lo is None or mn < lo else lo
            hi = mx if hi is None or mx > hi else hi
        if not ok or lo is None:
            continue
        if isinstance(t, (FloatType, DoubleType)):
            lo = -0.0 if lo == 0 else lo
            hi = 0.0 if hi == 0 else hi
        if isinstance(t, StringType):
            lo, hi = lo[:TRUNC], trunc_str_max(hi)
        if isinstance(t, BinaryType):
            lo, hi = lo[:TRUNC], trunc_bin_max(hi)
        col = md.schema.column(c)
        lower[fid] = encode(t, lo, col)
        if hi is not None:
            upper[fid] = encode(t, hi, col)
    offsets = []
    for g in range(md.num_row_groups):
        ch = md.row_group(g).column(0)
        d = ch.dictionary_page_offset
        offsets.append(d if ch.has_dictionary_page and d and 0 < d < ch.data_page_offset else ch.data_page_offset)
    return {"column_sizes": sizes, "value_counts": values, "null_value_counts": nulls,
            "lower_bounds": lower, "upper_bounds": upper, "split_offsets": sorted(offsets)}

files = table.inspect.files().to_pylist()
report = {"files": len(files), "bounds": 0}
for f in files:
    key = f["file_path"]
    # The file as S3 serves it (read through the table's FileIO, with the test's keys).
    with table.io.new_input(key).open() as stream:
        data = pa.py_buffer(stream.read())
    want = expected(data, f["file_size_in_bytes"])
    for name in ["column_sizes", "value_counts", "null_value_counts", "lower_bounds", "upper_bounds"]:
        got = dict(f[name] or [])
        assert got == want[name], f"{key} {name}:\n got  {sorted(got.items())}\n want {sorted(want[name].items())}"
    assert list(f["split_offsets"] or []) == want["split_offsets"], (f["split_offsets"], want["split_offsets"])
    assert not dict(f["nan_value_counts"] or []), "parquet footers hold no NaN counts"
    report["bounds"] += len(want["lower_bounds"]) + len(want["upper_bounds"])
print(json.dumps(report))
"#;

async fn data_files(table: &Table) -> Vec<DataFile> {
    let mut files: Vec<DataFile> = common::manifest_entries(table)
        .await
        .into_iter()
        .map(|(_, file)| file)
        .collect();
    files.sort_by(|a, b| a.file_path().cmp(b.file_path()));
    files
}

/// (a) Registered files carry the metrics their footers hold, per field ID, as an independent
/// reader computes them from the same files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_files_carry_the_metrics_their_footers_hold() {
    let mut h = Harness::new("metrics");
    ship(&mut h, "seg-a", &edge_batch(0)).await;
    ship(&mut h, "seg-b", &edge_batch(1)).await;
    h.run_until_handled(2).await;

    let table = h.table("telemetry").await.expect("table");
    let files = data_files(&table).await;
    assert_eq!(files.len(), 2);
    for file in &files {
        // Guard against a vacuous comparison: the metrics are there, nested leaves by their own
        // IDs, three row groups each.
        let mut ids: Vec<i32> = file.value_counts().keys().copied().collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 15, 16],
            "{}",
            file.file_path()
        );
        assert_eq!(file.split_offsets().map(<[i64]>::len), Some(3));
        assert!(
            !file.lower_bounds().contains_key(&14),
            "no bounds inside a list"
        );
        assert!(
            !file.lower_bounds().contains_key(&INEXACT_ID),
            "inexact statistics"
        );
    }

    let ident = format!("{}.telemetry", h.namespace.join("."));
    let inexact = format!("[{INEXACT_ID}]");
    let report = common::py::run(PY_COMPARE, &[&ident, &inexact]);
    let report: serde_json::Value = serde_json::from_str(report.trim()).expect("report");
    assert_eq!(report["files"], 2, "{report}");
    // 12 leaves with bounds (not in a list, exact statistics), one without an upper bound.
    assert_eq!(report["bounds"], 2 * (12 + 11), "{report}");
}

/// (b) An independent engine prunes by the metrics: pyiceberg plans only the files whose
/// timestamp range overlaps the filter, and none for a range outside every file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_prunes_files_by_timestamp_bounds() {
    let mut h = Harness::new("prune");
    // Segment n holds ts = 2026-01-01T00:00:00Z + [100n, 100n + 99] seconds.
    let mut keys = Vec::new();
    for n in 0..3 {
        keys.push(h.ship_telemetry(n, 100).await);
    }
    h.run_until_handled(3).await;
    let ident = format!("{}.telemetry", h.namespace.join("."));
    let out = common::py::run(
        r#"
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
table = catalog.load_table(sys.argv[1])
def plan(lo, hi):
    f = And(GreaterThanOrEqual("ts", lo), LessThan("ts", hi))
    return sorted(t.file.file_path.rsplit("/", 1)[1] for t in table.scan(row_filter=f).plan_files())
print(json.dumps({
    "all": plan("2025-12-31T00:00:00+00:00", "2026-01-02T00:00:00+00:00"),
    "inside_1": plan("2026-01-01T00:01:50+00:00", "2026-01-01T00:02:10+00:00"),
    "across_0_1": plan("2026-01-01T00:01:30+00:00", "2026-01-01T00:01:45+00:00"),
    "last_second_of_2": plan("2026-01-01T00:04:59+00:00", "2026-01-01T00:05:00+00:00"),
    "after": plan("2026-01-01T00:05:00+00:00", "2027-01-01T00:00:00+00:00"),
    "before": plan("2025-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"),
}))
"#,
        &[&ident],
    );
    let planned: HashMap<String, Vec<String>> =
        serde_json::from_str(out.trim()).expect("plan json");
    let seg = |n: &[usize]| -> Vec<String> {
        n.iter()
            .map(|&i| format!("seg-{:06}.parquet", i + 1))
            .collect()
    };
    assert_eq!(planned["all"], seg(&[0, 1, 2]));
    assert_eq!(planned["inside_1"], seg(&[1]));
    assert_eq!(planned["across_0_1"], seg(&[0, 1]));
    assert_eq!(planned["last_second_of_2"], seg(&[2]));
    assert_eq!(planned["after"], Vec::<String>::new());
    assert_eq!(planned["before"], Vec::<String>::new());

    // The Rust client prunes the same way.
    let table = h.table("telemetry").await.expect("table");
    let start = 1_767_225_600_000_000i64;
    let filter = Reference::new("ts")
        .greater_than_or_equal_to(Datum::timestamptz_micros(start + 110_000_000))
        .and(Reference::new("ts").less_than(Datum::timestamptz_micros(start + 130_000_000)));
    let files = common::planned_files(&table, Some(filter)).await;
    assert_eq!(files, vec![format!("s3://{}/{}", h.env.bucket, keys[1])]);
}

/// (c) Edge-case bounds round-trip through the spec's binary encoding: written into the manifest
/// by the registrar, read back and decoded by the Rust client, they are exactly the expected
/// values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_case_bounds_round_trip_through_the_manifest() {
    let mut h = Harness::new("bounds");
    ship(&mut h, "seg-edge", &edge_batch(0)).await;
    h.run_until_handled(1).await;
    let table = h.table("telemetry").await.expect("table");
    let files = data_files(&table).await;
    let [file] = files.as_slice() else {
        panic!("one data file, got {}", files.len());
    };
    let lower = file.lower_bounds();
    let upper = file.upper_bounds();
    let n = ROWS as i64 - 1;

    // Timestamps before the epoch (negative micros).
    assert_eq!(lower[&1], Datum::timestamptz_micros(TS0));
    assert_eq!(upper[&1], Datum::timestamptz_micros(TS0 + n * 1_000_003));
    // Multibyte strings longer than 16 code points: cut at 16, the upper bound rounded up.
    assert_eq!(lower[&2], Datum::string("设备-000-温度传感器-ßet"));
    assert_eq!(upper[&2], Datum::string("设备-049-温度传感器-ßeu"));
    assert_eq!(lower[&3], Datum::string("label-0000-αβγδε"));
    assert_eq!(upper[&3], Datum::string(MAX_CP.to_string()));
    // Negative longs.
    assert_eq!(lower[&4], Datum::long(-(n * 1_000_000_007)));
    assert_eq!(upper[&4], Datum::long(0));
    // Decimals of two precisions, negative lower bounds, precision and scale kept.
    let decimal = |d: &Datum| match d.literal() {
        PrimitiveLiteral::Int128(v) => (*v, d.data_type().to_string()),
        other => panic!("not a decimal: {other:?}"),
    };
    assert_eq!(
        decimal(&lower[&5]),
        (-125 * 123_456_789_012, "decimal(20, 4)".to_string())
    );
    assert_eq!(
        decimal(&upper[&5]),
        (124 * 123_456_789_012, "decimal(20, 4)".to_string())
    );
    assert_eq!(
        decimal(&lower[&6]),
        (-99 * 101, "decimal(9, 2)".to_string())
    );
    assert_eq!(
        decimal(&upper[&6]),
        (149 * 101, "decimal(9, 2)".to_string())
    );
    // Dates before the epoch, booleans, ints with nulls.
    assert_eq!(lower[&7], Datum::date(-1000));
    assert_eq!(upper[&7], Datum::date(-1000 + 249));
    assert_eq!(
        (&lower[&8], &upper[&8]),
        (&Datum::bool(false), &Datum::bool(true))
    );
    assert_eq!(
        (&lower[&9], &upper[&9]),
        (&Datum::int(-24), &Datum::int(24))
    );
    // Binary: cut to 16 bytes; the maximum 0xFE 0xFF.. rounds up to the single byte 0xFF.
    assert_eq!(lower[&10], Datum::binary(vec![0u8; 16]));
    assert_eq!(upper[&10], Datum::binary(vec![0xFF]));
    // A float inside a struct: NaN is no bound.
    assert_eq!(lower[&12], Datum::float(-25.0));
    assert_eq!(upper[&12], Datum::float(37.25));
    // 17 maximal code points: a lower bound of 16, and no upper bound exists.
    assert_eq!(lower[&16], Datum::string(MAX_CP.to_string().repeat(16)));
    assert!(!upper.contains_key(&16));
    // Counts: nulls by field ID, nested leaves included.
    assert_eq!(file.null_value_counts()[&2], 36);
    assert_eq!(file.null_value_counts()[&9], 50);
    assert_eq!(file.value_counts()[&1], ROWS as u64);
}
