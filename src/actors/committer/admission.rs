//! Which segments the table still needs. A segment is taken into the queue unless the table
//! already holds its object key (by the committed set: snapshot summaries and watermarks), a
//! replay of it is queued, or quarantine decides otherwise; a segment that a watermark may cover
//! waits undecided, without a footer read, until that watermark is checked against the log this
//! committer reads (see `table::committed`), so a restored or cloned log is never trusted blindly.

use std::sync::Arc;
use std::time::Instant;

use super::CommitterState;
use super::queue::Pending;
use crate::config::BadSegmentPolicy;
use crate::error::{Error, Result};
use crate::protocol::messages::SegmentPermit;
use crate::protocol::segment::UploadedSegment;
use crate::table::committed::Decision;
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
            .quarantined
            .iter()
            .find(|(seq, h)| h.object_key == segment.object_key && **seq < segment.seq)
            .map(|(seq, _)| *seq)
        {
            self.quarantined.remove(&old);
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
        let decision = self.table.judge_arrival(&segment, by_files);
        if decision == Decision::Registered {
            self.table.remember(&segment);
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
            self.table.forget_seq(seq);
            self.supersedes(seq, &segment);
        }
        if self.pending.holds(&segment) {
            return;
        }
        if by_files {
            self.table.judge_by_files(segment.seq);
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

    /// Decides every pending segment still waiting on an unchecked watermark: the held table
    /// checks the watermarks of their logs (and lists its live data files if a diverged one
    /// leaves it open), and what the table already has leaves the queue.
    pub(super) async fn decide_pending(&mut self) -> Result<()> {
        if self.pending.undecided == 0 {
            return Ok(());
        }
        let ctx = Arc::clone(&self.args.ctx);
        let pending = &self.pending;
        let local = |seq: u64, catalog: &str| pending.fingerprint_at(seq, catalog);
        let undecided = pending
            .by_seq
            .values()
            .filter(|p| !p.decided)
            .map(|p| &p.segment);
        self.table
            .settle_watermarks(ctx.env(), undecided, &local)
            .await?;
        let mut registered = Vec::new();
        let mut missing = Vec::new();
        for (seq, p) in self.pending.by_seq.iter().filter(|(_, p)| !p.decided) {
            match self.table.judge(&p.segment) {
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
                self.table.remember(&p.segment);
                self.skipped(&p.segment);
            }
        }
        self.publish_backlog();
        Ok(())
    }
}
