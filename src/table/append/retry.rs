//! What a writer does after a commit that did not land, an append or a schema change alike:
//! what the failure means ([`classify`], [`classify_build`]) and what comes next
//! ([`decide`]: one decision over [`resend`], a fleet committer's deferral and [`after_failure`]),
//! as pure functions, so that every commit of a table answers a
//! 409, a lost answer and a refusal the same way, from one place.
//!
//! | what happened ([`CommitFailure`]) | [`Failure`] | next |
//! |---|---|---|
//! | answered 409 (another writer committed first) | `Conflict` | reload and derive the commit again: at once for the first [`PROMPT_CONFLICTS`] in a row (the other writer has finished), then after a jittered pause that grows while conflicts persist, bounded by a few commit intervals ([`conflict_pause`]) |
//! | no answer, an unreadable 2xx, answered 408, 429 or 5xx | `Unknown` | resend the identical request under its `Idempotency-Key` when the catalog advertised keys ([`resend`]); else, or after [`IDEMPOTENT_RESENDS`], wait the backoff (or the server's `Retry-After`, capped by `retry.max`), reload, reconcile: what landed is found in the table, never appended again |
//! | never sent (refused connection, no token) | `NotApplied` | resend the identical request, then as `Unknown` |
//! | refused for good (TLS, auth after a renewal, 404, another 4xx), or an append that cannot be built | `Fatal` | stop with its error |
//!
//! Why a 503 on a commit is "state unknown" and not "not applied": the REST spec's
//! `ServiceUnavailableResponse` says the request "could have been partially processed"; 500, 502
//! and 504 on `updateTable` are documented as `CommitStateUnknownException`; a proxy may send 408
//! or 429 after it forwarded the request. "State unknown" costs one table load (the committed set
//! then tells what landed); taking it for "not applied" could register a file twice.

use std::time::Duration;

use crate::catalog::outcome::{CallKind, StatusOutcome, classify_status};
use crate::catalog::{CommitFailure, TableName};
use crate::config::RetryPolicy;
use crate::error::{Error, ErrorCode};
use crate::runtime::backoff::delay_for;

/// What a commit's failure means for the writer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A requirement failed: another writer committed first. Reload and rebuild.
    Conflict(String),
    /// The commit may or may not have been applied. Reload and reconcile by key before
    /// building it again; never append again what landed.
    Unknown(Error),
    /// The commit was not applied (it never left, or the append could not be prepared).
    NotApplied(Error),
    /// No retry can fix it: auth, TLS trust, a request the catalog will never accept, a table
    /// this client cannot write.
    Fatal(Error),
}

/// What a commit's failure on the wire means (see the module docs for the table).
pub(crate) fn classify(failure: CommitFailure) -> Failure {
    match failure {
        CommitFailure::NotSent(e) => Failure::NotApplied(e),
        CommitFailure::NoAnswer(e) => Failure::Unknown(e),
        CommitFailure::Refused(e) => Failure::Fatal(e),
        CommitFailure::Answered { status, error } => {
            match classify_status(status, CallKind::Commit, None) {
                StatusOutcome::Conflict => Failure::Conflict(error.message().to_string()),
                StatusOutcome::StateUnknown { .. } | StatusOutcome::Transient { .. } => {
                    Failure::Unknown(error)
                }
                _ => Failure::Fatal(error),
            }
        }
    }
}

