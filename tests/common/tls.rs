//! Fixtures for tests/tls_auth.rs: throwaway CAs and certificates made with rcgen, a real
//! TLS-terminating front (Debian's caddy, one process per scenario) in front of the REST fixture,
//! the scenario most of its tests start from (a [`TlsScenario`]: certificates, a front, a harness
//! whose config trusts the front), and an in-process OAuth2 token endpoint with a front that
//! rejects expired tokens.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, date_time_ymd,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use thadam_iceberg::config::RegistrarConfig;

use super::Harness;
use super::forward::reserve_port;
use super::logs::captured_logs;

// ---------------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------------

/// A certificate and its private key, as PEM files.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The key's PEM text, to check that it never reaches a log or an error.
    pub key_pem: String,
}

/// Everything the TLS scenarios need, written to a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// The CA the fronts' certificates come from (what `catalog_ca_file` points at).
    pub ca: PathBuf,
    /// An unrelated CA.
    pub other_ca: PathBuf,
    /// For 127.0.0.1 and localhost, from `ca`.
    pub server: CertFiles,
    /// For 127.0.0.1 and localhost, from `ca`, expired in 2021.
    pub expired: CertFiles,
    /// For `wrong.example` only, from `ca`.
    pub wrong_host: CertFiles,
    /// Client certificates for mutual TLS, from `ca` and from `other_ca`.
    pub client: CertFiles,
    pub other_client: CertFiles,
}

struct Ca {
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new(name: &str, dir: &Path) -> (Ca, PathBuf) {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = date_time_ymd(2020, 1, 1);
        params.not_after = date_time_ymd(2100, 1, 1);
        let key = KeyPair::generate().expect("ca key");
        let cert = params.self_signed(&key).expect("self-signed ca");
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, cert.pem()).expect("write ca");
        (
            Ca {
                issuer: Issuer::new(params, key),
            },
            path,
        )
    }

    fn leaf(
        &self,
        dir: &Path,
        file: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        expired: bool,
    ) -> CertFiles {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, file);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        if expired {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2021, 1, 1);
        } else {
            params.not_before = date_time_ymd(2020, 1, 1);
            params.not_after = date_time_ymd(2100, 1, 1);
        }
        let key = KeyPair::generate().expect("leaf key");
        let cert = params.signed_by(&key, &self.issuer).expect("signed leaf");
        let cert_path = dir.join(format!("{file}.pem"));
        let key_path = dir.join(format!("{file}-key.pem"));
        let key_pem = key.serialize_pem();
        std::fs::write(&cert_path, cert.pem()).expect("write cert");
        std::fs::write(&key_path, &key_pem).expect("write key");
        CertFiles {
            cert: cert_path,
            key: key_path,
            key_pem,
        }
    }
}

