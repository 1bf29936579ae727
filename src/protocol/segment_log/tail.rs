//! Following a log as it grows: the registrar's input.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;
use uuid::Uuid;

use super::LogRecord;
use super::cursor::{Cursor, Limits, Polled};
use crate::error::{Error, Result};
use crate::protocol::feed::SegmentFeed;
use crate::protocol::segment::UploadedSegment;

/// How often the log is re-checked even without a file-system event: events can be lost (queue
/// overflow, the directory being recreated, network file systems) and the watcher may not be
/// available at all. One second bounds the extra delay and costs next to nothing.
const RECHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Follows a segment catalog log from its first record, waiting for new ones.
///
/// The registrar replays the whole log on every start (it keeps no cursor; it skips segments the
/// table already has), so a tail always starts at the beginning. Waiting costs no CPU: it sleeps
/// until a file-system event for the log file (from a watcher on its directory) or the 1 s
/// re-check, then reads only what was appended since the last complete record.
///
/// The file need not exist yet: the tail waits for a writer to create it. A torn tail is waited
/// on like the end of the log (the writer may be mid-append, or a restarted writer will truncate
/// it). Corruption, or the file being replaced by a different log while tailed, is an error.
pub struct SegmentLogTail {
    cursor: Cursor,
    /// Complete records read ahead in one pass; never partial bytes.
    pending: VecDeque<LogRecord>,
    last_seq: Option<u64>,
    wake: Wake,
    said_missing: bool,
    /// Passes over the file, to let tests check that waiting does not spin.
    polls: u64,
}

impl SegmentLogTail {
    /// Prepares to follow the log at `path`. Does no I/O: the file and even its directory may
    /// appear later, and problems surface from [`next_record`](Self::next_record).
    pub fn open(path: impl AsRef<Path>) -> SegmentLogTail {
        let path = path.as_ref().to_path_buf();
        SegmentLogTail {
            wake: Wake::new(&path),
            cursor: Cursor::new(path, 2),
            pending: VecDeque::new(),
            last_seq: None,
            said_missing: false,
            polls: 0,
        }
    }

    /// Waits until the next complete record is available and returns it. Records of kinds this
    /// build does not know are skipped.
    ///
    /// Cancel-safe: dropping the future before it completes loses no record, so it can be used in
    /// `tokio::select!`. An error (corruption, I/O) is returned again by later calls until the
    /// file is fixed.
    pub async fn next_record(&mut self) -> Result<LogRecord> {
        loop {
            if let Some(record) = self.pending.pop_front() {
                self.last_seq = Some(record.seq);
                return Ok(record);
            }
            // Watch before reading, so an append between the read and the wait still wakes us.
            self.wake.ensure_watching();
            self.read_more().await?;
            if self.pending.is_empty() {
                self.wake.wait().await;
            }
        }
    }

    /// The id of the log, once its header has been read.
    pub fn log_id(&self) -> Option<Uuid> {
        self.cursor.log_id()
    }

    /// The seq of the last record returned by [`next_record`](Self::next_record) (or whose
    /// segment was returned by [`SegmentFeed::next`]); `None` before the first.
    pub fn last_seq(&self) -> Option<u64> {
        self.last_seq
    }

    pub fn path(&self) -> &Path {
        self.cursor.path()
    }

    /// One pass over the file on the blocking pool, on a copy of the cursor so that a cancelled
    /// call leaves the position unchanged.
    async fn read_more(&mut self) -> Result<()> {
        let mut cursor = self.cursor.clone();
        let (cursor, polled) = tokio::task::spawn_blocking(move || {
            let polled = cursor.poll(Limits::default());
            (cursor, polled)
        })
        .await
        .map_err(|e| {
            Error::internal(format!(
                "reading segment catalog {} failed: {e}",
                self.cursor.path().display()
            ))
            .with_source(e)
        })?;
        self.cursor = cursor;
        self.polls += 1;
        match polled? {
            Polled::Records(records) => self.pending.extend(records),
            Polled::Missing => self.note_missing(),
        }
        Ok(())
    }

    fn note_missing(&mut self) {
        if !self.said_missing {
            self.said_missing = true;
            tracing::info!(
                path = %self.cursor.path().display(),
                "segment catalog does not exist yet; waiting for a writer to create it"
            );
        }
    }
}

impl fmt::Debug for SegmentLogTail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentLogTail")
            .field("path", &self.cursor.path())
            .field("log_id", &self.log_id())
            .field("last_seq", &self.last_seq)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// Yields the `Uploaded` records as segments; other kinds are skipped. Never `Ok(None)`: a log
/// file has no end, more uploads may always be appended.
#[async_trait]
impl SegmentFeed for SegmentLogTail {
    async fn next(&mut self) -> Result<Option<UploadedSegment>> {
        loop {
            if let Some(mut segment) = self.next_record().await?.into_uploaded() {
                // Seqs are unique and increasing within one log instance: its id scopes them.
                segment.catalog_id = self.log_id().map(|id| id.to_string());
                return Ok(Some(segment));
            }
        }
    }

    fn history(&self) -> Option<Arc<dyn crate::protocol::feed::SegmentHistory>> {
        Some(Arc::new(super::LogFileHistory::new(self.cursor.path())))
    }
}

/// Wakes the tail when the log file may have changed.
struct Wake {
    notify: Arc<Notify>,
    dir: PathBuf,
    file_name: Option<OsString>,
    watcher: WatcherState,
    warned: bool,
}

