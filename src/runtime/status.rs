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
use std::time::Duration;

/// One table's progress.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStatus {
    /// Segments this registrar committed since it started.
    pub registered: u64,
    /// Segments skipped because the table already had them (restart, replay, another writer).
    pub skipped: u64,
    /// Segments of this registrar that another node of its fleet committed, carrying the
    /// intents this registrar published (see docs/fleets.md, "Intents").
    pub carried: u64,
    /// Segments seen but not yet committed (quarantined ones not included).
    pub backlog: u64,
    /// Quarantined segments the committer holds now (`on_bad_segment: quarantine`).
    pub quarantined: u64,
    /// Segments this registrar quarantined since it started.
    pub quarantined_total: u64,
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
    /// Since when (ms since the epoch) the table has had a `last_error` without a commit in
    /// between: it is failing and being retried. `None` while healthy.
    pub failing_since_ms: Option<u64>,
    /// Since when (ms since the epoch) segments have been waiting for this table without a
    /// commit landing: when the first of them arrived, or the last commit while others still
    /// wait. `None` while nothing waits. A table whose commits keep failing (a registrar starved
    /// by other writers) shows here, as a node that never committed at all does.
    pub waiting_since_ms: Option<u64>,
    /// Set while the catalog answers a request for this table other than a commit (create,
    /// register, load, namespace) with a server error (500): the error with the catalog's
    /// message. Retried with backoff, but the registrar is not ready meanwhile.
    pub catalog_error: Option<String>,
    /// Set when this table alone was stopped by a non-transient error about it
    /// (`on_bad_segment: quarantine`; the other tables go on): the error, with its code.
    pub stopped: Option<String>,
}

impl TableStatus {
    /// Segments handled: committed by us (or for us, by a node that carried our intents) or
    /// found already committed.
    pub fn handled(&self) -> u64 {
        self.registered + self.skipped + self.carried
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
    /// `unready_after`: a table failing for longer, or with segments waiting and no commit
    /// landing for longer (plus `stall_grace`), makes the registrar not ready (None: never).
    pub unready_after: Option<Duration>,
    /// What batching itself may make a segment wait (`commit.linger` plus
    /// `commit.min_interval`), added to `unready_after` for waiting segments.
    pub stall_grace: Duration,
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
        let stopped: Vec<String> = self
            .tables
            .iter()
            .filter_map(|(name, t)| {
                let error = t.stopped.as_deref()?;
                Some(format!(
                    "table {name} stopped (the other tables go on): {error}"
                ))
            })
            .collect();
        if !stopped.is_empty() {
            return Err(stopped.join("; "));
        }
        let server_errors: Vec<String> = self
            .tables
            .iter()
            .filter_map(|(name, t)| {
                let error = t.catalog_error.as_deref()?;
                Some(format!(
                    "table {name}: the catalog answers with a server error (retried): {error}"
                ))
            })
            .collect();
        if !server_errors.is_empty() {
            return Err(server_errors.join("; "));
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
        if let Some(limit) = self.unready_after {
            let now = now_ms();
            let mut failing: Vec<String> = self
                .tables
                .iter()
                .filter_map(|(name, t)| {
                    let since = t.failing_since_ms?;
                    let failing = Duration::from_millis(now.saturating_sub(since));
                    (failing >= limit).then(|| {
                        format!(
                            "table {name} has been failing for {}s (unready_after {}): {}",
                            failing.as_secs(),
                            humantime::format_duration(limit),
                            t.last_error.as_deref().unwrap_or("unknown error")
                        )
                    })
                })
                .collect();
            // A table whose commits do not land while segments wait, errors or not (another
            // writer winning every race shows no error).
            let stall_limit = limit.saturating_add(self.stall_grace);
            failing.extend(self.tables.iter().filter_map(|(name, t)| {
                let since = t.waiting_since_ms?;
                let waiting = Duration::from_millis(now.saturating_sub(since));
                (t.failing_since_ms.is_none() && waiting >= stall_limit).then(|| {
                    format!(
                        "table {name}: {} segments waiting and no commit landed for {}s \
                         (unready_after {})",
                        t.backlog,
                        waiting.as_secs(),
                        humantime::format_duration(limit),
                    )
                })
            }));
            if !failing.is_empty() {
                return Err(failing.join("; "));
            }
        }
        Ok(())
    }
}

/// Every change of a registrar's status, as it happens: [`crate::RegistrarHandle::updates`].
pub struct StatusUpdates {
    board: StatusBoard,
    changes: tokio::sync::watch::Receiver<()>,
}

impl StatusUpdates {
    pub(crate) fn new(board: StatusBoard) -> Self {
        let changes = board.subscribe();
        StatusUpdates { board, changes }
    }

