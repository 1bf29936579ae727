//! An intent as it lies in the store: a small JSON document beside the fleet's segments that
//! holds one published batch's data files (or, as the releases before wrote it, names a manifest
//! holding them) and what committing it means (its segments' ids, the watermark it raises).
//! Parsing is pure and refuses whatever could make a carrier commit something the fleet did not
//! write: another table, another `url`, a data file outside the `url`, a manifest outside the
//! table's metadata, ids that do not add up, an oversized body. A refused intent is skipped,
//! never committed.
//!
//! Two formats: `thadam-intent/2` holds the data files themselves (iceberg's JSON of a data
//! file, as the REST catalog's scan planning carries it), so publishing is one PUT and carrying
//! one GET; `thadam-intent/1` names a manifest written in the table's metadata (two of each, and
//! the manifest's delete). A node writes /2 unless the files' JSON would be larger than
//! [`INLINE_MAX`] (a batch of hundreds of segments, very wide tables), and reads both: a fleet
//! upgraded node by node carries the intents its older nodes publish. An older node skips a /2
//! intent as malformed (it is never committed wrongly), and its publisher commits it itself after
//! its fallback. A format this release does not know (`thadam-intent/3` and on) is a newer
//! node's: skipped, remembered, never deleted.
//!
//! An intent is bound to its publisher: it names its segment log (`log`, the catalog id) and the
//! watermark it raises must be that log's; each segment id must be the id of its data file's key,
//! so a file cannot go in under another id. With the fleet key (`commit.intents_key`, see
//! `signing`) the body must also carry a tag of that key.

use std::sync::Arc;

use iceberg::spec::{DataContentType, DataFile, FieldSummary, TableMetadata};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::signing::IntentKey;
use crate::table::committed::{SegmentId, decode_ids, decode_mark, mark_log};
use crate::table::summary_keys::WATERMARK_PREFIX;

/// The format that names a manifest (the releases before wrote only this one); an intent of a
/// format other than it and [`FORMAT_INLINE`] is skipped.
pub(crate) const FORMAT: &str = "thadam-intent/1";
/// The format that holds the data files themselves.
pub(crate) const FORMAT_INLINE: &str = "thadam-intent/2";
/// What every format's name starts with: one this release does not know is a newer node's.
const FORMAT_FAMILY: &str = "thadam-intent/";

/// The largest body of data files a node puts in an intent; a larger batch is published as a
/// manifest and an intent naming it. Small enough that the intents a carrier remembers stay
/// small (see `SEEN_BYTES`): a steady fleet's intents hold one or two segments, ~1-5 KB each.
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// The largest intent read: 16 bytes per segment id, a few hundred for the rest, so a megabyte
/// holds a batch far larger than `commit.max_segments` allows.
pub(crate) const MAX_BYTES: u64 = 1 << 20;

/// One published batch (see the module docs of `intents`).
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The manifest (`thadam-intent/1`), or what its list entry would say of the data files
    /// held below (`thadam-intent/2`: an empty path, a length of 0).
    pub manifest: ManifestRef,
    /// The data files (`thadam-intent/2`), each as iceberg's JSON of a data file, in segment
    /// order: kept as the text that was read (decoded once, against the table, by
    /// [`decode_files`], and then dropped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<Box<RawValue>>,
    /// The segments' ids, concatenated as in `thadam.segment-ids`.
    pub segment_ids: String,
    /// The highest catalog seq among its segments.
    pub max_seq: u64,
    /// The watermark the publisher's own commit would have raised: always its own log's.
    #[serde(default)]
    pub watermark: Option<MarkRaise>,
    /// The publisher's segment log (its catalog id), when its segments have one (intents of the
    /// releases before lack it: their watermark's log stands for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    /// The lowest catalog seq among its segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_seq: Option<u64>,
    /// The fleet key's tag of the body before it (see `signing`); always the last member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
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
    /// Not an intent at all: not JSON, or no format of this family. Never deleted (it may be
    /// someone else's object).
    Junk,
    /// An intent of these formats whose parts do not add up.
    Malformed,
    /// For another table, another `url`, data files outside the `url`, or a manifest outside
    /// the table's metadata.
    Foreign,
    /// Not bound to its publisher: a watermark of another log than its own, or a segment id
    /// that is not the id of its file's key.
    Forged,
    /// No tag, or a wrong one, while the fleet has a key.
    Unsigned,
    /// A format of a newer release: left to the nodes that know it.
    NewerFormat,
}

