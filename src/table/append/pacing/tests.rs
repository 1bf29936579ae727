//! The pacer's decisions as it makes them, its clocks and its jitter fixed (see `Ticker`).

use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::{Value, json};

use super::*;
use crate::table::fleet::lanes::{DEPUTY_FALLBACK_MS, LANE_MEMORY_MS};
use crate::table::fleet::slots::FALLBACK_PATIENCE;
use crate::testing::metadata_with;

/// Snapshots 1..=n in a chain; those in `registrar` carry `thadam.writer`.
fn chain(n: i64, registrar: &[i64]) -> TableMetadata {
    let snapshots: Vec<(Value, i64)> = (1..=n)
        .map(|id| match registrar.contains(&id) {
            true => (json!({WRITER: "thadam-iceberg/s/p"}), 1_000 + id),
            false => (json!({}), 1_000 + id),
        })
        .collect();
    metadata_with(&snapshots)
}

#[test]
fn a_conflict_counts_for_the_pace_only_when_a_registrar_won_it() {
    // Since snapshot 3: 4 and 5 were written by pyiceberg, Spark...: not a fleet.
    assert!(!registrar_committed_since(&chain(5, &[1, 2, 3]), Some(3)));
    // ... one of them by another registrar: a fleet.
    assert!(registrar_committed_since(&chain(5, &[1, 4]), Some(3)));
    // Older registrar snapshots do not count; an empty table's first snapshot does.
    assert!(!registrar_committed_since(&chain(5, &[1, 2]), Some(3)));
    assert!(registrar_committed_since(&chain(1, &[1]), None));
    // Bounded: a registrar snapshot beyond the look-back is not searched for.
    let long = WRITERS_LOOKBACK as i64 + 10;
    assert!(!registrar_committed_since(&chain(long, &[2]), Some(1)));
}

#[test]
fn a_pacer_widens_only_for_a_conflict_another_registrar_won_and_loads_first_after_others() {
    let (mut p, _) = fixed_pacer(false, 0.5);
    let now = p.ticker.now();
    assert!(!p.loads_first());
    // A 409: the next attempts load first.
    p.conflicted();
    assert!(p.loads_first());
    // A load that found pyiceberg's commits since snapshot 3: no widening.
    p.loaded(&chain(5, &[1, 2, 3]), Some(3), true);
    assert_eq!(p.interval(), Duration::ZERO);
    // One won by another registrar after a conflict: the pace widens, and the gap after it
    // is the pace, jittered (a draw of 0.5: the interval itself).
    p.loaded(&chain(6, &[6]), Some(5), true);
    assert_eq!(p.interval(), FIRST_STEP);
    p.deferred();
    assert_eq!(p.spacing(now), (None, FIRST_STEP));
    // Another: wider by WIDEN, and jittered over ±50% of it.
    p.loaded(&chain(7, &[6, 7]), Some(6), true);
    p.ticker.unit = Arc::new(|| 0.0);
    p.deferred();
    assert_eq!(p.spacing(now).1, FIRST_STEP.mul_f64(WIDEN).mul_f64(0.5));
    // A 409 in this lane's turn: the next attempt waits for the lane's next slot (50 ms
    // from now), after the last start; `commit.min_interval` stays the floor.
    p.fleet = fleet_of(1, 2, 100);
    p.last_start = Some(now - ms(30));
    p.conflicted();
    p.deferred();
    assert_eq!(p.spacing(now), (Some(ms(30)), ms(30 + 50)));
    p.floor = ms(1_000);
    assert_eq!(p.spacing(now).1, ms(1_000));
    // Loads that find nothing new count the loading-first down.
    for _ in 0..LOAD_FIRST_FOR {
        p.loaded(&chain(7, &[6, 7]), Some(7), false);
    }
    assert!(!p.loads_first());
}

#[test]
fn a_lone_writer_is_never_paced() {
    let mut pace = Pace::default();
    for _ in 0..100 {
        pace.landed_clean();
    }
    assert_eq!(pace.interval(), Duration::ZERO);
    assert_eq!(pace.gap(Duration::ZERO, 0.9), Duration::ZERO);
    // commit.min_interval stays the floor.
    assert_eq!(pace.gap(ms(300), 0.9), ms(300));
}

