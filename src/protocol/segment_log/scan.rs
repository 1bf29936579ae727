//! Reading the header and walking records in an open file, deciding for each bad spot whether a
//! crash explains it (a torn tail) or not (corruption). Writer recovery and readers share this so
//! that they always agree on where the last good record ends: a writer truncates exactly what a
//! reader never returned.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use super::format::{self, FRAME_HEADER_LEN, FrameHeader, HEADER_LEN, Header, PayloadError};
use super::validate::validate_record;
use super::{LogEntry, LogRecord, corrupt, io_error};
use crate::error::Result;

/// Reads and validates the header of a file that is `len` bytes long.
pub(crate) fn read_header(mut file: &File, len: u64, path: &Path) -> Result<Header> {
    let n = len.min(HEADER_LEN) as usize;
    let mut bytes = [0u8; HEADER_LEN as usize];
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_exact(&mut bytes[..n]))
        .map_err(|e| io_error(path, "read the header of", e))?;
    format::parse_header(&bytes[..n]).map_err(|e| corrupt(path, 0, e))
}

/// One step of a scan.
#[derive(Debug)]
pub(crate) enum Step {
    /// A complete, valid record ending at byte `end`. For a kind this build does not know
    /// (`LogEntry::Unknown`), `unknown_kind` names it.
    Record {
        record: LogRecord,
        end: u64,
        unknown_kind: Option<String>,
    },
    /// The file ends exactly after the last record.
    End,
    /// The record at `offset` is incomplete in a way only a crash during the last append
    /// explains; the log ends before it. It never holds a complete record.
    Torn { offset: u64, what: String },
}

/// Walks records from a given offset up to a fixed length. The length is taken once, before the
/// scan, so a record the writer is appending meanwhile is either seen whole on a later scan or
/// seen here as a torn tail, never read half-old, half-new.
///
/// What counts as torn (see the module documentation of `segment_log` for the argument): the
/// bytes from the bad spot to the end of the file must be what an append cut short by a crash
/// leaves, a prefix of what was being written followed only by zero bytes. Everything else is
/// corruption.
pub(crate) struct Scanner<'a> {
    input: BufReader<io::Take<&'a File>>,
    path: &'a Path,
    pos: u64,
    len: u64,
    last_seq: u64,
}

