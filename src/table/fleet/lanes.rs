//! The fleet's lanes: the registrars sharing a table, as one node sees them in the table's
//! snapshots ([`Fleet`]), and what its own lane does among them ([`Turn`]).
//!
//! **Lanes.** Every registrar names its lane (random per process and table) and the slot it
//! needs in each snapshot summary, and reads the others' from the snapshots it loads
//! (`Pacer::read_lanes`); a lane counts as present for [`Fleet::memory_ms`] after it was last
//! seen at work. Lanes that wrote for this registrar's own segment log are this registrar
//! before a restart, not another node.
//!
//! **Slots.** With two or more lanes present, the table's commits are slotted: time is cut into
//! slots of one agreed length (the largest slot the lanes publish, see
//! [`desired_slot`](super::slots::desired_slot)) on the wall clock's grid, and lane k of N (by
//! the lanes' sorted ids) starts its commits in the slots whose index is k modulo N
//! ([`next_slot`]). Every registrar computes the same grid from the same snapshots, so a fleet
//! takes turns instead of colliding: one commit per slot, each node once per cycle of N slots,
//! and no 409 unless a commit overruns its slot or a clock is off (then the prompt retry
//! settles it). Random pacing cannot do this: at N nodes a random commit conflicts with
//! probability 1 - e^(-(N-1)·W/I), so a low conflict rate costs an interval linear in N·W with
//! a large constant; slots cost exactly N slots.
//!
//! **Turns.** In a fleet that carries intents (`commit.intents`) and has more than
//! [`ALL_TAKE_TURNS`] lanes, only the [`COMMITTERS`] lowest lanes seen committing take turns:
//! one, the sole committer, which goes at its cadence ([`SOLE_CADENCE_MS`]) rather than on the
//! grid. The others publish what they have for the committers to carry, and attempt a commit
//! themselves only every fallback ([`fallback_ms`]). See [`Fleet::turn`].

use super::slots::{LANE_MEMORY_CYCLES, fallback_ms, fleet_slot, next_slot, slot_memory_ms};

/// How long a lane counts as present after its last snapshot, at the least (see
/// [`Fleet::memory_ms`]).
pub(crate) const LANE_MEMORY_MS: i64 = 60_000;
/// A lane counts as present for at least this many of the fleet's fallbacks (see
/// [`Fleet::memory_ms`]).
const VIEW_FALLBACKS: i64 = 2;
/// The most lanes remembered (a bound on memory whatever happens to the table).
pub(super) const MAX_LANES: usize = 1024;
/// How many lanes take turns in a fleet of more than [`ALL_TAKE_TURNS`] lanes that carries
/// intents (see [`Fleet::turn`]): one. Two committers' commits meet whenever the first one's
/// window runs past its slot (the load and the catalog's answer have a tail several times their
/// mean on a busy catalog), and the second, loaded before the first landed, gets a 409; one
/// committer's next commit starts after its last one landed, whatever its windows are (128
/// nodes: about 0.07 409s per landed commit with one committer, 0.17 with two, more with more).
/// The one committer goes at its cadence ([`SOLE_CADENCE_MS`]), not on the slot grid.
pub(super) const COMMITTERS: usize = 1;
/// ... but in a fleet of up to this many lanes, every lane takes turns. A node that only
/// publishes learns what was carried at its fallback (5 s) and publishes its next batch only
/// then, so a small fleet catching up would wait a fallback per batch (four nodes catching up
/// 200 segments each: 55-77 s with one committer, 9 s with all four taking turns,
/// `tests/fleet.rs`). At this size every node agrees on the lanes quickly, and two committers'
/// windows meet rarely.
const ALL_TAKE_TURNS: usize = 8;
/// The least time between the starts of two commits of a fleet's sole committer (a fleet of
/// more than [`ALL_TAKE_TURNS`] lanes): at most five commits a second, whatever N is, and as
/// soon as the last one landed when a commit takes longer. The slot grid, which keeps several
/// committers apart, would only make a sole committer wait for the next slot's start after each
/// commit, on slots held up by its slowest recent commit (a slot comes down only when half of
/// it is enough): the fleet's commit rate then fell with N (1.3-2.4 commits a second at 128
/// nodes against 6 at 32).
pub(crate) const SOLE_CADENCE_MS: u64 = 200;

/// How long the fleet's deputy ([`Fleet::is_deputy`]) leaves between its own attempts: a few
/// of the sole committer's cycles (1-3 s jittered), so that a committer that stops is replaced
/// within seconds; while the committer is seen carrying, the deputy's patience with it is
/// four of these ([`patience_ms`](super::slots::patience_ms)), so a slow committer is not
/// raced. One node loading every few seconds costs the catalog little.
pub(crate) const DEPUTY_FALLBACK_MS: u64 = 2_000;
/// A lane counts for the deputy only while it was seen at work within this long.
const DEPUTY_SEEN_MS: i64 = 10_000;

/// Registrars sharing a table, as this committer has seen them in the table's snapshots, and its
/// own lane: with two or more lanes present, they take turns on one grid of slots (see the
/// module's doc).
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    own: String,
    lanes: std::collections::BTreeMap<String, Seen>,
    /// Lanes that wrote for the same segment log as this one: this registrar before a restart
    /// (or a warm-up run, or an active-active twin), not another node to take turns with.
    same_log: std::collections::BTreeSet<String>,
    /// How many lanes take turns committing: all of them, or (a fleet that carries intents)
    /// the [`COMMITTERS`] lowest, the others publishing only (see [`Turn`]).
    committers: usize,
}

