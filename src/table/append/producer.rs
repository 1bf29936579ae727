//! The append's snapshot, built by us rather than by iceberg-rust's fast append (which has no
//! merge and whose producer is crate-private): the new manifest, the merge of older manifests
//! the table's properties ask for (see [`super::merge`]), a deflate-compressed manifest list,
//! the snapshot with the library's summary totals, and the updates and requirements of one
//! commit, which the caller sends itself.
//!
//! Memory: the batch's data files (twice while the new manifest is written, once more when it is
//! merged); for each merged bin, the input manifest being read (bytes and entries) and the
//! entries of the merged manifest (the library's `ManifestWriter` holds them all until it writes
//! the file; a bin is bounded by `commit.manifest.target-size-bytes` plus the new manifest);
//! the current manifest list's entries and the new list's bytes.

use std::collections::{HashMap, HashSet};

use futures::StreamExt;

use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestStatus, Operation, Snapshot, SnapshotReference, SnapshotRetention,
    SnapshotSummaryCollector, Summary, TableMetadata, TableProperties,
};
use iceberg::table::Table;
use iceberg::{Error as IcebergError, ErrorKind, TableRequirement, TableUpdate};

use super::attempts::{AppendAttempts, CachedMerge, NewFilesKey};
use super::manifest_list::{LastList, MemoryFile, deflate_container};
use super::merge::{self, Candidate, MergePolicy, Planned};
use crate::error::Result;
use crate::runtime::warn_once;
use crate::table::committed::encode_ids;
use crate::table::data_files::{
    ReadySegment, data_file, manifest_writer, metadata_root, validate_files,
};
use crate::table::fleet::intents::Carried;
use crate::table::summary_keys::{
    CARRIED_INTENTS, CARRIED_LANES, CARRIED_MARKS, CATALOG_SEQ, INTENTS_COPIED, SEGMENT_COUNT,
    SEGMENT_IDS, WATERMARK_KEY, WRITER,
};

/// The updates and requirements of one append commit.
#[derive(Debug, Clone)]
pub struct AppendCommit {
    pub updates: Vec<TableUpdate>,
    pub requirements: Vec<TableRequirement>,
    /// The files of this batch the commit references (manifests and its manifest list).
    pub files: Vec<String>,
    /// Its manifest list (never reused by another attempt).
    pub manifest_list: String,
}

/// An append whose inputs are checked (data files described, summary keys chosen) and whose
/// files are not written yet: [`PreparedAppend::build`] writes them.
#[derive(Debug)]
pub struct PreparedAppend<'a> {
    table: &'a Table,
    files: Vec<DataFile>,
    properties: HashMap<String, String>,
    watermark: Option<(String, String)>,
    expire: Vec<i64>,
    /// Other nodes' (and this node's published) manifests the snapshot carries.
    carried: Option<&'a Carried>,
    /// The snapshot's timestamp (ms since the epoch); `None`: now, when it is built.
    timestamp_ms: Option<i64>,
}

/// Prepares the append of `batch` (already filtered against the committed set) in one
/// snapshot: its data files, the registrar's summary keys, the batch's catalog watermark
/// (`(property, value)`, from [`crate::table::CommittedSet::watermark_update`]) set in the same
/// commit, and `expire`, snapshot ids removed in the same commit. No I/O.
///
/// There is no duplicate check over the table's manifests: the committed set answers that
/// question from metadata alone.
pub fn prepare_append<'a>(
    table: &'a Table,
    bucket: &str,
    writer: &str,
    batch: &[ReadySegment],
    watermark: Option<&(String, String)>,
    expire: &[i64],
) -> Result<PreparedAppend<'a>> {
    let files = batch
        .iter()
        .map(|r| data_file(table, bucket, r))
        .collect::<Result<Vec<_>>>()?;
    let mut properties = HashMap::new();
    properties.insert(
        SEGMENT_IDS.to_string(),
        encode_ids(batch.iter().map(|r| r.segment.object_key.as_str())),
    );
    properties.insert(SEGMENT_COUNT.to_string(), batch.len().to_string());
    if let Some(max_seq) = batch.iter().map(|r| r.segment.seq).max() {
        properties.insert(CATALOG_SEQ.to_string(), max_seq.to_string());
    }
    properties.insert(WRITER.to_string(), writer.to_string());
    if let Some((property, _)) = watermark {
        // Which watermark covers this snapshot's segments: snapshot retention expires it only
        // while that watermark's seq is at or past its catalog seq (see `table::retention`).
        properties.insert(WATERMARK_KEY.to_string(), property.clone());
    }
    Ok(PreparedAppend {
        table,
        files,
        properties,
        watermark: watermark.cloned(),
        expire: expire.to_vec(),
        carried: None,
        timestamp_ms: None,
    })
}

