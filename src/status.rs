//! What the registrar reports about itself: per table, how much is registered, waiting, and the
//! last commit or error. Each committer writes only its own table's entry.

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
    /// The last error met (transient ones included), for operators.
    pub last_error: Option<String>,
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
}

impl RegistrarStatus {
    pub fn handled(&self) -> u64 {
        self.tables.values().map(TableStatus::handled).sum()
    }
    pub fn backlog(&self) -> u64 {
        self.tables.values().map(|t| t.backlog).sum()
    }
}

/// Shared, lock-protected status; writers touch only their own table.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard {
    inner: Arc<Mutex<RegistrarStatus>>,
}

impl StatusBoard {
    pub fn update(&self, table: &str, f: impl FnOnce(&mut TableStatus)) {
        if let Ok(mut s) = self.inner.lock() {
            f(s.tables.entry(table.to_string()).or_default());
        }
    }

    pub fn set_fatal(&self, message: String) {
        if let Ok(mut s) = self.inner.lock() {
            s.fatal.get_or_insert(message);
        }
    }

    pub fn snapshot(&self) -> RegistrarStatus {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }
}
