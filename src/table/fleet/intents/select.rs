//! Which intents a commit carries, as a pure function of what it lists, what the table holds and
//! what the committer commits itself. The rules, each of which keeps a segment from being
//! registered twice or a watermark from covering a segment the table lacks:
//!
//! - an intent is **done** when the table holds every one of its segments: by their ids, or by
//!   the watermark it raises covering its last seq. Ids leave the table's summaries when
//!   snapshot retention expires the snapshot that carried them; the watermark stays (retention
//!   expires a carrying snapshot only once the watermarks it carried cover it), so an intent
//!   left behind by a lost delete is never carried again, however old. A done intent is deleted
//!   by whoever sees it;
//! - of an intent with some segments in the table already (its publisher registered part of it
//!   another way, or published the rest again after a restart), the **rest** is carried: its
//!   data files are held one per segment, so a commit takes the ones the table lacks;
//! - an intent sharing a segment the commit takes anyway (the committer's own batch, or an
//!   intent chosen before it) waits; the oldest go first;
//! - at most `budget` segments in all (`commit.max_segments`), except that an intent larger
//!   than the budget goes alone, so that a publisher with a larger budget is not stranded;
//! - watermarks: per property, the carried intents in seq order raise it only while each builds
//!   on what the table (or the intent before it in the same commit) already has ([`MarkRaise`]'s
//!   `after`), never down, and never a property the committer raises itself. Where the chain is
//!   broken, the segments are still carried (their ids make them registered), just not covered
//!   by the watermark until their publisher's own commit raises it.

use std::collections::{BTreeMap, HashSet};

use super::record::{Intent, MarkRaise};
use crate::table::committed::{SegmentId, decode_mark};

/// The order in which a commit considers intents (the oldest first). Reading ahead
/// (`Intents::prefetch`) follows it too, so that what is read is what is carried.
pub(crate) fn priority(intent: &Intent) -> (i64, String, u64) {
    let r = &intent.record;
    (r.created_ms, r.lane.clone(), r.max_seq)
}

/// One intent chosen: its index among the candidates, and the positions (into its ids, and
/// into its data files, which follow the ids) of the segments the commit takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chosen {
    pub index: usize,
    pub take: Vec<usize>,
}

/// What [`select`] decided, by index into its candidates.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    pub carry: Vec<Chosen>,
    /// Every segment in the table already: to be deleted, never carried.
    pub done: Vec<usize>,
    /// Watermark properties the carried intents raise, and their values.
    pub marks: BTreeMap<String, String>,
}

/// What the table and the committer's own commit hold, for [`select`].
pub(crate) struct Context<'a> {
    /// Whether the table holds a segment id.
    pub holds: &'a (dyn Fn(&SegmentId) -> bool + Sync),
    /// The seq of a watermark property in the table, if it is set.
    pub mark_seq: &'a dyn Fn(&str) -> Option<u64>,
    /// Whether the commit can take the candidate at this index now (its schema and spec, its
    /// files read).
    pub fits: &'a dyn Fn(usize) -> bool,
    /// The ids of the committer's own new files in this commit.
    pub reserved: &'a HashSet<SegmentId>,
    /// The watermark property the committer raises itself, if any.
    pub own_property: Option<&'a str>,
    /// The most segments carried in one commit.
    pub budget: usize,
}

/// Whether the table holds every segment of `intent` (see the module docs).
pub(crate) fn is_done(intent: &Intent, cx: &Context<'_>) -> bool {
    let covered = intent.record.watermark.as_ref().is_some_and(|m| {
        (cx.mark_seq)(&m.property).is_some_and(|seq| seq >= intent.record.max_seq)
    });
    covered || intent.ids.iter().all(|id| (cx.holds)(id))
}

