//! The byte layout of the log, as pure functions over byte slices so that the framing rules can be
//! tested without files.

use uuid::Uuid;

use super::{LogEntry, LogRecord};

/// Identifies the file as a segment catalog log, so a misconfigured path is refused rather than
/// "recovered" by truncation.
pub(crate) const MAGIC: &[u8; 8] = b"THSEGLOG";
/// Bumped only for changes old readers cannot skip over; new record kinds do not need it.
pub(crate) const FORMAT_VERSION: u32 = 1;
/// Magic, version, log id.
pub(crate) const HEADER_LEN: u64 = 8 + 4 + 16;
/// Payload length and CRC in front of every payload.
pub(crate) const FRAME_HEADER_LEN: u64 = 8;
/// Large enough for any record we write by a wide margin, small enough that a damaged length
/// field cannot make a reader allocate gigabytes.
pub(crate) const MAX_PAYLOAD_LEN: u32 = 1 << 20;

/// The file's header as far as it is present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Header {
    /// A complete, valid header.
    Complete(Uuid),
    /// Fewer than [`HEADER_LEN`] bytes that a crash during creation could have left: the log
    /// has no records yet and a writer rewrites the header.
    Partial,
}

/// Why a header is not one we can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeaderError {
    BadMagic,
    UnknownVersion(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::BadMagic => f.write_str(
                "the file does not start with THSEGLOG, so it is not a segment catalog log \
                 (check the configured path)",
            ),
            HeaderError::UnknownVersion(v) => write!(
                f,
                "format version {v} is not supported (this build reads version \
                 {FORMAT_VERSION}); upgrade the registrar"
            ),
        }
    }
}

pub(crate) fn encode_header(log_id: Uuid) -> [u8; HEADER_LEN as usize] {
    let mut out = [0u8; HEADER_LEN as usize];
    out[..8].copy_from_slice(MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..].copy_from_slice(log_id.as_bytes());
    out
}

/// Parses the first `min(file length, HEADER_LEN)` bytes of a file.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header, HeaderError> {
    if bytes.len() < HEADER_LEN as usize {
        return parse_short_header(bytes);
    }
    if &bytes[..8] != MAGIC {
        return Err(HeaderError::BadMagic);
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != FORMAT_VERSION {
        return Err(HeaderError::UnknownVersion(version));
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&bytes[12..HEADER_LEN as usize]);
    Ok(Header::Complete(Uuid::from_bytes(id)))
}

/// A short file is a creation that did not finish if its bytes are a prefix of a valid header.
/// All zero bytes are accepted too: some file systems can persist a file's new size before its
/// data after a crash, and an all-zero file holds no records either way.
fn parse_short_header(bytes: &[u8]) -> Result<Header, HeaderError> {
    let mut fixed = [0u8; 12];
    fixed[..8].copy_from_slice(MAGIC);
    fixed[8..].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    let n = bytes.len().min(fixed.len());
    if bytes[..n] == fixed[..n] || bytes.iter().all(|&b| b == 0) {
        return Ok(Header::Partial);
    }
    if bytes[..n.min(8)] != fixed[..n.min(8)] {
        return Err(HeaderError::BadMagic);
    }
    let mut version = [0u8; 4];
    version[..n - 8].copy_from_slice(&bytes[8..n]);
    Err(HeaderError::UnknownVersion(u32::from_le_bytes(version)))
}

/// The two fields in front of a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameHeader {
    pub(crate) len: u32,
    pub(crate) crc: u32,
}

