//! The roll call: how a fleet that starts together (a fleet-wide upgrade, a restart after an
//! outage longer than the lane memory, a fleet's first start on a new table) finds out who is
//! there before anyone commits.
//!
//! A node knows the fleet from the table's snapshots (`fleet::lanes`), and nodes that start
//! together find none recent: each took itself for alone and committed its first segments at
//! once, the commits collided, and every 409 revealed one lane more, a round at a time (64 nodes:
//! a p99 of 7.5 s over the first seconds, 0.54 409s per landed commit). So a node that starts
//! on a table with no committer at work, and whose history says a fleet may share it, first
//! **publishes** its batch as an intent (as a node waiting for the committer does), waits
//! [`HOLD`], then **lists** the intents: the lanes of the roll's first round answered it, read
//! from the keys' names alone (128 nodes reading each other's intents at once were 16,000
//! reads, and their first segments waited 10 s for them). The first round is the intents the
//! store took within [`HOLD`] of the oldest fresh one, so every node that lists before the
//! committer's first commit sees the same round, whenever it lists: it ranks the same lowest
//! lane the committer (`Fleet::turn`), which commits as soon as its own wait is over, carrying
//! everyone's; the others leave theirs to it. Ranking every fresh intent instead let the answer
//! grow with the listing's time: each node that listed later could find a lower lane than the
//! one before it had found, and the first commit waited for the first node that found itself
//! the lowest of all it saw (1.4-3.9 s into a 1,000-node start). A node that publishes after
//! the first round ranks its lanes, not its own; every fresh lane still counts as there, so the
//! fleet takes turns as its size says. A node that starts later finds that committer at work
//! in the table and never calls the roll.
//!
//! A lone registrar calls the roll only where the table could be a fleet's: once, at its first
//! start on a table with no snapshot yet (one intent, withdrawn by its first commit, and
//! [`HOLD`] on that commit). On a table only its own log has written to, it never does.

use std::collections::BTreeSet;
use std::time::Duration;

use iceberg::spec::TableMetadata;

use super::slots::is_lane;
use crate::table::summary_keys::{LANE, WATERMARK_KEY};

/// How long a node waits between publishing its first batch and listing the intents: the
/// spread of a fleet's first batches that the roll call sees whole. Nodes that publish later
/// find the committer's commit when they load.
pub(crate) const HOLD: Duration = Duration::from_millis(1_000);

/// The intents the store took within this long before the newest one listed are fresh: older
/// ones were left by nodes gone before this start (their lanes would make a committer that
/// never commits).
pub(crate) const WINDOW_MS: i64 = 10_000;

/// The roll's first round: the fresh intents the store took within this long of the oldest
/// one. Every node that published in it lists after it has ended (it waits [`HOLD`] after its
/// own), so all of them see it whole.
const FIRST_ROUND_MS: i64 = HOLD.as_millis() as i64;

/// How many of the newest snapshots tell whether another registrar has written to the table.
const HISTORY_LOOKBACK: usize = 256;

/// Where a node is in its roll call: due until its first attempt decides, called while it
/// waits [`HOLD`] after publishing, and done from then on (or when it had no reason to call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RollCall {
    Due,
    Called,
    Done,
}

/// Whether the table could be a fleet's, for a node that sees no committer at work at its start:
/// it has no snapshot yet (made for a fleet's first start, or just created), or one of its
/// newest snapshots was written by a registrar of another segment log (one whose watermark is
/// not among `own_watermarks`). A table only this node's log has written to has a lone
/// registrar.
pub(crate) fn table_calls(metadata: &TableMetadata, own_watermarks: &BTreeSet<String>) -> bool {
    let mut at = metadata.current_snapshot();
    if at.is_none() {
        return true;
    }
    for _ in 0..HISTORY_LOOKBACK {
        let Some(snapshot) = at else {
            return false;
        };
        let summary = &snapshot.summary().additional_properties;
        let other = summary.get(LANE).is_some_and(|lane| is_lane(lane))
            && !summary
                .get(WATERMARK_KEY)
                .is_some_and(|w| own_watermarks.contains(w));
        if other {
            return true;
        }
        at = snapshot
            .parent_snapshot_id()
            .and_then(|p| metadata.snapshot_by_id(p));
    }
    false
}

/// What a roll call found: the lanes of the fresh intents, sorted and once each, and of those
/// the lanes of the first round, which answered it.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Roll {
    /// Every lane with a fresh intent (the store took it within [`WINDOW_MS`] of the newest):
    /// the fleet that is there, whose size sets how it takes turns.
    pub(crate) present: Vec<String>,
    /// The first round's lanes (within [`FIRST_ROUND_MS`] of the oldest fresh intent): they
    /// rank as committers until a lane is seen committing.
    pub(crate) answered: Vec<String>,
}

