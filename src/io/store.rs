//! S3 access for the registrar: the one `object_store` client builder ([`build_object_store`])
//! behind footer reads and iceberg's FileIO (metadata, manifest lists, manifests; see
//! [`crate::io::file_io`]). Both come from the same `store:` config, so they reach the same
//! bucket with the same credentials, TLS stack and connection bounds.
//!
//! Object keys: the key a segment record names is used byte for byte, both for the footer read
//! ([`object_path`]) and for the data file path registered in the table ([`object_uri`]), so the
//! object read is the object registered. Keys no Iceberg reader could reach are refused
//! ([`key_problem`]).
//!
//! Failures are classified by type: object_store's variants, the HTTP status of an S3 answer
//! (carried as a typed [`S3Refusal`], see [`object_store`]), found in the source chain of
//! FileIO failures too ([`classify_iceberg_io`]); one pure function maps an S3 status to what
//! the registrar does ([`status_outcome`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpService, ReqwestConnector,
};
use object_store::path::Path as ObjectPath;

use crate::config::{Secret, StoreConfig, StoreCredentials};
use crate::error::{Error, ErrorCode, Result};
use crate::io::signer::SharedSigner;

/// The longest key S3 accepts, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 1024;

/// Why `key` cannot name a segment safely, or `None` when it can. Every key S3 allows passes,
/// except those whose bytes would not survive the trip to the object or to a reader of the
/// table:
/// - empty: a GET of the bucket itself is a listing;
/// - over [`MAX_KEY_BYTES`]: S3 refuses it;
/// - a leading or trailing `/`, an empty, `.` or `..` segment: object_store's paths (and
///   readers' path handling) normalise these away, so another object would be read;
/// - ASCII control characters: object_store's paths cannot hold them;
/// - `#` or `?`: the data file path is a URI, and readers (pyiceberg's `urlparse`, Java's
///   `S3URI`) cut it at a fragment or query, none percent-decodes: no registered path reaches
///   the object.
pub fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("the key is empty (it would name the bucket itself)".to_string());
    }
    if key.len() > MAX_KEY_BYTES {
        return Some(format!(
            "the key is {} bytes long, over S3's {MAX_KEY_BYTES}-byte limit",
            key.len()
        ));
    }
    if key.starts_with('/') {
        return Some("the key starts with '/'".to_string());
    }
    if key.ends_with('/') {
        return Some("the key ends with '/' (a folder marker, not a file)".to_string());
    }
    for segment in key.split('/') {
        match segment {
            "" => return Some("the key has an empty segment ('//')".to_string()),
            "." | ".." => {
                return Some(format!(
                    "the key has a '{segment}' segment, which paths normalise away"
                ));
            }
            _ => {}
        }
    }
    if let Some(c) = key.chars().find(char::is_ascii_control) {
        return Some(format!(
            "the key contains the control character U+{:04X}",
            u32::from(c)
        ));
    }
    if let Some(c) = key.chars().find(|c| matches!(c, '#' | '?')) {
        return Some(format!(
            "the key contains '{c}', which Iceberg readers take for the start of a URI {} \
             (pyiceberg, Java's S3FileIO), so no registered path would reach the object",
            if c == '#' { "fragment" } else { "query" }
        ));
    }
    None
}

/// The error for a key [`key_problem`] refuses: permanent, naming the key and the fix.
fn key_refused(key: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::FooterInvalid,
        format!(
            "object key {key:?} cannot be registered: {why}; re-ship the segment under a plain \
             key (letters, digits, '/', '-', '_', '.', '=', spaces) or remove its Uploaded record"
        ),
    )
}

/// The object_store path of a recorded object key, holding the key's bytes unchanged
/// (`Path::parse`, not `Path::from`, which percent-encodes `~ # % [ ] { } ^ | \ < > " * ?` and
/// non-ASCII). object_store's S3 client percent-encodes the path once for the request line,
/// so S3 receives exactly this key.
pub fn object_path(key: &str) -> Result<ObjectPath> {
    if let Some(why) = key_problem(key) {
        return Err(key_refused(key, &why));
    }
    let path = ObjectPath::parse(key).map_err(|e| key_refused(key, &e.to_string()))?;
    // `key_problem` refuses everything `parse` would change; this keeps that promise checked.
    if path.as_ref() != key {
        return Err(key_refused(key, "object_store would rewrite it"));
    }
    Ok(path)
}

/// The data file path registered for a recorded object key: `s3://{bucket}/{key}`, the key's
/// bytes unchanged (Iceberg readers take the path after the bucket as the key, without
/// decoding).
pub fn object_uri(bucket: &str, key: &str) -> Result<String> {
    if let Some(why) = key_problem(key) {
        return Err(key_refused(key, &why));
    }
    Ok(format!("s3://{bucket}/{key}"))
}

/// What the registrar does about an S3 answer with this HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOutcome {
    /// 404: the object is not there (`sink.iceberg_object_missing`).
    Missing,
    /// 401/403: the store refuses our credentials (`auth.failed`).
    Auth,
    /// 416: the range starts past the object's end, so it is shorter than recorded.
    ShortObject,
    /// Another 4xx (or a redirect): the request can never succeed as it is; permanent.
    Rejected,
    /// 408, 429, 5xx: the store is busy or failing; retried with backoff.
    Transient,
}

/// The one mapping from an S3 status to an outcome.
pub fn status_outcome(status: u16) -> StatusOutcome {
    match status {
        404 => StatusOutcome::Missing,
        401 | 403 => StatusOutcome::Auth,
        416 => StatusOutcome::ShortObject,
        408 | 429 => StatusOutcome::Transient,
        // 304 only answers a conditional request, which is not an error.
        300..=303 | 305..=499 => StatusOutcome::Rejected,
        _ => StatusOutcome::Transient,
    }
}

