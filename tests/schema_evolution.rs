//! Schema evolution by field ID, end to end against the real REST fixture and S3 server.

mod common;

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Float64Array, Int32Array, Int64Array, ListArray, MapArray, RecordBatch,
    StringArray, StructArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use common::demo::field;
use common::fault_proxy::{Fault, FaultProxy, Kind};
use common::{Harness, data_file_list, read_all, row_count};
use iceberg::spec::{PrimitiveType, Type};
use thadam_iceberg::ErrorCode;
use thadam_iceberg::Tuning;

fn device(n: usize) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(
        (0..n).map(|i| format!("d{i}")),
    ))
}

/// v1: device (1), count int (2).
fn v1(values: &[i32]) -> RecordBatch {
    let schema = Schema::new(vec![
        field("device", DataType::Utf8, false, 1),
        field("count", DataType::Int32, true, 2),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            device(values.len()),
            Arc::new(Int32Array::from(values.to_vec())),
        ],
    )
    .expect("v1")
}

/// v2: count promoted to long, and a new column temp (3).
fn v2(values: &[i64]) -> RecordBatch {
    let schema = Schema::new(vec![
        field("device", DataType::Utf8, false, 1),
        field("count", DataType::Int64, true, 2),
        field("temp", DataType::Float64, true, 3),
    ]);
    let temps: Vec<f64> = values.iter().map(|v| *v as f64 / 2.0).collect();
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            device(values.len()),
            Arc::new(Int64Array::from(values.to_vec())),
            Arc::new(Float64Array::from(temps)),
        ],
    )
    .expect("v2")
}

/// v3: count (2) renamed to total.
fn v3(values: &[i64]) -> RecordBatch {
    let schema = Schema::new(vec![
        field("device", DataType::Utf8, false, 1),
        field("total", DataType::Int64, true, 2),
        field("temp", DataType::Float64, true, 3),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            device(values.len()),
            Arc::new(Int64Array::from(values.to_vec())),
            Arc::new(Float64Array::from(vec![1.0; values.len()])),
        ],
    )
    .expect("v3")
}

/// v4: total (2) narrowed back to int: not allowed.
fn v4() -> RecordBatch {
    let schema = Schema::new(vec![
        field("device", DataType::Utf8, false, 1),
        field("total", DataType::Int32, true, 2),
        field("temp", DataType::Float64, true, 3),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            device(1),
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(Float64Array::from(vec![1.0])),
        ],
    )
    .expect("v4")
}

fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> &'a T {
    b.column_by_name(name)
        .unwrap_or_else(|| panic!("column {name}"))
        .as_any()
        .downcast_ref::<T>()
        .unwrap_or_else(|| panic!("type of {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_promotes_adds_and_renames_and_a_narrowing_stops_safely() {
    let mut h = Harness::new("evolve");
    h.ship("telemetry", &v1(&[1, 2, 3])).await;
    h.ship("telemetry", &v2(&[10, 20])).await;
    h.ship("telemetry", &v3(&[5_000_000_000])).await;
    h.run_until_handled(3).await;

    let table = h.table("telemetry").await.expect("table");
    let schema = table.metadata().current_schema();
    let f2 = schema.field_by_id(2).expect("field 2");
    assert_eq!(f2.name, "total", "renamed by ID");
    assert_eq!(
        *f2.field_type,
        Type::Primitive(PrimitiveType::Long),
        "promoted"
    );
    let f3 = schema
        .field_by_id(3)
        .expect("field 3 keeps its configured ID");
    assert_eq!(f3.name, "temp");
    assert!(!f3.required, "a new column is optional");
    assert_eq!(schema.highest_field_id(), 3);
    assert!(table.metadata().last_column_id() >= 3);
    // The initial schema plus two evolutions.
    assert_eq!(table.metadata().schemas_iter().count(), 3);
    assert_eq!(data_file_list(&table).await.len(), 3);

    // Read back through the promoted, renamed schema: old rows have null temp.
    let batches = read_all(&table).await;
    assert_eq!(row_count(&batches), 6);
    let mut rows: Vec<(i64, Option<f64>)> = Vec::new();
    for b in &batches {
        let total = column::<Int64Array>(b, "total");
        let temp = column::<Float64Array>(b, "temp");
        for i in 0..b.num_rows() {
            rows.push((total.value(i), (!temp.is_null(i)).then(|| temp.value(i))));
        }
    }
    rows.sort_by_key(|r| r.0);
    assert_eq!(
        rows,
        vec![
            (1, None),
            (2, None),
            (3, None),
            (10, Some(5.0)),
            (20, Some(10.0)),
            (5_000_000_000, Some(1.0)),
        ]
    );

    // A later narrowing to int is fatal, lists the violation, and leaves the table unchanged.
    h.ship("telemetry", &v4()).await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::SchemaMismatch, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("total") && text.contains("field id 2"),
        "{text}"
    );
    assert!(
        text.contains("long") && text.contains("int"),
        "both types: {text}"
    );
    let after = h.table("telemetry").await.expect("table");
    assert_eq!(
        after.metadata().current_schema_id(),
        table.metadata().current_schema_id()
    );
    assert_eq!(after.metadata().schemas_iter().count(), 3);
    assert_eq!(
        after.metadata().snapshots().count(),
        table.metadata().snapshots().count()
    );
    assert_eq!(
        after.metadata().current_snapshot_id(),
        table.metadata().current_snapshot_id()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_schema_commit_and_the_append_converges() {
    let mut h = Harness::new("crash");
    h.ship("telemetry", &v1(&[1])).await;
    h.run_until_handled(1).await;

    // The schema change commits, then the append hangs: the process "dies" with it in flight.
    let key = h.ship("telemetry", &v2(&[2])).await;
    let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
    proxy.plan(Kind::Append, [Fault::Hang]);
    let mut config = h.config.clone();
    config.catalog_uri = proxy.uri.parse().expect("url");
    let handle = h.start_with(config.clone(), Tuning::default()).await;
    tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while proxy.seen(Kind::Append) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the append was sent (hang guard)");
    assert_eq!(proxy.seen(Kind::Schema), 1);
    handle.stop();
    handle
        .wait()
        .await
        .expect("a stop abandons the hung commit cleanly");
    let mid = h.table("telemetry").await.expect("table");
    assert_eq!(
        mid.metadata().schemas_iter().count(),
        2,
        "the schema change landed"
    );
    assert_eq!(data_file_list(&mid).await.len(), 1, "the append did not");

    // Restart (through the proxy, now passing everything): the change re-derives as nothing to do.
    let status = Harness::finish(h.start_with(config, Tuning::default()).await, 2).await;
    assert_eq!(
        proxy.seen(Kind::Schema),
        1,
        "no second schema commit: {:?}",
        proxy.log()
    );
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped), (1, 1));
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(
        table.metadata().schemas_iter().count(),
        2,
        "exactly one schema change"
    );
    let files = data_file_list(&table).await;
    assert_eq!(files.len(), 2);
    assert!(files.contains(&format!("s3://{}/{key}", h.env.bucket)));
}

