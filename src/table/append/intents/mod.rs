//! Fleet intents: in a fleet that takes turns on one table (see `pacing`), a node waiting for its
//! turn does not hold its segments back for a whole cycle. It **publishes** them: one intent
//! beside the fleet's segments, under `<url>/_thadam-intents/<table uuid>/`, holding their data
//! files, the segments' ids and the watermark its own commit would have raised (see [`record`];
//! a batch whose data files are too large for an intent, and the releases before, write the
//! files in a manifest in the table's metadata, entries without a snapshot id or sequence
//! numbers so that they inherit the snapshot that commits them, as Java's `appendManifest` does,
//! and the intent names it). Whoever commits next (the fleet's committer, `pacing::Turn`)
//! **lists** the intents and carries them in its snapshot, with its own segments: every id in
//! `thadam.segment-ids`, each log's watermark raised as far as the intents' chain allows
//! ([`select`]), and the carried files in its own new manifest (a named manifest is read ahead
//! of the load, [`Intents::prefetch`], and deleted by the carrier once its commit landed; one
//! not read goes in the manifest list as it is). So a segment waits about one slot, not one
//! cycle of N slots, and the table still takes one commit, and one new manifest, per slot
//! whatever N is. An intent holding its files costs one PUT to publish and one GET to carry;
//! one naming a manifest two of each, and the manifest's delete.
//!
//! Exactly once stays anchored where it was: a segment is registered when a snapshot summary
//! lists its id or a trusted watermark covers it, and a commit carries only intents none of
//! whose segments the table (as the commit's base holds it) already has, so two nodes carrying
//! the same intent at once collide like any two commits: one 409s, reloads and drops it.
//!
//! No node depends on another: a committer carries its own pending intents (and everyone else's)
//! in its turn, and a node that does not take turns commits what the committers left for longer
//! than its fallback itself. A node that is gone leaves intents the others
//! carry; when it comes back (a new lane) it finds its segments registered and commits nothing
//! twice. Intents are consumed by the commit that carries them (the carrier deletes them once it
//! landed); one whose segments are all in the table is deleted by its owner, or by anyone after
//! [`GRACE_MS`]; one that can never be carried (some of its segments went in another way) is
//! deleted by its owner, with its manifest (which no commit references, nor can: every commit
//! from then on filters those segments out), or by anyone after the grace period (its manifest
//! is then left: the carrier cannot know the publisher's commit did not land with it).
//!
//! Each carrying snapshot names its publishers' lanes (`thadam.carried-lanes`), so that every
//! node knows the nodes that only publish and ranks the same committers (`pacing`). A node that
//! does not take turns reads the intents only when it commits after all (in `gather`), never at
//! the attempts that leave its segments to the committers: those would have every node read
//! every other node's intents.
//!
//! A lone registrar never publishes, and lists only once, at its first commit (so that a node
//! coming back carries what was left while it was away); neither does more where no lanes are
//! seen (a catalog that keeps only the current snapshot shows other lanes one load at a time).

mod record;
mod select;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{
    DataFile, FormatVersion, Manifest, ManifestContentType, ManifestFile, ManifestStatus,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::table::Table;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use record::{Expect, FORMAT, FORMAT_INLINE, INLINE_MAX, Intent, Skip, Undecoded, decode_files};
pub(crate) use record::{IntentRecord, ManifestRef, MarkRaise};
use select::{Candidate, Context, Selection, mark_seq, select};

use super::ReadySegment;
use super::pacing::is_lane;
use crate::runtime::warn_once;
use crate::table::committed::{Guards, SegmentId, encode_ids};

/// The directory of a table's intents, under the fleet's `url` prefix.
pub(crate) const DIR: &str = "_thadam-intents";
/// How long after its publication an intent that is moot may be deleted by a node that did not
/// publish it (its owner may still be in the middle of an attempt that names it).
pub(crate) const GRACE_MS: i64 = 120_000;
/// The most intents one listing reads (a page of S3's LIST).
pub(crate) const LIST_LIMIT: usize = 1_000;
/// The most intents of other nodes remembered (read once, they never change), and the most bytes
/// of their bodies: an intent holds its data files (up to [`INLINE_MAX`]), and a backlog's
/// listing may name a thousand. Past either, intents are read again at each listing until the
/// commits have taken enough of them.
const SEEN_LIMIT: usize = 4_096;
const SEEN_BYTES: u64 = 16 << 20;
/// How many intents are read at once.
const READ_CONCURRENCY: usize = 8;
/// How long a prefetched listing stands for the attempt's own. Long: the listing and reads
/// ahead of a load take seconds under a backlog (hundreds of intents to read), and listing
/// again inside the window would carry every intent as it is, unread (one manifest each for
/// the next commit to merge, in its window). Well within [`GRACE_MS`], so no manifest it names
/// has been deleted; what was carried since, the table held then shows (`select`'s done).
const PREFETCH_FRESH: std::time::Duration = std::time::Duration::from_secs(30);
/// The most intents of this node pending at once: past it, segments wait for the slot. A node
/// that does not take turns learns what was carried at its fallback (5 s, or one second per 8
/// lanes in fleets of hundreds: 16 s at 128 nodes, 125 s at 1,000; `pacing::fallback_ms`),
/// publishing about once a second meanwhile.
const OWN_LIMIT: usize = 256;

/// A listing read ahead of the load: the table UUID it was checked for, when, the intents, and
/// the data files of their manifests read with it (see [`Intents::prefetch`]).
type Prefetched = (String, std::time::Instant, Listed, Loaded);
/// Intents' data files, by intent key.
type Loaded = HashMap<String, Arc<Vec<DataFile>>>;
/// Listed intents, by key.
type Listed = Vec<(ObjectPath, Arc<Intent>)>;

/// When intents were read (`thadam_iceberg_intents_read_total{when}`): inside a commit's cycle
/// (a listing ahead of the load or the build, which the commit waits for), or while the catalog
/// answered the commit before (see [`Intents::warm`]).
#[derive(Debug, Clone, Copy)]
enum Read {
    InCycle,
    DuringAnswer,
}

impl Read {
    fn label(self) -> &'static str {
        match self {
            Read::InCycle => "in_cycle",
            Read::DuringAnswer => "during_answer",
        }
    }
}

