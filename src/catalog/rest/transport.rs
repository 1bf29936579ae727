//! How a request reaches the catalog: the URL (`{base}/v1/{prefix}/...`), the headers every
//! request carries, the bearer token or the SigV4 signature, and one renewal when the catalog
//! refuses a token (401/419). Also how an answer that is not a success is read: the REST error
//! body, `Retry-After`, and the error for a status per [`classify_status`]. Transport failures
//! are sorted by whether the request can have reached the catalog ([`SendFailure`]).

use std::time::{Duration, SystemTime};

use reqwest::Method;
use serde::de::DeserializeOwned;

use crate::catalog::TableName;
use crate::catalog::auth::{BearerToken, SharedTokenSource};
use crate::catalog::error_message::message_of;
use crate::catalog::outcome::{
    CallKind, StatusOutcome, classify_status, parse_retry_after, status_cause,
};
use crate::catalog::tls::{TlsFailure, error_chain_text, tls_cause};
use crate::config::SecretUrl;
use crate::error::{Error, ErrorCode, Result};
use crate::runtime::retry::warn_if_slow;

/// A request failure before any status code was seen.
pub(super) enum SendFailure {
    NotSent(Error),
    Unknown(Error),
    Fatal(Error),
}

impl SendFailure {
    pub(super) fn into_error(self) -> Error {
        match self {
            SendFailure::NotSent(e) | SendFailure::Unknown(e) | SendFailure::Fatal(e) => e,
        }
    }
}

/// `catalog_headers` as request headers. Config validation already checked names and values;
/// a value is marked sensitive so that it never shows in a `Debug` of a request.
pub(super) fn extra_headers(
    headers: &[(String, crate::config::Secret)],
) -> Result<Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>> {
    headers
        .iter()
        .map(|(name, value)| {
            let header =
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    Error::config_invalid(format!(
                        "catalog_headers.{name} is not a valid header name"
                    ))
                })?;
            let mut v = reqwest::header::HeaderValue::from_str(value.expose()).map_err(|_| {
                Error::config_invalid(format!(
                    "catalog_headers.{name} is not a valid header value (one line of visible ASCII)"
                ))
            })?;
            v.set_sensitive(true);
            Ok((header, v))
        })
        .collect()
}

/// How requests reach the catalog. Owned by the client; shared by all its clones.
pub(super) struct Transport {
    /// `catalog_uri` (without a trailing `/`): formats redacted, like every request URL here.
    pub(super) base: SecretUrl,
    pub(super) http: reqwest::Client,
    pub(super) tokens: SharedTokenSource,
    /// The server's `prefix` (from `GET /v1/config`), put after `v1/` in every table URL.
    pub(super) prefix: Option<String>,
    /// `catalog_headers`, values marked sensitive (kept out of `Debug` and logs).
    pub(super) headers: Vec<(reqwest::header::HeaderName, reqwest::header::HeaderValue)>,
    /// `catalog_sigv4`, when requests are signed instead of carrying a bearer token.
    pub(super) sigv4: Option<crate::config::SigV4Credential>,
}

