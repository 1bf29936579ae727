//! Finding and reading a table's intents: the listing of its intent directory, page by page and
//! bounded per cycle; the memory of what was read (an intent never changes once written) and of
//! what was skipped (junk, foreign and forged keys cost one read, then nothing but their place in
//! the listing); and the reads of the manifests of `thadam-intent/1` intents, checked against
//! their ids before anything of them is carried.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use iceberg::spec::{DataFile, Manifest, ManifestStatus, TableMetadata};
use iceberg::table::Table;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use super::record::{self, Expect, Intent, Skip, Undecoded, decode_files, file_key};
use super::select;
use super::signing::IntentKey;
use crate::runtime::warn_once;
use crate::table::committed::SegmentId;

/// The directory of a table's intents, under the fleet's `url` prefix.
pub(crate) const DIR: &str = "_thadam-intents";
/// The most keys one listing goes through (ten pages of S3's LIST): past it, the next listing
/// goes on where this one stopped. Junk that sorts first hides nothing below it.
pub(crate) const LIST_BUDGET: usize = 10_000;
/// The most intents of other nodes remembered (read once, they never change), and the most bytes
/// of their bodies. Past either, intents are read again at each listing until the commits have
/// taken enough of them.
const READ_LIMIT: usize = 4_096;
const READ_BYTES: u64 = 16 << 20;
/// The most skipped keys remembered (8 bytes each): junk past it is read again at each listing.
const SKIPPED_LIMIT: usize = 100_000;
/// How many intents (or manifests) are read at once: a listing reads at most this many per
/// round trip to the store, so it bounds what the committer carries from a store far away
/// (8 at a time with S3 100 ms away was 80 intents a second, less than 128 nodes publish at one
/// segment a second each, and the fleet never caught up). Each is a small GET.
const READ_CONCURRENCY: usize = 32;
/// The most intents one listing reads, the oldest first; the rest wait for the next listing
/// (each cycle's listing reads on where this one stopped, as the commits take the oldest
/// first). A commit carries at most `commit.max_segments` (500) segments, so more reads than
/// that would only wait; unbounded, a listing of a fleet whose intents piled up (128 nodes
/// with S3 100 ms away, several committing at their start) read thousands each, 8 at a time,
/// for minutes, and every node that committed read them all.
pub(crate) const READS_PER_LISTING: usize = 512;
/// An intent of this release's formats that can never be carried (malformed, foreign, forged,
/// unsigned: see [`Skip::ages_out`]) is deleted by whoever lists it once the store has held it
/// this long: long enough for an operator to see the warning and the metric, and for a node
/// being given the fleet key to restart.
pub(crate) const AGE_OUT_MS: i64 = 3_600_000;

/// When intents were read (`thadam_iceberg_intents_read_total{when}`): inside a commit's cycle
/// (a listing ahead of the load or the build, which the commit waits for), or while the catalog
/// answered the commit before (see `Intents::warm`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Read {
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

/// Listed intents, by key, in listing order.
pub(super) type Listed = Vec<(ObjectPath, Arc<Intent>)>;

/// What a listing found: the intents that can be carried, and keys to delete (this release's
/// unusable intents, old enough).
#[derive(Debug, Default)]
pub(super) struct Listing {
    pub intents: Listed,
    pub aged_out: Vec<ObjectPath>,
}

/// Where a table's intents lie and what they are checked against: the table's UUID, the fleet's
/// `url`, the table's metadata directory, the fleet key.
pub(super) struct Scope<'k> {
    pub uuid: String,
    pub url: String,
    pub metadata_root: String,
    pub dir: ObjectPath,
    pub key: Option<&'k IntentKey>,
}

