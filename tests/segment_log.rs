//! The segment catalog log through its public API: what the parquet sink, the shipper and the
//! registrar rely on, including recovery from crashes and refusal of damage.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thadam_iceberg::ErrorCode;
use thadam_iceberg::protocol::feed::SegmentFeed;
use thadam_iceberg::protocol::segment_log::{
    LogEntry, LogRecord, SegmentLogReader, SegmentLogTail, SegmentLogWriter,
};

/// Bytes before the first record: magic, version, log id.
const HEADER_LEN: u64 = 28;
/// Guards against hangs only; nothing here depends on how fast things happen.
const HANG_GUARD: Duration = Duration::from_secs(10);

fn finalized(n: u64) -> LogEntry {
    LogEntry::Finalized {
        dataset: "logs".into(),
        segment_id: format!("seg-{n}"),
        path: format!("/var/lib/thadam/seg-{n}.parquet"),
        row_count: n * 10,
        file_size: n * 1000,
    }
}

fn uploaded(n: u64) -> LogEntry {
    LogEntry::Uploaded {
        dataset: "logs".into(),
        segment_id: format!("seg-{n}"),
        object_key: format!("logs/seg-{n}.parquet"),
        file_size: n * 1000,
        row_count: n * 10,
        uploaded_at_ms: 1_700_000_000_000 + n,
    }
}

fn temp_log() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("segments.log");
    (dir, path)
}

fn read_all(path: &Path) -> Vec<LogRecord> {
    SegmentLogReader::open(path)
        .and_then(|mut r| r.read_to_end())
        .expect("read log")
}

fn seqs(records: &[LogRecord]) -> Vec<u64> {
    records.iter().map(|r| r.seq).collect()
}

fn file_len(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").len()
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .expect("append bytes");
}

/// A record framed by hand, for kinds and seqs the writer would never produce.
fn raw_frame(json: &str) -> Vec<u8> {
    let payload = json.as_bytes();
    let mut frame = (payload.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// Writes records 1..=n and returns the end offset of each.
fn write_records(path: &Path, n: u64) -> Vec<u64> {
    let mut writer = SegmentLogWriter::open(path).expect("writer");
    (1..=n)
        .map(|i| {
            writer.append(finalized(i)).expect("append");
            file_len(path)
        })
        .collect()
}

fn assert_corrupt_at(err: thadam_iceberg::Error, path: &Path, offset: u64) {
    assert_eq!(err.code(), ErrorCode::SegmentCatalogCorrupt, "{err}");
    let message = err.message();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("byte offset {offset}:")),
        "{message}"
    );
    assert!(message.contains("move it aside"), "{message}");
}

// ---- writing and reading -------------------------------------------------------------------

#[test]
fn both_kinds_round_trip_in_order() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    assert_eq!(writer.next_seq(), 1);
    assert_eq!(writer.append(finalized(1)).expect("append"), 1);
    assert_eq!(writer.append(uploaded(1)).expect("append"), 2);
    assert_eq!(
        writer
            .append_all([finalized(2), uploaded(2)])
            .expect("append_all"),
        [3, 4]
    );
    assert_eq!(
        writer.append_all(Vec::new()).expect("empty batch"),
        Vec::<u64>::new()
    );
    assert_eq!(writer.next_seq(), 5);

    let mut reader = SegmentLogReader::open(&path).expect("reader");
    assert_eq!(reader.log_id(), Some(writer.log_id()));
    let expected = [finalized(1), uploaded(1), finalized(2), uploaded(2)];
    let records = reader.read_to_end().expect("read");
    assert_eq!(seqs(&records), [1, 2, 3, 4]);
    for (record, entry) in records.iter().zip(expected) {
        assert_eq!(record.entry, entry);
    }
    assert_eq!(reader.next_record().expect("at end"), None);
}

#[test]
fn append_uploaded_stamps_the_current_time() {
    let (_dir, path) = temp_log();
    let before = now_ms();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    let seq = writer
        .append_uploaded("logs", "seg-9", "logs/seg-9.parquet", 123, 4)
        .expect("append");
    let after = now_ms();
    let records = read_all(&path);
    let segment = records[0].clone().into_uploaded().expect("uploaded");
    assert_eq!(segment.seq, seq);
    assert_eq!(segment.object_key, "logs/seg-9.parquet");
    assert_eq!((segment.file_size, segment.row_count), (123, 4));
    assert!((before..=after).contains(&segment.uploaded_at_ms));
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

#[test]
fn seq_continues_across_writer_reopen() {
    let (_dir, path) = temp_log();
    let log_id = {
        let mut writer = SegmentLogWriter::open(&path).expect("writer");
        writer
            .append_all([finalized(1), finalized(2)])
            .expect("append");
        writer.log_id()
    };
    let mut writer = SegmentLogWriter::open(&path).expect("reopen");
    assert_eq!(
        writer.log_id(),
        log_id,
        "reopening keeps the log's identity"
    );
    assert_eq!(writer.next_seq(), 3);
    assert_eq!(writer.append(uploaded(3)).expect("append"), 3);
    drop(writer);
    assert_eq!(seqs(&read_all(&path)), [1, 2, 3]);
}

#[test]
fn writer_creates_missing_parent_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a/b/segments.log");
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(finalized(1)).expect("append");
    assert_eq!(writer.path(), path);
    assert_eq!(seqs(&read_all(&path)), [1]);
}

