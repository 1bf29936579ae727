//! Vended credentials against the real servers: a front before the REST fixture injects S3
//! credentials into `loadTable` answers (`GET .../tables/{table}`), as Polaris, Lakekeeper,
//! Nessie or Unity do, while the registrar's `store` section has no keys and the process has no
//! ambient AWS credentials. The S3 server checks every request's SigV4 signature and refuses
//! anonymous ones, so a registration that lands was signed with the credentials the front vended.
//!
//! The table is created first by a registrar with store keys: a catalog vends credentials only
//! for tables that exist (creation writes the first metadata file before registering it).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use thadam_iceberg::ErrorCode;
use thadam_iceberg::config::RegistrarConfig;

use common::{Harness, assert_exactly_once, read_all, row_count};

/// What the front puts into the n-th `loadTable` answer of the table (counting from 0).
#[derive(Clone)]
enum Vend {
    /// In the table's `config`.
    Config(Keys),
    /// As `storage-credentials`: `(prefix, keys)`, and also `config` keys (checked after them).
    Prefixed(Vec<(String, Keys)>, Option<Keys>),
}

#[derive(Clone)]
struct Keys {
    id: String,
    secret: String,
    token: Option<String>,
    expires_at_ms: Option<i64>,
}

impl Keys {
    /// The S3 server's own keys: they sign requests it accepts.
    fn right() -> Keys {
        Keys {
            id: std::env::var("THADAM_TEST_S3_ACCESS_KEY").expect("THADAM_TEST_S3_ACCESS_KEY"),
            secret: std::env::var("THADAM_TEST_S3_SECRET_KEY").expect("THADAM_TEST_S3_SECRET_KEY"),
            token: None,
            expires_at_ms: None,
        }
    }

    /// Keys the S3 server does not know.
    fn wrong() -> Keys {
        Keys {
            id: "AKIDVENDEDWRONG0000".into(),
            secret: "wrong-vended-secret-key-0000".into(),
            token: None,
            expires_at_ms: None,
        }
    }

    fn with_token(mut self, token: &str) -> Keys {
        self.token = Some(token.into());
        self
    }

    fn expiring_at(mut self, ms: i64) -> Keys {
        self.expires_at_ms = Some(ms);
        self
    }

    fn config(&self) -> serde_json::Map<String, Value> {
        let mut c = serde_json::Map::new();
        c.insert("s3.access-key-id".into(), json!(self.id));
        c.insert("s3.secret-access-key".into(), json!(self.secret));
        if let Some(t) = &self.token {
            c.insert("s3.session-token".into(), json!(t));
        }
        if let Some(ms) = self.expires_at_ms {
            c.insert(
                "s3.session-token-expires-at-ms".into(),
                json!(ms.to_string()),
            );
        }
        c
    }
}

type Plan = Arc<dyn Fn(usize) -> Vend + Send + Sync>;

/// A front before the REST fixture that rewrites the answers to `GET .../tables/{table}`
/// according to `plan`, and counts them.
async fn vending_front(upstream: String, table: &str, plan: Plan) -> (String, Arc<AtomicUsize>) {
    let (listener, uri) = common::relay::listen().await;
    let loads = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&loads);
    let suffix = format!("/tables/{table}");
    let client = reqwest::Client::new();
    common::relay::serve(listener, move |parts, body| {
        let (client, upstream, counter) = (client.clone(), upstream.clone(), Arc::clone(&counter));
        let (plan, suffix) = (Arc::clone(&plan), suffix.clone());
        async move {
            let answer = common::relay::request(&client, &upstream, &parts, body, false)
                .send()
                .await
                .map_err(std::io::Error::other)?;
            let (status, headers) = (answer.status().as_u16(), answer.headers().clone());
            let mut bytes = answer.bytes().await.unwrap_or_default();
            let is_load = parts.method == hyper::Method::GET && parts.uri.path().ends_with(&suffix);
            if is_load && status == 200 {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                let mut doc: Value =
                    serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
                inject(&mut doc, &plan(n));
                bytes = serde_json::to_vec(&doc)
                    .map_err(std::io::Error::other)?
                    .into();
            }
            Ok(common::relay::response(status, &headers, bytes))
        }
    });
    (uri, loads)
}

