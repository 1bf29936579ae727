//! The pace of a table's commits: one [`Pacer`] per table owns everything that decides when the
//! next batch of this registrar may start (the adaptive interval, the fleet's lanes and slots,
//! the round trip, courtesy towards other kinds of writers), from what the table's snapshots tell
//! about who else commits to it. The policies themselves are pure and tested below.
//!
//! **Adaptive pace** ([`Pace`]): a fleet of registrars on one table collides when each commits
//! as soon as it has something: with N writers and a commit window W (load → the catalog's
//! answer), a commit conflicts with probability about 1 - e^(-λW), λ being the others' commit
//! rate. Each writer therefore widens its interval when its commits conflict and narrows it when
//! they land cleanly, in proportion to the interval itself (multiplicative both ways, so the rule
//! is the same at 100 ms and at 10 s). The equilibrium is a conflict probability, not an
//! interval: a writer widens by [`WIDEN`] per 409 and narrows by [`NARROW`] per clean commit,
//! which balances where p · ln(WIDEN) = (1 - p) · -ln(NARROW), p ≈ 0.15, i.e. about 0.18 409s
//! per landed commit, whatever N and W are; the interval follows, about (N - 1) · W / p. Every
//! writer applies the same rule to the same signal, so the fleet converges on equal shares
//! (fewer, larger commits) instead of starving its unlucky members.
//!
//! Only conflicts with other registrars widen it (told apart by the `thadam.writer` of the
//! snapshots that won): a Spark job or a pyiceberg script does not slow down when we do, so
//! widening against it would only add latency (a prompt retry is the answer there). A lone
//! writer never conflicts, so its interval stays zero and nothing changes for it.
//! `commit.min_interval` stays a floor; the interval is jittered (±50%) so that writers that
//! reached the same interval do not commit in lockstep.
//!
//! **Slots** ([`Fleet`]): once two or more registrars' lanes are seen in the table, they take
//! turns on a wall-clock grid instead, and the adaptive pace only covers tables without lanes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use iceberg::spec::TableMetadata;

use super::hooks::{self, Clock};
use crate::table::committed::{WATERMARK_KEY, WATERMARK_PREFIX, WRITER};
use crate::table::fleet_keys::{CARRIED_INTENTS, CARRIED_LANES, LANE, NO_INTENTS, SLOT_MS};

/// How many commits load the table first after another writer's commit was seen.
const LOAD_FIRST_FOR: u32 = 16;

/// How far back a load looks for who committed since the version held.
const WRITERS_LOOKBACK: usize = 64;

/// The most snapshots read for lanes after one load or commit.
const LANES_LOOKBACK: usize = 256;

/// The most watermark properties remembered as this registrar's own.
const OWN_WATERMARKS: usize = 64;

/// While another kind of writer has committed to the table within [`COURTESY_MEMORY_MS`], the
/// registrar leaves at least this long between the starts of its commits: such writers build a
/// commit slowly (seconds, in Python or Spark) and give up after a few 409s (pyiceberg and Java
/// retry 4 times), so a registrar committing ten times a second would starve them.
const COURTESY_GAP: Duration = Duration::from_secs(1);
const COURTESY_MEMORY_MS: i64 = 60_000;

/// When a table's next batch may start, and what its commits tell other registrars.
pub(super) struct Pacer {
    /// The table, for the gauge.
    table: String,
    /// `commit.min_interval`: the least gap between the starts of two batches.
    floor: Duration,
    /// The adaptive commit interval (while no slots are known).
    pace: Pace,
    /// Other registrars committing to the table, and the slots they share.
    fleet: Fleet,
    /// This committer's round trip (load → answer), smoothed, in ms.
    round_trip_ms: Option<f64>,
    /// The slot this committer needs ([`desired_slot`]), published with each commit: the
    /// fleet's slot is the largest.
    slot_ms: u64,
    /// The sequence number of the newest snapshot whose lane was read, so that a walk stops
    /// there (sequence numbers only grow, and survive the expiry of that snapshot).
    lanes_read_to: Option<i64>,
    /// When (this node's clock) the last read of fresh metadata was: what a later read finds
    /// was committed after it (see [`Self::read_lanes`]).
    lanes_read_at: Option<i64>,
    /// The watermark properties this committer's commits raise (one per segment log it reads):
    /// a lane whose snapshots name one of them wrote for the same log, i.e. it is this registrar
    /// before a restart, not another node.
    own_watermarks: BTreeSet<String>,
    /// When (ms since the epoch) a writer that is not a registrar (Spark, pyiceberg, a
    /// compaction) last committed to the table, as far as the snapshots read tell.
    other_kind_seen_ms: Option<i64>,
    /// When (ms since the epoch) the newest snapshot that carried intents was committed, as far
    /// as the snapshots read tell: the committers are at work (see [`patience_ms`]).
    carried_seen_ms: Option<i64>,
    /// How many more commits load the table before they are built: set when another writer's
    /// commit was seen (a 409, or a load that found commits not ours), counted down by loads
    /// that found none. A lone registrar builds on its own last commit's answer.
    load_first: u32,
    /// When the table held was last seen as the catalog has it (a load, or a commit's answer).
    viewed: Option<Instant>,
    /// When the last batch's first attempt started; the next waits [`Self::gap`] after it.
    last_start: Option<Instant>,
    gap: Duration,
    /// The length of the slot the next attempt was planned in, while this node takes turns:
    /// only such attempts measure the slot ([`Self::measured`]).
    planned: Option<u64>,
    /// The wall clock the slot grid is read by: the system's, or a test's skewed one.
    clock: Option<Clock>,
    /// Whether this node carries the fleet's intents (`commit.intents`): one that does not says
    /// so in its snapshots ([`NO_INTENTS`]), and is never ranked as the committer.
    carrying: bool,
}

impl Pacer {
    /// `carrying`: the fleet carries intents (`commit.intents`), so only a few lanes take
    /// turns (see [`Turn`]); `clock`: a test's wall clock (`Hooks::node_clock`), else the
    /// system's.
    pub(super) fn new(
        table: String,
        floor: Duration,
        carrying: bool,
        clock: Option<Clock>,
        lane: Option<String>,
    ) -> Self {
        let fleet = lane
            .filter(|l| is_lane(l))
            .map_or_else(Fleet::default, Fleet::new);
        Pacer {
            table,
            floor,
            pace: Pace::default(),
            fleet: if carrying { fleet.carrying() } else { fleet },
            round_trip_ms: None,
            slot_ms: 0,
            lanes_read_to: None,
            lanes_read_at: None,
            own_watermarks: BTreeSet::new(),
            other_kind_seen_ms: None,
            carried_seen_ms: None,
            load_first: 0,
            viewed: None,
            last_start: None,
            gap: Duration::ZERO,
            planned: None,
            clock,
            carrying,
        }
    }

    /// Now on the wall clock the fleet's slot grid is cut by (ms since the epoch). Each node
    /// reads its own clock: one that is off takes its turns off the grid, and its commits
    /// then meet the others' in their slots (409s, which the turns absorb, see [`Fleet`]).
    fn now_ms(&self) -> i64 {
        hooks::now_ms(self.clock.as_ref())
    }