/// What a failure to build an append means (the library failed before any request: writing
/// manifests, reading the table's properties or features). Classified by the error's kind: a
/// table this client cannot write is permanent; storage refusing the writes for good is too;
/// other storage and unexpected failures are retried.
pub(crate) fn classify_build(table: &TableName, e: &iceberg::Error) -> Failure {
    use iceberg::ErrorKind;
    match e.kind() {
        ErrorKind::DataInvalid | ErrorKind::FeatureUnsupported | ErrorKind::PreconditionFailed => {
            Failure::Fatal(Error::new(
                ErrorCode::TableUnsupported,
                format!(
                    "the append to {table} cannot be built: {}; fix the table property or \
                     feature it names (or register into a table this client can write)",
                    error_chain(e)
                ),
            ))
        }
        _ => match crate::io::classify::classify_iceberg_io(e) {
            // Storage refused the manifests for good (read-only credentials, a bucket policy):
            // retrying would never succeed.
            Some(code) if !code.is_transient() => Failure::Fatal(Error::new(
                code,
                format!(
                    "writing the manifests of the append to {table} was refused by the store: \
                     {}; check that the store credentials may write under the table location",
                    error_chain(e)
                ),
            )),
            _ => Failure::NotApplied(Error::unavailable(format!(
                "preparing the append to {table} failed: {}",
                error_chain(e)
            ))),
        },
    }
}

/// An iceberg error's message and the messages of its sources, without the backtrace its
/// `Display` may carry.
fn error_chain(e: &iceberg::Error) -> String {
    let mut text = e.message().to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// How many times a commit is resent, identical and with the same `Idempotency-Key`, after a
/// lost answer (or at all when it never left) before the writer reloads to reconcile. The server
/// replays its stored answer for a key it has seen, so a resend is safe; a few are enough to ride
/// out a blip without holding the table for long.
pub(crate) const IDEMPOTENT_RESENDS: u32 = 3;

/// Whether a commit that failed with `failure` after `resends` resends is sent again as it is
/// (`keyed`: it carries an `Idempotency-Key`): one that never left always may be; one whose
/// outcome is unknown only under a key, which makes a repeat harmless.
pub(crate) fn resend(failure: &Failure, keyed: bool, resends: u32) -> bool {
    resends < IDEMPOTENT_RESENDS
        && match failure {
            Failure::NotApplied(_) => true,
            Failure::Unknown(_) => keyed,
            Failure::Conflict(_) | Failure::Fatal(_) => false,
        }
}

/// Conflicts in a row answered by an immediate reload and retry. A 409 means the other writer's
/// commit has landed: the table is free again, and waiting only lets a third writer in first.
pub(crate) const PROMPT_CONFLICTS: u32 = 2;

/// The least ceiling of the conflict pause, whatever the commit interval.
pub(crate) const MIN_CONFLICT_CAP: Duration = Duration::from_millis(500);

/// How many commit intervals the conflict pause may reach: a writer that keeps losing pauses at
/// most this long, so it never sits out while the others commit many times over.
pub(crate) const CONFLICT_CAP_INTERVALS: u32 = 3;

/// How many times in a row a table's commits have failed, by kind: each kind grows its own pause.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct FailureCounts {
    /// 409s in a row (reset by a successful commit).
    pub conflicts: u32,
    /// Unknown or not-applied outcomes in a row.
    pub outages: u32,
}

/// What to do after a failed commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Stop: the failure is fatal (the caller returns the error).
    Stop,
    /// Wait `delay`, reload the table and derive the commit again.
    Reload { delay: Duration },
}

