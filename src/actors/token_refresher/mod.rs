//! The token refresher: the one owner of a `catalog_credential`'s access token.
//!
//! It exchanges the client credentials at the token endpoint as soon as it starts, publishes the
//! token on a `watch` channel (every catalog request reads it from there, through
//! [`RefreshedToken`]), and exchanges again at 80% of the token's
//! `expires_in`, so a healthy service never sends an expired token. When the catalog still answers
//! 401, the request asks for a renewal ([`TokenRefresherMsg::Renew`]); renewals carry the
//! rejected token's generation, so a burst of 401s on one token causes one exchange and the rest
//! get the token it produced.
//!
//! Failures: a transient one (endpoint unreachable, 5xx) is retried with the configured backoff
//! while the current token, if any, stays published; a fatal one (401/403 from the token
//! endpoint, an untrusted certificate) is published as [`TokenState::Failed`], which every later
//! request returns and [`follow_registrar`] reports to the supervisor.

mod handle;

pub use handle::RefreshedToken;

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::actors::HandlerResult;
use crate::catalog::auth::BearerToken;
use crate::catalog::auth::oauth2::TokenEndpoint;
use crate::config::RetryPolicy;
use crate::error::{Error, Result};
use crate::protocol::messages::SupervisorMsg;
use crate::runtime::shutdown::Shutdown;

/// Renew at this share of the token's lifetime: late enough to use most of it, early enough that
/// a request holding the old token finishes before it expires.
const REFRESH_AT_PERCENT: u32 = 80;
/// Never renew more often than this, whatever `expires_in` says (0 or 1 s would spin).
const MIN_REFRESH_DELAY: Duration = Duration::from_secs(1);

/// What the refresher has to offer right now.
#[derive(Debug, Clone)]
pub(crate) enum TokenState {
    /// The first exchange has not finished yet.
    Pending,
    Ready(BearerToken),
    /// No token yet: the last exchange failed transiently and is retried with backoff.
    Unavailable(Error),
    /// The token endpoint refused the credential (or its certificate is not trusted): fatal.
    Failed(Error),
}

pub(crate) enum TokenRefresherMsg {
    /// Exchange now, unless `schedule` is stale (a newer timer replaced the one that sent it).
    Refresh { schedule: u64 },
    /// The catalog answered 401 to the token of generation `rejected`: reply with a newer token,
    /// exchanging once if there is none yet.
    Renew {
        rejected: u64,
        reply: RpcReplyPort<Result<BearerToken>>,
    },
}

pub(crate) struct TokenRefresher;

pub(crate) struct TokenRefresherArgs {
    pub endpoint: TokenEndpoint,
    pub retry: RetryPolicy,
    pub publish: watch::Sender<TokenState>,
}

pub(crate) struct TokenRefresherState {
    endpoint: TokenEndpoint,
    retry: RetryPolicy,
    publish: watch::Sender<TokenState>,
    /// The generation of the last token issued (0: none yet).
    generation: u64,
    /// Identifies the live timer; a `Refresh` with another value is stale.
    schedule: u64,
    timer: Option<JoinHandle<()>>,
    /// Consecutive transient failures, for the backoff.
    failures: u32,
}

/// Why an exchange happens, for logs and `thadam_iceberg_token_refreshes_total`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reason {
    Initial,
    Proactive,
    Rejected,
}

/// Spawns a refresher for `endpoint`; it starts exchanging at once. Returns the actor and the
/// channel the token is published on.
pub(crate) async fn spawn(
    endpoint: TokenEndpoint,
    retry: RetryPolicy,
) -> Result<(ActorRef<TokenRefresherMsg>, watch::Receiver<TokenState>)> {
    let (publish, state) = watch::channel(TokenState::Pending);
    let (actor, _) = Actor::spawn(
        None,
        TokenRefresher,
        TokenRefresherArgs {
            endpoint,
            retry,
            publish,
        },
    )
    .await
    .map_err(|e| {
        Error::internal(format!("the token refresher could not start: {e}")).with_source(e)
    })?;
    Ok((actor, state))
}

/// When to renew a token that lives `ttl`.
pub(crate) fn refresh_delay(ttl: Duration) -> Duration {
    (ttl * REFRESH_AT_PERCENT / 100).max(MIN_REFRESH_DELAY)
}