    /// A batch's first attempt starts now.
    pub(super) fn batch_started(&mut self, now: Instant) {
        self.last_start = Some(now);
    }

    /// How long ago the last batch started, and the gap the next must leave after that start.
    /// A node that became the fleet's sole committer since that gap was set (the fleet's lanes
    /// came to be known) goes at its cadence rather than wait out the fallback it was given
    /// as a node that does not take turns: at a 32-node fleet's start the committer waited
    /// 3.6 s so, with every node's first segments.
    pub(super) fn spacing(&self, now: Instant) -> (Option<Duration>, Duration) {
        let now_ms = self.now_ms();
        let sole = Duration::from_millis(SOLE_CADENCE_MS).max(self.courtesy(now_ms));
        let gap = if self.gap > sole && matches!(self.fleet.turn(now_ms), Turn::Sole { .. }) {
            sole
        } else {
            self.gap
        };
        (
            self.last_start.map(|t| now.duration_since(t)),
            gap.max(self.floor),
        )
    }

    /// The least gap while another kind of writer commits to the table (see [`COURTESY_GAP`]).
    fn courtesy(&self, now_ms: i64) -> Duration {
        self.other_kind_seen_ms
            .filter(|seen| now_ms.saturating_sub(*seen) <= COURTESY_MEMORY_MS)
            .map_or(Duration::ZERO, |_| COURTESY_GAP)
    }

    /// Whether the next attempt loads the table before it is built: another writer's commit was
    /// seen lately, so the version held is most likely stale; or the version held is older
    /// than [`STALE_VIEW`].
    pub(super) fn loads_first(&self) -> bool {
        self.load_first > 0 || self.viewed.is_some_and(|at| is_stale_view(at.elapsed()))
    }

    /// The adaptive interval now (the conflict pause is bounded by a few of them).
    pub(super) fn interval(&self) -> Duration {
        self.pace.interval()
    }

    /// Whether registrars take turns on this table now (two or more lanes present): a node
    /// then publishes what waits for its slot (see `intents`).
    pub(super) fn slotted(&self) -> bool {
        self.fleet.turn(self.now_ms()) != Turn::Alone
    }

    /// Whether this node takes turns committing (rather than only publishing, see [`Turn`]).
    pub(super) fn commits_in_turn(&self) -> bool {
        matches!(
            self.fleet.turn(self.now_ms()),
            Turn::Slot { .. } | Turn::Sole { .. }
        )
    }

    /// Whether this node is the fleet's sole committer ([`Turn::Sole`]): its commits follow
    /// each other back to back, each carrying what the others published meanwhile.
    pub(super) fn sole_committer(&self) -> bool {
        matches!(self.fleet.turn(self.now_ms()), Turn::Sole { .. })
    }

    /// While this node does not take turns (the committers carry it): how long it leaves
    /// between its own attempts.
    pub(super) fn fallback_ms(&self) -> Option<u64> {
        match self.fleet.turn(self.now_ms()) {
            Turn::Carried { fallback } => Some(fallback),
            Turn::Alone | Turn::Slot { .. } | Turn::Sole { .. } => None,
        }
    }

    /// Whether this node, which does not take turns, still sees a fleet that carries it
    /// `ahead_ms` from now on the view it holds. A node that only publishes sees the fleet at its
    /// loads alone, and the lanes it saw drop out of that view a lane memory after the
    /// snapshots that showed them: a view held past that makes the node think itself alone,
    /// and a node alone publishes nothing and waits for its own pace. Seen at 128 nodes: a
    /// view taken when the table held only the fleet's warm-up commits lapsed 60 s after them,
    /// between two fallbacks that had not loaded, and 20-32 nodes held their segments back for
    /// 5-16 s each, the fleet's p99 4-17 s.
    pub(super) fn view_holds_for(&self, ahead_ms: u64) -> bool {
        let later = self
            .now_ms()
            .saturating_add(i64::try_from(ahead_ms).unwrap_or(i64::MAX));
        matches!(self.fleet.turn(later), Turn::Carried { .. })
    }

    /// While this node does not take turns: how long ago its segments may have been
    /// published for it to leave them to the committers still (see [`patience_ms`]).
    pub(super) fn leave_to_committers_ms(&self) -> Option<u64> {
        let fallback = self.fallback_ms()?;
        let since_carried = self
            .carried_seen_ms
            .map(|at| self.now_ms().saturating_sub(at));
        Some(patience_ms(fallback, since_carried))
    }

    /// An attempt ended without a commit, leaving its segments to the committers: the next
    /// waits for the fallback (or this node's slot, should it take turns by then).
    pub(super) fn deferred(&mut self) {
        self.gap = self.next_gap();
    }

    /// This registrar's lane on the table.
    pub(super) fn lane(&self) -> &str {
        self.fleet.own()
    }

    /// The summary keys of this registrar's snapshots: its lane and the slot it needs, and
    /// whether it carries the fleet's intents.
    pub(super) fn summary(&self) -> Vec<(&'static str, String)> {
        let mut keys = vec![
            (LANE, self.fleet.own().to_string()),
            (SLOT_MS, self.slot_ms.to_string()),
        ];
        if !self.carrying {
            keys.push((NO_INTENTS, "1".to_string()));
        }
        keys
    }

    /// A watermark property this registrar's commits raise (see `own_watermarks`).
    pub(super) fn own_watermark(&mut self, property: &str) {
        if self.own_watermarks.len() < OWN_WATERMARKS {
            self.own_watermarks.insert(property.to_string());
        }
    }

    /// An append conflicted: another writer is active, the next attempts load first.
    pub(super) fn conflicted(&mut self) {
        self.load_first = LOAD_FIRST_FOR;
    }

    /// After a load, what it says about other writers, given the current snapshot of the version
    /// held before it (`held`) and whether the last attempt conflicted: commits not ours keep the
    /// committer loading first; and when the conflict was won by another registrar (a fleet on
    /// one table), the pace widens. A conflict with another kind of writer (a Spark job,
    /// pyiceberg) does not: it does not slow down when we do, so widening would only add
    /// latency; the prompt retry is the answer to it. Then the lanes the load brought are read.
    pub(super) fn loaded(&mut self, metadata: &TableMetadata, held: Option<i64>, conflicted: bool) {
        self.viewed = Some(Instant::now());
        if metadata.current_snapshot_id() == held {
            self.load_first = self.load_first.saturating_sub(1);
        } else {
            self.load_first = LOAD_FIRST_FOR;
            if conflicted && registrar_committed_since(metadata, held) {
                self.pace.conflicted();
                self.publish();
            }
        }
        self.read_lanes(metadata, true);
    }

    /// The first attempt of this committer reads the lanes of the table it loaded at its start,
    /// so that a node restarted into a fleet (a fleet-wide restart, a crash) knows the fleet
    /// before its first commit: it publishes and leaves its batch to the committer, or waits
    /// for its turn, instead of committing at once into the others' commits. `log`: the segment
    /// log of its batch, whose lanes are its own before the restart.
    pub(super) fn first_view(&mut self, metadata: &TableMetadata, log: Option<&str>) {
        if self.lanes_read_to.is_some() || self.viewed.is_some() {
            return;
        }
        if let Some(log) = log {
            self.own_watermark(&format!("{WATERMARK_PREFIX}{log}"));
        }
        self.read_lanes(metadata, false);
    }