impl Skip {
    /// The `reason` label of `thadam_iceberg_intents_skipped_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Skip::TooLarge => "too_large",
            Skip::Junk | Skip::Malformed => "malformed",
            Skip::Foreign => "foreign",
            Skip::Forged => "forged",
            Skip::Unsigned => "unsigned",
            Skip::NewerFormat => "newer_format",
        }
    }

    /// Whether an intent skipped for this reason is one of this release's formats that can never
    /// be carried, which any node may delete once it is old (see `Intents::list`). A newer
    /// format is another release's; an oversized body was never read.
    pub(crate) fn ages_out(self) -> bool {
        matches!(
            self,
            Skip::Malformed | Skip::Foreign | Skip::Forged | Skip::Unsigned
        )
    }
}

/// What a carrier checks an intent against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect<'a> {
    pub table_uuid: &'a str,
    pub url: &'a str,
    /// `<table location>/metadata`.
    pub metadata_root: &'a str,
    /// The fleet key, when the fleet has one: only intents tagged with it are taken.
    pub key: Option<&'a IntentKey>,
}

/// A checked intent and its decoded ids; the data files of a `thadam-intent/2` intent once
/// decoded against the table ([`decode_files`]).
#[derive(Debug, Clone)]
pub(crate) struct Intent {
    pub record: IntentRecord,
    pub ids: Vec<SegmentId>,
    pub files: Option<Arc<Vec<DataFile>>>,
}

impl IntentRecord {
    /// The body as published: tagged with `key` when the fleet has one (a record as this node
    /// builds it has no tag of its own yet).
    pub(crate) fn to_bytes_signed(&self, key: Option<&IntentKey>) -> Vec<u8> {
        // A struct of strings, numbers and JSON values always encodes.
        let body = serde_json::to_vec(self).unwrap_or_default();
        match key {
            Some(key) => key.sign(&body),
            None => body,
        }
    }

    /// The body, untagged.
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_signed(None)
    }

    /// The segment log it is bound to: the one it names, else (the releases before) its
    /// watermark's.
    pub(crate) fn log(&self) -> Option<&str> {
        self.log
            .as_deref()
            .or_else(|| self.watermark.as_ref().and_then(|m| mark_log(&m.property)))
    }

    /// Whether it holds its data files (`thadam-intent/2`) rather than naming a manifest.
    pub(crate) fn is_inline(&self) -> bool {
        self.format == FORMAT_INLINE
    }

    /// The manifest it names (`thadam-intent/1`); `None` for one that holds its files.
    pub(crate) fn manifest_path(&self) -> Option<&str> {
        (!self.is_inline()).then_some(self.manifest.path.as_str())
    }
}

/// The one field of a data file's JSON that [`parse`] checks.
#[derive(Deserialize)]
struct FilePath {
    file_path: String,
}

/// The one field read before the rest: which format the body is in.
#[derive(Deserialize)]
struct Head {
    format: String,
}

/// The object key of a data file at `path` in the bucket of `url` (`s3://bucket/prefix`): what
/// follows `s3://bucket/`, the key as it was recorded (see `io::keys::object_uri`).
pub(crate) fn file_key<'p>(path: &'p str, url: &str) -> Option<&'p str> {
    let bucket = url.strip_prefix("s3://")?.split('/').next()?;
    path.strip_prefix("s3://")?
        .strip_prefix(bucket)?
        .strip_prefix('/')
}

/// Why the data files of an intent could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undecoded {
    /// The table as held lacks the schema or the spec they were written with: a newer table
    /// than this node's view (decoded again at a later listing).
    NotYet,
    /// They are not data files of that schema and spec: the intent is skipped.
    Malformed,
}

