//! A table's appends, one attempt at a time. Read top to bottom, [`CommitterState::attempt`] is
//! the whole commit path:
//!
//! 1. On a table others commit to (or after a failed attempt), write what the attempt needs on
//!    the version held (the new files' manifest; merges on a batch's first attempt), then load
//!    the table: the merge stays outside the window between the load and the commit.
//! 2. Filter the batch against the table as it is now (the committed set), so that a segment
//!    another writer or an earlier attempt registered is never appended again.
//! 3. Make the table ready for the files (creation, schema evolution: commits of their own).
//! 4. Build the append (reusing what earlier attempts of the batch wrote) and send it.
//! 5. Landed: record it, narrow the pace, delete what the batch wrote and the table does not
//!    reference. Failed: [`after_failure`] says what next; a refused attempt's files are deleted
//!    at once, an unknown outcome's never; a retry is scheduled as a message to this committer,
//!    so that footers and segments that arrive meanwhile are taken in and join the next attempt.
//!
//! What lives across attempts is [`Appends`]: the retry (its failures in a row and when it may
//! go), what the batch's attempts wrote ([`AppendAttempts`]), and the table's adaptive pace.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceberg::table::Table;
use ractor::ActorRef;

use super::CommitterState;
use super::pacing::{Fleet, LANE, LANE_MEMORY_MS, Pace, SLOT_MS, desired_slot};
use crate::catalog::commit_retry::{Failures, Next, after_failure, outcome_label};
use crate::catalog::{CommitError, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::messages::CommitterMsg;
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, ReportTo, SLOW_WARNING_AFTER, count_retry, retry_transient};
use crate::table::CommittedSet;
use crate::table::append::{
    AppendAttempts, AppendCommit, ReadySegment, data_file, preparation_failure, prepare_append,
};
use crate::table::committed::Decision;
use crate::table::quarantine::is_about_the_file;

/// The append path's state, owned by the committer (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Appends {
    /// The batch whose last attempt failed, waiting for its next one.
    pub(super) retry: Option<Retry>,
    /// What the current batch's attempts wrote.
    attempts: AppendAttempts,
    /// The table's adaptive commit interval (while no slots are known).
    pub(super) pace: Pace,
    /// Other registrars committing to the table, and the slots they share.
    fleet: Fleet,
    /// This committer's round trip (load → answer), smoothed, in ms.
    round_trip_ms: Option<f64>,
    /// The slot this committer needs ([`desired_slot`]), published with each commit: the
    /// fleet's slot is the largest.
    slot_ms: u64,
    /// The newest snapshot whose lane was read, so that a walk stops there.
    lanes_read_to: Option<i64>,
    /// The watermark properties this committer's commits raise (one per segment log it reads):
    /// a lane whose snapshots name one of them wrote for the same log, i.e. it is this registrar
    /// before a restart, not another node.
    own_watermarks: std::collections::BTreeSet<String>,
    /// When (ms since the epoch) a writer that is not a registrar (Spark, pyiceberg, a
    /// compaction) last committed to the table, as far as the snapshots read tell.
    other_kind_seen_ms: Option<i64>,
    /// How many more commits load the table before they are built: set when another writer's
    /// commit was seen (a 409, or a load that found commits not ours), counted down by loads
    /// that found none. A lone registrar builds on its own last commit's answer.
    load_first: u32,
    /// When the last batch's first attempt started; the next waits `gap` after it.
    pub(super) last_start: Option<Instant>,
    pub(super) gap: Duration,
    /// A `RetryElapsed` message is scheduled.
    pub(super) retry_armed: bool,
    /// Whether the catalog takes `snapshot_retention`'s `remove-snapshots`.
    retention: RetentionProbe,
}