/// What the table's snapshots showed of one lane (times in ms since the epoch, as this node saw
/// them: see `Pacer::read_lanes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    /// When it was last seen at work: a commit of its own, or an intent of it carried.
    at: i64,
    /// The slot it needs (ms), as its last commit of its own published it ...
    slot: u64,
    /// ... and when that commit was.
    slot_at: i64,
    /// When it was last seen committing itself (`None`: only its intents were seen carried,
    /// which anyone who can write an intent can claim).
    committed: Option<i64>,
    /// Whether its last commit said it carries the fleet's intents.
    carries: bool,
    /// When it answered a roll call: an intent of it the store took within a roll call's
    /// window, listed at a node's start (see `fleet::roll_call`).
    answered: Option<i64>,
}

/// What a lane does in a fleet that takes turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// No other registrar commits to the table.
    Alone,
    /// This lane commits in its slots: the next starts at `start` (ms since the epoch), each
    /// `slot` ms long.
    Slot { start: i64, slot: u64 },
    /// This lane is the fleet's only committer (beyond [`ALL_TAKE_TURNS`] lanes): with no one to
    /// take turns with, it goes as soon as its last commit landed, at its cadence
    /// ([`SOLE_CADENCE_MS`]), off the grid; `slot` is the fleet's slot, which its commits still
    /// measure and publish (the others' fallbacks follow it).
    Sole { slot: u64 },
    /// This lane does not take turns: it publishes what it has and the committers carry it;
    /// it attempts a commit itself only every `fallback` ms (to learn what was carried, and to
    /// commit what was not).
    Carried { fallback: u64 },
}

/// A lane in a view of the fleet (see [`Fleet::present_within`]): its id, the slot it counts
/// with, and what was seen of it (`None`: our own lane, not seen in the table yet).
#[derive(Debug, Clone, Copy)]
struct Present<'a> {
    lane: &'a str,
    slot: u64,
    seen: Option<&'a Seen>,
}

/// What a view of the fleet holds, counted (see [`Fleet::window`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// The lanes in it, our own included.
    lanes: usize,
    /// The fleet's slot over them ([`fleet_slot`]).
    slot: u64,
}

/// The slot `seen` counts with in a view whose slot memory is `slot_memory` ms: the one it
/// published, while the commit that published it is that recent, else none.
fn counted_slot(seen: &Seen, now_ms: i64, slot_memory: i64) -> u64 {
    if now_ms.saturating_sub(seen.slot_at) <= slot_memory {
        seen.slot
    } else {
        0
    }
}

impl Default for Fleet {
    /// A fresh lane: 12 random hex digits.
    fn default() -> Self {
        Fleet::new(uuid::Uuid::new_v4().simple().to_string()[..12].to_string())
    }
}

impl Fleet {
    pub(crate) fn new(own: String) -> Self {
        Fleet {
            own,
            lanes: std::collections::BTreeMap::new(),
            same_log: std::collections::BTreeSet::new(),
            committers: usize::MAX,
        }
    }

    /// A fleet whose nodes carry each other's intents: beyond [`ALL_TAKE_TURNS`] lanes, only
    /// the [`COMMITTERS`] lowest take turns.
    pub(crate) fn carrying(self) -> Self {
        self.with_committers(COMMITTERS)
    }

    /// A carrying fleet where the `committers` lowest lanes take turns (the rules hold for any
    /// number; the tests of the ranks use several).
    fn with_committers(mut self, committers: usize) -> Self {
        self.committers = committers.max(1);
        self
    }

    /// How many of `present` lanes take turns: all of them in a fleet of up to
    /// [`ALL_TAKE_TURNS`] lanes, else the fleet's committers.
    fn takers(&self, present: usize) -> usize {
        if present <= ALL_TAKE_TURNS {
            present
        } else {
            present.min(self.committers)
        }
    }

    /// Notes that `lane` wrote for the same segment log as this registrar (bounded like the
    /// lanes).
    pub(crate) fn same_log(&mut self, lane: &str) {
        if lane != self.own && self.same_log.len() < MAX_LANES {
            self.same_log.insert(lane.to_string());
        }
    }

    pub(crate) fn own(&self) -> &str {
        &self.own
    }

    /// The lanes remembered, sorted (for the tests of what a node reads).
    #[cfg(test)]
    pub(crate) fn known(&self) -> Vec<&str> {
        self.lanes.keys().map(String::as_str).collect()
    }

    /// Notes a snapshot of `lane` committed at `at_ms` by a registrar that needs slots of
    /// `slot_ms` and does (or does not) carry the fleet's intents. Of two snapshots seen at the
    /// same moment (one read), the first noted (the newer) stands.
    pub(crate) fn observe(&mut self, lane: &str, at_ms: i64, slot_ms: u64, carries: bool) {
        let commit = Seen {
            at: at_ms,
            slot: slot_ms,
            slot_at: at_ms,
            committed: Some(at_ms),
            carries,
            answered: None,
        };
        if let Some(seen) = self.lanes.get_mut(lane) {
            if seen.committed.is_none_or(|c| at_ms > c) {
                *seen = Seen {
                    at: seen.at.max(at_ms),
                    answered: seen.answered,
                    ..commit
                };
            }
            return;
        }
        self.insert(lane, commit);
    }