#[test]
fn second_writer_is_refused_until_the_first_is_dropped() {
    let (_dir, path) = temp_log();
    let first = SegmentLogWriter::open(&path).expect("first writer");
    let err = SegmentLogWriter::open(&path).expect_err("second writer");
    assert!(err.message().contains("another writer"), "{err}");
    assert!(err.message().contains(&path.display().to_string()), "{err}");
    drop(first);
    SegmentLogWriter::open(&path).expect("writer after the first is gone");
}

#[test]
fn unknown_entries_cannot_be_appended() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    assert!(writer.append(LogEntry::Unknown).is_err());
    assert!(
        writer
            .append_all([finalized(1), LogEntry::Unknown])
            .is_err(),
        "a batch with an Unknown entry is refused whole"
    );
    assert_eq!(writer.next_seq(), 1);
    assert_eq!(writer.append(finalized(1)).expect("append"), 1);
    assert_eq!(seqs(&read_all(&path)), [1]);
}

#[test]
fn reader_continues_after_the_file_grows() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(finalized(1)).expect("append");
    let mut reader = SegmentLogReader::open(&path).expect("reader");
    assert_eq!(seqs(&reader.read_to_end().expect("read")), [1]);
    assert_eq!(reader.next_record().expect("at end"), None);
    writer
        .append_all([finalized(2), finalized(3)])
        .expect("append");
    assert_eq!(seqs(&reader.read_to_end().expect("read more")), [2, 3]);
}

#[test]
fn reader_refuses_a_missing_file() {
    let (_dir, path) = temp_log();
    let err = SegmentLogReader::open(&path).expect_err("missing");
    assert!(err.message().contains("does not exist"), "{err}");
}

// ---- incomplete headers and foreign files --------------------------------------------------

#[test]
fn partial_header_is_an_empty_log() {
    let (_dir, path) = temp_log();
    fs::write(&path, b"THSEGLOG\x01\x00").expect("write partial header");
    let mut reader = SegmentLogReader::open(&path).expect("reader");
    assert_eq!(reader.log_id(), None);
    assert_eq!(reader.next_record().expect("empty"), None);

    let mut writer = SegmentLogWriter::open(&path).expect("writer rewrites the header");
    assert_eq!(writer.next_seq(), 1);
    writer.append(finalized(1)).expect("append");
    let mut reader = SegmentLogReader::open(&path).expect("reader");
    assert_eq!(seqs(&reader.read_to_end().expect("read")), [1]);
    assert_eq!(reader.log_id(), Some(writer.log_id()));
}

#[test]
fn empty_file_is_an_empty_log() {
    let (_dir, path) = temp_log();
    fs::write(&path, b"").expect("create empty file");
    assert!(read_all(&path).is_empty());
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    assert_eq!(writer.append(finalized(1)).expect("append"), 1);
}

#[test]
fn foreign_file_or_newer_version_is_refused() {
    let (_dir, path) = temp_log();
    fs::write(&path, b"PAR1 this is a parquet file, not a log").expect("write");
    for err in [
        SegmentLogReader::open(&path).expect_err("reader"),
        SegmentLogWriter::open(&path).expect_err("writer"),
    ] {
        assert_eq!(err.code(), ErrorCode::SegmentCatalogCorrupt, "{err}");
        assert!(err.message().contains("THSEGLOG"), "{err}");
    }
    assert!(
        fs::read(&path).expect("read").starts_with(b"PAR1"),
        "the writer left the foreign file alone"
    );

    let mut header = b"THSEGLOG".to_vec();
    header.extend_from_slice(&2u32.to_le_bytes());
    header.extend_from_slice(&[7u8; 16]);
    fs::write(&path, &header).expect("write");
    let err = SegmentLogWriter::open(&path).expect_err("newer version");
    assert!(err.message().contains("version 2"), "{err}");
}

// ---- torn tails ----------------------------------------------------------------------------

/// Damages a log holding records 1 and 2, given the end offsets of both records.
type Tear = fn(&Path, u64, u64);

