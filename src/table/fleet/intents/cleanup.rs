//! Deleting what the fleet's intents leave behind: intents consumed or done, the manifests of
//! `thadam-intent/1` intents once no snapshot can name them, and this release's unusable
//! intents once they are old. Deletes run in the background, one batch at a time; what fails is
//! kept (bounded) and tried again with the next batch, and counted
//! (`thadam_iceberg_intents_delete_failed_total`): never only a debug line.

use std::sync::Arc;

use futures::StreamExt;
use iceberg::io::FileIO;
use iceberg::spec::TableMetadata;
use object_store::ObjectStore;
use object_store::path::Path as ObjectPath;

use super::record::Intent;
use crate::table::committed::{SegmentId, lists_id};
use crate::table::summary_keys::{INTENTS_COPIED, SEGMENT_IDS};

/// The most objects waiting for their delete (failed, or queued behind the batch in flight):
/// past it, the newest are dropped (an intent left is found done and queued again at a later
/// listing).
const WAITING_LIMIT: usize = 4_096;
/// How many deletes go at once when the store refuses the bulk call.
const DELETE_CONCURRENCY: usize = 8;

/// Objects to delete: intent keys (in the store of the fleet's `url`) and manifests (through the
/// table's FileIO).
#[derive(Debug, Default)]
pub(super) struct Deletes {
    pub keys: Vec<ObjectPath>,
    pub manifests: Vec<String>,
}

impl Deletes {
    pub(super) fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.manifests.is_empty()
    }

    /// Adds `other`'s objects, up to [`WAITING_LIMIT`] of each kind.
    pub(super) fn extend(&mut self, other: Deletes) {
        let room = WAITING_LIMIT.saturating_sub(self.keys.len());
        self.keys.extend(other.keys.into_iter().take(room));
        let room = WAITING_LIMIT.saturating_sub(self.manifests.len());
        self.manifests
            .extend(other.manifests.into_iter().take(room));
    }
}

/// Deletes `deletes`; returns what could not be deleted (a missing object is deleted).
pub(super) async fn run(
    store: Arc<dyn ObjectStore>,
    io: FileIO,
    deletes: Deletes,
    table: String,
) -> Deletes {
    let mut failed = Deletes::default();
    if !deletes.keys.is_empty()
        && let Err(e) = crate::io::store::delete_in_bulk(&store, &deletes.keys).await
    {
        tracing::debug!(
            table,
            keys = deletes.keys.len(),
            "could not delete intents in bulk ({e}); deleting them one by one"
        );
        let mut one_by_one = futures::stream::iter(deletes.keys)
            .map(|key| {
                let store = Arc::clone(&store);
                async move {
                    match store.delete(&key).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => None,
                        Err(e) => {
                            tracing::debug!(key = %key, "could not delete an intent: {e}");
                            Some(key)
                        }
                    }
                }
            })
            .buffer_unordered(DELETE_CONCURRENCY);
        while let Some(outcome) = one_by_one.next().await {
            failed.keys.extend(outcome);
        }
    }
    if !deletes.manifests.is_empty()
        && io
            .delete_stream(futures::stream::iter(deletes.manifests.clone()).boxed())
            .await
            .is_err()
    {
        let mut one_by_one = futures::stream::iter(deletes.manifests)
            .map(|path| {
                let io = io.clone();
                async move {
                    match io.delete(&path).await {
                        Ok(()) => None,
                        Err(e) => {
                            tracing::debug!(path, "could not delete an intent's manifest: {e}");
                            Some(path)
                        }
                    }
                }
            })
            .buffer_unordered(DELETE_CONCURRENCY);
        while let Some(outcome) = one_by_one.next().await {
            failed.manifests.extend(outcome);
        }
    }
    let n = failed.keys.len() + failed.manifests.len();
    if n > 0 {
        metrics::counter!("thadam_iceberg_intents_delete_failed_total", "table" => table.clone())
            .increment(n as u64);
        tracing::warn!(
            table,
            intents = failed.keys.len(),
            manifests = failed.manifests.len(),
            "could not delete what the fleet's intents left; trying again with the next deletes"
        );
    }
    failed
}

