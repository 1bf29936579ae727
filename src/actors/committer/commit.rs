//! The commit of one batch, and its retry loop: filter the batch against the table as it is now,
//! make the table ready for its files (schema), append, and on a conflict or an unknown outcome
//! reload and start again, so that a segment is never appended twice whatever happened to the
//! previous attempt.

use std::collections::BTreeSet;
use std::sync::Arc;

use iceberg::table::Table;

use super::CommitterState;
use crate::catalog::CommitError;
use crate::catalog::adapter::CommitAdapter;
use crate::catalog::commit_retry::{Failures, Next, after_failure, outcome_label};
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, retry_transient};
use crate::table::CommittedSet;
use crate::table::append::{ReadySegment, data_file, preparation_failure, prepare_append};
use crate::table::committed::Decision;
use crate::table::quarantine::is_about_the_file;

impl CommitterState {
    /// Makes the table ready for every file of the batch (creation, schema evolution), then
    /// appends the batch, retrying until it is in the table or the error is fatal. Whenever the
    /// table it builds on changes (a reload, a creation another registrar won, a schema commit
    /// that brought other writers' snapshots along), the batch is filtered again first.
    pub(super) async fn commit_batch(&mut self, batch: Vec<ReadySegment>) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        // Outages count per batch; conflicts across batches until a commit succeeds.
        let mut failures = Failures {
            conflicts: self.conflicts,
            outages: 0,
        };
        let started = std::time::Instant::now();
        self.last_commit = Some(started);
        loop {
            let todo = self.still_missing(&batch).await?;
            if todo.is_empty() {
                self.publish_backlog();
                return Ok(());
            }
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
            let segments: Vec<&UploadedSegment> = todo.iter().map(|r| &r.segment).collect();
            let watermark = self.committed.watermark_update(&segments);
            // Snapshot retention rides on the append (metadata only; see table::retention).
            let expire = ctx
                .config
                .snapshot_retention
                .map_or_else(Default::default, |policy| {
                    let name = self.name.to_string();
                    crate::table::retention::plan(
                        &name,
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
            )?;
            let vended = self.vended_generation(&table);
            let key = uuid::Uuid::new_v4().to_string();
            let adapter = CommitAdapter::new(ctx.client.clone(), self.name.clone(), Some(key));
            // A stop abandons a commit in flight: safe, because whether it landed or not, the
            // next start finds its keys (or not) in the table and does only what is missing.
            let outcome = tokio::select! {
                outcome = async {
                    let commit = append.build().await?;
                    adapter.commit_prepared(commit.updates, commit.requirements, &table).await
                } => outcome,
                _ = shutdown.requested() => return Err(Error::cancelled()),
            };
            let failure = match outcome {
                Ok(new_table) => {
                    self.conflicts = 0;
                    self.vended_worked(vended);
                    self.committed_ok(new_table, &todo, watermark.as_ref(), started);
                    // The set stays as large as the snapshots the table keeps.
                    self.committed.forget(&expire.segment_ids);
                    return Ok(());
                }
                Err(e) => match adapter.take_failure() {
                    Some(failure) => failure,
                    None => {
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
                        failure
                    }
                },
            };
            metrics::counter!("thadam_iceberg_commits_total", "table" => self.name.to_string(), "outcome" => outcome_label(&failure))
                .increment(1);
            let before = failures;
            let (next, after) = after_failure(&failure, failures, ctx.retry(), rand::random());
            failures = after;
            self.conflicts = failures.conflicts;
            let Next::Reload { delay } = next else {
                return Err(match failure {
                    CommitError::Fatal(e)
                    | CommitError::Unknown(e)
                    | CommitError::NotApplied(e) => e,
                    CommitError::Conflict(why) => Error::internal(why),
                });
            };
            match &failure {
                // Another writer got there first: the jittered pause lets writers contending
                // for one table take turns instead of colliding again.
                CommitError::Conflict(why) => {
                    tracing::info!(table = %self.name, ?delay, "append conflicted ({why}); reloading and rebuilding");
                }
                CommitError::Unknown(e) | CommitError::NotApplied(e) => {
                    crate::runtime::retry::count_retry(Op::Append, e.retry_cause());
                    tracing::warn!(table = %self.name, attempt = before.outages, ?delay, "append did not complete ({e}); reloading and reconciling");
                    self.ctx().status.update(&self.name.to_string(), |s| {
                        s.last_error = Some(e.to_string())
                    });
                }
                CommitError::Fatal(_) => {}
            }
            if !shutdown.sleep(delay).await {
                return Err(Error::cancelled());
            }
            self.reload(&mut shutdown).await?;
        }
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
                Decision::Missing => todo.push(r.clone()),
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
        let ctx = self.ctx();
        Error::new(
            ErrorCode::TableMissing,
            format!(
                "table {} does not exist in the catalog at {} (it was dropped while the registrar \
                 ran, or never created); create it, or set create_table: true on sink {} to let \
                 the registrar create it",
                self.name, ctx.config.catalog_uri, ctx.config.id
            ),
        )
    }

    pub(super) async fn reload(
        &mut self,
        shutdown: &mut crate::runtime::shutdown::Shutdown,
    ) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let what = format!("reloading table {}", self.name);
        let table = retry_transient(Op::Load, ctx.retry(), shutdown, &what, || {
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
        started: std::time::Instant,
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