    /// Waits for the next change and returns the status after it. Changes that happen while
    /// nobody waits are folded into one.
    pub async fn changed(&mut self) -> RegistrarStatus {
        // The sender lives in `board`, which this holds: `changed` cannot fail while it waits.
        let _ = self.changes.changed().await;
        self.board.snapshot()
    }
}

/// Shared, lock-protected status; writers touch only their own table. Every change is announced
/// to subscribers ([`StatusBoard::subscribe`]), so a caller waits for progress without polling.
#[derive(Debug, Clone)]
pub struct StatusBoard {
    inner: Arc<Mutex<RegistrarStatus>>,
    changed: Arc<tokio::sync::watch::Sender<()>>,
}

impl Default for StatusBoard {
    fn default() -> Self {
        StatusBoard {
            inner: Arc::default(),
            changed: Arc::new(tokio::sync::watch::Sender::new(())),
        }
    }
}

impl StatusBoard {
    /// A receiver that is marked changed on every later change of the status (read it with
    /// [`StatusBoard::snapshot`] after `changed().await`).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<()> {
        self.changed.subscribe()
    }

    fn announce(&self) {
        self.changed.send_replace(());
    }

    /// Changes one table's entry (created on first use). A `last_error` that appears starts
    /// the table's failing time; one that is cleared (a commit) ends it. A backlog that appears
    /// starts its waiting time; one that empties ends it (a commit restarts it by clearing
    /// `waiting_since_ms`).
    pub fn update(&self, table: &str, f: impl FnOnce(&mut TableStatus)) {
        if let Ok(mut s) = self.inner.lock() {
            let t = s.tables.entry(table.to_string()).or_default();
            f(t);
            match (&t.last_error, t.failing_since_ms) {
                (Some(_), None) => t.failing_since_ms = Some(now_ms()),
                (None, Some(_)) => t.failing_since_ms = None,
                _ => {}
            }
            match (t.backlog > 0, t.waiting_since_ms) {
                (true, None) => t.waiting_since_ms = Some(now_ms()),
                (false, Some(_)) => t.waiting_since_ms = None,
                _ => {}
            }
        }
        self.announce();
    }

    /// Since when segments have been waiting for `table` with no commit landing.
    pub fn waiting_since_ms(&self, table: &str) -> Option<u64> {
        let s = self.inner.lock().ok()?;
        s.tables.get(table)?.waiting_since_ms
    }

    /// Sets `unready_after` and the grace batching adds for waiting segments (see
    /// [`RegistrarStatus::readiness`]).
    pub fn set_unready_after(&self, limit: Duration, stall_grace: Duration) {
        if let Ok(mut s) = self.inner.lock() {
            s.unready_after = Some(limit);
            s.stall_grace = stall_grace;
        }
        self.announce();
    }

    /// Records that the catalog answered with our credentials.
    pub fn set_catalog_ok(&self) {
        if let Ok(mut s) = self.inner.lock() {
            s.catalog_ok = true;
        }
        self.announce();
    }

    /// Records the first fatal error (later ones are consequences).
    pub fn set_fatal(&self, message: String) {
        if let Ok(mut s) = self.inner.lock() {
            s.fatal.get_or_insert(message);
        }
        self.announce();
    }