    /// A commit landed (`metadata` is the table after it) after a round trip of `round_trip_ms`
    /// (load or build → answer); `first_attempt`: it landed without a failure before it. The
    /// pace narrows, the lanes are read, and the gap to the next batch is set.
    pub(super) fn landed(
        &mut self,
        metadata: &TableMetadata,
        round_trip_ms: f64,
        first_attempt: bool,
    ) {
        self.viewed = Some(Instant::now());
        self.measured(round_trip_ms);
        if first_attempt {
            self.pace.landed_clean();
        }
        self.read_lanes(metadata, true);
        self.gap = self.next_gap();
        self.publish();
    }

    /// An attempt made in this lane's slot got the catalog's answer (landed, or a 409) after a
    /// round trip of `round_trip_ms` (load or build → answer): the slot this lane needs follows
    /// it. Only such attempts tell what a slot needs. One made before the turns hold (a
    /// fleet's start, where every node commits at once on a busy machine) took what the crowd
    /// made it take: a 128-node fleet's start-up commits took 1.2 s, published 1.8 s slots,
    /// and with 8 committers each one's next commit (and so the slot's way down) was 14 s off,
    /// while the backlog grew into the commits that then kept the slots up. A 409 counts too:
    /// slots too short for the windows make every committer's commit meet the next one's, and
    /// with landed commits alone nothing would raise them (a 128-node fleet whose committers
    /// started on 100 ms slots landed nothing in its turns for two minutes).
    pub(super) fn measured(&mut self, round_trip_ms: f64) {
        let Some(made_in) = self.planned else {
            return;
        };
        let smoothed = match self.round_trip_ms {
            // A shorter round trip counts more than a longer one: a slot raised by a slow
            // commit comes down within a few commits.
            Some(smoothed) if round_trip_ms < smoothed => smoothed * 0.5 + round_trip_ms * 0.5,
            Some(smoothed) => smoothed * 0.7 + round_trip_ms * 0.3,
            None => round_trip_ms,
        };
        self.round_trip_ms = Some(smoothed);
        self.slot_ms = desired_slot(self.slot_ms, made_in, smoothed);
    }

    /// Reads the lanes of the snapshots the table gained since the last read (newest first, at
    /// most [`LANES_LOOKBACK`]): who else commits to it. `fresh`: the metadata was just loaded
    /// or answered (not the version held since the start), so the next read can date what it
    /// finds as committed after this one.
    ///
    /// A snapshot is dated by its timestamp, so that every node dates it alike and ranks the
    /// same lanes: the committer is the lowest lane seen committing within the lane memory, and
    /// nodes that dated one commit differently handed the turn to each other (32 nodes: each
    /// thought the other the committer, and nothing was carried for a fallback, 8 s). But a
    /// timestamp is its writer's clock, so it is bounded by this node's: never later than now
    /// (a node ten minutes ahead stays present no longer than it commits), and never earlier
    /// than this node's last read for a snapshot committed since (to a node ten minutes ahead,
    /// the others' snapshots are not ten minutes old). Snapshots are stamped no earlier than
    /// the table's last (`transaction::snapshot_stamp`), so a node behind hides nothing under
    /// its own. For nodes whose clocks agree, the bounds change nothing.
    fn read_lanes(&mut self, metadata: &TableMetadata, fresh: bool) {
        let now_ms = self.now_ms();
        let first = self.lanes_read_to.is_none();
        let horizon = now_ms - self.fleet.memory_ms(now_ms);
        let floor = self.lanes_read_at.filter(|_| !first).unwrap_or(i64::MIN);
        let newest = metadata.current_snapshot().map(|s| s.sequence_number());
        let mut at = metadata.current_snapshot();
        for _ in 0..LANES_LOOKBACK {
            let Some(snapshot) = at else {
                break;
            };
            if self
                .lanes_read_to
                .is_some_and(|read| snapshot.sequence_number() <= read)
                || (first && snapshot.timestamp_ms() < horizon)
            {
                break;
            }
            let seen_ms = snapshot.timestamp_ms().min(now_ms).max(floor.min(now_ms));
            self.read_snapshot(&snapshot.summary().additional_properties, seen_ms);
            at = snapshot
                .parent_snapshot_id()
                .and_then(|p| metadata.snapshot_by_id(p));
        }
        if newest.is_some() {
            self.lanes_read_to = newest.max(self.lanes_read_to);
        }
        self.lanes_read_at = fresh.then_some(now_ms);
    }

    /// What one snapshot's summary tells of the fleet, seen at `seen_ms`.
    fn read_snapshot(&mut self, summary: &std::collections::HashMap<String, String>, seen_ms: i64) {
        let later = |known: Option<i64>| Some(known.map_or(seen_ms, |k| k.max(seen_ms)));
        if !summary.contains_key(WRITER) {
            self.other_kind_seen_ms = later(self.other_kind_seen_ms);
        }
        if summary.contains_key(CARRIED_INTENTS) {
            self.carried_seen_ms = later(self.carried_seen_ms);
        }
        if let Some(lanes) = summary.get(CARRIED_LANES) {
            for lane in lanes.split(',').filter(|l| is_lane(l)) {
                self.fleet.carried(lane, seen_ms);
            }
        }
        if let Some(lane) = summary.get(LANE) {
            if summary
                .get(WATERMARK_KEY)
                .is_some_and(|w| self.own_watermarks.contains(w))
            {
                self.fleet.same_log(lane);
            }
            let slot = summary
                .get(SLOT_MS)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            let carries = !summary.contains_key(NO_INTENTS);
            self.fleet.observe(lane, seen_ms, slot, carries);
        }
    }

    /// The gap after the start of the commit that just landed before the next may start: to
    /// this registrar's next slot when other registrars share the table (see [`Fleet`]), else the
    /// adaptive pace; never below the floor (`commit.min_interval`), nor below [`COURTESY_GAP`]
    /// while another kind of writer commits to the table.
    fn next_gap(&mut self) -> Duration {
        let now = Instant::now();
        let since_start = self
            .last_start
            .map_or(Duration::ZERO, |s| now.duration_since(s));
        let now_ms = self.now_ms();
        let turn = self.fleet.turn(now_ms);
        self.planned = match turn {
            Turn::Slot { slot, .. } | Turn::Sole { slot } => Some(slot),
            Turn::Alone | Turn::Carried { .. } => None,
        };
        let gap = match turn {
            Turn::Sole { .. } => Duration::from_millis(SOLE_CADENCE_MS),
            Turn::Slot { start, slot } => {
                tracing::debug!(table = %self.table, start, slot, lane = self.fleet.own(), "next commit in this lane's slot");
                since_start + Duration::from_millis(u64::try_from(start - now_ms).unwrap_or(0))
            }
            Turn::Carried { fallback } => {
                tracing::debug!(table = %self.table, fallback, lane = self.fleet.own(), committer = ?self.fleet.committer(now_ms), present = self.fleet.present(now_ms).len(), "the committers carry this lane");
                jittered(fallback, rand::random())
            }
            Turn::Alone => self.pace.gap(Duration::ZERO, rand::random()),
        };
        gap.max(self.floor).max(self.courtesy(now_ms))
    }

