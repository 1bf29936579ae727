//! The catalog's S3 signer (the Iceberg REST "S3 signer" protocol, `s3-signer-open-api.yaml`):
//! [`CatalogSigner`] implements io's [`RequestSigner`] by POSTing each S3 request's
//! `{region, uri, method, headers}` (and `body` for a `DeleteObjects` only) to the signer the
//! table's config names (`catalog::access::SignerTarget`), with the catalog client's own HTTP
//! client (TLS roots, client certificate), `catalog_headers` and bearer token, and takes its
//! answer `{uri, headers}`.
//!
//! - **Failures, by type.** A refusal (any 4xx but 408/429, after one token renewal on 401/419)
//!   is `auth.failed`, quoting the catalog's message: the committer then reloads the table once
//!   for a fresh signer (Nessie's endpoint carries a grant that expires after hours and is then
//!   refused with 400) and stops when refused again, never retrying forever. A transport failure,
//!   a timeout, 408, 429 and 5xx are retried here a few times ([`SignerLimits`]) and are then
//!   `sink.iceberg_unavailable` (retried with backoff by the caller, like any outage). An answer
//!   that is not the protocol's, or names another host, is `sink.iceberg_catalog_rejected`.
//! - **Caching.** Like Java's client, an answer sent with `Cache-Control: private` is reused for
//!   30 s, but only for exactly the same request (method, region, URI and headers: a signature
//!   covers the headers, a cached one for another `Range` would be refused).
//! - **Secrets.** The bearer token and `catalog_headers` travel marked sensitive; the answer's
//!   headers (the signature, a session token) are never logged, never quoted in an error and
//!   never shown by `Debug`; neither is the signer's endpoint path (Nessie's holds its grant):
//!   errors and `Debug` name the signer by its origin only.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use reqwest::StatusCode;
use reqwest::header::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::catalog::auth::{BearerToken, SharedTokenSource};
use crate::catalog::error_message::message_of;
use crate::catalog::outcome::parse_retry_after;
use crate::catalog::tls::{error_chain_text, tls_cause};
use crate::error::{Error, ErrorCode, Result};
use crate::io::signer::{RequestSigner, SignRequest, Signed};

/// How hard one signature is tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SignerLimits {
    /// Attempts in all for a transient failure (transport, timeout, 408, 429, 5xx).
    pub attempts: u32,
    /// The pause before the second attempt, doubled for each later one.
    pub backoff: Duration,
    /// The longest pause (a `Retry-After` included).
    pub max_backoff: Duration,
    /// One attempt's time limit.
    pub timeout: Duration,
}

impl Default for SignerLimits {
    fn default() -> Self {
        SignerLimits {
            attempts: 4,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
        }
    }
}

/// How long an answer the signer marked cacheable is reused, and how many are kept.
const CACHE_TTL: Duration = Duration::from_secs(30);
const CACHE_ENTRIES: usize = 64;

/// What the signer is reached with: the catalog client's HTTP client, token source and
/// `catalog_headers` (values marked sensitive).
#[derive(Clone)]
pub(crate) struct SignerHttp {
    pub http: reqwest::Client,
    pub tokens: SharedTokenSource,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The catalog is reached over https: then so must the signer be (it gets the token).
    pub catalog_https: bool,
}

/// The signer of one table load.
pub(crate) struct CatalogSigner {
    /// `{s3.signer.uri}/{s3.signer.endpoint}`, as the catalog named it (checked on use).
    endpoint: String,
    /// `scheme://host:port` of the endpoint, for errors and `Debug`.
    origin: String,
    via: SignerHttp,
    limits: SignerLimits,
    cache: Mutex<VecDeque<Cached>>,
}

struct Cached {
    request: SignRequest,
    at: Instant,
    signed: Signed,
}

impl std::fmt::Debug for CatalogSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogSigner")
            .field("signer", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The protocol's `S3SignRequest`.
#[derive(Serialize)]
struct WireRequest<'a> {
    region: &'a str,
    uri: &'a str,
    method: &'a str,
    headers: &'a BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a str>,
}

/// The protocol's `S3SignResponse`.
#[derive(Deserialize)]
struct WireAnswer {
    uri: String,
    #[serde(default)]
    headers: BTreeMap<String, Vec<String>>,
}

/// What one attempt came to.
enum Attempt {
    Signed(Signed),
    /// Try again after the pause (at least this long, when the signer said).
    Transient(Error, Option<Duration>),
    /// 401/419: the token was refused.
    TokenRefused(Error),
    Fatal(Error),
}

