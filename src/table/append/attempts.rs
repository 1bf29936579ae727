//! What the attempts of one batch's append have written, kept from one attempt to the next.
//!
//! An attempt refused with a 409 is rebuilt on the table as the other writer left it. Redoing
//! everything (the new manifest, the merge of older manifests) would make every attempt cost
//! as much as the first, and on a table another writer commits to every second a merge over its
//! many small manifests never finishes inside the window: the registrar starved. So, as Java's
//! `SnapshotProducer` and `ManifestMergeManager` do, a batch keeps:
//!
//! - **one snapshot id** for all its attempts (the manifests it wrote name it);
//! - **the manifest of its new files**, keyed by the files and the schema and spec they were
//!   described under: reused while the batch is the same, rewritten (one small file) when
//!   segments joined or left it;
//! - **merged manifests, keyed by their inputs**: a merge rewrites older manifests only (never
//!   the batch's own files, so a batch that grows between attempts keeps its merges), and is
//!   reused by every later attempt whose table still lists all of its inputs; manifests other
//!   writers added meanwhile are carried as they are.
//!
//! Across batches it keeps the last manifest list written ([`LastList`]): the next build on the
//! snapshot that list made reads its manifests from memory.
//!
//! It also knows which of those files may be deleted: a file is **tainted** once a commit that
//! references it was sent and not refused, because a commit whose outcome is unknown (5xx, a lost
//! answer, a stop while in flight) may have landed. Untainted files that no attempt will reuse
//! (a refused attempt's manifest list, a replaced new manifest, a merge whose inputs are gone,
//! everything left when the batch lands or is given up) are handed out by [`AppendAttempts::take_stale`]
//! for the committer to delete. Data files are never among them.

use std::collections::HashMap;

use iceberg::spec::{ManifestFile, TableMetadata};
use uuid::Uuid;

use super::manifest_list::LastList;

/// What the new manifest was written for: the data files (paths, in order) and the schema and
/// partition spec they were described under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewFilesKey {
    pub(crate) paths: Vec<String>,
    pub(crate) schema_id: i32,
    pub(crate) spec_id: i32,
}

/// A merged manifest and what it was merged from.
#[derive(Debug, Clone)]
pub(crate) struct CachedMerge {
    /// The paths of the manifests it replaces.
    pub(crate) inputs: Vec<String>,
    /// The schema it was written under.
    pub(crate) schema_id: i32,
    pub(crate) manifest: ManifestFile,
}

/// The attempts of one batch's append (see the module docs).
#[derive(Debug)]
pub struct AppendAttempts {
    snapshot_id: Option<i64>,
    /// One UUID for the file names of this batch (`{uuid}-m{n}.avro`, `snap-{id}-{attempt}-{uuid}.avro`).
    names: Uuid,
    counter: u64,
    attempts: u32,
    pub(crate) new_manifest: Option<(NewFilesKey, ManifestFile)>,
    pub(crate) merges: Vec<CachedMerge>,
    /// Files written by this batch and not handed out for deletion: path → tainted.
    written: HashMap<String, bool>,
    /// Files no attempt will reference again, not tainted: to delete.
    stale: Vec<String>,
    /// The last manifest list written, by this batch or an earlier one (never reset).
    pub(crate) last_list: LastList,
}

impl Default for AppendAttempts {
    fn default() -> Self {
        AppendAttempts {
            snapshot_id: None,
            names: Uuid::new_v4(),
            counter: 0,
            attempts: 0,
            new_manifest: None,
            merges: Vec::new(),
            written: HashMap::new(),
            stale: Vec::new(),
            last_list: LastList::default(),
        }
    }
}

impl AppendAttempts {
    /// Whether this build may plan new merges: only the batch's first. Later attempts reuse the
    /// first one's merges and carry whatever appeared since, so that their cost does not grow
    /// with other writers' commits.
    pub(crate) fn may_merge(&self) -> bool {
        self.merges.is_empty() && self.attempts == 0
    }

    /// The batch's snapshot id on `metadata`: kept across attempts; a new one (and every cached
    /// manifest dropped, since they name the old one) in the unlikely case that the table
    /// already has a snapshot with it.
    pub(crate) fn snapshot_id(&mut self, metadata: &TableMetadata) -> i64 {
        if let Some(id) = self.snapshot_id {
            if !metadata.snapshots().any(|s| s.snapshot_id() == id) {
                return id;
            }
            self.drop_cached();
        }
        let id = unique_snapshot_id(metadata);
        self.snapshot_id = Some(id);
        id
    }

    /// A fresh manifest path under `root` (`{location}/metadata`).
    pub(crate) fn manifest_path(&mut self, root: &str) -> String {
        let path = format!("{root}/{}-m{}.avro", self.names, self.counter);
        self.counter += 1;
        path
    }

    /// The manifest list path of the attempt being built (one per attempt, as Java names them).
    pub(crate) fn manifest_list_path(&self, root: &str, snapshot_id: i64) -> String {
        format!(
            "{root}/snap-{snapshot_id}-{}-{}.avro",
            self.attempts, self.names
        )
    }

    /// Notes a file this batch wrote.
    pub(crate) fn wrote(&mut self, path: &str) {
        self.written.insert(path.to_string(), false);
    }

    /// Counts a built attempt.
    pub(crate) fn built(&mut self) {
        self.attempts += 1;
    }

    /// A file no attempt will reference again (replaced or invalidated): to delete unless a
    /// commit that may have landed references it.
    pub(crate) fn retire(&mut self, path: &str) {
        if let Some(tainted) = self.written.remove(path)
            && !tainted
        {
            self.stale.push(path.to_string());
        }
    }