impl<'k> Scope<'k> {
    pub(super) fn of(
        url: &crate::config::TableRoot,
        metadata: &TableMetadata,
        key: Option<&'k IntentKey>,
    ) -> Scope<'k> {
        let uuid = metadata.uuid().to_string();
        Scope {
            dir: intent_dir(url, &uuid),
            uuid,
            url: url.uri(),
            metadata_root: format!("{}/metadata", metadata.location().trim_end_matches('/')),
            key,
        }
    }

    pub(super) fn expect(&self) -> Expect<'_> {
        Expect {
            table_uuid: &self.uuid,
            url: &self.url,
            metadata_root: &self.metadata_root,
            key: self.key,
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

/// What a committer remembers of the intents it listed (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Memory {
    read: HashMap<String, (Arc<Intent>, u64)>,
    /// The bytes of the intents in `read`.
    read_bytes: u64,
    /// Keys skipped (by a hash of the key), and whether they age out.
    skipped: HashMap<u64, bool>,
    /// Where the next listing starts, when the last one stopped at [`LIST_BUDGET`].
    resume: Option<ObjectPath>,
}

fn key_hash(key: &str) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

impl Memory {
    /// Remembers `key` as skipped for `why`, counted and warned about once.
    pub(super) fn skip(&mut self, key: &str, why: Skip, table: &str) {
        if let Some((_, size)) = self.read.remove(key) {
            self.read_bytes = self.read_bytes.saturating_sub(size);
        }
        metrics::counter!("thadam_iceberg_intents_skipped_total", "table" => table.to_string(), "reason" => why.label())
            .increment(1);
        tracing::warn!(
            table,
            key,
            reason = why.label(),
            "skipping an intent that cannot be carried (it is never committed; see the fleet trust model in docs/fleets.md)"
        );
        if self.skipped.len() < SKIPPED_LIMIT {
            self.skipped.insert(key_hash(key), why.ages_out());
        }
    }

    /// After a whole pass listing `metas`: what is no longer listed is gone for good (intents
    /// are never written twice under one key), read or skipped.
    fn forget_unlisted(&mut self, metas: &[object_store::ObjectMeta]) {
        let listed: HashSet<&str> = metas.iter().map(|m| m.location.as_ref()).collect();
        let mut forgotten = 0;
        self.read.retain(|k, (_, size)| {
            let kept = listed.contains(k.as_str());
            if !kept {
                forgotten += *size;
            }
            kept
        });
        self.read_bytes = self.read_bytes.saturating_sub(forgotten);
        let hashes: HashSet<u64> = listed.iter().map(|k| key_hash(k)).collect();
        self.skipped.retain(|hash, _| hashes.contains(hash));
    }

    /// Lists the intents under `scope.dir` (up to [`LIST_BUDGET`] keys, going on next time where
    /// it stopped), reading each new one once (`when`: for the metric). `now_ms`: this node's
    /// clock, against the store's stamps, for what ages out.
    pub(super) async fn list(
        &mut self,
        store: &Arc<dyn ObjectStore>,
        scope: &Scope<'_>,
        metadata: &TableMetadata,
        table: &str,
        when: Read,
        now_ms: i64,
    ) -> Listing {
        let from_start = self.resume.is_none();
        let stream = match self.resume.take() {
            Some(after) => store.list_with_offset(Some(&scope.dir), &after),
            None => store.list(Some(&scope.dir)),
        };
        let metas: Vec<object_store::ObjectMeta> =
            match stream.take(LIST_BUDGET).try_collect::<Vec<_>>().await {
                Ok(metas) => metas,
                Err(e) => {
                    list_failed(&e, &scope.dir, table);
                    return Listing::default();
                }
            };
        if metas.len() == LIST_BUDGET {
            self.resume = metas.last().map(|m| m.location.clone());
        } else if from_start {
            self.forget_unlisted(&metas);
        }
        let mut listing = Listing::default();
        let mut fresh = Vec::new();
        for meta in &metas {
            match self.skipped.get(&key_hash(meta.location.as_ref())) {
                Some(true) if now_ms - meta.last_modified.timestamp_millis() > AGE_OUT_MS => {
                    listing.aged_out.push(meta.location.clone());
                }
                Some(_) => {}
                None if self.read.contains_key(meta.location.as_ref()) => {}
                None => fresh.push(meta.clone()),
            }
        }
        fresh.sort_by_key(|meta| meta.last_modified);
        fresh.truncate(READS_PER_LISTING);
        let expect = scope.expect();
        let fetched: Vec<(object_store::ObjectMeta, Option<Result<Intent, Skip>>)> =
            futures::stream::iter(fresh)
                .map(|meta| async move {
                    let parsed = read_one(store, &meta, expect, metadata, table).await;
                    (meta, parsed)
                })
                .buffered(READ_CONCURRENCY)
                .collect()
                .await;
        let read = fetched.iter().filter(|(_, p)| p.is_some()).count();
        if read > 0 {
            metrics::counter!("thadam_iceberg_intents_read_total", "table" => table.to_string(), "when" => when.label())
                .increment(read as u64);
        }
        // Read now but not remembered (the memory is full).
        let mut unremembered: HashMap<String, Arc<Intent>> = HashMap::new();
        for (meta, parsed) in fetched {
            match parsed {
                // Unreadable now (consumed meanwhile, or a transient failure): read again later.
                None => {}
                Some(Err(why)) => self.skip(meta.location.as_ref(), why, table),
                Some(Ok(intent)) => {
                    let intent = Arc::new(intent);
                    if self.read.len() < READ_LIMIT && self.read_bytes + meta.size <= READ_BYTES {
                        self.read_bytes += meta.size;
                        self.read
                            .insert(meta.location.to_string(), (intent, meta.size));
                    } else {
                        unremembered.insert(meta.location.to_string(), intent);
                    }
                }
            }
        }
        for meta in metas {
            let name = meta.location.as_ref();
            let intent = match self.read.get(name) {
                Some((intent, _)) => Arc::clone(intent),
                None => match unremembered.remove(name) {
                    Some(intent) => intent,
                    None => continue,
                },
            };
            listing.intents.push((meta.location, intent));
        }
        listing
    }
}

