//! Sending an append and what its answer means: the commit goes out (and the fleet's sole
//! committer reads the next cycle's intents meanwhile), a landed answer is taken, a failure is
//! classified once, here, and [`retry::decide`] says what comes next.

use std::time::{Duration, Instant};

use iceberg::table::Table;

use super::turns::read_ahead_while_asked;
use super::{BatchCommit, Outcome, Retry};
use crate::catalog::{CommitFailure, CommitRequest, TableName};
use crate::error::{Error, Result};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, SLOW_WARNING_AFTER, count_retry, note_retry};
use crate::table::append::retry::{
    self, Decision, Failed, Failure, FailureCounts, Kind, Probe, SentAppend, Step, classify,
    outcome_label,
};
use crate::table::data_files::ReadySegment;
use crate::table::env::Env;
use crate::table::fleet::intents::Carried;
use crate::table::held::HeldTable;
use crate::table::retention;

/// An append commit sent (or about to be), with what it needs when the answer comes.
pub(super) struct Sent {
    pub(super) request: CommitRequest,
    /// The version it was built on.
    pub(super) base: Table,
    pub(super) segments: Vec<ReadySegment>,
    pub(super) watermark: Option<(String, String)>,
    /// Snapshots it removes (snapshot retention), and the segment ids they list.
    pub(super) expire: retention::Plan,
    /// The files of this batch it references, and its manifest list.
    pub(super) files: Vec<String>,
    pub(super) manifest_list: String,
    /// The generation of the vended credentials its manifests were written with.
    pub(super) vended: Option<u64>,
    /// The fleet's intents it carries.
    pub(super) carried: Carried,
    /// When the window between the load (or the build) and the answer opened.
    pub(super) window_start: Instant,
    /// How many times it was sent again as it is.
    pub(super) resends: u32,
    /// An earlier send of this same request had an unknown outcome: it may have landed,
    /// whatever a later send is answered (a resend refused for a token that expired meanwhile
    /// says nothing of the first).
    pub(super) unknown: bool,
}