    /// A commit referencing `files` is being sent: they may be in the table from now on.
    pub(crate) fn sent(&mut self, files: &[String]) {
        for f in files {
            if let Some(tainted) = self.written.get_mut(f) {
                *tainted = true;
            }
        }
    }

    /// The catalog refused that commit for certain (409, or a 4xx): nothing of it is in the
    /// table. Its manifest list is never reused (the next attempt has another parent); its
    /// manifests may be.
    pub(crate) fn refused(&mut self, files: &[String], manifest_list: &str) {
        for f in files {
            if let Some(tainted) = self.written.get_mut(f) {
                *tainted = false;
            }
        }
        self.retire(manifest_list);
    }

    /// That commit's outcome is unknown: its files stay (they may be the table's now), and the
    /// next attempt starts afresh with a new snapshot id, so it never shares a file with it.
    pub(crate) fn unknown(&mut self) {
        self.drop_cached();
        self.snapshot_id = None;
    }

    /// The batch landed with `files`, or (`None`) it is given up: every other file it wrote
    /// that no sent commit references becomes stale. The attempts are over.
    pub(crate) fn finish(&mut self, landed: Option<&[String]>) {
        let keep: Vec<String> = landed.map(<[String]>::to_vec).unwrap_or_default();
        let written: Vec<(String, bool)> = self.written.drain().collect();
        for (path, tainted) in written {
            if !tainted && !keep.contains(&path) {
                self.stale.push(path);
            }
        }
        self.new_manifest = None;
        self.merges.clear();
        self.snapshot_id = None;
        self.attempts = 0;
        self.names = Uuid::new_v4();
        self.counter = 0;
    }

    /// The files to delete now (each handed out once).
    pub(crate) fn take_stale(&mut self) -> Vec<String> {
        std::mem::take(&mut self.stale)
    }

    /// Whether any file is waiting to be deleted or may still be reused.
    pub(crate) fn is_idle(&self) -> bool {
        self.written.is_empty() && self.stale.is_empty()
    }

    /// Forgets the cached manifests; untainted ones become stale.
    fn drop_cached(&mut self) {
        let mut paths: Vec<String> = self
            .merges
            .drain(..)
            .map(|m| m.manifest.manifest_path)
            .collect();
        if let Some((_, m)) = self.new_manifest.take() {
            paths.push(m.manifest_path);
        }
        for p in paths {
            self.retire(&p);
        }
    }
}

/// A random positive snapshot id no snapshot of the table has (as the library chooses them).
fn unique_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let (high, low) = Uuid::new_v4().as_u64_pair();
        let id = ((high ^ low) as i64).checked_abs().unwrap_or(0);
        if id != 0 && !metadata.snapshots().any(|s| s.snapshot_id() == id) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_refused_attempt_gives_up_its_list_and_keeps_its_manifests_for_the_next() {
        let mut a = AppendAttempts::default();
        a.wrote("m0");
        a.wrote("list0");
        a.built();
        let files = strings(&["m0", "list0"]);
        a.sent(&files);
        assert!(a.take_stale().is_empty(), "nothing deleted while in flight");
        a.refused(&files, "list0");
        assert_eq!(a.take_stale(), strings(&["list0"]));
        // The next attempt lands reusing m0.
        a.wrote("list1");
        let landed = strings(&["m0", "list1"]);
        a.sent(&landed);
        a.finish(Some(&landed));
        assert!(a.take_stale().is_empty());
        assert!(a.is_idle());
    }

    #[test]
    fn files_of_an_unknown_outcome_are_never_deleted() {
        let mut a = AppendAttempts::default();
        a.wrote("m0");
        a.wrote("list0");
        let files = strings(&["m0", "list0"]);
        a.sent(&files);
        a.unknown();
        assert!(a.take_stale().is_empty());
        // The batch is then found in the table (or given up): still nothing of that attempt.
        a.finish(None);
        assert!(a.take_stale().is_empty());
    }

    #[test]
    fn what_a_landed_commit_does_not_reference_is_deleted() {
        let mut a = AppendAttempts::default();
        a.wrote("m0");
        a.wrote("merged");
        a.wrote("m1");
        a.wrote("list");
        let landed = strings(&["m1", "merged", "list"]);
        a.sent(&landed);
        a.finish(Some(&landed));
        assert_eq!(a.take_stale(), strings(&["m0"]));
    }

    #[test]
    fn a_given_up_batch_leaves_nothing_it_never_sent() {
        let mut a = AppendAttempts::default();
        a.wrote("m0");
        a.wrote("list0");
        a.finish(None);
        let mut stale = a.take_stale();
        stale.sort();
        assert_eq!(stale, strings(&["list0", "m0"]));
    }

    #[test]
    fn a_retired_file_is_stale_once_and_only_when_untainted() {
        let mut a = AppendAttempts::default();
        a.wrote("m0");
        a.retire("m0");
        a.retire("m0");
        assert_eq!(a.take_stale(), strings(&["m0"]));
        a.wrote("m1");
        a.sent(&strings(&["m1"]));
        a.retire("m1");
        assert!(a.take_stale().is_empty());
    }

    #[test]
    fn names_are_unique_per_file_and_per_attempt() {
        let mut a = AppendAttempts::default();
        let m0 = a.manifest_path("s3://b/t/metadata");
        let m1 = a.manifest_path("s3://b/t/metadata");
        assert_ne!(m0, m1);
        let l0 = a.manifest_list_path("s3://b/t/metadata", 7);
        a.built();
        let l1 = a.manifest_list_path("s3://b/t/metadata", 7);
        assert_ne!(l0, l1);
        assert!(l0.starts_with("s3://b/t/metadata/snap-7-0-"));
    }
}
