//! A table's committer: the only writer of that table's appends, so its commits are serialised.
//!
//! It keeps the segments it has been sent in catalog order, asks the footer pool for their
//! footers (several in flight), and commits the longest ready prefix as one snapshot. Before each
//! commit it knows which object keys the table already holds (the committed set, from snapshot
//! summaries and watermarks); whenever it takes a newer version of the table (a reload after a
//! failed commit, a table another registrar created first, a schema commit whose answer carries
//! other writers' snapshots) it rebuilds that set and filters the batch again, so a segment is
//! never appended twice, whatever happened to the previous attempt.
//!
//! A watermark is used only once it has been checked against the log this committer reads (see
//! `table::committed`): segments it would cover wait, without a footer read, until then.
//!
//! When the catalog vends S3 credentials with the table (`catalog::access`), footer reads and
//! manifest writes use them; the committer reloads the table for fresh ones shortly before they
//! expire, and once when S3 refuses them (a refusal of the fresh ones is `auth.failed`).
//!
//! The actor and its message handling are here; the rest is split by what it does:
//! `queue` (the segments it holds), `admission` (which of them the table still needs),
//! `footers` (reading their footers), `batching` (the pure batching policy), `schema`
//! (table creation and schema changes), `commit` (the append and its retry loop),
//! `credentials` (vended S3 credentials), `bad_segments` (`on_bad_segment`) and
//! `reporting` (status board, metrics, logs).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use iceberg::table::Table;
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::actors::schema_merger::{SchemaMerger, SchemaMergerArgs};
use crate::catalog::TableName;
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::messages::{CommitterMsg, FooterPoolMsg, SchemaMergerMsg};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, ReportTo, retry_transient};
use crate::table::CommittedSet;
use crate::table::append::ReadySegment;
use crate::table::committed::SegmentId;
use crate::table::quarantine::stops_table_only;

use batching::{BatchDecision, BatchLimits, Prefix, Timer, batch_decision};
use queue::{DEFAULT_FOOTER_ESTIMATE, PendingQueue};

mod admission;
mod bad_segments;
mod batching;
mod commit;
mod credentials;
mod footers;
mod pacing;
mod queue;
mod reporting;
mod schema;

pub struct Committer;

pub struct CommitterArgs {
    pub ctx: SharedContext,
    pub dataset: String,
    pub footer_pool: ActorRef<FooterPoolMsg>,
}

pub struct CommitterState {
    args: CommitterArgs,
    name: TableName,
    /// This table's schema merger: a child of this committer, so it lives and stops with it.
    merger: ActorRef<SchemaMergerMsg>,
    /// The table as of our last load or commit; `None` before it exists (create_table: true).
    table: Option<Table>,
    committed: CommittedSet,
    /// Segments not yet committed, in catalog order.
    pending: PendingQueue,
    reads_in_flight: usize,
    initialised: bool,
    /// A `LingerElapsed` message is scheduled.
    linger_armed: bool,
    /// A `PaceElapsed` message is scheduled (`commit.min_interval`, or the adaptive pace).
    pace_armed: bool,
    /// The append path: the retry, what the batch's attempts wrote, the pace (see `commit`).
    appends: commit::Appends,
    /// The decoded size of the latest footer read: what a read in flight is expected to add.
    footer_estimate: u64,
    /// Fingerprints of the latest segments seen, by seq, so that a watermark another writer of
    /// the same log just moved is checked without reading the log (bounded: [`RECENT`]).
    recent: BTreeMap<u64, SegmentId>,
    /// File schemas already reconciled with this table (cleared when the table is replaced).
    /// The table only ever evolves compatibly, so a file that fit an earlier version of it still
    /// fits: re-merging it against the evolved table would take an older file (int) for a
    /// narrowing of the column it promoted (long), e.g. after a reload mid-batch.
    accepted: Vec<arrow_schema::SchemaRef>,
    /// The generation of vended credentials a reload made after S3 refused the previous ones
    /// brought, until a request with it succeeds: a refusal of these is final.
    reloaded_for_refusal: Option<u64>,
    /// A generation that was already due for renewal when it arrived (the catalog vends
    /// credentials that expire within the margin): not renewed again, used until refused.
    renewal_exhausted: Option<u64>,
    /// Quarantined segments this committer holds (not attempted until the operator asks for a
    /// retry, or a later record of the key supersedes them), by seq.
    held: BTreeMap<u64, UploadedSegment>,
    /// Seqs of pending segments that were quarantined: decided by their files, never by a
    /// watermark (see `table::quarantine`).
    by_files: HashSet<u64>,
    /// A `QuarantinePoll` message is scheduled.
    poll_armed: bool,
    /// This table alone stopped on a non-transient error about it (`on_bad_segment:
    /// quarantine`): every later message is ignored; its segments stay in the segment catalog.
    stopped: bool,
    /// Recorded sizes of keys registered or found registered (bounded by [`RECENT`]), to warn
    /// about a re-ship of a key that is already in the table.
    registered_sizes: HashMap<String, u64>,
}

