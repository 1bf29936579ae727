//! `catalog_sigv4` on the wire, against the real REST fixture and S3 server: every catalog request
//! goes through a front (tests/fronts/sigv4_front.py) that recomputes its signature with
//! botocore's `SigV4Auth`, an implementation independent of the registrar's, and forwards only
//! what verifies. Right keys register segments and a schema change; a wrong secret, region or
//! signing name, a skewed clock, a changed body or a missing session token are refused and the
//! registrar stops with `auth.failed`; no key reaches a log, an error or a `Debug` output.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use thadam_iceberg::config::{CatalogAuth, RegistrarConfig, Secret, SigV4Credential};
use thadam_iceberg::protocol::segment_log::SegmentLogTail;
use thadam_iceberg::{ErrorCode, Registrar};

use common::logs::{assert_no_secret, captured_logs};
use common::{Harness, Options, assert_exactly_once, extended_batch, read_all, row_count};
use iceberg::table::Table;

const REGION: &str = "eu-west-1";
const SIGNING_NAME: &str = "glue";

/// The keys a front checks against (and a registrar signs with, unless a test changes them).
#[derive(Clone)]
struct Keys {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
}

impl Keys {
    fn fresh(session_token: bool) -> Keys {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Keys {
            access_key_id: format!("AKIDTHADAM{}", id[..10].to_uppercase()),
            secret_access_key: format!("sk-SECRET-{id}"),
            session_token: session_token.then(|| format!("st-SECRET-{}", &id[..12])),
        }
    }

    fn credential(&self, region: &str, signing_name: &str) -> SigV4Credential {
        SigV4Credential {
            region: region.into(),
            signing_name: signing_name.into(),
            access_key_id: Secret::new(&self.access_key_id),
            secret_access_key: Secret::new(&self.secret_access_key),
            session_token: self.session_token.as_deref().map(Secret::new),
        }
    }

    /// The credential a front with these keys accepts: its region and signing name.
    fn accepted(&self) -> SigV4Credential {
        self.credential(REGION, SIGNING_NAME)
    }
}

/// How a front misbehaves, or not.
#[derive(Default)]
struct FrontOptions {
    /// Seconds added to the front's clock (a skewed client, seen from the server).
    clock_offset: i64,
    /// Flip a byte of every body before checking it (a body changed on the way).
    tamper_body: bool,
}

/// A running sigv4_front.py, killed (by its pid) when dropped.
struct Front {
    child: Child,
    // Held open: the front exits when it closes, so a killed test leaves no front behind.
    _stdin: Option<ChildStdin>,
    uri: String,
    log: PathBuf,
}

/// One request the front saw, and what it decided.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    query: String,
    verdict: String,
    signed_headers: Vec<String>,
}

