//! Permanent table problems stop the registrar with their code instead of being retried forever
//! or papered over: a table dropped while `create_table: false` holds, and a table property the
//! append cannot be built with. Against the real REST fixture and S3 server.

mod common;

use std::time::Duration;

use common::Harness;
use common::s3_front::{S3Front, WriteFault};
use iceberg::{TableRequirement, TableUpdate};
use thadam_iceberg::ErrorCode;

async fn wait_fatal(handle: thadam_iceberg::RegistrarHandle) -> thadam_iceberg::Error {
    tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .expect("stops in time (hang guard)")
        .expect_err("a fatal error")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_dropped_while_running_is_not_recreated_without_create_table() {
    let mut h = Harness::new("dropped");
    h.ship_telemetry(0, 10).await;
    assert_eq!(h.run_until_handled(1).await.registered(), 1);

    let mut config = h.config.clone();
    config.create_table = false;
    let handle = h.start_with(config, Default::default()).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        handle.wait_until(|s| s.handled() >= 1),
    )
    .await
    .expect("hang guard")
    .expect("caught up");
    // Someone drops the table while the registrar runs; then a segment arrives.
    let url = format!(
        "{}/v1/namespaces/{}/tables/telemetry?purgeRequested=false",
        h.env.catalog_uri.trim_end_matches('/'),
        h.namespace.join("\u{1f}")
    );
    let dropped = reqwest::Client::new()
        .delete(url)
        .send()
        .await
        .expect("drop table");
    assert!(dropped.status().is_success(), "{}", dropped.status());
    h.ship_telemetry(1, 10).await;
    let err = wait_fatal(handle).await;
    assert_eq!(err.code(), ErrorCode::TableMissing, "{err}");
    assert!(err.message().contains("create_table"), "{err}");
    assert!(h.table("telemetry").await.is_none(), "not re-created");
}

/// The registrar builds its appends itself (it owns the retry loop, see `table::append`): a
/// `commit.retry.*` it never reads cannot stop it, and an unparsable merge property falls back to
/// its default (with a warning) instead of stopping the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_properties_the_append_cannot_parse_do_not_stop_it() {
    let mut h = Harness::new("badprop");
    let mut keys = vec![h.ship_telemetry(0, 10).await];
    assert_eq!(h.run_until_handled(1).await.registered(), 1);
    let table = h.table("telemetry").await.expect("table");
    h.client()
        .await
        .commit(
            &h.table_name("telemetry"),
            vec![TableRequirement::UuidMatch {
                uuid: table.metadata().uuid(),
            }],
            vec![TableUpdate::SetProperties {
                updates: [
                    ("commit.retry.num-retries".to_string(), "many".to_string()),
                    (
                        "commit.manifest.min-count-to-merge".to_string(),
                        "lots".to_string(),
                    ),
                ]
                .into(),
            }],
            None,
        )
        .await
        .expect("set property");
    keys.push(h.ship_telemetry(1, 10).await);
    assert_eq!(h.run_until_handled(2).await.registered(), 1);
    let table = h.table("telemetry").await.expect("table");
    common::assert_exactly_once(&table, &h.env.bucket, &keys).await;
    // The default min count (100) applies: two manifests are not merged yet.
    let list = common::current_manifest_list(&table).await;
    assert_eq!(list.entries().len(), 2);
}

