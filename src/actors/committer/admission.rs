//! Which segments the table still needs. A segment is taken into the queue unless the table
//! already holds its object key (by the committed set: snapshot summaries and watermarks), a
//! replay of it is queued, or quarantine decides otherwise; a segment that a watermark may cover
//! waits undecided, without a footer read, until that watermark is checked against the log this
//! committer reads (see `table::committed`), so a restored or cloned log is never trusted blindly.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use super::queue::Pending;
use super::{CommitterState, RECENT};
use crate::config::BadSegmentPolicy;
use crate::error::{Error, Result};
use crate::protocol::messages::SegmentPermit;
use crate::protocol::segment::UploadedSegment;
use crate::runtime::retry::{Op, retry_transient};
use crate::table::committed::{Decision, Mark, MarkState, SegmentId, fingerprint, live_file_ids};
use crate::table::quarantine::Resolution;

impl CommitterState {
    pub(super) fn accept(&mut self, segment: UploadedSegment, permit: SegmentPermit) {
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
    pub(super) fn admit(
        &mut self,
        segment: UploadedSegment,
        by_files: bool,
        permit: Option<SegmentPermit>,
    ) {
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
    pub(super) fn decide(&self, segment: &UploadedSegment) -> Decision {
        if self.by_files.contains(&segment.seq) {
            self.committed.decide_by_files(segment)
        } else {
            self.committed.decide(segment)
        }
    }

    /// Remembers a segment the table holds (registered, or found registered): its record's
    /// fingerprint by seq (for watermark checks) and its key (for a later re-ship of it).
    pub(super) fn remember(&mut self, segment: &UploadedSegment) {
        self.committed.note_registered(segment);
        self.recent.insert(segment.seq, fingerprint(segment));
        while self.recent.len() > RECENT {
            self.recent.pop_first();
        }
    }

    /// Decides every pending segment still waiting on an unchecked watermark: checks the
    /// watermarks of their catalogs against the log, lists the table's live data files if a
    /// diverged one leaves it open, and drops what the table already has.
    pub(super) async fn decide_pending(&mut self) -> Result<()> {
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
    pub(super) async fn check_watermarks(&mut self, catalogs: &BTreeSet<String>) -> Result<()> {
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
    pub(super) fn settle(&mut self, mark: &Mark, record: Option<SegmentId>) {
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
    pub(super) async fn list_live_files(&mut self) -> Result<()> {
        let Some(table) = self.table.clone() else {
            self.committed.set_live_files(HashSet::new());
            return Ok(());
        };
        let prefix = format!("s3://{}/", self.ctx().config.url.bucket);
        let ctx = Arc::clone(&self.args.ctx);
        let mut shutdown = ctx.shutdown.clone();
        let what = format!("listing the data files of {}", self.name);
        let ids = retry_transient(Op::Load, ctx.retry(), &mut shutdown, &what, None, || {
            live_file_ids(&table, &prefix)
        })
        .await?
        .ok_or_else(Error::cancelled)?;
        tracing::info!(table = %self.name, files = ids.len(), "listed the table's live data files");
        self.committed.set_live_files(ids);
        Ok(())
    }
}
