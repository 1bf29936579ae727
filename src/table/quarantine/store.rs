//! The quarantine file.
//!
//! JSON lines, append-only, owned by the registrar (default `{segment catalog}.quarantine`).
//! Every line is one [`Line`]; the state of a `(dataset, object key)` is the fold of its lines
//! in file order ([`QuarantineState`]). The registrar appends `quarantined` and `registered`
//! lines; the operator (`examples/registrar.rs --quarantine`) appends `retry` and `discarded`.
//! Each line goes out in one `write` on an `O_APPEND` descriptor (so two writers never interleave
//! within a line) followed by `fdatasync`.
//!
//! A torn last line (a crash mid-write) is tolerated: it is skipped with a warning, and the next
//! writer first ends it with a newline. Nothing depended on it: a committer goes on past a bad
//! segment only once its `quarantined` line is on disk, and an operator command reports success
//! only then.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode, Result};
use crate::protocol::segment::UploadedSegment;

/// One line of the quarantine file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Line {
    /// The registrar could not register `segment` (the whole `Uploaded` record).
    Quarantined {
        at_ms: u64,
        segment: UploadedSegment,
        code: String,
        message: String,
    },
    /// The operator asks the registrar to attempt the key again.
    Retry {
        at_ms: u64,
        dataset: String,
        key: String,
    },
    /// The operator gave the key up: it is decided and never attempted again.
    Discarded {
        at_ms: u64,
        dataset: String,
        key: String,
        reason: String,
    },
    /// The registrar registered the key (the record at `seq`), or found it registered.
    Registered {
        at_ms: u64,
        dataset: String,
        key: String,
        seq: u64,
    },
}

/// How an entry was closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    Discarded { at_ms: u64, reason: String },
    Registered { at_ms: u64, seq: u64 },
}

/// Everything known of one quarantined key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The latest quarantined record of the key.
    pub segment: UploadedSegment,
    pub code: String,
    pub message: String,
    pub at_ms: u64,
    /// The operator asked for a retry since it was (last) quarantined.
    pub retry: bool,
    /// `None` while open.
    pub resolution: Option<Resolution>,
}

impl Entry {
    pub(crate) fn is_open(&self) -> bool {
        self.resolution.is_none()
    }
}

/// The fold of a quarantine file's lines, by `(dataset, key)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuarantineState {
    entries: BTreeMap<(String, String), Entry>,
}

impl QuarantineState {
    /// Applies one line. `retry`/`discarded`/`registered` for a key never quarantined do nothing.
    pub(crate) fn apply(&mut self, line: Line) {
        match line {
            Line::Quarantined {
                at_ms,
                segment,
                code,
                message,
            } => {
                let key = (segment.dataset.clone(), segment.object_key.clone());
                self.entries.insert(
                    key,
                    Entry {
                        segment,
                        code,
                        message,
                        at_ms,
                        retry: false,
                        resolution: None,
                    },
                );
            }
            Line::Retry { dataset, key, .. } => {
                if let Some(e) = self.entries.get_mut(&(dataset, key))
                    && e.is_open()
                {
                    e.retry = true;
                }
            }
            Line::Discarded {
                at_ms,
                dataset,
                key,
                reason,
            } => {
                if let Some(e) = self.entries.get_mut(&(dataset, key))
                    && e.is_open()
                {
                    e.resolution = Some(Resolution::Discarded { at_ms, reason });
                }
            }
            Line::Registered {
                at_ms,
                dataset,
                key,
                seq,
            } => {
                if let Some(e) = self.entries.get_mut(&(dataset, key)) {
                    e.resolution = Some(Resolution::Registered { at_ms, seq });
                }
            }
        }
    }

    pub fn get(&self, dataset: &str, key: &str) -> Option<&Entry> {
        self.entries.get(&(dataset.to_string(), key.to_string()))
    }

    /// Every entry, open or closed, in (dataset, key) order.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    /// The open entries.
    pub fn open(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values().filter(|e| e.is_open())
    }
}