    /// The table's commit interval, as a gauge: the slot cycle when registrars take turns,
    /// else the adaptive pace.
    fn publish(&self) {
        let now_ms = self.now_ms();
        let interval = match self.fleet.cycle_ms(now_ms) {
            Some(ms) => Duration::from_millis(ms),
            None => self.pace.interval(),
        };
        metrics::gauge!("thadam_iceberg_commit_interval_seconds", "table" => self.table.clone())
            .set(interval.as_secs_f64());
    }
}

/// Whether a snapshot another registrar wrote (`thadam.writer` in its summary) lies between the
/// table's current snapshot and `since`, looking back at most [`WRITERS_LOOKBACK`] snapshots.
fn registrar_committed_since(metadata: &TableMetadata, since: Option<i64>) -> bool {
    let mut at = metadata.current_snapshot();
    for _ in 0..WRITERS_LOOKBACK {
        let Some(snapshot) = at else {
            return false;
        };
        if Some(snapshot.snapshot_id()) == since {
            return false;
        }
        if snapshot
            .summary()
            .additional_properties
            .contains_key(WRITER)
        {
            return true;
        }
        at = snapshot
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p));
    }
    false
}

/// A table held for longer than this since it was last seen as the catalog has it is loaded
/// before the next commit is built. The lanes a node takes turns by are those of its last view:
/// a node that registered alone, or early in a fleet's start, and then waited, still saw
/// itself alone, committed on its stale version and met a 409 (13 of a 128-node fleet's first
/// seconds, each a node whose warm-up came before most others'). A lone registrar that commits
/// more often than this never loads; one that commits less often loads once per commit.
pub(super) const STALE_VIEW: Duration = Duration::from_secs(5);

/// Whether a view of the table taken `age` ago is too old to build a commit on (see
/// [`STALE_VIEW`]).
pub(super) fn is_stale_view(age: Duration) -> bool {
    age > STALE_VIEW
}

/// The interval a first conflict sets (from zero, a multiplicative rule needs a first step).
pub(super) const FIRST_STEP: Duration = Duration::from_millis(100);
/// The interval is multiplied by this per 409.
pub(super) const WIDEN: f64 = 1.5;
/// ... and by this per commit that landed at its first attempt.
pub(super) const NARROW: f64 = 0.93;
/// Below this the table is taken as not shared any more, and the interval drops to zero.
pub(super) const OFF_BELOW: Duration = Duration::from_millis(20);
/// The widest interval: however many writers share the table, one commits at least this often
/// (a bound on the latency the pacing adds; beyond it conflicts rise instead).
pub(super) const CEILING: Duration = Duration::from_secs(30);

/// A table's adaptive commit interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Pace {
    interval: Duration,
}

impl Pace {
    /// The adaptive interval now (zero while nobody else commits to the table).
    pub(super) fn interval(&self) -> Duration {
        self.interval
    }

    /// A commit was refused with a 409: widen.
    pub(super) fn conflicted(&mut self) {
        self.interval = self.interval.mul_f64(WIDEN).max(FIRST_STEP).min(CEILING);
    }

    /// A commit landed at its first attempt: narrow.
    pub(super) fn landed_clean(&mut self) {
        let narrowed = self.interval.mul_f64(NARROW);
        self.interval = if narrowed < OFF_BELOW {
            Duration::ZERO
        } else {
            narrowed
        };
    }

    /// The gap to leave after the start of a commit before the next one starts: the interval
    /// jittered by `unit` (a uniform draw in [0, 1)) over ±50%, never below `floor`
    /// (`commit.min_interval`).
    pub(super) fn gap(&self, floor: Duration, unit: f64) -> Duration {
        self.interval.mul_f64(0.5 + unit.clamp(0.0, 1.0)).max(floor)
    }
}

/// How long a lane counts as present after its last snapshot, at the least (see
/// [`Fleet::memory_ms`]).
pub(super) const LANE_MEMORY_MS: i64 = 60_000;
/// ... and in cycles of the fleet: a node commits once per cycle, and a 409 or a late batch
/// pushes its next commit a cycle further.
pub(super) const LANE_MEMORY_CYCLES: i64 = 3;
/// A lane's published slot counts towards the fleet's for [`LANE_MEMORY_CYCLES`] cycles of the
/// committers after the lane's last commit of its own, and at least this long (see
/// [`slot_memory_ms`]).
pub(super) const SLOT_MEMORY_MS: i64 = 10_000;
/// The most lanes remembered (a bound on memory whatever happens to the table).
pub(super) const MAX_LANES: usize = 1024;
/// How many lanes take turns in a fleet of more than [`ALL_TAKE_TURNS`] lanes that carries
/// intents (see [`Fleet::turn`]): one. Two
/// committers' commits meet whenever the first one's window runs past its slot (the load and
/// the catalog's answer have a tail several times their mean on a busy catalog), and the
/// second, loaded before the first landed, gets a 409; one committer's next commit starts
/// after its last one landed, whatever its windows are. Measured at 128 nodes (release
/// builds, `benches/contention.sh --nodes 128`, one session): 0.06-0.07 409s per landed commit
/// in four of five runs with one committer (p99 1.2-2.1 s), against 0.17 with two, a collapse
/// with four, and 0.21-0.34 with eight (p99 2.2-7.1 s). The one committer goes at its cadence
/// ([`SOLE_CADENCE_MS`]), not on the slot grid.
pub(super) const COMMITTERS: usize = 1;
/// ... but in a fleet of up to this many lanes, every lane takes turns. A node that only
/// publishes learns what was carried at its fallback (5 s) and publishes its next batch only
/// then: four nodes catching up 200 segments each in batches of 20 took 55-77 s with one
/// committer, 9 s with all four taking turns (`tests/fleet.rs`). At this size every node
/// agrees on the lanes quickly, and two committers' windows meet rarely.
pub(super) const ALL_TAKE_TURNS: usize = 8;
/// The least time between the starts of two commits of a fleet's sole committer (a fleet of
/// more than [`ALL_TAKE_TURNS`] lanes): at most five commits a second, whatever N is, and as
/// soon as the last one landed when a commit takes longer. The slot grid, which keeps several
/// committers apart, only made a sole committer wait for the next slot's start after each
/// commit: at 128 nodes its commits took ~210 ms of work (listing and reading the intents,
/// the build, the answer) and came every 284 ms (median; p90 658 ms), the slot held at 550 ms
/// by one slow commit (a slot comes down only when half of it is enough), so the fleet's
/// commit rate fell with N: 1.3-2.4 commits a second at 128 nodes against 6 at 32.
pub(super) const SOLE_CADENCE_MS: u64 = 200;
/// The least time between a non-committing lane's own attempts.
pub(super) const MIN_FALLBACK_MS: u64 = 5_000;
/// At most this many fallback attempts per slot across a fleet (see [`fallback_ms`]).
pub(super) const FALLBACK_LOADS_PER_SLOT: u64 = 8;
/// At most this many fallback attempts a second across a fleet (see [`fallback_ms`]): each
/// loads the table, whose metadata (every snapshot's summary) grows with what the fleet
/// registered (~500 KB after a minute of 128 nodes), and the catalog and the store serve each.
pub(super) const FALLBACK_LOADS_PER_SECOND: u64 = 8;
/// Slot lengths are multiples of this.
pub(super) const SLOT_UNIT_MS: u64 = 50;
pub(super) const MIN_SLOT_MS: u64 = 100;
pub(super) const MAX_SLOT_MS: u64 = 5_000;

