//! The catalog-facing behaviours, on every catalog the suite runs: the Apache Iceberg REST
//! fixture (Java's reference server over a JDBC catalog), Project Nessie 0.99.0 (its own
//! catalog code: strict metadata parsing, field IDs renumbered in create transactions, a
//! percent-encoded warehouse prefix, only the current snapshot kept, `remove-snapshots`
//! refused) and SeaweedFS 4.48's catalog (Go, over iceberg-go: every table inside its table
//! bucket, so only `table_location: catalog` creates tables there; authentication always on;
//! staged creates that leave a template the create commit builds on). Each test is one function
//! of the catalog, run once per catalog by `matrix!`: `cargo test --test catalogs nessie` runs
//! the Nessie half, `seaweedfs` SeaweedFS's.
//!
//! The files carry field IDs that are not 1..n (11, 5, 9), so a catalog that renumbers shows.
//! What is asserted is what users are promised: the table carries the files' IDs and spec,
//! pyiceberg reads every row back, each segment is registered exactly once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Schema, TimeUnit};
use async_trait::async_trait;
use bytes::Bytes;
use common::hold_proxy::{Hold, HoldProxy};
use common::{Catalog, Harness, Options, assert_exactly_once, demo};
use iceberg::table::Table;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;
use thadam_iceberg::Tuning;
use thadam_iceberg::config::Config;
use thadam_iceberg::ops::check::{CheckReport, Verdict, check_registrar};
use thadam_iceberg::testing::ReadySegment;
use thadam_iceberg::testing::TableName;
use thadam_iceberg::testing::{BeforeAppend, Hooks};

/// One test, once per catalog: `NAME::fixture`, `NAME::nessie` and `NAME::seaweedfs`.
macro_rules! matrix {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fixture() {
                super::$name(super::Catalog::Fixture).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nessie() {
                if super::Catalog::Nessie.skipped() {
                    return;
                }
                super::$name(super::Catalog::Nessie).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn seaweedfs() {
                super::$name(super::Catalog::SeaweedFs).await
            }
        }
    )*};
}

matrix!(
    created_registered_and_restarted,
    created_where_the_catalog_says,
    schema_evolves_by_field_id,
    warehouse_prefix_as_the_server_gives_it,
    conflicting_writer,
    bad_file_quarantined,
    snapshot_retention,
    two_registrars_create_the_table_at_once,
);

/// The dataset of these tests.
const DATASET: &str = "events";

/// Field IDs of the files: not 1..n, so that a catalog renumbering them shows.
const TS_ID: i32 = 11;
const SITE_ID: i32 = 5;
const VALUE_ID: i32 = 9;
const EXTRA_ID: i32 = 14;

fn schema(extra: bool) -> Arc<Schema> {
    let mut fields = vec![
        demo::field(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
            TS_ID,
        ),
        demo::field("site", DataType::Utf8, false, SITE_ID),
        demo::field("value", DataType::Int64, true, VALUE_ID),
    ];
    if extra {
        fields.push(demo::field("extra", DataType::Utf8, true, EXTRA_ID));
    }
    Arc::new(Schema::new(fields))
}

/// Segment `n`: `rows` rows of one site (`site-{n % 3}`), values `n * 1000 + i`.
fn batch(n: u64, rows: usize, extra: bool) -> RecordBatch {
    let start_us = 1_767_225_600_000_000_i64 + n as i64 * 60_000_000;
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(
            TimestampMicrosecondArray::from_iter_values(
                (0..rows as i64).map(|i| start_us + i * 1_000_000),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(StringArray::from_iter_values(
            (0..rows).map(|_| format!("site-{}", n % 3)),
        )),
        Arc::new(Int64Array::from_iter_values(
            (0..rows as i64).map(|i| n as i64 * 1000 + i),
        )),
    ];
    if extra {
        columns.push(Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("x{i}")),
        )));
    }
    RecordBatch::try_new(schema(extra), columns).expect("batch")
}

