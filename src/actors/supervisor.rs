//! The supervisor: starts every other actor linked to itself (a table's schema merger is linked
//! to that table's committer, and fails through it), routes segments to per-table committers,
//! and owns the service's fate. The first fatal error (reported by message, or as a failed
//! child) is recorded, shutdown is broadcast, and everything stops; `wait()` on the registrar
//! handle then returns that error with its code.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::actors::HandlerResult;
use crate::actors::committer::{Committer, CommitterArgs};
use crate::actors::context::SharedContext;
use crate::actors::footer_pool::FooterPool;
use crate::actors::watcher::{Watcher, WatcherArgs};
use crate::config::ParquetSource;
use crate::error::{Error, ErrorCode};
use crate::protocol::feed::SegmentFeed;
use crate::protocol::messages::{CommitterMsg, FooterPoolMsg, SupervisorMsg};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::shutdown::ShutdownTrigger;

/// Where the supervisor leaves the reason the service stopped (None: a requested stop).
pub(crate) type Outcome = Arc<Mutex<Option<Error>>>;

pub(crate) struct Supervisor;

pub(crate) struct SupervisorArgs {
    pub ctx: SharedContext,
    pub feed: Box<dyn SegmentFeed>,
    pub outcome: Outcome,
    pub trigger: ShutdownTrigger,
}

pub(crate) struct SupervisorState {
    ctx: SharedContext,
    outcome: Outcome,
    trigger: ShutdownTrigger,
    footer_pool: ActorRef<FooterPoolMsg>,
    committers: HashMap<String, ActorRef<CommitterMsg>>,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let cell = myself.get_cell();
        let (footer_pool, _) =
            Actor::spawn_linked(None, FooterPool, Arc::clone(&args.ctx), cell.clone()).await?;
        let mut state = SupervisorState {
            ctx: Arc::clone(&args.ctx),
            outcome: args.outcome,
            trigger: args.trigger,
            footer_pool,
            committers: HashMap::new(),
        };
        // Configured datasets get their committer now, so an absent table (create_table: false)
        // is reported at startup rather than when its first segment arrives.
        for dataset in args
            .ctx
            .config
            .source
            .datasets
            .iter()
            .map(|d| d.name.clone())
        {
            state.committer(&dataset, &cell).await?;
        }
        Actor::spawn_linked(
            None,
            Watcher,
            WatcherArgs {
                feed: args.feed,
                supervisor: myself.clone(),
                shutdown: args.ctx.shutdown.clone(),
                max_in_memory: args.ctx.config.memory.segments,
            },
            cell,
        )
        .await?;
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> HandlerResult {
        match msg {
            SupervisorMsg::Route(segment, permit) => {
                // Only the parquet sink's datasets have tables: a record naming another one is a
                // mismatch between the shipper and this config. Stopping (not skipping) keeps
                // the record in the segment catalog, so nothing is dropped, and never creates a
                // table nobody configured.
                if let Err(e) = unlisted_dataset(&state.ctx.config.source, &segment) {
                    state.fail(&myself, e);
                    return Ok(());
                }
                let committer = state
                    .committer(&segment.dataset, &myself.get_cell())
                    .await?;
                if committer
                    .cast(CommitterMsg::Segment(segment, permit))
                    .is_err()
                {
                    tracing::debug!("a committer is gone; the service is stopping");
                }
            }
            SupervisorMsg::FeedEnded => {
                tracing::info!("the segment feed ended; committers finish what they hold");
            }
            SupervisorMsg::Fatal(e) => state.fail(&myself, e),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> HandlerResult {
        match event {
            SupervisionEvent::ActorFailed(who, err) => {
                let error = match err.downcast::<Error>() {
                    Ok(e) => *e,
                    Err(other) => {
                        Error::internal(format!("actor {:?} failed: {other}", who.get_id()))
                            .with_boxed_source(other)
                    }
                };
                state.fail(&myself, error);
            }
            SupervisionEvent::ActorTerminated(who, _, reason)
                if !state.ctx.shutdown.is_requested() =>
            {
                state.fail(
                    &myself,
                    Error::internal(format!(
                        "actor {:?} stopped unexpectedly ({})",
                        who.get_id(),
                        reason.unwrap_or_default()
                    )),
                );
            }
            _ => {}
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> HandlerResult {
        state.trigger.trigger();
        myself
            .stop_children_and_wait(None, Some(Duration::from_secs(30)))
            .await;
        Ok(())
    }
}

/// `Ok` when `segment`'s dataset is one the parquet sink lists; otherwise the fatal
/// `config.invalid` error naming the dataset, the record and the fix. `config.invalid` because
/// the registrar's config and the shipper disagree about which datasets exist: the fix is in a
/// config (or the shipper), and no retry can make the record registrable.
fn unlisted_dataset(source: &ParquetSource, segment: &UploadedSegment) -> Result<(), Error> {
    if source.datasets.iter().any(|d| d.name == segment.dataset) {
        return Ok(());
    }
    let listed: Vec<String> = source
        .datasets
        .iter()
        .map(|d| format!("\"{}\"", d.name))
        .collect();
    Err(Error::config_invalid(format!(
        "segment catalog record seq {} (object {:?}) is for dataset {:?}, which the parquet sink \
         \"{}\" does not list (its datasets: {}); add the dataset to the parquet sink's datasets, \
         or fix the shipper. Nothing was registered for it; the record stays in the segment catalog",
        segment.seq,
        segment.object_key,
        segment.dataset,
        source.id,
        listed.join(", ")
    )))
}

impl SupervisorState {
    /// The committer of `dataset`'s table, started on first use (it starts the table's schema
    /// merger, its child: the two live and stop together).
    async fn committer(
        &mut self,
        dataset: &str,
        supervisor: &ActorCell,
    ) -> Result<ActorRef<CommitterMsg>, ActorProcessingErr> {
        if let Some(c) = self.committers.get(dataset) {
            return Ok(c.clone());
        }
        let (committer, _) = Actor::spawn_linked(
            None,
            Committer,
            CommitterArgs {
                ctx: Arc::clone(&self.ctx),
                dataset: dataset.to_string(),
                footer_pool: self.footer_pool.clone(),
            },
            supervisor.clone(),
        )
        .await?;
        self.committers
            .insert(dataset.to_string(), committer.clone());
        Ok(committer)
    }

    /// Records the first fatal error and stops the service.
    fn fail(&mut self, myself: &ActorRef<SupervisorMsg>, error: Error) {
        if error.code() == ErrorCode::Cancelled {
            return;
        }
        if let Ok(mut slot) = self.outcome.lock()
            && slot.is_none()
        {
            tracing::error!(code = %error.code(), "fatal: {}", error.message());
            metrics::counter!("thadam_iceberg_fatal_errors_total", "code" => error.code().as_str())
                .increment(1);
            self.ctx.status.set_fatal(error.to_string());
            *slot = Some(error);
        }
        self.trigger.trigger();
        myself.stop(Some("fatal error".to_string()));
    }
}
