//! What a node of a fleet does at the transaction's named points (see `table::fleet`): a node
//! that does not take turns publishes its batch and leaves it to the committer, a committer with
//! nothing of its own still carries, and a node waiting for its slot publishes meanwhile. A lone
//! registrar passes through each of these without doing anything.

use std::sync::Arc;

use iceberg::spec::TableMetadata;
use iceberg::table::Table;

use std::collections::HashSet;

use super::{Attempt, BatchCommit, Outcome, Schemas};
use crate::protocol::messages::SchemaReconciled;
use crate::protocol::segment::UploadedSegment;
use crate::table::append::producer::prepare_append;
use crate::table::append::retry::Failure;
use crate::table::committed::{Decision, SegmentId};
use crate::table::data_files::ReadySegment;
use crate::table::env::Env;
use crate::table::fleet::intents::MarkRaise;
use crate::table::fleet::intents::{Carried, Intents};
use crate::table::fleet::roll_call;
use crate::table::held::HeldTable;

impl BatchCommit {
    /// Before anything is loaded: an idle committer's turn goes on only if there are intents to
    /// carry (see [`BatchCommit::carries_when_idle`]); a node that does not take turns checks
    /// the schemas of its batch against the table held, publishes what the table takes as it
    /// is, and leaves it to the committers without a load (see `defers_unloaded`). `Some`: the
    /// attempt ends here.
    pub(super) async fn before_load(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        batch: &[ReadySegment],
    ) -> Option<Outcome> {
        if let Some(outcome) = self.roll_call(env, held, schemas, batch).await {
            return Some(outcome);
        }
        if batch.is_empty() && self.nothing_failed() {
            self.read_intents_ahead(env, held).await;
            if !self.intents.prefetched_any() {
                self.pacer.deferred();
                return Some(Outcome::Deferred);
            }
        }
        if self.pacer.fallback_ms().is_some() {
            self.accept_fitting(held, schemas, batch).await;
        }
        if self.defers_unloaded(env, held, batch).await {
            self.pacer.deferred();
            return Some(self.no_commit(held, Outcome::Deferred).await);
        }
        None
    }

    /// The roll call at this node's start (see `fleet::roll_call`): its first attempt, on a
    /// table that could be a fleet's with no committer at work, publishes the batch and ends
    /// (`Some`); the next, [`roll_call::HOLD`] later, lists the intents and notes the lanes that
    /// answered, and goes on as their turns say. A batch the table cannot take as it is (a
    /// creation, a schema change) goes the usual way, without a roll call.
    async fn roll_call(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        schemas: &dyn Schemas,
        batch: &[ReadySegment],
    ) -> Option<Outcome> {
        if self.pacer.roll_pending() {
            let roll = match held.table() {
                Some(table) => {
                    let uuid = table.metadata().uuid().to_string();
                    let listed = self
                        .intents
                        .roll_call(env.store, &env.config.url, &uuid)
                        .await;
                    roll_call::answered(&listed)
                }
                None => roll_call::Roll::default(),
            };
            self.pacer.roll_answered(&roll);
            return None;
        }
        let calls = !batch.is_empty()
            && self.nothing_failed()
            && self.intents.may_publish()
            && held
                .table()
                .is_some_and(|table| self.pacer.calls_roll(table.metadata()));
        if !calls {
            self.pacer.no_roll_call();
            return None;
        }
        self.accept_fitting(held, schemas, batch).await;
        self.publish_run(env, held, batch).await;
        if !batch
            .iter()
            .any(|r| self.intents.is_published(r.segment.seq))
        {
            self.pacer.no_roll_call();
            return None;
        }
        self.pacer.roll_called();
        Some(self.no_commit(held, Outcome::Deferred).await)
    }

    /// Right before a load: writes what the attempt needs on the version held (the new files'
    /// manifest; merges on a batch's first attempt), so that the merge stays outside the window
    /// between the load and the commit, and reads the fleet's intents ahead. A node that does not
    /// take turns does neither: most of its attempts leave everything to the committers, and a
    /// listing each would read every other node's intents (N² reads a fleet), a merge each
    /// would be thrown away (the build writes, `gather` lists, if it commits after all).
    pub(super) async fn ahead_of_load(
        &mut self,
        env: Env<'_>,
        held: &HeldTable,
        batch: &[ReadySegment],
    ) {
        if self.pacer.fallback_ms().is_some() {
            return;
        }
        self.write_ahead_of_load(env, held, batch).await;
        if !batch.is_empty() && self.intents.lists(self.pacer.slotted()) {
            self.read_intents_ahead(env, held).await;
        }
    }

    /// After the filter, on the table as it is now: this node's published segments the table
    /// holds were carried by others (noted in `at.carried`); and a node that does not take
    /// turns may leave `todo` to the committers (see [`Self::leaves_to_committers`]), which
    /// ends the attempt. `None` for a lone registrar, which has nothing published.
    pub(super) async fn after_filter(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        todo: &[ReadySegment],
        at: &mut Attempt,
    ) -> Option<Outcome> {
        at.carried.extend(self.carried_by_others(env, held).await);
        if self.leaves_to_committers(env, held, todo).await {
            self.pacer.deferred();
            return Some(self.no_commit(held, Outcome::Deferred).await);
        }
        None
    }

