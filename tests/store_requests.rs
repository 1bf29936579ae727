//! What a lone registrar's registrations cost on the store, against the real servers:
//! `thadam_iceberg_store_requests_total{kind}` over a run of N segments, one commit each.
//!
//! One test in a binary of its own: the counter has no `table` label (a client serves every
//! table of its bucket), and the recorder is the process's, so any other test running beside it
//! would add its requests.

mod common;

use common::{Harness, assert_exactly_once, one_per_commit};

const KINDS: [&str; 7] = ["put", "copy", "list", "get", "head", "delete", "other"];

fn requests() -> Vec<(&'static str, f64)> {
    KINDS
        .iter()
        .map(|kind| {
            (
                *kind,
                common::metrics::counter("thadam_iceberg_store_requests_total", &[("kind", kind)]),
            )
        })
        .collect()
}

fn since(before: &[(&'static str, f64)]) -> Vec<(&'static str, f64)> {
    requests()
        .into_iter()
        .zip(before)
        .map(|((kind, after), (_, before))| (kind, after - before))
        .collect()
}

fn of(counts: &[(&str, f64)], kind: &str) -> f64 {
    counts
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0.0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_registrar_s_requests_per_segment_are_counted_by_kind() {
    common::metrics::recorder();
    let mut h = Harness::new("requests");

    // The client itself, on the real S3 server: each call one request of its kind.
    let probe = object_store::path::Path::from(format!("{}/probe/a", h.prefix));
    let before = requests();
    h.store.put(&probe, "x".into()).await.expect("put");
    h.store.get_range(&probe, 0..1).await.expect("get");
    h.store.head(&probe).await.expect("head");
    let listed = common::keys_under(h.store.as_ref(), &format!("{}/probe", h.prefix)).await;
    assert_eq!(listed.len(), 1);
    h.store.delete(&probe).await.expect("delete");
    let counted = since(&before);
    for (kind, want) in [
        ("put", 1.0),
        ("get", 1.0),
        ("head", 1.0),
        ("list", 1.0),
        ("delete", 1.0),
    ] {
        assert_eq!(of(&counted, kind), want, "{kind}: {counted:?}");
    }

    // A registrar that created the table, restarted with N segments waiting, one per commit.
    let first = h.register_one().await;
    const N: u64 = 6;
    let mut keys = vec![first];
    keys.extend(h.ship_many(0, N, 10).await);
    let before = requests();
    Harness::finish(
        h.start_with(h.config.clone(), one_per_commit()).await,
        N + 1,
    )
    .await;
    let counted = since(&before);
    println!("requests for {N} segments, one commit each: {counted:?}");
    let iceberg = h.table("telemetry").await.expect("table");
    assert_exactly_once(&iceberg, &h.env.bucket, &keys).await;

    let n = N as f64;
    // Each commit writes its manifest and its manifest list (the catalog writes metadata.json
    // with its own client): two PUTs a segment, nothing more.
    assert_eq!(of(&counted, "put"), 2.0 * n, "{counted:?}");
    // A footer is one ranged GET (its last 64 KiB hold it), and the restart reads the table's
    // manifest list once (measured: 7 for 6); one more is room for a retry.
    let gets = of(&counted, "get");
    assert!(gets >= n + 1.0 && gets <= n + 2.0, "{counted:?}");
    // A lone registrar lists the fleet's intents once, at its first commit.
    assert_eq!(of(&counted, "list"), 1.0, "{counted:?}");
    for kind in ["copy", "head", "delete", "other"] {
        assert_eq!(of(&counted, kind), 0.0, "{kind}: {counted:?}");
    }
}
