//! Reading footers: which segments' footers are asked of the footer pool (in catalog order,
//! within the table's footer window), and what a failed read means (a missing object read again
//! under `quarantine`, vended credentials S3 refused, or a bad segment).

use std::sync::Arc;

use ractor::ActorRef;

use super::CommitterState;
use super::batching::{FooterWindow, Held};
use crate::config::BadSegmentPolicy;
use crate::error::{Error, ErrorCode, Result};
use crate::io::credentials::S3Credentials;
use crate::io::store::S3Store;
use crate::protocol::footer::SegmentFooter;
use crate::protocol::messages::{CommitterMsg, FooterPoolMsg, FooterRequest};
use crate::runtime::retry::Op;

impl CommitterState {
    /// Asks the footer pool for the footers of the next waiting segments, in catalog order, while
    /// the table's footer window has room ([`footer_window`]): footers held and reads in flight
    /// together stay within `2 x commit.max_segments` (so the next batch is read while one
    /// commits) and within the table's share of `memory.footer_bytes`. The oldest segment
    /// without a footer is asked for even when later footers fill the window, so a table never
    /// waits on its own later footers.
    ///
    /// [`footer_window`]: crate::actors::context::RegistrarContext::footer_window
    pub(super) fn request_footers(&mut self, myself: &ActorRef<CommitterMsg>) -> Result<()> {
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
                in_flight: self.pending.reads_in_flight,
                estimate: self.pending.footer_estimate,
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
                let uri = crate::io::keys::object_uri(bucket, &p.segment.object_key).ok()?;
                a.for_uri(&uri).map(|c| (a.generation(), c))
            });
            let (store, generation) = match vended {
                Some((generation, creds)) => (
                    Some(creds.footer_store(&ctx.config.store, bucket)?),
                    Some(generation),
                ),
                None if S3Store::from(&ctx.config.store).credentials == S3Credentials::Missing => {
                    // Nothing to read with: stop now, before any request (nothing ambient is
                    // ever asked).
                    return Err(self.no_s3_access(bucket));
                }
                None => (None, None),
            };
            p.read_requested = true;
            p.read_generation = generation;
            self.pending.reads_in_flight += 1;
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

    /// Why the table's segments cannot be read: `store` has no keys and the catalog gave
    /// nothing for the table (or the table does not exist yet, so the catalog cannot).
    fn no_s3_access(&self, bucket: &str) -> Error {
        let why = crate::io::credentials::missing_credentials(bucket);
        if self.table.table().is_none() {
            Error::auth_failed(format!(
                "table {} does not exist yet: the registrar creates it from its first segment's \
                 footer, which is read (and the first metadata file written) before the catalog \
                 knows the table, so the catalog cannot vend credentials or sign requests for \
                 it yet; {why}. Or create the table first (at the registrar's table location), \
                 after which the catalog's credentials or remote signing are used",
                self.name
            ))
        } else {
            Error::auth_failed(format!("table {}: {why}", self.name))
        }
    }

    /// A footer read finished: the footer joins its segment, or the failure is handled.
    pub(super) async fn footer_read(
        &mut self,
        myself: &ActorRef<CommitterMsg>,
        seq: u64,
        result: Result<Arc<SegmentFooter>>,
    ) -> Result<()> {
        self.pending.reads_in_flight = self.pending.reads_in_flight.saturating_sub(1);
        let footer = match result {
            Ok(footer) => footer,
            Err(e) => return self.footer_failed(myself, seq, e).await,
        };
        let mut generation = None;
        if let Some(p) = self.pending.set_footer(&seq, footer) {
            generation = p.read_generation;
            let bytes = p.footer_bytes.max(1);
            self.pending.footer_estimate = bytes;
        }
        self.table.vended_worked(generation);
        Ok(())
    }

    /// A footer read failed. S3 refusing vended credentials is answered by the held table
    /// (`HeldTable::vended_refused`) and the read is requested again; anything else is a bad
    /// segment.
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
            let delay = crate::runtime::backoff::delay_for(&self.ctx().config.retry, attempt, &e);
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
        // The refusal's own words (S3's, or the signer's, naming the object) go into a final
        // error.
        let ctx = Arc::clone(&self.args.ctx);
        self.table
            .vended_refused(
                ctx.env(),
                generation,
                &format!("reading a footer: {}", e.message()),
            )
            .await?;
        if let Some(p) = self.pending.get_mut(&seq) {
            p.read_requested = false;
            p.read_generation = None;
        }
        Ok(())
    }
}

/// How many times a missing object is read again (with backoff) under `quarantine` before it is
/// quarantined. Under `stop` a missing object is fatal at once, as the spec says.
pub(super) const MISSING_REREADS: u32 = 3;

/// Whether a footer read that failed with `code`, after `reads` earlier misses, is read again;
/// `Some(attempt)` numbers the backoff.
pub(super) fn missing_reread(policy: BadSegmentPolicy, code: ErrorCode, reads: u32) -> Option<u32> {
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
}
