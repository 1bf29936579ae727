//! Partitioned tables against the real REST fixture and S3 server: a table created with
//! `partition_by` has the spec the config names (field IDs from 1000); every registered file
//! carries the partition its rows fall into, decided from its footer's exact statistics; an
//! independent reader (pyiceberg) sees those values, agrees with its own transforms and prunes
//! by them; a file spanning two partitions or without statistics is refused with
//! `sink.iceberg_partition_mismatch` and the table is left as it was; a spec evolved by another
//! client takes the files registered after it; and schema evolution keeps the partition fields.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::TimestampMicrosecondArray;
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema, TimeUnit};
use bytes::Bytes;
use common::demo::{self, field};
use common::{Harness, Options};
use iceberg::expr::Reference;
use iceberg::spec::{DataFile, Datum, Literal, Struct, Transform};
use iceberg::table::Table;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use thadam_iceberg::ErrorCode;

const DATASET: &str = "telemetry";
/// 2026-01-01T00:00:00Z in microseconds.
const T0: i64 = 1_767_225_600_000_000;
const SEC: i64 = 1_000_000;
const HOUR: i64 = 3600 * SEC;
const DAY: i64 = 24 * HOUR;
/// Hours and days since the epoch of [`T0`].
const H0: i32 = 490_896;
const D0: i32 = 20_454;

fn harness(test: &str, partition_by: &str) -> Harness {
    Harness::with(
        test,
        Options {
            extra_iceberg_yaml: format!("      partition_by: {partition_by}"),
            ..Options::default()
        },
    )
}

/// One row: timestamp (µs since the epoch), device (None: null), n.
type Row<'a> = (i64, Option<&'a str>, i32);

/// A segment with columns `ts` (id 1), `device` (id 2) and `n` (id 3, int; long when `long_n`),
/// the timestamp column named `ts_name`.
fn batch_named(ts_name: &str, long_n: bool, rows: &[Row<'_>]) -> RecordBatch {
    let n_type = if long_n {
        DataType::Int64
    } else {
        DataType::Int32
    };
    let schema = Arc::new(Schema::new(vec![
        field(
            ts_name,
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
            1,
        ),
        field("device", DataType::Utf8, true, 2),
        field("n", n_type, true, 3),
    ]));
    let n: ArrayRef = if long_n {
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|r| i64::from(r.2)),
        ))
    } else {
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.2)))
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(rows.iter().map(|r| r.0))
                .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
        n,
    ];
    RecordBatch::try_new(schema, columns).expect("batch")
}

