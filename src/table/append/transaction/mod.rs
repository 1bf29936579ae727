//! One batch's append, attempt by attempt. [`BatchCommit::attempt`] runs the phases in the order
//! they happen, each a function of its own, so that `phases` reads top to bottom:
//!
//! **Before the load** ([`BatchCommit::before_load`]): a fleet's idle committer goes on only
//! with intents to carry; a node that does not take turns, whose batch is all published within
//! its last fallback, leaves it to the committer with nothing loaded. A lone registrar passes.
//!
//! 0. **Resend**: a commit whose answer was lost (or that never left) goes again as it was,
//!    same bytes and `Idempotency-Key`, without a reload.
//! 1. **Load** ([`BatchCommit::load`]): on a table others commit to (or after a failed
//!    attempt), write what the attempt needs on the version held first
//!    ([`BatchCommit::ahead_of_load`]: the merge stays outside the window between the load and
//!    the commit), then load. A lone registrar builds on its own last commit's answer.
//! 2. **Filter** ([`BatchCommit::filter`]) the batch against the table as it is now, so that a
//!    segment another writer or an earlier attempt registered is never appended again; then
//!    the fleet's say ([`BatchCommit::after_filter`]: what others carried of this node's, and
//!    whether a node that does not take turns leaves the rest to the committers).
//! 3. **Ready** ([`BatchCommit::ready`]): the table's creation and schema changes (commits of
//!    their own, sent and classified here like the append); a file no table can take is a bad
//!    segment.
//! 4. **Build** ([`BatchCommit::build`]) the append, reusing what earlier attempts of the batch
//!    wrote, with the fleet's intents it carries ([`BatchCommit::carries`]).
//! 5. **Send** ([`BatchCommit::send`]) it, and classify the answer once, where it arrives.
//! 6. **Conclude**: landed ([`BatchCommit::landed`]): take the answer, pace the next batch,
//!    delete what the batch wrote and the table does not reference. Failed:
//!    [`retry::decide`](super::retry::decide) says resend, reload after a pause, defer to this
//!    committer's next turn, or stop, and [`BatchCommit::conclude`] carries it out; the committer
//!    only schedules the next attempt (a message to itself, so that footers and segments that
//!    arrive meanwhile join it). A refused attempt's files are deleted at once, an unknown
//!    outcome's never.
//!
//! `send` holds the send and the conclusion; `turns` what a node of a fleet does at these named
//! points (see `table::fleet`), each of which returns at once for a lone registrar (but for
//! one listing of the intents after its start, to carry what a fleet left there): the phases
//! name the fleet only where they ask it something (what it says after the filter, what the
//! commit carries, whether this node commits in turns, what a landed commit carried).
//!
//! What lives across the attempts of a batch is here too: its retry (failures in a row, when it
//! may go), the commit to resend, what its attempts wrote ([`AppendAttempts`]), whether the
//! catalog takes snapshot removals ([`RetentionProbe`]), and the table's [`Pacer`]. The table
//! itself and its committed set are the committer's [`HeldTable`], lent to each attempt.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::spec::TableMetadataRef;
use iceberg::table::Table;

use super::attempts::AppendAttempts;
use super::pacing::{LANES_LOOKBACK, Pacer};
use super::producer::{AppendCommit, prepare_append};
use super::retry::{Failure, FailureCounts, Kind, classify, classify_build};
use crate::catalog::TableName;
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::footer::SegmentFooter;
use crate::protocol::messages::SchemaReconciled;
use crate::protocol::segment::UploadedSegment;
use crate::table::committed::Decision;
use crate::table::data_files::{ReadySegment, data_file};
use crate::table::env::Env;
use crate::table::fleet::intents::{IntentKey, Intents};
use crate::table::held::{HeldTable, LocalRecords};
use crate::table::hooks::Hooks;
use crate::table::quarantine::is_about_the_file;
use crate::table::retention;