#[test]
fn conflicts_widen_multiplicatively_up_to_the_ceiling() {
    let mut pace = Pace::default();
    pace.conflicted();
    assert_eq!(pace.interval(), FIRST_STEP);
    pace.conflicted();
    assert_eq!(pace.interval(), Duration::from_millis(150));
    for _ in 0..100 {
        pace.conflicted();
    }
    assert_eq!(pace.interval(), CEILING);
}

#[test]
fn clean_commits_narrow_it_back_to_zero() {
    let mut pace = Pace::default();
    for _ in 0..10 {
        pace.conflicted();
    }
    let wide = pace.interval();
    pace.landed_clean();
    assert_eq!(pace.interval(), wide.mul_f64(NARROW));
    let mut steps = 1;
    while !pace.interval().is_zero() {
        pace.landed_clean();
        steps += 1;
        assert!(
            steps < 200,
            "narrows to zero in a bounded number of commits"
        );
    }
    assert_eq!(pace.interval(), Duration::ZERO);
}

#[test]
fn the_equilibrium_is_a_conflict_rate_of_about_fifteen_percent() {
    // Widening per conflict balances narrowing per clean commit where
    // p·ln(WIDEN) = (1-p)·(-ln NARROW).
    let p = -NARROW.ln() / (WIDEN.ln() - NARROW.ln());
    assert!((0.12..0.18).contains(&p), "p = {p}");
    // In 409s per landed commit (the target: at most 0.3).
    assert!(p / (1.0 - p) < 0.25);
}

#[test]
fn the_gap_is_jittered_around_the_interval() {
    let mut pace = Pace::default();
    for _ in 0..6 {
        pace.conflicted();
    }
    let i = pace.interval();
    assert_eq!(pace.gap(Duration::ZERO, 0.0), i.mul_f64(0.5));
    assert_eq!(pace.gap(Duration::ZERO, 0.5), i);
    assert!(pace.gap(Duration::ZERO, 0.999) < i.mul_f64(1.5));
}

#[test]
fn carried_lanes_in_a_summary_make_their_nodes_present() {
    let now = chrono::Utc::now().timestamp_millis();
    let carrier = json!({WRITER: "w", LANE: "00aa", CARRIED_LANES: "00bb,00cc,not a lane,"});
    let m = metadata_with(&[(json!({WRITER: "w"}), now - 2), (carrier, now - 1)]);
    let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
    p.read_lanes(&m, true);
    assert_eq!(p.fleet.known(), ["00aa", "00bb", "00cc"]);
}

/// A table another registrar's lane (`00aa`, publishing `slot_ms`) committed to just now.
fn another_lane_now(slot_ms: u64) -> TableMetadata {
    let now = chrono::Utc::now().timestamp_millis();
    let summary = json!({WRITER: "w", LANE: "00aa", SLOT_MS: slot_ms.to_string()});
    metadata_with(&[(summary, now - 1)])
}

/// The slot a pacer publishes with its next commit.
fn slot(p: &Pacer) -> String {
    p.summary()[1].1.clone()
}

#[test]
fn only_attempts_made_in_turn_set_the_slot() {
    let m = another_lane_now(100);
    let mut p = Pacer::new("ns.t".into(), Duration::ZERO, false, None, None);
    // The first commit (made alone, in a crowd: 1.2 s) publishes no slot ...
    p.landed(&m, 1_200.0, false);
    assert_eq!(slot(&p), "0");
    // ... but planned the next in this lane's slot (the other lane is seen): that one's
    // round trip sets it.
    assert!(p.planned.is_some());
    p.landed(&m, 60.0, true);
    assert_eq!(slot(&p), "100");
    // A 409 in its slot after 600 ms raises it too (0.7 × 60 + 0.3 × 600 = 222 ms, × 1.5
    // = 350), by at most twice the slot it was made in per turn: 200, then 400.
    p.measured(600.0);
    assert_eq!(slot(&p), "200");
    p.measured(600.0);
    assert_eq!(slot(&p), "400");
}