/// An S3 answer object_store has no variant for (a 4xx other than 401/403/404/409/412, or a
/// redirect), kept typed in the error chain: its status and S3's own error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Refusal {
    pub status: u16,
    /// The `<Code>` of S3's XML error body (e.g. `KeyTooLongError`), when there is one.
    pub s3_code: Option<String>,
}

impl std::fmt::Display for S3Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "S3 answered {}", self.status)?;
        match &self.s3_code {
            Some(code) => write!(f, " {code}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for S3Refusal {}

/// The [`S3Refusal`] in `err`'s source chain, if any.
pub fn s3_refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a S3Refusal> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(refusal) = e.downcast_ref::<S3Refusal>() {
            return Some(refusal);
        }
        current = e.source();
    }
    None
}

/// Whether an answer with `status` is tagged as an [`S3Refusal`]: the statuses object_store
/// leaves untyped and does not retry. object_store types 401, 403, 404, 409 and 412 itself
/// (conditional requests rely on 409/412) and retries 408, 429 and 5xx, except on list
/// requests, whose failures it reports with no typed status at all: there 401, 403 and 404
/// (`NoSuchBucket`) are tagged too.
fn tagged(status: u16, is_list: bool) -> bool {
    match status_outcome(status) {
        StatusOutcome::Rejected => !matches!(status, 409 | 412),
        StatusOutcome::ShortObject => true,
        StatusOutcome::Missing | StatusOutcome::Auth => is_list,
        StatusOutcome::Transient => false,
    }
}

/// Whether `request` is an S3 ListObjectsV2 (`GET /bucket?list-type=2...`).
fn is_list_request(request: &HttpRequest) -> bool {
    request.method() == http::Method::GET
        && request
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|pair| pair == "list-type=2"))
}

/// An object_store HTTP connector that turns untyped S3 refusals into [`S3Refusal`] errors
/// (object_store keeps the status of such an answer in a type that is not public), and with a
/// remote signer, has every request signed just before it is sent (each attempt anew, so a
/// retry never reuses a signature).
#[derive(Debug, Default)]
struct TypedStatusConnector {
    /// The signer and the region requests are signed for.
    signer: Option<(SharedSigner, String)>,
}

impl HttpConnector for TypedStatusConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(TypedStatus {
            client: inner,
            signer: self.signer.clone(),
        }))
    }
}

#[derive(Debug)]
struct TypedStatus {
    client: HttpClient,
    signer: Option<(SharedSigner, String)>,
}

/// The most bytes of an error body read for its `<Code>`.
const MAX_ERROR_BODY: usize = 16 * 1024;

#[async_trait]
impl HttpService for TypedStatus {
    async fn call(&self, mut request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let is_list = is_list_request(&request);
        if let Some((signer, region)) = &self.signer {
            // Our error, typed by its code, in the chain; `Unknown`: object_store does not retry
            // it (the signer retried what was transient, and a refusal stays refused).
            crate::io::signer::sign_http_request(signer.0.as_ref(), region, &mut request)
                .await
                .map_err(|e| HttpError::new(HttpErrorKind::Unknown, e))?;
        }
        let response = self.client.execute(request).await?;
        let status = response.status();
        if !tagged(status.as_u16(), is_list) {
            return Ok(response);
        }
        let mut body = Vec::new();
        let mut stream = response.into_body().bytes_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            let room = MAX_ERROR_BODY.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
        // `Unknown`: object_store does not retry it.
        Err(HttpError::new(
            HttpErrorKind::Unknown,
            S3Refusal {
                status: status.as_u16(),
                s3_code: s3_error_code(&body),
            },
        ))
    }
}

/// The `<Code>` element of an S3 XML error body: S3's machine-readable error type, kept for the
/// message (short, printable ASCII only).
fn s3_error_code(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find("<Code>")? + "<Code>".len();
    let len = text[start..].find("</Code>")?;
    let code = &text[start..start + len];
    let ok = !code.is_empty()
        && code.len() <= 64
        && code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
    ok.then(|| code.to_string())
}

/// Our own error in `err`'s source chain, if any: a store without credentials, a credential
/// source that failed, or a remote signer's refusal or outage, each typed by its code.
pub fn access_failure<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Error> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours);
        }
        current = e.source();
    }
    None
}

/// Classifies an object_store failure on `key` of `bucket` (the footer read), by type.
pub fn classify_store_error(err: object_store::Error, bucket: &str, key: &str) -> Error {
    if let Some(ours) = access_failure(&err) {
        return ours.clone().context(format!("reading object {key}"));
    }
    let status = match &err {
        object_store::Error::NotFound { .. } => Some(404),
        object_store::Error::PermissionDenied { .. } => Some(403),
        object_store::Error::Unauthenticated { .. } => Some(401),
        _ => s3_refusal(&err).map(|r| r.status),
    };
    let refusal = s3_refusal(&err)
        .map(|r| format!(" ({r})"))
        .unwrap_or_default();
    match status.map(status_outcome) {
        Some(StatusOutcome::Missing) => Error::new(
            ErrorCode::ObjectMissing,
            format!(
                "object {key} is not in bucket {bucket} although the segment catalog records it \
                 as uploaded; check the shipper's bucket and prefix (url) against the registrar's"
            ),
        ),
        Some(StatusOutcome::Auth) => Error::auth_failed(format!(
            "the S3 store refused access to object {key} in bucket {bucket}; check the store \
             credentials (store.access_key_id / store.secret_access_key) and that they may read \
             the bucket"
        )),
        Some(StatusOutcome::ShortObject) => Error::new(
            ErrorCode::FooterInvalid,
            format!(
                "object {key} is shorter than the segment catalog recorded{refusal} (partial \
                 upload, or a wrong recorded size?); re-ship the segment or remove its Uploaded \
                 record"
            ),
        ),
        Some(StatusOutcome::Rejected) => Error::new(
            ErrorCode::FooterInvalid,
            format!(
                "S3 refuses every read of object {key} in bucket {bucket}{refusal}: the segment \
                 record (its key or size) is not something S3 can serve; re-ship the segment or \
                 remove its Uploaded record (if every segment fails so, check store.region and \
                 store.endpoint)"
            ),
        ),
        Some(StatusOutcome::Transient) | None => {
            Error::unavailable(format!("reading object {key} failed: {err}"))
        }
    }
}

