//! `table_location`: catalogs that choose where tables live (Polaris, S3 Tables, Unity, ...).
//!
//! A front before the real REST fixture plays such a catalog: like Polaris, it refuses any
//! client-chosen table location outside the namespace's own directory (`s3://{bucket}/{ns}/`),
//! on register, on create and on `set-location`. With the default (`shipper`), the registrar
//! stops with `catalog.rejected` naming the fix and `--check` fails the same way; with
//! `table_location: catalog` the table is created where the catalog says, keeps the file's field
//! IDs, and registers the shipper's files by their absolute URIs, read back by pyiceberg.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use bytes::Bytes;
use common::{Harness, Options, assert_exactly_once, py};
use thadam_iceberg::ErrorCode;
use thadam_iceberg::Registrar;
use thadam_iceberg::config::TableLocation;
use thadam_iceberg::ops::check::{Verdict, check_file};

/// Hang guard for a registrar that must stop on a fatal error.
const FATAL_GUARD: Duration = Duration::from_secs(60);

/// A Polaris-like front: table locations must lie under `allowed`.
struct LocationFront {
    uri: String,
    refused: Arc<AtomicU64>,
}

/// The location a request asks for, if it asks for one: `metadata-location` of a register,
/// `location` of a create, `set-location` of a commit.
fn asked_location(path: &str, body: &[u8]) -> Vec<String> {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
        return vec![];
    };
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    if path.ends_with("/register") {
        return json
            .get("metadata-location")
            .and_then(text)
            .into_iter()
            .collect();
    }
    if path.ends_with("/tables") {
        return json.get("location").and_then(text).into_iter().collect();
    }
    json.get("updates")
        .and_then(|u| u.as_array())
        .map(|updates| {
            updates
                .iter()
                .filter(|u| u["action"] == "set-location")
                .filter_map(|u| u.get("location").and_then(text))
                .collect()
        })
        .unwrap_or_default()
}

impl LocationFront {
    async fn start(upstream: &str, allowed: String) -> LocationFront {
        let (listener, uri) = common::relay::listen().await;
        let refused = Arc::new(AtomicU64::new(0));
        let count = Arc::clone(&refused);
        let client = reqwest::Client::new();
        let upstream = upstream.to_string();
        common::relay::serve(listener, move |parts, body: Bytes| {
            let (client, upstream, allowed, count) = (
                client.clone(),
                upstream.clone(),
                allowed.clone(),
                Arc::clone(&count),
            );
            async move {
                if parts.method == hyper::Method::POST {
                    let outside: Vec<String> = asked_location(parts.uri.path(), &body)
                        .into_iter()
                        .filter(|l| !l.starts_with(&allowed))
                        .collect();
                    if let Some(location) = outside.first() {
                        count.fetch_add(1, Ordering::SeqCst);
                        return Ok(common::relay::rest_error(
                            400,
                            "BadRequestException",
                            &format!(
                                "Invalid location '{location}': not inside the allowed locations \
                                 [{allowed}]"
                            ),
                        ));
                    }
                }
                common::relay::forward(&client, &upstream, &parts, body, false).await
            }
        });
        LocationFront { uri, refused }
    }

    fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }
}

/// Where the fixture (a JDBC catalog with warehouse `s3://{bucket}/`) puts a namespace's tables.
fn namespace_dir(h: &Harness) -> String {
    format!("s3://{}/{}/", h.env.bucket, h.namespace.join("/"))
}

/// Two columns with field IDs the catalog would never assign itself (it numbers from 1).
fn far_ids_batch(n: u64, rows: usize, extra: bool) -> RecordBatch {
    let field = |name: &str, id: i32| common::demo::field(name, DataType::Int64, false, id);
    let mut fields: Vec<Field> = vec![field("reading", 101), field("segment", 205)];
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| i * 10),
        )),
        Arc::new(Int64Array::from_iter_values((0..rows).map(|_| n as i64))),
    ];
    if extra {
        fields.push(field("added", 307));
        columns.push(Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| -i),
        )));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("batch")
}

