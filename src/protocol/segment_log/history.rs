//! Looking up records of a log file by sequence number, to check a table's watermark against
//! the history it was written from.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::SegmentLogReader;
use crate::error::Result;
use crate::protocol::feed::SegmentHistory;
use crate::protocol::segment::UploadedSegment;

/// [`SegmentHistory`] over a segment catalog file: one streaming pass from the start, stopping
/// past the highest seq asked for. Memory: the records asked for, never the log.
#[derive(Debug, Clone)]
pub struct LogFileHistory {
    path: PathBuf,
}

impl LogFileHistory {
    pub fn new(path: impl AsRef<Path>) -> LogFileHistory {
        LogFileHistory {
            path: path.as_ref().to_path_buf(),
        }
    }
}

impl SegmentHistory for LogFileHistory {
    fn uploaded_at(&self, catalog_id: &str, seqs: &[u64]) -> Result<HashMap<u64, UploadedSegment>> {
        let mut found = HashMap::new();
        let Some(&last) = seqs.iter().max() else {
            return Ok(found);
        };
        let wanted: HashSet<u64> = seqs.iter().copied().collect();
        let mut reader = SegmentLogReader::open(&self.path)?;
        let id = reader.log_id().map(|id| id.to_string());
        if id.as_deref() != Some(catalog_id) {
            // Another log at this path (or none yet): none of its records are the ones asked for.
            return Ok(found);
        }
        while let Some(record) = reader.next_record()? {
            let seq = record.seq;
            if seq > last {
                break;
            }
            if wanted.contains(&seq)
                && let Some(mut segment) = record.into_uploaded()
            {
                segment.catalog_id = id.clone();
                found.insert(seq, segment);
            }
        }
        Ok(found)
    }

    fn later_uploaded(
        &self,
        catalog_id: &str,
        dataset: &str,
        object_key: &str,
        seq: u64,
    ) -> Result<Option<UploadedSegment>> {
        let mut reader = SegmentLogReader::open(&self.path)?;
        let id = reader.log_id().map(|id| id.to_string());
        if id.as_deref() != Some(catalog_id) {
            return Ok(None);
        }
        let mut latest = None;
        while let Some(record) = reader.next_record()? {
            if record.seq <= seq {
                continue;
            }
            if let Some(mut segment) = record.into_uploaded()
                && segment.dataset == dataset
                && segment.object_key == object_key
            {
                segment.catalog_id = id.clone();
                latest = Some(segment);
            }
        }
        Ok(latest)
    }
}