/// A harness on `catalog`. SeaweedFS's catalog keeps every table inside its table bucket, so a
/// table can only be created there where the catalog says: its tests use `table_location:
/// catalog` unless they say otherwise (`table_location: shipper` stops with an error naming
/// that, see [`seaweedfs_shipper_location_stops_naming_the_fix`]).
fn harness(catalog: Catalog, test: &str, extra_yaml: &str) -> Harness {
    let mut extra = extra_yaml.to_string();
    if catalog == Catalog::SeaweedFs && !extra.contains("table_location:") {
        extra = format!("      table_location: catalog\n{extra}");
    }
    Harness::with(
        test,
        Options {
            datasets: vec![DATASET],
            extra_iceberg_yaml: extra,
            catalog,
            ..Options::default()
        },
    )
}

/// Ships segments `from..from + n` of 10 rows; returns their keys.
async fn ship(h: &mut Harness, from: u64, n: u64, extra: bool) -> Vec<String> {
    let mut keys = Vec::new();
    for i in from..from + n {
        keys.push(h.ship(DATASET, &batch(i, 10, extra)).await);
    }
    keys
}

async fn table(h: &Harness) -> Table {
    h.table(DATASET).await.expect("the table exists")
}

/// The table's current field IDs by column name.
fn ids(table: &Table) -> Vec<(String, i32)> {
    let schema = table.metadata().current_schema();
    let mut ids: Vec<(String, i32)> = schema
        .as_struct()
        .fields()
        .iter()
        .map(|f| (f.name.clone(), f.id))
        .collect();
    ids.sort();
    ids
}

fn expected_ids(extra: bool) -> Vec<(String, i32)> {
    let mut ids = vec![
        ("site".to_string(), SITE_ID),
        ("ts".to_string(), TS_ID),
        ("value".to_string(), VALUE_ID),
    ];
    if extra {
        ids.push(("extra".to_string(), EXTRA_ID));
    }
    ids.sort();
    ids
}

/// Asserts exactly once with iceberg-rust and with pyiceberg, and pyiceberg's row count.
async fn assert_registered(h: &Harness, keys: &[String], rows: u64) {
    let t = table(h).await;
    assert_exactly_once(&t, &h.env.bucket, keys).await;
    let view = h.py_view(DATASET);
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(view.files, expected, "pyiceberg plans each segment once");
    assert_eq!(view.rows, rows, "pyiceberg reads every row");
}

/// `table_location: shipper` (the default; `catalog` on SeaweedFS): the registrar writes the
/// first metadata file and registers it; then a restart registers only what is new.
async fn created_registered_and_restarted(catalog: Catalog) {
    let mut h = harness(catalog, "cat_basic", "");
    let mut keys = ship(&mut h, 0, 3, false).await;
    h.run_until_handled(3).await;
    let t = table(&h).await;
    assert_eq!(ids(&t), expected_ids(false), "the files' field IDs");
    assert_registered(&h, &keys, 30).await;

    // The restart goes through a proxy that counts the table's loads: the commits' answers
    // (Nessie's name an `http://` metadata location, loads an `s3://` one) are taken as they
    // come, never a reason to load the table again.
    keys.extend(ship(&mut h, 3, 2, false).await);
    let proxy = common::fault_proxy::FaultProxy::start(&h.env.catalog_uri, DATASET).await;
    let handle = h
        .start_with(h.config_via(&proxy.uri), common::one_per_commit())
        .await;
    let status = Harness::finish(handle, 5).await;
    assert_eq!(
        status.registered(),
        2,
        "the restart registers only the new segments"
    );
    assert_eq!(status.tables.values().map(|t| t.skipped).sum::<u64>(), 3);
    assert_eq!(
        proxy.seen(common::fault_proxy::Kind::Append),
        2,
        "one commit per segment"
    );
    assert_eq!(
        proxy.seen(common::fault_proxy::Kind::Load),
        1,
        "the table is loaded once, at start"
    );
    assert_registered(&h, &keys, 50).await;
}

