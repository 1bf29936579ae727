//! Opt-in snapshot retention (`snapshot_retention`): which snapshots the registrar's own append
//! commits remove from the table metadata, so that metadata stops growing by one snapshot per
//! commit.
//!
//! Removing a snapshot is metadata-only (`remove-snapshots`): no file is deleted, by the
//! registrar or by the catalog; every data file of a retained snapshot stays live. What it does
//! remove is the snapshot's summary, and with it the segment ids exactly-once reads
//! (`table::committed`). So a snapshot of this registrar is expired only while a watermark
//! answers for its segments instead: its summary names the watermark property it was written
//! under ([`WATERMARK_KEY`]) and that property's seq is at or past the snapshot's
//! [`CATALOG_SEQ`]. Snapshots written without a watermark (feeds without catalog ids, batches of
//! several catalogs, snapshots written before the key existed) are never expired: nothing would
//! tell their segments registered after a restart.
//!
//! The selection is [`select`], a pure function of the metadata, the policy and the time:
//! - only the main branch's ancestry, beyond its `min_snapshots` newest and older than
//!   `max_age` (Java's `ExpireSnapshots` rule for one branch);
//! - never the current snapshot, the head of any ref, or a snapshot reachable from a branch or
//!   tag other than main (conservative: their owners run their own maintenance);
//! - nothing at all when the table says `gc.enabled=false`, or when a ref could age out
//!   (`max-ref-age-ms` on a ref or `history.expire.max-ref-age-ms`: iceberg's expire action would
//!   drop that ref along with our ids);
//! - snapshots of other writers (no `thadam.` summary keys) go by age and count alone;
//! - at most [`MAX_EXPIRED_PER_COMMIT`] per commit, oldest first, so one commit body stays small;
//! - only once at least a tenth as many snapshots are due as are kept (at least one): the table
//!   is then at most ~10% over its policy, and the one pass over the refs this needs (iceberg
//!   0.10.1 lists refs only through serialisation) is paid once per that many commits.

use std::collections::{HashMap, HashSet};

use iceberg::spec::{MAIN_BRANCH, Snapshot, SnapshotReference, SnapshotRetention, TableMetadata};

use crate::config::SnapshotRetention as Policy;
use crate::runtime::warn_once;
use crate::table::committed::{SegmentId, decode_guards, decode_ids, decode_mark};
use crate::table::summary_keys::{
    CARRIED_INTENTS, CARRIED_MARKS, CATALOG_SEQ, SEGMENT_IDS, WATERMARK_KEY, WRITER,
};

/// The most snapshot ids one commit removes (about 20 bytes each in the commit body).
pub(crate) const MAX_EXPIRED_PER_COMMIT: usize = 1000;

/// What [`select`] decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Selection {
    /// The snapshots to remove, oldest first.
    pub expire: Vec<i64>,
    /// Snapshots of this registrar old enough to go but kept: no watermark covers them.
    pub unguarded: usize,
}

/// The snapshots of `metadata` to remove under `policy` at `now_ms` (see the module docs).
#[cfg(test)]
fn expirable(metadata: &TableMetadata, policy: &Policy, now_ms: i64) -> Vec<i64> {
    select(metadata, policy, now_ms).expire
}

