//! A bounded list of the values a process built most recently, found by their key: the
//! clients and parsed roots the registrars of one process share (`io::clients`,
//! `catalog::tls`). A handful of entries, so a linear search beats hashing keys that hold
//! secrets (S3 settings with their keys).

use std::collections::VecDeque;
use std::sync::Mutex;

/// At most `capacity` values with their keys, least recently used first.
pub(crate) struct Recent<K, V> {
    entries: Mutex<VecDeque<(K, V)>>,
    capacity: usize,
}

impl<K, V: Clone> Recent<K, V> {
    pub(crate) const fn new(capacity: usize) -> Self {
        Recent {
            entries: Mutex::new(VecDeque::new()),
            capacity,
        }
    }

    /// The value of the first key that `matches`, now the most recently used; else the one
    /// `make` builds, kept (the least recently used going when full). Built under the lock:
    /// callers build synchronously and briefly, and two racing for one key must not both build.
    pub(crate) fn get_or_make<E>(
        &self,
        matches: impl Fn(&K) -> bool,
        make: impl FnOnce() -> Result<(K, V), E>,
    ) -> Result<V, E> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hit) = entries
            .iter()
            .position(|(key, _)| matches(key))
            .and_then(|at| entries.remove(at))
        {
            let value = hit.1.clone();
            entries.push_back(hit);
            return Ok(value);
        }
        let (key, value) = make()?;
        if entries.len() >= self.capacity {
            entries.pop_front();
        }
        entries.push_back((key, value.clone()));
        Ok(value)
    }

    /// How many keys kept match `matches`.
    pub(crate) fn count(&self, matches: impl Fn(&K) -> bool) -> usize {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.iter().filter(|(key, _)| matches(key)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first_and_a_failed_make_keeps_nothing() {
        let recent: Recent<u32, u32> = Recent::new(2);
        let make = |k: u32| move || Ok::<_, ()>((k, k * 10));
        assert_eq!(recent.get_or_make(|k| *k == 1, make(1)), Ok(10));
        assert_eq!(recent.get_or_make(|k| *k == 2, make(2)), Ok(20));
        // 1 used again: 2 is now the least recently used, and goes for 3.
        assert_eq!(recent.get_or_make(|k| *k == 1, || Err(())), Ok(10));
        assert_eq!(recent.get_or_make(|k| *k == 3, make(3)), Ok(30));
        assert_eq!(recent.count(|_| true), 2);
        assert_eq!(recent.count(|k| *k == 2), 0);
        assert_eq!(recent.get_or_make(|k| *k == 4, || Err(())), Err(()));
        assert_eq!(recent.count(|k| *k == 1 || *k == 3), 2);
    }
}
