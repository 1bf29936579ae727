//! What a committer tells operators: the table's entry on the status board (`/status`,
//! `/readyz`), its metrics, and its log lines for skips, a stopped table and errors.

use super::CommitterState;
use super::queue::PendingQueue;
use crate::error::Error;
use crate::protocol::segment::UploadedSegment;
use crate::table::append::ReadySegment;

impl CommitterState {
    pub(super) fn skipped(&mut self, segment: &UploadedSegment) {
        tracing::debug!(table = %self.name, key = %segment.object_key, "already registered; skipping");
        self.table.forget_seq(segment.seq);
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

    /// Segments of ours that another node of the fleet committed (it carried our intents):
    /// registered, by the fleet, and the table is not stalled.
    pub(super) fn carried(&mut self, segment: &UploadedSegment) {
        tracing::debug!(table = %self.name, key = %segment.object_key, "carried by another node");
        self.table.forget_seq(segment.seq);
        self.resolve_registered(segment);
        // No registration lag: this node learns of the commit only at its next turn, so the
        // lag would be that of its turns; `thadam_iceberg_intent_age_seconds` on the carrier
        // shows how long intents waited. Registered all the same: a node's `*_registered_total`
        // count the segments of its log the table holds (their rows and bytes as its record
        // says), whoever committed them, so that a fleet's counts add up to what the table holds.
        let name = self.name.to_string();
        metrics::counter!("thadam_iceberg_segments_registered_total", "table" => name.clone())
            .increment(1);
        metrics::counter!("thadam_iceberg_data_files_registered_total", "table" => name.clone())
            .increment(1);
        metrics::counter!("thadam_iceberg_rows_registered_total", "table" => name.clone())
            .increment(segment.row_count);
        metrics::counter!("thadam_iceberg_registered_bytes_total", "table" => name.clone())
            .increment(segment.file_size);
        metrics::counter!("thadam_iceberg_segments_carried_by_others_total", "table" => name.clone())
            .increment(1);
        let seq = segment.seq;
        let backlog = self.pending.len() as u64;
        self.ctx().status.update(&name, |s| {
            s.carried += 1;
            s.waiting_since_ms = None;
            s.backlog = backlog;
            s.last_seq = Some(s.last_seq.map_or(seq, |l| l.max(seq)));
        });
    }

    /// A segment this node's own commit registered, one whose answer was lost: registered (its
    /// metrics and status as for a commit heard), not a duplicate.
    pub(super) fn landed_unheard(&mut self, segment: &UploadedSegment) {
        tracing::debug!(table = %self.name, key = %segment.object_key, "registered by a commit whose answer was lost");
        self.table.forget_seq(segment.seq);
        self.resolve_registered(segment);
        let name = self.name.to_string();
        metrics::counter!("thadam_iceberg_segments_registered_total", "table" => name.clone())
            .increment(1);
        metrics::counter!("thadam_iceberg_data_files_registered_total", "table" => name.clone())
            .increment(1);
        metrics::counter!("thadam_iceberg_rows_registered_total", "table" => name.clone())
            .increment(segment.row_count);
        metrics::counter!("thadam_iceberg_registered_bytes_total", "table" => name.clone())
            .increment(segment.file_size);
        let seq = segment.seq;
        let backlog = self.pending.len() as u64;
        self.ctx().status.update(&name, |s| {
            s.registered += 1;
            s.waiting_since_ms = None;
            s.backlog = backlog;
            s.last_seq = Some(s.last_seq.map_or(seq, |l| l.max(seq)));
        });
    }

    /// The segments waiting, in the status board and the gauges: at every change of the queue,
    /// and while a commit is being retried (each attempt hands the committer back its mailbox).
    pub(super) fn publish_backlog(&self) {
        let backlog = self.pending.len() as u64;
        let held = self.quarantined.len() as u64;
        let name = self.name.to_string();
        metrics::gauge!("thadam_iceberg_backlog_segments", "table" => name.clone())
            .set(backlog as f64);
        let status = &self.ctx().status;
        status.update(&name, |s| {
            s.backlog = backlog;
            s.quarantined = held;
        });
        publish_waiting_since(&name, status.waiting_since_ms(&name));
    }

    /// Stops this table alone (see [`stops_table_only`]): reported in the status board (and so
    /// `/readyz`), in `thadam_iceberg_table_stopped`, and in the log; the memory its waiting
    /// segments held is released (they stay in the segment catalog, for the next start).
    ///
    /// [`stops_table_only`]: crate::table::quarantine::stops_table_only
    pub(super) fn stop_table(&mut self, e: &Error) {
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
        self.quarantined.clear();
        self.table.forget_all_seqs();
        self.publish_backlog();
    }

    pub(super) fn report_error(&self, e: &Error) {
        self.ctx().status.update(&self.name.to_string(), |s| {
            s.last_error = Some(e.to_string())
        });
    }

    /// Reports a successful append of `batch` (started at `started`, already out of the queue):
    /// its metrics, the table's status, and a log line.
    pub(super) fn report_commit(&self, batch: &[ReadySegment], started: std::time::Instant) {
        let name = self.name.to_string();
        let rows: u64 = batch.iter().map(|r| r.footer.row_count()).sum();
        let bytes: u64 = batch.iter().map(|r| r.footer.object_size).sum();
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
        for r in batch {
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
        let status = &self.ctx().status;
        status.update(&name, |s| {
            // A commit landed: whatever still waits, waits from now.
            s.waiting_since_ms = None;
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
        publish_waiting_since(&name, status.waiting_since_ms(&name));
        metrics::gauge!("thadam_iceberg_backlog_segments", "table" => name.clone())
            .set(backlog as f64);
        if batch.is_empty() {
            // A fleet's committer carrying only the others' intents, up to five times a second
            // (the intents' metrics count them): at info, "registered 0 segments" was most of
            // its log.
            tracing::debug!(table = %name, "committed the fleet's intents, none of this node's");
        } else {
            tracing::info!(table = %name, segments = batch.len(), rows, "registered");
        }
    }
}

/// `thadam_iceberg_waiting_since_timestamp_seconds`: since when segments have been waiting for
/// the table with no commit landing (0 while nothing waits). `time() - it` is how long a table
/// has been stalled, for a node that never committed as for one that stopped committing.
fn publish_waiting_since(table: &str, since_ms: Option<u64>) {
    metrics::gauge!("thadam_iceberg_waiting_since_timestamp_seconds", "table" => table.to_string())
        .set(since_ms.map_or(0.0, |ms| ms as f64 / 1000.0));
}
