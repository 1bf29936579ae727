//! The position of a reader in a log that may still grow, shared by [`super::SegmentLogReader`]
//! and [`super::SegmentLogTail`].
//!
//! Each poll reopens the file by path and re-reads from the end of the last complete record. It
//! never keeps partial bytes: a writer that restarts after a crash truncates a torn tail and writes
//! new records at that same offset, and reopening notices when the path now holds a different log
//! (its log id changed).

use std::collections::BTreeSet;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::format::{HEADER_LEN, Header};
use super::scan::{Scanner, Step, read_header};
use super::{LogEntry, LogRecord, corrupt, io_error};
use crate::error::{ErrorCode, Result};

/// How much one poll reads before handing records over, so that catching up on a long log does
/// not hold it all in memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_records: usize,
    pub(crate) max_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_records: 1024,
            max_bytes: 8 << 20,
        }
    }
}

/// What a poll found.
#[derive(Debug)]
pub(crate) enum Polled {
    /// The file does not exist (yet, or any more).
    Missing,
    /// Complete records after the previous poll's end, in order; empty at the end of the log.
    Records(Vec<LogRecord>),
}

#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    path: PathBuf,
    /// End of the last complete record read (the header's end before the first).
    offset: u64,
    last_seq: u64,
    log_id: Option<Uuid>,
    /// The torn tail seen at this offset, and on how many polls in a row.
    torn: Option<(u64, u32)>,
    /// After how many sightings of the same torn tail to warn (see [`Cursor::new`]).
    warn_torn_after: u32,
    /// Unknown record kinds already warned about, so that a log full of one newer kind logs one
    /// line, not one per record. Bounded by [`MAX_WARNED_KINDS`].
    warned_kinds: BTreeSet<String>,
}

/// Distinct unknown kinds named in warnings per reader; beyond this, a log of garbage kinds
/// could grow the set without bound, so further kinds are counted in one last warning.
const MAX_WARNED_KINDS: usize = 32;

impl Cursor {
    /// `warn_torn_after` is 1 for a one-shot reader. A tail passes 2: it often catches a record
    /// while the writer is still writing it, which is no cause for alarm unless it stays torn.
    pub(crate) fn new(path: PathBuf, warn_torn_after: u32) -> Cursor {
        Cursor {
            path,
            offset: HEADER_LEN,
            last_seq: 0,
            log_id: None,
            torn: None,
            warn_torn_after: warn_torn_after.max(1),
            warned_kinds: BTreeSet::new(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn log_id(&self) -> Option<Uuid> {
        self.log_id
    }

    /// Reads the complete records that follow the last one read, up to `limits`.
    ///
    /// If good records precede a corrupt one, they are returned first and the corruption error
    /// comes from the next poll, so a consumer gets everything that can be trusted.
    ///
    /// Corruption is confirmed by a second read before it is reported: a writer that recovers a
    /// torn tail while we read it can make one read see a frame header from before its truncation
    /// and a payload from after, which looks like damage but is gone on a fresh read.
    pub(crate) fn poll(&mut self, limits: Limits) -> Result<Polled> {
        match self.poll_once(limits) {
            Err(e) if e.code() == ErrorCode::SegmentCatalogCorrupt => self.poll_once(limits),
            polled => polled,
        }
    }

    fn poll_once(&mut self, limits: Limits) -> Result<Polled> {
        let Some((file, len)) = self.open()? else {
            return Ok(Polled::Missing);
        };
        if !self.check_header(&file, len)? {
            return Ok(Polled::Records(Vec::new()));
        }
        if len < self.offset {
            return Err(corrupt(
                &self.path,
                len,
                format!(
                    "the file shrank to {len} bytes, below the {} bytes already read; it was \
                     truncated by hand",
                    self.offset
                ),
            ));
        }
        self.scan(&file, len, limits).map(Polled::Records)
    }

    /// Opens the file and reads only its header, so that opening a reader fails early on a file
    /// that is not a segment catalog. `false` if the file does not exist.
    pub(crate) fn poll_header(&mut self) -> Result<bool> {
        let Some((file, len)) = self.open()? else {
            return Ok(false);
        };
        self.check_header(&file, len).map(|_| true)
    }

    fn open(&self) -> Result<Option<(File, u64)>> {
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&self.path, "open", e)),
        };
        let len = file
            .metadata()
            .map_err(|e| io_error(&self.path, "stat", e))?
            .len();
        Ok(Some((file, len)))
    }

