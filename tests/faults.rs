//! Faults get the right answer (issue 12): transient statuses on every catalog call are retried
//! (honouring `Retry-After`) and counted in `thadam_iceberg_retries_total`, a retried commit
//! carries the same `Idempotency-Key` so the server's stored answer is replayed, and a
//! `catalog_uri` query string never reaches a log line or an error. Against the real REST fixture
//! through the fault proxy.

mod common;

use std::time::Duration;

use common::fault_proxy::{Fault, FaultProxy, Kind};
use common::logs::thread_logs;
use common::{Harness, assert_exactly_once, one_per_commit};
use iceberg::table::Table;
use thadam_iceberg::Tuning;
use thadam_iceberg::config::{RegistrarConfig, RetryPolicy};
use thadam_iceberg::runtime::status::RegistrarStatus;

use common::metrics::recorder;

/// The value of `thadam_iceberg_retries_total{op,cause}` (0 when absent).
fn retries(op: &str, cause: &str) -> f64 {
    common::metrics::counter(
        "thadam_iceberg_retries_total",
        &[("op", op), ("cause", cause)],
    )
}

/// A harness for `test` whose table exists (one fault-free registration) and `n` more telemetry
/// segments are shipped; returns it with the keys of all of them.
async fn registered_then_shipped(test: &str, n: u64) -> (Harness, Vec<String>) {
    let mut h = Harness::new(test);
    let mut keys = vec![h.register_one().await];
    keys.extend(h.ship_many(0, n, 10).await);
    (h, keys)
}

/// A fault proxy in front of the catalog, for the harness's table.
async fn proxy(h: &Harness) -> FaultProxy {
    FaultProxy::start(&h.env.catalog_uri, "telemetry").await
}

/// Runs a registrar on `config` with `tuning` until it has handled `n` segments.
async fn run(h: &Harness, config: RegistrarConfig, tuning: Tuning, n: u64) -> RegistrarStatus {
    Harness::finish(h.start_with(config, tuning).await, n).await
}

/// The table, once it is checked to hold each of `keys` exactly once.
async fn registered_once(h: &Harness, keys: &[String]) -> Table {
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, keys).await;
    table
}

