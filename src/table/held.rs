//! The version of a table a committer holds, and everything derived from it: the committed set
//! (which segments the table has), the file schemas already reconciled with it, the fingerprints
//! of segments lately found in it, which segments are judged by their files, and the state of
//! the S3 access the catalog gave with it. One owner, [`HeldTable`]; it changes only by
//! [`HeldTable::load`] (the one load sequence, also used through [`load`] by the schema merger),
//! [`HeldTable::take_version`] (a newer version from a creation or a schema commit) and
//! [`HeldTable::landed`] (our own commit's answer).
//!
//! A watermark is used only once it has been checked against the log the committer reads (see
//! `table::committed`): segments it would cover wait, undecided, until then.
//!
//! When the catalog vends S3 credentials with the table (or signs for it, `catalog::access`),
//! footer reads and manifest writes use them; they are renewed by a reload shortly before they
//! expire, and once more when S3 refuses them (a refusal of the fresh ones is `auth.failed`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use arrow_schema::SchemaRef;
use iceberg::spec::TableMetadataBuilder;
use iceberg::table::Table;

use crate::catalog::TableName;
use crate::catalog::access::{RefusalAction, TableAccess, on_refusal};
use crate::catalog::rest::Loaded;
use crate::error::{Error, Result};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, ReportTo, retry_transient};
use crate::table::committed::{
    CommittedSet, Decision, Mark, MarkState, SegmentId, fingerprint, live_file_ids,
};
use crate::table::env::Env;
use crate::table::summary_keys::SEGMENT_IDS;

/// How many distinct file schemas are remembered as reconciled.
const ACCEPTED_SCHEMAS: usize = 64;

/// How many recent fingerprints are kept.
pub(crate) const RECENT: usize = 4096;

/// The fingerprint of the record at a seq of a log, when the committer holds that record (to
/// check a watermark without reading the log).
pub(crate) type LocalRecords<'a> = &'a (dyn Fn(u64, &str) -> Option<SegmentId> + Sync);

/// Loads `name` from the catalog, retrying transient failures (reported to the table's status
/// entry); `Ok(None)` when the table does not exist. A stop while waiting is `cancelled`.
pub(crate) async fn load(env: Env<'_>, name: &TableName) -> Result<Option<Table>> {
    retrying(env, name, || env.client.load_table(name)).await
}

/// [`load`] with the history cut to the current snapshot's chain, up to `chain` snapshots (see
/// `catalog::rest::recent`), and every snapshot's [`SEGMENT_IDS`].
async fn load_recent(env: Env<'_>, name: &TableName, chain: usize) -> Result<Option<Loaded>> {
    retrying(env, name, || {
        env.client.load_recent(name, chain, SEGMENT_IDS)
    })
    .await
}

/// Runs `load` until it succeeds, retrying transient failures (see [`load`]).
async fn retrying<T, F, Fut>(env: Env<'_>, name: &TableName, load: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let mut shutdown = env.shutdown.clone();
    let table = name.to_string();
    let report = Some(ReportTo {
        board: env.status,
        table: &table,
    });
    let what = format!("loading table {name}");
    retry_transient(
        Op::Load,
        &env.config.retry,
        &mut shutdown,
        &what,
        report,
        load,
    )
    .await?
    .ok_or_else(Error::cancelled)
}

/// The table a committer holds (see the module docs).
pub(crate) struct HeldTable {
    name: TableName,
    /// The table as of our last load or commit; `None` before it exists (create_table: true).
    table: Option<Table>,
    committed: CommittedSet,
    /// File schemas already reconciled with this table (cleared when the table is replaced).
    /// The table only ever evolves compatibly, so a file that fit an earlier version of it still
    /// fits: re-merging it against the evolved table would take an older file (int) for a
    /// narrowing of the column it promoted (long), e.g. after a reload mid-batch.
    accepted: Vec<SchemaRef>,
    /// Fingerprints of the latest segments found in the table, by seq, so that a watermark
    /// another writer of the same log just moved is checked without reading the log (bounded:
    /// [`RECENT`]).
    recent: BTreeMap<u64, SegmentId>,
    /// Seqs of segments that were quarantined: decided by their files, never by a watermark
    /// (see `table::quarantine`).
    by_files: HashSet<u64>,
    /// The version held lacks its history: [`HeldTable::thin`] dropped every snapshot but the
    /// current one. A commit is never built on it (the committer loads first).
    thin: bool,
    /// The generation of vended credentials a reload made after S3 refused the previous ones
    /// brought, until a request with it succeeds: a refusal of these is final.
    reloaded_for_refusal: Option<u64>,
    /// A generation that was already due for renewal when it arrived (the catalog vends
    /// credentials that expire within the margin): not renewed again, used until refused.
    renewal_exhausted: Option<u64>,
}

