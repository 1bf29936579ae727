//! The batching policy, as pure functions over plain numbers: how many footers a table may hold
//! and read at once (the footer window), which ready prefix of its queue forms a batch, and
//! whether that batch is committed now or waits (for a footer in flight, `commit.linger`, or
//! `commit.min_interval`). The committer gathers the numbers and acts on the answer; keeping the
//! decision here lets unit tests pin it down without a catalog or a clock.

/// A table's footer window: the most footers held (arrived, not committed) plus reads in
/// flight, and the most decoded footer bytes, a read in flight counting as `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FooterWindow {
    pub(super) count: usize,
    pub(super) bytes: u64,
}

/// What a table holds against its footer window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) footers: usize,
    pub(super) bytes: u64,
    pub(super) in_flight: usize,
    pub(super) estimate: u64,
}

impl FooterWindow {
    /// Whether one more read may start.
    pub(super) fn has_room(&self, held: Held) -> bool {
        let count = held.footers + held.in_flight;
        let bytes = held
            .bytes
            .saturating_add(held.estimate.saturating_mul(held.in_flight as u64 + 1));
        count < self.count && bytes <= self.bytes
    }
}

/// `commit.max_segments` and `commit.max_bytes`.
#[derive(Debug, Clone, Copy)]
pub(super) struct BatchLimits {
    pub(super) max_segments: usize,
    pub(super) max_bytes: u64,
}

/// The ready prefix of a table's queue: segments whose footers are in, from the oldest.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Prefix {
    pub(super) segments: usize,
    pub(super) bytes: u64,
    /// The batch limits stopped it (more ready segments follow).
    pub(super) full: bool,
    /// The footer of the first segment after it is being read.
    pub(super) next_in_flight: bool,
}

impl Prefix {
    /// Whether a segment of `size` bytes still fits (a lone oversized one always does).
    pub(super) fn admits(&self, limits: &BatchLimits, size: u64) -> bool {
        self.segments < limits.max_segments
            && (self.segments == 0 || self.bytes.saturating_add(size) <= limits.max_bytes)
    }

    pub(super) fn add(&mut self, size: u64) {
        self.segments += 1;
        self.bytes = self.bytes.saturating_add(size);
    }

    pub(super) fn is_full(&self, limits: &BatchLimits) -> bool {
        self.full || self.segments >= limits.max_segments || self.bytes >= limits.max_bytes
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Timer {
    Linger,
    Pace,
}

/// A pace wake-up due within this of the one scheduled is not scheduled again.
const PACE_SLACK: std::time::Duration = std::time::Duration::from_millis(10);

/// The committer's pace wake-up (`PaceElapsed`): when the one scheduled is due. A pace that
/// shortened since it was scheduled (a node that became the fleet's deputy, see
/// `Pacer::spacing`) schedules another, earlier one; the later one, when it fires, changes
/// nothing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct PaceWake {
    due: Option<std::time::Instant>,
}

impl PaceWake {
    /// Whether a wake-up at `due` is to be scheduled: none is, or the one that is comes later
    /// (by more than [`PACE_SLACK`]). It is then the one scheduled.
    pub(super) fn schedule(&mut self, due: std::time::Instant) -> bool {
        if self.due.is_some_and(|armed| armed <= due + PACE_SLACK) {
            return false;
        }
        self.due = Some(due);
        true
    }