/// One of this node's published intents, not yet known to be in the table.
#[derive(Debug, Clone)]
struct Published {
    key: ObjectPath,
    intent: Arc<Intent>,
    seqs: Vec<u64>,
}

/// What another node's intent was found to be (and the size of its body).
#[derive(Debug, Clone)]
enum Seen {
    Read(Arc<Intent>, u64),
    Skipped,
}

/// What one commit carries besides the committer's own new files.
#[derive(Debug, Default, Clone)]
pub(crate) struct Carried {
    /// The manifests carried as they are (listed in the manifest list), less the snapshot id
    /// and sequence numbers.
    pub manifests: Vec<ManifestRef>,
    /// The data files of the manifests rewritten into the commit's own new manifest (read
    /// ahead of the load, see [`Intents::prefetch`]), and those manifests' paths: no snapshot
    /// names them, and the carrier deletes them once its commit landed.
    pub files: Vec<DataFile>,
    rewritten: Vec<String>,
    /// The ids of their segments, encoded as in `thadam.segment-ids`.
    pub encoded_ids: String,
    pub ids: Vec<SegmentId>,
    /// Watermark properties raised for the publishers' logs.
    pub marks: Vec<(String, String)>,
    /// The seqs of this node's own segments carried as its intents (not as new files), and
    /// the highest of them.
    pub own_seqs: HashSet<u64>,
    pub own_max_seq: Option<u64>,
    /// Per log of another node's intents: the watermark property that covers their segments
    /// once it reaches the highest of their seqs (an empty property: none ever does), for
    /// snapshot retention.
    pub guards: Guards,
    /// The lanes of the other nodes whose intents it carries (`thadam.carried-lanes`): a node
    /// that only publishes is seen by the fleet through them (see `pacing`).
    pub lanes: std::collections::BTreeSet<String>,
    /// The intents carried: key, whether ours, when published.
    keys: Vec<(ObjectPath, bool, i64)>,
    /// This node's intents given up in this attempt: their segments go as new files.
    withdrawn: Vec<Published>,
}

impl Carried {
    pub(crate) fn is_empty(&self) -> bool {
        self.manifests.is_empty() && self.files.is_empty()
    }

    /// How many intents of other nodes it carries.
    pub(crate) fn others(&self) -> usize {
        self.keys.iter().filter(|(_, own, _)| !own).count()
    }

    /// The manifest-list entry of a carried manifest in the snapshot `snapshot_id`.
    pub(crate) fn list_entry(m: &ManifestRef, snapshot_id: i64) -> ManifestFile {
        ManifestFile {
            manifest_path: m.path.clone(),
            manifest_length: m.length,
            partition_spec_id: m.spec_id,
            content: ManifestContentType::Data,
            sequence_number: UNASSIGNED_SEQUENCE_NUMBER,
            min_sequence_number: UNASSIGNED_SEQUENCE_NUMBER,
            added_snapshot_id: snapshot_id,
            added_files_count: Some(m.files),
            existing_files_count: Some(0),
            deleted_files_count: Some(0),
            added_rows_count: Some(m.rows),
            existing_rows_count: Some(0),
            deleted_rows_count: Some(0),
            partitions: m.partitions.clone(),
            key_metadata: None,
            first_row_id: None,
        }
    }
}

/// A table's intents, as one committer sees them (see the module docs).
#[derive(Debug)]
pub(crate) struct Intents {
    table: String,
    own: Vec<Published>,
    seen: HashMap<String, Seen>,
    /// The bytes of the intents in `seen`.
    seen_bytes: u64,
    /// `commit.intents`.
    on: bool,
    /// Publishes the data files in the intent (`thadam-intent/2`); off only where a test plays
    /// a node of the releases before, which wrote a manifest and an intent naming it.
    inline: bool,
    /// The store refused an intent (read-only keys): this node no longer publishes.
    refused: bool,
    /// Whether this committer has listed the intents once: its first commit does, lone or not,
    /// so that a node that comes back carries what the fleet left (its former self's intents
    /// among them) while it was away.
    listed: bool,
    /// Intents listed and read ahead of the load (see [`Intents::prefetch`]), with the table
    /// UUID they were checked for.
    prefetched: Option<Prefetched>,
    /// The deletes of the last landed commit's intents, running behind the next cycle.
    deleting: Option<tokio::task::JoinHandle<()>>,
}

impl Intents {
    /// `on`: `commit.intents`; off, this node neither publishes nor carries. `inline`: see
    /// the field.
    pub(crate) fn new(table: String, on: bool, inline: bool) -> Self {
        Intents {
            table,
            own: Vec::new(),
            seen: HashMap::new(),
            seen_bytes: 0,
            on,
            inline,
            refused: false,
            listed: false,
            prefetched: None,
            deleting: None,
        }
    }

    /// Whether this node carries the fleet's intents (`commit.intents`).
    pub(crate) fn on(&self) -> bool {
        self.on
    }

    /// Whether the next commit lists the intents: in a fleet that takes turns, while this node
    /// has its own pending, and once after it starts.
    pub(crate) fn lists(&self, slotted: bool) -> bool {
        self.has_own() || (self.on && (slotted || !self.listed))
    }