impl HeldTable {
    pub(crate) fn new(name: TableName) -> Self {
        HeldTable {
            name,
            table: None,
            committed: CommittedSet::default(),
            accepted: Vec::new(),
            recent: BTreeMap::new(),
            by_files: HashSet::new(),
            thin: false,
            reloaded_for_refusal: None,
            renewal_exhausted: None,
        }
    }

    pub(crate) fn table(&self) -> Option<&Table> {
        self.table.as_ref()
    }

    /// Identifies the version held: its metadata location and current snapshot.
    pub(crate) fn version(&self) -> Option<(String, Option<i64>)> {
        self.table.as_ref().map(|t| {
            (
                t.metadata_location().unwrap_or_default().to_string(),
                t.metadata().current_snapshot_id(),
            )
        })
    }

    /// Loads the table and takes it. An absent table is fatal unless `create_table` (then
    /// nothing is held until it is created); `while_running`: it was held before (a reload), so
    /// its absence means it was dropped.
    pub(crate) async fn load(&mut self, env: Env<'_>, while_running: bool) -> Result<()> {
        match load(env, &self.name).await? {
            Some(table) => self.take_version(table),
            None => self.absent(env, while_running)?,
        }
        Ok(())
    }

    /// The load found no table: nothing is held until it is created (`create_table`), else
    /// the table is missing; `while_running`: it was held before, so it was dropped.
    fn absent(&mut self, env: Env<'_>, while_running: bool) -> Result<()> {
        if !env.config.create_table {
            return Err(env.table_missing(&self.name, while_running));
        }
        if !while_running {
            tracing::info!(table = %self.name, "table absent; it will be created from the first segment's footer");
        }
        self.table = None;
        self.thin = false;
        self.committed = CommittedSet::default();
        Ok(())
    }

    /// [`HeldTable::load`] for a node that will not build on what it loads: the history comes cut
    /// to the current snapshot's chain, up to `chain` snapshots (what the node's view of the
    /// fleet reads, `Pacer::read_lanes`), and the version held is thin ([`HeldTable::thin`]).
    /// The committed set is rebuilt from every snapshot's segments all the same. A node the
    /// fleet carries loads at each fallback, and parsing whole histories there grew with the
    /// table (see `catalog::rest::recent`).
    pub(crate) async fn load_recent(&mut self, env: Env<'_>, chain: usize) -> Result<()> {
        match load_recent(env, &self.name, chain).await? {
            Some(Loaded {
                table,
                values: Some(values),
            }) => {
                self.forget_if_replaced(&table);
                self.committed.refresh_with(
                    values.iter().map(String::as_str),
                    table.metadata().properties(),
                );
                self.table = Some(table);
                self.thin = true;
            }
            Some(Loaded {
                table,
                values: None,
            }) => self.take_version(table),
            None => self.absent(env, true)?,
        }
        Ok(())
    }

    /// Takes a newer version of the table (a load, a creation, a schema commit's answer), and
    /// rebuilds the committed set from it: another writer may have added snapshots or moved a
    /// watermark. Verdicts on unchanged watermarks are kept.
    pub(crate) fn take_version(&mut self, table: Table) {
        self.forget_if_replaced(&table);
        self.committed.refresh(table.metadata());
        self.table = Some(table);
        self.thin = false;
    }

    /// Forgets what only the table held could answer when `table` replaced it (another table
    /// took its name).
    fn forget_if_replaced(&mut self, table: &Table) {
        let same_table = self
            .table
            .as_ref()
            .is_some_and(|t| t.metadata().uuid() == table.metadata().uuid());
        if !same_table {
            self.committed.forget_replaced_table();
            self.accepted.clear();
        }
    }

    /// Our append of `segments` landed, with `watermark` raised: `answer` is the commit's answer.
    /// It was built on the version we held (the commit asserted its snapshot), so its snapshots
    /// rebuild to our set plus this batch: only the properties are read again. `expired` are the
    /// segment ids of the snapshots the same commit removed (the set stays as large as the
    /// snapshots the table keeps).
    pub(crate) fn landed(
        &mut self,
        answer: Table,
        segments: &[&UploadedSegment],
        watermark: Option<&(String, String)>,
        expired: &[SegmentId],
    ) {
        self.committed.record(segments.iter().copied(), watermark);
        self.committed.refresh_marks(answer.metadata().properties());
        self.table = Some(answer);
        self.thin = false;
        for segment in segments {
            self.remember(segment);
            self.by_files.remove(&segment.seq);
        }
        self.committed.forget(expired);
    }