impl Transport {
    /// `{base}/v1/{prefix}/{segments...}`. The prefix is a path fragment the server chose and is
    /// inserted as given (the REST spec's `{prefix}`): servers hand it out already
    /// percent-encoded (Nessie: `main%7Cwarehouse`), so it must not be encoded again; only
    /// characters that cannot stand in a path at all (a space, `?`, `#`) are escaped. Each
    /// segment is percent-encoded on its own (a multi-level namespace travels as one segment
    /// joined by 0x1F).
    pub(super) fn url(&self, segments: &[&str], prefixed: bool) -> Result<SecretUrl> {
        let mut url = self.base.expose().clone();
        if url.cannot_be_a_base() {
            return Err(Error::config_invalid(format!(
                "catalog_uri {} cannot be a base URL",
                self.base
            )));
        }
        if prefixed {
            let mut path = url.path().trim_end_matches('/').to_string();
            path.push_str("/v1");
            if let Some(prefix) = &self.prefix {
                for part in prefix.split('/').filter(|p| !p.is_empty()) {
                    path.push('/');
                    path.push_str(part);
                }
            }
            // `set_path` escapes what a path cannot hold and leaves `%` escapes alone.
            url.set_path(&path);
        }
        url.path_segments_mut()
            .map_err(|_| {
                Error::config_invalid(format!("catalog_uri {} cannot be a base URL", self.base))
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url.into())
    }

    pub(super) fn table_url(&self, table: &TableName) -> Result<SecretUrl> {
        let ns = table.namespace.join("\u{1f}");
        self.url(&["namespaces", &ns, "tables", &table.name], true)
    }

    /// Sends one request with the current token; on 401 (or 419, what some catalogs answer for
    /// an expired token) asks the token source for a renewal and retries once. A 401/419/403 that
    /// survives that is `auth.failed`. With `catalog_sigv4` the request is signed instead, last,
    /// over exactly what is sent; a refused signature is `auth.failed` at once (a fresh one
    /// from the same keys would be refused the same way).
    pub(super) async fn send(
        &self,
        method: Method,
        url: SecretUrl,
        body: Option<Vec<u8>>,
        idempotency_key: Option<&str>,
    ) -> std::result::Result<reqwest::Response, SendFailure> {
        let mut token = self.tokens.current().await.map_err(classify_token_error)?;
        let mut renewed = false;
        loop {
            let mut request = self
                .http
                .request(method.clone(), url.expose().clone())
                .header("X-Client-Version", "0.14.1")
                .header(
                    reqwest::header::USER_AGENT,
                    concat!("thadam-iceberg/", env!("CARGO_PKG_VERSION")),
                )
                // Set here rather than by the HTTP client, so that a signature covers it too.
                .header(reqwest::header::ACCEPT, "application/json");
            for (name, value) in &self.headers {
                request = request.header(name.clone(), value.clone());
            }
            if let Some(t) = &token
                && self.sigv4.is_none()
            {
                request = request.bearer_auth(t.value.expose());
            }
            if let Some(key) = idempotency_key {
                request = request.header("Idempotency-Key", key);
            }
            if let Some(body) = &body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
            }
            let mut request = request.build().map_err(|e| {
                let e = e.without_url();
                SendFailure::Fatal(
                    Error::internal(format!(
                        "cannot build the catalog request {method} {url}: {}",
                        error_chain_text(&e)
                    ))
                    .with_source(e),
                )
            })?;
            if let Some(credential) = &self.sigv4 {
                crate::catalog::sigv4::sign_request(&mut request, credential, SystemTime::now())
                    .map_err(SendFailure::Fatal)?;
            }
            let target = format!("{method} {}", url.expose().path());
            metrics::counter!(
                CATALOG_REQUESTS,
                "kind" => request_kind(&method, url.expose().path())
            )
            .increment(1);
            let response = warn_if_slow(
                format!("the catalog ({target})"),
                self.http.execute(request),
            )
            .await
            .map_err(|e| classify_transport_error(e, method.as_str(), &url))?;
            let status = response.status();
            match classify_status(status.as_u16(), CallKind::Other, None) {
                StatusOutcome::Reauthenticate if !renewed && self.sigv4.is_none() => {
                    if let Some(rejected) = &token
                        && let Some(fresh) = self.renew(rejected).await?
                    {
                        tracing::info!(
                            "the catalog rejected the token ({status}); retrying once with a \
                             renewed one"
                        );
                        token = Some(fresh);
                        renewed = true;
                        continue;
                    }
                }
                StatusOutcome::Reauthenticate | StatusOutcome::AuthFailed => {}
                _ => return Ok(response),
            }
            let message = error_message(response).await;
            let check = if self.sigv4.is_some() {
                "check catalog_sigv4: access_key_id / secret_access_key (and session_token), \
                 region and signing_name (glue for Glue, s3tables for S3 Tables), that this \
                 host's clock is right (a signature is refused 5 minutes off), and that the keys \
                 may access this namespace"
            } else {
                "check catalog_token / catalog_credential (and that it may access this namespace)"
            };
            return Err(SendFailure::Fatal(Error::auth_failed(format!(
                "the catalog answered {status} to {target}: {message}; {check}"
            ))));
        }
    }

    async fn renew(
        &self,
        rejected: &BearerToken,
    ) -> std::result::Result<Option<BearerToken>, SendFailure> {
        self.tokens
            .renew_after_rejection(rejected)
            .await
            .map_err(classify_token_error)
    }
}