/// Catalogs that manage snapshots themselves refuse `remove-snapshots` (Project Nessie answers
/// 500 "Nessie Catalog does not allow external snapshot management"), and a 500 on a commit
/// reads as "outcome unknown". So the cause is told by what happens, not by the message: after
/// an attempt that carried `remove-snapshots` failed (not a conflict), the next goes without
/// it; if that one lands, the catalog refused the removal, and retention is off for this table
/// from then on (one warning, `thadam_iceberg_snapshot_retention_refused_total`).
#[derive(Debug, Default)]
struct RetentionProbe {
    /// The catalog refused `remove-snapshots`: this table keeps whatever the catalog keeps.
    off: bool,
    /// The failure of the last attempt that carried `remove-snapshots`; the attempt now going
    /// without it tells whether it was the cause.
    probing: Option<String>,
}

/// How many commits load the table first after another writer's commit was seen.
const LOAD_FIRST_FOR: u32 = 16;

/// How far back a load looks for who committed since the version held.
const WRITERS_LOOKBACK: usize = 64;

/// The most snapshots read for lanes after one load or commit.
const LANES_LOOKBACK: usize = 256;

/// While another kind of writer has committed to the table within [`COURTESY_MEMORY_MS`], the
/// registrar leaves at least this long between the starts of its commits: such writers build a
/// commit slowly (seconds, in Python or Spark) and give up after a few 409s (pyiceberg and Java
/// retry 4 times), so a registrar committing ten times a second would starve them.
const COURTESY_GAP: Duration = Duration::from_secs(1);
const COURTESY_MEMORY_MS: i64 = 60_000;

/// A batch whose last attempt failed.
#[derive(Debug)]
pub(super) struct Retry {
    failures: Failures,
    /// The last failure was a 409.
    conflicted: bool,
    /// The next attempt goes no earlier.
    pub(super) at: Instant,
    /// When the batch's first attempt started.
    started: Instant,
    /// Its failures were warned about as slow already.
    warned: bool,
}