    /// Drops the history of the version held: every snapshot but the current one, with its
    /// summary. A node the fleet carries holds its table between loads a fallback apart (two
    /// minutes at a thousand nodes), and holds it only to publish on (its schema, partition
    /// spec, location and FileIO) and to judge segments by the committed set, which was
    /// rebuilt from the whole version when it was taken. The snapshots were the bulk of what it
    /// held: a fleet's snapshot summaries name every segment and carried watermark (3 MB per
    /// node at 600 snapshots of a 300-node fleet, all of them in memory at once in a process
    /// that hosts the fleet). The version stays the same ([`HeldTable::version`]); what needs
    /// the history (a commit's build, snapshot retention, the answer's check) runs only on a
    /// whole version: the next attempt that may commit loads first ([`HeldTable::is_thin`]).
    /// Best effort: a version iceberg cannot rebuild without them stays whole.
    pub(crate) fn thin(&mut self) {
        // Not only once: a table loaded with its recent history (`HeldTable::load_recent`) is
        // thin already, but holds that history until it is dropped here.
        let Some(table) = &self.table else {
            return;
        };
        let metadata = table.metadata();
        let current = metadata.current_snapshot_id();
        let history: Vec<i64> = metadata
            .snapshots()
            .map(|s| s.snapshot_id())
            .filter(|id| Some(*id) != current)
            .collect();
        let Some(location) = table.metadata_location().filter(|_| !history.is_empty()) else {
            return;
        };
        let thinned = TableMetadataBuilder::new_from_metadata(metadata.clone(), None)
            .remove_snapshots(&history)
            .build()
            .and_then(|built| {
                Table::builder()
                    .identifier(table.identifier().clone())
                    .metadata(built.metadata)
                    .metadata_location(location)
                    .file_io(table.file_io().clone())
                    .runtime(iceberg::Runtime::current())
                    .build()
            });
        match thinned {
            Ok(thinned) => {
                self.table = Some(thinned);
                self.thin = true;
            }
            Err(error) => {
                tracing::debug!(table = %self.name, %error, "the table held stays whole");
            }
        }
    }

    /// Whether the version held was thinned ([`HeldTable::thin`]): it must be loaded again
    /// before a commit is built on it.
    pub(crate) fn is_thin(&self) -> bool {
        self.thin
    }

    /// Whether the table holds the segment of `id`, by the ids alone (see `CommittedSet`).
    pub(crate) fn holds_id(&self, id: &SegmentId) -> bool {
        self.committed.holds_id(id)
    }

    /// Whether a trusted watermark of segment log `catalog` covers `seq`.
    pub(crate) fn covered(&self, catalog: &str, seq: u64) -> bool {
        self.committed.covered(catalog, seq)
    }

    /// Our commit that landed carried these segments of other nodes (fleet intents).
    pub(crate) fn record_carried(&mut self, ids: &[SegmentId]) {
        self.committed.record_ids(ids);
    }

    /// The watermark property and value an append of `segments` raises (see `CommittedSet`).
    pub(crate) fn watermark_update(
        &mut self,
        segments: &[&UploadedSegment],
    ) -> Option<(String, String)> {
        self.committed.watermark_update(segments)
    }

    /// Judges `seq` by its file from now on (it was quarantined).
    pub(crate) fn judge_by_files(&mut self, seq: u64) {
        self.by_files.insert(seq);
    }

    /// `seq` left the queue: no judgement of it is kept.
    pub(crate) fn forget_seq(&mut self, seq: u64) {
        self.by_files.remove(&seq);
    }

    /// The table stopped: nothing pending is judged any more.
    pub(crate) fn forget_all_seqs(&mut self) {
        self.by_files.clear();
    }

    /// Whether the table holds `segment`, arriving now (`by_files`: it was quarantined, and is
    /// judged by its file).
    pub(crate) fn judge_arrival(&self, segment: &UploadedSegment, by_files: bool) -> Decision {
        if by_files {
            self.committed.decide_by_files(segment)
        } else {
            self.committed.decide(segment)
        }
    }

    /// Whether the table holds `segment` (by its file for one that was quarantined).
    pub(crate) fn judge(&self, segment: &UploadedSegment) -> Decision {
        if self.by_files.contains(&segment.seq) {
            self.committed.decide_by_files(segment)
        } else {
            self.committed.decide(segment)
        }
    }