impl CatalogSigner {
    pub(crate) fn new(endpoint: String, via: SignerHttp) -> CatalogSigner {
        Self::with_limits(endpoint, via, SignerLimits::default())
    }

    pub(crate) fn with_limits(
        endpoint: String,
        via: SignerHttp,
        limits: SignerLimits,
    ) -> CatalogSigner {
        let origin = url::Url::parse(&endpoint)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_else(|_| "(not a URL)".to_string());
        CatalogSigner {
            endpoint,
            origin,
            via,
            limits,
            cache: Mutex::new(VecDeque::new()),
        }
    }

    /// The endpoint as a URL the token may be sent to.
    fn url(&self) -> Result<reqwest::Url> {
        let rejected = |why: &str| {
            Error::new(
                ErrorCode::CatalogRejected,
                format!(
                    "the catalog's S3 signer (s3.signer.uri / s3.signer.endpoint of the table) \
                     {why}"
                ),
            )
        };
        let url = reqwest::Url::parse(&self.endpoint).map_err(|_| rejected("is not a URL"))?;
        match url.scheme() {
            "https" => Ok(url),
            "http" if !self.via.catalog_https => Ok(url),
            "http" => Err(rejected(&format!(
                "is http:// ({}) while the catalog is https://; refusing to send the catalog's \
                 credentials in cleartext",
                self.origin
            ))),
            _ => Err(rejected("is not an http(s) URL")),
        }
    }

    fn cached(&self, request: &SignRequest) -> Option<Signed> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|c| c.at.elapsed() < CACHE_TTL);
        cache
            .iter()
            .find(|c| &c.request == request)
            .map(|c| c.signed.clone())
    }

    fn remember(&self, request: &SignRequest, signed: &Signed) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back(Cached {
            request: request.clone(),
            at: Instant::now(),
            signed: signed.clone(),
        });
    }

    /// What is being signed, for messages: the method and the object's URI without its query.
    fn target(request: &SignRequest) -> String {
        let uri = request.uri.split('?').next().unwrap_or_default();
        format!("{} {uri}", request.method)
    }

    async fn attempt(
        &self,
        url: &reqwest::Url,
        body: &[u8],
        token: Option<&BearerToken>,
        request: &SignRequest,
    ) -> Attempt {
        let target = Self::target(request);
        let mut builder = self
            .via
            .http
            .post(url.clone())
            .timeout(self.limits.timeout)
            .header(reqwest::header::ACCEPT, "application/json")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(
                reqwest::header::USER_AGENT,
                concat!("thadam-iceberg/", env!("CARGO_PKG_VERSION")),
            )
            .body(body.to_vec());
        for (name, value) in &self.via.headers {
            builder = builder.header(name.clone(), value.clone());
        }
        if let Some(token) = token {
            builder = builder.bearer_auth(token.value.expose());
        }
        let response = match builder.send().await {
            Ok(r) => r,
            Err(e) => {
                let e = e.without_url();
                let text = error_chain_text(&e);
                if let Some(tls) = tls_cause(&e) {
                    return Attempt::Fatal(Error::config_invalid(format!(
                        "TLS with the catalog's S3 signer at {} failed ({tls:?}) asking to sign \
                         {target}: {text}; the signer is reached with the catalog's TLS \
                         settings (catalog_ca_file, catalog_client_cert)",
                        self.origin
                    )));
                }
                let cause = if e.is_timeout() { "timeout" } else { "connect" };
                return Attempt::Transient(
                    Error::unavailable(format!(
                        "the catalog's S3 signer at {} did not answer the request to sign \
                         {target}: {text}",
                        self.origin
                    ))
                    .with_retry_hint(cause, None),
                    None,
                );
            }
        };
        let status = response.status();
        let cacheable = response
            .headers()
            .get(reqwest::header::CACHE_CONTROL)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("private"));
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let bytes = match response.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return Attempt::Transient(
                    Error::unavailable(format!(
                        "reading the S3 signer's answer to {target} failed: {}",
                        error_chain_text(&e.without_url())
                    ))
                    .with_retry_hint("lost_response", None),
                    None,
                );
            }
        };
        if status == StatusCode::OK {
            // Never quoted: a malformed answer may still hold a signature.
            let Ok(answer) = serde_json::from_slice::<WireAnswer>(&bytes) else {
                return Attempt::Fatal(Error::new(
                    ErrorCode::CatalogRejected,
                    format!(
                        "the catalog's S3 signer at {} answered the request to sign {target} \
                         with something that is not the S3 signer protocol's answer \
                         ({{uri, headers}})",
                        self.origin
                    ),
                ));
            };
            let signed = Signed {
                uri: answer.uri,
                headers: answer.headers.into_iter().collect(),
            };
            if cacheable {
                self.remember(request, &signed);
            }
            return Attempt::Signed(signed);
        }
        let message = message_of(status, &bytes);
        let code = status.as_u16();
        if status.is_server_error() || matches!(code, 408 | 429) {
            return Attempt::Transient(
                Error::unavailable(format!(
                    "the catalog's S3 signer at {} answered {status} to the request to sign \
                     {target}: {message}",
                    self.origin
                ))
                .with_retry_hint(crate::catalog::outcome::status_cause(code), retry_after),
                retry_after,
            );
        }
        let refused = Error::auth_failed(format!(
            "the catalog's S3 signer at {} refused to sign {target}: {status}: {message} (a \
             catalog signs only within the table's locations, for callers it authenticates)",
            self.origin
        ));
        if matches!(code, 401 | 419) {
            Attempt::TokenRefused(refused)
        } else {
            Attempt::Fatal(refused)
        }
    }
}