    /// Whether this node has intents not yet known to be in the table.
    pub(crate) fn has_own(&self) -> bool {
        !self.own.is_empty()
    }

    /// Whether segment `seq` is in one of this node's pending intents.
    pub(crate) fn is_published(&self, seq: u64) -> bool {
        self.own.iter().any(|p| p.seqs.contains(&seq))
    }

    /// Whether every one of `seqs` is in an intent of this node published at or after
    /// `since_ms`.
    pub(crate) fn all_published_since(
        &self,
        mut seqs: impl Iterator<Item = u64>,
        since_ms: i64,
    ) -> bool {
        seqs.all(|seq| {
            self.own
                .iter()
                .any(|p| p.intent.record.created_ms >= since_ms && p.seqs.contains(&seq))
        })
    }

    /// Whether another intent may be published now.
    pub(crate) fn may_publish(&self) -> bool {
        self.on && !self.refused && self.own.len() < OWN_LIMIT
    }

    /// What the next intent of a watermark property builds on: the top of this node's last
    /// pending intent, if any (else every earlier segment is known to be in the table).
    pub(crate) fn chain_top(&self) -> Option<u64> {
        self.own.last().map(|p| p.intent.record.max_seq)
    }

    /// Publishes `batch` (segments the table lacks, fitting its schema, in catalog order): its
    /// manifest in the table's metadata, then the intent. Best effort: a failure leaves the
    /// segments to the next slot (and a refusal, 403, turns publishing off for the table).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn publish(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table: &Table,
        batch: &[ReadySegment],
        lane: &str,
        writer: &str,
        mark: Option<MarkRaise>,
        now_ms: i64,
    ) {
        let metadata = table.metadata();
        if batch.is_empty() || metadata.format_version() == FormatVersion::V1 {
            return;
        }
        let bytes: u64 = batch.iter().map(|r| r.segment.file_size).sum();
        // The data files go in the intent itself (one PUT to publish, one GET to carry), unless
        // they are too large for one: then a manifest in the table's metadata holds them.
        let inline = if self.inline {
            inline_files(table, &url.bucket, batch)
        } else {
            None
        };
        let (format, manifest, files, decoded) = match inline {
            Some((files, json)) => (
                FORMAT_INLINE,
                ManifestRef {
                    path: String::new(),
                    length: 0,
                    spec_id: metadata.default_partition_spec_id(),
                    schema_id: metadata.current_schema_id(),
                    files: files.len() as u32,
                    rows: files.iter().map(|f| f.record_count()).sum(),
                    bytes,
                    partitions: None,
                },
                json,
                Some(Arc::new(files)),
            ),
            None => {
                match super::producer::write_inherited_manifest(table, &url.bucket, batch).await {
                    Ok(m) => (
                        FORMAT,
                        ManifestRef {
                            path: m.manifest_path.clone(),
                            length: m.manifest_length,
                            spec_id: m.partition_spec_id,
                            schema_id: metadata.current_schema_id(),
                            files: m.added_files_count.unwrap_or(0),
                            rows: m.added_rows_count.unwrap_or(0),
                            bytes,
                            partitions: m.partitions.clone(),
                        },
                        Vec::new(),
                        None,
                    ),
                    Err(e) => {
                        tracing::debug!(table = %self.table, "could not write an intent's manifest ({e}); the segments wait for this node's slot");
                        return;
                    }
                }
            }
        };
        let record = IntentRecord {
            format: format.to_string(),
            table_uuid: metadata.uuid().to_string(),
            url: url.uri(),
            lane: lane.to_string(),
            writer: writer.to_string(),
            created_ms: now_ms,
            manifest,
            files,
            segment_ids: encode_ids(batch.iter().map(|r| r.segment.object_key.as_str())),
            max_seq: batch.iter().map(|r| r.segment.seq).max().unwrap_or(0),
            watermark: mark,
        };
        let ids = batch
            .iter()
            .map(|r| SegmentId::of(&r.segment.object_key))
            .collect();
        let name = format!(
            "{lane}-{:020}-{}.json",
            record.max_seq,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let key = intent_dir(url, &record.table_uuid).child(name);
        match store.put(&key, record.to_bytes().into()).await {
            Ok(_) => {
                let form = if record.is_inline() {
                    "files"
                } else {
                    "manifest"
                };
                metrics::counter!("thadam_iceberg_intents_published_total", "table" => self.table.clone(), "form" => form)
                    .increment(1);
                tracing::debug!(table = %self.table, key = %key, segments = batch.len(), "published an intent");
                // Its files are held decoded; their JSON was for the store.
                let record = IntentRecord {
                    files: Vec::new(),
                    ..record
                };
                self.own.push(Published {
                    key,
                    intent: Arc::new(Intent {
                        record,
                        ids,
                        files: decoded,
                    }),
                    seqs: batch.iter().map(|r| r.segment.seq).collect(),
                });
            }
            Err(e) => {
                if matches!(
                    e,
                    object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                ) {
                    self.refused = true;
                    tracing::warn!(table = %self.table, "the store refused to take an intent ({e}); this node no longer publishes intents for table {} and commits its segments in its own slots (give its keys write access under {DIR}/ of the url to let the fleet carry them)", self.table);
                } else {
                    tracing::debug!(table = %self.table, "could not publish an intent ({e}); the segments wait for this node's slot");
                }
                // Nothing names the manifest (if there is one): it is no one's.
                if let Some(path) = record.manifest_path()
                    && let Err(e) = table.file_io().delete(path).await
                {
                    tracing::debug!(table = %self.table, "could not delete an unpublished intent's manifest: {e}");
                }
            }
        }
    }

    /// This node's intents the table now holds (another node carried them): forgotten, their
    /// intents deleted. Returns the seqs of their segments.
    pub(crate) async fn carried_by_others(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
    ) -> HashSet<u64> {
        let (done, pending): (Vec<Published>, Vec<Published>) = std::mem::take(&mut self.own)
            .into_iter()
            .partition(|p| p.intent.ids.iter().all(holds));
        self.own = pending;
        let mut seqs = HashSet::new();
        for p in &done {
            seqs.extend(p.seqs.iter().copied());
        }
        let keys: Vec<ObjectPath> = done.into_iter().map(|p| p.key).collect();
        delete_all(store, &keys, &self.table).await;
        if !seqs.is_empty() {
            metrics::counter!("thadam_iceberg_segments_carried_by_others_total", "table" => self.table.clone())
                .increment(seqs.len() as u64);
        }
        seqs
    }

    /// Lists and reads the intents before the attempt loads the table, so that the window
    /// between the load and the commit holds no listing: intents never change once written,
    /// and which of them to carry is decided on the loaded table ([`Intents::gather`]). The
    /// intents' manifests are read too (as many as hold `budget` files, the most one commit
    /// carries): the commit writes their files into its own new manifest
    /// instead of listing one manifest per intent, so that the table gains one manifest per
    /// commit, as from a lone registrar, and the manifest merging that follows reads nothing
    /// in the commit window (a 128-node fleet's commits, carrying ~270 one-file manifests
    /// each, merged the last commit's ~270 at every commit: a 1.2 s window on average).
    pub(crate) async fn prefetch(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table: &Table,
        budget: usize,
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
    ) {
        let scope = Scope::of(url, table.metadata());
        let listed = self
            .list(store, &scope, table.metadata(), Read::InCycle)
            .await;
        // What is read is what `select` will carry: in its order, and none that the table
        // held already has a segment of (those are done or stale, never carried). Read in the
        // listing's order, a backlog's reads went to intents carried already and waiting for
        // their deletion, and the commit carried the rest as they were.
        let own_keys: HashSet<&ObjectPath> = self.own.iter().map(|p| &p.key).collect();
        let to_read = read_order(&listed, &own_keys, holds);
        let loaded = load_files(table, &to_read, budget, &self.table).await;
        self.prefetched = Some((scope.uuid, std::time::Instant::now(), listed, loaded));
    }

    /// Reads the fleet's new intents into the memory of those read, choosing none: the
    /// fleet's committer does this while the catalog answers its commit (see
    /// `BatchCommit::send`), so that the next cycle's listing finds all but the latest read
    /// already. At 128 nodes that cycle listed and read ~37 new intents (47 ms of a ~300 ms
    /// cycle on SeaweedFS), all of them after the answer. The cost is a second LIST per cycle:
    /// the cycle still lists for itself, so that what was published during the answer goes
    /// in its commit rather than the one after.
    pub(crate) async fn warm(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        metadata: &iceberg::spec::TableMetadata,
    ) {
        if metadata.format_version() == FormatVersion::V1 {
            return;
        }
        let scope = Scope::of(url, metadata);
        self.list(store, &scope, metadata, Read::DuringAnswer).await;
    }

    /// Whether the last prefetch found intents of other nodes (or this node has its own).
    pub(crate) fn prefetched_any(&self) -> bool {
        self.has_own()
            || self
                .prefetched
                .as_ref()
                .is_some_and(|(_, _, listed, _)| !listed.is_empty())
    }

    /// What a commit built on `table` carries: this node's pending intents and the others' it
    /// lists, chosen by [`select`]. `own_todo`: the segments this commit registers for this
    /// node (its own intents must lie within it to be carried); `own_property`: the watermark
    /// the commit raises itself; `budget`: the most segments carried.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn gather(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table: &Table,
        own_todo: &[ReadySegment],
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
        own_property: Option<&str>,
        budget: usize,
        now_ms: i64,
    ) -> Carried {
        let metadata = table.metadata();
        let mut carried = Carried::default();
        if metadata.format_version() == FormatVersion::V1 {
            return carried;
        }
        let scope = Scope::of(url, metadata);
        self.listed = true;
        // Only this attempt's prefetch (an attempt that ended before it carried anything leaves
        // one that later intents are missing from).
        let (listed, loaded) = match self.prefetched.take() {
            Some((checked_for, at, listed, loaded))
                if checked_for == scope.uuid && at.elapsed() < PREFETCH_FRESH =>
            {
                (listed, loaded)
            }
            _ => (
                self.list(store, &scope, metadata, Read::InCycle).await,
                Loaded::new(),
            ),
        };
        let default_spec = metadata.default_partition_spec_id();

        // This node's own intents go as intents only when the commit registers all of their
        // segments for it; others are withdrawn (their segments go as new files).
        let todo: HashSet<u64> = own_todo.iter().map(|r| r.segment.seq).collect();
        let own_keys: HashSet<&ObjectPath> = self.own.iter().map(|p| &p.key).collect();
        let mut candidates: Vec<(ObjectPath, Arc<Intent>, bool)> = Vec::new();
        let mut in_own_intents: HashSet<u64> = HashSet::new();
        for p in &self.own {
            if p.seqs.iter().all(|s| todo.contains(s)) {
                candidates.push((p.key.clone(), Arc::clone(&p.intent), true));
                in_own_intents.extend(p.seqs.iter().copied());
            }
        }
        for (key, intent) in listed {
            if !own_keys.contains(&key) {
                candidates.push((key, intent, false));
            }
        }
        // Own segments not in an own candidate intent are the commit's new files.
        let reserved: HashSet<SegmentId> = own_todo
            .iter()
            .filter(|r| !in_own_intents.contains(&r.segment.seq))
            .map(|r| SegmentId::of(&r.segment.object_key))
            .collect();
        let properties = metadata.properties();
        let mark = |p: &str| properties.get(p).and_then(|v| mark_seq(v));
        // An intent that holds its files goes into the commit's own manifest, which is written
        // with the default spec; one naming a manifest may go as it is, with any spec the table has.
        let fits = |i: &Intent| {
            metadata.schema_by_id(i.record.manifest.schema_id).is_some()
                && metadata
                    .partition_spec_by_id(i.record.manifest.spec_id)
                    .is_some()
                && (!i.record.is_inline()
                    || (i.files.is_some() && i.record.manifest.spec_id == default_spec))
        };
        let views: Vec<Candidate<'_>> = candidates
            .iter()
            .map(|(_, intent, own)| Candidate { intent, own: *own })
            .collect();
        let Selection {
            carry,
            done,
            stale,
            marks,
        } = select(
            &views,
            &Context {
                holds,
                mark_seq: &mark,
                fits: &fits,
                reserved: &reserved,
                own_property,
                budget,
            },
        );
        for i in carry {
            let (key, intent, own) = &candidates[i];
            // Rewritten into the commit's own manifest where its files were read ahead and fit
            // the spec that manifest is written with; else listed as it is.
            match (&intent.files, loaded.get(key.as_ref())) {
                // Its files are in the intent: there is no manifest to delete.
                (Some(files), _) => carried.files.extend(files.iter().cloned()),
                (None, Some(files)) if intent.record.manifest.spec_id == default_spec => {
                    carried.files.extend(files.iter().cloned());
                    carried.rewritten.push(intent.record.manifest.path.clone());
                }
                _ => carried.manifests.push(intent.record.manifest.clone()),
            }
            carried.encoded_ids.push_str(&intent.record.segment_ids);
            carried.ids.extend(intent.ids.iter().copied());
            carried
                .keys
                .push((key.clone(), *own, intent.record.created_ms));
            let record = &intent.record;
            if *own {
                carried.own_max_seq = carried.own_max_seq.max(Some(record.max_seq));
            } else {
                if is_lane(&record.lane) {
                    carried.lanes.insert(record.lane.clone());
                }
                let property = record
                    .watermark
                    .as_ref()
                    .map_or("", |m| m.property.as_str());
                carried.guards.add(property, record.max_seq);
            }
        }
        carried.marks = marks.into_iter().collect();
        let carried_own: HashSet<&ObjectPath> = carried
            .keys
            .iter()
            .filter(|(_, own, _)| *own)
            .map(|(k, _, _)| k)
            .collect();
        for p in &self.own {
            if carried_own.contains(&p.key) {
                carried.own_seqs.extend(p.seqs.iter().copied());
            } else if p.seqs.iter().any(|s| todo.contains(s)) {
                carried.withdrawn.push(p.clone());
            }
        }
        // Others' intents that are moot: deleted once past the grace period.
        let mut moot = Vec::new();
        for i in done.into_iter().chain(stale) {
            let (key, intent, own) = &candidates[i];
            if !own && now_ms.saturating_sub(intent.record.created_ms) > GRACE_MS {
                self.seen.remove(key.as_ref());
                moot.push(key.clone());
            }
        }
        delete_all(store, &moot, &self.table).await;
        carried
    }

    /// The commit that carried `carried` landed: the intents it carried are consumed (deleted),
    /// this node's are forgotten, and those it withdrew are deleted with their manifests.
    ///
    /// The deletes run behind the committer's next cycle, one batch of them at a time (the
    /// next commit's wait for the last one to finish first): they were a quarter of a 128-node
    /// fleet's committer cycle (a bulk delete of ~37 intents, 76 ms on average on SeaweedFS),
    /// and nothing waits on them. An intent not deleted yet is listed again and known done (the
    /// table holds its segments), so it is never carried twice; one whose delete is lost (a stop,
    /// a failure) is deleted as moot later, as before.
    pub(crate) async fn landed(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        table: &Table,
        carried: &Carried,
        now_ms: i64,
    ) {
        for (_, own, created_ms) in &carried.keys {
            if !own {
                metrics::histogram!("thadam_iceberg_intent_age_seconds", "table" => self.table.clone())
                    .record(now_ms.saturating_sub(*created_ms).max(0) as f64 / 1000.0);
            }
            metrics::counter!("thadam_iceberg_intents_carried_total", "table" => self.table.clone(), "whose" => if *own { "own" } else { "other" })
                .increment(1);
        }
        let gone: Vec<ObjectPath> = carried
            .keys
            .iter()
            .map(|(k, _, _)| k)
            .chain(carried.withdrawn.iter().map(|p| &p.key))
            .cloned()
            .collect();
        let gone_keys: HashSet<&ObjectPath> = gone.iter().collect();
        self.own.retain(|p| !gone_keys.contains(&p.key));
        // The manifests the commit's own now holds the files of, and those of the intents this
        // node withdrew: no snapshot names them, nor can any (a commit that lands from now on
        // is built on this one, which holds their segments).
        let manifests: Vec<String> = carried
            .rewritten
            .iter()
            .cloned()
            .chain(
                carried
                    .withdrawn
                    .iter()
                    .filter_map(|p| p.intent.record.manifest_path().map(str::to_string)),
            )
            .collect();
        self.settle().await;
        let (store, io, name) = (
            Arc::clone(store),
            table.file_io().clone(),
            self.table.clone(),
        );
        self.deleting = Some(tokio::spawn(async move {
            delete_all(&store, &gone, &name).await;
            if !manifests.is_empty()
                && let Err(e) = io.delete_stream(futures::stream::iter(manifests)).await
            {
                tracing::debug!(table = %name, "could not delete the manifests of carried or withdrawn intents: {e}");
            }
        }));
    }

    /// Waits for the deletes of the last landed commit's intents (see [`Intents::landed`]): before
    /// the next ones, and when the committer stops.
    pub(crate) async fn settle(&mut self) {
        if let Some(deleting) = self.deleting.take()
            && let Err(e) = deleting.await
        {
            tracing::debug!(table = %self.table, "the deletes of carried intents did not finish: {e}");
        }
    }

    /// The intents under `dir` (one page), read once each (`when`: for the metric); those that
    /// fail their checks are skipped with a warning and a metric, once per intent.
    async fn list(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        scope: &Scope,
        metadata: &iceberg::spec::TableMetadata,
        when: Read,
    ) -> Listed {
        let expect = scope.expect();
        let metas: Vec<object_store::ObjectMeta> = match store
            .list(Some(&scope.dir))
            .take(LIST_LIMIT)
            .try_collect::<Vec<_>>()
            .await
        {
            Ok(metas) => metas,
            Err(e) => {
                // A refusal does not go away by itself: said once; anything else may.
                let refused = matches!(
                    e,
                    object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                );
                if refused && warn_once::first_time("intents-list", self.table.clone()) {
                    tracing::warn!(table = %self.table, "the store refused to list the fleet's intents under {} ({e}); this node commits without carrying them (give its keys list access under {DIR}/ of the url)", scope.dir);
                } else {
                    tracing::debug!(table = %self.table, "could not list the fleet's intents ({e}); committing without them");
                }
                return Vec::new();
            }
        };
        let listed: HashSet<String> = metas.iter().map(|m| m.location.to_string()).collect();
        // What is no longer listed is gone for good (intents are never written twice).
        let mut forgotten = 0;
        self.seen.retain(|k, seen| {
            let kept = listed.contains(k);
            if let (false, Seen::Read(_, size)) = (kept, &*seen) {
                forgotten += size;
            }
            kept
        });
        self.seen_bytes = self.seen_bytes.saturating_sub(forgotten);
        // Read now but not remembered (the memory is full).
        let mut fresh_read: HashMap<String, Arc<Intent>> = HashMap::new();
        // Intents not read yet, fetched a few at a time (each is read once, then remembered).
        let fresh: Vec<object_store::ObjectMeta> = metas
            .iter()
            .filter(|m| !self.seen.contains_key(m.location.as_ref()))
            .cloned()
            .collect();
        let table = self.table.as_str();
        let fetched: Vec<(object_store::ObjectMeta, Option<Result<Intent, Skip>>)> =
            futures::stream::iter(fresh)
                .map(|meta| async move {
                    let parsed = read_one(store, &meta, expect, metadata, table).await;
                    (meta, parsed)
                })
                .buffered(READ_CONCURRENCY)
                .collect()
                .await;
        let read = fetched
            .iter()
            .filter(|(_, parsed)| parsed.is_some())
            .count();
        if read > 0 {
            metrics::counter!("thadam_iceberg_intents_read_total", "table" => self.table.clone(), "when" => when.label())
                .increment(read as u64);
        }
        for (meta, parsed) in fetched {
            let seen = match parsed {
                // Unreadable now (consumed meanwhile, or a transient failure): not remembered.
                None => continue,
                Some(Ok(intent)) => Seen::Read(Arc::new(intent), meta.size),
                Some(Err(skip)) => {
                    metrics::counter!("thadam_iceberg_intents_skipped_total", "table" => self.table.clone(), "reason" => skip.label())
                        .increment(1);
                    tracing::warn!(table = %self.table, key = %meta.location, reason = skip.label(), "skipping an intent that cannot be carried (it is never committed; delete it once its publisher is known to be gone)");
                    Seen::Skipped
                }
            };
            let size = match &seen {
                Seen::Read(_, size) => *size,
                Seen::Skipped => 0,
            };
            if self.seen.len() < SEEN_LIMIT && self.seen_bytes + size <= SEEN_BYTES {
                self.seen_bytes += size;
                self.seen.insert(meta.location.to_string(), seen.clone());
            }
            if let Seen::Read(intent, _) = seen {
                fresh_read.insert(meta.location.to_string(), intent);
            }
        }
        // In listing order (by lane and seq).
        let mut out = Vec::new();
        for meta in metas {
            let name = meta.location.to_string();
            let intent = match self.seen.get(&name) {
                Some(Seen::Read(intent, _)) => Arc::clone(intent),
                Some(Seen::Skipped) => continue,
                None => match fresh_read.remove(&name) {
                    Some(intent) => intent,
                    None => continue,
                },
            };
            out.push((meta.location, intent));
        }
        out
    }
}

