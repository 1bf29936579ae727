//! The registrar as Prometheus sees it, with a real Prometheus (Debian's `prometheus` package,
//! 2.42, installed by `scripts/install-tools`; `THADAM_PROMETHEUS_BIN` / `THADAM_PROMTOOL_BIN`
//! point elsewhere) scraping the standalone runner (`examples/registrar`, a child process) every
//! second and evaluating `examples/alerts.yml` every second, everything on 127.0.0.1:
//!
//! - `up` is 1, the registered counts are what was shipped, `thadam_iceberg_build_info` names
//!   the build, every rule is healthy and no alert fires while the registrar is healthy;
//! - `promtool check metrics` accepts the live `/metrics`;
//! - every PromQL expression of `examples/grafana-dashboard.json` evaluates without error;
//! - once the catalog is gone while segments wait, `IcebergRegistrarStalled` fires for a table
//!   that committed before and for one that never committed (which the old rule on
//!   `thadam_iceberg_last_commit_timestamp_seconds` misses, shown on the same data); once the
//!   runner stops, `IcebergRegistrarDown` fires.
//!
//! The live Prometheus loads a copy of the shipped rules with every `for:` at 0s and the stall
//! threshold at 5 s instead of 900 s: a test cannot wait a quarter of an hour. Nothing else in
//! the copy differs (checked when the copy is made); the unit tests of the shipped file as it is,
//! thresholds and `for`s included, are `examples/alerts.test.yml` (`promtool test rules`, run by
//! scripts/test).
//!
//! Also here: `registrar --version`, `--check`'s first line and the start-up log line name the
//! version and the git commit, and the files in examples/ stay in step with the metrics and
//! docs/metrics.md.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{Harness, Options, YamlParts, example_binary, render_yaml};
use serde_json::Value as Json;
use thadam_iceberg::runtime::build_info;
use thadam_iceberg::runtime::metrics::{Kind, METRICS};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::task::{JoinHandle, JoinSet};

const HANG_GUARD: Duration = Duration::from_secs(90);
/// The stall threshold of the live copy of the rules (900 in examples/alerts.yml).
const STALL_SECONDS: u32 = 5;

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The path of `prometheus` or `promtool`: `$THADAM_<NAME>_BIN`, else the one on PATH. Fails,
/// never skips, when it is missing.
fn tool(name: &str) -> PathBuf {
    let var = format!("THADAM_{}_BIN", name.to_uppercase());
    if let Some(path) = std::env::var_os(&var) {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "{name} is not installed: scripts/install-tools installs Debian's prometheus \
                 package (prometheus and promtool, 2.42 verified); or point {var} at one"
            )
        })
}

/// The commit the runner must report: HEAD of this checkout, or `unknown` where git cannot tell
/// (what build.rs falls back to).
fn expected_commit() -> String {
    let out = std::process::Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "HEAD"])
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => "unknown".to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// The runner, and a catalog link the test can cut.

struct Runner {
    child: Child,
    /// `127.0.0.1:PORT` of its endpoints.
    addr: String,
    log: PathBuf,
}

