//! [`RefreshedToken`]: the [`TokenSource`] of a `catalog_credential`, backed by the token
//! refresher actor, its handle: what the catalog client holds.
//!
//! `current()` reads the token the refresher last published (waiting for the first exchange);
//! `renew_after_rejection()` asks the refresher for a token newer than the rejected one. Dropping
//! the last handle stops the refresher, so a one-shot client (`registrar::connect`) leaks nothing.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio::sync::watch;

use super::{TokenRefresherMsg, TokenState};
use crate::actors::token_refresher;
use crate::catalog::auth::oauth2::TokenEndpoint;
use crate::catalog::auth::{BearerToken, TokenSource};
use crate::config::{OAuth2Credential, RetryPolicy};
use crate::error::{Error, Result};
use crate::runtime::shutdown::Shutdown;

/// How long a request waits for a renewal before treating the token endpoint as unavailable
/// (longer than the HTTP client's own 60 s timeout, so that one decides first).
const RENEW_TIMEOUT: Duration = Duration::from_secs(90);

pub struct RefreshedToken {
    state: watch::Receiver<TokenState>,
    refresher: ActorRef<TokenRefresherMsg>,
    /// The registrar's stop signal: a refresher that is gone while it is set means "stopping"
    /// (`cancelled`); gone without it, the refresher died, which is `internal`, never a silent
    /// `cancelled` that callers would take for a requested stop.
    shutdown: Option<Shutdown>,
}

impl std::fmt::Debug for RefreshedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // TokenState's Debug shows no token value (BearerToken prints `***`).
        f.debug_struct("RefreshedToken")
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl RefreshedToken {
    /// Starts a token refresher for `credential`, exchanging through `http` (the catalog's client:
    /// same CAs, same client certificate) and retrying transient failures with `retry`.
    pub async fn start(
        credential: OAuth2Credential,
        http: reqwest::Client,
        retry: RetryPolicy,
    ) -> Result<Arc<RefreshedToken>> {
        Self::start_with_shutdown(credential, http, retry, None).await
    }

    /// [`RefreshedToken::start`] for a registrar whose stop signal is `shutdown`.
    pub(crate) async fn start_with_shutdown(
        credential: OAuth2Credential,
        http: reqwest::Client,
        retry: RetryPolicy,
        shutdown: Option<Shutdown>,
    ) -> Result<Arc<RefreshedToken>> {
        let (refresher, state) =
            token_refresher::spawn(TokenEndpoint::new(credential, http), retry).await?;
        Ok(Arc::new(RefreshedToken {
            state,
            refresher,
            shutdown,
        }))
    }

    /// Why the refresher cannot answer: the registrar is stopping, or the refresher died.
    fn gone(&self) -> Error {
        if self.shutdown.as_ref().is_some_and(Shutdown::is_requested) {
            Error::cancelled()
        } else {
            Error::internal(
                "the token refresher (catalog_credential) stopped unexpectedly; no catalog \
                 request can get a token. Restart the registrar",
            )
        }
    }

    /// The channel the refresher publishes on (for [`token_refresher::follow_registrar`]).
    pub(crate) fn state(&self) -> watch::Receiver<TokenState> {
        self.state.clone()
    }

    /// The refresher actor (to stop it with the registrar).
    pub(crate) fn refresher(&self) -> ActorRef<TokenRefresherMsg> {
        self.refresher.clone()
    }
}

impl Drop for RefreshedToken {
    fn drop(&mut self) {
        self.refresher.stop(None);
    }
}

#[async_trait]
impl TokenSource for RefreshedToken {
    async fn current(&self) -> Result<Option<BearerToken>> {
        let mut state = self.state.clone();
        // A closed channel still holds the last value: check for a dead refresher first.
        if state.has_changed().is_err() {
            return Err(self.gone());
        }
        let published = state
            .wait_for(|s| !matches!(s, TokenState::Pending))
            .await
            .map_err(|_| self.gone())?
            .clone();
        match published {
            TokenState::Ready(token) => Ok(Some(token)),
            TokenState::Unavailable(e) | TokenState::Failed(e) => Err(e),
            TokenState::Pending => Err(Error::internal("the token refresher published nothing")),
        }
    }

    async fn renew_after_rejection(&self, rejected: &BearerToken) -> Result<Option<BearerToken>> {
        let generation = rejected.generation;
        let answer = self
            .refresher
            .call(
                |reply| TokenRefresherMsg::Renew {
                    rejected: generation,
                    reply,
                },
                Some(RENEW_TIMEOUT),
            )
            .await;
        match answer {
            Ok(CallResult::Success(result)) => result.map(Some),
            Ok(CallResult::Timeout) => Err(Error::unavailable(
                "the token endpoint did not answer a renewal in time",
            )),
            // The refresher is gone: stopping, or dead (see `gone`).
            Ok(CallResult::SenderError) | Err(_) => Err(self.gone()),
        }
    }
}