fn inject(doc: &mut Value, vend: &Vend) {
    let config = doc
        .as_object_mut()
        .expect("a loadTable answer is an object")
        .entry("config")
        .or_insert_with(|| json!({}));
    let config = config.as_object_mut().expect("config is an object");
    // Whatever keys the fixture itself sent are not what this test is about.
    for key in [
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
    ] {
        config.remove(key);
    }
    match vend {
        Vend::Config(keys) => config.extend(keys.config()),
        Vend::Prefixed(list, fallback) => {
            if let Some(keys) = fallback {
                config.extend(keys.config());
            }
            let creds: Vec<Value> = list
                .iter()
                .map(|(prefix, keys)| json!({"prefix": prefix, "config": keys.config()}))
                .collect();
            doc["storage-credentials"] = Value::Array(creds);
        }
    }
}

/// A harness whose table exists (created by a registrar with store keys), with `n` more
/// segments shipped; returns it and every key the table must end up with.
async fn table_with_backlog(test: &str, n: u64) -> (Harness, Vec<String>) {
    common::assert_no_ambient_aws();
    let mut h = Harness::new(test);
    let mut keys = vec![h.register_one().await];
    keys.extend(h.ship_many(0, n, 10).await);
    (h, keys)
}

/// The harness's config through `front`, with a `store` that has no keys.
fn keyless_via(h: &Harness, front: &str) -> RegistrarConfig {
    let mut config = h.config_via(front);
    config.store.access_key_id = None;
    config.store.secret_access_key = None;
    config
}

/// Runs a keyless registrar through a front vending by `plan` until it has handled `n`
/// segments; returns how many loads the front answered.
async fn register_through(h: &Harness, n: u64, plan: Plan) -> usize {
    let (front, loads) = vending_front(h.env.catalog_uri.clone(), "telemetry", plan).await;
    let handle = h
        .start_with(keyless_via(h, &front), Default::default())
        .await;
    Harness::finish(handle, n).await;
    loads.load(Ordering::SeqCst)
}