impl Pki {
    pub fn generate() -> Pki {
        let dir = tempfile::tempdir().expect("pki dir");
        let (ca, ca_path) = Ca::new("test-ca", dir.path());
        let (other, other_path) = Ca::new("other-ca", dir.path());
        let local = ["127.0.0.1", "localhost"];
        let server = ExtendedKeyUsagePurpose::ServerAuth;
        let client = ExtendedKeyUsagePurpose::ClientAuth;
        Pki {
            server: ca.leaf(dir.path(), "server", &local, server.clone(), false),
            expired: ca.leaf(dir.path(), "expired", &local, server.clone(), true),
            wrong_host: ca.leaf(dir.path(), "wrong-host", &["wrong.example"], server, false),
            client: ca.leaf(
                dir.path(),
                "client",
                &["thadam-client"],
                client.clone(),
                false,
            ),
            other_client: other.leaf(
                dir.path(),
                "other-client",
                &["thadam-client"],
                client,
                false,
            ),
            ca: ca_path,
            other_ca: other_path,
            dir,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// caddy: the real TLS-terminating front
// ---------------------------------------------------------------------------------------------

/// How one caddy front is set up.
pub struct Front<'a> {
    /// The certificate it serves.
    pub cert: &'a CertFiles,
    /// Require client certificates signed by this CA (`client_auth require_and_verify`).
    pub client_ca: Option<&'a Path>,
    /// The certificate name to serve when the client sends no SNI (it does not for an IP).
    pub default_sni: Option<&'a str>,
    /// Caddyfile lines placed before `reverse_proxy` (matchers, `respond` rules).
    pub rules: String,
}

impl<'a> Front<'a> {
    pub fn tls(cert: &'a CertFiles) -> Front<'a> {
        Front {
            cert,
            client_ca: None,
            default_sni: None,
            rules: String::new(),
        }
    }
}

/// A caddy process terminating TLS on a free loopback port and proxying to the REST fixture.
/// Killed on drop.
pub struct Caddy {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

/// `host:port` of the REST fixture.
pub fn fixture_upstream() -> String {
    let uri = std::env::var("THADAM_TEST_CATALOG_URI").unwrap_or_else(|_| {
        panic!(
            "THADAM_TEST_CATALOG_URI is not set: run `scripts/test`, or `scripts/servers start \
             DIR && source DIR/env` first"
        )
    });
    super::forward::socket_of(&uri).to_string()
}

impl Caddy {
    pub fn start(front: Front<'_>) -> Caddy {
        let dir = tempfile::tempdir().expect("caddy dir");
        let port = reserve_port();
        let client_auth = front.client_ca.map_or(String::new(), |ca| {
            format!(
                " {{\n\t\tclient_auth {{\n\t\t\tmode require_and_verify\n\t\t\t\
                 trusted_ca_cert_file {}\n\t\t}}\n\t}}",
                ca.display()
            )
        });
        let default_sni = front
            .default_sni
            .map_or(String::new(), |name| format!("\tdefault_sni {name}\n"));
        // admin off: parallel caddies would fight over :2019. auto_https off: no ACME, no
        // redirects; the `tls` line alone makes the site HTTPS.
        let caddyfile = format!(
            "{{\n\tadmin off\n\tauto_https off\n{default_sni}\tstorage file_system {data}\n\t\
             log {{\n\t\toutput file {log}\n\t\tlevel DEBUG\n\t}}\n}}\n\
             :{port} {{\n\ttls {cert} {key}{client_auth}\n{rules}\n\treverse_proxy {upstream}\n}}\n",
            data = dir.path().join("data").display(),
            log = dir.path().join("caddy.log").display(),
            cert = front.cert.cert.display(),
            key = front.cert.key.display(),
            rules = front.rules,
            upstream = fixture_upstream(),
        );
        let file = dir.path().join("Caddyfile");
        std::fs::write(&file, &caddyfile).expect("write Caddyfile");
        let out = std::fs::File::create(dir.path().join("stdout.log")).expect("caddy stdout");
        let err = out.try_clone().expect("caddy stderr");
        let child = Command::new("caddy")
            .arg("run")
            .arg("--config")
            .arg(&file)
            .arg("--adapter")
            .arg("caddyfile")
            // Keep caddy's autosave and data out of the real home.
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path())
            .env("XDG_DATA_HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run caddy ({e}): install it with scripts/install-tools")
            });
        let mut caddy = Caddy { child, port, dir };
        caddy.wait_listening(&caddyfile);
        caddy
    }

    fn wait_listening(&mut self, caddyfile: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "caddy exited ({status}) before listening:\n{}\n--- Caddyfile:\n{caddyfile}",
                    self.logs()
                );
            }
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "caddy did not listen on {} in time:\n{}",
                self.port,
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `https://localhost:{port}`: a name, sent as SNI. (caddy answers 421 when SNI and Host
    /// differ on a site with client authentication, so the name matters there.)
    pub fn uri(&self) -> String {
        format!("https://localhost:{}", self.port)
    }

    /// `https://127.0.0.1:{port}`: an IP, so no SNI is sent and caddy serves the certificate of
    /// [`Front::default_sni`].
    pub fn ip_uri(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// caddy's own output and log, for failure messages.
    pub fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.path().join(f)).unwrap_or_default();
        format!("{}{}", read("stdout.log"), read("caddy.log"))
    }
}

impl Drop for Caddy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// A TLS scenario: what most TLS tests start from
// ---------------------------------------------------------------------------------------------

/// A fresh [`Pki`], a caddy front made from it, and the test's harness. The log capture is
/// installed first, so that every line the scenario logs is seen.
pub struct TlsScenario {
    pub pki: Pki,
    pub caddy: Caddy,
    pub h: Harness,
}

impl TlsScenario {
    /// A scenario for test `test`; `front` sets up the front from the scenario's certificates.
    pub fn start(test: &str, front: impl FnOnce(&Pki) -> Front<'_>) -> TlsScenario {
        captured_logs();
        let pki = Pki::generate();
        let caddy = Caddy::start(front(&pki));
        let h = Harness::new(test);
        TlsScenario { pki, caddy, h }
    }

    /// The harness's config through the front (by name), trusting the test CA, with `edit`
    /// applied after (auth, a client certificate, another CA).
    pub fn config(&self, edit: impl FnOnce(&mut RegistrarConfig)) -> RegistrarConfig {
        self.config_at(&self.caddy.uri(), edit)
    }

    /// [`TlsScenario::config`] through `uri` (the front by IP, or another front).
    pub fn config_at(&self, uri: &str, edit: impl FnOnce(&mut RegistrarConfig)) -> RegistrarConfig {
        secured(&self.h, uri, |c| {
            c.catalog_ca_file = Some(self.pki.ca.clone());
            edit(c);
        })
    }
}

