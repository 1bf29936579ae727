//! What the registrar reports about itself: per table, how much is registered, waiting, and the
//! last commit or error; and whether it is ready (the catalog answered with our credentials and
//! every table is resolved). Each committer writes only its own table's entry.
//!
//! Read it with [`crate::RegistrarHandle::status`]:
//!
//! ```no_run
//! # fn show(registrar: &thadam_iceberg::RegistrarHandle) {
//! let status = registrar.status();
//! for (table, t) in &status.tables {
//!     println!("{table}: {} registered, {} waiting, last error {:?}", t.registered, t.backlog, t.last_error);
//! }
//! if let Err(why) = status.readiness() {
//!     println!("not ready: {why}");
//! }
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One table's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStatus {
    /// Segments this registrar committed since it started.
    pub registered: u64,
    /// Segments skipped because the table already had them (restart, replay, another writer).
    pub skipped: u64,
    /// Segments seen but not yet committed.
    pub backlog: u64,
    /// Commits (snapshots) made since start.
    pub commits: u64,
    /// The highest catalog sequence number handled (committed or skipped).
    pub last_seq: Option<u64>,
    /// Wall-clock time of the last successful commit, ms since the epoch.
    pub last_commit_ms: Option<u64>,
    /// The last error met (transient ones included), for operators. Cleared by a commit.
    pub last_error: Option<String>,
    /// Registration lag of the last commit: from the oldest of its segments' `Uploaded` record
    /// to the commit, in ms.
    pub lag_ms: Option<u64>,
    /// The committer has loaded the table, or found it absent with `create_table: true` (it will
    /// be created from the first segment's footer).
    pub resolved: bool,
}

impl TableStatus {
    /// Segments handled: committed by us or found already committed.
    pub fn handled(&self) -> u64 {
        self.registered + self.skipped
    }
}

/// A snapshot of the whole registrar.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrarStatus {
    /// By table name (`namespace.dataset`).
    pub tables: BTreeMap<String, TableStatus>,
    /// Set once the service stopped on a fatal error.
    pub fatal: Option<String>,
    /// The catalog answered `GET /v1/config` with our credentials (set at start).
    pub catalog_ok: bool,
}

impl RegistrarStatus {
    /// Segments handled (registered or skipped) over all tables.
    pub fn handled(&self) -> u64 {
        self.tables.values().map(TableStatus::handled).sum()
    }
    /// Segments registered by this process over all tables.
    pub fn registered(&self) -> u64 {
        self.tables.values().map(|t| t.registered).sum()
    }
    /// Segments waiting over all tables.
    pub fn backlog(&self) -> u64 {
        self.tables.values().map(|t| t.backlog).sum()
    }
    /// The largest registration lag of the tables' last commits, in ms.
    pub fn lag_ms(&self) -> Option<u64> {
        self.tables.values().filter_map(|t| t.lag_ms).max()
    }

    /// `Ok` when the registrar can do its work: the catalog answered with our credentials, every
    /// table is resolved (exists, or will be created), and no fatal error stopped it. Otherwise
    /// the reason, for `/readyz` and operators.
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(fatal) = &self.fatal {
            return Err(format!("stopped on a fatal error: {fatal}"));
        }
        if !self.catalog_ok {
            return Err("the catalog has not answered with our credentials yet".to_string());
        }
        let pending: Vec<&str> = self
            .tables
            .iter()
            .filter(|(_, t)| !t.resolved)
            .map(|(name, _)| name.as_str())
            .collect();
        if !pending.is_empty() {
            return Err(format!("table(s) not resolved yet: {}", pending.join(", ")));
        }
        Ok(())
    }
}

/// Shared, lock-protected status; writers touch only their own table.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard {
    inner: Arc<Mutex<RegistrarStatus>>,
}

impl StatusBoard {
    /// Changes one table's entry (created on first use).
    pub fn update(&self, table: &str, f: impl FnOnce(&mut TableStatus)) {
        if let Ok(mut s) = self.inner.lock() {
            f(s.tables.entry(table.to_string()).or_default());
        }
    }

    /// Records that the catalog answered with our credentials.
    pub fn set_catalog_ok(&self) {
        if let Ok(mut s) = self.inner.lock() {
            s.catalog_ok = true;
        }
    }

    /// Records the first fatal error (later ones are consequences).
    pub fn set_fatal(&self, message: String) {
        if let Ok(mut s) = self.inner.lock() {
            s.fatal.get_or_insert(message);
        }
    }

    /// A copy of the whole status.
    pub fn snapshot(&self) -> RegistrarStatus {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_with_the_catalog_and_every_table_resolved() {
        let board = StatusBoard::default();
        board.update("ns.a", |_| {});
        board.update("ns.b", |t| t.resolved = true);
        assert!(board.snapshot().readiness().is_err());
        board.set_catalog_ok();
        let why = board
            .snapshot()
            .readiness()
            .expect_err("ns.a is not resolved");
        assert!(why.contains("ns.a") && !why.contains("ns.b"), "{why}");
        board.update("ns.a", |t| t.resolved = true);
        assert_eq!(board.snapshot().readiness(), Ok(()));
        board.set_fatal("auth.failed: nope".to_string());
        let why = board.snapshot().readiness().expect_err("fatal");
        assert!(why.contains("auth.failed"), "{why}");
    }
}