/// Classifies a failure of iceberg's FileIO (metadata, manifest list and manifest reads and
/// writes, which go through [`crate::io::file_io`]) by the storage error in its source chain:
/// `None` when there is none (not an I/O failure; the caller decides). The same rule as footer
/// reads: a 404 is `object_missing`, 401/403 (read-only credentials) `auth.failed`, other
/// refusals permanent (`catalog_rejected`: the catalog's storage will not take the request), and
/// what is left once object_store's own retries gave up (5xx, 429, transport) `unavailable`.
pub fn classify_iceberg_io(err: &iceberg::Error) -> Option<ErrorCode> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(store) = e.downcast_ref::<object_store::Error>() {
            return Some(store_error_outcome(store));
        }
        if let Some(refusal) = e.downcast_ref::<S3Refusal>() {
            return Some(refusal_outcome(status_outcome(refusal.status)));
        }
        // One of ours (a store that cannot be configured) keeps its code.
        if let Some(ours) = e.downcast_ref::<Error>() {
            return Some(ours.code());
        }
        current = e.source();
    }
    None
}

/// The outcome of an object_store failure of iceberg's FileIO, by its variant (and the typed
/// [`S3Refusal`] the connector puts into it).
fn store_error_outcome(err: &object_store::Error) -> ErrorCode {
    use object_store::Error as E;
    match err {
        E::NotFound { .. } => ErrorCode::ObjectMissing,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => ErrorCode::AuthFailed,
        E::UnknownConfigurationKey { .. } => ErrorCode::ConfigInvalid,
        // A path iceberg built that S3 cannot name, or a request this store will not serve.
        E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. } => ErrorCode::CatalogRejected,
        _ => match (access_failure(err), s3_refusal(err)) {
            // No credentials, or the signer refused or failed: its own code.
            (Some(ours), _) => ours.code(),
            (None, Some(refusal)) => refusal_outcome(status_outcome(refusal.status)),
            // Transport failures and 5xx/429 that outlasted object_store's retries.
            (None, None) => ErrorCode::Unavailable,
        },
    }
}

fn refusal_outcome(outcome: StatusOutcome) -> ErrorCode {
    match outcome {
        StatusOutcome::Missing => ErrorCode::ObjectMissing,
        StatusOutcome::Auth => ErrorCode::AuthFailed,
        StatusOutcome::ShortObject | StatusOutcome::Rejected => ErrorCode::CatalogRejected,
        StatusOutcome::Transient => ErrorCode::Unavailable,
    }
}

/// Static S3 keys: the `store` section's, the catalog's, or keys vended with a table. `Debug`
/// shows none of them.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Keys {
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

impl std::fmt::Debug for S3Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("S3Keys(***)")
    }
}

/// Where the requests of one S3 client get their signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum S3Credentials {
    /// Static keys: the `store` section's, or keys the catalog vended for a table.
    Keys(S3Keys),
    /// Remote signing: every request is signed by the catalog's signer for the table.
    Signer(SharedSigner),
    /// `store.credentials: instance_metadata`: the machine's role, through object_store's
    /// provider (the EC2 instance metadata service; web identity when `AWS_WEB_IDENTITY_TOKEN_FILE`
    /// and `AWS_ROLE_ARN` are set), bounded: a source that refuses or does not answer is
    /// `auth.failed`, never retried forever.
    InstanceMetadata,
    /// None at all: every request fails at once with `auth.failed`, naming what to configure.
    /// Nothing ambient is ever asked.
    Missing,
}

impl S3Credentials {
    /// What the `store` section alone gives: its keys, the instance metadata service when it
    /// asks for it, else nothing.
    pub fn of_store(store: &StoreConfig) -> S3Credentials {
        match (&store.access_key_id, &store.secret_access_key) {
            (Some(id), Some(secret)) => S3Credentials::Keys(S3Keys {
                access_key_id: id.clone(),
                secret_access_key: secret.clone(),
                session_token: None,
            }),
            _ if store.credentials == StoreCredentials::InstanceMetadata => {
                S3Credentials::InstanceMetadata
            }
            _ => S3Credentials::Missing,
        }
    }
}

/// What a catalog gives for a table's objects: vended keys or a remote signer, and what it said
/// about where they apply (endpoint, region, path-style). `catalog::access` builds it from a
/// `loadTable` answer; io knows nothing of catalogs.
#[derive(Clone, Debug)]
pub struct S3Access {
    /// [`S3Credentials::Keys`] or [`S3Credentials::Signer`].
    pub credentials: S3Credentials,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub path_style: Option<bool>,
}