impl<'a> PreparedAppend<'a> {
    /// Adds `key` = `value` to the snapshot summary (a registrar's own key; the computed
    /// metrics win over it, as over every summary key).
    pub(crate) fn with_summary(mut self, key: &str, value: String) -> Self {
        self.properties.insert(key.to_string(), value);
        self
    }

    /// Stamps the snapshot with `timestamp_ms` (this node's clock) instead of now.
    pub(crate) fn at(mut self, timestamp_ms: i64) -> Self {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }

    /// Carries `carried` in the snapshot: the data files of the intents it carries go into its
    /// own new manifest (ADDED by this snapshot, like its own new files), their segment ids in the
    /// summary (after the batch's own), their watermarks set.
    pub(crate) fn with_carried(mut self, carried: &'a Carried) -> Self {
        if carried.consumes() {
            // Names no intent's manifest: see `INTENTS_COPIED`.
            self.properties
                .insert(INTENTS_COPIED.to_string(), "1".to_string());
        }
        if carried.is_empty() {
            return self;
        }
        let ids = self.properties.entry(SEGMENT_IDS.to_string()).or_default();
        ids.push_str(&carried.encoded_ids);
        let count = self.files.len() + carried.ids.len();
        self.files.extend(carried.files.iter().cloned());
        self.properties
            .insert(SEGMENT_COUNT.to_string(), count.to_string());
        let others = carried.others();
        if others > 0 {
            self.properties
                .insert(CARRIED_INTENTS.to_string(), others.to_string());
        }
        if !carried.guards.is_empty() {
            self.properties
                .insert(CARRIED_MARKS.to_string(), carried.guards.encode());
        }
        if !carried.lanes.is_empty() {
            let lanes: Vec<&str> = carried.lanes.iter().map(String::as_str).collect();
            self.properties
                .insert(CARRIED_LANES.to_string(), lanes.join(","));
        }
        self.carried = Some(carried);
        self
    }

    /// Writes what the commit needs and `attempts` does not hold yet (the manifest of the new
    /// files, the merges of the batch's first attempt, always a manifest list), and returns the
    /// commit: the watermark property, the snapshot and the `main` ref, then the expired
    /// snapshots; asserting the table's UUID and the snapshot it was built on. Failures here
    /// happen before any request to the catalog (see [`super::retry::classify_build`]).
    pub async fn build(self, attempts: &mut AppendAttempts) -> iceberg::Result<AppendCommit> {
        let table = self.table;
        let metadata = table.metadata();
        let nothing = Carried::default();
        let carried = self.carried.unwrap_or(&nothing);
        if self.files.is_empty() && carried.is_empty() {
            return Err(IcebergError::new(
                ErrorKind::PreconditionFailed,
                "an append needs at least one data file",
            ));
        }
        validate_files(metadata, &self.files)?;
        let summary = summary(metadata, &self.files, self.properties)?;
        let AttemptManifests {
            snapshot_id,
            manifests,
            mut files,
        } = attempt_manifests(table, &self.files, attempts).await?;
        let (list_path, next_row_id) =
            write_manifest_list(table, attempts, snapshot_id, manifests).await?;
        files.push(list_path.clone());
        let snapshot = new_snapshot(
            metadata,
            &list_path,
            snapshot_id,
            summary,
            self.timestamp_ms,
            next_row_id,
        );
        let updates = commit_updates(carried, self.watermark, snapshot, snapshot_id, self.expire);
        let requirements = commit_requirements(metadata);
        Ok(AppendCommit {
            updates,
            requirements,
            files,
            manifest_list: list_path,
        })
    }

