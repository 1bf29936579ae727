//! The transaction's unit tests: [`BatchCommit::attempt`] driven as the committer drives it,
//! against a REST catalog in the test's process (`fake_catalog`: each commit answered as the
//! test scripts it) and an in-memory store standing in for S3 (`harness`), in milliseconds;
//! what each answer to a commit comes to is in `answers`, a lone registrar's roll call on a
//! new table in `roll_call`, the history a node holds between its loads in `thin`.

use serde_json::json;

use super::snapshot_stamp;

mod answers;
mod fake_catalog;
mod harness;
mod roll_call;
mod thin;

#[test]
fn a_snapshot_is_never_stamped_before_the_tables_last() {
    let metadata = crate::testing::metadata_with(&[(json!({}), 5_000), (json!({}), 9_000)]);
    // A node ten minutes behind takes the last stamp; one on time or ahead keeps its own.
    assert_eq!(snapshot_stamp(9_000 - 600_000, &metadata), 9_000);
    assert_eq!(snapshot_stamp(9_500, &metadata), 9_500);
    let empty = crate::testing::metadata_with(&[]);
    assert_eq!(snapshot_stamp(1_234, &empty), 1_234);
}
