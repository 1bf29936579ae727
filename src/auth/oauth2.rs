//! OAuth2 client credentials (`catalog_credential`): exchanged at the token endpoint with
//! `grant_type=client_credentials`, client id and secret in the form body, through the same HTTP
//! client (TLS roots, client certificate) as every catalog request.
//!
//! The token is exchanged on first use and again when the catalog rejects it with 401
//! ([`TokenSource::renew_after_rejection`]); a token past its `expires_in` (less a margin) is
//! renewed before it is sent. A 401/403 from the token endpoint is fatal `auth.failed`; an
//! unreachable endpoint or a 5xx is transient.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use oauth2::basic::BasicClient;
use oauth2::{AuthType, ClientId, ClientSecret, RequestTokenError, Scope, TokenResponse, TokenUrl};
use tokio::sync::Mutex;

use crate::auth::{BearerToken, TokenSource};
use crate::config::{OAuth2Credential, Secret};
use crate::error::{Error, Result};

/// Renew this long before the server-announced expiry, so a token never expires in flight.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

pub struct ClientCredentials {
    credential: OAuth2Credential,
    http: reqwest::Client,
    current: Mutex<Option<Held>>,
}

struct Held {
    token: BearerToken,
    renew_at: Option<Instant>,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.credential.client_id)
            .field(
                "token_endpoint",
                &self.credential.oauth2_server_uri.as_str(),
            )
            .finish_non_exhaustive()
    }
}

impl ClientCredentials {
    pub fn new(credential: OAuth2Credential, http: reqwest::Client) -> Self {
        ClientCredentials {
            credential,
            http,
            current: Mutex::new(None),
        }
    }

    async fn exchange(&self, generation: u64) -> Result<Held> {
        let endpoint = self.credential.oauth2_server_uri.as_str().to_string();
        let token_url = TokenUrl::new(endpoint.clone())
            .map_err(|e| Error::config_invalid(format!("oauth2_server_uri {endpoint}: {e}")))?;
        let client = BasicClient::new(ClientId::new(self.credential.client_id.clone()))
            .set_client_secret(ClientSecret::new(
                self.credential.client_secret.expose().to_string(),
            ))
            .set_auth_type(AuthType::RequestBody)
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
                let response = builder.body(body).send().await?;
                seen.store(response.status().as_u16(), Ordering::Relaxed);
                let mut out = http::Response::builder().status(response.status());
                for (name, value) in response.headers() {
                    out = out.header(name, value);
                }
                let bytes = response.bytes().await?;
                Ok::<_, reqwest::Error>(out.body(bytes.to_vec()).unwrap_or_default())
            }
        };
        let response = client
            .exchange_client_credentials()
            .add_scope(Scope::new(self.credential.scope.clone()))
            .request_async(&send)
            .await
            .map_err(|e| classify(e, status.load(Ordering::Relaxed), &endpoint))?;
        metrics::counter!("thadam_iceberg_token_exchanges_total").increment(1);
        let renew_at = response
            .expires_in()
            .map(|ttl| Instant::now() + ttl.saturating_sub(EXPIRY_MARGIN.min(ttl / 2)));
        tracing::info!(
            expires_in = ?response.expires_in(),
            "exchanged catalog_credential for an access token"
        );
        Ok(Held {
            token: BearerToken {
                value: Secret::new(response.access_token().secret().to_string()),
                generation,
            },
            renew_at,
        })
    }
}

fn classify<RE: std::error::Error + 'static, T: oauth2::ErrorResponse + 'static>(
    err: RequestTokenError<RE, T>,
    status: u16,
    endpoint: &str,
) -> Error {
    let fix = "check catalog_credential (client_id, client_secret, scope) and oauth2_server_uri";
    match (status, &err) {
        (401 | 403, _) | (_, RequestTokenError::ServerResponse(_))
            if !(500..600).contains(&status) =>
        {
            // The server's error code (invalid_client, ...) is safe to show; our secret is not in it.
            let detail = match &err {
                RequestTokenError::ServerResponse(r) => format!("{r}"),
                _ => format!("HTTP {status}"),
            };
            Error::auth_failed(format!(
                "the token endpoint {endpoint} rejected the client credentials ({detail}); {fix}"
            ))
        }
        (_, RequestTokenError::Request(e)) => Error::unavailable(format!(
            "cannot reach the token endpoint {endpoint}: {}",
            crate::tls::error_chain_text(e)
        )),
        _ if (500..600).contains(&status) => Error::unavailable(format!(
            "the token endpoint {endpoint} answered HTTP {status}"
        )),
        _ => Error::auth_failed(format!(
            "the token endpoint {endpoint} gave no usable token (HTTP {status}); {fix}"
        )),
    }
}

#[async_trait]
impl TokenSource for ClientCredentials {
    async fn current(&self) -> Result<Option<BearerToken>> {
        let mut held = self.current.lock().await;
        let fresh = held
            .as_ref()
            .is_some_and(|h| h.renew_at.is_none_or(|at| Instant::now() < at));
        if !fresh {
            let generation = held.as_ref().map_or(1, |h| h.token.generation + 1);
            *held = Some(self.exchange(generation).await?);
        }
        Ok(held.as_ref().map(|h| h.token.clone()))
    }

    async fn renew_after_rejection(&self, rejected: &BearerToken) -> Result<Option<BearerToken>> {
        let mut held = self.current.lock().await;
        // Another request already renewed past the rejected token: use that one.
        if let Some(h) = held.as_ref()
            && h.token.generation > rejected.generation
        {
            return Ok(Some(h.token.clone()));
        }
        metrics::counter!("thadam_iceberg_token_refreshes_total").increment(1);
        *held = Some(self.exchange(rejected.generation + 1).await?);
        Ok(held.as_ref().map(|h| h.token.clone()))
    }
}