/// The publishers' lanes of the intents under `dir`, from their keys (`<lane>-<seq>-<id>.json`),
/// each with when the store took it (ms, the store's clock): the roll call's answers (see
/// `fleet::roll_call`). Names only, up to [`LIST_BUDGET`] keys: a fleet of N nodes calling the
/// roll at once would read N² intents otherwise.
pub(super) async fn lanes_under(
    store: &Arc<dyn ObjectStore>,
    dir: &ObjectPath,
    table: &str,
) -> Vec<(String, i64)> {
    match store
        .list(Some(dir))
        .take(LIST_BUDGET)
        .try_collect::<Vec<_>>()
        .await
    {
        Ok(metas) => metas
            .iter()
            .filter_map(|meta| {
                let name = meta.location.filename()?;
                let lane = name.split('-').next()?;
                Some((lane.to_string(), meta.last_modified.timestamp_millis()))
            })
            .collect(),
        Err(e) => {
            list_failed(&e, dir, table);
            Vec::new()
        }
    }
}

/// Says why a listing failed: a refusal (which does not go away by itself) once, anything else
/// at debug level.
fn list_failed(e: &object_store::Error, dir: &ObjectPath, table: &str) {
    let refused = matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    );
    if refused && warn_once::first_time("intents-list", table.to_string()) {
        tracing::warn!(
            table,
            "the store refused to list the fleet's intents under {dir} ({e}); this node commits without carrying them (give its keys list access under {DIR}/ of the url)"
        );
    } else {
        tracing::debug!(
            table,
            "could not list the fleet's intents ({e}); committing without them"
        );
    }
}

/// Reads and checks one listed intent: `None` when it cannot be read now (consumed meanwhile by
/// another carrier, a transient failure, or written on a newer table than the one held: it is
/// listed and read again next time).
async fn read_one(
    store: &Arc<dyn ObjectStore>,
    meta: &object_store::ObjectMeta,
    expect: Expect<'_>,
    metadata: &TableMetadata,
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

/// The listed intents a carrier reads ahead, in the order it reads them: [`select::priority`]'s,
/// without those all of whose segments the table held already has.
pub(super) fn read_order<'a>(
    listed: &'a [(ObjectPath, Arc<Intent>)],
    holds: &(dyn Fn(&SegmentId) -> bool + Sync),
) -> Vec<&'a (ObjectPath, Arc<Intent>)> {
    let mut order: Vec<&(ObjectPath, Arc<Intent>)> = listed
        .iter()
        .filter(|(_, intent)| !intent.ids.iter().all(holds))
        .collect();
    order.sort_by_cached_key(|(_, intent)| select::priority(intent));
    order
}

