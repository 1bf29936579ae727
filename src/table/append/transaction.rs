//! One batch's append, attempt by attempt. Read top to bottom, [`BatchCommit::attempt`] is the
//! whole commit path, in the order things happen:
//!
//! 0. **Resend**: a commit whose answer was lost (or that never left) goes again as it was, same
//!    bytes and `Idempotency-Key` (see [`retry::resend`]), without a reload.
//! 1. **Hold or load**: on a table others commit to (or after a failed attempt), write what the
//!    attempt needs on the version held (the new files' manifest; merges on a batch's first
//!    attempt), then load the table: the merge stays outside the window between the load and
//!    the commit. A lone registrar builds on its own last commit's answer. A node of a fleet
//!    that does not take turns, whose batch is all published within its last fallback, stops
//!    before this with nothing loaded: it leaves the batch to the committer
//!    ([`BatchCommit::defers_unloaded`]).
//! 2. **Filter** the batch against the table as it is now (the committed set), so that a segment
//!    another writer or an earlier attempt registered is never appended again. In a fleet that
//!    carries intents (`table::fleet::intents`), this node's published segments found in the table
//!    were carried by another node; a node that does not take turns leaves what it published
//!    lately to the committers (**deferred**), and an idle committer's turn goes on only if
//!    there are intents to carry (they were listed and read before the load).
//! 3. **Schema**: make the table ready for the files (its creation, and schema changes, which are
//!    commits of their own, sent and classified here like the append); a file no table can take
//!    is a bad segment.
//! 4. **Build** the append, reusing what earlier attempts of the batch wrote, with the fleet's
//!    intents it carries (chosen on the loaded table by `intents::select`).
//! 5. **Send** it, and **classify** the answer once, here ([`retry::classify`]).
//! 6. **Landed**: take the answer, pace the next batch, delete what the batch wrote and the table
//!    does not reference. **Failed**: the retention probe, then [`retry::after_failure`] says
//!    what next: stop, or the pause before the next attempt, which the committer schedules as a
//!    message to itself (so that footers and segments that arrive meanwhile join it); a
//!    committer of a carrying fleet whose append conflicted waits for its next turn instead. A
//!    refused attempt's files are deleted at once, an unknown outcome's never.
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
use super::pacing::Pacer;
use super::producer::{AppendCommit, prepare_append};
use super::retry::{
    self, Failure, FailureCounts, Next, after_failure, classify, classify_build, outcome_label,
};
use crate::catalog::{CommitRequest, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::footer::SegmentFooter;
use crate::protocol::messages::SchemaReconciled;
use crate::protocol::segment::UploadedSegment;
use crate::runtime::backoff::delay_for;
use crate::runtime::retry::{Op, SLOW_WARNING_AFTER, count_retry, note_retry};
use crate::table::committed::{Decision, SegmentId};
use crate::table::data_files::{ReadySegment, data_file};
use crate::table::env::Env;
use crate::table::fleet::intents::{Carried, IntentKey, Intents, MarkRaise};
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

/// Which kind of commit failed (they count and pace differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Append,
    Schema,
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

/// An append commit sent (or about to be), with what it needs when the answer comes.
struct Sent {
    request: CommitRequest,
    /// The version it was built on.
    base: Table,
    segments: Vec<ReadySegment>,
    watermark: Option<(String, String)>,
    /// Snapshots it removes (snapshot retention), and the segment ids they list.
    expire: retention::Plan,
    /// The files of this batch it references, and its manifest list.
    files: Vec<String>,
    manifest_list: String,
    /// The generation of the vended credentials its manifests were written with.
    vended: Option<u64>,
    /// The fleet's intents it carries.
    carried: Carried,
    /// When the window between the load (or the build) and the answer opened.
    window_start: Instant,
    /// How many times it was sent again as it is.
    resends: u32,
}

/// One phase of an append attempt's window, as `thadam_iceberg_commit_phase_seconds`: `load`
/// (the table, when the attempt loads it first), `build` (from the table held to the request:
/// what the table lacks, schema changes, the fleet's intents, the manifests and their merges)
/// and `answer` (the catalog's commit round trip). A fleet's 409s come from windows longer than
/// their slot, and which phase made them so is what to act on (a merge in `build`, a busy
/// catalog in `load` and `answer`).
fn record_phase(table: &TableName, phase: &'static str, took: Duration) {
    metrics::histogram!("thadam_iceberg_commit_phase_seconds", "table" => table.to_string(), "phase" => phase)
        .record(took.as_secs_f64());
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

    async fn attempt_once(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        input: AttemptInput<'_>,
    ) -> Result<Attempted> {
        let now = Instant::now();
        let started = self.retry.as_ref().map_or(now, |r| r.started);
        if self.retry.is_none() {
            self.pacer.batch_started(now);
        }
        let mut found = Vec::new();
        let mut carried = HashSet::new();
        if let Some(table) = held.table() {
            let log = input
                .batch
                .first()
                .and_then(|r| r.segment.catalog_id.as_deref());
            self.pacer.first_view(table.metadata(), log);
        }
        // An idle committer's turn (see `carries_when_idle`): it loads and commits only when
        // there is something to carry.
        if input.batch.is_empty() && self.resend.is_none() && self.retry.is_none() {
            self.read_intents_ahead(env, held).await;
            if !self.intents.prefetched_any() {
                self.pacer.deferred();
                return Ok(Attempted {
                    found,
                    carried,
                    ours: HashSet::new(),
                    outcome: Outcome::Deferred,
                });
            }
        }
        // A node that does not take turns publishes what the table can take as it is (its
        // schemas checked first, on a node just started) and leaves it to the committers without
        // loading the table (see `defers_unloaded`).
        if self.pacer.fallback_ms().is_some() {
            self.accept_fitting(held, schemas, input.batch).await;
        }
        if self.defers_unloaded(env, held, input.batch).await {
            self.pacer.deferred();
            let outcome = Outcome::Deferred;
            return Ok(self.no_commit(held, found, carried, outcome).await);
        }
        // 0. The last append again, as it was.
        if let Some(sent) = self.resend.take() {
            let outcome = self.send(env, held, sent, started, input.waiting).await?;
            return Ok(Attempted {
                found,
                carried,
                ours: HashSet::new(),
                outcome,
            });
        }
        // 1. A table others commit to: the version held is most likely stale.
        let mut window_start = now;
        let mut built_from = now;
        if (self.retry.is_some() || self.pacer.loads_first()) && held.table().is_some() {
            // A node that does not take turns writes nothing ahead and reads the intents only
            // if it commits after all (the build writes, `gather` lists then): most of its
            // attempts leave everything to the committers, and a listing each would read every
            // other node's intents (N² reads a fleet), a merge each would be thrown away.
            let takes_turns = self.pacer.fallback_ms().is_none();
            if takes_turns {
                self.write_ahead_of_load(env, held, input.batch).await;
            }
            if !input.batch.is_empty() && self.intents.lists(self.pacer.slotted()) && takes_turns {
                self.read_intents_ahead(env, held).await;
            }
            let before = held.version().and_then(|(_, snapshot)| snapshot);
            window_start = Instant::now();
            held.load(env, true).await?;
            built_from = Instant::now();
            record_phase(&self.name, "load", built_from - window_start);
            let conflicted = self
                .retry
                .as_mut()
                .is_some_and(|r| std::mem::take(&mut r.conflicted));
            if let Some(table) = held.table() {
                self.pacer.loaded(table.metadata(), before, conflicted);
            }
        }
        let mut candidates = input.batch.to_vec();
        loop {
            // 2. What the table still lacks.
            let todo = self
                .still_missing(env, held, candidates, input.local, &mut found)
                .await?;
            if self.intents.has_own()
                && let Some(table) = held.table()
            {
                let holds = |id: &SegmentId| held.holds_id(id);
                let covered = |log: &str, seq: u64| held.covered(log, seq);
                let table = table.clone();
                carried.extend(
                    self.intents
                        .carried_by_others(env.store, &table, &holds, &covered)
                        .await,
                );
            }
            if self.leaves_to_committers(env, held, &todo).await {
                self.pacer.deferred();
                let outcome = Outcome::Deferred;
                return Ok(self.no_commit(held, found, carried, outcome).await);
            }
            // A slot owner with nothing of its own still carries the fleet's intents.
            let carries_only = todo.is_empty()
                && self.intents.on()
                && self.pacer.commits_in_turn()
                && held.table().is_some();
            if todo.is_empty() && !carries_only {
                // Registered already (an earlier attempt whose answer was lost, another writer).
                let outcome = Outcome::AlreadyRegistered;
                return Ok(self.no_commit(held, found, carried, outcome).await);
            }
            // 3. Creation and schema evolution.
            let filtered_against = held.version();
            match self.make_ready(env, held, schemas, &todo).await? {
                Ready::Yes => {}
                Ready::Failed(failure) => {
                    let outcome = self
                        .give_up_or_retry(env, held, failure, Kind::Schema, started, input.waiting)
                        .await?;
                    return Ok(Attempted {
                        found,
                        carried,
                        ours: HashSet::new(),
                        outcome,
                    });
                }
                Ready::BadSegment(seq, error) => {
                    return Ok(Attempted {
                        found,
                        carried,
                        ours: HashSet::new(),
                        outcome: Outcome::BadSegment { seq, error },
                    });
                }
            }
            if held.version() != filtered_against {
                // A newer table (created, evolved): what it holds may include some of `todo`.
                candidates = todo;
                continue;
            }
            let table = held
                .table()
                .cloned()
                .ok_or_else(|| Error::internal("no table after schema reconciliation"))?;
            // A segment whose rows fit no single partition fails the whole append: find it first.
            if !table.metadata().default_partition_spec().is_unpartitioned() {
                for r in &todo {
                    if let Err(error) = data_file(&table, &env.config.url.bucket, r)
                        && is_about_the_file(error.code())
                    {
                        let outcome = Outcome::BadSegment {
                            seq: r.segment.seq,
                            error,
                        };
                        return Ok(Attempted {
                            found,
                            carried,
                            ours: HashSet::new(),
                            outcome,
                        });
                    }
                }
            }
            if let Some(hook) = &env.hooks.before_append {
                hook.before_append(&self.name, &table, &todo).await;
            }
            // 4. Build: the data files, the summary, the watermark, the snapshots to expire.
            let segments: Vec<&UploadedSegment> = todo.iter().map(|r| &r.segment).collect();
            let watermark = held.watermark_update(&segments);
            if let Some((property, _)) = &watermark {
                self.pacer.own_watermark(property);
            }
            // The fleet's intents this commit carries (see `intents`), and this node's own
            // segments that go as new files rather than as its published manifests.
            let fleet = if self.intents.lists(self.pacer.slotted()) {
                let holds = |id: &SegmentId| held.holds_id(id);
                self.intents
                    .gather(
                        env.store,
                        &env.config.url,
                        &table,
                        &todo,
                        &holds,
                        watermark.as_ref().map(|(p, _)| p.as_str()),
                        env.config.commit.max_segments,
                        env.now_ms(),
                    )
                    .await
            } else {
                Carried::default()
            };
            if carries_only && fleet.is_empty() {
                let outcome = Outcome::AlreadyRegistered;
                return Ok(self.no_commit(held, found, carried, outcome).await);
            }
            // Snapshot retention rides on the append (metadata only; see table::retention),
            // unless the catalog refused it (or this attempt tells whether it does).
            let expire = match env.config.snapshot_retention {
                Some(policy) if !self.retention.off && self.retention.probing.is_none() => {
                    retention::plan(
                        &self.name.to_string(),
                        table.metadata(),
                        &policy,
                        env.now_ms(),
                    )
                }
                _ => retention::Plan::default(),
            };
            let mut append = prepare_append(
                &table,
                &env.config.url.bucket,
                &env.writer_id(),
                &todo,
                watermark.as_ref(),
                &expire.snapshot_ids,
            )?
            .with_carried(&fleet)
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
            let AppendCommit {
                updates,
                requirements,
                files,
                manifest_list,
            } = match built {
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
                        candidates = todo;
                        continue;
                    }
                    (failure, _) => {
                        let outcome = self
                            .give_up_or_retry(
                                env,
                                held,
                                failure,
                                Kind::Append,
                                started,
                                input.waiting,
                            )
                            .await?;
                        return Ok(Attempted {
                            found,
                            carried,
                            ours: HashSet::new(),
                            outcome,
                        });
                    }
                },
            };
            // 5. Send.
            record_phase(&self.name, "build", built_from.elapsed());
            let request = env
                .client
                .commit_request(&self.name, requirements, updates)?;
            let sent = Sent {
                request,
                base: table,
                segments: todo,
                watermark,
                expire,
                files,
                manifest_list,
                vended,
                carried: fleet,
                window_start,
                resends: 0,
            };
            let outcome = self.send(env, held, sent, started, input.waiting).await?;
            return Ok(Attempted {
                found,
                carried,
                ours: HashSet::new(),
                outcome,
            });
        }
    }

    /// Sends `sent` and takes what comes back: the landed commit, or its failure, classified.
    async fn send(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        mut sent: Sent,
        started: Instant,
        waiting: usize,
    ) -> Result<Outcome> {
        if sent.resends == 0 {
            metrics::histogram!("thadam_iceberg_commit_window_seconds", "table" => self.name.to_string())
                .record(sent.window_start.elapsed().as_secs_f64());
        }
        // From here on the files may be in the table: never deleted unless the catalog refuses.
        self.written.sent(&sent.files);
        let mut shutdown = env.shutdown.clone();
        // The fleet's sole committer, whose next commit follows this one, reads the intents
        // published meanwhile while it waits for the answer (see `Intents::warm`). Nodes taking
        // turns commit again a cycle later, and a lone registrar lists none.
        let warms = sent.resends == 0 && self.intents.on() && self.pacer.sole_committer();
        // A stop abandons a commit in flight: safe, because whether it landed or not, the next
        // start finds its keys (or not) in the table and does only what is missing; its files
        // stay (they were marked sent).
        let asked = Instant::now();
        let name = &self.name;
        let commit = async {
            let answer = env
                .client
                .send_commit(&sent.request, Some(&sent.base))
                .await;
            record_phase(name, "answer", asked.elapsed());
            answer
        };
        let intents = &mut self.intents;
        let warm = async {
            if warms {
                intents
                    .warm(
                        env.store,
                        &env.config.url,
                        sent.base.metadata(),
                        env.now_ms(),
                    )
                    .await;
            }
        };
        let answer = tokio::select! {
            (a, ()) = async { tokio::join!(commit, warm) } => a,
            _ = shutdown.requested() => return Err(Error::cancelled()),
        };
        // 6. What it means.
        let failure = match answer {
            Ok(answer) => return Ok(self.landed(env, held, sent, answer, started).await),
            Err(wire) => classify(wire),
        };
        if matches!(failure, Failure::Conflict(_)) {
            self.pacer
                .measured(sent.window_start.elapsed().as_secs_f64() * 1000.0);
        }
        let keyed = sent.request.idempotency_key().is_some();
        if retry::resend(&failure, keyed, sent.resends)
            && let Failure::Unknown(e) | Failure::NotApplied(e) = &failure
        {
            // The same request again, after the backoff; the server replays its answer if the
            // first one was applied.
            let what = format!("commit to table {}", self.name);
            let retry = self.retry.get_or_insert(Retry {
                counts: FailureCounts::default(),
                conflicted: false,
                at: Instant::now(),
                started,
                warned: false,
            });
            note_retry(Op::Append, e, retry.started, &mut retry.warned, &what);
            let delay = delay_for(&env.config.retry, sent.resends, e);
            retry.at = Instant::now() + delay;
            tracing::warn!(
                table = %self.name,
                attempt = sent.resends,
                ?delay,
                idempotency_key = keyed,
                "{what} did not complete ({e}); resending the same request"
            );
            sent.resends += 1;
            self.resend = Some(sent);
            return Ok(Outcome::RetryAfter(delay));
        }
        match &failure {
            Failure::Unknown(_) => {
                self.written.unknown();
                self.sent_unknown
                    .extend(sent.segments.iter().map(|r| r.segment.seq));
            }
            _ => self.written.refused(&sent.files, &sent.manifest_list),
        }
        self.delete_stale(&sent.base).await;
        let failure = self.probe_retention(failure, !sent.expire.snapshot_ids.is_empty());
        self.give_up_or_retry(env, held, failure, Kind::Append, started, waiting)
            .await
    }

    /// The append landed: the table takes the answer, the pace is set for the next batch, and
    /// what the batch wrote and the table does not reference is deleted.
    async fn landed(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        sent: Sent,
        answer: Table,
        started: Instant,
    ) -> Outcome {
        if let Some(refusal) = self.retention.probing.take() {
            self.retention_refused(&refusal);
        }
        held.vended_worked(sent.vended);
        let round_trip = sent.window_start.elapsed().as_secs_f64() * 1000.0;
        let first_attempt = self
            .retry
            .take()
            .is_none_or(|r| r.counts == FailureCounts::default());
        self.pacer
            .landed(answer.metadata(), round_trip, first_attempt);
        let segments: Vec<&UploadedSegment> = sent.segments.iter().map(|r| &r.segment).collect();
        held.landed(
            answer,
            &segments,
            sent.watermark.as_ref(),
            &sent.expire.segment_ids,
        );
        if !sent.carried.is_empty() {
            held.record_carried(&sent.carried.ids);
            if let Some(table) = held.table() {
                let table = table.clone();
                self.intents
                    .landed(env.store, &table, &sent.carried, env.now_ms())
                    .await;
            }
        }
        self.batch_over(held, Some(&sent.files)).await;
        Outcome::Landed {
            segments: sent.segments,
            started,
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

    /// Notes the file schemas of `batch` that the table held takes as it is (no creation, no
    /// schema change), in order, up to the first that it does not: only what the table can take
    /// is published. A node that committed before knows them already; one just started (a
    /// restart into a fleet) asks the schema merger, which reads nothing.
    async fn accept_fitting(
        &mut self,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        batch: &[ReadySegment],
    ) {
        for r in batch {
            if held.fits(&r.footer.arrow_schema) {
                continue;
            }
            let Some(current) = held.table().map(Table::metadata_ref) else {
                return;
            };
            match schemas
                .reconcile(Some(current), Arc::clone(&r.footer))
                .await
            {
                Ok(SchemaReconciled {
                    table: None,
                    change: None,
                }) => held.accept(&r.footer.arrow_schema),
                // A change (or a table another writer made meanwhile) goes through the commit
                // path, in this node's own attempt; an error too.
                _ => return,
            }
        }
    }

    /// Whether this committer, with nothing of its own to commit, still takes its turns to carry
    /// the fleet's intents: a committer of a fleet that carries (the nodes that do not take
    /// turns count on it, whatever its own pipeline is doing). When its turn comes it lists
    /// the intents, and loads and commits only if there are some.
    pub(crate) fn carries_when_idle(&self) -> bool {
        self.retry.is_none()
            && self.resend.is_none()
            && self.intents.on()
            && self.pacer.commits_in_turn()
    }

    /// Whether this node, which does not take turns, leaves `todo` to the fleet's committers:
    /// all of it is published (now, if it was not: a batch that conflicted, or that it held
    /// before it knew the fleet) and younger than its fallback (a few while the committers are
    /// seen carrying, `fleet::slots::patience_ms`). What the committers left for longer
    /// than that, it commits itself.
    async fn leaves_to_committers(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        todo: &[ReadySegment],
    ) -> bool {
        let Some(patience) = self
            .pacer
            .leave_to_committers_ms()
            .filter(|_| self.intents.on())
        else {
            return false;
        };
        if todo.is_empty() {
            return false;
        }
        self.published_within(env, held, todo, patience).await
    }

    /// Publishes what of `batch` is not published yet (see [`Self::publish`]), and says whether
    /// every segment of it is now in an intent of this node published within the last
    /// `within_ms`.
    async fn published_within(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        batch: &[ReadySegment],
        within_ms: u64,
    ) -> bool {
        self.publish_run(env, held, batch).await;
        let since = env
            .now_ms()
            .saturating_sub(i64::try_from(within_ms).unwrap_or(i64::MAX));
        self.intents
            .all_published_since(batch.iter().map(|r| r.segment.seq), since)
    }

    /// Whether this node, which does not take turns, leaves `batch` to the committers at once,
    /// on the table it holds: every segment of it is published (now, if it was not) within the
    /// last fallback. Such an attempt would only learn, by a load, which of its segments were
    /// carried, and the next one, a fallback later, learns that as well; the nodes of a fleet
    /// came to their first attempts together (their segments arrived together after an idle
    /// spell, their views stale) and loaded the table 113 times in two seconds, each load the
    /// whole metadata, with the committer's reads of the intents stuck behind them. A batch
    /// not all published (a schema the held table lacks), or published earlier, goes the
    /// usual way: a load, then what the committers left is committed after the patience.
    async fn defers_unloaded(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        batch: &[ReadySegment],
    ) -> bool {
        let Some(fallback) = self.pacer.fallback_ms() else {
            return false;
        };
        // Not on a view of the fleet that lapses before the next fallback (jittered up to 1.5
        // of one): the load renews it (see `Pacer::view_holds_for`).
        if batch.is_empty()
            || !self.intents.on()
            || self.retry.is_some()
            || self.resend.is_some()
            || held.table().is_none()
            || !self.pacer.view_holds_for(fallback.saturating_mul(3) / 2)
        {
            return false;
        }
        self.published_within(env, held, batch, fallback).await
    }

    /// Whether a batch waiting for this node's slot may be published now (see [`Self::publish`]).
    pub(crate) fn may_publish(&self) -> bool {
        self.retry.is_none()
            && self.resend.is_none()
            && self.intents.may_publish()
            && self.pacer.slotted()
    }

    /// While the batch waits for this node's slot in a fleet that takes turns: publishes the
    /// segments of `batch` not published yet as an intent, so that whoever commits next carries
    /// them (see `intents`). Only a run that the table can take as it is (no creation or schema
    /// change: those go first, in this node's slot) and that follows this node's earlier
    /// intents, so that a log's intents form a chain. Best effort: whatever is not published
    /// waits for the slot.
    pub(crate) async fn publish(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        batch: &[ReadySegment],
    ) {
        if self.may_publish() {
            self.publish_run(env, held, batch).await;
        }
    }

    /// Publishes the run of `batch` that may be published now (see [`Self::publish`]).
    async fn publish_run(&mut self, env: Env<'_>, held: &mut HeldTable, batch: &[ReadySegment]) {
        if !self.intents.may_publish() || !self.pacer.slotted() {
            return;
        }
        let Some(table) = held.table().cloned() else {
            return;
        };
        let run: Vec<ReadySegment> = batch
            .iter()
            .filter(|r| !self.intents.is_published(r.segment.seq))
            .filter(|r| held.judge(&r.segment) == Decision::Missing)
            .take_while(|r| held.fits(&r.footer.arrow_schema))
            .cloned()
            .collect();
        if run.is_empty() {
            return;
        }
        let segments: Vec<&UploadedSegment> = run.iter().map(|r| &r.segment).collect();
        let mark = held
            .watermark_update(&segments)
            .map(|(property, value)| MarkRaise {
                property,
                value,
                after: self.intents.chain_top(),
            });
        let lane = self.pacer.lane().to_string();
        self.intents
            .publish(
                env.store,
                &env.config.url,
                &table,
                &run,
                &lane,
                &env.writer_id(),
                mark,
                env.now_ms(),
            )
            .await;
    }

    /// After a failed attempt: stop on a fatal failure (giving up what the batch wrote), or
    /// note the failure and say when the next attempt may go.
    async fn give_up_or_retry(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        failure: Failure,
        kind: Kind,
        started: Instant,
        waiting: usize,
    ) -> Result<Outcome> {
        if kind == Kind::Append {
            metrics::counter!("thadam_iceberg_commits_total", "table" => self.name.to_string(), "outcome" => outcome_label(&failure))
                .increment(1);
        }
        // A committer of a fleet that carries does not retry a conflicted append at once: that
        // would be in the next committer's slot, and start a cascade. What it holds is published
        // for the others to carry meanwhile, and it commits again in its own next turn.
        if kind == Kind::Append
            && let Failure::Conflict(why) = &failure
            && self.intents.on()
            && self.pacer.commits_in_turn()
        {
            self.pacer.conflicted();
            self.pacer.deferred();
            self.retry = None;
            self.batch_over(held, None).await;
            tracing::info!(table = %self.name, "append conflicted ({why}); committing again in this node's next turn, what it holds published for the fleet meanwhile");
            return Ok(Outcome::Deferred);
        }
        let before = self.retry.as_ref().map(|r| r.counts).unwrap_or_default();
        let (next, counts) = after_failure(
            &failure,
            before,
            &env.config.retry,
            self.pacer.interval(),
            rand::random(),
        );
        let Next::Reload { delay } = next else {
            self.retry = None;
            self.batch_over(held, None).await;
            return Err(match failure {
                Failure::Fatal(e) | Failure::Unknown(e) | Failure::NotApplied(e) => e,
                Failure::Conflict(why) => Error::internal(why),
            });
        };
        let (what, op) = match kind {
            Kind::Append => ("append", Op::Append),
            Kind::Schema => ("schema commit", Op::SchemaCommit),
        };
        match &failure {
            // Another writer got there first: the table is free again.
            Failure::Conflict(why) => {
                if kind == Kind::Append {
                    self.pacer.conflicted();
                }
                tracing::info!(table = %self.name, ?delay, conflicts = counts.conflicts, "{what} conflicted ({why}); reloading and rebuilding");
            }
            Failure::Unknown(e) | Failure::NotApplied(e) => {
                count_retry(op, e.retry_cause());
                tracing::warn!(table = %self.name, attempt = before.outages, ?delay, "{what} did not complete ({e}); reloading and reconciling");
                let shown = e.to_string();
                env.status
                    .update(&self.name.to_string(), |s| s.last_error = Some(shown));
            }
            Failure::Fatal(_) => {}
        }
        let mut warned = self.retry.as_ref().is_some_and(|r| r.warned);
        let failing = started.elapsed();
        if failing >= SLOW_WARNING_AFTER && !warned {
            warned = true;
            tracing::warn!(
                table = %self.name,
                conflicts = counts.conflicts,
                outages = counts.outages,
                "an append of table {} has been retried for {}s ({waiting} segments waiting); \
                 still trying",
                self.name,
                failing.as_secs(),
            );
        }
        self.retry = Some(Retry {
            counts,
            conflicted: kind == Kind::Append && matches!(failure, Failure::Conflict(_)),
            at: Instant::now() + delay,
            started,
            warned,
        });
        Ok(Outcome::RetryAfter(delay))
    }

    /// After an attempt failed: when it carried `remove-snapshots` and was refused or its outcome
    /// is unknown, the next attempt goes without (see [`RetentionProbe`]); a refusal is then
    /// retried once rather than fatal. A probe that fails too clears the suspicion.
    fn probe_retention(&mut self, failure: Failure, carried_removal: bool) -> Failure {
        if self.retention.probing.take().is_some() || !carried_removal {
            return failure;
        }
        match failure {
            Failure::Fatal(e) => {
                self.retention.probing = Some(e.to_string());
                Failure::NotApplied(e)
            }
            Failure::Unknown(e) => {
                self.retention.probing = Some(e.to_string());
                Failure::Unknown(e)
            }
            other => other,
        }
    }

    /// The catalog refused `remove-snapshots`: retention is off for this table.
    fn retention_refused(&mut self, refusal: &str) {
        self.retention.off = true;
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

    /// Lists the fleet's intents and reads ahead the manifests of those the next commit will
    /// carry, on the version of the table held (see `Intents::prefetch`).
    async fn read_intents_ahead(&mut self, env: Env<'_>, held: &HeldTable) {
        let Some(table) = held.table().cloned() else {
            return;
        };
        self.intents
            .prefetch(
                env.store,
                &env.config.url,
                &table,
                env.config.commit.max_segments,
                &|id: &SegmentId| held.holds_id(id),
                env.now_ms(),
            )
            .await;
    }

    /// Writes, on the version of the table held, what the next attempt will need and does not
    /// hold yet: best effort (a failure here is met again, and handled, by the build).
    async fn write_ahead_of_load(
        &mut self,
        env: Env<'_>,
        held: &HeldTable,
        batch: &[ReadySegment],
    ) {
        let Some(table) = held.table() else {
            return;
        };
        let todo: Vec<ReadySegment> = batch
            .iter()
            .filter(|r| {
                held.judge(&r.segment) == Decision::Missing
                    && !self.intents.is_published(r.segment.seq)
            })
            .cloned()
            .collect();
        if todo.is_empty() {
            return;
        }
        let Ok(append) = prepare_append(
            table,
            &env.config.url.bucket,
            &env.writer_id(),
            &todo,
            None,
            &[],
        ) else {
            return;
        };
        let mut shutdown = env.shutdown.clone();
        tokio::select! {
            r = append.write_ahead(&mut self.written) => {
                if let Err(e) = r {
                    tracing::debug!(table = %self.name, "writing ahead of the load failed ({e}); the build retries it");
                }
            }
            _ = shutdown.requested() => {}
        }
    }

    /// The batch ends with no commit from this node (`outcome`: registered already, or left to
    /// the fleet's committers): nothing is retried, and what its attempts wrote is cleaned up.
    async fn no_commit(
        &mut self,
        held: &HeldTable,
        found: Vec<UploadedSegment>,
        carried: HashSet<u64>,
        outcome: Outcome,
    ) -> Attempted {
        self.retry = None;
        self.batch_over(held, None).await;
        Attempted {
            found,
            carried,
            ours: HashSet::new(),
            outcome,
        }
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

    /// Deletes the files the batch's attempts wrote that no commit references and none will
    /// (see `table::append::attempts`): a refused attempt's manifest list, replaced manifests.
    /// Best effort: a file that cannot be deleted is an orphan, never a wrong table.
    async fn delete_stale(&mut self, table: &Table) {
        for path in self.written.take_stale() {
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_snapshot_is_never_stamped_before_the_tables_last() {
        let metadata = crate::testing::metadata_with(&[(json!({}), 5_000), (json!({}), 9_000)]);
        // A node ten minutes behind takes the last stamp; one on time or ahead keeps its own.
        assert_eq!(snapshot_stamp(9_000 - 600_000, &metadata), 9_000);
        assert_eq!(snapshot_stamp(9_500, &metadata), 9_500);
        let empty = crate::testing::metadata_with(&[]);
        assert_eq!(snapshot_stamp(1_234, &empty), 1_234);
    }
}