    /// Notes that an intent of `lane` was carried by a snapshot committed at `at_ms`: the lane
    /// is present (it publishes), the slot it needs is what it last published itself (and
    /// counts only while that commit is recent, see [`slot_memory_ms`]).
    pub(crate) fn carried(&mut self, lane: &str, at_ms: i64) {
        self.publishing(lane, at_ms, false);
    }

    /// Notes that `lane` answered a roll call at `at_ms` (this node's clock, when it listed the
    /// intents): present, and a committer while no lane is seen committing (see
    /// [`Fleet::turn`]).
    pub(crate) fn answered(&mut self, lane: &str, at_ms: i64) {
        self.publishing(lane, at_ms, true);
    }

    /// Notes that `lane` was seen publishing at `at_ms` (an intent of it carried, or, with
    /// `answered`, in a roll call): present, its slot and commits as its own commits told.
    fn publishing(&mut self, lane: &str, at_ms: i64, answered: bool) {
        let answer = answered.then_some(at_ms);
        if let Some(seen) = self.lanes.get_mut(lane) {
            seen.at = seen.at.max(at_ms);
            seen.answered = seen.answered.max(answer);
            return;
        }
        self.insert(
            lane,
            Seen {
                at: at_ms,
                slot: 0,
                slot_at: at_ms,
                committed: None,
                carries: true,
                answered: answer,
            },
        );
    }

    /// Adds a lane not seen before, the one seen longest ago making room at [`MAX_LANES`].
    fn insert(&mut self, lane: &str, seen: Seen) {
        if self.lanes.len() >= MAX_LANES {
            // The lane seen longest ago makes room.
            if let Some(oldest) = self
                .lanes
                .iter()
                .min_by_key(|(_, seen)| seen.at)
                .map(|(k, _)| k.clone())
            {
                self.lanes.remove(&oldest);
            }
        }
        self.lanes.insert(lane.to_string(), seen);
    }

    /// How long a lane counts as present after its last snapshot: [`LANE_MEMORY_CYCLES`] cycles
    /// of the lanes present over that memory, and never less than [`LANE_MEMORY_MS`]. A fixed
    /// memory shorter than a few cycles forgets nodes that are still there but commit once a
    /// cycle (32 nodes × 1,350 ms slots made 43 s cycles against a 60 s memory): the nodes then
    /// rank different sets of lanes, their slots overlap, and the 409s push more commits past
    /// the memory, until the turns break down. Bounded (by [`MAX_LANES`] and
    /// [`MAX_SLOT_MS`](super::slots::MAX_SLOT_MS)), and a node that is gone stops counting after that many cycles.
    ///
    /// Nor shorter than [`VIEW_FALLBACKS`] of the fleet's fallbacks: a node that only publishes
    /// renews its view at its fallback's load, and a view that lapsed before that (the
    /// fallback, jittered, is up to one and a half of itself) would make it load at every
    /// attempt instead. Past ~500 nodes the fallback (a second per 8 lanes) outgrows a minute:
    /// 1,000 nodes in one process loaded the table 100 times a second for 10 s after their
    /// start, and the committer's commits waited behind the loads (p99 4-6 s).
    pub(crate) fn memory_ms(&self, now_ms: i64) -> i64 {
        // The fallbacks first: of the lanes seen within the longest view all the lanes known
        // could need, so that a view does not lapse for having been taken long ago.
        let view = |window: Window| {
            let fallback = fallback_ms(window.slot, window.lanes, self.takers(window.lanes));
            i64::try_from(fallback)
                .unwrap_or(i64::MAX)
                .saturating_mul(VIEW_FALLBACKS)
        };
        let widest = view(self.window(now_ms, i64::MAX));
        let mut memory = view(self.window(now_ms, widest)).max(LANE_MEMORY_MS);
        // Each round can only widen the memory (more lanes, a longer cycle); the lanes are
        // finite, so this settles, in practice after one or two rounds.
        for _ in 0..8 {
            let window = self.window(now_ms, memory);
            let cycle = i64::try_from(window.slot)
                .unwrap_or(i64::MAX)
                .saturating_mul(i64::try_from(window.lanes).unwrap_or(i64::MAX));
            let wanted = cycle.saturating_mul(LANE_MEMORY_CYCLES).max(memory);
            if wanted <= memory {
                break;
            }
            memory = wanted;
        }
        memory
    }

    /// The lanes present at `now_ms` (seen within [`Fleet::memory_ms`]), our own always among
    /// them.
    pub(crate) fn present(&self, now_ms: i64) -> Vec<(&str, u64)> {
        self.present_within(now_ms, self.memory_ms(now_ms))
            .iter()
            .map(|p| (p.lane, p.slot))
            .collect()
    }

    /// Whether `lane` (seen at `seen`) is in a view of `memory_ms` at `now_ms`: our own always.
    /// The time is compared first: most lanes are recent. Comparing ids lane by lane, with the
    /// lookup of each present lane the ranks made again, was a tenth of the CPU of a process
    /// hosting 1,000 nodes (`benches/fleet_sim`, `memcmp`).
    fn within(&self, lane: &str, seen: &Seen, now_ms: i64, memory_ms: i64) -> bool {
        now_ms.saturating_sub(seen.at) <= memory_ms || lane == self.own
    }

    /// The slot memory of a view: how long a published slot counts (see [`slot_memory_ms`]),
    /// from the largest slot `published` by the `seen` lanes remembered within it.
    fn slot_memory(&self, published: u64, seen: usize) -> i64 {
        slot_memory_ms(published, self.takers(seen))
    }