/// The next step after `failure`, given the failures before it (`failures`, not yet counting
/// this one), the retry policy, the table's commit interval (`interval`: its adaptive pace, see
/// `pacing`; zero when nobody else writes) and a uniform draw in [0, 1) for
/// the conflict jitter. Returns the step and the failure counts to keep for next time.
pub(crate) fn after_failure(
    failure: &Failure,
    failures: FailureCounts,
    policy: &RetryPolicy,
    interval: Duration,
    unit: f64,
) -> (Next, FailureCounts) {
    match failure {
        Failure::Fatal(_) => (Next::Stop, failures),
        Failure::Conflict(_) => (
            Next::Reload {
                delay: conflict_pause(failures.conflicts, conflict_cap(policy.max, interval), unit),
            },
            FailureCounts {
                conflicts: failures.conflicts.saturating_add(1),
                ..failures
            },
        ),
        Failure::Unknown(e) | Failure::NotApplied(e) => (
            Next::Reload {
                delay: delay_for(policy, failures.outages, e),
            },
            FailureCounts {
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
pub(crate) fn conflict_pause(conflicts: u32, cap: Duration, unit: f64) -> Duration {
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
pub(crate) fn conflict_cap(retry_max: Duration, interval: Duration) -> Duration {
    interval
        .saturating_mul(CONFLICT_CAP_INTERVALS)
        .max(MIN_CONFLICT_CAP)
        .min(retry_max)
}

/// Which kind of commit failed (they count and pace differently).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Append,
    Schema,
}

/// What comes after a commit that did not land: the one decision every failed commit of a
/// table goes through ([`decide`]). The transaction owns when the next attempt may go; the
/// committer only schedules it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send the same request again, as it is, after the pause (see [`resend`]).
    Resend(Duration),
    /// Reload the table after the pause and derive the commit again.
    Reload(Duration),
    /// A fleet's committer whose append conflicted: again in its own next turn (see
    /// `table::fleet`), what it holds published for the others meanwhile.
    Defer,
    /// Stop with the failure's error.
    Stop,
}

/// An append that was sent, as the decision needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SentAppend {
    /// Its request carries an `Idempotency-Key`.
    pub keyed: bool,
    /// How many times it was sent again as it is.
    pub resends: u32,
    /// It carried `remove-snapshots` (snapshot retention).
    pub removes_snapshots: bool,
    /// It is the probe of an earlier refusal: it went without `remove-snapshots`.
    pub probing: bool,
}

/// What the transaction knows of a failed commit besides the failure itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failed<'a> {
    pub kind: Kind,
    /// The append sent, when the failure is its answer (`None`: a schema commit, or an append
    /// that could not be built).
    pub sent: Option<SentAppend>,
    /// This node is a committer of a fleet that carries intents and takes turns.
    pub in_turn: bool,
    /// The failures of the batch before this one.
    pub counts: FailureCounts,
    pub policy: &'a RetryPolicy,
    /// The table's commit interval (its adaptive pace; zero when nobody else writes).
    pub interval: Duration,
    /// A uniform draw in [0, 1) for the conflict jitter.
    pub unit: f64,
}

/// What the retention probe does after a failed append (see the transaction's
/// `RetentionProbe`): catalogs that manage snapshots themselves refuse `remove-snapshots`, and
/// the refusal reads as a 500 (unknown) or a 4xx (fatal); the next attempt tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing changes.
    Keep,
    /// The probe itself failed: the suspicion is cleared.
    Clear,
    /// The next attempt goes without `remove-snapshots`; this failure is the suspect's.
    Start(String),
}

/// The decision: the step, the failure counts to keep, the probe, and the failure as it counts
/// (a refusal under the probe is retried, not fatal).
#[derive(Debug)]
pub(crate) struct Decision {
    pub step: Step,
    pub counts: FailureCounts,
    pub probe: Probe,
    pub failure: Failure,
}

/// What comes after `failure`: a resend of the same request while that is safe ([`resend`]),
/// else (after the retention probe) a fleet committer's conflicted append waits for its next
/// turn, and everything else is [`after_failure`]'s: reload after a pause, or stop.
pub(crate) fn decide(failure: Failure, f: &Failed<'_>) -> Decision {
    let mut probe = Probe::Keep;
    let mut failure = failure;
    if let Some(sent) = f.sent {
        if resend(&failure, sent.keyed, sent.resends)
            && let Failure::Unknown(e) | Failure::NotApplied(e) = &failure
        {
            return Decision {
                step: Step::Resend(delay_for(f.policy, sent.resends, e)),
                counts: f.counts,
                probe,
                failure,
            };
        }
        (failure, probe) = probe_retention(failure, sent);
    }
    if f.kind == Kind::Append && f.in_turn && matches!(failure, Failure::Conflict(_)) {
        return Decision {
            step: Step::Defer,
            counts: f.counts,
            probe,
            failure,
        };
    }
    let (next, counts) = after_failure(&failure, f.counts, f.policy, f.interval, f.unit);
    let step = match next {
        Next::Stop => Step::Stop,
        Next::Reload { delay } => Step::Reload(delay),
    };
    Decision {
        step,
        counts,
        probe,
        failure,
    }
}