/// How many distinct file schemas a committer remembers as accepted.
const ACCEPTED_SCHEMAS: usize = 64;

/// How many recent fingerprints a committer keeps.
const RECENT: usize = 4096;

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
            args,
            name,
            merger,
            table: None,
            committed: CommittedSet::default(),
            pending: PendingQueue::default(),
            reads_in_flight: 0,
            initialised: false,
            linger_armed: false,
            pace_armed: false,
            appends: commit::Appends::default(),
            footer_estimate: DEFAULT_FOOTER_ESTIMATE,
            recent: BTreeMap::new(),
            accepted: Vec::new(),
            reloaded_for_refusal: None,
            renewal_exhausted: None,
            held: BTreeMap::new(),
            by_files: HashSet::new(),
            poll_armed: false,
            stopped: false,
            registered_sizes: HashMap::new(),
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
                state.linger_armed = false;
                Ok(())
            }
            CommitterMsg::PaceElapsed => {
                state.pace_armed = false;
                Ok(())
            }
            CommitterMsg::RetryElapsed => {
                state.appends.retry_armed = false;
                Ok(())
            }
            CommitterMsg::RereadFooter { seq } => {
                if let Some(p) = state.pending.get_mut(&seq) {
                    p.read_requested = false;
                }
                Ok(())
            }
            CommitterMsg::QuarantinePoll => {
                state.poll_armed = false;
                state.poll_quarantine()
            }
            CommitterMsg::FooterRead { seq, result } => {
                state.reads_in_flight = state.reads_in_flight.saturating_sub(1);
                match result {
                    Ok(footer) => {
                        let mut generation = None;
                        if let Some(p) = state.pending.set_footer(&seq, footer) {
                            generation = p.read_generation;
                            state.footer_estimate = p.footer_bytes.max(1);
                        }
                        state.vended_worked(generation);
                        Ok(())
                    }
                    Err(e) => state.footer_failed(&myself, seq, e).await,
                }
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
        state.abandon_attempts().await;
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
}

impl CommitterState {
    fn ctx(&self) -> &SharedContext {
        &self.args.ctx
    }