/// Each way a crash can leave the last record.
fn torn_variants() -> Vec<(&'static str, Tear)> {
    vec![
        ("record header cut", |path, one, _| {
            cut_to(path, one + 5);
        }),
        ("payload cut", |path, one, two| {
            cut_to(path, (one + two) / 2);
        }),
        (
            "last payload's end never reached the disk",
            |path, one, two| {
                // The file's new size was persisted but not all of its data: the unwritten bytes
                // read as zeros.
                zero_range(path, (one + two) / 2, two);
            },
        ),
        ("last record's header half written", |path, one, two| {
            zero_range(path, one + 3, two);
        }),
        ("zero-filled tail", |path, one, two| {
            cut_to(path, one);
            append_bytes(path, &vec![0u8; (two - one) as usize + 4096]);
        }),
    ]
}

fn cut_to(path: &Path, len: u64) {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .expect("truncate");
}

fn zero_range(path: &Path, from: u64, to: u64) {
    let mut bytes = fs::read(path).expect("read");
    bytes[from as usize..to as usize].fill(0);
    fs::write(path, bytes).expect("write");
}

fn flip_byte(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).expect("read");
    bytes[offset as usize] ^= 0x5a;
    fs::write(path, bytes).expect("write");
}

#[test]
fn torn_tail_is_ignored_by_readers_and_truncated_by_the_next_writer() {
    for (name, tear) in torn_variants() {
        let (_dir, path) = temp_log();
        let ends = write_records(&path, 2);
        let (one, two) = (ends[0], ends[1]);
        tear(&path, one, two);

        assert_eq!(seqs(&read_all(&path)), [1], "{name}: reader");

        let mut writer = SegmentLogWriter::open(&path).expect("writer recovers");
        assert_eq!(file_len(&path), one, "{name}: torn tail truncated");
        assert_eq!(writer.next_seq(), 2, "{name}: next seq");
        assert_eq!(writer.append(uploaded(2)).expect("append"), 2, "{name}");
        let records = read_all(&path);
        assert_eq!(seqs(&records), [1, 2], "{name}: after recovery");
        assert_eq!(records[1].entry, uploaded(2), "{name}");
    }
}

#[test]
fn torn_first_record_leaves_an_empty_log() {
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 1);
    cut_to(&path, ends[0] - 1);
    assert!(read_all(&path).is_empty());
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    assert_eq!(file_len(&path), HEADER_LEN);
    assert_eq!(writer.append(finalized(1)).expect("append"), 1);
}

#[test]
fn reader_reads_what_a_recovering_writer_rewrote_at_the_torn_offset() {
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 2);
    cut_to(&path, ends[1] - 3);
    let mut reader = SegmentLogReader::open(&path).expect("reader");
    assert_eq!(seqs(&reader.read_to_end().expect("read")), [1]);
    // Another writer replaces the torn record 2 with a different, longer record 2.
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(uploaded(22)).expect("append");
    let records = reader.read_to_end().expect("read after recovery");
    assert_eq!(seqs(&records), [2]);
    assert_eq!(records[0].entry, uploaded(22));
}

// ---- corruption ----------------------------------------------------------------------------

#[test]
fn damage_inside_the_first_of_three_records_is_corruption_at_its_offset() {
    let (_dir, path) = temp_log();
    write_records(&path, 3);
    flip_byte(&path, HEADER_LEN + 20); // inside the first record's payload
    let before = fs::read(&path).expect("read");

    let err = SegmentLogReader::open(&path)
        .and_then(|mut r| r.read_to_end())
        .expect_err("reader");
    assert_corrupt_at(err, &path, HEADER_LEN);
    let err = SegmentLogWriter::open(&path).expect_err("writer");
    assert_corrupt_at(err, &path, HEADER_LEN);
    assert_eq!(
        fs::read(&path).expect("read"),
        before,
        "the writer changed nothing"
    );
}

#[test]
fn damage_in_a_middle_record_comes_after_the_good_records() {
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 3);
    flip_byte(&path, ends[0] + 15);
    let mut reader = SegmentLogReader::open(&path).expect("reader");
    let first = reader.next_record().expect("record 1").expect("some");
    assert_eq!(first.seq, 1);
    let err = reader.next_record().expect_err("record 2 is damaged");
    assert_corrupt_at(err.clone(), &path, ends[0]);
    assert_eq!(reader.next_record().expect_err("still damaged"), err);
}

#[test]
fn damaged_length_field_is_corruption() {
    let (_dir, path) = temp_log();
    write_records(&path, 3);
    flip_byte(&path, HEADER_LEN + 3); // the length's high byte: far over 1 MiB
    let err = SegmentLogWriter::open(&path).expect_err("writer");
    assert_corrupt_at(err, &path, HEADER_LEN);
}

/// Reading `path` and opening a writer on it both fail as corruption at `offset`, and the
/// writer leaves every byte as it was.
fn assert_refused_at(path: &Path, offset: u64) -> String {
    let before = fs::read(path).expect("read");
    let err = SegmentLogReader::open(path)
        .and_then(|mut r| r.read_to_end())
        .expect_err("the reader must refuse the log");
    let message = err.message().to_owned();
    assert_corrupt_at(err, path, offset);
    let err = SegmentLogWriter::open(path).expect_err("the writer must refuse the log");
    assert_corrupt_at(err, path, offset);
    assert_eq!(
        fs::read(path).expect("read"),
        before,
        "the writer changed nothing"
    );
    message
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut bytes = fs::read(path).expect("read");
    bytes[offset as usize] ^= 1 << bit;
    fs::write(path, bytes).expect("write");
}