/// How one bucket is reached and signed for, resolved: what [`build_object_store`] turns into a
/// client. Footer reads and iceberg's FileIO both go through it.
#[derive(Clone, Debug)]
pub struct S3Settings {
    pub region: String,
    /// A custom endpoint (MinIO, a local server); `None`: AWS.
    pub endpoint: Option<String>,
    /// `bucket.host` requests rather than path-style `host/bucket`.
    pub virtual_hosted: bool,
    pub allow_http: bool,
    /// How requests are signed. object_store is always built without `from_env`, so no `AWS_*`
    /// variable, container credentials or `~/.aws` file is read.
    pub credentials: S3Credentials,
    /// object_store's own retry settings replaced (tests: no retries).
    pub retry: Option<object_store::RetryConfig>,
}

impl S3Settings {
    /// The settings of footer reads: the `store` section's, and for a table the catalog gives
    /// access to, its keys or signer, with the catalog's endpoint, region and path-style where
    /// `store` sets none. A custom `store` endpoint is addressed path-style, which is what such
    /// servers expect.
    pub fn for_footers(store: &StoreConfig, vended: Option<&S3Access>) -> S3Settings {
        let region = match vended.and_then(|v| v.region.as_deref()) {
            Some(catalog_region) if !store.region_explicit => catalog_region.to_string(),
            _ => store.region.clone(),
        };
        let (endpoint, virtual_hosted) = match (&store.endpoint, vended) {
            (Some(endpoint), _) => (Some(endpoint.as_str().to_string()), false),
            (None, Some(v)) if v.endpoint.is_some() => {
                (v.endpoint.clone(), !v.path_style.unwrap_or(true))
            }
            _ => (None, false),
        };
        let credentials = match vended {
            Some(v) => v.credentials.clone(),
            None => S3Credentials::of_store(store),
        };
        S3Settings {
            region,
            endpoint,
            virtual_hosted,
            allow_http: store.allow_http,
            credentials,
            retry: None,
        }
    }
}

/// Why a store without keys cannot reach `bucket`: which keys are missing and the alternatives.
pub fn missing_credentials(bucket: &str) -> String {
    format!(
        "no S3 credentials for bucket {bucket}: store.access_key_id and store.secret_access_key \
         are not set, and the catalog gave neither credentials nor remote signing for this \
         table; set both keys (use ${{file:}} or ${{env:}}), or set store.credentials: \
         instance_metadata to use the machine's role, or have the catalog vend credentials \
         (catalog_headers: {{ X-Iceberg-Access-Delegation: vended-credentials }}) or sign \
         requests (s3.remote-signing-enabled) for the table. Nothing else (the instance metadata \
         service, AWS_* variables, ~/.aws) is asked unless configured"
    )
}

/// The bucket as an `ObjectStore` for footer reads. S3 refusals object_store has no variant for
/// come back as a typed [`S3Refusal`] in the error chain (see [`classify_store_error`]).
pub fn object_store(store: &StoreConfig, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    object_store_with(store, bucket, None)
}

/// [`object_store`] with object_store's own retry settings replaced (tests: no retries).
#[doc(hidden)]
pub fn object_store_with(
    store: &StoreConfig,
    bucket: &str,
    retry: Option<object_store::RetryConfig>,
) -> Result<Arc<dyn ObjectStore>> {
    let mut settings = S3Settings::for_footers(store, None);
    settings.retry = retry;
    build_object_store(&settings, bucket)
}

/// The bucket as an `ObjectStore` that signs with credentials the catalog vended for a table
/// (footer reads of that table's objects), see [`S3Settings::for_footers`].
pub fn vended_object_store(
    store: &StoreConfig,
    bucket: &str,
    vended: &S3Access,
) -> Result<Arc<dyn ObjectStore>> {
    build_object_store(&S3Settings::for_footers(store, Some(vended)), bucket)
}

/// Connection bounds of every S3 client, the same as the catalog client's (`catalog::tls`): a
/// peer that does not accept a connection in 10 s, or a request that takes over 60 s (a
/// manifest or footer is small), fails and is retried by object_store, then by the registrar.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The one S3 client builder: footer reads and iceberg's FileIO (one per bucket) are built
/// here, so they share the TLS stack (object_store's reqwest with ring), the connection bounds,
/// the typed refusals ([`S3Refusal`]) and how keys are carried (a provider whose `Debug` hides
/// them; object_store's static one prints the key id).
pub fn build_object_store(settings: &S3Settings, bucket: &str) -> Result<Arc<dyn ObjectStore>> {
    let options = ClientOptions::new()
        .with_allow_http(settings.allow_http)
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_pool_idle_timeout(POOL_IDLE_TIMEOUT);
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(&settings.region)
        .with_client_options(options);
    let mut virtual_hosted = settings.virtual_hosted;
    if let Some(endpoint) = &settings.endpoint {
        let endpoint = endpoint.trim_end_matches('/');
        let endpoint = match virtual_hosted.then(|| virtual_host_endpoint(endpoint, bucket)) {
            Some(Some(bucket_endpoint)) => bucket_endpoint,
            // An IP address (or no URL at all) has no bucket subdomain: path-style.
            Some(None) => {
                virtual_hosted = false;
                endpoint.to_string()
            }
            None => endpoint.to_string(),
        };
        builder = builder.with_endpoint(endpoint);
    }
    builder = builder.with_virtual_hosted_style_request(virtual_hosted);
    if let Some(retry) = &settings.retry {
        builder = builder.with_retry(retry.clone());
    }
    let config_error = |e: object_store::Error| {
        // object_store's config errors name keys, not values.
        Error::config_invalid(format!(
            "store: cannot configure S3 access to bucket {bucket}: {e}"
        ))
    };
    let mut connector = TypedStatusConnector::default();
    builder = match &settings.credentials {
        S3Credentials::Keys(keys) => builder.with_credentials(Arc::new(HiddenKeys(Arc::new(
            object_store::aws::AwsCredential {
                key_id: keys.access_key_id.expose().to_string(),
                secret_key: keys.secret_access_key.expose().to_string(),
                token: keys.session_token.as_ref().map(|t| t.expose().to_string()),
            },
        )))),
        S3Credentials::Signer(signer) => {
            connector.signer = Some((signer.clone(), settings.region.clone()));
            builder.with_skip_signature(true)
        }
        S3Credentials::InstanceMetadata => {
            // object_store's own provider for a store built without keys (it is not public),
            // behind a bound.
            let probe = builder
                .clone()
                .with_http_connector(TypedStatusConnector::default())
                .build()
                .map_err(config_error)?;
            builder.with_credentials(Arc::new(BoundedSource {
                inner: Arc::clone(probe.credentials()),
                timeout: CREDENTIAL_SOURCE_TIMEOUT,
            }))
        }
        S3Credentials::Missing => builder.with_credentials(Arc::new(NoCredentials {
            bucket: bucket.to_string(),
        })),
    };
    let s3 = builder
        .with_http_connector(connector)
        .build()
        .map_err(config_error)?;
    Ok(Arc::new(s3))
}