/// Parses the complete lines of `bytes` (up to its last newline) into `state`; returns how many
/// bytes were consumed. A line that does not parse (a torn write ended by a later writer's
/// newline, or an unknown future line) is skipped with a warning.
pub(crate) fn apply_lines(state: &mut QuarantineState, bytes: &[u8], path: &Path) -> usize {
    let Some(end) = bytes.iter().rposition(|b| *b == b'\n') else {
        return 0;
    };
    for raw in bytes[..end].split(|b| *b == b'\n') {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Line>(raw) {
            Ok(line) => state.apply(line),
            Err(e) => tracing::warn!(
                file = %path.display(),
                "skipping a quarantine line that does not parse ({e}); a write torn by a crash \
                 leaves one, and nothing depended on it"
            ),
        }
    }
    end + 1
}

/// The quarantine file and its state as last read. Shared by every committer of a registrar;
/// operations are blocking file I/O on a small file (called rarely: on a bad segment, on a
/// registration of a quarantined one, and on a poll while entries are held).
#[derive(Debug)]
pub struct QuarantineStore {
    path: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: QuarantineState,
    /// Bytes of the file folded into `state` (always at a line boundary).
    offset: u64,
}

fn io_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::new(
        ErrorCode::QuarantineFailed,
        format!(
            "{what} the quarantine file {} failed: {e}; check that the directory exists and is \
             writable by the registrar, and that the disk is not full",
            path.display()
        ),
    )
}

impl QuarantineStore {
    /// Opens (reads) the file at `path`; an absent file is an empty quarantine.
    pub fn open(path: impl AsRef<Path>) -> Result<QuarantineStore> {
        let store = QuarantineStore {
            path: path.as_ref().to_path_buf(),
            inner: Mutex::new(Inner::default()),
        };
        store.refresh()?;
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent state (apply is total).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Folds in the lines appended since the last read (by the operator, or another process).
    pub(crate) fn refresh(&self) -> Result<()> {
        let mut inner = self.lock();
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                *inner = Inner::default();
                return Ok(());
            }
            Err(e) => return Err(io_error(&self.path, "opening", e)),
        };
        let len = file
            .metadata()
            .map_err(|e| io_error(&self.path, "reading", e))?
            .len();
        if len < inner.offset {
            // Replaced by a shorter file: read it again from the start.
            *inner = Inner::default();
        }
        file.seek(SeekFrom::Start(inner.offset))
            .map_err(|e| io_error(&self.path, "reading", e))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| io_error(&self.path, "reading", e))?;
        let Inner { state, offset } = &mut *inner;
        let used = apply_lines(state, &bytes, &self.path);
        *offset += used as u64;
        Ok(())
    }

    /// Appends `line` durably (one write, then fdatasync), ending a torn last line first, and
    /// folds in everything up to it.
    pub(crate) fn append(&self, line: &Line) -> Result<()> {
        let mut text = serde_json::to_string(line)
            .map_err(|e| Error::internal(format!("cannot encode a quarantine line: {e}")))?;
        text.push('\n');
        {
            // Held across the write so that this process's appends are ordered with its reads.
            let _guard = self.lock();
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&self.path)
                .map_err(|e| io_error(&self.path, "opening", e))?;
            let len = file
                .metadata()
                .map_err(|e| io_error(&self.path, "reading", e))?
                .len();
            if len > 0 {
                let mut last = [0u8; 1];
                file.seek(SeekFrom::Start(len - 1))
                    .and_then(|_| file.read_exact(&mut last))
                    .map_err(|e| io_error(&self.path, "reading", e))?;
                if last[0] != b'\n' {
                    text.insert(0, '\n');
                }
            }
            file.write_all(text.as_bytes())
                .and_then(|()| file.sync_data())
                .map_err(|e| io_error(&self.path, "writing", e))?;
        }
        self.refresh()
    }

    /// A copy of the state as last read.
    pub fn state(&self) -> QuarantineState {
        self.lock().state.clone()
    }

    /// The entry of `(dataset, key)`, if it was ever quarantined.
    pub(crate) fn get(&self, dataset: &str, key: &str) -> Option<Entry> {
        self.lock().state.get(dataset, key).cloned()
    }

    /// How many entries are open.
    pub(crate) fn open_count(&self) -> usize {
        self.lock().state.open().count()
    }
}