/// The snapshots to remove (as `expirable` lists them), with what it kept back for want of a watermark.
pub(crate) fn select(metadata: &TableMetadata, policy: &Policy, now_ms: i64) -> Selection {
    let mut selection = Selection::default();
    let properties = metadata.properties();
    if properties
        .get("gc.enabled")
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
    {
        return selection;
    }
    let Some(head) = metadata
        .snapshot_for_ref(MAIN_BRANCH)
        .or_else(|| metadata.current_snapshot())
    else {
        return selection;
    };
    let ancestry = ancestors(metadata, head.snapshot_id());
    let max_age_ms = i64::try_from(policy.max_age.as_millis()).unwrap_or(i64::MAX);
    let cutoff = now_ms.saturating_sub(max_age_ms);
    let mut due = Vec::new();
    for snapshot in ancestry.iter().skip(policy.min_snapshots) {
        if snapshot.timestamp_ms() >= cutoff {
            continue;
        }
        if is_ours(snapshot) && !covered(snapshot, properties) {
            selection.unguarded += 1;
            continue;
        }
        due.push(snapshot.snapshot_id());
    }
    let kept = ancestry.len() - due.len();
    if due.len() < (kept / 10).max(1) {
        return selection;
    }
    let Some(refs) = refs(metadata) else {
        return selection;
    };
    let ref_ages = properties.contains_key("history.expire.max-ref-age-ms")
        || refs.iter().any(|(name, r)| {
            name != MAIN_BRANCH
                && match r.retention {
                    SnapshotRetention::Branch { max_ref_age_ms, .. }
                    | SnapshotRetention::Tag { max_ref_age_ms } => max_ref_age_ms.is_some(),
                }
        });
    if ref_ages {
        return selection;
    }
    let mut protected: HashSet<i64> = metadata.current_snapshot_id().into_iter().collect();
    for (name, r) in &refs {
        protected.insert(r.snapshot_id);
        if name != MAIN_BRANCH {
            protected.extend(
                ancestors(metadata, r.snapshot_id)
                    .iter()
                    .map(|s| s.snapshot_id()),
            );
        }
    }
    // `due` is newest first: the oldest go first.
    selection.expire = due
        .into_iter()
        .rev()
        .filter(|id| !protected.contains(id))
        .take(MAX_EXPIRED_PER_COMMIT)
        .collect();
    selection
}

/// The snapshot ids to expire in the next commit of `table` and the segment ids their summaries
/// list (for `CommittedSet::forget` once the commit landed).
#[derive(Debug, Default, Clone)]
pub(crate) struct Plan {
    pub snapshot_ids: Vec<i64>,
    pub segment_ids: Vec<SegmentId>,
}

/// [`select`] for the committer: says once per table when snapshots stay for want of a
/// watermark, and collects the segment ids of what goes.
pub(crate) fn plan(table: &str, metadata: &TableMetadata, policy: &Policy, now_ms: i64) -> Plan {
    let selection = select(metadata, policy, now_ms);
    if selection.unguarded > 0 && first_time(table) {
        tracing::warn!(
            table,
            snapshots = selection.unguarded,
            "snapshot_retention keeps snapshots of this registrar that no watermark covers \
             (segments without a catalog id, batches of several catalogs, or snapshots written \
             before retention existed): expiring them would let a restart register their \
             segments again; expire them with your own maintenance if you must"
        );
    }
    let segment_ids = selection
        .expire
        .iter()
        .filter_map(|id| metadata.snapshot_by_id(*id))
        .filter_map(|s| s.summary().additional_properties.get(SEGMENT_IDS))
        .flat_map(|list| decode_ids(list))
        .collect();
    Plan {
        snapshot_ids: selection.expire,
        segment_ids,
    }
}

/// Whether `table` is seen here for the first time (the warning is said once per table).
fn first_time(table: &str) -> bool {
    warn_once::first_time("retention", table)
}

/// Whether a registrar wrote `snapshot` (any of its summary keys).
fn is_ours(snapshot: &Snapshot) -> bool {
    let summary = &snapshot.summary().additional_properties;
    summary.contains_key(SEGMENT_IDS) || summary.contains_key(WRITER)
}

/// Whether the watermark `snapshot` was written under still covers it, and, for a snapshot
/// that carried other nodes' intents (`thadam.carried-intents`), each of their watermarks too.
fn covered(snapshot: &Snapshot, properties: &HashMap<String, String>) -> bool {
    let summary = &snapshot.summary().additional_properties;
    let reaches = |property: &str, seq: u64| {
        properties
            .get(property)
            .and_then(|value| decode_mark(value))
            .is_some_and(|(mark, _)| mark >= seq)
    };
    let carried = summary.contains_key(CARRIED_INTENTS);
    let own = match summary.get(CATALOG_SEQ).and_then(|s| s.parse::<u64>().ok()) {
        Some(seq) => summary
            .get(WATERMARK_KEY)
            .is_some_and(|key| reaches(key, seq)),
        // Only a snapshot that holds nothing but carried intents has no catalog seq of its own.
        None => carried,
    };
    if !own || !carried {
        return own;
    }
    summary.get(CARRIED_MARKS).is_some_and(|guards| {
        decode_guards(guards).all(|guard| {
            guard.is_some_and(|(property, seq)| !property.is_empty() && reaches(&property, seq))
        })
    })
}