/// `table_location: catalog`: the catalog chooses the location (a staged create), the table is
/// created in one `assert-create` commit, partitioned by `site`, with the files' IDs and spec
/// (Nessie renumbers a new table's first schema: the registrar gives the IDs back).
async fn created_where_the_catalog_says(catalog: Catalog) {
    let mut h = harness(
        catalog,
        "cat_loc",
        "      table_location: catalog\n      partition_by: [site]",
    );
    let keys = ship(&mut h, 0, 4, false).await;
    h.run_until_handled(4).await;
    let t = table(&h).await;
    assert_eq!(ids(&t), expected_ids(false), "the files' field IDs");
    let spec = t.metadata().default_partition_spec();
    let sources: Vec<i32> = spec.fields().iter().map(|f| f.source_id).collect();
    assert_eq!(sources, [SITE_ID], "partitioned by the files' site column");
    assert!(
        !t.metadata()
            .location()
            .contains(&format!("/{}/thadam/", h.prefix)),
        "the catalog chose the location: {}",
        t.metadata().location()
    );
    assert_registered(&h, &keys, 40).await;
    // Pruning by partition works in an independent reader: one site of three.
    let site0 = h.py(
        "from pyiceberg.expressions import EqualTo\n\
         t = catalog.load_table(sys.argv[1])\n\
         print(len(t.scan(row_filter=EqualTo('site', 'site-0')).to_arrow()))",
        &[&h.table_name(DATASET).to_string()],
    );
    assert_eq!(site0.trim(), "20", "segments 0 and 3 are site-0");
}

/// A file with one more column evolves the table by field ID; older files read it as null.
async fn schema_evolves_by_field_id(catalog: Catalog) {
    let mut h = harness(catalog, "cat_evo", "");
    let mut keys = ship(&mut h, 0, 2, false).await;
    keys.extend(ship(&mut h, 2, 2, true).await);
    h.run_until_handled(4).await;
    let t = table(&h).await;
    assert_eq!(
        ids(&t),
        expected_ids(true),
        "the new column kept its file ID"
    );
    assert_registered(&h, &keys, 40).await;
    let nulls = h.py(
        "t = catalog.load_table(sys.argv[1]).scan().to_arrow()\n\
         print(t.column('extra').null_count)",
        &[&h.table_name(DATASET).to_string()],
    );
    assert_eq!(nulls.trim(), "20", "the first two segments have no `extra`");
}

/// `catalog_warehouse`: the server's prefix for the warehouse (Nessie: `main%7Cwarehouse`,
/// already percent-encoded; SeaweedFS: the table bucket's name, always given) goes into every
/// URL as given.
async fn warehouse_prefix_as_the_server_gives_it(catalog: Catalog) {
    let warehouse = match catalog {
        Catalog::Fixture => Some("s3://warehouse/".to_string()),
        Catalog::Nessie => Some(
            std::env::var("THADAM_TEST_NESSIE_WAREHOUSE")
                .unwrap_or_else(|_| "warehouse".to_string()),
        ),
        // Catalog::connection_yaml gives it already: without it there is no prefix at all.
        Catalog::SeaweedFs => None,
    };
    let extra = warehouse
        .map(|w| format!("      catalog_warehouse: \"{w}\""))
        .unwrap_or_default();
    let mut h = harness(catalog, "cat_wh", &extra);
    let keys = ship(&mut h, 0, 2, false).await;
    h.run_until_handled(2).await;
    assert_registered(&h, &keys, 20).await;
}

/// Runs a pyiceberg append of one row to the table before the registrar's `at`-th append: the
/// registrar's commit then meets a stale requirement (409 on both catalogs) and must retry.
struct RivalAppend {
    at: usize,
    calls: AtomicUsize,
    catalog: Catalog,
    catalog_uri: String,
    ident: String,
}

