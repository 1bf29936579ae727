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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use iceberg::table::Table;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::catalog::access::{RefusalAction, on_refusal};
use crate::catalog::adapter::CommitAdapter;
use crate::catalog::{CommitError, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::footer::SegmentFooter;
use crate::protocol::messages::{CommitterMsg, FooterPoolMsg, FooterRequest, SchemaMergerMsg};
use crate::protocol::segment::UploadedSegment;
use crate::retry::{Op, conflict_backoff, retry_transient};
use crate::table::CommittedSet;
use crate::table::append::{ReadySegment, data_file, preparation_failure, prepare_append};
use crate::table::committed::{Decision, Mark, MarkState, SegmentId, fingerprint, live_file_ids};
use crate::table::quarantine::{
    Action, BadSegmentPolicy, Entry, Line, Resolution, action, is_about_the_file, now_ms,
    stops_table_only,
};

mod bad_segments;

pub struct Committer;

pub struct CommitterArgs {
    pub ctx: SharedContext,
    pub dataset: String,
    pub footer_pool: ActorRef<FooterPoolMsg>,
    pub merger: ActorRef<SchemaMergerMsg>,
}

/// The segments a committer holds, by catalog sequence number, with an index of their object
/// keys so that a replayed segment is recognised in O(1) however long the backlog is.
#[derive(Default)]
struct PendingQueue {
    by_seq: BTreeMap<u64, Pending>,
    /// Object key -> the seq holding it.
    keys: HashMap<String, u64>,
    /// How many are not `decided`, so that a committer with nothing undecided (the usual case)
    /// learns it in O(1) on every message instead of scanning its backlog.
    undecided: usize,
}

impl PendingQueue {
    fn holds(&self, segment: &UploadedSegment) -> bool {
        self.by_seq.contains_key(&segment.seq) || self.keys.contains_key(&segment.object_key)
    }

    /// The seq of the pending segment with this object key, if any.
    fn seq_of_key(&self, key: &str) -> Option<u64> {
        self.keys.get(key).copied()
    }

    fn get(&self, seq: &u64) -> Option<&Pending> {
        self.by_seq.get(seq)
    }

    fn insert(&mut self, pending: Pending) {
        self.keys
            .insert(pending.segment.object_key.clone(), pending.segment.seq);
        if !pending.decided {
            self.undecided += 1;
        }
        if let Some(old) = self.by_seq.insert(pending.segment.seq, pending)
            && !old.decided
        {
            self.undecided -= 1;
        }
    }

    fn remove(&mut self, seq: &u64) -> Option<Pending> {
        let removed = self.by_seq.remove(seq)?;
        if self.keys.get(&removed.segment.object_key) == Some(seq) {
            self.keys.remove(&removed.segment.object_key);
        }
        if !removed.decided {
            self.undecided -= 1;
        }
        Some(removed)
    }

    /// Marks every segment undecided (the committed set they were judged against changed).
    fn undecide_all(&mut self) {
        for p in self.by_seq.values_mut() {
            p.decided = false;
        }
        self.undecided = self.by_seq.len();
    }

    fn set_decided(&mut self, seq: &u64) {
        if let Some(p) = self.by_seq.get_mut(seq)
            && !p.decided
        {
            p.decided = true;
            self.undecided -= 1;
        }
    }

    fn get_mut(&mut self, seq: &u64) -> Option<&mut Pending> {
        self.by_seq.get_mut(seq)
    }

    fn len(&self) -> usize {
        self.by_seq.len()
    }
}

/// One segment waiting to be committed.
struct Pending {
    segment: UploadedSegment,
    /// False while a watermark that may cover it is unchecked (no footer is read meanwhile).
    decided: bool,
    read_requested: bool,
    /// The generation of the vended credentials its footer read was sent with, if any.
    read_generation: Option<u64>,
    footer: Option<Arc<SegmentFooter>>,
    /// When the committer took it (for `commit.linger`).
    arrived: Instant,
    /// Reads that found the object missing so far (re-read with backoff before quarantine).
    missing_reads: u32,
}

pub struct CommitterState {
    args: CommitterArgs,
    name: TableName,
    /// The table as of our last load or commit; `None` before it exists (create_table: true).
    table: Option<Table>,
    committed: CommittedSet,
    /// Segments not yet committed, in catalog order.
    pending: PendingQueue,
    reads_in_flight: usize,
    initialised: bool,
    /// A `LingerElapsed` message is scheduled.
    linger_armed: bool,
    /// Fingerprints of the latest segments seen, by seq, so that a watermark another writer of
    /// the same log just moved is checked without reading the log (bounded: [`RECENT`]).
    recent: BTreeMap<u64, SegmentId>,
    /// 409s in a row, for the backoff that lets the other writer through.
    conflicts: u32,
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
        Ok(CommitterState {
            args,
            name,
            table: None,
            committed: CommittedSet::default(),
            pending: PendingQueue::default(),
            reads_in_flight: 0,
            initialised: false,
            linger_armed: false,
            recent: BTreeMap::new(),
            conflicts: 0,
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
            CommitterMsg::Segment(segment) => {
                state.accept(segment);
                Ok(())
            }
            CommitterMsg::LingerElapsed => {
                state.linger_armed = false;
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
                        if let Some(p) = state.pending.get_mut(&seq) {
                            p.footer = Some(footer);
                            generation = p.read_generation;
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
        match result {
            Ok(()) => Ok(()),
            // Stopping: leave everything pending in the catalog.
            Err(e) if e.code() == ErrorCode::Cancelled => Ok(()),
            Err(e) if stops_table_only(state.ctx().config.on_bad_segment, e.code()) => {
                state.stop_table(&e);
                Ok(())
            }
            Err(e) => {
                state.report_error(&e);
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
        let loaded = retry_transient(Op::Load, ctx.retry(), &mut shutdown, &what, || {
            ctx.client.load_table(&self.name)
        })
        .await?
        .ok_or_else(Error::cancelled)?;
        match loaded {
            Some(table) => self.adopt(table),
            None if ctx.config.create_table => {
                tracing::info!(table = %self.name, "table absent; it will be created from the first segment's footer");
            }
            None => {
                return Err(Error::new(
                    ErrorCode::TableMissing,
                    format!(
                        "table {} does not exist in the catalog at {}; create it, or set \
                         create_table: true on sink {} to let the registrar create it",
                        self.name,
                        crate::catalog::redacted_url(&ctx.config.catalog_uri),
                        ctx.config.id
                    ),
                ));
            }
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
            self.committed.forget_live_files();
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

    fn accept(&mut self, segment: UploadedSegment) {
        let mut by_files = false;
        if let Some(entry) = self.quarantine_entry(&segment) {
            match &entry.resolution {
                // A later record of the key is quarantined: this one is superseded.
                None if entry.segment.seq > segment.seq => {
                    self.superseded(&segment, entry.segment.seq);
                    return;
                }
                None if entry.segment.seq == segment.seq => {
                    if entry.retry || self.policy() == BadSegmentPolicy::Stop {
                        by_files = true;
                    } else {
                        self.hold(segment);
                        return;
                    }
                }
                Some(Resolution::Discarded { .. }) if entry.segment.seq >= segment.seq => {
                    self.discarded(&segment);
                    return;
                }
                _ => {}
            }
        }
        // A later record of a held key supersedes it (the fix of a quarantined segment).
        if let Some(old) = self
            .held
            .iter()
            .find(|(seq, h)| h.object_key == segment.object_key && **seq < segment.seq)
            .map(|(seq, _)| *seq)
        {
            self.held.remove(&old);
            self.supersedes(old, &segment);
        }
        self.admit(segment, by_files);
    }

    /// Takes `segment` into the queue (or skips it when the table holds it); `by_files` for one
    /// that was quarantined.
    fn admit(&mut self, segment: UploadedSegment, by_files: bool) {
        let decision = if by_files {
            self.committed.decide_by_files(&segment)
        } else {
            self.committed.decide(&segment)
        };
        if decision == Decision::Registered {
            self.remember(&segment);
            self.skipped(&segment);
            return;
        }
        if let Some(seq) = self.pending.seq_of_key(&segment.object_key) {
            let differs = self.pending.get(&seq).is_some_and(|p| {
                seq < segment.seq
                    && (p.segment.file_size, p.segment.row_count)
                        != (segment.file_size, segment.row_count)
            });
            if !differs {
                // A feed may deliver a segment again (replay), or a writer record a batch twice:
                // the first copy is enough.
                return;
            }
            // A re-ship (new size, new row count): the latest record is the one registered.
            self.pending.remove(&seq);
            self.by_files.remove(&seq);
            self.supersedes(seq, &segment);
        }
        if self.pending.holds(&segment) {
            return;
        }
        if by_files {
            self.by_files.insert(segment.seq);
        }
        self.pending.insert(Pending {
            segment,
            decided: decision == Decision::Missing,
            read_requested: false,
            read_generation: None,
            footer: None,
            arrived: Instant::now(),
            missing_reads: 0,
        });
        self.publish_backlog();
    }

    /// The decision for a pending segment: by its file for one that was quarantined.
    fn decide(&self, segment: &UploadedSegment) -> Decision {
        if self.by_files.contains(&segment.seq) {
            self.committed.decide_by_files(segment)
        } else {
            self.committed.decide(segment)
        }
    }

    fn remember(&mut self, segment: &UploadedSegment) {
        self.recent.insert(segment.seq, fingerprint(segment));
        while self.recent.len() > RECENT {
            self.recent.pop_first();
        }
    }

    /// Decides every pending segment still waiting on an unchecked watermark: checks the
    /// watermarks of their catalogs against the log, lists the table's live data files if a
    /// diverged one leaves it open, and drops what the table already has.
    async fn decide_pending(&mut self) -> Result<()> {
        if self.pending.undecided == 0 {
            return Ok(());
        }
        let catalogs: BTreeSet<String> = self
            .pending
            .by_seq
            .values()
            .filter(|p| !p.decided)
            .filter_map(|p| p.segment.catalog_id.clone())
            .collect();
        self.check_watermarks(&catalogs).await?;
        let needs_live = self
            .pending
            .by_seq
            .values()
            .any(|p| !p.decided && self.decide(&p.segment) == Decision::NeedsLiveFiles);
        if needs_live {
            self.list_live_files().await?;
        }
        let mut registered = Vec::new();
        let mut missing = Vec::new();
        for (seq, p) in self.pending.by_seq.iter().filter(|(_, p)| !p.decided) {
            match self.decide(&p.segment) {
                Decision::Registered => registered.push(*seq),
                Decision::Missing => missing.push(*seq),
                other => {
                    return Err(Error::internal(format!(
                        "segment seq {seq} still undecided ({other:?}) after its watermarks were checked"
                    )));
                }
            }
        }
        for seq in missing {
            self.pending.set_decided(&seq);
        }
        for seq in registered {
            if let Some(p) = self.pending.remove(&seq) {
                self.remember(&p.segment);
                self.skipped(&p.segment);
            }
        }
        self.publish_backlog();
        Ok(())
    }

    /// Checks the unchecked watermarks of `catalogs` against the records this committer has
    /// seen, or else against the feed's history (one streaming pass over the log).
    async fn check_watermarks(&mut self, catalogs: &BTreeSet<String>) -> Result<()> {
        for catalog in catalogs {
            let marks = self.committed.unchecked(catalog);
            if marks.is_empty() {
                continue;
            }
            let mut unknown: Vec<Mark> = Vec::new();
            for mark in marks {
                let local = self
                    .pending
                    .by_seq
                    .get(&mark.seq)
                    .filter(|p| p.segment.catalog_id.as_deref() == Some(catalog.as_str()))
                    .map(|p| fingerprint(&p.segment))
                    .or_else(|| self.recent.get(&mark.seq).copied());
                match local {
                    Some(fp) => self.settle(&mark, Some(fp)),
                    None => unknown.push(mark),
                }
            }
            if unknown.is_empty() {
                continue;
            }
            let Some(history) = self.ctx().history.clone() else {
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
    async fn list_live_files(&mut self) -> Result<()> {
        let Some(table) = self.table.clone() else {
            self.committed.set_live_files(HashSet::new());
            return Ok(());
        };
        let prefix = format!("s3://{}/", self.ctx().config.url.bucket);
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        let what = format!("listing the data files of {}", self.name);
        let ids = retry_transient(Op::Load, ctx.retry(), &mut shutdown, &what, || {
            live_file_ids(&table, &prefix)
        })
        .await?
        .ok_or_else(Error::cancelled)?;
        tracing::info!(table = %self.name, files = ids.len(), "listed the table's live data files");
        self.committed.set_live_files(ids);
        Ok(())
    }

    fn skipped(&mut self, segment: &UploadedSegment) {
        tracing::debug!(table = %self.name, key = %segment.object_key, "already registered; skipping");
        self.by_files.remove(&segment.seq);
        self.warn_reship(segment);
        self.resolve_registered(segment);
        metrics::counter!("thadam_iceberg_duplicates_skipped_total", "table" => self.name.to_string())
            .increment(1);
        let seq = segment.seq;
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.skipped += 1;
            s.last_seq = Some(s.last_seq.map_or(seq, |l| l.max(seq)));
        });
    }

    fn publish_backlog(&self) {
        let backlog = self.pending.len() as u64;
        let held = self.held.len() as u64;
        metrics::gauge!("thadam_iceberg_backlog_segments", "table" => self.name.to_string())
            .set(backlog as f64);
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.backlog = backlog;
            s.quarantined = held;
        });
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
            self.commit_batch(batch).await?;
        }
    }

    fn request_footers(&mut self, myself: &ActorRef<CommitterMsg>) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let limit = ctx.tuning.reads_per_table.max(1);
        let access = ctx.client.access(&self.name);
        let bucket = &ctx.config.url.bucket;
        for (seq, p) in self.pending.by_seq.iter_mut() {
            if self.reads_in_flight >= limit {
                break;
            }
            if p.read_requested || !p.decided {
                continue;
            }
            // The credentials vended for this object's URI (a key no URI can hold is refused
            // by the read itself).
            let vended = access.as_ref().and_then(|a| {
                let uri = crate::store::object_uri(bucket, &p.segment.object_key).ok()?;
                a.for_uri(&uri).map(|c| (a.generation(), c))
            });
            let (store, generation) = match vended {
                Some((generation, creds)) => (
                    Some(creds.footer_store(&ctx.config.store, bucket)?),
                    Some(generation),
                ),
                None => (None, None),
            };
            p.read_requested = true;
            p.read_generation = generation;
            self.reads_in_flight += 1;
            self.args
                .footer_pool
                .cast(FooterPoolMsg::Read(FooterRequest {
                    seq: *seq,
                    object_key: p.segment.object_key.clone(),
                    file_size: p.segment.file_size,
                    store,
                    reply_to: myself.clone(),
                }))
                .map_err(|_| Error::internal("the footer pool has stopped"))?;
        }
        Ok(())
    }

    /// The longest prefix (in catalog order) whose footers are in, within `commit.max_segments`
    /// and `commit.max_bytes`, if it should be committed now. A full batch goes at once. One that
    /// is not full waits while the next segment's footer is already on its way (waiting adds
    /// batch size, not latency), and otherwise for at most `commit.linger` after its oldest
    /// segment arrived (a timer message wakes the committer then).
    fn ready_batch(&mut self, myself: &ActorRef<CommitterMsg>) -> Vec<ReadySegment> {
        let ctx = Arc::clone(&self.args.ctx);
        let (max, max_bytes) = (ctx.max_segments(), ctx.max_bytes());
        let mut batch = Vec::new();
        let mut bytes = 0u64;
        let mut full = false;
        let mut next_in_flight = false;
        for p in self.pending.by_seq.values() {
            let Some(footer) = &p.footer else {
                next_in_flight = p.read_requested;
                break;
            };
            let size = p.segment.file_size;
            if batch.len() >= max || (!batch.is_empty() && bytes + size > max_bytes) {
                full = true;
                break;
            }
            bytes += size;
            batch.push(ReadySegment {
                segment: p.segment.clone(),
                footer: Arc::clone(footer),
            });
        }
        full |= batch.len() >= max || bytes >= max_bytes;
        if batch.is_empty() || full {
            return batch;
        }
        if next_in_flight {
            return Vec::new();
        }
        let linger = ctx.linger();
        let oldest = self
            .pending
            .by_seq
            .values()
            .next()
            .map(|p| p.arrived.elapsed());
        if let Some(waited) = oldest.filter(|w| *w < linger) {
            if !self.linger_armed {
                self.linger_armed = true;
                myself.send_after(linger - waited, || CommitterMsg::LingerElapsed);
            }
            return Vec::new();
        }
        batch
    }

    /// Makes the table ready for every file of the batch (creation, schema evolution), then
    /// appends the batch, retrying until it is in the table or the error is fatal. Whenever the
    /// table it builds on changes (a reload, a creation another registrar won, a schema commit
    /// that brought other writers' snapshots along), the batch is filtered again first.
    async fn commit_batch(&mut self, batch: Vec<ReadySegment>) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        let mut attempt: u32 = 0;
        let started = std::time::Instant::now();
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
            let append = prepare_append(
                &table,
                &ctx.config.url.bucket,
                &ctx.writer_id(),
                &todo,
                watermark.as_ref(),
                &[],
            )?;
            let vended = self.vended_generation(&table);
            let key = uuid::Uuid::new_v4().to_string();
            let adapter = CommitAdapter::new(ctx.client.clone(), self.name.clone(), Some(key));
            // A stop abandons a commit in flight: safe, because whether it landed or not, the
            // next start finds its keys (or not) in the table and does only what is missing.
            let outcome = tokio::select! {
                outcome = async {
                    let commit = append.build().await?;
                    adapter.commit_prepared(commit.updates, commit.requirements).await
                } => outcome,
                _ = shutdown.requested() => return Err(Error::cancelled()),
            };
            let failure = match outcome {
                Ok(new_table) => {
                    self.conflicts = 0;
                    self.vended_worked(vended);
                    self.committed_ok(new_table, &todo, watermark.as_ref(), started);
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
            let outcome_label = match &failure {
                CommitError::Conflict(_) => "conflict",
                CommitError::Unknown(_) => "unknown_state",
                CommitError::NotApplied(_) => "failed",
                CommitError::Fatal(_) => "fatal",
            };
            metrics::counter!("thadam_iceberg_commits_total", "table" => self.name.to_string(), "outcome" => outcome_label)
                .increment(1);
            match failure {
                CommitError::Fatal(e) => return Err(e),
                CommitError::Conflict(why) => {
                    // Another writer got there first. Back off a little, with jitter, so that
                    // writers contending for one table take turns instead of colliding again.
                    let delay = conflict_backoff(self.conflicts, ctx.retry().max, rand::random());
                    self.conflicts = self.conflicts.saturating_add(1);
                    tracing::info!(table = %self.name, ?delay, "append conflicted ({why}); reloading and rebuilding");
                    if !shutdown.sleep(delay).await {
                        return Err(Error::cancelled());
                    }
                }
                CommitError::Unknown(e) | CommitError::NotApplied(e) => {
                    crate::retry::count_retry(Op::Append, e.retry_cause());
                    tracing::warn!(table = %self.name, attempt, "append did not complete ({e}); reloading and reconciling");
                    self.ctx().status.update(&self.name.to_string(), |s| {
                        s.last_error = Some(e.to_string())
                    });
                    // The server's Retry-After, when it sent one, instead of the backoff.
                    let delay = crate::retry::delay_for(ctx.retry(), attempt, &e);
                    if !shutdown.sleep(delay).await {
                        return Err(Error::cancelled());
                    }
                    attempt = attempt.saturating_add(1);
                }
            }
            self.reload(&mut shutdown).await?;
        }
    }

    /// The segments of `batch` the table does not hold yet, after checking any watermark the
    /// current table version brought. Those it holds leave the queue as skipped.
    async fn still_missing(&mut self, batch: &[ReadySegment]) -> Result<Vec<ReadySegment>> {
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

    /// Brings the table to a schema that covers every file of the batch (created if absent).
    /// A file that cannot be taken for a reason about the file ([`is_about_the_file`]) is the
    /// inner error, with its seq.
    async fn reconcile_schema(
        &mut self,
        batch: &[ReadySegment],
    ) -> Result<std::result::Result<(), (u64, Error)>> {
        let mut last_schema: Option<&arrow_schema::SchemaRef> = None;
        for r in batch {
            // Consecutive segments usually share a schema: reconcile each distinct one once.
            if last_schema.is_some_and(|s| s == &r.footer.arrow_schema) {
                continue;
            }
            last_schema = Some(&r.footer.arrow_schema);
            if self.table.is_some() && self.accepted.contains(&r.footer.arrow_schema) {
                continue;
            }
            if self.table.is_none() && !self.ctx().config.create_table {
                return Err(self.table_missing());
            }
            let table = self.table.clone();
            let table = self
                .args
                .merger
                .call(
                    |reply| SchemaMergerMsg::Reconcile {
                        table_name: self.name.clone(),
                        dataset: self.args.dataset.clone(),
                        table,
                        footer: Arc::clone(&r.footer),
                        reply,
                    },
                    None,
                )
                .await
                .map_err(|e| Error::internal(format!("the schema merger is gone: {e}")))?;
            let table = match table {
                ractor::rpc::CallResult::Success(Ok(table)) => table,
                ractor::rpc::CallResult::Success(Err(e)) if is_about_the_file(e.code()) => {
                    return Ok(Err((r.segment.seq, e)));
                }
                ractor::rpc::CallResult::Success(Err(e)) => return Err(e),
                _ => return Err(Error::internal("the schema merger did not answer")),
            };
            let unchanged = self.table.as_ref().is_some_and(|t| {
                t.metadata_location() == table.metadata_location()
                    && t.metadata().current_snapshot_id() == table.metadata().current_snapshot_id()
            });
            if !unchanged {
                // A created table, or a schema commit's answer: either may hold snapshots other
                // writers added since the batch was filtered.
                self.adopt(table);
            }
            if self.accepted.len() >= ACCEPTED_SCHEMAS {
                self.accepted.clear();
            }
            self.accepted.push(Arc::clone(&r.footer.arrow_schema));
        }
        Ok(Ok(()))
    }

    /// The generation of the vended credentials `table`'s FileIO signs with (those vended for
    /// its location with the last load), if the catalog vends any.
    fn vended_generation(&self, table: &Table) -> Option<u64> {
        let access = self.ctx().client.access(&self.name)?;
        access
            .for_table_files(table.metadata().location())
            .map(|_| access.generation())
    }

    fn vended_generation_of_current(&self) -> Option<u64> {
        self.table.as_ref().and_then(|t| self.vended_generation(t))
    }

    /// A request with vended credentials of `generation` succeeded: they are good.
    fn vended_worked(&mut self, generation: Option<u64>) {
        if generation.is_some() && self.reloaded_for_refusal == generation {
            self.reloaded_for_refusal = None;
        }
    }

    /// A footer read failed. S3 refusing vended credentials is answered by [`Self::vended_refused`]
    /// and the read is requested again; anything else stops the service as before.
    async fn footer_failed(
        &mut self,
        myself: &ActorRef<CommitterMsg>,
        seq: u64,
        e: Error,
    ) -> Result<()> {
        let Some(pending) = self.pending.get(&seq) else {
            // Superseded by a later record of its key while the read was in flight.
            return Ok(());
        };
        if let Some(attempt) = missing_reread(self.policy(), e.code(), pending.missing_reads) {
            // Under quarantine a missing object is read again a few times first: an upload the
            // catalog recorded a moment early, or a store that lists late, is not a bad file.
            let delay = crate::retry::delay_for(&self.ctx().config.retry, attempt, &e);
            crate::retry::count_retry(Op::Footer, "object_missing");
            tracing::info!(
                table = %self.name, seq, ?delay,
                "{}; reading it again before quarantining it", e.message()
            );
            if let Some(p) = self.pending.get_mut(&seq) {
                // `read_requested` stays set: nothing asks again until the delay is over.
                p.missing_reads += 1;
            }
            myself.send_after(delay, move || CommitterMsg::RereadFooter { seq });
            return Ok(());
        }
        let generation = pending.read_generation;
        let (Some(generation), ErrorCode::AuthFailed) = (generation, e.code()) else {
            return self.bad_segment(seq, e).await;
        };
        let key = self
            .pending
            .get_mut(&seq)
            .map(|p| p.segment.object_key.clone())
            .unwrap_or_default();
        self.vended_refused(generation, &format!("reading the footer of {key}"))
            .await?;
        if let Some(p) = self.pending.get_mut(&seq) {
            p.read_requested = false;
            p.read_generation = None;
        }
        Ok(())
    }

    /// S3 refused (401/403) a request `what` made with the vended credentials of `generation`:
    /// reload the table once for fresh ones ([`on_refusal`]); a refusal of those is fatal.
    async fn vended_refused(&mut self, generation: u64, what: &str) -> Result<()> {
        let Some(current) = self.ctx().client.access(&self.name) else {
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
                let mut shutdown = self.ctx().shutdown.clone();
                self.reload(&mut shutdown).await?;
                self.reloaded_for_refusal =
                    self.ctx().client.access(&self.name).map(|a| a.generation());
                Ok(())
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
    async fn renew_if_due(&mut self) -> Result<()> {
        let Some(access) = self.ctx().client.access(&self.name) else {
            return Ok(());
        };
        let now = chrono::Utc::now().timestamp_millis();
        let due =
            |a: &crate::catalog::access::TableAccess| a.renew_at_ms().is_some_and(|at| now >= at);
        if !due(&access) || self.renewal_exhausted == Some(access.generation()) {
            return Ok(());
        }
        tracing::info!(
            table = %self.name,
            "the S3 credentials the catalog vended for the table expire soon; reloading the table \
             for fresh ones"
        );
        let mut shutdown = self.ctx().shutdown.clone();
        self.reload(&mut shutdown).await?;
        if let Some(fresh) = self.ctx().client.access(&self.name)
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

    fn table_missing(&self) -> Error {
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

    async fn reload(&mut self, shutdown: &mut crate::shutdown::Shutdown) -> Result<()> {
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

    fn committed_ok(
        &mut self,
        table: Table,
        batch: &[ReadySegment],
        watermark: Option<&(String, String)>,
        started: std::time::Instant,
    ) {
        let name = self.name.to_string();
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
        let rows: u64 = batch.iter().map(|r| r.footer.row_count()).sum();
        let bytes: u64 = batch.iter().map(|r| r.footer.object_size).sum();
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        for r in batch {
            self.pending.remove(&r.segment.seq);
            let lag = now_ms.saturating_sub(r.segment.uploaded_at_ms) as f64 / 1000.0;
            metrics::histogram!("thadam_iceberg_registration_lag_seconds", "table" => name.clone())
                .record(lag);
        }
        metrics::counter!("thadam_iceberg_commits_total", "table" => name.clone(), "outcome" => "ok")
            .increment(1);
        metrics::counter!("thadam_iceberg_segments_registered_total", "table" => name.clone())
            .increment(batch.len() as u64);
        metrics::counter!("thadam_iceberg_data_files_registered_total", "table" => name.clone())
            .increment(batch.len() as u64);
        metrics::counter!("thadam_iceberg_rows_registered_total", "table" => name.clone())
            .increment(rows);
        metrics::counter!("thadam_iceberg_registered_bytes_total", "table" => name.clone())
            .increment(bytes);
        metrics::histogram!("thadam_iceberg_commit_duration_seconds", "table" => name.clone())
            .record(started.elapsed().as_secs_f64());
        metrics::gauge!("thadam_iceberg_last_commit_timestamp_seconds", "table" => name.clone())
            .set(now_ms as f64 / 1000.0);
        let max_seq = batch.iter().map(|r| r.segment.seq).max();
        let oldest_upload = batch.iter().map(|r| r.segment.uploaded_at_ms).min();
        let backlog = self.pending.len() as u64;
        self.ctx().status.update(&name, |s| {
            s.lag_ms = oldest_upload.map(|u| now_ms.saturating_sub(u));
            s.registered += batch.len() as u64;
            s.commits += 1;
            s.backlog = backlog;
            s.last_commit_ms = Some(now_ms);
            s.last_error = None;
            if let Some(m) = max_seq {
                s.last_seq = Some(s.last_seq.map_or(m, |l| l.max(m)));
            }
        });
        metrics::gauge!("thadam_iceberg_backlog_segments", "table" => name.clone())
            .set(backlog as f64);
        tracing::info!(table = %name, segments = batch.len(), rows, "registered");
    }

    /// Stops this table alone (see [`stops_table_only`]): reported in the status board (and so
    /// `/readyz`), in `thadam_iceberg_table_stopped`, and in the log; the memory its waiting
    /// segments held is released (they stay in the segment catalog, for the next start).
    fn stop_table(&mut self, e: &Error) {
        self.stopped = true;
        tracing::error!(
            table = %self.name,
            code = %e.code(),
            "table stopped, the other tables go on (on_bad_segment: quarantine): {}; fix it and \
             restart the registrar",
            e.message()
        );
        metrics::gauge!("thadam_iceberg_table_stopped", "table" => self.name.to_string()).set(1.0);
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.last_error = Some(e.to_string());
            s.stopped = Some(e.to_string());
        });
        self.pending = PendingQueue::default();
        self.held.clear();
        self.by_files.clear();
        self.publish_backlog();
    }

    fn report_error(&self, e: &Error) {
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.last_error = Some(e.to_string())
        });
    }
}

/// How many times a missing object is read again (with backoff) under `quarantine` before it is
/// quarantined. Under `stop` a missing object is fatal at once, as the spec says.
const MISSING_REREADS: u32 = 3;

/// Whether a footer read that failed with `code`, after `reads` earlier misses, is read again;
/// `Some(attempt)` numbers the backoff.
fn missing_reread(policy: BadSegmentPolicy, code: ErrorCode, reads: u32) -> Option<u32> {
    (policy == BadSegmentPolicy::Quarantine
        && code == ErrorCode::ObjectMissing
        && reads < MISSING_REREADS)
        .then_some(reads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_object_is_read_again_three_times_under_quarantine_only() {
        use BadSegmentPolicy::{Quarantine, Stop};
        let missing = ErrorCode::ObjectMissing;
        assert_eq!(missing_reread(Quarantine, missing, 0), Some(0));
        assert_eq!(missing_reread(Quarantine, missing, 2), Some(2));
        assert_eq!(missing_reread(Quarantine, missing, 3), None);
        assert_eq!(missing_reread(Stop, missing, 0), None);
        assert_eq!(
            missing_reread(Quarantine, ErrorCode::FooterInvalid, 0),
            None
        );
    }

    fn segment(seq: u64, key: &str) -> UploadedSegment {
        UploadedSegment {
            seq,
            dataset: "telemetry".into(),
            segment_id: format!("s{seq}"),
            object_key: key.into(),
            file_size: 1,
            row_count: 1,
            uploaded_at_ms: 0,
            catalog_id: None,
        }
    }

    fn pending(s: UploadedSegment) -> Pending {
        Pending {
            segment: s,
            decided: true,
            read_requested: false,
            read_generation: None,
            footer: None,
            arrived: Instant::now(),
            missing_reads: 0,
        }
    }

    #[test]
    fn a_replayed_segment_is_recognised_by_seq_or_key_until_removed() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(2, "a")));
        assert!(q.holds(&segment(2, "a")));
        assert!(q.holds(&segment(9, "a")), "same key under another seq");
        assert!(q.holds(&segment(2, "b")), "same seq");
        assert!(!q.holds(&segment(3, "b")));
        assert!(q.remove(&2).is_some());
        assert!(!q.holds(&segment(2, "a")), "the key index follows removals");
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_later_record_of_a_key_takes_over_its_index() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(5, "k")));
        assert_eq!(q.seq_of_key("k"), Some(5));
        q.remove(&5);
        q.insert(pending(segment(21, "k")));
        assert_eq!(q.seq_of_key("k"), Some(21));
        // Removing a seq that no longer owns the key leaves the key's owner indexed.
        q.insert(pending(segment(30, "k")));
        q.remove(&21);
        assert_eq!(q.seq_of_key("k"), Some(30));
    }

    #[test]
    fn the_undecided_count_follows_inserts_decisions_and_removals() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(1, "a")));
        let mut p = pending(segment(2, "b"));
        p.decided = false;
        q.insert(p);
        assert_eq!(q.undecided, 1);
        q.undecide_all();
        assert_eq!(q.undecided, 2);
        q.set_decided(&1);
        q.set_decided(&1);
        assert_eq!(q.undecided, 1, "deciding twice counts once");
        q.remove(&2);
        assert_eq!(q.undecided, 0);
        q.remove(&1);
        assert_eq!(q.undecided, 0);
    }
}