    /// Writes the manifest of the new files and, on the batch's first attempt, the merges the
    /// table's properties ask for, into `attempts`, without a manifest list: a committer that
    /// must load the table before it commits (another writer commits to it) does this first,
    /// on the version it holds, so that the merge is outside the window between the load and
    /// the commit; the build on the loaded version then reuses both.
    pub(crate) async fn write_ahead(&self, attempts: &mut AppendAttempts) -> iceberg::Result<()> {
        if self.files.is_empty() {
            return Ok(());
        }
        validate_files(self.table.metadata(), &self.files)?;
        // Without the intents: which of them the commit carries is decided on the loaded table.
        attempt_manifests(self.table, &self.files, attempts)
            .await
            .map(|_| ())
    }
}

/// Writes the attempt's manifest list (`manifests`, deflate-compressed, at the attempt's own
/// path; its container kept as the last list written) and counts the attempt as built; returns
/// its path and, for a v3 table, the row id after the rows it assigned.
async fn write_manifest_list(
    table: &Table,
    attempts: &mut AppendAttempts,
    snapshot_id: i64,
    manifests: Vec<ManifestFile>,
) -> iceberg::Result<(String, Option<u64>)> {
    let metadata = table.metadata();
    let root = metadata_root(metadata);
    let list_path = attempts.manifest_list_path(&root, snapshot_id);
    let next_seq = metadata.next_sequence_number();
    let first_row_id = metadata.next_row_id();
    let parent = metadata.current_snapshot_id();
    let memory = MemoryFile::default();
    let out = Box::new(memory.clone());
    let mut list = match metadata.format_version() {
        FormatVersion::V1 => ManifestListWriter::v1(out, snapshot_id, parent),
        FormatVersion::V2 => ManifestListWriter::v2(out, snapshot_id, parent, next_seq),
        FormatVersion::V3 => {
            ManifestListWriter::v3(out, snapshot_id, parent, next_seq, Some(first_row_id))
        }
    };
    list.add_manifests(manifests.into_iter())?;
    let next_row_id = list.next_row_id();
    list.close().await?;
    let container = memory.bytes();
    let compressed = deflate_container(&container)?;
    attempts.wrote(&list_path);
    table
        .file_io()
        .new_output(&list_path)?
        .write(compressed.into())
        .await?;
    attempts.last_list.wrote(&list_path, container);
    attempts.built();
    Ok((list_path, next_row_id))
}

/// The attempt's snapshot on the current one, with its manifest list at `list_path`, `summary`,
/// stamped `timestamp_ms` (or now); with the row range its list assigned (v3: `next_row_id`).
fn new_snapshot(
    metadata: &TableMetadata,
    list_path: &str,
    snapshot_id: i64,
    summary: Summary,
    timestamp_ms: Option<i64>,
    next_row_id: Option<u64>,
) -> Snapshot {
    let first_row_id = metadata.next_row_id();
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path.to_string())
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(metadata.current_snapshot_id())
        .with_sequence_number(metadata.next_sequence_number())
        .with_summary(summary)
        .with_schema_id(metadata.current_schema_id())
        .with_timestamp_ms(timestamp_ms.unwrap_or_else(|| chrono::Utc::now().timestamp_millis()));
    match next_row_id {
        Some(next) => snapshot
            .with_row_range(first_row_id, next.saturating_sub(first_row_id))
            .build(),
        None => snapshot.build(),
    }
}