fn batch(rows: &[Row<'_>]) -> RecordBatch {
    batch_named("ts", false, rows)
}

/// Ships `batch` as segment `id`, encoded with `props` (default: the demo writer's).
async fn ship_with(
    h: &mut Harness,
    id: &str,
    batch: &RecordBatch,
    props: Option<WriterProperties>,
) -> String {
    let key = demo::object_key(&h.prefix, &h.pipeline, DATASET, id);
    let parquet = match props {
        None => demo::write_parquet(std::slice::from_ref(batch)).expect("parquet"),
        Some(props) => {
            let mut buf = Vec::new();
            let mut writer =
                ArrowWriter::try_new(&mut buf, batch.schema(), Some(props)).expect("writer");
            writer.write(batch).expect("write");
            writer.close().expect("close");
            Bytes::from(buf)
        }
    };
    demo::ship_segment(
        h.store.as_ref(),
        &mut h.log,
        DATASET,
        id,
        &key,
        parquet,
        batch.num_rows() as u64,
    )
    .await
    .expect("ship");
    key
}

async fn ship(h: &mut Harness, id: &str, batch: &RecordBatch) -> String {
    ship_with(h, id, batch, None).await
}

/// A registered data file and the spec ID of the manifest holding it.
struct Registered {
    spec_id: i32,
    file: DataFile,
}

impl Registered {
    fn partition_spec_id(&self) -> i32 {
        self.spec_id
    }

    fn partition(&self) -> &Struct {
        self.file.partition()
    }
}

/// Every data file of the current snapshot, by file name (`seg-x.parquet`).
async fn files_by_name(table: &Table) -> BTreeMap<String, Registered> {
    let mut files = BTreeMap::new();
    for (spec_id, file) in common::manifest_entries(table).await {
        let name = file
            .file_path()
            .rsplit('/')
            .next()
            .expect("name")
            .to_string();
        assert!(
            files.insert(name, Registered { spec_id, file }).is_none(),
            "a file registered twice"
        );
    }
    files
}

fn lit(d: Datum) -> Option<Literal> {
    Some(Literal::Primitive(d.literal().clone()))
}

fn name(id: &str) -> String {
    format!("{id}.parquet")
}

/// pyiceberg: the table's specs, and the files a scan plans under `sys.argv[2]` (filters by
/// name, see `FILTERS`) with their spec id and partition values; each day/bucket value is also
/// computed again by pyiceberg's own transforms from `sys.argv[3]` (file -> [ts, n]).
const PY_FILES: &str = r#"
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan, AlwaysTrue
from pyiceberg.transforms import BucketTransform, DayTransform, HourTransform
from pyiceberg.types import IntegerType, LongType, TimestamptzType
table = catalog.load_table(sys.argv[1])
FILTERS = json.loads(sys.argv[2])
def parse(f):
    kind = f[0]
    if kind == "all":
        return AlwaysTrue()
    if kind == "between":
        return And(GreaterThanOrEqual(f[1], f[2]), LessThan(f[1], f[3]))
    return EqualTo(f[1], f[2])
def plan(f):
    out = {}
    for t in table.scan(row_filter=parse(f)).plan_files():
        p = t.file.partition
        out[t.file.file_path.rsplit("/", 1)[1]] = {
            "spec": t.file.spec_id,
            "partition": [p[i] for i in range(len(p))],
        }
    return out
specs = {str(s.spec_id): [[f.source_id, f.field_id, f.name, str(f.transform)] for f in s.fields]
         for s in table.specs().values()}
own = {}
for name, (ts, n) in json.loads(sys.argv[3]).items():
    own[name] = {
        "hour": HourTransform().transform(TimestamptzType())(ts),
        "day": DayTransform().transform(TimestamptzType())(ts),
        "bucket4": BucketTransform(4).transform(IntegerType())(n),
        "bucket4_long": BucketTransform(4).transform(LongType())(n),
    }
rows = table.scan().to_arrow().num_rows
print(json.dumps({
    "specs": specs,
    "default_spec": table.spec().spec_id,
    "last_partition_id": table.metadata.last_partition_id,
    "plans": {k: plan(f) for k, f in FILTERS.items()},
    "own": own,
    "rows": rows,
}, default=str))
"#;

fn pyiceberg(h: &Harness, filters: serde_json::Value, own: serde_json::Value) -> serde_json::Value {
    let ident = format!("{}.{DATASET}", h.namespace.join("."));
    let out = common::py::run(PY_FILES, &[&ident, &filters.to_string(), &own.to_string()]);
    serde_json::from_str(out.trim()).expect("pyiceberg json")
}

fn names(plan: &serde_json::Value) -> Vec<String> {
    plan.as_object().expect("plan").keys().cloned().collect()
}

/// Hourly: the spec is `ts_hour` (field 1000); a file of two timestamps far apart in one hour is
/// that hour; pyiceberg sees the same values as its own hour transform gives, and plans only one
/// hour's files for a filter on that hour, even once the table keeps no column metrics (so the
/// partition values alone prune); the Rust client prunes and reads alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourly_files_carry_their_hour_and_prune_by_it() {
    let mut h = harness("hourly", "[hour(ts)]");
    let first = ship(
        &mut h,
        "seg-h0a",
        &batch(&[(T0 + 5 * SEC, Some("a"), 1), (T0 + HOUR - 1, Some("b"), 2)]),
    )
    .await;
    h.run_until_handled(1).await;

    let table = h.table(DATASET).await.expect("table");
    let spec = table.metadata().default_partition_spec();
    let fields: Vec<(i32, i32, &str, Transform)> = spec
        .fields()
        .iter()
        .map(|f| (f.source_id, f.field_id, f.name.as_str(), f.transform))
        .collect();
    assert_eq!(fields, [(1, 1000, "ts_hour", Transform::Hour)]);
    assert_eq!(table.metadata().last_partition_id(), 1000);

    // From now on the table keeps no column bounds: what prunes is the partition values.
    let ident = format!("{}.{DATASET}", h.namespace.join("."));
    common::py::run(
        r#"
table = catalog.load_table(sys.argv[1])
with table.transaction() as tx:
    tx.set_properties({"write.metadata.metrics.default": "none"})
"#,
        &[&ident],
    );
    let mut keys = vec![first];
    for (id, rows) in [
        ("seg-h0b", vec![(T0 + 10 * SEC, Some("c"), 3)]),
        (
            "seg-h1a",
            vec![
                (T0 + HOUR, Some("a"), 4),
                (T0 + HOUR + 59 * 60 * SEC, Some("a"), 5),
            ],
        ),
        ("seg-h1b", vec![(T0 + HOUR + 30 * 60 * SEC, Some("b"), 6)]),
        (
            "seg-h2a",
            vec![
                (T0 + 2 * HOUR + 1, Some("b"), 7),
                (T0 + 3 * HOUR - 1, Some("c"), 8),
            ],
        ),
    ] {
        keys.push(ship(&mut h, id, &batch(&rows)).await);
    }
    h.run_until_handled(5).await;

    let table = h.table(DATASET).await.expect("table");
    let files = files_by_name(&table).await;
    let expected = [
        ("seg-h0a", H0),
        ("seg-h0b", H0),
        ("seg-h1a", H0 + 1),
        ("seg-h1b", H0 + 1),
        ("seg-h2a", H0 + 2),
    ];
    assert_eq!(files.len(), expected.len());
    for (id, hour) in expected {
        let file = &files[&name(id)];
        assert_eq!(file.partition_spec_id(), 0, "{id}");
        assert_eq!(
            file.partition(),
            &Struct::from_iter([lit(Datum::int(hour))]),
            "{id}"
        );
    }
    // The later files have no bounds: pruning below is by partition alone.
    assert!(files[&name("seg-h1a")].file.lower_bounds().is_empty());

    let iso = |us: i64| {
        chrono::DateTime::from_timestamp_micros(us)
            .expect("ts")
            .to_rfc3339()
    };
    let report = pyiceberg(
        &h,
        serde_json::json!({
            "all": ["all"],
            "hour1": ["between", "ts", iso(T0 + HOUR + 10 * 60 * SEC), iso(T0 + HOUR + 20 * 60 * SEC)],
            "hour2": ["between", "ts", iso(T0 + 2 * HOUR + 5 * SEC), iso(T0 + 2 * HOUR + 6 * SEC)],
            "later": ["between", "ts", iso(T0 + 5 * HOUR), iso(T0 + 6 * HOUR)],
        }),
        serde_json::json!({ "h0": [T0 + HOUR - 1, 0], "h2": [T0 + 2 * HOUR + 1, 0] }),
    );
    assert_eq!(
        report["specs"]["0"],
        serde_json::json!([[1, 1000, "ts_hour", "hour"]]),
        "{report}"
    );
    assert_eq!(report["last_partition_id"], 1000);
    assert_eq!(report["rows"], 8);
    assert_eq!(
        report["own"]["h0"]["hour"], H0,
        "pyiceberg's own hour transform"
    );
    assert_eq!(report["own"]["h2"]["hour"], H0 + 2);
    let all = &report["plans"]["all"];
    for (id, hour) in expected {
        assert_eq!(
            all[name(id)]["partition"],
            serde_json::json!([hour]),
            "{id}: {report}"
        );
        assert_eq!(all[name(id)]["spec"], 0);
    }
    assert_eq!(
        names(&report["plans"]["hour1"]),
        [name("seg-h1a"), name("seg-h1b")]
    );
    assert_eq!(names(&report["plans"]["hour2"]), [name("seg-h2a")]);
    assert!(names(&report["plans"]["later"]).is_empty());

    // The Rust client plans the same hour and reads every row.
    let filter = Reference::new("ts")
        .greater_than_or_equal_to(Datum::timestamptz_micros(T0 + HOUR + 10 * 60 * SEC))
        .and(Reference::new("ts").less_than(Datum::timestamptz_micros(T0 + HOUR + 20 * 60 * SEC)));
    let planned = common::planned_files(&table, Some(filter)).await;
    let uri = |k: &String| format!("s3://{}/{k}", h.env.bucket);
    assert_eq!(planned, vec![uri(&keys[2]), uri(&keys[3])]);
    assert_eq!(common::row_count(&common::read_all(&table).await), 8);
}

