//! The [`CommittedSet`]: whether a segment is already in the table, decided from the ids its
//! snapshots list, the keys lately registered, the live data files when listed, and the
//! watermarks of its catalog.

use std::collections::{HashMap, HashSet};

use iceberg::spec::TableMetadata;

use super::id_set::{IdSet, RecentKeys};
use super::ids::{SegmentId, decode_ids};
use super::watermark::{Mark, MarkState, decode_mark, encode_mark, parse_mark_key};
use crate::protocol::segment::UploadedSegment;
use crate::table::summary_keys::SEGMENT_IDS;
use crate::table::summary_keys::WATERMARK_PREFIX;

/// Whether a segment is already in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Registered,
    Missing,
    /// A watermark of its catalog has not been checked against the log yet.
    Unchecked,
    /// Its catalog diverged from a watermark that would have covered it, and the table's live
    /// data files have not been listed yet: only they can tell.
    NeedsLiveFiles,
}

#[derive(Debug, Default, Clone)]
pub struct CommittedSet {
    ids: IdSet,
    /// Catalog id -> its watermarks (the base one and forks).
    marks: HashMap<String, Vec<Mark>>,
    /// Verdicts by (property key, value), kept across rebuilds while the table holds that value:
    /// a value is checked once. Bounded by the watermark properties (plus the one being written).
    verdicts: HashMap<(String, String), MarkState>,
    /// Ids of the object keys of the table's live data files, when they had to be listed.
    live: Option<HashSet<SegmentId>>,
    /// The fork key this process registers under, per catalog, once it had to start one.
    forks: HashMap<String, String>,
    /// Keys registered or found registered lately, whatever retention expires since: the
    /// committer notes each segment the table holds (`note_registered`), whichever way it learnt.
    recent: RecentKeys,
}

impl CommittedSet {
    pub fn from_metadata(metadata: &TableMetadata) -> CommittedSet {
        let mut set = CommittedSet::default();
        set.refresh(metadata);
        set
    }

    /// Rebuilds the ids and watermarks from `metadata` (a newer version of the same table, or
    /// another table altogether), keeping the verdicts already reached for unchanged values.
    pub(crate) fn refresh(&mut self, metadata: &TableMetadata) {
        self.refresh_with(
            metadata.snapshots().filter_map(|snapshot| {
                snapshot
                    .summary()
                    .additional_properties
                    .get(SEGMENT_IDS)
                    .map(String::as_str)
            }),
            metadata.properties(),
        );
    }

