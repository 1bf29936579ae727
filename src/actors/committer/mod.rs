//! A table's committer: the only writer of that table, so its commits are serialised.
//!
//! It keeps the segments it has been sent in catalog order, asks the footer pool for their
//! footers (several in flight), and hands the longest ready prefix to the table's append
//! transaction (`table::append::transaction`, where one attempt reads top to bottom: load,
//! filter against the committed set, schema, build, send, classify). What the transaction says
//! decides what the committer does next: the landed or found segments leave the queue, a bad
//! segment goes to `on_bad_segment`, and a failed attempt is retried by a message to itself
//! after the pause the transaction asks for, so that footers and segments arriving meanwhile are
//! taken in and join the next attempt. Any other attempt is followed the same way, by
//! `AttemptEnded`: one attempt per pass, never two without reading the mailbox in between.
//!
//! The table it holds, and what it knows from it (the committed set, vended credentials), is a
//! `table::held::HeldTable`, lent to each attempt. A segment that a watermark may cover waits
//! undecided, without a footer read, until that watermark is checked against the log.
//!
//! The actor, its messages and the batching are here; the rest is split by what it does:
//! `queue` (the segments it holds), `admission` (which of them the table still needs),
//! `footers` (reading their footers), `batching` (the pure batching policy), `bad_segments`
//! (`on_bad_segment`) and `reporting` (status board, metrics, logs).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::spec::TableMetadataRef;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::actors::schema_merger::{SchemaMerger, SchemaMergerArgs};
use crate::catalog::TableName;
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::footer::SegmentFooter;
use crate::protocol::messages::{CommitterMsg, FooterPoolMsg, SchemaMergerMsg, SchemaReconciled};
use crate::protocol::segment::UploadedSegment;
use crate::table::append::{AttemptInput, Attempted, BatchCommit, Outcome, ReadySegment, Schemas};
use crate::table::held::HeldTable;
use crate::table::quarantine::stops_table_only;

use batching::{BatchDecision, BatchLimits, PaceWake, Prefix, Timer, batch_decision};
use queue::PendingQueue;

mod admission;
mod bad_segments;
mod batching;
mod footers;
mod queue;
mod reporting;

pub(crate) struct Committer;

pub(crate) struct CommitterArgs {
    pub ctx: SharedContext,
    pub dataset: String,
    pub footer_pool: ActorRef<FooterPoolMsg>,
}

pub(crate) struct CommitterState {
    args: CommitterArgs,
    name: TableName,
    /// This table's schema merger: a child of this committer, so it lives and stops with it.
    merger: Merger,
    /// The table as of our last load or commit, and what we know from it.
    table: HeldTable,
    /// The append transaction: its retry, what its attempts wrote, the table's pace.
    commit: BatchCommit,
    /// Segments not yet committed, in catalog order.
    pending: PendingQueue,
    /// Quarantined segments this committer holds (not attempted until the operator asks for a
    /// retry, or a later record of the key supersedes them), by seq.
    quarantined: BTreeMap<u64, UploadedSegment>,
    /// Recorded sizes of keys registered or found registered (bounded like the held table's
    /// recent fingerprints), to warn about a re-ship of a key that is already in the table.
    registered_sizes: HashMap<String, u64>,
    /// The timer messages scheduled.
    timers: Timers,
    initialised: bool,
    /// This table alone stopped on a non-transient error about it (`on_bad_segment:
    /// quarantine`): every later message is ignored; its segments stay in the segment catalog.
    stopped: bool,
}

/// Which timer messages are scheduled (each at most once).
#[derive(Debug, Default)]
struct Timers {
    /// `LingerElapsed`.
    linger: bool,
    /// `PaceElapsed` (`commit.min_interval`, or the table's pace).
    pace: PaceWake,
    /// `RetryElapsed`.
    retry: bool,
    /// `QuarantinePoll`.
    poll: bool,
    /// `AttemptEnded`: the next pass waits for it.
    attempt_ended: bool,
}

