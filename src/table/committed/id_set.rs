//! The segment ids a committer holds in memory: the ids the table's snapshots list ([`IdSet`])
//! and the keys it lately registered or found registered ([`RecentKeys`]).

use std::collections::{HashSet, VecDeque};

use super::ids::SegmentId;

/// A set of [`SegmentId`]s at 12 bytes each: a sorted vector searched by bisection, plus the
/// latest insertions in a small hash set folded in when it grows. The committed set holds one id
/// per segment the table's snapshots list (a million for a table of a million segments without
/// snapshot retention); a `HashSet` would cost twice that (load factor, growth by doubling).
#[derive(Debug, Default, Clone)]
pub(super) struct IdSet {
    sorted: Vec<SegmentId>,
    recent: HashSet<SegmentId>,
}

/// How many insertions wait in [`IdSet::recent`] before they are merged into the sorted vector
/// (a merge costs one pass over it).
pub(super) const RECENT_IDS: usize = 8192;

impl IdSet {
    pub(super) fn from_ids(ids: impl IntoIterator<Item = SegmentId>) -> IdSet {
        let mut sorted: Vec<SegmentId> = ids.into_iter().collect();
        sorted.sort_unstable();
        sorted.dedup();
        sorted.shrink_to_fit();
        IdSet {
            sorted,
            recent: HashSet::new(),
        }
    }

    pub(super) fn contains(&self, id: &SegmentId) -> bool {
        self.recent.contains(id) || self.sorted.binary_search(id).is_ok()
    }

    pub(super) fn insert(&mut self, id: SegmentId) {
        if self.sorted.binary_search(&id).is_ok() {
            return;
        }
        self.recent.insert(id);
        if self.recent.len() >= RECENT_IDS {
            self.sorted.extend(self.recent.drain());
            self.sorted.sort_unstable();
        }
    }

    pub(super) fn remove_all(&mut self, ids: &[SegmentId]) {
        let gone: HashSet<&SegmentId> = ids.iter().collect();
        self.recent.retain(|id| !gone.contains(id));
        self.sorted.retain(|id| !gone.contains(id));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }
}

/// The keys (as ids) a committer most recently registered or found registered, in the order it
/// did, at most [`RECENT_KEYS`]: kept whatever snapshot retention expires, so that a later
/// record of such a key (a re-ship: a shipper that recorded the same file again after a crash)
/// is still known to be in the table after the snapshot that registered it is gone. The log is
/// replayed from its start on every start, so the first record of a key is always decided (and
/// noted here) before a re-ship of it; a re-ship more than [`RECENT_KEYS`] of the table's
/// segments later is known only while that snapshot is kept.
#[derive(Debug, Default, Clone)]
pub(super) struct RecentKeys {
    pub(super) order: VecDeque<SegmentId>,
    pub(super) set: HashSet<SegmentId>,
}

/// How many keys [`RecentKeys`] holds per table (~0.3 MB).
pub(super) const RECENT_KEYS: usize = 8192;

impl RecentKeys {
    pub(super) fn note(&mut self, id: SegmentId) {
        if !self.set.insert(id) {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > RECENT_KEYS
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
    }

    pub(super) fn contains(&self, id: &SegmentId) -> bool {
        self.set.contains(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_set_finds_what_it_holds_across_merges_and_removals() {
        let id = |n: u32| SegmentId::of(&format!("key-{n}"));
        let mut set = IdSet::from_ids((0..100).map(id).chain((0..50).map(id)));
        assert_eq!(set.len(), 100, "duplicates counted once");
        assert!(set.contains(&id(7)) && !set.contains(&id(100)));
        for n in 100..(100 + RECENT_IDS as u32 + 10) {
            set.insert(id(n));
        }
        set.insert(id(3));
        assert_eq!(
            set.len(),
            100 + RECENT_IDS + 10,
            "a merge keeps every id once"
        );
        assert!((0..100 + RECENT_IDS as u32 + 10).all(|n| set.contains(&id(n))));
        set.remove_all(&[id(3), id(150), id(100 + RECENT_IDS as u32 + 5)]);
        assert!(!set.contains(&id(3)) && !set.contains(&id(150)));
        assert!(!set.contains(&id(100 + RECENT_IDS as u32 + 5)));
        assert!(set.contains(&id(4)) && set.contains(&id(151)));
        assert_eq!(set.len(), 100 + RECENT_IDS + 7);
    }
}
