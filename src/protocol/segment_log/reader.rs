//! A one-shot, blocking reader of the log, for tools and tests that want "everything so far".

use std::collections::VecDeque;
use std::path::Path;

use uuid::Uuid;

use super::LogRecord;
use super::cursor::{Cursor, Limits, Polled};
use crate::error::{Error, Result};

/// Reads the records of a segment catalog log in order, without locking it, so it can run while
/// a writer appends.
///
/// It stops at a torn tail (returns `None`) instead of failing, because a writer that crashed
/// mid-append leaves one and that is not damage. Calling [`next_record`](Self::next_record) again
/// later picks up records appended since, re-reading from the end of the last complete record.
/// Records of kinds this build does not know are skipped.
#[derive(Debug)]
pub struct SegmentLogReader {
    cursor: Cursor,
    /// Complete records read ahead in one pass over the file; never partial bytes.
    pending: VecDeque<LogRecord>,
}

impl SegmentLogReader {
    /// Opens the log at `path` and checks its header.
    ///
    /// Fails if the file does not exist (a reader has nothing to wait for; use
    /// [`super::SegmentLogTail`] to wait), is not a segment catalog log, or has an unknown format
    /// version. A file with an incomplete header (a writer crashed while creating it) opens as an
    /// empty log.
    pub fn open(path: impl AsRef<Path>) -> Result<SegmentLogReader> {
        let mut cursor = Cursor::new(path.as_ref().to_path_buf(), 1);
        if !cursor.poll_header()? {
            return Err(missing(cursor.path()));
        }
        Ok(SegmentLogReader {
            cursor,
            pending: VecDeque::new(),
        })
    }

    /// The next record, or `None` at the end of the log (including a torn tail).
    ///
    /// Good records before a corrupt one are returned first; the corruption is then reported
    /// (as `SegmentCatalogCorrupt`) by this call, and again on every later call.
    pub fn next_record(&mut self) -> Result<Option<LogRecord>> {
        if self.pending.is_empty() {
            match self.cursor.poll(Limits::default())? {
                Polled::Records(records) => self.pending.extend(records),
                Polled::Missing => return Err(missing(self.cursor.path())),
            }
        }
        Ok(self.pending.pop_front())
    }

    /// All remaining records, up to the end of the log or a torn tail.
    pub fn read_to_end(&mut self) -> Result<Vec<LogRecord>> {
        let mut records = Vec::new();
        while let Some(record) = self.next_record()? {
            records.push(record);
        }
        Ok(records)
    }

    /// The id of the log, once its header is complete (`None` for a file whose creation did not
    /// finish). It changes only if the file is replaced, which readers report as an error.
    pub fn log_id(&self) -> Option<Uuid> {
        self.cursor.log_id()
    }

    pub fn path(&self) -> &Path {
        self.cursor.path()
    }
}

fn missing(path: &Path) -> Error {
    Error::config_invalid(format!(
        "segment catalog {} does not exist; check the configured path",
        path.display()
    ))
}