#[test]
fn a_crowded_first_turn_does_not_set_a_long_slot() {
    // A fleet's start-up: turns on 150 ms slots, and a committer's first commit in its turn
    // takes 3.2 s while every node loads and commits at once; at 1.5 × 3.2 s it would publish
    // 4,800 ms slots (128 nodes: a 38 s cycle, and a backlog of minutes).
    let m = another_lane_now(150);
    let mut p = Pacer::new("ns.t".into(), Duration::ZERO, false, None, None);
    p.landed(&m, 1_200.0, false);
    assert_eq!(p.planned, Some(150));
    p.landed(&m, 3_200.0, true);
    assert_eq!(slot(&p), "300");
    // Windows that stay long raise it turn after turn, twice as long each time.
    p.landed(&m, 3_200.0, true);
    assert_eq!(slot(&p), "600");
    p.landed(&m, 3_200.0, true);
    assert_eq!(slot(&p), "1200");
}

/// The wall clock of the tests that fix the pacer's time (ms since the epoch): 50 ms into a
/// slot of 100 ms, the first of a cycle of two.
const WALL_MS: i64 = 1_700_000_000_050;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A pacer whose clocks stand still until the test moves them: its wall clock reads
/// [`WALL_MS`] and its monotonic clock a fixed instant, both plus the ms in the counter
/// returned (the monotonic one never back); its jitter always draws `unit`.
fn fixed_pacer(carrying: bool, unit: f64) -> (Pacer, Arc<AtomicI64>) {
    let moved = Arc::new(AtomicI64::new(0));
    let (wall, mono, base) = (Arc::clone(&moved), Arc::clone(&moved), Instant::now());
    let clock: Clock = Arc::new(move || WALL_MS + wall.load(Ordering::SeqCst));
    let mut p = Pacer::new("ns.t".into(), Duration::ZERO, carrying, Some(clock), None);
    p.ticker = Ticker {
        now: Arc::new(move || base + ms(mono.load(Ordering::SeqCst).max(0) as u64)),
        unit: Arc::new(move || unit),
    };
    (p, moved)
}

/// A carrying fleet of `lanes` lanes (`{i:012x}`), each seen committing a second before
/// [`WALL_MS`] and publishing `slot_ms`, as lane `own` sees it.
fn fleet_of(own: usize, lanes: usize, slot_ms: u64) -> Fleet {
    let mut f = Fleet::new(format!("{own:012x}")).carrying();
    for i in 0..lanes {
        f.observe(&format!("{i:012x}"), WALL_MS - 1_000, slot_ms, true);
    }
    f
}

#[test]
fn the_next_gap_follows_the_turn_with_a_fixed_jitter() {
    let (mut p, _) = fixed_pacer(true, 0.0);
    let now = p.ticker.now();
    p.last_start = Some(now - ms(30));
    // Alone: the adaptive pace (150 ms), jittered (a draw of 0: half of it).
    p.pace.conflicted();
    p.pace.conflicted();
    assert_eq!((p.next_gap(), p.planned), (ms(150 / 2), None));
    // Taking turns: to the start of this lane's next slot (50 ms from now), counted from
    // the last start, with no jitter; the attempt measures the slot. A lane whose slot has
    // begun waits for the next cycle's.
    p.fleet = fleet_of(1, 2, 100);
    assert_eq!((p.next_gap(), p.planned), (ms(30 + 50), Some(100)));
    p.fleet = fleet_of(0, 2, 100);
    assert_eq!(p.next_gap(), ms(30 + 150));
    // The sole committer: its cadence after its last start, whatever the grid of 550 ms
    // slots and the jitter say (a longer commit's next goes at once).
    p.fleet = fleet_of(0, 20, 550);
    let cadence = ms(SOLE_CADENCE_MS);
    assert_eq!((p.next_gap(), p.planned), (cadence, Some(550)));
    // Given a fallback before it knew itself the committer, it goes at the cadence too.
    p.gap = ms(7_000);
    assert_eq!(p.spacing(now), (Some(ms(30)), cadence));
    // Carried: keeps that fallback; the next is the fallback, jittered.
    p.fleet = fleet_of(7, 20, 550);
    assert_eq!(p.spacing(now).1, ms(7_000));
    assert_eq!(p.fallback_ms(), Some(5_000));
    assert_eq!((p.next_gap(), p.planned), (ms(5_000 / 2), None));
    // `commit.min_interval` bounds every turn.
    p.floor = ms(4_000);
    assert_eq!(p.next_gap(), ms(4_000));
    p.fleet = fleet_of(1, 2, 100);
    assert_eq!(p.next_gap(), ms(4_000));
}