const RIVAL_APPEND: &str = r#"
import datetime, pyarrow as pa
t = catalog.load_table(sys.argv[1])
row = {"ts": datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc), "site": "rival", "value": -1}
t.append(pa.Table.from_pylist([row], schema=t.schema().as_arrow()))
"#;

#[async_trait]
impl BeforeAppend for RivalAppend {
    async fn before_append(&self, _: &TableName, _: &Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 != self.at {
            return;
        }
        let (catalog, uri, ident) = (self.catalog, self.catalog_uri.clone(), self.ident.clone());
        tokio::task::spawn_blocking(move || {
            common::py::run_for(catalog, &uri, RIVAL_APPEND, &[&ident])
        })
        .await
        .expect("pyiceberg appended");
    }
}

/// Another writer commits between the registrar's load and its commit: the catalog refuses the
/// stale commit, the registrar reloads and lands, and both writers' files are in the table.
async fn conflicting_writer(catalog: Catalog) {
    common::metrics::recorder();
    let mut h = harness(catalog, "cat_rival", "");
    let mut keys = ship(&mut h, 0, 1, false).await;
    h.run_until_handled(1).await;
    keys.extend(ship(&mut h, 1, 3, false).await);
    let name = h.table_name(DATASET).to_string();
    let conflicts = || {
        common::metrics::counter(
            "thadam_iceberg_commits_total",
            &[("table", name.as_str()), ("outcome", "conflict")],
        )
    };
    let before = conflicts();
    let tuning = Tuning {
        max_batch: 1,
        hooks: Hooks {
            before_append: Some(Arc::new(RivalAppend {
                at: 2,
                calls: AtomicUsize::new(0),
                catalog,
                catalog_uri: h.env.catalog_uri.clone(),
                ident: name.clone(),
            })),
            ..Hooks::default()
        },
        ..Default::default()
    };
    // One segment skipped (registered by the first run), three registered.
    Harness::finish(h.start_with(h.config.clone(), tuning).await, 4).await;
    assert!(
        conflicts() - before >= 1.0,
        "the catalog refused the stale commit (409)"
    );
    let t = table(&h).await;
    let files = common::data_file_list(&t).await;
    let shipped: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    let (ours, theirs): (Vec<&String>, Vec<&String>) =
        files.iter().partition(|f| shipped.contains(f));
    assert_eq!(ours.len(), 4, "each segment once: {files:?}");
    assert_eq!(theirs.len(), 1, "and the rival's file: {files:?}");
    let view = h.py_view(DATASET);
    assert_eq!(view.rows, 41, "pyiceberg reads both writers' rows");
}

/// `on_bad_segment: quarantine`: a file that is not Parquet is set aside with its code; the
/// good segments around it are registered.
async fn bad_file_quarantined(catalog: Catalog) {
    let mut h = harness(catalog, "cat_bad", "      on_bad_segment: quarantine");
    let mut keys = ship(&mut h, 0, 1, false).await;
    let bad = demo::object_key(&h.prefix, &h.pipeline, DATASET, "bad-1");
    let garbage = Bytes::from_static(b"this is not a parquet file, not at all");
    h.store
        .put(
            &ObjectPath::parse(&bad).expect("key"),
            garbage.clone().into(),
        )
        .await
        .expect("upload");
    h.log
        .append_uploaded(DATASET, "bad-1", &bad, garbage.len() as u64, 1)
        .expect("record");
    keys.extend(ship(&mut h, 1, 1, false).await);
    let handle = h.start().await;
    let status = tokio::time::timeout(
        Duration::from_secs(180),
        handle.wait_until(|s| {
            s.handled() >= 2 && s.tables.values().map(|t| t.quarantined).sum::<u64>() >= 1
        }),
    )
    .await
    .expect("in time (hang guard)")
    .expect("no fatal error");
    handle.stop();
    handle.wait().await.expect("clean stop");
    assert_eq!(status.registered(), 2);
    let state = thadam_iceberg::testing::QuarantineStore::open(&h.config.quarantine_file)
        .expect("quarantine file")
        .state();
    let open: Vec<String> = state
        .open()
        .map(|e| format!("{} {}", e.segment.object_key, e.code))
        .collect();
    assert_eq!(
        open,
        [format!("{bad} sink.iceberg_footer_invalid")],
        "the bad file, with its code"
    );
    assert_registered(&h, &keys, 20).await;
}

