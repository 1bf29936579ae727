//! The watermark properties (one per segment catalog, and per fork of it) and the snapshot
//! summary keys that tie a snapshot to them: their keys, their values, and what is known of
//! each against the log being read.

use super::ids::{SegmentId, fingerprint};
use crate::protocol::segment::UploadedSegment;
use crate::table::summary_keys::WATERMARK_PREFIX;

/// The value of a watermark property: `<seq>:<fingerprint of the record at seq>`.
pub(crate) fn encode_mark(segment: &UploadedSegment) -> String {
    format!("{}:{}", segment.seq, fingerprint(segment).encode())
}

/// Parses a watermark value. A bare `<seq>` (written before watermarks were bound to records)
/// has no fingerprint and can never be trusted.
pub(crate) fn decode_mark(value: &str) -> Option<(u64, Option<SegmentId>)> {
    match value.split_once(':') {
        Some((seq, fp)) => Some((seq.parse().ok()?, SegmentId::decode(fp.as_bytes()))),
        None => Some((value.parse().ok()?, None)),
    }
}

/// Splits a watermark property key into the catalog id and the fork id (if any). Catalog ids are
/// UUIDs (no `.`); a fork id follows the first `.`.
pub(super) fn parse_mark_key(key: &str) -> Option<(&str, Option<&str>)> {
    let rest = key.strip_prefix(WATERMARK_PREFIX)?;
    Some(match rest.split_once('.') {
        Some((catalog, fork)) => (catalog, Some(fork)),
        None => (rest, None),
    })
}

/// The segment log (catalog id) a watermark property belongs to.
pub(crate) fn mark_log(key: &str) -> Option<&str> {
    parse_mark_key(key).map(|(catalog, _)| catalog)
}

/// What is known of one watermark against the log being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkState {
    /// Not yet compared with the log: nothing may be derived from it.
    Unchecked,
    /// The log holds the record it was written for: it covers every seq at or below its own.
    Trusted,
    /// The log does not hold that record: it belongs to another history and covers nothing.
    Diverged,
}

/// One watermark property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub key: String,
    pub value: String,
    pub seq: u64,
    pub fingerprint: Option<SegmentId>,
    pub state: MarkState,
}