#[test]
fn a_conflict_with_another_kind_of_writer_leaves_the_courtesy_gap_not_a_wider_pace() {
    let (mut p, moved) = fixed_pacer(false, 0.5);
    // pyiceberg committed twice in the last seconds (no `thadam.writer`), and won the 409.
    let m = metadata_with(&[(json!({}), WALL_MS - 2_000), (json!({}), WALL_MS - 1_000)]);
    p.conflicted();
    p.loaded(&m, Some(1), true);
    assert_eq!(p.interval(), Duration::ZERO, "no widening against it");
    p.deferred();
    assert_eq!(p.spacing(p.ticker.now()).1, COURTESY_GAP);
    // A courtesy memory after its last commit, the registrar goes at its own pace again.
    moved.store(COURTESY_MEMORY_MS, Ordering::SeqCst);
    p.deferred();
    assert_eq!(p.spacing(p.ticker.now()).1, Duration::ZERO);
}

#[test]
fn a_view_older_than_a_few_seconds_is_loaded_before_the_next_commit() {
    assert!(!is_stale_view(ms(100)));
    assert!(!is_stale_view(STALE_VIEW));
    assert!(is_stale_view(STALE_VIEW + ms(1)));
    let (mut p, moved) = fixed_pacer(true, 0.5);
    assert!(!p.loads_first(), "never viewed: the start loads anyway");
    p.landed(&chain(1, &[1]), 50.0, true);
    moved.store(5_000, Ordering::SeqCst);
    assert!(!p.loads_first(), "seen STALE_VIEW ago");
    moved.store(5_001, Ordering::SeqCst);
    assert!(p.loads_first(), "seen too long ago");
    // A load that found nothing new renews the view.
    p.loaded(&chain(1, &[1]), Some(1), false);
    assert!(!p.loads_first(), "seen again");
}

#[test]
fn a_publishers_view_of_the_fleet_is_renewed_before_it_lapses() {
    let (mut p, moved) = fixed_pacer(true, 0.5);
    // 128 lanes seen 50 s ago (the fleet's warm-up commits, and nothing carried since),
    // their slots no longer counted.
    p.fleet = fleet_of(7, 128, 0);
    moved.store(49_000, Ordering::SeqCst);
    let Some(fallback) = p.fallback_ms() else {
        panic!("lane 7 of 128 does not take turns");
    };
    assert_eq!(fallback, 16_000);
    // It is carried now, but its view lapses 10 s from now, before its next fallback
    // (at up to 1.5 of one): it loads now rather than defer on that view.
    assert!(p.view_holds_for(5_000));
    assert!(!p.view_holds_for(fallback * 3 / 2));
    // Lanes seen a second ago hold past the next fallback.
    moved.store(0, Ordering::SeqCst);
    assert!(p.view_holds_for(fallback * 3 / 2));
}

/// A carrying fleet's table: lanes `…01` to `…09` committed `ago_ms` ago, the newest of
/// those snapshots carrying intents when `carrying`.
fn committers_committed(ago_ms: i64, carrying: bool) -> TableMetadata {
    let now = chrono::Utc::now().timestamp_millis();
    let snapshots: Vec<(Value, i64)> = (1..=9_i64)
        .map(|i| {
            let mut summary = json!({WRITER: "w", LANE: format!("{i:012x}"), SLOT_MS: "200"});
            if carrying && i == 9 {
                summary[CARRIED_INTENTS] = json!("3");
            }
            (summary, now - ago_ms - 10 + i)
        })
        .collect();
    metadata_with(&snapshots)
}

#[test]
fn a_node_that_only_publishes_waits_longer_while_the_committers_carry() {
    let publisher = || {
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
        p.fleet = Fleet::new("ffffffffffff".into()).carrying();
        p
    };
    // Carrying a second ago: a few fallbacks.
    let mut p = publisher();
    p.read_lanes(&committers_committed(1_000, true), true);
    let fallback = p.fallback_ms().expect("a node that does not take turns");
    let patience = fallback * FALLBACK_PATIENCE;
    assert_eq!(p.leave_to_committers_ms(), Some(patience));
    // Committing, but nothing carried: one.
    let mut p = publisher();
    p.read_lanes(&committers_committed(1_000, false), true);
    assert_eq!(p.leave_to_committers_ms(), Some(fallback));
    // The last carrying commit a fallback and more ago: one.
    let mut p = publisher();
    p.read_lanes(&committers_committed(fallback as i64 + 2_000, true), true);
    assert_eq!(p.leave_to_committers_ms(), Some(fallback));
    // A committer itself leaves nothing: it commits in its turn.
    let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
    p.fleet = Fleet::new(format!("{:012x}", 1)).carrying();
    p.read_lanes(&committers_committed(1_000, true), true);
    assert_eq!(p.leave_to_committers_ms(), None);
}

