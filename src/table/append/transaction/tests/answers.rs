//! What each answer to an append's commit comes to, as users are promised it (see
//! `append::retry` and `transaction::send`): a 200 lands the batch in one snapshot; a 409
//! reloads and the next attempt lands it once; an unknown outcome (5xx, a lost answer) is
//! resent as it was under an `Idempotency-Key`, else reloaded and reconciled, never appended
//! twice, and what it registered counts as ours; a refusal stops at once with its error. A
//! refused attempt's files are deleted, an unknown outcome's never.

use std::collections::HashSet;
use std::time::Duration;

use super::super::Outcome;
use super::fake_catalog::Answer;
use super::harness::{Harness, ids, ready, seq_set, seqs};
use crate::error::ErrorCode;
use crate::table::append::retry::IDEMPOTENT_RESENDS;

/// `retry.initial`: the first pause after an unknown outcome (no jitter in these tests).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

#[tokio::test]
async fn a_200_lands_the_batch_in_one_snapshot_that_names_its_segments() {
    let mut h = Harness::new(false).await;
    let batch = [ready(1), ready(2)];
    let attempted = h.attempt(&batch).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &attempted.outcome else {
        panic!("landed: {attempted:?}");
    };
    assert_eq!(seqs(segments), [1, 2]);
    assert!(attempted.found.is_empty() && attempted.ours.is_empty());
    assert_eq!(h.registered(), [ids(&batch)]);
    assert_eq!(h.commit.retry_at(), None);
    // The committer holds the table the catalog answered, and nothing the attempt wrote is
    // left that the table does not reference.
    let held = h
        .held
        .table()
        .expect("a table")
        .metadata()
        .current_snapshot_id();
    assert_eq!(held, h.catalog.metadata().current_snapshot_id());
    assert_eq!(h.table_files().await, h.referenced().await);

    // A lone registrar builds the next batch on its own commit's answer: no load.
    let next = [ready(3)];
    let attempted = h.attempt(&next).await.expect("an attempt");
    assert!(
        matches!(attempted.outcome, Outcome::Landed { .. }),
        "{attempted:?}"
    );
    assert_eq!(h.registered(), [ids(&batch), ids(&next)]);
    assert_eq!(h.catalog.loads(), 1, "only the committer's first load");
    assert_eq!(h.table_files().await, h.referenced().await);
}

#[tokio::test]
async fn a_409_reloads_and_the_next_attempt_lands_the_batch_once() {
    let mut h = Harness::new(false).await;
    h.catalog.script([Answer::CONFLICT]);
    let batch = [ready(1), ready(2)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(first.outcome, Outcome::RetryAfter(d) if d.is_zero()),
        "a first conflict is retried at once: {first:?}"
    );
    assert!(h.commit.retry_at().is_some());
    // Nothing of a refused commit is in the table: its manifest list is deleted at once (its
    // manifest is kept for the next attempt).
    let refused = h.catalog.commits()[0].manifest_list();
    assert!(!h.table_files().await.contains(&refused), "{refused} kept");

    let loads = h.catalog.loads();
    let second = h.attempt(&batch).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &second.outcome else {
        panic!("landed: {second:?}");
    };
    assert_eq!(seqs(segments), [1, 2]);
    assert!(second.found.is_empty() && second.ours.is_empty());
    assert_eq!(h.catalog.loads(), loads + 1, "the table is reloaded");
    assert_eq!(h.registered(), [ids(&batch)]);
    assert_eq!(h.commit.retry_at(), None);
    assert_eq!(h.table_files().await, h.referenced().await);
}

#[tokio::test]
async fn a_409_from_another_writers_commit_reloads_and_appends_only_what_the_table_lacks() {
    let mut h = Harness::new(false).await;
    let mut other = h.beside().await;
    let theirs = [ready(1), ready(2)];
    let landed = other.attempt(&theirs).await.expect("an attempt");
    assert!(
        matches!(landed.outcome, Outcome::Landed { .. }),
        "{landed:?}"
    );
    // Built on the table as it was before the other commit: the catalog's requirements fail.
    let batch = [ready(1), ready(2), ready(3)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(first.outcome, Outcome::RetryAfter(d) if d.is_zero()),
        "{first:?}"
    );
    let commits = h.catalog.commits();
    assert!(!commits[1].applied, "a real conflict");
    assert!(!h.table_files().await.contains(&commits[1].manifest_list()));

    let second = h.attempt(&batch).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &second.outcome else {
        panic!("landed: {second:?}");
    };
    assert_eq!(seqs(segments), [3], "only what the table lacks");
    assert_eq!(seq_set(&second.found), HashSet::from([1, 2]));
    assert!(second.ours.is_empty(), "another writer's, not ours");
    assert_eq!(h.registered(), [ids(&theirs), ids(&batch[2..])]);
    assert_eq!(h.table_files().await, h.referenced().await);
}