fn classify_token_error(e: Error) -> SendFailure {
    if e.is_transient() {
        let e = if e.retry_hint().is_none() {
            e.with_retry_hint("token", None)
        } else {
            e
        };
        SendFailure::NotSent(e)
    } else {
        SendFailure::Fatal(e)
    }
}

/// Sorts a transport error by what it means for the request: never sent, outcome unknown, or a
/// TLS failure that retrying cannot fix. The URL is stripped from the error first: reqwest's
/// message quotes it whole, query string (which may hold a token) included.
fn classify_transport_error(err: reqwest::Error, method: &str, url: &SecretUrl) -> SendFailure {
    let err = err.without_url();
    let target = format!("{method} {url}");
    if let Some(tls) = tls_cause(&err) {
        let failure = match tls {
            TlsFailure::ServerNotTrusted(cause) => Error::config_invalid(format!(
                "TLS: the catalog's certificate is not trusted ({cause}) on {target}; set \
                 catalog_ca_file to the CA that signed it, or fix the catalog's certificate \
                 (expiry, host name)"
            )),
            TlsFailure::ClientRejected(cause) => Error::auth_failed(format!(
                "TLS: the catalog refused our client certificate ({cause}) on {target}; set \
                 catalog_client_cert/catalog_client_key to a certificate its CA trusts"
            )),
            TlsFailure::Other(cause) => Error::config_invalid(format!(
                "TLS handshake with the catalog failed on {target}: {cause}"
            )),
        };
        return SendFailure::Fatal(failure.with_source(err));
    }
    let text = error_chain_text(&err);
    if err.is_connect() {
        SendFailure::NotSent(
            Error::unavailable(format!("cannot reach the catalog ({target}): {text}"))
                .with_retry_hint("connect", None)
                .with_source(err),
        )
    } else {
        let cause = if err.is_timeout() {
            "timeout"
        } else {
            "lost_response"
        };
        SendFailure::Unknown(
            Error::unavailable(format!("no answer from the catalog ({target}): {text}"))
                .with_retry_hint(cause, None)
                .with_source(err),
        )
    }
}

/// The `Retry-After` header of a response, if it has a usable one.
pub(super) fn retry_after_of(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()))
}

/// `thadam_iceberg_catalog_requests_total{kind}`: every request sent to the catalog.
pub(crate) const CATALOG_REQUESTS: &str = "thadam_iceberg_catalog_requests_total";

/// The kinds of [`CATALOG_REQUESTS`].
pub(crate) const REQUEST_KINDS: [&str; 4] = ["load", "commit", "config", "other"];

/// What a request to `path` is, from its method and the REST spec's paths: a table's `GET` is a
/// load (`HEAD` is an existence check: other), its `POST` a commit (an append or a schema
/// change), `GET /v1/config` the handshake; namespaces, creations and the token exchange are
/// other.
pub(crate) fn request_kind(method: &Method, path: &str) -> &'static str {
    let segments: Vec<&str> = path.trim_end_matches('/').rsplit('/').take(3).collect();
    let on_table = segments.len() == 3 && segments[1] == "tables" && segments[2] != "v1";
    match (method, on_table) {
        (&Method::GET, true) => "load",
        (&Method::POST, true) => "commit",
        (&Method::GET, false) if path.trim_end_matches('/').ends_with("/v1/config") => "config",
        _ => "other",
    }
}

/// Every kind at 0 when a registrar starts, so that a rate is defined from the first scrape.
pub(crate) fn announce_catalog_request_counters() {
    for kind in REQUEST_KINDS {
        metrics::counter!(CATALOG_REQUESTS, "kind" => kind).increment(0);
    }
}

pub(super) async fn read_json<T: DeserializeOwned>(
    response: reqwest::Response,
    what: &str,
) -> Result<T> {
    parse_json(&read_body(response, what).await?, what)
}