/// A length that still looks plausible (under 1 MiB) but points past the end of the file used
/// to make readers take the rest of the log for a torn tail, and the next writer erase it.
#[test]
fn plausible_damaged_length_in_the_middle_is_corruption_not_a_torn_tail() {
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 10);
    flip_bit(&path, ends[6] + 1, 4); // record 8's length grows by 4 KiB: past the end
    assert_refused_at(&path, ends[6]);

    let (_dir, path) = temp_log();
    let ends = write_records(&path, 10);
    flip_bit(&path, ends[1] + 1, 0); // record 3's length grows by 256 bytes: inside the file
    assert_refused_at(&path, ends[1]);
}

#[test]
fn last_record_with_a_damaged_length_is_corruption() {
    for (byte, bit) in [(1, 0), (1, 3), (2, 2), (0, 0), (0, 5)] {
        let (_dir, path) = temp_log();
        let ends = write_records(&path, 3);
        flip_bit(&path, ends[1] + byte, bit);
        assert_refused_at(&path, ends[1]);
    }
}

#[test]
fn damaged_crc_or_payload_of_a_complete_last_record_is_corruption() {
    for offset in [4, 7, 8, 20] {
        let (_dir, path) = temp_log();
        let ends = write_records(&path, 2);
        flip_bit(&path, ends[0] + offset, 1);
        let message = assert_refused_at(&path, ends[0]);
        assert!(message.contains("CRC mismatch"), "{message}");
    }
}

#[test]
fn complete_last_record_that_is_not_a_valid_record_is_corruption() {
    for json in [
        r#"{"seq":3,"kind":"#,
        r#"{"seq":3}"#,
        r#"{"seq":3,"kind":"uploaded","dataset":"logs"}"#,
        "not json",
    ] {
        let (_dir, path) = temp_log();
        let ends = write_records(&path, 2);
        append_bytes(&path, &raw_frame(json));
        let message = assert_refused_at(&path, ends[1]);
        assert!(message.contains("not a valid record"), "{json}: {message}");
    }
}

/// An `Uploaded` record as JSON with one field replaced.
fn uploaded_json(seq: u64, field: &str, value: serde_json::Value) -> String {
    let mut record = serde_json::json!({
        "seq": seq,
        "kind": "uploaded",
        "dataset": "logs",
        "segment_id": "seg-x",
        "object_key": "logs/seg-x.parquet",
        "file_size": 1000,
        "row_count": 10,
        "uploaded_at_ms": 1_700_000_000_000u64,
    });
    record[field] = value;
    record.to_string()
}

const TIB: u64 = 1 << 40;

#[test]
fn records_with_impossible_fields_are_refused_where_they_are_read() {
    use serde_json::json;
    let cases = [
        ("object_key", json!("")),
        ("object_key", json!("/logs/seg.parquet")),
        ("object_key", json!("logs//seg.parquet")),
        ("object_key", json!("logs/seg.parquet/")),
        ("object_key", json!("logs/./seg.parquet")),
        ("object_key", json!("logs/../seg.parquet")),
        ("object_key", json!(".")),
        ("object_key", json!("..")),
        ("object_key", json!("x".repeat(1025))),
        ("object_key", json!("logs/seg\n.parquet")),
        ("object_key", json!("logs/seg\u{7f}.parquet")),
        ("file_size", json!(0)),
        ("file_size", json!(5 * TIB + 1)),
        ("file_size", json!(u64::MAX)),
        ("dataset", json!("")),
        ("dataset", json!("a.b")),
        ("dataset", json!("../x")),
        ("dataset", json!("a/b")),
        ("dataset", json!("a\u{1f}b")),
        ("dataset", json!("d".repeat(256))),
    ];
    for (field, value) in cases {
        let (_dir, path) = temp_log();
        let ends = write_records(&path, 1);
        append_bytes(&path, &raw_frame(&uploaded_json(2, field, value.clone())));
        let message = assert_refused_at(&path, ends[0]);
        assert!(
            message.contains(&format!("field {field}")) && message.contains("seq 2"),
            "{field} = {value}: {message}"
        );
    }
    // A finalized record's dataset is checked too.
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 1);
    append_bytes(
        &path,
        &raw_frame(
            r#"{"seq":2,"kind":"finalized","dataset":"a.b","segment_id":"s","path":"p","row_count":1,"file_size":1}"#,
        ),
    );
    let message = assert_refused_at(&path, ends[0]);
    assert!(message.contains("field dataset"), "{message}");
}