/// The config file of `h` with the catalog reached through `uri`.
fn config_file_via(h: &Harness, uri: &str, name: &str) -> std::path::PathBuf {
    let yaml = h.yaml.replace(&h.env.catalog_uri, uri);
    let path = h.dir.path().join(name);
    std::fs::write(&path, yaml).expect("write config");
    path
}

/// The `--check` line about the table.
async fn table_line(path: &std::path::Path) -> (Verdict, String) {
    let report = check_file(path, None).await;
    let line = report
        .lines
        .iter()
        .find(|l| l.check.starts_with("table "))
        .unwrap_or_else(|| panic!("no table line in:\n{report}"))
        .clone();
    let text = line.to_string();
    (line.verdict, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipper_location_refused_by_the_catalog_stops_with_the_fix_named() {
    let mut h = Harness::new("loc_refused");
    h.ship_telemetry(0, 10).await;
    let front = LocationFront::start(&h.env.catalog_uri, namespace_dir(&h)).await;

    // --check before the namespace exists: a catalog that looks for the namespace first (the
    // fixture: 404) cannot tell whether it would take the location: warn, never ok.
    let direct = config_file_via(&h, &h.env.catalog_uri, "direct.yaml");
    let (verdict, line) = table_line(&direct).await;
    assert_eq!(verdict, Verdict::CannotTell, "{line}");
    assert!(line.contains("table_location: catalog"), "{line}");
    // One that judges the location first (this front, like SeaweedFS's catalog) refuses it
    // even then, and that refusal is certain: FAIL, naming the fix.
    let path = config_file_via(&h, &front.uri, "via-front.yaml");
    let (verdict, line) = table_line(&path).await;
    assert_eq!(verdict, Verdict::Fail(ErrorCode::CatalogRejected), "{line}");
    assert!(line.contains("table_location: catalog"), "{line}");

    // Once the namespace exists, --check asks with a staged create and fails like the runtime.
    h.client()
        .await
        .ensure_namespace(&h.namespace)
        .await
        .expect("namespace");
    let (verdict, line) = table_line(&path).await;
    assert_eq!(verdict, Verdict::Fail(ErrorCode::CatalogRejected), "{line}");
    assert!(line.contains("table_location: catalog"), "{line}");
    assert!(
        line.contains("not inside the allowed locations"),
        "the catalog's words: {line}"
    );
    assert!(front.refused() >= 1);

    // The registrar itself: fatal, with the cause and the fix, and no table.
    let outcome = tokio::time::timeout(FATAL_GUARD, async {
        match Registrar::builder(h.config_via(&front.uri)).start().await {
            Err(e) => e,
            Ok(handle) => handle
                .wait()
                .await
                .expect_err("a refused location is fatal"),
        }
    })
    .await
    .expect("fatal at once, not retried (hang guard)");
    assert_eq!(outcome.code(), ErrorCode::CatalogRejected, "{outcome}");
    let text = outcome.to_string();
    assert!(text.contains("table_location: catalog"), "{text}");
    assert!(text.contains("not inside the allowed locations"), "{text}");
    assert!(h.table("telemetry").await.is_none(), "no table was created");

    // Straight to the fixture (which allows any location), --check says the location is fine.
    let (verdict, line) = table_line(&h.config_file()).await;
    assert_eq!(verdict, Verdict::Ok, "{line}");
    assert!(line.contains("accepts a table at"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_location_catalog_creates_where_the_catalog_says_with_the_files_field_ids() {
    let mut h = Harness::with(
        "loc_catalog",
        Options {
            extra_iceberg_yaml: "      table_location: catalog".into(),
            ..Options::default()
        },
    );
    assert_eq!(h.config.table_location, TableLocation::Catalog);
    let front = LocationFront::start(&h.env.catalog_uri, namespace_dir(&h)).await;
    let via = config_file_via(&h, &front.uri, "via.yaml");

    // --check before the namespace exists cannot ask the catalog whether (and where) it would
    // create the table: warn, never ok.
    let (verdict, line) = table_line(&via).await;
    assert_eq!(verdict, Verdict::CannotTell, "{line}");
    assert!(line.starts_with("warn "), "{line}");
    assert!(
        line.contains("cannot be asked before the namespace exists"),
        "{line}"
    );

    h.client()
        .await
        .ensure_namespace(&h.namespace)
        .await
        .expect("namespace");
    let (verdict, line) = table_line(&via).await;
    assert_eq!(verdict, Verdict::Ok, "{line}");
    assert!(line.contains("would create it at"), "{line}");

    let mut keys = Vec::new();
    for n in 0..3 {
        keys.push(h.ship("telemetry", &far_ids_batch(n, 10, false)).await);
    }
    // A schema change too: a commit on a table at a catalog-chosen location.
    keys.push(h.ship("telemetry", &far_ids_batch(3, 5, true)).await);
    let handle = h
        .start_with(h.config_via(&front.uri), Default::default())
        .await;
    Harness::finish(handle, keys.len() as u64).await;
    assert_eq!(
        front.refused(),
        0,
        "nothing asked for a location outside the allowed one"
    );

    let table = h.table("telemetry").await.expect("table");
    let expected_location = format!("{}telemetry", namespace_dir(&h));
    assert_eq!(table.metadata().location(), expected_location);
    let ids: Vec<(String, i32)> = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .map(|f| (f.name.clone(), f.id))
        .collect();
    assert_eq!(
        ids,
        [
            ("reading".to_string(), 101),
            ("segment".to_string(), 205),
            ("added".to_string(), 307)
        ],
        "the file's field IDs, not the catalog's numbering"
    );
    // Data files stay where the shipper put them.
    assert_exactly_once(&table, &h.env.bucket, &keys).await;

    // pyiceberg reads it: the rows, the location, and the added column's values.
    let ident = format!("{}.telemetry", h.namespace.join("."));
    let out = py::run(
        r#"
t = catalog.load_table(sys.argv[1])
rows = t.scan().to_arrow()
print(json.dumps({"location": t.location(), "rows": rows.num_rows,
                  "added": sorted(v for v in rows.column("added").to_pylist() if v is not None)}))
"#,
        &[&ident],
    );
    let got: serde_json::Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(got["location"], expected_location);
    assert_eq!(got["rows"], 35);
    assert_eq!(got["added"], serde_json::json!([-4, -3, -2, -1, 0]));
}

/// A partitioned table created where the catalog says: the spec travels in the create commit
/// (`add-spec`) with its field IDs, and each file carries its partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_table_created_where_the_catalog_says_keeps_its_spec() {
    let mut h = Harness::with(
        "loc_parts",
        Options {
            extra_iceberg_yaml: "      table_location: catalog\n      partition_by: [segment]"
                .into(),
            ..Options::default()
        },
    );
    let front = LocationFront::start(&h.env.catalog_uri, namespace_dir(&h)).await;
    let mut keys = Vec::new();
    for n in 0..3 {
        keys.push(h.ship("telemetry", &far_ids_batch(n, 10, false)).await);
    }
    let handle = h
        .start_with(h.config_via(&front.uri), Default::default())
        .await;
    Harness::finish(handle, keys.len() as u64).await;
    assert_eq!(front.refused(), 0);

    let table = h.table("telemetry").await.expect("table");
    assert_eq!(
        table.metadata().location(),
        format!("{}telemetry", namespace_dir(&h))
    );
    let spec = table.metadata().default_partition_spec();
    let fields: Vec<(String, i32, i32, String)> = spec
        .fields()
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                f.field_id,
                f.source_id,
                f.transform.to_string(),
            )
        })
        .collect();
    assert_eq!(
        fields,
        [("segment".to_string(), 1000, 205, "identity".to_string())]
    );
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    let ident = format!("{}.telemetry", h.namespace.join("."));
    let out = py::run(
        r#"
t = catalog.load_table(sys.argv[1])
print(json.dumps(sorted(task.file.partition[0] for task in t.scan().plan_files())))
"#,
        &[&ident],
    );
    assert_eq!(
        out.trim(),
        "[0, 1, 2]",
        "each file carries its partition value"
    );
}