impl CommitterState {
    /// One attempt at committing `batch` (the ready prefix of the queue). Returns once the batch
    /// landed, turned out to be registered already, or failed with a retry scheduled; an error
    /// only when the failure is fatal.
    pub(super) async fn attempt(
        &mut self,
        myself: &ActorRef<CommitterMsg>,
        batch: Vec<ReadySegment>,
    ) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        let now = Instant::now();
        let started = self.appends.retry.as_ref().map_or(now, |r| r.started);
        if self.appends.retry.is_none() {
            self.appends.last_start = Some(now);
        }
        // 1. A table others commit to: the version held is most likely stale.
        let mut window_start = now;
        if (self.appends.retry.is_some() || self.appends.load_first > 0) && self.table.is_some() {
            self.stage_ahead(&batch).await;
            let held = self.table_version().and_then(|(_, snapshot)| snapshot);
            window_start = Instant::now();
            self.reload(&mut shutdown).await?;
            self.saw_others_since(held);
            self.read_lanes();
        }
        loop {
            // 2. What the table still lacks.
            let todo = self.still_missing(&batch).await?;
            if todo.is_empty() {
                // Registered already (an earlier attempt whose answer was lost, another writer).
                self.appends.retry = None;
                self.batch_over(None).await;
                self.publish_backlog();
                return Ok(());
            }
            // 3. Creation and schema evolution.
            let filtered_against = self.table_version();
            if let Err((seq, e)) = self.reconcile_schema(&todo).await? {
                return self.bad_segment(seq, e).await;
            }
            if self.table_version() != filtered_against {
                // A newer table: what it holds may include some of `todo`.
                continue;
            }
            let table = self
                .table
                .clone()
                .ok_or_else(|| Error::internal("no table after schema reconciliation"))?;
            // A segment whose rows fit no single partition fails the whole append: find it first.
            if !table.metadata().default_partition_spec().is_unpartitioned() {
                for r in &todo {
                    if let Err(e) = data_file(&table, &ctx.config.url.bucket, r)
                        && is_about_the_file(e.code())
                    {
                        return self.bad_segment(r.segment.seq, e).await;
                    }
                }
            }
            if let Some(hook) = &ctx.tuning.hooks.before_append {
                hook.before_append(&self.name, &table, &todo).await;
            }
            // 4. Build and send.
            let segments: Vec<&UploadedSegment> = todo.iter().map(|r| &r.segment).collect();
            let watermark = self.committed.watermark_update(&segments);
            if let Some((property, _)) = &watermark
                && self.appends.own_watermarks.len() < 64
            {
                self.appends.own_watermarks.insert(property.clone());
            }
            // Snapshot retention rides on the append (metadata only; see table::retention),
            // unless the catalog refused it (or this attempt tells whether it does).
            let retention = self.appends.retention.off || self.appends.retention.probing.is_some();
            let expire = ctx
                .config
                .snapshot_retention
                .filter(|_| !retention)
                .map_or_else(Default::default, |policy| {
                    crate::table::retention::plan(
                        &self.name.to_string(),
                        table.metadata(),
                        &policy,
                        ctx.tuning.now_ms(),
                    )
                });
            let append = prepare_append(
                &table,
                &ctx.config.url.bucket,
                &ctx.writer_id(),
                &todo,
                watermark.as_ref(),
                &expire.snapshot_ids,
            )?
            .with_summary(LANE, self.appends.fleet.own().to_string())
            .with_summary(SLOT_MS, self.appends.slot_ms.to_string());
            let vended = self.vended_generation(&table);
            let built = tokio::select! {
                b = append.build(&mut self.appends.attempts) => b,
                // A stop abandons the attempt: nothing was sent.
                _ = shutdown.requested() => return Err(Error::cancelled()),
            };
            let commit = match built {
                Ok(commit) => commit,
                Err(e) => {
                    let failure = preparation_failure(&self.name, &e);
                    // S3 refused the manifests written with vended credentials: reload for
                    // fresh ones (the table handle carries them) and build the append again.
                    if let (CommitError::Fatal(e), Some(generation)) = (&failure, vended)
                        && e.code() == ErrorCode::AuthFailed
                    {
                        self.vended_refused(generation, "writing the manifests of an append")
                            .await?;
                        if self.vended_generation_of_current() == Some(generation) {
                            // Told to retry, but the table still holds those credentials.
                            self.reload(&mut shutdown).await?;
                        }
                        continue;
                    }
                    return self.failed(myself, failure, started).await;
                }
            };
            metrics::histogram!("thadam_iceberg_commit_window_seconds", "table" => self.name.to_string())
                .record(window_start.elapsed().as_secs_f64());
            self.appends.attempts.sent(&commit.files);
            let AppendCommit {
                updates,
                requirements,
                files,
                manifest_list,
            } = commit;
            let key = uuid::Uuid::new_v4().to_string();
            // A stop abandons a commit in flight: safe, because whether it landed or not, the
            // next start finds its keys (or not) in the table and does only what is missing;
            // its files stay (they were marked sent).
            let outcome = tokio::select! {
                o = ctx.client.commit(&self.name, requirements, updates, Some(&key), Some(&table)) => o,
                _ = shutdown.requested() => return Err(Error::cancelled()),
            };
            // 5. What it means.
            return match outcome {
                Ok(new_table) => {
                    if let Some(refusal) = self.appends.retention.probing.take() {
                        self.retention_refused(&refusal);
                    }
                    self.vended_worked(vended);
                    let round_trip = window_start.elapsed().as_secs_f64() * 1000.0;
                    self.note_round_trip(round_trip);
                    if self.appends.retry.take().is_none() {
                        self.appends.pace.landed_clean();
                    }
                    self.committed_ok(new_table, &todo, watermark.as_ref(), started);
                    self.read_lanes();
                    self.appends.gap = self.next_gap(ctx.config.commit.min_interval);
                    self.publish_pace();
                    // The set stays as large as the snapshots the table keeps.
                    self.committed.forget(&expire.segment_ids);
                    self.batch_over(Some(&files)).await;
                    Ok(())
                }
                Err(failure) => {
                    match &failure {
                        CommitError::Unknown(_) => self.appends.attempts.unknown(),
                        _ => self.appends.attempts.refused(&files, &manifest_list),
                    }
                    self.delete_stale(&table).await;
                    let failure = self.probe_retention(failure, !expire.snapshot_ids.is_empty());
                    self.failed(myself, failure, started).await
                }
            };
        }
    }

    /// After an attempt failed: when it carried `remove-snapshots` and was refused or its outcome
    /// is unknown, the next attempt goes without (see [`RetentionProbe`]); a refusal is then
    /// retried once rather than fatal. A probe that fails too clears the suspicion.
    fn probe_retention(&mut self, failure: CommitError, carried_removal: bool) -> CommitError {
        if self.appends.retention.probing.take().is_some() || !carried_removal {
            return failure;
        }
        match failure {
            CommitError::Fatal(e) => {
                self.appends.retention.probing = Some(e.to_string());
                CommitError::NotApplied(e)
            }
            CommitError::Unknown(e) => {
                self.appends.retention.probing = Some(e.to_string());
                CommitError::Unknown(e)
            }
            other => other,
        }
    }

    /// The catalog refused `remove-snapshots`: retention is off for this table.
    fn retention_refused(&mut self, refusal: &str) {
        self.appends.retention.off = true;
        metrics::counter!("thadam_iceberg_snapshot_retention_refused_total", "table" => self.name.to_string())
            .increment(1);
        tracing::warn!(
            table = %self.name,
            "the catalog refused to remove snapshots ({refusal}), and the same append without \
             the removal landed: snapshot_retention is off for table {} (the catalog manages \
             its snapshots itself, as Project Nessie does); remove snapshot_retention from the \
             sink to silence this",
            self.name
        );
    }

    /// After a failed attempt: stop on a fatal failure (giving up what the batch wrote), or
    /// schedule the next attempt after the policy's pause.
    async fn failed(
        &mut self,
        myself: &ActorRef<CommitterMsg>,
        failure: CommitError,
        started: Instant,
    ) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        metrics::counter!("thadam_iceberg_commits_total", "table" => self.name.to_string(), "outcome" => outcome_label(&failure))
            .increment(1);
        let before = self
            .appends
            .retry
            .as_ref()
            .map(|r| r.failures)
            .unwrap_or_default();
        let (next, failures) = after_failure(
            &failure,
            before,
            ctx.retry(),
            self.appends.pace.interval(),
            rand::random(),
        );
        let Next::Reload { delay } = next else {
            self.appends.retry = None;
            self.batch_over(None).await;
            return Err(match failure {
                CommitError::Fatal(e) | CommitError::Unknown(e) | CommitError::NotApplied(e) => e,
                CommitError::Conflict(why) => Error::internal(why),
            });
        };
        let mut warned = self.appends.retry.as_ref().is_some_and(|r| r.warned);
        match &failure {
            // Another writer got there first: the table is free again.
            CommitError::Conflict(why) => {
                self.appends.load_first = LOAD_FIRST_FOR;
                tracing::info!(table = %self.name, ?delay, conflicts = failures.conflicts, "append conflicted ({why}); reloading and rebuilding");
            }
            CommitError::Unknown(e) | CommitError::NotApplied(e) => {
                count_retry(Op::Append, e.retry_cause());
                tracing::warn!(table = %self.name, attempt = before.outages, ?delay, "append did not complete ({e}); reloading and reconciling");
                self.ctx().status.update(&self.name.to_string(), |s| {
                    s.last_error = Some(e.to_string())
                });
            }
            CommitError::Fatal(_) => {}
        }
        let failing = started.elapsed();
        if failing >= SLOW_WARNING_AFTER && !warned {
            warned = true;
            tracing::warn!(
                table = %self.name,
                conflicts = failures.conflicts,
                outages = failures.outages,
                "an append of table {} has been retried for {}s ({} segments waiting); still trying",
                self.name,
                failing.as_secs(),
                self.pending.len()
            );
        }
        self.appends.retry = Some(Retry {
            failures,
            conflicted: matches!(failure, CommitError::Conflict(_)),
            at: Instant::now() + delay,
            started,
            warned,
        });
        self.arm_retry(myself, delay);
        self.publish_backlog();
        Ok(())
    }

    /// After a load, what it says about other writers, given the current snapshot of the version
    /// held before it (`held`): commits not ours keep the committer loading first; and when the
    /// last attempt conflicted with another registrar (a fleet on one table), the table's pace
    /// widens. A conflict with another kind of writer (a Spark job, pyiceberg) does not: it does
    /// not slow down when we do, so widening would only add latency; the prompt retry is the
    /// answer to it.
    fn saw_others_since(&mut self, held: Option<i64>) {
        let Some(table) = &self.table else {
            return;
        };
        let metadata = table.metadata();
        if metadata.current_snapshot_id() == held {
            self.appends.load_first = self.appends.load_first.saturating_sub(1);
            return;
        }
        self.appends.load_first = LOAD_FIRST_FOR;
        let conflicted = self.appends.retry.as_ref().is_some_and(|r| r.conflicted);
        if conflicted && registrar_committed_since(metadata, held) {
            self.appends.pace.conflicted();
            self.publish_pace();
        }
        if let Some(retry) = &mut self.appends.retry {
            // Counted once per conflict.
            retry.conflicted = false;
        }
    }

    /// Takes a landed commit's round trip into the smoothed one, and the slot it asks for.
    fn note_round_trip(&mut self, round_trip: f64) {
        let smoothed = match self.appends.round_trip_ms {
            Some(smoothed) => smoothed * 0.7 + round_trip * 0.3,
            None => round_trip,
        };
        self.appends.round_trip_ms = Some(smoothed);
        self.appends.slot_ms = desired_slot(self.appends.slot_ms, smoothed);
    }

    /// Reads the lanes of the snapshots the table gained since the last read (newest first, at
    /// most [`LANES_LOOKBACK`], none older than the lane memory): who else commits to it.
    fn read_lanes(&mut self) {
        let Some(table) = &self.table else {
            return;
        };
        let metadata = table.metadata();
        let newest = metadata.current_snapshot_id();
        let horizon = chrono::Utc::now().timestamp_millis() - LANE_MEMORY_MS;
        let mut at = metadata.current_snapshot();
        for _ in 0..LANES_LOOKBACK {
            let Some(snapshot) = at else {
                break;
            };
            if Some(snapshot.snapshot_id()) == self.appends.lanes_read_to
                || snapshot.timestamp_ms() < horizon
            {
                break;
            }
            let summary = &snapshot.summary().additional_properties;
            if !summary.contains_key(crate::table::committed::WRITER) {
                let at = snapshot.timestamp_ms();
                self.appends.other_kind_seen_ms =
                    Some(self.appends.other_kind_seen_ms.map_or(at, |s| s.max(at)));
            }
            if let Some(lane) = summary.get(LANE) {
                if summary
                    .get(crate::table::committed::WATERMARK_KEY)
                    .is_some_and(|w| self.appends.own_watermarks.contains(w))
                {
                    self.appends.fleet.same_log(lane);
                }
                let slot = summary
                    .get(SLOT_MS)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                self.appends
                    .fleet
                    .observe(lane, snapshot.timestamp_ms(), slot);
            }
            at = snapshot
                .parent_snapshot_id()
                .and_then(|p| metadata.snapshot_by_id(p));
        }
        self.appends.lanes_read_to = newest;
    }

    /// The gap after the start of the commit that just landed before the next may start: to
    /// this registrar's next slot when other registrars share the table (see `pacing::Fleet`),
    /// else the adaptive pace; never below `floor` (`commit.min_interval`), nor below
    /// [`COURTESY_GAP`] while another kind of writer commits to the table.
    fn next_gap(&self, floor: Duration) -> Duration {
        let now = Instant::now();
        let since_start = self
            .appends
            .last_start
            .map_or(Duration::ZERO, |s| now.duration_since(s));
        let now_ms = chrono::Utc::now().timestamp_millis();
        let gap = match self.appends.fleet.next_start(now_ms) {
            Some((start, slot)) => {
                tracing::debug!(table = %self.name, start, slot, lane = self.appends.fleet.own(), "next commit in this lane's slot");
                since_start + Duration::from_millis(u64::try_from(start - now_ms).unwrap_or(0))
            }
            None => self.appends.pace.gap(Duration::ZERO, rand::random()),
        };
        let courtesy = self
            .appends
            .other_kind_seen_ms
            .filter(|seen| now_ms.saturating_sub(*seen) <= COURTESY_MEMORY_MS)
            .map_or(Duration::ZERO, |_| COURTESY_GAP);
        gap.max(floor).max(courtesy)
    }

    /// Wakes this committer for the next attempt after `delay`: at once by a message behind
    /// those already waiting (footers and segments that arrived join the attempt), or a timer.
    pub(super) fn arm_retry(&mut self, myself: &ActorRef<CommitterMsg>, delay: Duration) {
        if self.appends.retry_armed {
            return;
        }
        self.appends.retry_armed = true;
        if delay.is_zero() {
            if let Err(e) = myself.cast(CommitterMsg::RetryElapsed) {
                tracing::debug!(table = %self.name, "cannot schedule the retry: {e}");
            }
        } else {
            myself.send_after(delay, || CommitterMsg::RetryElapsed);
        }
    }

    /// Writes, on the version of the table held, what the next attempt will need and does not
    /// hold yet: best effort (a failure here is met again, and handled, by the build).
    async fn stage_ahead(&mut self, batch: &[ReadySegment]) {
        let Some(table) = self.table.clone() else {
            return;
        };
        let ctx = Arc::clone(&self.args.ctx);
        let todo: Vec<ReadySegment> = batch
            .iter()
            .filter(|r| self.decide(&r.segment) == Decision::Missing)
            .cloned()
            .collect();
        if todo.is_empty() {
            return;
        }
        let Ok(append) = prepare_append(
            &table,
            &ctx.config.url.bucket,
            &ctx.writer_id(),
            &todo,
            None,
            &[],
        ) else {
            return;
        };
        let mut shutdown = ctx.shutdown.clone();
        tokio::select! {
            r = append.stage(&mut self.appends.attempts) => {
                if let Err(e) = r {
                    tracing::debug!(table = %self.name, "writing ahead of the load failed ({e}); the build retries it");
                }
            }
            _ = shutdown.requested() => {}
        }
    }

    /// The batch's attempts are over: it landed with `landed` (the files its commit references),
    /// or it is given up or found registered (`None`). Whatever else it wrote and never sent is
    /// deleted.
    async fn batch_over(&mut self, landed: Option<&[String]>) {
        self.appends.attempts.finish(landed);
        if let Some(table) = self.table.clone() {
            self.delete_stale(&table).await;
        }
    }

    /// The committer stops: the batch's attempts are over.
    pub(super) async fn abandon_attempts(&mut self) {
        if !self.appends.attempts.is_idle() {
            self.batch_over(None).await;
        }
    }

    /// Deletes the files the batch's attempts wrote that no commit references and none will
    /// (see `table::append::attempts`): a refused attempt's manifest list, replaced manifests.
    /// Best effort: a file that cannot be deleted is an orphan, never a wrong table.
    async fn delete_stale(&mut self, table: &Table) {
        for path in self.appends.attempts.take_stale() {
            let outcome = match table.file_io().delete(&path).await {
                Ok(()) => "deleted",
                Err(e) => {
                    tracing::debug!(table = %self.name, path, "could not delete a file no commit references: {e}");
                    "failed"
                }
            };
            metrics::counter!("thadam_iceberg_attempt_files_deleted_total", "table" => self.name.to_string(), "outcome" => outcome)
                .increment(1);
        }
    }

    /// The table's commit interval, as a gauge: the slot cycle when registrars take turns,
    /// else the adaptive pace.
    fn publish_pace(&self) {
        let now_ms = chrono::Utc::now().timestamp_millis();
        let interval = match self.appends.fleet.cycle_ms(now_ms) {
            Some(ms) => Duration::from_millis(ms),
            None => self.appends.pace.interval(),
        };
        metrics::gauge!("thadam_iceberg_commit_interval_seconds", "table" => self.name.to_string())
            .set(interval.as_secs_f64());
    }

    /// The segments of `batch` the table does not hold yet, after checking any watermark the
    /// current table version brought. Those it holds leave the queue as skipped.
    pub(super) async fn still_missing(
        &mut self,
        batch: &[ReadySegment],
    ) -> Result<Vec<ReadySegment>> {
        let catalogs: BTreeSet<String> = batch
            .iter()
            .filter_map(|r| r.segment.catalog_id.clone())
            .collect();
        self.check_watermarks(&catalogs).await?;
        if batch
            .iter()
            .any(|r| self.decide(&r.segment) == Decision::NeedsLiveFiles)
        {
            self.list_live_files().await?;
        }
        let mut todo = Vec::with_capacity(batch.len());
        for r in batch {
            match self.decide(&r.segment) {
                Decision::Registered => {
                    if self.pending.remove(&r.segment.seq).is_some() {
                        self.remember(&r.segment);
                        self.skipped(&r.segment);
                    }
                }
                // Still queued: not quarantined or superseded meanwhile.
                Decision::Missing if self.pending.get(&r.segment.seq).is_some() => {
                    todo.push(r.clone())
                }
                Decision::Missing => {}
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

    pub(super) fn table_missing(&self) -> Error {
        table_missing(&self.name, &self.ctx().config, true)
    }

    pub(super) async fn reload(
        &mut self,
        shutdown: &mut crate::runtime::shutdown::Shutdown,
    ) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let what = format!("reloading table {}", self.name);
        let table_name = self.name.to_string();
        let report = Some(ReportTo {
            board: &ctx.status,
            table: &table_name,
        });
        let table = retry_transient(Op::Load, ctx.retry(), shutdown, &what, report, || {
            ctx.client.load_table(&self.name)
        })
        .await?
        .ok_or_else(Error::cancelled)?;
        match table {
            Some(t) => self.adopt(t),
            None if ctx.config.create_table => {
                self.table = None;
                self.committed = CommittedSet::default();
            }
            None => return Err(self.table_missing()),
        }
        Ok(())
    }

    /// The batch is in the table: `table` is the commit's answer. Takes it, records the batch
    /// in the committed set, and lets the batch leave the queue.
    pub(super) fn committed_ok(
        &mut self,
        table: Table,
        batch: &[ReadySegment],
        watermark: Option<&(String, String)>,
        started: Instant,
    ) {
        self.committed
            .record(batch.iter().map(|r| &r.segment), watermark);
        // The commit response is the table as it is now, built on the one we filtered against
        // (the commit asserted its snapshot): its snapshots rebuild to our set plus this batch,
        // so only the properties are read again, not every snapshot.
        self.committed.refresh_marks(table.metadata().properties());
        self.table = Some(table);
        for r in batch {
            self.remember(&r.segment);
            self.by_files.remove(&r.segment.seq);
            self.resolve_registered(&r.segment);
        }
        for r in batch {
            self.pending.remove(&r.segment.seq);
        }
        self.report_commit(batch, started);
    }
}

/// Whether a snapshot another registrar wrote (`thadam.writer` in its summary) lies between the
/// table's current snapshot and `since`, looking back at most [`WRITERS_LOOKBACK`] snapshots.
fn registrar_committed_since(metadata: &iceberg::spec::TableMetadata, since: Option<i64>) -> bool {
    let mut at = metadata.current_snapshot();
    for _ in 0..WRITERS_LOOKBACK {
        let Some(snapshot) = at else {
            return false;
        };
        if Some(snapshot.snapshot_id()) == since {
            return false;
        }
        if snapshot
            .summary()
            .additional_properties
            .contains_key(crate::table::committed::WRITER)
        {
            return true;
        }
        at = snapshot
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p));
    }
    false
}

