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
//! All integers are little-endian. A third party can write a log with nothing but this section.
//!
//! ```text
//! file    = header record*
//! header  = "THSEGLOG"        8 bytes, ASCII
//!           version           u32 = 1
//!           log id            16 bytes: a random (v4) UUID in its raw RFC 9562 byte order,
//!                             i.e. the 16 bytes of 0123e456-... are 01 23 e4 56 ..., not text
//! record  = length            u32: payload bytes, 1 ..= 1_048_576 (1 MiB)
//!           crc               u32: CRC-32C (Castagnoli, the iSCSI/ext4 one) of the payload
//!           payload           `length` bytes: one JSON object, UTF-8, no whitespace before or
//!                             after it (inside it is free), no byte order mark
//! ```
//!
//! Each payload is a flat JSON object with `seq` and `kind` and the fields of that kind (field
//! order is free; unknown fields are ignored, so a writer may add its own):
//!
//! ```text
//! {"seq":1,"kind":"finalized","dataset":"telemetry","segment_id":"seg-1",
//!  "path":"/var/lib/thadam/seg-1.parquet","row_count":10,"file_size":2048}
//! {"seq":2,"kind":"uploaded","dataset":"telemetry","segment_id":"seg-1",
//!  "object_key":"lake/thadam/v1/edge/telemetry/seg-1.parquet","file_size":2048,
//!  "row_count":10,"uploaded_at_ms":1700000000000}
//! ```
//!
//! | field | kinds | JSON type | meaning |
//! |---|---|---|---|
//! | `seq` | all | integer, 1 ..= 2^64-1 | strictly increasing from record to record (gaps allowed), starting at 1 or above in a new log |
//! | `kind` | all | string | `finalized` or `uploaded`; other kinds are skipped by readers (with one warning per kind) but their `seq` still counts |
//! | `dataset` | both | string | the dataset, which names the table: 1 to 255 bytes, no `.`, `/` or control characters |
//! | `segment_id` | both | string | the producer's id of the segment (informational) |
//! | `path` | `finalized` | string | the local file the parquet sink wrote |
//! | `object_key` | `uploaded` | string | the object's key inside the configured bucket, exactly as S3 names it: no `s3://bucket/` prefix, no leading `/`; 1 to 1024 bytes, no empty, `.` or `..` segments between slashes, no control characters. The registrar registers `s3://{bucket}/{object_key}` |
//! | `file_size` | both | integer | bytes; for `uploaded` 1 ..= 5 TiB (S3's limit) and the object's exact size |
//! | `row_count` | both | integer, >= 0 | rows in the segment |
//! | `uploaded_at_ms` | `uploaded` | integer | when the upload was recorded, ms since the Unix epoch (registration lag is measured from it) |
//!
//! A record whose fields break these rules ([`validate_record`]) is refused where it is read, as
//! [`ErrorCode::SegmentCatalogCorrupt`] naming the file, offset, seq and field, and writers refuse
//! to append one. The same object key may appear in more than one `uploaded` record (a writer
//! whose append failed part-way may record the batch again); the registrar registers it once.
//!
//! The log id tells a reader that the file at a path is still the log it started reading (an
//! operator may move a corrupt log aside, and the next writer then starts a new one).
//!
//! # Torn tails and corruption
//!
//! A writer appends a batch of records with one `write` and one `sync_data`, and never starts a
//! batch before the previous one is on disk. So a crash can only damage the last batch, and only
//! in one way: some prefix of its bytes is in the file, and the rest is missing or, where the
//! file's new size reached the disk before its data did, reads as zero bytes. That, and nothing
//! else, is a torn tail: readers stop before it, and the next writer truncates it. Everything
//! else is [`ErrorCode::SegmentCatalogCorrupt`] with the file and byte offset, and no writer
//! truncates it: silently dropping a complete record could hide an upload from the registrar.
//!
//! The format has no checksum over the length field, so the reader must tell a torn last record
//! from a damaged length by what follows it. It relies on two facts: valid UTF-8 JSON never holds
//! a 0x00 byte, and every record header holds one (a length of at most 1 MiB has a zero high
//! byte). From the first bad record at offset `o`:
//!
//! * fewer than 8 bytes left: torn (the previous record's length was confirmed by its CRC).
//! * length 0 or over 1 MiB: torn only if everything from `o` to the end is zero.
//! * a record claiming more bytes than the file holds: torn only if what is there is the start
//!   of a JSON object (`{`) followed only by zero bytes, no prefix of it has the stored CRC, and
//!   it is not one complete JSON value. A damaged length instead swallows the next records (a
//!   zero byte followed by data) or, on the last record, a payload that is complete.
//! * a complete record whose CRC fails: torn only if its payload ends in zero bytes (unwritten
//!   blocks) and only zero bytes follow; a payload without a zero byte was written whole and
//!   damaged afterwards.
//! * a complete record whose CRC matches but that is not valid JSON, not a record, not above the
//!   previous seq, or fails [`validate_record`]: always corrupt, even as the last record.
//!
//! A single flipped bit therefore never shortens the log silently; only damage that mimics a
//! crash exactly (the end of the file overwritten with zeros) or a 32-bit CRC collision could.
//! A version 2 with a checksum over the length was considered and not needed for this; the
//! reasoning above is what `tests/segment_log.rs` fuzzes (random bit flips, truncations and
//! garbles over a log of 120 records).
//!
//! One process writes ([`SegmentLogWriter`], guarded by an advisory lock on the file); any number
//! read ([`SegmentLogReader`] for a one-shot read, [`SegmentLogTail`] to follow the log as it
//! grows). A writer opening an existing log continues it in its format (version 1, the only one).

mod cursor;
mod format;
#[doc(hidden)]
pub mod fuzzing;
mod history;
mod reader;
mod scan;
mod tail;
mod validate;
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
pub use validate::{
    InvalidField, MAX_DATASET_BYTES, MAX_OBJECT_KEY_BYTES, MAX_OBJECT_SIZE, validate_record,
};
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
    .with_source(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_failure_keeps_the_io_error_as_its_source() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().expect("tempdir");
        // The log's directory would sit under a regular file: creating it fails.
        let blocker = dir.path().join("file");
        std::fs::write(&blocker, b"x").expect("write");
        let Err(err) = SegmentLogWriter::open(blocker.join("sub").join("log")) else {
            panic!("no directory under a file");
        };
        assert!(err.message().contains("segment catalog"), "{err}");
        let source = err.source().expect("the io error underneath");
        assert!(source.downcast_ref::<io::Error>().is_some(), "{source:?}");
    }

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