/// The retention probe's part of the decision: a failed probe clears the suspicion; a refused
/// (or unknown) append that carried `remove-snapshots` starts one, a refusal then retried once
/// rather than fatal.
fn probe_retention(failure: Failure, sent: SentAppend) -> (Failure, Probe) {
    if sent.probing {
        return (failure, Probe::Clear);
    }
    if !sent.removes_snapshots {
        return (failure, Probe::Keep);
    }
    match failure {
        Failure::Fatal(e) => {
            let probe = Probe::Start(e.to_string());
            (Failure::NotApplied(e), probe)
        }
        Failure::Unknown(e) => {
            let probe = Probe::Start(e.to_string());
            (Failure::Unknown(e), probe)
        }
        other => (other, Probe::Keep),
    }
}

/// The `outcome` label of `thadam_iceberg_commits_total` for a failed commit.
pub(crate) fn outcome_label(failure: &Failure) -> &'static str {
    match failure {
        Failure::Conflict(_) => "conflict",
        Failure::Unknown(_) => "unknown_state",
        Failure::NotApplied(_) => "failed",
        Failure::Fatal(_) => "fatal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            jitter: false,
        }
    }

    fn failed(kind: Kind, sent: Option<SentAppend>, in_turn: bool, p: &RetryPolicy) -> Failed<'_> {
        Failed {
            kind,
            sent,
            in_turn,
            counts: FailureCounts::default(),
            policy: p,
            interval: Duration::ZERO,
            unit: 0.5,
        }
    }

    fn sent(keyed: bool, resends: u32) -> SentAppend {
        SentAppend {
            keyed,
            resends,
            removes_snapshots: false,
            probing: false,
        }
    }

    #[test]
    fn one_decision_resends_while_it_is_safe_then_reloads() {
        let p = policy();
        let unknown = || Failure::Unknown(Error::unavailable("503"));
        let never_left = || Failure::NotApplied(Error::unavailable("connection refused"));
        let d = decide(
            unknown(),
            &failed(Kind::Append, Some(sent(true, 0)), false, &p),
        );
        assert_eq!(d.step, Step::Resend(Duration::from_millis(100)));
        assert_eq!(
            d.counts,
            FailureCounts::default(),
            "a resend counts no failure"
        );
        // Without a key, an unknown outcome is reconciled by a reload, never resent.
        let d = decide(
            unknown(),
            &failed(Kind::Append, Some(sent(false, 0)), false, &p),
        );
        assert!(matches!(d.step, Step::Reload(_)));
        assert_eq!(d.counts.outages, 1);
        // A request that never left is resent, keyed or not, up to the limit.
        let d = decide(
            never_left(),
            &failed(Kind::Append, Some(sent(false, 1)), false, &p),
        );
        assert!(matches!(d.step, Step::Resend(_)));
        let over = sent(true, IDEMPOTENT_RESENDS);
        let d = decide(unknown(), &failed(Kind::Append, Some(over), false, &p));
        assert!(matches!(d.step, Step::Reload(_)));
        // A schema commit is never resent.
        let d = decide(unknown(), &failed(Kind::Schema, None, false, &p));
        assert!(matches!(d.step, Step::Reload(_)));
    }

    #[test]
    fn one_decision_defers_a_conflicted_append_of_a_committer_in_turn_only() {
        let p = policy();
        let conflict = || Failure::Conflict("requirement failed".into());
        let d = decide(
            conflict(),
            &failed(Kind::Append, Some(sent(true, 0)), true, &p),
        );
        assert_eq!(d.step, Step::Defer);
        let d = decide(
            conflict(),
            &failed(Kind::Append, Some(sent(true, 0)), false, &p),
        );
        assert_eq!(
            d.step,
            Step::Reload(Duration::ZERO),
            "the first conflicts retry at once"
        );
        assert_eq!(d.counts.conflicts, 1);
        // A schema commit that conflicted reloads, in turn or not.
        let d = decide(conflict(), &failed(Kind::Schema, None, true, &p));
        assert!(matches!(d.step, Step::Reload(_)));
        let fatal = Failure::Fatal(Error::auth_failed("refused"));
        let d = decide(fatal, &failed(Kind::Append, Some(sent(true, 0)), true, &p));
        assert_eq!(d.step, Step::Stop);
    }

    #[test]
    fn a_refused_removal_of_snapshots_is_probed_once_rather_than_fatal() {
        let p = policy();
        let removing = SentAppend {
            removes_snapshots: true,
            ..sent(true, 0)
        };
        let fatal = || Failure::Fatal(Error::auth_failed("400 external snapshot management"));
        let d = decide(fatal(), &failed(Kind::Append, Some(removing), false, &p));
        assert!(matches!(d.step, Step::Reload(_)), "{:?}", d.step);
        assert!(matches!(d.failure, Failure::NotApplied(_)));
        assert!(matches!(d.probe, Probe::Start(_)));
        // An unknown outcome is resent first (under its key), the probe untouched.
        let unknown = Failure::Unknown(Error::unavailable("500"));
        let d = decide(unknown, &failed(Kind::Append, Some(removing), false, &p));
        assert!(matches!(d.step, Step::Resend(_)));
        assert_eq!(d.probe, Probe::Keep);
        // The probe (an attempt without the removal) fails too: the suspicion is cleared, and
        // the failure counts as it is.
        let probing = SentAppend {
            probing: true,
            ..sent(true, 0)
        };
        let d = decide(fatal(), &failed(Kind::Append, Some(probing), false, &p));
        assert_eq!((d.step, d.probe), (Step::Stop, Probe::Clear));
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
        let fatal = Failure::Fatal(Error::auth_failed("refused"));
        assert_eq!(
            after_failure(&fatal, FailureCounts::default(), &p, Duration::ZERO, 0.5).0,
            Next::Stop
        );
        for failure in [
            Failure::Conflict("requirement failed".into()),
            Failure::Unknown(Error::unavailable("503")),
            Failure::NotApplied(Error::unavailable("connection refused")),
        ] {
            assert!(matches!(
                after_failure(&failure, FailureCounts::default(), &p, Duration::ZERO, 0.5).0,
                Next::Reload { .. }
            ));
        }
    }

    #[test]
    fn outages_back_off_and_grow_to_the_cap() {
        let p = policy();
        let lost = Failure::Unknown(Error::unavailable("lost answer"));
        let mut failures = FailureCounts::default();
        let mut delays = Vec::new();
        for _ in 0..7 {
            let (next, after) = after_failure(&lost, failures, &p, Duration::ZERO, 0.0);
            delays.push(reload_delay(next).as_millis());
            failures = after;
        }
        assert_eq!(delays, [100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(
            failures,
            FailureCounts {
                conflicts: 0,
                outages: 7
            }
        );
    }

    #[test]
    fn retry_after_wins_over_the_backoff_up_to_the_cap() {
        let p = policy();
        let asked = |secs| {
            Failure::Unknown(
                Error::unavailable("503")
                    .with_retry_hint("status_503", Some(Duration::from_secs(secs))),
            )
        };
        let (next, _) = after_failure(&asked(1), FailureCounts::default(), &p, Duration::ZERO, 0.0);
        assert_eq!(reload_delay(next), Duration::from_secs(1));
        let (next, _) = after_failure(
            &asked(3600),
            FailureCounts::default(),
            &p,
            Duration::ZERO,
            0.0,
        );
        assert_eq!(reload_delay(next), p.max);
    }

    #[test]
    fn the_first_conflicts_retry_at_once_and_keep_their_own_count() {
        let p = policy();
        let conflict = Failure::Conflict("another writer".into());
        let mut failures = FailureCounts {
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
            FailureCounts {
                conflicts: PROMPT_CONFLICTS,
                outages: 3
            }
        );
        // Then full jitter over a ceiling doubling from 50 ms.
        let (next, _) = after_failure(&conflict, failures, &p, Duration::ZERO, 1.0);
        assert_eq!(reload_delay(next), Duration::from_millis(50));
        let third_over = FailureCounts {
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
        let conflict = Failure::Conflict("another writer".into());
        let many = FailureCounts {
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
        assert_eq!(outcome_label(&Failure::Conflict(String::new())), "conflict");
        assert_eq!(
            outcome_label(&Failure::Unknown(Error::unavailable("x"))),
            "unknown_state"
        );
        assert_eq!(
            outcome_label(&Failure::NotApplied(Error::unavailable("x"))),
            "failed"
        );
        assert_eq!(
            outcome_label(&Failure::Fatal(Error::internal("x"))),
            "fatal"
        );
    }

    fn table() -> TableName {
        TableName {
            namespace: vec!["ns".to_string()],
            name: "t".to_string(),
        }
    }

    #[test]
    fn every_wire_failure_of_a_commit_has_one_meaning() {
        let answered = |status| CommitFailure::Answered {
            status,
            error: Error::unavailable(format!("answered {status}")),
        };
        assert!(matches!(classify(answered(409)), Failure::Conflict(m) if m.contains("409")));
        for status in [408, 429, 500, 502, 503, 504, 599] {
            assert!(
                matches!(classify(answered(status)), Failure::Unknown(_)),
                "{status}"
            );
        }
        for status in [400, 404, 405, 422] {
            assert!(
                matches!(classify(answered(status)), Failure::Fatal(_)),
                "{status}"
            );
        }
        let e = || Error::unavailable("x");
        assert!(matches!(
            classify(CommitFailure::NotSent(e())),
            Failure::NotApplied(_)
        ));
        assert!(matches!(
            classify(CommitFailure::NoAnswer(e())),
            Failure::Unknown(_)
        ));
        assert!(matches!(
            classify(CommitFailure::Refused(e())),
            Failure::Fatal(_)
        ));
    }

    #[test]
    fn a_table_the_producer_cannot_write_is_fatal_and_anything_else_is_retried() {
        // e.g. a manifest to merge whose live entries lack sequence numbers (DataInvalid).
        for kind in [
            iceberg::ErrorKind::DataInvalid,
            iceberg::ErrorKind::FeatureUnsupported,
            iceberg::ErrorKind::PreconditionFailed,
        ] {
            match classify_build(&table(), &iceberg::Error::new(kind, "cannot merge")) {
                Failure::Fatal(e) => {
                    assert_eq!(e.code(), ErrorCode::TableUnsupported);
                    assert!(e.message().contains("cannot merge"), "{e}");
                }
                other => panic!("{kind:?}: {other:?}"),
            }
        }
        let e = iceberg::Error::new(iceberg::ErrorKind::Unexpected, "store hiccup");
        assert!(matches!(
            classify_build(&table(), &e),
            Failure::NotApplied(_)
        ));
    }

    #[test]
    fn only_a_request_that_never_left_or_one_under_a_key_is_resent_and_a_few_times_only() {
        let lost = Failure::Unknown(Error::unavailable("lost answer"));
        let not_sent = Failure::NotApplied(Error::unavailable("connection refused"));
        assert!(resend(&lost, true, 0));
        assert!(
            !resend(&lost, false, 0),
            "without a key a repeat could apply it twice"
        );
        assert!(resend(&not_sent, false, 0));
        assert!(resend(&not_sent, true, IDEMPOTENT_RESENDS - 1));
        assert!(!resend(&not_sent, true, IDEMPOTENT_RESENDS));
        assert!(!resend(&Failure::Conflict("409".into()), true, 0));
        assert!(!resend(&Failure::Fatal(Error::internal("x")), true, 0));
    }
}