/// Drops the table just before the registrar's first append (whose answer the proxy then
/// replaces with a 503): the registrar reloads and must find the table gone.
struct DropBeforeAppend {
    url: String,
    done: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl thadam_iceberg::testing::BeforeAppend for DropBeforeAppend {
    async fn before_append(
        &self,
        _: &thadam_iceberg::testing::TableName,
        _: &iceberg::table::Table,
        _: &[thadam_iceberg::testing::ReadySegment],
    ) {
        if !self.done.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let r = reqwest::Client::new()
                .delete(&self.url)
                .send()
                .await
                .expect("drop table");
            assert!(r.status().is_success(), "{}", r.status());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_gone_on_reload_is_missing_not_recreated_without_create_table() {
    use common::fault_proxy::{Fault, FaultProxy, Kind};
    let mut h = Harness::new("gone");
    h.ship_telemetry(0, 10).await;
    assert_eq!(h.run_until_handled(1).await.registered(), 1);
    h.ship_telemetry(1, 10).await;

    let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
    proxy.plan(Kind::Append, [Fault::Refuse(503)]);
    let mut config = h.config.clone();
    config.create_table = false;
    config.catalog_uri = proxy.uri.parse().expect("uri");
    let mut tuning = thadam_iceberg::Tuning::default();
    tuning.hooks.before_append = Some(std::sync::Arc::new(DropBeforeAppend {
        url: format!(
            "{}/v1/namespaces/{}/tables/telemetry?purgeRequested=false",
            h.env.catalog_uri.trim_end_matches('/'),
            h.namespace.join("\u{1f}")
        ),
        done: Default::default(),
    }));
    let err = wait_fatal(h.start_with(config, tuning).await).await;
    assert_eq!(err.code(), ErrorCode::TableMissing, "{err}");
    assert!(h.table("telemetry").await.is_none(), "not re-created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_writes_refused_by_the_store_are_fatal_not_retried() {
    let mut h = Harness::new("readonly");
    h.ship_telemetry(0, 10).await;
    assert_eq!(h.run_until_handled(1).await.registered(), 1);
    h.ship_telemetry(1, 10).await;
    let front = S3Front::start(&h.env.s3_endpoint, WriteFault::Refuse).await;
    let mut config = h.config.clone();
    config.store.endpoint = Some(front.uri.parse().expect("url"));
    let err = wait_fatal(h.start_with(config, Default::default()).await).await;
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert!(err.message().contains("store credentials"), "{err}");
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 1, "nothing appended");
}

/// A catalog answering a create (register) with 500 is retried with backoff as before, but the
/// operator sees it at once: the table's status carries the catalog's answer, `/readyz`'s rule
/// says not ready, and `thadam_iceberg_catalog_server_errors_total{op="create"}` counts it;
/// once the catalog answers, all of that clears and the segment is registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_on_create_is_shown_at_once_and_clears_when_it_ends() {
    use common::fault_proxy::{Fault, FaultProxy, Kind};
    common::metrics::recorder();
    let mut h = Harness::new("create500");
    let key = h.ship_telemetry(0, 10).await;
    let proxy = FaultProxy::start(&h.env.catalog_uri, "telemetry").await;
    proxy.plan(Kind::Create, std::iter::repeat_n(Fault::Refuse(500), 4));
    let errors = || {
        common::metrics::counter(
            "thadam_iceberg_catalog_server_errors_total",
            &[("op", "create")],
        )
    };
    let before = errors();
    let table = h.table_name("telemetry").to_string();
    let handle = h
        .start_with(h.config_via(&proxy.uri), Default::default())
        .await;
    let failing = tokio::time::timeout(
        Duration::from_secs(60),
        handle.wait_until(|s| {
            s.tables
                .get(&table)
                .is_some_and(|t| t.catalog_error.is_some())
        }),
    )
    .await
    .expect("hang guard")
    .expect("no fatal error");
    let shown = failing.tables[&table]
        .catalog_error
        .clone()
        .unwrap_or_default();
    assert!(shown.contains("500"), "{shown}");
    let why = failing
        .readiness()
        .expect_err("not ready while the catalog fails");
    assert!(
        why.contains(&table) && why.contains("server error"),
        "{why}"
    );
    let done = Harness::finish(handle, 1).await;
    assert_eq!(done.registered(), 1);
    assert_eq!(
        done.tables[&table].catalog_error, None,
        "cleared once it answered"
    );
    assert!(errors() - before >= 1.0, "counted");
    assert_eq!(
        proxy.seen(Kind::Create),
        5,
        "four refusals, then the create"
    );
    let t = h.table("telemetry").await.expect("table");
    common::assert_exactly_once(&t, &h.env.bucket, &[key]).await;
}
