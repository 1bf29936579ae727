//! A load answer cut to the table's recent history, for a node that only needs to know what the
//! table holds and who commits to it lately.
//!
//! A `loadTable` answer holds every snapshot the table keeps, each with its summary, and
//! iceberg's parser builds all of it (every summary a map of owned strings, through serde's
//! buffered content): without snapshot retention its cost grows with the table's history. A node
//! of a fleet that the committers carry loads at each of its fallbacks, and then needs, of the
//! history, one value of each summary (the segments it registered: `table::committed`) and the
//! snapshots its view of the fleet reads (the current snapshot's chain, newest first, as far
//! as `Pacer::read_lanes` looks). In a process hosting 1,000 such nodes, parsing and dropping
//! whole histories was three quarters of its CPU once the fleet was idle, and what made latency
//! grow over a five-minute run.
//!
//! So [`cut`] reads the answer in one lean pass: it hands every snapshot's value under one
//! summary key to the caller, and rewrites the answer with only the snapshots kept (the chain
//! from the current snapshot, up to a count, and every snapshot a ref names, so that the refs
//! stay valid). The rest of the answer is left byte for byte. What is cut is never built on: a
//! table loaded so is thin (`HeldTable::is_thin`), and is loaded whole before a commit.
//! Anything unexpected (no current snapshot, a snapshot that does not parse, escapes where the
//! lean pass borrows) leaves the answer to the usual parse, whole.

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// An answer cut to its recent history.
#[derive(Debug)]
pub struct Cut {
    /// The answer with only the snapshots kept.
    pub body: Vec<u8>,
    /// Every snapshot's value under the key asked for (of the snapshots cut too), in the
    /// answer's order; snapshots without it are left out.
    pub values: Vec<String>,
    /// How many snapshots the answer held, and how many were kept.
    pub held: usize,
    pub kept: usize,
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    metadata: Metadata<'a>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Metadata<'a> {
    #[serde(default)]
    current_snapshot_id: Option<i64>,
    #[serde(default)]
    refs: HashMap<String, RefTarget>,
    #[serde(default, borrow)]
    snapshots: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct RefTarget {
    snapshot_id: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Facts<'a> {
    snapshot_id: i64,
    #[serde(default)]
    parent_snapshot_id: Option<i64>,
    #[serde(default, borrow)]
    summary: Option<&'a RawValue>,
}

/// The `answer` of a `loadTable` with only the current snapshot's chain (up to `chain`
/// snapshots) and the snapshots its refs name; every snapshot's summary value under `key` goes
/// to [`Cut::values`]. `None`: nothing to cut (no more snapshots than are kept), or the answer
/// is not one the lean pass reads; the caller parses it whole.
pub fn cut(answer: &[u8], chain: usize, key: &str) -> Option<Cut> {
    let parsed: Answer<'_> = serde_json::from_slice(answer).ok()?;
    let metadata = parsed.metadata;
    let current = metadata.current_snapshot_id.filter(|id| *id >= 0)?;
    let array = metadata.snapshots?;
    let snapshots: Vec<&RawValue> = serde_json::from_str(array.get()).ok()?;
    let mut facts = Vec::with_capacity(snapshots.len());
    for raw in &snapshots {
        facts.push(serde_json::from_str::<Facts<'_>>(raw.get()).ok()?);
    }
    let parents: HashMap<i64, Option<i64>> = facts
        .iter()
        .map(|f| (f.snapshot_id, f.parent_snapshot_id))
        .collect();
    let mut keep: HashSet<i64> = metadata.refs.values().map(|r| r.snapshot_id).collect();
    let mut at = Some(current);
    for _ in 0..chain {
        let Some(id) = at else { break };
        let Some(parent) = parents.get(&id) else {
            break;
        };
        keep.insert(id);
        at = *parent;
    }
    if !parents.contains_key(&current) || keep.len() >= snapshots.len() {
        return None;
    }
    let mut values = Vec::with_capacity(facts.len());
    for f in &facts {
        if let Some(summary) = f.summary {
            let mut de = serde_json::Deserializer::from_str(summary.get());
            if let Some(value) = Pick(key).deserialize(&mut de).ok()? {
                values.push(value.to_string());
            }
        }
    }
    let start = offset_in(answer, array.get())?;
    let end = start + array.get().len();
    let kept: Vec<&str> = snapshots
        .iter()
        .zip(&facts)
        .filter(|(_, f)| keep.contains(&f.snapshot_id))
        .map(|(raw, _)| raw.get())
        .collect();
    // Sized once: the answer's other parts and the snapshots kept, with their commas.
    let kept_len: usize = kept.iter().map(|raw| raw.len() + 1).sum();
    let mut body = Vec::with_capacity(start + (answer.len() - end) + kept_len + 2);
    body.extend_from_slice(&answer[..start]);
    body.push(b'[');
    for (i, raw) in kept.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(raw.as_bytes());
    }
    body.push(b']');
    body.extend_from_slice(&answer[end..]);
    Some(Cut {
        body,
        values,
        held: snapshots.len(),
        kept: kept.len(),
    })
}

/// Where `part`, a slice borrowed from `whole`, starts in it.
fn offset_in(whole: &[u8], part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some(start)
}

/// The value of one key of a JSON object of strings (a snapshot summary), borrowed; the other
/// values are skipped unread.
struct Pick<'k>(&'k str);

impl<'de> DeserializeSeed<'de> for Pick<'_> {
    type Value = Option<&'de str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Pick<'_> {
    type Value = Option<&'de str>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a snapshot summary")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = map.next_key::<&'de str>()? {
            if key == self.0 {
                found = Some(map.next_value::<&'de str>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A load answer of `n` snapshots on one chain (ids 1..=n, n current), each summary with
    /// `k` = "ids-<id>", and a tag on snapshot `tag`.
    fn answer(n: i64, tag: Option<i64>) -> Vec<u8> {
        let snapshots: Vec<_> = (1..=n)
            .map(|id| {
                json!({"snapshot-id": id, "parent-snapshot-id": (id > 1).then_some(id - 1),
                       "sequence-number": id, "timestamp-ms": 1_000 + id,
                       "manifest-list": format!("s3://b/t/metadata/snap-{id}.avro"),
                       "summary": {"operation": "append", "other": "x\"y", "k": format!("ids-{id}")},
                       "schema-id": 0})
            })
            .collect();
        let mut refs = json!({"main": {"snapshot-id": n, "type": "branch"}});
        if let Some(tag) = tag {
            refs["old"] = json!({"snapshot-id": tag, "type": "tag"});
        }
        serde_json::to_vec(&json!({
            "metadata-location": "s3://b/t/metadata/00009.metadata.json",
            "metadata": {"format-version": 2, "current-snapshot-id": n, "refs": refs,
                         "snapshots": snapshots, "properties": {"p": "v"}},
            "config": {"c": "d"}
        }))
        .expect("json")
    }

    fn ids_of(body: &[u8]) -> Vec<i64> {
        let v: serde_json::Value = serde_json::from_slice(body).expect("the cut answer parses");
        v["metadata"]["snapshots"]
            .as_array()
            .expect("snapshots")
            .iter()
            .map(|s| s["snapshot-id"].as_i64().expect("id"))
            .collect()
    }

    #[test]
    fn keeps_the_current_chain_and_what_refs_name_and_reads_every_summary() {
        let whole = answer(10, Some(2));
        let cut = cut(&whole, 3, "k").expect("a cut");
        assert_eq!(ids_of(&cut.body), [2, 8, 9, 10], "the answer's order");
        assert_eq!((cut.held, cut.kept), (10, 4));
        let expected: Vec<String> = (1..=10).map(|id| format!("ids-{id}")).collect();
        assert_eq!(cut.values, expected, "the snapshots cut too");
        // The rest is as it was.
        let (a, b): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&whole).expect("json"),
            serde_json::from_slice(&cut.body).expect("json"),
        );
        for key in ["metadata-location", "config"] {
            assert_eq!(a[key], b[key]);
        }
        for key in [
            "refs",
            "properties",
            "current-snapshot-id",
            "format-version",
        ] {
            assert_eq!(a["metadata"][key], b["metadata"][key]);
        }
        assert_eq!(a["metadata"]["snapshots"][9], b["metadata"]["snapshots"][3]);
    }

    #[test]
    fn leaves_whole_what_it_would_not_shorten_or_cannot_read() {
        // Nothing to cut.
        assert!(cut(&answer(3, None), 3, "k").is_none());
        assert!(cut(&answer(3, None), 256, "k").is_none());
        // No snapshot yet.
        let empty = serde_json::to_vec(&json!({"metadata": {"snapshots": []}})).expect("json");
        assert!(cut(&empty, 3, "k").is_none());
        // A current snapshot the answer does not hold.
        let mut broken: serde_json::Value =
            serde_json::from_slice(&answer(10, None)).expect("json");
        broken["metadata"]["current-snapshot-id"] = json!(99);
        let broken = serde_json::to_vec(&broken).expect("json");
        assert!(cut(&broken, 3, "k").is_none());
        // A summary key written with an escape cannot be borrowed: parsed whole.
        let escaped = String::from_utf8(answer(10, None))
            .expect("utf8")
            .replace("\"k\":", "\"\\u006b\":");
        assert!(cut(escaped.as_bytes(), 3, "k").is_none());
        // Not a load answer.
        assert!(cut(b"not json", 3, "k").is_none());
    }

    #[test]
    fn a_chain_broken_by_an_expired_parent_stops_there() {
        let mut v: serde_json::Value = serde_json::from_slice(&answer(10, None)).expect("json");
        // Snapshot 8 was expired: 9's parent is gone.
        let snapshots = v["metadata"]["snapshots"].as_array_mut().expect("array");
        snapshots.remove(7);
        let body = serde_json::to_vec(&v).expect("json");
        let cut = cut(&body, 5, "k").expect("a cut");
        assert_eq!(ids_of(&cut.body), [9, 10]);
        assert_eq!(cut.values.len(), 9);
    }
}