/// Daily, identity on a string and bucket on an int, in one spec: each file (one device, one n)
/// gets the values pyiceberg's own transforms compute; a filter on the device plans its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn day_identity_and_bucket_values_match_pyiceberg() {
    let mut h = harness("daily", "[day(ts), device, bucket(4, n)]");
    let segs = [
        ("seg-d0-a", 0, "robot-a", 7),
        ("seg-d0-b", 0, "robot-b", 8),
        ("seg-d1-a", 1, "robot-a", 7),
        ("seg-d2-c", 2, "robot-c", 123_456),
    ];
    for (id, day, device, n) in segs {
        // Two rows hours apart on one day, one device, one n.
        let start = T0 + day * DAY;
        let rows = [
            (start + SEC, Some(device), n),
            (start + DAY - SEC, Some(device), n),
        ];
        ship(&mut h, id, &batch(&rows)).await;
    }
    h.run_until_handled(4).await;

    let table = h.table(DATASET).await.expect("table");
    let fields: Vec<(i32, &str, Transform)> = table
        .metadata()
        .default_partition_spec()
        .fields()
        .iter()
        .map(|f| (f.field_id, f.name.as_str(), f.transform))
        .collect();
    assert_eq!(
        fields,
        [
            (1000, "ts_day", Transform::Day),
            (1001, "device", Transform::Identity),
            (1002, "n_bucket", Transform::Bucket(4)),
        ]
    );
    assert_eq!(table.metadata().last_partition_id(), 1002);

    let own: serde_json::Map<String, serde_json::Value> = segs
        .iter()
        .map(|(id, day, _, n)| (name(id), serde_json::json!([T0 + day * DAY + SEC, n])))
        .collect();
    let report = pyiceberg(
        &h,
        serde_json::json!({
            "all": ["all"],
            "robot_b": ["eq", "device", "robot-b"],
        }),
        serde_json::Value::Object(own),
    );
    assert_eq!(report["rows"], 8);
    let all = &report["plans"]["all"];
    let files = files_by_name(&table).await;
    for (id, day, device, _) in segs {
        let file = name(id);
        let own = &report["own"][&file];
        let bucket = own["bucket4"].as_i64().expect("bucket");
        assert_eq!(
            own["bucket4"], own["bucket4_long"],
            "int and long hash alike"
        );
        assert_eq!(
            own["day"],
            i64::from(D0) + day,
            "pyiceberg's own day transform"
        );
        // pyiceberg reads the day back as days since the epoch.
        assert_eq!(
            all[&file]["partition"],
            serde_json::json!([i64::from(D0) + day, device, bucket]),
            "{id}: {report}"
        );
        assert_eq!(
            files[&file].partition(),
            &Struct::from_iter([
                lit(Datum::date(D0 + i32::try_from(day).expect("day"))),
                lit(Datum::string(device)),
                lit(Datum::int(i32::try_from(bucket).expect("bucket"))),
            ]),
            "{id}"
        );
    }
    assert_eq!(names(&report["plans"]["robot_b"]), [name("seg-d0-b")]);
}