/// The harness's config pointed at `uri`, with `edit` applied (CA, auth, client certificate).
pub fn secured(h: &Harness, uri: &str, edit: impl FnOnce(&mut RegistrarConfig)) -> RegistrarConfig {
    let mut config = h.config_via(uri);
    edit(&mut config);
    config
}

// ---------------------------------------------------------------------------------------------
// An in-process OAuth2 token endpoint and a front that enforces token expiry
// ---------------------------------------------------------------------------------------------

struct Issued {
    value: String,
    issued: Instant,
    ttl: Duration,
    revoked: bool,
}

struct MockState {
    client_id: String,
    client_secret: String,
    ttl_ms: AtomicU64,
    tokens: Mutex<Vec<Issued>>,
    exchanges: AtomicU64,
    rejected: AtomicU64,
    forwarded: AtomicU64,
    /// The next this-many exchanges answer 503.
    unavailable: AtomicU64,
    /// Every exchange from now on answers 401 invalid_client.
    refusing: AtomicBool,
    /// Client authentication must be HTTP Basic; credentials in the form body are refused.
    basic_only: AtomicBool,
    /// Exchanges that authenticated by HTTP Basic.
    basic_exchanges: AtomicU64,
    /// What the front answers to an expired or revoked token: 401, or 419 as some catalogs do.
    expired_status: std::sync::atomic::AtomicU16,
    upstream: String,
    http: reqwest::Client,
}

/// `POST /token` issues tokens (client credentials in the form body) that live `ttl`; every other
/// path needs a live, unrevoked token (else 401) and is forwarded to the REST fixture.
pub struct TokenMock {
    pub uri: String,
    state: Arc<MockState>,
    task: JoinHandle<()>,
}

impl TokenMock {
    pub async fn start(client_id: &str, client_secret: &str, ttl: Duration) -> TokenMock {
        thadam_iceberg::testing::install_crypto_provider();
        let state = Arc::new(MockState {
            client_id: client_id.to_string(),
            client_secret: client_secret.to_string(),
            ttl_ms: AtomicU64::new(ttl.as_millis() as u64),
            tokens: Mutex::new(Vec::new()),
            exchanges: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            unavailable: AtomicU64::new(0),
            refusing: AtomicBool::new(false),
            basic_only: AtomicBool::new(false),
            basic_exchanges: AtomicU64::new(0),
            expired_status: std::sync::atomic::AtomicU16::new(401),
            upstream: format!("http://{}", fixture_upstream()),
            http: reqwest::Client::builder()
                .build()
                .expect("forwarding client"),
        });
        let app = Router::new()
            .route("/token", axum::routing::post(token))
            .fallback(front)
            .with_state(Arc::clone(&state));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind mock");
        let uri = format!("http://{}", listener.local_addr().expect("addr"));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TokenMock { uri, state, task }
    }

    pub fn token_uri(&self) -> String {
        format!("{}/token", self.uri)
    }

    /// Successful exchanges so far.
    pub fn exchanges(&self) -> u64 {
        self.state.exchanges.load(Ordering::SeqCst)
    }

    /// Catalog requests answered 401 so far.
    pub fn rejected(&self) -> u64 {
        self.state.rejected.load(Ordering::SeqCst)
    }

    /// Catalog requests forwarded to the fixture so far.
    pub fn forwarded(&self) -> u64 {
        self.state.forwarded.load(Ordering::SeqCst)
    }

    /// The next `n` exchanges answer 503 (a token endpoint that is briefly down).
    pub fn fail_next(&self, n: u64) {
        self.state.unavailable.store(n, Ordering::SeqCst);
    }

    /// Every exchange from now on answers 401 (the credential was revoked).
    pub fn refuse_exchanges(&self) {
        self.state.refusing.store(true, Ordering::SeqCst);
    }

    /// From now on the token endpoint accepts client authentication by HTTP Basic only.
    pub fn require_basic(&self) {
        self.state.basic_only.store(true, Ordering::SeqCst);
    }

    /// Successful exchanges that authenticated by HTTP Basic.
    pub fn basic_exchanges(&self) -> u64 {
        self.state.basic_exchanges.load(Ordering::SeqCst)
    }

    /// The status the front answers to an expired or revoked token (401 by default; 419 is what
    /// some catalogs send).
    pub fn answer_expired_with(&self, status: u16) {
        self.state.expired_status.store(status, Ordering::SeqCst);
    }

    /// The lifetime of tokens issued from now on.
    pub fn set_ttl(&self, ttl: Duration) {
        self.state
            .ttl_ms
            .store(ttl.as_millis() as u64, Ordering::SeqCst);
    }

    /// The lifetime of the last token issued.
    pub fn latest_ttl(&self) -> Option<Duration> {
        self.state.tokens.lock().ok()?.last().map(|t| t.ttl)
    }