#[test]
fn what_a_node_reads_is_dated_by_its_own_clock_at_the_read() {
    const TEN_MINUTES: i64 = 600_000;
    let lane = |l: &str, ts: i64| (json!({LANE: l, SLOT_MS: "100", WRITER: "w"}), ts);
    let one = metadata_with(&[lane("00aa", WALL_MS)]);
    // Ten minutes behind: the other lane's snapshot, stamped on time, is in this node's
    // future; it is present (not hidden), and gone a lane memory after it was read.
    let (mut p, behind) = fixed_pacer(true, 0.5);
    behind.store(-TEN_MINUTES, Ordering::SeqCst);
    p.loaded(&one, None, false);
    assert!(p.slotted(), "the other lane is present");
    behind.fetch_add(LANE_MEMORY_MS + 1_000, Ordering::SeqCst);
    assert!(!p.slotted(), "and forgotten a lane memory after the read");
    // Ten minutes ahead: at its first read the other lane looks ten minutes old, but what
    // was committed since a read is dated by the read that finds it.
    let (mut q, ahead) = fixed_pacer(true, 0.5);
    ahead.store(TEN_MINUTES, Ordering::SeqCst);
    q.loaded(&one, None, false);
    assert!(!q.slotted());
    let two = metadata_with(&[lane("00aa", WALL_MS), lane("00bb", WALL_MS + 1)]);
    q.loaded(&two, one.current_snapshot_id(), false);
    assert!(q.slotted(), "committed since the last read: present");
}

#[test]
fn a_node_started_into_a_fleet_knows_it_before_its_first_attempt() {
    let m = another_lane_now(100);
    let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
    assert!(!p.slotted());
    p.first_view(&m, Some("log"));
    assert!(p.slotted(), "the lanes of the table loaded at the start");
    // Only once: later views come from loads and commits.
    let mut q = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
    q.landed(&chain(1, &[1]), 10.0, true);
    q.first_view(&m, None);
    assert!(!q.slotted());
}

#[test]
fn a_node_that_becomes_the_deputy_goes_at_the_deputys_fallback_not_the_gap_it_was_given() {
    let (mut p, _) = fixed_pacer(true, 0.5);
    let now = p.ticker.now();
    p.last_start = Some(now);
    // Lane 7 of 128, carried: its next attempt a fallback after this one (16 s: the draw of
    // 0.5 is the fallback itself).
    p.fleet = fleet_of(7, 128, 0);
    assert_eq!(p.fallback_ms(), Some(16_000));
    p.deferred();
    assert_eq!(p.spacing(now).1, ms(16_000));
    // Its next view shows it the fleet's deputy (lane 1, the lowest after the committer): an
    // attempt that found everything carried draws no new gap, and the committer may be gone.
    // The deputy has the lane memory (`DEPUTY_SEEN_MS`, 10 s) to notice: it goes at its own
    // fallback, with the same draw.
    p.fleet = fleet_of(1, 128, 0);
    assert_eq!(p.fallback_ms(), Some(DEPUTY_FALLBACK_MS));
    assert_eq!(p.spacing(now).1, ms(DEPUTY_FALLBACK_MS));
    // Carried with a longer fallback again: the gap it was given stands until its next one.
    p.fleet = fleet_of(7, 128, 0);
    assert_eq!(p.spacing(now).1, ms(16_000));
}

/// A carrying fleet's table: lane `…00` committed at each of `ago_ms` before [`WALL_MS`],
/// every commit carrying intents.
fn committer_carried(ago_ms: &[i64]) -> TableMetadata {
    let snapshots: Vec<(Value, i64)> = ago_ms
        .iter()
        .map(|ago| {
            let summary = json!({WRITER: "w", LANE: format!("{:012x}", 0), SLOT_MS: "200",
                                 CARRIED_INTENTS: "3"});
            (summary, WALL_MS - ago)
        })
        .collect();
    metadata_with(&snapshots)
}