impl Runner {
    async fn start(dir: &Path, config: &Path) -> Runner {
        let log = dir.join("runner.log");
        let stderr = std::fs::File::create(&log).expect("runner log");
        let config = config.to_str().expect("utf-8 path");
        let mut child = Command::new(example_binary("registrar"))
            .args(["--config", config, "--metrics-addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the runner");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(HANG_GUARD, lines.next_line())
            .await
            .expect("the runner printed its address (hang guard)")
            .expect("read stdout")
            .unwrap_or_else(|| panic!("no address; log:\n{}", read(&log)));
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        // Drain the rest so the runner never writes into a closed pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Runner { child, addr, log }
    }

    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.addr);
        let response = reqwest::get(&url)
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        assert_eq!(response.status(), 200, "GET {url}");
        response.text().await.expect("metrics body")
    }

    /// SIGTERM, then the exit code.
    async fn stop(mut self) -> i32 {
        let pid = self.child.id().expect("runner still running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "kill -TERM {pid}");
        let status = tokio::time::timeout(HANG_GUARD, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the runner did not stop; log:\n{}", read(&self.log)))
            .expect("wait for the runner");
        status.code().unwrap_or(-1)
    }
}

/// A TCP link to the catalog. [`CatalogLink::cut`] drops every open connection and closes the
/// port, as when the catalog's host goes away: requests then fail to connect.
struct CatalogLink {
    /// The catalog URI through the link.
    uri: String,
    task: JoinHandle<()>,
}

impl CatalogLink {
    async fn start(catalog_uri: &str) -> CatalogLink {
        let mut uri = url::Url::parse(catalog_uri).expect("catalog uri");
        let upstream = format!(
            "{}:{}",
            uri.host_str().expect("catalog host"),
            uri.port_or_known_default().expect("catalog port")
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind link");
        let port = listener.local_addr().expect("link address").port();
        uri.set_port(Some(port)).expect("set port");
        let task = tokio::spawn(async move {
            // Owned by this task: aborting it drops the set, which aborts every connection.
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((mut inbound, _)) => {
                            let upstream = upstream.clone();
                            connections.spawn(async move {
                                if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                                }
                            });
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    },
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        CatalogLink {
            uri: uri.to_string(),
            task,
        }
    }

    async fn cut(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus.

/// A Prometheus process on 127.0.0.1 with its own storage; killed (and reaped) when dropped.
struct Prometheus {
    child: std::process::Child,
    base: String,
    log: PathBuf,
    http: reqwest::Client,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus with `config` (a file in `dir`), its TSDB in `dir`; waits until ready.
    async fn start(dir: &Path, config: &Path) -> Prometheus {
        let port = common::forward::reserve_port();
        let log = dir.join("prometheus.log");
        let out = std::fs::File::create(&log).expect("prometheus log");
        let err = out.try_clone().expect("prometheus log");
        let child = std::process::Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn prometheus");
        let mut prometheus = Prometheus {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .expect("http client"),
        };
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!(
                    "prometheus exited with {status} before it was ready; log:\n{}",
                    read(&prometheus.log)
                );
            }
            let ready = prometheus
                .http
                .get(format!("{}/-/ready", prometheus.base))
                .send()
                .await;
            if ready.is_ok_and(|r| r.status() == 200) {
                return prometheus;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus not ready (hang guard); log:\n{}",
                read(&prometheus.log)
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn get(&self, path: &str, params: &[(&str, &str)]) -> Json {
        let url = url::Url::parse_with_params(&format!("{}{path}", self.base), params)
            .expect("prometheus url");
        let response = self
            .http
            .get(url.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        response.json().await.expect("prometheus answers JSON")
    }

    /// An instant query: the result, or the error Prometheus gave.
    async fn query(&self, expr: &str) -> Result<Json, String> {
        let body = self.get("/api/v1/query", &[("query", expr)]).await;
        if body["status"] == "success" {
            Ok(body["data"]["result"].clone())
        } else {
            Err(format!("{}: {}", body["errorType"], body["error"]))
        }
    }

    /// The vector `expr` gives, as (labels, value) pairs.
    async fn vector(&self, expr: &str) -> Vec<(Json, f64)> {
        let result = self
            .query(expr)
            .await
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
        result
            .as_array()
            .unwrap_or_else(|| panic!("{expr}: not a vector: {result}"))
            .iter()
            .map(|s| {
                let value = s["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("{expr}: bad sample {s}"));
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// Polls `expr` until `done` holds for its vector (hang guard); returns that vector.
    async fn until(
        &self,
        expr: &str,
        what: &str,
        mut done: impl FnMut(&[(Json, f64)]) -> bool,
    ) -> Vec<(Json, f64)> {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            let v = self.vector(expr).await;
            if done(&v) {
                return v;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: never true (hang guard); last `{expr}`: {v:?}\nprometheus log:\n{}",
                read(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The active alerts.
    async fn alerts(&self) -> Vec<Json> {
        let body = self.get("/api/v1/alerts", &[]).await;
        body["data"]["alerts"]
            .as_array()
            .unwrap_or_else(|| panic!("no alerts in {body}"))
            .clone()
    }

    /// Polls until `alertname` fires for every label set `wanted` names (hang guard); returns
    /// the firing alerts of that name.
    async fn until_firing(&self, alertname: &str, wanted: &[&[(&str, &str)]]) -> Vec<Json> {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            let firing: Vec<Json> = self
                .alerts()
                .await
                .into_iter()
                .filter(|a| a["labels"]["alertname"] == alertname && a["state"] == "firing")
                .collect();
            let all = wanted.iter().all(|labels| {
                firing
                    .iter()
                    .any(|a| labels.iter().all(|(k, v)| a["labels"][*k] == *v))
            });
            if all {
                return firing;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{alertname} never fired for {wanted:?} (hang guard); firing: {firing:?}\n\
                 prometheus log:\n{}",
                read(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The loaded rules: (name, health, last evaluation, last error).
    async fn rules(&self) -> Vec<(String, String, String, String)> {
        let body = self.get("/api/v1/rules", &[]).await;
        let mut rules = Vec::new();
        for group in body["data"]["groups"].as_array().expect("rule groups") {
            for rule in group["rules"].as_array().expect("rules") {
                let text = |k: &str| rule[k].as_str().unwrap_or_default().to_string();
                rules.push((
                    text("name"),
                    text("health"),
                    text("lastEvaluation"),
                    text("lastError"),
                ));
            }
        }
        rules
    }

    /// Polls until every rule was evaluated after `after` (hang guard); returns the rules.
    async fn rules_evaluated_after(
        &self,
        after: chrono::DateTime<chrono::Utc>,
    ) -> Vec<(String, String, String, String)> {
        let deadline = tokio::time::Instant::now() + HANG_GUARD;
        loop {
            let rules = self.rules().await;
            let evaluated = !rules.is_empty()
                && rules.iter().all(|(_, _, last, _)| {
                    chrono::DateTime::parse_from_rfc3339(last).is_ok_and(|t| t > after)
                });
            if evaluated {
                return rules;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "rules never evaluated after {after} (hang guard): {rules:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The shipped files.

/// Every alert of examples/alerts.yml: (name, expr).
fn shipped_alerts() -> Vec<(String, String)> {
    let doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read(&repo_file("examples/alerts.yml"))).expect("alerts.yml");
    let mut alerts = Vec::new();
    for group in doc["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"]
                .as_str()
                .expect("an alerting rule")
                .to_string();
            let expr = rule["expr"].as_str().expect("expr").to_string();
            alerts.push((name, expr));
        }
    }
    alerts
}

/// The shipped rules as the live test loads them: every `for:` at 0s and the stall threshold at
/// [`STALL_SECONDS`] (a test cannot wait 15 minutes). Checks that nothing else changes.
fn rules_for_a_short_test(shipped: &str) -> String {
    let stall = "time() - thadam_iceberg_waiting_since_timestamp_seconds > 900";
    assert_eq!(
        shipped.matches(stall).count(),
        1,
        "examples/alerts.yml no longer has `{stall}`: update this test's rewrite"
    );
    let short = stall.replace("> 900", &format!("> {STALL_SECONDS}"));
    let mut fors = 0;
    let mut out = String::new();
    for line in shipped.replace(stall, &short).lines() {
        match line.trim_start().strip_prefix("for:") {
            Some(_) => {
                let indent = &line[..line.len() - line.trim_start().len()];
                out.push_str(&format!("{indent}for: 0s"));
                fors += 1;
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    assert!(fors > 0, "no `for:` found to shorten");
    // Line by line: the same lines but for the `for:`s and the one threshold.
    let differing = shipped
        .lines()
        .zip(out.lines())
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        differing,
        fors + 1,
        "the live rules differ in more than the for:s and the threshold"
    );
    out
}

/// Every `expr` of examples/grafana-dashboard.json, with `$table` at its "All" value.
fn dashboard_exprs() -> Vec<String> {
    let doc: Json = serde_json::from_str(&read(&repo_file("examples/grafana-dashboard.json")))
        .expect("grafana-dashboard.json");
    let all = doc["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .find(|v| v["name"] == "table")
        .and_then(|v| v["allValue"].as_str())
        .expect("the table variable's allValue")
        .to_string();
    fn walk(v: &Json, out: &mut Vec<String>) {
        match v {
            Json::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v.as_str()) {
                        ("expr", Some(expr)) => out.push(expr.to_string()),
                        _ => walk(v, out),
                    }
                }
            }
            Json::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut exprs = Vec::new();
    walk(&doc["panels"], &mut exprs);
    exprs
        .into_iter()
        .map(|e| e.replace("$table", &all))
        .collect()
}

/// Every `thadam_iceberg_*` name a PromQL text mentions.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("thadam_iceberg_") {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_runner_and_fires_the_shipped_alerts() {
    // Both tools first: a machine without them fails here, saying what to install.
    tool("prometheus");
    let promtool = tool("promtool");
    let mut h = Harness::with(
        "prom",
        Options {
            datasets: vec!["telemetry", "events"],
            ..Options::default()
        },
    );
    let telemetry = h.table_name("telemetry").to_string();
    let events = h.table_name("events").to_string();
    for n in 0..3 {
        h.ship_telemetry(n, 100).await;
    }

    // The runner reaches the catalog through a link the test cuts later.
    let link = CatalogLink::start(&h.env.catalog_uri).await;
    let yaml = render_yaml(&YamlParts {
        dir: h.dir.path(),
        unsigned: "signed",
        datasets: &["telemetry", "events"],
        pipeline: &h.pipeline,
        bucket: &h.env.bucket,
        prefix: &h.prefix,
        catalog_uri: &link.uri,
        namespace: &h.namespace.join("."),
        create_table: true,
        s3_endpoint: &h.env.s3_endpoint,
        extra_iceberg_yaml: "",
    });
    let config = h.dir.path().join("thadam.yaml");
    std::fs::write(&config, yaml).expect("write config");
    let runner = Runner::start(h.dir.path(), &config).await;

    // Prometheus: the shipped scrape job (its name and path), pointed at the runner, every
    // second; the shipped rules with short `for`s.
    let dir = tempfile::tempdir().expect("prometheus dir");
    let rules = dir.path().join("alerts.yml");
    std::fs::write(
        &rules,
        rules_for_a_short_test(&read(&repo_file("examples/alerts.yml"))),
    )
    .expect("write rules");
    let mut scrape: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read(&repo_file("examples/prometheus.yml"))).expect("yml");
    scrape["global"]["scrape_interval"] = "1s".into();
    scrape["global"]["scrape_timeout"] = "1s".into();
    scrape["global"]["evaluation_interval"] = "1s".into();
    scrape["rule_files"] =
        serde_yaml_ng::Value::Sequence(vec![rules.to_str().expect("utf-8").into()]);
    let job = &mut scrape["scrape_configs"][0];
    let job_name = job["job_name"].as_str().expect("job_name").to_string();
    job["static_configs"] = serde_yaml_ng::from_str(&format!(
        "[{{targets: ['{}'], labels: {{pipeline: {}}}}}]",
        runner.addr, h.pipeline
    ))
    .expect("static_configs");
    let prometheus_yml = dir.path().join("prometheus.yml");
    std::fs::write(
        &prometheus_yml,
        serde_yaml_ng::to_string(&scrape).expect("yaml"),
    )
    .expect("write prometheus.yml");
    let started = std::time::Instant::now();
    let prometheus = Prometheus::start(dir.path(), &prometheus_yml).await;
    eprintln!("prometheus ready in {:?}", started.elapsed());

    // Scraped: up, and the counts of what was shipped.
    let up = format!("up{{job=\"{job_name}\"}}");
    let v = prometheus
        .until(&up, "up == 1", |v| v.len() == 1 && v[0].1 == 1.0)
        .await;
    assert_eq!(v[0].0["instance"], runner.addr.as_str());
    let registered = format!("thadam_iceberg_segments_registered_total{{table=\"{telemetry}\"}}");
    prometheus
        .until(&registered, "3 segments registered", |v| {
            v.len() == 1 && v[0].1 == 3.0
        })
        .await;
    for (metric, want) in [
        ("thadam_iceberg_data_files_registered_total", 3.0),
        ("thadam_iceberg_rows_registered_total", 300.0),
        ("thadam_iceberg_backlog_segments", 0.0),
    ] {
        let v = prometheus
            .vector(&format!("{metric}{{table=\"{telemetry}\"}}"))
            .await;
        assert_eq!(v.len(), 1, "{metric}: {v:?}");
        assert_eq!(v[0].1, want, "{metric}");
    }
    // The phases of the commit windows: a lone registrar builds on its own last answer (no
    // load), so each of its commits has a build and an answer.
    for phase in ["build", "answer"] {
        let v = prometheus
            .vector(&format!(
                "thadam_iceberg_commit_phase_seconds_count{{table=\"{telemetry}\",phase=\"{phase}\"}}"
            ))
            .await;
        assert_eq!(v.len(), 1, "{phase}: {v:?}");
        assert!(v[0].1 >= 1.0, "{phase}: {v:?}");
    }
    let registered_at = chrono::Utc::now();

    // Which build: the gauge, with the version and the commit of this checkout.
    let commit = expected_commit();
    let v = prometheus.vector("thadam_iceberg_build_info").await;
    assert_eq!(v.len(), 1, "one build: {v:?}");
    assert_eq!(v[0].1, 1.0);
    assert_eq!(v[0].0["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v[0].0["commit"], commit.as_str());
    assert_eq!(v[0].0["instance"], runner.addr.as_str());

    // promtool's lint of the live exposition (help texts, names, units, histograms).
    let exposition = runner.metrics().await;
    for name in [
        "thadam_iceberg_build_info",
        "thadam_iceberg_registration_lag_seconds_bucket",
        "thadam_iceberg_catalog_server_errors_total",
    ] {
        assert!(exposition.contains(name), "{name} not in:\n{exposition}");
    }
    let mut check = std::process::Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    check
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = check.wait_with_output().expect("promtool check metrics");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool check metrics ({}):\n{}{}\non:\n{exposition}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every rule healthy, and none fires while the registrar is healthy (every `for` is 0s here,
    // so any rule whose expression held would be firing).
    let rules = prometheus.rules_evaluated_after(registered_at).await;
    let loaded: BTreeSet<String> = rules.iter().map(|r| r.0.clone()).collect();
    let shipped: BTreeSet<String> = shipped_alerts().into_iter().map(|a| a.0).collect();
    assert_eq!(loaded, shipped);
    for (name, health, _, error) in &rules {
        assert_eq!(health, "ok", "{name}: {error}");
    }
    let active = prometheus.alerts().await;
    assert!(active.is_empty(), "alerts while healthy: {active:#?}");

    // The dashboard: every expression evaluates, and its table variable finds the tables.
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 20, "{} expressions", exprs.len());
    let mut with_data = 0;
    for expr in &exprs {
        let result = prometheus
            .query(expr)
            .await
            .unwrap_or_else(|e| panic!("dashboard query `{expr}`: {e}"));
        if result.as_array().is_some_and(|r| !r.is_empty()) {
            with_data += 1;
        }
    }
    let series = prometheus
        .get(
            "/api/v1/series",
            &[("match[]", "thadam_iceberg_backlog_segments")],
        )
        .await;
    let tables: BTreeSet<&str> = series["data"]
        .as_array()
        .expect("series")
        .iter()
        .filter_map(|s| s["table"].as_str())
        .collect();
    assert!(tables.contains(telemetry.as_str()), "{tables:?}");
    eprintln!(
        "{} dashboard expressions evaluated, {with_data} with data",
        exprs.len()
    );

    // The catalog goes away while segments wait: for telemetry, which committed, and for
    // events, which never did.
    link.cut().await;
    h.ship_telemetry(3, 100).await;
    h.ship_telemetry(4, 100).await;
    let batch = common::demo::telemetry_batch(5, 100).expect("batch");
    h.ship("events", &batch).await;
    let stalled_since = std::time::Instant::now();
    let firing = prometheus
        .until_firing(
            "IcebergRegistrarStalled",
            &[
                &[("table", telemetry.as_str())],
                &[("table", events.as_str())],
            ],
        )
        .await;
    eprintln!(
        "IcebergRegistrarStalled fired {:?} after the catalog went away",
        stalled_since.elapsed()
    );
    for alert in &firing {
        assert_eq!(alert["labels"]["severity"], "critical");
        assert_eq!(alert["labels"]["job"], job_name.as_str());
        assert_eq!(alert["labels"]["instance"], runner.addr.as_str());
        let table = alert["labels"]["table"].as_str().expect("table");
        let summary = alert["annotations"]["summary"].as_str().expect("summary");
        assert!(
            summary.contains(table) && summary.contains(runner.addr.as_str()),
            "{summary}"
        );
    }
    // events never committed: no last-commit series, so the stall rule of the old example
    // (backlog and time since the last commit) cannot see it; the shipped rule did.
    let last = prometheus
        .vector(&format!(
            "thadam_iceberg_last_commit_timestamp_seconds{{table=\"{events}\"}}"
        ))
        .await;
    assert!(last.is_empty(), "events committed? {last:?}");
    let old_rule = format!(
        "thadam_iceberg_backlog_segments > 0 and on (table) \
         (time() - thadam_iceberg_last_commit_timestamp_seconds) > {STALL_SECONDS}"
    );
    let old: Vec<String> = prometheus
        .vector(&old_rule)
        .await
        .into_iter()
        .filter_map(|(labels, _)| labels["table"].as_str().map(str::to_string))
        .collect();
    assert!(!old.contains(&events), "the old rule saw events: {old:?}");

    // The runner stops: Prometheus cannot scrape it, IcebergRegistrarDown fires.
    let log = runner.log.clone();
    let addr = runner.addr.clone();
    assert_eq!(runner.stop().await, 0, "log:\n{}", read(&log));
    prometheus
        .until_firing("IcebergRegistrarDown", &[&[("instance", addr.as_str())]])
        .await;

    // The start-up line named the build.
    let log = read(&log);
    let starting = log
        .lines()
        .find(|l| l.contains("starting") && l.contains("version="))
        .unwrap_or_else(|| panic!("no start-up line with the version in:\n{log}"));
    assert!(
        starting.contains(&format!("version={}", build_info::VERSION))
            && starting.contains(&format!("commit={commit}")),
        "{starting}"
    );
    drop(prometheus);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runner_names_its_build() {
    let commit = expected_commit();
    let line = format!("{} (commit {commit})", env!("CARGO_PKG_VERSION"));

    let out = Command::new(example_binary("registrar"))
        .arg("--version")
        .output()
        .await
        .expect("registrar --version");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("registrar {line}\n")
    );

    let h = Harness::new("prom_check");
    let config = h.config_file();
    let out = tokio::time::timeout(
        HANG_GUARD,
        Command::new(example_binary("registrar"))
            .args(["--config", config.to_str().expect("utf-8"), "--check"])
            .output(),
    )
    .await
    .expect("--check finished (hang guard)")
    .expect("registrar --check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_eq!(
        stdout.lines().next(),
        Some(format!("thadam-iceberg {line}").as_str()),
        "{stdout}"
    );
}

/// Needs no server: the shipped files agree with the metrics and docs/metrics.md.
#[test]
fn the_shipped_prometheus_files_agree_with_the_metrics_and_the_docs() {
    let described: BTreeSet<String> = METRICS
        .iter()
        .flat_map(|m| {
            let base = m.name.to_string();
            match m.kind {
                Kind::Histogram => vec![
                    format!("{base}_bucket"),
                    format!("{base}_sum"),
                    format!("{base}_count"),
                ],
                _ => vec![base],
            }
        })
        .collect();
    let alerts = shipped_alerts();
    let mut queries: Vec<String> = alerts.iter().map(|a| a.1.clone()).collect();
    queries.extend(dashboard_exprs());
    for query in &queries {
        for name in metric_names(query) {
            assert!(
                described.contains(&name),
                "`{query}` names {name}, which is not emitted"
            );
        }
    }

    // The stall alert covers a node that never committed: it is built on waiting_since.
    let stalled = alerts
        .iter()
        .find(|a| a.0 == "IcebergRegistrarStalled")
        .expect("a stall alert");
    assert!(
        stalled
            .1
            .contains("thadam_iceberg_waiting_since_timestamp_seconds")
            && !stalled.1.contains("last_commit"),
        "{}",
        stalled.1
    );

    // The scrape config loads the rules, under the job name IcebergRegistrarDown selects.
    let scrape: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read(&repo_file("examples/prometheus.yml"))).expect("yml");
    assert_eq!(scrape["rule_files"][0].as_str(), Some("alerts.yml"));
    let job = scrape["scrape_configs"][0]["job_name"]
        .as_str()
        .expect("job_name");
    let down = alerts
        .iter()
        .find(|a| a.0 == "IcebergRegistrarDown")
        .expect("a down alert");
    assert!(down.1.contains(&format!("job=\"{job}\"")), "{}", down.1);

    // The metrics page names every alert and points to the file (one source of truth for the
    // rules).
    let page = read(&repo_file("docs/metrics.md"));
    assert!(
        page.contains("`examples/alerts.yml`"),
        "docs/metrics.md does not name `examples/alerts.yml`"
    );
    for (name, _) in &alerts {
        assert!(
            page.contains(&format!("`{name}`")),
            "docs/metrics.md does not name {name}"
        );
    }
}
