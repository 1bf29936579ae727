//! Bounded memory under a backlog: the feed is read only as fast as segments leave
//! (`memory.segments`), and a table's footers held plus reads in flight stay within its footer
//! window. Both are observed while the first commit is held back by a hook, when nothing can
//! leave: without the bounds the registrar takes the whole backlog in (the feed) or reads every
//! footer (the window).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{Harness, Options, assert_exactly_once};
use iceberg::table::Table;
use thadam_iceberg::Registrar;
use thadam_iceberg::Tuning;
use thadam_iceberg::protocol::feed::{SegmentFeed, SegmentHistory};
use thadam_iceberg::protocol::segment::UploadedSegment;
use thadam_iceberg::protocol::segment_log::SegmentLogTail;
use thadam_iceberg::testing::BeforeAppend;
use thadam_iceberg::testing::ReadySegment;
use thadam_iceberg::testing::TableName;

/// The segment log, counting the records the registrar has taken from it.
struct CountingFeed {
    inner: SegmentLogTail,
    taken: Arc<AtomicU64>,
}

#[async_trait]
impl SegmentFeed for CountingFeed {
    async fn next(&mut self) -> thadam_iceberg::Result<Option<UploadedSegment>> {
        let next = self.inner.next().await?;
        if next.is_some() {
            self.taken.fetch_add(1, Ordering::SeqCst);
        }
        Ok(next)
    }

    fn history(&self) -> Option<Arc<dyn SegmentHistory>> {
        self.inner.history()
    }
}

/// Holds the first append back for `hold`, sampling `probe` meanwhile; records the highest value.
struct HoldFirstCommit<F: Fn() -> u64 + Send + Sync> {
    probe: F,
    hold: Duration,
    calls: AtomicU64,
    highest: AtomicU64,
}

#[async_trait]
impl<F: Fn() -> u64 + Send + Sync> BeforeAppend for HoldFirstCommit<F> {
    async fn before_append(&self, _: &TableName, _: &Table, _: &[ReadySegment]) {
        if self.calls.fetch_add(1, Ordering::SeqCst) > 0 {
            return;
        }
        let until = tokio::time::Instant::now() + self.hold;
        while tokio::time::Instant::now() < until {
            self.highest.fetch_max((self.probe)(), Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.highest.fetch_max((self.probe)(), Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_is_read_only_as_fast_as_segments_leave() {
    const BUDGET: u64 = 8;
    let mut h = Harness::with(
        "backpressure",
        Options {
            extra_iceberg_yaml: format!("      memory: {{ segments: {BUDGET} }}"),
            ..Options::default()
        },
    );
    assert_eq!(h.config.memory.segments, BUDGET as usize);
    let keys = h.ship_many(0, 40, 5).await;
    let taken = Arc::new(AtomicU64::new(0));
    let probe_taken = Arc::clone(&taken);
    let hook = Arc::new(HoldFirstCommit {
        probe: move || probe_taken.load(Ordering::SeqCst),
        hold: Duration::from_millis(1500),
        calls: AtomicU64::new(0),
        highest: AtomicU64::new(0),
    });
    let mut tuning = Tuning {
        max_batch: 4,
        ..Tuning::default()
    };
    tuning.hooks.before_append = Some(hook.clone());
    let feed = CountingFeed {
        inner: SegmentLogTail::open(&h.config.source.catalog),
        taken: Arc::clone(&taken),
    };
    let handle = Registrar::builder(h.config.clone())
        .feed(feed)
        .tuning(tuning)
        .start()
        .await
        .expect("registrar starts");
    let status = Harness::finish(handle, keys.len() as u64).await;

    // While the first commit was held, nothing left: the feed gave out exactly the budget.
    assert_eq!(
        hook.highest.load(Ordering::SeqCst),
        BUDGET,
        "records taken from the feed while no segment could leave"
    );
    assert_eq!(taken.load(Ordering::SeqCst), keys.len() as u64);
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.skipped, t.backlog), (40, 0, 0));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
    // Snapshots stay within the batch limit even though the budget let 8 in at once.
    assert!(
        table.metadata().snapshots().all(|s| s
            .summary()
            .additional_properties
            .get("thadam.segments")
            .is_none_or(|n| n.parse::<usize>().is_ok_and(|n| n <= 4))),
        "no snapshot above max_batch"
    );
}

/// A front before the S3 server that records which data objects were read (GET), keeping the
/// client's Host so signatures still verify.
async fn reads_front(upstream: String) -> (String, Arc<Mutex<BTreeSet<String>>>) {
    let (listener, uri) = common::relay::listen().await;
    let read = Arc::new(Mutex::new(BTreeSet::new()));
    let log = Arc::clone(&read);
    let client = reqwest::Client::new();
    common::relay::serve(listener, move |parts, body| {
        let (client, upstream, log) = (client.clone(), upstream.clone(), Arc::clone(&log));
        async move {
            let path = parts.uri.path().to_string();
            if parts.method == hyper::Method::GET && path.ends_with(".parquet") {
                log.lock().expect("log").insert(path);
            }
            common::relay::forward(&client, &upstream, &parts, body, true).await
        }
    });
    (uri, read)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn footers_that_arrived_count_against_the_footer_window() {
    const WINDOW: u64 = 4;
    let mut h = Harness::new("footwin");
    let keys = h.ship_many(0, 30, 5).await;
    let (front, read) = reads_front(h.env.s3_endpoint.clone()).await;
    let mut config = h.config.clone();
    config.store.endpoint = Some(front.parse().expect("url"));
    let probe_read = Arc::clone(&read);
    let hook = Arc::new(HoldFirstCommit {
        probe: move || probe_read.lock().expect("read").len() as u64,
        hold: Duration::from_millis(1500),
        calls: AtomicU64::new(0),
        highest: AtomicU64::new(0),
    });
    let mut tuning = Tuning {
        max_batch: 2,
        reads_per_table: WINDOW as usize,
        ..Tuning::default()
    };
    tuning.hooks.before_append = Some(hook.clone());
    let status = Harness::finish(h.start_with(config, tuning).await, keys.len() as u64).await;

    // The first batch (2 footers) was held while its commit waited: with reads in flight they
    // filled the window, and no other footer was read. (Counting reads in flight only, the
    // committer asks for more each time a footer arrives.)
    let highest = hook.highest.load(Ordering::SeqCst);
    assert!(
        (2..=WINDOW).contains(&highest),
        "{highest} data objects read while the first commit was held (window {WINDOW})"
    );
    assert_eq!(
        read.lock().expect("read").len(),
        keys.len(),
        "every footer read"
    );
    let t = status.tables.values().next().expect("status");
    assert_eq!((t.registered, t.backlog), (30, 0));
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, &keys).await;
}
