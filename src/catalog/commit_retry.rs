//! What a writer does after a commit that did not succeed, an append or a schema change alike:
//! one pure function, [`after_failure`], so that both commit loops answer a 409, a lost answer
//! and a refusal the same way.
//!
//! | failure | next |
//! |---|---|
//! | `Fatal` (auth, TLS, a request the catalog will never accept) | stop with its error |
//! | `Conflict` (409: another writer committed first) | reload and derive the commit again: at once for the first [`PROMPT_CONFLICTS`] in a row (the other writer has finished), then after a jittered pause that grows while conflicts persist, bounded by a few commit intervals ([`conflict_pause`]) |
//! | `Unknown` / `NotApplied` (5xx, timeout, lost answer, refused connection) | wait the backoff (or the server's `Retry-After`, capped by `retry.max`), reload, reconcile: what landed is found in the table, never appended again |
//!
//! Every path that goes on reloads first: a commit is never simply resent here (the transport
//! resends an identical request only under an idempotency key, see `catalog::rest`).

use std::time::Duration;

use crate::catalog::CommitError;
use crate::config::RetryPolicy;
use crate::runtime::backoff::delay_for;

/// Conflicts in a row answered by an immediate reload and retry. A 409 means the other writer's
/// commit has landed: the table is free again, and waiting only lets a third writer in first.
pub const PROMPT_CONFLICTS: u32 = 2;

/// The least ceiling of the conflict pause, whatever the commit interval.
pub const MIN_CONFLICT_CAP: Duration = Duration::from_millis(500);

/// How many commit intervals the conflict pause may reach: a writer that keeps losing pauses at
/// most this long, so it never sits out while the others commit many times over.
pub const CONFLICT_CAP_INTERVALS: u32 = 3;

/// How many times in a row a table's commits have failed, by kind: each kind grows its own pause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Failures {
    /// 409s in a row (reset by a successful commit).
    pub conflicts: u32,
    /// Unknown or not-applied outcomes in a row.
    pub outages: u32,
}

/// What to do after a failed commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Stop: the failure is fatal (the caller returns the error).
    Stop,
    /// Wait `delay`, reload the table and derive the commit again.
    Reload { delay: Duration },
}

/// The next step after `failure`, given the failures before it (`failures`, not yet counting
/// this one), the retry policy, the table's commit interval (`interval`: its adaptive pace, see
/// `actors::committer::pacing`; zero when nobody else writes) and a uniform draw in [0, 1) for
/// the conflict jitter. Returns the step and the failure counts to keep for next time.
pub fn after_failure(
    failure: &CommitError,
    failures: Failures,
    policy: &RetryPolicy,
    interval: Duration,
    unit: f64,
) -> (Next, Failures) {
    match failure {
        CommitError::Fatal(_) => (Next::Stop, failures),
        CommitError::Conflict(_) => (
            Next::Reload {
                delay: conflict_pause(failures.conflicts, conflict_cap(policy.max, interval), unit),
            },
            Failures {
                conflicts: failures.conflicts.saturating_add(1),
                ..failures
            },
        ),
        CommitError::Unknown(e) | CommitError::NotApplied(e) => (
            Next::Reload {
                delay: delay_for(policy, failures.outages, e),
            },
            Failures {
                outages: failures.outages.saturating_add(1),
                ..failures
            },
        ),
    }
}

/// The pause after a 409 that followed `conflicts` others in a row: none for the first
/// [`PROMPT_CONFLICTS`], then full jitter (`unit` = a uniform draw in [0, 1)) over 50 ms doubling
/// per further conflict, up to `cap`. Contending writers spread out instead of colliding in
/// lockstep, and a loser is never parked for long.
pub fn conflict_pause(conflicts: u32, cap: Duration, unit: f64) -> Duration {
    let Some(over) = conflicts.checked_sub(PROMPT_CONFLICTS) else {
        return Duration::ZERO;
    };
    let ceiling = Duration::from_millis(50)
        .saturating_mul(1u32 << over.min(10))
        .min(cap);
    ceiling.mul_f64(unit.clamp(0.0, 1.0))
}

/// The ceiling of the conflict pause: [`CONFLICT_CAP_INTERVALS`] commit intervals, at least
/// [`MIN_CONFLICT_CAP`], and never above `retry.max` (which bounds every pause).
pub fn conflict_cap(retry_max: Duration, interval: Duration) -> Duration {
    interval
        .saturating_mul(CONFLICT_CAP_INTERVALS)
        .max(MIN_CONFLICT_CAP)
        .min(retry_max)
}