/// `snapshot_retention`: where the catalog takes `remove-snapshots` (the fixture), the registrar
/// expires its old snapshots; where it manages snapshots itself (Nessie keeps only the current
/// one and refuses the removal), retention turns itself off for the table with one warning and
/// nothing is lost or registered twice.
async fn snapshot_retention(catalog: Catalog) {
    common::metrics::recorder();
    let mut h = harness(
        catalog,
        "cat_ret",
        "      snapshot_retention: { max_age: 1m, min_snapshots: 2 }",
    );
    let keys = ship(&mut h, 0, 6, false).await;
    let name = h.table_name(DATASET).to_string();
    let refused = || {
        common::metrics::counter(
            "thadam_iceberg_snapshot_retention_refused_total",
            &[("table", name.as_str())],
        )
    };
    let before = refused();
    // Snapshots look an hour old to the retention policy at once.
    let tuning = Tuning {
        max_batch: 1,
        hooks: Hooks {
            before_append: None,
            clock: Some(Arc::new(|| {
                chrono::Utc::now().timestamp_millis() + 3_600_000
            })),
            ..Hooks::default()
        },
        ..Default::default()
    };
    Harness::finish(h.start_with(h.config.clone(), tuning).await, 6).await;
    let t = table(&h).await;
    let snapshots = t.metadata().snapshots().count();
    match catalog {
        Catalog::Fixture | Catalog::SeaweedFs => {
            assert!(
                snapshots <= 4,
                "old snapshots expired: {snapshots} of 6 commits left"
            );
            assert_eq!(refused() - before, 0.0);
        }
        Catalog::Nessie => {
            assert_eq!(snapshots, 1, "Nessie keeps the current snapshot only");
        }
    }
    assert_registered(&h, &keys, 60).await;
}

/// Nessie renumbers a new table's first schema in a create transaction. When the catalog also
/// refuses to take the files' IDs back (here a proxy answers that commit 400, as a stricter
/// catalog would), the registrar stops with `sink.iceberg_field_ids_renumbered`, naming each
/// column with both IDs, and registers nothing into the mismatched table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renumbered_table_that_cannot_be_fixed_stops_with_its_code_and_stays_empty() {
    use common::fault_proxy::{Fault, FaultProxy, Kind};
    if Catalog::Nessie.skipped() {
        return;
    }
    let mut h = harness(
        Catalog::Nessie,
        "cat_renum",
        "      table_location: catalog",
    );
    ship(&mut h, 0, 2, false).await;
    let proxy = FaultProxy::start(&h.env.catalog_uri, DATASET).await;
    // The create transaction passes (Nessie renumbers it); the give-back is refused.
    proxy.plan(Kind::Schema, [Fault::Pass, Fault::Refuse(400)]);
    let handle = h
        .start_with(h.config_via(&proxy.uri), Default::default())
        .await;
    let err = tokio::time::timeout(Duration::from_secs(120), handle.wait())
        .await
        .expect("stopped in time (hang guard)")
        .expect_err("a table with other field IDs than its files' stops the registrar");
    assert_eq!(
        err.code(),
        thadam_iceberg::ErrorCode::FieldIdsRenumbered,
        "{err}"
    );
    let text = err.to_string();
    for named in [
        format!("ts: file ID {TS_ID}, table ID"),
        format!("site: file ID {SITE_ID}, table ID"),
        "table_location: shipper".to_string(),
    ] {
        assert!(text.contains(&named), "{named} not in {text}");
    }
    assert_eq!(proxy.seen(Kind::Append), 0, "nothing was appended");
    let t = table(&h).await;
    assert!(
        t.metadata().current_snapshot().is_none(),
        "the table is empty"
    );
    assert_ne!(
        ids(&t),
        expected_ids(false),
        "Nessie's own IDs, left as they are"
    );
}