    /// The seqs of this node's published segments that the table now holds: another node
    /// carried them (done intents are forgotten and deleted). None for a node with nothing
    /// published.
    async fn carried_by_others(&mut self, env: Env<'_>, held: &HeldTable) -> HashSet<u64> {
        let Some(table) = held.table().filter(|_| self.intents.has_own()).cloned() else {
            return HashSet::new();
        };
        let holds = |id: &SegmentId| held.holds_id(id);
        let covered = |log: &str, seq: u64| held.covered(log, seq);
        self.intents
            .carried_by_others(env.store, &table, &holds, &covered)
            .await
    }

    /// Whether an attempt with nothing of this node's own goes on: a committer of a fleet
    /// still carries the others' intents (and ends it in the build if there are none).
    pub(super) fn goes_on_empty(&self, held: &HeldTable) -> bool {
        self.commits_in_turn() && held.table().is_some()
    }

    /// The fleet's intents the commit of `todo` on `table` carries (see `intents::select`), and
    /// this node's own that it withdraws (their segments go as new files): nothing unless this
    /// node lists the intents.
    pub(super) async fn carries(
        &mut self,
        env: Env<'_>,
        held: &HeldTable,
        table: &Table,
        todo: &[ReadySegment],
        watermark: Option<&(String, String)>,
    ) -> Carried {
        if !self.intents.lists(self.pacer.slotted()) {
            return Carried::default();
        }
        let holds = |id: &SegmentId| held.holds_id(id);
        self.intents
            .gather(
                env.store,
                &env.config.url,
                table,
                todo,
                &holds,
                watermark.map(|(p, _)| p.as_str()),
                env.config.commit.max_segments,
                env.now_ms(),
            )
            .await
    }

    /// Notes the file schemas of `batch` that the table held takes as it is (no creation, no
    /// schema change), in order, up to the first that it does not: only what the table can take
    /// is published. A node that committed before knows them already; one just started (a
    /// restart into a fleet) asks the schema merger, which reads nothing.
    pub(super) async fn accept_fitting(
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
        self.nothing_failed() && self.commits_in_turn()
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
    pub(super) async fn published_within(
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
    pub(super) async fn defers_unloaded(
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
            || !self.nothing_failed()
            || held.table().is_none()
            || !self.pacer.view_holds_for(fallback.saturating_mul(3) / 2)
        {
            return false;
        }
        self.published_within(env, held, batch, fallback).await
    }

    /// Whether this node reads the intents published meanwhile while the catalog answers its
    /// commit (see `Intents::warm`): the fleet's sole committer, whose next commit follows this
    /// one. Nodes taking turns commit again a cycle later, and a lone registrar lists none.
    pub(super) fn reads_ahead_while_asked(&self) -> bool {
        self.intents.on() && self.pacer.sole_committer()
    }

    /// A commit that carried intents landed: the carried ids are noted in the committed set,
    /// and the intents done with are deleted (see `Intents::landed`).
    pub(super) async fn carried_landed(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        carried: &Carried,
    ) {
        if carried.is_empty() {
            return;
        }
        held.record_carried(&carried.ids);
        if let Some(table) = held.table().cloned() {
            self.intents
                .landed(env.store, &table, carried, env.now_ms())
                .await;
        }
    }

    /// Whether this node commits in turns with the fleet's other committers: a conflicted
    /// append then waits for its next turn (see `retry::decide`).
    pub(super) fn commits_in_turn(&self) -> bool {
        self.intents.on() && self.pacer.commits_in_turn()
    }

    /// An append of a node that commits in turns failed with `failure` (a conflict): retrying
    /// at once would be in the next committer's slot, and start a cascade, so the batch waits
    /// for this node's next turn, its segments published for the fleet meanwhile.
    pub(super) async fn defer_to_next_turn(
        &mut self,
        held: &HeldTable,
        failure: &Failure,
    ) -> Outcome {
        self.pacer.conflicted();
        self.pacer.deferred();
        self.retry = None;
        self.batch_over(held, None).await;
        if let Failure::Conflict(why) = failure {
            tracing::info!(table = %self.name, "append conflicted ({why}); committing again in this node's next turn, what it holds published for the fleet meanwhile");
        }
        Outcome::Deferred
    }

    /// Whether a batch waiting for this node's slot may be published now (see [`Self::publish`]).
    pub(crate) fn may_publish(&self) -> bool {
        self.nothing_failed() && self.intents.may_publish() && self.pacer.slotted()
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
    pub(super) async fn publish_run(
        &mut self,
        env: Env<'_>,
        held: &mut HeldTable,
        batch: &[ReadySegment],
    ) {
        // Callers publish only where someone will carry the run: a fleet that takes turns
        // (`publish`, a node the committers carry), or a roll call.
        if !self.intents.may_publish() {
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

    /// Lists the fleet's intents and reads ahead the manifests of those the next commit will
    /// carry, on the version of the table held (see `Intents::prefetch`).
    pub(super) async fn read_intents_ahead(&mut self, env: Env<'_>, held: &HeldTable) {
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
    pub(super) async fn write_ahead_of_load(
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
}

/// While the catalog answers a commit built on `base`: reads the intents published meanwhile (see
/// [`BatchCommit::reads_ahead_while_asked`]), when `warms`. A function of the intents alone, so
/// that it runs beside the commit, which borrows the rest of the transaction.
pub(super) async fn read_ahead_while_asked(
    intents: &mut Intents,
    warms: bool,
    env: Env<'_>,
    base: &TableMetadata,
) {
    if warms {
        intents
            .warm(env.store, &env.config.url, base, env.now_ms())
            .await;
    }
}
