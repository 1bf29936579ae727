//! The committer's side of `on_bad_segment` (see `table::quarantine`): what happens to a segment
//! that cannot be registered, to the quarantined segments it holds, and to a later record of the
//! same object key (a re-ship), which supersedes the earlier one under both policies.
//!
//! Supersede: the object key is the identity of a file. A later `Uploaded` record of a key with
//! another size or row count replaces an earlier one that is still waiting (pending, or
//! quarantined), and an earlier record whose file turned out bad is dropped when the log holds a
//! later one of its key (asked of the feed's history, only on such a failure). A key the table
//! already holds is skipped whatever the later record says, with a warning: re-shipping a
//! registered file changes bytes the table points to, and registering it again would make two data
//! files of one object.

use std::sync::Arc;

use super::CommitterState;
use crate::config::BadSegmentPolicy;
use crate::error::{Error, Result};
use crate::protocol::segment::UploadedSegment;
use crate::table::held::RECENT;
use crate::table::quarantine::{
    Action, Entry, Line, Resolution, action, is_about_the_file, now_ms,
};

impl CommitterState {
    pub(super) fn policy(&self) -> BadSegmentPolicy {
        self.ctx().config.on_bad_segment
    }

    /// The quarantine entry of `segment`'s key, when a quarantine file is kept.
    pub(super) fn quarantine_entry(&self, segment: &UploadedSegment) -> Option<Entry> {
        self.ctx()
            .quarantine
            .as_ref()?
            .get(&segment.dataset, &segment.object_key)
    }

