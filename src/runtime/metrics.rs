//! The registrar's metrics: names, kinds, labels and help texts, in one table.
//!
//! The actors emit through the `metrics` crate facade, so an embedding host chooses the recorder
//! (the standalone runner installs a Prometheus one, see `ops::http`, feature `runner`). Call
//! [`describe`] once after installing a recorder: it gives every metric its help text and unit.
//! Names follow Prometheus conventions: a `thadam_iceberg_` prefix, `_total` on counters, the
//! unit (`_seconds`, `_bytes`) last before it; per-table series carry a `table` label
//! (`namespace.dataset`).

use ::metrics::Unit;

/// What kind of series a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric, as documented.
#[derive(Debug, Clone, Copy)]
pub struct MetricDoc {
    pub name: &'static str,
    pub kind: Kind,
    /// Label names, in the order docs/metrics.md lists them.
    pub labels: &'static [&'static str],
    pub unit: Option<Unit>,
    pub help: &'static str,
}

const fn doc(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    unit: Option<Unit>,
    help: &'static str,
) -> MetricDoc {
    MetricDoc {
        name,
        kind,
        labels,
        unit,
        help,
    }
}

const TABLE: &[&str] = &["table"];
const NONE: &[&str] = &[];

/// Every metric the registrar emits. The tests below keep this list, the actors and
/// docs/metrics.md in step.
pub const METRICS: &[MetricDoc] = &[
    doc(
        "thadam_iceberg_segments_registered_total",
        Kind::Counter,
        TABLE,
        None,
        "Segments of this node's log now in the table: appended by this process (a commit whose \
         answer was lost included, once found landed), or (in a fleet) carried into it by another \
         node; skipped duplicates not included. Summed over a fleet's \
         nodes it is what the table took (a node learns of carried segments at its next attempt).",
    ),
    doc(
        "thadam_iceberg_data_files_registered_total",
        Kind::Counter,
        TABLE,
        None,
        "Data files of this node's segments now in the table (one per segment), whoever committed \
         them, as segments_registered_total.",
    ),
    doc(
        "thadam_iceberg_rows_registered_total",
        Kind::Counter,
        TABLE,
        None,
        "Rows in the data files of segments_registered_total (from the Parquet footers; for \
         segments another node carried, from their segment records).",
    ),
    doc(
        "thadam_iceberg_registered_bytes_total",
        Kind::Counter,
        TABLE,
        Some(Unit::Bytes),
        "Size of the data files of segments_registered_total.",
    ),
    doc(
        "thadam_iceberg_commits_total",
        Kind::Counter,
        &["table", "outcome"],
        None,
        "Append commits by outcome: ok, conflict (409, rebuilt and retried), unknown_state \
         (5xx or lost answer, reconciled), failed (not applied, retried), fatal.",
    ),
    doc(
        "thadam_iceberg_commit_answers_total",
        Kind::Counter,
        &["table", "how"],
        None,
        "Successful commits by how the catalog's answer was taken: confirmed (the table as built \
         from the commit's own updates, checked against the answer without parsing its history) \
         or parsed (in full: the answer differed, e.g. another writer's change, or the commit was \
         not an append).",
    ),
    doc(
        "thadam_iceberg_commit_duration_seconds",
        Kind::Histogram,
        TABLE,
        Some(Unit::Seconds),
        "Time from preparing an append to its successful commit, retries included.",
    ),
    doc(
        "thadam_iceberg_commit_phase_seconds",
        Kind::Histogram,
        &["table", "phase"],
        Some(Unit::Seconds),
        "Per append attempt, how long each phase of its window took: load (the table, when the \
         attempt loads it first), build (from the table held to the request: what the table \
         lacks, schema changes, the fleet's intents, manifests and merges) and answer (the \
         catalog's commit round trip). Which phase makes windows outlast a fleet's slots.",
    ),
    doc(
        "thadam_iceberg_commit_window_seconds",
        Kind::Histogram,
        TABLE,
        Some(Unit::Seconds),
        "Per append attempt, from taking the table it is built on (a load, or the version held) \
         to sending the commit: what another writer's commit must land inside to make it \
         conflict. Flat whatever the table's history.",
    ),
    doc(
        "thadam_iceberg_commit_interval_seconds",
        Kind::Gauge,
        TABLE,
        Some(Unit::Seconds),
        "The table's adaptive commit interval: widened by conflicts (other writers commit to the \
         table), narrowed by clean commits; 0 when nobody else writes. commit.min_interval stays \
         the floor.",
    ),
    doc(
        "thadam_iceberg_attempt_files_deleted_total",
        Kind::Counter,
        &["table", "outcome"],
        None,
        "Manifests and manifest lists written by append attempts that no commit references (a \
         refused attempt, a replaced or unused manifest), deleted (outcome deleted) or not \
         (failed: left as an orphan). Never after an unknown outcome; never data files.",
    ),
    doc(
        "thadam_iceberg_schema_changes_total",
        Kind::Counter,
        TABLE,
        None,
        "Schema evolutions committed to the table (field additions, renames, promotions).",
    ),
    doc(
        "thadam_iceberg_footer_reads_total",
        Kind::Counter,
        NONE,
        None,
        "Parquet footers read from the bucket.",
    ),
    doc(
        "thadam_iceberg_footer_read_bytes_total",
        Kind::Counter,
        NONE,
        Some(Unit::Bytes),
        "Bytes fetched from the bucket to read Parquet footers.",
    ),
    doc(
        "thadam_iceberg_footer_read_duration_seconds",
        Kind::Histogram,
        NONE,
        Some(Unit::Seconds),
        "Time to read one footer, retries included.",
    ),
    doc(
        "thadam_iceberg_store_requests_total",
        Kind::Counter,
        &["kind"],
        None,
        "S3 requests sent to the bucket (footer reads, table metadata, manifests, a fleet's \
         intents, deletes), each attempt counted as it goes on the wire, retries included, by \
         kind as S3 bills them: put (PutObject, and a multipart upload's create, parts and \
         complete), copy, list (one page of up to 1,000 keys), get, head, delete (DeleteObject, \
         a DeleteObjects of up to 1,000 keys, a multipart abort), other.",
    ),
    doc(
        "thadam_iceberg_catalog_requests_total",
        Kind::Counter,
        &["kind"],
        None,
        "Requests sent to the REST catalog, each attempt counted, retries included, by kind: \
         load (GET of a table), commit (POST to a table: an append or a schema change), config \
         (GET /v1/config), other (namespaces, creations, existence checks, the token exchange).",
    ),
    doc(
        "thadam_iceberg_segments_quarantined_total",
        Kind::Counter,
        &["table", "code"],
        None,
        "Segments quarantined (on_bad_segment: quarantine), by the error code about their file.",
    ),
    doc(
        "thadam_iceberg_segments_in_quarantine",
        Kind::Gauge,
        NONE,
        None,
        "Open entries of the quarantine file: quarantined and neither registered nor discarded.",
    ),
    doc(
        "thadam_iceberg_table_stopped",
        Kind::Gauge,
        &["table"],
        None,
        "1 when that table alone was stopped by an error about it (on_bad_segment: quarantine).",
    ),
    doc(
        "thadam_iceberg_backlog_segments",
        Kind::Gauge,
        TABLE,
        None,
        "Segments uploaded and seen by the registrar but not yet registered; 0 when caught up.",
    ),
    doc(
        "thadam_iceberg_segments_in_memory",
        Kind::Gauge,
        NONE,
        None,
        "Segments taken from the feed and held in memory (at most memory.segments); the feed is read only as fast as they leave.",
    ),
    doc(
        "thadam_iceberg_registration_lag_seconds",
        Kind::Histogram,
        TABLE,
        Some(Unit::Seconds),
        "Per segment, time from its Uploaded record to the commit that registered it.",
    ),
    doc(
        "thadam_iceberg_duplicates_skipped_total",
        Kind::Counter,
        TABLE,
        None,
        "Segments skipped because the table already had them (restart, replay, another writer).",
    ),
    doc(
        "thadam_iceberg_watermark_diverged_total",
        Kind::Counter,
        TABLE,
        None,
        "Watermarks found not to match the segment catalog being read (restored from a backup, cloned, rewritten): not trusted; segments were checked by id and against the live data files.",
    ),
    doc(
        "thadam_iceberg_token_exchanges_total",
        Kind::Counter,
        NONE,
        None,
        "OAuth2 client-credentials exchanges at the token endpoint (catalog_credential).",
    ),
    doc(
        "thadam_iceberg_token_refreshes_total",
        Kind::Counter,
        &["reason"],
        None,
        "OAuth2 access-token renewals (catalog_credential): reason proactive (before expiry) \
         or rejected (after a 401).",
    ),
    doc(
        "thadam_iceberg_retries_total",
        Kind::Counter,
        &["op", "cause"],
        None,
        "Failures that were retried, by operation (config, load, namespace, create, \
         schema_commit, append, token, footer) and cause (status_408, status_429, status_500, \
         status_502, status_503, status_504, status_5xx, connect, timeout, lost_response, \
         token, other). A steady rise means the catalog, the token endpoint or \
         the bucket is failing.",
    ),
    doc(
        "thadam_iceberg_catalog_server_errors_total",
        Kind::Counter,
        &["op"],
        None,
        "Catalog answers with a server error (500, or a 5xx without a meaning of its own) to \
         requests other than commits (load, create, config), each logged as an ERROR and \
         making /readyz answer 503 while it lasts; retried with backoff.",
    ),
    doc(
        "thadam_iceberg_snapshot_retention_refused_total",
        Kind::Counter,
        &["table"],
        None,
        "The catalog refused remove-snapshots (snapshot_retention) and the same append without \
         the removal landed: retention is off for that table from then on.",
    ),
    doc(
        "thadam_iceberg_fatal_errors_total",
        Kind::Counter,
        &["code"],
        None,
        "Fatal errors that stopped the service, by error code.",
    ),
    doc(
        "thadam_iceberg_waiting_since_timestamp_seconds",
        Kind::Gauge,
        TABLE,
        Some(Unit::Seconds),
        "Unix time since which segments have been waiting for the table with no commit landing \
         (0 while nothing waits): time() minus it is how long the table has been stalled, also \
         for a node that never committed.",
    ),
    doc(
        "thadam_iceberg_last_commit_timestamp_seconds",
        Kind::Gauge,
        TABLE,
        Some(Unit::Seconds),
        "Unix time of the last successful append commit to the table.",
    ),
    doc(
        "thadam_iceberg_intents_published_total",
        Kind::Counter,
        TABLE,
        None,
        "Intents this node published for its fleet to carry: batches that waited for its turn \
         on a table registrars take turns on, by form: files (the intent holds its data files) \
         or manifest (too large for that: a manifest in the table's metadata holds them).",
    ),
    doc(
        "thadam_iceberg_intents_publish_unknown_total",
        Kind::Counter,
        TABLE,
        None,
        "Intent PUTs whose outcome is unknown (an error after the store may have taken it): held \
         as published, so that the manifest it names outlives any commit that may take it.",
    ),
    doc(
        "thadam_iceberg_intents_carried_total",
        Kind::Counter,
        &["table", "whose"],
        None,
        "Intents consumed by this node's landed commits: other nodes' it carried (whose other), \
         or its own whose segments it registered itself (whose own).",
    ),
    doc(
        "thadam_iceberg_segments_carried_total",
        Kind::Counter,
        TABLE,
        None,
        "Segments of other nodes' intents that this node's landed commits carried (a fleet's \
         committer): not in its segments_registered_total, which counts its own log's.",
    ),
    doc(
        "thadam_iceberg_segments_carried_by_others_total",
        Kind::Counter,
        TABLE,
        None,
        "Segments of this node that another node of its fleet committed, carrying its intents \
         (also counted in its segments_registered_total).",
    ),
    doc(
        "thadam_iceberg_intents_unreadable_total",
        Kind::Counter,
        TABLE,
        None,
        "Reads of an intent's manifest that failed: the intent is not carried (nothing is \
         committed that was not read) and waits; its publisher commits it after its fallback.",
    ),
    doc(
        "thadam_iceberg_intents_delete_failed_total",
        Kind::Counter,
        TABLE,
        None,
        "Intents and intents' manifests whose delete failed; each is tried again with the next \
         deletes (an intent left behind is found done and never carried).",
    ),
    doc(
        "thadam_iceberg_intents_aged_out_total",
        Kind::Counter,
        TABLE,
        None,
        "Intents of this release's formats that can never be carried (malformed, foreign, forged, \
         unsigned), deleted an hour after the store took them.",
    ),
    doc(
        "thadam_iceberg_intent_age_seconds",
        Kind::Histogram,
        TABLE,
        Some(Unit::Seconds),
        "Per intent of another node this node carried: from its publication (the publisher's \
         clock) to the commit that carried it.",
    ),
    doc(
        "thadam_iceberg_intents_read_total",
        Kind::Counter,
        &["table", "when"],
        None,
        "Other nodes' intents read (each once), by when: in_cycle (a commit waited for it) or \
         during_answer (read by the fleet's committer while the catalog answered its commit).",
    ),
    doc(
        "thadam_iceberg_intents_skipped_total",
        Kind::Counter,
        &["table", "reason"],
        None,
        "Intents listed that can never be carried, by reason: too_large, malformed, foreign \
         (another table, another url, a manifest outside the table's metadata), forged (a \
         watermark of another log than its own, an id that is not its file's key's), unsigned (no \
         valid tag of commit.intents_key), newer_format (a newer release's). Never committed.",
    ),
    doc(
        "thadam_iceberg_build_info",
        Kind::Gauge,
        &["version", "commit"],
        None,
        "Always 1: the registrar build that runs, by crate version and git commit (unknown when \
         built outside a git checkout); set when a registrar starts.",
    ),
];

