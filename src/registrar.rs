//! The public face of the registrar, for a host that embeds it: build a config, start, watch the
//! status, stop, wait.
//!
//! 1. **Config.** [`crate::config::Config::load`] reads a thadam YAML file (or
//!    [`crate::config::Config::from_yaml_str`] a string) and yields one validated
//!    [`RegistrarConfig`] per `kind: iceberg` sink; [`RegistrarConfig::builder`] makes one in
//!    code, checked by the same rules.
//! 2. **Start.** [`Registrar::builder`]`(config)` tails the parquet sink's segment catalog file,
//!    or, with [`RegistrarBuilder::feed`], takes any [`SegmentFeed`], e.g. a
//!    [`crate::protocol::feed::ChannelFeed`] the host pushes its own `Uploaded` entries into
//!    (see `examples/embedded.rs`). `start` connects to the catalog first: a bad certificate or
//!    credential fails here, with its [`crate::ErrorCode`]; an unreachable catalog is retried.
//! 3. **Status.** [`RegistrarHandle::status`] is a snapshot: per table, segments registered,
//!    skipped, waiting (backlog), the last commit's time and lag, the last error; and
//!    [`RegistrarStatus::readiness`]. [`RegistrarHandle::updates`] delivers every change as it
//!    happens. Metrics go through the `metrics` facade to whatever
//!    recorder the host installed (see [`crate::runtime::metrics`]); each start logs its
//!    `starting` line with the version and commit and sets the `thadam_iceberg_build_info` gauge
//!    (see [`crate::runtime::build_info`]).
//! 4. **Stop and wait.** [`RegistrarHandle::stop`] stops taking segments and abandons or
//!    finishes the commit in flight (either is safe); [`RegistrarHandle::wait`] returns `Ok` after
//!    a requested stop and `Err` with the fatal error that stopped the service otherwise.
//!
//! ```no_run
//! # async fn run() -> thadam_iceberg::error::Result<()> {
//! use thadam_iceberg::{config::Config, Registrar};
//! let config = Config::load("thadam.yaml".as_ref())?;
//! let registrar = Registrar::start(config.registrars[0].clone()).await?;
//! println!("{} segments waiting", registrar.status().backlog());
//! // ... later, e.g. on SIGTERM:
//! registrar.stop();
//! registrar.wait().await
//! # }
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::task::JoinHandle;

use crate::actors::context::RegistrarContext;
use crate::actors::supervisor::{Outcome, Supervisor, SupervisorArgs};
use crate::actors::token_refresher;
use crate::actors::token_refresher::RefreshedToken;
use crate::actors::tuning::Tuning;
use crate::catalog::RestClient;
use crate::catalog::auth::{NoAuth, SharedTokenSource, StaticToken};
use crate::catalog::rest::RestClientSettings;
use crate::catalog::tls::{TlsSettings, catalog_http_client};
use crate::config::{CatalogAuth, RegistrarConfig};
use crate::error::{Error, Result};
use crate::protocol::feed::SegmentFeed;
use crate::protocol::messages::SupervisorMsg;
use crate::protocol::segment_log::SegmentLogTail;
use crate::runtime::build_info;
use crate::runtime::retry::{Op, retry_transient};
use crate::runtime::shutdown::{self, ShutdownTrigger};
use crate::runtime::status::{RegistrarStatus, StatusBoard, StatusUpdates};

/// The quarantine file, opened when the policy is `quarantine` or when a file is there already:
/// entries left open under `quarantine` must be decided by files under `stop` too.
fn open_quarantine(
    config: &RegistrarConfig,
) -> Result<Option<Arc<crate::table::quarantine::QuarantineStore>>> {
    use crate::config::BadSegmentPolicy;
    use crate::table::quarantine::QuarantineStore;
    if config.on_bad_segment == BadSegmentPolicy::Stop && !config.quarantine_file.exists() {
        return Ok(None);
    }
    let store = QuarantineStore::open(&config.quarantine_file)?;
    metrics::gauge!("thadam_iceberg_segments_in_quarantine").set(store.open_count() as f64);
    Ok(Some(Arc::new(store)))
}

/// Starts registrars. Each start runs one registrar (one `kind: iceberg` sink) on the current
/// tokio runtime, until stopped or until a fatal error.
pub struct Registrar;

/// How a registrar starts: its config, where its segments come from and the knobs beside the
/// config. [`Registrar::builder`] makes one.
pub struct RegistrarBuilder {
    config: RegistrarConfig,
    feed: Option<Box<dyn SegmentFeed>>,
    tuning: Tuning,
}