/// The whole body of a response; a failure to read it is a lost answer.
///
/// Read chunk by chunk into one buffer sized from `Content-Length`, not with
/// `Response::bytes`: that collects the chunks and then copies them into one buffer, so a
/// commit's answer (the whole `metadata.json`, megabytes on a table with a long history) was
/// held twice at the moment it arrived, and that transient was the registrar's peak memory.
pub(super) async fn read_body(mut response: reqwest::Response, what: &str) -> Result<Vec<u8>> {
    let lost = |e: reqwest::Error| {
        Error::unavailable(format!(
            "{what}: reading the response failed: {}",
            error_chain_text(&e.without_url())
        ))
        .with_retry_hint("lost_response", None)
    };
    let mut body = Vec::with_capacity(body_capacity(response.content_length()));
    while let Some(chunk) = response.chunk().await.map_err(lost)? {
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What to reserve for a body of `content_length` bytes: all of it, up to a limit, so that a
/// wrong or hostile header cannot make the registrar reserve gigabytes before a byte arrives
/// (beyond the limit the buffer grows as the body does).
fn body_capacity(content_length: Option<u64>) -> usize {
    const MAX_RESERVED: u64 = 64 << 20;
    content_length.map_or(0, |n| n.min(MAX_RESERVED) as usize)
}

/// A response body as the REST spec's `T`.
pub(super) fn parse_json<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::new(
            ErrorCode::CatalogRejected,
            format!("{what}: the catalog's answer is not what the REST spec defines: {e}"),
        )
        .with_source(e)
    })
}

/// The server's own explanation: the REST `ErrorModel` message when there is one.
pub(super) async fn error_message(response: reqwest::Response) -> String {
    let status = response.status();
    let bytes = response.bytes().await.unwrap_or_default();
    message_of(status, &bytes)
}