#[test]
fn odd_but_possible_records_are_read() {
    use serde_json::json;
    let cases = [
        ("object_key", json!("a b ü.parquet")),
        (
            "object_key",
            json!("logs/date=2024-01-01/seg~1#%[x].parquet"),
        ),
        ("object_key", json!("x".repeat(1024))),
        ("object_key", json!(".hidden/seg..parquet")),
        ("file_size", json!(1)),
        ("file_size", json!(5 * TIB)),
        ("dataset", json!("d".repeat(255))),
        ("dataset", json!("telemetry_v2-ü")),
    ];
    for (field, value) in cases {
        let (_dir, path) = temp_log();
        write_records(&path, 1);
        append_bytes(&path, &raw_frame(&uploaded_json(2, field, value.clone())));
        assert_eq!(seqs(&read_all(&path)), [1, 2], "{field} = {value}");
    }
}

#[test]
fn writer_refuses_to_append_impossible_records() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(uploaded(1)).expect("append");
    let before = fs::read(&path).expect("read");
    let bad = LogEntry::Uploaded {
        dataset: "logs".into(),
        segment_id: "seg".into(),
        object_key: String::new(),
        file_size: 10,
        row_count: 1,
        uploaded_at_ms: 0,
    };
    let err = writer
        .append_all([uploaded(2), bad])
        .expect_err("empty key");
    assert!(err.message().contains("object_key"), "{err}");
    assert_eq!(fs::read(&path).expect("read"), before, "nothing written");
    assert_eq!(writer.append(uploaded(2)).expect("append"), 2);
}

#[test]
fn non_increasing_seq_is_corruption() {
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 2);
    append_bytes(
        &path,
        &raw_frame(
            r#"{"seq":2,"kind":"finalized","dataset":"d","segment_id":"s","path":"p","row_count":1,"file_size":1}"#,
        ),
    );
    let mut reader = SegmentLogReader::open(&path).expect("reader");
    assert_eq!(
        seqs(&[reader.next_record().expect("1").expect("some")]),
        [1]
    );
    assert_eq!(
        seqs(&[reader.next_record().expect("2").expect("some")]),
        [2]
    );
    let err = reader.next_record().expect_err("repeated seq");
    assert_corrupt_at(err, &path, ends[1]);
    let err = SegmentLogWriter::open(&path).expect_err("writer");
    assert_corrupt_at(err, &path, ends[1]);
}

// ---- forward compatibility -----------------------------------------------------------------

#[test]
fn unknown_kind_is_skipped_and_its_seq_respected() {
    let (_dir, path) = temp_log();
    write_records(&path, 1);
    append_bytes(
        &path,
        &raw_frame(r#"{"seq":2,"kind":"compacted","through_seq":1,"extra":{"a":[1,2]}}"#),
    );
    let records = read_all(&path);
    assert_eq!(seqs(&records), [1]);

    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    assert_eq!(writer.next_seq(), 3, "the unknown record's seq is taken");
    writer.append(uploaded(3)).expect("append");
    assert_eq!(seqs(&read_all(&path)), [1, 3]);
}

// ---- tailing -------------------------------------------------------------------------------

#[tokio::test]
async fn tail_receives_records_appended_after_it_started() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(finalized(1)).expect("append");
    let mut tail = SegmentLogTail::open(&path);
    let first = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect("record 1");
    assert_eq!(first.seq, 1);
    assert_eq!(tail.log_id(), Some(writer.log_id()));

    let appender = tokio::spawn(async move {
        for i in 2..=4 {
            tokio::task::yield_now().await;
            writer.append(uploaded(i)).expect("append");
        }
    });
    for expected in 2..=4 {
        let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
            .await
            .expect("hang guard")
            .expect("record");
        assert_eq!(record.seq, expected);
        assert_eq!(record.entry, uploaded(expected));
        assert_eq!(tail.last_seq(), Some(expected));
    }
    appender.await.expect("appender");
}

#[tokio::test]
async fn tail_waits_for_the_file_and_its_directory_to_appear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("not-yet/segments.log");
    let mut tail = SegmentLogTail::open(&path);
    assert_eq!(tail.log_id(), None);
    assert_eq!(tail.last_seq(), None);
    let writer_path = path.clone();
    let appender = tokio::spawn(async move {
        tokio::task::yield_now().await;
        let mut writer = SegmentLogWriter::open(&writer_path).expect("writer");
        writer.append(uploaded(1)).expect("append");
        writer.append(finalized(2)).expect("append");
        writer.log_id()
    });
    let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect("record");
    assert_eq!(record.seq, 1);
    let log_id = appender.await.expect("appender");
    assert_eq!(tail.log_id(), Some(log_id));
    let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect("record");
    assert_eq!(record.seq, 2);
}