    /// A copy of the whole status.
    pub fn snapshot(&self) -> RegistrarStatus {
        self.inner.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_failing_longer_than_unready_after_makes_the_registrar_unready() {
        let board = StatusBoard::default();
        board.set_catalog_ok();
        board.set_unready_after(Duration::from_secs(300), Duration::ZERO);
        board.update("ns.t", |t| t.resolved = true);
        board.update("ns.t", |t| {
            t.last_error = Some("sink.iceberg_unavailable: 503".into())
        });
        assert_eq!(
            board.snapshot().readiness(),
            Ok(()),
            "failing, but not for long"
        );
        // Ten minutes later (moved back in time rather than waiting).
        if let Ok(mut s) = board.inner.lock() {
            let t = s.tables.get_mut("ns.t").expect("table");
            t.failing_since_ms = t.failing_since_ms.map(|m| m - 600_000);
        }
        // Another failure does not restart the clock.
        board.update("ns.t", |t| {
            t.last_error = Some("sink.iceberg_unavailable: 429".into())
        });
        let why = board
            .snapshot()
            .readiness()
            .expect_err("failing for 10 minutes");
        assert!(
            why.contains("ns.t") && why.contains("failing for 600s") && why.contains("429"),
            "{why}"
        );
        // A commit clears the error, and readiness comes back.
        board.update("ns.t", |t| t.last_error = None);
        assert_eq!(board.snapshot().tables["ns.t"].failing_since_ms, None);
        assert_eq!(board.snapshot().readiness(), Ok(()));
    }

    #[test]
    fn segments_waiting_without_a_commit_make_the_registrar_unready_errors_or_not() {
        let board = StatusBoard::default();
        board.set_catalog_ok();
        board.set_unready_after(Duration::from_secs(300), Duration::from_secs(10));
        board.update("ns.t", |t| t.resolved = true);
        assert_eq!(board.snapshot().tables["ns.t"].waiting_since_ms, None);
        // Segments arrive; no commit lands (another writer wins every race: no error).
        board.update("ns.t", |t| t.backlog = 59);
        let since = board.snapshot().tables["ns.t"].waiting_since_ms;
        assert!(since.is_some());
        assert_eq!(board.snapshot().readiness(), Ok(()), "not for long yet");
        let back = |board: &StatusBoard, ms: u64| {
            if let Ok(mut s) = board.inner.lock() {
                let t = s.tables.get_mut("ns.t").expect("table");
                t.waiting_since_ms = t.waiting_since_ms.map(|m| m - ms);
            }
        };
        // Within unready_after plus the grace: still ready.
        back(&board, 305_000);
        assert_eq!(board.snapshot().readiness(), Ok(()));
        back(&board, 10_000);
        board.update("ns.t", |t| t.backlog = 60);
        let why = board.snapshot().readiness().expect_err("stalled");
        assert!(
            why.contains("ns.t") && why.contains("60 segments waiting"),
            "{why}"
        );
        // A commit that leaves some waiting restarts the clock; an empty backlog ends it.
        board.update("ns.t", |t| {
            t.backlog = 3;
            t.waiting_since_ms = None;
        });
        assert_eq!(board.snapshot().readiness(), Ok(()));
        board.update("ns.t", |t| t.backlog = 0);
        assert_eq!(board.snapshot().tables["ns.t"].waiting_since_ms, None);
    }

    #[test]
    fn every_change_is_announced_to_subscribers() {
        let board = StatusBoard::default();
        let mut rx = board.subscribe();
        assert!(!rx.has_changed().expect("open"));
        board.update("ns.t", |t| t.registered = 3);
        assert!(rx.has_changed().expect("open"));
        rx.borrow_and_update();
        assert!(!rx.has_changed().expect("open"));
        board.set_fatal("auth.failed: nope".into());
        assert!(rx.has_changed().expect("open"));
    }

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

    #[test]
    fn a_catalog_server_error_makes_the_registrar_unready_at_once() {
        let board = StatusBoard::default();
        board.set_catalog_ok();
        board.set_unready_after(Duration::from_secs(300), Duration::ZERO);
        board.update("ns.t", |t| t.resolved = true);
        board.update("ns.t", |t| {
            t.catalog_error = Some("sink.iceberg_unavailable: create: 500 Internal".into())
        });
        let why = board.snapshot().readiness().expect_err("server error");
        assert!(
            why.contains("ns.t") && why.contains("500 Internal"),
            "{why}"
        );
        board.update("ns.t", |t| t.catalog_error = None);
        assert_eq!(board.snapshot().readiness(), Ok(()));
    }
}
