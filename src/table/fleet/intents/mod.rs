//! Fleet intents: in a fleet that takes turns on one table (see `fleet`), a node waiting for its
//! turn does not hold its segments back for a whole cycle. It **publishes** them: one intent
//! beside the fleet's segments, under `<url>/_thadam-intents/<table uuid>/`, holding their data
//! files, the segments' ids, its segment log and the watermark its own commit would have raised
//! (see [`record`]; a batch whose data files are too large for an intent writes them in a
//! manifest in the table's metadata, and the intent names it). Whoever commits next (the fleet's
//! committer, `fleet::lanes::Turn`) **lists** the intents ([`listing`]) and carries them in its
//! snapshot, with its own segments: the files in its own new manifest, every id in
//! `thadam.segment-ids`, each log's watermark raised as far as the intents' chain allows
//! ([`mod@select`]). So a segment waits about one slot, not one cycle of N slots, and the table still
//! takes one commit per slot whatever N is.
//!
//! Exactly once rests on what the table holds, and on nothing else:
//!
//! - a commit carries of an intent only the segments the table (as the commit's base holds it)
//!   lacks, so two nodes carrying the same intent at once collide like any two commits: one
//!   409s, reloads and drops it;
//! - an intent is **done** once the table holds all of it, by ids or by its watermark, which
//!   snapshot expiry leaves in place: a done intent is never carried, however old, and whoever
//!   sees it deletes it;
//! - nothing is carried that was not read: the data files of an intent are copied into the
//!   carrier's manifest, never a publisher's manifest named as it is, and one whose manifest
//!   cannot be read waits (its publisher commits it itself after its fallback);
//! - nothing that a commit may name is deleted: a manifest of a `thadam-intent/1` intent goes
//!   only after a definite refusal of its intent's PUT, or once its intent is done and every
//!   snapshot holding its segments took them by copy ([`cleanup`]);
//! - intents are bound to their publisher (their own log's watermark, ids of their own files'
//!   keys) and, with the fleet key, signed ([`signing`]).
//!
//! No node depends on another: a committer carries everyone's intents in its turn, and a node
//! that does not take turns commits what the committers left for longer than its fallback
//! itself, registering its published segments as new files and deleting their intents
//! (withdrawn). A node that is gone leaves intents the others carry; when it comes back (a new
//! lane) it finds its segments registered and commits nothing twice; an intent it publishes again
//! beside an older one of its own is carried for what the older one did not hold.
//!
//! A lone registrar does not publish (but for a roll call at its first start on a table with no
//! snapshot yet, see `fleet::roll_call`), and lists only once, at its first commit (so that a
//! node coming back carries what was left while it was away).

mod carried;
mod cleanup;
mod listing;
mod record;
mod select;
mod signing;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use iceberg::spec::{DataFile, FormatVersion, TableMetadata};
use iceberg::table::Table;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

pub(crate) use carried::Carried;
pub(crate) use listing::{DIR, intent_dir};
pub(crate) use record::{IntentRecord, ManifestRef, MarkRaise};
pub(crate) use signing::IntentKey;

use carried::Published;
use cleanup::{Deletes, consumed_by_copy, done_deletes};
use listing::{Listed, ManifestRead, Memory, Read, Scope, load_files, read_order};
use record::{FORMAT, FORMAT_INLINE, INLINE_MAX, Intent};
use select::{Chosen, Context, Selection, mark_seq, select};

use super::slots::is_lane;
use crate::table::committed::{SegmentId, encode_id_list, encode_ids};
use crate::table::data_files::ReadySegment;

/// How long a prefetched listing stands for the attempt's own: long, because the listing and
/// reads ahead of a load take seconds under a backlog, and listing again inside the window would
/// leave the /1 intents it finds unread (they would wait for the next commit). Whatever was
/// carried since, the table held then shows (`select`'s done).
const PREFETCH_FRESH: std::time::Duration = std::time::Duration::from_secs(30);
/// The most intents of this node pending at once: past it, segments wait for the slot.
const OWN_LIMIT: usize = 256;
/// The most done `thadam-intent/1` intents one commit checks for deletion (each check reads
/// every snapshot summary; the rest wait for the next commit).
const DONE_MANIFEST_CHECKS: usize = 16;