impl<'a> Scanner<'a> {
    /// Starts at `offset` (the end of a record already known to be good, whose seq was
    /// `last_seq`; 0 before the first record).
    pub(crate) fn new(
        mut file: &'a File,
        path: &'a Path,
        offset: u64,
        len: u64,
        last_seq: u64,
    ) -> Result<Scanner<'a>> {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| io_error(path, "seek in", e))?;
        let input = BufReader::with_capacity(64 * 1024, file.take(len.saturating_sub(offset)));
        Ok(Scanner {
            input,
            path,
            pos: offset,
            len,
            last_seq,
        })
    }

    /// The next record, the end of the log, or the corruption error.
    pub(crate) fn next_step(&mut self) -> Result<Step> {
        match self.try_next_step() {
            // The file shrank under us: a new writer truncated a torn tail. Whatever was there
            // was not a complete record, so the log ends here for this scan.
            Err(ScanError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(Step::Torn {
                offset: self.pos,
                what: "the file shrank while it was read".to_owned(),
            }),
            Err(ScanError::Io(e)) => Err(io_error(self.path, "read", e)),
            Err(ScanError::Corrupt(what)) => Err(corrupt(self.path, self.pos, what)),
            Ok(step) => Ok(step),
        }
    }

    fn try_next_step(&mut self) -> Result<Step, ScanError> {
        let offset = self.pos;
        let remaining = self.len - offset;
        if remaining == 0 {
            return Ok(Step::End);
        }
        if remaining < FRAME_HEADER_LEN {
            // The record before ended here by its own length, which its CRC confirmed; only a
            // cut leaves fewer bytes than a frame header.
            return Ok(self.torn(format!(
                "the record header is cut short ({remaining} of {FRAME_HEADER_LEN} bytes)"
            )));
        }
        let mut raw = [0u8; FRAME_HEADER_LEN as usize];
        self.input.read_exact(&mut raw)?;
        let header = FrameHeader::parse(raw);
        if !header.len_is_valid() {
            return self.bad_length(header, raw);
        }
        let end = offset + FRAME_HEADER_LEN + u64::from(header.len);
        if end > self.len {
            let present = self.len - offset - FRAME_HEADER_LEN;
            // At most MAX_PAYLOAD_LEN bytes: `present` is below the valid length.
            let mut bytes = vec![0u8; present as usize];
            self.input.read_exact(&mut bytes)?;
            return self.past_end(header, &bytes);
        }
        let mut payload = vec![0u8; header.len as usize];
        self.input.read_exact(&mut payload)?;
        let record = match format::decode_payload(&payload, header.crc) {
            Ok(record) => record,
            Err(PayloadError::Crc(what)) => return self.bad_crc(what, &payload),
            Err(PayloadError::NotARecord(what)) => {
                return Err(ScanError::Corrupt(format!(
                    "{what} (its CRC matches, so these are the bytes a writer wrote: no crash \
                     explains them)"
                )));
            }
        };
        if record.seq <= self.last_seq {
            return Err(ScanError::Corrupt(format!(
                "seq {} does not follow seq {} (sequence numbers must strictly increase)",
                record.seq, self.last_seq
            )));
        }
        if let Err(invalid) = validate_record(&record) {
            return Err(ScanError::Corrupt(format!(
                "record seq {} is invalid: {invalid}; fix the writer that recorded it (the \
                 parquet sink or its shipper)",
                record.seq
            )));
        }
        let unknown_kind = (record.entry == LogEntry::Unknown).then(|| format::kind_name(&payload));
        self.last_seq = record.seq;
        self.pos = end;
        Ok(Step::Record {
            record,
            end,
            unknown_kind,
        })
    }

    /// A length no writer produces. Zeros to the end of the file are a torn tail (a crash after
    /// the file grew but before its data reached the disk); anything else is damage, and since
    /// the length is unusable we cannot tell where the next record would start.
    fn bad_length(&mut self, header: FrameHeader, raw: [u8; 8]) -> Result<Step, ScanError> {
        if raw == [0u8; 8] && self.rest_is_zero()? {
            return Ok(self.torn("the log ends in zero bytes".to_owned()));
        }
        Err(ScanError::Corrupt(format!(
            "invalid payload length {} (must be 1 to {} bytes)",
            header.len,
            format::MAX_PAYLOAD_LEN
        )))
    }

    /// A frame that claims more bytes than the file holds. That is a torn append only if what
    /// follows its header is the start of a payload and then zeros. A damaged length shows
    /// instead: it swallows the next frames (whose headers hold zero bytes followed by data),
    /// or, on the last record, a payload that is complete after all.
    fn past_end(&mut self, header: FrameHeader, bytes: &[u8]) -> Result<Step, ScanError> {
        let cut_short = format!(
            "the record claims a {}-byte payload but the file holds {} bytes of it",
            header.len,
            bytes.len()
        );
        if !format::is_crash_remnant(bytes) {
            return Err(ScanError::Corrupt(format!(
                "{cut_short}, and they are not an incomplete write (data follows a zero byte, \
                 as in a following record): the length field is damaged"
            )));
        }
        if format::holds_complete_payload(format::written_part(bytes), header.crc) {
            return Err(ScanError::Corrupt(format!(
                "{cut_short}, and they hold a complete record: the length field is damaged"
            )));
        }
        Ok(self.torn(format!("the payload is cut short: {cut_short}")))
    }

    /// A complete frame whose payload fails its CRC. A crash can leave one (the file's size
    /// reached the disk, some of its data did not) only as a payload that ends in zero bytes
    /// with nothing but zeros after it. A payload without a zero byte was written in full and
    /// damaged since; data after it means the log went on.
    fn bad_crc(&mut self, what: String, payload: &[u8]) -> Result<Step, ScanError> {
        let unwritten = format::written_part(payload).len() < payload.len();
        if !unwritten {
            return Err(ScanError::Corrupt(format!(
                "{what}; the payload holds no unwritten (zero) bytes, so it was damaged after it \
                 was written"
            )));
        }
        if format::is_crash_remnant(payload) && self.rest_is_zero()? {
            return Ok(self.torn(format!(
                "{what}; the payload ends in zero bytes, as an append that did not reach the \
                 disk leaves"
            )));
        }
        Err(ScanError::Corrupt(format!(
            "{what}, and more data follows it"
        )))
    }

    fn torn(&self, what: String) -> Step {
        Step::Torn {
            offset: self.pos,
            what,
        }
    }

    /// Whether every byte from the current read position to the scan's end is zero.
    fn rest_is_zero(&mut self) -> io::Result<bool> {
        loop {
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                return Ok(true);
            }
            if chunk.iter().any(|&b| b != 0) {
                return Ok(false);
            }
            let n = chunk.len();
            self.input.consume(n);
        }
    }
}