impl RegistrarBuilder {
    /// Feeds the registrar from `feed` (an embedding runtime's own catalog, or a
    /// [`crate::protocol::feed::ChannelFeed`]) instead of the parquet sink's segment catalog file.
    pub fn feed(mut self, feed: impl SegmentFeed) -> Self {
        self.feed = Some(Box::new(feed));
        self
    }

    /// Knobs beside the config (the runner's flags); the default defers to the config.
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// The id of the iceberg sink this starts.
    pub fn sink_id(&self) -> &str {
        &self.config.id
    }

    /// Connects to the catalog first, so an untrusted certificate or a rejected credential fails
    /// here, with its code, before anything is started; an unreachable catalog (or a 5xx) is
    /// retried with the config's backoff. Returns once connected; the tables are resolved in the
    /// background (see [`RegistrarStatus::readiness`]).
    pub async fn start(self) -> Result<RegistrarHandle> {
        let feed = match self.feed {
            Some(feed) => feed,
            None => Box::new(SegmentLogTail::open(&self.config.source.catalog)),
        };
        Registrar::start_with_feed(self.config, feed, self.tuning).await
    }
}

impl Registrar {
    /// A registrar for `config`, fed by its segment catalog file unless
    /// [`RegistrarBuilder::feed`] says otherwise:
    ///
    /// ```no_run
    /// # async fn run(config: thadam_iceberg::config::RegistrarConfig) -> thadam_iceberg::Result<()> {
    /// let (sender, feed) = thadam_iceberg::ChannelFeed::new(1024);
    /// let registrar = thadam_iceberg::Registrar::builder(config).feed(feed).start().await?;
    /// # drop(sender); registrar.stop(); registrar.wait().await
    /// # }
    /// ```
    pub fn builder(config: RegistrarConfig) -> RegistrarBuilder {
        RegistrarBuilder {
            config,
            feed: None,
            tuning: Tuning::default(),
        }
    }

