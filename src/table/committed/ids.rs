//! A segment's identity in snapshot summaries ([`SegmentId`]), the fingerprint of an `Uploaded`
//! record, and the [`SEGMENT_IDS`] summary value that lists a snapshot's segments.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::protocol::segment::UploadedSegment;
#[cfg(doc)]
use crate::table::summary_keys::SEGMENT_IDS;

/// The width of one encoded [`SegmentId`].
const ID_CHARS: usize = 16;

/// A segment's identity in snapshot summaries: the first 96 bits of SHA-256 of its object key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentId([u8; 12]);

impl SegmentId {
    pub fn of(object_key: &str) -> SegmentId {
        Self::of_bytes(object_key.as_bytes())
    }

    pub(super) fn of_bytes(bytes: &[u8]) -> SegmentId {
        let digest = Sha256::digest(bytes);
        let mut id = [0u8; 12];
        id.copy_from_slice(&digest[..12]);
        SegmentId(id)
    }

    pub(super) fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0)
    }

    pub(super) fn decode(chunk: &[u8]) -> Option<SegmentId> {
        let bytes = URL_SAFE_NO_PAD.decode(chunk).ok()?;
        Some(SegmentId(bytes.try_into().ok()?))
    }
}

/// The fingerprint of one `Uploaded` record: every field of it, so two different uploads that
/// happen to share a seq (a restored or cloned log) never share a fingerprint.
pub fn fingerprint(segment: &UploadedSegment) -> SegmentId {
    let mut bytes = Vec::with_capacity(96 + segment.object_key.len());
    for part in [
        segment.dataset.as_bytes(),
        segment.segment_id.as_bytes(),
        segment.object_key.as_bytes(),
    ] {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part);
    }
    for n in [
        segment.seq,
        segment.file_size,
        segment.row_count,
        segment.uploaded_at_ms,
    ] {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    SegmentId::of_bytes(&bytes)
}

/// The ids listed in a [`SEGMENT_IDS`] summary value (malformed chunks are skipped).
pub fn decode_ids(value: &str) -> Vec<SegmentId> {
    value
        .as_bytes()
        .chunks(ID_CHARS)
        .filter_map(SegmentId::decode)
        .collect()
}

/// The [`SEGMENT_IDS`] summary value for segment ids already taken.
pub fn encode_id_list<'a>(ids: impl IntoIterator<Item = &'a SegmentId>) -> String {
    ids.into_iter().map(SegmentId::encode).collect()
}

/// Whether a [`SEGMENT_IDS`] value lists `id` (at one of its 16-character positions).
pub fn lists_id(value: &str, id: &SegmentId) -> bool {
    let encoded = id.encode();
    value
        .as_bytes()
        .chunks(ID_CHARS)
        .any(|chunk| chunk == encoded.as_bytes())
}

/// The [`SEGMENT_IDS`] summary value for a batch of object keys.
pub fn encode_ids<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    keys.into_iter()
        .map(|k| SegmentId::of(k).encode())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::committed::test_segment as seg;

    #[test]
    fn ids_are_fixed_width_and_round_trip() {
        let keys = [
            "a",
            "lake/thadam/v1/p/telemetry/data/seg-00000001.parquet",
            "",
        ];
        let value = encode_ids(keys);
        assert_eq!(value.len(), keys.len() * ID_CHARS);
        let ids = decode_ids(&value);
        assert_eq!(
            ids,
            keys.iter().map(|k| SegmentId::of(k)).collect::<Vec<_>>()
        );
        assert_ne!(SegmentId::of("a"), SegmentId::of("b"));
    }

    #[test]
    fn fingerprints_differ_for_any_field() {
        let a = seg(5, "k");
        let mut b = a.clone();
        b.uploaded_at_ms += 1;
        assert_ne!(fingerprint(&a), fingerprint(&b));
        let mut c = a.clone();
        c.object_key = "k2".into();
        assert_ne!(fingerprint(&a), fingerprint(&c));
        assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    }
}
