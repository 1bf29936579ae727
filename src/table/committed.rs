//! The set of segments a table already holds, rebuilt from table metadata.
//!
//! Two markers, both written in the same commit as the append:
//! - every snapshot summary lists its segments ([`SEGMENT_IDS`]): each object key as a 96-bit
//!   SHA-256 prefix, 16 base64 characters, so table metadata grows by 16 bytes per segment
//!   whatever the key length; it also sees segments another registrar committed. (At 96 bits, the
//!   chance that any two of 10^8 keys collide is about 10^-13.)
//! - a table property per segment catalog ([`WATERMARK_PREFIX`]`<catalog id>`) holds the highest
//!   catalog sequence number registered, with every lower one of that catalog registered too
//!   (a committer commits its table's segments in catalog order). Snapshot expiry removes old
//!   snapshots and their summaries, but not properties: the watermark keeps an expired
//!   registration from being mistaken for a missing one.
//!
//! Both come from the table metadata alone, so neither startup nor a post-failure reload reads
//! a manifest: the cost follows the number of snapshots, never the number of data files.

use std::collections::{HashMap, HashSet};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::protocol::segment::UploadedSegment;

use iceberg::spec::TableMetadata;

/// Snapshot summary key: the segments this snapshot registered, as [`SegmentId`]s in base64,
/// 16 characters each, concatenated.
pub const SEGMENT_IDS: &str = "thadam.segment-ids";
/// Snapshot summary key: how many segments this snapshot registered (for people reading it).
pub const SEGMENT_COUNT: &str = "thadam.segments";
/// The width of one encoded [`SegmentId`].
const ID_CHARS: usize = 16;

/// A segment's identity in snapshot summaries: the first 96 bits of SHA-256 of its object key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentId([u8; 12]);

impl SegmentId {
    pub fn of(object_key: &str) -> SegmentId {
        let digest = Sha256::digest(object_key.as_bytes());
        let mut id = [0u8; 12];
        id.copy_from_slice(&digest[..12]);
        SegmentId(id)
    }

    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }
}

/// The ids listed in a [`SEGMENT_IDS`] summary value (malformed chunks are skipped).
pub fn decode_ids(value: &str) -> Vec<SegmentId> {
    value
        .as_bytes()
        .chunks(ID_CHARS)
        .filter_map(|chunk| {
            let bytes = URL_SAFE_NO_PAD.decode(chunk).ok()?;
            Some(SegmentId(bytes.try_into().ok()?))
        })
        .collect()
}

/// The [`SEGMENT_IDS`] summary value for a batch of object keys.
pub fn encode_ids<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    keys.into_iter()
        .map(|k| SegmentId::of(k).encode())
        .collect()
}
/// Snapshot summary key: the highest segment-catalog sequence number in this snapshot.
pub const CATALOG_SEQ: &str = "thadam.catalog-seq";
/// Snapshot summary key: which registrar (sink id and pipeline) wrote the snapshot.
pub const WRITER: &str = "thadam.writer";
/// Table property prefix of the per-catalog watermarks.
pub const WATERMARK_PREFIX: &str = "thadam.watermark.";

#[derive(Debug, Default, Clone)]
pub struct CommittedSet {
    ids: HashSet<SegmentId>,
    /// Catalog id -> highest registered seq.
    watermarks: HashMap<String, u64>,
}

impl CommittedSet {
    pub fn from_metadata(metadata: &TableMetadata) -> CommittedSet {
        let mut ids = HashSet::new();
        for snapshot in metadata.snapshots() {
            if let Some(list) = snapshot.summary().additional_properties.get(SEGMENT_IDS) {
                ids.extend(decode_ids(list));
            }
        }
        let watermarks = metadata
            .properties()
            .iter()
            .filter_map(|(k, v)| {
                let id = k.strip_prefix(WATERMARK_PREFIX)?;
                Some((id.to_string(), v.parse::<u64>().ok()?))
            })
            .collect();
        CommittedSet { ids, watermarks }
    }

    /// Whether the table already holds `segment`: its key is in a snapshot summary, or its
    /// catalog's watermark covers its sequence number.
    pub fn contains(&self, segment: &UploadedSegment) -> bool {
        self.ids.contains(&SegmentId::of(&segment.object_key))
            || segment
                .catalog_id
                .as_ref()
                .and_then(|id| self.watermarks.get(id))
                .is_some_and(|mark| segment.seq <= *mark)
    }

    /// The watermark of `catalog_id`, if the table has one.
    pub fn watermark(&self, catalog_id: &str) -> Option<u64> {
        self.watermarks.get(catalog_id).copied()
    }

    /// Records a successful commit of `segments`.
    pub fn record<'a>(&mut self, segments: impl IntoIterator<Item = &'a UploadedSegment>) {
        for s in segments {
            self.ids.insert(SegmentId::of(&s.object_key));
            if let Some(id) = &s.catalog_id {
                let mark = self.watermarks.entry(id.clone()).or_insert(s.seq);
                *mark = (*mark).max(s.seq);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fixed_width_and_round_trip() {
        let keys = [
            "a",
            "lake/thadam/v1/p/telemetry/data/seg-00000001.parquet",
            "",
        ];
        let value = encode_ids(keys);
        assert_eq!(value.len(), keys.len() * ID_CHARS);
        let ids = decode_ids(&value);
        assert_eq!(
            ids,
            keys.iter().map(|k| SegmentId::of(k)).collect::<Vec<_>>()
        );
        assert_ne!(SegmentId::of("a"), SegmentId::of("b"));
    }
}