/// Two registrars of one log find the table absent and create it at once, where the catalog
/// says (`table_location: catalog`, the create path all three serve): B's create commit
/// (`assert-create`) is held until A has created the table and registered every segment; the
/// catalog then refuses B's create (409: the table exists now) and B takes A's table as it is.
/// One table, with the files' field IDs, each segment once.
async fn two_registrars_create_the_table_at_once(catalog: Catalog) {
    let mut h = harness(catalog, "cat_race", "      table_location: catalog");
    let keys = ship(&mut h, 0, 3, false).await;
    let proxy = HoldProxy::start(
        &h.env.catalog_uri,
        Hold {
            path_suffix: format!("/tables/{DATASET}"),
            body_contains: "assert-create".into(),
        },
    )
    .await;
    let b = h
        .start_with(h.config_via(&proxy.uri), Tuning::default())
        .await;
    proxy.wait_held().await;
    let a = h.run_until_handled(3).await;
    assert_eq!(a.registered(), 3, "A created the table and registered all");
    assert_eq!(
        proxy.release().await,
        409,
        "the catalog refuses a second create of the same table"
    );
    let b = Harness::finish(b, 3).await;
    let t = b.tables.values().next().expect("B's table status");
    assert_eq!(
        (t.registered, t.skipped),
        (0, 3),
        "B took A's table and its segments"
    );
    let table = table(&h).await;
    assert_eq!(ids(&table), expected_ids(false), "the files' field IDs");
    assert_registered(&h, &keys, 30).await;
}

/// The lines SeaweedFS's [`Catalog::connection_yaml`] authenticates with (OAuth2 client
/// credentials): swapped for others by the authentication tests below.
const SEAWEEDFS_CREDENTIAL: &str = "      catalog_credential:\n        \
     client_id: \"${env:THADAM_TEST_S3_ACCESS_KEY}\"\n        \
     client_secret: \"${env:THADAM_TEST_S3_SECRET_KEY}\"\n";

/// `h` with its config's `catalog_credential` replaced by `auth` (iceberg sink keys).
fn with_catalog_auth(h: &mut Harness, auth: &str) {
    assert!(h.yaml.contains(SEAWEEDFS_CREDENTIAL), "{}", h.yaml);
    h.yaml = h.yaml.replace(SEAWEEDFS_CREDENTIAL, auth);
    h.config = Config::from_yaml_str(&h.yaml, h.dir.path())
        .expect("test config is valid")
        .registrars
        .remove(0);
}

/// SeaweedFS's catalog keeps every table inside its table bucket: it refuses a table at the
/// shipper's location (`table_location: shipper`, the default; the shipper's bucket is a plain
/// one, and a table bucket takes only `{namespace}/{table}/{data,metadata}/` keys, so the shipper
/// cannot write there either). `--check` says so before anything exists, the namespace included
/// (SeaweedFS judges the location first), and the registrar stops with
/// `sink.iceberg_catalog_rejected`, quoting the catalog and naming the fix, having created no
/// table and left no metadata file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweedfs_shipper_location_stops_naming_the_fix() {
    let mut h = harness(
        Catalog::SeaweedFs,
        "sw_ship",
        "      table_location: shipper",
    );
    ship(&mut h, 0, 2, false).await;

    let mut report = CheckReport::default();
    check_registrar(&h.config, &mut report).await;
    let line = report
        .lines
        .iter()
        .find(|l| l.check == format!("table {}", h.table_name(DATASET)))
        .expect("a line for the table");
    assert_eq!(
        line.verdict,
        Verdict::Fail(thadam_iceberg::ErrorCode::CatalogRejected),
        "{report}"
    );
    for named in ["must be within bucket", "set table_location: catalog"] {
        assert!(line.detail.contains(named), "{named} not in {line}");
    }

    let err = h.run_until_fatal().await;
    assert_eq!(
        err.code(),
        thadam_iceberg::ErrorCode::CatalogRejected,
        "{err}"
    );
    let text = err.to_string();
    for named in ["must be within bucket", "set table_location: catalog"] {
        assert!(text.contains(named), "{named} not in {text}");
    }
    assert!(h.table(DATASET).await.is_none(), "no table was created");
    let location = h.config.url.table_location(&h.pipeline, DATASET);
    let metadata = location
        .strip_prefix(&format!("s3://{}/", h.env.bucket))
        .map(|key| format!("{key}/metadata"))
        .expect("the shipper's location is in the bucket");
    let left: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(
        h.store
            .list(Some(&ObjectPath::parse(&metadata).expect("prefix"))),
    )
    .await
    .expect("list");
    assert!(
        left.is_empty(),
        "the refused table's metadata file was deleted: {left:?}"
    );
}

