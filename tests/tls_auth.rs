//! Secure catalog connections, end to end: the real REST fixture behind a real TLS-terminating
//! front (caddy) with throwaway CAs, bearer and OAuth2 fronts, mutual TLS, an in-process token
//! endpoint whose tokens expire in seconds, and a check that no secret reaches a log, an error or
//! a `Debug` output.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Schema};
use common::demo;
use common::logs::{assert_no_secret, captured_logs};
use common::tls::{Caddy, Front, Pki, TlsScenario, TokenMock, pem_body_lines, secured};
use common::{Harness, data_files, read_all, row_count, unique};
use thadam_iceberg::config::{
    CatalogAuth, ClientAuth, ClientIdentity, OAuth2Credential, RegistrarConfig, Secret,
};
use thadam_iceberg::ops::check::{CheckLine, CheckReport, Verdict, check_registrar};
use thadam_iceberg::runtime::status::RegistrarStatus;
use thadam_iceberg::{Error, ErrorCode, Registrar, RegistrarHandle};

/// Hang guard for a start that must fail: a fatal error returns at once, a retried one never.
const FATAL_GUARD: Duration = Duration::from_secs(30);
/// Hang guard for registering a few segments.
const RUN_GUARD: Duration = Duration::from_secs(90);

fn credential(id: &str, secret: &str, token_uri: &str) -> CatalogAuth {
    credential_with(id, secret, token_uri, ClientAuth::Body)
}

fn credential_with(
    id: &str,
    secret: &str,
    token_uri: &str,
    client_auth: ClientAuth,
) -> CatalogAuth {
    CatalogAuth::Credential(OAuth2Credential {
        client_id: id.to_string(),
        client_secret: Secret::new(secret),
        scope: "catalog".to_string(),
        oauth2_server_uri: token_uri.parse().expect("token uri"),
        client_auth,
    })
}

/// A client of a token endpoint: a fresh client id and secret, and a [`TokenMock`] that issues
/// tokens to them.
struct OAuthClient {
    id: String,
    secret: String,
    mock: TokenMock,
}

impl OAuthClient {
    /// A client with a fresh secret whose tokens live `ttl`.
    async fn start(ttl: Duration) -> OAuthClient {
        Self::with_secret(unique("client-secret"), ttl).await
    }

    async fn with_secret(secret: String, ttl: Duration) -> OAuthClient {
        let id = unique("thadam");
        let mock = TokenMock::start(&id, &secret, ttl).await;
        OAuthClient { id, secret, mock }
    }

    /// `catalog_credential` for this client at the mock's token endpoint.
    fn credential(&self) -> CatalogAuth {
        credential(&self.id, &self.secret, &self.mock.token_uri())
    }

    /// The harness's config through the mock, authenticated as this client.
    fn config(&self, h: &Harness) -> RegistrarConfig {
        secured(h, &self.mock.uri, |c| c.catalog_auth = self.credential())
    }
}

/// The fixture's token endpoint behind `caddy`.
fn token_uri(caddy: &Caddy) -> String {
    format!("{}/v1/oauth/tokens", caddy.uri())
}

fn identity(files: &common::tls::CertFiles) -> Option<ClientIdentity> {
    Some(ClientIdentity {
        cert: files.cert.clone(),
        key: files.key.clone(),
    })
}

/// Starts a registrar that must stop on a fatal error (at start, or soon after); returns it.
async fn fatal(config: RegistrarConfig) -> Error {
    let outcome = tokio::time::timeout(FATAL_GUARD, async move {
        match Registrar::builder(config).start().await {
            Err(e) => e,
            Ok(handle) => handle
                .wait()
                .await
                .expect_err("the registrar should stop with a fatal error"),
        }
    })
    .await;
    outcome.expect("a fatal error ends the registrar at once, without retrying (hang guard)")
}

/// Starts a registrar on `config`.
async fn start(config: RegistrarConfig) -> RegistrarHandle {
    Registrar::builder(config)
        .start()
        .await
        .expect("registrar starts")
}