impl Actor for TokenRefresher {
    type Msg = TokenRefresherMsg;
    type State = TokenRefresherState;
    type Arguments = TokenRefresherArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<TokenRefresherMsg>,
        args: TokenRefresherArgs,
    ) -> Result<TokenRefresherState, ActorProcessingErr> {
        // The first exchange runs as a message, so spawning never waits on the token endpoint.
        myself.cast(TokenRefresherMsg::Refresh { schedule: 0 })?;
        Ok(TokenRefresherState {
            endpoint: args.endpoint,
            retry: args.retry,
            publish: args.publish,
            generation: 0,
            schedule: 0,
            timer: None,
            failures: 0,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<TokenRefresherMsg>,
        msg: TokenRefresherMsg,
        state: &mut TokenRefresherState,
    ) -> HandlerResult {
        match msg {
            TokenRefresherMsg::Refresh { schedule } => {
                if schedule != state.schedule || state.failed().is_some() {
                    return Ok(());
                }
                let reason = if state.generation == 0 {
                    Reason::Initial
                } else {
                    Reason::Proactive
                };
                // The outcome is published; nobody waits for this reply.
                let _ = state.exchange(&myself, reason).await;
            }
            TokenRefresherMsg::Renew { rejected, reply } => {
                let answer = match (state.failed(), state.current()) {
                    (Some(e), _) => Err(e),
                    // Another request already renewed past the rejected token: no new exchange.
                    (None, Some(token)) if token.generation > rejected => Ok(token),
                    _ => state.exchange(&myself, Reason::Rejected).await,
                };
                let _ = reply.send(answer);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<TokenRefresherMsg>,
        state: &mut TokenRefresherState,
    ) -> HandlerResult {
        if let Some(timer) = state.timer.take() {
            timer.abort();
        }
        Ok(())
    }
}

impl TokenRefresherState {
    fn current(&self) -> Option<BearerToken> {
        match &*self.publish.borrow() {
            TokenState::Ready(token) => Some(token.clone()),
            _ => None,
        }
    }

    fn failed(&self) -> Option<Error> {
        match &*self.publish.borrow() {
            TokenState::Failed(e) => Some(e.clone()),
            _ => None,
        }
    }

    /// One exchange; publishes the outcome and arranges the next wake-up.
    async fn exchange(
        &mut self,
        myself: &ActorRef<TokenRefresherMsg>,
        reason: Reason,
    ) -> Result<BearerToken> {
        match self.endpoint.exchange().await {
            Ok(issued) => {
                self.generation += 1;
                self.failures = 0;
                let token = BearerToken {
                    value: issued.value,
                    generation: self.generation,
                };
                self.publish.send_replace(TokenState::Ready(token.clone()));
                match reason {
                    Reason::Initial => {}
                    Reason::Proactive => {
                        metrics::counter!("thadam_iceberg_token_refreshes_total", "reason" => "proactive")
                            .increment(1);
                    }
                    Reason::Rejected => {
                        metrics::counter!("thadam_iceberg_token_refreshes_total", "reason" => "rejected")
                            .increment(1);
                        tracing::info!(
                            generation = self.generation,
                            "re-exchanged catalog_credential after the catalog rejected the token"
                        );
                    }
                }
                match issued.expires_in {
                    Some(ttl) => self.wake_after(myself, refresh_delay(ttl)),
                    // No announced lifetime: keep it until the catalog rejects it.
                    None => self.cancel_timer(),
                }
                Ok(token)
            }
            Err(e) if e.is_transient() => {
                crate::runtime::retry::count_retry(
                    crate::runtime::retry::Op::Token,
                    e.retry_cause(),
                );
                let delay = crate::runtime::backoff::delay_for(&self.retry, self.failures, &e);
                self.failures = self.failures.saturating_add(1);
                tracing::warn!(
                    attempt = self.failures,
                    ?delay,
                    "token exchange failed, retrying: {e}"
                );
                // A token we still hold stays in use (it may well be valid for a while yet).
                if self.generation == 0 {
                    self.publish
                        .send_replace(TokenState::Unavailable(e.clone()));
                }
                self.wake_after(myself, delay);
                Err(e)
            }
            Err(e) => {
                tracing::error!(code = %e.code(), "token exchange failed: {}", e.message());
                self.cancel_timer();
                self.publish.send_replace(TokenState::Failed(e.clone()));
                Err(e)
            }
        }
    }

    fn wake_after(&mut self, myself: &ActorRef<TokenRefresherMsg>, delay: Duration) {
        self.cancel_timer();
        let schedule = self.schedule;
        let me = myself.clone();
        self.timer = Some(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = me.cast(TokenRefresherMsg::Refresh { schedule });
        }));
    }

    fn cancel_timer(&mut self) {
        self.schedule += 1;
        if let Some(timer) = self.timer.take() {
            timer.abort();
        }
    }
}

/// Ties a refresher to a running registrar, as a supervisor would: a fatal token failure stops
/// the service (even when no catalog request is in flight to notice it), so does the refresher's
/// death (its channel closes) unless a stop was requested, with an `internal` error naming it;
/// and the refresher stops with the registrar.
pub(crate) async fn follow_registrar(
    mut state: watch::Receiver<TokenState>,
    refresher: ActorRef<TokenRefresherMsg>,
    supervisor: ActorRef<SupervisorMsg>,
    mut shutdown: Shutdown,
) {
    let failed = tokio::select! {
        failed = state.wait_for(|s| matches!(s, TokenState::Failed(_))) => match failed {
            Ok(s) => match &*s {
                TokenState::Failed(e) => Some(e.clone()),
                _ => None,
            },
            // The refresher's state (and with it the sender) is gone: it stopped or panicked.
            Err(_) if !shutdown.is_requested() => Some(Error::internal(
                "the token refresher (catalog_credential) stopped unexpectedly; catalog \
                 requests can no longer get a token",
            )),
            Err(_) => None,
        },
        _ = shutdown.requested() => None,
    };
    if let Some(e) = failed {
        let _ = supervisor.cast(SupervisorMsg::Fatal(e));
    }
    refresher.stop(Some("the registrar stopped".to_string()));
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::catalog::auth::TokenSource;
    use crate::config::{OAuth2Credential, Secret};
    use crate::error::ErrorCode;

    /// Stands in for the supervisor: forwards every Fatal it gets.
    struct FakeSupervisor;

    impl Actor for FakeSupervisor {
        type Msg = SupervisorMsg;
        type State = tokio::sync::mpsc::UnboundedSender<Error>;
        type Arguments = tokio::sync::mpsc::UnboundedSender<Error>;

        async fn pre_start(
            &self,
            _: ActorRef<SupervisorMsg>,
            tx: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(tx)
        }

        async fn handle(
            &self,
            _: ActorRef<SupervisorMsg>,
            msg: SupervisorMsg,
            tx: &mut Self::State,
        ) -> HandlerResult {
            if let SupervisorMsg::Fatal(e) = msg {
                let _ = tx.send(e);
            }
            Ok(())
        }
    }

    /// A refresher whose token endpoint is a closed port (its exchanges fail transiently).
    async fn refresher(shutdown: Option<Shutdown>) -> Arc<RefreshedToken> {
        let credential = OAuth2Credential {
            client_id: "registrar".into(),
            client_secret: Secret::new("s3cr3t"),
            scope: "catalog".into(),
            oauth2_server_uri: "http://127.0.0.1:9/v1/oauth/tokens".parse().expect("url"),
            client_auth: Default::default(),
        };
        RefreshedToken::start_with_shutdown(
            credential,
            reqwest::Client::new(),
            RetryPolicy::default(),
            shutdown,
        )
        .await
        .expect("refresher")
    }

    async fn wait_until_stopped(actor: &ActorRef<TokenRefresherMsg>) {
        for _ in 0..200 {
            if matches!(
                actor.get_status(),
                ractor::ActorStatus::Stopped | ractor::ActorStatus::Stopping
            ) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the refresher did not stop");
    }

    #[tokio::test]
    async fn a_dead_refresher_stops_the_service_with_internal_not_cancelled() {
        let (_trigger, shutdown) = crate::runtime::shutdown::channel();
        let tokens = refresher(Some(shutdown.clone())).await;
        let (tx, mut fatal) = tokio::sync::mpsc::unbounded_channel();
        let (supervisor, _) = Actor::spawn(None, FakeSupervisor, tx)
            .await
            .expect("supervisor");
        let follower = tokio::spawn(follow_registrar(
            tokens.state(),
            tokens.refresher(),
            supervisor.clone(),
            shutdown,
        ));
        // The refresher dies while nobody asked the registrar to stop.
        tokens.refresher().stop(Some("killed by the test".into()));
        wait_until_stopped(&tokens.refresher()).await;
        let e = tokio::time::timeout(Duration::from_secs(5), fatal.recv())
            .await
            .expect("the supervisor hears of it")
            .expect("a fatal error");
        assert_eq!(e.code(), ErrorCode::Internal, "{e}");
        assert!(e.message().contains("token refresher"), "{e}");
        follower.await.expect("follower ends");
        // Catalog requests get a real error, not the `cancelled` of a requested stop.
        let err = tokens.current().await.expect_err("no token");
        assert_eq!(err.code(), ErrorCode::Internal, "{err}");
        let rejected = BearerToken {
            value: Secret::new("old"),
            generation: 0,
        };
        let err = tokens
            .renew_after_rejection(&rejected)
            .await
            .expect_err("no renewal");
        assert_eq!(err.code(), ErrorCode::Internal, "{err}");
        supervisor.stop(None);
    }

    #[tokio::test]
    async fn a_refresher_stopped_with_the_registrar_means_cancelled() {
        let (trigger, shutdown) = crate::runtime::shutdown::channel();
        let tokens = refresher(Some(shutdown.clone())).await;
        let (tx, mut fatal) = tokio::sync::mpsc::unbounded_channel();
        let (supervisor, _) = Actor::spawn(None, FakeSupervisor, tx)
            .await
            .expect("supervisor");
        let follower = tokio::spawn(follow_registrar(
            tokens.state(),
            tokens.refresher(),
            supervisor.clone(),
            shutdown,
        ));
        trigger.trigger();
        follower.await.expect("follower ends");
        wait_until_stopped(&tokens.refresher()).await;
        assert!(fatal.try_recv().is_err(), "a requested stop is not fatal");
        let err = tokens.current().await.expect_err("no token");
        assert_eq!(err.code(), ErrorCode::Cancelled, "{err}");
        supervisor.stop(None);
    }

    #[test]
    fn renews_at_80_percent_with_a_floor() {
        assert_eq!(
            refresh_delay(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        assert_eq!(
            refresh_delay(Duration::from_secs(3)),
            Duration::from_millis(2400)
        );
        assert_eq!(refresh_delay(Duration::ZERO), MIN_REFRESH_DELAY);
        assert_eq!(refresh_delay(Duration::from_millis(500)), MIN_REFRESH_DELAY);
    }
}