#[test]
fn the_deputy_does_not_race_a_committer_that_is_slow_only_one_that_stopped() {
    // The deputy (lane 1: the lowest after the committer, lane 0), whose own fallback is 2 s.
    let deputy = |ago_ms: &[i64]| {
        let (mut p, moved) = fixed_pacer(true, 0.5);
        p.fleet = fleet_of(1, 20, 200);
        p.read_lanes(&committer_carried(ago_ms), true);
        assert_eq!(p.fallback_ms(), Some(DEPUTY_FALLBACK_MS), "the deputy");
        (p, moved)
    };
    let patient = DEPUTY_FALLBACK_MS * FALLBACK_PATIENCE;
    // A committer that carries every 3 s (S3 and the catalog 100 ms away, a pile of intents
    // each commit), its last commit 3 s ago: slow, not gone. The deputy leaves its segments
    // to it (128 nodes far away: the deputy lost six 409s to it in a minute, and the
    // committer's commits stretched to 400 segments and a p99 of 24 s).
    let (p, moved) = deputy(&[9_000, 6_000, 3_000]);
    assert_eq!(p.leave_to_committers_ms(), Some(patient));
    // Silent for three of its gaps: gone.
    moved.store(7_000, Ordering::SeqCst);
    assert_eq!(p.leave_to_committers_ms(), Some(DEPUTY_FALLBACK_MS));
    // A committer at its cadence (200 ms): gone after the deputy's own fallback, as before.
    let (p, moved) = deputy(&[800, 600, 400, 200]);
    assert_eq!(p.leave_to_committers_ms(), Some(patient));
    moved.store(1_900, Ordering::SeqCst);
    assert_eq!(p.leave_to_committers_ms(), Some(DEPUTY_FALLBACK_MS));
    // However slow it was, past the patience of a deputy it is gone.
    let (p, moved) = deputy(&[60_000, 30_000, 1_000]);
    moved.store(i64::try_from(patient).unwrap_or(i64::MAX), Ordering::SeqCst);
    assert_eq!(p.leave_to_committers_ms(), Some(DEPUTY_FALLBACK_MS));
}

/// The committer and the turn of lane `own` after a roll call that found `present` there and
/// `round` in its first round.
fn after_roll(own: &str, present: &[String], round: &[String]) -> (Option<String>, Turn) {
    let (mut p, _) = fixed_pacer(true, 0.5);
    p.fleet = Fleet::new(own.to_string()).carrying();
    p.roll_answered(&roll_call::Roll {
        present: present.to_vec(),
        answered: round.to_vec(),
    });
    (p.fleet.committer(WALL_MS), p.fleet.turn(WALL_MS))
}

#[test]
fn a_node_that_published_after_the_roll_s_first_round_leaves_its_batch_to_the_round() {
    // 16 lanes there (more than take turns all together), a round of 3, the lowest `…b0`.
    let present: Vec<String> = (0..16).map(|i| format!("0000000000b{i:x}")).collect();
    let round = &present[..3];
    // A lower lane than the round's, published after it: the round's lowest commits, and this
    // node is carried (before, every lane listed ranked, and this one would have committed
    // beside the round's committer, or the round's nodes would have waited for it). The lanes
    // there make the fleet's size: a round of three alone would have had everyone take turns.
    let (committer, turn) = after_roll("0000000000a1", &present, round);
    assert_eq!(committer.as_deref(), Some("0000000000b0"));
    assert!(matches!(turn, Turn::Carried { .. }), "{turn:?}");
    // The round's lowest lane commits.
    let (committer, turn) = after_roll("0000000000b0", &present, round);
    assert_eq!(committer.as_deref(), Some("0000000000b0"));
    assert!(!matches!(turn, Turn::Carried { .. }), "{turn:?}");
    // A lane of the fleet outside the round is carried too.
    let (committer, turn) = after_roll("0000000000b9", &present, round);
    assert_eq!(committer.as_deref(), Some("0000000000b0"));
    assert!(matches!(turn, Turn::Carried { .. }), "{turn:?}");
}