/// Milliseconds since the Unix epoch, for the lines' `at_ms`.
pub fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seq: u64, key: &str) -> UploadedSegment {
        UploadedSegment {
            file_size: 10,
            catalog_id: Some("log".into()),
            ..crate::testing::segment(seq, "d", key)
        }
    }

    fn quarantined(seq: u64, key: &str) -> Line {
        Line::Quarantined {
            at_ms: 1,
            segment: seg(seq, key),
            code: ErrorCode::FooterInvalid.as_str().into(),
            message: "bad".into(),
        }
    }

    #[test]
    fn the_fold_follows_quarantine_retry_discard_and_registration() {
        let mut state = QuarantineState::default();
        state.apply(quarantined(5, "k"));
        assert!(state.get("d", "k").is_some_and(|e| e.is_open() && !e.retry));
        state.apply(Line::Retry {
            at_ms: 2,
            dataset: "d".into(),
            key: "k".into(),
        });
        assert!(state.get("d", "k").is_some_and(|e| e.retry));
        // Failing again re-quarantines it (a new record: the later one wins).
        state.apply(quarantined(21, "k"));
        let e = state.get("d", "k").expect("entry");
        assert!(!e.retry && e.segment.seq == 21);
        state.apply(Line::Discarded {
            at_ms: 3,
            dataset: "d".into(),
            key: "k".into(),
            reason: "lost".into(),
        });
        assert!(!state.get("d", "k").expect("entry").is_open());
        assert_eq!(state.open().count(), 0);
        state.apply(Line::Retry {
            at_ms: 4,
            dataset: "d".into(),
            key: "other".into(),
        });
        assert!(state.get("d", "other").is_none(), "never quarantined");
    }

    #[test]
    fn a_torn_last_line_is_left_for_later_and_a_torn_middle_line_skipped() {
        let mut state = QuarantineState::default();
        let good = serde_json::to_string(&quarantined(5, "a")).expect("json");
        let torn = &serde_json::to_string(&quarantined(6, "b")).expect("json")[..20];
        let text = format!("{good}\n{torn}");
        let used = apply_lines(&mut state, text.as_bytes(), Path::new("q"));
        assert_eq!(used, good.len() + 1, "the torn tail is not consumed");
        assert!(state.get("d", "a").is_some());
        let more = serde_json::to_string(&quarantined(7, "c")).expect("json");
        let text = format!("{torn}\n{more}\n");
        apply_lines(&mut state, text.as_bytes(), Path::new("q"));
        assert!(state.get("d", "b").is_none());
        assert!(state.get("d", "c").is_some());
    }

    #[test]
    fn the_store_appends_durably_and_repairs_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.quarantine");
        let store = QuarantineStore::open(&path).expect("open absent");
        assert_eq!(store.open_count(), 0);
        store.append(&quarantined(5, "a")).expect("append");
        // A crash mid-write of another process.
        let mut f = OpenOptions::new().append(true).open(&path).expect("open");
        f.write_all(b"{\"op\":\"quaran").expect("torn");
        store
            .append(&quarantined(6, "b"))
            .expect("append after torn");
        let reopened = QuarantineStore::open(&path).expect("reopen");
        assert_eq!(reopened.open_count(), 2);
        // Another writer's line is seen on refresh.
        let other = QuarantineStore::open(&path).expect("other");
        other
            .append(&Line::Retry {
                at_ms: 9,
                dataset: "d".into(),
                key: "a".into(),
            })
            .expect("retry");
        assert!(!store.get("d", "a").expect("a").retry);
        store.refresh().expect("refresh");
        assert!(store.get("d", "a").expect("a").retry);
    }
}