/// How long the instance metadata service (or web identity) may take to give credentials
/// before the store is `auth.failed`.
const CREDENTIAL_SOURCE_TIMEOUT: Duration = Duration::from_secs(30);

/// The credential provider of a store that has none: every request fails at once, before
/// anything is sent, with `auth.failed` naming the missing keys ([`missing_credentials`]).
#[derive(Debug)]
struct NoCredentials {
    bucket: String,
}

#[async_trait]
impl object_store::CredentialProvider for NoCredentials {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        Err(object_store::Error::Generic {
            store: "S3",
            source: Box::new(Error::auth_failed(missing_credentials(&self.bucket))),
        })
    }
}

/// object_store's credential provider for `store.credentials: instance_metadata`, bounded: a
/// source that fails (after object_store's own retries) or takes over `timeout` is `auth.failed`
/// (a machine without an instance role never gets one by waiting).
#[derive(Debug)]
struct BoundedSource {
    inner: object_store::aws::AwsCredentialProvider,
    timeout: Duration,
}

#[async_trait]
impl object_store::CredentialProvider for BoundedSource {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        let failed = |why: String| object_store::Error::Generic {
            store: "S3",
            source: Box::new(Error::auth_failed(format!(
                "store.credentials is instance_metadata, but {why}; run on a machine with an \
                 instance role (EC2 instance profile, or EKS web identity), or set \
                 store.access_key_id / store.secret_access_key instead"
            ))),
        };
        match tokio::time::timeout(self.timeout, self.inner.get_credential()).await {
            Ok(Ok(credential)) => Ok(credential),
            Ok(Err(e)) => Err(failed(format!(
                "the instance metadata service gave no credentials: {e}"
            ))),
            Err(_) => Err(failed(format!(
                "the instance metadata service did not answer within {}s",
                self.timeout.as_secs()
            ))),
        }
    }
}

/// The endpoint of `bucket` on a custom S3 server addressed virtual-hosted style
/// (`https://host` → `https://bucket.host`; object_store expects the bucket in a virtual-hosted
/// endpoint), or `None` when the host is an IP address (no subdomains) or not a URL.
fn virtual_host_endpoint(endpoint: &str, bucket: &str) -> Option<String> {
    let mut url = url::Url::parse(endpoint).ok()?;
    let host = match url.host()? {
        url::Host::Domain(host) => host.to_string(),
        url::Host::Ipv4(_) | url::Host::Ipv6(_) => return None,
    };
    if !host.starts_with(&format!("{bucket}.")) {
        url.set_host(Some(&format!("{bucket}.{host}"))).ok()?;
    }
    Some(url.as_str().trim_end_matches('/').to_string())
}

/// A credential provider for object_store holding static keys, with a `Debug` that shows none.
struct HiddenKeys(Arc<object_store::aws::AwsCredential>);

impl std::fmt::Debug for HiddenKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HiddenKeys(***)")
    }
}

