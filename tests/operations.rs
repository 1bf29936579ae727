//! Operating the registrar, against the real REST fixture and S3 server: the standalone runner
//! (`examples/registrar`, run as a child process so its metrics recorder is its own) serves
//! `/metrics` that match what was shipped, `/readyz` follows the catalog's verdict on our token,
//! SIGTERM in the middle of a backlog exits 0 and a restart loses and doubles nothing, and
//! `--check` names each failing check.
//!
//! The runner binary is built by `cargo test --all-targets` (what `scripts/test` runs) or
//! `cargo build --examples`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::forward::reserve_port;
use common::{Harness, data_file_list, unique};
use thadam_iceberg::Tuning;
use thadam_iceberg::config::{CatalogAuth, Secret};
use thadam_iceberg::ops::health::Health;
use thadam_iceberg::ops::http::{self, Endpoints};
use thadam_iceberg::protocol::segment_log::{LogEntry, SegmentLogReader, SegmentLogTail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const HANG_GUARD: Duration = Duration::from_secs(60);
const RIGHT_TOKEN: &str = "ops-right-token";

// ---------------------------------------------------------------------------------------------
// The runner as a child process.

use common::example_binary;

struct Runner {
    child: Child,
    /// `http://127.0.0.1:PORT` of the endpoints, when started with `--metrics-addr`.
    base: Option<String>,
    log: PathBuf,
}

impl Runner {
    /// Starts the runner; with `--metrics-addr` among `args`, waits for its address.
    async fn start(dir: &Path, args: &[&str]) -> Runner {
        let log = dir.join(format!("{}.log", unique("runner")));
        let stderr = std::fs::File::create(&log).expect("runner log");
        let mut child = Command::new(example_binary("registrar"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the runner");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut base = None;
        if args.contains(&"--metrics-addr") {
            let line = tokio::time::timeout(HANG_GUARD, lines.next_line())
                .await
                .expect("the runner printed its address (hang guard)")
                .expect("read stdout");
            let line = line.unwrap_or_else(|| panic!("no address; log:\n{}", read(&log)));
            let addr = line
                .strip_prefix("listening on ")
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
            base = Some(addr.to_string());
        }
        // Drain the rest so the runner never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Runner { child, base, log }
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}{path}",
            self.base.as_deref().expect("started with --metrics-addr")
        )
    }

    async fn metrics(&self) -> String {
        get(&self.url("/metrics")).await.1
    }

    fn sigterm(&self) {
        let pid = self.child.id().expect("runner still running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "kill -TERM {pid}");
    }

    /// Waits for the exit code.
    async fn exit_code(mut self) -> (i32, String) {
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the runner did not exit (hang guard); log:\n{}",
                    read(&self.log)
                )
            })
            .expect("wait");
        (status.code().unwrap_or(-1), read(&self.log))
    }
}

/// Runs the runner to completion; returns (exit code, stdout, stderr).
async fn run_to_end(args: &[&str]) -> (i32, String, String) {
    let output = tokio::time::timeout(
        HANG_GUARD,
        Command::new(example_binary("registrar"))
            .args(args)
            .output(),
    )
    .await
    .expect("the runner finished (hang guard)")
    .expect("run the runner");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// Polls until `done` holds for the latest scrape (hang guard); returns that scrape.
async fn scrape_until(runner: &Runner, mut done: impl FnMut(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    loop {
        let text = runner.metrics().await;
        if done(&text) {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics never reached the expected state (hang guard); last scrape:\n{text}\nlog:\n{}",
            read(&runner.log)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Prometheus text exposition, parsed.

/// The value of the series `name{labels}` (labels must match exactly, in any order).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            if series_name != name {
                return None;
            }
            let mut parsed: Vec<(&str, &str)> = series_labels
                .split(',')
                .filter(|p| !p.is_empty())
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k, v.trim_matches('"')))
                .collect();
            let mut wanted = labels.to_vec();
            parsed.sort();
            wanted.sort();
            (parsed == wanted).then(|| value.parse::<f64>().ok())?
        })
        .next()
}

fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(text, name, labels).unwrap_or_else(|| panic!("no sample {name}{labels:?} in:\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// Configs the runner reads.

struct Yaml<'a> {
    catalog_uri: &'a str,
    token: Option<&'a str>,
    bucket: &'a str,
    unsigned: &'a str,
    create_table: bool,
}

impl<'a> Yaml<'a> {
    fn good(h: &'a Harness) -> Yaml<'a> {
        Yaml {
            catalog_uri: &h.env.catalog_uri,
            token: None,
            bucket: &h.env.bucket,
            unsigned: "signed",
            create_table: true,
        }
    }

    /// Writes the config next to the harness's segment catalog; returns its path.
    fn write(&self, h: &Harness, name: &str) -> PathBuf {
        let token = self
            .token
            .map(|t| format!("      catalog_token: {t}\n"))
            .unwrap_or_default();
        let yaml = common::render_yaml(&common::YamlParts {
            dir: h.dir.path(),
            unsigned: self.unsigned,
            datasets: &["telemetry"],
            pipeline: &h.pipeline,
            bucket: self.bucket,
            prefix: &h.prefix,
            catalog_uri: self.catalog_uri,
            namespace: &h.namespace.join("."),
            create_table: self.create_table,
            s3_endpoint: &h.env.s3_endpoint,
            extra_iceberg_yaml: &token,
        });
        let path = h.dir.path().join(name);
        std::fs::write(&path, yaml).expect("write config");
        path
    }
}

// ---------------------------------------------------------------------------------------------
// A front for the REST fixture: checks the bearer token, and can hold append commits.

struct FrontState {
    upstream: String,
    token: Option<String>,
    /// Commits forwarded before the front starts holding them (never answered, never applied).
    pass_commits: Option<usize>,
    commits: AtomicUsize,
    held: AtomicUsize,
    http: reqwest::Client,
}

struct Front {
    uri: String,
    state: Arc<FrontState>,
    task: tokio::task::JoinHandle<()>,
}

impl Front {
    async fn start(upstream: &str, token: Option<&str>, pass_commits: Option<usize>) -> Front {
        let state = Arc::new(FrontState {
            upstream: upstream.trim_end_matches('/').to_string(),
            token: token.map(str::to_string),
            pass_commits,
            commits: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            http: reqwest::Client::new(),
        });
        let app = axum::Router::new()
            .fallback(front)
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind front");
        let uri = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Front { uri, state, task }
    }

    fn held(&self) -> usize {
        self.state.held.load(Ordering::SeqCst)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn front(State(s): State<Arc<FrontState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Some(token) = &s.token {
        let presented = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if presented != Some(format!("Bearer {token}").as_str()) {
            let body = r#"{"error":{"message":"Not authorized: bad token","type":"NotAuthorizedException","code":401}}"#;
            return (StatusCode::UNAUTHORIZED, body).into_response();
        }
    }
    let path = parts.uri.path().to_string();
    let is_commit = parts.method == axum::http::Method::POST
        && path.contains("/tables/")
        && !path.ends_with("/register");
    if is_commit {
        let n = s.commits.fetch_add(1, Ordering::SeqCst);
        if s.pass_commits.is_some_and(|pass| n >= pass) {
            s.held.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
    }
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let mut headers = HeaderMap::new();
    for (k, v) in &parts.headers {
        if k != "host" {
            headers.insert(k.clone(), v.clone());
        }
    }
    let upstream = s
        .http
        .request(parts.method.clone(), format!("{}{path}{query}", s.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await;
    match upstream {
        Ok(r) => {
            let status = r.status();
            let mut headers = HeaderMap::new();
            for (k, v) in r.headers() {
                if k != "transfer-encoding" && k != "connection" && k != "content-length" {
                    headers.insert(k.clone(), v.clone());
                }
            }
            let bytes = r.bytes().await.unwrap_or_default();
            (status, headers, Body::from(bytes)).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_scraped_during_a_run_match_what_was_shipped() {
    let mut h = Harness::new("ops_metrics");
    let mut keys = Vec::new();
    for n in 0..5 {
        keys.push(h.ship_telemetry(n, 100).await);
    }
    let config = Yaml::good(&h).write(&h, "thadam.yaml");
    let config = config.to_str().expect("utf-8 path");
    let runner = Runner::start(
        h.dir.path(),
        &["--config", config, "--metrics-addr", "127.0.0.1:0"],
    )
    .await;
    assert_eq!(get(&runner.url("/healthz")).await.0, 200);

    let table = h.table_name("telemetry").to_string();
    let t = [("table", table.as_str())];
    let registered = |text: &str, n: f64| {
        sample(text, "thadam_iceberg_segments_registered_total", &t) == Some(n)
            && sample(text, "thadam_iceberg_backlog_segments", &t) == Some(0.0)
    };
    scrape_until(&runner, |text| registered(text, 5.0)).await;
    let (status, body) = get(&runner.url("/readyz")).await;
    assert_eq!(status, 200, "/readyz: {body}");

    // More segments while it runs: a new backlog, registered, back to zero.
    for n in 5..8 {
        keys.push(h.ship_telemetry(n, 100).await);
    }
    let text = scrape_until(&runner, |text| registered(text, 8.0)).await;

    let iceberg = h.table("telemetry").await.expect("table created");
    let snapshots = iceberg.metadata().snapshots().count() as f64;
    let mut bytes = 0u64;
    for key in &keys {
        let meta = h
            .store
            .head(&object_store::path::Path::from(key.as_str()))
            .await
            .expect("head");
        bytes += meta.size;
    }
    assert_eq!(
        value(&text, "thadam_iceberg_data_files_registered_total", &t),
        8.0
    );
    assert_eq!(
        value(&text, "thadam_iceberg_rows_registered_total", &t),
        800.0
    );
    assert_eq!(
        value(&text, "thadam_iceberg_registered_bytes_total", &t),
        bytes as f64
    );
    assert_eq!(
        value(
            &text,
            "thadam_iceberg_commits_total",
            &[("table", table.as_str()), ("outcome", "ok")]
        ),
        snapshots,
        "one ok commit per snapshot of the table"
    );
    assert!(snapshots >= 2.0, "two waves, at least two commits");
    assert_eq!(
        value(&text, "thadam_iceberg_registration_lag_seconds_count", &t),
        8.0,
        "one lag observation per segment"
    );
    assert!(
        sample(
            &text,
            "thadam_iceberg_registration_lag_seconds_bucket",
            &[("table", table.as_str()), ("le", "+Inf")]
        ) == Some(8.0),
        "the lag is a Prometheus histogram"
    );
    assert!(value(&text, "thadam_iceberg_commit_duration_seconds_count", &t) >= 2.0);
    assert!(value(&text, "thadam_iceberg_footer_reads_total", &[]) >= 8.0);
    assert!(value(&text, "thadam_iceberg_footer_read_bytes_total", &[]) > 0.0);
    let last_commit = value(&text, "thadam_iceberg_last_commit_timestamp_seconds", &t);
    assert!(last_commit > 1.7e9, "a Unix time in seconds: {last_commit}");
    assert!(
        text.contains("# HELP thadam_iceberg_segments_registered_total ")
            && text.contains("# TYPE thadam_iceberg_registration_lag_seconds histogram"),
        "described, with histograms as histograms:\n{text}"
    );
    assert_eq!(data_file_list(&iceberg).await.len(), 8);

    runner.sigterm();
    let (code, log) = runner.exit_code().await;
    assert_eq!(code, 0, "SIGTERM is a clean stop; log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_not_ready_with_a_wrong_token_and_ready_with_the_right_one() {
    let mut h = Harness::new("ops_ready");
    h.ship_telemetry(0, 10).await;
    let front = Front::start(&h.env.catalog_uri, Some(RIGHT_TOKEN), None).await;
    let with_token = |token: &str| {
        let mut config = h.config.clone();
        config.catalog_uri = front.uri.parse().expect("front url");
        config.catalog_auth = CatalogAuth::Token(Secret::new(token));
        config
    };

    // In process: the endpoints the runner serves, over a registrar the test starts.
    let health = Health::default();
    let listener = http::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let endpoints = Endpoints {
        metrics: None,
        health: health.clone(),
    };
    let server = http::serve(listener, endpoints, std::future::pending());
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 503, "nothing started yet: {body}");
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);

    let start = |c: &thadam_iceberg::config::RegistrarConfig| {
        thadam_iceberg::Registrar::builder(c.clone())
            .feed(SegmentLogTail::open(&c.source.catalog))
            .tuning(Tuning::default())
    };
    let wrong = with_token("a-wrong-token");
    let err = health
        .start(start(&wrong))
        .await
        .err()
        .expect("a wrong token is refused");
    assert_eq!(err.code(), thadam_iceberg::ErrorCode::AuthFailed);
    let (status, body) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 503);
    assert!(body.contains("auth.failed"), "the reason is given: {body}");
    assert!(
        !body.contains("a-wrong-token"),
        "no secret in the answer: {body}"
    );

    let right = with_token(RIGHT_TOKEN);
    let handle = health
        .start(start(&right))
        .await
        .expect("the right token is accepted");
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    let body = loop {
        let (status, body) = get(&format!("{base}/readyz")).await;
        if status == 200 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(body.starts_with("ready"), "{body}");
    handle.stop();
    handle.wait().await.expect("clean stop");
    server.abort();

    // The runner itself: a wrong token stops it with the documented exit code 3.
    let config = Yaml {
        catalog_uri: &front.uri,
        token: Some("a-wrong-token"),
        ..Yaml::good(&h)
    }
    .write(&h, "wrong-token.yaml");
    let (code, _, stderr) = run_to_end(&["--config", config.to_str().expect("utf-8")]).await;
    assert_eq!(code, 3, "auth.failed exits 3:\n{stderr}");
    assert!(!stderr.contains("a-wrong-token"), "no secret in the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_in_a_backlog_exits_0_and_a_restart_loses_and_doubles_nothing() {
    let mut h = Harness::new("ops_sigterm");
    let mut keys = Vec::new();
    for n in 0..24 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    // Two appends go through; the third is held in flight when SIGTERM arrives.
    let front = Front::start(&h.env.catalog_uri, None, Some(2)).await;
    let config = Yaml {
        catalog_uri: &front.uri,
        ..Yaml::good(&h)
    }
    .write(&h, "via-front.yaml");
    let runner = Runner::start(
        h.dir.path(),
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--metrics-addr",
            "127.0.0.1:0",
            "--max-batch",
            "3",
            "--progress-interval",
            "200ms",
        ],
    )
    .await;
    let deadline = tokio::time::Instant::now() + HANG_GUARD;
    while front.held() == 0 || !read(&runner.log).contains("progress: registered") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no commit held / no progress line (hang guard); log:\n{}",
            read(&runner.log)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = runner.metrics().await;
    let table = h.table_name("telemetry").to_string();
    let backlog = value(
        &text,
        "thadam_iceberg_backlog_segments",
        &[("table", &table)],
    );
    assert!(backlog > 0.0, "SIGTERM comes in the middle of a backlog");
    runner.sigterm();
    let (code, log) = runner.exit_code().await;
    assert_eq!(
        code, 0,
        "SIGTERM with a commit in flight is a clean stop; log:\n{log}"
    );

    let first = h.table("telemetry").await.expect("table");
    let files = data_file_list(&first).await;
    assert!(
        !files.is_empty() && files.len() <= 6,
        "only the two appends that went through: {files:?}"
    );

    // Restart straight against the catalog, until caught up.
    let direct = Yaml::good(&h).write(&h, "direct.yaml");
    let (code, _, stderr) = run_to_end(&[
        "--config",
        direct.to_str().expect("utf-8"),
        "--until-caught-up",
    ])
    .await;
    assert_eq!(code, 0, "caught up and exited cleanly:\n{stderr}");
    let table = h.table("telemetry").await.expect("table");
    let files = data_file_list(&table).await;
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(
        files, expected,
        "every segment exactly once: none lost, none doubled"
    );
    let summary = &table
        .metadata()
        .current_snapshot()
        .expect("snapshot")
        .summary()
        .additional_properties;
    assert_eq!(
        summary.get("total-records").map(String::as_str),
        Some("240")
    );
}

/// A shipper whose append failed part-way reopens the log and records the whole batch again, so
/// the log can hold the same object key twice. `--until-caught-up` used to expect one
/// registration per record and waited forever; it must end, with every segment once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_caught_up_ends_when_the_log_records_a_segment_twice() {
    let mut h = Harness::new("ops_dup_caught_up");
    let mut keys = Vec::new();
    for n in 0..4 {
        keys.push(h.ship_telemetry(n, 10).await);
    }
    let uploads: Vec<LogEntry> = SegmentLogReader::open(&h.config.source.catalog)
        .and_then(|mut r| r.read_to_end())
        .expect("read the log")
        .into_iter()
        .map(|r| r.entry)
        .filter(|e| matches!(e, LogEntry::Uploaded { .. }))
        .collect();
    assert_eq!(uploads.len(), 4);
    // The last three recorded again: the log ends in a duplicate key.
    h.log
        .append_all(uploads[1..].iter().cloned())
        .expect("record the batch again");

    let config = Yaml::good(&h).write(&h, "dup.yaml");
    let (code, _, stderr) = run_to_end(&[
        "--config",
        config.to_str().expect("utf-8"),
        "--until-caught-up",
    ])
    .await;
    assert_eq!(code, 0, "caught up and exited cleanly:\n{stderr}");
    let table = h.table("telemetry").await.expect("table");
    let files = data_file_list(&table).await;
    let mut expected: Vec<String> = keys
        .iter()
        .map(|k| format!("s3://{}/{k}", h.env.bucket))
        .collect();
    expected.sort();
    assert_eq!(files, expected, "every segment exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_passes_a_good_config_and_names_each_failing_check() {
    let mut h = Harness::new("ops_check");
    h.ship_telemetry(0, 10).await;
    let front = Front::start(&h.env.catalog_uri, Some(RIGHT_TOKEN), None).await;
    let check = |path: PathBuf| async move {
        run_to_end(&["--config", path.to_str().expect("utf-8"), "--check"]).await
    };
    let failing = |stdout: &str| -> Vec<String> {
        stdout
            .lines()
            .filter(|l| l.starts_with("FAIL"))
            .map(str::to_string)
            .collect()
    };

    // The namespace exists, so --check can ask the catalog whether it accepts the table's
    // location (a staged create): `ok`, not `warn` (tests/table_location.rs covers the rest).
    h.client()
        .await
        .ensure_namespace(&h.namespace)
        .await
        .expect("namespace");

    // Good: direct, and through the front with the right token.
    for (name, yaml) in [
        ("good.yaml", Yaml::good(&h)),
        (
            "good-token.yaml",
            Yaml {
                catalog_uri: &front.uri,
                token: Some(RIGHT_TOKEN),
                ..Yaml::good(&h)
            },
        ),
    ] {
        let (code, stdout, stderr) = check(yaml.write(&h, name)).await;
        assert_eq!(code, 0, "{name} passes:\n{stdout}\n{stderr}");
        for line in [
            "ok   config parsed",
            "ok   [iceberg] catalog reachable",
            "ok   [iceberg] auth accepted",
            "ok   [iceberg] bucket readable",
            "ok   [iceberg] segment catalog readable",
            "ok   [iceberg] table ",
            "ok   [iceberg] dataset telemetry unsigned policy",
            "checks passed",
        ] {
            assert!(stdout.contains(line), "{name}: no {line:?} in:\n{stdout}");
        }
    }

    // No segment catalog yet (the parquet sink has not run): nothing could be read, so `warn`
    // saying so, never `ok`, and not a failure (exit 0).
    let fresh = h.dir.path().join("no-log-yet");
    let yaml = std::fs::read_to_string(Yaml::good(&h).write(&h, "no-log-yet.yaml"))
        .expect("read config")
        .replace(
            &format!("dir: {}", h.dir.path().display()),
            &format!("dir: {}", fresh.display()),
        );
    let path = h.dir.path().join("no-log-yet.yaml");
    std::fs::write(&path, yaml).expect("write config");
    let (code, stdout, stderr) = check(path).await;
    assert_eq!(code, 0, "a warn is not a failure:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("warn [iceberg] segment catalog readable: not known: "),
        "{stdout}"
    );
    assert!(stdout.contains("does not exist yet"), "{stdout}");
    assert!(
        !stdout.contains("ok   [iceberg] segment catalog"),
        "{stdout}"
    );
    assert!(stdout.contains("could not tell"), "{stdout}");

    // Broken ones: each names its failing check, and only that one.
    let closed = format!("http://127.0.0.1:{}", reserve_port());
    let missing_bucket = unique("nobucket").replace('_', "-");
    let cases: Vec<(&str, Yaml, &str, i32)> = vec![
        (
            "unreachable.yaml",
            Yaml {
                catalog_uri: &closed,
                ..Yaml::good(&h)
            },
            "FAIL [iceberg] catalog reachable",
            1,
        ),
        (
            "wrong-token.yaml",
            Yaml {
                catalog_uri: &front.uri,
                token: Some("a-wrong-token"),
                ..Yaml::good(&h)
            },
            "FAIL [iceberg] auth accepted",
            3,
        ),
        (
            "no-bucket.yaml",
            Yaml {
                bucket: &missing_bucket,
                ..Yaml::good(&h)
            },
            "FAIL [iceberg] bucket readable",
            1,
        ),
        (
            "native.yaml",
            Yaml {
                unsigned: "native",
                ..Yaml::good(&h)
            },
            "FAIL [iceberg] dataset telemetry unsigned policy",
            4,
        ),
        (
            "no-table.yaml",
            Yaml {
                create_table: false,
                ..Yaml::good(&h)
            },
            "FAIL [iceberg] table ",
            1,
        ),
    ];
    for (name, yaml, expected, exit) in cases {
        let (code, stdout, stderr) = check(yaml.write(&h, name)).await;
        assert_eq!(code, exit, "{name} exit code:\n{stdout}\n{stderr}");
        let failed = failing(&stdout);
        assert_eq!(
            failed.len(),
            1,
            "{name}: exactly one failing check:\n{stdout}"
        );
        assert!(
            failed[0].starts_with(expected),
            "{name}: {expected:?}, got:\n{stdout}"
        );
        assert!(
            stdout.contains("1 of "),
            "{name}: a summary line:\n{stdout}"
        );
        assert!(!stdout.contains("a-wrong-token"), "no secret in the report");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_example_feeds_its_own_catalog() {
    let h = Harness::new("ops_embedded");
    let config = Yaml::good(&h).write(&h, "thadam.yaml");
    let output = tokio::time::timeout(
        HANG_GUARD,
        Command::new(example_binary("embedded"))
            .args([
                "--config",
                config.to_str().expect("utf-8"),
                "--segments",
                "2",
                "--rows",
                "50",
            ])
            .output(),
    )
    .await
    .expect("the example finished (hang guard)")
    .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("registered 2,"), "{stdout}");
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(data_file_list(&table).await.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// The endpoints' own limits: a bounded number of connections, and idle or slow ones closed.

/// Open file descriptors of this process (the test is both client and server).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Reads until the peer closes; returns how long that took, or `None` if it stayed open for
/// `within`. Whatever the server sends (a 408, say) is discarded.
async fn closed_within(stream: &mut tokio::net::TcpStream, within: Duration) -> Option<Duration> {
    use tokio::io::AsyncReadExt;
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read_to_end)
        .await
        .ok()
        .map(|()| started.elapsed())
}

fn short_limits() -> http::ServeLimits {
    http::ServeLimits {
        max_connections: 64,
        header_read_timeout: Duration::from_secs(1),
        connection_timeout: Duration::from_secs(3),
        ..http::ServeLimits::default()
    }
}

async fn serve_short() -> (String, std::net::SocketAddr) {
    let listener = http::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let endpoints = Endpoints {
        metrics: None,
        health: Health::default(),
    };
    http::serve_with(listener, endpoints, short_limits(), std::future::pending());
    (format!("http://{addr}"), addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_beyond_the_cap_are_not_accepted_and_the_endpoint_keeps_answering() {
    let (base, addr) = serve_short().await;
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);
    let before = open_fds();
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(
            tokio::net::TcpStream::connect(addr)
                .await
                .expect("connect (the kernel's backlog takes what the server does not accept)"),
        );
    }
    // Let the server accept what it will.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = open_fds().saturating_sub(before);
    // 200 client sockets, plus at most 64 accepted ones (and a little slack for the runtime).
    assert!(
        held <= 200 + 64 + 8,
        "the server accepted more connections than its cap: {held} new descriptors for 200 \
         client connections"
    );
    // The idle ones time out in batches of 64 (header_read_timeout 1 s); a new request is
    // answered once a slot frees, well before the idle connections are gone on their own.
    let started = tokio::time::Instant::now();
    let (status, body) = get(&format!("{base}/healthz")).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "answered only after {:?}",
        started.elapsed()
    );
    // Every idle connection is closed by the server, none is left open indefinitely.
    for stream in &mut idle {
        assert!(
            closed_within(stream, Duration::from_secs(10))
                .await
                .is_some(),
            "an idle connection stayed open"
        );
    }
    drop(idle);
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_connection_is_closed_within_the_header_timeout() {
    use tokio::io::AsyncWriteExt;
    let (base, addr) = serve_short().await;
    let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    let trickle = async {
        // One byte every 200 ms: each byte is "activity", yet the head never completes.
        for byte in head
            .iter()
            .chain(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter())
        {
            if slow.write_all(&[*byte]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    };
    let started = tokio::time::Instant::now();
    let cut = tokio::time::timeout(Duration::from_secs(6), trickle).await;
    assert!(
        matches!(cut, Ok(true)),
        "the server kept a slowloris connection open for {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);

    // A client that sends nothing at all is closed too (keep-alive idle is the same wait).
    let mut silent = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let closed = closed_within(&mut silent, Duration::from_secs(5)).await;
    assert!(closed.is_some(), "a silent connection stayed open");

    // A request head larger than the limit is refused (431) rather than buffered.
    let huge = "x".repeat(64 * 1024);
    let response = reqwest::Client::new()
        .get(format!("{base}/healthz"))
        .header("X-Huge", huge)
        .timeout(Duration::from_secs(10))
        .send()
        .await;
    // Closed before a status (an error here) is refused too.
    if let Ok(r) = response {
        assert_eq!(r.status().as_u16(), 431);
    }
}

// ---------------------------------------------------------------------------------------------
// Routing: only the parquet sink's datasets have tables.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_for_a_dataset_the_parquet_sink_does_not_list_stops_with_config_invalid() {
    let mut h = Harness::new("ops_unlisted");
    h.ship_telemetry(0, 10).await;
    h.run_until_handled(1).await;
    // The shipper records a segment of a dataset this config does not know (create_table is
    // true, so today a table would be created for it).
    let stray = common::demo::telemetry_batch(1, 10).expect("batch");
    let key = h.ship("stray", &stray).await;
    h.ship_telemetry(2, 10).await;
    let err = h.run_until_fatal().await;
    assert_eq!(
        err.code(),
        thadam_iceberg::ErrorCode::ConfigInvalid,
        "{err}"
    );
    let msg = err.to_string();
    for needle in [
        "\"stray\"",
        "record seq ",
        &key,
        "add the dataset to the parquet sink's datasets, or fix the shipper",
    ] {
        assert!(msg.contains(needle), "the message names `{needle}`: {msg}");
    }
    assert!(
        h.table("stray").await.is_none(),
        "no table is created for an unlisted dataset"
    );
    let telemetry = h.table("telemetry").await.expect("telemetry table");
    assert_eq!(data_file_list(&telemetry).await.len(), 1);
}

/// An S3 outage on writes (manifests) while `RUST_BACKTRACE=1` is set: the runner retries (a
/// short outage within object_store's own retries of the request, a longer one by the
/// registrar too), logs it, registers the segment once S3 is back, and prints no backtrace (the
/// former opendal FileIO's retry layer logged each error with `{:?}`: 1,730 lines for 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_outage_under_rust_backtrace_prints_no_backtraces() {
    use common::s3_front::{S3Front, WriteFault};
    let mut h = Harness::new("nobt");
    let mut keys = vec![h.register_one().await];
    keys.push(h.ship_telemetry(0, 10).await);
    let front = S3Front::start(
        &h.env.s3_endpoint,
        WriteFault::Outage(Duration::from_secs(4)),
    )
    .await;
    let config = h.dir.path().join("outage.yaml");
    std::fs::write(&config, h.yaml.replace(&h.env.s3_endpoint, &front.uri)).expect("config");
    let output = tokio::time::timeout(
        HANG_GUARD,
        Command::new(example_binary("registrar"))
            .args([
                "--config",
                &config.display().to_string(),
                "--until-caught-up",
            ])
            .env("RUST_BACKTRACE", "1")
            .env_remove("RUST_LIB_BACKTRACE")
            .output(),
    )
    .await
    .expect("the runner finished (hang guard)")
    .expect("run the runner");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("did not complete")
            || stderr.contains("ServiceUnavailable")
            || stderr.contains("Encountered server error with status 503"),
        "the outage was met and retried:\n{stderr}"
    );
    let frames = stderr
        .lines()
        .filter(|l| l.contains("stack backtrace") || l.trim_start().starts_with("at /rustc/"))
        .count();
    assert_eq!(frames, 0, "no backtrace in the logs:\n{stderr}");
    assert!(
        stderr.lines().count() < 200,
        "{} log lines for a 4 s outage",
        stderr.lines().count()
    );
    let table = h.table("telemetry").await.expect("table");
    common::assert_exactly_once(&table, &h.env.bucket, &keys).await;
}