impl FrameHeader {
    pub(crate) fn parse(bytes: [u8; FRAME_HEADER_LEN as usize]) -> FrameHeader {
        FrameHeader {
            len: u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            crc: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    /// Zero is never written (a payload is a JSON object), and a length over the limit is damage.
    pub(crate) fn len_is_valid(self) -> bool {
        self.len > 0 && self.len <= MAX_PAYLOAD_LEN
    }
}

/// Appends the framed record to `out`. Fails for [`LogEntry::Unknown`] (nothing to record) and
/// for payloads over the limit, which readers would reject.
pub(crate) fn encode_record(record: &LogRecord, out: &mut Vec<u8>) -> Result<(), String> {
    if record.entry == LogEntry::Unknown {
        return Err(
            "LogEntry::Unknown cannot be appended: it only stands for kinds a newer \
                    version wrote"
                .to_owned(),
        );
    }
    let payload = serde_json::to_vec(record)
        .map_err(|e| format!("cannot encode record seq {}: {e}", record.seq))?;
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&len| len <= MAX_PAYLOAD_LEN)
        .ok_or_else(|| {
            format!(
                "record seq {} encodes to {} bytes, over the {MAX_PAYLOAD_LEN}-byte limit",
                record.seq,
                payload.len()
            )
        })?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// Checks the CRC and decodes the JSON; the error says which failed, for the corruption message.
pub(crate) fn decode_payload(payload: &[u8], crc: u32) -> Result<LogRecord, String> {
    let actual = crc32c::crc32c(payload);
    if actual != crc {
        return Err(format!(
            "CRC mismatch (stored {crc:#010x}, computed {actual:#010x})"
        ));
    }
    serde_json::from_slice(payload).map_err(|e| format!("payload is not a valid record: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> LogRecord {
        LogRecord {
            seq,
            entry: LogEntry::Finalized {
                dataset: "d".into(),
                segment_id: "s".into(),
                path: "/p".into(),
                row_count: 1,
                file_size: 2,
            },
        }
    }

    #[test]
    fn header_round_trips() {
        let id = Uuid::new_v4();
        let bytes = encode_header(id);
        assert_eq!(&bytes[..8], b"THSEGLOG");
        assert_eq!(&bytes[8..12], &[1, 0, 0, 0]);
        assert_eq!(parse_header(&bytes), Ok(Header::Complete(id)));
    }

    #[test]
    fn every_prefix_of_a_header_is_partial() {
        let bytes = encode_header(Uuid::new_v4());
        for n in 0..bytes.len() {
            assert_eq!(parse_header(&bytes[..n]), Ok(Header::Partial), "prefix {n}");
        }
    }

    #[test]
    fn zero_filled_short_file_is_partial() {
        assert_eq!(parse_header(&[0u8; 20]), Ok(Header::Partial));
    }

    #[test]
    fn wrong_magic_is_refused_at_any_length() {
        assert_eq!(parse_header(b"THSEGLOX"), Err(HeaderError::BadMagic));
        assert_eq!(parse_header(b"PAR1"), Err(HeaderError::BadMagic));
        let mut bytes = encode_header(Uuid::new_v4());
        bytes[0] = b'X';
        assert_eq!(parse_header(&bytes), Err(HeaderError::BadMagic));
    }

    #[test]
    fn unknown_version_is_refused_full_or_short() {
        let mut bytes = encode_header(Uuid::new_v4());
        bytes[8] = 2;
        assert_eq!(parse_header(&bytes), Err(HeaderError::UnknownVersion(2)));
        assert_eq!(
            parse_header(&bytes[..10]),
            Err(HeaderError::UnknownVersion(2))
        );
    }

    #[test]
    fn record_frame_is_length_crc_payload() {
        let mut out = Vec::new();
        encode_record(&record(1), &mut out).expect("encode");
        let header = FrameHeader::parse(out[..8].try_into().expect("8 bytes"));
        let payload = &out[8..];
        assert_eq!(header.len as usize, payload.len());
        assert_eq!(header.crc, crc32c::crc32c(payload));
        assert_eq!(decode_payload(payload, header.crc), Ok(record(1)));
    }

    #[test]
    fn damaged_payload_fails_crc() {
        let mut out = Vec::new();
        encode_record(&record(1), &mut out).expect("encode");
        let header = FrameHeader::parse(out[..8].try_into().expect("8 bytes"));
        out[12] ^= 0x01;
        let err = decode_payload(&out[8..], header.crc).expect_err("damaged");
        assert!(err.contains("CRC mismatch"), "{err}");
    }

    #[test]
    fn valid_crc_over_non_record_json_fails_decode() {
        let payload = br#"{"hello":1}"#;
        let err = decode_payload(payload, crc32c::crc32c(payload)).expect_err("not a record");
        assert!(err.contains("not a valid record"), "{err}");
    }

    #[test]
    fn length_limits() {
        let frame = |len: u32| FrameHeader { len, crc: 0 };
        assert!(!frame(0).len_is_valid());
        assert!(frame(1).len_is_valid());
        assert!(frame(MAX_PAYLOAD_LEN).len_is_valid());
        assert!(!frame(MAX_PAYLOAD_LEN + 1).len_is_valid());
    }

    #[test]
    fn unknown_and_oversized_records_are_not_encoded() {
        let mut out = Vec::new();
        let unknown = LogRecord {
            seq: 1,
            entry: LogEntry::Unknown,
        };
        assert!(encode_record(&unknown, &mut out).is_err());
        let huge = LogRecord {
            seq: 1,
            entry: LogEntry::Finalized {
                dataset: "x".repeat(MAX_PAYLOAD_LEN as usize),
                segment_id: "s".into(),
                path: "/p".into(),
                row_count: 1,
                file_size: 2,
            },
        };
        assert!(encode_record(&huge, &mut out).is_err());
        assert!(out.is_empty(), "nothing is appended on failure");
    }
}
