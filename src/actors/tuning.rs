//! Knobs beside the config file: caps the standalone runner's flags set, and tests. Every
//! default defers to the config. They are read by the actors (through
//! [`RegistrarContext`](crate::actors::context::RegistrarContext)), so they live here, beside
//! the test seams they carry ([`Hooks`]), and the config stays free of both.

use crate::table::hooks::Hooks;

/// Knobs beside the config file: caps for tests and the runner's flags, and test seams. The
/// defaults defer to the config (`commit`, `footer_readers`).
#[derive(Debug, Clone)]
pub struct Tuning {
    /// Overrides the config's `footer_readers` when non-zero.
    pub footer_readers: usize,
    /// Overrides the footer window when non-zero: how many footers one table holds (arrived,
    /// not committed) and reads in flight together. Default: twice `commit.max_segments`, at
    /// least 64 (see `RegistrarContext::footer_window`).
    pub reads_per_table: usize,
    /// Caps the config's `commit.max_segments` (e.g. `--max-batch`, or 1 in tests that map
    /// faults onto commits one to one). Default: no cap.
    pub max_batch: usize,
    /// How often a committer holding quarantined segments reads the quarantine file for the
    /// operator's `retry` and `discarded` lines.
    pub quarantine_poll: std::time::Duration,
    /// Test seams; none in production (not part of the API).
    #[doc(hidden)]
    pub hooks: Hooks,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            footer_readers: 0,
            reads_per_table: 0,
            max_batch: usize::MAX,
            quarantine_poll: std::time::Duration::from_secs(1),
            hooks: Hooks::default(),
        }
    }
}