/// A file whose rows span two hours (one microsecond apart) is refused, naming the segment, the
/// column, the spec and both values; nothing of it reaches the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_spanning_two_hours_is_refused_and_the_table_is_untouched() {
    let mut h = harness("span", "[hour(ts)]");
    ship(&mut h, "seg-ok", &batch(&[(T0, Some("a"), 1)])).await;
    h.run_until_handled(1).await;
    let before = h.table(DATASET).await.expect("table");
    let snapshot = before.metadata().current_snapshot_id();

    let key = ship(
        &mut h,
        "seg-span",
        &batch(&[(T0 + HOUR - 1, Some("a"), 2), (T0 + HOUR, Some("a"), 3)]),
    )
    .await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::PartitionMismatch, "{err}");
    let msg = err.to_string();
    for part in [
        "sink.iceberg_partition_mismatch",
        key.as_str(),
        "[hour(ts)]",
        "`ts`",
        &H0.to_string(),
        &(H0 + 1).to_string(),
        "2026-01-01T00:59:59.999999Z",
        "2026-01-01T01:00:00Z",
        "one partition per segment",
    ] {
        assert!(msg.contains(part), "{part} in {msg}");
    }
    let after = h.table(DATASET).await.expect("table");
    assert_eq!(after.metadata().current_snapshot_id(), snapshot);
    assert_eq!(
        files_by_name(&after).await.keys().collect::<Vec<_>>(),
        [&name("seg-ok")]
    );
}