/// Decides which of `candidates` (other nodes' intents) a commit carries (see the module docs).
pub(crate) fn select(candidates: &[&Intent], cx: &Context<'_>) -> Selection {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by_cached_key(|&i| priority(candidates[i]));
    let mut out = Selection::default();
    let mut taken: HashSet<SegmentId> = HashSet::new();
    let mut carried = 0usize;
    for i in order {
        let intent = candidates[i];
        if is_done(intent, cx) {
            out.done.push(i);
            continue;
        }
        let take: Vec<usize> = (0..intent.ids.len())
            .filter(|&k| !(cx.holds)(&intent.ids[k]))
            .collect();
        let clashes = take
            .iter()
            .any(|&k| cx.reserved.contains(&intent.ids[k]) || taken.contains(&intent.ids[k]));
        // Over the budget only as the first one carried: alone.
        let over = carried > 0 && carried + take.len() > cx.budget;
        if clashes || over || !(cx.fits)(i) {
            continue;
        }
        carried += take.len();
        taken.extend(take.iter().map(|&k| intent.ids[k]));
        out.carry.push(Chosen { index: i, take });
    }
    out.marks = raised_marks(
        out.carry.iter().filter_map(|c| {
            let record = &candidates[c.index].record;
            Some((record.max_seq, record.watermark.as_ref()?))
        }),
        cx,
    );
    out
}

/// Per property, the value the carried intents raise it to (see the module docs).
fn raised_marks<'a>(
    raises: impl Iterator<Item = (u64, &'a MarkRaise)>,
    cx: &Context<'_>,
) -> BTreeMap<String, String> {
    let mut by_property: BTreeMap<&str, Vec<(u64, &MarkRaise)>> = BTreeMap::new();
    for (seq, raise) in raises {
        if Some(raise.property.as_str()) == cx.own_property {
            continue;
        }
        by_property
            .entry(&raise.property)
            .or_default()
            .push((seq, raise));
    }
    let mut marks = BTreeMap::new();
    for (property, mut chain) in by_property {
        chain.sort_by_key(|(seq, _)| *seq);
        let mut current = (cx.mark_seq)(property);
        let mut value = None;
        for (seq, raise) in chain {
            let builds_on = raise
                .after
                .is_none_or(|after| current.is_some_and(|c| c >= after));
            if builds_on && current.is_none_or(|c| seq > c) {
                current = Some(seq);
                value = Some(raise.value.clone());
            }
        }
        if let Some(value) = value {
            marks.insert(property.to_string(), value);
        }
    }
    marks
}