#[tokio::test]
async fn tail_at_the_end_stays_pending() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(finalized(1)).expect("append");
    let mut tail = SegmentLogTail::open(&path);
    tail.next_record().await.expect("record 1");
    let waited = tokio::time::timeout(Duration::from_millis(300), tail.next_record()).await;
    assert!(waited.is_err(), "returned {waited:?} with nothing appended");

    // Still usable after the cancelled wait, and nothing was skipped.
    writer.append(finalized(2)).expect("append");
    let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect("record 2");
    assert_eq!(record.seq, 2);
}

#[tokio::test]
async fn tail_on_a_missing_file_or_partial_header_stays_pending() {
    let (_dir, path) = temp_log();
    let mut tail = SegmentLogTail::open(&path);
    let waited = tokio::time::timeout(Duration::from_millis(300), tail.next_record()).await;
    assert!(waited.is_err(), "returned {waited:?} for a missing file");

    fs::write(&path, b"THSEGLOG").expect("partial header");
    let waited = tokio::time::timeout(Duration::from_millis(300), tail.next_record()).await;
    assert!(waited.is_err(), "returned {waited:?} for a partial header");
    assert_eq!(tail.log_id(), None);

    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer.append(finalized(1)).expect("append");
    let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect("record 1");
    assert_eq!(record.seq, 1);
}

#[tokio::test]
async fn tail_waits_out_a_torn_tail_and_reads_the_recovered_record() {
    let (_dir, path) = temp_log();
    let ends = write_records(&path, 2);
    cut_to(&path, ends[1] - 2);
    let mut tail = SegmentLogTail::open(&path);
    assert_eq!(tail.next_record().await.expect("record 1").seq, 1);
    let waited = tokio::time::timeout(Duration::from_millis(300), tail.next_record()).await;
    assert!(waited.is_err(), "returned {waited:?} for a torn record");

    let mut writer = SegmentLogWriter::open(&path).expect("writer recovers");
    writer.append(uploaded(2)).expect("append");
    let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect("record 2");
    assert_eq!((record.seq, record.entry), (2, uploaded(2)));
}

#[tokio::test]
async fn tail_reports_corruption() {
    let (_dir, path) = temp_log();
    write_records(&path, 3);
    flip_byte(&path, HEADER_LEN + 20);
    let mut tail = SegmentLogTail::open(&path);
    let err = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect_err("corrupt");
    assert_corrupt_at(err, &path, HEADER_LEN);
}

#[tokio::test]
async fn tail_reports_a_replaced_log() {
    let (_dir, path) = temp_log();
    write_records(&path, 1);
    let mut tail = SegmentLogTail::open(&path);
    assert_eq!(tail.next_record().await.expect("record 1").seq, 1);
    fs::rename(&path, path.with_extension("corrupt")).expect("move aside");
    write_records(&path, 1);
    let err = tokio::time::timeout(HANG_GUARD, tail.next_record())
        .await
        .expect("hang guard")
        .expect_err("replaced");
    assert!(err.message().contains("replaced"), "{err}");
}

#[tokio::test]
async fn feed_yields_only_uploaded_segments_with_their_seq() {
    let (_dir, path) = temp_log();
    let mut writer = SegmentLogWriter::open(&path).expect("writer");
    writer
        .append_all([
            finalized(1),
            uploaded(1),
            finalized(2),
            finalized(3),
            uploaded(2),
        ])
        .expect("append");
    let mut feed = SegmentLogTail::open(&path);
    let mut got = Vec::new();
    for _ in 0..2 {
        let segment = tokio::time::timeout(HANG_GUARD, feed.next())
            .await
            .expect("hang guard")
            .expect("next")
            .expect("a file log never ends");
        got.push((segment.seq, segment.segment_id, segment.object_key));
    }
    assert_eq!(
        got,
        [
            (2, "seg-1".to_owned(), "logs/seg-1.parquet".to_owned()),
            (5, "seg-2".to_owned(), "logs/seg-2.parquet".to_owned()),
        ]
    );
    assert_eq!(feed.last_seq(), Some(5));

    // Finalized-only appends do not end the feed or produce anything.
    writer.append(finalized(4)).expect("append");
    let waited = tokio::time::timeout(Duration::from_millis(300), feed.next()).await;
    assert!(waited.is_err(), "returned {waited:?}");
    writer.append(uploaded(3)).expect("append");
    let segment = tokio::time::timeout(HANG_GUARD, feed.next())
        .await
        .expect("hang guard")
        .expect("next")
        .expect("segment");
    assert_eq!(segment.seq, 7);
}

#[tokio::test]
async fn tail_keeps_up_with_a_concurrent_writer_in_order() {
    let (_dir, path) = temp_log();
    let writer_path = path.clone();
    let writer = tokio::task::spawn_blocking(move || {
        let mut writer = SegmentLogWriter::open(&writer_path).expect("writer");
        for i in 1..=50 {
            writer.append(uploaded(i)).expect("append");
            writer
                .append_all([finalized(i), finalized(i + 1), uploaded(i + 1)])
                .expect("append_all");
        }
    });
    let mut tail = SegmentLogTail::open(&path);
    for expected in 1..=200 {
        let record = tokio::time::timeout(HANG_GUARD, tail.next_record())
            .await
            .expect("hang guard")
            .expect("record");
        assert_eq!(record.seq, expected);
    }
    writer.await.expect("writer");
}