impl Front {
    fn start(upstream: &str, keys: &Keys, options: FrontOptions, dir: &Path) -> Front {
        let python = std::env::var("THADAM_TEST_PYTHON").unwrap_or_else(|_| {
            panic!("THADAM_TEST_PYTHON is not set: run the tests with scripts/test")
        });
        let log = dir.join(format!("sigv4-front-{}.log", uuid::Uuid::new_v4().simple()));
        let mut command = Command::new(python);
        command
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fronts/sigv4_front.py"
            ))
            .args(["--upstream", upstream])
            .args(["--region", REGION, "--signing-name", SIGNING_NAME])
            .args(["--clock-offset", &options.clock_offset.to_string()])
            .arg("--log")
            .arg(&log)
            // Keys through the environment, not argv (which `ps` shows).
            .env("SIGV4_FRONT_ACCESS_KEY", &keys.access_key_id)
            .env("SIGV4_FRONT_SECRET_KEY", &keys.secret_access_key)
            .env_remove("SIGV4_FRONT_SESSION_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(token) = &keys.session_token {
            command.env("SIGV4_FRONT_SESSION_TOKEN", token);
        }
        if options.tamper_body {
            command.arg("--tamper-body");
        }
        let mut child = command.spawn().expect("the SigV4 front starts");
        let stdin = child.stdin.take();
        let mut line = String::new();
        let stdout = child.stdout.take().expect("front stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the front's READY line");
        let port: u16 = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("the SigV4 front did not start (said {line:?}); see stderr"));
        Front {
            child,
            _stdin: stdin,
            uri: format!("http://127.0.0.1:{port}"),
            log,
        }
    }

    /// A front for the harness's catalog, checking `keys`, logging into the test's directory.
    fn for_harness(h: &Harness, keys: &Keys, options: FrontOptions) -> Front {
        Front::start(&h.env.catalog_uri, keys, options, h.dir.path())
    }

    /// Every request so far, in arrival order.
    fn seen(&self) -> Vec<Seen> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).expect("front log line");
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                Seen {
                    method: s("method"),
                    path: s("path"),
                    query: s("query"),
                    verdict: s("verdict"),
                    signed_headers: s("signed_headers")
                        .split(';')
                        .filter(|h| !h.is_empty())
                        .map(str::to_string)
                        .collect(),
                }
            })
            .collect()
    }

    fn refusals(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.verdict != "ok")
            .collect()
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The harness's config, through `front`, signing with `credential`.
fn signed_config(h: &Harness, front: &Front, credential: SigV4Credential) -> RegistrarConfig {
    let mut config = h.config_via(&front.uri);
    config.catalog_auth = CatalogAuth::SigV4(credential);
    config
}

/// Runs a registrar on `config` expecting it to fail, at start or later; returns the error.
async fn run_refused(config: RegistrarConfig) -> thadam_iceberg::Error {
    let feed = SegmentLogTail::open(&config.source.catalog);
    match Registrar::builder(config)
        .feed(feed)
        .tuning(Default::default())
        .start()
        .await
    {
        Err(e) => e,
        Ok(handle) => tokio::time::timeout(Duration::from_secs(120), handle.wait())
            .await
            .expect("registrar stopped in time (hang guard)")
            .expect_err("the registrar should have stopped on the refused signature"),
    }
}

/// Registers what was shipped through `config` and checks that the table holds each of `keys`
/// exactly once; returns the table.
async fn registers(h: &Harness, config: RegistrarConfig, keys: &[String]) -> Table {
    Harness::finish(
        h.start_with(config, Default::default()).await,
        keys.len() as u64,
    )
    .await;
    let table = h.table("telemetry").await.expect("table");
    assert_exactly_once(&table, &h.env.bucket, keys).await;
    table
}

async fn assert_nothing_registered(h: &Harness) {
    let table = h.table("telemetry").await;
    assert!(table.is_none(), "nothing was registered");
}

