//! The segments a committer holds (arrived, not yet committed), in catalog order. Kept apart from
//! the actor so that its bookkeeping (the key index, the undecided count, the footer bytes held)
//! is small enough to check by unit tests: the committer answers "is this a replay?", "is
//! anything undecided?" and "how full is the footer window?" from these counters on every
//! message, however long the backlog.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use crate::protocol::footer::SegmentFooter;
use crate::protocol::messages::SegmentPermit;
use crate::protocol::segment::UploadedSegment;
use crate::table::committed::{SegmentId, fingerprint};

/// The segments a committer holds, by catalog sequence number, with an index of their object
/// keys so that a replayed segment is recognised in O(1) however long the backlog is, and what
/// the footer window counts: the footers held and the reads in flight.
pub(super) struct PendingQueue {
    pub(super) by_seq: BTreeMap<u64, Pending>,
    /// Object key -> the seq holding it.
    keys: HashMap<String, u64>,
    /// How many are not `decided`, so that a committer with nothing undecided (the usual case)
    /// learns it in O(1) on every message instead of scanning its backlog.
    pub(super) undecided: usize,
    /// How many hold their footer, and its decoded size summed: the footer window
    /// ([`footer_window`]) counts what arrived and is not committed yet, not only reads in flight.
    ///
    /// [`footer_window`]: crate::actors::context::RegistrarContext::footer_window
    pub(super) footers: usize,
    pub(super) footer_bytes: u64,
    /// Footer reads asked of the pool and not answered yet.
    pub(super) reads_in_flight: usize,
    /// The decoded size of the latest footer read: what a read in flight is expected to add.
    pub(super) footer_estimate: u64,
}

impl Default for PendingQueue {
    fn default() -> Self {
        PendingQueue {
            by_seq: BTreeMap::new(),
            keys: HashMap::new(),
            undecided: 0,
            footers: 0,
            footer_bytes: 0,
            reads_in_flight: 0,
            footer_estimate: DEFAULT_FOOTER_ESTIMATE,
        }
    }
}

impl PendingQueue {
    pub(super) fn holds(&self, segment: &UploadedSegment) -> bool {
        self.by_seq.contains_key(&segment.seq) || self.keys.contains_key(&segment.object_key)
    }

    /// The seq of the pending segment with this object key, if any.
    pub(super) fn seq_of_key(&self, key: &str) -> Option<u64> {
        self.keys.get(key).copied()
    }

    pub(super) fn get(&self, seq: &u64) -> Option<&Pending> {
        self.by_seq.get(seq)
    }

    pub(super) fn insert(&mut self, pending: Pending) {
        self.keys
            .insert(pending.segment.object_key.clone(), pending.segment.seq);
        self.count_in(&pending);
        if let Some(old) = self.by_seq.insert(pending.segment.seq, pending) {
            self.count_out(&old);
        }
    }

    pub(super) fn remove(&mut self, seq: &u64) -> Option<Pending> {
        let removed = self.by_seq.remove(seq)?;
        if self.keys.get(&removed.segment.object_key) == Some(seq) {
            self.keys.remove(&removed.segment.object_key);
        }
        self.count_out(&removed);
        Some(removed)
    }

    fn count_in(&mut self, p: &Pending) {
        if !p.decided {
            self.undecided += 1;
        }
        if p.footer.is_some() {
            self.footers += 1;
            self.footer_bytes += p.footer_bytes;
        }
    }

    fn count_out(&mut self, p: &Pending) {
        if !p.decided {
            self.undecided -= 1;
        }
        if p.footer.is_some() {
            self.footers -= 1;
            self.footer_bytes -= p.footer_bytes;
        }
    }

    /// Stores the footer read for `seq` (if it is still pending, and has none yet).
    pub(super) fn set_footer(&mut self, seq: &u64, footer: Arc<SegmentFooter>) -> Option<&Pending> {
        let p = self.by_seq.get_mut(seq)?;
        if p.footer.is_none() {
            p.footer_bytes = footer_size(&footer);
            p.footer = Some(footer);
            self.footers += 1;
            self.footer_bytes += p.footer_bytes;
        }
        Some(p)
    }

    /// Marks every segment undecided (the committed set they were judged against changed).
    pub(super) fn undecide_all(&mut self) {
        for p in self.by_seq.values_mut() {
            p.decided = false;
        }
        self.undecided = self.by_seq.len();
    }

    pub(super) fn set_decided(&mut self, seq: &u64) {
        if let Some(p) = self.by_seq.get_mut(seq)
            && !p.decided
        {
            p.decided = true;
            self.undecided -= 1;
        }
    }

    /// The fingerprint of the record at `seq` of log `catalog`, when it is pending here: what a
    /// watermark at that seq is checked against without reading the log.
    pub(super) fn fingerprint_at(&self, seq: u64, catalog: &str) -> Option<SegmentId> {
        self.by_seq
            .get(&seq)
            .filter(|p| p.segment.catalog_id.as_deref() == Some(catalog))
            .map(|p| fingerprint(&p.segment))
    }

    pub(super) fn get_mut(&mut self, seq: &u64) -> Option<&mut Pending> {
        self.by_seq.get_mut(seq)
    }

    pub(super) fn len(&self) -> usize {
        self.by_seq.len()
    }
}