#[async_trait]
impl object_store::CredentialProvider for HiddenKeys {
    type Credential = object_store::aws::AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
        Ok(Arc::clone(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_s3_allows_and_readers_reach_is_kept_byte_for_byte() {
        for key in [
            "a.parquet",
            "p/thadam/v1/pipe/telemetry/seg-000001.parquet",
            "a b.parquet",
            "seg~1.parquet",
            "50%.parquet",
            "100%25.parquet",
            "ts=2024-01-01/part 0.parquet",
            "grüße ü.parquet",
            "[x]{y}^|\\<>\"*.parquet",
            "..a/b..",
        ] {
            assert_eq!(key_problem(key), None, "{key}");
            assert_eq!(object_path(key).expect(key).as_ref(), key);
            assert_eq!(
                object_uri("bucket", key).expect(key),
                format!("s3://bucket/{key}")
            );
        }
        // What the old reader did instead: another object.
        assert_ne!(ObjectPath::from("seg~1.parquet").as_ref(), "seg~1.parquet");
    }

    #[test]
    fn keys_no_reader_could_reach_are_refused_naming_the_key() {
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        for (key, why) in [
            ("", "empty"),
            (long.as_str(), "1024-byte"),
            ("/a.parquet", "starts with '/'"),
            ("dir/", "ends with '/'"),
            ("a//b", "empty segment"),
            ("a/./b", "'.' segment"),
            ("a/../b", "'..' segment"),
            ("..", "'..' segment"),
            ("a\u{7}b", "U+0007"),
            ("a\nb", "U+000A"),
            ("a#b", "fragment"),
            ("a?b", "query"),
        ] {
            let problem = key_problem(key).unwrap_or_else(|| panic!("{key:?} passes"));
            assert!(problem.contains(why), "{key:?}: {problem}");
            for err in [
                object_path(key).expect_err("refused"),
                object_uri("b", key).expect_err("refused"),
            ] {
                assert_eq!(err.code(), ErrorCode::FooterInvalid);
                assert!(err.message().contains(&format!("{key:?}")), "{err}");
            }
        }
        // Exactly at the limit is fine; multi-byte characters count in bytes.
        assert_eq!(key_problem(&"k".repeat(MAX_KEY_BYTES)), None);
        assert!(key_problem(&"ü".repeat(MAX_KEY_BYTES / 2 + 1)).is_some());
    }

    fn store_config(access_key_id: Option<&str>) -> StoreConfig {
        StoreConfig {
            endpoint: Some("http://127.0.0.1:9000".parse().expect("url")),
            region: "us-east-1".into(),
            region_explicit: true,
            allow_http: true,
            access_key_id: access_key_id.map(Secret::new),
            secret_access_key: access_key_id.map(|_| Secret::new("store-secret-456")),
            credentials: StoreCredentials::Static,
        }
    }

    fn vended(endpoint: Option<&str>, path_style: Option<bool>) -> S3Access {
        S3Access {
            credentials: S3Credentials::Keys(S3Keys {
                access_key_id: Secret::new("AKIDVENDED789"),
                secret_access_key: Secret::new("vended-secret-789"),
                session_token: Some(Secret::new("vended-token-789")),
            }),
            endpoint: endpoint.map(str::to_string),
            region: Some("eu-west-3".to_string()),
            path_style,
        }
    }

    #[test]
    fn no_store_shows_its_keys_in_debug() {
        let s3 = vended_object_store(&store_config(None), "b", &vended(None, None)).expect("store");
        let own = object_store(&store_config(Some("AKIDSTORE456")), "b").expect("store");
        let shown = format!("{s3:?} {own:?} {:?}", vended(None, None));
        for secret in [
            "AKIDVENDED789",
            "vended-secret-789",
            "vended-token-789",
            "AKIDSTORE456",
            "store-secret-456",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("HiddenKeys(***)"), "{shown}");
    }

    #[test]
    fn footer_settings_let_the_store_section_win_over_the_catalog() {
        let store = store_config(Some("AKIDSTORE456"));
        let own = S3Settings::for_footers(&store, None);
        assert_eq!(own.endpoint.as_deref(), Some("http://127.0.0.1:9000/"));
        assert!(!own.virtual_hosted);
        let id = |s: &S3Settings| match &s.credentials {
            S3Credentials::Keys(k) => Some(k.access_key_id.expose().to_string()),
            _ => None,
        };
        assert_eq!(id(&own).as_deref(), Some("AKIDSTORE456"));
        // Vended keys replace the store's; the store's endpoint and explicit region stay.
        let with = S3Settings::for_footers(&store, Some(&vended(Some("https://s3.cat"), None)));
        assert_eq!(id(&with).as_deref(), Some("AKIDVENDED789"));
        assert_eq!(with.endpoint, own.endpoint);
        assert_eq!(with.region, "us-east-1");
        // Where the store sets none, the catalog's placement applies.
        let bare = StoreConfig {
            endpoint: None,
            region_explicit: false,
            ..store
        };
        let with =
            S3Settings::for_footers(&bare, Some(&vended(Some("https://s3.cat"), Some(false))));
        assert_eq!(with.endpoint.as_deref(), Some("https://s3.cat"));
        assert!(with.virtual_hosted);
        assert_eq!(with.region, "eu-west-3");
    }

    #[test]
    fn virtual_hosted_endpoints_carry_the_bucket_in_the_host() {
        assert_eq!(
            virtual_host_endpoint("https://s3.example.com", "b").as_deref(),
            Some("https://b.s3.example.com")
        );
        assert_eq!(
            virtual_host_endpoint("https://b.s3.example.com:8443", "b").as_deref(),
            Some("https://b.s3.example.com:8443")
        );
        assert_eq!(virtual_host_endpoint("http://127.0.0.1:9000", "b"), None);
        assert_eq!(virtual_host_endpoint("not a url", "b"), None);
    }

    #[test]
    fn status_outcomes() {
        use StatusOutcome::*;
        for (status, outcome) in [
            (404, Missing),
            (401, Auth),
            (403, Auth),
            (416, ShortObject),
            (400, Rejected),
            (405, Rejected),
            (409, Rejected),
            (411, Rejected),
            (412, Rejected),
            (414, Rejected),
            (301, Rejected),
            (307, Rejected),
            (304, Transient),
            (408, Transient),
            (429, Transient),
            (500, Transient),
            (501, Transient),
            (502, Transient),
            (503, Transient),
            (504, Transient),
            (599, Transient),
        ] {
            assert_eq!(status_outcome(status), outcome, "{status}");
        }
    }

    #[test]
    fn only_statuses_object_store_leaves_untyped_are_tagged() {
        for status in [400, 405, 414, 416, 301] {
            assert!(tagged(status, false), "{status}");
        }
        // object_store types or retries these itself.
        for status in [401, 403, 404, 409, 412, 408, 429, 500, 503, 304] {
            assert!(!tagged(status, false), "{status}");
        }
        // Listings lose every status in object_store: auth and missing-bucket answers too.
        for status in [401, 403, 404, 400] {
            assert!(tagged(status, true), "{status}");
        }
        assert!(!tagged(503, true));
    }

    #[test]
    fn the_s3_error_code_is_read_from_the_body() {
        let body = br#"<?xml version="1.0"?><Error><Code>KeyTooLongError</Code><Message>x</Message></Error>"#;
        assert_eq!(s3_error_code(body).as_deref(), Some("KeyTooLongError"));
        assert_eq!(s3_error_code(b"<Error><Code></Code></Error>"), None);
        assert_eq!(s3_error_code(b"<Code>a b\x1b[31m</Code>"), None);
        assert_eq!(s3_error_code(b"not xml"), None);
        assert_eq!(s3_error_code(&[0xff, 0xfe]), None);
    }

    fn refused(status: u16) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(HttpError::new(
                HttpErrorKind::Unknown,
                S3Refusal {
                    status,
                    s3_code: Some("KeyTooLongError".to_string()),
                },
            )),
        }
    }

