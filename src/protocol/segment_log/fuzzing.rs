//! The check behind the `cargo fuzz` target `fuzz/fuzz_targets/segment_log.rs`: arbitrary bytes
//! as a log file, read by a reader and opened by a writer, with a panic for every broken
//! promise. It lives in the crate (hidden from the docs) so that the main build compiles and
//! tests it; the fuzz crate only supplies a directory and the bytes.

use std::path::Path;

use super::{LogEntry, SegmentLogReader, SegmentLogWriter};
use crate::error::ErrorCode;

/// Writes `bytes` as a log in `dir` and checks, for any input:
///
/// * nothing panics, and a read either succeeds or fails with `segment_catalog.corrupt`;
/// * a writer refuses exactly the logs the reader refuses, and then changes no byte;
/// * a writer that opens keeps every record the reader returned and appends after them.
///
/// Panics when one of these does not hold (which the fuzzer reports as a crash).
#[doc(hidden)]
pub fn check_log_bytes(dir: &Path, bytes: &[u8]) {
    let path = dir.join("fuzz-input.log");
    if let Err(e) = std::fs::write(&path, bytes) {
        panic!("cannot write the fuzz input to {}: {e}", path.display());
    }
    let read = SegmentLogReader::open(&path).and_then(|mut r| r.read_to_end());
    let records = match read {
        Ok(records) => Some(records),
        Err(e) => {
            assert_eq!(e.code(), ErrorCode::SegmentCatalogCorrupt, "reader: {e}");
            None
        }
    };
    let writer = SegmentLogWriter::open(&path);
    match (records, writer) {
        (Some(records), Ok(mut writer)) => {
            let entry = LogEntry::Finalized {
                dataset: "fuzz".into(),
                segment_id: "fuzz".into(),
                path: "/fuzz".into(),
                row_count: 1,
                file_size: 1,
            };
            let appended = writer.append(entry.clone());
            drop(writer);
            let after = SegmentLogReader::open(&path)
                .and_then(|mut r| r.read_to_end())
                .unwrap_or_else(|e| panic!("re-read after the writer opened: {e}"));
            assert!(
                after.len() >= records.len() && after[..records.len()] == records[..],
                "a writer changed or dropped a complete record: read {records:?}, then {after:?}"
            );
            // The append may fail only because the log used up its seqs.
            if appended.is_ok() {
                assert_eq!(after.len(), records.len() + 1, "the appended record");
                assert_eq!(after.last().map(|r| &r.entry), Some(&entry));
            }
        }
        (Some(_), Err(e)) => {
            // A log whose last seq is u64::MAX reads fine but cannot be continued.
            assert_eq!(
                e.code(),
                ErrorCode::Internal,
                "writer on a readable log: {e}"
            );
            assert_unchanged(&path, bytes);
        }
        (None, Ok(_)) => panic!("the reader refused the log but a writer opened it"),
        (None, Err(e)) => {
            assert_eq!(e.code(), ErrorCode::SegmentCatalogCorrupt, "writer: {e}");
            assert_unchanged(&path, bytes);
        }
    }
}

fn assert_unchanged(path: &Path, bytes: &[u8]) {
    let now = std::fs::read(path).unwrap_or_else(|e| panic!("re-read {}: {e}", path.display()));
    assert!(now == bytes, "a writer that did not open changed the file");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::segment_log::format;

    #[test]
    fn the_check_accepts_what_the_log_promises() {
        let dir = tempfile::tempdir().expect("tempdir");
        let header = format::encode_header(uuid::Uuid::new_v4());
        let mut log = header.to_vec();
        for seq in 1..=3 {
            let record = crate::protocol::segment_log::LogRecord {
                seq,
                entry: LogEntry::Finalized {
                    dataset: "d".into(),
                    segment_id: "s".into(),
                    path: "/p".into(),
                    row_count: 1,
                    file_size: 1,
                },
            };
            format::encode_record(&record, &mut log).expect("encode");
        }
        let mut inputs: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"THSEG".to_vec(),
            vec![0; 40],
            b"not a log at all".to_vec(),
            header.to_vec(),
            log.clone(),
        ];
        for cut in (header.len()..log.len()).step_by(7) {
            inputs.push(log[..cut].to_vec());
        }
        for at in (0..log.len()).step_by(5) {
            let mut damaged = log.clone();
            damaged[at] ^= 0x04;
            inputs.push(damaged);
        }
        for input in inputs {
            check_log_bytes(dir.path(), &input);
        }
    }
}