/// A file without statistics on the partition source column, or with statistics the writer
/// truncated (inexact), is refused: its partition cannot be known, so it is never guessed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_without_exact_statistics_is_refused() {
    let no_stats = WriterProperties::builder()
        .set_column_statistics_enabled(ColumnPath::from("device"), EnabledStatistics::None)
        .build();
    let truncated = WriterProperties::builder()
        .set_statistics_truncate_length(Some(4))
        .build();
    for (test, props, says) in [
        ("nostats", no_stats, "no null count"),
        ("truncated", truncated, "no exact min/max"),
    ] {
        let mut h = harness(test, "[device]");
        ship(&mut h, "seg-ok", &batch(&[(T0, Some("robot-1"), 1)])).await;
        h.run_until_handled(1).await;
        let rows = [(T0, Some("robot-1"), 2), (T0 + SEC, Some("robot-1"), 3)];
        let key = ship_with(&mut h, "seg-bad", &batch(&rows), Some(props)).await;
        let err = h.run_until_fatal().await;
        assert_eq!(err.code(), ErrorCode::PartitionMismatch, "{test}: {err}");
        let msg = err.to_string();
        for part in [key.as_str(), "`device`", "[device]", says] {
            assert!(msg.contains(part), "{test}: {part} in {msg}");
        }
        let table = h.table(DATASET).await.expect("table");
        assert_eq!(files_by_name(&table).await.len(), 1, "{test}");
    }
}

/// Partition evolution by another client (pyiceberg `update_spec`): files registered after it
/// carry the new default spec's id and fields; earlier files keep theirs; both read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_registered_after_a_spec_change_take_the_new_spec() {
    let mut h = harness("evolve", "[day(ts)]");
    ship(&mut h, "seg-old", &batch(&[(T0 + SEC, Some("a"), 1)])).await;
    h.run_until_handled(1).await;

    let ident = format!("{}.{DATASET}", h.namespace.join("."));
    common::py::run(
        r#"
from pyiceberg.transforms import HourTransform, IdentityTransform
table = catalog.load_table(sys.argv[1])
with table.update_spec() as u:
    u.remove_field("ts_day")
    u.add_field("ts", HourTransform(), "ts_hour")
    u.add_field("device", IdentityTransform(), "device")
"#,
        &[&ident],
    );
    let evolved = h.table(DATASET).await.expect("table");
    let new_spec = evolved.metadata().default_partition_spec_id();
    assert_ne!(new_spec, 0);

    ship(&mut h, "seg-new1", &batch(&[(T0 + 2 * HOUR, Some("b"), 2)])).await;
    ship(
        &mut h,
        "seg-new2",
        &batch(&[
            (T0 + 3 * HOUR, Some("c"), 3),
            (T0 + 3 * HOUR + SEC, Some("c"), 4),
        ]),
    )
    .await;
    h.run_until_handled(3).await;

    let table = h.table(DATASET).await.expect("table");
    let files = files_by_name(&table).await;
    assert_eq!(files[&name("seg-old")].partition_spec_id(), 0);
    assert_eq!(
        files[&name("seg-old")].partition(),
        &Struct::from_iter([lit(Datum::date(D0))])
    );
    // The new spec in v2 keeps the removed field as void (null), then hour and device.
    let spec = table.metadata().default_partition_spec();
    let described: Vec<(&str, Transform)> = spec
        .fields()
        .iter()
        .map(|f| (f.name.as_str(), f.transform))
        .collect();
    let hour_at = described
        .iter()
        .position(|f| *f == ("ts_hour", Transform::Hour))
        .expect("ts_hour");
    let device_at = described
        .iter()
        .position(|f| *f == ("device", Transform::Identity))
        .expect("device");
    for (id, hour, device) in [("seg-new1", H0 + 2, "b"), ("seg-new2", H0 + 3, "c")] {
        let file = &files[&name(id)];
        assert_eq!(file.partition_spec_id(), new_spec, "{id}");
        let values: Vec<Option<Literal>> = file.partition().iter().map(|v| v.cloned()).collect();
        assert_eq!(values.len(), described.len(), "{id}");
        assert_eq!(values[hour_at], lit(Datum::int(hour)), "{id}");
        assert_eq!(values[device_at], lit(Datum::string(device)), "{id}");
        for (i, (_, transform)) in described.iter().enumerate() {
            if *transform == Transform::Void {
                assert_eq!(values[i], None, "{id}: a void field is null");
            }
        }
    }
    let report = pyiceberg(
        &h,
        serde_json::json!({ "all": ["all"], "device_c": ["eq", "device", "c"] }),
        serde_json::json!({}),
    );
    assert_eq!(report["rows"], 4, "{report}");
    assert_eq!(report["default_spec"], new_spec);
    assert_eq!(report["plans"]["all"][name("seg-new1")]["spec"], new_spec);
    assert_eq!(report["plans"]["all"][name("seg-old")]["spec"], 0);
    assert_eq!(names(&report["plans"]["device_c"]), [name("seg-new2")]);
    assert_eq!(common::row_count(&common::read_all(&table).await), 4);
}