/// The `outcome` label of `thadam_iceberg_commits_total` for a failed commit.
pub fn outcome_label(failure: &CommitError) -> &'static str {
    match failure {
        CommitError::Conflict(_) => "conflict",
        CommitError::Unknown(_) => "unknown_state",
        CommitError::NotApplied(_) => "failed",
        CommitError::Fatal(_) => "fatal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            jitter: false,
        }
    }

    fn reload_delay(next: Next) -> Duration {
        match next {
            Next::Reload { delay } => delay,
            Next::Stop => panic!("expected a reload"),
        }
    }

    #[test]
    fn a_fatal_failure_stops_and_nothing_else_does() {
        let p = policy();
        let fatal = CommitError::Fatal(Error::auth_failed("refused"));
        assert_eq!(
            after_failure(&fatal, Failures::default(), &p, Duration::ZERO, 0.5).0,
            Next::Stop
        );
        for failure in [
            CommitError::Conflict("requirement failed".into()),
            CommitError::Unknown(Error::unavailable("503")),
            CommitError::NotApplied(Error::unavailable("connection refused")),
        ] {
            assert!(matches!(
                after_failure(&failure, Failures::default(), &p, Duration::ZERO, 0.5).0,
                Next::Reload { .. }
            ));
        }
    }

    #[test]
    fn outages_back_off_and_grow_to_the_cap() {
        let p = policy();
        let lost = CommitError::Unknown(Error::unavailable("lost answer"));
        let mut failures = Failures::default();
        let mut delays = Vec::new();
        for _ in 0..7 {
            let (next, after) = after_failure(&lost, failures, &p, Duration::ZERO, 0.0);
            delays.push(reload_delay(next).as_millis());
            failures = after;
        }
        assert_eq!(delays, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(
            failures,
            Failures {
                conflicts: 0,
                outages: 7
            }
        );
    }

    #[test]
    fn retry_after_wins_over_the_backoff_up_to_the_cap() {
        let p = policy();
        let asked = |secs| {
            CommitError::Unknown(
                Error::unavailable("503")
                    .with_retry_hint("status_503", Some(Duration::from_secs(secs))),
            )
        };
        let (next, _) = after_failure(&asked(1), Failures::default(), &p, Duration::ZERO, 0.0);
        assert_eq!(reload_delay(next), Duration::from_secs(1));
        let (next, _) = after_failure(&asked(3600), Failures::default(), &p, Duration::ZERO, 0.0);
        assert_eq!(reload_delay(next), p.max);
    }

    #[test]
    fn the_first_conflicts_retry_at_once_and_keep_their_own_count() {
        let p = policy();
        let conflict = CommitError::Conflict("another writer".into());
        let mut failures = Failures {
            conflicts: 0,
            outages: 3,
        };
        for _ in 0..PROMPT_CONFLICTS {
            let (next, after) = after_failure(&conflict, failures, &p, Duration::ZERO, 1.0);
            assert_eq!(reload_delay(next), Duration::ZERO);
            failures = after;
        }
        assert_eq!(
            failures,
            Failures {
                conflicts: PROMPT_CONFLICTS,
                outages: 3
            }
        );
        // Then full jitter over a ceiling doubling from 50 ms.
        let (next, _) = after_failure(&conflict, failures, &p, Duration::ZERO, 1.0);
        assert_eq!(reload_delay(next), Duration::from_millis(50));
        let third_over = Failures {
            conflicts: PROMPT_CONFLICTS + 3,
            outages: 0,
        };
        for (unit, expected) in [(1.0, 400), (0.5, 200), (0.0, 0)] {
            let (next, _) = after_failure(&conflict, third_over, &p, Duration::ZERO, unit);
            assert_eq!(reload_delay(next), Duration::from_millis(expected));
        }
    }

    #[test]
    fn a_loser_pauses_at_most_a_few_commit_intervals_whatever_retry_max_says() {
        let generous = RetryPolicy {
            max: Duration::from_secs(60),
            ..policy()
        };
        let conflict = CommitError::Conflict("another writer".into());
        let many = Failures {
            conflicts: 40,
            outages: 0,
        };
        // A lone writer's table (no pace yet): half a second at most.
        let (next, _) = after_failure(&conflict, many, &generous, Duration::ZERO, 1.0);
        assert_eq!(reload_delay(next), MIN_CONFLICT_CAP);
        // A table paced at 2 s between commits: three intervals.
        let (next, _) = after_failure(&conflict, many, &generous, Duration::from_secs(2), 1.0);
        assert_eq!(reload_delay(next), Duration::from_secs(6));
        // retry.max still bounds it.
        let (next, _) = after_failure(&conflict, many, &policy(), Duration::from_secs(2), 1.0);
        assert_eq!(reload_delay(next), Duration::from_secs(2));
    }

    #[test]
    fn every_failure_has_its_metric_label() {
        assert_eq!(
            outcome_label(&CommitError::Conflict(String::new())),
            "conflict"
        );
        assert_eq!(
            outcome_label(&CommitError::Unknown(Error::unavailable("x"))),
            "unknown_state"
        );
        assert_eq!(
            outcome_label(&CommitError::NotApplied(Error::unavailable("x"))),
            "failed"
        );
        assert_eq!(
            outcome_label(&CommitError::Fatal(Error::internal("x"))),
            "fatal"
        );
    }
}
