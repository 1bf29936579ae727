//! The segment catalog log: the durable, append-only file in which the parquet sink records
//! finalized segments and the object_store shipper records uploads, and which the registrar tails.
//!
//! It is a plain file rather than a database because the producers and the registrar are separate
//! processes that must survive crashes independently: each append is one `write` followed by
//! `sync_data`, so after any crash the file holds a prefix of what was appended plus, at worst, one
//! incomplete ("torn") batch at the end, which readers ignore and the next writer truncates away.
//!
//! # Layout (format version 1)
//!
//! ```text
//! header:  "THSEGLOG" (8 bytes) | format version, u32 LE (= 1) | log id, 16-byte UUID
//! record:  payload length, u32 LE | crc32c of payload, u32 LE | payload (UTF-8 JSON of LogRecord)
//! ```
//!
//! The log id tells a reader that the file at a path is still the log it started reading (an
//! operator may move a corrupt log aside, and the next writer then starts a new one). Payloads are
//! 1 byte to 1 MiB; `seq` starts at 1 and strictly increases.
//!
//! # Failure model
//!
//! * A torn tail (the last record runs past the end of the file, or fails its CRC or JSON with
//!   nothing but zero bytes after it) is the normal result of a crash and is never an error.
//! * Damage anywhere else is [`ErrorCode::SegmentCatalogCorrupt`]: silently skipping a record
//!   could hide an upload from the registrar, so a human decides what to do.
//!
//! One process writes ([`SegmentLogWriter`], guarded by an advisory lock); any number read
//! ([`SegmentLogReader`] for a one-shot read, [`SegmentLogTail`] to follow the log as it grows).

mod cursor;
mod format;
mod history;
mod reader;
mod scan;
mod tail;
mod writer;

use std::fmt;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode};
use crate::protocol::segment::UploadedSegment;

pub use history::LogFileHistory;
pub use reader::SegmentLogReader;
pub use tail::SegmentLogTail;
pub use writer::SegmentLogWriter;

/// One record of the log: its sequence number and what happened.
///
/// `entry` is flattened so the JSON stays one flat object (`{"seq":1,"kind":"uploaded",...}`),
/// which is easy to read with `jq` when an operator inspects a log by hand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogRecord {
    pub seq: u64,
    #[serde(flatten)]
    pub entry: LogEntry,
}

/// What a record says. Unknown fields inside a known kind are ignored, so a newer writer may add
/// fields without breaking older readers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LogEntry {
    /// The parquet sink finalized a segment locally.
    Finalized {
        dataset: String,
        segment_id: String,
        path: String,
        row_count: u64,
        file_size: u64,
    },
    /// The shipper uploaded it; object_key is the key inside the bucket.
    Uploaded {
        dataset: String,
        segment_id: String,
        object_key: String,
        file_size: u64,
        row_count: u64,
        uploaded_at_ms: u64,
    },
    /// A kind written by a newer version: skipped by readers, never an error.
    ///
    /// Readers never return it; writers refuse to append it (it carries no data to write).
    #[serde(other)]
    Unknown,
}

impl LogRecord {
    /// The registrar's view of an `Uploaded` record; `None` for every other kind, because only
    /// uploaded segments can be registered.
    pub fn into_uploaded(self) -> Option<UploadedSegment> {
        match self.entry {
            LogEntry::Uploaded {
                dataset,
                segment_id,
                object_key,
                file_size,
                row_count,
                uploaded_at_ms,
            } => Some(UploadedSegment {
                seq: self.seq,
                dataset,
                segment_id,
                object_key,
                file_size,
                row_count,
                uploaded_at_ms,
                catalog_id: None,
            }),
            LogEntry::Finalized { .. } | LogEntry::Unknown => None,
        }
    }
}

/// The error for damage a crash cannot explain. It names the file and the byte offset so an
/// operator can inspect it (`xxd -s OFFSET`), and says how to recover.
pub(crate) fn corrupt(path: &Path, offset: u64, what: impl fmt::Display) -> Error {
    Error::new(
        ErrorCode::SegmentCatalogCorrupt,
        format!(
            "segment catalog {} is corrupt at byte offset {offset}: {what}; restore the file from \
             backup or move it aside (the registrar re-derives what is registered from the table)",
            path.display()
        ),
    )
}

/// An I/O failure on the log file. Not `Unavailable`: a local disk error does not go away by
/// retrying the same call, and hiding it behind backoff would delay the alert.
pub(crate) fn io_error(path: &Path, action: &str, err: io::Error) -> Error {
    Error::internal(format!(
        "cannot {action} segment catalog {}: {err}",
        path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uploaded() -> LogEntry {
        LogEntry::Uploaded {
            dataset: "logs".into(),
            segment_id: "seg-1".into(),
            object_key: "logs/seg-1.parquet".into(),
            file_size: u64::MAX,
            row_count: 3,
            uploaded_at_ms: 1_700_000_000_000,
        }
    }

    #[test]
    fn flattened_record_round_trips_both_kinds() {
        let finalized = LogEntry::Finalized {
            dataset: "logs".into(),
            segment_id: "seg-1".into(),
            path: "/data/seg-1.parquet".into(),
            row_count: 10,
            file_size: 2048,
        };
        for entry in [finalized, uploaded()] {
            let record = LogRecord {
                seq: u64::MAX,
                entry,
            };
            let json = serde_json::to_string(&record).expect("serialize");
            let back: LogRecord = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back, record);
        }
    }

    #[test]
    fn json_is_one_flat_object() {
        let json = serde_json::to_value(LogRecord {
            seq: 7,
            entry: uploaded(),
        })
        .expect("serialize");
        assert_eq!(json["seq"], 7);
        assert_eq!(json["kind"], "uploaded");
        assert_eq!(json["object_key"], "logs/seg-1.parquet");
    }

    #[test]
    fn unknown_kind_and_unknown_fields_decode() {
        let newer: LogRecord =
            serde_json::from_str(r#"{"seq":5,"kind":"compacted","upto":4,"x":{"y":[1]}}"#)
                .expect("unknown kind");
        assert_eq!(newer.entry, LogEntry::Unknown);
        assert_eq!(newer.seq, 5);
        let extra: LogRecord = serde_json::from_str(
            r#"{"seq":2,"kind":"finalized","dataset":"d","segment_id":"s","path":"p",
                "row_count":1,"file_size":2,"added_later":true}"#,
        )
        .expect("extra field");
        assert!(matches!(extra.entry, LogEntry::Finalized { .. }));
    }

    #[test]
    fn missing_seq_kind_or_fields_do_not_decode() {
        for bad in [
            r#"{"seq":5}"#,
            r#"{"kind":"finalized"}"#,
            r#"{"seq":5,"kind":"uploaded"}"#,
            r#"{"seq":-1,"kind":"uploaded"}"#,
        ] {
            assert!(serde_json::from_str::<LogRecord>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn into_uploaded_keeps_seq_and_skips_other_kinds() {
        let segment = LogRecord {
            seq: 9,
            entry: uploaded(),
        }
        .into_uploaded()
        .expect("uploaded");
        assert_eq!(segment.seq, 9);
        assert_eq!(segment.object_key, "logs/seg-1.parquet");
        let unknown = LogRecord {
            seq: 10,
            entry: LogEntry::Unknown,
        };
        assert_eq!(unknown.into_uploaded(), None);
    }
}