/// The error for a status the caller does not handle itself, per [`classify_status`].
pub(super) async fn status_error(response: reqwest::Response, what: &str) -> Error {
    let status = response.status();
    let after = retry_after_of(&response);
    let message = error_message(response).await;
    let text = format!("{what}: the catalog answered {status}: {message}");
    match classify_status(status.as_u16(), CallKind::Other, after) {
        StatusOutcome::Transient { retry_after } | StatusOutcome::StateUnknown { retry_after } => {
            Error::unavailable(text).with_retry_hint(status_cause(status.as_u16()), retry_after)
        }
        StatusOutcome::Reauthenticate | StatusOutcome::AuthFailed => {
            Error::auth_failed(format!("{text}; check catalog_token / catalog_credential"))
        }
        StatusOutcome::Missing => Error::new(
            ErrorCode::TableMissing,
            format!("{text}; create the namespace or table, or set create_table: true"),
        ),
        StatusOutcome::Success | StatusOutcome::Conflict | StatusOutcome::Rejected => {
            Error::new(ErrorCode::CatalogRejected, text)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn requests_are_told_apart_by_method_and_path() {
        use super::request_kind;
        use reqwest::Method;
        let table = "/catalog/v1/prefix/namespaces/ns/tables/t";
        assert_eq!(request_kind(&Method::GET, table), "load");
        assert_eq!(request_kind(&Method::POST, table), "commit");
        assert_eq!(request_kind(&Method::HEAD, table), "other");
        assert_eq!(request_kind(&Method::GET, "/v1/config"), "config");
        assert_eq!(request_kind(&Method::GET, "/catalog/v1/config/"), "config");
        // A creation posts to the tables collection; a namespace's name may be "tables".
        assert_eq!(
            request_kind(&Method::POST, "/v1/namespaces/ns/tables"),
            "other"
        );
        assert_eq!(request_kind(&Method::GET, "/v1/namespaces/tables"), "other");
        assert_eq!(request_kind(&Method::POST, "/v1/oauth/tokens"), "other");
    }

    use std::sync::Arc;

    use serde::Deserialize;

    use super::*;
    use crate::catalog::auth::NoAuth;
    use crate::config::Secret;

    #[test]
    fn an_unparsable_answer_keeps_the_json_error_as_its_source() {
        use std::error::Error as _;
        let err =
            parse_json::<std::collections::HashMap<String, String>>(b"not json", "load table")
                .expect_err("not JSON");
        assert_eq!(err.code(), ErrorCode::CatalogRejected, "{err}");
        let source = err.source().expect("the JSON error underneath");
        assert!(
            source.downcast_ref::<serde_json::Error>().is_some(),
            "{source:?}"
        );
    }

    #[test]
    fn a_body_is_reserved_as_announced_up_to_a_limit() {
        assert_eq!(body_capacity(None), 0);
        assert_eq!(body_capacity(Some(7_900_000)), 7_900_000);
        assert_eq!(body_capacity(Some(u64::MAX)), 64 << 20);
    }

    fn transport(base: &str, prefix: Option<&str>) -> Transport {
        Transport {
            base: base.parse().expect("url"),
            http: reqwest::Client::new(),
            tokens: Arc::new(NoAuth),
            prefix: prefix.map(str::to_string),
            headers: Vec::new(),
            sigv4: None,
        }
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> reqwest::Response {
        let mut builder = http::Response::builder().status(status);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        reqwest::Response::from(builder.body(body.to_string()).expect("response"))
    }

    #[test]
    fn table_urls_carry_the_prefix_and_one_segment_per_namespace() {
        let t = transport("https://cat.example/api", Some("warehouses/wh 1/"));
        let table = TableName {
            namespace: vec!["a".into(), "b/c".into()],
            name: "t?x".into(),
        };
        assert_eq!(
            t.table_url(&table).expect("url").expose().as_str(),
            "https://cat.example/api/v1/warehouses/wh%201/namespaces/a%1Fb%2Fc/tables/t%3Fx"
        );
        // Unprefixed paths (GET /v1/config) ignore the prefix.
        assert_eq!(
            t.url(&["v1", "config"], false)
                .expect("url")
                .expose()
                .as_str(),
            "https://cat.example/api/v1/config"
        );
        let bare = transport("https://cat.example", None);
        assert_eq!(
            bare.url(&["namespaces"], true)
                .expect("url")
                .expose()
                .as_str(),
            "https://cat.example/v1/namespaces"
        );
    }

    #[test]
    fn an_encoded_prefix_is_inserted_verbatim() {
        let table = TableName {
            namespace: vec!["a".into(), "b/c".into()],
            name: "t?x".into(),
        };
        // A prefix the server sent percent-encoded goes in as it came (not `%257C`).
        let nessie = transport("http://127.0.0.1:19120/iceberg/", Some("main%7Cwarehouse"));
        assert_eq!(
            nessie.table_url(&table).expect("url").expose().as_str(),
            "http://127.0.0.1:19120/iceberg/v1/main%7Cwarehouse/namespaces/a%1Fb%2Fc/tables/t%3Fx"
        );
        assert_eq!(
            nessie
                .url(&["v1", "config"], false)
                .expect("url")
                .expose()
                .as_str(),
            "http://127.0.0.1:19120/iceberg/v1/config"
        );
        // Odd characters a path cannot hold are still escaped, once.
        let odd = transport("https://cat.example/", Some("wh 1/a%2Fb"));
        assert_eq!(
            odd.url(&["namespaces"], true)
                .expect("url")
                .expose()
                .as_str(),
            "https://cat.example/v1/wh%201/a%2Fb/namespaces"
        );
    }

    #[test]
    fn a_base_that_cannot_hold_a_path_is_a_config_error() {
        let t = transport("mailto:ops@example.com", None);
        let err = t.url(&["namespaces"], true).expect_err("no path");
        assert_eq!(err.code(), ErrorCode::ConfigInvalid);
    }

    #[test]
    fn logged_urls_lose_credentials_and_query_strings() {
        // A catalog_uri with credentials and a token in its query: every request URL built on
        // it is sent with the query and formats without either.
        let t = transport("https://user:pw@cat.example/api?token=abc#frag", Some("wh"));
        let table = TableName {
            namespace: vec!["ns".into()],
            name: "t".into(),
        };
        let url = t.table_url(&table).expect("url");
        assert_eq!(url.expose().query(), Some("token=abc"));
        assert_eq!(url.expose().path(), "/api/v1/wh/namespaces/ns/tables/t");
        for shown in [url.to_string(), format!("{url:?}")] {
            assert!(
                shown.contains("https://cat.example/api/v1/wh/namespaces/ns/tables/t"),
                "{shown}"
            );
            for secret in ["user", "pw", "token", "abc", "frag"] {
                assert!(!shown.contains(secret), "{secret} in {shown}");
            }
        }
    }

    #[test]
    fn catalog_headers_are_sensitive_and_bad_ones_name_the_key() {
        let ok = extra_headers(&[("X-Tenant".into(), Secret::new("t-123"))]).expect("valid");
        assert_eq!(ok[0].0.as_str(), "x-tenant");
        assert!(ok[0].1.is_sensitive());
        assert!(!format!("{:?}", ok[0].1).contains("t-123"));
        let err = extra_headers(&[("bad header".into(), Secret::new("v"))]).expect_err("name");
        assert_eq!(err.code(), ErrorCode::ConfigInvalid);
        assert!(
            err.message().contains("catalog_headers.bad header"),
            "{err}"
        );
        let err = extra_headers(&[("X-Ok".into(), Secret::new("two\nlines"))]).expect_err("value");
        assert_eq!(err.code(), ErrorCode::ConfigInvalid);
        assert!(!err.message().contains("two"), "the value stays out: {err}");
    }

    #[test]
    fn a_token_source_outage_is_not_sent_and_a_refusal_is_fatal() {
        assert!(matches!(
            classify_token_error(Error::unavailable("token endpoint down")),
            SendFailure::NotSent(e) if e.retry_cause() == "token"
        ));
        assert!(matches!(
            classify_token_error(Error::auth_failed("client secret refused")),
            SendFailure::Fatal(e) if e.code() == ErrorCode::AuthFailed
        ));
    }

    #[tokio::test]
    async fn the_rest_error_model_is_what_an_error_says() {
        let body = r#"{"error":{"message":"Namespace does not exist: ns","type":"NoSuchNamespaceException","code":404}}"#;
        assert_eq!(
            error_message(answer(404, &[], body)).await,
            "Namespace does not exist: ns (NoSuchNamespaceException)"
        );
        assert_eq!(error_message(answer(502, &[], "")).await, "502 Bad Gateway");
        let long = "x".repeat(2000);
        assert_eq!(error_message(answer(500, &[], &long)).await.len(), 512);
    }

    #[tokio::test]
    async fn statuses_become_errors_by_classify_status() {
        let err = status_error(answer(503, &[("retry-after", "7")], ""), "GET t").await;
        assert_eq!(err.code(), ErrorCode::Unavailable);
        assert_eq!(err.retry_cause(), "status_503");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
        let err = status_error(answer(429, &[], ""), "GET t").await;
        assert_eq!(
            (err.code(), err.retry_cause()),
            (ErrorCode::Unavailable, "status_429")
        );
        for status in [401, 403, 419] {
            let err = status_error(answer(status, &[], ""), "GET t").await;
            assert_eq!(err.code(), ErrorCode::AuthFailed, "{status}");
        }
        let err = status_error(answer(404, &[], ""), "GET t").await;
        assert_eq!(err.code(), ErrorCode::TableMissing);
        for status in [400, 409, 422] {
            let err = status_error(answer(status, &[], "{}"), "GET t").await;
            assert_eq!(err.code(), ErrorCode::CatalogRejected, "{status}");
            assert!(
                err.message().starts_with("GET t: the catalog answered"),
                "{err}"
            );
        }
    }

    #[tokio::test]
    async fn an_answer_that_is_not_the_spec_s_json_is_rejected_not_retried() {
        #[derive(Debug, Deserialize)]
        struct Wanted {
            #[allow(dead_code)]
            defaults: std::collections::HashMap<String, String>,
        }
        let err = read_json::<Wanted>(answer(200, &[], "<html>"), "GET /v1/config")
            .await
            .expect_err("not json");
        assert_eq!(err.code(), ErrorCode::CatalogRejected);
        assert!(err.message().contains("GET /v1/config"), "{err}");
    }

    #[tokio::test]
    async fn a_refused_connection_was_never_sent() {
        // Port 1 on loopback: nothing listens there.
        let url: SecretUrl = "http://127.0.0.1:1/v1/config?token=abc"
            .parse()
            .expect("url");
        let err = reqwest::Client::new()
            .get(url.expose().clone())
            .send()
            .await
            .expect_err("refused");
        match classify_transport_error(err, "GET", &url) {
            SendFailure::NotSent(e) => {
                assert_eq!(e.code(), ErrorCode::Unavailable);
                assert_eq!(e.retry_cause(), "connect");
                assert!(!e.message().contains("abc"), "{e}");
            }
            _ => panic!("a refused connection is NotSent"),
        }
    }
}
