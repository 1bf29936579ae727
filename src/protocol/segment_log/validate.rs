//! What a record may say. A record with an impossible field is refused where it is read (and
//! where it would be written), so that it never reaches S3 or the catalog as a request that can
//! only fail, or worse, succeed against the wrong object: an empty key lists the bucket, `..`
//! escapes the table's directory, a size beyond S3's limit makes a range request invalid.

use std::fmt;

use super::{LogEntry, LogRecord};

/// S3's limit on an object key, in bytes of UTF-8.
pub const MAX_OBJECT_KEY_BYTES: usize = 1024;
/// S3's limit on an object's size: 5 TiB.
pub const MAX_OBJECT_SIZE: u64 = 5 << 40;
/// The longest dataset (table) name, in bytes of UTF-8. Catalogs differ; 255 is what the common
/// ones (and most file systems, for the table's directory) accept.
pub const MAX_DATASET_BYTES: usize = 255;

/// The field of a record that cannot be right, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidField {
    pub field: &'static str,
    pub problem: String,
}

impl fmt::Display for InvalidField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "field {} {}", self.field, self.problem)
    }
}

/// Checks the fields of a record that the registrar acts on. Unknown kinds carry nothing to
/// check. Pure, so the rules are tested without files.
pub fn validate_record(record: &LogRecord) -> Result<(), InvalidField> {
    match &record.entry {
        LogEntry::Finalized { dataset, .. } => check_dataset(dataset),
        LogEntry::Uploaded {
            dataset,
            object_key,
            file_size,
            ..
        } => {
            check_dataset(dataset)?;
            check_object_key(object_key)?;
            check_file_size(*file_size)
        }
        LogEntry::Unknown => Ok(()),
    }
}

fn invalid(field: &'static str, problem: impl Into<String>) -> Result<(), InvalidField> {
    Err(InvalidField {
        field,
        problem: problem.into(),
    })
}

/// Quotes a value for a message: escaped (control characters become visible) and cut to a
/// readable length, since the value may be up to 1 MiB of garbage.
fn shown(value: &str) -> String {
    const SHOWN: usize = 80;
    if value.chars().count() <= SHOWN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(SHOWN).collect();
        format!("{head:?}... ({} bytes)", value.len())
    }
}

/// A dataset becomes a table name and a directory of the table's location, so it must be one
/// plain name: no `.` (a namespace separator to the catalog), no `/` (a path separator), no
/// control characters.
fn check_dataset(dataset: &str) -> Result<(), InvalidField> {
    const FIELD: &str = "dataset";
    if dataset.is_empty() {
        return invalid(
            FIELD,
            "is empty; a dataset names its table and cannot be empty",
        );
    }
    if dataset.len() > MAX_DATASET_BYTES {
        return invalid(
            FIELD,
            format!(
                "{} is {} bytes long, over the {MAX_DATASET_BYTES}-byte limit of a table name",
                shown(dataset),
                dataset.len()
            ),
        );
    }
    if let Some(c) = dataset
        .chars()
        .find(|&c| c == '.' || c == '/' || c.is_control())
    {
        return invalid(
            FIELD,
            format!(
                "{} contains {c:?}, which a table name cannot hold ('.', '/' and control \
                 characters are refused)",
                shown(dataset)
            ),
        );
    }
    Ok(())
}

/// The key inside the bucket, as S3 names the object: relative (no leading `/`), one non-empty
/// segment between each pair of slashes, no `.` or `..` segments (they would be resolved away by
/// some clients and not by others, so the object read and the path registered could differ).
fn check_object_key(key: &str) -> Result<(), InvalidField> {
    const FIELD: &str = "object_key";
    if key.is_empty() {
        return invalid(
            FIELD,
            "is empty; it must name the uploaded object inside the bucket",
        );
    }
    if key.len() > MAX_OBJECT_KEY_BYTES {
        return invalid(
            FIELD,
            format!(
                "{} is {} bytes long, over S3's {MAX_OBJECT_KEY_BYTES}-byte key limit",
                shown(key),
                key.len()
            ),
        );
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return invalid(
            FIELD,
            format!("{} contains the control character {c:?}", shown(key)),
        );
    }
    if key.starts_with('/') {
        return invalid(
            FIELD,
            format!(
                "{} starts with '/'; keys are relative to the bucket (no s3://bucket/ prefix, \
                 no leading slash)",
                shown(key)
            ),
        );
    }
    for segment in key.split('/') {
        let problem = match segment {
            "" => "has an empty path segment ('//' or a trailing '/')",
            "." | ".." => "has a '.' or '..' path segment",
            _ => continue,
        };
        return invalid(FIELD, format!("{} {problem}", shown(key)));
    }
    Ok(())
}

