//! The set of segments a table already holds, rebuilt from table metadata.
//!
//! Two markers, both written in the same commit as the append:
//! - every snapshot summary lists its segments ([`SEGMENT_IDS`]): each object key as a 96-bit
//!   SHA-256 prefix, 16 base64 characters, so table metadata grows by 16 bytes per segment
//!   whatever the key length; it also sees segments another registrar committed. (At 96 bits, the
//!   chance that any two of 10^8 keys collide is about 10^-13.)
//! - table properties per segment catalog ([`WATERMARK_PREFIX`]`<catalog id>[.<fork>]`) hold
//!   `<seq>:<fingerprint>`: the highest catalog sequence number registered from that catalog,
//!   and the fingerprint of the record at that seq (a hash of the whole `Uploaded` record).
//!   Every lower seq *of the history that record belongs to* is registered too (a committer
//!   commits its table's segments in catalog order). Snapshot expiry removes old snapshots and
//!   their summaries, but not properties: the watermark keeps an expired registration from being
//!   mistaken for a missing one.
//!
//! # Why a watermark is bound to a record
//!
//! A segment catalog restored from a backup, or cloned onto a second machine from a disk image,
//! keeps its log id but hands out sequence numbers again that the table's watermark already
//! covers. A bare `seq` would make those new uploads look registered (and they would never be).
//! So a watermark is trusted only after the record at its seq, in the log the registrar is
//! reading, was checked to be the very record it was written for ([`MarkState::Trusted`]).
//! Logs are append-only, so the same record at the same seq means the same history below it.
//! A watermark whose record differs, or whose seq is past the end of the log, belongs to a
//! history this log has diverged from ([`MarkState::Diverged`]): it covers nothing here, the
//! registrar falls back to the per-segment ids and (once) to the table's live data files, warns,
//! and counts it (`thadam_iceberg_watermark_diverged_total`). Its own registrations then go under
//! a watermark of its own, a *fork* (`<catalog id>.<fork id>`), so that a restored or cloned log
//! is protected against snapshot expiry too. Nothing is ever derived from a watermark that has not
//! been checked ([`MarkState::Unchecked`]): segments wait until it is.
//!
//! Both come from the table metadata alone, so neither startup nor a post-failure reload reads
//! a manifest: the cost follows the number of snapshots, never the number of data files. The one
//! exception is a diverged log, where the live data files are listed once.
//!
//! The parts, by concern: `ids` (a segment's id, the record fingerprint and the summary codec),
//! `id_set` (the ids held in memory), `watermark` (the watermark properties and their values), `guards` (the
//! watermarks a carrying snapshot's retention waits for),
//! `set` (the [`CommittedSet`] that decides from both) and `manifests` (the one manifest read).
//!
//! [`SEGMENT_IDS`]: crate::table::summary_keys::SEGMENT_IDS
//! [`WATERMARK_PREFIX`]: crate::table::summary_keys::WATERMARK_PREFIX

mod guards;
mod id_set;
mod ids;
mod manifests;
mod set;
mod watermark;

pub(crate) use guards::{Guards, decode as decode_guards};
pub use ids::{SegmentId, decode_ids, encode_id_list, encode_ids, fingerprint, lists_id};
pub(crate) use manifests::live_file_ids;
pub use set::{CommittedSet, Decision};
pub use watermark::{Mark, MarkState};
pub(crate) use watermark::{decode_mark, mark_log};

/// An `Uploaded` record of catalog `log` at `seq` for object key `key` (for the tests of the
/// parts).
#[cfg(test)]
fn test_segment(seq: u64, key: &str) -> crate::protocol::segment::UploadedSegment {
    crate::protocol::segment::UploadedSegment {
        file_size: 10,
        uploaded_at_ms: 1000 + seq,
        catalog_id: Some("log".into()),
        ..crate::testing::segment(seq, "d", key)
    }
}