/// The listed intents a carrier reads ahead, in the order it reads them (see
/// [`Intents::prefetch`]): [`select::priority`]'s, without those the table held already has a
/// segment of.
fn read_order<'a>(
    listed: &'a [(ObjectPath, Arc<Intent>)],
    own_keys: &HashSet<&ObjectPath>,
    holds: &(dyn Fn(&SegmentId) -> bool + Sync),
) -> Vec<&'a (ObjectPath, Arc<Intent>)> {
    let mut order: Vec<&(ObjectPath, Arc<Intent>)> = listed
        .iter()
        .filter(|(_, intent)| !intent.ids.iter().any(holds))
        .collect();
    order.sort_by_cached_key(|(key, intent)| select::priority(intent, own_keys.contains(key)));
    order
}

/// The data files of `listed` intents' manifests, read a few at a time, in the order given, as
/// long as they hold at most `budget` files in all. A manifest that cannot be read, or that does
/// not hold exactly the intent's files as a publisher writes them (added, with nothing to
/// inherit yet), is left out: its intent is carried as it is.
async fn load_files(
    table: &Table,
    listed: &[&(ObjectPath, Arc<Intent>)],
    budget: usize,
    name: &str,
) -> Loaded {
    let mut room = budget;
    // Owned, so that the reads' futures borrow nothing from the listing.
    let chosen: Vec<(String, Arc<Intent>)> = listed
        .iter()
        .take_while(|(_, intent)| {
            let files = intent.record.manifest.files as usize;
            let fits = files <= room;
            room = room.saturating_sub(files);
            fits
        })
        // An intent that holds its files has nothing more to read.
        .filter(|(_, intent)| !intent.record.is_inline())
        .map(|(key, intent)| (key.to_string(), Arc::clone(intent)))
        .collect();
    let io = table.file_io().clone();
    futures::stream::iter(chosen)
        .map(|(key, intent)| {
            let io = io.clone();
            async move {
                let path = &intent.record.manifest.path;
                let read = match io.new_input(path) {
                    Ok(input) => input.read().await,
                    Err(e) => Err(e),
                };
                let files = read
                    .and_then(|bytes| Manifest::parse_avro(&bytes))
                    .map(|m| {
                        let (entries, _) = m.into_parts();
                        let as_published = entries.len() == intent.record.manifest.files as usize
                            && entries.iter().all(|e| {
                                e.status() == ManifestStatus::Added
                                    && e.snapshot_id().is_none()
                                    && e.sequence_number().is_none()
                            });
                        as_published.then(|| {
                            entries
                                .iter()
                                .map(|e| e.data_file().clone())
                                .collect::<Vec<_>>()
                        })
                    });
                match files {
                    Ok(Some(files)) => Some((key, Arc::new(files))),
                    Ok(None) => {
                        tracing::debug!(
                            table = name,
                            path,
                            "an intent's manifest is not as published; carrying it as it is"
                        );
                        None
                    }
                    Err(e) => {
                        tracing::debug!(
                            table = name,
                            path,
                            "could not read an intent's manifest ({e}); carrying it as it is"
                        );
                        None
                    }
                }
            }
        })
        .buffer_unordered(READ_CONCURRENCY)
        .filter_map(futures::future::ready)
        .collect()
        .await
}