    /// What [`Fleet::present_within`] would hold, counted without listing it: how many lanes
    /// and the fleet's slot over them. [`Fleet::memory_ms`] weighs three or more views a call,
    /// and a node asks for its turn several times an attempt and at every wake-up: with each
    /// view listed (two vectors of every lane present), [`Fleet::turn`] took a sixth of the CPU
    /// of a process hosting 1,000 nodes.
    fn window(&self, now_ms: i64, memory_ms: i64) -> Window {
        let mut seen = 0;
        let mut published = 0;
        for (lane, s) in &self.lanes {
            if self.within(lane, s, now_ms, memory_ms) {
                seen += 1;
                published = published.max(s.slot);
            }
        }
        let slot_memory = self.slot_memory(published, seen);
        let slot = fleet_slot(
            self.lanes
                .iter()
                .filter(|(lane, s)| self.within(lane, s, now_ms, memory_ms))
                .map(|(_, s)| counted_slot(s, now_ms, slot_memory)),
        );
        Window {
            lanes: seen + usize::from(!self.lanes.contains_key(&self.own)),
            slot,
        }
    }

    /// The lanes seen within `memory_ms` of `now_ms`, our own always among them, sorted, each
    /// with the slot it counts with: the one it published, while its commit that published it
    /// is within [`slot_memory_ms`], else none.
    fn present_within(&self, now_ms: i64, memory_ms: i64) -> Vec<Present<'_>> {
        let mut present: Vec<Present<'_>> = self
            .lanes
            .iter()
            .filter(|(lane, s)| self.within(lane, s, now_ms, memory_ms))
            .map(|(lane, s)| Present {
                lane: lane.as_str(),
                slot: s.slot,
                seen: Some(s),
            })
            .collect();
        let published = present.iter().map(|p| p.slot).max().unwrap_or(0);
        let slot_memory = self.slot_memory(published, present.len());
        for p in &mut present {
            if let Some(s) = p.seen {
                p.slot = counted_slot(s, now_ms, slot_memory);
            }
        }
        if !self.lanes.contains_key(&self.own) {
            present.push(Present {
                lane: self.own.as_str(),
                slot: 0,
                seen: None,
            });
            present.sort_unstable_by(|a, b| a.lane.cmp(b.lane));
        }
        present
    }

    /// The length of a cycle (every committing lane's slot once), in ms; `None` while not
    /// slotted.
    pub(crate) fn cycle_ms(&self, now_ms: i64) -> Option<u64> {
        let present = self.present_within(now_ms, self.memory_ms(now_ms));
        if !self.others_present(&present) {
            return None;
        }
        let lanes = self.takers(present.len()) as u64;
        if lanes == 1 {
            return Some(SOLE_CADENCE_MS);
        }
        Some(fleet_slot(present.iter().map(|p| p.slot)).saturating_mul(lanes))
    }

    /// Whether a lane of another node is present: lanes of this registrar's own log (its run
    /// before a restart) do not count, so a lone registrar is never slotted.
    fn others_present(&self, present: &[Present<'_>]) -> bool {
        // Our own lane and at most every lane of our log: any more is another node's.
        present.len() > 1 + self.same_log.len()
            || present
                .iter()
                .any(|p| p.lane != self.own && !self.same_log.contains(p.lane))
    }

    /// When this lane's next commit may start (ms since the epoch), at or after `now_ms`, with
    /// the slot length; `None` while no other registrar commits to the table. Lanes of this
    /// registrar's own log keep their ranks (the other nodes still count them, for a minute, and
    /// every node must rank the same lanes), and their slots are this registrar's too.
    #[cfg(test)]
    fn next_start(&self, now_ms: i64) -> Option<(i64, u64)> {
        match self.turn(now_ms) {
            Turn::Slot { start, slot } => Some((start, slot)),
            Turn::Alone | Turn::Sole { .. } | Turn::Carried { .. } => None,
        }
    }

    /// The lowest lane that ranks as a committer, as this node sees the fleet (for the logs).
    pub(crate) fn committer(&self, now_ms: i64) -> Option<String> {
        let memory = self.memory_ms(now_ms);
        let present = self.present_within(now_ms, memory);
        self.committers_among(&present, now_ms, memory)
            .first()
            .map(|lane| (*lane).to_string())
    }

    /// The lanes of `present` that rank as committers where only a few take turns, lowest
    /// first: those seen committing themselves that carry the fleet's intents (a lane known
    /// only from intents carried, which anyone who can write one can claim, or a node with
    /// `commit.intents: false`, would be a committer that never carries). This node's own lane
    /// ranks only once the table has shown a commit of it: the others rank only the lanes they
    /// have seen, and a node invisible to them that ranked itself among the committers would
    /// commit in another's slot, lose, and stay invisible, cycle after cycle (64 nodes: 52 such
    /// 409s in the first 12 s).
    ///
    /// While no lane is seen committing (a fleet started together, after its roll call), the
    /// lanes that answered the roll call rank instead: every node that listed the same intents
    /// picks the same committer before anyone commits. A lane that commits outranks them all,
    /// so a claim by a forged key lasts only until the deputy commits (see
    /// [`Fleet::is_deputy`]).
    fn committers_among<'a>(
        &self,
        present: &[Present<'a>],
        now_ms: i64,
        memory: i64,
    ) -> Vec<&'a str> {
        let recent = |at: Option<i64>| at.is_some_and(|at| now_ms.saturating_sub(at) <= memory);
        let among = |rank: &dyn Fn(&Seen) -> bool| -> Vec<&'a str> {
            present
                .iter()
                .filter(|p| p.seen.is_some_and(rank))
                .map(|p| p.lane)
                .collect()
        };
        let committing = among(&|seen| seen.carries && recent(seen.committed));
        if !committing.is_empty() {
            return committing;
        }
        among(&|seen| recent(seen.answered))
    }

    /// Whether this lane is the fleet's deputy: the lowest of `present` that is not among the
    /// `committers` and was seen at work lately ([`DEPUTY_SEEN_MS`]: its intents carried, or a
    /// commit of its own), as every node sees the same snapshots. The deputy attempts every
    /// [`DEPUTY_FALLBACK_MS`] rather than every fallback, so that when the committer dies (or
    /// stalls) one node commits what waits, carrying everyone's, within seconds rather than
    /// the 16 s fallback of a 128-node fleet; once the dead committer leaves the lane memory,
    /// the deputy ranks lowest and takes its place. A lane seen only in snapshots long ago (a
    /// node gone) cannot be the deputy, so the role passes on too.
    fn is_deputy(&self, present: &[Present<'_>], committers: &[&str], now_ms: i64) -> bool {
        present
            .iter()
            .filter(|p| !committers.contains(&p.lane))
            .find(|p| {
                p.seen
                    .is_some_and(|seen| now_ms.saturating_sub(seen.at) <= DEPUTY_SEEN_MS)
            })
            .is_some_and(|p| p.lane == self.own || self.same_log.contains(p.lane))
    }

    /// What this lane does now (see [`Turn`]). Only the lowest lanes (by id) take turns when
    /// the fleet carries intents (one, [`COMMITTERS`]): every node then agrees on who commits
    /// from a few lanes rather than from all of them (a node's view of the lanes is as fresh as
    /// its last load, and with 64 nodes taking turns their views disagreed for cycles on end,
    /// 409 upon 409). A lane that stops committing drops out of the others' memory, so the
    /// committers stay the lowest lanes of those that commit; one that commits as a fallback
    /// joins them. Until then the others commit what they published themselves, each after its
    /// fallback ([`patience_ms`](super::slots::patience_ms)), carrying everyone's.
    pub(crate) fn turn(&self, now_ms: i64) -> Turn {
        let memory = self.memory_ms(now_ms);
        let present = self.present_within(now_ms, memory);
        if !self.others_present(&present) {
            return Turn::Alone;
        }
        let slot = fleet_slot(present.iter().map(|p| p.slot));
        let lanes = self.takers(present.len());
        let ranked: Vec<&str> = if lanes < present.len() {
            // Only a few committers (see `committers_among`).
            self.committers_among(&present, now_ms, memory)
        } else {
            present.iter().map(|p| p.lane).collect()
        };
        ranked
            .iter()
            .enumerate()
            .filter(|(rank, lane)| {
                *rank < lanes && (**lane == self.own || self.same_log.contains(**lane))
            })
            .map(|(rank, _)| next_slot(now_ms, slot, lanes, rank))
            .min()
            .map_or_else(
                || {
                    let committers = &ranked[..lanes.min(ranked.len())];
                    let fallback = fallback_ms(slot, present.len(), lanes);
                    Turn::Carried {
                        fallback: if self.is_deputy(&present, committers, now_ms) {
                            fallback.min(DEPUTY_FALLBACK_MS)
                        } else {
                            fallback
                        },
                    }
                },
                |start| {
                    if lanes == 1 {
                        Turn::Sole { slot }
                    } else {
                        Turn::Slot { start, slot }
                    }
                },
            )
    }
}

