//! An intent as it lies in the store: a small JSON document beside the fleet's segments that
//! names one published manifest and what committing it means (its segments' ids, the watermark
//! it raises). Parsing is pure and refuses whatever could make a carrier commit something the
//! fleet did not write: another table, another `url`, a manifest outside the table's metadata,
//! ids that do not add up, an oversized body. A refused intent is skipped, never committed.

use iceberg::spec::FieldSummary;
use serde::{Deserialize, Serialize};

use crate::table::committed::{SegmentId, WATERMARK_PREFIX, decode_ids, decode_mark};

/// The format this version writes and reads; an intent of another format is skipped.
pub(crate) const FORMAT: &str = "thadam-intent/1";

/// The largest intent read: 16 bytes per segment id, a few hundred for the rest, so a megabyte
/// holds a batch far larger than `commit.max_segments` allows.
pub(crate) const MAX_BYTES: u64 = 1 << 20;

/// One published batch (see the module docs of `intents`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IntentRecord {
    pub format: String,
    /// The table it was published for (its UUID): a table dropped and created again under the
    /// same name never takes the old table's intents.
    pub table_uuid: String,
    /// The fleet's `url` (`s3://bucket/prefix`): the data files of the manifest lie there.
    pub url: String,
    /// The publisher's lane and `thadam.writer`, for the carrier's summary and the logs.
    pub lane: String,
    pub writer: String,
    /// When it was published (ms since the epoch, the publisher's clock): its age in metrics,
    /// and when anyone may delete it once it is moot.
    pub created_ms: i64,
    pub manifest: ManifestRef,
    /// The segments' ids, concatenated as in `thadam.segment-ids`.
    pub segment_ids: String,
    /// The highest catalog seq among its segments.
    pub max_seq: u64,
    /// The watermark the publisher's own commit would have raised.
    #[serde(default)]
    pub watermark: Option<MarkRaise>,
}

/// The manifest an intent publishes: its manifest-list entry, less what the carrier assigns
/// (its snapshot id, the sequence numbers, a v3 table's first row id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ManifestRef {
    pub path: String,
    pub length: i64,
    pub spec_id: i32,
    pub schema_id: i32,
    /// Its data files (one per segment), their rows and bytes (for the summary's totals).
    pub files: u32,
    pub rows: u64,
    pub bytes: u64,
    #[serde(default)]
    pub partitions: Option<Vec<FieldSummary>>,
}

/// A watermark an intent raises: `property` to `value`, but only where the table's value of it
/// is already at `after` or past it (every earlier segment of the log is in the table), or
/// `after` is `None` (the publisher knew every earlier segment of its log to be in the table).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MarkRaise {
    pub property: String,
    pub value: String,
    #[serde(default)]
    pub after: Option<u64>,
}

/// Why an intent is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Larger than [`MAX_BYTES`].
    TooLarge,
    /// Not JSON of this format, or its parts do not add up.
    Malformed,
    /// For another table, another `url`, or a manifest outside the table's metadata.
    Foreign,
}

impl Skip {
    /// The `reason` label of `thadam_iceberg_intents_skipped_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Skip::TooLarge => "too_large",
            Skip::Malformed => "malformed",
            Skip::Foreign => "foreign",
        }
    }
}

/// What a carrier checks an intent against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect<'a> {
    pub table_uuid: &'a str,
    pub url: &'a str,
    /// `<table location>/metadata`.
    pub metadata_root: &'a str,
}

/// A checked intent and its decoded ids.
#[derive(Debug, Clone)]
pub(crate) struct Intent {
    pub record: IntentRecord,
    pub ids: Vec<SegmentId>,
}

