//! `catalog_warehouse` and `catalog_headers` on the wire: a recording front before the real REST
//! fixture sees `warehouse` on `GET /v1/config` and the extra headers on every catalog request
//! (config, loads, namespace and table creation, appends), while the registrar registers.

mod common;

use std::sync::{Arc, Mutex};

use thadam_iceberg::config::Secret;

use common::{Harness, assert_exactly_once};

/// One request the front saw: method, path, query, and the two headers under test.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    query: String,
    delegation: Option<String>,
    custom: Option<String>,
}

async fn recording_front(upstream: String) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let (listener, uri) = common::relay::listen().await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let client = reqwest::Client::new();
    common::relay::serve(listener, move |parts, body| {
        let (client, upstream, log) = (client.clone(), upstream.clone(), Arc::clone(&log));
        async move {
            let header = |name: &str| {
                parts
                    .headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string)
            };
            log.lock().expect("log").push(Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_string(),
                query: parts.uri.query().unwrap_or_default().to_string(),
                delegation: header("x-iceberg-access-delegation"),
                custom: header("x-thadam-test"),
            });
            common::relay::forward(&client, &upstream, &parts, body, false).await
        }
    });
    (uri, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warehouse_and_extra_headers_reach_the_catalog_on_every_request() {
    let mut h = Harness::new("catopts");
    let keys = h.ship_many(0, 2, 10).await;
    let (uri, seen) = recording_front(h.env.catalog_uri.clone()).await;
    let mut config = h.config_via(&uri);
    config.catalog_warehouse = Some("wh-test".into());
    config.catalog_headers = vec![
        (
            "X-Iceberg-Access-Delegation".into(),
            Secret::new("vended-credentials"),
        ),
        ("X-Thadam-Test".into(), Secret::new("abc")),
    ];
    let handle = h.start_with(config, Default::default()).await;
    Harness::finish(handle, 2).await;
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;

    let seen = seen.lock().expect("log").clone();
    let config_call = seen
        .iter()
        .find(|s| s.path.ends_with("/v1/config"))
        .expect("GET /v1/config went through the front");
    assert!(
        config_call.query.contains("warehouse=wh-test"),
        "{config_call:?}"
    );
    assert!(
        seen.iter()
            .any(|s| s.method == "POST" && s.path.contains("/tables/telemetry")),
        "the append went through the front: {seen:?}"
    );
    for s in &seen {
        assert_eq!(s.delegation.as_deref(), Some("vended-credentials"), "{s:?}");
        assert_eq!(s.custom.as_deref(), Some("abc"), "{s:?}");
    }
}