    /// Revokes the last token issued: the front answers 401 to it from now on.
    pub fn revoke_latest(&self) {
        if let Some(t) = self.state.tokens.lock().expect("tokens").last_mut() {
            t.revoked = true;
        }
    }

    /// Every token issued, to check that none reached a log.
    pub fn issued(&self) -> Vec<String> {
        self.state
            .tokens
            .lock()
            .expect("tokens")
            .iter()
            .map(|t| t.value.clone())
            .collect()
    }
}

impl Drop for TokenMock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The client id and secret of an `Authorization: Basic` header, each form-urlencoded first as
/// RFC 6749 section 2.3.1 says.
fn basic_credentials(headers: &HeaderMap) -> Option<(String, String)> {
    use base64::Engine;
    let encoded = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (id, secret) = text.split_once(':')?;
    let unescape = |s: &str| {
        url::form_urlencoded::parse(format!("v={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    Some((unescape(id)?, unescape(secret)?))
}

async fn token(
    State(state): State<Arc<MockState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut form: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(&body).into_owned().collect();
    let basic = basic_credentials(&headers);
    if state.basic_only.load(Ordering::SeqCst) {
        // Credentials in the body do not count; only the header's.
        form.remove("client_id");
        form.remove("client_secret");
    }
    if let Some((id, secret)) = &basic {
        form.insert("client_id".into(), id.clone());
        form.insert("client_secret".into(), secret.clone());
    }
    let get = |k: &str| form.get(k).map(String::as_str);
    let down = state
        .unavailable
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if down {
        return json(StatusCode::SERVICE_UNAVAILABLE, "{}".into());
    }
    if state.refusing.load(Ordering::SeqCst)
        || get("grant_type") != Some("client_credentials")
        || get("client_id") != Some(state.client_id.as_str())
        || get("client_secret") != Some(state.client_secret.as_str())
    {
        return json(
            StatusCode::UNAUTHORIZED,
            r#"{"error":"invalid_client"}"#.into(),
        );
    }
    if basic.is_some() {
        state.basic_exchanges.fetch_add(1, Ordering::SeqCst);
    }
    let n = state.exchanges.fetch_add(1, Ordering::SeqCst) + 1;
    let ttl = Duration::from_millis(state.ttl_ms.load(Ordering::SeqCst));
    let value = format!("mock-token-{n}-{}", uuid::Uuid::new_v4().simple());
    state.tokens.lock().expect("tokens").push(Issued {
        value: value.clone(),
        issued: Instant::now(),
        ttl,
        revoked: false,
    });
    json(
        StatusCode::OK,
        format!(
            r#"{{"access_token":"{value}","token_type":"bearer","expires_in":{}}}"#,
            ttl.as_secs()
        ),
    )
}

fn json(status: StatusCode, body: String) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .expect("response")
}

fn live(state: &MockState, headers: &HeaderMap) -> bool {
    let Some(presented) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let tokens = state.tokens.lock().expect("tokens");
    tokens
        .iter()
        .any(|t| t.value == presented && !t.revoked && t.issued.elapsed() < t.ttl)
}

async fn front(State(state): State<Arc<MockState>>, request: Request) -> Response {
    if !live(&state, request.headers()) {
        state.rejected.fetch_add(1, Ordering::SeqCst);
        let status = StatusCode::from_u16(state.expired_status.load(Ordering::SeqCst))
            .unwrap_or(StatusCode::UNAUTHORIZED);
        return json(
            status,
            r#"{"error":{"message":"token expired or unknown","type":"NotAuthorizedException","code":401}}"#
                .into(),
        );
    }
    state.forwarded.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
        return json(StatusCode::BAD_REQUEST, "{}".into());
    };
    let target = format!(
        "{}{}",
        state.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut forward = state.http.request(parts.method, target);
    for (name, value) in &parts.headers {
        if name != header::HOST && name != header::CONTENT_LENGTH && name != header::AUTHORIZATION {
            forward = forward.header(name, value);
        }
    }
    match forward.body(body).send().await {
        Ok(answer) => {
            let mut out = Response::builder().status(answer.status().as_u16());
            if let Some(ct) = answer.headers().get(header::CONTENT_TYPE) {
                out = out.header(header::CONTENT_TYPE, ct);
            }
            let bytes = answer.bytes().await.unwrap_or_default();
            out.body(Body::from(bytes)).expect("response")
        }
        Err(_) => json(StatusCode::BAD_GATEWAY, "{}".into()),
    }
}

/// The PEM body lines of a private key (each would betray it).
pub fn pem_body_lines(pem: &str) -> Vec<String> {
    pem.lines()
        .filter(|l| !l.starts_with("-----") && l.len() > 16)
        .map(str::to_string)
        .collect()
}
