//! Which intents a commit carries, as a pure function of what it lists, what the table holds and
//! what the committer commits itself. The rules, each of which keeps a segment from being
//! registered twice or a watermark from covering a segment the table lacks:
//!
//! - an intent is carried whole or not at all (its manifest is one file): one whose segments are
//!   all in the table is **done** (deleted by whoever sees it, once past the grace period when it
//!   is not ours); one with only some of them in the table is **stale** (a restarted publisher
//!   registered part of it another way) and is never carried;
//! - an intent sharing a segment with the committer's own batch, or with an intent chosen before
//!   it, waits (this committer's own intents come first, then the oldest);
//! - at most `budget` segments in all (`commit.max_segments`);
//! - watermarks: per property, the carried intents in seq order raise it only while each builds
//!   on what the table (or the intent before it in the same commit) already has ([`MarkRaise`]'s
//!   `after`), never down, and never a property the committer raises itself. Where the chain is
//!   broken, the segments are still carried (their ids make them registered), just not covered
//!   by the watermark until their publisher's own commit raises it.

use std::collections::{BTreeMap, HashSet};

use super::record::{Intent, MarkRaise};
use crate::table::committed::{SegmentId, decode_mark};

/// One listed intent, as [`select`] sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub intent: &'a Intent,
    /// Published by this committer.
    pub own: bool,
}

/// The order in which a commit considers intents: this committer's own first, then the oldest.
/// Reading ahead (`Intents::prefetch`) follows it too, so that what is read is what is carried.
pub(crate) fn priority(intent: &Intent, own: bool) -> (bool, i64, String, u64) {
    let r = &intent.record;
    (!own, r.created_ms, r.lane.clone(), r.max_seq)
}

/// What [`select`] decided, by index into its candidates.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    pub carry: Vec<usize>,
    /// Every segment in the table already.
    pub done: Vec<usize>,
    /// Some segments in the table already: never carried.
    pub stale: Vec<usize>,
    /// Watermark properties the carried intents raise, and their values.
    pub marks: BTreeMap<String, String>,
}

/// What the table and the committer's own commit hold, for [`select`].
pub(crate) struct Context<'a> {
    /// Whether the table holds a segment id.
    pub holds: &'a (dyn Fn(&SegmentId) -> bool + Sync),
    /// The seq of a watermark property in the table, if it is set.
    pub mark_seq: &'a dyn Fn(&str) -> Option<u64>,
    /// Whether the table can take the intent's manifest (its schema and spec).
    pub fits: &'a dyn Fn(&Intent) -> bool,
    /// The ids of the committer's own new files in this commit.
    pub reserved: &'a HashSet<SegmentId>,
    /// The watermark property the committer raises itself, if any.
    pub own_property: Option<&'a str>,
    /// The most segments carried in one commit.
    pub budget: usize,
}

/// Decides which of `candidates` a commit carries (see the module docs).
pub(crate) fn select(candidates: &[Candidate<'_>], cx: &Context<'_>) -> Selection {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by_cached_key(|&i| priority(candidates[i].intent, candidates[i].own));
    let mut out = Selection::default();
    let mut taken: HashSet<SegmentId> = HashSet::new();
    let mut carried = 0usize;
    for i in order {
        let intent = candidates[i].intent;
        let held = intent.ids.iter().filter(|id| (cx.holds)(id)).count();
        if held == intent.ids.len() {
            out.done.push(i);
            continue;
        }
        if held > 0 {
            out.stale.push(i);
            continue;
        }
        let clashes = intent
            .ids
            .iter()
            .any(|id| cx.reserved.contains(id) || taken.contains(id));
        if clashes || carried + intent.ids.len() > cx.budget || !(cx.fits)(intent) {
            continue;
        }
        carried += intent.ids.len();
        taken.extend(intent.ids.iter().copied());
        out.carry.push(i);
    }
    out.marks = raised_marks(
        out.carry.iter().filter_map(|&i| {
            Some((
                candidates[i].intent.record.max_seq,
                candidates[i].intent.record.watermark.as_ref()?,
            ))
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

    fn run(table: &Table, cands: &[(Intent, bool)], reserved: &[&str], budget: usize) -> Selection {
        let holds = |id: &SegmentId| table.held.contains(id);
        let mark = |p: &str| table.marks.get(p).copied();
        let fits = |_: &Intent| true;
        let reserved: HashSet<SegmentId> = reserved.iter().map(|k| SegmentId::of(k)).collect();
        let candidates: Vec<Candidate<'_>> = cands
            .iter()
            .map(|(intent, own)| Candidate { intent, own: *own })
            .collect();
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

    #[test]
    fn done_and_stale_intents_are_never_carried() {
        let mut table = empty();
        table.held.insert(SegmentId::of("a1"));
        table.held.insert(SegmentId::of("a2"));
        table.held.insert(SegmentId::of("b1"));
        let s = run(
            &table,
            &[
                (intent("a", &["a1", "a2"], 2, None), false),
                (intent("b", &["b1", "b2"], 2, None), false),
                (intent("c", &["c1"], 1, None), false),
            ],
            &[],
            100,
        );
        assert_eq!(s.done, vec![0]);
        assert_eq!(s.stale, vec![1]);
        assert_eq!(s.carry, vec![2]);
    }

    #[test]
    fn a_segment_is_carried_once_own_intents_first() {
        // b's intent shares a segment with ours (a restarted publisher's old intent, say): ours
        // goes, b's waits; c's shares one with the committer's own new files: it waits too.
        let s = run(
            &empty(),
            &[
                (intent("b", &["x1", "x2"], 2, None), false),
                (intent("me", &["x2", "x3"], 3, None), true),
                (intent("c", &["n1"], 1, None), false),
            ],
            &["n1"],
            100,
        );
        assert_eq!(s.carry, vec![1]);
        assert!(s.done.is_empty() && s.stale.is_empty());
    }

    #[test]
    fn the_budget_bounds_a_commit() {
        let s = run(
            &empty(),
            &[
                (intent("a", &["a1", "a2"], 2, None), false),
                (intent("b", &["b1", "b2"], 2, None), false),
                (intent("c", &["c1"], 1, None), false),
            ],
            &[],
            3,
        );
        assert_eq!(s.carry, vec![0, 2]);
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
                (intent("a", &["a3"], 30, Some(20)), false),
                (intent("a", &["a2"], 20, Some(10)), false),
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
        let s = run(
            &table,
            &[(intent("a", &["a3"], 30, Some(20)), false)],
            &[],
            100,
        );
        assert_eq!(s.carry, vec![0]);
        assert!(s.marks.is_empty());
        // A first intent (after nothing) raises an absent mark; never lowers a higher one.
        let s = run(
            &empty(),
            &[(intent("a", &["a1"], 5, None), false)],
            &[],
            100,
        );
        assert_eq!(
            s.marks.get(p).map(String::as_str),
            Some("5:AAAAAAAAAAAAAAAA")
        );
        table.marks.insert(p.into(), 40);
        let s = run(&table, &[(intent("a", &["a1"], 5, None), false)], &[], 100);
        assert_eq!(s.carry, vec![0]);
        assert!(s.marks.is_empty());
        // The committer's own property is its own commit's to raise.
        let s = run(
            &empty(),
            &[(intent("me", &["m1"], 5, None), true)],
            &[],
            100,
        );
        assert_eq!(s.carry, vec![0]);
        assert!(s.marks.is_empty());
    }
}