    /// A wake-up fired at `now`: none is scheduled any more, unless a later one is still to
    /// come (this was an earlier one, or a later one that an earlier replaced).
    pub(super) fn fired(&mut self, now: std::time::Instant) {
        if self.due.is_some_and(|due| due <= now) {
            self.due = None;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BatchDecision {
    Commit,
    /// Nothing to commit yet; a footer reply will wake the committer.
    Wait,
    /// Not yet: a timer must wake the committer after this long.
    WaitFor(Timer, std::time::Duration),
}

/// Whether the ready `prefix` is committed now (the batching policy). Pacing first: no commit
/// starts within `min_interval` of the last one (`since_commit`), full or not. Then a full batch
/// goes; one that is not full waits while the next footer is in flight, or until the oldest
/// waiting segment has waited `linger`.
pub(super) fn batch_decision(
    prefix: &Prefix,
    limits: &BatchLimits,
    oldest_waited: Option<std::time::Duration>,
    linger: std::time::Duration,
    since_commit: Option<std::time::Duration>,
    min_interval: std::time::Duration,
) -> BatchDecision {
    if prefix.segments == 0 {
        return BatchDecision::Wait;
    }
    if let Some(since) = since_commit.filter(|s| *s < min_interval) {
        return BatchDecision::WaitFor(Timer::Pace, min_interval - since);
    }
    if prefix.is_full(limits) {
        return BatchDecision::Commit;
    }
    if prefix.next_in_flight {
        return BatchDecision::Wait;
    }
    match oldest_waited.filter(|w| *w < linger) {
        Some(waited) => BatchDecision::WaitFor(Timer::Linger, linger - waited),
        None => BatchDecision::Commit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: std::time::Duration = std::time::Duration::from_millis(1);

    const ZERO: std::time::Duration = std::time::Duration::ZERO;

    fn prefix(segments: usize, bytes: u64, full: bool, next_in_flight: bool) -> Prefix {
        Prefix {
            segments,
            bytes,
            full,
            next_in_flight,
        }
    }

    const LIMITS: BatchLimits = BatchLimits {
        max_segments: 10,
        max_bytes: 1000,
    };

    #[test]
    fn a_full_batch_commits_at_once_and_a_partial_one_waits_for_the_footer_in_flight() {
        let d = |p: &Prefix| batch_decision(p, &LIMITS, Some(MS), ZERO, None, ZERO);
        assert_eq!(d(&prefix(0, 0, false, true)), BatchDecision::Wait);
        assert_eq!(d(&prefix(10, 10, false, true)), BatchDecision::Commit);
        assert_eq!(
            d(&prefix(2, 1000, false, true)),
            BatchDecision::Commit,
            "bytes"
        );
        assert_eq!(d(&prefix(3, 30, true, false)), BatchDecision::Commit);
        assert_eq!(d(&prefix(3, 30, false, true)), BatchDecision::Wait);
        assert_eq!(d(&prefix(3, 30, false, false)), BatchDecision::Commit);
    }

    #[test]
    fn linger_holds_a_partial_batch_until_its_oldest_segment_waited_long_enough() {
        let d = |waited| {
            batch_decision(
                &prefix(3, 30, false, false),
                &LIMITS,
                Some(waited),
                MS * 100,
                None,
                ZERO,
            )
        };
        assert_eq!(d(MS * 30), BatchDecision::WaitFor(Timer::Linger, MS * 70));
        assert_eq!(d(MS * 100), BatchDecision::Commit);
        // A full batch does not linger.
        let full = batch_decision(
            &prefix(10, 30, false, false),
            &LIMITS,
            Some(MS),
            MS * 100,
            None,
            ZERO,
        );
        assert_eq!(full, BatchDecision::Commit);
    }

    #[test]
    fn min_interval_paces_every_commit_full_or_not() {
        let d = |p: &Prefix, since| batch_decision(p, &LIMITS, Some(MS), ZERO, since, MS * 500);
        assert_eq!(
            d(&prefix(10, 10, true, false), Some(MS * 200)),
            BatchDecision::WaitFor(Timer::Pace, MS * 300)
        );
        assert_eq!(
            d(&prefix(1, 10, false, false), Some(MS * 200)),
            BatchDecision::WaitFor(Timer::Pace, MS * 300)
        );
        assert_eq!(
            d(&prefix(1, 10, false, false), Some(MS * 500)),
            BatchDecision::Commit
        );
        assert_eq!(
            d(&prefix(1, 10, false, false), None),
            BatchDecision::Commit,
            "first commit"
        );
        assert_eq!(
            d(&prefix(0, 0, false, false), Some(MS)),
            BatchDecision::Wait,
            "nothing ready"
        );
    }

    #[test]
    fn the_prefix_takes_a_lone_oversized_segment_and_stops_at_the_limits() {
        let mut p = Prefix::default();
        assert!(
            p.admits(&LIMITS, 5000),
            "a lone segment larger than max_bytes goes alone"
        );
        p.add(600);
        assert!(!p.admits(&LIMITS, 600), "600 + 600 > 1000");
        assert!(p.admits(&LIMITS, 400));
        let mut q = Prefix::default();
        for _ in 0..10 {
            q.add(1);
        }
        assert!(!q.admits(&LIMITS, 1), "max_segments");
        assert!(q.is_full(&LIMITS));
    }

    #[test]
    fn the_footer_window_counts_arrived_footers_and_reads_in_flight() {
        let w = FooterWindow {
            count: 4,
            bytes: 100,
        };
        let held = |footers, bytes, in_flight| Held {
            footers,
            bytes,
            in_flight,
            estimate: 10,
        };
        assert!(w.has_room(held(0, 0, 0)));
        assert!(w.has_room(held(1, 10, 2)), "3 of 4, 40 bytes");
        assert!(!w.has_room(held(2, 20, 2)), "arrived footers count: 4 of 4");
        assert!(!w.has_room(held(0, 0, 4)), "reads in flight count");
        assert!(!w.has_room(held(1, 95, 0)), "bytes: 95 + 10 > 100");
        assert!(w.has_room(held(1, 90, 0)), "bytes: 90 + 10 <= 100");
    }

    #[test]
    fn a_pace_that_shortens_schedules_an_earlier_wake_up_and_a_stale_one_changes_nothing() {
        let t0 = std::time::Instant::now();
        let mut wake = PaceWake::default();
        // A carried node's fallback: 16 s.
        assert!(wake.schedule(t0 + 16_000 * MS));
        // The same, or later, or within the slack: nothing more.
        assert!(!wake.schedule(t0 + 16_000 * MS));
        assert!(!wake.schedule(t0 + 20_000 * MS));
        assert!(!wake.schedule(t0 + 15_995 * MS));
        // It became the deputy: 2 s, scheduled besides.
        assert!(wake.schedule(t0 + 2_000 * MS));
        wake.fired(t0 + 2_000 * MS);
        // The next after it, at 18 s: the 16 s one, stale, fires first and changes nothing.
        assert!(wake.schedule(t0 + 18_000 * MS));
        wake.fired(t0 + 16_000 * MS);
        assert!(
            !wake.schedule(t0 + 18_000 * MS),
            "the 18 s one still stands"
        );
        wake.fired(t0 + 18_000 * MS);
        assert!(
            wake.schedule(t0 + 20_000 * MS),
            "none scheduled after it fired"
        );
    }
}