/// `auth.failed`, with a message that sends the reader to `catalog_sigv4`.
fn assert_sigv4_auth_failed(err: &thadam_iceberg::Error) {
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    let msg = err.to_string();
    for needle in ["403", "catalog_sigv4", "region", "signing_name", "clock"] {
        assert!(
            msg.contains(needle),
            "the message should name {needle}: {msg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_requests_register_segments_and_a_schema_change_through_the_verifying_front() {
    // Two namespace levels: the path carries `%1F`, which SigV4 encodes a second time.
    let mut h = Harness::with(
        "sigv4",
        Options {
            namespace_tail: vec!["inner"],
            ..Default::default()
        },
    );
    let mut keys_shipped = h.ship_many(0, 2, 10).await;
    keys_shipped.push(h.ship("telemetry", &extended_batch(2, 10)).await);
    let keys = Keys::fresh(false);
    let front = Front::for_harness(&h, &keys, FrontOptions::default());
    let mut config = signed_config(&h, &front, keys.accepted());
    // A warehouse with `:`, `/` and a space in the signed query; a header set before signing.
    config.catalog_warehouse = Some("arn:aws:s3tables:eu-west-1:123456789012:bucket/t b".into());
    config.catalog_headers = vec![(
        "X-Iceberg-Access-Delegation".into(),
        Secret::new("vended-credentials"),
    )];
    let table = registers(&h, config, &keys_shipped).await;
    assert!(
        table
            .metadata()
            .current_schema()
            .field_by_name("extra")
            .is_some(),
        "the schema change was committed"
    );
    assert_eq!(row_count(&read_all(&table).await), 30);

    let seen = front.seen();
    assert!(front.refusals().is_empty(), "{:?}", front.refusals());
    let config_call = seen
        .iter()
        .find(|s| s.path.ends_with("/v1/config"))
        .expect("GET /v1/config went through the front");
    assert_eq!(
        config_call.query,
        "warehouse=arn%3Aaws%3As3tables%3Aeu-west-1%3A123456789012%3Abucket%2Ft%20b"
    );
    let namespace = format!("{}%1Finner", h.namespace[0]);
    for (method, part) in [
        ("HEAD", format!("/namespaces/{}", h.namespace[0])),
        ("POST", "/namespaces".to_string()),
        ("HEAD", format!("/namespaces/{namespace}")),
        ("POST", format!("/namespaces/{namespace}/register")),
        ("POST", format!("/namespaces/{namespace}/tables/telemetry")),
    ] {
        assert!(
            seen.iter()
                .any(|s| s.method == method && s.path.ends_with(&part)),
            "{method} …{part} went through the front, signed: {seen:?}"
        );
    }
    let commits = seen
        .iter()
        .filter(|s| s.method == "POST" && s.path.ends_with("/tables/telemetry"))
        .count();
    assert!(commits >= 2, "a schema commit and an append: {seen:?}");
    for s in &seen {
        for header in [
            "host",
            "x-amz-date",
            "x-amz-content-sha256",
            "x-iceberg-access-delegation",
            "accept",
        ] {
            assert!(
                s.signed_headers.iter().any(|h| h == header),
                "{header}: {s:?}"
            );
        }
        if s.method == "POST" {
            assert!(
                s.signed_headers.iter().any(|h| h == "content-type"),
                "{s:?}"
            );
        }
        assert!(!s.signed_headers.iter().any(|h| h == "x-amz-security-token"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_region_signing_name_or_clock_is_refused_with_auth_failed() {
    let mut h = Harness::new("sigv4bad");
    let key = h.ship_telemetry(0, 10).await;
    let keys = Keys::fresh(false);
    let front = Front::for_harness(&h, &keys, FrontOptions::default());

    let wrong_secret = Keys {
        secret_access_key: format!("{}x", keys.secret_access_key),
        ..keys.clone()
    };
    for (what, credential) in [
        ("wrong secret", wrong_secret.accepted()),
        ("wrong region", keys.credential("eu-west-2", SIGNING_NAME)),
        ("wrong signing name", keys.credential(REGION, "s3tables")),
    ] {
        let before = front.refusals().len();
        let err = run_refused(signed_config(&h, &front, credential)).await;
        assert_sigv4_auth_failed(&err);
        let refusals = front.refusals();
        assert_eq!(refusals.len(), before + 1, "{what}: {refusals:?}");
        let last = refusals.last().expect("a refusal");
        assert_eq!(last.verdict, "signature does not match", "{what}");
        assert!(last.path.ends_with("/v1/config"), "{what}: {last:?}");
    }

    // The right keys, but this host's clock 15 minutes behind the server's.
    let skewed = Front::for_harness(
        &h,
        &keys,
        FrontOptions {
            clock_offset: 900,
            ..Default::default()
        },
    );
    let err = run_refused(signed_config(&h, &skewed, keys.accepted())).await;
    assert_sigv4_auth_failed(&err);
    let refusals = skewed.refusals();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert!(
        refusals[0].verdict.starts_with("Signature expired"),
        "{refusals:?}"
    );
    assert_nothing_registered(&h).await;

    // The same front takes the right keys: the refusals were about the signatures.
    let config = signed_config(&h, &front, keys.accepted());
    registers(&h, config, &[key]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_changed_after_signing_is_refused_with_auth_failed() {
    let mut h = Harness::new("sigv4body");
    h.ship_telemetry(0, 10).await;
    let keys = Keys::fresh(false);
    let front = Front::for_harness(
        &h,
        &keys,
        FrontOptions {
            tamper_body: true,
            ..Default::default()
        },
    );
    // GET /v1/config and the namespace HEAD have no body and pass; the first POST does not.
    let err = run_refused(signed_config(&h, &front, keys.accepted())).await;
    assert_sigv4_auth_failed(&err);
    let seen = front.seen();
    assert!(
        seen.iter()
            .any(|s| s.path.ends_with("/v1/config") && s.verdict == "ok"),
        "{seen:?}"
    );
    let refusals = front.refusals();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0].method, "POST");
    assert_eq!(
        refusals[0].verdict,
        "x-amz-content-sha256 is not the SHA-256 of the body"
    );
    assert_nothing_registered(&h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_token_is_sent_and_signed() {
    let mut h = Harness::new("sigv4sts");
    let key = h.ship_telemetry(0, 10).await;
    let keys = Keys::fresh(true);
    let front = Front::for_harness(&h, &keys, FrontOptions::default());

    // Without the token, or with another one, the same keys are refused.
    for (what, token) in [
        ("no session token", None),
        ("another session token", Some("st-other")),
    ] {
        let mut credential = keys.accepted();
        credential.session_token = token.map(Secret::new);
        let err = run_refused(signed_config(&h, &front, credential)).await;
        assert_sigv4_auth_failed(&err);
        let refusals = front.refusals();
        assert_eq!(
            refusals.last().map(|r| r.verdict.as_str()),
            Some("x-amz-security-token missing or wrong"),
            "{what}"
        );
    }

    let before = front.seen().len();
    let config = signed_config(&h, &front, keys.accepted());
    registers(&h, config, &[key]).await;
    let seen = front.seen();
    let accepted = &seen[before..];
    assert!(
        accepted
            .iter()
            .any(|s| s.method == "POST" && s.path.ends_with("/tables/telemetry")),
        "{accepted:?}"
    );
    for s in accepted {
        assert_eq!(s.verdict, "ok", "{s:?}");
        assert!(
            s.signed_headers.iter().any(|h| h == "x-amz-security-token"),
            "the token is covered by the signature: {s:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigv4_keys_never_reach_logs_errors_or_debug_output() {
    let logs = captured_logs();
    let mut h = Harness::new("sigv4leak");
    h.ship_telemetry(0, 10).await;
    let keys = Keys::fresh(true);
    let front = Front::for_harness(&h, &keys, FrontOptions::default());
    let wrong_secret = format!("{}-wrong", keys.secret_access_key);

    // Accepted: a client, and a registration with every kind of request, at trace level.
    let config = signed_config(&h, &front, keys.accepted());
    let client = thadam_iceberg::testing::connect(&config)
        .await
        .expect("signed connection");
    let client_debug = format!("{client:?}");
    let config_debug = format!("{config:?}");
    Harness::finish(h.start_with(config, Default::default()).await, 1).await;

    // Refused: the error as a caller sees it.
    let mut credential = keys.accepted();
    credential.secret_access_key = Secret::new(&wrong_secret);
    let err = run_refused(signed_config(&h, &front, credential)).await;
    assert_sigv4_auth_failed(&err);

    let secrets = [
        keys.secret_access_key.clone(),
        keys.session_token.clone().expect("token"),
        wrong_secret,
    ];
    let log_text = logs.text();
    assert!(
        !log_text.is_empty(),
        "the log capture saw the registrar's output"
    );
    assert_no_secret(
        &secrets,
        &[
            ("the client's Debug", &client_debug),
            ("the config's Debug", &config_debug),
            ("the error message", &err.to_string()),
            ("the error's Debug", &format!("{err:?}")),
            ("the logs", &log_text),
        ],
    );
    // The access key id is kept out of Debug too (it is a `Secret`).
    assert!(
        !config_debug.contains(&keys.access_key_id),
        "{config_debug}"
    );
}