/// One phase of an append attempt's window, as `thadam_iceberg_commit_phase_seconds`: `load`
/// (the table, when the attempt loads it first), `build` (from the table held to the request:
/// what the table lacks, schema changes, the fleet's intents, the manifests and their merges)
/// and `answer` (the catalog's commit round trip). A fleet's 409s come from windows longer than
/// their slot, and which phase made them so is what to act on (a merge in `build`, a busy
/// catalog in `load` and `answer`).
pub(super) fn record_phase(table: &TableName, phase: &'static str, took: Duration) {
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
pub(super) struct RetentionProbe {
    /// The catalog refused `remove-snapshots`: this table keeps whatever the catalog keeps.
    pub(super) off: bool,
    /// The failure of the last attempt that carried `remove-snapshots`; the attempt now going
    /// without it tells whether it was the cause.
    pub(super) probing: Option<String>,
}

impl BatchCommit {
    /// Sends `sent` and takes what comes back: the landed commit, or its failure, classified
    /// once, here.
    pub(super) async fn send(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        sent: Sent,
        started: Instant,
        waiting: usize,
    ) -> Result<Outcome> {
        if sent.resends == 0 {
            metrics::histogram!("thadam_iceberg_commit_window_seconds", "table" => self.name.to_string())
                .record(sent.window_start.elapsed().as_secs_f64());
        }
        // From here on the files may be in the table: never deleted unless the catalog refuses.
        self.written.sent(&sent.files);
        match self.ask(env, &sent).await? {
            Ok(answer) => Ok(self.landed(env, held, sent, answer, started).await),
            Err(wire) => {
                let failure = classify(wire);
                self.not_landed(env, held, sent, failure, started, waiting)
                    .await
            }
        }
    }

    /// The catalog's answer to `sent`, and meanwhile what the next commit will need (see
    /// [`BatchCommit::reads_ahead_while_asked`]; nothing for a lone registrar). A stop
    /// abandons a commit in flight: safe, because whether it landed or not, the next start
    /// finds its keys (or not) in the table and does only what is missing; its files stay (they
    /// were marked sent).
    async fn ask(
        &mut self,
        env: Env<'_>,
        sent: &Sent,
    ) -> Result<std::result::Result<Table, CommitFailure>> {
        let mut shutdown = env.shutdown.clone();
        let warms = sent.resends == 0 && self.reads_ahead_while_asked();
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
        let warm = read_ahead_while_asked(&mut self.intents, warms, env, sent.base.metadata());
        tokio::select! {
            (a, ()) = async { tokio::join!(commit, warm) } => Ok(a),
            _ = shutdown.requested() => Err(Error::cancelled()),
        }
    }

    /// The append did not land: [`retry::decide`] says what next. A resend keeps what the
    /// attempt wrote; otherwise a refused attempt's files are deleted at once, an unknown
    /// outcome's never (nor those of a resend refused after an unknown outcome: the first send
    /// may have landed), and the retention probe is noted before the decision is carried out.
    async fn not_landed(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        sent: Sent,
        failure: Failure,
        started: Instant,
        waiting: usize,
    ) -> Result<Outcome> {
        if matches!(failure, Failure::Conflict(_)) {
            self.pacer
                .measured(sent.window_start.elapsed().as_secs_f64() * 1000.0);
        }
        let append = SentAppend {
            keyed: sent.request.idempotency_key().is_some(),
            resends: sent.resends,
            removes_snapshots: !sent.expire.snapshot_ids.is_empty(),
            probing: self.retention.probing.is_some(),
        };
        let decision = retry::decide(failure, &self.failed(env, Kind::Append, Some(append)));
        if let Step::Resend(delay) = decision.step {
            return Ok(self.resend_after(sent, decision.failure, delay, started));
        }
        if sent.unknown || matches!(decision.failure, Failure::Unknown(_)) {
            self.written.unknown();
            self.sent_unknown
                .extend(sent.segments.iter().map(|r| r.segment.seq));
        } else {
            self.written.refused(&sent.files, &sent.manifest_list);
        }
        self.delete_stale(&sent.base).await;
        match &decision.probe {
            Probe::Keep => {}
            Probe::Clear => self.retention.probing = None,
            Probe::Start(refusal) => self.retention.probing = Some(refusal.clone()),
        }
        self.conclude(env, held, decision, Kind::Append, started, waiting)
            .await
    }

    /// The same request again after `delay` (its outcome unknown under an `Idempotency-Key`, or
    /// it never left): the server replays its answer if the first one was applied.
    fn resend_after(
        &mut self,
        mut sent: Sent,
        failure: Failure,
        delay: Duration,
        started: Instant,
    ) -> Outcome {
        let (Failure::Unknown(e) | Failure::NotApplied(e)) = &failure else {
            return Outcome::RetryAfter(delay);
        };
        let what = format!("commit to table {}", self.name);
        let retry = self.retry.get_or_insert(Retry {
            counts: FailureCounts::default(),
            conflicted: false,
            at: Instant::now(),
            started,
            warned: false,
        });
        note_retry(Op::Append, e, retry.started, &mut retry.warned, &what);
        retry.at = Instant::now() + delay;
        tracing::warn!(
            table = %self.name,
            attempt = sent.resends,
            ?delay,
            idempotency_key = sent.request.idempotency_key().is_some(),
            "{what} did not complete ({e}); resending the same request"
        );
        sent.unknown |= matches!(failure, Failure::Unknown(_));
        sent.resends += 1;
        self.resend = Some(sent);
        Outcome::RetryAfter(delay)
    }

    /// What [`retry::decide`] needs to know of this table besides the failure.
    pub(super) fn failed<'e>(
        &self,
        env: Env<'e>,
        kind: Kind,
        sent: Option<SentAppend>,
    ) -> Failed<'e> {
        Failed {
            kind,
            sent,
            in_turn: self.commits_in_turn(),
            counts: self.retry.as_ref().map(|r| r.counts).unwrap_or_default(),
            policy: &env.config.retry,
            interval: self.pacer.interval(),
            unit: rand::random(),
        }
    }

    /// The append landed: the table takes the answer, the pace is set for the next batch, and
    /// what the batch wrote and the table does not reference is deleted.
    pub(super) async fn landed(
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
        self.carried_landed(env, held, &sent.carried).await;
        self.batch_over(held, Some(&sent.files)).await;
        Outcome::Landed {
            segments: sent.segments,
            started,
        }
    }

    /// After a failed schema commit, or an append that could not be built: what
    /// [`retry::decide`] says, carried out (see [`BatchCommit::conclude`]).
    pub(super) async fn give_up_or_retry(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        failure: Failure,
        kind: Kind,
        started: Instant,
        waiting: usize,
    ) -> Result<Outcome> {
        let decision = retry::decide(failure, &self.failed(env, kind, None));
        self.conclude(env, held, decision, kind, started, waiting)
            .await
    }

    /// Carries out a decision other than a resend: a deferral to this committer's next turn,
    /// a stop (giving up what the batch wrote), or the pause before a reload, noted as the
    /// batch's retry (when the next attempt may go).
    pub(super) async fn conclude(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        decision: Decision,
        kind: Kind,
        started: Instant,
        waiting: usize,
    ) -> Result<Outcome> {
        let Decision {
            step,
            counts,
            failure,
            ..
        } = decision;
        if kind == Kind::Append {
            metrics::counter!("thadam_iceberg_commits_total", "table" => self.name.to_string(), "outcome" => outcome_label(&failure))
                .increment(1);
        }
        let delay = match step {
            Step::Defer => return Ok(self.defer_to_next_turn(held, &failure).await),
            Step::Stop => {
                self.retry = None;
                self.batch_over(held, None).await;
                return Err(match failure {
                    Failure::Fatal(e) | Failure::Unknown(e) | Failure::NotApplied(e) => e,
                    Failure::Conflict(why) => Error::internal(why),
                });
            }
            Step::Reload(delay) | Step::Resend(delay) => delay,
        };
        self.note_failure(env, &failure, kind, delay, counts);
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

    /// Says what failed and that the table is reloaded (a conflict widens the pace; an outage
    /// counts as a retry and shows in the table's status).
    fn note_failure(
        &mut self,
        env: Env<'_>,
        failure: &Failure,
        kind: Kind,
        delay: Duration,
        counts: FailureCounts,
    ) {
        let (what, op) = match kind {
            Kind::Append => ("append", Op::Append),
            Kind::Schema => ("schema commit", Op::SchemaCommit),
        };
        match failure {
            // Another writer got there first: the table is free again.
            Failure::Conflict(why) => {
                if kind == Kind::Append {
                    self.pacer.conflicted();
                }
                tracing::info!(table = %self.name, ?delay, conflicts = counts.conflicts, "{what} conflicted ({why}); reloading and rebuilding");
            }
            Failure::Unknown(e) | Failure::NotApplied(e) => {
                count_retry(op, e.retry_cause());
                let before = counts.outages.saturating_sub(1);
                tracing::warn!(table = %self.name, attempt = before, ?delay, "{what} did not complete ({e}); reloading and reconciling");
                let shown = e.to_string();
                env.status
                    .update(&self.name.to_string(), |s| s.last_error = Some(shown));
            }
            Failure::Fatal(_) => {}
        }
    }

    /// The catalog refused `remove-snapshots`: retention is off for this table.
    pub(super) fn retention_refused(&mut self, refusal: &str) {
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

    /// Deletes the files the batch's attempts wrote that no commit references and none will
    /// (see `table::append::attempts`): a refused attempt's manifest list, replaced manifests.
    /// Best effort: a file that cannot be deleted is an orphan, never a wrong table.
    pub(super) async fn delete_stale(&mut self, table: &Table) {
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