/// The commit's updates, in order: the watermarks (the carried intents', then the batch's
/// `watermark`) if any, the snapshot, the `main` ref to it, and the removal of `expire` if any.
fn commit_updates(
    carried: &Carried,
    watermark: Option<(String, String)>,
    snapshot: Snapshot,
    snapshot_id: i64,
    expire: Vec<i64>,
) -> Vec<TableUpdate> {
    let mut updates = Vec::new();
    let mut marks: HashMap<String, String> = carried.marks.iter().cloned().collect();
    if let Some((property, value)) = watermark {
        marks.insert(property, value);
    }
    if !marks.is_empty() {
        updates.push(TableUpdate::SetProperties { updates: marks });
    }
    updates.push(TableUpdate::AddSnapshot { snapshot });
    updates.push(TableUpdate::SetSnapshotRef {
        ref_name: MAIN_BRANCH.to_string(),
        reference: SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
    });
    if !expire.is_empty() {
        updates.push(TableUpdate::RemoveSnapshots {
            snapshot_ids: expire,
        });
    }
    updates
}

/// The commit's requirements: the table is still the one loaded (its UUID), and `main` still
/// points at the snapshot the attempt was built on.
fn commit_requirements(metadata: &TableMetadata) -> Vec<TableRequirement> {
    vec![
        TableRequirement::UuidMatch {
            uuid: metadata.uuid(),
        },
        TableRequirement::RefSnapshotIdMatch {
            r#ref: MAIN_BRANCH.to_string(),
            snapshot_id: metadata.current_snapshot_id(),
        },
    ]
}

/// The data and delete manifests of an attempt's manifest list, in order, and which of them
/// this batch wrote.
struct AttemptManifests {
    snapshot_id: i64,
    manifests: Vec<ManifestFile>,
    files: Vec<String>,
}

/// The manifests of an attempt (see [`AppendAttempts`]): the manifest of `added` (the batch's
/// new files and those of the fleet's intents it carries; reused when the batch wrote it
/// already), then the current snapshot's manifests with the batch's cached merges in place of
/// their inputs, and on the batch's first attempt the merges the policy asks for. The new
/// manifest is never part of a merge, so a merge stays valid when the batch or what it carries
/// changes; but it counts towards the policy's minimum, as Java counts a snapshot's appended
/// manifests.
async fn attempt_manifests(
    table: &Table,
    added: &[DataFile],
    attempts: &mut AppendAttempts,
) -> iceberg::Result<AttemptManifests> {
    let metadata = table.metadata();
    let snapshot_id = attempts.snapshot_id(metadata);
    let schema_id = metadata.current_schema_id();
    let new_manifest = new_manifest(table, added, attempts, snapshot_id).await?;
    let current = current_manifests(table, &attempts.last_list).await?;
    let mut files: Vec<String> = new_manifest
        .iter()
        .map(|m| m.manifest_path.clone())
        .collect();

    let (data, deletes): (Vec<ManifestFile>, Vec<ManifestFile>) = current
        .into_iter()
        .partition(|m| m.content == ManifestContentType::Data);

    // Asked before the cache is taken apart: a batch whose write-ahead merged already reuses
    // that merge and plans no other (a second plan could merge the first merge away, leaving
    // it written, sent and referenced by nothing: an orphan).
    let may_merge = attempts.may_merge();
    let valid = valid_merges(attempts, &data, schema_id);
    let (candidates, new) = merges_in_place(new_manifest, data, &valid);
    files.extend(valid.iter().map(|v| v.manifest.manifest_path.clone()));
    attempts.merges = valid;

    let mut manifests = Vec::with_capacity(candidates.len() + deletes.len());
    if may_merge {
        merge_planned(
            table,
            attempts,
            snapshot_id,
            &candidates,
            new,
            &mut manifests,
            &mut files,
        )
        .await?;
    } else {
        manifests = candidates;
    }
    // Delete manifests (other writers' row deletes) are never merged, only carried.
    manifests.extend(deletes);
    Ok(AttemptManifests {
        snapshot_id,
        manifests,
        files,
    })
}

