//! The public face of the registrar: start it from a config, watch its status, stop it, wait.
//!
//! ```no_run
//! # async fn run() -> thadam_iceberg::error::Result<()> {
//! use thadam_iceberg::{config::Config, Registrar};
//! let config = Config::load("thadam.yaml".as_ref())?;
//! let registrar = Registrar::start(config.registrars[0].clone()).await?;
//! // ... later, e.g. on SIGTERM:
//! registrar.stop();
//! registrar.wait().await
//! # }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::task::JoinHandle;

use crate::actors::context::{RegistrarContext, Tuning};
use crate::actors::supervisor::{Outcome, Supervisor, SupervisorArgs};
use crate::auth::{NoAuth, SharedTokenSource, StaticToken};
use crate::catalog::RestClient;
use crate::catalog::rest::RestClientSettings;
use crate::config::{CatalogAuth, RegistrarConfig};
use crate::error::{Error, Result};
use crate::protocol::feed::SegmentFeed;
use crate::protocol::messages::SupervisorMsg;
use crate::protocol::segment_log::SegmentLogTail;
use crate::retry::retry_transient;
use crate::shutdown::{self, ShutdownTrigger};
use crate::status::{RegistrarStatus, StatusBoard};
use crate::tls::{TlsSettings, catalog_http_client};

/// Starts registrars.
pub struct Registrar;

impl Registrar {
    /// Starts a registrar that tails the segment catalog file of the config's parquet sink.
    pub async fn start(config: RegistrarConfig) -> Result<RegistrarHandle> {
        let feed = SegmentLogTail::open(&config.source.catalog);
        Self::start_with_feed(config, Box::new(feed), Tuning::default()).await
    }

    /// Starts a registrar fed by `feed` (an embedding runtime's own catalog, or a
    /// [`crate::protocol::feed::ChannelFeed`]).
    ///
    /// Connects to the catalog first, so an untrusted certificate or a rejected credential fails
    /// here, with its code, before anything is started. An unreachable catalog (or a 5xx) is
    /// transient: `start` retries it with the configured backoff and returns once connected.
    pub async fn start_with_feed(
        config: RegistrarConfig,
        feed: Box<dyn SegmentFeed>,
        tuning: Tuning,
    ) -> Result<RegistrarHandle> {
        let (trigger, shutdown) = shutdown::channel();
        let store = crate::store::object_store(&config.store, &config.url.bucket)?;
        let mut waiting = shutdown.clone();
        let client = retry_transient(
            &config.retry,
            &mut waiting,
            "connecting to the catalog",
            || connect(&config),
        )
        .await?
        .ok_or_else(Error::cancelled)?;
        let status = StatusBoard::default();
        let ctx = Arc::new(RegistrarContext {
            config,
            client,
            store,
            status: status.clone(),
            shutdown,
            tuning,
        });
        let outcome: Outcome = Arc::new(Mutex::new(None));
        let (supervisor, join) = Actor::spawn(
            None,
            Supervisor,
            SupervisorArgs {
                ctx,
                feed,
                outcome: Arc::clone(&outcome),
                trigger: trigger.clone(),
            },
        )
        .await
        .map_err(|e| Error::internal(format!("the registrar could not start: {e}")))?;
        Ok(RegistrarHandle {
            supervisor,
            join,
            outcome,
            status,
            trigger,
        })
    }
}

/// The catalog connection for a config: TLS settings, credentials, `GET /v1/config`.
pub async fn connect(config: &RegistrarConfig) -> Result<RestClient> {
    let identity = config.catalog_client_identity.as_ref();
    let http = catalog_http_client(&TlsSettings {
        ca_file: config.catalog_ca_file.as_deref(),
        client_cert: identity.map(|i| i.cert.as_path()),
        client_key: identity.map(|i| i.key.as_path()),
    })?;
    let tokens: SharedTokenSource = match &config.catalog_auth {
        CatalogAuth::None => Arc::new(NoAuth),
        CatalogAuth::Token(token) => Arc::new(StaticToken::new(token.clone())),
        CatalogAuth::Credential(credential) => Arc::new(
            crate::auth::oauth2::ClientCredentials::new(credential.clone(), http.clone()),
        ),
    };
    RestClient::connect(RestClientSettings {
        catalog_uri: config.catalog_uri.clone(),
        http,
        tokens,
        storage_props: crate::store::file_io_props(&config.store),
    })
    .await
}

/// A running registrar.
pub struct RegistrarHandle {
    supervisor: ActorRef<SupervisorMsg>,
    join: JoinHandle<()>,
    outcome: Outcome,
    status: StatusBoard,
    trigger: ShutdownTrigger,
}

impl RegistrarHandle {
    /// Per-table progress, and the fatal error if the service stopped on one.
    pub fn status(&self) -> RegistrarStatus {
        self.status.snapshot()
    }

    /// Asks the registrar to stop: no new segments are taken, a commit in flight finishes or is
    /// abandoned (both safe: nothing is registered twice on restart), and pending segments stay
    /// in the segment catalog.
    pub fn stop(&self) {
        self.trigger.trigger();
        self.supervisor.stop(Some("stop requested".to_string()));
    }

    /// Whether the service has stopped (on request or on a fatal error).
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// Waits until the registrar has stopped. `Err` carries the fatal error that stopped it.
    pub async fn wait(self) -> Result<()> {
        let _ = self.join.await;
        match self.outcome.lock() {
            Ok(mut slot) => slot.take().map_or(Ok(()), Err),
            Err(_) => Err(Error::internal("the registrar's outcome was lost")),
        }
    }

    /// Polls the status until `done` holds, returning it; fails with the fatal error if the
    /// service stops first.
    pub async fn wait_until(
        &self,
        mut done: impl FnMut(&RegistrarStatus) -> bool,
    ) -> Result<RegistrarStatus> {
        loop {
            let status = self.status();
            if done(&status) {
                return Ok(status);
            }
            if self.join.is_finished() {
                let fatal = self.outcome.lock().ok().and_then(|s| s.clone());
                return Err(fatal.unwrap_or_else(|| Error::internal("the registrar stopped")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