/// Waits until `handle` has handled `n` segments (hang guard [`RUN_GUARD`]); a fatal error
/// fails the test with `what`.
async fn handled(handle: &RegistrarHandle, n: u64, what: &str) -> RegistrarStatus {
    tokio::time::timeout(RUN_GUARD, handle.wait_until(|s| s.handled() >= n))
        .await
        .expect("registered in time (hang guard)")
        .expect(what)
}

/// Stops `handle` and waits for a clean stop.
async fn stop(handle: RegistrarHandle) {
    handle.stop();
    handle.wait().await.expect("clean stop");
}

/// The telemetry schema plus `firmware` (a new column, field id 8).
fn evolved_batch(segment: u64, rows: usize) -> RecordBatch {
    let base = demo::telemetry_batch(segment, rows).expect("batch");
    let mut fields: Vec<arrow_schema::Field> = demo::telemetry_schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(demo::field("firmware", DataType::Utf8, true, 8));
    let mut columns: Vec<ArrayRef> = base.columns().to_vec();
    columns.push(Arc::new(StringArray::from_iter_values(
        (0..rows).map(|i| format!("fw-{}", i % 3)),
    )));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).expect("evolved batch")
}

/// Ships a telemetry segment and one that adds a column, registers both through `config`, and
/// checks that the table gained the column (by field id) and holds both files and all rows.
async fn registers_with_schema_change(h: &mut Harness, config: RegistrarConfig) {
    h.ship_telemetry(0, 40).await;
    h.ship("telemetry", &evolved_batch(1, 30)).await;
    let handle = start(config).await;
    let status = handled(&handle, 2, "registered without a fatal error").await;
    stop(handle).await;
    assert_eq!(status.tables.values().map(|t| t.registered).sum::<u64>(), 2);

    let table = h.table("telemetry").await.expect("table created");
    let firmware = table
        .metadata()
        .current_schema()
        .as_struct()
        .fields()
        .iter()
        .find(|f| f.name == "firmware")
        .map(|f| f.id);
    assert_eq!(firmware, Some(8), "the schema change was committed");
    assert_eq!(data_files(&table).await.len(), 2);
    assert_eq!(row_count(&read_all(&table).await), 70);
}

/// Ships one segment, expects `config` to fail with `code` (the text containing `cause`), and
/// checks that nothing was registered.
async fn fails_and_registers_nothing(
    h: &mut Harness,
    config: RegistrarConfig,
    code: ErrorCode,
    cause: &str,
) -> Error {
    h.ship_telemetry(0, 10).await;
    let err = fatal(config).await;
    assert_eq!(err.code(), code, "{err}");
    assert!(err.to_string().contains(cause), "names the cause: {err}");
    assert!(h.table("telemetry").await.is_none(), "nothing registered");
    err
}