/// The seq of a watermark value as the table holds it.
pub(crate) fn mark_seq(value: &str) -> Option<u64> {
    decode_mark(value).map(|(seq, _)| seq)
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::{expect, record};
    use super::super::record::{Intent, parse};
    use super::*;
    use std::collections::HashMap;

    fn intent(lane: &str, keys: &[&str], max_seq: u64, after: Option<u64>) -> Intent {
        parse(&record(lane, keys, max_seq, after).to_bytes(), expect()).expect("parses")
    }

    struct Table {
        held: HashSet<SegmentId>,
        marks: HashMap<String, u64>,
    }

    fn run(table: &Table, cands: &[Intent], reserved: &[&str], budget: usize) -> Selection {
        let holds = |id: &SegmentId| table.held.contains(id);
        let mark = |p: &str| table.marks.get(p).copied();
        let fits = |_: usize| true;
        let reserved: HashSet<SegmentId> = reserved.iter().map(|k| SegmentId::of(k)).collect();
        let candidates: Vec<&Intent> = cands.iter().collect();
        select(
            &candidates,
            &Context {
                holds: &holds,
                mark_seq: &mark,
                fits: &fits,
                reserved: &reserved,
                own_property: Some("thadam.watermark.log-me"),
                budget,
            },
        )
    }

    fn empty() -> Table {
        Table {
            held: HashSet::new(),
            marks: HashMap::new(),
        }
    }

    fn indices(s: &Selection) -> Vec<usize> {
        s.carry.iter().map(|c| c.index).collect()
    }

    #[test]
    fn done_intents_are_never_carried_and_of_the_others_the_rest_is() {
        let mut table = empty();
        table.held.insert(SegmentId::of("a1"));
        table.held.insert(SegmentId::of("a2"));
        table.held.insert(SegmentId::of("b1"));
        let s = run(
            &table,
            &[
                intent("a", &["a1", "a2"], 2, None),
                intent("b", &["b1", "b2"], 2, None),
                intent("c", &["c1"], 1, None),
            ],
            &[],
            100,
        );
        assert_eq!(s.done, vec![0]);
        // b's first segment is in the table already: its second is carried alone.
        assert_eq!(
            s.carry,
            vec![
                Chosen {
                    index: 1,
                    take: vec![1]
                },
                Chosen {
                    index: 2,
                    take: vec![0]
                }
            ]
        );
    }

    #[test]
    fn an_intent_whose_watermark_covers_it_is_done_whatever_its_ids() {
        // Its carrying snapshot was expired (the ids are gone), its watermark stayed.
        let mut table = empty();
        table.marks.insert("thadam.watermark.log-a".into(), 9);
        let s = run(
            &table,
            &[
                intent("a", &["a1", "a2"], 9, None),
                intent("a", &["a3"], 10, Some(9)),
            ],
            &[],
            100,
        );
        assert_eq!(s.done, vec![0]);
        assert_eq!(indices(&s), vec![1]);
        assert_eq!(
            s.marks.get("thadam.watermark.log-a").map(String::as_str),
            Some("10:AAAAAAAAAAAAAAAA")
        );
    }

    #[test]
    fn a_segment_is_carried_once() {
        // b's intent shares a segment with the oldest (a restarted publisher's new intent, say):
        // the oldest goes, b's waits; c's shares one with the committer's own new files.
        let mut older = intent("a", &["x1", "x2"], 2, None);
        older.record.created_ms = 500;
        let s = run(
            &empty(),
            &[
                intent("b", &["x2", "x3"], 3, None),
                older,
                intent("c", &["n1"], 1, None),
            ],
            &["n1"],
            100,
        );
        assert_eq!(indices(&s), vec![1]);
        assert!(s.done.is_empty());
    }

    #[test]
    fn the_budget_bounds_a_commit_but_a_larger_intent_goes_alone() {
        let s = run(
            &empty(),
            &[
                intent("a", &["a1", "a2"], 2, None),
                intent("b", &["b1", "b2"], 2, None),
                intent("c", &["c1"], 1, None),
            ],
            &[],
            3,
        );
        assert_eq!(indices(&s), vec![0, 2]);
        let s = run(
            &empty(),
            &[
                intent("a", &["a1", "a2", "a3"], 3, None),
                intent("b", &["b1"], 1, None),
            ],
            &[],
            2,
        );
        assert_eq!(indices(&s), vec![0], "the larger one alone");
    }

    #[test]
    fn a_watermark_rises_only_along_an_unbroken_chain() {
        let p = "thadam.watermark.log-a";
        // The table is at 10; intents after 10 (to 20) and after 20 (to 30) raise it to 30.
        let mut table = empty();
        table.marks.insert(p.into(), 10);
        let s = run(
            &table,
            &[
                intent("a", &["a3"], 30, Some(20)),
                intent("a", &["a2"], 20, Some(10)),
            ],
            &[],
            100,
        );
        assert_eq!(s.carry.len(), 2);
        assert_eq!(
            s.marks.get(p).map(String::as_str),
            Some("30:AAAAAAAAAAAAAAAA")
        );
        // The intent to 20 is not listed (yet): the one to 30 is carried, the mark stays.
        let s = run(&table, &[intent("a", &["a3"], 30, Some(20))], &[], 100);
        assert_eq!(indices(&s), vec![0]);
        assert!(s.marks.is_empty());
        // A first intent (after nothing) raises an absent mark.
        let s = run(&empty(), &[intent("a", &["a1"], 5, None)], &[], 100);
        assert_eq!(
            s.marks.get(p).map(String::as_str),
            Some("5:AAAAAAAAAAAAAAAA")
        );
        // The committer's own property is its own commit's to raise.
        let s = run(&empty(), &[intent("me", &["m1"], 5, None)], &[], 100);
        assert_eq!(indices(&s), vec![0]);
        assert!(s.marks.is_empty());
    }
}
