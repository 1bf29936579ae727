//! The one place the committed set reads manifests: the live data files of a table whose log
//! diverged from its watermark.

use std::collections::HashSet;

use super::ids::SegmentId;

/// The ids of the object keys of `table`'s live data files (those under `prefix`,
/// `s3://bucket/`), from the current snapshot's manifests.
pub(crate) async fn live_file_ids(
    table: &iceberg::table::Table,
    prefix: &str,
) -> crate::error::Result<HashSet<SegmentId>> {
    let mut ids = HashSet::new();
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(ids);
    };
    let io = |e: iceberg::Error| {
        crate::error::Error::unavailable(format!("reading manifests failed: {e}"))
    };
    let list = table
        .manifest_list_reader(snapshot)
        .load()
        .await
        .map_err(io)?;
    for manifest_file in list.entries() {
        let manifest = manifest_file
            .load_manifest(table.file_io())
            .await
            .map_err(io)?;
        for entry in manifest.entries() {
            if entry.is_alive()
                && let Some(key) = entry.data_file().file_path().strip_prefix(prefix)
            {
                ids.insert(SegmentId::of(key));
            }
        }
    }
    Ok(ids)
}