/// Makes the table ready for a file: creates it, or says which schema commit makes it fit (the
/// table's schema merger; the transaction sends that commit itself).
#[async_trait]
pub(crate) trait Schemas: Send + Sync {
    async fn reconcile(
        &self,
        current: Option<TableMetadataRef>,
        footer: Arc<SegmentFooter>,
    ) -> Result<SchemaReconciled>;
}

/// What the committer hands an attempt, besides the table.
pub(crate) struct AttemptInput<'a> {
    /// The ready prefix of the queue, in catalog order.
    pub batch: &'a [ReadySegment],
    /// How many segments wait for the table in all (for the log).
    pub waiting: usize,
    /// The fingerprint of the record at a seq of a log, when the committer holds it (to check a
    /// watermark another writer of the same log moved, without reading the log).
    pub local: LocalRecords<'a>,
}

/// What an attempt came to. A fatal failure (or a stop) is the attempt's `Err`.
#[derive(Debug)]
pub(crate) struct Attempted {
    /// Segments of the batch the table turned out to hold already (another writer, an earlier
    /// attempt whose answer was lost): they leave the queue as skipped.
    pub found: Vec<UploadedSegment>,
    /// The seqs among `found` that another node of the fleet carried (this node's intents).
    pub carried: HashSet<u64>,
    /// The seqs among `found` that this node's own commit registered, one whose answer was
    /// lost: registered, not duplicates.
    pub ours: HashSet<u64>,
    pub outcome: Outcome,
}

#[derive(Debug)]
pub(crate) enum Outcome {
    /// The segments are in the table: they leave the queue as registered. `started`: when the
    /// batch's first attempt started.
    Landed {
        segments: Vec<ReadySegment>,
        started: Instant,
    },
    /// Everything the batch held was in the table already.
    AlreadyRegistered,
    /// The batch waits for this node's next turn: a node that does not take turns left its
    /// published segments to the fleet's committers (they are young: the committers will carry
    /// them) and attempts again after its fallback; a committer whose append conflicted commits
    /// again in its next slot; an idle committer's turn found nothing to carry.
    Deferred,
    /// The attempt failed and may be repeated after this pause (with whatever is ready then).
    RetryAfter(Duration),
    /// The segment at `seq` cannot be registered, for a reason about its file.
    BadSegment { seq: u64, error: Error },
}

/// A batch whose last attempt failed.
#[derive(Debug)]
struct Retry {
    counts: FailureCounts,
    /// The last failure was a 409 on an append (the load before the next attempt tells whether
    /// another registrar won it, for the pace).
    conflicted: bool,
    /// The next attempt goes no earlier.
    at: Instant,
    /// When the batch's first attempt started.
    started: Instant,
    /// Its failures were warned about as slow already.
    warned: bool,
}

mod send;
mod turns;

/// What one attempt gathers on its way, and its clocks.
struct Attempt {
    /// Segments of the batch the table holds already (see [`Attempted::found`]).
    found: Vec<UploadedSegment>,
    /// The seqs among them another node carried (see [`Attempted::carried`]).
    carried: HashSet<u64>,
    /// When the batch's first attempt started.
    started: Instant,
    /// When the window between the load (or the build) and the answer opened, and when the
    /// build started.
    window_start: Instant,
    built_from: Instant,
}

impl Attempt {
    fn new(started: Instant, now: Instant) -> Self {
        Attempt {
            found: Vec::new(),
            carried: HashSet::new(),
            started,
            window_start: now,
            built_from: now,
        }
    }
}

/// What a phase of an attempt comes to.
enum Phase<T> {
    /// Go on with this.
    Next(T),
    /// The attempt ends with this outcome.
    Ends(Outcome),
    /// Back to the filter, with these segments (the table changed under the attempt).
    Again(Vec<ReadySegment>),
}

use send::{RetentionProbe, Sent, record_phase};