    /// Starts a registrar fed by `feed` (an embedding runtime's own catalog, or a
    /// [`crate::protocol::feed::ChannelFeed`]).
    ///
    /// Connects to the catalog first, so an untrusted certificate or a rejected credential fails
    /// here, with its code, before anything is started. An unreachable catalog (or a 5xx) is
    /// transient: `start` retries it with the configured backoff and returns once connected.
    async fn start_with_feed(
        config: RegistrarConfig,
        feed: Box<dyn SegmentFeed>,
        tuning: Tuning,
    ) -> Result<RegistrarHandle> {
        // The start-up line says which build runs (fleets mix builds during a rollout), like
        // the build-info gauge; catalog_uri displays without credentials or query string.
        tracing::info!(
            sink = %config.id,
            catalog = %config.catalog_uri,
            version = %build_info::VERSION,
            commit = %build_info::COMMIT,
            "starting"
        );
        build_info::publish();
        crate::runtime::retry::announce_server_error_counters();
        crate::io::requests::announce_store_request_counters();
        crate::catalog::rest::announce_catalog_request_counters();
        let (trigger, shutdown) = shutdown::channel();
        let mut store = crate::io::store::shared_object_store(&config.store, &config.url.bucket)?;
        if let Some(wrap) = &tuning.hooks.wrap_store {
            store = wrap(store);
        }
        // One HTTP client and one token source for the registrar's whole life: with
        // catalog_credential, that is one token refresher, started before the first connect.
        let http = catalog_http(&config)?;
        let tokens = CatalogTokens::start(&config, &http, Some(shutdown.clone())).await?;
        let mut waiting = shutdown.clone();
        let client = retry_transient(
            Op::Config,
            &config.retry,
            &mut waiting,
            "connecting to the catalog",
            None,
            || connect_with(&config, http.clone(), tokens.source.clone()),
        )
        .await?
        .ok_or_else(Error::cancelled)?;
        let status = StatusBoard::default();
        status.set_catalog_ok();
        status.set_unready_after(
            config.unready_after,
            config.commit.linger + config.commit.min_interval,
        );
        // Every configured table is listed (unresolved) from the start, so readiness waits for
        // all of them, not only for those whose committer has reported.
        for dataset in &config.source.datasets {
            let table = crate::catalog::TableName {
                namespace: config.namespace.clone(),
                name: dataset.name.clone(),
            };
            status.update(&table.to_string(), |_| {});
        }
        let quarantine = open_quarantine(&config)?;
        let ctx = Arc::new(RegistrarContext {
            config,
            client,
            store,
            status: status.clone(),
            shutdown,
            tuning,
            history: feed.history(),
            quarantine,
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
        .map_err(|e| {
            Error::internal(format!("the registrar could not start: {e}")).with_source(e)
        })?;
        if let Some(refreshed) = &tokens.refreshed {
            tokio::spawn(token_refresher::follow_registrar(
                refreshed.state(),
                refreshed.refresher(),
                supervisor.clone(),
                waiting,
            ));
        }
        Ok(RegistrarHandle {
            supervisor,
            join,
            outcome,
            status,
            trigger,
        })
    }
}

/// A one-shot catalog connection for a config: TLS settings, credentials, `GET /v1/config`.
/// With `catalog_credential` it starts its own token refresher, which stops when the last clone
/// of the returned client is dropped.
pub async fn connect(config: &RegistrarConfig) -> Result<RestClient> {
    let http = catalog_http(config)?;
    let tokens = CatalogTokens::start(config, &http, None).await?;
    connect_with(config, http, tokens.source).await
}

/// The catalog HTTP client of a config: its CA file and client certificate.
pub(crate) fn catalog_http(config: &RegistrarConfig) -> Result<reqwest::Client> {
    let identity = config.catalog_client_identity.as_ref();
    catalog_http_client(&TlsSettings {
        ca_file: config.catalog_ca_file.as_deref(),
        client_cert: identity.map(|i| i.cert.as_path()),
        client_key: identity.map(|i| i.key.as_path()),
    })
}

/// Where catalog requests get their token, and the refresher behind it when there is one.
struct CatalogTokens {
    source: SharedTokenSource,
    refreshed: Option<Arc<RefreshedToken>>,
}

impl CatalogTokens {
    async fn start(
        config: &RegistrarConfig,
        http: &reqwest::Client,
        shutdown: Option<crate::runtime::shutdown::Shutdown>,
    ) -> Result<CatalogTokens> {
        Ok(match &config.catalog_auth {
            // A signed request carries no bearer token: the signer in the REST client is all.
            CatalogAuth::None | CatalogAuth::SigV4(_) => CatalogTokens {
                source: Arc::new(NoAuth),
                refreshed: None,
            },
            CatalogAuth::Token(token) => CatalogTokens {
                source: Arc::new(StaticToken::new(token.clone())),
                refreshed: None,
            },
            CatalogAuth::Credential(credential) => {
                let refreshed = RefreshedToken::start_with_shutdown(
                    credential.clone(),
                    http.clone(),
                    config.retry,
                    shutdown,
                )
                .await?;
                CatalogTokens {
                    source: refreshed.clone(),
                    refreshed: Some(refreshed),
                }
            }
        })
    }
}

/// `GET /v1/config` with the tokens of `tokens` (see [`connect`]).
pub(crate) async fn connect_with(
    config: &RegistrarConfig,
    http: reqwest::Client,
    tokens: SharedTokenSource,
) -> Result<RestClient> {
    RestClient::connect(RestClientSettings {
        catalog_uri: config.catalog_uri.clone(),
        http,
        tokens,
        storage_props: crate::io::file_io::file_io_props(&config.store),
        warehouse: config.catalog_warehouse.clone(),
        headers: config.catalog_headers.clone(),
        sigv4: match &config.catalog_auth {
            CatalogAuth::SigV4(credential) => Some(credential.clone()),
            _ => None,
        },
    })
    .await
}

/// A running registrar. Dropping it does not stop it: call [`RegistrarHandle::stop`], then
/// [`RegistrarHandle::wait`].
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

    /// Every later change of the status, as it happens (no polling):
    ///
    /// ```no_run
    /// # async fn watch(registrar: &thadam_iceberg::RegistrarHandle) {
    /// let mut updates = registrar.updates();
    /// loop {
    ///     let status = updates.changed().await;
    ///     println!("{} waiting", status.backlog());
    /// }
    /// # }
    /// ```
    pub fn updates(&self) -> StatusUpdates {
        StatusUpdates::new(self.status.clone())
    }

    /// The live status board behind [`RegistrarHandle::status`], for a task that reports on the
    /// registrar without owning its handle (e.g. a `/readyz` endpoint).
    pub fn status_board(&self) -> StatusBoard {
        self.status.clone()
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

    /// Waits until `done` holds for the status (checked on every change of it), returning it;
    /// fails with the fatal error if the service stops first.
    pub async fn wait_until(
        &self,
        mut done: impl FnMut(&RegistrarStatus) -> bool,
    ) -> Result<RegistrarStatus> {
        let mut changes = self.status.subscribe();
        loop {
            changes.borrow_and_update();
            let status = self.status();
            if done(&status) {
                return Ok(status);
            }
            if self.join.is_finished() {
                let fatal = self.outcome.lock().ok().and_then(|s| s.clone());
                return Err(fatal.unwrap_or_else(|| Error::internal("the registrar stopped")));
            }
            // A requested stop changes no status: look at the task again now and then.
            let _ = tokio::time::timeout(Duration::from_millis(250), changes.changed()).await;
        }
    }
}