    #[test]
    fn store_errors_are_classified_by_type_not_text() {
        let key = "p/seg-416.parquet";
        let not_found = object_store::Error::NotFound {
            path: key.to_string(),
            source: "Error performing GET in 1.416s - 416".into(),
        };
        assert_eq!(
            classify_store_error(not_found, "b", key).code(),
            ErrorCode::ObjectMissing
        );
        let denied = object_store::Error::PermissionDenied {
            path: key.to_string(),
            source: "no".into(),
        };
        let err = classify_store_error(denied, "bucket-x", key);
        assert_eq!(err.code(), ErrorCode::AuthFailed);
        assert!(err.message().contains("bucket-x"), "{err}");
        assert!(
            err.message().contains("check the store credentials"),
            "{err}"
        );
        let err = classify_store_error(refused(400), "b", key);
        assert_eq!(err.code(), ErrorCode::FooterInvalid);
        assert!(err.message().contains("KeyTooLongError"), "{err}");
        assert!(err.message().contains(key), "{err}");
        assert_eq!(
            classify_store_error(refused(416), "b", key).code(),
            ErrorCode::FooterInvalid
        );
        // An untyped failure whose text holds "416" (an elapsed time) is an outage, not a
        // short object.
        let generic = object_store::Error::Generic {
            store: "S3",
            source: "Error performing GET in 1.416s - connection reset".into(),
        };
        assert_eq!(
            classify_store_error(generic, "b", key).code(),
            ErrorCode::Unavailable
        );
    }

    fn io(source: object_store::Error) -> iceberg::Error {
        iceberg::Error::new(iceberg::ErrorKind::Unexpected, "writing the manifest")
            .with_source(source)
    }

