//! The pace of a table's commits: one [`Pacer`] per table owns everything that decides when the
//! next batch of this registrar may start (the adaptive interval, the fleet's lanes and slots,
//! the round trip, courtesy towards other kinds of writers), from what the table's snapshots tell
//! about who else commits to it. Its clocks and its jitter are seams ([`Ticker`], and the wall
//! clock `clock`), so that its decisions are tested below as it makes them.
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
//! turns on a wall-clock grid instead (the lanes and the slot rules live in
//! [`crate::table::fleet`]), and the adaptive pace only covers tables without lanes.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceberg::spec::TableMetadata;

use crate::table::fleet::lanes::{Fleet, SOLE_CADENCE_MS, Turn};
use crate::table::fleet::roll_call::{self, RollCall};
use crate::table::fleet::slots::{desired_slot, is_lane, jittered, patience_ms};
use crate::table::hooks::{self, Clock};
use crate::table::summary_keys::{
    CARRIED_INTENTS, CARRIED_LANES, LANE, NO_INTENTS, SLOT_MS, WATERMARK_KEY, WATERMARK_PREFIX,
    WRITER,
};

/// How many commits load the table first after another writer's commit was seen.
const LOAD_FIRST_FOR: u32 = 16;

/// How far back a load looks for who committed since the version held.
const WRITERS_LOOKBACK: usize = 64;

/// The most snapshots read for lanes after one load or commit (and so the most a load for a node
/// the fleet carries keeps of the history, `HeldTable::load_recent`).
pub(super) const LANES_LOOKBACK: usize = 256;

/// The most watermark properties remembered as this registrar's own.
const OWN_WATERMARKS: usize = 64;

/// While another kind of writer has committed to the table within [`COURTESY_MEMORY_MS`], the
/// registrar leaves at least this long between the starts of its commits: such writers build a
/// commit slowly (seconds, in Python or Spark) and give up after a few 409s (pyiceberg and Java
/// retry 4 times), so a registrar committing ten times a second would starve them.
const COURTESY_GAP: Duration = Duration::from_secs(1);
const COURTESY_MEMORY_MS: i64 = 60_000;

/// Where the pacer reads the time its gaps are measured in and draws their jitter: the
/// system's monotonic clock and `rand::random` (uniform in [0, 1)); the unit tests fix both. The
/// wall clock the slot grid is cut by is another (`Pacer::clock`).
struct Ticker {
    now: Arc<dyn Fn() -> Instant + Send + Sync>,
    unit: Arc<dyn Fn() -> f64 + Send + Sync>,
}

impl Ticker {
    fn now(&self) -> Instant {
        (self.now)()
    }