enum WatcherState {
    NotCreated,
    /// The platform watcher could not be created; the re-check interval is all we have.
    Unavailable,
    Created {
        watcher: RecommendedWatcher,
        watching: bool,
    },
}

impl Wake {
    fn new(path: &Path) -> Wake {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Wake {
            notify: Arc::new(Notify::new()),
            dir,
            file_name: path.file_name().map(OsStr::to_os_string),
            watcher: WatcherState::NotCreated,
            warned: false,
        }
    }

    /// Creates the watcher on first use and watches the directory once it exists (it may be
    /// created after the tail starts). Failures fall back to the re-check interval.
    fn ensure_watching(&mut self) {
        if let WatcherState::NotCreated = self.watcher {
            let notify = Arc::clone(&self.notify);
            let name = self.file_name.clone();
            self.watcher = match notify::recommended_watcher(move |event| {
                if concerns_log(&event, name.as_deref()) {
                    notify.notify_one();
                }
            }) {
                Ok(watcher) => WatcherState::Created {
                    watcher,
                    watching: false,
                },
                Err(e) => {
                    self.warn_unwatched(&e);
                    WatcherState::Unavailable
                }
            };
        }
        if let WatcherState::Created { watcher, watching } = &mut self.watcher
            && !*watching
            && self.dir.is_dir()
        {
            match watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                Ok(()) => *watching = true,
                Err(e) => {
                    let e = e.to_string();
                    self.warn_unwatched(&e);
                }
            }
        }
    }

    fn warn_unwatched(&mut self, err: &dyn fmt::Display) {
        if !self.warned {
            self.warned = true;
            tracing::warn!(
                dir = %self.dir.display(),
                "cannot watch the segment catalog's directory for changes ({err}); checking it \
                 every {}s instead",
                RECHECK_INTERVAL.as_secs()
            );
        }
    }

    /// Sleeps until an event or the re-check interval. An event that arrived since the last wait
    /// left a permit in the `Notify`, so it is not lost.
    async fn wait(&self) {
        let _ = tokio::time::timeout(RECHECK_INTERVAL, self.notify.notified()).await;
    }
}

/// Whether a watcher event may mean the log file changed. Events for other files in the
/// directory (the parquet segments may live next to the log) and read-only accesses (including
/// the tail's own opens) are ignored, or the tail would wake itself in a loop. Errors and events
/// without paths (e.g. a rescan request) count, to be safe.
fn concerns_log(event: &notify::Result<Event>, name: Option<&OsStr>) -> bool {
    let Ok(event) = event else {
        return true;
    };
    if let EventKind::Access(kind) = event.kind
        && kind != AccessKind::Close(AccessMode::Write)
    {
        return false;
    }
    match name {
        None => true,
        Some(name) => {
            event.paths.is_empty() || event.paths.iter().any(|p| p.file_name() == Some(name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::segment_log::{LogEntry, SegmentLogWriter};
    use notify::event::{CreateKind, ModifyKind};

    fn event(kind: EventKind, path: &str) -> notify::Result<Event> {
        Ok(Event::new(kind).add_path(PathBuf::from(path)))
    }

    #[test]
    fn only_changes_to_the_log_file_wake_the_tail() {
        let name = Some(OsStr::new("catalog.log"));
        let modify = EventKind::Modify(ModifyKind::Any);
        assert!(concerns_log(&event(modify, "/d/catalog.log"), name));
        assert!(concerns_log(
            &event(EventKind::Create(CreateKind::File), "/d/catalog.log"),
            name
        ));
        assert!(!concerns_log(&event(modify, "/d/seg-1.parquet"), name));
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert!(!concerns_log(&event(open, "/d/catalog.log"), name));
        let close_read = EventKind::Access(AccessKind::Close(AccessMode::Read));
        assert!(!concerns_log(&event(close_read, "/d/catalog.log"), name));
        let close_write = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert!(concerns_log(&event(close_write, "/d/catalog.log"), name));
        assert!(concerns_log(&Ok(Event::new(EventKind::Any)), name));
        assert!(concerns_log(&Err(notify::Error::generic("overflow")), name));
    }

    /// A waiting tail must sleep, not spin: its own reads of the file must not wake it. Over
    /// about two seconds of waiting it may poll a few times (the 1 s re-check); a spinning tail
    /// would poll thousands of times.
    #[tokio::test]
    async fn waiting_at_the_end_does_not_spin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("catalog.log");
        let mut writer = SegmentLogWriter::open(&path).expect("writer");
        writer
            .append(LogEntry::Finalized {
                dataset: "d".into(),
                segment_id: "s".into(),
                path: "/p".into(),
                row_count: 1,
                file_size: 1,
            })
            .expect("append");
        // Another file in the same directory changing must not wake the tail either.
        let neighbour = dir.path().join("seg.parquet");
        let mut tail = SegmentLogTail::open(&path);
        tail.next_record().await.expect("first record");
        let waited = tokio::time::timeout(Duration::from_millis(2100), async {
            tokio::select! {
                r = tail.next_record() => r.map(|_| ()),
                () = async {
                    for i in 0..20u8 {
                        std::fs::write(&neighbour, [i]).expect("write neighbour");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    std::future::pending::<()>().await
                } => Ok(()),
            }
        })
        .await;
        assert!(
            waited.is_err(),
            "the tail returned although nothing was appended"
        );
        assert!(
            tail.polls <= 8,
            "the tail polled {} times while idle",
            tail.polls
        );
    }
}