    /// Holds a quarantined segment until a retry, a discard, or a later record of its key.
    pub(super) fn hold(&mut self, segment: UploadedSegment) {
        let seq = segment.seq;
        tracing::info!(
            table = %self.name, seq, key = %segment.object_key,
            "segment is quarantined; held until `--quarantine retry` or a re-ship"
        );
        self.quarantined.insert(seq, segment);
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.last_seq = Some(s.last_seq.map_or(seq, |l| l.max(seq)));
        });
        self.publish_backlog();
    }

    /// `segment` is an earlier record of a key a later record (`by`) replaced: never registered.
    pub(super) fn superseded(&mut self, segment: &UploadedSegment, by: u64) {
        tracing::debug!(
            table = %self.name, seq = segment.seq, by, key = %segment.object_key,
            "superseded by a later record of the same object key"
        );
        let seq = segment.seq;
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.last_seq = Some(s.last_seq.map_or(seq, |l| l.max(seq)));
        });
    }

    /// The record at `old` was replaced by `segment` (a later record of its key).
    pub(super) fn supersedes(&mut self, old: u64, segment: &UploadedSegment) {
        tracing::warn!(
            table = %self.name, seq = old, by = segment.seq, key = %segment.object_key,
            size = segment.file_size, rows = segment.row_count,
            "a later Uploaded record of the same object key supersedes the earlier one; the \
             latest is registered"
        );
        self.publish_backlog();
    }

    /// An operator discarded the segment: decided, never registered.
    pub(super) fn discarded(&mut self, segment: &UploadedSegment) {
        tracing::info!(
            table = %self.name, seq = segment.seq, key = %segment.object_key,
            "segment was discarded from quarantine; not registered"
        );
        let seq = segment.seq;
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.last_seq = Some(s.last_seq.map_or(seq, |l| l.max(seq)));
        });
    }

    /// Warns when a record of a key already in the table names another size than the record it
    /// was registered from (a re-ship of a registered file): it is skipped.
    pub(super) fn warn_reship(&mut self, segment: &UploadedSegment) {
        match self.registered_sizes.get(&segment.object_key) {
            Some(size) if *size != segment.file_size => tracing::warn!(
                table = %self.name, seq = segment.seq, key = %segment.object_key,
                recorded = segment.file_size, registered = size,
                "a later Uploaded record re-ships an object key the table already holds; it is \
                 skipped (the key is the file's identity). If the object's bytes changed, the \
                 table's data file no longer matches them: ship a fix under a new key"
            ),
            Some(_) => {}
            None => {
                if self.registered_sizes.len() >= RECENT {
                    self.registered_sizes.clear();
                }
                self.registered_sizes
                    .insert(segment.object_key.clone(), segment.file_size);
            }
        }
    }

    /// Closes an open quarantine entry of `segment`'s key: the table holds the key now.
    pub(super) fn resolve_registered(&mut self, segment: &UploadedSegment) {
        let Some(store) = self.ctx().quarantine.clone() else {
            return;
        };
        if !store
            .get(&segment.dataset, &segment.object_key)
            .is_some_and(|e| e.is_open())
        {
            return;
        }
        let line = Line::Registered {
            at_ms: now_ms(),
            dataset: segment.dataset.clone(),
            key: segment.object_key.clone(),
            seq: segment.seq,
        };
        // The table holds it already: a failure to record that leaves an open entry, which the
        // next start decides by files (registered) and closes then.
        match store.append(&line) {
            Ok(()) => tracing::info!(
                table = %self.name, seq = segment.seq, key = %segment.object_key,
                "a quarantined segment is registered; its quarantine entry is closed"
            ),
            Err(e) => tracing::warn!(table = %self.name, "{e}"),
        }
        publish_quarantine_gauge(&store);
    }

    /// A pending segment at `seq` cannot be registered (`e`). Superseded when the log holds a
    /// later record of its key; otherwise the policy decides: stop (the error), or quarantine it
    /// durably and go on with the rest.
    pub(super) async fn bad_segment(&mut self, seq: u64, e: Error) -> Result<()> {
        let Some(segment) = self.pending.get(&seq).map(|p| p.segment.clone()) else {
            return Ok(());
        };
        if is_about_the_file(e.code())
            && let Some(later) = self.later_record(&segment).await?
        {
            self.pending.remove(&seq);
            self.table.forget_seq(seq);
            self.supersedes(seq, &later);
            return Ok(());
        }
        let store = match (
            action(self.policy(), e.code()),
            self.ctx().quarantine.clone(),
        ) {
            (Action::Quarantine, Some(store)) => store,
            _ => return Err(e),
        };
        let line = Line::Quarantined {
            at_ms: now_ms(),
            segment: segment.clone(),
            code: e.code().as_str().to_string(),
            message: e.message().to_string(),
        };
        // On disk before anything that could move a watermark past this seq.
        let writer = Arc::clone(&store);
        tokio::task::spawn_blocking(move || writer.append(&line))
            .await
            .map_err(|j| {
                Error::internal(format!("writing the quarantine file failed: {j}")).with_source(j)
            })??;
        tracing::warn!(
            table = %self.name, seq, key = %segment.object_key, code = %e.code(),
            "segment quarantined ({}); the other segments go on. Fix it and run \
             `--quarantine retry --key {}`, or `--quarantine discard`",
            e.message(), segment.object_key
        );
        metrics::counter!(
            "thadam_iceberg_segments_quarantined_total",
            "table" => self.name.to_string(),
            "code" => e.code().as_str()
        )
        .increment(1);
        publish_quarantine_gauge(&store);
        self.pending.remove(&seq);
        self.table.forget_seq(seq);
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.quarantined_total += 1;
        });
        self.hold(segment);
        Ok(())
    }

    /// A later record of `segment`'s key with another size or row count, from the feed's history.
    async fn later_record(&self, segment: &UploadedSegment) -> Result<Option<UploadedSegment>> {
        let (Some(history), Some(catalog)) =
            (self.ctx().history.clone(), segment.catalog_id.clone())
        else {
            return Ok(None);
        };
        let s = segment.clone();
        let later = tokio::task::spawn_blocking(move || {
            history.later_uploaded(&catalog, &s.dataset, &s.object_key, s.seq)
        })
        .await
        .map_err(|e| {
            Error::internal(format!("reading the segment catalog failed: {e}")).with_source(e)
        })??;
        Ok(later.filter(|l| (l.file_size, l.row_count) != (segment.file_size, segment.row_count)))
    }

    /// Reads the operator's lines: a held segment marked for retry goes back into the queue
    /// (decided by its file), a discarded one is dropped as decided.
    pub(super) fn poll_quarantine(&mut self) -> Result<()> {
        let Some(store) = self.ctx().quarantine.clone() else {
            return Ok(());
        };
        store.refresh()?;
        publish_quarantine_gauge(&store);
        let held: Vec<u64> = self.quarantined.keys().copied().collect();
        for seq in held {
            let Some(segment) = self.quarantined.get(&seq).cloned() else {
                continue;
            };
            let Some(entry) = store.get(&segment.dataset, &segment.object_key) else {
                continue;
            };
            match &entry.resolution {
                None if entry.segment.seq != seq => {
                    self.quarantined.remove(&seq);
                }
                None if entry.retry => {
                    self.quarantined.remove(&seq);
                    tracing::info!(table = %self.name, seq, key = %segment.object_key, "retrying a quarantined segment");
                    self.admit(segment, true, None);
                }
                None => {}
                Some(Resolution::Discarded { .. }) => {
                    self.quarantined.remove(&seq);
                    self.discarded(&segment);
                }
                Some(Resolution::Registered { .. }) => {
                    self.quarantined.remove(&seq);
                }
            }
        }
        self.publish_backlog();
        Ok(())
    }
}

/// `thadam_iceberg_segments_in_quarantine`: the open entries of the quarantine file.
pub(crate) fn publish_quarantine_gauge(store: &crate::table::quarantine::QuarantineStore) {
    metrics::gauge!("thadam_iceberg_segments_in_quarantine").set(store.open_count() as f64);
}