/// What reading a `thadam-intent/1` intent's manifest gave.
#[derive(Debug, Clone)]
pub(super) enum ManifestRead {
    /// Its data files, in the order of the intent's ids.
    Files(Arc<Vec<DataFile>>),
    /// It could not be read now: the intent waits (its publisher commits it at its fallback).
    Unreadable,
    /// It does not hold exactly the intent's files as a publisher writes them (added, nothing
    /// inherited yet, one per id, each the file of its id's key): the intent is never carried.
    Forged,
}

/// The manifests of `listed` intents that name one, read a few at a time, in the order given,
/// as long as their intents hold at most `budget` segments in all.
pub(super) async fn load_files(
    table: &Table,
    url: &str,
    listed: &[&(ObjectPath, Arc<Intent>)],
    budget: usize,
) -> HashMap<String, ManifestRead> {
    let mut room = budget;
    let chosen: Vec<(String, Arc<Intent>)> = listed
        .iter()
        .take_while(|(_, intent)| {
            let files = intent.ids.len();
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
                let outcome = match read.and_then(|bytes| Manifest::parse_avro(&bytes)) {
                    Ok(manifest) => as_published(manifest, &intent, url),
                    Err(e) => {
                        tracing::debug!(
                            path,
                            "could not read an intent's manifest ({e}); it waits"
                        );
                        ManifestRead::Unreadable
                    }
                };
                (key, outcome)
            }
        })
        .buffer_unordered(READ_CONCURRENCY)
        .collect()
        .await
}

/// The data files of `manifest` in the order of `intent`'s ids, when it holds exactly them as a
/// publisher writes them (see [`ManifestRead::Forged`]).
fn as_published(manifest: Manifest, intent: &Intent, url: &str) -> ManifestRead {
    let (entries, _) = manifest.into_parts();
    if entries.len() != intent.ids.len() {
        return ManifestRead::Forged;
    }
    let mut by_id: HashMap<SegmentId, DataFile> = HashMap::with_capacity(entries.len());
    for entry in &entries {
        let fresh = entry.status() == ManifestStatus::Added
            && entry.snapshot_id().is_none()
            && entry.sequence_number().is_none();
        let Some(key) = file_key(entry.data_file().file_path(), url) else {
            return ManifestRead::Forged;
        };
        if !fresh
            || by_id
                .insert(SegmentId::of(key), entry.data_file().clone())
                .is_some()
        {
            return ManifestRead::Forged;
        }
    }
    let files: Option<Vec<DataFile>> = intent.ids.iter().map(|id| by_id.remove(id)).collect();
    match files {
        Some(files) => ManifestRead::Files(Arc::new(files)),
        None => ManifestRead::Forged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use record::tests::{expect, record};

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
        let intent = |lane: &str, keys: &[&str], seq: u64, created: i64| {
            let mut r = record(lane, keys, seq, None);
            r.created_ms = created;
            Arc::new(parse_ok(&r.to_bytes()))
        };
        // Listed in key order; "a" is in the table already (carried, not yet deleted).
        let listed: Listed = vec![
            (ObjectPath::from("i/0"), intent("a", &["a1"], 1, 10)),
            (ObjectPath::from("i/1"), intent("c", &["c1"], 1, 30)),
            (ObjectPath::from("i/2"), intent("b", &["b2"], 2, 20)),
            (ObjectPath::from("i/4"), intent("b", &["b1"], 1, 20)),
        ];
        let held = SegmentId::of("a1");
        let holds = |id: &SegmentId| *id == held;
        let order: Vec<&str> = read_order(&listed, &holds)
            .into_iter()
            .map(|(key, _)| key.as_ref())
            .collect();
        // The oldest first (then by lane and seq), as `select` takes them.
        assert_eq!(order, ["i/4", "i/2", "i/1"]);
    }

    fn parse_ok(bytes: &[u8]) -> Intent {
        record::parse(bytes, expect()).expect("parses")
    }
}