    fn unit(&self) -> f64 {
        (self.unit)()
    }
}

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
    /// The longest time between two carrying snapshots in the last read that found one (their
    /// timestamps, and the newest of the read before), and that newest timestamp: how long the
    /// committers take between their commits (see [`patience_ms`]).
    carry_gap_ms: Option<i64>,
    carry_newest_ms: Option<i64>,
    /// How many more commits load the table before they are built: set when another writer's
    /// commit was seen (a 409, or a load that found commits not ours), counted down by loads
    /// that found none. A lone registrar builds on its own last commit's answer.
    load_first: u32,
    /// When the table held was last seen as the catalog has it (a load, or a commit's answer).
    viewed: Option<Instant>,
    /// When the last batch's first attempt started; the next waits [`Self::gap`] after it.
    last_start: Option<Instant>,
    gap: Duration,
    /// The fallback [`Self::gap`] was drawn from, while this node did not take turns (see
    /// [`Self::spacing`]).
    gap_fallback: Option<u64>,
    /// The length of the slot the next attempt was planned in, while this node takes turns:
    /// only such attempts measure the slot ([`Self::measured`]).
    planned: Option<u64>,
    /// The wall clock the slot grid is read by: the system's, or a test's skewed one.
    clock: Option<Clock>,
    /// Whether this node carries the fleet's intents (`commit.intents`): one that does not says
    /// so in its snapshots ([`NO_INTENTS`]), and is never ranked as the committer.
    carrying: bool,
    /// The clock the gaps and the view's age are measured by, and the jitter's draws.
    ticker: Ticker,
    /// Where this node is in its roll call at its start (see `fleet::roll_call`).
    roll: RollCall,
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
            carry_gap_ms: None,
            carry_newest_ms: None,
            load_first: 0,
            viewed: None,
            last_start: None,
            gap: Duration::ZERO,
            gap_fallback: None,
            planned: None,
            clock,
            carrying,
            ticker: Ticker {
                now: Arc::new(Instant::now),
                unit: Arc::new(rand::random::<f64>),
            },
            roll: if carrying {
                RollCall::Due
            } else {
                RollCall::Done
            },
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
    /// The gap follows the node's role as it is now, not as it was when the gap was drawn:
    /// - A node that became the fleet's sole committer since (the fleet's lanes came to be
    ///   known) goes at its cadence rather than wait out the fallback it was given as a node
    ///   that does not take turns: at a 32-node fleet's start the committer waited 3.6 s so,
    ///   with every node's first segments.
    /// - A node that became the fleet's deputy goes at the deputy's fallback, with the same
    ///   draw. A gap is drawn only when an attempt defers or lands, and an attempt that found
    ///   everything carried does neither: a 128-node fleet's deputy kept the 8-24 s of a
    ///   fallback drawn before it was the deputy, the deputy's window (`DEPUTY_SEEN_MS`) closed
    ///   before its next attempt, and when the committer was killed nothing was committed for
    ///   16.8 s, until the others' fallbacks came.
    pub(super) fn spacing(&self, now: Instant) -> (Option<Duration>, Duration) {
        let now_ms = self.now_ms();
        let sole = Duration::from_millis(SOLE_CADENCE_MS).max(self.courtesy(now_ms));
        // A gap no longer than the sole committer's cadence is short whatever the role: the
        // fleet's turn (a walk over its lanes) is read only for a longer one.
        let gap = if self.gap <= sole {
            self.gap
        } else {
            match self.fleet.turn(now_ms) {
                Turn::Sole { .. } => sole,
                Turn::Carried { fallback } => match self.gap_fallback {
                    Some(drawn_from) if fallback < drawn_from => {
                        self.gap.mul_f64(fallback as f64 / drawn_from as f64)
                    }
                    _ => self.gap,
                },
                Turn::Alone | Turn::Slot { .. } => self.gap,
            }
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
        let stale = |at: Instant| is_stale_view(self.ticker.now().saturating_duration_since(at));
        self.load_first > 0 || self.viewed.is_some_and(stale)
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
    /// and a node alone publishes nothing and waits for its own pace (128 nodes: a view of the
    /// fleet's warm-up commits lapsed between two fallbacks that had not loaded, and 20-32 nodes
    /// held their segments back for 5-16 s each).
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
        Some(patience_ms(fallback, since_carried, self.carry_gap_ms))
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
    /// one table), the pace widens (not for another kind of writer: see the module's doc). Then
    /// the lanes the load brought are read.
    pub(super) fn loaded(&mut self, metadata: &TableMetadata, held: Option<i64>, conflicted: bool) {
        self.viewed = Some(self.ticker.now());
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

    /// Whether this attempt calls the roll (see `fleet::roll_call`): the node's first, no
    /// committer seen at work in the table it loaded at its start (`metadata`), and the table
    /// could be a fleet's.
    pub(super) fn calls_roll(&self, metadata: &TableMetadata) -> bool {
        self.roll == RollCall::Due
            && self.fleet.committer(self.now_ms()).is_none()
            && roll_call::table_calls(metadata, &self.own_watermarks)
    }

    /// The roll was called (this node's batch published): the next attempt lists the intents
    /// after [`roll_call::HOLD`], and loads the table.
    pub(super) fn roll_called(&mut self) {
        self.roll = RollCall::Called;
        self.gap = roll_call::HOLD;
        self.load_first = self.load_first.max(1);
    }

    /// Whether the roll was called and waits for its answers.
    pub(super) fn roll_pending(&self) -> bool {
        self.roll == RollCall::Called
    }

    /// The first attempt went on without a roll call: none will be.
    pub(super) fn no_roll_call(&mut self) {
        if self.roll == RollCall::Due {
            self.roll = RollCall::Done;
        }
    }

    /// What the roll call found (see `roll_call::answered`; no other lane: this node is
    /// alone). Every lane there is present, so the fleet takes turns as its size says; those
    /// of the first round rank as committers until a lane is seen committing (see
    /// [`Fleet::turn`]). This node's own lane ranks only if it answered: one that published
    /// after the first round waits for the round's committer like any node the fleet carries.
    pub(super) fn roll_answered(&mut self, roll: &roll_call::Roll) {
        self.roll = RollCall::Done;
        let now_ms = self.now_ms();
        let own = self.fleet.own().to_string();
        let others = roll.present.iter().filter(|l| **l != own).count();
        if others > 0 {
            // Own lane too (twice when it is present: noting a lane is idempotent).
            for lane in roll.present.iter().chain([&own]) {
                if roll.answered.binary_search(lane).is_ok() {
                    self.fleet.answered(lane, now_ms);
                } else {
                    self.fleet.carried(lane, now_ms);
                }
            }
        }
        tracing::info!(
            table = %self.table,
            lane = %own,
            committer = ?self.fleet.committer(now_ms),
            "roll call at start: {others} other node(s) there, {} in its first round",
            roll.answered.len()
        );
        self.publish();
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
        self.viewed = Some(self.ticker.now());
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
    /// fleet's start, where every node commits at once) took what the crowd made it take, and
    /// the slot it set would come down only at the lane's next turn, a cycle of the committers
    /// later, while the backlog grew into commits that kept it up (128 nodes: 1.2 s start-up
    /// commits published 1.8 s slots). A 409 counts too: slots too short for the windows make
    /// every committer's commit meet the next one's, and with landed commits alone nothing
    /// would raise them.
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
    /// nodes that dated one commit differently handed the turn to each other (each thought the
    /// other the committer, and nothing was carried for a fallback). But a timestamp is its
    /// writer's clock, so it is bounded by this node's: never later than now (a node ten minutes
    /// ahead stays present no longer than it commits), and never earlier than this node's last
    /// read for a snapshot committed since (to a node ten minutes ahead, the others' snapshots
    /// are not ten minutes old). Snapshots are stamped no earlier than the table's last
    /// (`transaction::snapshot_stamp`), so a node behind hides nothing under its own. For nodes
    /// whose clocks agree, the bounds change nothing.
    fn read_lanes(&mut self, metadata: &TableMetadata, fresh: bool) {
        let now_ms = self.now_ms();
        let first = self.lanes_read_to.is_none();
        let horizon = now_ms - self.fleet.memory_ms(now_ms);
        let floor = self.lanes_read_at.filter(|_| !first).unwrap_or(i64::MIN);
        let newest = metadata.current_snapshot().map(|s| s.sequence_number());
        let mut at = metadata.current_snapshot();
        let mut carries = CarryGaps::default();
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
            let summary = &snapshot.summary().additional_properties;
            if summary.contains_key(CARRIED_INTENTS) {
                carries.older(snapshot.timestamp_ms());
            }
            self.read_snapshot(summary, seen_ms);
            at = snapshot
                .parent_snapshot_id()
                .and_then(|p| metadata.snapshot_by_id(p));
        }
        if newest.is_some() {
            self.lanes_read_to = newest.max(self.lanes_read_to);
        }
        if let Some(newest_ms) = carries.newest {
            if let Some(before) = self.carry_newest_ms {
                carries.older(before);
            }
            self.carry_gap_ms = carries.widest.or(self.carry_gap_ms);
            self.carry_newest_ms = Some(newest_ms.max(self.carry_newest_ms.unwrap_or(i64::MIN)));
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
        let now = self.ticker.now();
        let since_start = self
            .last_start
            .map_or(Duration::ZERO, |s| now.duration_since(s));
        let now_ms = self.now_ms();
        let turn = self.fleet.turn(now_ms);
        self.planned = match turn {
            Turn::Slot { slot, .. } | Turn::Sole { slot } => Some(slot),
            Turn::Alone | Turn::Carried { .. } => None,
        };
        self.gap_fallback = match turn {
            Turn::Carried { fallback } => Some(fallback),
            Turn::Alone | Turn::Slot { .. } | Turn::Sole { .. } => None,
        };
        let gap = match turn {
            Turn::Sole { .. } => Duration::from_millis(SOLE_CADENCE_MS),
            Turn::Slot { start, slot } => {
                tracing::debug!(table = %self.table, start, slot, lane = self.fleet.own(), "next commit in this lane's slot");
                since_start + Duration::from_millis(u64::try_from(start - now_ms).unwrap_or(0))
            }
            Turn::Carried { fallback } => {
                tracing::debug!(table = %self.table, fallback, lane = self.fleet.own(), committer = ?self.fleet.committer(now_ms), present = self.fleet.present(now_ms).len(), "the committers carry this lane");
                jittered(fallback, self.ticker.unit())
            }
            Turn::Alone => self.pace.gap(Duration::ZERO, self.ticker.unit()),
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

/// The carrying snapshots of one read, newest first (their timestamps): the widest gap between
/// two of them.
#[derive(Default)]
struct CarryGaps {
    newest: Option<i64>,
    oldest: Option<i64>,
    widest: Option<i64>,
}

impl CarryGaps {
    /// The next carrying snapshot, older than those before; a timestamp out of order (another
    /// clock) counts as no gap.
    fn older(&mut self, at_ms: i64) {
        if let Some(newer) = self.oldest {
            let gap = newer.saturating_sub(at_ms).max(0);
            self.widest = Some(self.widest.map_or(gap, |w| w.max(gap)));
        }
        self.newest = self.newest.or(Some(at_ms));
        self.oldest = Some(at_ms);
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

#[cfg(test)]
mod tests;
