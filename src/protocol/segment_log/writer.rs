//! The single appender of a log.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use super::format::{self, HEADER_LEN, Header};
use super::scan::{Scanner, Step, read_header};
use super::{LogEntry, LogRecord, io_error};
use crate::error::{Error, Result};

/// Appends records durably to a segment catalog log.
///
/// Only one writer may hold a log at a time: two appenders would interleave bytes and reuse
/// sequence numbers, so [`open`](Self::open) takes an exclusive advisory lock on the file and
/// fails if another writer (in this or another process) holds it. The lock is released when the
/// writer is dropped.
///
/// Every append is on disk when it returns (`sync_data`), because the shipper deletes its local
/// copy of a segment once the upload is recorded: a record lost in a crash would be a segment the
/// registrar never learns about. Methods block on disk I/O; async callers run them in
/// `tokio::task::spawn_blocking`.
#[derive(Debug)]
pub struct SegmentLogWriter {
    file: File,
    path: PathBuf,
    log_id: Uuid,
    /// Where the next record goes: the end of the last good record.
    end: u64,
    next_seq: u64,
    /// Set when an append failed part-way; see [`append_all`](Self::append_all).
    failed: bool,
}

impl SegmentLogWriter {
    /// Opens the log at `path` for appending, creating it (and its parent directories) if absent.
    ///
    /// Recovers from a crash of the previous writer: an incomplete header is rewritten (with a new
    /// log id, as no reader can have used the old one), and a torn last record is truncated away
    /// (with a warning) so the next record follows the last complete one with the next seq.
    ///
    /// Fails with `SegmentCatalogCorrupt` if a record before the tail is damaged, or if the file is
    /// not a segment catalog log: truncating there could drop uploads, so a human decides.
    pub fn open(path: impl AsRef<Path>) -> Result<SegmentLogWriter> {
        let path = path.as_ref().to_path_buf();
        create_parent(&path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_error(&path, "open", e))?;
        lock(&file, &path)?;
        let len = file
            .metadata()
            .map_err(|e| io_error(&path, "stat", e))?
            .len();
        let (log_id, len) = match read_header(&file, len, &path)? {
            Header::Complete(id) => (id, len),
            Header::Partial => (write_header(&file, &path)?, HEADER_LEN),
        };
        let (end, last_seq) = recover(&file, &path, len)?;
        let next_seq = last_seq.checked_add(1).ok_or_else(|| {
            Error::internal(format!(
                "segment catalog {} has used up its sequence numbers; start a new log",
                path.display()
            ))
        })?;
        let mut writer = SegmentLogWriter {
            file,
            path,
            log_id,
            end,
            next_seq,
            failed: false,
        };
        writer.seek_to_end()?;
        Ok(writer)
    }

    /// Appends one entry and returns its seq once it is on disk.
    pub fn append(&mut self, entry: LogEntry) -> Result<u64> {
        let seqs = self.append_all([entry])?;
        seqs.first()
            .copied()
            .ok_or_else(|| Error::internal("append_all returned no seq for one entry"))
    }

    /// Appends entries with one write and one sync (cheaper than one `append` each) and returns
    /// their seqs in order. Nothing is written for an empty iterator.
    ///
    /// Refuses [`LogEntry::Unknown`] and entries over the 1 MiB payload limit before writing
    /// anything. If the write or the sync fails, some of the entries may be on disk: the writer
    /// then refuses further appends, and reopening it (after dropping this one) recovers the
    /// complete ones and truncates the rest. Consumers tolerate an entry recorded twice, so
    /// retrying the whole batch after reopening is safe.
    pub fn append_all(&mut self, entries: impl IntoIterator<Item = LogEntry>) -> Result<Vec<u64>> {
        if self.failed {
            return Err(Error::internal(format!(
                "an earlier append to segment catalog {} failed; drop this writer and open a new \
                 one, which recovers the log",
                self.path.display()
            )));
        }
        let (bytes, seqs) = self.encode(entries)?;
        if seqs.is_empty() {
            return Ok(seqs);
        }
        if let Err(e) = self
            .file
            .write_all(&bytes)
            .and_then(|()| self.file.sync_data())
        {
            // After a failed write or fsync the file's state is unknown (even whether earlier
            // pages reached the disk), so only a fresh scan may decide where the log ends.
            self.failed = true;
            return Err(io_error(&self.path, "append to", e));
        }
        self.end += bytes.len() as u64;
        self.next_seq += seqs.len() as u64;
        Ok(seqs)
    }