/// The manifest of `added`, written with `snapshot_id`: the batch's cached one while it was
/// written for the same files, schema and spec; else a new one (the cached one retired). `None`
/// for a commit that only carries intents.
async fn new_manifest(
    table: &Table,
    added: &[DataFile],
    attempts: &mut AppendAttempts,
    snapshot_id: i64,
) -> iceberg::Result<Option<ManifestFile>> {
    let metadata = table.metadata();
    let root = metadata_root(metadata);
    let key = NewFilesKey {
        paths: added.iter().map(|f| f.file_path().to_string()).collect(),
        schema_id: metadata.current_schema_id(),
        spec_id: metadata.default_partition_spec_id(),
    };
    let new_manifest = match &attempts.new_manifest {
        // A commit that only carries intents writes no manifest of its own.
        _ if added.is_empty() => {
            if let Some((_, old)) = attempts.new_manifest.take() {
                attempts.retire(&old.manifest_path);
            }
            None
        }
        Some((k, m)) if *k == key => Some(m.clone()),
        _ => {
            if let Some((_, old)) = attempts.new_manifest.take() {
                attempts.retire(&old.manifest_path);
            }
            // The new manifest is written first, as Java does: its length is its packing weight.
            let path = attempts.manifest_path(&root);
            let mut writer = manifest_writer(table, &path, Some(snapshot_id), None)?;
            for file in added.iter().cloned() {
                // A negative sequence number leaves it to be inherited from the manifest list.
                writer.add_file(file, -1)?;
            }
            attempts.wrote(&path);
            let m = writer.write_manifest_file().await?;
            attempts.new_manifest = Some((key, m.clone()));
            Some(m)
        }
    };
    Ok(new_manifest)
}

/// Takes the batch's cached merges out of `attempts`: those written under `schema_id` whose
/// inputs `data` (the current data manifests) still lists all stand in for them; the others are
/// stale (another writer rewrote an input: a compaction, a delete) and retired.
fn valid_merges(
    attempts: &mut AppendAttempts,
    data: &[ManifestFile],
    schema_id: i32,
) -> Vec<CachedMerge> {
    let listed: HashSet<&str> = data.iter().map(|m| m.manifest_path.as_str()).collect();
    let mut valid: Vec<CachedMerge> = Vec::new();
    for merge in std::mem::take(&mut attempts.merges) {
        if merge.schema_id == schema_id && merge.inputs.iter().all(|p| listed.contains(p.as_str()))
        {
            valid.push(merge);
        } else {
            attempts.retire(&merge.manifest.manifest_path);
        }
    }
    valid
}

/// The merge candidates, in order: the new manifest first (the newest, as Java lists a
/// snapshot's appended manifests), then the current data manifests with each `valid` merge where
/// its newest input was and its other inputs left out; and how many of them are new (0 or 1).
fn merges_in_place(
    new_manifest: Option<ManifestFile>,
    data: Vec<ManifestFile>,
    valid: &[CachedMerge],
) -> (Vec<ManifestFile>, usize) {
    let mut candidates: Vec<ManifestFile> = new_manifest.into_iter().collect();
    let new = candidates.len();
    candidates.reserve(data.len());
    let mut placed = vec![false; valid.len()];
    for m in data {
        match valid
            .iter()
            .position(|v| v.inputs.contains(&m.manifest_path))
        {
            // A merged manifest goes where its newest input was.
            Some(i) if !placed[i] => {
                placed[i] = true;
                candidates.push(valid[i].manifest.clone());
            }
            Some(_) => {}
            None => candidates.push(m),
        }
    }
    (candidates, new)
}