    /// Loads the table and its committed set. An absent table is fatal unless `create_table`.
    async fn init(&mut self) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        let what = format!("loading table {}", self.name);
        let table_name = self.name.to_string();
        let report = Some(ReportTo {
            board: &ctx.status,
            table: &table_name,
        });
        let loaded = retry_transient(Op::Load, ctx.retry(), &mut shutdown, &what, report, || {
            ctx.client.load_table(&self.name)
        })
        .await?
        .ok_or_else(Error::cancelled)?;
        match loaded {
            Some(table) => self.adopt(table),
            None if ctx.config.create_table => {
                tracing::info!(table = %self.name, "table absent; it will be created from the first segment's footer");
            }
            None => return Err(commit::table_missing(&self.name, &ctx.config, false)),
        }
        self.initialised = true;
        // Ready as far as this table goes: it exists, or it will be created (/readyz).
        self.ctx()
            .status
            .update(&self.name.to_string(), |s| s.resolved = true);
        // Segments that arrived before Init were accepted before the committed set was known.
        self.pending.undecide_all();
        self.publish_backlog();
        Ok(())
    }

    /// Takes a newer version of the table (a load, a creation, a schema commit's answer), and
    /// rebuilds the committed set from it: another writer may have added snapshots or moved a
    /// watermark. Verdicts on unchanged watermarks are kept.
    fn adopt(&mut self, table: Table) {
        let same_table = self
            .table
            .as_ref()
            .is_some_and(|t| t.metadata().uuid() == table.metadata().uuid());
        if !same_table {
            self.committed.forget_replaced_table();
            self.accepted.clear();
        }
        self.committed.refresh(table.metadata());
        self.table = Some(table);
    }

    /// Identifies the version of the table the committer holds.
    fn table_version(&self) -> Option<(String, Option<i64>)> {
        self.table.as_ref().map(|t| {
            (
                t.metadata_location().unwrap_or_default().to_string(),
                t.metadata().current_snapshot_id(),
            )
        })
    }

    /// Requests footers (bounded), then commits whatever prefix is ready and cannot grow soon.
    async fn drive(&mut self, myself: &ActorRef<CommitterMsg>) -> Result<()> {
        if !self.held.is_empty() && !self.poll_armed {
            self.poll_armed = true;
            myself.send_after(self.ctx().tuning.quarantine_poll, || {
                CommitterMsg::QuarantinePoll
            });
        }
        loop {
            self.renew_if_due().await?;
            self.decide_pending().await?;
            self.request_footers(myself)?;
            let batch = self.ready_batch(myself);
            if batch.is_empty() {
                return Ok(());
            }
            self.attempt(myself, batch).await?;
            if self.appends.retry_armed {
                // The next attempt is scheduled (`arm_retry`): messages that arrived meanwhile
                // are taken in first, and their segments join it.
                return Ok(());
            }
        }
    }

    /// The longest prefix (in catalog order) whose footers are in, within `commit.max_segments`
    /// and `commit.max_bytes`, if it should be committed now ([`batch_decision`]). A full batch
    /// goes at once. One that is not full waits while the next segment's footer is already on
    /// its way (waiting adds batch size, not latency), and otherwise for at most `commit.linger`
    /// after its oldest segment arrived. Either waits for `commit.min_interval` after the last
    /// commit started (or the gap the table's adaptive pace asks for). A batch being retried goes
    /// as soon as its pause is over, with whatever is ready then. Timer messages wake the
    /// committer. Nothing is cloned unless it commits.
    fn ready_batch(&mut self, myself: &ActorRef<CommitterMsg>) -> Vec<ReadySegment> {
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
        let decision = match &self.appends.retry {
            Some(retry) if retry.at > now => {
                let delay = retry.at - now;
                self.arm_retry(myself, delay);
                BatchDecision::Wait
            }
            Some(_) if prefix.segments > 0 => BatchDecision::Commit,
            Some(_) => BatchDecision::Wait,
            None => batch_decision(
                &prefix,
                &limits,
                oldest_waited,
                ctx.linger(),
                self.appends.last_start.map(|t| now.duration_since(t)),
                self.appends.gap.max(ctx.config.commit.min_interval),
            ),
        };
        match decision {
            BatchDecision::Wait => Vec::new(),
            BatchDecision::WaitFor(why, delay) => {
                let armed = match why {
                    Timer::Linger => &mut self.linger_armed,
                    Timer::Pace => &mut self.pace_armed,
                };
                if !*armed {
                    *armed = true;
                    myself.send_after(delay, move || match why {
                        Timer::Linger => CommitterMsg::LingerElapsed,
                        Timer::Pace => CommitterMsg::PaceElapsed,
                    });
                }
                Vec::new()
            }
            BatchDecision::Commit => self
                .pending
                .by_seq
                .values()
                .take(prefix.segments)
                .filter_map(|p| {
                    Some(ReadySegment {
                        segment: p.segment.clone(),
                        footer: Arc::clone(p.footer.as_ref()?),
                    })
                })
                .collect(),
        }
    }
}