async fn assert_registered(h: &Harness, keys: &[String]) {
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, keys).await;
    // Five rows of the segment that created the table, ten of each other.
    let rows = 5 + 10 * (keys.len() - 1);
    assert_eq!(row_count(&read_all(&table).await), rows);
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_vended_in_the_table_config_are_used_when_the_store_has_no_keys() {
    let (h, keys) = table_with_backlog("vendcfg", 3).await;
    // A session token rides along where the S3 server ignores it (s3s-fs). SeaweedFS checks a
    // session token against its own STS and refuses a made-up one (which shows it is sent), so
    // there the keys come alone.
    let token = (std::env::var("THADAM_TEST_S3_SERVER").as_deref() == Ok("s3s-fs"))
        .then_some("vended-session-token");
    let plan: Plan = Arc::new(move |_| {
        let keys = Keys::right().expiring_at(now_ms() + 3_600_000);
        Vend::Config(match token {
            Some(token) => keys.with_token(token),
            None => keys,
        })
    });
    let loads = register_through(&h, 3, plan).await;
    assert_registered(&h, &keys).await;
    assert_eq!(loads, 1, "credentials an hour from expiry are not renewed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_matching_storage_credential_prefix_wins_over_shorter_ones_and_config() {
    let (h, keys) = table_with_backlog("vendpfx", 3).await;
    let bucket = h.env.bucket.clone();
    let short = format!("s3://{bucket}/");
    let long = format!("s3://{bucket}/{}/", h.prefix);
    let elsewhere = format!("s3://{bucket}/{}-other/", h.prefix);
    let plan: Plan = Arc::new(move |_| {
        Vend::Prefixed(
            vec![
                (short.clone(), Keys::wrong()),
                (long.clone(), Keys::right()),
                (elsewhere.clone(), Keys::wrong()),
            ],
            Some(Keys::wrong()),
        )
    });
    let loads = register_through(&h, 3, plan).await;
    assert_registered(&h, &keys).await;
    assert_eq!(loads, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_credentials_are_renewed_by_reloading_the_table_before_use() {
    let (h, keys) = table_with_backlog("vendexp", 3).await;
    // The first answer's keys are ones S3 accepts (the S3 server does not know their expiry), so only
    // the expiry can make the registrar reload: without renewal it would load once.
    let plan: Plan = Arc::new(|n| match n {
        0 => Vend::Config(Keys::right().expiring_at(now_ms() - 1_000)),
        _ => Vend::Config(Keys::right().expiring_at(now_ms() + 3_600_000)),
    });
    let loads = register_through(&h, 3, plan).await;
    assert_registered(&h, &keys).await;
    assert_eq!(
        loads, 2,
        "one load at start and one renewal of the expired keys"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_s3_refuses_for_footer_reads_are_reloaded_once_and_the_fresh_ones_used() {
    let (h, keys) = table_with_backlog("vendref", 3).await;
    let plan: Plan = Arc::new(|n| match n {
        0 => Vend::Config(Keys::wrong()),
        _ => Vend::Config(Keys::right()),
    });
    let loads = register_through(&h, 3, plan).await;
    assert_registered(&h, &keys).await;
    assert_eq!(
        loads, 2,
        "one load at start, one reload for all the refused footer reads together"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_s3_refuses_for_manifest_writes_are_reloaded_once_and_the_fresh_ones_used() {
    let (h, keys) = table_with_backlog("vendman", 2).await;
    let bucket = h.env.bucket.clone();
    let table_dir = format!(
        "s3://{bucket}/{}/thadam/v1/{}/telemetry",
        h.prefix, h.pipeline
    );
    let (data, metadata) = (
        format!("{table_dir}/data/"),
        format!("{table_dir}/metadata"),
    );
    // Footer reads (data/) always get good keys; the table's own files (metadata/) get wrong
    // ones in the first answer only.
    let plan: Plan = Arc::new(move |n| {
        let for_metadata = if n == 0 { Keys::wrong() } else { Keys::right() };
        Vend::Prefixed(
            vec![
                (data.clone(), Keys::right()),
                (metadata.clone(), for_metadata),
            ],
            None,
        )
    });
    let loads = register_through(&h, 2, plan).await;
    assert_registered(&h, &keys).await;
    assert_eq!(
        loads, 2,
        "one load at start, one reload after the refused append"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_refused_again_after_a_reload_stop_the_registrar_with_auth_failed() {
    let (h, _) = table_with_backlog("vendbad", 2).await;
    let plan: Plan = Arc::new(|_| Vend::Config(Keys::wrong().with_token("never-valid")));
    let (front, loads) = vending_front(h.env.catalog_uri.clone(), "telemetry", plan).await;
    let handle = h
        .start_with(keyless_via(&h, &front), Default::default())
        .await;
    let err = tokio::time::timeout(Duration::from_secs(120), handle.wait())
        .await
        .expect("the registrar stopped in time (hang guard)")
        .expect_err("the registrar stops when even fresh vended credentials are refused");
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    let text = err.to_string();
    assert!(text.contains("vended by the catalog"), "{text}");
    assert!(
        text.contains(&format!("{}.telemetry", h.namespace.join("."))),
        "{text}"
    );
    for secret in [
        "AKIDVENDEDWRONG0000",
        "wrong-vended-secret-key-0000",
        "never-valid",
    ] {
        assert!(
            !text.contains(secret),
            "the error shows a vended secret: {text}"
        );
    }
    assert_eq!(
        loads.load(Ordering::SeqCst),
        2,
        "one load at start and exactly one reload for fresh credentials"
    );
    // Nothing but the table-creating segment was registered.
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(common::data_files(&table).await.len(), 1);
}

/// Watches this process's own sockets (TCP and UDP, v4 and v6, from `/proc`) while it runs and
/// records every peer that is not loopback: proof that nothing asked the instance metadata
/// service (169.254.169.254) or any other address.
struct PeerWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl PeerWatch {
    fn start() -> PeerWatch {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !flag.load(Ordering::SeqCst) {
                for peer in foreign_peers() {
                    if !seen.contains(&peer) {
                        seen.push(peer);
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        PeerWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// The non-loopback peers seen.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .map(|t| t.join().expect("watcher"))
            .unwrap_or_default()
    }
}

/// The remote addresses of this process's sockets that are neither loopback nor unset.
fn foreign_peers() -> Vec<String> {
    let mut inodes = std::collections::HashSet::new();
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                let target = target.to_string_lossy().to_string();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|t| t.strip_suffix(']'))
                {
                    inodes.insert(inode.to_string());
                }
            }
        }
    }
    let mut peers = Vec::new();
    for table in ["tcp", "tcp6", "udp", "udp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/self/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(inode)) = (fields.get(2), fields.get(9)) else {
                continue;
            };
            if !inodes.contains(*inode) {
                continue;
            }
            let ip = remote.split(':').next().unwrap_or_default();
            let allowed = [
                "00000000",
                "0100007F",
                "00000000000000000000000000000000",
                "00000000000000000000000001000000",
                "0000000000000000FFFF00000100007F",
            ];
            if !allowed.contains(&ip) {
                peers.push(format!("{table} {remote}"));
            }
        }
    }
    peers
}

/// A registrar whose `store` has no keys, against the REST fixture (which vends nothing): stops
/// with `auth.failed` at once, naming the keys, before any S3 request; no address but loopback
/// is ever reached (no instance metadata service).
async fn assert_keyless_stops_at_once(h: &Harness, what: &str) {
    let mut config = h.config.clone();
    config.store.access_key_id = None;
    config.store.secret_access_key = None;
    let watch = PeerWatch::start();
    let started = std::time::Instant::now();
    let handle = h.start_with(config, Default::default()).await;
    let err = tokio::time::timeout(Duration::from_secs(60), handle.wait())
        .await
        .expect("the registrar stopped in time (hang guard)")
        .expect_err("a keyless store with nothing from the catalog stops the registrar");
    let took = started.elapsed();
    let foreign = watch.finish();
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{what}: {err}");
    let text = err.to_string();
    for named in [
        "store.access_key_id",
        "store.secret_access_key",
        "store.credentials: instance_metadata",
        "X-Iceberg-Access-Delegation",
        "s3.remote-signing-enabled",
    ] {
        assert!(text.contains(named), "{what}: {named} not in {text}");
    }
    assert!(
        text.contains(&format!("{}.telemetry", h.namespace.join("."))),
        "{what}: {text}"
    );
    assert!(
        took < Duration::from_secs(10),
        "{what}: stopped after {took:?}"
    );
    assert!(
        foreign.is_empty(),
        "{what}: the registrar reached addresses other than loopback: {foreign:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_keys_stops_at_once_when_the_catalog_vends_nothing() {
    common::assert_no_ambient_aws();
    {
        // The watcher sees a socket aimed at the metadata service (a connected UDP socket
        // sends nothing).
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").expect("bind");
        probe.connect("169.254.169.254:80").expect("connect");
        let peers = foreign_peers();
        assert!(
            peers.iter().any(|p| p.contains("FEA9FEA9:0050")),
            "the watcher misses {peers:?}"
        );
    }
    // The table exists (created with keys); the fixture vends nothing for it.
    let (h, _) = table_with_backlog("vendnone", 1).await;
    assert_keyless_stops_at_once(&h, "existing table").await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(
        common::data_files(&table).await.len(),
        1,
        "nothing more registered"
    );

    // A table that does not exist yet cannot be created without store credentials.
    let mut h = Harness::new("vendnew");
    h.ship_telemetry(0, 10).await;
    assert_keyless_stops_at_once(&h, "absent table").await;
    assert!(h.table("telemetry").await.is_none(), "nothing was created");

    // --check cannot list the bucket without keys: it says it does not know, never `ok` or a
    // misleading outage, and asks no metadata service either.
    let mut config = h.config.clone();
    config.store.access_key_id = None;
    config.store.secret_access_key = None;
    let watch = PeerWatch::start();
    let mut report = thadam_iceberg::ops::check::CheckReport::default();
    thadam_iceberg::ops::check::check_registrar(&config, &mut report).await;
    assert!(watch.finish().is_empty(), "--check reached beyond loopback");
    let bucket = report
        .lines
        .iter()
        .find(|l| l.check == "bucket readable")
        .expect("a bucket line");
    assert_eq!(
        bucket.verdict,
        thadam_iceberg::ops::check::Verdict::CannotTell,
        "{}",
        bucket.detail
    );
    assert!(
        bucket.detail.contains("store has no keys"),
        "{}",
        bucket.detail
    );
}