/// Intents' manifests read ahead, by intent key.
type Loaded = HashMap<String, ManifestRead>;
/// An intent listed, with its data files where they are at hand (held in it, or read ahead).
type Candidate = (ObjectPath, Arc<Intent>, Option<Arc<Vec<DataFile>>>);
/// A listing read ahead of the load: the table UUID it was checked for, when, the intents, and
/// the manifests read with it (see [`Intents::prefetch`]).
type Prefetched = (String, Instant, Listed, Loaded);

/// How an intent holds its data files (see [`Intents::form_of`]).
struct IntentForm {
    /// [`FORMAT_INLINE`] (the files in the intent) or [`FORMAT`] (in a manifest).
    format: &'static str,
    manifest: ManifestRef,
    /// The files' JSON, held in the intent; empty where a manifest holds them.
    files: Vec<Box<serde_json::value::RawValue>>,
    /// The files themselves, where the intent holds them.
    decoded: Option<Arc<Vec<DataFile>>>,
}

/// A table's intents, as one committer sees them (see the module docs).
#[derive(Debug)]
pub(crate) struct Intents {
    table: String,
    own: Vec<Published>,
    memory: Memory,
    /// `commit.intents`.
    on: bool,
    /// Publishes the data files in the intent (`thadam-intent/2`); off only where a test plays
    /// a node of the releases before, which wrote a manifest and an intent naming it.
    inline: bool,
    /// The fleet key (`commit.intents_key`): intents are tagged with it, and only intents that
    /// carry its tag are taken.
    key: Option<IntentKey>,
    /// The store refused an intent (read-only keys): this node no longer publishes.
    refused: bool,
    /// Whether this committer has listed the intents once: its first commit does, lone or not,
    /// so that a node that comes back carries what the fleet left (its former self's intents
    /// among them) while it was away.
    listed: bool,
    prefetched: Option<Prefetched>,
    /// The deletes in flight (one batch at a time, behind the committer's cycle) and those
    /// waiting for the next batch (failed, or queued meanwhile).
    deleting: Option<(tokio::task::JoinHandle<Deletes>, Vec<ObjectPath>)>,
    waiting: Deletes,
    /// The intents waiting for their delete or being deleted: a listing meanwhile still finds
    /// them (done), and they are not deleted twice.
    doomed: HashSet<ObjectPath>,
    /// The UUID of the table whose intents were last listed: a table dropped and created again
    /// under the same name leaves its intents behind, which can never be carried.
    uuid: Option<String>,
}

impl Intents {
    /// `on`: `commit.intents`; off, this node neither publishes nor carries. `inline`: see the
    /// field. `key`: the fleet key, if any.
    pub(crate) fn new(table: String, on: bool, inline: bool, key: Option<IntentKey>) -> Self {
        Intents {
            table,
            own: Vec::new(),
            memory: Memory::default(),
            on,
            inline,
            key,
            refused: false,
            listed: false,
            prefetched: None,
            deleting: None,
            waiting: Deletes::default(),
            doomed: HashSet::new(),
            uuid: None,
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

    /// Publishes `batch` (segments the table lacks, fitting its schema, in catalog order) as an
    /// intent (after its manifest, for a batch too large to hold its files). Best effort: a
    /// failure leaves the segments to the next slot (and a refusal, 403, turns publishing off
    /// for the table). A PUT whose outcome is unknown (an error after the object may have been
    /// stored) counts as published, so that its manifest is never deleted while a carrier may
    /// take it: the segments go in through a carrier or, after the fallback, this node itself.
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
        let Some((record, decoded)) = self
            .record_of(url, table, batch, lane, writer, mark, now_ms)
            .await
        else {
            return;
        };
        let ids: Vec<SegmentId> = batch
            .iter()
            .map(|r| SegmentId::of(&r.segment.object_key))
            .collect();
        let seqs: Vec<u64> = batch.iter().map(|r| r.segment.seq).collect();
        let name = format!(
            "{lane}-{:020}-{}.json",
            record.max_seq,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let key = intent_dir(url, &record.table_uuid).child(name);
        let body = record.to_bytes_signed(self.key.as_ref());
        let published = match store.put(&key, body.into()).await {
            Ok(_) => true,
            Err(e) if is_refusal(&e) => {
                self.refused = true;
                tracing::warn!(table = %self.table, "the store refused to take an intent ({e}); this node no longer publishes intents for table {} and commits its segments in its own slots (give its keys write access under {DIR}/ of the url to let the fleet carry them)", self.table);
                // A definite refusal: nothing names the manifest (if there is one).
                if let Some(path) = record.manifest_path()
                    && let Err(e) = table.file_io().delete(path).await
                {
                    tracing::debug!(table = %self.table, "could not delete an unpublished intent's manifest: {e}");
                }
                false
            }
            Err(e) => self.stored_after_all(store, &key, &record, &e).await,
        };
        if !published {
            return;
        }
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
            seqs,
        });
    }

