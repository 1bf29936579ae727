//! Saying a warning once per process: for problems noticed again on every data file or commit
//! (a configuration value that cannot be read, a table property, a table's spec), where one
//! warning each time would drown the log.
//!
//! One set for the whole process, keyed by a scope (the kind of warning) and a key (what it is
//! about), and bounded: at most [`MAX_KEYS`] keys are held. When it is full it starts afresh, so
//! memory cannot grow without limit whatever the number of tables or values; a warning may then
//! be said once more, never lost.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// How many distinct (scope, key) pairs the process-wide set holds before it starts afresh.
pub(crate) const MAX_KEYS: usize = 4096;

/// A bounded set of the warnings already said.
pub(crate) struct WarnOnce {
    seen: Mutex<Option<HashSet<(&'static str, String)>>>,
    capacity: usize,
}

impl WarnOnce {
    /// An empty set holding at most `capacity` keys (at least one).
    pub(crate) const fn new(capacity: usize) -> WarnOnce {
        WarnOnce {
            seen: Mutex::new(None),
            capacity,
        }
    }

    /// Whether `key` of `scope` is seen here for the first time (since the set last started
    /// afresh); the caller warns when it is.
    pub(crate) fn first_time(&self, scope: &'static str, key: impl Into<String>) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = seen.get_or_insert_with(HashSet::new);
        let key = (scope, key.into());
        if seen.contains(&key) {
            return false;
        }
        if seen.len() >= self.capacity.max(1) {
            seen.clear();
        }
        seen.insert(key)
    }
}

static SEEN: WarnOnce = WarnOnce::new(MAX_KEYS);

/// Whether `key` of `scope` is seen for the first time in this process (see [`WarnOnce`]).
pub(crate) fn first_time(scope: &'static str, key: impl Into<String>) -> bool {
    SEEN.first_time(scope, key)
}

/// Logs `message` as a warning the first time this process sees it.
pub(crate) fn warn(message: String) {
    if first_time("message", message.as_str()) {
        tracing::warn!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_first_once_per_scope_and_the_set_stays_bounded() {
        let once = WarnOnce::new(3);
        assert!(once.first_time("a", "x"));
        assert!(!once.first_time("a", "x"), "said once");
        assert!(once.first_time("b", "x"), "scopes are apart");
        assert!(once.first_time("a", "y"));
        // Full: a fourth key starts the set afresh instead of growing it.
        assert!(once.first_time("a", "z"));
        let held = once.seen.lock().unwrap().as_ref().map_or(0, HashSet::len);
        assert_eq!(held, 1);
        assert!(!once.first_time("a", "z"));
        assert!(
            once.first_time("a", "x"),
            "forgotten keys may be said again"
        );
        for n in 0..100 {
            once.first_time("a", format!("k{n}"));
        }
        let held = once.seen.lock().unwrap().as_ref().map_or(0, HashSet::len);
        assert!(held <= 3, "{held}");
    }
}
