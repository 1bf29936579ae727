//! The slot rules of a fleet that takes turns, as pure functions: the slot every lane uses and
//! the one a lane needs, where a lane's next slot starts on the grid, how long a lane that does
//! not take turns leaves between its own attempts and how long it leaves its segments to the
//! committers, and what may name a lane.

use std::time::Duration;

/// How long a lane counts as present after its last snapshot, in cycles of the fleet (and at
/// least `lanes::LANE_MEMORY_MS`): a node commits once per cycle, and a 409 or a late batch
/// pushes its next commit a cycle further.
pub(super) const LANE_MEMORY_CYCLES: i64 = 3;

/// The least time between a non-committing lane's own attempts.
pub(super) const MIN_FALLBACK_MS: u64 = 5_000;
/// At most this many fallback attempts per slot across a fleet (see [`fallback_ms`]).
const FALLBACK_LOADS_PER_SLOT: u64 = 8;
/// At most this many fallback attempts a second across a fleet (see [`fallback_ms`]): each
/// loads the table, whose metadata (every snapshot's summary) grows with what the fleet
/// registered (~500 KB after a minute of 128 nodes), and the catalog and the store serve each.
const FALLBACK_LOADS_PER_SECOND: u64 = 8;
/// Slot lengths are multiples of this.
const SLOT_UNIT_MS: u64 = 50;
const MIN_SLOT_MS: u64 = 100;
pub(super) const MAX_SLOT_MS: u64 = 5_000;
/// A lane's published slot counts towards the fleet's for [`LANE_MEMORY_CYCLES`] cycles of the
/// committers after the lane's last commit of its own, and at least this long (see
/// [`slot_memory_ms`]).
const SLOT_MEMORY_MS: i64 = 10_000;
/// While the committers are seen carrying, a node that does not take turns leaves its published
/// segments to them for up to this many fallbacks (see [`patience_ms`]).
pub(crate) const FALLBACK_PATIENCE: u64 = 4;
/// The committers count as at work while their last carrying commit is no more than this many
/// of their recent gaps between carrying commits ago (see [`patience_ms`]).
const CARRY_GAPS: i64 = 3;