/// The merges the table's policy asks for, on the batch's first attempt: pushes `candidates`
/// (the first `new` of them the batch's new manifest) onto `manifests` in the plan's order, each
/// bin of at least two older manifests merged into one written with `snapshot_id` (its path
/// pushed onto `files`, the merge cached in `attempts` for the later attempts).
async fn merge_planned(
    table: &Table,
    attempts: &mut AppendAttempts,
    snapshot_id: i64,
    candidates: &[ManifestFile],
    new: usize,
    manifests: &mut Vec<ManifestFile>,
    files: &mut Vec<String>,
) -> iceberg::Result<()> {
    let metadata = table.metadata();
    let root = metadata_root(metadata);
    let schema_id = metadata.current_schema_id();
    for planned in merge_plan(table, candidates, new) {
        match planned {
            Planned::Keep(i) => manifests.push(candidates[i].clone()),
            Planned::Merge { spec_id, members } => {
                // The new manifests stay out of the merge (see `attempt_manifests`).
                let (fresh, inputs): (Vec<usize>, Vec<usize>) =
                    members.into_iter().partition(|&i| i < new);
                manifests.extend(fresh.iter().map(|&i| candidates[i].clone()));
                if inputs.len() < 2 {
                    manifests.extend(inputs.iter().map(|&i| candidates[i].clone()));
                    continue;
                }
                let path = attempts.manifest_path(&root);
                attempts.wrote(&path);
                let merged =
                    merge_bin(table, &path, snapshot_id, spec_id, candidates, &inputs).await?;
                attempts.merges.push(CachedMerge {
                    inputs: inputs
                        .iter()
                        .map(|&i| candidates[i].manifest_path.clone())
                        .collect(),
                    schema_id,
                    manifest: merged.clone(),
                });
                files.push(path);
                manifests.push(merged);
            }
        }
    }
    Ok(())
}

/// The table's merge policy's plan over `candidates` (the first `new` of them new), each
/// weighed by its length and entries, and mergeable where this client can rewrite it.
fn merge_plan(table: &Table, candidates: &[ManifestFile], new: usize) -> Vec<Planned> {
    let metadata = table.metadata();
    merge::plan(
        &merge_policy(table),
        &candidates
            .iter()
            .map(|m| Candidate {
                spec_id: m.partition_spec_id,
                length: u64::try_from(m.manifest_length).unwrap_or(0),
                entries: u64::from(m.added_files_count.unwrap_or(0))
                    + u64::from(m.existing_files_count.unwrap_or(0)),
                mergeable: can_rewrite(metadata, m),
            })
            .collect::<Vec<_>>(),
        new,
    )
}

/// The current snapshot's manifests that hold files (manifests without files are left behind,
/// as the library's fast append does): from memory where this node wrote that snapshot's list
/// last (see [`LastList`]), else read from the store.
async fn current_manifests(table: &Table, last: &LastList) -> iceberg::Result<Vec<ManifestFile>> {
    let metadata = table.metadata();
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(Vec::new());
    };
    let held = match snapshot.encryption_key_id() {
        None => last.manifests(snapshot.manifest_list(), metadata.format_version()),
        Some(_) => None,
    };
    let entries = match held {
        Some(entries) => entries,
        None => table
            .manifest_list_reader(snapshot)
            .load()
            .await?
            .consume_entries()
            .into_iter()
            .collect(),
    };
    Ok(entries
        .into_iter()
        .filter(|m| m.has_added_files() || m.has_existing_files() || m.has_deleted_files())
        .collect())
}

/// Whether this client can rewrite manifest `m` into a merged one: its spec is known and binds
/// to the current schema. (A v3 table is never merged: see [`merge_policy`].)
fn can_rewrite(metadata: &TableMetadata, m: &ManifestFile) -> bool {
    metadata
        .partition_spec_by_id(m.partition_spec_id)
        .is_some_and(|spec| spec.partition_type(metadata.current_schema()).is_ok())
}