impl IntentRecord {
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings and numbers always encodes.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Parses and checks the body of an intent (see the module docs).
pub(crate) fn parse(bytes: &[u8], expect: Expect<'_>) -> Result<Intent, Skip> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Skip::TooLarge);
    }
    let record: IntentRecord = serde_json::from_slice(bytes).map_err(|_| Skip::Malformed)?;
    if record.format != FORMAT {
        return Err(Skip::Malformed);
    }
    if record.table_uuid != expect.table_uuid || record.url != expect.url {
        return Err(Skip::Foreign);
    }
    let path = &record.manifest.path;
    let inside = path
        .strip_prefix(expect.metadata_root)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| {
            !name.is_empty()
                && !name.contains('/')
                && !name.contains("..")
                && name.ends_with(".avro")
        });
    if !inside {
        return Err(Skip::Foreign);
    }
    let ids = decode_ids(&record.segment_ids);
    if ids.is_empty()
        || ids.len() * 16 != record.segment_ids.len()
        || ids.len() != record.manifest.files as usize
        || record.manifest.length <= 0
    {
        return Err(Skip::Malformed);
    }
    if let Some(mark) = &record.watermark {
        let seq = decode_mark(&mark.value).map(|(seq, _)| seq);
        if !mark.property.starts_with(WATERMARK_PREFIX)
            || seq != Some(record.max_seq)
            || mark.after.is_some_and(|after| after >= record.max_seq)
        {
            return Err(Skip::Malformed);
        }
    }
    Ok(Intent { record, ids })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::table::committed::encode_ids;

    pub(crate) const UUID: &str = "0195f3c2-0000-7000-8000-000000000001";
    pub(crate) const URL: &str = "s3://lake/fleet";
    pub(crate) const ROOT: &str = "s3://lake/warehouse/ns/t/metadata";

    pub(crate) fn expect() -> Expect<'static> {
        Expect {
            table_uuid: UUID,
            url: URL,
            metadata_root: ROOT,
        }
    }

    /// An intent of `keys` from `lane`, its watermark at `max_seq` after `after`.
    pub(crate) fn record(
        lane: &str,
        keys: &[&str],
        max_seq: u64,
        after: Option<u64>,
    ) -> IntentRecord {
        IntentRecord {
            format: FORMAT.to_string(),
            table_uuid: UUID.to_string(),
            url: URL.to_string(),
            lane: lane.to_string(),
            writer: format!("thadam-iceberg/lake/{lane}"),
            created_ms: 1_000,
            manifest: ManifestRef {
                path: format!("{ROOT}/{lane}-{max_seq}-m0.avro"),
                length: 4_096,
                spec_id: 0,
                schema_id: 0,
                files: keys.len() as u32,
                rows: 10 * keys.len() as u64,
                bytes: 1_000 * keys.len() as u64,
                partitions: None,
            },
            segment_ids: encode_ids(keys.iter().copied()),
            max_seq,
            watermark: Some(MarkRaise {
                property: format!("{WATERMARK_PREFIX}log-{lane}"),
                value: format!("{max_seq}:AAAAAAAAAAAAAAAA"),
                after,
            }),
        }
    }

    #[test]
    fn an_intent_round_trips_and_its_ids_decode() {
        let r = record("a", &["k1", "k2"], 7, Some(3));
        let intent = parse(&r.to_bytes(), expect()).expect("a good intent parses");
        assert_eq!(intent.record, r);
        assert_eq!(intent.ids, vec![SegmentId::of("k1"), SegmentId::of("k2")]);
    }

    #[test]
    fn what_could_commit_the_wrong_thing_is_skipped() {
        let good = record("a", &["k1"], 7, None);
        let check = |r: &IntentRecord| parse(&r.to_bytes(), expect()).err();
        assert_eq!(parse(b"{not json", expect()).err(), Some(Skip::Malformed));
        assert_eq!(
            parse(&vec![b' '; MAX_BYTES as usize + 1], expect()).err(),
            Some(Skip::TooLarge)
        );
        let mut r = good.clone();
        r.format = "thadam-intent/2".into();
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good.clone();
        r.table_uuid = "another".into();
        assert_eq!(check(&r), Some(Skip::Foreign));
        let mut r = good.clone();
        r.url = "s3://other/fleet".into();
        assert_eq!(check(&r), Some(Skip::Foreign));
        for path in [
            "s3://lake/elsewhere/m0.avro",
            "s3://lake/warehouse/ns/t/metadata/../../u/metadata/x.avro",
            "s3://lake/warehouse/ns/t/metadata/sub/x.avro",
            "s3://lake/warehouse/ns/t/metadata/x.json",
            "s3://lake/warehouse/ns/t/metadataX/x.avro",
        ] {
            let mut r = good.clone();
            r.manifest.path = path.into();
            assert_eq!(check(&r), Some(Skip::Foreign), "{path}");
        }
        let mut r = good.clone();
        r.manifest.files = 2;
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good.clone();
        r.segment_ids.push('x');
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good.clone();
        r.segment_ids.clear();
        r.manifest.files = 0;
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good.clone();
        r.watermark.as_mut().expect("set").value = "6:AAAAAAAAAAAAAAAA".into();
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good.clone();
        r.watermark.as_mut().expect("set").property = "owner".into();
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good;
        r.watermark.as_mut().expect("set").after = Some(7);
        assert_eq!(check(&r), Some(Skip::Malformed));
    }
}
