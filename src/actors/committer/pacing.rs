//! Adaptive pacing of a table's commits, as a pure policy: how long a committer leaves between
//! the starts of two commits of its table when other writers commit to it too.
//!
//! A fleet of registrars on one table collides when each commits as soon as it has something:
//! with N writers and a commit window W (load → the catalog's answer), a commit conflicts with
//! probability about 1 - e^(-λW), λ being the others' commit rate. Each writer therefore widens
//! its interval when its commits conflict and narrows it when they land cleanly, in proportion
//! to the interval itself (multiplicative both ways, so the rule is the same at 100 ms and at
//! 10 s). The equilibrium is a conflict probability, not an interval: a writer widens by
//! [`WIDEN`] per 409 and narrows by [`NARROW`] per clean commit, which balances where
//! p · ln(WIDEN) = (1 - p) · -ln(NARROW), p ≈ 0.15, i.e. about 0.18 409s per landed commit,
//! whatever N and W are; the interval follows, about (N - 1) · W / p. Every writer applies the
//! same rule to the same signal, so the fleet converges on equal shares (fewer, larger commits)
//! instead of starving its unlucky members.
//!
//! Only conflicts with other registrars widen it (the committer tells them apart by the
//! `thadam.writer` of the snapshots that won): a Spark job or a pyiceberg script does not slow
//! down when we do, so widening against it would only add latency (a prompt retry is the answer
//! there). A lone writer never conflicts, so its interval stays zero and nothing changes for it.
//! `commit.min_interval` stays a floor; the interval is jittered (±50%) so that writers that
//! reached the same interval do not commit in lockstep.

use std::time::Duration;

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
mod tests {
    use super::*;

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
}