#[cfg(test)]
mod tests {
    use super::super::slots::MIN_FALLBACK_MS;
    use super::*;

    #[test]
    fn a_lone_registrar_has_no_slots_and_a_fleet_agrees_on_one_grid() {
        let now = 1_000_000;
        let mut a = Fleet::new("a".into());
        assert_eq!(a.next_start(now), None);
        a.observe("a", now - 10, 100, true);
        assert_eq!(a.next_start(now), None, "only itself");
        a.observe("c", now - 1_000, 200, true);
        a.observe("b", now - 2_000, 150, true);
        let mut c = Fleet::new("c".into());
        c.observe("a", now - 10, 100, true);
        c.observe("b", now - 2_000, 150, true);
        c.observe("c", now - 1_000, 200, true);
        let (sa, slot_a) = a.next_start(now).expect("slotted");
        let (sc, slot_c) = c.next_start(now).expect("slotted");
        // One slot length (the largest published), different slots.
        assert_eq!((slot_a, slot_c), (200, 200));
        assert_ne!(sa, sc);
        assert_eq!((sa / 200).rem_euclid(3), 0);
        assert_eq!((sc / 200).rem_euclid(3), 2);
        // A lane that wrote for our own log (our previous run) is not another node...
        let mut d = a.clone();
        d.same_log("b");
        d.same_log("c");
        assert_eq!(d.next_start(now), None);
        // ... but keeps its rank among other nodes' lanes, and its slots are ours too.
        let mut e = a.clone();
        e.same_log("b");
        let (se, _) = e.next_start(now).expect("slotted: c is another node");
        assert!(se <= sa);
        assert!(
            [0, 1].contains(&(se / 200).rem_euclid(3)),
            "a's or b's slot"
        );
        // A lane not seen for a minute no longer counts.
        let later = now + LANE_MEMORY_MS + 5_000;
        a.observe("a", later, 100, true);
        assert_eq!(a.next_start(later), None);
    }