/// `head` and its ancestors, newest first (a cycle or a missing parent ends the walk).
fn ancestors(metadata: &TableMetadata, head: i64) -> Vec<&Snapshot> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let mut next = Some(head);
    while let Some(id) = next {
        if !seen.insert(id) {
            break;
        }
        let Some(snapshot) = metadata.snapshot_by_id(id) else {
            break;
        };
        out.push(snapshot.as_ref());
        next = snapshot.parent_snapshot_id();
    }
    out
}

/// The table's refs. iceberg 0.10.1 keeps them crate-private; its serialisation lists them.
fn refs(metadata: &TableMetadata) -> Option<HashMap<String, SnapshotReference>> {
    let mut json = serde_json::to_value(metadata).ok()?;
    match json.get_mut("refs").map(serde_json::Value::take) {
        Some(refs) => serde_json::from_value(refs).ok(),
        None => Some(HashMap::new()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{Value, json};

    use super::*;
    use crate::table::summary_keys::WATERMARK_PREFIX;

    const MIN: i64 = 60_000;
    const NOW: i64 = 1_800_000_000_000;

    fn policy(max_age_min: u64, min_snapshots: usize) -> Policy {
        Policy {
            max_age: Duration::from_secs(max_age_min * 60),
            min_snapshots,
        }
    }

    /// A snapshot `age_min` minutes old, its parent the previous one, with summary `extra`.
    fn snap(id: i64, age_min: i64, extra: Value) -> Value {
        let mut summary = json!({"operation": "append"});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            summary[k] = v;
        }
        let mut s = json!({
            "snapshot-id": id,
            "sequence-number": id,
            "timestamp-ms": NOW - age_min * MIN,
            "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"),
            "summary": summary,
            "schema-id": 0,
        });
        if id > 1 {
            s["parent-snapshot-id"] = json!(id - 1);
        }
        s
    }

    /// Ours, written under watermark key `wm` at catalog seq `seq`.
    fn ours(id: i64, age_min: i64, wm: Option<&str>, seq: u64) -> Value {
        let mut extra = json!({
            SEGMENT_IDS: "AAAAAAAAAAAAAAAA",
            CATALOG_SEQ: seq.to_string(),
            WRITER: "iceberg/p",
        });
        if let Some(wm) = wm {
            extra[WATERMARK_KEY] = json!(wm);
        }
        snap(id, age_min, extra)
    }

    fn table(snapshots: Vec<Value>, props: Value, refs: Value) -> TableMetadata {
        let current = snapshots
            .iter()
            .filter_map(|s| s["snapshot-id"].as_i64())
            .max();
        let mut refs = refs;
        if let Some(current) = current {
            refs["main"] = json!({"snapshot-id": current, "type": "branch"});
        }
        serde_json::from_value(json!({
            "format-version": 2,
            "table-uuid": "5f4a6c48-0c3a-4a2c-9e61-3c1b8f2d1e11",
            "location": "s3://b/t",
            "last-sequence-number": current.unwrap_or(0),
            "last-updated-ms": NOW,
            "last-column-id": 1,
            "current-schema-id": 0,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "x", "required": false, "type": "long"}]}],
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}],
            "last-partition-id": 999,
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": props,
            "current-snapshot-id": current.unwrap_or(-1),
            "snapshots": snapshots,
            "snapshot-log": [],
            "metadata-log": [],
            "refs": refs,
        }))
        .expect("test metadata")
    }

    /// `n` snapshots of another writer, ids 1..=n, the oldest `n` minutes old.
    fn foreign(n: i64) -> Vec<Value> {
        (1..=n).map(|id| snap(id, n + 1 - id, json!({}))).collect()
    }

    #[test]
    fn keeps_the_newest_min_snapshots_and_everything_younger_than_max_age() {
        // Ids 1..=10, ages 10..=1 minutes.
        let t = table(foreign(10), json!({}), json!({}));
        // Older than 3 minutes: ids 1..=7 (8 is exactly 3 minutes old); beyond the 2 newest: all.
        assert_eq!(expirable(&t, &policy(3, 2), NOW), vec![1, 2, 3, 4, 5, 6, 7]);
        // min_snapshots wins over age.
        assert_eq!(expirable(&t, &policy(1, 8), NOW), vec![1, 2]);
        // Nothing is old enough.
        assert!(expirable(&t, &policy(60, 1), NOW).is_empty());
        // The current snapshot never goes, even with min_snapshots 1 and everything old.
        let all = expirable(&t, &policy(1, 1), NOW + 100 * MIN);
        assert_eq!(all, (1..=9).collect::<Vec<_>>());
    }

    #[test]
    fn registrar_snapshots_go_only_while_their_watermark_covers_them() {
        let wm = format!("{WATERMARK_PREFIX}log");
        let snapshots = vec![
            ours(1, 10, Some(&wm), 3),
            ours(2, 9, Some(&wm), 6),
            ours(3, 8, None, 7), // no watermark
            ours(4, 7, Some(&format!("{WATERMARK_PREFIX}gone")), 8), // property absent
            ours(5, 6, Some(&wm), 12), // past the mark
            ours(6, 5, Some(&wm), 9),
            snap(7, 4, json!({})),
            ours(8, 1, Some(&wm), 13),
        ];
        let t = table(
            snapshots,
            json!({ wm.clone(): "10:AAAAAAAAAAAAAAAA" }),
            json!({}),
        );
        let s = select(&t, &policy(2, 1), NOW);
        assert_eq!(s.expire, vec![1, 2, 6, 7]);
        assert_eq!(s.unguarded, 3);
        // A bare legacy watermark value still has a seq; coverage is about the seq alone.
        let t2 = table(
            vec![ours(1, 10, Some(&wm), 3), snap(2, 0, json!({}))],
            json!({ wm.clone(): "5" }),
            json!({}),
        );
        assert_eq!(expirable(&t2, &policy(2, 1), NOW), vec![1]);
    }

    /// A table of `snapshots` whose watermark properties stand at the seqs given.
    fn marked(snapshots: Vec<Value>, marks: [(&str, u64); 3]) -> TableMetadata {
        let properties: serde_json::Map<String, Value> = marks
            .iter()
            .map(|(p, seq)| (p.to_string(), json!(format!("{seq}:AAAAAAAAAAAAAAAA"))))
            .collect();
        table(snapshots, Value::Object(properties), json!({}))
    }

    #[test]
    fn a_snapshot_that_carried_intents_goes_only_while_each_of_their_watermarks_covers_it() {
        let wm = format!("{WATERMARK_PREFIX}log");
        let a = format!("{WATERMARK_PREFIX}a");
        let b = format!("{WATERMARK_PREFIX}b");
        let carried = |id: i64, own: Option<u64>, guards: Option<String>| {
            let mut v = match own {
                Some(seq) => ours(id, 10 - id, Some(&wm), seq),
                // Nothing of its own: no catalog seq, no watermark key.
                None => snap(
                    id,
                    10 - id,
                    json!({SEGMENT_IDS: "AAAAAAAAAAAAAAAA", WRITER: "iceberg/p"}),
                ),
            };
            v["summary"][CARRIED_INTENTS] = json!("2");
            if let Some(g) = guards {
                v["summary"][CARRIED_MARKS] = json!(g);
            }
            v
        };
        let snapshots = vec![
            carried(1, Some(3), Some(format!("{a}=5,{b}=7"))), // all covered
            carried(2, Some(3), Some(format!("{a}=5,{b}=9"))), // b not there yet
            carried(3, None, Some(format!("{a}=4,{b}=6"))),    // carried only, covered
            carried(4, None, Some(format!("={a}=4"))),         // an intent without watermark
            carried(5, Some(3), None),                         // no guards at all
            carried(6, Some(20), Some(format!("{a}=1,{b}=1"))), // its own not covered
            snap(7, 0, json!({})),
        ];
        let t = marked(snapshots, [(&wm, 10), (&a, 5), (&b, 8)]);
        assert_eq!(expirable(&t, &policy(2, 1), NOW), vec![1, 3]);
    }

    #[test]
    fn short_guards_are_read_like_whole_ones() {
        use crate::table::committed::Guards;
        let wm = format!("{WATERMARK_PREFIX}log");
        let a = format!("{WATERMARK_PREFIX}8dc3d618-73f3-4c8f-857f-542aeff13e4e");
        let b = format!("{a}.0a1b2c3d4e5f");
        let carried = |id: i64, guards: &[(&str, u64)]| {
            let mut v = ours(id, 10 - id, Some(&wm), 3);
            v["summary"][CARRIED_INTENTS] = json!("2");
            let mut g = Guards::default();
            for (property, seq) in guards {
                g.add(property, *seq);
            }
            assert!(g.encode().starts_with('~'), "{}", g.encode());
            v["summary"][CARRIED_MARKS] = json!(g.encode());
            v
        };
        let snapshots = vec![
            carried(1, &[(&a, 5), (&b, 7)]), // both covered
            carried(2, &[(&a, 6), (&b, 7)]), // a not there yet
            carried(3, &[(&a, 4), (&b, 9)]), // b not there yet
            snap(4, 0, json!({})),
        ];
        let t = marked(snapshots, [(&wm, 10), (&a, 5), (&b, 8)]);
        assert_eq!(expirable(&t, &policy(1, 1), NOW), vec![1]);
    }

    #[test]
    fn other_refs_and_their_ancestry_are_never_expired() {
        // A tag on 4 holds 1..=4; a branch whose head (11) forks off 6 holds 6 and below.
        let mut snapshots = foreign(10);
        let mut fork = snap(11, 20, json!({}));
        fork["parent-snapshot-id"] = json!(6);
        fork["sequence-number"] = json!(10);
        snapshots.push(fork);
        let t = table(
            snapshots.clone(),
            json!({}),
            json!({"old": {"snapshot-id": 4, "type": "tag"}}),
        );
        let t = {
            // `table` points main at the highest id; put it back on 10.
            let mut json = serde_json::to_value(&t).expect("json");
            json["refs"]["main"]["snapshot-id"] = json!(10);
            json["current-snapshot-id"] = json!(10);
            serde_json::from_value::<TableMetadata>(json).expect("metadata")
        };
        assert_eq!(expirable(&t, &policy(1, 1), NOW), vec![5, 6, 7, 8, 9]);
        let mut json = serde_json::to_value(&t).expect("json");
        json["refs"]["dev"] = json!({"snapshot-id": 11, "type": "branch"});
        let t: TableMetadata = serde_json::from_value(json).expect("metadata");
        assert_eq!(expirable(&t, &policy(1, 1), NOW), vec![7, 8, 9]);
    }

    #[test]
    fn gc_disabled_or_ageing_refs_leave_the_table_alone() {
        let t = table(foreign(10), json!({"gc.enabled": "false"}), json!({}));
        assert!(expirable(&t, &policy(1, 1), NOW).is_empty());
        let t = table(
            foreign(10),
            json!({}),
            json!({"t": {"snapshot-id": 9, "type": "tag", "max-ref-age-ms": 1000}}),
        );
        assert!(expirable(&t, &policy(1, 1), NOW).is_empty());
        let t = table(
            foreign(10),
            json!({"history.expire.max-ref-age-ms": "1"}),
            json!({}),
        );
        assert!(expirable(&t, &policy(1, 1), NOW).is_empty());
        let t = table(vec![], json!({}), json!({}));
        assert!(expirable(&t, &policy(1, 1), NOW).is_empty());
    }

    #[test]
    fn work_per_commit_is_bounded_and_batched() {
        let n = MAX_EXPIRED_PER_COMMIT as i64 + 500;
        let t = table(foreign(n), json!({}), json!({}));
        let ids = expirable(&t, &policy(1, 1), NOW + 10 * MIN);
        assert_eq!(ids.len(), MAX_EXPIRED_PER_COMMIT);
        assert_eq!(ids[0], 1, "oldest first");
        // 100 kept, 9 due: below a tenth, wait; 10 due: go.
        let t = table(foreign(109), json!({}), json!({}));
        assert!(expirable(&t, &policy(1, 100), NOW + 10 * MIN).is_empty());
        let t = table(foreign(110), json!({}), json!({}));
        assert_eq!(expirable(&t, &policy(1, 100), NOW + 10 * MIN).len(), 10);
    }

    #[test]
    fn the_plan_lists_the_segment_ids_of_what_goes() {
        let wm = format!("{WATERMARK_PREFIX}log");
        let t = table(
            vec![ours(1, 10, Some(&wm), 1), ours(2, 0, Some(&wm), 2)],
            json!({ wm.clone(): "2:AAAAAAAAAAAAAAAA" }),
            json!({}),
        );
        let plan = plan("ns.t", &t, &policy(1, 1), NOW);
        assert_eq!(plan.snapshot_ids, vec![1]);
        assert_eq!(plan.segment_ids, decode_ids("AAAAAAAAAAAAAAAA"));
    }
}