/// Registrars sharing a table, as this committer has seen them in the table's snapshots, and its
/// own lane. With two or more lanes the table's commits are slotted: time is cut into slots of
/// one agreed length (the largest slot the lanes publish, see [`desired_slot`]) on the wall
/// clock's grid, and lane k of N (by the lanes' sorted ids) starts its commits in the slots
/// whose index is k modulo N. Every registrar computes the same grid from the same snapshots,
/// so a fleet takes turns instead of colliding: one commit per slot, each node once per cycle
/// of N slots, and no 409 unless a commit overruns its slot or a clock is off (then the prompt
/// retry settles it). Random pacing cannot do this: at N nodes a random commit conflicts with
/// probability 1 - e^(-(N-1)·W/I), so a low conflict rate costs an interval linear in N·W with
/// a large constant; slots cost exactly N slots.
#[derive(Debug, Clone)]
pub(super) struct Fleet {
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
}

/// What a lane does in a fleet that takes turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Turn {
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

impl Default for Fleet {
    /// A fresh lane: 12 random hex digits.
    fn default() -> Self {
        Fleet::new(uuid::Uuid::new_v4().simple().to_string()[..12].to_string())
    }
}

impl Fleet {
    pub(super) fn new(own: String) -> Self {
        Fleet {
            own,
            lanes: std::collections::BTreeMap::new(),
            same_log: std::collections::BTreeSet::new(),
            committers: usize::MAX,
        }
    }

    /// A fleet whose nodes carry each other's intents: beyond [`ALL_TAKE_TURNS`] lanes, only
    /// the [`COMMITTERS`] lowest take turns.
    pub(super) fn carrying(self) -> Self {
        self.with_committers(COMMITTERS)
    }