    /// The record of an intent of `batch`, and its data files when it holds them; `None` when
    /// the manifest of a large batch could not be written (the segments wait for the slot).
    #[allow(clippy::too_many_arguments)]
    async fn record_of(
        &self,
        url: &crate::config::TableRoot,
        table: &Table,
        batch: &[ReadySegment],
        lane: &str,
        writer: &str,
        mark: Option<MarkRaise>,
        now_ms: i64,
    ) -> Option<(IntentRecord, Option<Arc<Vec<DataFile>>>)> {
        let metadata = table.metadata();
        let IntentForm {
            format,
            manifest,
            files,
            decoded,
        } = self.form_of(url, table, batch).await?;
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
            log: batch_log(batch),
            min_seq: batch.iter().map(|r| r.segment.seq).min(),
            sig: None,
        };
        Some((record, decoded))
    }

    /// How an intent of `batch` holds its data files: in itself (`thadam-intent/2`, where
    /// [`Intents::inline`] and they fit), else in a manifest written now (`thadam-intent/1`).
    /// `None` when that manifest could not be written (the segments wait for this node's slot).
    async fn form_of(
        &self,
        url: &crate::config::TableRoot,
        table: &Table,
        batch: &[ReadySegment],
    ) -> Option<IntentForm> {
        let metadata = table.metadata();
        let bytes: u64 = batch.iter().map(|r| r.segment.file_size).sum();
        // The data files go in the intent itself (one PUT to publish, one GET to carry), unless
        // they are too large for one: then a manifest in the table's metadata holds them.
        let inline = if self.inline {
            inline_files(table, &url.bucket, batch)
        } else {
            None
        };
        let form = match inline {
            Some((files, json)) => IntentForm {
                format: FORMAT_INLINE,
                manifest: ManifestRef {
                    path: String::new(),
                    length: 0,
                    spec_id: metadata.default_partition_spec_id(),
                    schema_id: metadata.current_schema_id(),
                    files: files.len() as u32,
                    rows: files.iter().map(|f| f.record_count()).sum(),
                    bytes,
                    partitions: None,
                },
                files: json,
                decoded: Some(Arc::new(files)),
            },
            None => {
                match crate::table::data_files::write_inherited_manifest(table, &url.bucket, batch)
                    .await
                {
                    Ok(m) => IntentForm {
                        format: FORMAT,
                        manifest: ManifestRef {
                            path: m.manifest_path.clone(),
                            length: m.manifest_length,
                            spec_id: m.partition_spec_id,
                            schema_id: metadata.current_schema_id(),
                            files: m.added_files_count.unwrap_or(0),
                            rows: m.added_rows_count.unwrap_or(0),
                            bytes,
                            partitions: m.partitions.clone(),
                        },
                        files: Vec::new(),
                        decoded: None,
                    },
                    Err(e) => {
                        tracing::debug!(table = %self.table, "could not write an intent's manifest ({e}); the segments wait for this node's slot");
                        return None;
                    }
                }
            }
        };
        Some(form)
    }

    /// After a PUT of an intent failed with `e` (not a refusal): whether to hold it as
    /// published. One naming a manifest is, always (the manifest must outlive any commit that
    /// may take it). One holding its files is if the store has it (a HEAD), or if even that
    /// cannot be told; if the store answers it is not there, its segments are published again
    /// later (should the lost PUT still land, the second intent is carried for what the first
    /// did not hold).
    async fn stored_after_all(
        &self,
        store: &Arc<dyn ObjectStore>,
        key: &ObjectPath,
        record: &IntentRecord,
        e: &object_store::Error,
    ) -> bool {
        metrics::counter!("thadam_iceberg_intents_publish_unknown_total", "table" => self.table.clone())
            .increment(1);
        if !record.is_inline() {
            tracing::debug!(table = %self.table, key = %key, "the outcome of an intent's PUT is unknown ({e}); held as published");
            return true;
        }
        match store.head(key).await {
            Ok(_) => true,
            Err(object_store::Error::NotFound { .. }) => {
                tracing::debug!(table = %self.table, key = %key, "could not publish an intent ({e}); the segments wait for this node's slot");
                false
            }
            Err(head) => {
                tracing::debug!(table = %self.table, key = %key, "the outcome of an intent's PUT is unknown ({e}; {head}); held as published");
                true
            }
        }
    }

    /// This node's intents the table now holds, in part or whole: the seqs of their segments the
    /// table holds (another node carried them). An intent is done when its watermark, trusted
    /// against this node's log, covers it (`covered`: its log and last seq), or when the table
    /// holds all of its ids: it is forgotten and deleted.
    pub(crate) async fn carried_by_others(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        table: &Table,
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
        covered: &(dyn Fn(&str, u64) -> bool + Sync),
    ) -> HashSet<u64> {
        let mut seqs = HashSet::new();
        let mut deletes = Deletes::default();
        let mut pending = Vec::with_capacity(self.own.len());
        for p in std::mem::take(&mut self.own) {
            let record = &p.intent.record;
            let done = record.log().is_some_and(|log| covered(log, record.max_seq))
                || p.intent.ids.iter().all(holds);
            if done {
                seqs.extend(p.seqs.iter().copied());
                deletes.keys.push(p.key.clone());
                if let Some(path) = record.manifest_path()
                    && consumed_by_copy(table.metadata(), &p.intent.ids)
                {
                    deletes.manifests.push(path.to_string());
                }
            } else {
                seqs.extend(
                    p.intent
                        .ids
                        .iter()
                        .zip(&p.seqs)
                        .filter(|(id, _)| holds(id))
                        .map(|(_, seq)| *seq),
                );
                pending.push(p);
            }
        }
        self.own = pending;
        self.queue(deletes);
        self.flush(store, table);
        seqs
    }

    /// Lists and reads the intents before the attempt loads the table, so that the window
    /// between the load and the commit holds no listing: intents never change once written, and
    /// which of them to carry is decided on the loaded table ([`Intents::gather`]). The
    /// manifests of those that name one are read too (as many as hold `budget` segments, the
    /// most one commit carries), so that their files go into the commit's own manifest.
    pub(crate) async fn prefetch(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table: &Table,
        budget: usize,
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
        now_ms: i64,
    ) {
        let (uuid, listed, loaded) = self
            .list_and_read(store, url, table, budget, holds, now_ms)
            .await;
        self.prefetched = Some((uuid, Instant::now(), listed, loaded));
    }

    /// The publishers' lanes of the table's intents, each with when the store took it, for a
    /// roll call (see `fleet::roll_call`): names only, nothing read.
    pub(crate) async fn roll_call(
        &self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table_uuid: &str,
    ) -> Vec<(String, i64)> {
        listing::lanes_under(store, &intent_dir(url, table_uuid), &self.table).await
    }

    /// Lists the intents, reads the manifests of those the next commit will carry first, and
    /// notes what came of those reads: the table UUID, the intents, the manifests.
    async fn list_and_read(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table: &Table,
        budget: usize,
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
        now_ms: i64,
    ) -> (String, Listed, Loaded) {
        let metadata = table.metadata();
        let scope = Scope::of(url, metadata, self.key.as_ref());
        let uuid = scope.uuid.clone();
        let listing = self
            .memory
            .list(store, &scope, metadata, &self.table, Read::InCycle, now_ms)
            .await;
        let own: HashSet<&ObjectPath> = self.own.iter().map(|p| &p.key).collect();
        let others: Listed = listing
            .intents
            .iter()
            .filter(|(key, _)| !own.contains(key))
            .cloned()
            .collect();
        let to_read = read_order(&others, holds);
        let loaded = load_files(table, &scope.url, &to_read, budget).await;
        drop(scope);
        for (key, read) in &loaded {
            match read {
                ManifestRead::Files(_) => {}
                ManifestRead::Unreadable => {
                    metrics::counter!("thadam_iceberg_intents_unreadable_total", "table" => self.table.clone())
                        .increment(1);
                }
                ManifestRead::Forged => self.memory.skip(key, record::Skip::Forged, &self.table),
            }
        }
        self.age_out(listing.aged_out);
        self.note_table(store, url, &uuid).await;
        (uuid, listing.intents, loaded)
    }

    /// Reads the fleet's new intents into memory, choosing none: the fleet's committer does this
    /// while the catalog answers its commit (see `BatchCommit::send`), so that the next cycle's
    /// listing finds all but the latest read already.
    pub(crate) async fn warm(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        metadata: &iceberg::spec::TableMetadata,
        now_ms: i64,
    ) {
        if metadata.format_version() == FormatVersion::V1 {
            return;
        }
        let scope = Scope::of(url, metadata, self.key.as_ref());
        let listing = self
            .memory
            .list(
                store,
                &scope,
                metadata,
                &self.table,
                Read::DuringAnswer,
                now_ms,
            )
            .await;
        self.age_out(listing.aged_out);
    }

    /// Whether the last prefetch found intents of other nodes (or this node has its own).
    pub(crate) fn prefetched_any(&self) -> bool {
        self.has_own()
            || self
                .prefetched
                .as_ref()
                .is_some_and(|(_, _, listed, _)| !listed.is_empty())
    }

    /// What a commit built on `table` carries of the intents it lists (chosen by [`select()`]),
    /// and which of this node's own it withdraws: those with a segment in `own_todo` (the
    /// segments this commit registers for this node as new files). `own_property`: the
    /// watermark the commit raises itself; `budget`: the most segments carried.
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
        self.listed = true;
        let (listed, loaded) = self
            .listing_for(store, url, table, budget, holds, now_ms)
            .await;
        carried.withdrawn = self.withdrawn_by(own_todo);
        let candidates = self.candidates(listed, &loaded);
        let Selection { carry, done, marks } =
            select_of(metadata, &candidates, own_todo, holds, own_property, budget);
        carry_chosen(&mut carried, &candidates, carry);
        carried.encoded_ids = encode_id_list(&carried.ids);
        carried.marks = marks.into_iter().collect();
        tracing::debug!(
            table = %self.table,
            listed = candidates.len(),
            carried = carried.keys.len(),
            done = done.len(),
            withdrawn = carried.withdrawn.len(),
            "gathered the fleet's intents"
        );
        let done = done.into_iter().map(|i| {
            let (key, intent, _) = &candidates[i];
            (key, intent.as_ref())
        });
        self.queue(done_deletes(metadata, done, DONE_MANIFEST_CHECKS));
        self.flush(store, table);
        carried
    }

    /// The listing a commit on `table` chooses from, and the manifests read with it: this
    /// attempt's prefetch while it is fresh and of this table, else a listing made now.
    async fn listing_for(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        table: &Table,
        budget: usize,
        holds: &(dyn Fn(&SegmentId) -> bool + Sync),
        now_ms: i64,
    ) -> (Listed, Loaded) {
        let uuid = table.metadata().uuid().to_string();
        // Only this attempt's prefetch (an attempt that ended before it carried anything leaves
        // one that later intents are missing from).
        match self.prefetched.take() {
            Some((checked_for, at, listed, loaded))
                if checked_for == uuid && at.elapsed() < PREFETCH_FRESH =>
            {
                (listed, loaded)
            }
            _ => {
                let (_, listed, loaded) = self
                    .list_and_read(store, url, table, budget, holds, now_ms)
                    .await;
                (listed, loaded)
            }
        }
    }

    /// This node's pending intents that hold a segment of `own_todo`: the commit registers
    /// that segment as its own new file, so it withdraws them.
    fn withdrawn_by(&self, own_todo: &[ReadySegment]) -> Vec<Published> {
        let todo: HashSet<u64> = own_todo.iter().map(|r| r.segment.seq).collect();
        self.own
            .iter()
            .filter(|p| p.seqs.iter().any(|s| todo.contains(s)))
            .cloned()
            .collect()
    }

    /// The intents of `listed` that are not this node's own, each with its data files where
    /// they are at hand: held in the intent, or its manifest's read in `loaded`.
    fn candidates(&self, listed: Listed, loaded: &Loaded) -> Vec<Candidate> {
        let own_keys: HashSet<&ObjectPath> = self.own.iter().map(|p| &p.key).collect();
        listed
            .into_iter()
            .filter(|(key, _)| !own_keys.contains(key))
            .map(|(key, intent)| {
                let files = intent
                    .files
                    .clone()
                    .or_else(|| match loaded.get(key.as_ref()) {
                        Some(ManifestRead::Files(files)) => Some(Arc::clone(files)),
                        _ => None,
                    });
                (key, intent, files)
            })
            .collect()
    }

    /// The commit that carried `carried` landed: the intents it carried are consumed (deleted
    /// with the manifests it copied), and this node's withdrawn ones are forgotten and deleted
    /// with their manifests.
    ///
    /// The deletes run behind the committer's next cycle, one batch at a time (nothing waits on
    /// them); an intent not deleted yet is listed again and found done.
    pub(crate) async fn landed(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        table: &Table,
        carried: &Carried,
        now_ms: i64,
    ) {
        for (_, created_ms) in &carried.keys {
            metrics::histogram!("thadam_iceberg_intent_age_seconds", "table" => self.table.clone())
                .record(now_ms.saturating_sub(*created_ms).max(0) as f64 / 1000.0);
        }
        if !carried.keys.is_empty() {
            metrics::counter!("thadam_iceberg_intents_carried_total", "table" => self.table.clone(), "whose" => "other")
                .increment(carried.keys.len() as u64);
            metrics::counter!("thadam_iceberg_segments_carried_total", "table" => self.table.clone())
                .increment(carried.ids.len() as u64);
        }
        if !carried.withdrawn.is_empty() {
            metrics::counter!("thadam_iceberg_intents_carried_total", "table" => self.table.clone(), "whose" => "own")
                .increment(carried.withdrawn.len() as u64);
        }
        let withdrawn: HashSet<&ObjectPath> = carried.withdrawn.iter().map(|p| &p.key).collect();
        self.own.retain(|p| !withdrawn.contains(&p.key));
        let mut deletes = Deletes::default();
        for (key, _) in &carried.keys {
            deletes.keys.push(key.clone());
        }
        deletes.manifests.extend(carried.copied.iter().cloned());
        for p in &carried.withdrawn {
            deletes.keys.push(p.key.clone());
            // No snapshot names it, nor can any: every commit from now on is built on this one,
            // which holds its segments.
            deletes
                .manifests
                .extend(p.intent.record.manifest_path().map(str::to_string));
        }
        self.finish_in_flight().await;
        self.queue(deletes);
        self.flush(store, table);
    }

    /// Waits for the deletes in flight, then deletes what still waits: when the committer stops.
    pub(crate) async fn settle(&mut self, store: &Arc<dyn ObjectStore>, table: Option<&Table>) {
        self.finish_in_flight().await;
        if let Some(table) = table
            && !self.waiting.is_empty()
        {
            let deletes = std::mem::take(&mut self.waiting);
            let failed = cleanup::run(
                Arc::clone(store),
                table.file_io().clone(),
                deletes,
                self.table.clone(),
            )
            .await;
            self.waiting = failed;
        }
    }

    /// Queues this release's unusable intents that aged out for deletion.
    fn age_out(&mut self, mut keys: Vec<ObjectPath>) {
        keys.retain(|key| !self.doomed.contains(key));
        if keys.is_empty() {
            return;
        }
        metrics::counter!("thadam_iceberg_intents_aged_out_total", "table" => self.table.clone())
            .increment(keys.len() as u64);
        self.queue(Deletes {
            keys,
            manifests: Vec::new(),
        });
    }

    /// Notes the UUID of the table listed: when another table took the name (dropped and
    /// created again), the old table's intents can never be carried, and are deleted.
    async fn note_table(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        url: &crate::config::TableRoot,
        uuid: &str,
    ) {
        let old = match self.uuid.replace(uuid.to_string()) {
            Some(old) if old != uuid => old,
            _ => return,
        };
        use futures::TryStreamExt;
        let keys: Vec<ObjectPath> = match store
            .list(Some(&intent_dir(url, &old)))
            .map_ok(|m| m.location)
            .try_collect()
            .await
        {
            Ok(keys) => keys,
            Err(e) => {
                tracing::debug!(table = %self.table, "could not list the intents of the table this one replaced: {e}");
                return;
            }
        };
        if !keys.is_empty() {
            tracing::info!(table = %self.table, intents = keys.len(), "deleting the intents of the table this one replaced (dropped and created again)");
            self.queue(Deletes {
                keys,
                manifests: Vec::new(),
            });
        }
    }

    /// Queues `deletes`, but for intents queued or being deleted already.
    fn queue(&mut self, mut deletes: Deletes) {
        deletes.keys.retain(|key| self.doomed.insert(key.clone()));
        self.waiting.extend(deletes);
    }

    /// Starts deleting what waits, unless a batch is still in flight (it goes with the next).
    fn flush(&mut self, store: &Arc<dyn ObjectStore>, table: &Table) {
        if self
            .deleting
            .as_ref()
            .is_some_and(|(task, _)| !task.is_finished())
        {
            return;
        }
        if let Some((task, keys)) = self.deleting.take() {
            // Finished: this does not wait.
            let failed = futures::FutureExt::now_or_never(task).and_then(Result::ok);
            self.batch_done(keys, failed);
        }
        if self.waiting.is_empty() {
            return;
        }
        let deletes = std::mem::take(&mut self.waiting);
        let keys = deletes.keys.clone();
        let task = tokio::spawn(cleanup::run(
            Arc::clone(store),
            table.file_io().clone(),
            deletes,
            self.table.clone(),
        ));
        self.deleting = Some((task, keys));
    }

    /// Waits for the batch of deletes in flight; what failed waits for the next.
    async fn finish_in_flight(&mut self) {
        if let Some((task, keys)) = self.deleting.take() {
            let failed = match task.await {
                Ok(failed) => Some(failed),
                Err(e) => {
                    tracing::debug!(table = %self.table, "the deletes of carried intents did not finish: {e}");
                    None
                }
            };
            self.batch_done(keys, failed);
        }
    }

    /// A batch of deletes of `keys` ended: what `failed` goes again with the next; the rest is
    /// gone (an interrupted batch's keys are found done and queued again at a later listing).
    fn batch_done(&mut self, keys: Vec<ObjectPath>, failed: Option<Deletes>) {
        for key in &keys {
            self.doomed.remove(key);
        }
        if let Some(failed) = failed {
            self.queue(failed);
        }
    }
}