/// SeaweedFS's catalog also takes requests signed with SigV4 (`catalog_sigv4`, the S3 keys,
/// signing name `s3tables`) instead of OAuth2 client credentials: the table created, a schema
/// change committed, both segments registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweedfs_takes_sigv4_signed_requests() {
    let mut h = harness(Catalog::SeaweedFs, "sw_sigv4", "");
    with_catalog_auth(
        &mut h,
        "      catalog_sigv4:\n        region: us-east-1\n        signing_name: s3tables\n        \
         access_key_id: \"${env:THADAM_TEST_S3_ACCESS_KEY}\"\n        \
         secret_access_key: \"${env:THADAM_TEST_S3_SECRET_KEY}\"\n",
    );
    // The second segment's new column is a schema commit: sent directly, signed the same way.
    let mut keys = ship(&mut h, 0, 1, false).await;
    keys.extend(ship(&mut h, 1, 1, true).await);
    h.run_until_handled(2).await;
    assert_eq!(ids(&table(&h).await), expected_ids(true));
    assert_registered(&h, &keys, 20).await;
}

/// SeaweedFS's catalog without valid keys: a wrong client secret is refused at its token
/// endpoint, wrong SigV4 keys by the catalog itself (403); both stop the registrar with
/// `auth.failed` and register nothing. (An anonymous request gets 403 too: there is no
/// anonymous access to this catalog.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweedfs_refuses_wrong_keys_with_auth_failed() {
    for (case, auth) in [
        (
            "oauth2",
            "      catalog_credential:\n        \
             client_id: \"${env:THADAM_TEST_S3_ACCESS_KEY}\"\n        \
             client_secret: not-the-secret\n",
        ),
        (
            "sigv4",
            "      catalog_sigv4:\n        region: us-east-1\n        signing_name: s3tables\n        \
             access_key_id: \"${env:THADAM_TEST_S3_ACCESS_KEY}\"\n        \
             secret_access_key: not-the-secret\n",
        ),
    ] {
        let mut h = harness(Catalog::SeaweedFs, "sw_badkey", "");
        let good = h.client().await;
        with_catalog_auth(&mut h, auth);
        ship(&mut h, 0, 1, false).await;
        // The first token exchange happens at start: refused there, the start fails.
        let err = match thadam_iceberg::Registrar::builder(h.config.clone())
            .start()
            .await
        {
            Err(e) => e,
            Ok(handle) => tokio::time::timeout(Duration::from_secs(120), handle.wait())
                .await
                .expect("stopped in time (hang guard)")
                .expect_err("wrong keys stop the registrar"),
        };
        assert_eq!(
            err.code(),
            thadam_iceberg::ErrorCode::AuthFailed,
            "{case}: {err}"
        );
        assert!(
            !err.to_string().contains("not-the-secret"),
            "{case}: no secret in errors: {err}"
        );
        assert!(
            good.load_table(&h.table_name(DATASET))
                .await
                .expect("load")
                .is_none(),
            "{case}: nothing created"
        );
    }
}
