//! Object keys: the key a segment record names is used byte for byte, both for the footer read
//! ([`object_path`]) and for the data file path registered in the table ([`object_uri`]), so the
//! object read is the object registered. Keys no Iceberg reader could reach are refused
//! ([`key_problem`]).

use object_store::path::Path as ObjectPath;

use crate::error::{Error, ErrorCode, Result};

/// The longest key S3 accepts, in bytes of UTF-8.
pub(crate) const MAX_KEY_BYTES: usize = 1024;

/// Why `key` cannot name a segment safely, or `None` when it can. Every key S3 allows passes,
/// except those whose bytes would not survive the trip to the object or to a reader of the
/// table:
/// - empty: a GET of the bucket itself is a listing;
/// - over [`MAX_KEY_BYTES`]: S3 refuses it;
/// - a leading or trailing `/`, an empty, `.` or `..` segment: object_store's paths (and
///   readers' path handling) normalise these away, so another object would be read;
/// - ASCII control characters: object_store's paths cannot hold them;
/// - `#` or `?`: the data file path is a URI, and readers (pyiceberg's `urlparse`, Java's
///   `S3URI`) cut it at a fragment or query, none percent-decodes: no registered path reaches
///   the object.
pub(crate) fn key_problem(key: &str) -> Option<String> {
    if key.is_empty() {
        return Some("the key is empty (it would name the bucket itself)".to_string());
    }
    if key.len() > MAX_KEY_BYTES {
        return Some(format!(
            "the key is {} bytes long, over S3's {MAX_KEY_BYTES}-byte limit",
            key.len()
        ));
    }
    if key.starts_with('/') {
        return Some("the key starts with '/'".to_string());
    }
    if key.ends_with('/') {
        return Some("the key ends with '/' (a folder marker, not a file)".to_string());
    }
    for segment in key.split('/') {
        match segment {
            "" => return Some("the key has an empty segment ('//')".to_string()),
            "." | ".." => {
                return Some(format!(
                    "the key has a '{segment}' segment, which paths normalise away"
                ));
            }
            _ => {}
        }
    }
    if let Some(c) = key.chars().find(char::is_ascii_control) {
        return Some(format!(
            "the key contains the control character U+{:04X}",
            u32::from(c)
        ));
    }
    if let Some(c) = key.chars().find(|c| matches!(c, '#' | '?')) {
        return Some(format!(
            "the key contains '{c}', which Iceberg readers take for the start of a URI {} \
             (pyiceberg, Java's S3FileIO), so no registered path would reach the object",
            if c == '#' { "fragment" } else { "query" }
        ));
    }
    None
}

/// The error for a key [`key_problem`] refuses: permanent, naming the key and the fix.
fn key_refused(key: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::FooterInvalid,
        format!(
            "object key {key:?} cannot be registered: {why}; re-ship the segment under a plain \
             key (letters, digits, '/', '-', '_', '.', '=', spaces) or remove its Uploaded record"
        ),
    )
}

/// The object_store path of a recorded object key, holding the key's bytes unchanged
/// (`Path::parse`, not `Path::from`, which percent-encodes `~ # % [ ] { } ^ | \ < > " * ?` and
/// non-ASCII). object_store's S3 client percent-encodes the path once for the request line,
/// so S3 receives exactly this key.
pub fn object_path(key: &str) -> Result<ObjectPath> {
    if let Some(why) = key_problem(key) {
        return Err(key_refused(key, &why));
    }
    let path = ObjectPath::parse(key).map_err(|e| key_refused(key, &e.to_string()))?;
    // `key_problem` refuses everything `parse` would change; this keeps that promise checked.
    if path.as_ref() != key {
        return Err(key_refused(key, "object_store would rewrite it"));
    }
    Ok(path)
}

/// The data file path registered for a recorded object key: `s3://{bucket}/{key}`, the key's
/// bytes unchanged (Iceberg readers take the path after the bucket as the key, without
/// decoding).
pub(crate) fn object_uri(bucket: &str, key: &str) -> Result<String> {
    if let Some(why) = key_problem(key) {
        return Err(key_refused(key, &why));
    }
    Ok(format!("s3://{bucket}/{key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_s3_allows_and_readers_reach_is_kept_byte_for_byte() {
        for key in [
            "a.parquet",
            "p/thadam/v1/pipe/telemetry/seg-000001.parquet",
            "a b.parquet",
            "seg~1.parquet",
            "50%.parquet",
            "100%25.parquet",
            "ts=2024-01-01/part 0.parquet",
            "grüße ü.parquet",
            "[x]{y}^|\\<>\"*.parquet",
            "..a/b..",
        ] {
            assert_eq!(key_problem(key), None, "{key}");
            assert_eq!(object_path(key).expect(key).as_ref(), key);
            assert_eq!(
                object_uri("bucket", key).expect(key),
                format!("s3://bucket/{key}")
            );
        }
        // What the old reader did instead: another object.
        assert_ne!(ObjectPath::from("seg~1.parquet").as_ref(), "seg~1.parquet");
    }

    #[test]
    fn keys_no_reader_could_reach_are_refused_naming_the_key() {
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        for (key, why) in [
            ("", "empty"),
            (long.as_str(), "1024-byte"),
            ("/a.parquet", "starts with '/'"),
            ("dir/", "ends with '/'"),
            ("a//b", "empty segment"),
            ("a/./b", "'.' segment"),
            ("a/../b", "'..' segment"),
            ("..", "'..' segment"),
            ("a\u{7}b", "U+0007"),
            ("a\nb", "U+000A"),
            ("a#b", "fragment"),
            ("a?b", "query"),
        ] {
            let problem = key_problem(key).unwrap_or_else(|| panic!("{key:?} passes"));
            assert!(problem.contains(why), "{key:?}: {problem}");
            for err in [
                object_path(key).expect_err("refused"),
                object_uri("b", key).expect_err("refused"),
            ] {
                assert_eq!(err.code(), ErrorCode::FooterInvalid);
                assert!(err.message().contains(&format!("{key:?}")), "{err}");
            }
        }
        // Exactly at the limit is fine; multi-byte characters count in bytes.
        assert_eq!(key_problem(&"k".repeat(MAX_KEY_BYTES)), None);
        assert!(key_problem(&"ü".repeat(MAX_KEY_BYTES / 2 + 1)).is_some());
    }
}
