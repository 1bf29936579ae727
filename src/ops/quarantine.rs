//! The operator's quarantine commands (`examples/registrar.rs --quarantine list | retry |
//! discard`): they read and append to the quarantine file (see `table::quarantine`), safe while
//! a registrar runs (every line is one appended write; the registrar polls for them).

use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::table::quarantine::{Line, QuarantineStore, Resolution, now_ms};

/// Which open entries a `retry` applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Key(String),
    Code(String),
    All,
}

/// One line per entry: open ones first (`quarantined` or `retry requested`), then the closed.
pub fn list(path: &Path) -> Result<String> {
    let state = QuarantineStore::open(path)?.state();
    let mut out = String::new();
    let mut open = 0;
    for e in state.open() {
        open += 1;
        let _ = writeln!(
            out,
            "{} seq {} catalog {} dataset {} key {} code {} at_ms {}: {}{}",
            if e.retry {
                "retry-requested"
            } else {
                "quarantined"
            },
            e.segment.seq,
            e.segment.catalog_id.as_deref().unwrap_or("-"),
            e.segment.dataset,
            e.segment.object_key,
            e.code,
            e.at_ms,
            e.message,
            if e.retry {
                " (a retry is requested)"
            } else {
                ""
            },
        );
    }
    for e in state.entries().filter(|e| !e.is_open()) {
        let how = match &e.resolution {
            Some(Resolution::Discarded { at_ms, reason }) => {
                format!("discarded at_ms {at_ms}: {reason}")
            }
            Some(Resolution::Registered { at_ms, seq }) => {
                format!("registered from seq {seq} at_ms {at_ms}")
            }
            None => continue,
        };
        let _ = writeln!(
            out,
            "closed dataset {} key {}: {how}",
            e.segment.dataset, e.segment.object_key
        );
    }
    let _ = writeln!(out, "{open} segment(s) in quarantine ({})", path.display());
    Ok(out)
}

/// Marks the open entries `selector` names for retry; returns how many.
pub fn retry(path: &Path, selector: &Selector) -> Result<usize> {
    let store = QuarantineStore::open(path)?;
    let chosen: Vec<(String, String)> = store
        .state()
        .open()
        .filter(|e| match selector {
            Selector::Key(k) => &e.segment.object_key == k,
            Selector::Code(c) => &e.code == c,
            Selector::All => true,
        })
        .map(|e| (e.segment.dataset.clone(), e.segment.object_key.clone()))
        .collect();
    for (dataset, key) in &chosen {
        store.append(&Line::Retry {
            at_ms: now_ms(),
            dataset: dataset.clone(),
            key: key.clone(),
        })?;
    }
    Ok(chosen.len())
}

/// Discards the open entries of `key` with `reason` (recorded with the time): they are decided,
/// never registered. Returns how many.
pub fn discard(path: &Path, key: &str, reason: &str) -> Result<usize> {
    if reason.trim().is_empty() {
        return Err(Error::config_invalid(
            "--quarantine discard needs --reason \"...\" (why the segment is given up)",
        ));
    }
    let store = QuarantineStore::open(path)?;
    let chosen: Vec<String> = store
        .state()
        .open()
        .filter(|e| e.segment.object_key == key)
        .map(|e| e.segment.dataset.clone())
        .collect();
    for dataset in &chosen {
        store.append(&Line::Discarded {
            at_ms: now_ms(),
            dataset: dataset.clone(),
            key: key.to_string(),
            reason: reason.to_string(),
        })?;
    }
    Ok(chosen.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::segment::UploadedSegment;

    fn quarantine(store: &QuarantineStore, seq: u64, key: &str, code: &str) {
        store
            .append(&Line::Quarantined {
                at_ms: 1,
                segment: UploadedSegment {
                    seq,
                    dataset: "d".into(),
                    segment_id: format!("s{seq}"),
                    object_key: key.into(),
                    file_size: 10,
                    row_count: 1,
                    uploaded_at_ms: 0,
                    catalog_id: None,
                },
                code: code.into(),
                message: "m".into(),
            })
            .expect("append");
    }

    #[test]
    fn retry_and_discard_select_open_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("q");
        let store = QuarantineStore::open(&path).expect("open");
        quarantine(&store, 5, "a", "sink.iceberg_footer_invalid");
        quarantine(&store, 6, "b", "sink.iceberg_object_missing");
        quarantine(&store, 7, "c", "sink.iceberg_object_missing");
        assert_eq!(
            retry(&path, &Selector::Code("sink.iceberg_object_missing".into())).expect("retry"),
            2
        );
        assert_eq!(retry(&path, &Selector::Key("zzz".into())).expect("none"), 0);
        assert!(discard(&path, "a", " ").is_err(), "a reason is required");
        assert_eq!(discard(&path, "a", "lost for good").expect("discard"), 1);
        let text = list(&path).expect("list");
        assert!(text.contains("retry-requested seq 6"), "{text}");
        assert!(
            text.contains("closed dataset d key a: discarded at_ms"),
            "{text}"
        );
        assert!(text.contains("lost for good"), "{text}");
        assert!(text.contains("2 segment(s) in quarantine"), "{text}");
        assert_eq!(retry(&path, &Selector::All).expect("all"), 2);
    }
}