    /// [`CommittedSet::refresh`] from the snapshots' [`SEGMENT_IDS`] values and the table's
    /// properties, for a table loaded with its history cut (`catalog::rest::recent`).
    pub(crate) fn refresh_with<'a>(
        &mut self,
        segment_ids: impl Iterator<Item = &'a str>,
        properties: &HashMap<String, String>,
    ) {
        self.ids = IdSet::from_ids(segment_ids.flat_map(decode_ids));
        self.refresh_marks(properties);
    }

    /// Rebuilds the watermarks alone (after our own commit: the ids are known, and rebuilding
    /// them would cost a pass over every snapshot per commit).
    pub(crate) fn refresh_marks(&mut self, properties: &HashMap<String, String>) {
        self.marks.clear();
        // Verdicts on values the table no longer holds can never be asked for again (a
        // watermark only moves up): without this, every commit would leave one behind.
        self.verdicts
            .retain(|(key, value), _| properties.get(key) == Some(value));
        for (key, value) in properties {
            let Some((catalog, _fork)) = parse_mark_key(key) else {
                continue;
            };
            let Some((seq, fingerprint)) = decode_mark(value) else {
                tracing::warn!(property = %key, "ignoring a watermark property that does not parse");
                continue;
            };
            let state = match fingerprint {
                // Written before watermarks were bound: it cannot be checked.
                None => MarkState::Diverged,
                Some(_) => self
                    .verdicts
                    .get(&(key.clone(), value.clone()))
                    .copied()
                    .unwrap_or(MarkState::Unchecked),
            };
            self.marks
                .entry(catalog.to_string())
                .or_default()
                .push(Mark {
                    key: key.clone(),
                    value: value.clone(),
                    seq,
                    fingerprint,
                    state,
                });
        }
    }

    /// Forgets what only the table it replaces could answer (another table took its name): its
    /// live data files and the keys lately found in it.
    pub(crate) fn forget_replaced_table(&mut self) {
        self.live = None;
        self.recent = RecentKeys::default();
    }

    /// Notes that the table holds `segment`'s key (registered or found registered), so that a
    /// later record of the key is known after its snapshot is expired (see [`RecentKeys`]).
    pub(crate) fn note_registered(&mut self, segment: &UploadedSegment) {
        self.recent.note(SegmentId::of(&segment.object_key));
    }

    /// Whether the key of `id` is known to be in the table from ids alone: a snapshot summary,
    /// the live data files when listed, or a key lately registered or found registered.
    pub(crate) fn holds_id(&self, id: &SegmentId) -> bool {
        self.ids.contains(id)
            || self.recent.contains(id)
            || self.live.as_ref().is_some_and(|l| l.contains(id))
    }

    /// The watermarks of `catalog` not yet checked against the log.
    pub(crate) fn unchecked(&self, catalog: &str) -> Vec<Mark> {
        self.marks
            .get(catalog)
            .into_iter()
            .flatten()
            .filter(|m| m.state == MarkState::Unchecked)
            .cloned()
            .collect()
    }

    /// Records the outcome of checking a watermark against the log.
    pub(crate) fn settle(&mut self, mark: &Mark, state: MarkState) {
        self.verdicts
            .insert((mark.key.clone(), mark.value.clone()), state);
        for m in self.marks.values_mut().flatten() {
            if m.key == mark.key && m.value == mark.value {
                m.state = state;
            }
        }
    }

    /// Takes the ids of the table's live data files (see [`Decision::NeedsLiveFiles`]).
    pub(crate) fn set_live_files(&mut self, ids: HashSet<SegmentId>) {
        self.live = Some(ids);
    }

    pub(crate) fn decide(&self, segment: &UploadedSegment) -> Decision {
        let id = SegmentId::of(&segment.object_key);
        if self.holds_id(&id) {
            return Decision::Registered;
        }
        let Some(marks) = segment.catalog_id.as_ref().and_then(|c| self.marks.get(c)) else {
            return Decision::Missing;
        };
        let covering = marks.iter().filter(|m| segment.seq <= m.seq);
        let mut decision = Decision::Missing;
        for m in covering {
            match m.state {
                MarkState::Trusted => return Decision::Registered,
                MarkState::Unchecked => decision = Decision::Unchecked,
                MarkState::Diverged if self.live.is_none() && decision == Decision::Missing => {
                    decision = Decision::NeedsLiveFiles
                }
                MarkState::Diverged => {}
            }
        }
        decision
    }

    /// Whether the table holds `segment`, decided by its file alone, never by a watermark: for a
    /// segment that was quarantined, which a watermark may have passed without it (see
    /// `table::quarantine`). Its key in a snapshot summary or among the live files is
    /// registered; when any watermark of its catalog covers its seq, its snapshot may have been
    /// expired, so the live data files must tell; otherwise it is missing.
    pub(crate) fn decide_by_files(&self, segment: &UploadedSegment) -> Decision {
        let id = SegmentId::of(&segment.object_key);
        if self.holds_id(&id) {
            return Decision::Registered;
        }
        if self.live.is_some() {
            return Decision::Missing;
        }
        let covered = segment
            .catalog_id
            .as_ref()
            .and_then(|c| self.marks.get(c))
            .is_some_and(|marks| marks.iter().any(|m| segment.seq <= m.seq));
        if covered {
            Decision::NeedsLiveFiles
        } else {
            Decision::Missing
        }
    }

    /// Whether the table already holds `segment`: its key is in a snapshot summary (or among the
    /// live files), or a trusted watermark of its catalog covers its sequence number. Anything
    /// undecided counts as not contained.
    pub fn contains(&self, segment: &UploadedSegment) -> bool {
        self.decide(segment) == Decision::Registered
    }

    /// Whether a trusted watermark of `catalog` covers `seq` (every segment of that log at or
    /// below it is in the table, whatever retention expired since).
    pub(crate) fn covered(&self, catalog: &str, seq: u64) -> bool {
        self.marks.get(catalog).is_some_and(|marks| {
            marks
                .iter()
                .any(|m| m.state == MarkState::Trusted && seq <= m.seq)
        })
    }

    #[cfg(test)]
    /// The highest trusted watermark of `catalog`, if any.
    pub(crate) fn watermark(&self, catalog_id: &str) -> Option<u64> {
        self.own_mark(catalog_id).map(|m| m.seq)
    }

    /// The watermark this registrar continues: the trusted one with the highest seq.
    fn own_mark(&self, catalog: &str) -> Option<&Mark> {
        self.marks
            .get(catalog)?
            .iter()
            .filter(|m| m.state == MarkState::Trusted)
            .max_by_key(|m| m.seq)
    }

    /// The watermark property to set in the commit of `batch` (segments in catalog order, all
    /// of one catalog), if its segments carry a catalog id: the trusted watermark this log
    /// continues, or the base key for a catalog the table has never seen, or else a new fork
    /// (this log diverged from every watermark the table holds for its id). Never moves a mark
    /// down.
    pub fn watermark_update(&mut self, batch: &[&UploadedSegment]) -> Option<(String, String)> {
        let first = batch.first()?;
        let catalog = first.catalog_id.as_ref()?;
        if !batch.iter().all(|s| s.catalog_id.as_ref() == Some(catalog)) {
            return None;
        }
        let top = batch.iter().max_by_key(|s| s.seq)?;
        let key = match self.own_mark(catalog) {
            Some(mark) if mark.seq >= top.seq => return None,
            Some(mark) => mark.key.clone(),
            None if !self.marks.contains_key(catalog) => format!("{WATERMARK_PREFIX}{catalog}"),
            None => self
                .forks
                .entry(catalog.clone())
                .or_insert_with(|| {
                    let fork = &uuid::Uuid::new_v4().simple().to_string()[..12];
                    format!("{WATERMARK_PREFIX}{catalog}.{fork}")
                })
                .clone(),
        };
        Some((key, encode_mark(top)))
    }

    /// Records a successful commit of `segments`, which set the watermark `written` (its
    /// verdict is known: it was written for our own record).
    pub(crate) fn record<'a>(
        &mut self,
        segments: impl IntoIterator<Item = &'a UploadedSegment>,
        written: Option<&(String, String)>,
    ) {
        for s in segments {
            self.ids.insert(SegmentId::of(&s.object_key));
        }
        if let Some((key, value)) = written {
            self.verdicts
                .insert((key.clone(), value.clone()), MarkState::Trusted);
        }
    }

    /// Records the ids of other nodes' segments a commit of ours carried (fleet intents).
    pub(crate) fn record_ids(&mut self, ids: &[SegmentId]) {
        for id in ids {
            self.ids.insert(*id);
        }
    }

    /// Forgets the ids of snapshots this committer expired (see `table::retention`), so that
    /// the set stays as large as the snapshots the table keeps. Safe: a snapshot is expired only
    /// while the watermark it was written under covers it, and that watermark answers for its
    /// segments from then on (exactly what a rebuild from the metadata would see).
    pub(crate) fn forget(&mut self, ids: &[SegmentId]) {
        self.ids.remove_all(ids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::committed::id_set::RECENT_KEYS;
    use crate::table::committed::test_segment as seg;

    fn set_with(props: &[(String, String)]) -> CommittedSet {
        let mut set = CommittedSet::default();
        set.refresh_marks(&props.iter().cloned().collect());
        set
    }

    #[test]
    fn an_unchecked_watermark_decides_nothing_and_a_trusted_one_covers_below() {
        let w = seg(20, "k20");
        let mut set = set_with(&[(format!("{WATERMARK_PREFIX}log"), encode_mark(&w))]);
        assert_eq!(set.decide(&seg(11, "new")), Decision::Unchecked);
        assert_eq!(set.decide(&seg(21, "later")), Decision::Missing);
        let mark = set.unchecked("log").remove(0);
        set.settle(&mark, MarkState::Trusted);
        assert_eq!(set.decide(&seg(11, "new")), Decision::Registered);
        assert_eq!(set.decide(&seg(21, "later")), Decision::Missing);
    }

    #[test]
    fn a_diverged_watermark_covers_nothing_and_asks_for_the_live_files() {
        let w = seg(20, "k20");
        let mut set = set_with(&[(format!("{WATERMARK_PREFIX}log"), encode_mark(&w))]);
        let mark = set.unchecked("log").remove(0);
        set.settle(&mark, MarkState::Diverged);
        assert_eq!(set.decide(&seg(11, "new")), Decision::NeedsLiveFiles);
        set.set_live_files(HashSet::from([SegmentId::of("old")]));
        assert_eq!(set.decide(&seg(11, "new")), Decision::Missing);
        assert_eq!(set.decide(&seg(3, "old")), Decision::Registered);
        // Its registrations go under a fork of their own, never the diverged key.
        let (key, value) = set.watermark_update(&[&seg(11, "new")]).expect("update");
        assert!(key.starts_with(&format!("{WATERMARK_PREFIX}log.")), "{key}");
        assert_eq!(value, encode_mark(&seg(11, "new")));
        let (again, _) = set.watermark_update(&[&seg(12, "n2")]).expect("update");
        assert_eq!(again, key, "one fork per process and catalog");
    }

    #[test]
    fn verdicts_survive_a_rebuild_and_new_values_are_checked_again() {
        let key = format!("{WATERMARK_PREFIX}log");
        let mut set = set_with(&[(key.clone(), encode_mark(&seg(20, "k20")))]);
        let mark = set.unchecked("log").remove(0);
        set.settle(&mark, MarkState::Trusted);
        set.refresh_marks(&HashMap::from([(
            key.clone(),
            encode_mark(&seg(20, "k20")),
        )]));
        assert!(set.unchecked("log").is_empty());
        set.refresh_marks(&HashMap::from([(
            key.clone(),
            encode_mark(&seg(30, "k30")),
        )]));
        assert_eq!(set.unchecked("log").len(), 1, "another writer moved it");
    }

    #[test]
    fn verdicts_do_not_pile_up_one_per_commit() {
        let mut set = CommittedSet::default();
        for seq in 1..=1000 {
            let batch = [seg(seq, &format!("k{seq}"))];
            let written = set
                .watermark_update(&batch.iter().collect::<Vec<_>>())
                .expect("mark");
            set.record(batch.iter(), Some(&written));
            set.refresh_marks(&HashMap::from([written]));
        }
        assert_eq!(set.verdicts.len(), 1, "only the value the table holds");
        assert_eq!(set.watermark("log"), Some(1000), "and it is still trusted");
    }

    #[test]
    fn a_legacy_bare_watermark_is_never_trusted() {
        let set = set_with(&[(format!("{WATERMARK_PREFIX}log"), "20".into())]);
        assert_eq!(set.decide(&seg(11, "x")), Decision::NeedsLiveFiles);
        assert!(set.unchecked("log").is_empty());
    }

    #[test]
    fn the_watermark_continues_the_trusted_mark_and_never_moves_down() {
        let key = format!("{WATERMARK_PREFIX}log");
        let mut set = CommittedSet::default();
        let (first, value) = set.watermark_update(&[&seg(3, "a")]).expect("new catalog");
        assert_eq!(
            first, key,
            "a catalog the table never saw takes the base key"
        );
        set.record([&seg(3, "a")], Some(&(first.clone(), value.clone())));
        set.refresh_marks(&HashMap::from([(first.clone(), value)]));
        assert_eq!(set.watermark("log"), Some(3));
        assert_eq!(
            set.watermark_update(&[&seg(2, "b")]),
            None,
            "never moves down"
        );
        let (next, v) = set
            .watermark_update(&[&seg(4, "c"), &seg(9, "d")])
            .expect("up");
        assert_eq!((next, v), (key, encode_mark(&seg(9, "d"))));
    }

    #[test]
    fn a_quarantined_segment_is_decided_by_files_not_by_the_watermark() {
        let mut set = set_with(&[(
            format!("{WATERMARK_PREFIX}log"),
            encode_mark(&seg(20, "k20")),
        )]);
        let mark = set.unchecked("log").remove(0);
        set.settle(&mark, MarkState::Trusted);
        assert_eq!(set.decide(&seg(5, "k5")), Decision::Registered);
        assert_eq!(set.decide_by_files(&seg(5, "k5")), Decision::NeedsLiveFiles);
        assert_eq!(set.decide_by_files(&seg(21, "k21")), Decision::Missing);
        set.set_live_files(HashSet::from([SegmentId::of("k6")]));
        assert_eq!(set.decide_by_files(&seg(5, "k5")), Decision::Missing);
        assert_eq!(set.decide_by_files(&seg(6, "k6")), Decision::Registered);
        set.record([&seg(5, "k5")], None);
        assert_eq!(set.decide_by_files(&seg(5, "k5")), Decision::Registered);
    }

    #[test]
    fn forgotten_ids_of_expired_snapshots_are_answered_by_the_watermark() {
        let key = format!("{WATERMARK_PREFIX}log");
        let mut set = CommittedSet::default();
        let batch = [seg(1, "a"), seg(2, "b")];
        let written = set
            .watermark_update(&batch.iter().collect::<Vec<_>>())
            .expect("mark");
        set.record(batch.iter(), Some(&written));
        set.refresh_marks(&HashMap::from([(key, written.1.clone())]));
        set.forget(&[SegmentId::of("a"), SegmentId::of("b")]);
        assert_eq!(set.ids.len(), 0, "the set shrinks with the table");
        assert_eq!(set.decide(&seg(1, "a")), Decision::Registered);
        assert_eq!(set.decide(&seg(2, "b")), Decision::Registered);
        assert_eq!(set.decide(&seg(3, "c")), Decision::Missing);
    }

    #[test]
    fn a_key_lately_registered_is_known_after_its_snapshot_is_forgotten_and_the_memory_is_bounded()
    {
        let mut set = CommittedSet::default();
        let batch = [seg(1, "a")];
        set.record(batch.iter(), None);
        set.note_registered(&batch[0]);
        set.forget(&[SegmentId::of("a")]);
        assert_eq!(set.ids.len(), 0);
        // A re-ship of the key (a later record, past every watermark) is still known.
        assert_eq!(set.decide(&seg(50, "a")), Decision::Registered);
        assert_eq!(set.decide_by_files(&seg(50, "a")), Decision::Registered);
        // Keys found registered (by a watermark) count as well.
        set.note_registered(&seg(2, "b"));
        assert_eq!(set.decide(&seg(51, "b")), Decision::Registered);
        // At most RECENT_KEYS are kept, the oldest going first.
        for n in 0..RECENT_KEYS {
            set.note_registered(&seg(100 + n as u64, &format!("k{n}")));
        }
        assert_eq!(set.recent.order.len(), RECENT_KEYS);
        assert_eq!(set.recent.set.len(), RECENT_KEYS);
        assert_eq!(set.decide(&seg(52, "b")), Decision::Missing);
        // Another table under the same name knows none of them.
        set.forget_replaced_table();
        assert_eq!(set.decide(&seg(53, "k5")), Decision::Missing);
    }

    #[test]
    fn watermarks_of_other_catalogs_do_not_matter() {
        let set = set_with(&[(
            format!("{WATERMARK_PREFIX}other"),
            encode_mark(&seg(99, "z")),
        )]);
        assert_eq!(set.decide(&seg(1, "x")), Decision::Missing);
    }
}