    #[test]
    fn a_publishers_view_of_a_thousand_nodes_lasts_until_its_fallback() {
        let now = 10_000_000;
        // What a node of 1,000 that only publishes sees at a load: the committer at work, and
        // the lanes whose intents it carried over the last minute.
        let mut f = Fleet::new("n0500".into()).carrying();
        f.observe("n0000", now, 300, true);
        for i in 1..1_000 {
            f.publishing(&format!("n{i:04}"), now - (i % 60) * 1_000, false);
        }
        let Turn::Carried { fallback } = f.turn(now) else {
            panic!("a publisher: {:?}", f.turn(now));
        };
        assert!(fallback > 100_000, "a second per 8 lanes: {fallback}");
        assert!(f.memory_ms(now) >= 2 * i64::try_from(fallback).expect("ms"));
        // Its next fallback comes up to one and a half fallbacks later (jittered): the view
        // still shows the committer then, so the attempts before it need no load.
        let later = now + i64::try_from(fallback * 3 / 2).expect("ms");
        assert_eq!(f.committer(later).as_deref(), Some("n0000"));
        assert!(matches!(f.turn(later), Turn::Carried { .. }));
    }

    #[test]
    fn a_counted_view_holds_what_the_listed_view_holds() {
        use rand::{Rng, SeedableRng};
        // `window` counts what `present_within` lists (memory_ms weighs views by it): for any
        // fleet and memory, the same number of lanes and the same slot.
        let seed: u64 = rand::random();
        println!("lanes view: seed {seed}");
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let now = 100_000_000;
        for case in 0..200 {
            let mut f = Fleet::new(format!("{:03x}", rng.random_range(0..64_u32))).carrying();
            for _ in 0..rng.random_range(0..80) {
                let lane = format!("{:03x}", rng.random_range(0..64_u32));
                let at = now - rng.random_range(0..600_000);
                match rng.random_range(0..4) {
                    0 => f.observe(&lane, at, rng.random_range(0..6_000), rng.random()),
                    1 => f.carried(&lane, at),
                    2 => f.answered(&lane, at),
                    _ => f.same_log(&lane),
                }
            }
            for memory in [0, 10_000, 60_000, 300_000, f.memory_ms(now), i64::MAX] {
                let listed = f.present_within(now, memory);
                let counted = Window {
                    lanes: listed.len(),
                    slot: fleet_slot(listed.iter().map(|p| p.slot)),
                };
                assert_eq!(
                    f.window(now, memory),
                    counted,
                    "seed {seed}, case {case}, memory {memory}"
                );
                assert!(listed.windows(2).all(|w| w[0].lane < w[1].lane), "sorted");
                assert_eq!(
                    listed.iter().filter(|p| p.lane == f.own()).count(),
                    1,
                    "our own once"
                );
            }
        }
    }

    #[test]
    fn a_lane_is_remembered_for_three_cycles_of_a_large_fleet() {
        let now = 10_000_000;
        // A small fleet: a minute, whatever the cycle.
        let mut small = Fleet::new("own".into());
        small.observe("own", now, 200, true);
        small.observe("x", now - 1_000, 200, true);
        assert_eq!(small.memory_ms(now), LANE_MEMORY_MS);
        // 32 lanes with 1,350 ms slots: a 43.2 s cycle, so three of them. A node whose last
        // commit was 70 s ago (a 409 pushed it to the next cycle) is still counted, and every
        // node ranks the same 32 lanes.
        let mut big = Fleet::new("n00".into());
        for i in 0..31_i64 {
            big.observe(&format!("n{i:02}"), now - i * 1_350, 1_350, true);
        }
        big.observe("n31", now - 70_000, 1_350, true);
        assert_eq!(big.memory_ms(now), 3 * 32 * 1_350);
        assert_eq!(big.present(now).len(), 32);
        assert_eq!(big.cycle_ms(now), Some(32 * 1_350));
        // The memory widens with what it finds: lanes beyond a minute count when the lanes
        // within it already make a long cycle.
        let mut chain = Fleet::new("c00".into());
        for i in 0..64_i64 {
            chain.observe(&format!("c{i:02}"), now - i * 1_500, 1_500, true);
        }
        assert_eq!(chain.present(now).len(), 64);
        // A node gone for more than three cycles no longer counts.
        let later = now + 3 * 32 * 1_350 + 1;
        big.observe("n00", later, 1_350, true);
        assert_eq!(big.present(later).len(), 1);
        assert_eq!(big.next_start(later), None);
    }