/// The data files of `batch` and their JSON for an intent that holds them
/// (`thadam-intent/2`), or `None` where the JSON would be larger than [`INLINE_MAX`] (or the
/// files cannot be made: the manifest's write then says why).
fn inline_files(
    table: &Table,
    bucket: &str,
    batch: &[ReadySegment],
) -> Option<(Vec<DataFile>, Vec<Box<serde_json::value::RawValue>>)> {
    let metadata = table.metadata();
    let files = super::producer::inherited_files(table, bucket, batch).ok()?;
    let partition_type = metadata.default_partition_type();
    let mut json = Vec::with_capacity(files.len());
    let mut size = 0;
    for file in &files {
        let text = iceberg::spec::serialize_data_file_to_json(
            file.clone(),
            partition_type,
            metadata.format_version(),
        )
        .ok()?;
        size += text.len();
        if size > INLINE_MAX {
            return None;
        }
        json.push(serde_json::value::RawValue::from_string(text).ok()?);
    }
    Some((files, json))
}

/// Reads and checks one listed intent: `None` when it cannot be read now (consumed meanwhile by
/// another carrier, or a transient failure: it is listed again next time).
async fn read_one(
    store: &Arc<dyn ObjectStore>,
    meta: &object_store::ObjectMeta,
    expect: Expect<'_>,
    metadata: &iceberg::spec::TableMetadata,
    table: &str,
) -> Option<Result<Intent, Skip>> {
    if meta.size > record::MAX_BYTES {
        return Some(Err(Skip::TooLarge));
    }
    let bytes = match store.get(&meta.location).await {
        Ok(answer) => answer.bytes().await,
        Err(e) => Err(e),
    };
    match bytes {
        Ok(bytes) => match record::parse(&bytes, expect) {
            Ok(mut intent) if intent.record.is_inline() => {
                match decode_files(&intent.record, metadata) {
                    Ok(files) => {
                        // Held decoded from here on; the JSON would be a second copy.
                        intent.record.files = Vec::new();
                        intent.files = Some(Arc::new(files));
                        Some(Ok(intent))
                    }
                    // Written on a newer table than the one held: read again at a later listing.
                    Err(Undecoded::NotYet) => None,
                    Err(Undecoded::Malformed) => Some(Err(Skip::Malformed)),
                }
            }
            other => Some(other),
        },
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => {
            tracing::debug!(table, key = %meta.location, "could not read an intent: {e}");
            None
        }
    }
}