    /// Remembers a segment the table holds (registered, or found registered): its record's
    /// fingerprint by seq (for watermark checks) and its key (for a later re-ship of it).
    pub(crate) fn remember(&mut self, segment: &UploadedSegment) {
        self.committed.note_registered(segment);
        self.recent.insert(segment.seq, fingerprint(segment));
        while self.recent.len() > RECENT {
            self.recent.pop_first();
        }
    }

    /// Decides what `segments` still leave open: checks the unchecked watermarks of their logs,
    /// and lists the table's live data files when a diverged one leaves a segment open. `local`
    /// gives the fingerprint of the record at a seq of a log, when the committer holds it.
    pub(crate) async fn settle_watermarks<'s>(
        &mut self,
        env: Env<'_>,
        segments: impl Iterator<Item = &'s UploadedSegment> + Clone,
        local: LocalRecords<'_>,
    ) -> Result<()> {
        let catalogs: BTreeSet<String> = segments
            .clone()
            .filter_map(|s| s.catalog_id.clone())
            .collect();
        self.check_watermarks(env, &catalogs, local).await?;
        if segments
            .into_iter()
            .any(|s| self.judge(s) == Decision::NeedsLiveFiles)
        {
            self.list_live_files(env).await?;
        }
        Ok(())
    }

    /// Checks the unchecked watermarks of `catalogs` against the records the committer holds
    /// (`local`) or lately found registered, or else against the feed's history (one streaming
    /// pass over the log).
    async fn check_watermarks(
        &mut self,
        env: Env<'_>,
        catalogs: &BTreeSet<String>,
        local: LocalRecords<'_>,
    ) -> Result<()> {
        for catalog in catalogs {
            let marks = self.committed.unchecked(catalog);
            if marks.is_empty() {
                continue;
            }
            let mut unknown: Vec<Mark> = Vec::new();
            for mark in marks {
                match local(mark.seq, catalog).or_else(|| self.recent.get(&mark.seq).copied()) {
                    Some(fp) => self.settle(&mark, Some(fp)),
                    None => unknown.push(mark),
                }
            }
            if unknown.is_empty() {
                continue;
            }
            let Some(history) = env.history.cloned() else {
                // The feed promises its catalog ids never reuse a seq: take them as written.
                for mark in unknown {
                    self.committed.settle(&mark, MarkState::Trusted);
                }
                continue;
            };
            let seqs: Vec<u64> = unknown.iter().map(|m| m.seq).collect();
            let id = catalog.clone();
            let found = tokio::task::spawn_blocking(move || history.uploaded_at(&id, &seqs))
                .await
                .map_err(|e| {
                    Error::internal(format!("reading the segment catalog failed: {e}"))
                        .with_source(e)
                })??;
            for mark in unknown {
                let fp = found.get(&mark.seq).map(fingerprint);
                self.settle(&mark, fp);
            }
        }
        Ok(())
    }

    /// Settles `mark` given the fingerprint of the record at its seq in our log (`None`: the log
    /// has no such record).
    fn settle(&mut self, mark: &Mark, record: Option<SegmentId>) {
        if record.is_some() && record == mark.fingerprint {
            self.committed.settle(mark, MarkState::Trusted);
            return;
        }
        tracing::warn!(
            table = %self.name,
            property = %mark.key,
            seq = mark.seq,
            "the segment catalog has diverged from the history this watermark was written for \
             (restored from a backup, cloned, or rewritten): it is not trusted; segments are \
             checked against the snapshot summaries and the table's live data files instead, and \
             this log's registrations go under a watermark of their own"
        );
        metrics::counter!("thadam_iceberg_watermark_diverged_total", "table" => self.name.to_string())
            .increment(1);
        self.committed.settle(mark, MarkState::Diverged);
    }

    /// Lists the object keys of the table's live data files (one pass over the current
    /// snapshot's manifests): only needed when a diverged watermark leaves open whether a
    /// segment it would have covered is in the table (its snapshot may have been expired).
    async fn list_live_files(&mut self, env: Env<'_>) -> Result<()> {
        let Some(table) = self.table.clone() else {
            self.committed.set_live_files(HashSet::new());
            return Ok(());
        };
        let prefix = format!("s3://{}/", env.config.url.bucket);
        let mut shutdown = env.shutdown.clone();
        let what = format!("listing the data files of {}", self.name);
        let ids = retry_transient(
            Op::Load,
            &env.config.retry,
            &mut shutdown,
            &what,
            None,
            || live_file_ids(&table, &prefix),
        )
        .await?
        .ok_or_else(Error::cancelled)?;
        tracing::info!(table = %self.name, files = ids.len(), "listed the table's live data files");
        self.committed.set_live_files(ids);
        Ok(())
    }

    /// Whether a file with `schema` was reconciled with this table already.
    pub(crate) fn fits(&self, schema: &SchemaRef) -> bool {
        self.table.is_some() && self.accepted.contains(schema)
    }

    /// A file with `schema` was reconciled with this table.
    pub(crate) fn accept(&mut self, schema: &SchemaRef) {
        if self.accepted.len() >= ACCEPTED_SCHEMAS {
            self.accepted.clear();
        }
        self.accepted.push(Arc::clone(schema));
    }

    /// The generation of the vended credentials the held table's FileIO signs with (those
    /// vended for its location with the last load), if the catalog vends any.
    pub(crate) fn vended_generation(&self, env: Env<'_>) -> Option<u64> {
        let table = self.table.as_ref()?;
        let access = env.client.access(&self.name)?;
        access
            .for_table_files(table.metadata().location())
            .map(|_| access.generation())
    }

    /// A request with vended credentials of `generation` succeeded: they are good.
    pub(crate) fn vended_worked(&mut self, generation: Option<u64>) {
        if generation.is_some() && self.reloaded_for_refusal == generation {
            self.reloaded_for_refusal = None;
        }
    }

    /// S3 refused (401/403) a request `what` made with the vended credentials of `generation`:
    /// reload the table once for fresh ones ([`on_refusal`]); a refusal of those is fatal.
    pub(crate) async fn vended_refused(
        &mut self,
        env: Env<'_>,
        generation: u64,
        what: &str,
    ) -> Result<()> {
        let Some(current) = env.client.access(&self.name) else {
            // The catalog stopped vending since: the store settings apply to the next attempt.
            return Ok(());
        };
        match on_refusal(generation, current.generation(), self.reloaded_for_refusal) {
            RefusalAction::Retry => Ok(()),
            RefusalAction::Reload => {
                tracing::warn!(
                    table = %self.name,
                    "S3 refused the credentials the catalog vended for the table ({what}); \
                     reloading the table for fresh ones"
                );
                self.load(env, true).await?;
                self.reloaded_for_refusal = env.client.access(&self.name).map(|a| a.generation());
                Ok(())
            }
            RefusalAction::Fatal if current.has_remote_signing() => {
                Err(Error::auth_failed(format!(
                    "table {}: S3 access through the catalog (its vended credentials or its remote \
                 signer) was refused ({what}), and again after a reload; check that the \
                 catalog's signer may sign for the table's location (the registrar's url must \
                 lie inside it, and for writes inside the catalog's warehouse), that the keys \
                 the catalog signs with may read and write there, and that store.endpoint / \
                 store.region name the store the catalog signs for (the store section's keys \
                 are not used while the catalog gives access)",
                    self.name
                )))
            }
            RefusalAction::Fatal => Err(Error::auth_failed(format!(
                "table {}: S3 refused the credentials vended by the catalog for this table \
                 ({what}), and again the fresh ones of a reload; check the catalog's credential \
                 vending for the table's location (the role or storage profile it uses, and that \
                 it may read and write there), and that store.endpoint / store.region name the \
                 store those credentials are for (the store section's keys are not used while \
                 the catalog vends credentials)",
                self.name
            ))),
        }
    }

    /// Reloads the table for fresh vended credentials when those it holds are about to expire
    /// ([`crate::catalog::access::renew_at_ms`]). Credentials that are due already when they
    /// arrive are not renewed again: they are used until S3 refuses them.
    pub(crate) async fn renew_if_due(&mut self, env: Env<'_>) -> Result<()> {
        let Some(access) = env.client.access(&self.name) else {
            return Ok(());
        };
        let now = chrono::Utc::now().timestamp_millis();
        let due = |a: &TableAccess| a.renew_at_ms().is_some_and(|at| now >= at);
        if !due(&access) || self.renewal_exhausted == Some(access.generation()) {
            return Ok(());
        }
        tracing::info!(
            table = %self.name,
            "the S3 credentials the catalog vended for the table expire soon; reloading the table \
             for fresh ones"
        );
        self.load(env, true).await?;
        if let Some(fresh) = env.client.access(&self.name)
            && due(&fresh)
        {
            tracing::warn!(
                table = %self.name,
                "the catalog vended credentials for the table that expire within the renewal \
                 margin (or have expired); using them until S3 refuses them"
            );
            self.renewal_exhausted = Some(fresh.generation());
        }
        Ok(())
    }
}