    /// Records that the shipper uploaded a segment, stamped with the current time (the registrar
    /// reports lag from it).
    pub fn append_uploaded(
        &mut self,
        dataset: impl Into<String>,
        segment_id: impl Into<String>,
        object_key: impl Into<String>,
        file_size: u64,
        row_count: u64,
    ) -> Result<u64> {
        self.append(LogEntry::Uploaded {
            dataset: dataset.into(),
            segment_id: segment_id.into(),
            object_key: object_key.into(),
            file_size,
            row_count,
            uploaded_at_ms: now_ms(),
        })
    }

    /// The seq the next appended record will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The id written in the header when the log was created; readers use it to notice that the
    /// file at a path was replaced by a new log.
    pub fn log_id(&self) -> Uuid {
        self.log_id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames the entries with consecutive seqs, without touching the writer's state.
    fn encode(&self, entries: impl IntoIterator<Item = LogEntry>) -> Result<(Vec<u8>, Vec<u64>)> {
        let mut bytes = Vec::new();
        let mut seqs = Vec::new();
        let mut seq = self.next_seq;
        for entry in entries {
            let record = LogRecord { seq, entry };
            format::encode_record(&record, &mut bytes).map_err(|e| self.refuse(e))?;
            seqs.push(seq);
            seq = seq
                .checked_add(1)
                .ok_or_else(|| self.refuse("sequence numbers are exhausted"))?;
        }
        Ok((bytes, seqs))
    }

    fn refuse(&self, why: impl std::fmt::Display) -> Error {
        Error::internal(format!(
            "refusing to append to segment catalog {}: {why}",
            self.path.display()
        ))
    }

    fn seek_to_end(&mut self) -> Result<()> {
        self.file
            .seek(SeekFrom::Start(self.end))
            .map(drop)
            .map_err(|e| io_error(&self.path, "seek in", e))
    }
}

fn create_parent(path: &Path) -> Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            fs::create_dir_all(parent).map_err(|e| io_error(path, "create the directory of", e))
        }
        _ => Ok(()),
    }
}

fn lock(file: &File, path: &Path) -> Result<()> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(Error::internal(format!(
            "segment catalog {} is already open for writing by another writer (it holds the \
             file's lock); only one process may append to a log",
            path.display()
        ))),
        Err(TryLockError::Error(e)) => Err(io_error(path, "lock", e)),
    }
}

/// Writes a fresh header over a file whose creation did not finish, and makes both the file and
/// its directory entry durable before any record is appended.
fn write_header(mut file: &File, path: &Path) -> Result<Uuid> {
    let log_id = Uuid::new_v4();
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(&format::encode_header(log_id)))
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(path, "write the header of", e))?;
    sync_parent(path)?;
    Ok(log_id)
}

/// Without this a crash right after creation could lose the file's name even though its data
/// was synced.
#[cfg(unix)]
fn sync_parent(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| io_error(path, "sync the directory of", e))
}

#[cfg(not(unix))]
fn sync_parent(_path: &Path) -> Result<()> {
    Ok(())
}

/// Scans the whole log and truncates a torn tail; returns where the next record goes and the
/// last seq written (0 for an empty log).
fn recover(file: &File, path: &Path, len: u64) -> Result<(u64, u64)> {
    let mut scanner = Scanner::new(file, path, HEADER_LEN, len, 0)?;
    let (mut end, mut last_seq) = (HEADER_LEN, 0);
    loop {
        match scanner.next_step()? {
            Step::Record { record, end: e, .. } => (end, last_seq) = (e, record.seq),
            Step::End => return Ok((end, last_seq)),
            Step::Torn { offset, what } => {
                truncate_torn(file, path, offset, len, &what)?;
                return Ok((offset, last_seq));
            }
        }
    }
}

fn truncate_torn(file: &File, path: &Path, offset: u64, len: u64, what: &str) -> Result<()> {
    tracing::warn!(
        path = %path.display(),
        offset,
        dropped_bytes = len - offset,
        "segment catalog ends in an incomplete record ({what}), left by a writer that crashed \
         mid-append; truncating it"
    );
    file.set_len(offset)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(path, "truncate the torn tail of", e))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