/// [`select()`] over `candidates` for a commit on the table of `metadata`: the commit reserves
/// the segments of `own_todo` and raises `own_property` itself; a candidate fits where its
/// files were read and were described under the default spec and a schema the table has.
fn select_of(
    metadata: &TableMetadata,
    candidates: &[Candidate],
    own_todo: &[ReadySegment],
    holds: &(dyn Fn(&SegmentId) -> bool + Sync),
    own_property: Option<&str>,
    budget: usize,
) -> Selection {
    let reserved: HashSet<SegmentId> = own_todo
        .iter()
        .map(|r| SegmentId::of(&r.segment.object_key))
        .collect();
    let properties = metadata.properties();
    let mark = |p: &str| properties.get(p).and_then(|v| mark_seq(v));
    let default_spec = metadata.default_partition_spec_id();
    // Its files go into the commit's own manifest, written with the default spec.
    let fits = |i: usize| {
        let (_, intent, files) = &candidates[i];
        files.is_some()
            && intent.record.manifest.spec_id == default_spec
            && metadata
                .schema_by_id(intent.record.manifest.schema_id)
                .is_some()
    };
    let views: Vec<&Intent> = candidates.iter().map(|(_, i, _)| i.as_ref()).collect();
    select(
        &views,
        &Context {
            holds,
            mark_seq: &mark,
            fits: &fits,
            reserved: &reserved,
            own_property,
            budget,
        },
    )
}