    #[test]
    fn only_the_lowest_lanes_take_turns_when_the_fleet_carries() {
        let now = 10_000_000;
        let fleet = |own: &str| {
            let mut f = Fleet::new(own.into()).with_committers(8);
            for i in 0..20 {
                f.observe(&format!("l{i:02}"), now - 1_000, 200, true);
            }
            f
        };
        // As the fleet runs: the lowest lane commits in every slot, the others publish.
        let one = |own: &str| {
            let mut f = Fleet::new(own.into()).carrying();
            for i in 0..20 {
                f.observe(&format!("l{i:02}"), now - 1_000, 200, true);
            }
            f
        };
        assert_eq!(one("l00").cycle_ms(now), Some(200));
        assert_eq!(one("l00").turn(now), Turn::Sole { slot: 200 });
        // The next lowest is the deputy (see `is_deputy`).
        assert_eq!(
            one("l01").turn(now),
            Turn::Carried {
                fallback: DEPUTY_FALLBACK_MS
            }
        );
        assert_eq!(
            one("l02").turn(now),
            Turn::Carried {
                fallback: MIN_FALLBACK_MS
            }
        );
        // In a fleet of up to ALL_TAKE_TURNS lanes, every lane takes turns.
        let mut few = Fleet::new("l02".into()).carrying();
        for i in 0..4 {
            few.observe(&format!("l{i:02}"), now - 1_000, 200, true);
        }
        assert_eq!(few.cycle_ms(now), Some(4 * 200));
        assert_eq!(
            few.turn(now),
            Turn::Slot {
                start: next_slot(now, 200, 4, 2),
                slot: 200
            }
        );
        // With 8 committers, the 8 lowest take turns among themselves, a cycle of 8 slots.
        for (i, own) in ["l00", "l03", "l07"].into_iter().enumerate() {
            let f = fleet(own);
            assert_eq!(f.cycle_ms(now), Some(8 * 200));
            let rank = [0, 3, 7][i];
            assert_eq!(
                f.turn(now),
                Turn::Slot {
                    start: next_slot(now, 200, 8, rank),
                    slot: 200
                }
            );
        }
        // The others publish only, and attempt themselves about once per committer cycle (at
        // least 5 s); the lowest of them, the deputy, every 2 s.
        assert_eq!(fleet("l19").turn(now), Turn::Carried { fallback: 5_000 });
        assert_eq!(
            fleet("l08").turn(now),
            Turn::Carried {
                fallback: DEPUTY_FALLBACK_MS
            }
        );
        let mut slow = fleet("l12");
        slow.observe("l01", now, 1_000, true);
        assert_eq!(
            slow.turn(now),
            Turn::Carried {
                fallback: 8 * 1_000
            }
        );
        // Without intents, every lane takes turns.
        let mut all = Fleet::new("l19".into());
        for i in 0..20 {
            all.observe(&format!("l{i:02}"), now - 1_000, 200, true);
        }
        assert_eq!(all.cycle_ms(now), Some(20 * 200));
        assert!(matches!(all.turn(now), Turn::Slot { .. }));
        // Alone, a carrying fleet of one is alone.
        assert_eq!(Fleet::new("x".into()).carrying().turn(now), Turn::Alone);
    }

    #[test]
    fn a_slot_published_long_ago_stops_counting_while_its_lane_only_publishes() {
        let now = 10_000_000;
        // 8 committers need 200 ms; 20 lanes that only publish committed once, at the fleet's
        // contended start, and published 900 ms then.
        let start = now - 5_000;
        let mut f = Fleet::new("c0".into()).with_committers(8);
        for i in 0..20 {
            f.observe(&format!("f{i:02}"), start, 900, true);
        }
        let commits = |f: &mut Fleet, at: i64| {
            for i in 0..8 {
                f.observe(&format!("c{i}"), at, 200, true);
            }
            for i in 0..20 {
                f.carried(&format!("f{i:02}"), at);
            }
        };
        commits(&mut f, now - 100);
        // Within the slot memory (3 cycles of 8 × 900 ms): the start's slot holds the grid.
        assert_eq!(slot_memory_ms(900, 8), 21_600);
        assert_eq!(f.cycle_ms(now), Some(8 * 900));
        // Past it, with the publishers still present (carried), the committers' slots set it.
        let later = start + 21_601;
        commits(&mut f, later - 100);
        assert_eq!(
            f.present(later).len(),
            28,
            "the publishers are still present"
        );
        assert_eq!(f.cycle_ms(later), Some(8 * 200));
        assert_eq!(
            f.turn(later),
            Turn::Slot {
                start: next_slot(later, 200, 8, 0),
                slot: 200
            }
        );
        // A publisher that commits again (its fallback) counts with what it publishes then.
        f.observe("f03", later - 50, 400, true);
        assert_eq!(f.cycle_ms(later), Some(8 * 400));
    }

    #[test]
    fn a_lane_the_table_has_not_shown_does_not_take_turns_among_many() {
        let now = 10_000_000;
        // 20 lanes seen; this node's lane ("l00a", lowest after l00) not among them.
        let mut f = Fleet::new("l00a".into()).with_committers(8);
        for i in 0..20 {
            f.observe(&format!("l{i:02}"), now - 1_000, 200, true);
        }
        assert_eq!(
            f.turn(now),
            Turn::Carried {
                fallback: MIN_FALLBACK_MS
            }
        );
        // An intent of it carried does not make it rank: anyone who can write an intent can
        // claim a lane (a fake lowest one would hold every node off committing).
        f.carried("l00a", now - 500);
        assert!(matches!(f.turn(now), Turn::Carried { .. }));
        f.carried("0000", now - 500);
        assert!(matches!(f.turn(now), Turn::Carried { .. }));
        // Once the table shows a commit of its own, it ranks (second lowest, after l00; the
        // claimed lane 0000 does not) and takes turns.
        f.observe("l00a", now - 500, 200, true);
        assert_eq!(
            f.turn(now),
            Turn::Slot {
                start: next_slot(now, 200, 8, 1),
                slot: 200
            }
        );
        // ... and a carried lane keeps the slot it published.
        f.observe("l05", now - 400, 350, true);
        f.carried("l05", now - 300);
        assert_eq!(
            f.lanes.get("l05"),
            Some(&Seen {
                at: now - 300,
                slot: 350,
                slot_at: now - 400,
                committed: Some(now - 400),
                answered: None,
                carries: true,
            })
        );
        // Seen long ago only: not ranked again until the table shows it anew.
        let later = now + f.memory_ms(now) + 60_000;
        for i in 0..20 {
            f.observe(&format!("l{i:02}"), later - 1_000, 200, true);
        }
        assert!(matches!(f.turn(later), Turn::Carried { .. }));
        // Among as few lanes as take turns anyway, an unseen lane ranks at once.
        let mut small = Fleet::new("l00a".into()).with_committers(8);
        small.observe("l00", now - 1_000, 200, true);
        small.observe("l01", now - 1_000, 200, true);
        assert!(matches!(small.turn(now), Turn::Slot { .. }));
    }

