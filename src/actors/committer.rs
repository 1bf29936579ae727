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
use crate::io::footer::SegmentFooter;
use crate::protocol::messages::{
    CommitterMsg, FooterPoolMsg, FooterRequest, SchemaMergerMsg, SegmentPermit,
};
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, conflict_backoff, retry_transient};
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
    /// How many hold their footer, and its decoded size summed: the footer window
    /// ([`footer_window`]) counts what arrived and is not committed yet, not only reads in flight.
    footers: usize,
    footer_bytes: u64,
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
        self.count_in(&pending);
        if let Some(old) = self.by_seq.insert(pending.segment.seq, pending) {
            self.count_out(&old);
        }
    }

    fn remove(&mut self, seq: &u64) -> Option<Pending> {
        let removed = self.by_seq.remove(seq)?;
        if self.keys.get(&removed.segment.object_key) == Some(seq) {
            self.keys.remove(&removed.segment.object_key);
        }
        self.count_out(&removed);
        Some(removed)
    }

    fn count_in(&mut self, p: &Pending) {
        if !p.decided {
            self.undecided += 1;
        }
        if p.footer.is_some() {
            self.footers += 1;
            self.footer_bytes += p.footer_bytes;
        }
    }

    fn count_out(&mut self, p: &Pending) {
        if !p.decided {
            self.undecided -= 1;
        }
        if p.footer.is_some() {
            self.footers -= 1;
            self.footer_bytes -= p.footer_bytes;
        }
    }

    /// Stores the footer read for `seq` (if it is still pending, and has none yet).
    fn set_footer(&mut self, seq: &u64, footer: Arc<SegmentFooter>) -> Option<&Pending> {
        let p = self.by_seq.get_mut(seq)?;
        if p.footer.is_none() {
            p.footer_bytes = footer_size(&footer);
            p.footer = Some(footer);
            self.footers += 1;
            self.footer_bytes += p.footer_bytes;
        }
        Some(p)
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
    /// The decoded size of `footer` ([`footer_size`]), once it is in.
    footer_bytes: u64,
    /// Its share of the `memory.segments` budget, given back when it leaves the queue (`None`
    /// for a quarantined segment taken back on the operator's retry: it gave its share back
    /// when it was quarantined).
    _permit: Option<SegmentPermit>,
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
    /// A `PaceElapsed` message is scheduled (`commit.min_interval`).
    pace_armed: bool,
    /// When the last append commit started (`commit.min_interval` counts from it).
    last_commit: Option<Instant>,
    /// The decoded size of the latest footer read: what a read in flight is expected to add.
    footer_estimate: u64,
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
            pace_armed: false,
            last_commit: None,
            footer_estimate: DEFAULT_FOOTER_ESTIMATE,
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

    fn accept(&mut self, segment: UploadedSegment, permit: SegmentPermit) {
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
        self.admit(segment, by_files, Some(permit));
    }

    /// Takes `segment` into the queue (or skips it when the table holds it); `by_files` for one
    /// that was quarantined. `permit` is its share of the memory budget, released when it
    /// leaves the queue.
    fn admit(&mut self, segment: UploadedSegment, by_files: bool, permit: Option<SegmentPermit>) {
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
            footer_bytes: 0,
            _permit: permit,
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

    /// Asks the footer pool for the footers of the next waiting segments, in catalog order, while
    /// the table's footer window has room ([`footer_window`]): footers held and reads in flight
    /// together stay within `2 x commit.max_segments` (so the next batch is read while one
    /// commits) and within the table's share of `memory.footer_bytes`. The oldest segment
    /// without a footer is asked for even when later footers fill the window, so a table never
    /// waits on its own later footers.
    fn request_footers(&mut self, myself: &ActorRef<CommitterMsg>) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let window = FooterWindow {
            count: ctx.footer_window(),
            bytes: ctx.footer_bytes_per_table(),
        };
        let access = ctx.client.access(&self.name);
        let bucket = &ctx.config.url.bucket;
        let mut head = true;
        let mut footers_before = 0;
        for (seq, p) in self.pending.by_seq.iter_mut() {
            if p.footer.is_some() || p.read_requested || !p.decided {
                // An undecided segment waits for its watermark check (`decide_pending`), not for
                // the window: later ones may be read meanwhile. Past the first segment without a
                // footer (read in flight, or undecided), none is the oldest any more.
                head &= p.footer.is_some();
                footers_before += usize::from(p.footer.is_some());
                continue;
            }
            let held = Held {
                footers: self.pending.footers,
                bytes: self.pending.footer_bytes,
                in_flight: self.reads_in_flight,
                estimate: self.footer_estimate,
            };
            // The oldest segment without a footer is read whatever the window when footers
            // after it fill the window: they cannot be committed before it (footers before it
            // are the ready batch, which leaves by itself).
            let forced = head && footers_before < self.pending.footers;
            if !forced && !window.has_room(held) {
                break;
            }
            head = false;
            // The credentials vended for this object's URI (a key no URI can hold is refused
            // by the read itself).
            let vended = access.as_ref().and_then(|a| {
                let uri = crate::io::store::object_uri(bucket, &p.segment.object_key).ok()?;
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
    /// and `commit.max_bytes`, if it should be committed now ([`batch_decision`]). A full batch
    /// goes at once. One that is not full waits while the next segment's footer is already on
    /// its way (waiting adds batch size, not latency), and otherwise for at most `commit.linger`
    /// after its oldest segment arrived. Either waits for `commit.min_interval` after the last
    /// commit started. Timer messages wake the committer. Nothing is cloned unless it commits.
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
        let since_commit = self.last_commit.map(|t| now.duration_since(t));
        let decision = batch_decision(
            &prefix,
            &limits,
            oldest_waited,
            ctx.linger(),
            since_commit,
            ctx.config.commit.min_interval,
        );
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

    /// Makes the table ready for every file of the batch (creation, schema evolution), then
    /// appends the batch, retrying until it is in the table or the error is fatal. Whenever the
    /// table it builds on changes (a reload, a creation another registrar won, a schema commit
    /// that brought other writers' snapshots along), the batch is filtered again first.
    async fn commit_batch(&mut self, batch: Vec<ReadySegment>) -> Result<()> {
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        let mut attempt: u32 = 0;
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
                    adapter.commit_prepared(commit.updates, commit.requirements).await
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
                    crate::runtime::retry::count_retry(Op::Append, e.retry_cause());
                    tracing::warn!(table = %self.name, attempt, "append did not complete ({e}); reloading and reconciling");
                    self.ctx().status.update(&self.name.to_string(), |s| {
                        s.last_error = Some(e.to_string())
                    });
                    // The server's Retry-After, when it sent one, instead of the backoff.
                    let delay = crate::runtime::retry::delay_for(ctx.retry(), attempt, &e);
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
            let delay = crate::runtime::retry::delay_for(&self.ctx().config.retry, attempt, &e);
            crate::runtime::retry::count_retry(Op::Footer, "object_missing");
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

    async fn reload(&mut self, shutdown: &mut crate::runtime::shutdown::Shutdown) -> Result<()> {
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

/// The decoded size a footer read in flight is expected to add before any footer of the table
/// has arrived (a narrow table's footer decodes to a few KB).
const DEFAULT_FOOTER_ESTIMATE: u64 = 16 << 10;

/// What a footer holds in memory: its decoded Parquet metadata and the Arrow schema derived from
/// it (estimated from the field count).
fn footer_size(footer: &SegmentFooter) -> u64 {
    let schema = footer.arrow_schema.fields().len() as u64 * 256;
    footer.metadata.memory_size() as u64 + schema
}

/// A table's footer window: the most footers held (arrived, not committed) plus reads in
/// flight, and the most decoded footer bytes, a read in flight counting as `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FooterWindow {
    count: usize,
    bytes: u64,
}

/// What a table holds against its footer window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    footers: usize,
    bytes: u64,
    in_flight: usize,
    estimate: u64,
}

impl FooterWindow {
    /// Whether one more read may start.
    fn has_room(&self, held: Held) -> bool {
        let count = held.footers + held.in_flight;
        let bytes = held
            .bytes
            .saturating_add(held.estimate.saturating_mul(held.in_flight as u64 + 1));
        count < self.count && bytes <= self.bytes
    }
}

/// `commit.max_segments` and `commit.max_bytes`.
#[derive(Debug, Clone, Copy)]
struct BatchLimits {
    max_segments: usize,
    max_bytes: u64,
}

/// The ready prefix of a table's queue: segments whose footers are in, from the oldest.
#[derive(Debug, Clone, Copy, Default)]
struct Prefix {
    segments: usize,
    bytes: u64,
    /// The batch limits stopped it (more ready segments follow).
    full: bool,
    /// The footer of the first segment after it is being read.
    next_in_flight: bool,
}

impl Prefix {
    /// Whether a segment of `size` bytes still fits (a lone oversized one always does).
    fn admits(&self, limits: &BatchLimits, size: u64) -> bool {
        self.segments < limits.max_segments
            && (self.segments == 0 || self.bytes.saturating_add(size) <= limits.max_bytes)
    }

    fn add(&mut self, size: u64) {
        self.segments += 1;
        self.bytes = self.bytes.saturating_add(size);
    }

    fn is_full(&self, limits: &BatchLimits) -> bool {
        self.full || self.segments >= limits.max_segments || self.bytes >= limits.max_bytes
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    Linger,
    Pace,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchDecision {
    Commit,
    /// Nothing to commit yet; a footer reply will wake the committer.
    Wait,
    /// Not yet: a timer must wake the committer after this long.
    WaitFor(Timer, std::time::Duration),
}

/// Whether the ready `prefix` is committed now (the batching policy). Pacing first: no commit
/// starts within `min_interval` of the last one (`since_commit`), full or not. Then a full batch
/// goes; one that is not full waits while the next footer is in flight, or until the oldest
/// waiting segment has waited `linger`.
fn batch_decision(
    prefix: &Prefix,
    limits: &BatchLimits,
    oldest_waited: Option<std::time::Duration>,
    linger: std::time::Duration,
    since_commit: Option<std::time::Duration>,
    min_interval: std::time::Duration,
) -> BatchDecision {
    if prefix.segments == 0 {
        return BatchDecision::Wait;
    }
    if let Some(since) = since_commit.filter(|s| *s < min_interval) {
        return BatchDecision::WaitFor(Timer::Pace, min_interval - since);
    }
    if prefix.is_full(limits) {
        return BatchDecision::Commit;
    }
    if prefix.next_in_flight {
        return BatchDecision::Wait;
    }
    match oldest_waited.filter(|w| *w < linger) {
        Some(waited) => BatchDecision::WaitFor(Timer::Linger, linger - waited),
        None => BatchDecision::Commit,
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
            footer_bytes: 0,
            _permit: None,
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

    const MS: std::time::Duration = std::time::Duration::from_millis(1);
    const ZERO: std::time::Duration = std::time::Duration::ZERO;

    fn prefix(segments: usize, bytes: u64, full: bool, next_in_flight: bool) -> Prefix {
        Prefix {
            segments,
            bytes,
            full,
            next_in_flight,
        }
    }

    const LIMITS: BatchLimits = BatchLimits {
        max_segments: 10,
        max_bytes: 1000,
    };

    #[test]
    fn a_full_batch_commits_at_once_and_a_partial_one_waits_for_the_footer_in_flight() {
        let d = |p: &Prefix| batch_decision(p, &LIMITS, Some(MS), ZERO, None, ZERO);
        assert_eq!(d(&prefix(0, 0, false, true)), BatchDecision::Wait);
        assert_eq!(d(&prefix(10, 10, false, true)), BatchDecision::Commit);
        assert_eq!(
            d(&prefix(2, 1000, false, true)),
            BatchDecision::Commit,
            "bytes"
        );
        assert_eq!(d(&prefix(3, 30, true, false)), BatchDecision::Commit);
        assert_eq!(d(&prefix(3, 30, false, true)), BatchDecision::Wait);
        assert_eq!(d(&prefix(3, 30, false, false)), BatchDecision::Commit);
    }

    #[test]
    fn linger_holds_a_partial_batch_until_its_oldest_segment_waited_long_enough() {
        let d = |waited| {
            batch_decision(
                &prefix(3, 30, false, false),
                &LIMITS,
                Some(waited),
                MS * 100,
                None,
                ZERO,
            )
        };
        assert_eq!(d(MS * 30), BatchDecision::WaitFor(Timer::Linger, MS * 70));
        assert_eq!(d(MS * 100), BatchDecision::Commit);
        // A full batch does not linger.
        let full = batch_decision(
            &prefix(10, 30, false, false),
            &LIMITS,
            Some(MS),
            MS * 100,
            None,
            ZERO,
        );
        assert_eq!(full, BatchDecision::Commit);
    }

    #[test]
    fn min_interval_paces_every_commit_full_or_not() {
        let d = |p: &Prefix, since| batch_decision(p, &LIMITS, Some(MS), ZERO, since, MS * 500);
        assert_eq!(
            d(&prefix(10, 10, true, false), Some(MS * 200)),
            BatchDecision::WaitFor(Timer::Pace, MS * 300)
        );
        assert_eq!(
            d(&prefix(1, 10, false, false), Some(MS * 200)),
            BatchDecision::WaitFor(Timer::Pace, MS * 300)
        );
        assert_eq!(
            d(&prefix(1, 10, false, false), Some(MS * 500)),
            BatchDecision::Commit
        );
        assert_eq!(
            d(&prefix(1, 10, false, false), None),
            BatchDecision::Commit,
            "first commit"
        );
        assert_eq!(
            d(&prefix(0, 0, false, false), Some(MS)),
            BatchDecision::Wait,
            "nothing ready"
        );
    }

    #[test]
    fn the_prefix_takes_a_lone_oversized_segment_and_stops_at_the_limits() {
        let mut p = Prefix::default();
        assert!(
            p.admits(&LIMITS, 5000),
            "a lone segment larger than max_bytes goes alone"
        );
        p.add(600);
        assert!(!p.admits(&LIMITS, 600), "600 + 600 > 1000");
        assert!(p.admits(&LIMITS, 400));
        let mut q = Prefix::default();
        for _ in 0..10 {
            q.add(1);
        }
        assert!(!q.admits(&LIMITS, 1), "max_segments");
        assert!(q.is_full(&LIMITS));
    }

    #[test]
    fn the_footer_window_counts_arrived_footers_and_reads_in_flight() {
        let w = FooterWindow {
            count: 4,
            bytes: 100,
        };
        let held = |footers, bytes, in_flight| Held {
            footers,
            bytes,
            in_flight,
            estimate: 10,
        };
        assert!(w.has_room(held(0, 0, 0)));
        assert!(w.has_room(held(1, 10, 2)), "3 of 4, 40 bytes");
        assert!(!w.has_room(held(2, 20, 2)), "arrived footers count: 4 of 4");
        assert!(!w.has_room(held(0, 0, 4)), "reads in flight count");
        assert!(!w.has_room(held(1, 95, 0)), "bytes: 95 + 10 > 100");
        assert!(w.has_room(held(1, 90, 0)), "bytes: 90 + 10 <= 100");
    }

    #[test]
    fn the_queue_counts_the_footers_it_holds_through_inserts_and_removals() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(1, "a")));
        q.insert(pending(segment(2, "b")));
        let footer = Arc::new(SegmentFooter {
            metadata: Arc::new(parquet::file::metadata::ParquetMetaData::new(
                parquet::file::metadata::FileMetaData::new(
                    1,
                    0,
                    None,
                    None,
                    Arc::new(parquet::schema::types::SchemaDescriptor::new(Arc::new(
                        parquet::schema::types::Type::group_type_builder("schema")
                            .build()
                            .expect("schema"),
                    ))),
                    None,
                ),
                vec![],
            )),
            arrow_schema: Arc::new(arrow_schema::Schema::empty()),
            object_size: 1,
            bytes_read: 1,
        });
        let size = footer_size(&footer);
        assert!(size > 0);
        assert!(q.set_footer(&1, Arc::clone(&footer)).is_some());
        assert!(
            q.set_footer(&1, Arc::clone(&footer)).is_some(),
            "a second reply counts once"
        );
        assert!(
            q.set_footer(&9, Arc::clone(&footer)).is_none(),
            "not pending"
        );
        assert_eq!((q.footers, q.footer_bytes), (1, size));
        q.set_footer(&2, footer);
        assert_eq!((q.footers, q.footer_bytes), (2, 2 * size));
        q.remove(&1);
        assert_eq!((q.footers, q.footer_bytes), (1, size));
        q.remove(&2);
        assert_eq!((q.footers, q.footer_bytes), (0, 0));
    }
}