#[async_trait]
impl RequestSigner for CatalogSigner {
    async fn sign(&self, request: &SignRequest) -> Result<Signed> {
        if let Some(signed) = self.cached(request) {
            return Ok(signed);
        }
        let url = self.url()?;
        let body = serde_json::to_vec(&WireRequest {
            region: &request.region,
            uri: &request.uri,
            method: &request.method,
            headers: &request.headers,
            body: request.body.as_deref(),
        })
        .map_err(|e| {
            Error::internal(format!("cannot encode an S3 sign request: {e}")).with_source(e)
        })?;
        let mut token = self.via.tokens.current().await.map_err(|e| {
            e.context(format!(
                "getting the catalog token for the S3 signer at {}",
                self.origin
            ))
        })?;
        let mut renewed = false;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.attempt(&url, &body, token.as_ref(), request).await {
                Attempt::Signed(signed) => return Ok(signed),
                Attempt::Fatal(e) => return Err(e),
                Attempt::TokenRefused(e) => {
                    let fresh = match (&token, renewed) {
                        (Some(rejected), false) => {
                            self.via.tokens.renew_after_rejection(rejected).await?
                        }
                        _ => None,
                    };
                    match fresh {
                        Some(fresh) => {
                            tracing::info!(
                                signer = %self.origin,
                                "the catalog's S3 signer rejected the token; retrying once with a \
                                 renewed one"
                            );
                            token = Some(fresh);
                            renewed = true;
                            attempt -= 1;
                        }
                        None => return Err(e),
                    }
                }
                Attempt::Transient(e, retry_after) => {
                    if attempt >= self.limits.attempts {
                        return Err(e.context(format!("after {attempt} attempts")));
                    }
                    let backoff = self
                        .limits
                        .backoff
                        .saturating_mul(1 << (attempt - 1).min(16))
                        .max(retry_after.unwrap_or_default())
                        .min(self.limits.max_backoff);
                    tracing::debug!(
                        signer = %self.origin, attempt, ?backoff,
                        "the S3 signer failed ({}); asking again", e.message()
                    );
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::catalog::auth::{NoAuth, StaticToken};
    use crate::config::Secret;

    /// One request the test signer received.
    #[derive(Debug, Clone)]
    struct Seen {
        path: String,
        headers: Vec<(String, String)>,
        body: serde_json::Value,
    }

    type Reply = Arc<dyn Fn(usize, &Seen) -> (u16, Vec<(String, String)>, String) + Send + Sync>;

    /// A tiny HTTP/1.1 server on 127.0.0.1 (one request per connection) answering with `reply`
    /// (given the request's number, from 0); returns its base URL and what it saw.
    async fn serve(reply: Reply) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let count = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (log, reply, count) =
                    (Arc::clone(&log), Arc::clone(&reply), Arc::clone(&count));
                tokio::spawn(async move {
                    let mut data = Vec::new();
                    let mut buf = [0u8; 4096];
                    let head_end = loop {
                        let n = socket.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        data.extend_from_slice(&buf[..n]);
                        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let path = lines
                        .next()
                        .and_then(|l| l.split(' ').nth(1))
                        .unwrap_or_default()
                        .to_string();
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                        .collect();
                    let length = headers
                        .iter()
                        .find(|(n, _)| n == "content-length")
                        .and_then(|(_, v)| v.parse::<usize>().ok())
                        .unwrap_or(0);
                    while data.len() < head_end + length {
                        let n = socket.read(&mut buf).await.unwrap_or(0);
                        if n == 0 {
                            break;
                        }
                        data.extend_from_slice(&buf[..n]);
                    }
                    let body = serde_json::from_slice(&data[head_end..]).unwrap_or_default();
                    let request = Seen {
                        path,
                        headers,
                        body,
                    };
                    let n = count.fetch_add(1, Ordering::SeqCst);
                    log.lock().expect("log").push(request.clone());
                    let (status, extra, text) = reply(n, &request);
                    let mut answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n",
                        text.len()
                    );
                    for (name, value) in extra {
                        answer.push_str(&format!("{name}: {value}\r\n"));
                    }
                    answer.push_str("\r\n");
                    answer.push_str(&text);
                    let _ = socket.write_all(answer.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        (base, seen)
    }

    const SIGNATURE: &str = "AWS4-HMAC-SHA256 Credential=AKIDSIGNER999/x, Signature=abc";
    const SESSION: &str = "session-token-from-signer";
    const BEARER: &str = "catalog-bearer-token-42";

    fn signed_answer(uri: &str) -> String {
        serde_json::json!({
            "uri": uri,
            "headers": {
                "Authorization": [SIGNATURE],
                "x-amz-security-token": [SESSION],
                "X-Amz-Date": ["20260101T000000Z"],
                "range": ["bytes=0-7"],
            }
        })
        .to_string()
    }

    fn via(tokens: SharedTokenSource) -> SignerHttp {
        let mut tenant = HeaderValue::from_static("tenant-7");
        tenant.set_sensitive(true);
        SignerHttp {
            http: reqwest::Client::new(),
            tokens,
            headers: vec![(HeaderName::from_static("x-tenant"), tenant)],
            catalog_https: false,
        }
    }

    fn fast() -> SignerLimits {
        SignerLimits {
            attempts: 3,
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(50),
            timeout: Duration::from_secs(5),
        }
    }

    fn request() -> SignRequest {
        SignRequest {
            method: "GET".into(),
            uri: "http://127.0.0.1:9/warehouse/t/data/seg.parquet".into(),
            region: "eu-west-1".into(),
            headers: BTreeMap::from([
                ("range".to_string(), vec!["bytes=0-7".to_string()]),
                (
                    "x-amz-content-sha256".to_string(),
                    vec!["UNSIGNED-PAYLOAD".to_string()],
                ),
            ]),
            body: None,
        }
    }

    fn header<'a>(seen: &'a Seen, name: &str) -> Option<&'a str> {
        seen.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[tokio::test]
    async fn the_request_and_answer_are_the_protocol_s_json_sent_with_the_catalog_s_auth() {
        let uri = request().uri;
        let answer = signed_answer(&uri);
        let (base, seen) = serve(Arc::new(move |_, _| (200, vec![], answer.clone()))).await;
        let signer = CatalogSigner::with_limits(
            format!("{base}/iceberg/v1/main%7Cwh/s3sign/GRANT-xyz"),
            via(Arc::new(StaticToken::new(Secret::new(BEARER)))),
            fast(),
        );
        let signed = signer.sign(&request()).await.expect("signed");
        assert_eq!(signed.uri, uri);
        let names: Vec<&str> = signed.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Authorization",
                "X-Amz-Date",
                "range",
                "x-amz-security-token"
            ]
        );
        let seen = seen.lock().expect("seen")[0].clone();
        // The endpoint is used as the catalog wrote it (already percent-encoded).
        assert_eq!(seen.path, "/iceberg/v1/main%7Cwh/s3sign/GRANT-xyz");
        assert_eq!(
            seen.body,
            serde_json::json!({
                "region": "eu-west-1",
                "uri": uri,
                "method": "GET",
                "headers": {
                    "range": ["bytes=0-7"],
                    "x-amz-content-sha256": ["UNSIGNED-PAYLOAD"],
                },
            })
        );
        assert_eq!(
            header(&seen, "authorization"),
            Some(format!("Bearer {BEARER}").as_str())
        );
        assert_eq!(header(&seen, "x-tenant"), Some("tenant-7"));
        assert_eq!(header(&seen, "content-type"), Some("application/json"));
        // Nothing secret in Debug: not the grant, the token, or the signature.
        let shown = format!("{signer:?} {signed:?} {:?}", request());
        for secret in ["GRANT-xyz", BEARER, "AKIDSIGNER999", SESSION, "tenant-7"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains(&base), "{shown}");
    }

    #[tokio::test]
    async fn a_delete_objects_body_is_sent_and_nothing_else_ever_is() {
        let (base, seen) = serve(Arc::new(|_, r| {
            (
                200,
                vec![],
                signed_answer(r.body["uri"].as_str().unwrap_or_default()),
            )
        }))
        .await;
        let signer = CatalogSigner::with_limits(
            format!("{base}/v1/aws/s3/sign"),
            via(Arc::new(NoAuth)),
            fast(),
        );
        let mut delete = request();
        delete.method = "POST".into();
        delete.uri = "http://127.0.0.1:9/warehouse?delete".into();
        delete.body = Some("<Delete/>".into());
        signer.sign(&delete).await.expect("signed");
        signer.sign(&request()).await.expect("signed");
        let seen = seen.lock().expect("seen").clone();
        assert_eq!(seen[0].body["body"], "<Delete/>");
        assert!(seen[1].body.get("body").is_none(), "{:?}", seen[1].body);
        assert_eq!(
            header(&seen[1], "authorization"),
            None,
            "no token, no header"
        );
    }

    #[tokio::test]
    async fn a_refusal_is_auth_failed_at_once_with_the_catalog_s_message() {
        for status in [403, 400, 404] {
            let (base, seen) = serve(Arc::new(move |_, _| {
                (
                    status,
                    vec![],
                    r#"{"error":{"message":"URI not allowed for signing: http://x/warehouse/o","type":"NotAuthorizedException","code":403}}"#
                        .to_string(),
                )
            }))
            .await;
            let signer = CatalogSigner::with_limits(
                format!("{base}/s3sign/GRANT-abc"),
                via(Arc::new(StaticToken::new(Secret::new(BEARER)))),
                fast(),
            );
            let err = signer.sign(&request()).await.expect_err("refused");
            assert_eq!(err.code(), ErrorCode::AuthFailed, "{status}: {err}");
            let text = err.to_string();
            assert!(text.contains("URI not allowed for signing"), "{text}");
            assert!(
                text.contains(
                    "refused to sign GET http://127.0.0.1:9/warehouse/t/data/seg.parquet"
                ),
                "{text}"
            );
            for secret in ["GRANT-abc", BEARER] {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
            assert_eq!(seen.lock().expect("seen").len(), 1, "{status}: asked once");
        }
    }

    /// A token source that renews once, counting.
    #[derive(Debug, Default)]
    struct Renewing(AtomicUsize);

    #[async_trait]
    impl crate::catalog::auth::TokenSource for Renewing {
        async fn current(&self) -> Result<Option<BearerToken>> {
            Ok(Some(BearerToken {
                value: Secret::new("old-token"),
                generation: 0,
            }))
        }
        async fn renew_after_rejection(&self, _: &BearerToken) -> Result<Option<BearerToken>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Some(BearerToken {
                value: Secret::new("new-token"),
                generation: 1,
            }))
        }
    }

    #[tokio::test]
    async fn a_refused_token_is_renewed_once_then_a_refusal_is_final() {
        // Accepts only the renewed token.
        let (base, seen) = serve(Arc::new(|_, r| {
            if header(r, "authorization") == Some("Bearer new-token") {
                (
                    200,
                    vec![],
                    signed_answer(r.body["uri"].as_str().unwrap_or_default()),
                )
            } else {
                (401, vec![], String::new())
            }
        }))
        .await;
        let tokens = Arc::new(Renewing::default());
        let signer =
            CatalogSigner::with_limits(format!("{base}/sign"), via(tokens.clone()), fast());
        signer
            .sign(&request())
            .await
            .expect("signed with the renewed token");
        assert_eq!(tokens.0.load(Ordering::SeqCst), 1);
        assert_eq!(seen.lock().expect("seen").len(), 2);

        // Refused whatever the token: one renewal, then auth.failed.
        let (base, seen) = serve(Arc::new(|_, _| (401, vec![], String::new()))).await;
        let tokens = Arc::new(Renewing::default());
        let signer =
            CatalogSigner::with_limits(format!("{base}/sign"), via(tokens.clone()), fast());
        let err = signer.sign(&request()).await.expect_err("refused");
        assert_eq!(err.code(), ErrorCode::AuthFailed);
        assert_eq!(tokens.0.load(Ordering::SeqCst), 1);
        assert_eq!(seen.lock().expect("seen").len(), 2);
    }

    #[tokio::test]
    async fn an_outage_is_retried_a_few_times_then_unavailable() {
        // 503 twice, then signed.
        let (base, seen) = serve(Arc::new(|n, r| {
            if n < 2 {
                (503, vec![("retry-after".into(), "0".into())], String::new())
            } else {
                (
                    200,
                    vec![],
                    signed_answer(r.body["uri"].as_str().unwrap_or_default()),
                )
            }
        }))
        .await;
        let signer =
            CatalogSigner::with_limits(format!("{base}/sign"), via(Arc::new(NoAuth)), fast());
        signer
            .sign(&request())
            .await
            .expect("signed on the third attempt");
        assert_eq!(seen.lock().expect("seen").len(), 3);

        // Always 500: bounded, then unavailable.
        let (base, seen) = serve(Arc::new(|_, _| (500, vec![], String::new()))).await;
        let signer =
            CatalogSigner::with_limits(format!("{base}/sign"), via(Arc::new(NoAuth)), fast());
        let err = signer.sign(&request()).await.expect_err("down");
        assert_eq!(err.code(), ErrorCode::Unavailable);
        assert_eq!(err.retry_cause(), "status_500");
        assert_eq!(seen.lock().expect("seen").len(), 3);

        // Nothing listens: bounded, then unavailable.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let signer = CatalogSigner::with_limits(
            format!("http://127.0.0.1:{port}/sign"),
            via(Arc::new(NoAuth)),
            fast(),
        );
        let err = signer
            .sign(&request())
            .await
            .expect_err("refused connection");
        assert_eq!(err.code(), ErrorCode::Unavailable);
        assert!(err.message().contains("after 3 attempts"), "{err}");
    }