/// The roll, from the listed intents given as (publisher's lane, when the store took it in
/// ms); keys without a well-formed lane do not count. This node's own lane is among those
/// that answered when it published in the first round; an intent of its own from before a
/// quick restart could be too, and then the deputy (`Fleet::is_deputy`) commits within
/// seconds.
pub(crate) fn answered(listed: &[(String, i64)]) -> Roll {
    let lanes = || listed.iter().filter(|(lane, _)| is_lane(lane));
    let Some(newest) = lanes().map(|(_, at)| *at).max() else {
        return Roll::default();
    };
    let fresh = |at: i64| newest.saturating_sub(at) <= WINDOW_MS;
    let Some(oldest) = lanes().map(|(_, at)| *at).filter(|at| fresh(*at)).min() else {
        return Roll::default();
    };
    let of = |keep: &dyn Fn(i64) -> bool| -> Vec<String> {
        let set: BTreeSet<&str> = lanes()
            .filter(|(_, at)| keep(*at))
            .map(|(lane, _)| lane.as_str())
            .collect();
        set.into_iter().map(str::to_string).collect()
    };
    Roll {
        present: of(&|at| fresh(at)),
        answered: of(&|at| fresh(at) && at.saturating_sub(oldest) <= FIRST_ROUND_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::summary_keys::WATERMARK_PREFIX;
    use serde_json::json;

    fn own() -> BTreeSet<String> {
        BTreeSet::from([format!("{WATERMARK_PREFIX}log-a")])
    }

    #[test]
    fn a_table_with_no_snapshot_or_another_registrars_calls_the_roll() {
        let empty = crate::testing::metadata_with(&[]);
        assert!(table_calls(&empty, &own()), "a new table may be a fleet's");
        let mine =
            json!({ LANE: "aaaaaaaaaaaa", WATERMARK_KEY: format!("{WATERMARK_PREFIX}log-a") });
        let lone = crate::testing::metadata_with(&[(mine.clone(), 1_000), (mine.clone(), 2_000)]);
        assert!(
            !table_calls(&lone, &own()),
            "only this node's log wrote to it"
        );
        let theirs =
            json!({ LANE: "bbbbbbbbbbbb", WATERMARK_KEY: format!("{WATERMARK_PREFIX}log-b") });
        let shared = crate::testing::metadata_with(&[(theirs, 1_000), (mine.clone(), 2_000)]);
        assert!(
            table_calls(&shared, &own()),
            "another registrar wrote to it"
        );
        // A writer of another kind (no lane) is not a fleet.
        let spark = crate::testing::metadata_with(&[(json!({}), 1_000), (mine, 2_000)]);
        assert!(!table_calls(&spark, &own()));
    }

    #[test]
    fn the_roll_is_the_lanes_of_the_fresh_intents() {
        let listed = vec![
            ("bbbbbbbbbbbb".to_string(), 100_000),
            ("cccccccccccc".to_string(), 100_900),
            ("bbbbbbbbbbbb".to_string(), 100_500),
            ("aaaaaaaaaaaa".to_string(), 100_950),
            // Left by a node gone long before this start.
            ("111111111111".to_string(), 100_950 - WINDOW_MS - 1),
            // Not a lane (a key of another shape), older than the first round's start.
            ("x".to_string(), 99_000),
        ];
        let roll = answered(&listed);
        assert_eq!(
            roll.answered,
            ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"]
        );
        assert_eq!(roll.present, roll.answered);
        assert_eq!(answered(&[]), Roll::default());
    }

    /// Nodes listing at different times, before the committer's first commit, agree on the
    /// roll: those who published after the first round (here a lower lane, one second later)
    /// do not change it, so no node that listed early finds, too late, a lower lane it should
    /// have left its segments to, and no node that listed late commits beside the committer.
    #[test]
    fn the_roll_is_its_first_round_whenever_a_node_lists() {
        let first_round = vec![
            ("cccccccccccc".to_string(), 100_000),
            ("bbbbbbbbbbbb".to_string(), 100_600),
            ("dddddddddddd".to_string(), 100_000 + FIRST_ROUND_MS),
        ];
        let early = answered(&first_round).answered;
        assert_eq!(early, ["bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd"]);
        let mut late = first_round.clone();
        late.push(("aaaaaaaaaaaa".to_string(), 100_000 + FIRST_ROUND_MS + 1));
        late.push(("000000000000".to_string(), 108_000));
        let roll = answered(&late);
        assert_eq!(
            roll.answered, early,
            "the later lanes do not answer the roll"
        );
        assert_eq!(roll.present.len(), 5, "but they are there");
        // Once the fresh intents leave the first round behind (a node that lists 10 s after the
        // first round: its intents gone stale), the round starts at the oldest fresh one.
        let stale = vec![
            ("bbbbbbbbbbbb".to_string(), 100_000),
            ("aaaaaaaaaaaa".to_string(), 105_000),
            ("cccccccccccc".to_string(), 105_500),
            ("000000000000".to_string(), 110_001),
        ];
        assert_eq!(answered(&stale).answered, ["aaaaaaaaaaaa", "cccccccccccc"]);
    }
}