/// Decodes the data files of a `thadam-intent/2` intent against the table's schema and spec it
/// names; checks they are data files and add up to its rows.
pub(crate) fn decode_files(
    record: &IntentRecord,
    metadata: &TableMetadata,
) -> Result<Vec<DataFile>, Undecoded> {
    let m = &record.manifest;
    let (Some(schema), Some(spec)) = (
        metadata.schema_by_id(m.schema_id),
        metadata.partition_spec_by_id(m.spec_id),
    ) else {
        return Err(Undecoded::NotYet);
    };
    let partition_type = spec
        .partition_type(schema)
        .map_err(|_| Undecoded::Malformed)?;
    let files = record
        .files
        .iter()
        .map(|json| {
            iceberg::spec::deserialize_data_file_from_json(
                json.get(),
                m.spec_id,
                &partition_type,
                schema,
            )
        })
        .collect::<iceberg::Result<Vec<DataFile>>>()
        .map_err(|_| Undecoded::Malformed)?;
    let rows: u64 = files.iter().map(|f| f.record_count()).sum();
    if rows != m.rows
        || files
            .iter()
            .any(|f| f.content_type() != DataContentType::Data)
    {
        return Err(Undecoded::Malformed);
    }
    Ok(files)
}

/// Whether `path` lies under `url` (`s3://bucket/prefix`), with no `..` on the way.
fn under(path: &str, url: &str) -> bool {
    path.strip_prefix(url)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|rest| !rest.is_empty() && !rest.split('/').any(|p| p == ".." || p == "."))
}

/// Parses and checks the body of an intent (see the module docs).
pub(crate) fn parse(bytes: &[u8], expect: Expect<'_>) -> Result<Intent, Skip> {
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Skip::TooLarge);
    }
    let Head { format } = serde_json::from_slice(bytes).map_err(|_| Skip::Junk)?;
    if format != FORMAT && format != FORMAT_INLINE {
        return Err(if format.starts_with(FORMAT_FAMILY) {
            Skip::NewerFormat
        } else {
            Skip::Junk
        });
    }
    if let Some(key) = expect.key
        && !key.verifies(bytes)
    {
        return Err(Skip::Unsigned);
    }
    let record: IntentRecord = serde_json::from_slice(bytes).map_err(|_| Skip::Malformed)?;
    if record.table_uuid != expect.table_uuid || record.url != expect.url {
        return Err(Skip::Foreign);
    }
    let ids = decode_ids(&record.segment_ids);
    if ids.is_empty()
        || ids.len() * 16 != record.segment_ids.len()
        || ids.len() != record.manifest.files as usize
        || record.min_seq.is_some_and(|min| min > record.max_seq)
    {
        return Err(Skip::Malformed);
    }
    if record.is_inline() {
        check_files(&record, &ids)?;
    } else {
        check_manifest(&record, expect)?;
    }
    if let Some(mark) = &record.watermark {
        let seq = decode_mark(&mark.value).map(|(seq, _)| seq);
        if !mark.property.starts_with(WATERMARK_PREFIX)
            || seq != Some(record.max_seq)
            || mark.after.is_some_and(|after| after >= record.max_seq)
        {
            return Err(Skip::Malformed);
        }
        // The watermark it raises is its own log's, never another's.
        if record.log.is_some() && mark_log(&mark.property) != record.log.as_deref() {
            return Err(Skip::Forged);
        }
    }
    Ok(Intent {
        record,
        ids,
        files: None,
    })
}

/// The data files of a `thadam-intent/2` intent: one per segment, each under the fleet's `url`,
/// each the file of the key its segment id was taken from.
fn check_files(record: &IntentRecord, ids: &[SegmentId]) -> Result<(), Skip> {
    if record.files.len() != ids.len()
        || !record.manifest.path.is_empty()
        || record.manifest.length != 0
    {
        return Err(Skip::Malformed);
    }
    for (file, id) in record.files.iter().zip(ids) {
        let Ok(FilePath { file_path }) = serde_json::from_str(file.get()) else {
            return Err(Skip::Malformed);
        };
        if !under(&file_path, &record.url) {
            return Err(Skip::Foreign);
        }
        if file_key(&file_path, &record.url).map(SegmentId::of) != Some(*id) {
            return Err(Skip::Forged);
        }
    }
    Ok(())
}