    #[tokio::test]
    async fn answers_marked_private_are_reused_for_the_same_request_only() {
        let (base, seen) = serve(Arc::new(|n, r| {
            let extra = if n == 0 {
                vec![("cache-control".to_string(), "private".to_string())]
            } else {
                vec![("cache-control".to_string(), "no-cache".to_string())]
            };
            (
                200,
                extra,
                signed_answer(r.body["uri"].as_str().unwrap_or_default()),
            )
        }))
        .await;
        let signer =
            CatalogSigner::with_limits(format!("{base}/sign"), via(Arc::new(NoAuth)), fast());
        signer.sign(&request()).await.expect("signed");
        signer.sign(&request()).await.expect("cached");
        assert_eq!(seen.lock().expect("seen").len(), 1);
        // Another range is another signature.
        let mut other = request();
        other
            .headers
            .insert("range".into(), vec!["bytes=8-15".into()]);
        signer.sign(&other).await.expect("signed");
        signer.sign(&other).await.expect("signed again: no-cache");
        assert_eq!(seen.lock().expect("seen").len(), 3);
    }

    #[tokio::test]
    async fn a_bad_answer_or_endpoint_is_rejected_and_never_quoted() {
        let (base, _) = serve(Arc::new(|_, _| {
            (200, vec![], format!("{{\"headers\": \"{SIGNATURE}\"}}"))
        }))
        .await;
        let signer =
            CatalogSigner::with_limits(format!("{base}/sign"), via(Arc::new(NoAuth)), fast());
        let err = signer.sign(&request()).await.expect_err("not the protocol");
        assert_eq!(err.code(), ErrorCode::CatalogRejected);
        assert!(!err.to_string().contains("AKIDSIGNER999"), "{err}");

        let signer =
            CatalogSigner::with_limits("v1/relative".into(), via(Arc::new(NoAuth)), fast());
        assert_eq!(
            signer.sign(&request()).await.expect_err("no URL").code(),
            ErrorCode::CatalogRejected
        );
        let mut https = via(Arc::new(NoAuth));
        https.catalog_https = true;
        let signer = CatalogSigner::with_limits("http://10.0.0.1/sign".into(), https, fast());
        let err = signer.sign(&request()).await.expect_err("cleartext");
        assert_eq!(err.code(), ErrorCode::CatalogRejected);
        assert!(err.message().contains("cleartext"), "{err}");
    }
}