/// Registers the help text and unit of every metric with the installed recorder. Call once,
/// after installing the recorder (descriptions go to the recorder installed at the time).
pub fn describe() {
    for m in METRICS {
        match (m.kind, m.unit) {
            (Kind::Counter, Some(unit)) => ::metrics::describe_counter!(m.name, unit, m.help),
            (Kind::Counter, None) => ::metrics::describe_counter!(m.name, m.help),
            (Kind::Gauge, Some(unit)) => ::metrics::describe_gauge!(m.name, unit, m.help),
            (Kind::Gauge, None) => ::metrics::describe_gauge!(m.name, m.help),
            (Kind::Histogram, Some(unit)) => ::metrics::describe_histogram!(m.name, unit, m.help),
            (Kind::Histogram, None) => ::metrics::describe_histogram!(m.name, m.help),
        }
    }
}

/// Histogram bucket upper bounds, in seconds, by metric. Latencies of a metadata-only commit and
/// of two ranged reads are sub-second when healthy; registration lag spans from a second (live)
/// to hours (a backlog after an outage).
pub fn histogram_buckets(name: &str) -> &'static [f64] {
    match name {
        "thadam_iceberg_registration_lag_seconds" => &[
            0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 14400.0,
            86400.0,
        ],
        "thadam_iceberg_footer_read_duration_seconds" => &[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
        ],
        // Commit duration, and any histogram added later.
        _ => &[
            0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `thadam_iceberg_*` name the library's sources mention, found by reading them
    /// (this file excepted).
    fn emitted() -> Vec<String> {
        fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
            let entries = std::fs::read_dir(dir).expect("read src");
            for entry in entries {
                let path = entry.expect("dir entry").path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && !path.ends_with("src/runtime/metrics.rs")
                {
                    let source = std::fs::read_to_string(&path).expect("read source");
                    for part in source.split("\"thadam_iceberg_").skip(1) {
                        if let Some(end) = part.find('"') {
                            out.push(format!("thadam_iceberg_{}", &part[..end]));
                        }
                    }
                }
            }
        }
        let mut names = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut names,
        );
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn every_emitted_metric_is_described_and_every_described_one_is_emitted() {
        let described: Vec<&str> = METRICS.iter().map(|m| m.name).collect();
        for name in emitted() {
            assert!(
                described.contains(&name.as_str()),
                "{name} has no MetricDoc"
            );
        }
        let emitted = emitted();
        for name in &described {
            assert!(
                emitted.iter().any(|e| e == name),
                "{name} is described but nothing emits it"
            );
        }
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        for m in METRICS {
            assert!(m.name.starts_with("thadam_iceberg_"), "{}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                m.name
            );
            let base = m.name.trim_end_matches("_total");
            match m.unit {
                Some(Unit::Seconds) => assert!(base.ends_with("_seconds"), "{}", m.name),
                Some(Unit::Bytes) => assert!(base.ends_with("_bytes"), "{}", m.name),
                _ => assert!(
                    !base.ends_with("_seconds") && !base.ends_with("_bytes"),
                    "{} has a unit suffix but no unit",
                    m.name
                ),
            }
        }
    }

    #[test]
    fn the_metrics_page_lists_every_metric() {
        let page = include_str!("../../docs/metrics.md");
        for m in METRICS {
            assert!(
                page.contains(&format!("`{}`", m.name)),
                "docs/metrics.md does not list {}",
                m.name
            );
        }
    }

    #[test]
    fn buckets_ascend() {
        for m in METRICS.iter().filter(|m| m.kind == Kind::Histogram) {
            let b = histogram_buckets(m.name);
            assert!(b.windows(2).all(|w| w[0] < w[1]), "{}", m.name);
        }
    }
}