enum ScanError {
    Io(io::Error),
    Corrupt(String),
}

impl From<io::Error> for ScanError {
    fn from(e: io::Error) -> Self {
        ScanError::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::protocol::segment_log::LogEntry;
    use std::io::Write;

    fn record(seq: u64) -> LogRecord {
        LogRecord {
            seq,
            entry: LogEntry::Finalized {
                dataset: "d".into(),
                segment_id: format!("s{seq}"),
                path: "/p".into(),
                row_count: 1,
                file_size: 2,
            },
        }
    }

    fn frames(seqs: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for &seq in seqs {
            format::encode_record(&record(seq), &mut out).expect("encode");
        }
        out
    }

    /// Writes `body` after a header and scans it, returning the seqs read and the final step.
    fn scan(body: &[u8]) -> (Vec<u64>, Result<Step>) {
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(&format::encode_header(uuid::Uuid::new_v4()))
            .and_then(|_| file.write_all(body))
            .expect("write");
        let len = HEADER_LEN + body.len() as u64;
        let path = Path::new("/test/log");
        let mut scanner = Scanner::new(&file, path, HEADER_LEN, len, 0).expect("scanner");
        let mut seqs = Vec::new();
        loop {
            match scanner.next_step() {
                Ok(Step::Record { record, .. }) => seqs.push(record.seq),
                other => return (seqs, other),
            }
        }
    }

    fn torn_offset(step: Result<Step>) -> u64 {
        match step {
            Ok(Step::Torn { offset, .. }) => offset,
            other => panic!("expected a torn tail, got {other:?}"),
        }
    }

    fn corrupt_message(step: Result<Step>) -> String {
        match step {
            Err(e) if e.code() == ErrorCode::SegmentCatalogCorrupt => e.message().to_owned(),
            other => panic!("expected corruption, got {other:?}"),
        }
    }

    #[test]
    fn clean_log_ends_cleanly() {
        let (seqs, step) = scan(&frames(&[1, 2, 3]));
        assert_eq!(seqs, [1, 2, 3]);
        assert!(matches!(step, Ok(Step::End)));
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail() {
        let two = frames(&[1, 2]);
        let first_len = frames(&[1]).len();
        for cut in first_len + 1..two.len() {
            let (seqs, step) = scan(&two[..cut]);
            assert_eq!(seqs, [1], "cut at {cut}");
            assert_eq!(torn_offset(step), HEADER_LEN + first_len as u64);
        }
    }

    #[test]
    fn zero_filled_tail_is_torn() {
        let mut body = frames(&[1]);
        let good = body.len() as u64;
        body.extend_from_slice(&[0u8; 100]);
        let (seqs, step) = scan(&body);
        assert_eq!(seqs, [1]);
        assert_eq!(torn_offset(step), HEADER_LEN + good);
    }

    #[test]
    fn bad_crc_on_a_complete_last_record_is_corrupt() {
        let mut body = frames(&[1, 2]);
        let last = body.len() - 1;
        body[last] ^= 0xff;
        let (seqs, step) = scan(&body);
        assert_eq!(seqs, [1]);
        let message = corrupt_message(step);
        assert!(
            message.contains("damaged after it was written"),
            "{message}"
        );
    }

    #[test]
    fn payload_ending_in_zeros_with_only_zeros_after_is_torn() {
        let mut body = frames(&[1]);
        let half = body.len() / 2;
        body[half..].fill(0);
        body.extend_from_slice(&[0u8; 30]);
        let (seqs, step) = scan(&body);
        assert!(seqs.is_empty());
        assert_eq!(torn_offset(step), HEADER_LEN);
    }

    #[test]
    fn zeros_inside_a_payload_with_data_after_are_corrupt() {
        let mut body = frames(&[1, 2]);
        body[12..16].fill(0);
        let message = corrupt_message(scan(&body).1);
        assert!(message.contains("more data follows"), "{message}");
    }

    #[test]
    fn a_length_that_swallows_the_following_records_is_corrupt() {
        let mut body = frames(&[1, 2, 3]);
        body[1] ^= 0x10; // +4 KiB: past the end of the file
        let message = corrupt_message(scan(&body).1);
        assert!(message.contains("the length field is damaged"), "{message}");
    }

    #[test]
    fn a_last_record_whose_length_grew_is_corrupt() {
        let mut body = frames(&[1, 2]);
        let second = frames(&[1]).len();
        body[second + 1] ^= 0x01; // +256: past the end, the whole payload is there
        let (seqs, step) = scan(&body);
        assert_eq!(seqs, [1]);
        let message = corrupt_message(step);
        assert!(message.contains("hold a complete record"), "{message}");
        // The CRC damaged as well: the payload is still one complete JSON value.
        body[second + 4] ^= 0x01;
        let message = corrupt_message(scan(&body).1);
        assert!(message.contains("hold a complete record"), "{message}");
    }

    #[test]
    fn complete_frame_that_is_not_a_record_is_corrupt_even_at_the_end() {
        let mut body = frames(&[1]);
        let payload = br#"{"seq":2,"kind":"#;
        body.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        body.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        body.extend_from_slice(payload);
        let (seqs, step) = scan(&body);
        assert_eq!(seqs, [1]);
        let message = corrupt_message(step);
        assert!(message.contains("no crash"), "{message}");
    }

    #[test]
    fn invalid_record_is_corrupt_and_names_seq_and_field() {
        let mut body = frames(&[1]);
        let payload = br#"{"seq":2,"kind":"uploaded","dataset":"d","segment_id":"s","object_key":"","file_size":1,"row_count":1,"uploaded_at_ms":0}"#;
        body.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        body.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
        body.extend_from_slice(payload);
        let message = corrupt_message(scan(&body).1);
        assert!(
            message.contains("record seq 2 is invalid: field object_key"),
            "{message}"
        );
    }

    #[test]
    fn bad_crc_before_more_records_is_corrupt_at_its_offset() {
        let mut body = frames(&[1, 2, 3]);
        body[12] ^= 0x01;
        let (seqs, step) = scan(&body);
        assert!(seqs.is_empty());
        let message = corrupt_message(step);
        assert!(message.contains("/test/log"), "{message}");
        assert!(message.contains("byte offset 28:"), "{message}");
        assert!(message.contains("CRC mismatch"), "{message}");
    }

    #[test]
    fn bad_length_with_data_after_is_corrupt() {
        let mut body = frames(&[1, 2]);
        body[3] = 0xff; // length > 1 MiB
        let message = corrupt_message(scan(&body).1);
        assert!(message.contains("invalid payload length"), "{message}");
        let mut body = frames(&[1, 2]);
        body[..4].copy_from_slice(&[0, 0, 0, 0]);
        let message = corrupt_message(scan(&body).1);
        assert!(message.contains("invalid payload length 0"), "{message}");
    }

    #[test]
    fn non_increasing_seq_is_corrupt_even_at_the_end() {
        let first_len = frames(&[5]).len() as u64;
        for seqs in [[5, 5], [5, 4]] {
            let (read, step) = scan(&frames(&seqs));
            assert_eq!(read, [5]);
            let message = corrupt_message(step);
            assert!(
                message.contains(&format!("byte offset {}:", HEADER_LEN + first_len)),
                "{message}"
            );
            assert!(message.contains("does not follow seq 5"), "{message}");
        }
    }

    #[test]
    fn seq_zero_is_corrupt() {
        let message = corrupt_message(scan(&frames(&[0])).1);
        assert!(message.contains("seq 0 does not follow seq 0"), "{message}");
    }

    #[test]
    fn scan_stops_at_the_length_it_was_given() {
        let body = frames(&[1, 2]);
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(&format::encode_header(uuid::Uuid::new_v4()))
            .and_then(|_| file.write_all(&body))
            .expect("write");
        let first_end = HEADER_LEN + frames(&[1]).len() as u64;
        let path = Path::new("/test/log");
        let mut scanner = Scanner::new(&file, path, HEADER_LEN, first_end + 3, 0).expect("scan");
        assert!(matches!(scanner.next_step(), Ok(Step::Record { end, .. }) if end == first_end));
        assert_eq!(torn_offset(scanner.next_step()), first_end);
    }

    #[test]
    fn read_header_of_short_and_bad_files() {
        let path = Path::new("/test/log");
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(b"THSEG").expect("write");
        assert_eq!(
            read_header(&file, 5, path).expect("partial"),
            Header::Partial
        );
        let mut file = tempfile::tempfile().expect("tempfile");
        file.write_all(b"PAR1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0")
            .expect("write");
        let err = read_header(&file, 30, path).expect_err("bad magic");
        assert_eq!(err.code(), ErrorCode::SegmentCatalogCorrupt);
        assert!(err.message().contains("/test/log"), "{err}");
    }
}