/// One segment waiting to be committed.
pub(super) struct Pending {
    pub(super) segment: UploadedSegment,
    /// False while a watermark that may cover it is unchecked (no footer is read meanwhile).
    pub(super) decided: bool,
    pub(super) read_requested: bool,
    /// The generation of the vended credentials its footer read was sent with, if any.
    pub(super) read_generation: Option<u64>,
    pub(super) footer: Option<Arc<SegmentFooter>>,
    /// The decoded size of `footer` ([`footer_size`]), once it is in.
    pub(super) footer_bytes: u64,
    /// Its share of the `memory.segments` budget, given back when it leaves the queue (`None`
    /// for a quarantined segment taken back on the operator's retry: it gave its share back
    /// when it was quarantined).
    pub(super) _permit: Option<SegmentPermit>,
    /// When the committer took it (for `commit.linger`).
    pub(super) arrived: Instant,
    /// Reads that found the object missing so far (re-read with backoff before quarantine).
    pub(super) missing_reads: u32,
}

/// The decoded size a footer read in flight is expected to add before any footer of the table
/// has arrived (a narrow table's footer decodes to a few KB).
pub(super) const DEFAULT_FOOTER_ESTIMATE: u64 = 16 << 10;

/// What a footer holds in memory: its decoded Parquet metadata and the Arrow schema derived from
/// it (estimated from the field count).
pub(super) fn footer_size(footer: &SegmentFooter) -> u64 {
    let schema = footer.arrow_schema.fields().len() as u64 * 256;
    footer.metadata.memory_size() as u64 + schema
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(seq: u64, key: &str) -> UploadedSegment {
        crate::testing::segment(seq, "telemetry", key)
    }

    fn pending(s: UploadedSegment) -> Pending {
        Pending {
            segment: s,
            decided: true,
            read_requested: false,
            read_generation: None,
            footer: None,
            footer_bytes: 0,
            _permit: None,
            arrived: Instant::now(),
            missing_reads: 0,
        }
    }

    #[test]
    fn a_replayed_segment_is_recognised_by_seq_or_key_until_removed() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(2, "a")));
        assert!(q.holds(&segment(2, "a")));
        assert!(q.holds(&segment(9, "a")), "same key under another seq");
        assert!(q.holds(&segment(2, "b")), "same seq");
        assert!(!q.holds(&segment(3, "b")));
        assert!(q.remove(&2).is_some());
        assert!(!q.holds(&segment(2, "a")), "the key index follows removals");
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_later_record_of_a_key_takes_over_its_index() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(5, "k")));
        assert_eq!(q.seq_of_key("k"), Some(5));
        q.remove(&5);
        q.insert(pending(segment(21, "k")));
        assert_eq!(q.seq_of_key("k"), Some(21));
        // Removing a seq that no longer owns the key leaves the key's owner indexed.
        q.insert(pending(segment(30, "k")));
        q.remove(&21);
        assert_eq!(q.seq_of_key("k"), Some(30));
    }

    #[test]
    fn the_undecided_count_follows_inserts_decisions_and_removals() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(1, "a")));
        let mut p = pending(segment(2, "b"));
        p.decided = false;
        q.insert(p);
        assert_eq!(q.undecided, 1);
        q.undecide_all();
        assert_eq!(q.undecided, 2);
        q.set_decided(&1);
        q.set_decided(&1);
        assert_eq!(q.undecided, 1, "deciding twice counts once");
        q.remove(&2);
        assert_eq!(q.undecided, 0);
        q.remove(&1);
        assert_eq!(q.undecided, 0);
    }

    #[test]
    fn the_queue_counts_the_footers_it_holds_through_inserts_and_removals() {
        let mut q = PendingQueue::default();
        q.insert(pending(segment(1, "a")));
        q.insert(pending(segment(2, "b")));
        let footer = Arc::new(SegmentFooter {
            metadata: Arc::new(parquet::file::metadata::ParquetMetaData::new(
                parquet::file::metadata::FileMetaData::new(
                    1,
                    0,
                    None,
                    None,
                    Arc::new(parquet::schema::types::SchemaDescriptor::new(Arc::new(
                        parquet::schema::types::Type::group_type_builder("schema")
                            .build()
                            .expect("schema"),
                    ))),
                    None,
                ),
                vec![],
            )),
            arrow_schema: Arc::new(arrow_schema::Schema::empty()),
            object_size: 1,
            bytes_read: 1,
        });
        let size = footer_size(&footer);
        assert!(size > 0);
        assert!(q.set_footer(&1, Arc::clone(&footer)).is_some());
        assert!(
            q.set_footer(&1, Arc::clone(&footer)).is_some(),
            "a second reply counts once"
        );
        assert!(
            q.set_footer(&9, Arc::clone(&footer)).is_none(),
            "not pending"
        );
        assert_eq!((q.footers, q.footer_bytes), (1, size));
        q.set_footer(&2, footer);
        assert_eq!((q.footers, q.footer_bytes), (2, 2 * size));
        q.remove(&1);
        assert_eq!((q.footers, q.footer_bytes), (1, size));
        q.remove(&2);
        assert_eq!((q.footers, q.footer_bytes), (0, 0));
    }
}