    /// Validates the header and the log id; `false` while the header is still incomplete.
    fn check_header(&mut self, file: &File, len: u64) -> Result<bool> {
        let header = read_header(file, len, &self.path)?;
        match (header, self.log_id) {
            (Header::Partial, None) => Ok(false),
            (Header::Complete(id), None) => {
                self.log_id = Some(id);
                Ok(true)
            }
            (Header::Complete(id), Some(known)) if id == known => Ok(true),
            (found, Some(known)) => Err(self.replaced(known, found)),
        }
    }

    /// Records read from the old log may not be in the new one and sequence numbers restart, so
    /// carrying on would be wrong; restarting the reader reads the new log from its start.
    fn replaced(&self, known: Uuid, found: Header) -> crate::error::Error {
        let now = match found {
            Header::Complete(id) => format!("log {id}"),
            Header::Partial => "a log whose header is incomplete".to_owned(),
        };
        corrupt(
            &self.path,
            0,
            format!(
                "the file was replaced while it was read (it held log {known}, now {now}); if \
                 that was intended, restart the reader so it starts over on the new log"
            ),
        )
    }

    fn scan(&mut self, file: &File, len: u64, limits: Limits) -> Result<Vec<LogRecord>> {
        // The scanner borrows the path while `self` moves forward.
        let path = self.path.clone();
        let mut scanner = Scanner::new(file, &path, self.offset, len, self.last_seq)?;
        let mut records = Vec::new();
        let mut bytes = 0;
        while records.len() < limits.max_records && bytes < limits.max_bytes {
            match scanner.next_step() {
                Ok(Step::Record {
                    record,
                    end,
                    unknown_kind,
                }) => {
                    let size = end - self.offset;
                    if let Some(kind) = unknown_kind {
                        self.note_unknown_kind(kind, record.seq);
                    }
                    if self.advance(record, end, &mut records) {
                        bytes += size;
                    }
                }
                Ok(Step::End) => {
                    self.torn = None;
                    break;
                }
                Ok(Step::Torn { offset, what }) => {
                    self.note_torn(offset, &what);
                    break;
                }
                Err(e) if records.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        Ok(records)
    }

    /// Moves past a good record; kinds from newer versions are skipped (but still count for the
    /// seq order). Returns whether the record was kept. Skipped records do not count against the
    /// limits, so an empty poll always means the end of the log.
    fn advance(&mut self, record: LogRecord, end: u64, records: &mut Vec<LogRecord>) -> bool {
        self.offset = end;
        self.last_seq = record.seq;
        self.torn = None;
        if record.entry == LogEntry::Unknown {
            return false;
        }
        records.push(record);
        true
    }

    /// Warns once per kind: a record this build cannot interpret is skipped, and an operator
    /// must be able to see that (a misspelled kind from a third-party writer would otherwise
    /// hide uploads silently).
    fn note_unknown_kind(&mut self, kind: String, seq: u64) {
        if self.warned_kinds.contains(&kind) || self.warned_kinds.len() > MAX_WARNED_KINDS {
            return;
        }
        if self.warned_kinds.len() == MAX_WARNED_KINDS {
            tracing::warn!(
                path = %self.path.display(),
                seq,
                "segment catalog holds more than {MAX_WARNED_KINDS} record kinds this build does \
                 not know; skipping them without naming each"
            );
        } else {
            tracing::warn!(
                path = %self.path.display(),
                seq,
                kind = %format!("{kind:?}"),
                "segment catalog record seq {seq} has kind {kind:?}, which this build does not \
                 know; skipping it and further records of this kind (written by a newer \
                 version? upgrade the registrar; a misspelled kind? fix the writer)"
            );
        }
        self.warned_kinds.insert(kind);
    }

    /// Warns once per torn offset, after it was seen `warn_torn_after` times in a row.
    fn note_torn(&mut self, offset: u64, what: &str) {
        let seen = match self.torn {
            Some((at, n)) if at == offset => n.saturating_add(1),
            _ => 1,
        };
        self.torn = Some((offset, seen));
        if seen == self.warn_torn_after {
            tracing::warn!(
                path = %self.path.display(),
                offset,
                "segment catalog ends in an incomplete record ({what}); treating it as the end \
                 of the log (a crashed writer leaves this; the next writer truncates it)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::segment_log::format;
    use std::io::Write;

    fn record(seq: u64, entry: LogEntry) -> Vec<u8> {
        let mut out = Vec::new();
        format::encode_record(&LogRecord { seq, entry }, &mut out).expect("encode");
        out
    }

    fn finalized(seq: u64) -> Vec<u8> {
        record(
            seq,
            LogEntry::Finalized {
                dataset: "d".into(),
                segment_id: format!("s{seq}"),
                path: "/p".into(),
                row_count: 1,
                file_size: 2,
            },
        )
    }

    fn records(polled: Polled) -> Vec<u64> {
        match polled {
            Polled::Records(records) => records.iter().map(|r| r.seq).collect(),
            Polled::Missing => panic!("file missing"),
        }
    }

    fn append(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .expect("append");
    }

    #[test]
    fn resumes_after_the_last_complete_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mut cursor = Cursor::new(path.clone(), 1);
        assert!(matches!(
            cursor.poll(Limits::default()),
            Ok(Polled::Missing)
        ));
        append(&path, &format::encode_header(Uuid::new_v4())[..10]);
        assert!(records(cursor.poll(Limits::default()).expect("partial")).is_empty());
        assert_eq!(cursor.log_id(), None);
        append(&path, &format::encode_header(Uuid::new_v4())[10..]);
        let second = finalized(2);
        let mut bytes = finalized(1);
        bytes.extend_from_slice(&second[..5]);
        append(&path, &bytes);
        assert_eq!(records(cursor.poll(Limits::default()).expect("one")), [1]);
        assert!(cursor.log_id().is_some());
        append(&path, &second[5..]);
        assert_eq!(records(cursor.poll(Limits::default()).expect("two")), [2]);
    }

    #[test]
    fn limits_split_a_long_log_into_batches() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        append(&path, &format::encode_header(Uuid::new_v4()));
        for seq in 1..=5 {
            append(&path, &finalized(seq));
        }
        let mut cursor = Cursor::new(path, 1);
        let limits = Limits {
            max_records: 2,
            max_bytes: u64::MAX,
        };
        let mut batches = Vec::new();
        loop {
            let batch = records(cursor.poll(limits).expect("poll"));
            if batch.is_empty() {
                break;
            }
            batches.push(batch);
        }
        assert_eq!(batches, [vec![1, 2], vec![3, 4], vec![5]]);
    }

    fn unknown_kind(seq: u64) -> Vec<u8> {
        let payload = format!(r#"{{"seq":{seq},"kind":"compacted","upto":1}}"#);
        let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
        frame.extend_from_slice(&crc32c::crc32c(payload.as_bytes()).to_le_bytes());
        frame.extend_from_slice(payload.as_bytes());
        frame
    }

    #[test]
    fn unknown_kinds_are_skipped_but_keep_seq_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        append(&path, &format::encode_header(Uuid::new_v4()));
        for bytes in [finalized(1), unknown_kind(2), finalized(3)] {
            append(&path, &bytes);
        }
        let mut cursor = Cursor::new(path.clone(), 1);
        assert_eq!(
            records(cursor.poll(Limits::default()).expect("read")),
            [1, 3]
        );

        // The unknown record's seq counts: a later record reusing it is corruption.
        append(&path, &unknown_kind(4));
        append(&path, &finalized(4));
        let err = cursor.poll(Limits::default()).expect_err("duplicate seq");
        assert!(
            err.message().contains("seq 4 does not follow seq 4"),
            "{err}"
        );
    }

    #[test]
    fn replaced_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        append(&path, &format::encode_header(Uuid::new_v4()));
        let mut cursor = Cursor::new(path.clone(), 1);
        cursor.poll(Limits::default()).expect("first");
        std::fs::remove_file(&path).expect("remove");
        assert!(matches!(
            cursor.poll(Limits::default()),
            Ok(Polled::Missing)
        ));
        append(&path, &format::encode_header(Uuid::new_v4()));
        let err = cursor.poll(Limits::default()).expect_err("replaced");
        assert!(err.message().contains("was replaced"), "{err}");
    }

    #[test]
    fn shrunk_file_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        append(&path, &format::encode_header(Uuid::new_v4()));
        append(&path, &finalized(1));
        let mut cursor = Cursor::new(path.clone(), 1);
        assert_eq!(records(cursor.poll(Limits::default()).expect("one")), [1]);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        file.set_len(HEADER_LEN + 3).expect("truncate");
        let err = cursor.poll(Limits::default()).expect_err("shrunk");
        assert!(err.message().contains("shrank"), "{err}");
    }
}