impl Actor for Committer {
    type Msg = CommitterMsg;
    type State = CommitterState;
    type Arguments = CommitterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<CommitterMsg>,
        args: CommitterArgs,
    ) -> Result<CommitterState, ActorProcessingErr> {
        let name = args.ctx.table_name(&args.dataset);
        // Resolve the table in a message, not here: it may need retries, and a spawn should not
        // wait on the network.
        myself.cast(CommitterMsg::Init)?;
        let (merger, _) = Actor::spawn_linked(
            None,
            SchemaMerger,
            SchemaMergerArgs {
                ctx: Arc::clone(&args.ctx),
                dataset: args.dataset.clone(),
            },
            myself.get_cell(),
        )
        .await?;
        Ok(CommitterState {
            merger: Merger {
                actor: merger,
                table: name.clone(),
            },
            table: HeldTable::new(name.clone()),
            commit: BatchCommit::new(
                name.clone(),
                &args.ctx.config.commit,
                &args.ctx.tuning.hooks,
            ),
            args,
            name,
            pending: PendingQueue::default(),
            quarantined: BTreeMap::new(),
            registered_sizes: HashMap::new(),
            timers: Timers::default(),
            initialised: false,
            stopped: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<CommitterMsg>,
        msg: CommitterMsg,
        state: &mut CommitterState,
    ) -> HandlerResult {
        if state.stopped {
            // Nothing of this table is registered until a restart; the segment catalog keeps
            // every segment, so dropping the messages loses nothing.
            return Ok(());
        }
        let result = match msg {
            CommitterMsg::Init => state.init().await,
            CommitterMsg::Segment(segment, permit) => {
                state.accept(segment, permit);
                Ok(())
            }
            CommitterMsg::LingerElapsed => {
                state.timers.linger = false;
                Ok(())
            }
            CommitterMsg::PaceElapsed => {
                state.timers.pace.fired(Instant::now());
                Ok(())
            }
            CommitterMsg::RetryElapsed => {
                state.timers.retry = false;
                Ok(())
            }
            CommitterMsg::AttemptEnded => {
                state.timers.attempt_ended = false;
                Ok(())
            }
            CommitterMsg::RereadFooter { seq } => {
                if let Some(p) = state.pending.get_mut(&seq) {
                    p.read_requested = false;
                }
                Ok(())
            }
            CommitterMsg::QuarantinePoll => {
                state.timers.poll = false;
                state.poll_quarantine()
            }
            CommitterMsg::FooterRead { seq, result } => {
                state.footer_read(&myself, seq, result).await
            }
        };
        let result = match result {
            Ok(()) if state.initialised => state.drive(&myself).await,
            other => other,
        };
        state.conclude(result)
    }

    /// A stop between two attempts of a batch: what they wrote and never sent is deleted (a
    /// commit in flight when the stop came was marked sent, and stays).
    async fn post_stop(
        &self,
        _: ActorRef<CommitterMsg>,
        state: &mut CommitterState,
    ) -> HandlerResult {
        state
            .commit
            .abandon(state.args.ctx.env(), &state.table)
            .await;
        Ok(())
    }

    /// The schema merger is this committer's only child: its failure is the table's, handled as
    /// a failure of the committer itself (ractor's default would stop the committer without
    /// an error).
    async fn handle_supervisor_evt(
        &self,
        _: ActorRef<CommitterMsg>,
        event: SupervisionEvent,
        state: &mut CommitterState,
    ) -> HandlerResult {
        let error = match event {
            SupervisionEvent::ActorFailed(_, err) => match err.downcast::<Error>() {
                Ok(e) => *e,
                Err(other) => Error::internal(format!(
                    "the schema merger of table {} failed: {other}",
                    state.name
                ))
                .with_boxed_source(other),
            },
            SupervisionEvent::ActorTerminated(_, _, reason)
                if !state.ctx().shutdown.is_requested() =>
            {
                Error::internal(format!(
                    "the schema merger of table {} stopped unexpectedly ({})",
                    state.name,
                    reason.unwrap_or_default()
                ))
            }
            _ => return Ok(()),
        };
        if state.stopped {
            return Ok(());
        }
        state.conclude(Err(error))
    }
}

impl CommitterState {
    fn ctx(&self) -> &SharedContext {
        &self.args.ctx
    }

    /// What the outcome of handling a message means for the table: a stop leaves everything
    /// pending in the segment catalog; an error about this table alone stops only it
    /// (`on_bad_segment: quarantine`); any other error fails the committer, and the supervisor
    /// stops the service with it.
    fn conclude(&mut self, result: Result<()>) -> HandlerResult {
        match result {
            Ok(()) => Ok(()),
            Err(e) if e.code() == ErrorCode::Cancelled => Ok(()),
            Err(e) if stops_table_only(self.ctx().config.on_bad_segment, e.code()) => {
                self.stop_table(&e);
                Ok(())
            }
            Err(e) => {
                self.report_error(&e);
                Err(Box::new(e))
            }
        }
    }

    /// Loads the table and its committed set. An absent table is fatal unless `create_table`.
    async fn init(&mut self) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        self.table.load(ctx.env(), false).await?;
        self.initialised = true;
        // Ready as far as this table goes: it exists, or it will be created (/readyz).
        ctx.status
            .update(&self.name.to_string(), |s| s.resolved = true);
        // Segments that arrived before Init were accepted before the committed set was known.
        self.pending.undecide_all();
        self.publish_backlog();
        Ok(())
    }

    /// Requests footers (bounded), then commits whatever prefix is ready and cannot grow soon.
    /// At most one attempt per pass: the next pass comes after the messages that arrived
    /// during it (see [`Self::after_attempt`]).
    async fn drive(&mut self, myself: &ActorRef<CommitterMsg>) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        if !self.quarantined.is_empty() && !self.timers.poll {
            self.timers.poll = true;
            myself.send_after(ctx.tuning.quarantine_poll, || CommitterMsg::QuarantinePoll);
        }
        self.table.renew_if_due(ctx.env()).await?;
        self.decide_pending().await?;
        self.request_footers(myself)?;
        if self.timers.attempt_ended {
            // Segments and footers that arrived during the last attempt are still being taken
            // in: the next batch waits for them (they are its segments).
            return Ok(());
        }
        let batch = match self.ready_batch(myself) {
            Ready::Commit(batch) => batch,
            Ready::Publish(batch) => {
                // Waiting for this node's slot: the fleet may carry it sooner.
                self.commit
                    .publish(ctx.env(), &mut self.table, &batch)
                    .await;
                return Ok(());
            }
            Ready::Nothing => {
                if !self.idle_turn(myself) {
                    return Ok(());
                }
                Vec::new()
            }
        };
        let pending = &self.pending;
        let local = |seq: u64, catalog: &str| pending.fingerprint_at(seq, catalog);
        let input = AttemptInput {
            batch: &batch,
            waiting: pending.len(),
            local: &local,
        };
        let attempted = self
            .commit
            .attempt(ctx.env(), &mut self.table, &self.merger, input)
            .await?;
        self.attempted(myself, attempted).await?;
        self.after_attempt(myself);
        Ok(())
    }

    /// After an attempt, the committer reads its mailbox before the next one: segments and
    /// footers that arrived during the attempt join the next batch. A retry's message does
    /// that already; otherwise `AttemptEnded`, behind whatever came meanwhile. Going straight
    /// on instead starved a fleet's sole committer: its carrying cycles, each longer than its
    /// cadence at 128 nodes, ran back to back while the others published, and its own
    /// segments sat in the mailbox until a cycle found nothing to carry (5.8 s).
    fn after_attempt(&mut self, myself: &ActorRef<CommitterMsg>) {
        if self.timers.retry || self.timers.attempt_ended {
            return;
        }
        match myself.cast(CommitterMsg::AttemptEnded) {
            Ok(()) => self.timers.attempt_ended = true,
            // The committer is stopping: there is no next pass.
            Err(e) => tracing::debug!(table = %self.name, "cannot schedule the next pass: {e}"),
        }
    }

    /// Acts on what an attempt came to.
    async fn attempted(
        &mut self,
        myself: &ActorRef<CommitterMsg>,
        attempted: Attempted,
    ) -> Result<()> {
        for segment in attempted.found {
            if self.pending.remove(&segment.seq).is_some() {
                if attempted.carried.contains(&segment.seq) {
                    self.carried(&segment);
                } else if attempted.ours.contains(&segment.seq) {
                    self.landed_unheard(&segment);
                } else {
                    self.skipped(&segment);
                }
            }
        }
        match attempted.outcome {
            Outcome::Landed { segments, started } => {
                for r in &segments {
                    self.resolve_registered(&r.segment);
                    self.pending.remove(&r.segment.seq);
                }
                self.report_commit(&segments, started);
            }
            Outcome::AlreadyRegistered | Outcome::Deferred => self.publish_backlog(),
            Outcome::RetryAfter(delay) => {
                self.arm_retry(myself, delay);
                self.publish_backlog();
            }
            Outcome::BadSegment { seq, error } => self.bad_segment(seq, error).await?,
        }
        Ok(())
    }

    /// The longest prefix (in catalog order) whose footers are in, within `commit.max_segments`
    /// and `commit.max_bytes`, if it should be committed now ([`batch_decision`]). A full batch
    /// goes at once. One that is not full waits while the next segment's footer is already on
    /// its way (waiting adds batch size, not latency), and otherwise for at most `commit.linger`
    /// after its oldest segment arrived. Either waits for `commit.min_interval` after the last
    /// commit started (or the gap the table's pace asks for). A batch being retried goes as soon
    /// as its pause is over, with whatever is ready then. Timer messages wake the committer.
    /// Nothing is cloned unless it commits.
    fn ready_batch(&mut self, myself: &ActorRef<CommitterMsg>) -> Ready {
        let ctx = Arc::clone(&self.args.ctx);
        let limits = BatchLimits {
            max_segments: ctx.max_segments(),
            max_bytes: ctx.max_bytes(),
        };
        let mut prefix = Prefix::default();
        for p in self.pending.by_seq.values() {
            if p.footer.is_none() {
                prefix.next_in_flight = p.read_requested;
                break;
            }
            if !prefix.admits(&limits, p.segment.file_size) {
                prefix.full = true;
                break;
            }
            prefix.add(p.segment.file_size);
        }
        let now = Instant::now();
        let oldest_waited = self
            .pending
            .by_seq
            .values()
            .next()
            .map(|p| now.duration_since(p.arrived));
        // A batch that waits only for the pace (this node's slot, in a fleet) would go now
        // without it: it may be published for the fleet to carry (see `table::fleet::intents`).
        let mut publish = false;
        let decision = match self.commit.retry_at() {
            Some(at) if at > now => {
                self.arm_retry(myself, at - now);
                BatchDecision::Wait
            }
            Some(_) if prefix.segments > 0 => BatchDecision::Commit,
            Some(_) => BatchDecision::Wait,
            None => {
                let (since_start, gap) = self.commit.spacing(now);
                let paced = batch_decision(
                    &prefix,
                    &limits,
                    oldest_waited,
                    ctx.linger(),
                    since_start,
                    gap,
                );
                publish = matches!(paced, BatchDecision::WaitFor(Timer::Pace, _))
                    && batch_decision(
                        &prefix,
                        &limits,
                        oldest_waited,
                        ctx.linger(),
                        None,
                        Duration::ZERO,
                    ) == BatchDecision::Commit;
                paced
            }
        };
        let ready = |pending: &PendingQueue| -> Vec<ReadySegment> {
            pending
                .by_seq
                .values()
                .take(prefix.segments)
                .filter_map(|p| {
                    Some(ReadySegment {
                        segment: p.segment.clone(),
                        footer: Arc::clone(p.footer.as_ref()?),
                    })
                })
                .collect()
        };
        match decision {
            BatchDecision::Wait => Ready::Nothing,
            BatchDecision::WaitFor(why, delay) => {
                match why {
                    Timer::Linger if !self.timers.linger => {
                        self.timers.linger = true;
                        myself.send_after(delay, || CommitterMsg::LingerElapsed);
                    }
                    Timer::Linger => {}
                    Timer::Pace => self.arm_pace(myself, delay),
                }
                if publish && self.commit.may_publish() {
                    Ready::Publish(ready(&self.pending))
                } else {
                    Ready::Nothing
                }
            }
            BatchDecision::Commit => Ready::Commit(ready(&self.pending)),
        }
    }

    /// Whether this committer, holding nothing ready of its own, takes its turn now to carry the
    /// fleet's intents (see `BatchCommit::carries_when_idle`); if its turn is still to come, the
    /// pace timer wakes it then.
    fn idle_turn(&mut self, myself: &ActorRef<CommitterMsg>) -> bool {
        if self.pending.len() > 0 || !self.commit.carries_when_idle() {
            return false;
        }
        let (since_start, gap) = self.commit.spacing(Instant::now());
        match since_start {
            Some(since) if since < gap => {
                self.arm_pace(myself, gap - since);
                false
            }
            _ => true,
        }
    }

    /// Wakes this committer when the pace allows the next batch, `delay` from now: unless a
    /// wake-up is scheduled by then already.
    fn arm_pace(&mut self, myself: &ActorRef<CommitterMsg>, delay: Duration) {
        if self.timers.pace.schedule(Instant::now() + delay) {
            myself.send_after(delay, || CommitterMsg::PaceElapsed);
        }
    }

    /// Wakes this committer for the next attempt after `delay`: at once by a message behind
    /// those already waiting (footers and segments that arrived join the attempt), or a timer.
    fn arm_retry(&mut self, myself: &ActorRef<CommitterMsg>, delay: Duration) {
        if self.timers.retry {
            return;
        }
        self.timers.retry = true;
        if delay.is_zero() {
            if let Err(e) = myself.cast(CommitterMsg::RetryElapsed) {
                tracing::debug!(table = %self.name, "cannot schedule the retry: {e}");
            }
        } else {
            myself.send_after(delay, || CommitterMsg::RetryElapsed);
        }
    }
}