    #[test]
    fn iceberg_io_errors_are_classified_by_the_store_error_in_their_chain() {
        let path = || "p/m.avro".to_string();
        let denied = object_store::Error::PermissionDenied {
            path: path(),
            source: "403".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(denied)),
            Some(ErrorCode::AuthFailed)
        );
        let unauthenticated = object_store::Error::Unauthenticated {
            path: path(),
            source: "401".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(unauthenticated)),
            Some(ErrorCode::AuthFailed)
        );
        let missing = object_store::Error::NotFound {
            path: path(),
            source: "404".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(missing)),
            Some(ErrorCode::ObjectMissing)
        );
        assert_eq!(
            classify_iceberg_io(&io(refused(400))),
            Some(ErrorCode::CatalogRejected)
        );
        // After object_store's own retries: an outage (the text holding "403" changes nothing).
        let outage = object_store::Error::Generic {
            store: "S3",
            source: "Error after 10 retries in 1.403s: 503 Service Unavailable".into(),
        };
        assert_eq!(
            classify_iceberg_io(&io(outage)),
            Some(ErrorCode::Unavailable)
        );
        // Wrapped once more, as a manifest write inside an append would be.
        let denied = object_store::Error::PermissionDenied {
            path: path(),
            source: "403".into(),
        };
        let outer = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "appending")
            .with_source(io(denied));
        assert_eq!(classify_iceberg_io(&outer), Some(ErrorCode::AuthFailed));
        // A store that cannot be configured keeps our code.
        let ours = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "building the store")
            .with_source(Error::config_invalid("bad endpoint"));
        assert_eq!(classify_iceberg_io(&ours), Some(ErrorCode::ConfigInvalid));
        let plain = iceberg::Error::new(iceberg::ErrorKind::DataInvalid, "not io");
        assert_eq!(classify_iceberg_io(&plain), None);
    }

    #[test]
    fn refusals_read_like_s3_answers() {
        let with_code = S3Refusal {
            status: 400,
            s3_code: Some("KeyTooLongError".to_string()),
        };
        assert_eq!(with_code.to_string(), "S3 answered 400 KeyTooLongError");
        let bare = S3Refusal {
            status: 416,
            s3_code: None,
        };
        assert_eq!(bare.to_string(), "S3 answered 416");
    }

    #[test]
    fn the_store_section_alone_gives_keys_the_instance_role_when_asked_or_nothing() {
        assert!(matches!(
            S3Credentials::of_store(&store_config(Some("AKIDSTORE456"))),
            S3Credentials::Keys(_)
        ));
        assert_eq!(
            S3Credentials::of_store(&store_config(None)),
            S3Credentials::Missing
        );
        let imds = StoreConfig {
            credentials: StoreCredentials::InstanceMetadata,
            ..store_config(None)
        };
        assert_eq!(
            S3Credentials::of_store(&imds),
            S3Credentials::InstanceMetadata
        );
        assert_eq!(
            S3Settings::for_footers(&imds, None).credentials,
            S3Credentials::InstanceMetadata
        );
    }

    #[tokio::test]
    async fn a_store_without_credentials_fails_before_sending_anything() {
        // Port 9 on loopback: were a request sent, it would be an outage, not auth.failed.
        let store = StoreConfig {
            endpoint: Some("http://127.0.0.1:9".parse().expect("url")),
            ..store_config(None)
        };
        let s3 = object_store_with(
            &store,
            "bucket-z",
            Some(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            }),
        )
        .expect("built");
        let err = s3
            .get(&ObjectPath::parse("k.parquet").expect("path"))
            .await
            .expect_err("no credentials");
        let err = classify_store_error(err, "bucket-z", "k.parquet");
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
        for named in [
            "bucket-z",
            "store.access_key_id",
            "store.secret_access_key",
            "store.credentials: instance_metadata",
        ] {
            assert!(err.message().contains(named), "{named} not in {err}");
        }
        // The same through iceberg's FileIO classification.
        let failed = s3
            .put(&ObjectPath::parse("m.avro").expect("path"), "x".into())
            .await
            .expect_err("no credentials");
        let io = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "writing").with_source(failed);
        assert_eq!(classify_iceberg_io(&io), Some(ErrorCode::AuthFailed));
    }

    /// A credential source that fails, or never answers.
    #[derive(Debug)]
    struct Source(bool);

    #[async_trait]
    impl object_store::CredentialProvider for Source {
        type Credential = object_store::aws::AwsCredential;

        async fn get_credential(&self) -> object_store::Result<Arc<Self::Credential>> {
            if self.0 {
                std::future::pending::<()>().await;
            }
            Err(object_store::Error::Generic {
                store: "S3",
                source: "connection refused (169.254.169.254)".into(),
            })
        }
    }

    #[tokio::test]
    async fn an_instance_metadata_service_that_fails_or_hangs_is_auth_failed_not_retried() {
        use object_store::CredentialProvider;
        for hangs in [false, true] {
            let bounded = BoundedSource {
                inner: Arc::new(Source(hangs)),
                timeout: Duration::from_millis(50),
            };
            let started = std::time::Instant::now();
            let err = bounded.get_credential().await.expect_err("no credentials");
            assert!(started.elapsed() < Duration::from_secs(5));
            let ours = access_failure(&err).expect("typed");
            assert_eq!(ours.code(), ErrorCode::AuthFailed, "{ours}");
            assert!(ours.message().contains("instance_metadata"), "{ours}");
            let io =
                iceberg::Error::new(iceberg::ErrorKind::Unexpected, "reading").with_source(err);
            assert_eq!(classify_iceberg_io(&io), Some(ErrorCode::AuthFailed));
        }
    }

    /// A signer that adds a fixed signature, remembering what it was asked.
    #[derive(Debug, Default)]
    struct FixedSigner(std::sync::Mutex<Vec<crate::io::signer::SignRequest>>);

    #[async_trait]
    impl crate::io::signer::RequestSigner for FixedSigner {
        async fn sign(
            &self,
            request: &crate::io::signer::SignRequest,
        ) -> Result<crate::io::signer::Signed> {
            self.0.lock().expect("asked").push(request.clone());
            Ok(crate::io::signer::Signed {
                uri: request.uri.clone(),
                headers: vec![
                    (
                        "Authorization".to_string(),
                        vec!["AWS4-HMAC-SHA256 Credential=AKIDREMOTE/x".to_string()],
                    ),
                    (
                        "X-Amz-Date".to_string(),
                        vec!["20260101T000000Z".to_string()],
                    ),
                    ("Cache-Control".to_string(), vec!["private".to_string()]),
                ],
            })
        }
    }

    #[tokio::test]
    async fn with_a_signer_each_request_carries_the_signer_s_headers_and_none_of_its_own() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.expect("read");
                assert!(n > 0, "closed early");
                head.extend_from_slice(&buf[..n]);
            }
            let _ = socket
                .write_all(
                    b"HTTP/1.1 206 Partial Content\r\ncontent-length: 4\r\n\
                      content-range: bytes 0-3/10\r\nconnection: close\r\n\r\nPAR1",
                )
                .await;
            String::from_utf8_lossy(&head).to_ascii_lowercase()
        });
        let signer = Arc::new(FixedSigner::default());
        let settings = S3Settings {
            region: "eu-central-1".into(),
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            virtual_hosted: false,
            allow_http: true,
            credentials: S3Credentials::Signer(SharedSigner(signer.clone())),
            retry: Some(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            }),
        };
        let s3 = build_object_store(&settings, "warehouse").expect("built");
        let bytes = s3
            .get_range(
                &ObjectPath::parse("t/data/seg 1.parquet").expect("path"),
                0..4,
            )
            .await
            .expect("read");
        assert_eq!(&bytes[..], b"PAR1");
        let head = server.await.expect("server");
        assert!(
            head.starts_with("get /warehouse/t/data/seg%201.parquet http/1.1"),
            "{head}"
        );
        assert!(
            head.contains("authorization: aws4-hmac-sha256 credential=akidremote/x"),
            "{head}"
        );
        assert!(head.contains("x-amz-date: 20260101t000000z"), "{head}");
        assert!(
            head.contains("x-amz-content-sha256: unsigned-payload"),
            "{head}"
        );
        assert!(head.contains("range: bytes=0-3"), "{head}");
        assert!(!head.contains("cache-control"), "{head}");
        let asked = signer.0.lock().expect("asked").clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].method, "GET");
        assert_eq!(
            asked[0].uri,
            format!("http://127.0.0.1:{port}/warehouse/t/data/seg%201.parquet")
        );
        assert_eq!(asked[0].region, "eu-central-1");
        assert_eq!(
            asked[0].headers.get("range"),
            Some(&vec!["bytes=0-3".to_string()])
        );
        assert!(!asked[0].headers.contains_key("authorization"));
    }
}