fn check_file_size(size: u64) -> Result<(), InvalidField> {
    const FIELD: &str = "file_size";
    if size == 0 {
        return invalid(FIELD, "is 0; a Parquet segment is never empty");
    }
    if size > MAX_OBJECT_SIZE {
        return invalid(
            FIELD,
            format!("is {size}, over S3's object size limit of {MAX_OBJECT_SIZE} bytes (5 TiB)"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uploaded(dataset: &str, key: &str, size: u64) -> LogRecord {
        LogRecord {
            seq: 1,
            entry: LogEntry::Uploaded {
                dataset: dataset.into(),
                segment_id: "s".into(),
                object_key: key.into(),
                file_size: size,
                row_count: 1,
                uploaded_at_ms: 0,
            },
        }
    }

    fn field(record: &LogRecord) -> Option<&'static str> {
        validate_record(record).err().map(|e| e.field)
    }

    #[test]
    fn ordinary_and_odd_but_valid_records_pass() {
        for key in [
            "logs/seg-1.parquet",
            "a b ü.parquet",
            "t/date=2024-01-01/seg~1#%[]{}^|\\<>\"*?.parquet",
            ".hidden/..x/seg..parquet",
            &"k".repeat(MAX_OBJECT_KEY_BYTES),
        ] {
            assert_eq!(field(&uploaded("logs", key, 1)), None, "{key}");
        }
        assert_eq!(field(&uploaded("logs", "k", MAX_OBJECT_SIZE)), None);
        assert_eq!(
            field(&uploaded(&"d".repeat(MAX_DATASET_BYTES), "k", 1)),
            None
        );
        assert_eq!(field(&uploaded("telemetry_v2-ü", "k", 1)), None);
        let unknown = LogRecord {
            seq: 1,
            entry: LogEntry::Unknown,
        };
        assert_eq!(field(&unknown), None);
    }

    #[test]
    fn impossible_object_keys_are_refused() {
        for key in [
            "",
            "/a",
            "a//b",
            "a/",
            ".",
            "..",
            "./a",
            "a/./b",
            "a/../b",
            "a/..",
            "a\nb",
            "a\u{0}b",
            "a\u{7f}b",
            "a\u{85}b",
            &"k".repeat(MAX_OBJECT_KEY_BYTES + 1),
            &"ü".repeat(MAX_OBJECT_KEY_BYTES / 2 + 1),
        ] {
            assert_eq!(
                field(&uploaded("logs", key, 1)),
                Some("object_key"),
                "{key:?}"
            );
        }
    }

    #[test]
    fn impossible_sizes_are_refused() {
        for size in [0, MAX_OBJECT_SIZE + 1, u64::MAX] {
            assert_eq!(
                field(&uploaded("logs", "k", size)),
                Some("file_size"),
                "{size}"
            );
        }
    }

    #[test]
    fn impossible_dataset_names_are_refused_in_both_kinds() {
        for dataset in [
            "",
            "a.b",
            "..",
            "../x",
            "a/b",
            "a\tb",
            "a\u{1f}b",
            &"d".repeat(MAX_DATASET_BYTES + 1),
        ] {
            assert_eq!(
                field(&uploaded(dataset, "k", 1)),
                Some("dataset"),
                "{dataset:?}"
            );
            let finalized = LogRecord {
                seq: 1,
                entry: LogEntry::Finalized {
                    dataset: dataset.into(),
                    segment_id: "s".into(),
                    path: "p".into(),
                    row_count: 1,
                    file_size: 1,
                },
            };
            assert_eq!(field(&finalized), Some("dataset"), "{dataset:?}");
        }
    }

    #[test]
    fn messages_name_the_field_and_escape_and_shorten_the_value() {
        let err = validate_record(&uploaded("logs", &format!("a\u{1}{}", "x".repeat(5000)), 1))
            .expect_err("control character");
        let text = err.to_string();
        assert!(text.starts_with("field object_key "), "{text}");
        assert!(text.contains("\\u{1}"), "{text}");
        assert!(text.len() < 400, "{text}");
    }
}