#[tokio::test]
async fn a_500_is_an_unknown_outcome_reloaded_and_what_did_not_land_is_appended() {
    let mut h = Harness::new(false).await;
    h.catalog.script([Answer::refuse(500)]);
    let batch = [ready(1), ready(2)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(first.outcome, Outcome::RetryAfter(d) if d == FIRST_BACKOFF),
        "{first:?}"
    );
    let unknown = h.table_files().await;
    assert!(unknown.contains(&h.catalog.commits()[0].manifest_list()));

    let loads = h.catalog.loads();
    let second = h.attempt(&batch).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &second.outcome else {
        panic!("landed: {second:?}");
    };
    assert_eq!(seqs(segments), [1, 2]);
    assert!(second.found.is_empty() && second.ours.is_empty());
    assert_eq!(h.catalog.loads(), loads + 1, "reloaded to reconcile");
    assert_eq!(h.registered(), [ids(&batch)]);
    let commits = h.catalog.commits();
    assert_eq!(commits.len(), 2);
    assert_ne!(
        commits[1].manifest_list(),
        commits[0].manifest_list(),
        "built afresh: no file shared with a commit that may have landed"
    );
    // What a commit that may have landed wrote is never deleted.
    let now = h.table_files().await;
    assert!(
        unknown.is_subset(&now),
        "deleted: {:?}",
        unknown.difference(&now)
    );
}

#[tokio::test]
async fn a_500_after_the_commit_applied_is_found_on_reload_and_counted_ours() {
    let mut h = Harness::new(false).await;
    h.catalog.script([Answer::ApplyThen(500)]);
    let batch = [ready(1), ready(2)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(first.outcome, Outcome::RetryAfter(d) if d == FIRST_BACKOFF),
        "{first:?}"
    );

    let second = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(second.outcome, Outcome::AlreadyRegistered),
        "{second:?}"
    );
    assert_eq!(seq_set(&second.found), HashSet::from([1, 2]));
    assert_eq!(
        second.ours,
        HashSet::from([1, 2]),
        "registered, not duplicates"
    );
    assert!(second.carried.is_empty());
    assert_eq!(h.catalog.commits().len(), 1, "never sent again");
    assert_eq!(h.registered(), [ids(&batch)]);
    assert_eq!(h.commit.retry_at(), None);
    // The landed commit's files stay; what the second attempt wrote ahead of its load goes.
    assert_eq!(h.table_files().await, h.referenced().await);
}

#[tokio::test]
async fn a_lost_answer_without_keys_is_found_on_reload_and_never_appended_twice() {
    let mut h = Harness::new(false).await;
    h.catalog.script([Answer::ApplyLost]);
    let batch = [ready(1), ready(2)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(first.outcome, Outcome::RetryAfter(d) if d == FIRST_BACKOFF),
        "{first:?}"
    );
    assert_eq!(h.registered(), [ids(&batch)], "the catalog applied it");

    // The next batch brings a new segment along: only that one is appended.
    let grown = [ready(1), ready(2), ready(3)];
    let second = h.attempt(&grown).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &second.outcome else {
        panic!("landed: {second:?}");
    };
    assert_eq!(seqs(segments), [3]);
    assert_eq!(seq_set(&second.found), HashSet::from([1, 2]));
    assert_eq!(
        second.ours,
        HashSet::from([1, 2]),
        "registered, not duplicates"
    );
    assert_eq!(h.registered(), [ids(&batch), ids(&grown[2..])]);
    assert_eq!(h.table_files().await, h.referenced().await);
}