/// A retry policy that waits `initial`, then up to `max`, without jitter.
fn fast_retry(initial: Duration, max: Duration) -> RetryPolicy {
    RetryPolicy {
        initial,
        max,
        jitter: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_on_an_append_is_waited_out_and_retried() {
    recorder();
    let before = retries("append", "status_429");
    let (h, keys) = registered_then_shipped("f429", 3).await;
    let proxy = proxy(&h).await;
    proxy.plan(Kind::Append, [Fault::RefuseRetryAfter(429, 2)]);
    let mut config = h.config_via(&proxy.uri);
    // A fast backoff, so only Retry-After can explain a 2 s pause.
    config.retry = fast_retry(Duration::from_millis(20), Duration::from_secs(5));
    run(&h, config, one_per_commit(), 4).await;

    let table = registered_once(&h, &keys).await;
    assert_eq!(table.metadata().snapshots().count(), 4);
    let log = proxy.log();
    let times = proxy.times();
    let appends: Vec<usize> = (0..log.len())
        .filter(|i| log[*i].0 == Kind::Append)
        .collect();
    assert!(appends.len() >= 4, "{log:?}");
    assert_eq!(log[appends[0]].1, Fault::RefuseRetryAfter(429, 2));
    let waited = times[appends[1]] - times[appends[0]];
    assert!(
        waited >= Duration::from_millis(1900),
        "the next append waited for Retry-After: {waited:?}"
    );
    assert!(
        retries("append", "status_429") >= before + 1.0,
        "the retry is counted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_408_on_a_load_is_retried() {
    recorder();
    let before = retries("load", "status_408");
    let (h, keys) = registered_then_shipped("f408", 2).await;
    let proxy = proxy(&h).await;
    proxy.plan(Kind::Load, [Fault::Refuse(408)]);
    run(&h, h.config_via(&proxy.uri), Tuning::default(), 3).await;

    registered_once(&h, &keys).await;
    assert!(proxy.seen(Kind::Load) >= 2, "{:?}", proxy.log());
    assert!(retries("load", "status_408") >= before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_on_a_schema_commit_is_retried() {
    recorder();
    let before = retries("schema_commit", "status_503");
    let (mut h, mut keys) = registered_then_shipped("f503", 0).await;
    // One more column, so its first segment needs a schema commit.
    let batch = common::extended_batch(1, 10);
    keys.push(h.ship("telemetry", &batch).await);
    let proxy = proxy(&h).await;
    proxy.plan(Kind::Schema, [Fault::Refuse(503)]);
    run(&h, h.config_via(&proxy.uri), Tuning::default(), 2).await;

    let table = registered_once(&h, &keys).await;
    assert!(
        table
            .metadata()
            .current_schema()
            .field_by_name("extra")
            .is_some(),
        "the schema change landed"
    );
    assert_eq!(proxy.seen(Kind::Schema), 2, "{:?}", proxy.log());
    assert!(retries("schema_commit", "status_503") >= before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_502_on_a_table_create_is_retried_and_the_table_made_once() {
    recorder();
    let before = retries("create", "status_502");
    let mut h = Harness::with(
        "f502",
        common::Options {
            create_table: true,
            ..common::Options::default()
        },
    );
    let keys = h.ship_many(0, 2, 10).await;
    let proxy = proxy(&h).await;
    // The catalog registers the table, but the registrar hears 502.
    proxy.plan(Kind::Create, [Fault::ApplyThenFail(502)]);
    run(&h, h.config_via(&proxy.uri), Tuning::default(), 2).await;

    registered_once(&h, &keys).await;
    assert!(proxy.seen(Kind::Create) >= 2, "{:?}", proxy.log());
    assert!(retries("create", "status_502") >= before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_append_answer_is_resent_with_the_same_key_and_replayed() {
    let (h, keys) = registered_then_shipped("fidem", 3).await;
    let proxy = proxy(&h).await;
    proxy.advertise_idempotency();
    proxy.store_by_idempotency_key();
    // Applied by the fixture, answer lost; then applied, answered 503.
    proxy.plan(
        Kind::Append,
        [Fault::ApplyThenDrop, Fault::ApplyThenFail(503)],
    );
    let status = run(&h, h.config_via(&proxy.uri), one_per_commit(), 4).await;

    let table = registered_once(&h, &keys).await;
    assert_eq!(
        table.metadata().snapshots().count(),
        4,
        "one snapshot per segment"
    );
    let sent: Vec<String> = proxy
        .idempotency_keys()
        .into_iter()
        .map(|k| k.expect("a key on every commit"))
        .collect();
    // 3 appends, 2 of them sent twice: the resend carries the key of the same body.
    assert_eq!(sent.len(), 5, "{:?}", proxy.log());
    assert_eq!(sent[0], sent[1], "resent with the same key");
    assert_eq!(sent[2], sent[3], "resent with the same key");
    assert_ne!(sent[1], sent[2], "a new body has a new key");
    assert_ne!(sent[3], sent[4]);
    assert_eq!(proxy.replayed(), vec![sent[0].clone(), sent[2].clone()]);
    // The replayed answers were enough: no reload to reconcile, nothing found already there.
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped), (3, 1), "{t:?}");
}

#[tokio::test]
async fn a_catalog_uri_query_string_never_reaches_a_log_or_an_error() {
    let h = Harness::new("redact");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let mut config = h.config.clone();
    config.catalog_uri = format!("http://127.0.0.1:{port}/cat?token=s3cr3t")
        .parse()
        .expect("url");
    config.retry = fast_retry(Duration::from_millis(50), Duration::from_millis(200));
    let (logs, _guard) = thread_logs(tracing::Level::DEBUG);

    // A one-shot connection: the error itself.
    let err = thadam_iceberg::testing::connect(&config)
        .await
        .expect_err("nothing listens there");
    assert!(!err.to_string().contains("s3cr3t"), "{err}");
    assert!(!format!("{err:?}").contains("s3cr3t"), "{err:?}");
    // The registrar retrying the connection: its warnings.
    let started = tokio::time::timeout(
        Duration::from_secs(2),
        thadam_iceberg::Registrar::builder(config).start(),
    )
    .await;
    assert!(started.is_err(), "it keeps retrying an unreachable catalog");
    let text = logs.text();
    assert!(
        text.contains("connecting to the catalog failed"),
        "the retries were logged: {text}"
    );
    assert!(!text.contains("s3cr3t"), "{text}");
}

#[tokio::test]
async fn a_catalog_that_stops_answering_is_reported_while_the_request_waits() {
    let (h, _) = registered_then_shipped("fslow", 0).await;
    let proxy = proxy(&h).await;
    // A SIGSTOPped catalog: the connection is accepted, the answer never comes.
    proxy.plan(Kind::Load, [Fault::Hang]);
    // The fmt subscriber's default level.
    let (logs, _guard) = thread_logs(tracing::Level::INFO);
    let handle = h
        .start_with(h.config_via(&proxy.uri), Tuning::default())
        .await;
    let warned = tokio::time::timeout(Duration::from_secs(45), async {
        loop {
            let text = logs.text();
            if text.contains("no answer after 30s") {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("a warning within 30 s of the request (hang guard 45 s)");
    assert!(
        warned.contains("WARN") && warned.contains("GET"),
        "{warned}"
    );
    handle.stop();
    handle.wait().await.expect("a clean stop");
}