/// What [`CommitterState::ready_batch`] found.
enum Ready {
    /// Commit this batch now.
    Commit(Vec<ReadySegment>),
    /// This batch waits for the node's slot: publish it for the fleet.
    Publish(Vec<ReadySegment>),
    Nothing,
}

/// The committer's schema merger, as the append transaction calls it.
struct Merger {
    actor: ActorRef<SchemaMergerMsg>,
    table: TableName,
}

#[async_trait]
impl Schemas for Merger {
    async fn reconcile(
        &self,
        current: Option<TableMetadataRef>,
        footer: Arc<SegmentFooter>,
    ) -> Result<SchemaReconciled> {
        let answer = self
            .actor
            .call(
                |reply| SchemaMergerMsg::Reconcile {
                    current,
                    footer,
                    reply,
                },
                None,
            )
            .await
            .map_err(|e| self.gone(&e.to_string()))?;
        match answer {
            CallResult::Success(result) => result,
            CallResult::Timeout | CallResult::SenderError => {
                Err(self.gone("it stopped without answering"))
            }
        }
    }
}

impl Merger {
    /// The schema merger could not answer: it failed (a panic: its message is in the log) or
    /// stopped.
    fn gone(&self, why: &str) -> Error {
        Error::internal(format!(
            "the schema merger of table {} is gone ({why}); the registrar stops, and a restart \
             starts the table again",
            self.table
        ))
    }
}