#[tokio::test]
async fn a_lost_answer_under_an_idempotency_key_is_resent_as_it_was_and_replayed() {
    let mut h = Harness::new(true).await;
    h.catalog.script([Answer::ApplyLost]);
    let batch = [ready(1), ready(2)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(
        matches!(first.outcome, Outcome::RetryAfter(d) if d == FIRST_BACKOFF),
        "{first:?}"
    );

    let loads = h.catalog.loads();
    let second = h.attempt(&batch).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &second.outcome else {
        panic!("landed: {second:?}");
    };
    assert_eq!(seqs(segments), [1, 2]);
    assert_eq!(h.catalog.loads(), loads, "a resend, not a reload");
    let commits = h.catalog.commits();
    assert_eq!(commits.len(), 2);
    assert!(commits[0].key.is_some() && commits[0].applied);
    assert_eq!(commits[1].key, commits[0].key, "the same Idempotency-Key");
    assert_eq!(commits[1].body, commits[0].body, "the same bytes");
    assert!(commits[1].replayed && !commits[1].applied);
    assert_eq!(h.registered(), [ids(&batch)]);
    assert_eq!(h.table_files().await, h.referenced().await);
}

#[tokio::test]
async fn an_unknown_outcome_under_a_key_is_resent_a_few_times_then_reloaded() {
    let mut h = Harness::new(true).await;
    let unavailable = Answer::Refuse {
        status: 503,
        retry_after: Some(2),
    };
    let sends = IDEMPOTENT_RESENDS as usize + 1;
    h.catalog.script(vec![unavailable; sends]);
    let batch = [ready(1), ready(2)];
    let loads = h.catalog.loads();
    for n in 0..sends {
        let attempted = h.attempt(&batch).await.expect("an attempt");
        assert!(
            matches!(attempted.outcome, Outcome::RetryAfter(d) if d == Duration::from_secs(2)),
            "send {n} waits the server's Retry-After: {attempted:?}"
        );
    }
    assert_eq!(h.catalog.loads(), loads, "resent, never reloaded");
    let commits = h.catalog.commits();
    assert_eq!(commits.len(), sends);
    assert!(
        commits
            .iter()
            .all(|c| c.key.is_some() && c.key == commits[0].key && c.body == commits[0].body),
        "the same request every time"
    );

    // After the resends, a reload: the batch goes again as a new request.
    let last = h.attempt(&batch).await.expect("an attempt");
    assert!(matches!(last.outcome, Outcome::Landed { .. }), "{last:?}");
    assert_eq!(h.catalog.loads(), loads + 1);
    let commits = h.catalog.commits();
    assert_eq!(commits.len(), sends + 1);
    assert_ne!(
        commits[sends].key, commits[0].key,
        "a new request, a new key"
    );
    assert_eq!(h.registered(), [ids(&batch)]);
}

#[tokio::test]
async fn an_unknown_outcomes_files_stay_when_its_resend_is_refused() {
    let mut h = Harness::new(true).await;
    // The first send lands behind a 503; its resend is refused before the key is looked up
    // (a token the catalog no longer accepts), which says nothing of the first.
    h.catalog
        .script([Answer::ApplyThen(503), Answer::refuse(403)]);
    let batch = [ready(1), ready(2)];
    let first = h.attempt(&batch).await.expect("an attempt");
    assert!(matches!(first.outcome, Outcome::RetryAfter(_)), "{first:?}");
    let err = h.attempt(&batch).await.expect_err("stopped");
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert_eq!(h.registered(), [ids(&batch)], "the first send landed");
    // The table's snapshot names that commit's files: none may be deleted.
    let files = h.table_files().await;
    let list = h.catalog.commits()[0].manifest_list();
    assert!(
        files.contains(&list),
        "the table's manifest list {list} was deleted"
    );
    assert_eq!(files, h.referenced().await);
}

#[tokio::test]
async fn a_refusal_stops_at_once_with_its_code_and_deletes_what_the_attempt_wrote() {
    for (status, code) in [
        (400, ErrorCode::CatalogRejected),
        (403, ErrorCode::AuthFailed),
        (404, ErrorCode::TableMissing),
    ] {
        let mut h = Harness::new(true).await;
        h.catalog.script([Answer::refuse(status)]);
        let batch = [ready(1), ready(2)];
        let err = h.attempt(&batch).await.expect_err("stopped");
        assert_eq!(err.code(), code, "{status}: {err}");
        assert_eq!(
            h.catalog.commits().len(),
            1,
            "{status}: neither resent nor retried"
        );
        assert_eq!(h.commit.retry_at(), None, "{status}");
        assert!(h.registered().is_empty(), "{status}");
        let left = h.table_files().await;
        assert!(
            left.is_empty(),
            "{status}: a refused attempt's files stay: {left:?}"
        );
    }
}