    #[test]
    fn a_sole_committer_goes_at_its_cadence_not_on_the_grid() {
        let now = 10_000_000;
        let fleet = |own: &str, lanes: usize| {
            let mut f = Fleet::new(own.into()).carrying();
            for i in 0..lanes {
                f.observe(&format!("{i:012x}"), now - 1_000, 550, true);
            }
            f
        };
        let committer = format!("{:012x}", 0);
        assert_eq!(fleet(&committer, 20).turn(now), Turn::Sole { slot: 550 });
        // The others do not take turns.
        assert!(matches!(
            fleet(&format!("{:012x}", 7), 20).turn(now),
            Turn::Carried { .. }
        ));
        // Up to ALL_TAKE_TURNS lanes all take turns; a lone registrar is alone.
        assert!(matches!(
            fleet(&committer, ALL_TAKE_TURNS).turn(now),
            Turn::Slot { .. }
        ));
        assert_eq!(Fleet::new("x".into()).carrying().turn(now), Turn::Alone);
        // Its cycle is the cadence, not the slot the lanes published.
        assert_eq!(fleet(&committer, 20).cycle_ms(now), Some(SOLE_CADENCE_MS));
        assert_eq!(
            fleet(&committer, ALL_TAKE_TURNS).cycle_ms(now),
            Some(8 * 550)
        );
    }

    #[test]
    fn the_lanes_remembered_are_bounded() {
        let mut f = Fleet::new("own".into());
        for i in 0..(MAX_LANES as i64 + 50) {
            f.observe(&format!("lane{i}"), i, 10, true);
        }
        assert_eq!(f.lanes.len(), MAX_LANES);
        assert!(f.lanes.contains_key(&format!("lane{}", MAX_LANES + 49)));
        assert!(!f.lanes.contains_key("lane0"));
    }

    #[test]
    fn a_fleet_started_together_ranks_the_lanes_that_answered_its_roll_call() {
        let now = 10_000_000;
        let lanes: Vec<String> = (0..20).map(|i| format!("a{i:02}")).collect();
        // Every node listed the same intents: each sees the same lowest lane as the committer,
        // before anyone committed.
        let turns: Vec<Turn> = lanes
            .iter()
            .map(|own| {
                let mut f = Fleet::new(own.clone()).carrying();
                for lane in &lanes {
                    f.answered(lane, now - 100);
                }
                f.turn(now)
            })
            .collect();
        assert!(matches!(turns[0], Turn::Sole { .. }), "{:?}", turns[0]);
        assert!(
            turns[1..].iter().all(|t| matches!(t, Turn::Carried { .. })),
            "{turns:?}"
        );
        // A lane seen committing outranks every answer (a node that started later, or a
        // forged intent's lower lane, cannot take the turn from the one at work).
        let mut f = Fleet::new("a01".into()).carrying();
        for lane in &lanes {
            f.answered(lane, now - 100);
        }
        f.answered("000000", now - 100);
        f.observe("a05", now - 50, 200, true);
        assert_eq!(f.committer(now).as_deref(), Some("a05"));
        assert!(matches!(f.turn(now), Turn::Carried { .. }));
        // Answers are forgotten with the lane memory, like commits.
        let later = now + f.memory_ms(now) + 1;
        let mut g = Fleet::new("a01".into()).carrying();
        g.answered("a00", now);
        assert_eq!(g.turn(later), Turn::Alone);
    }

    #[test]
    fn the_lowest_lane_at_work_after_the_committer_is_its_deputy() {
        let now = 10_000_000;
        let lanes: Vec<String> = (1..20).map(|i| format!("a{i:02}")).collect();
        let view = |own: &str, seen_ago: &dyn Fn(&str) -> i64| {
            let mut f = Fleet::new(own.to_string()).carrying();
            f.observe("a00", now - 300, 200, true);
            for lane in &lanes {
                f.carried(lane, now - seen_ago(lane));
            }
            f
        };
        let lately = |_: &str| 1_000;
        let normal = fallback_ms(200, 20, COMMITTERS);
        assert!(normal > DEPUTY_FALLBACK_MS);
        assert_eq!(
            view("a01", &lately).turn(now),
            Turn::Carried {
                fallback: DEPUTY_FALLBACK_MS
            }
        );
        assert_eq!(
            view("a02", &lately).turn(now),
            Turn::Carried { fallback: normal }
        );
        // A deputy not seen at work lately (gone) passes the role on.
        let gone = |lane: &str| if lane == "a01" { 30_000 } else { 1_000 };
        assert_eq!(
            view("a02", &gone).turn(now),
            Turn::Carried {
                fallback: DEPUTY_FALLBACK_MS
            }
        );
        // The committer is no deputy.
        assert!(matches!(view("a00", &lately).turn(now), Turn::Sole { .. }));
    }
}