/// Adds the `carry` chosen of `candidates` to `carried`: the files and ids of the segments
/// taken, the manifest copied (`thadam-intent/1`), the intent's key, its lane, and the guard of
/// its watermark (an empty property where it has none).
fn carry_chosen(carried: &mut Carried, candidates: &[Candidate], carry: Vec<Chosen>) {
    for Chosen { index, take } in carry {
        let (key, intent, files) = &candidates[index];
        let Some(files) = files else { continue };
        for &k in &take {
            carried.files.push(files[k].clone());
            carried.ids.push(intent.ids[k]);
        }
        let record = &intent.record;
        if let Some(path) = record.manifest_path() {
            carried.copied.push(path.to_string());
        }
        carried.keys.push((key.clone(), record.created_ms));
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

/// Whether a store's answer refuses a request for good (its keys may not do it).
fn is_refusal(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    )
}

/// The log of `batch`: the catalog of its segments, where they all have the same one (as a
/// committer's segments always do).
fn batch_log(batch: &[ReadySegment]) -> Option<String> {
    batch
        .first()
        .and_then(|r| r.segment.catalog_id.clone())
        .filter(|log| {
            batch
                .iter()
                .all(|r| r.segment.catalog_id.as_deref() == Some(log))
        })
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
    let files = crate::table::data_files::inherited_files(table, bucket, batch).ok()?;
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

#[cfg(test)]
mod tests;