/// Nested: loc struct (10: lat 11, lon 12), tags list (20, element 21), attrs map (30, key 31,
/// value struct 32 { reading 33 }).
fn nested(v2: bool) -> RecordBatch {
    let mut loc_fields = vec![
        field("lat", DataType::Float64, true, 11),
        field("lon", DataType::Float64, true, 12),
    ];
    let mut loc_cols: Vec<ArrayRef> = vec![
        Arc::new(Float64Array::from(vec![1.5])),
        Arc::new(Float64Array::from(vec![2.5])),
    ];
    if v2 {
        // The struct gains a field.
        loc_fields.push(field("alt", DataType::Float64, true, 13));
        loc_cols.push(Arc::new(Float64Array::from(vec![300.0])));
    }
    let loc = StructArray::new(Fields::from(loc_fields), loc_cols, None);

    // The list's element type is promoted from int to long.
    let element = if v2 {
        field("element", DataType::Int64, true, 21)
    } else {
        field("element", DataType::Int32, true, 21)
    };
    let values: ArrayRef = if v2 {
        Arc::new(Int64Array::from(vec![7, 8]))
    } else {
        Arc::new(Int32Array::from(vec![7, 8]))
    };
    let tags = ListArray::new(
        Arc::new(element),
        OffsetBuffer::new(vec![0, 2].into()),
        values,
        None,
    );

    // The map value's struct field 33 is renamed.
    let reading_name = if v2 { "measurement" } else { "reading" };
    let value_fields = Fields::from(vec![field(reading_name, DataType::Int64, true, 33)]);
    let value = StructArray::new(
        value_fields.clone(),
        vec![Arc::new(Int64Array::from(vec![42]))],
        None,
    );
    let key_field = field("key", DataType::Utf8, false, 31);
    let value_field = field("value", DataType::Struct(value_fields), true, 32);
    let entries = StructArray::new(
        Fields::from(vec![key_field.clone(), value_field.clone()]),
        vec![Arc::new(StringArray::from(vec!["k"])), Arc::new(value)],
        None,
    );
    let entries_field = Field::new(
        "key_value",
        DataType::Struct(Fields::from(vec![key_field, value_field])),
        false,
    );
    let attrs = MapArray::new(
        Arc::new(entries_field),
        OffsetBuffer::new(vec![0, 1].into()),
        entries,
        None,
        false,
    );

    let schema = Schema::new(vec![
        field("device", DataType::Utf8, false, 1),
        field("loc", loc.data_type().clone(), true, 10),
        field("tags", tags.data_type().clone(), true, 20),
        field("attrs", attrs.data_type().clone(), true, 30),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![device(1), Arc::new(loc), Arc::new(tags), Arc::new(attrs)],
    )
    .expect("nested batch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_fields_evolve_by_id() {
    let mut h = Harness::new("nested");
    h.ship("telemetry", &nested(false)).await;
    h.ship("telemetry", &nested(true)).await;
    h.run_until_handled(2).await;

    let table = h.table("telemetry").await.expect("table");
    let schema = table.metadata().current_schema();
    let alt = schema
        .field_by_id(13)
        .expect("the struct gained alt with its own id");
    assert_eq!(alt.name, "alt");
    assert!(!alt.required);
    assert_eq!(
        *schema.field_by_id(21).expect("list element").field_type,
        Type::Primitive(PrimitiveType::Long),
        "the list element was promoted"
    );
    assert_eq!(
        schema.field_by_id(33).expect("map value field").name,
        "measurement",
        "the map value's field was renamed by id"
    );
    assert_eq!(
        table.metadata().schemas_iter().count(),
        2,
        "one evolution for the three changes"
    );
    assert_eq!(data_file_list(&table).await.len(), 2);

    // Read back with pyiceberg (iceberg-rust 0.10.1's reader cannot yet project an older file's
    // struct into a struct that gained a field): the old row has a null alt, values by id.
    let ident = format!("{}.telemetry", h.namespace.join("."));
    let out = common::py::run(
        r#"
rows = catalog.load_table(sys.argv[1]).scan().to_arrow().to_pylist()
rows.sort(key=lambda r: r["loc"]["alt"] is not None)
print(json.dumps([[r["loc"]["alt"], r["tags"], r["attrs"][0][1]["measurement"]] for r in rows]))
"#,
        &[&ident],
    );
    let rows: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(
        rows,
        serde_json::json!([[null, [7, 8], 42], [300.0, [7, 8], 42]]),
        "{out}"
    );
    // The Rust client reads the top-level columns of both files.
    let batches: Vec<RecordBatch> = futures::TryStreamExt::try_collect(
        table
            .scan()
            .select(["device"])
            .build()
            .expect("scan")
            .to_arrow()
            .await
            .expect("stream"),
    )
    .await
    .expect("batches");
    assert_eq!(row_count(&batches), 2);
}

/// a (1) int, b (2) string, then each `(name, id)` of `extra` as a long column.
fn abc(extra: &[(&str, i32)]) -> RecordBatch {
    let mut fields = vec![
        field("a", DataType::Int32, true, 1),
        field("b", DataType::Utf8, true, 2),
    ];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int32Array::from(vec![1, 2])),
        Arc::new(StringArray::from(vec!["x", "y"])),
    ];
    for (name, id) in extra {
        fields.push(field(name, DataType::Int64, true, *id));
        columns.push(Arc::new(Int64Array::from(vec![10, 20])));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("abc")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_field_id_is_never_reused() {
    let mut h = Harness::new("evo_reuse");
    h.ship("telemetry", &abc(&[("c", 3)])).await;
    h.run_until_handled(1).await;

    // Someone drops c (3) from the table: last-column-id stays 3.
    let ident = format!("{}.telemetry", h.namespace.join("."));
    common::py::run(
        r#"
catalog.load_table(sys.argv[1]).update_schema().delete_column("c").commit()
"#,
        &[&ident],
    );
    let table = h.table("telemetry").await.expect("table");
    assert!(table.metadata().current_schema().field_by_id(3).is_none());
    assert_eq!(table.metadata().last_column_id(), 3);

    // A brand-new ID above last-column-id still evolves the table.
    h.ship("telemetry", &abc(&[("d", 4)])).await;
    h.run_until_handled(2).await;
    let table = h.table("telemetry").await.expect("table");
    let schema = table.metadata().current_schema();
    assert_eq!(schema.field_by_id(4).expect("d added").name, "d");
    assert!(schema.field_by_id(3).is_none());
    let schema_id = schema.schema_id();
    let files = data_file_list(&table).await;
    assert_eq!(files.len(), 2);

    // A file that writes c (3) again: refused, the table is left as it was.
    h.ship("telemetry", &abc(&[("d", 4), ("c", 3)])).await;
    let err = h.run_until_fatal().await;
    assert_eq!(err.code(), ErrorCode::SchemaMismatch, "{err}");
    let msg = err.to_string();
    for needle in [
        "c (field id 3)",
        "was `c` (long) in the table's schema 0",
        "never reuses a field id",
        "new field id above the table's last-column-id 4",
    ] {
        assert!(msg.contains(needle), "the message names `{needle}`: {msg}");
    }
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().current_schema().schema_id(), schema_id);
    assert!(table.metadata().current_schema().field_by_id(3).is_none());
    assert_eq!(data_file_list(&table).await, files, "nothing appended");
}

/// Each table serialises its own commits, schema commits included: a schema commit of one table
/// that hangs (held by a proxy) does not hold up another table's segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_schema_commit_of_one_table_does_not_hold_up_another_table() {
    use common::hold_proxy::{Hold, HoldProxy};
    use common::{Options, assert_exactly_once, extended_batch};
    use std::time::Duration;

    let mut h = Harness::with(
        "independent",
        Options {
            datasets: vec!["telemetry", "events"],
            ..Options::default()
        },
    );
    let plain = |n| common::demo::telemetry_batch(n, 10).expect("batch");
    let mut telemetry = vec![h.ship("telemetry", &plain(0)).await];
    let mut events = vec![h.ship("events", &plain(0)).await];
    assert_eq!(
        h.run_until_handled(2).await.registered(),
        2,
        "both tables exist"
    );

    // The telemetry table's next file adds a column: its schema commit is held.
    telemetry.push(h.ship("telemetry", &extended_batch(1, 10)).await);
    let proxy = HoldProxy::start(&h.env.catalog_uri, Hold::schema_commit("telemetry")).await;
    let handle = h
        .start_with(h.config_via(&proxy.uri), Tuning::default())
        .await;
    proxy.wait_held().await;

    // Meanwhile the events table gets a segment (its file needs no schema change, but its
    // table's schema is checked against it): it is registered while telemetry's commit hangs.
    events.push(h.ship("events", &plain(1)).await);
    let events_name = h.table_name("events").to_string();
    let telemetry_name = h.table_name("telemetry").to_string();
    // A hang guard, not a timing claim: with the tables serialised behind one another, events
    // would wait for as long as telemetry's commit is held, i.e. forever.
    let status = tokio::time::timeout(
        Duration::from_secs(60),
        handle.wait_until(|s| {
            s.tables
                .get(&events_name)
                .is_some_and(|t| t.registered >= 1)
        }),
    )
    .await
    .expect("the events table registers while the telemetry table's schema commit is held")
    .expect("no fatal error");
    assert_eq!(
        status.tables.get(&telemetry_name).map(|t| t.registered),
        Some(0),
        "telemetry's segment waits for its schema commit"
    );

    assert_eq!(proxy.release().await, 200, "the held schema commit lands");
    // The earlier segments count as handled (found registered): wait for the two new ones.
    let status = tokio::time::timeout(
        Duration::from_secs(60),
        handle.wait_until(|s| s.registered() >= 2),
    )
    .await
    .expect("telemetry's segment registers once its schema commit lands (hang guard)")
    .expect("no fatal error");
    handle.stop();
    handle.wait().await.expect("clean stop");
    assert_eq!(status.registered(), 2);
    let table = h.table("telemetry").await.expect("telemetry table");
    assert!(
        table
            .metadata()
            .current_schema()
            .field_by_name("extra")
            .is_some(),
        "the telemetry table evolved"
    );
    assert_exactly_once(&table, &h.env.bucket, &telemetry).await;
    let table = h.table("events").await.expect("events table");
    assert_exactly_once(&table, &h.env.bucket, &events).await;
}