/// A table's append transaction (see the module docs).
pub(crate) struct BatchCommit {
    name: TableName,
    retry: Option<Retry>,
    /// The last append to send again as it is.
    resend: Option<Sent>,
    /// What the current batch's attempts wrote.
    written: AppendAttempts,
    retention: RetentionProbe,
    pacer: Pacer,
    /// The fleet's intents: this node's published ones, and what it read of the others'.
    intents: Intents,
    /// The seqs of the current batch sent in a commit whose outcome is unknown (see
    /// [`Attempted::ours`]).
    sent_unknown: HashSet<u64>,
}

impl BatchCommit {
    /// `min_interval`: `commit.min_interval`, the least gap between two batches' starts;
    /// `intents`: `commit.intents` (see `intents`).
    /// `hooks`: the node's wall clock when a test sets one (`Hooks::node_clock`), and whether
    /// its intents name manifests (`Hooks::intents_name_manifests`).
    pub(crate) fn new(
        name: TableName,
        commit: &crate::config::CommitPolicy,
        hooks: &Hooks,
    ) -> Self {
        let key = commit.intents_key.as_ref().map(IntentKey::new);
        BatchCommit {
            pacer: Pacer::new(
                name.to_string(),
                commit.min_interval,
                commit.intents,
                hooks.node_clock.clone(),
                hooks.lane.clone(),
            ),
            intents: Intents::new(
                name.to_string(),
                commit.intents,
                !hooks.intents_name_manifests,
                key,
            ),
            name,
            retry: None,
            resend: None,
            written: AppendAttempts::default(),
            retention: RetentionProbe::default(),
            sent_unknown: HashSet::new(),
        }
    }

