//! What a writer does after a commit that did not succeed, an append or a schema change alike:
//! one pure function, [`after_failure`], so that both commit loops answer a 409, a lost answer
//! and a refusal the same way.
//!
//! | failure | next |
//! |---|---|
//! | `Fatal` (auth, TLS, a request the catalog will never accept) | stop with its error |
//! | `Conflict` (409: another writer committed first) | wait a jittered, growing pause ([`conflict_backoff`]), reload, derive the commit again |
//! | `Unknown` / `NotApplied` (5xx, timeout, lost answer, refused connection) | wait the backoff (or the server's `Retry-After`, capped by `retry.max`), reload, reconcile: what landed is found in the table, never appended again |
//!
//! Every path that goes on reloads first: a commit is never simply resent here (the transport
//! resends an identical request only under an idempotency key, see `catalog::rest`).

use std::time::Duration;

use crate::catalog::CommitError;
use crate::config::RetryPolicy;
use crate::runtime::retry::{conflict_backoff, delay_for};

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
/// this one), the retry policy and a uniform draw in [0, 1) for the conflict jitter. Returns the
/// step and the failure counts to keep for next time.
pub fn after_failure(
    failure: &CommitError,
    failures: Failures,
    policy: &RetryPolicy,
    unit: f64,
) -> (Next, Failures) {
    match failure {
        CommitError::Fatal(_) => (Next::Stop, failures),
        CommitError::Conflict(_) => (
            Next::Reload {
                delay: conflict_backoff(failures.conflicts, policy.max, unit),
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
            after_failure(&fatal, Failures::default(), &p, 0.5).0,
            Next::Stop
        );
        for failure in [
            CommitError::Conflict("requirement failed".into()),
            CommitError::Unknown(Error::unavailable("503")),
            CommitError::NotApplied(Error::unavailable("connection refused")),
        ] {
            assert!(matches!(
                after_failure(&failure, Failures::default(), &p, 0.5).0,
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
            let (next, after) = after_failure(&lost, failures, &p, 0.0);
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
        let (next, _) = after_failure(&asked(1), Failures::default(), &p, 0.0);
        assert_eq!(reload_delay(next), Duration::from_secs(1));
        let (next, _) = after_failure(&asked(3600), Failures::default(), &p, 0.0);
        assert_eq!(reload_delay(next), p.max);
    }

    #[test]
    fn conflicts_take_turns_with_jitter_and_keep_their_own_count() {
        let p = policy();
        let conflict = CommitError::Conflict("another writer".into());
        let start = Failures {
            conflicts: 0,
            outages: 3,
        };
        let (next, after) = after_failure(&conflict, start, &p, 1.0);
        assert_eq!(reload_delay(next), Duration::from_millis(50));
        assert_eq!(
            after,
            Failures {
                conflicts: 1,
                outages: 3
            }
        );
        // Full jitter: the pause after a third conflict is the draw times its ceiling (400 ms).
        let third = Failures {
            conflicts: 3,
            outages: 0,
        };
        for (unit, expected) in [(0.5, 200), (0.0, 0)] {
            let (next, _) = after_failure(&conflict, third, &p, unit);
            assert_eq!(reload_delay(next), Duration::from_millis(expected));
        }
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
