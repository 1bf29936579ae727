//! The roll call of a registrar that starts on a table with no snapshot (see
//! `fleet::roll_call`): its first attempt publishes the batch and ends; the next, finding no
//! other node's intent, commits the batch itself and withdraws the intent; the roll is called
//! once.

use super::super::Outcome;
use super::harness::{Harness, ids, ready, seqs};

#[tokio::test]
async fn a_lone_registrar_on_a_new_table_calls_the_roll_once_then_commits_alone() {
    let mut h = Harness::with_intents(false).await;
    let batch = [ready(1), ready(2)];
    let called = h.attempt(&batch).await.expect("an attempt");
    assert!(matches!(called.outcome, Outcome::Deferred), "{called:?}");
    assert!(
        h.registered().is_empty(),
        "nothing committed before the roll"
    );
    assert_eq!(h.intents_left().await.len(), 1, "the batch is published");

    // No other node answered: it commits its batch itself, as new files.
    let alone = h.attempt(&batch).await.expect("an attempt");
    let Outcome::Landed { segments, .. } = &alone.outcome else {
        panic!("landed: {alone:?}");
    };
    assert_eq!(seqs(segments), [1, 2]);
    assert_eq!(h.registered(), [ids(&batch)]);

    // The roll is called once: the next batch goes at once.
    let next = [ready(3)];
    let again = h.attempt(&next).await.expect("an attempt");
    assert!(matches!(again.outcome, Outcome::Landed { .. }), "{again:?}");
    assert_eq!(h.registered(), [ids(&batch), ids(&next)]);
    h.stop().await;
    assert_eq!(
        h.intents_left().await,
        Vec::<String>::new(),
        "the intent is withdrawn"
    );
}
