//! Permanent table problems stop the registrar with their code instead of being retried forever
//! or papered over: a table dropped while `create_table: false` holds, and a table property the
//! append cannot be built with. Against the real REST fixture and S3 server.

mod common;

use std::time::Duration;

use common::Harness;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_property_the_append_cannot_use_is_fatal_not_retried() {
    let mut h = Harness::new("badprop");
    h.ship_telemetry(0, 10).await;
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
                updates: [("commit.retry.num-retries".to_string(), "many".to_string())].into(),
            }],
            None,
        )
        .await
        .expect("set property");
    h.ship_telemetry(1, 10).await;
    let err = wait_fatal(h.start().await).await;
    assert_eq!(err.code(), ErrorCode::TableUnsupported, "{err}");
    assert!(err.message().contains("commit.retry.num-retries"), "{err}");
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 1, "nothing appended");
}

/// Drops the table just before the registrar's first append (whose answer the proxy then
/// replaces with a 503): the registrar reloads and must find the table gone.
struct DropBeforeAppend {
    url: String,
    done: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl thadam_iceberg::actors::context::BeforeAppend for DropBeforeAppend {
    async fn before_append(
        &self,
        _: &thadam_iceberg::catalog::TableName,
        _: &iceberg::table::Table,
        _: &[thadam_iceberg::table::append::ReadySegment],
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
    let mut tuning = thadam_iceberg::actors::context::Tuning::default();
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

/// An S3 front that refuses every write with 403 AccessDenied (read-only credentials) and
/// forwards reads to the real S3 server unchanged (the Host header is kept, so SigV4 holds).
async fn read_only_s3(upstream: String) -> (String, tokio::task::JoinHandle<()>) {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let uri = format!(
        "http://127.0.0.1:{}",
        listener.local_addr().expect("addr").port()
    );
    let client = reqwest::Client::new();
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (client, upstream) = (client.clone(), upstream.clone());
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (client, upstream) = (client.clone(), upstream.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        if parts.method == hyper::Method::PUT || parts.method == hyper::Method::POST
                        {
                            let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AccessDenied</Code><Message>read-only</Message></Error>";
                            let mut r = hyper::Response::new(Full::new(bytes::Bytes::from(xml)));
                            *r.status_mut() = hyper::StatusCode::FORBIDDEN;
                            return Ok::<_, std::io::Error>(r);
                        }
                        let forward =
                            common::relay::request(&client, &upstream, &parts, body, true);
                        let answer = forward.send().await.map_err(std::io::Error::other)?;
                        let (status, headers) =
                            (answer.status().as_u16(), answer.headers().clone());
                        let bytes = answer.bytes().await.unwrap_or_default();
                        Ok(common::relay::response(status, &headers, bytes))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (uri, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifest_writes_refused_by_the_store_are_fatal_not_retried() {
    let mut h = Harness::new("readonly");
    h.ship_telemetry(0, 10).await;
    assert_eq!(h.run_until_handled(1).await.registered(), 1);
    h.ship_telemetry(1, 10).await;
    let (s3, _task) = read_only_s3(h.env.s3_endpoint.clone()).await;
    let mut config = h.config.clone();
    config.store.endpoint = Some(s3.parse().expect("url"));
    let err = wait_fatal(h.start_with(config, Default::default()).await).await;
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert!(err.message().contains("store credentials"), "{err}");
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(table.metadata().snapshots().count(), 1, "nothing appended");
}
