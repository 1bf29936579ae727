//! Writing a snapshot's manifest list deflate-compressed.
//!
//! iceberg-rust's `ManifestListWriter` writes an uncompressed Avro container; every commit
//! rewrites the whole list, so its size is paid on every commit and by every reader planning a
//! scan. The writer is given an in-memory file, and the finished container is transcoded to
//! Avro's standard `deflate` codec (read by Java, pyiceberg and iceberg-rust alike), keeping the
//! writer schema and every user metadata key (snapshot-id, parent-snapshot-id, sequence-number,
//! format-version, first-row-id): the records are the same, only the blocks are compressed.
//!
//! The last list written is kept ([`LastList`]): every build reads the current snapshot's list
//! to carry its manifests over, and a committer that commits back to back (a fleet's sole
//! committer, a lone registrar under a backlog) builds on the snapshot it made itself, whose list
//! it has in memory already.

use std::sync::{Arc, Mutex};

use apache_avro::{Codec, DeflateSettings, Reader, Writer};
use bytes::Bytes;
use iceberg::io::FileWrite;
use iceberg::spec::{FormatVersion, ManifestFile, ManifestList};
use iceberg::{Error, ErrorKind, Result};

/// A `FileWrite` into memory, its bytes shared with the caller through [`MemoryFile::bytes`].
/// Holds the whole manifest list (a few hundred bytes per manifest).
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryFile {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl MemoryFile {
    /// The bytes written so far.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.bytes.lock().map(|b| b.clone()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl FileWrite for MemoryFile {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.bytes
            .lock()
            .map_err(|_| Error::new(ErrorKind::Unexpected, "in-memory manifest list poisoned"))?
            .extend_from_slice(&bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The manifest list this node wrote last: its path and its bytes before compression (the
/// same records). A list is never rewritten once written (each attempt names its own), so where
/// the table's current snapshot names this path its manifests are these, and the build reads
/// them from memory rather than GET them back from the store: one round trip less in every
/// cycle of a committer that builds on its own last commit (a fleet's sole committer at 128
/// nodes made one every ~300 ms). One list, a few hundred bytes per manifest, is held.
#[derive(Debug, Default)]
pub(crate) struct LastList {
    written: Option<(String, Bytes)>,
}

impl LastList {
    /// Notes the list written at `path` (uncompressed Avro container).
    pub(crate) fn wrote(&mut self, path: &str, container: Vec<u8>) {
        self.written = Some((path.to_string(), Bytes::from(container)));
    }

    /// The manifests of the list at `path`, if it is the one held; `None` otherwise (or if it
    /// does not parse, which only a bug could cause: the store's copy is read instead).
    pub(crate) fn manifests(
        &self,
        path: &str,
        version: FormatVersion,
    ) -> Option<Vec<ManifestFile>> {
        let (held, bytes) = self.written.as_ref()?;
        if held != path {
            return None;
        }
        ManifestList::parse_with_version(bytes, version)
            .map(|list| list.consume_entries().into_iter().collect())
            .inspect_err(|e| {
                tracing::debug!("the manifest list held does not parse ({e}); reading {path}")
            })
            .ok()
    }
}

fn avro_error(what: &str, e: apache_avro::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("cannot compress the manifest list: {what}"),
    )
    .with_source(e)
}

/// The Avro container `container` (any codec) rewritten with the deflate codec: same writer
/// schema, same user metadata, same records.
pub(crate) fn deflate_container(container: &[u8]) -> Result<Vec<u8>> {
    let reader = Reader::new(container).map_err(|e| avro_error("cannot read it", e))?;
    let schema = reader.writer_schema().clone();
    let metadata = reader.user_metadata().clone();
    let mut writer = Writer::with_codec(
        &schema,
        Vec::with_capacity(container.len() / 2),
        Codec::Deflate(DeflateSettings::default()),
    );
    for (key, value) in metadata {
        writer
            .add_user_metadata(key, value)
            .map_err(|e| avro_error("cannot keep its metadata", e))?;
    }
    for value in reader {
        let value = value.map_err(|e| avro_error("cannot read a record", e))?;
        writer
            .append_value_ref(&value)
            .map_err(|e| avro_error("cannot write a record", e))?;
    }
    writer
        .into_inner()
        .map_err(|e| avro_error("cannot finish it", e))
}

/// The codec an Avro container names in its header (`avro.codec`; absent means `null`).
#[cfg(test)]
fn container_codec(container: &[u8]) -> Option<String> {
    // The header's metadata map is read by the Avro reader itself, which keeps the codec to
    // itself: find the key in the header bytes instead (it precedes the first sync marker).
    let key = b"avro.codec";
    let at = container.windows(key.len()).position(|w| w == key)?;
    let rest = &container[at + key.len()..];
    // A zig-zag varint length, then the value.
    let (len, used) = read_varint(rest)?;
    let value = rest.get(used..used + usize::try_from(len).ok()?)?;
    String::from_utf8(value.to_vec()).ok()
}

#[cfg(test)]
fn read_varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let decoded = ((value >> 1) as i64) ^ -((value & 1) as i64);
            return Some((decoded, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{ManifestContentType, ManifestListWriter};

    fn manifest(n: i64, snapshot_id: i64) -> ManifestFile {
        ManifestFile {
            manifest_path: format!("s3://bucket/table/metadata/{n:04}-m0.avro"),
            manifest_length: 5_000 + n,
            partition_spec_id: 0,
            content: ManifestContentType::Data,
            sequence_number: n,
            min_sequence_number: n,
            added_snapshot_id: snapshot_id,
            added_files_count: Some(1),
            existing_files_count: Some(0),
            deleted_files_count: Some(0),
            added_rows_count: Some(100),
            existing_rows_count: Some(0),
            deleted_rows_count: Some(0),
            partitions: Some(vec![]),
            key_metadata: None,
            first_row_id: None,
        }
    }

    async fn written(version: FormatVersion, n: i64) -> Vec<u8> {
        let file = MemoryFile::default();
        let out = Box::new(file.clone());
        let mut writer = match version {
            FormatVersion::V1 => ManifestListWriter::v1(out, 77, Some(76)),
            FormatVersion::V2 => ManifestListWriter::v2(out, 77, Some(76), n + 1),
            FormatVersion::V3 => ManifestListWriter::v3(out, 77, Some(76), n + 1, Some(10)),
        };
        writer
            .add_manifests((0..n).map(|i| manifest(i, 77)))
            .expect("add");
        writer.close().await.expect("close");
        file.bytes()
    }

    #[tokio::test]
    async fn the_deflated_list_parses_to_the_same_entries_and_is_smaller() {
        for version in [FormatVersion::V1, FormatVersion::V2, FormatVersion::V3] {
            let plain = written(version, 200).await;
            let deflated = deflate_container(&plain).expect("deflate");
            assert!(
                deflated.len() * 2 < plain.len(),
                "{version:?}: {} -> {}",
                plain.len(),
                deflated.len()
            );
            assert_eq!(container_codec(&plain).as_deref(), Some("null"));
            assert_eq!(container_codec(&deflated).as_deref(), Some("deflate"));
            let before = ManifestList::parse_with_version(&plain, version).expect("plain");
            let after = ManifestList::parse_with_version(&deflated, version).expect("deflated");
            assert_eq!(before.entries().len(), 200);
            assert_eq!(before, after);
            // Every user metadata key survives.
            let meta = |bytes: &[u8]| Reader::new(bytes).expect("reader").user_metadata().clone();
            assert_eq!(meta(&plain), meta(&deflated));
            assert!(meta(&deflated).contains_key("snapshot-id"));
            assert!(meta(&deflated).contains_key("parent-snapshot-id"));
        }
    }

    #[tokio::test]
    async fn the_list_held_stands_for_its_path_only() {
        let mut last = LastList::default();
        assert!(
            last.manifests("s3://b/t/metadata/snap-1.avro", FormatVersion::V2)
                .is_none()
        );
        let plain = written(FormatVersion::V2, 3).await;
        let stored = ManifestList::parse_with_version(&plain, FormatVersion::V2).expect("parse");
        last.wrote("s3://b/t/metadata/snap-1.avro", plain);
        let held = last
            .manifests("s3://b/t/metadata/snap-1.avro", FormatVersion::V2)
            .expect("held");
        // The same entries as read back from the store.
        assert_eq!(held, stored.entries());
        assert!(
            last.manifests("s3://b/t/metadata/snap-2.avro", FormatVersion::V2)
                .is_none()
        );
        // Bytes that do not parse are not trusted: the store is read.
        last.wrote("s3://b/t/metadata/snap-3.avro", b"not avro".to_vec());
        assert!(
            last.manifests("s3://b/t/metadata/snap-3.avro", FormatVersion::V2)
                .is_none()
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(deflate_container(b"not avro").is_err());
        assert_eq!(container_codec(b"nothing here"), None);
        assert_eq!(container_codec(b"avro.codec\xff\xff"), None);
    }
}
