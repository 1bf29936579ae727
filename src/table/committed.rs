//! The set of segments a table already holds, rebuilt from snapshot summaries.
//!
//! Every registrar commit writes its segments' object keys into its snapshot summary
//! ([`SEGMENT_KEYS`]). The set is rebuilt from the table metadata alone (snapshot summaries are
//! part of it), so neither startup nor a post-failure reload reads a manifest: the cost follows
//! the number of snapshots, never the number of data files.

use std::collections::HashSet;

use iceberg::spec::TableMetadata;

/// Snapshot summary key: the object keys this snapshot registered, one per line.
pub const SEGMENT_KEYS: &str = "thadam.segment-keys";
/// Snapshot summary key: the highest segment-catalog sequence number in this snapshot.
pub const CATALOG_SEQ: &str = "thadam.catalog-seq";
/// Snapshot summary key: which registrar (sink id and pipeline) wrote the snapshot.
pub const WRITER: &str = "thadam.writer";

#[derive(Debug, Default, Clone)]
pub struct CommittedSet {
    keys: HashSet<String>,
}

impl CommittedSet {
    pub fn from_metadata(metadata: &TableMetadata) -> CommittedSet {
        let mut keys = HashSet::new();
        for snapshot in metadata.snapshots() {
            if let Some(list) = snapshot.summary().additional_properties.get(SEGMENT_KEYS) {
                keys.extend(list.lines().filter(|k| !k.is_empty()).map(str::to_string));
            }
        }
        CommittedSet { keys }
    }

    pub fn contains(&self, object_key: &str) -> bool {
        self.keys.contains(object_key)
    }

    pub fn insert_all<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>) {
        self.keys.extend(keys.into_iter().map(str::to_string));
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The summary value for a batch of keys. Keys never contain newlines (object keys from the
/// shipper are path-like); the committer refuses ones that do.
pub fn encode_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    keys.into_iter().collect::<Vec<_>>().join("\n")
}
