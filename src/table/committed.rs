//! The set of segments a table already holds, rebuilt from table metadata.
//!
//! Two markers, both written in the same commit as the append:
//! - every snapshot summary lists its segments' object keys ([`SEGMENT_KEYS`]): exact, and it
//!   also sees segments another registrar committed;
//! - a table property per segment catalog ([`WATERMARK_PREFIX`]`<catalog id>`) holds the highest
//!   catalog sequence number registered, with every lower one of that catalog registered too
//!   (a committer commits its table's segments in catalog order). Snapshot expiry removes old
//!   snapshots and their summaries, but not properties: the watermark keeps an expired
//!   registration from being mistaken for a missing one.
//!
//! Both come from the table metadata alone, so neither startup nor a post-failure reload reads
//! a manifest: the cost follows the number of snapshots, never the number of data files.

use std::collections::{HashMap, HashSet};

use crate::protocol::segment::UploadedSegment;

use iceberg::spec::TableMetadata;

/// Snapshot summary key: the object keys this snapshot registered, one per line.
pub const SEGMENT_KEYS: &str = "thadam.segment-keys";
/// Snapshot summary key: the highest segment-catalog sequence number in this snapshot.
pub const CATALOG_SEQ: &str = "thadam.catalog-seq";
/// Snapshot summary key: which registrar (sink id and pipeline) wrote the snapshot.
pub const WRITER: &str = "thadam.writer";
/// Table property prefix of the per-catalog watermarks.
pub const WATERMARK_PREFIX: &str = "thadam.watermark.";

#[derive(Debug, Default, Clone)]
pub struct CommittedSet {
    keys: HashSet<String>,
    /// Catalog id -> highest registered seq.
    watermarks: HashMap<String, u64>,
}

impl CommittedSet {
    pub fn from_metadata(metadata: &TableMetadata) -> CommittedSet {
        let mut keys = HashSet::new();
        for snapshot in metadata.snapshots() {
            if let Some(list) = snapshot.summary().additional_properties.get(SEGMENT_KEYS) {
                keys.extend(list.lines().filter(|k| !k.is_empty()).map(str::to_string));
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
        CommittedSet { keys, watermarks }
    }

    /// Whether the table already holds `segment`: its key is in a snapshot summary, or its
    /// catalog's watermark covers its sequence number.
    pub fn contains(&self, segment: &UploadedSegment) -> bool {
        self.keys.contains(&segment.object_key)
            || segment
                .catalog_id
                .as_ref()
                .and_then(|id| self.watermarks.get(id))
                .is_some_and(|mark| segment.seq <= *mark)
    }

    /// Whether some snapshot summary lists `object_key`.
    pub fn contains_key(&self, object_key: &str) -> bool {
        self.keys.contains(object_key)
    }

    /// The watermark of `catalog_id`, if the table has one.
    pub fn watermark(&self, catalog_id: &str) -> Option<u64> {
        self.watermarks.get(catalog_id).copied()
    }

    /// Records a successful commit of `segments`.
    pub fn record<'a>(&mut self, segments: impl IntoIterator<Item = &'a UploadedSegment>) {
        for s in segments {
            self.keys.insert(s.object_key.clone());
            if let Some(id) = &s.catalog_id {
                let mark = self.watermarks.entry(id.clone()).or_insert(s.seq);
                *mark = (*mark).max(s.seq);
            }
        }
    }

    /// How many keys the summaries list.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.watermarks.is_empty()
    }
}

/// The summary value for a batch of keys. Keys never contain newlines (object keys from the
/// shipper are path-like); the committer refuses ones that do.
pub fn encode_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    keys.into_iter().collect::<Vec<_>>().join("\n")
}