/// Whether the manifest of a done `thadam-intent/1` intent whose segments are `ids` may be
/// deleted: every snapshot of `metadata` that lists one of them took intents by copy
/// ([`INTENTS_COPIED`]), and at least one does. Only the snapshot that consumed an intent (and
/// those after it, whose manifest lists carry its entries on) could name its manifest, and such
/// a snapshot holds the intent's ids. A snapshot of the releases before may have named it; one
/// that was expired cannot be asked: the manifest stays then (an orphan, never a broken table).
pub(super) fn consumed_by_copy(metadata: &TableMetadata, ids: &[SegmentId]) -> bool {
    let mut found = false;
    for snapshot in metadata.snapshots() {
        let summary = &snapshot.summary().additional_properties;
        let Some(listed) = summary.get(SEGMENT_IDS) else {
            continue;
        };
        if ids.iter().any(|id| lists_id(listed, id)) {
            if !summary.contains_key(INTENTS_COPIED) {
                return false;
            }
            found = true;
        }
    }
    found
}

/// The deletes of `done` intents (key and intent): their keys, and their manifests where no
/// snapshot can name them. Only the first `max_checks` that name a manifest are checked (each
/// check reads every snapshot summary); the others that do are left (key and manifest) for a
/// later commit.
pub(super) fn done_deletes<'a>(
    metadata: &TableMetadata,
    done: impl Iterator<Item = (&'a ObjectPath, &'a Intent)>,
    max_checks: usize,
) -> Deletes {
    let mut deletes = Deletes::default();
    let mut checks = 0;
    for (key, intent) in done {
        if let Some(path) = intent.record.manifest_path() {
            if checks == max_checks {
                continue;
            }
            checks += 1;
            if consumed_by_copy(metadata, &intent.ids) {
                deletes.manifests.push(path.to_string());
            }
        }
        deletes.keys.push(key.clone());
    }
    deletes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_manifest_is_deleted_only_where_every_snapshot_holding_its_segments_copied() {
        let ids = |keys: &[&str]| crate::table::committed::encode_ids(keys.iter().copied());
        let a = [SegmentId::of("a1"), SegmentId::of("a2")];
        let copied = |keys: &[&str]| json!({ SEGMENT_IDS: ids(keys), INTENTS_COPIED: "1" });
        let named = |keys: &[&str]| json!({ SEGMENT_IDS: ids(keys) });
        let m = crate::testing::metadata_with(&[(named(&["x"]), 1), (copied(&["a1", "a2"]), 2)]);
        assert!(consumed_by_copy(&m, &a));
        // Part of it registered by a node of the releases before: it may name the manifest.
        let m = crate::testing::metadata_with(&[(named(&["a1"]), 1), (copied(&["a2"]), 2)]);
        assert!(!consumed_by_copy(&m, &a));
        // Its snapshot expired: nothing can tell.
        let m = crate::testing::metadata_with(&[(copied(&["x"]), 1)]);
        assert!(!consumed_by_copy(&m, &a));
    }

    #[tokio::test]
    async fn what_cannot_be_deleted_is_kept_for_the_next_batch() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let keys: Vec<ObjectPath> = (0..3)
            .map(|i| ObjectPath::from(format!("_thadam-intents/u/a-{i}.json")))
            .collect();
        for key in &keys {
            store
                .put(key, bytes::Bytes::from_static(b"{}").into())
                .await
                .expect("put");
        }
        let mut doomed = keys.clone();
        doomed.push(ObjectPath::from("_thadam-intents/u/gone.json"));
        let io = FileIO::new_with_memory();
        let failed = run(
            Arc::clone(&store),
            io,
            Deletes {
                keys: doomed,
                manifests: Vec::new(),
            },
            "t".into(),
        )
        .await;
        assert!(failed.is_empty());
        let left: Vec<_> = store.list(None).collect::<Vec<_>>().await;
        assert!(left.is_empty());
    }
}