#[test]
fn exhausted_seqs_are_refused_not_a_panic() {
    let (_dir, path) = temp_log();
    write_records(&path, 1);
    append_bytes(
        &path,
        &raw_frame(&format!(
            r#"{{"seq":{},"kind":"finalized","dataset":"d","segment_id":"s","path":"p","row_count":1,"file_size":1}}"#,
            u64::MAX
        )),
    );
    assert_eq!(seqs(&read_all(&path)), [1, u64::MAX]);
    let err = SegmentLogWriter::open(&path).expect_err("no seq left");
    assert!(err.message().contains("sequence numbers"), "{err}");
}

// ---- unknown kinds are visible -------------------------------------------------------------

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }
}

#[test]
fn unknown_kinds_are_logged_once_per_kind_per_reader() {
    let (_dir, path) = temp_log();
    write_records(&path, 1);
    for (seq, kind) in [
        (2, "compacted"),
        (3, "compacted"),
        (4, "upload"),
        (5, "compacted"),
    ] {
        append_bytes(
            &path,
            &raw_frame(&format!(r#"{{"seq":{seq},"kind":"{kind}","x":1}}"#)),
        );
    }
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let records = tracing::subscriber::with_default(subscriber, || read_all(&path));
    assert_eq!(seqs(&records), [1]);
    let text = captured.text();
    let lines = |kind: &str| {
        text.lines()
            .filter(|l| l.contains("WARN") && l.contains(&format!("\"{kind}\"")))
            .count()
    };
    assert_eq!(lines("compacted"), 1, "once per kind:\n{text}");
    assert_eq!(lines("upload"), 1, "a misspelled kind is named:\n{text}");
    assert!(text.contains("seq 2") || text.contains("seq=2"), "{text}");
}

// ---- bounded fuzz: damage is either harmless or reported, never a silently shorter log -----

/// How one fuzz iteration damaged the log.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// Flip one bit at a byte offset.
    Flip { offset: usize, bit: u8 },
    /// Cut the file to this length (what a crash mid-append leaves).
    Cut { len: usize },
    /// Overwrite `len` bytes at `offset` with random non-zero bytes. Non-zero: a zero-filled end
    /// is exactly what a crash leaves (the torn-tail tests cover it), so garbage that happens
    /// to end the file in zeros is not damage a reader can tell from a crash.
    Garble { offset: usize, len: usize },
}

#[derive(Debug, Default)]
struct FuzzTally {
    iterations: u64,
    flips_all_read: u64,
    flips_corrupt: u64,
    garbles_all_read: u64,
    garbles_corrupt: u64,
    cuts_prefix_read: u64,
    writer_opened_and_appended: u64,
    writer_refused: u64,
}

/// Records of varied sizes (keys from 20 to ~900 bytes), so that damaged lengths land both
/// inside and past the end of the file.
fn fuzz_entry(rng: &mut rand::rngs::StdRng, n: u64) -> LogEntry {
    use rand::Rng;
    let pad = "p".repeat(rng.random_range(0..900));
    if n.is_multiple_of(3) {
        LogEntry::Finalized {
            dataset: "logs".into(),
            segment_id: format!("seg-{n}"),
            path: format!("/var/lib/thadam/{pad}seg-{n}.parquet"),
            row_count: n,
            file_size: n * 7,
        }
    } else {
        LogEntry::Uploaded {
            dataset: "logs".into(),
            segment_id: format!("seg-{n}"),
            object_key: format!("logs/{pad}seg-{n}.parquet"),
            file_size: n * 1000 + 1,
            row_count: n,
            uploaded_at_ms: 1_700_000_000_000 + n,
        }
    }
}

/// The directory for fuzz files: memory-backed where available, as every writer open syncs.
fn fuzz_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("tempdir")
}

