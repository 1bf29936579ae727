//! The byte layout of the log, as pure functions over byte slices so that the framing rules can be
//! tested without files.

use uuid::Uuid;

use super::validate::validate_record;
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

/// Appends the framed record to `out`. Fails for [`LogEntry::Unknown`] (nothing to record), for
/// records with impossible fields and for payloads over the limit, all of which readers would
/// reject.
pub(crate) fn encode_record(record: &LogRecord, out: &mut Vec<u8>) -> Result<(), String> {
    if record.entry == LogEntry::Unknown {
        return Err(
            "LogEntry::Unknown cannot be appended: it only stands for kinds a newer \
                    version wrote"
                .to_owned(),
        );
    }
    validate_record(record).map_err(|e| format!("record seq {}: {e}", record.seq))?;
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

/// Why a complete frame's payload was not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PayloadError {
    /// The bytes are not the ones the CRC was computed over: damage, or a crash that did not
    /// write all of them.
    Crc(String),
    /// The bytes are the ones written (the CRC matches) but are not a record. No crash explains
    /// this: a writer wrote it.
    NotARecord(String),
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadError::Crc(what) | PayloadError::NotARecord(what) => f.write_str(what),
        }
    }
}

/// Checks the CRC and decodes the JSON.
pub(crate) fn decode_payload(payload: &[u8], crc: u32) -> Result<LogRecord, PayloadError> {
    let actual = crc32c::crc32c(payload);
    if actual != crc {
        return Err(PayloadError::Crc(format!(
            "CRC mismatch (stored {crc:#010x}, computed {actual:#010x})"
        )));
    }
    serde_json::from_slice(payload)
        .map_err(|e| PayloadError::NotARecord(format!("payload is not a valid record: {e}")))
}

/// The `kind` of a record this build does not know, for the warning that names it. Cut to 64
/// characters: it comes from the file and may be anything.
pub(crate) fn kind_name(payload: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Kind {
        kind: serde_json::Value,
    }
    let kind = match serde_json::from_slice::<Kind>(payload).map(|k| k.kind) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    };
    kind.chars().take(64).collect()
}

/// Whether `bytes`, the part of a frame's payload that the file holds, can be what a crash
/// leaves: the start of a JSON object as written, then nothing but zero bytes (blocks whose
/// size reached the disk but whose data did not).
///
/// The argument is that valid UTF-8 JSON never contains a 0x00 byte (control characters in
/// strings are escaped), so a zero byte followed by a non-zero one was not written by a crashing
/// writer. Every frame header holds one (a length of at most 1 MiB has a zero high byte), so a
/// span that swallowed a following frame is never taken for a remnant.
pub(crate) fn is_crash_remnant(bytes: &[u8]) -> bool {
    let written = written_part(bytes);
    bytes[written.len()..].iter().all(|&b| b == 0) && written.first().is_none_or(|&b| b == b'{')
}

/// The bytes before the first zero byte.
pub(crate) fn written_part(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..n]
}

/// Whether the written bytes of a frame that claims to run past the end of the file hold a
/// whole record after all: a damaged length field in front of a complete payload. Either some
/// prefix has the stored CRC (the length was all that changed), or the bytes are one complete
/// JSON value (the CRC was damaged too). A crash leaves a proper prefix of a JSON object, which
/// is never a complete value.
pub(crate) fn holds_complete_payload(written: &[u8], crc: u32) -> bool {
    let mut running = 0u32;
    for &b in written {
        running = crc32c::crc32c_append(running, &[b]);
        if running == crc {
            return true;
        }
    }
    !written.is_empty() && serde_json::from_slice::<serde::de::IgnoredAny>(written).is_ok()
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
        assert!(matches!(err, PayloadError::Crc(_)), "{err}");
        assert!(err.to_string().contains("CRC mismatch"), "{err}");
    }

    #[test]
    fn valid_crc_over_non_record_json_fails_decode() {
        let payload = br#"{"hello":1}"#;
        let err = decode_payload(payload, crc32c::crc32c(payload)).expect_err("not a record");
        assert!(matches!(err, PayloadError::NotARecord(_)), "{err}");
        assert!(err.to_string().contains("not a valid record"), "{err}");
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

    #[test]
    fn crash_remnants_are_a_json_prefix_then_zeros() {
        assert!(is_crash_remnant(b""));
        assert!(is_crash_remnant(b"\0\0\0"));
        assert!(is_crash_remnant(b"{\"seq\":1,\"ki"));
        assert!(is_crash_remnant(b"{\"seq\":1\0\0\0"));
        // A zero byte followed by data: not what a crash leaves (a swallowed frame header).
        assert!(!is_crash_remnant(
            b"{\"seq\":1}\x90\0\0\0\x12\x34\x56\x78{\"seq\""
        ));
        assert!(!is_crash_remnant(b"{\"a\0b"));
        // Not the start of a JSON object.
        assert!(!is_crash_remnant(b"xyz"));
        assert_eq!(written_part(b"ab\0c"), b"ab");
    }

    #[test]
    fn a_complete_payload_behind_a_damaged_length_is_recognised() {
        let payload = br#"{"seq":1,"kind":"x"}"#;
        let crc = crc32c::crc32c(payload);
        assert!(
            holds_complete_payload(payload, crc),
            "CRC matches the whole"
        );
        assert!(
            holds_complete_payload(payload, crc ^ 1),
            "complete JSON value"
        );
        for cut in 0..payload.len() {
            assert!(
                !holds_complete_payload(&payload[..cut], crc),
                "a proper prefix is a torn write (cut {cut})"
            );
        }
    }

    #[test]
    fn kind_names_are_read_and_cut() {
        assert_eq!(kind_name(br#"{"seq":1,"kind":"compacted"}"#), "compacted");
        assert_eq!(kind_name(br#"{"seq":1,"kind":7}"#), "7");
        assert_eq!(
            kind_name(format!(r#"{{"kind":"{}"}}"#, "k".repeat(500)).as_bytes()).len(),
            64
        );
    }

    #[test]
    fn records_with_impossible_fields_are_not_encoded() {
        let mut out = Vec::new();
        let bad = LogRecord {
            seq: 1,
            entry: LogEntry::Uploaded {
                dataset: "d".into(),
                segment_id: "s".into(),
                object_key: "/abs".into(),
                file_size: 1,
                row_count: 1,
                uploaded_at_ms: 0,
            },
        };
        let err = encode_record(&bad, &mut out).expect_err("leading slash");
        assert!(err.contains("object_key"), "{err}");
        assert!(out.is_empty());
    }
}