/// Rewrites the manifests `members` of `candidates` (older manifests, never the batch's own) into
/// one manifest written with this snapshot's id: every live entry becomes EXISTING with its
/// original snapshot id, data sequence number and file sequence number; DELETED entries of older
/// snapshots are dropped (as Java does: only deletes of the new snapshot would be kept, and an
/// append has none).
async fn merge_bin(
    table: &Table,
    path: &str,
    snapshot_id: i64,
    spec_id: i32,
    candidates: &[ManifestFile],
    members: &[usize],
) -> iceberg::Result<ManifestFile> {
    let metadata = table.metadata();
    let spec = metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
        IcebergError::new(
            ErrorKind::DataInvalid,
            format!("a manifest names partition spec {spec_id}, which the table does not have"),
        )
    })?;
    let mut writer = manifest_writer(table, path, Some(snapshot_id), Some(spec))?;
    // Inputs are read MERGE_READS at a time, in order (a bin of many small manifests, another
    // writer's one per commit, would otherwise cost one round trip each, back to back); their
    // entries inherit the snapshot id and sequence numbers the manifest list gave them.
    let reads: Vec<_> = members
        .iter()
        .map(|&i| {
            let manifest = &candidates[i];
            async move {
                manifest
                    .load_manifest(table.file_io())
                    .await
                    .map(|m| (manifest, m))
            }
        })
        .collect();
    let mut loads = futures::stream::iter(reads).buffered(MERGE_READS);
    while let Some(loaded) = loads.next().await {
        let (manifest, loaded) = loaded?;
        let (entries, _) = loaded.into_parts();
        for entry in entries {
            if entry.status() == ManifestStatus::Deleted {
                continue;
            }
            let (Some(entry_snapshot), Some(seq), Some(file_seq)) = (
                entry.snapshot_id,
                entry.sequence_number,
                entry.file_sequence_number,
            ) else {
                return Err(IcebergError::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "manifest {} has a live entry without a snapshot id or sequence numbers \
                         ({}); it cannot be merged",
                        manifest.manifest_path,
                        entry.file_path()
                    ),
                ));
            };
            let file = std::sync::Arc::unwrap_or_clone(entry).data_file;
            writer.add_existing_file(file, entry_snapshot, seq, Some(file_seq))?;
        }
    }
    writer.write_manifest_file().await
}

/// How many input manifests of a merge are read at once: the writer holds the merged entries
/// anyway (bounded by `merge::MAX_MERGED_ENTRIES`), so this adds at most a few small manifests
/// in memory, and takes a bin of a hundred one-file manifests from a hundred round trips to a
/// dozen.
const MERGE_READS: usize = 8;

/// The table's merge policy; unreadable values are warned about once per table and value.
fn merge_policy(table: &Table) -> MergePolicy {
    let metadata = table.metadata();
    let (mut policy, unreadable) = merge::policy_from_properties(metadata.properties());
    for u in unreadable {
        let id = format!("{}\u{0}{}\u{0}{}", table.identifier(), u.key, u.value);
        if warn_once::first_time("unreadable table property", id) {
            tracing::warn!(
                table = %table.identifier(),
                property = u.key,
                value = %u.value,
                default = %u.default,
                "table property cannot be read; using its default (set it to a valid value)"
            );
        }
    }
    // v3: a merged manifest would be given a new first-row-id and renumber the rows of the
    // files it carries; the library cannot keep each file's own first-row-id. Fast append.
    if metadata.format_version() == FormatVersion::V3 {
        policy.enabled = false;
    }
    policy
}