    /// When the next attempt of a failed batch may go; `None` while no batch is failing.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.retry.as_ref().map(|r| r.at)
    }

    /// Whether no attempt of the current batch has failed: no retry pending, nothing to send
    /// again.
    fn nothing_failed(&self) -> bool {
        self.retry.is_none() && self.resend.is_none()
    }

    /// How long ago the last batch started, and the gap the next must leave after that start.
    pub(crate) fn spacing(&self, now: Instant) -> (Option<Duration>, Duration) {
        self.pacer.spacing(now)
    }

    /// One attempt at committing the batch. Returns once the batch landed, turned out to be
    /// registered already, failed with a pause before the next attempt, or holds a bad
    /// segment; an `Err` only when the failure is fatal (or the registrar stops).
    pub(crate) async fn attempt(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        input: AttemptInput<'_>,
    ) -> Result<Attempted> {
        let mut attempted = self.attempt_once(env, held, schemas, input).await;
        if self.pacer.fallback_ms().is_some() {
            // Carried by the fleet: until its next load, a fallback away, the node needs
            // nothing of the table's history (see `HeldTable::thin`).
            held.thin();
        }
        if let Ok(attempted) = &mut attempted {
            // Found in the table after a commit of ours whose answer was lost: ours landed.
            attempted.ours = attempted
                .found
                .iter()
                .map(|s| s.seq)
                .filter(|seq| self.sent_unknown.contains(seq) && !attempted.carried.contains(seq))
                .collect();
        }
        if !matches!(
            attempted,
            Ok(Attempted {
                outcome: Outcome::RetryAfter(_),
                ..
            })
        ) {
            self.sent_unknown.clear();
        }
        attempted
    }

    /// The attempt, phase by phase in the order they run (see the module docs): each phase
    /// goes on, ends the attempt with an outcome, or sends it back to the filter because the
    /// table changed under it.
    async fn attempt_once(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        input: AttemptInput<'_>,
    ) -> Result<Attempted> {
        let mut at = self.begin(held, input.batch);
        let outcome = self.phases(env, held, schemas, &input, &mut at).await?;
        Ok(Attempted {
            found: at.found,
            carried: at.carried,
            ours: HashSet::new(),
            outcome,
        })
    }

    async fn phases(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        input: &AttemptInput<'_>,
        at: &mut Attempt,
    ) -> Result<Outcome> {
        if let Some(outcome) = self.before_load(env, held, schemas, input.batch).await {
            return Ok(outcome);
        }
        // 0. The last append again, as it was.
        if let Some(sent) = self.resend.take() {
            return self.send(env, held, sent, at.started, input.waiting).await;
        }
        // 1. A table others commit to: the version held is most likely stale.
        self.load(env, held, input.batch, at).await?;
        let mut candidates = input.batch.to_vec();
        loop {
            // 2. What the table still lacks.
            let todo = match self.filter(env, held, candidates, input, at).await? {
                Phase::Next(next) => next,
                Phase::Ends(outcome) => return Ok(outcome),
                Phase::Again(again) => {
                    candidates = again;
                    continue;
                }
            };
            // 3. Creation and schema evolution.
            let table = match self
                .ready(env, held, schemas, &todo, at, input.waiting)
                .await?
            {
                Phase::Next(table) => table,
                Phase::Ends(outcome) => return Ok(outcome),
                Phase::Again(_) => {
                    candidates = todo;
                    continue;
                }
            };
            // 4. Build.
            let sent = match self
                .build(env, held, table, todo, at, input.waiting)
                .await?
            {
                Phase::Next(sent) => sent,
                Phase::Ends(outcome) => return Ok(outcome),
                Phase::Again(again) => {
                    candidates = again;
                    continue;
                }
            };
            // 5. Send, and what the answer means.
            return self.send(env, held, sent, at.started, input.waiting).await;
        }
    }

    /// What every attempt starts with: when its batch started, and what the pace learns from
    /// the version held before anything is loaded.
    fn begin(&mut self, held: &HeldTable, batch: &[ReadySegment]) -> Attempt {
        let now = Instant::now();
        let started = self.retry.as_ref().map_or(now, |r| r.started);
        if self.retry.is_none() {
            self.pacer.batch_started(now);
        }
        if let Some(table) = held.table() {
            let log = batch.first().and_then(|r| r.segment.catalog_id.as_deref());
            self.pacer.first_view(table.metadata(), log);
        }
        Attempt::new(started, now)
    }

    /// Phase 1, the load: loads the table when others commit to it (or after a failed attempt,
    /// or when the version held was thinned: a commit is built on the whole table), after writing what the attempt needs on the version held (see
    /// [`BatchCommit::ahead_of_load`]); a lone registrar builds on its own last commit's answer.
    async fn load(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        batch: &[ReadySegment],
        at: &mut Attempt,
    ) -> Result<()> {
        let stale = self.retry.is_some() || self.pacer.loads_first() || held.is_thin();
        if !stale || held.table().is_none() {
            return Ok(());
        }
        self.ahead_of_load(env, held, batch).await;
        let before = held.version().and_then(|(_, snapshot)| snapshot);
        at.window_start = Instant::now();
        if self.retry.is_none() && self.pacer.fallback_ms().is_some() {
            // Carried by the fleet: the attempt most likely finds its segments carried, or
            // leaves them to the committers, and builds nothing (if it does, `ready` loads
            // the whole table first).
            held.load_recent(env, LANES_LOOKBACK).await?;
        } else {
            held.load(env, true).await?;
        }
        at.built_from = Instant::now();
        record_phase(&self.name, "load", at.built_from - at.window_start);
        let conflicted = self
            .retry
            .as_mut()
            .is_some_and(|r| std::mem::take(&mut r.conflicted));
        if let Some(table) = held.table() {
            self.pacer.loaded(table.metadata(), before, conflicted);
        }
        Ok(())
    }

    /// Phase 2, the filter: the segments of `candidates` the table lacks (those it holds go to
    /// `found`). With none left, the attempt ends as registered already, unless it goes on
    /// empty ([`BatchCommit::goes_on_empty`]).
    async fn filter(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        candidates: Vec<ReadySegment>,
        input: &AttemptInput<'_>,
        at: &mut Attempt,
    ) -> Result<Phase<Vec<ReadySegment>>> {
        let todo = self
            .still_missing(env, held, candidates, input.local, &mut at.found)
            .await?;
        if let Some(outcome) = self.after_filter(env, held, &todo, at).await {
            return Ok(Phase::Ends(outcome));
        }
        if todo.is_empty() && !self.goes_on_empty(held) {
            // Registered already (an earlier attempt whose answer was lost, another writer).
            let outcome = Outcome::AlreadyRegistered;
            return Ok(Phase::Ends(self.no_commit(held, outcome).await));
        }
        Ok(Phase::Next(todo))
    }

    /// Phase 3, ready: makes the table ready for the files of `todo` (see
    /// [`BatchCommit::make_ready`]), and finds a segment whose rows fit no single partition before
    /// it fails the whole append. `Again` when the table changed meanwhile (created, evolved): what
    /// it holds may include some of `todo`.
    async fn ready(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        todo: &[ReadySegment],
        at: &Attempt,
        waiting: usize,
    ) -> Result<Phase<Table>> {
        if held.is_thin() {
            // The filter ran on a table loaded with its history cut (`HeldTable::load_recent`):
            // what is built (a schema change, an append, its retention) is built on the whole.
            held.load(env, true).await?;
            return Ok(Phase::Again(Vec::new()));
        }
        let filtered_against = held.version();
        match self.make_ready(env, held, schemas, todo).await? {
            Ready::Yes => {}
            Ready::Failed(failure) => {
                let outcome = self
                    .give_up_or_retry(env, held, failure, Kind::Schema, at.started, waiting)
                    .await?;
                return Ok(Phase::Ends(outcome));
            }
            Ready::BadSegment(seq, error) => {
                return Ok(Phase::Ends(Outcome::BadSegment { seq, error }));
            }
        }
        if held.version() != filtered_against {
            return Ok(Phase::Again(Vec::new()));
        }
        let table = held
            .table()
            .cloned()
            .ok_or_else(|| Error::internal("no table after schema reconciliation"))?;
        if !table.metadata().default_partition_spec().is_unpartitioned() {
            for r in todo {
                if let Err(error) = data_file(&table, &env.config.url.bucket, r)
                    && is_about_the_file(error.code())
                {
                    let seq = r.segment.seq;
                    return Ok(Phase::Ends(Outcome::BadSegment { seq, error }));
                }
            }
        }
        if let Some(hook) = &env.hooks.before_append {
            hook.before_append(&self.name, &table, todo).await;
        }
        Ok(Phase::Next(table))
    }

    /// Phase 4, the build: builds the append of `todo` on `table`: the data files, the summary, the
    /// watermark, what it carries of the fleet's intents, the snapshots to expire, the manifests
    /// (reusing what earlier attempts of the batch wrote) and the request. `Again` when the store
    /// refused the manifests written with vended credentials (reloaded for fresh ones).
    async fn build(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        table: Table,
        todo: Vec<ReadySegment>,
        at: &Attempt,
        waiting: usize,
    ) -> Result<Phase<Sent>> {
        let segments: Vec<&UploadedSegment> = todo.iter().map(|r| &r.segment).collect();
        let watermark = held.watermark_update(&segments);
        if let Some((property, _)) = &watermark {
            self.pacer.own_watermark(property);
        }
        let carried = self
            .carries(env, held, &table, &todo, watermark.as_ref())
            .await;
        if todo.is_empty() && carried.is_empty() {
            // An attempt that went on empty found nothing to carry either.
            let outcome = Outcome::AlreadyRegistered;
            return Ok(Phase::Ends(self.no_commit(held, outcome).await));
        }
        let expire = self.expiry(env, &table);
        let mut append = prepare_append(
            &table,
            &env.config.url.bucket,
            &env.writer_id(),
            &todo,
            watermark.as_ref(),
            &expire.snapshot_ids,
        )?
        .with_carried(&carried)
        .at(snapshot_stamp(env.node_now_ms(), table.metadata()));
        for (key, value) in self.pacer.summary() {
            append = append.with_summary(key, value);
        }
        let vended = held.vended_generation(env);
        let mut shutdown = env.shutdown.clone();
        let built = tokio::select! {
            b = append.build(&mut self.written) => b,
            // A stop abandons the attempt: nothing was sent.
            _ = shutdown.requested() => return Err(Error::cancelled()),
        };
        let commit = match built {
            Ok(commit) => commit,
            Err(e) => match (classify_build(&self.name, &e), vended) {
                // S3 refused the manifests written with vended credentials: reload for fresh
                // ones (the table handle carries them) and build the append again.
                (Failure::Fatal(e), Some(generation)) if e.code() == ErrorCode::AuthFailed => {
                    held.vended_refused(env, generation, "writing the manifests of an append")
                        .await?;
                    if held.vended_generation(env) == Some(generation) {
                        // Told to retry, but the table still holds those credentials.
                        held.load(env, true).await?;
                    }
                    return Ok(Phase::Again(todo));
                }
                (failure, _) => {
                    let outcome = self
                        .give_up_or_retry(env, held, failure, Kind::Append, at.started, waiting)
                        .await?;
                    return Ok(Phase::Ends(outcome));
                }
            },
        };
        record_phase(&self.name, "build", at.built_from.elapsed());
        let AppendCommit {
            updates,
            requirements,
            files,
            manifest_list,
        } = commit;
        let request = env
            .client
            .commit_request(&self.name, requirements, updates)?;
        Ok(Phase::Next(Sent {
            request,
            base: table,
            segments: todo,
            watermark,
            expire,
            files,
            manifest_list,
            vended,
            carried,
            window_start: at.window_start,
            resends: 0,
            unknown: false,
        }))
    }

    /// The snapshots the append expires (snapshot retention rides on it: metadata only, see
    /// `table::retention`), unless the catalog refused that (or this attempt tells whether it
    /// does).
    fn expiry(&self, env: Env<'_>, table: &Table) -> retention::Plan {
        match env.config.snapshot_retention {
            Some(policy) if !self.retention.off && self.retention.probing.is_none() => {
                retention::plan(
                    &self.name.to_string(),
                    table.metadata(),
                    &policy,
                    env.now_ms(),
                )
            }
            _ => retention::Plan::default(),
        }
    }

    /// The segments of `batch` the table does not hold yet, after checking any watermark the
    /// current table version brought. Those it holds go to `found` (and are remembered).
    async fn still_missing(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        batch: Vec<ReadySegment>,
        local: LocalRecords<'_>,
        found: &mut Vec<UploadedSegment>,
    ) -> Result<Vec<ReadySegment>> {
        held.settle_watermarks(env, batch.iter().map(|r| &r.segment), local)
            .await?;
        let mut todo = Vec::with_capacity(batch.len());
        for r in batch {
            match held.judge(&r.segment) {
                Decision::Registered => {
                    held.remember(&r.segment);
                    found.push(r.segment);
                }
                Decision::Missing => todo.push(r),
                other => {
                    return Err(Error::internal(format!(
                        "segment seq {} still undecided ({other:?}) after its watermarks were checked",
                        r.segment.seq
                    )));
                }
            }
        }
        Ok(todo)
    }

    /// Brings the table to a schema that covers every file of `todo` (created if absent): each
    /// distinct file schema not reconciled yet goes to the schema merger, and the schema commit
    /// it asks for is sent here.
    async fn make_ready(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        todo: &[ReadySegment],
    ) -> Result<Ready> {
        let mut last_schema: Option<&arrow_schema::SchemaRef> = None;
        for r in todo {
            // Consecutive segments usually share a schema: reconcile each distinct one once.
            if last_schema.is_some_and(|s| s == &r.footer.arrow_schema) {
                continue;
            }
            last_schema = Some(&r.footer.arrow_schema);
            if held.fits(&r.footer.arrow_schema) {
                continue;
            }
            if held.table().is_none() && !env.config.create_table {
                return Err(env.table_missing(&self.name, true));
            }
            let current = held.table().map(Table::metadata_ref);
            let reconciled = match schemas.reconcile(current, Arc::clone(&r.footer)).await {
                Ok(reconciled) => reconciled,
                Err(e) if is_about_the_file(e.code()) => {
                    return Ok(Ready::BadSegment(r.segment.seq, e));
                }
                Err(e) => return Err(e),
            };
            // A created table (by us, or by another writer first) may hold snapshots added
            // since the batch was filtered.
            if let Some(table) = reconciled.table {
                held.take_version(*table);
            }
            if let Some(change) = reconciled.change {
                let mut shutdown = env.shutdown.clone();
                let answer = tokio::select! {
                    a = env.client.commit(&self.name, change.requirements, change.updates, None) => a,
                    _ = shutdown.requested() => return Err(Error::cancelled()),
                };
                match answer {
                    Ok(table) => {
                        metrics::counter!("thadam_iceberg_schema_changes_total", "table" => self.name.to_string())
                            .increment(1);
                        tracing::info!(table = %self.name, schema_id = table.metadata().current_schema_id(), "schema evolved");
                        held.take_version(table);
                    }
                    // Another writer changed the table, or we do not know whether our change
                    // landed: the next attempt reloads and derives the change again.
                    Err(wire) => return Ok(Ready::Failed(classify(wire))),
                }
            }
            held.accept(&r.footer.arrow_schema);
        }
        Ok(Ready::Yes)
    }

    /// The batch ends with no commit from this node (`outcome`: registered already, or left to
    /// the fleet's committers): nothing is retried, and what its attempts wrote is cleaned up.
    async fn no_commit(&mut self, held: &HeldTable, outcome: Outcome) -> Outcome {
        self.retry = None;
        self.batch_over(held, None).await;
        outcome
    }

    /// The batch's attempts are over: it landed with `landed` (the files its commit references),
    /// or it is given up or found registered (`None`). Whatever else it wrote and never sent is
    /// deleted.
    async fn batch_over(&mut self, held: &HeldTable, landed: Option<&[String]>) {
        self.resend = None;
        self.written.finish(landed);
        if let Some(table) = held.table() {
            self.delete_stale(table).await;
        }
    }

    /// The committer stops: the batch's attempts are over, and the intents' deletes are done.
    pub(crate) async fn abandon(&mut self, env: Env<'_>, held: &HeldTable) {
        self.intents.settle(env.store, held.table()).await;
        if !self.written.is_idle() {
            self.batch_over(held, None).await;
        }
    }
}

/// The timestamp of a snapshot built on `metadata` by a node whose clock reads `now_ms`: never
/// before the table's last snapshot (catalogs refuse a snapshot log out of order, Java's by more
/// than a minute), so that a node whose clock is behind still commits; its snapshots then carry
/// the last one's stamp.
pub(crate) fn snapshot_stamp(now_ms: i64, metadata: &iceberg::spec::TableMetadata) -> i64 {
    let last = metadata
        .history()
        .last()
        .map(|entry| entry.timestamp_ms)
        .into_iter()
        .chain(metadata.current_snapshot().map(|s| s.timestamp_ms()))
        .max();
    last.map_or(now_ms, |last| now_ms.max(last))
}

/// Whether the table is ready for a batch's files.
enum Ready {
    Yes,
    /// A schema commit failed: the attempt fails with it.
    Failed(Failure),
    /// The file at `seq` fits no table.
    BadSegment(u64, Error),
}

#[cfg(test)]
mod tests;