/// Schema evolution under a partitioned table: renaming the partition source column keeps the
/// partition fields (they follow field IDs), and promoting the bucket source from int to long
/// keeps its bucket values (Iceberg hashes int and long alike).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_and_promoted_source_columns_keep_their_partitions() {
    let mut h = harness("schemaev", "[hour(ts), bucket(4, n)]");
    ship(&mut h, "seg-v1", &batch(&[(T0 + SEC, Some("a"), 7)])).await;
    h.run_until_handled(1).await;
    ship(
        &mut h,
        "seg-v2",
        &batch_named(
            "event_time",
            true,
            &[
                (T0 + HOUR + SEC, Some("a"), 7),
                (T0 + HOUR + 2 * SEC, Some("b"), 7),
            ],
        ),
    )
    .await;
    h.run_until_handled(2).await;

    let table = h.table(DATASET).await.expect("table");
    let schema = table.metadata().current_schema();
    assert!(schema.field_by_name("event_time").is_some() && schema.field_by_name("ts").is_none());
    assert_eq!(
        *schema.field_by_id(3).expect("n").field_type,
        iceberg::spec::Type::Primitive(iceberg::spec::PrimitiveType::Long)
    );
    assert_eq!(table.metadata().default_partition_spec_id(), 0);
    let files = files_by_name(&table).await;
    let v1 = files[&name("seg-v1")].partition().clone();
    let v2 = files[&name("seg-v2")].partition().clone();
    let v1: Vec<Option<Literal>> = v1.iter().map(|v| v.cloned()).collect();
    let v2: Vec<Option<Literal>> = v2.iter().map(|v| v.cloned()).collect();
    assert_eq!(v1[0], lit(Datum::int(H0)));
    assert_eq!(v2[0], lit(Datum::int(H0 + 1)));
    assert_eq!(v1[1], v2[1], "bucket(4) of 7 as int and as long");

    let report = pyiceberg(
        &h,
        serde_json::json!({ "all": ["all"] }),
        serde_json::json!({ "n": [0, 7] }),
    );
    assert_eq!(report["rows"], 3, "{report}");
    let bucket = report["own"]["n"]["bucket4"].clone();
    assert_eq!(
        report["plans"]["all"][name("seg-v1")]["partition"][1],
        bucket
    );
    assert_eq!(
        report["plans"]["all"][name("seg-v2")]["partition"][1],
        bucket
    );
}

/// A `partition_by` column the dataset lacks, or a transform its type cannot take, is
/// `config.invalid` naming the column when the table would be created; no table is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_by_the_schema_cannot_take_is_a_config_error() {
    for (test, partition_by, says) in [
        ("nocol", "[hour(nope)]", "no column `nope`"),
        ("badtype", "[hour(device)]", "column `device`"),
    ] {
        let mut h = harness(test, partition_by);
        ship(&mut h, "seg-1", &batch(&[(T0, Some("a"), 1)])).await;
        let err = h.run_until_fatal().await;
        assert_eq!(err.code(), ErrorCode::ConfigInvalid, "{test}: {err}");
        let msg = err.to_string();
        assert!(
            msg.contains("config.partition_by") && msg.contains(says),
            "{test}: {msg}"
        );
        assert!(h.table(DATASET).await.is_none(), "{test}: no table created");
    }
}
