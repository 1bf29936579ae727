//! `--until-caught-up`: what "caught up" means for each table, from the `Uploaded` records the
//! segment catalog holds when the runner starts, and whether a registrar's status has reached
//! it. Kept here rather than in the runner so that a host stopping a registrar once a log is
//! drained can use the same rule.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::catalog::TableName;
use crate::error::Result;
use crate::protocol::segment_log::{LogEntry, SegmentLogReader};
use crate::runtime::status::{RegistrarStatus, TableStatus};
use crate::table::committed::SegmentId;

/// What `--until-caught-up` waits for in one table, from the `Uploaded` records of its dataset
/// that the segment catalog holds at start.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CatchUp {
    /// `Uploaded` records, duplicates included.
    pub records: u64,
    /// The highest seq of a record that was the first to name its object key. A later record
    /// with the same key (the writer may record a batch twice after a failed append) may never
    /// be counted: the committer drops a copy of a segment it already holds.
    pub last_first_seq: u64,
}

impl CatchUp {
    /// Whether the table has handled every segment recorded at start.
    ///
    /// The feed delivers records in log order, so once the committer has handled a seq at or
    /// above `last_first_seq`, every first occurrence of a key was delivered to it, and each is
    /// then either handled or still in its backlog: an empty backlog means all are handled.
    /// Under a steady stream of new uploads the backlog may never be empty, so as before a
    /// count of handled segments at least the number of records at start also ends the wait
    /// (exact when the log holds no duplicate keys).
    pub fn is_met(&self, table: &TableStatus) -> bool {
        table.last_seq.is_some_and(|seq| seq >= self.last_first_seq)
            && (table.backlog == 0 || table.handled() >= self.records)
    }
}

/// Whether every table with segments at start has handled them.
pub fn caught_up(targets: &BTreeMap<String, CatchUp>, status: &RegistrarStatus) -> bool {
    targets
        .iter()
        .all(|(table, target)| status.tables.get(table).is_some_and(|t| target.is_met(t)))
}

/// Per table (`namespace.dataset`, as the status names it), what the segment catalog holds now.
///
/// Streams the log (the reader holds at most one bounded batch of records) and keeps, per
/// dataset, two counters and the 12-byte ids of the distinct object keys seen: memory grows by
/// about 12 bytes (plus hash-set overhead, under 32 bytes in all) per distinct segment, e.g.
/// about 30 MB for a million, instead of every record.
pub fn targets(path: &std::path::Path, namespace: &[String]) -> Result<BTreeMap<String, CatchUp>> {
    let mut targets = BTreeMap::new();
    if !path.exists() {
        return Ok(targets);
    }
    let mut seen: HashMap<String, HashSet<SegmentId>> = HashMap::new();
    let mut reader = SegmentLogReader::open(path)?;
    while let Some(record) = reader.next_record()? {
        let seq = record.seq;
        let LogEntry::Uploaded {
            dataset,
            object_key,
            ..
        } = record.entry
        else {
            continue;
        };
        let first = seen
            .entry(dataset.clone())
            .or_default()
            .insert(SegmentId::of(&object_key));
        let table = TableName {
            namespace: namespace.to_vec(),
            name: dataset,
        }
        .to_string();
        let target: &mut CatchUp = targets.entry(table).or_default();
        target.records += 1;
        if first {
            target.last_first_seq = seq;
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(last_seq: Option<u64>, backlog: u64, handled: u64) -> TableStatus {
        TableStatus {
            last_seq,
            backlog,
            registered: handled,
            ..TableStatus::default()
        }
    }

    /// A1 B2 A3 B4: the batch recorded twice; the copies were dropped while A and B waited.
    #[test]
    fn duplicates_that_are_never_counted_do_not_hold_the_wait() {
        let target = CatchUp {
            records: 4,
            last_first_seq: 2,
        };
        assert!(target.is_met(&table(Some(2), 0, 2)));
        assert!(!target.is_met(&table(Some(1), 0, 1)), "B not yet handled");
        assert!(!target.is_met(&table(None, 0, 0)));
    }

    /// A1 B2 A3, with A committed alone and its copy skipped while B still waits.
    #[test]
    fn a_counted_duplicate_does_not_end_the_wait_early() {
        let target = CatchUp {
            records: 3,
            last_first_seq: 2,
        };
        assert!(!target.is_met(&table(Some(3), 1, 2)));
        assert!(target.is_met(&table(Some(3), 0, 3)));
    }

    #[test]
    fn a_busy_table_is_caught_up_by_count() {
        let target = CatchUp {
            records: 5,
            last_first_seq: 5,
        };
        assert!(
            target.is_met(&table(Some(9), 3, 6)),
            "new uploads keep the backlog up"
        );
        assert!(!target.is_met(&table(Some(4), 0, 4)));
    }

    #[test]
    fn every_table_must_be_caught_up() {
        let mut targets = BTreeMap::new();
        targets.insert(
            "ns.a".to_string(),
            CatchUp {
                records: 1,
                last_first_seq: 1,
            },
        );
        targets.insert(
            "ns.b".to_string(),
            CatchUp {
                records: 1,
                last_first_seq: 2,
            },
        );
        let mut status = RegistrarStatus::default();
        status.tables.insert("ns.a".into(), table(Some(1), 0, 1));
        assert!(!caught_up(&targets, &status), "ns.b has not started");
        status.tables.insert("ns.b".into(), table(Some(2), 0, 1));
        assert!(caught_up(&targets, &status));
        assert!(caught_up(&BTreeMap::new(), &RegistrarStatus::default()));
    }

    #[test]
    fn targets_count_records_and_the_last_first_occurrence_per_table() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mut log = crate::protocol::segment_log::SegmentLogWriter::open(&path).expect("writer");
        for (dataset, key) in [
            ("a", "k1"),
            ("a", "k2"),
            ("b", "k1"),
            ("a", "k1"),
            ("a", "k2"),
        ] {
            log.append_uploaded(dataset, key, format!("{dataset}/{key}"), 10, 1)
                .expect("append");
        }
        let namespace = vec!["ns".to_string()];
        let found = targets(&path, &namespace).expect("targets");
        assert_eq!(
            found.get("ns.a"),
            Some(&CatchUp {
                records: 4,
                last_first_seq: 2
            })
        );
        assert_eq!(
            found.get("ns.b"),
            Some(&CatchUp {
                records: 1,
                last_first_seq: 3
            })
        );
        let none = targets(&dir.path().join("absent"), &namespace).expect("absent");
        assert!(none.is_empty());
    }
}