#[test]
fn random_damage_is_either_harmless_or_corruption_never_a_shorter_log() {
    use rand::{Rng, SeedableRng};
    const RECORDS: u64 = 120;
    // THADAM_FUZZ_SECONDS lifts both bounds for a long local run.
    let long_run = std::env::var("THADAM_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let max_iterations = if long_run.is_some() { u64::MAX } else { 3000 };
    let budget = Duration::from_secs(long_run.unwrap_or(4));
    let seed = std::env::var("THADAM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(rand::random);
    println!("segment log fuzz: seed {seed} (replay with THADAM_FUZZ_SEED={seed})");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let dir = fuzz_dir();
    let original_path = dir.path().join("original.log");
    let mut writer = SegmentLogWriter::open(&original_path).expect("writer");
    let mut originals = Vec::new();
    let mut ends = Vec::new();
    for n in 1..=RECORDS {
        let entry = fuzz_entry(&mut rng, n);
        writer.append(entry.clone()).expect("append");
        originals.push(LogRecord { seq: n, entry });
        ends.push(file_len(&original_path) as usize);
    }
    drop(writer);
    let original = fs::read(&original_path).expect("read");
    let path = dir.path().join("damaged.log");

    let started = std::time::Instant::now();
    let mut tally = FuzzTally::default();
    while tally.iterations < max_iterations && started.elapsed() < budget {
        let iteration = tally.iterations;
        tally.iterations += 1;
        let mut bytes = original.clone();
        let damage = match rng.random_range(0..10) {
            // A third of the flips aim at a length field, where damage is hardest to tell
            // from a torn tail; the rest land anywhere, the file header included.
            0..=1 => {
                let start = if rng.random_bool(0.5) {
                    HEADER_LEN as usize
                } else {
                    ends[rng.random_range(0..ends.len() - 1)]
                };
                Damage::Flip {
                    offset: start + rng.random_range(0..3),
                    bit: rng.random_range(0..8),
                }
            }
            2..=5 => Damage::Flip {
                offset: rng.random_range(0..bytes.len()),
                bit: rng.random_range(0..8),
            },
            6..=8 => Damage::Cut {
                len: rng.random_range(0..bytes.len()),
            },
            _ => {
                let len = rng.random_range(2..=16);
                Damage::Garble {
                    offset: rng.random_range(0..bytes.len() - len),
                    len,
                }
            }
        };
        match damage {
            Damage::Flip { offset, bit } => bytes[offset] ^= 1 << bit,
            Damage::Cut { len } => bytes.truncate(len),
            Damage::Garble { offset, len } => {
                for b in &mut bytes[offset..offset + len] {
                    *b = rng.random_range(1..=255);
                }
            }
        }
        if bytes == original {
            continue; // a garble that rewrote the same bytes
        }
        let context = format!("seed {seed}, iteration {iteration}, {damage:?}");
        fs::write(&path, &bytes).expect("write damaged log");

        // What a reader must see: everything, or for a cut every record wholly before it.
        let expected: &[LogRecord] = match damage {
            Damage::Cut { len } => &originals[..ends.iter().filter(|&&e| e <= len).count()],
            _ => &originals,
        };
        let read = SegmentLogReader::open(&path).and_then(|mut r| r.read_to_end());
        let complete = match (&read, damage) {
            (Ok(records), _) => {
                assert_eq!(
                    records.as_slice(),
                    expected,
                    "{context}: read {} of {} records without an error",
                    records.len(),
                    expected.len()
                );
                match damage {
                    Damage::Cut { .. } => tally.cuts_prefix_read += 1,
                    Damage::Flip { .. } => tally.flips_all_read += 1,
                    Damage::Garble { .. } => tally.garbles_all_read += 1,
                }
                true
            }
            (Err(e), Damage::Flip { .. } | Damage::Garble { .. })
                if e.code() == ErrorCode::SegmentCatalogCorrupt =>
            {
                if let Damage::Flip { .. } = damage {
                    tally.flips_corrupt += 1;
                } else {
                    tally.garbles_corrupt += 1;
                }
                false
            }
            (Err(e), _) => panic!("{context}: unexpected error {e}"),
        };

        // A writer on the damaged file either refuses it and changes nothing, or keeps every
        // complete record and appends after them.
        match SegmentLogWriter::open(&path) {
            Ok(mut writer) => {
                assert!(
                    complete,
                    "{context}: the reader refused but a writer opened"
                );
                let keep = expected.len();
                let kept_bytes = if keep == 0 { 0 } else { ends[keep - 1] };
                writer
                    .append(uploaded(1))
                    .unwrap_or_else(|e| panic!("{context}: append: {e}"));
                drop(writer);
                let after = fs::read(&path).expect("read");
                assert_eq!(
                    after[..kept_bytes],
                    bytes[..kept_bytes],
                    "{context}: the writer changed complete records"
                );
                let reread = read_all(&path);
                assert_eq!(reread.len(), keep + 1, "{context}: after the append");
                assert_eq!(&reread[..keep], expected, "{context}: after the append");
                tally.writer_opened_and_appended += 1;
            }
            Err(e) => {
                assert_eq!(e.code(), ErrorCode::SegmentCatalogCorrupt, "{context}: {e}");
                assert!(
                    !complete,
                    "{context}: the reader read the log but the writer: {e}"
                );
                assert_eq!(
                    fs::read(&path).expect("read"),
                    bytes,
                    "{context}: a refusing writer changed the file"
                );
                tally.writer_refused += 1;
            }
        }
    }
    println!(
        "segment log fuzz: {RECORDS} records, {} bytes, {:?} elapsed: {tally:?}",
        original.len(),
        started.elapsed()
    );
    assert!(tally.iterations >= 200, "too few iterations: {tally:?}");
}