/// The snapshot summary: the registrar's keys, the added-* metrics of the files, and the
/// totals (previous total + added), computed as the library's (crate-private)
/// `update_snapshot_summaries` does for an append. Merging moves files between manifests and
/// adds none, so it changes nothing here.
fn summary(
    metadata: &TableMetadata,
    files: &[DataFile],
    properties: HashMap<String, String>,
) -> iceberg::Result<Summary> {
    let mut collector = SnapshotSummaryCollector::default();
    let limit = metadata
        .properties()
        .get(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT);
    collector.set_partition_summary_limit(limit);
    for file in files {
        collector.add_file(
            file,
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    // The registrar's keys first, then the computed metrics over them (as Java and the library
    // do: a colliding key cannot corrupt the metrics).
    let mut additional = properties;
    additional.extend(collector.build());
    let previous = metadata.current_snapshot().map(|s| s.summary());
    update_totals(&mut additional, previous);
    Ok(Summary {
        operation: Operation::Append,
        additional_properties: additional,
    })
}

/// total-X = previous total-X + added-X - removed-X, for the six totals. As the library: with
/// no previous snapshot the previous total is 0; a previous snapshot without the total, or an
/// unparsable number, leaves that total out (it is unknown).
pub(crate) fn update_totals(summary: &mut HashMap<String, String>, previous: Option<&Summary>) {
    const TOTALS: [(&str, &str, &str); 6] = [
        ("total-data-files", "added-data-files", "deleted-data-files"),
        (
            "total-delete-files",
            "added-delete-files",
            "removed-delete-files",
        ),
        ("total-records", "added-records", "deleted-records"),
        ("total-files-size", "added-files-size", "removed-files-size"),
        (
            "total-position-deletes",
            "added-position-deletes",
            "removed-position-deletes",
        ),
        (
            "total-equality-deletes",
            "added-equality-deletes",
            "removed-equality-deletes",
        ),
    ];
    for (total, added, removed) in TOTALS {
        let previous_total = match previous {
            None => Some(0),
            Some(p) => p
                .additional_properties
                .get(total)
                .and_then(|v| v.parse::<u64>().ok()),
        };
        let delta = |key: &str| match summary.get(key) {
            None => Some(0u64),
            Some(v) => v.parse::<u64>().ok(),
        };
        if let (Some(prev), Some(add), Some(rem)) = (previous_total, delta(added), delta(removed)) {
            let value = prev.saturating_add(add).saturating_sub(rem);
            summary.insert(total.to_string(), value.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn totals_are_the_previous_total_plus_what_was_added() {
        let previous = Summary {
            operation: Operation::Append,
            additional_properties: map(&[
                ("total-data-files", "10"),
                ("total-records", "1000"),
                ("total-files-size", "5000"),
                ("total-delete-files", "2"),
                ("total-position-deletes", "7"),
                ("total-equality-deletes", "0"),
            ]),
        };
        let mut s = map(&[
            ("added-data-files", "3"),
            ("added-records", "30"),
            ("added-files-size", "300"),
        ]);
        update_totals(&mut s, Some(&previous));
        assert_eq!(s["total-data-files"], "13");
        assert_eq!(s["total-records"], "1030");
        assert_eq!(s["total-files-size"], "5300");
        assert_eq!(s["total-delete-files"], "2");
        assert_eq!(s["total-position-deletes"], "7");
        assert_eq!(s["total-equality-deletes"], "0");
    }

    #[test]
    fn the_first_snapshot_starts_from_zero_and_an_unknown_total_stays_unknown() {
        let mut s = map(&[("added-data-files", "1"), ("added-records", "5")]);
        update_totals(&mut s, None);
        assert_eq!(s["total-data-files"], "1");
        assert_eq!(s["total-records"], "5");
        assert_eq!(s["total-files-size"], "0");

        let previous = Summary {
            operation: Operation::Append,
            additional_properties: map(&[("total-records", "x")]),
        };
        let mut s = map(&[("added-records", "5")]);
        update_totals(&mut s, Some(&previous));
        assert!(!s.contains_key("total-records"));
        assert!(!s.contains_key("total-data-files"));
    }
}
