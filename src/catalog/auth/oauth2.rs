//! One OAuth2 client-credentials exchange (`catalog_credential`): `grant_type=client_credentials`,
//! client id and secret in the form body (the REST catalog's convention) or as HTTP Basic
//! (`client_auth: basic`, which identity providers such as Okta or Entra may require), sent
//! through the same HTTP client (TLS roots, client certificate) as every catalog request.
//!
//! This module only talks to the token endpoint and sorts its answers; when to exchange (first
//! use, before expiry, after a 401) is the token refresher actor's business
//! (`crate::actors::token_refresher`). A 401/403 (or an OAuth2 error answer) is fatal
//! `auth.failed`; an unreachable endpoint, a 5xx or a 429 is transient; a TLS failure is fatal the
//! same way as on the catalog itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use oauth2::basic::BasicClient;
use oauth2::{AuthType, ClientId, ClientSecret, RequestTokenError, Scope, TokenResponse, TokenUrl};

use crate::catalog::tls::{TlsFailure, error_chain_text, tls_cause};
use crate::config::{ClientAuth, OAuth2Credential, Secret};
use crate::error::{Error, Result};

/// An access token as the token endpoint issued it.
pub(crate) struct IssuedToken {
    pub value: Secret,
    /// The server's `expires_in`, when it sent one (the fixture does not).
    pub expires_in: Option<Duration>,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IssuedToken(***, expires_in {:?})", self.expires_in)
    }
}

/// The token endpoint of a `catalog_credential`.
pub(crate) struct TokenEndpoint {
    credential: OAuth2Credential,
    http: reqwest::Client,
}

impl std::fmt::Debug for TokenEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEndpoint")
            .field("client_id", &self.credential.client_id)
            .field("uri", &self.credential.oauth2_server_uri)
            .field("scope", &self.credential.scope)
            .finish_non_exhaustive()
    }
}

impl TokenEndpoint {
    pub(crate) fn new(credential: OAuth2Credential, http: reqwest::Client) -> Self {
        TokenEndpoint { credential, http }
    }

    /// Exchanges the client credentials for an access token, once (no retry here).
    pub(crate) async fn exchange(&self) -> Result<IssuedToken> {
        let endpoint = self
            .credential
            .oauth2_server_uri
            .expose()
            .as_str()
            .to_string();
        // What messages show: no query string (it may carry a secret).
        let shown = self.credential.oauth2_server_uri.to_string();
        let token_url = TokenUrl::new(endpoint).map_err(|e| {
            Error::config_invalid(format!("oauth2_server_uri {shown}: {e}")).with_source(e)
        })?;
        let client = BasicClient::new(ClientId::new(self.credential.client_id.clone()))
            .set_client_secret(ClientSecret::new(
                self.credential.client_secret.expose().to_string(),
            ))
            .set_auth_type(auth_type(self.credential.client_auth))
            .set_token_uri(token_url);
        // oauth2 reports a non-JSON error body without its status; keep the status ourselves.
        let status = Arc::new(AtomicU16::new(0));
        let http = self.http.clone();
        let seen = Arc::clone(&status);
        let send = move |request: oauth2::HttpRequest| {
            let http = http.clone();
            let seen = Arc::clone(&seen);
            async move {
                let (parts, body) = request.into_parts();
                let mut builder = http.request(parts.method, parts.uri.to_string());
                for (name, value) in parts.headers.iter() {
                    builder = builder.header(name, value);
                }
                // Errors leave without the URL: a query string may carry a secret.
                let response = builder
                    .body(body)
                    .send()
                    .await
                    .map_err(reqwest::Error::without_url)?;
                seen.store(response.status().as_u16(), Ordering::Relaxed);
                let mut out = http::Response::builder().status(response.status());
                for (name, value) in response.headers() {
                    out = out.header(name, value);
                }
                let bytes = response
                    .bytes()
                    .await
                    .map_err(reqwest::Error::without_url)?;
                Ok::<_, reqwest::Error>(out.body(bytes.to_vec()).unwrap_or_default())
            }
        };
        let response = client
            .exchange_client_credentials()
            .add_scope(Scope::new(self.credential.scope.clone()))
            .request_async(&send)
            .await
            .map_err(|e| classify(e, status.load(Ordering::Relaxed), &shown))?;
        metrics::counter!("thadam_iceberg_token_exchanges_total").increment(1);
        tracing::info!(
            expires_in = ?response.expires_in(),
            "exchanged catalog_credential for an access token"
        );
        Ok(IssuedToken {
            value: Secret::new(response.access_token().secret().to_string()),
            expires_in: response.expires_in(),
        })
    }
}

/// The oauth2 crate's name for `client_auth`. Basic follows RFC 6749 section 2.3.1 (id and secret
/// form-urlencoded, then base64), which is what the crate does.
fn auth_type(client_auth: ClientAuth) -> AuthType {
    match client_auth {
        ClientAuth::Body => AuthType::RequestBody,
        ClientAuth::Basic => AuthType::BasicAuth,
    }
}

/// Whether a transport error (somewhere in its chain) is a timeout.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<reqwest::Error>()
            && r.is_timeout()
        {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Sorts a failed exchange by what the refresher must do: retry (transient) or stop (fatal).
/// Messages carry the endpoint and the server's OAuth2 error code, never the secret (it travels
/// only in the request body, which no error quotes).
fn classify<RE: std::error::Error + Send + Sync + 'static, T: oauth2::ErrorResponse + 'static>(
    err: RequestTokenError<RE, T>,
    status: u16,
    endpoint: &str,
) -> Error {
    let fix = "check catalog_credential (client_id, client_secret, scope) and oauth2_server_uri";
    // Only a transport failure is kept as the source: a parse failure holds the answer's bytes,
    // which may carry a token.
    if let RequestTokenError::Request(e) = err {
        let error = match tls_cause(&e) {
            Some(TlsFailure::ServerNotTrusted(cause)) => Error::config_invalid(format!(
                "TLS: the token endpoint's certificate is not trusted ({cause}) on {endpoint}; set \
                 catalog_ca_file to the CA that signed it, or fix its certificate (expiry, host name)"
            )),
            Some(TlsFailure::ClientRejected(cause)) => Error::auth_failed(format!(
                "TLS: the token endpoint refused our client certificate ({cause}) on {endpoint}; \
                 set catalog_client_cert/catalog_client_key to a certificate its CA trusts"
            )),
            Some(TlsFailure::Other(cause)) => Error::config_invalid(format!(
                "TLS handshake with the token endpoint {endpoint} failed: {cause}"
            )),
            None => Error::unavailable(format!(
                "cannot reach the token endpoint {endpoint}: {}",
                error_chain_text(&e)
            ))
            .with_retry_hint(if is_timeout(&e) { "timeout" } else { "connect" }, None),
        };
        return error.with_source(e);
    }
    match status {
        408 | 429 | 500..=599 => Error::unavailable(format!(
            "the token endpoint {endpoint} answered HTTP {status}; retrying"
        ))
        .with_retry_hint(crate::catalog::outcome::status_cause(status), None),
        _ => {
            // The server's error code (invalid_client, ...) is safe to show; our secret is not in it.
            let detail = match &err {
                RequestTokenError::ServerResponse(r) => format!("HTTP {status}: {r}"),
                _ => format!("HTTP {status}"),
            };
            let what = if matches!(status, 200..=299) {
                "gave no usable token"
            } else {
                "rejected the client credentials"
            };
            Error::auth_failed(format!(
                "the token endpoint {endpoint} {what} ({detail}); {fix}"
            ))
        }
    }
}