/// `sink.iceberg_table_missing` for `table`: where it was looked for (`catalog_uri` formats
/// without credentials and query string) and the fix. `while_running`: it was there and is gone
/// (dropped while the registrar ran), rather than absent when the committer started.
pub(super) fn table_missing(
    table: &TableName,
    config: &crate::config::RegistrarConfig,
    while_running: bool,
) -> Error {
    let how = if while_running {
        " (it was dropped while the registrar ran, or never created)"
    } else {
        ""
    };
    Error::new(
        ErrorCode::TableMissing,
        format!(
            "table {table} does not exist in the catalog at {}{how}; create it, or set \
             create_table: true on sink {} to let the registrar create it",
            config.catalog_uri, config.id
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Snapshots 1..=n in a chain; those in `registrar` carry `thadam.writer`.
    fn chain(n: i64, registrar: &[i64]) -> iceberg::spec::TableMetadata {
        let snapshots: Vec<Value> = (1..=n)
            .map(|id| {
                let mut summary = json!({"operation": "append"});
                if registrar.contains(&id) {
                    summary[crate::table::committed::WRITER] = json!("thadam-iceberg/s/p");
                }
                let mut s = json!({
                    "snapshot-id": id, "sequence-number": id, "timestamp-ms": 1_000 + id,
                    "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"),
                    "summary": summary, "schema-id": 0,
                });
                if id > 1 {
                    s["parent-snapshot-id"] = json!(id - 1);
                }
                s
            })
            .collect();
        serde_json::from_value(json!({
            "format-version": 2, "table-uuid": "5f4a6c48-0c3a-4a2c-9e61-3c1b8f2d1e11",
            "location": "s3://b/t", "last-sequence-number": n, "last-updated-ms": 2_000,
            "last-column-id": 1, "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "x", "required": false, "type": "long"}]}],
            "default-spec-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999, "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}], "properties": {},
            "current-snapshot-id": n, "snapshots": snapshots,
            "refs": {"main": {"snapshot-id": n, "type": "branch"}},
        }))
        .expect("test metadata")
    }

    #[test]
    fn a_conflict_counts_for_the_pace_only_when_a_registrar_won_it() {
        // Since snapshot 3: 4 and 5 were written by pyiceberg, Spark...: not a fleet.
        assert!(!registrar_committed_since(&chain(5, &[1, 2, 3]), Some(3)));
        // ... one of them by another registrar: a fleet.
        assert!(registrar_committed_since(&chain(5, &[1, 4]), Some(3)));
        // Older registrar snapshots do not count; an empty table's first snapshot does.
        assert!(!registrar_committed_since(&chain(5, &[1, 2]), Some(3)));
        assert!(registrar_committed_since(&chain(1, &[1]), None));
        // Bounded: a registrar snapshot beyond the look-back is not searched for.
        let long = WRITERS_LOOKBACK as i64 + 10;
        assert!(!registrar_committed_since(&chain(long, &[2]), Some(1)));
    }

    #[test]
    fn a_missing_table_names_the_catalog_without_its_secrets() {
        let config = crate::config::RegistrarConfig::builder()
            .id("lake")
            .pipeline("p1")
            .segments_dir("/data/seg")
            .dataset("telemetry")
            .url("s3://bucket/prefix")
            .catalog_uri("https://cat.example/api?secret=abc&x=y#frag")
            .namespace("ns")
            .build()
            .expect("valid");
        let table = TableName {
            namespace: vec!["ns".into()],
            name: "telemetry".into(),
        };
        for (while_running, says) in [(true, "dropped while the registrar ran"), (false, "")] {
            let err = table_missing(&table, &config, while_running);
            assert_eq!(err.code(), ErrorCode::TableMissing);
            for text in [err.to_string(), format!("{err:?}")] {
                assert!(
                    text.contains(
                        "table ns.telemetry does not exist in the catalog at \
                                   https://cat.example/api"
                    ),
                    "{text}"
                );
                assert!(text.contains(says), "{text}");
                assert!(text.contains("create_table: true on sink lake"), "{text}");
                for secret in ["secret", "abc", "x=y", "frag"] {
                    assert!(!text.contains(secret), "{secret} in {text}");
                }
            }
        }
    }
}