/// The manifest a `thadam-intent/1` intent names: in the table's metadata, holding no files of
/// its own in the body (its files are checked against the ids when it is read, `load_files`).
fn check_manifest(record: &IntentRecord, expect: Expect<'_>) -> Result<(), Skip> {
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
    if record.manifest.length <= 0 || !record.files.is_empty() {
        return Err(Skip::Malformed);
    }
    Ok(())
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
            key: None,
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
            files: Vec::new(),
            segment_ids: encode_ids(keys.iter().copied()),
            max_seq,
            watermark: Some(MarkRaise {
                property: format!("{WATERMARK_PREFIX}log-{lane}"),
                value: format!("{max_seq}:AAAAAAAAAAAAAAAA"),
                after,
            }),
            log: Some(format!("log-{lane}")),
            min_seq: Some(max_seq.saturating_sub(keys.len() as u64) + 1),
            sig: None,
        }
    }

    #[test]
    fn an_intent_round_trips_and_its_ids_decode() {
        let r = record("a", &["k1", "k2"], 7, Some(3));
        let intent = parse(&r.to_bytes(), expect()).expect("a good intent parses");
        assert_eq!(intent.record.to_bytes(), r.to_bytes());
        assert_eq!(intent.ids, vec![SegmentId::of("k1"), SegmentId::of("k2")]);
    }

    #[test]
    fn what_could_commit_the_wrong_thing_is_skipped() {
        let good = record("a", &["k1"], 7, None);
        let check = |r: &IntentRecord| parse(&r.to_bytes(), expect()).err();
        assert_eq!(parse(b"{not json", expect()).err(), Some(Skip::Junk));
        assert_eq!(
            parse(&vec![b' '; MAX_BYTES as usize + 1], expect()).err(),
            Some(Skip::TooLarge)
        );
        let mut r = good.clone();
        r.format = "thadam-intent/2".into();
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = good.clone();
        r.format = "thadam-intent/3".into();
        assert_eq!(check(&r), Some(Skip::NewerFormat), "a newer node's");
        let mut r = good.clone();
        r.format = "something/1".into();
        assert_eq!(check(&r), Some(Skip::Junk));
        // Bound to its publisher: the watermark it raises is its own log's.
        let mut r = good.clone();
        r.log = Some("log-b".into());
        assert_eq!(check(&r), Some(Skip::Forged));
        let mut r = good.clone();
        r.min_seq = Some(8);
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

    fn raw(json: serde_json::Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&json).expect("JSON")
    }

    /// `record` as a `thadam-intent/2` intent whose data files lie at `paths`.
    fn inline(keys: &[&str], paths: &[&str]) -> IntentRecord {
        let mut r = record("a", keys, 7, None);
        r.format = FORMAT_INLINE.to_string();
        r.manifest.path.clear();
        r.manifest.length = 0;
        r.files = paths
            .iter()
            .map(|p| raw(serde_json::json!({ "file_path": p, "content": 0 })))
            .collect();
        r
    }

    #[test]
    fn an_intent_holding_its_files_names_only_files_under_the_url() {
        let check = |r: &IntentRecord| parse(&r.to_bytes(), expect()).err();
        let good = inline(
            &["fleet/d/1.parquet", "fleet/2.parquet"],
            &["s3://lake/fleet/d/1.parquet", "s3://lake/fleet/2.parquet"],
        );
        assert_eq!(check(&good), None);
        // Each id is its file's key's: not another file's, not a made-up one.
        let swapped = inline(
            &["fleet/2.parquet", "fleet/d/1.parquet"],
            &["s3://lake/fleet/d/1.parquet", "s3://lake/fleet/2.parquet"],
        );
        assert_eq!(check(&swapped), Some(Skip::Forged));
        let renamed = inline(&["fleet/new-id"], &["s3://lake/fleet/d/1.parquet"]);
        assert_eq!(check(&renamed), Some(Skip::Forged));
        assert!(
            parse(&good.to_bytes(), expect())
                .expect("parses")
                .record
                .is_inline()
        );
        for path in [
            "s3://lake/elsewhere/1.parquet",
            "s3://lake/fleetX/1.parquet",
            "s3://lake/fleet/../other/1.parquet",
            "s3://lake/fleet/",
            "s3://lake/fleet",
        ] {
            let r = inline(&["k1"], &[path]);
            assert_eq!(check(&r), Some(Skip::Foreign), "{path}");
        }
        // The files add up to the ids; no manifest besides them; each names its path.
        assert_eq!(
            check(&inline(&["k1", "k2"], &["s3://lake/fleet/1.parquet"])),
            Some(Skip::Malformed)
        );
        let mut r = inline(&["fleet/1.parquet"], &["s3://lake/fleet/1.parquet"]);
        r.manifest.path = format!("{ROOT}/x-m0.avro");
        r.manifest.length = 10;
        assert_eq!(check(&r), Some(Skip::Malformed));
        let mut r = inline(&["fleet/1.parquet"], &["s3://lake/fleet/1.parquet"]);
        r.files = vec![raw(
            serde_json::json!({ "path": "s3://lake/fleet/1.parquet" }),
        )];
        assert_eq!(check(&r), Some(Skip::Malformed));
        // A manifest-naming intent holds no files.
        let mut r = record("a", &["k1"], 7, None);
        r.files = vec![raw(
            serde_json::json!({ "file_path": "s3://lake/fleet/1.parquet" }),
        )];
        assert_eq!(check(&r), Some(Skip::Malformed));
    }

    /// A v2 table of (id long, name string) partitioned by identity(id), at the test ROOT.
    pub(crate) fn partitioned() -> TableMetadata {
        use iceberg::spec::{
            NestedField, PrimitiveType, Schema, SortOrder, Transform, Type, UnboundPartitionSpec,
        };
        let schema = Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "name", Type::Primitive(PrimitiveType::String)).into(),
            ])
            .build()
            .expect("schema");
        let spec = UnboundPartitionSpec::builder()
            .add_partition_field(1, "id", Transform::Identity)
            .expect("field")
            .build();
        iceberg::spec::TableMetadataBuilder::new(
            schema,
            spec,
            SortOrder::unsorted_order(),
            "s3://lake/warehouse/ns/t".to_string(),
            iceberg::spec::FormatVersion::V2,
            Default::default(),
        )
        .expect("builder")
        .build()
        .expect("metadata")
        .metadata
    }

    #[test]
    fn an_intents_data_files_decode_as_they_were_written() {
        use iceberg::spec::{
            DataFileBuilder, DataFileFormat, Datum, Literal, Struct, serialize_data_file_to_json,
        };
        let metadata = partitioned();
        let spec = metadata.default_partition_spec();
        let file = DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("s3://lake/fleet/d/1.parquet".to_string())
            .file_format(DataFileFormat::Parquet)
            .partition_spec_id(spec.spec_id())
            .partition(Struct::from_iter([Some(Literal::long(7))]))
            .record_count(5)
            .file_size_in_bytes(1_234)
            .column_sizes([(1, 40), (2, 60)].into())
            .value_counts([(1, 5), (2, 5)].into())
            .null_value_counts([(1, 0), (2, 1)].into())
            .lower_bounds([(1, Datum::long(7)), (2, Datum::string("a"))].into())
            .upper_bounds([(1, Datum::long(7)), (2, Datum::string("zz"))].into())
            .split_offsets(Some(vec![4]))
            .build()
            .expect("data file");
        let json = serialize_data_file_to_json(
            file.clone(),
            metadata.default_partition_type(),
            metadata.format_version(),
        )
        .expect("json");
        let mut r = record("a", &["fleet/d/1.parquet"], 7, None);
        r.format = FORMAT_INLINE.to_string();
        r.manifest.path.clear();
        r.manifest.length = 0;
        r.manifest.rows = 5;
        r.manifest.spec_id = spec.spec_id();
        r.manifest.schema_id = metadata.current_schema_id();
        r.files = vec![RawValue::from_string(json).expect("JSON")];
        let intent = parse(&r.to_bytes(), expect()).expect("parses");
        assert_eq!(decode_files(&intent.record, &metadata), Ok(vec![file]));
        // Rows that do not add up, or a schema the table does not hold (yet).
        let mut wrong = intent.record.clone();
        wrong.manifest.rows = 6;
        assert_eq!(decode_files(&wrong, &metadata), Err(Undecoded::Malformed));
        let mut newer = intent.record.clone();
        newer.manifest.schema_id = 9;
        assert_eq!(decode_files(&newer, &metadata), Err(Undecoded::NotYet));
        let mut broken = intent.record;
        broken.files = vec![raw(
            serde_json::json!({ "file_path": "s3://lake/fleet/d/1.parquet" }),
        )];
        assert_eq!(decode_files(&broken, &metadata), Err(Undecoded::Malformed));
    }
}