/// Whether `lane` looks like a lane ([`Fleet::default`](super::lanes::Fleet::default): hex
/// digits), so that what another node wrote into an intent or a summary cannot put anything
/// else into this node's summaries.
pub(crate) fn is_lane(lane: &str) -> bool {
    (1..=32).contains(&lane.len()) && lane.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The slot every lane uses: the largest any of them needs (each lane with the slot it counts
/// with, see [`slot_memory_ms`]).
pub(super) fn fleet_slot(slots: impl IntoIterator<Item = u64>) -> u64 {
    slots
        .into_iter()
        .max()
        .unwrap_or(0)
        .clamp(MIN_SLOT_MS, MAX_SLOT_MS)
}

/// How long after a lane's last commit of its own the slot it published counts towards the
/// fleet's, in a fleet whose largest published slot is `slot` and where `committers` lanes take
/// turns: [`LANE_MEMORY_CYCLES`] of their cycles, and at least [`SLOT_MEMORY_MS`]. A lane that
/// takes turns commits once a cycle, so its slot always counts; one that only publishes is
/// present for as long as its intents are carried, but the slot it published at its last commit
/// (as a rule in the fleet's contended first seconds) says nothing of what a commit needs now,
/// and would hold the fleet's grid at that length for good (64 nodes: ~1 s slots, 1 commit/s
/// where 4-5 were enough). Bounded: at most 3 × 8 × 5 s = 2 minutes in a fleet that carries
/// intents.
pub(super) fn slot_memory_ms(slot: u64, committers: usize) -> i64 {
    let slot = i64::try_from(slot.clamp(MIN_SLOT_MS, MAX_SLOT_MS)).unwrap_or(i64::MAX);
    let committers = i64::try_from(committers.max(1)).unwrap_or(i64::MAX);
    slot.saturating_mul(committers)
        .saturating_mul(LANE_MEMORY_CYCLES)
        .max(SLOT_MEMORY_MS)
}

/// How long a node that does not take turns leaves between its own attempts, in a fleet of
/// `lanes` lanes with slots of `slot` ms and `committers` committers: one cycle of the
/// committers, at least [`MIN_FALLBACK_MS`], and at least one slot per
/// [`FALLBACK_LOADS_PER_SLOT`] lanes, so that the fleet's fallback loads come to at most that
/// many per slot whatever N is, and at least one second per [`FALLBACK_LOADS_PER_SECOND`] lanes
/// (128 nodes: 16 s; 1,000 nodes: 125 s). Every node started at about the same time, so the
/// attempts are jittered ([`jittered`]): without it, a fleet's fallback loads come in bursts
/// that swamp the catalog and the store (127 nodes: 50-80 loads in one second, every 5 s). It
/// is not the cycle all lanes would make: every publishing lane is present
/// (`thadam.carried-lanes`), so that cycle grows with N, and a node that learns only that late
/// what was carried holds its segments back as long.
pub(super) fn fallback_ms(slot: u64, lanes: usize, committers: usize) -> u64 {
    let lanes = u64::try_from(lanes).unwrap_or(u64::MAX);
    let committers = u64::try_from(committers).unwrap_or(u64::MAX);
    slot.saturating_mul(committers)
        .max(slot.saturating_mul(lanes) / FALLBACK_LOADS_PER_SLOT)
        .max(lanes.saturating_mul(1_000) / FALLBACK_LOADS_PER_SECOND)
        .max(MIN_FALLBACK_MS)
}

/// `ms` spread over half to one and a half of itself by `unit` (uniform in [0, 1)): the same
/// mean, but a fleet's nodes that started together do not keep attempting together.
pub(crate) fn jittered(ms: u64, unit: f64) -> Duration {
    Duration::from_millis(ms).mul_f64(0.5 + unit.clamp(0.0, 1.0))
}

/// How long ago a node that does not take turns, with a fallback of `fallback` ms, may have
/// published its segments and still leave them to the committers, given how long ago the table's
/// newest snapshot that carried intents was committed (`since_carried_ms`; `None`: none seen) and
/// the longest time between two carrying snapshots lately (`carry_gap_ms`).
///
/// One fallback, as a rule: past it the node commits what it published itself. But while the
/// committers are seen carrying, they are slow, not gone, and up to [`FALLBACK_PATIENCE`]
/// fallbacks. Seen carrying: a carrying snapshot within the last fallback, or within
/// [`CARRY_GAPS`] of the committers' recent gaps, up to the patience itself. The second matters
/// to the deputy, whose fallback (2 s) is shorter than a slow committer's cycle (3 s with the
/// catalog and S3 100 ms away and a pile of intents each commit): on its fallback alone it took
/// such a committer for gone, lost six 409s to it in a minute, and the committer's commits
/// stretched to 400 segments each (128 nodes: p99 24 s). A committer that stops still counts as
/// gone within one patience. Otherwise: every node published at about the same
/// time, so when a committer's windows stretch past a fallback, every node's segments come of
/// age together, and each node that commits them itself lists and carries everyone's, as they
/// are (one manifest per intent for the next commit to merge), and meets the others' commits
/// (409s). That cascade took 128-node runs from a p99 of 1-3 s to minutes. Bounded, so that a
/// node whose intents the committers pass over (past a listing's first page) still gets its
/// segments in; and a fleet whose committers are gone falls back after one fallback, as before.
pub(crate) fn patience_ms(
    fallback: u64,
    since_carried_ms: Option<i64>,
    carry_gap_ms: Option<i64>,
) -> u64 {
    let patience = fallback.saturating_mul(FALLBACK_PATIENCE);
    let fallback_ms = i64::try_from(fallback).unwrap_or(i64::MAX);
    let at_work_ms = carry_gap_ms
        .map_or(0, |gap| gap.saturating_mul(CARRY_GAPS))
        .min(i64::try_from(patience).unwrap_or(i64::MAX))
        .max(fallback_ms);
    match since_carried_ms {
        Some(since) if since <= at_work_ms => patience,
        _ => fallback,
    }
}

/// The slot a registrar whose commit round trip (load → answer, smoothed) is `round_trip_ms`
/// needs, given the slot it published last (`current`) and the slot the attempt measured was
/// made in (`made_in`): one and a half round trips in [`SLOT_UNIT_MS`] steps, raised at once
/// when the round trip needs more, but to at most twice the longer of `current` and `made_in`
/// per turn, and lowered only when it needs half or less.
///
/// Every change moves the whole fleet's grid (each slot's start is a multiple of its length),
/// and the nodes learn of it one load at a time: until they all have, two committers can hold
/// one moment, and one of them meets a 409. Hence lowered only at half: lowered at three
/// quarters, a 64-node fleet's committers moved the grid between 100, 150 and 200 ms every few
/// commits.
///
/// The raise is bounded because a slot comes down only at its lane's next turn, a cycle of the
/// committers later: a turn slowed by the crowd (every node starting at once) would otherwise
/// set slots many times what a commit needs for that whole cycle, while the backlog grows
/// (128 nodes: a 3.2 s first turn published 4.8 s slots, a 38 s cycle). Windows that stay long
/// raise the slot turn after turn (150, 300, 600, 1,200 ms, ...), each 409 in a turn counting
/// too.
pub(crate) fn desired_slot(current: u64, made_in: u64, round_trip_ms: f64) -> u64 {
    let need = (round_trip_ms.max(0.0) * 1.5).ceil() as u64;
    let rounded = need
        .div_ceil(SLOT_UNIT_MS)
        .saturating_mul(SLOT_UNIT_MS)
        .clamp(MIN_SLOT_MS, MAX_SLOT_MS);
    let ceiling = current
        .max(made_in)
        .max(MIN_SLOT_MS)
        .saturating_mul(2)
        .min(MAX_SLOT_MS);
    if current == 0 || rounded > current || rounded.saturating_mul(2) <= current {
        rounded.min(ceiling)
    } else {
        current
    }
}

/// The start (ms since the epoch) of the first slot at or after `now_ms` whose index on the
/// grid of `slot` ms is `rank` modulo `lanes`.
pub(super) fn next_slot(now_ms: i64, slot: u64, lanes: usize, rank: usize) -> i64 {
    let slot = i64::try_from(slot.max(1)).unwrap_or(i64::MAX);
    let lanes = i64::try_from(lanes.max(1)).unwrap_or(1);
    let rank = i64::try_from(rank).unwrap_or(0) % lanes;
    let index = now_ms.div_euclid(slot);
    let current = index.rem_euclid(lanes);
    let mut ahead = (rank - current).rem_euclid(lanes);
    if ahead == 0 && now_ms > index * slot {
        // Our slot has begun already: wait for the next cycle's.
        ahead = lanes;
    }
    (index + ahead) * slot
}

#[cfg(test)]
mod tests {
    use super::super::lanes::{COMMITTERS, MAX_LANES};
    use super::*;

    #[test]
    fn a_lane_is_a_few_hex_digits() {
        assert!(is_lane("0123456789ab"));
        assert!(is_lane("00aa"));
        assert!(!is_lane(""));
        assert!(!is_lane("a,b"));
        assert!(!is_lane("not a lane"));
        assert!(!is_lane(&"a".repeat(33)));
    }

    #[test]
    fn a_slot_is_one_and_a_half_round_trips_and_does_not_flicker() {
        let any = MAX_SLOT_MS;
        assert_eq!(desired_slot(0, any, 0.0), MIN_SLOT_MS);
        assert_eq!(desired_slot(0, any, 40.0), 100);
        assert_eq!(desired_slot(0, any, 70.0), 150);
        assert_eq!(desired_slot(0, any, 60_000.0), MAX_SLOT_MS);
        // Raised at once...
        assert_eq!(desired_slot(150, any, 110.0), 200);
        // ... but not lowered for a round trip that is only somewhat shorter ...
        assert_eq!(desired_slot(200, any, 90.0), 200);
        assert_eq!(desired_slot(150, any, 60.0), 150);
        assert_eq!(desired_slot(400, any, 180.0), 400);
        // ... only when it needs half or less.
        assert_eq!(desired_slot(200, any, 60.0), 100);
        assert_eq!(desired_slot(400, any, 130.0), 200);
        assert_eq!(desired_slot(400, any, 60.0), 100);
    }

    #[test]
    fn a_slot_at_most_doubles_per_turn() {
        // Made in a 150 ms slot, a 3.2 s round trip asks for 300 ms, not 4,800 ...
        assert_eq!(desired_slot(0, 150, 3_200.0), 300);
        assert_eq!(desired_slot(150, 150, 3_200.0), 300);
        // ... twice the longer of the slot it was made in and the one it published ...
        assert_eq!(desired_slot(600, 150, 3_200.0), 1_200);
        assert_eq!(desired_slot(0, 2_000, 3_200.0), 4_000);
        // ... and what it needs when that is less.
        assert_eq!(desired_slot(0, 150, 150.0), 250);
        assert_eq!(desired_slot(0, 4_000, 60_000.0), MAX_SLOT_MS);
        // Lowering is not bounded: a slot comes down at once when it needs half or less.
        assert_eq!(desired_slot(4_800, 4_800, 300.0), 450);
    }

    #[test]
    fn each_lane_starts_in_its_own_slot_once_per_cycle() {
        // 4 lanes, 100 ms slots: lane 2 owns [200, 300), [600, 700), ...
        assert_eq!(next_slot(0, 100, 4, 2), 200);
        assert_eq!(next_slot(199, 100, 4, 2), 200);
        assert_eq!(next_slot(200, 100, 4, 2), 200);
        assert_eq!(next_slot(201, 100, 4, 2), 600);
        assert_eq!(next_slot(650, 100, 4, 2), 1_000);
        assert_eq!(next_slot(650, 100, 4, 3), 700);
        // Every lane gets exactly one slot per cycle, and no two the same.
        let starts: Vec<i64> = (0..4).map(|r| next_slot(1_000, 100, 4, r)).collect();
        assert_eq!(starts, [1_200, 1_300, 1_000, 1_100]);
    }

    #[test]
    fn the_slot_memory_is_three_committer_cycles_and_bounded() {
        assert_eq!(slot_memory_ms(200, 8), SLOT_MEMORY_MS);
        assert_eq!(slot_memory_ms(1_000, 8), 24_000);
        // A fleet that does not carry: every lane takes turns, a cycle is all of them.
        assert_eq!(slot_memory_ms(200, 64), 38_400);
        assert_eq!(slot_memory_ms(0, 2), SLOT_MEMORY_MS);
        assert_eq!(slot_memory_ms(u64::MAX, 8), 120_000);
        assert_eq!(slot_memory_ms(u64::MAX, COMMITTERS), 15_000);
        assert_eq!(slot_memory_ms(u64::MAX, usize::MAX), i64::MAX);
    }

    #[test]
    fn the_fallback_is_a_committer_cycle_and_bounds_the_fleets_loads() {
        assert_eq!(fallback_ms(200, 32, COMMITTERS), MIN_FALLBACK_MS);
        assert_eq!(fallback_ms(1_200, 32, 8), 8 * 1_200);
        assert_eq!(fallback_ms(850, 32, COMMITTERS), MIN_FALLBACK_MS);
        assert_eq!(fallback_ms(2_000, 32, COMMITTERS), 32 * 2_000 / 8);
        // At most FALLBACK_LOADS_PER_SECOND a second, whatever the slots are.
        assert_eq!(fallback_ms(200, 64, COMMITTERS), 8_000);
        assert_eq!(fallback_ms(200, 128, COMMITTERS), 16_000);
        assert_eq!(fallback_ms(200, 1_000, COMMITTERS), 125_000);
        assert_eq!(fallback_ms(MAX_SLOT_MS, MAX_LANES, COMMITTERS), 640_000);
        assert_eq!(fallback_ms(u64::MAX, usize::MAX, usize::MAX), u64::MAX);
    }

    #[test]
    fn fallbacks_are_spread_around_their_length() {
        assert_eq!(jittered(1_000, 0.0), Duration::from_millis(500));
        assert_eq!(jittered(1_000, 0.5), Duration::from_millis(1_000));
        assert!(jittered(1_000, 0.999) < Duration::from_millis(1_500));
        // Out of range: clamped.
        assert_eq!(jittered(1_000, -1.0), Duration::from_millis(500));
        assert_eq!(jittered(1_000, 7.0), Duration::from_millis(1_500));
        // The mean stays the fallback.
        let n = 1_000;
        let mean = (0..n)
            .map(|i| jittered(5_000, f64::from(i) / f64::from(n)).as_secs_f64())
            .sum::<f64>()
            / f64::from(n);
        assert!((mean - 5.0).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn committers_seen_carrying_are_left_a_few_fallbacks() {
        assert_eq!(patience_ms(5_000, None, None), 5_000);
        assert_eq!(patience_ms(5_000, Some(1_000), None), 20_000);
        assert_eq!(patience_ms(5_000, Some(5_000), None), 20_000);
        assert_eq!(patience_ms(5_000, Some(5_001), None), 5_000);
        // A committer whose clock is ahead of this node's: seen carrying all the same.
        assert_eq!(patience_ms(5_000, Some(-3_000), None), 20_000);
        assert_eq!(patience_ms(u64::MAX, Some(0), None), u64::MAX);
        // Committers that carry every 2 s are at work for 6 s, whatever the fallback ...
        assert_eq!(patience_ms(2_000, Some(6_000), Some(2_000)), 8_000);
        assert_eq!(patience_ms(2_000, Some(6_001), Some(2_000)), 2_000);
        // ... but never past the patience, and never less than a fallback.
        assert_eq!(patience_ms(2_000, Some(8_001), Some(30_000)), 2_000);
        assert_eq!(patience_ms(5_000, Some(5_000), Some(200)), 20_000);
        assert_eq!(patience_ms(5_000, Some(5_000), Some(i64::MAX)), 20_000);
    }
}