    /// A carrying fleet where the `committers` lowest lanes take turns (the rules hold for
    /// any number; the tests of the ranks use several).
    pub(super) fn with_committers(mut self, committers: usize) -> Self {
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
    pub(super) fn same_log(&mut self, lane: &str) {
        if lane != self.own && self.same_log.len() < MAX_LANES {
            self.same_log.insert(lane.to_string());
        }
    }

    pub(super) fn own(&self) -> &str {
        &self.own
    }

    /// Notes a snapshot of `lane` committed at `at_ms` by a registrar that needs slots of
    /// `slot_ms` and does (or does not) carry the fleet's intents. Of two snapshots seen at the
    /// same moment (one read), the first noted (the newer) stands.
    pub(super) fn observe(&mut self, lane: &str, at_ms: i64, slot_ms: u64, carries: bool) {
        let commit = Seen {
            at: at_ms,
            slot: slot_ms,
            slot_at: at_ms,
            committed: Some(at_ms),
            carries,
        };
        if let Some(seen) = self.lanes.get_mut(lane) {
            if seen.committed.is_none_or(|c| at_ms > c) {
                *seen = Seen {
                    at: seen.at.max(at_ms),
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
    pub(super) fn carried(&mut self, lane: &str, at_ms: i64) {
        if let Some(seen) = self.lanes.get_mut(lane) {
            seen.at = seen.at.max(at_ms);
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
    /// the memory, until the turns break down. Bounded (by [`MAX_LANES`] and [`MAX_SLOT_MS`]),
    /// and a node that is gone stops counting after that many cycles.
    pub(super) fn memory_ms(&self, now_ms: i64) -> i64 {
        let mut memory = LANE_MEMORY_MS;
        // Each round can only widen the memory (more lanes, a longer cycle); the lanes are
        // finite, so this settles, in practice after one or two rounds.
        for _ in 0..8 {
            let present = self.present_within(now_ms, memory);
            let cycle = i64::try_from(fleet_slot(&present))
                .unwrap_or(i64::MAX)
                .saturating_mul(i64::try_from(present.len()).unwrap_or(i64::MAX));
            let wanted = cycle.saturating_mul(LANE_MEMORY_CYCLES).max(LANE_MEMORY_MS);
            if wanted <= memory {
                break;
            }
            memory = wanted;
        }
        memory
    }

    /// The lanes present at `now_ms` (seen within [`Fleet::memory_ms`]), our own always among
    /// them.
    fn present(&self, now_ms: i64) -> Vec<(&str, u64)> {
        self.present_within(now_ms, self.memory_ms(now_ms))
    }

    /// The lanes seen within `memory_ms` of `now_ms`, our own always among them, sorted, each
    /// with the slot it counts with: the one it published, while its commit that published it
    /// is within [`slot_memory_ms`], else none.
    fn present_within(&self, now_ms: i64, memory_ms: i64) -> Vec<(&str, u64)> {
        let seen: Vec<(&str, Seen)> = self
            .lanes
            .iter()
            .filter(|(lane, seen)| {
                lane.as_str() == self.own || now_ms.saturating_sub(seen.at) <= memory_ms
            })
            .map(|(lane, seen)| (lane.as_str(), *seen))
            .collect();
        let published = seen.iter().map(|(_, s)| s.slot).max().unwrap_or(0);
        let slot_memory = slot_memory_ms(published, self.takers(seen.len()));
        let mut present: Vec<(&str, u64)> = seen
            .into_iter()
            .map(|(lane, s)| {
                let recent = now_ms.saturating_sub(s.slot_at) <= slot_memory;
                (lane, if recent { s.slot } else { 0 })
            })
            .collect();
        if !self.lanes.contains_key(&self.own) {
            present.push((self.own.as_str(), 0));
            present.sort_unstable();
        }
        present
    }

    /// The length of a cycle (every committing lane's slot once), in ms; `None` while not
    /// slotted.
    pub(super) fn cycle_ms(&self, now_ms: i64) -> Option<u64> {
        let present = self.present(now_ms);
        if !self.others_present(&present) {
            return None;
        }
        let lanes = self.takers(present.len()) as u64;
        if lanes == 1 {
            return Some(SOLE_CADENCE_MS);
        }
        Some(fleet_slot(&present).saturating_mul(lanes))
    }

    /// Whether a lane of another node is present: lanes of this registrar's own log (its run
    /// before a restart) do not count, so a lone registrar is never slotted.
    fn others_present(&self, present: &[(&str, u64)]) -> bool {
        present
            .iter()
            .any(|(lane, _)| *lane != self.own && !self.same_log.contains(*lane))
    }

    /// When this lane's next commit may start (ms since the epoch), at or after `now_ms`, with
    /// the slot length; `None` while no other registrar commits to the table. Lanes of this
    /// registrar's own log keep their ranks (the other nodes still count them, for a minute, and
    /// every node must rank the same lanes), and their slots are this registrar's too.
    #[cfg(test)]
    pub(super) fn next_start(&self, now_ms: i64) -> Option<(i64, u64)> {
        match self.turn(now_ms) {
            Turn::Slot { start, slot } => Some((start, slot)),
            Turn::Alone | Turn::Sole { .. } | Turn::Carried { .. } => None,
        }
    }

    /// What this lane does now (see [`Turn`]). Only the lowest lanes (by id) take turns when
    /// the fleet carries intents (one, [`COMMITTERS`]): every node then agrees on who commits
    /// from a few lanes rather than from all of them (a node's view of the lanes is as fresh as
    /// its last load, and with 64 nodes taking turns their views disagreed for cycles on end,
    /// 409 upon 409). A lane that stops committing drops out of the others' memory, so the
    /// committers stay the lowest lanes of those that commit; one that commits as a fallback
    /// joins them. Until then the others commit what they published themselves, each after its
    /// fallback ([`patience_ms`]), carrying everyone's.
    /// The lowest lane that ranks as a committer, as this node sees the fleet (for the logs).
    pub(super) fn committer(&self, now_ms: i64) -> Option<String> {
        let memory = self.memory_ms(now_ms);
        let present = self.present_within(now_ms, memory);
        present
            .iter()
            .map(|(lane, _)| *lane)
            .find(|lane| {
                self.lanes.get(*lane).is_some_and(|seen| {
                    seen.carries
                        && seen
                            .committed
                            .is_some_and(|c| now_ms.saturating_sub(c) <= memory)
                })
            })
            .map(str::to_string)
    }

    pub(super) fn turn(&self, now_ms: i64) -> Turn {
        let memory = self.memory_ms(now_ms);
        let present = self.present_within(now_ms, memory);
        if !self.others_present(&present) {
            return Turn::Alone;
        }
        let slot = fleet_slot(&present);
        let lanes = self.takers(present.len());
        let ranked: Vec<&str> = if lanes < present.len() {
            // Only a few committers: ranked among the lanes seen committing themselves that
            // carry the fleet's intents (a lane known only from intents carried, which anyone
            // who can write one can claim, or a node with `commit.intents: false`, would be a
            // committer that never carries). This node's own lane ranks only once the table has
            // shown a commit of it: the others rank only the lanes they have seen, and a node
            // invisible to them that ranked itself among the committers would commit in
            // another's slot, lose, and stay invisible, cycle after cycle (64 nodes: 52 such
            // 409s in the first 12 s).
            present
                .iter()
                .map(|(lane, _)| *lane)
                .filter(|lane| {
                    self.lanes.get(*lane).is_some_and(|seen| {
                        seen.carries
                            && seen
                                .committed
                                .is_some_and(|c| now_ms.saturating_sub(c) <= memory)
                    })
                })
                .collect()
        } else {
            present.iter().map(|(lane, _)| *lane).collect()
        };
        ranked
            .iter()
            .enumerate()
            .filter(|(rank, lane)| {
                *rank < lanes && (**lane == self.own || self.same_log.contains(**lane))
            })
            .map(|(rank, _)| next_slot(now_ms, slot, lanes, rank))
            .min()
            .map_or(
                Turn::Carried {
                    fallback: fallback_ms(slot, present.len(), lanes),
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

/// Whether `lane` looks like a lane ([`Fleet::default`]: hex digits), so that what another
/// node wrote into an intent or a summary cannot put anything else into this node's summaries.
pub(crate) fn is_lane(lane: &str) -> bool {
    (1..=32).contains(&lane.len()) && lane.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The slot every lane uses: the largest any of them needs (each lane with the slot it counts
/// with, see [`slot_memory_ms`]).
fn fleet_slot(present: &[(&str, u64)]) -> u64 {
    present
        .iter()
        .map(|(_, slot)| *slot)
        .max()
        .unwrap_or(0)
        .clamp(MIN_SLOT_MS, MAX_SLOT_MS)
}

/// How long after a lane's last commit of its own the slot it published counts towards the
/// fleet's, in a fleet whose largest published slot is `slot` and where `committers` lanes take
/// turns: [`LANE_MEMORY_CYCLES`] of their cycles, and at least [`SLOT_MEMORY_MS`]. A lane that
/// takes turns commits once a cycle, so its slot always counts; one that only publishes is
/// present for as long as its intents are carried, but the slot it published at its last commit
/// (as a rule the fleet's contended first seconds, 0.8-1 s against the committers' 150-300 ms)
/// says nothing of what a commit needs now, and held a 64-node fleet's grid at ~1 s for good
/// (1 commit/s where 4-5 were enough). Bounded: at most 3 × 8 × 5 s = 2 minutes in a fleet that
/// carries intents.
pub(super) fn slot_memory_ms(slot: u64, committers: usize) -> i64 {
    let slot = i64::try_from(slot.clamp(MIN_SLOT_MS, MAX_SLOT_MS)).unwrap_or(i64::MAX);
    let committers = i64::try_from(committers.max(1)).unwrap_or(i64::MAX);
    slot.saturating_mul(committers)
        .saturating_mul(LANE_MEMORY_CYCLES)
        .max(SLOT_MEMORY_MS)
}

/// How long a node that does not take turns leaves between its own attempts, in a fleet of
/// `lanes` lanes with slots of `slot` ms and `committers` committers: one cycle of the
/// committers, at least
/// [`MIN_FALLBACK_MS`], and at least one slot per [`FALLBACK_LOADS_PER_SLOT`] lanes, so that
/// the fleet's fallback loads come to at most that many per slot whatever N is, and at least
/// one second per [`FALLBACK_LOADS_PER_SECOND`] lanes (128 nodes: 16 s; 1,000 nodes: 125 s, 8
/// loads a second). Every node started at about the same time, so the attempts are jittered
/// ([`jittered`]): 127 nodes on one 5 s fallback loaded the table 50-80 times in one second,
/// every 5 s, and the committer's listing of the intents took 17 s in the store they
/// swamped. It is not the cycle all lanes would make: now
/// that every publishing lane is present (`thadam.carried-lanes`), that cycle was 64 slots at
/// 64 nodes, and a node learning only that late what was carried filled its pending intents
/// and held its segments back until its fallback (p99 22.9 s, max 49 s).
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
pub(super) fn jittered(ms: u64, unit: f64) -> Duration {
    Duration::from_millis(ms).mul_f64(0.5 + unit.clamp(0.0, 1.0))
}

/// While the committers are seen carrying, a node that does not take turns leaves its published
/// segments to them for up to this many fallbacks (see [`patience_ms`]).
pub(super) const FALLBACK_PATIENCE: u64 = 4;

/// How long ago a node that does not take turns, with a fallback of `fallback` ms, may have
/// published its segments and still leave them to the committers, given how long ago the table's
/// newest snapshot that carried intents was committed (`since_carried_ms`; `None`: none seen).
///
/// One fallback, as a rule: past it the node commits what it published itself. But while the
/// committers are seen carrying (a carrying snapshot within the last fallback), they are slow,
/// not gone, and up to [`FALLBACK_PATIENCE`] fallbacks: every node published at about the same
/// time, so when a committer's windows stretch past a fallback, every node's segments come of
/// age together, and each node that commits them itself lists and carries everyone's, as they
/// are (one manifest per intent for the next commit to merge), and meets the others' commits
/// (409s). That cascade took 128-node runs from a p99 of 1-3 s to minutes. Bounded, so that a
/// node whose intents the committers pass over (past a listing's first page) still gets its
/// segments in; and a fleet whose committers are gone falls back after one fallback, as before.
pub(super) fn patience_ms(fallback: u64, since_carried_ms: Option<i64>) -> u64 {
    let fallback_ms = i64::try_from(fallback).unwrap_or(i64::MAX);
    match since_carried_ms {
        Some(since) if since <= fallback_ms => fallback.saturating_mul(FALLBACK_PATIENCE),
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
/// one moment, and one of them meets a 409 (64 nodes: 25 of 46 in-window 409s of one run
/// started within 25 ms of their winner). Lowered at three quarters, a 64-node fleet's
/// committers moved the grid between 100, 150 and 200 ms every few commits.
///
/// The raise is bounded because a slot comes down only at its lane's next turn, a cycle of
/// the committers later, and with eight committers that cycle was eight of the slots raised: a
/// 128-node fleet's
/// committer whose first turn took 3.2 s (every node starting at once) published 4.8 s
/// slots, a 38 s cycle, and with `commit.max_segments` per commit the fleet landed 111 of the
/// 128 segments a second fed to it until that lane's next turn. Windows that stay long raise
/// the slot turn after turn (150, 300, 600, 1,200 ms, ...), each 409 in a turn counting too.
pub(super) fn desired_slot(current: u64, made_in: u64, round_trip_ms: f64) -> u64 {
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
    use super::*;
    use serde_json::{Value, json};

    /// Snapshots 1..=n in a chain; those in `registrar` carry `thadam.writer`.
    fn chain(n: i64, registrar: &[i64]) -> TableMetadata {
        let snapshots: Vec<Value> = (1..=n)
            .map(|id| {
                let mut summary = json!({"operation": "append"});
                if registrar.contains(&id) {
                    summary[WRITER] = json!("thadam-iceberg/s/p");
                }
                let mut s = json!({
                    "snapshot-id": id, "sequence-number": id, "timestamp-ms": 1_000 + id,
                    "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"),
                    "summary": summary, "schema-id": 0,
                });
                if id > 1 {
                    s["parent-snapshot-id"] = json!(id - 1);
                }
                s
            })
            .collect();
        serde_json::from_value(json!({
            "format-version": 2, "table-uuid": "5f4a6c48-0c3a-4a2c-9e61-3c1b8f2d1e11",
            "location": "s3://b/t", "last-sequence-number": n, "last-updated-ms": 2_000,
            "last-column-id": 1, "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "x", "required": false, "type": "long"}]}],
            "default-spec-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999, "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}], "properties": {},
            "current-snapshot-id": n, "snapshots": snapshots,
            "refs": {"main": {"snapshot-id": n, "type": "branch"}},
        }))
        .expect("test metadata")
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
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, false, None, None);
        assert!(!p.loads_first());
        // A load that found pyiceberg's commits since snapshot 3: load first, no widening.
        p.loaded(&chain(5, &[1, 2, 3]), Some(3), true);
        assert!(p.loads_first());
        assert_eq!(p.interval(), Duration::ZERO);
        // One won by another registrar after a conflict: the pace widens.
        p.loaded(&chain(6, &[6]), Some(5), true);
        assert_eq!(p.interval(), FIRST_STEP);
        // Loads that find nothing new count the loading-first down.
        for _ in 0..LOAD_FIRST_FOR {
            p.loaded(&chain(6, &[6]), Some(6), false);
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
        assert_eq!(
            pace.gap(Duration::from_millis(300), 0.9),
            Duration::from_millis(300)
        );
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
        assert_eq!(
            one("l01").turn(now),
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
        // least 5 s).
        for own in ["l08", "l19"] {
            assert_eq!(fleet(own).turn(now), Turn::Carried { fallback: 5_000 });
        }
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
    fn carried_lanes_in_a_summary_make_their_nodes_present() {
        let mut m = serde_json::to_value(chain(2, &[1, 2])).expect("json");
        let now = chrono::Utc::now().timestamp_millis();
        m["snapshots"][0]["timestamp-ms"] = json!(now - 2);
        m["snapshots"][1]["timestamp-ms"] = json!(now - 1);
        m["last-updated-ms"] = json!(now);
        m["snapshots"][1]["summary"][LANE] = json!("00aa");
        m["snapshots"][1]["summary"][CARRIED_LANES] = json!("00bb,00cc,not a lane,");
        let m: TableMetadata = serde_json::from_value(m).expect("metadata");
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
        p.read_lanes(&m, true);
        let lanes: Vec<&str> = p.fleet.lanes.keys().map(String::as_str).collect();
        assert_eq!(lanes, ["00aa", "00bb", "00cc"]);
        assert!(is_lane("0123456789ab"));
        assert!(!is_lane(""));
        assert!(!is_lane("a,b"));
        assert!(!is_lane(&"a".repeat(33)));
    }

    /// A table another registrar's lane (`00aa`, publishing `slot_ms`) committed to just now.
    fn another_lane_now(slot_ms: u64) -> TableMetadata {
        let mut m = serde_json::to_value(chain(1, &[1])).expect("json");
        let now = chrono::Utc::now().timestamp_millis();
        m["snapshots"][0]["timestamp-ms"] = json!(now - 1);
        m["last-updated-ms"] = json!(now);
        m["snapshots"][0]["summary"][LANE] = json!("00aa");
        m["snapshots"][0]["summary"][SLOT_MS] = json!(slot_ms.to_string());
        serde_json::from_value(m).expect("metadata")
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
        // A 128-node fleet's start-up: the fleet takes turns on 150 ms slots, and a committer's
        // first commit in its turn takes 3.2 s while every node loads and commits at once. At
        // 1.5 × 3.2 s it published 4,800 ms slots, the fleet's cycle became 38 s, and with
        // `commit.max_segments` per commit the fleet landed 111 of the 128 segments a second
        // fed it until that lane's next turn: a backlog of minutes.
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
    fn a_sole_committer_goes_at_its_cadence_not_on_the_grid() {
        let now = chrono::Utc::now().timestamp_millis();
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
        // After a commit that started 120 ms ago, the next starts at the cadence after that
        // start, whatever the grid of 550 ms slots says; a longer commit's next goes at once.
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
        p.fleet = fleet(&committer, 20);
        p.last_start = Some(Instant::now() - Duration::from_millis(120));
        p.gap = p.next_gap();
        assert_eq!(p.gap, Duration::from_millis(SOLE_CADENCE_MS));
        assert_eq!(p.planned, Some(550));
        let (since, gap) = p.spacing(Instant::now());
        assert!(since.is_some_and(|s| s < gap));
        p.last_start = Some(Instant::now() - Duration::from_millis(900));
        p.gap = p.next_gap();
        let (since, gap) = p.spacing(Instant::now());
        assert!(since.is_some_and(|s| s >= gap));
        // A node that was given a fallback before it knew itself the committer goes at the
        // cadence once it does; one that does not take turns keeps its fallback.
        p.gap = Duration::from_millis(7_000);
        assert_eq!(
            p.spacing(Instant::now()).1,
            Duration::from_millis(SOLE_CADENCE_MS)
        );
        p.fleet = fleet(&format!("{:012x}", 7), 20);
        assert_eq!(p.spacing(Instant::now()).1, Duration::from_millis(7_000));
    }

    #[test]
    fn a_publishers_view_of_the_fleet_is_renewed_before_it_lapses() {
        let now = chrono::Utc::now().timestamp_millis();
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
        // 128 lanes seen 50 s ago (the fleet's warm-up commits, and nothing carried since),
        // their slots no longer counted.
        let mut fleet = Fleet::new(format!("{:012x}", 7)).carrying();
        for i in 0..128 {
            fleet.observe(&format!("{i:012x}"), now - 50_000, 0, true);
        }
        p.fleet = fleet;
        let Some(fallback) = p.fallback_ms() else {
            panic!("lane 7 of 128 does not take turns");
        };
        assert_eq!(fallback, 16_000);
        // It is carried now, but its view lapses 10 s from now, before its next fallback
        // (at up to 1.5 of one): it loads now rather than defer on that view.
        assert!(p.view_holds_for(5_000));
        assert!(!p.view_holds_for(fallback * 3 / 2));
        // Lanes seen a second ago hold past the next fallback.
        for i in 0..128 {
            p.fleet.observe(&format!("{i:012x}"), now - 1_000, 0, true);
        }
        assert!(p.view_holds_for(fallback * 3 / 2));
    }

    #[test]
    fn committers_seen_carrying_are_left_a_few_fallbacks() {
        assert_eq!(patience_ms(5_000, None), 5_000);
        assert_eq!(patience_ms(5_000, Some(1_000)), 20_000);
        assert_eq!(patience_ms(5_000, Some(5_000)), 20_000);
        assert_eq!(patience_ms(5_000, Some(5_001)), 5_000);
        // A committer whose clock is ahead of this node's: seen carrying all the same.
        assert_eq!(patience_ms(5_000, Some(-3_000)), 20_000);
        assert_eq!(patience_ms(u64::MAX, Some(0)), u64::MAX);
    }

    /// A carrying fleet's table: lanes `…01` to `…09` committed `ago_ms` ago, the newest of
    /// those snapshots carrying intents when `carrying`.
    fn committers_committed(ago_ms: i64, carrying: bool) -> TableMetadata {
        let mut m = serde_json::to_value(chain(9, &[1, 2, 3, 4, 5, 6, 7, 8, 9])).expect("json");
        let now = chrono::Utc::now().timestamp_millis();
        for i in 0..9 {
            let s = &mut m["snapshots"][i];
            s["timestamp-ms"] = json!(now - ago_ms - 9 + i as i64);
            s["summary"][LANE] = json!(format!("{:012x}", i + 1));
            s["summary"][SLOT_MS] = json!("200");
        }
        if carrying {
            m["snapshots"][8]["summary"][CARRIED_INTENTS] = json!("3");
        }
        m["last-updated-ms"] = json!(now);
        serde_json::from_value(m).expect("metadata")
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
        assert_eq!(
            p.leave_to_committers_ms(),
            Some(fallback * FALLBACK_PATIENCE)
        );
        // Committing, but nothing carried: one.
        let mut p = publisher();
        p.read_lanes(&committers_committed(1_000, false), true);
        assert_eq!(p.leave_to_committers_ms(), Some(fallback));
        // The last carrying commit a fallback and more ago: one.
        let mut p = publisher();
        p.read_lanes(&committers_committed(fallback as i64 + 2_000, true), true);
        assert_eq!(
            p.leave_to_committers_ms(),
            Some(p.fallback_ms().expect("publisher"))
        );
        // A committer itself leaves nothing: it commits in its turn.
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
        p.fleet = Fleet::new(format!("{:012x}", 1)).carrying();
        p.read_lanes(&committers_committed(1_000, true), true);
        assert_eq!(p.leave_to_committers_ms(), None);
    }

    #[test]
    fn a_view_older_than_a_few_seconds_is_loaded_before_the_next_commit() {
        assert!(!is_stale_view(Duration::from_millis(100)));
        assert!(!is_stale_view(STALE_VIEW));
        assert!(is_stale_view(STALE_VIEW + Duration::from_millis(1)));
        let m = another_lane_now(100);
        let mut p = Pacer::new("ns.t".into(), Duration::ZERO, true, None, None);
        // Never viewed (the start loads anyway): nothing to refresh.
        assert!(!p.loads_first());
        p.landed(&m, 50.0, true);
        p.load_first = 0;
        assert!(!p.loads_first(), "just seen");
        p.viewed = Instant::now().checked_sub(STALE_VIEW * 2);
        assert!(p.loads_first(), "seen too long ago");
        p.loaded(&m, m.current_snapshot_id(), false);
        p.load_first = 0;
        assert!(!p.loads_first(), "seen again");
    }

    #[test]
    fn what_a_node_reads_is_dated_by_its_own_clock_at_the_read() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicI64, Ordering};
        const TEN_MINUTES: i64 = 600_000;
        let real = 1_000_000_000_000;
        let lane = |l: &str, ts: i64| (json!({LANE: l, SLOT_MS: "100", WRITER: "w"}), ts);
        let pacer = |at: &Arc<AtomicI64>| {
            let at = Arc::clone(at);
            let clock: Clock = Arc::new(move || at.load(Ordering::SeqCst));
            Pacer::new("ns.t".into(), Duration::ZERO, true, Some(clock), None)
        };
        let one = crate::testing::metadata_with(&[lane("00aa", real)]);
        // Ten minutes behind: the other lane's snapshot, stamped on time, is in this node's
        // future; it is present (not hidden), and gone a lane memory after it was read.
        let behind = Arc::new(AtomicI64::new(real - TEN_MINUTES));
        let mut p = pacer(&behind);
        p.loaded(&one, None, false);
        assert!(p.slotted(), "the other lane is present");
        behind.fetch_add(LANE_MEMORY_MS + 1_000, Ordering::SeqCst);
        assert!(!p.slotted(), "and forgotten a lane memory after the read");
        // Ten minutes ahead: at its first read the other lane looks ten minutes old, but what
        // was committed since a read is dated by the read that finds it.
        let ahead = Arc::new(AtomicI64::new(real + TEN_MINUTES));
        let mut q = pacer(&ahead);
        q.loaded(&one, None, false);
        assert!(!q.slotted());
        let two = crate::testing::metadata_with(&[lane("00aa", real), lane("00bb", real + 1)]);
        q.loaded(&two, one.current_snapshot_id(), false);
        assert!(
            q.slotted(),
            "a lane committed since the last read is present"
        );
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
    fn the_lanes_remembered_are_bounded() {
        let mut f = Fleet::new("own".into());
        for i in 0..(MAX_LANES as i64 + 50) {
            f.observe(&format!("lane{i}"), i, 10, true);
        }
        assert_eq!(f.lanes.len(), MAX_LANES);
        assert!(f.lanes.contains_key(&format!("lane{}", MAX_LANES + 49)));
        assert!(!f.lanes.contains_key("lane0"));
    }
}