/// Where a table's intents lie and what they are checked against: the table's UUID, the
/// fleet's `url`, the table's metadata directory.
struct Scope {
    uuid: String,
    url: String,
    metadata_root: String,
    dir: ObjectPath,
}

impl Scope {
    fn of(url: &crate::config::TableRoot, metadata: &iceberg::spec::TableMetadata) -> Scope {
        let uuid = metadata.uuid().to_string();
        Scope {
            dir: intent_dir(url, &uuid),
            uuid,
            url: url.uri(),
            metadata_root: format!("{}/metadata", metadata.location().trim_end_matches('/')),
        }
    }

    fn expect(&self) -> Expect<'_> {
        Expect {
            table_uuid: &self.uuid,
            url: &self.url,
            metadata_root: &self.metadata_root,
        }
    }
}

/// `<url prefix>/_thadam-intents/<table uuid>`.
pub(crate) fn intent_dir(url: &crate::config::TableRoot, table_uuid: &str) -> ObjectPath {
    let mut parts: Vec<&str> = url.prefix.split('/').filter(|p| !p.is_empty()).collect();
    parts.push(DIR);
    parts.push(table_uuid);
    ObjectPath::from_iter(parts)
}

/// Deletes `keys` (intents) in bulk: one S3 DeleteObjects request per thousand keys instead of
/// one DELETE each (a carrier consumes an intent per publishing node per commit: at 64 nodes
/// that was 64 requests a second, a sixth of what the fleet asked of its store). Best effort,
/// like every intent deletion (a leftover is moot, and deleted after the grace period). Stores
/// without a bulk call (object_store's default is one DELETE per key) or that refuse it (some
/// S3-compatible stores do not implement DeleteObjects) get one DELETE per key instead.
async fn delete_all(store: &Arc<dyn ObjectStore>, keys: &[ObjectPath], table: &str) {
    if keys.is_empty() {
        return;
    }
    if let Err(e) = crate::io::store::delete_in_bulk(store, keys).await {
        tracing::debug!(
            table,
            keys = keys.len(),
            "could not delete intents in bulk ({e}); deleting them one by one"
        );
        for key in keys {
            match store.delete(key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => tracing::debug!(table, key = %key, "could not delete an intent: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_lie_under_the_fleet_url() {
        let url = crate::config::TableRoot {
            bucket: "lake".into(),
            prefix: "fleet/a".into(),
        };
        assert_eq!(
            intent_dir(&url, "u-1").as_ref(),
            "fleet/a/_thadam-intents/u-1"
        );
        let root = crate::config::TableRoot {
            bucket: "lake".into(),
            prefix: String::new(),
        };
        assert_eq!(intent_dir(&root, "u-1").as_ref(), "_thadam-intents/u-1");
    }

    #[test]
    fn a_carrier_reads_ahead_what_it_will_carry_first() {
        use record::tests::{expect, record};
        let intent = |lane: &str, keys: &[&str], seq: u64| {
            Arc::new(
                record::parse(&record(lane, keys, seq, None).to_bytes(), expect()).expect("parses"),
            )
        };
        // Listed in key order; "a" is in the table already (carried, not yet deleted).
        let listed: Listed = vec![
            (ObjectPath::from("i/0"), intent("a", &["a1"], 1)),
            (ObjectPath::from("i/1"), intent("c", &["c1"], 1)),
            (ObjectPath::from("i/2"), intent("b", &["b2"], 2)),
            (ObjectPath::from("i/3"), intent("me", &["m1"], 1)),
            (ObjectPath::from("i/4"), intent("b", &["b1"], 1)),
        ];
        let own = ObjectPath::from("i/3");
        let own_keys: HashSet<&ObjectPath> = [&own].into_iter().collect();
        let held = SegmentId::of("a1");
        let holds = |id: &SegmentId| *id == held;
        let order: Vec<&str> = read_order(&listed, &own_keys, &holds)
            .into_iter()
            .map(|(key, _)| key.as_ref())
            .collect();
        // Its own first, then the oldest (here: by lane, then seq), as `select` takes them.
        assert_eq!(order, ["i/3", "i/4", "i/2", "i/1"]);
    }

    #[tokio::test]
    async fn intents_read_while_the_catalog_answers_are_not_read_again() {
        use record::tests::{UUID, partitioned, record};
        let metadata = iceberg::spec::TableMetadataBuilder::new_from_metadata(partitioned(), None)
            .assign_uuid(uuid::Uuid::parse_str(UUID).expect("uuid"))
            .build()
            .expect("metadata")
            .metadata;
        let url = crate::config::TableRoot {
            bucket: "lake".into(),
            prefix: "fleet".into(),
        };
        let dir = intent_dir(&url, UUID);
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let put = |name: &str, body: Vec<u8>| {
            let (store, key) = (Arc::clone(&store), dir.child(name));
            async move { store.put(&key, body.into()).await.expect("put") }
        };
        put("a-1.json", record("a", &["a1"], 1, None).to_bytes()).await;
        put("b-1.json", record("b", &["b1"], 1, None).to_bytes()).await;
        let mut intents = Intents::new("t".into(), true, true);
        intents.warm(&store, &url, &metadata).await;
        // Bodies that would no longer parse: the listing in the next cycle must not read them.
        put("a-1.json", b"{}".to_vec()).await;
        put("b-1.json", b"{}".to_vec()).await;
        put("c-1.json", record("c", &["c1"], 1, None).to_bytes()).await;
        let scope = Scope::of(&url, &metadata);
        let listed = intents.list(&store, &scope, &metadata, Read::InCycle).await;
        let lanes: Vec<&str> = listed.iter().map(|(_, i)| i.record.lane.as_str()).collect();
        assert_eq!(lanes, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn intents_are_deleted_together_and_missing_ones_do_not_matter() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let keys: Vec<ObjectPath> = (0..3)
            .map(|i| ObjectPath::from(format!("_thadam-intents/u/a-{i}.json")))
            .collect();
        let kept = ObjectPath::from("_thadam-intents/u/b-0.json");
        for key in keys.iter().chain([&kept]) {
            store
                .put(key, bytes::Bytes::from_static(b"{}").into())
                .await
                .expect("put");
        }
        let mut doomed = keys.clone();
        doomed.push(ObjectPath::from("_thadam-intents/u/gone.json"));
        delete_all(&store, &doomed, "t").await;
        let left: Vec<String> = store
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .expect("list");
        assert_eq!(left, vec![kept.to_string()]);
    }
}