// ---------------------------------------------------------------------------------------------
// HTTPS and the server's certificate
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_ca_registers_and_commits_a_schema_change() {
    let mut s = TlsScenario::start("https", |pki| Front::tls(&pki.server));
    let config = s.config(|_| {});
    registers_with_schema_change(&mut s.h, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_ca_is_fatal_config_invalid() {
    let mut s = TlsScenario::start("otherca", |pki| Front::tls(&pki.server));
    let config = s.config(|c| c.catalog_ca_file = Some(s.pki.other_ca.clone()));
    let err =
        fails_and_registers_nothing(&mut s.h, config, ErrorCode::ConfigInvalid, "UnknownIssuer")
            .await;
    assert!(
        err.to_string().contains("catalog_ca_file"),
        "names the fix: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ca_means_platform_roots_which_do_not_know_the_test_ca() {
    let mut s = TlsScenario::start("noca", |pki| Front::tls(&pki.server));
    let config = s.config(|c| c.catalog_ca_file = None);
    fails_and_registers_nothing(&mut s.h, config, ErrorCode::ConfigInvalid, "UnknownIssuer").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_fatal_config_invalid() {
    let mut s = TlsScenario::start("expired", |pki| Front::tls(&pki.expired));
    let config = s.config(|_| {});
    fails_and_registers_nothing(
        &mut s.h,
        config,
        ErrorCode::ConfigInvalid,
        "certificate expired",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_is_fatal_config_invalid() {
    let mut s = TlsScenario::start("wronghost", |pki| Front {
        default_sni: Some("wrong.example"),
        ..Front::tls(&pki.wrong_host)
    });
    let config = s.config_at(&s.caddy.ip_uri(), |_| {});
    fails_and_registers_nothing(
        &mut s.h,
        config,
        ErrorCode::ConfigInvalid,
        "not valid for name",
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// Bearer token and OAuth2 fronts
// ---------------------------------------------------------------------------------------------

/// caddy rules: anything without exactly `Authorization: Bearer {token}` gets 401.
fn bearer_rules(token: &str) -> String {
    format!(
        "\t@unauthorized not header Authorization \"Bearer {token}\"\n\trespond @unauthorized 401"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_front_accepts_the_token_including_the_schema_commit() {
    let token = unique("bearer");
    let mut s = TlsScenario::start("bearer", |pki| Front {
        rules: bearer_rules(&token),
        ..Front::tls(&pki.server)
    });
    let config = s.config(|c| c.catalog_auth = CatalogAuth::Token(Secret::new(token.clone())));
    registers_with_schema_change(&mut s.h, config).await;
    assert_no_secret(&[token], &[("logs", &captured_logs().text())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_bearer_token_is_fatal_auth_failed() {
    let mut s = TlsScenario::start("badbearer", |pki| Front {
        rules: bearer_rules(&unique("right")),
        ..Front::tls(&pki.server)
    });
    let wrong = unique("wrong");
    let config = s.config(|c| c.catalog_auth = CatalogAuth::Token(Secret::new(wrong.clone())));
    let err = fails_and_registers_nothing(&mut s.h, config, ErrorCode::AuthFailed, "401").await;
    assert_no_secret(&[wrong], &[("the error", &err.to_string())]);
}

/// caddy rules for the OAuth2 front: the fixture's `/v1/oauth/tokens` is open (and issues
/// `client-credentials-token:sub={client_id}`); everything else needs that token.
fn oauth2_rules(client_id: &str) -> String {
    format!(
        "\t@unauthorized {{\n\t\tnot path /v1/oauth/tokens\n\t\tnot header Authorization \
         \"Bearer client-credentials-token:sub={client_id}\"\n\t}}\n\trespond @unauthorized 401"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth2_front_accepts_the_exchanged_token_including_the_schema_commit() {
    let client_id = unique("thadam");
    let secret = unique("client-secret");
    let mut s = TlsScenario::start("oauth2", |pki| Front {
        rules: oauth2_rules(&client_id),
        ..Front::tls(&pki.server)
    });
    let config = s.config(|c| {
        c.catalog_auth = credential(&client_id, &secret, &token_uri(&s.caddy));
    });
    registers_with_schema_change(&mut s.h, config).await;
    assert_no_secret(&[secret], &[("logs", &captured_logs().text())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_endpoint_answering_401_is_fatal_auth_failed() {
    let client_id = unique("thadam");
    let mut s = TlsScenario::start("oauth401", |pki| Front {
        rules: format!(
            "\trespond /v1/oauth/tokens 401\n{}",
            oauth2_rules(&client_id)
        ),
        ..Front::tls(&pki.server)
    });
    let secret = unique("client-secret");
    let config = s.config(|c| {
        c.catalog_auth = credential(&client_id, &secret, &token_uri(&s.caddy));
    });
    let err =
        fails_and_registers_nothing(&mut s.h, config, ErrorCode::AuthFailed, "token endpoint")
            .await;
    assert_no_secret(&[secret], &[("the error", &err.to_string())]);
}

// ---------------------------------------------------------------------------------------------
// Tokens that expire
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiring_tokens_are_renewed_before_they_expire_and_a_401_once() {
    captured_logs();
    let client = OAuthClient::start(Duration::from_secs(3)).await;
    let mock = &client.mock;
    let mut h = Harness::new("expiry");
    let handle = start(client.config(&h)).await;

    // Segments shipped across several token lifetimes (3 s each, renewed at 2.4 s).
    let mut shipped = 0u64;
    for n in 0..6u64 {
        h.ship_telemetry(n, 20).await;
        shipped += 1;
        handled(&handle, shipped, "no error while tokens expire").await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(
        mock.exchanges() >= 3,
        "tokens were renewed ({} exchanges)",
        mock.exchanges()
    );
    assert_eq!(
        mock.rejected(),
        0,
        "the refresher renewed every token before it expired: no request met a 401"
    );
    assert!(handle.status().fatal.is_none());

    // Long-lived tokens from now on; wait until the registrar holds one, then revoke it.
    mock.set_ttl(Duration::from_secs(120));
    tokio::time::timeout(Duration::from_secs(20), async {
        while mock.latest_ttl() != Some(Duration::from_secs(120)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the refresher renewed the token (hang guard)");
    tokio::time::sleep(Duration::from_millis(200)).await;
    mock.revoke_latest();
    let exchanges = mock.exchanges();
    h.ship_telemetry(6, 20).await;
    shipped += 1;
    handled(&handle, shipped, "a 401 is recovered by one re-exchange").await;
    assert_eq!(mock.rejected(), 1, "the revoked token met one 401");
    assert_eq!(mock.exchanges(), exchanges + 1, "exactly one re-exchange");

    stop(handle).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(data_files(&table).await.len(), shipped as usize);
    let mut secrets = mock.issued();
    secrets.push(client.secret.clone());
    assert_no_secret(&secrets, &[("logs", &captured_logs().text())]);
}

/// Token endpoints that want the client authenticated by HTTP Basic (`client_auth: basic`): the
/// registrar authenticates that way, and with the default (form body) the same endpoint refuses
/// it with `auth.failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_basic_client_authentication_at_the_token_endpoint() {
    captured_logs();
    let secret = format!("{}+/&=:", unique("client-secret"));
    let client = OAuthClient::with_secret(secret, Duration::from_secs(120)).await;
    let mock = &client.mock;
    mock.require_basic();
    let mut h = Harness::new("basic-auth");

    // The default (form body) is refused by a Basic-only endpoint.
    let err = fatal(client.config(&h)).await;
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert_eq!(mock.exchanges(), 0);

    // client_auth: basic works, a schema change included.
    let config = secured(&h, &mock.uri, |c| {
        c.catalog_auth = credential_with(
            &client.id,
            &client.secret,
            &mock.token_uri(),
            ClientAuth::Basic,
        );
    });
    registers_with_schema_change(&mut h, config).await;
    assert!(mock.exchanges() >= 1);
    assert_eq!(
        mock.basic_exchanges(),
        mock.exchanges(),
        "every exchange used Basic"
    );
    let mut secrets = mock.issued();
    secrets.push(client.secret.clone());
    assert_no_secret(
        &secrets,
        &[
            ("logs", &captured_logs().text()),
            ("the error", &err.to_string()),
        ],
    );
}

/// A catalog that answers 419 (not 401) to an expired token: one re-exchange, then the request is
/// repeated and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_419_for_an_expired_token_is_renewed_once() {
    let client = OAuthClient::start(Duration::from_secs(120)).await;
    let mock = &client.mock;
    mock.answer_expired_with(419);
    let mut h = Harness::new("status-419");
    let handle = start(client.config(&h)).await;
    h.ship_telemetry(0, 10).await;
    handled(&handle, 1, "registered").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    mock.revoke_latest();
    let exchanges = mock.exchanges();
    h.ship_telemetry(1, 10).await;
    handled(&handle, 2, "a 419 is recovered by one re-exchange").await;
    assert_eq!(mock.rejected(), 1, "the revoked token met one 419");
    assert_eq!(mock.exchanges(), exchanges + 1, "exactly one re-exchange");
    stop(handle).await;
    let table = h.table("telemetry").await.expect("table");
    assert_eq!(data_files(&table).await.len(), 2);
}

/// The token source on its own: a token endpoint that is briefly down is transient (retried with
/// backoff), and a burst of 401s on one token causes one exchange, shared by all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_endpoint_outages_are_retried_and_concurrent_401s_share_one_exchange() {
    use thadam_iceberg::config::RetryPolicy;
    use thadam_iceberg::testing::RefreshedToken;
    use thadam_iceberg::testing::TokenSource;
    use thadam_iceberg::testing::{TlsSettings, catalog_http_client};

    captured_logs();
    let client = OAuthClient::start(Duration::from_secs(60)).await;
    let mock = &client.mock;
    mock.fail_next(2);
    let http = catalog_http_client(&TlsSettings::default()).expect("http client");
    let retry = RetryPolicy {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(400),
        jitter: false,
    };
    let CatalogAuth::Credential(cred) = client.credential() else {
        unreachable!()
    };
    let tokens = RefreshedToken::start(cred, http, retry)
        .await
        .expect("refresher");

    // The first exchange met a 503: transient, and the refresher retries on its own.
    let first = tokens
        .current()
        .await
        .expect_err("the endpoint is down at first");
    assert_eq!(first.code(), ErrorCode::Unavailable, "{first}");
    let token = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match tokens.current().await {
                Ok(Some(t)) => return t,
                Ok(None) => panic!("a credential always gives a token"),
                Err(e) => {
                    assert!(e.is_transient(), "{e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await
    .expect("the refresher recovered (hang guard)");
    assert_eq!(mock.exchanges(), 1);

    // Five requests see 401 on the same token at once: one exchange, one new token for all.
    let renewals =
        futures::future::join_all((0..5).map(|_| tokens.renew_after_rejection(&token))).await;
    let fresh: Vec<u64> = renewals
        .into_iter()
        .map(|r| r.expect("renewed").expect("a token").generation)
        .collect();
    assert!(
        fresh.iter().all(|g| *g == token.generation + 1),
        "{fresh:?}"
    );
    assert_eq!(mock.exchanges(), 2, "one exchange for the burst");
}

/// A credential revoked at the token endpoint is fatal `auth.failed` at the next renewal, even
/// with no catalog request in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_refused_at_renewal_stops_the_registrar() {
    captured_logs();
    let client = OAuthClient::start(Duration::from_secs(2)).await;
    let mut h = Harness::new("revoked");
    h.ship_telemetry(0, 10).await;
    let handle = start(client.config(&h)).await;
    handled(&handle, 1, "registered").await;
    client.mock.refuse_exchanges();
    let err = tokio::time::timeout(FATAL_GUARD, handle.wait())
        .await
        .expect("the refused renewal stops the registrar (hang guard)")
        .expect_err("stopped with a fatal error");
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert!(err.to_string().contains("invalid_client"), "{err}");
    assert_no_secret(
        std::slice::from_ref(&client.secret),
        &[("the error", &err.to_string())],
    );
}

/// `--check` with `catalog_credential`: the token is exchanged once, and when the token endpoint
/// gives none the catalog is not asked, so "catalog reachable" says `warn` (not known), never
/// `ok`, and "auth accepted" fails with the token endpoint's error (the endpoint's query string
/// redacted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_does_not_call_the_catalog_reachable_when_the_token_endpoint_refused() {
    let client = OAuthClient::start(Duration::from_secs(60)).await;
    let mock = &client.mock;
    let h = Harness::new("check_token");
    let line = |report: &CheckReport, check: &str| -> CheckLine {
        report
            .lines
            .iter()
            .find(|l| l.check == check)
            .cloned()
            .unwrap_or_else(|| panic!("no {check:?} line in:\n{report}"))
    };

    // The right secret: one exchange, then the catalog is asked with that token.
    let good = client.config(&h);
    let mut report = CheckReport::default();
    check_registrar(&good, &mut report).await;
    assert_eq!(
        line(&report, "catalog reachable").verdict,
        Verdict::Ok,
        "{report}"
    );
    assert_eq!(
        line(&report, "auth accepted").verdict,
        Verdict::Ok,
        "{report}"
    );
    assert_eq!(mock.exchanges(), 1, "one exchange:\n{report}");
    assert!(mock.forwarded() >= 1, "the catalog was asked:\n{report}");

    // A wrong secret, and a key in the token endpoint's query string: refused at the token
    // endpoint, and the catalog is never asked.
    let forwarded = mock.forwarded();
    let wrong = unique("wrong-secret");
    let key = unique("query-key");
    let refused = secured(&h, &mock.uri, |c| {
        c.catalog_auth = credential(
            &client.id,
            &wrong,
            &format!("{}?key={key}", mock.token_uri()),
        );
    });
    let mut report = CheckReport::default();
    check_registrar(&refused, &mut report).await;
    let reachable = line(&report, "catalog reachable");
    assert_eq!(reachable.verdict, Verdict::CannotTell, "{report}");
    assert!(reachable.to_string().starts_with("warn "), "{report}");
    assert!(reachable.detail.contains("was not asked"), "{report}");
    let auth = line(&report, "auth accepted");
    assert_eq!(
        auth.verdict,
        Verdict::Fail(ErrorCode::AuthFailed),
        "{report}"
    );
    assert!(auth.detail.contains("invalid_client"), "{report}");
    assert!(
        auth.detail.contains(&format!("{}/token", mock.uri)),
        "the endpoint, redacted:\n{report}"
    );
    assert_eq!(report.first_failure(), Some(ErrorCode::AuthFailed));
    assert_eq!(mock.forwarded(), forwarded, "the catalog was not asked");
    assert_eq!(mock.exchanges(), 1, "no token was issued");
    assert_no_secret(
        &[wrong, client.secret.clone(), key],
        &[("the report", &report.to_string())],
    );
}

// ---------------------------------------------------------------------------------------------
// Mutual TLS
// ---------------------------------------------------------------------------------------------

/// A front that asks for a client certificate from the test CA.
fn mtls(test: &str) -> TlsScenario {
    TlsScenario::start(test, |pki| Front {
        client_ca: Some(&pki.ca),
        ..Front::tls(&pki.server)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_works_with_a_client_certificate_from_the_trusted_ca() {
    let mut s = mtls("mtls");
    let config = s.config(|c| c.catalog_client_identity = identity(&s.pki.client));
    registers_with_schema_change(&mut s.h, config).await;
    assert_no_secret(
        &pem_body_lines(&s.pki.client.key_pem),
        &[("logs", &captured_logs().text())],
    );
}

/// The mTLS front refuses the client certificate `client` picks (none, or one it does not
/// trust): fatal `auth.failed`, nothing registered.
async fn mtls_refuses(test: &str, client: impl FnOnce(&Pki) -> Option<ClientIdentity>) {
    let mut s = mtls(test);
    let config = s.config(|c| c.catalog_client_identity = client(&s.pki));
    fails_and_registers_nothing(
        &mut s.h,
        config,
        ErrorCode::AuthFailed,
        "client certificate",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_without_a_client_certificate_is_fatal_auth_failed() {
    mtls_refuses("mtlsnone", |_| None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_with_a_certificate_from_another_ca_is_fatal_auth_failed() {
    mtls_refuses("mtlsother", |pki| identity(&pki.other_client)).await;
}

// ---------------------------------------------------------------------------------------------
// Secrets stay secret
// ---------------------------------------------------------------------------------------------

/// The auth failures again, with every log line captured: no token, client secret, S3 secret key
/// or private key appears in the logs, the errors, or the `Debug` of configs and clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_logs_errors_or_debug_output() {
    let logs = captured_logs();
    let right = unique("right-token");
    let wrong = unique("wrong-token");
    let client_id = unique("thadam");
    let secret = unique("client-secret");
    let mut errors = Vec::new();
    let mut debug = Vec::new();

    // A wrong bearer token, presented with a client certificate (mTLS + bearer).
    let mut s = TlsScenario::start("secrets", |pki| Front {
        client_ca: Some(&pki.ca),
        rules: bearer_rules(&right),
        ..Front::tls(&pki.server)
    });
    let config = s.config(|c| {
        c.catalog_auth = CatalogAuth::Token(Secret::new(wrong.clone()));
        c.catalog_client_identity = identity(&s.pki.client);
    });
    debug.push(format!("{config:?}"));
    errors.push(fatal(config).await);

    // A client certificate the front does not trust.
    let config = s.config(|c| {
        c.catalog_auth = CatalogAuth::Token(Secret::new(right.clone()));
        c.catalog_client_identity = identity(&s.pki.other_client);
    });
    debug.push(format!("{config:?}"));
    errors.push(fatal(config).await);

    // A token endpoint that refuses the credential (caddy answers 401).
    let refusing = Caddy::start(Front {
        rules: "\trespond /v1/oauth/tokens 401".to_string(),
        ..Front::tls(&s.pki.server)
    });
    let config = s.config_at(&refusing.uri(), |c| {
        c.catalog_auth = credential(&client_id, &secret, &token_uri(&refusing));
    });
    debug.push(format!("{config:?}"));
    errors.push(fatal(config).await);

    // A token endpoint that answers invalid_client to a wrong secret.
    let mock = TokenMock::start(&client_id, &unique("other-secret"), Duration::from_secs(60)).await;
    let config = secured(&s.h, &mock.uri, |c| {
        c.catalog_auth = credential(&client_id, &secret, &mock.token_uri());
    });
    errors.push(fatal(config).await);

    // A working credential that registers a segment (S3 keys in use), meets a revoked token
    // once, and the clients and status holding it all.
    let mock = TokenMock::start(&client_id, &secret, Duration::from_secs(60)).await;
    let config = secured(&s.h, &mock.uri, |c| {
        c.catalog_auth = credential(&client_id, &secret, &mock.token_uri());
    });
    let client = thadam_iceberg::testing::connect(&config)
        .await
        .expect("connects with the credential");
    debug.push(format!("{config:?}"));
    debug.push(format!("{client:?}"));
    drop(client);
    s.h.ship_telemetry(0, 10).await;
    let handle = start(config).await;
    mock.revoke_latest();
    let status = handled(&handle, 1, "registered").await;
    debug.push(format!("{status:?}"));
    stop(handle).await;
    assert!(mock.rejected() >= 1, "the revoked token met a 401");

    for e in &errors {
        assert!(
            matches!(e.code(), ErrorCode::AuthFailed),
            "every failure here is auth.failed: {e}"
        );
        debug.push(format!("{e:?}"));
    }
    let error_text: String = errors.iter().map(|e| format!("{e}\n")).collect();
    let debug_text = debug.join("\n");
    let mut secrets = vec![
        right,
        wrong,
        secret,
        std::env::var("THADAM_TEST_S3_SECRET_KEY").expect("S3 secret key"),
    ];
    secrets.extend(mock.issued());
    secrets.extend(pem_body_lines(&s.pki.client.key_pem));
    secrets.extend(pem_body_lines(&s.pki.other_client.key_pem));
    assert!(!mock.issued().is_empty(), "a token was issued");
    let log_text = logs.text();
    assert!(
        log_text.contains("auth.failed") || log_text.contains("token"),
        "the capture sees the registrar's logs"
    );
    assert_no_secret(
        &secrets,
        &[
            ("logs", &log_text),
            ("errors", &error_text),
            ("Debug output", &debug_text),
        ],
    );
}
