//! A capacity-bounded map whose entries each expire at their own deadline: the token
//! review cache. Hand-written because `lru` has no per-entry deadlines and `moka` brings a
//! large dependency tree for one map; at the default 10 000 entries an eviction scan costs
//! microseconds, and only when the map is full.
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Instant;

/// The cache.
#[derive(Debug)]
pub struct DeadlineCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
    capacity: usize,
}

impl<K: Eq + Hash + Clone, V: Clone> DeadlineCache<K, V> {
    /// A cache holding at most `capacity` entries (at least 1).
    pub fn new(capacity: usize) -> Self {
        DeadlineCache {
            entries: Mutex::new(HashMap::new()),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (V, Instant)>> {
        // A panic while holding the lock cannot leave the map inconsistent (every
        // operation is a single insert or remove), so a poisoned lock is still usable.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value for `key` if its deadline is after `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let mut map = self.lock();
        match map.get(key) {
            Some((v, until)) if *until > now => Some(v.clone()),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores `value` for `key` until `until`. A full cache first drops expired entries,
    /// then the entry closest to its deadline.
    pub fn insert(&self, key: K, value: V, until: Instant, now: Instant) {
        if until <= now {
            return;
        }
        let mut map = self.lock();
        if map.len() >= self.capacity && !map.contains_key(&key) {
            map.retain(|_, (_, u)| *u > now);
            if map.len() >= self.capacity
                && let Some(k) = map
                    .iter()
                    .min_by_key(|(_, (_, u))| *u)
                    .map(|(k, _)| k.clone())
            {
                map.remove(&k);
            }
        }
        map.insert(key, (value, until));
    }

    /// Entries held (some may have expired).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn entries_expire_and_the_size_stays_bounded() {
        let c = DeadlineCache::new(3);
        let t0 = Instant::now();
        let s = Duration::from_secs;
        c.insert(1, "a", t0 + s(10), t0);
        c.insert(2, "b", t0 + s(1), t0);
        c.insert(3, "c", t0 + s(20), t0);
        assert_eq!(c.get(&2, t0), Some("b"));
        assert_eq!(c.get(&2, t0 + s(1)), None, "expired at its deadline");
        c.insert(2, "b", t0 + s(1), t0);
        // Full: the expired entry goes first.
        c.insert(4, "d", t0 + s(30), t0 + s(2));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&1, t0 + s(2)), Some("a"));
        // Full, nothing expired: the one closest to its deadline (1) goes.
        c.insert(5, "e", t0 + s(40), t0 + s(2));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&1, t0 + s(2)), None);
        assert_eq!(c.get(&3, t0 + s(2)), Some("c"));
        // Replacing a key never evicts another.
        c.insert(3, "c2", t0 + s(50), t0 + s(2));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&3, t0 + s(2)), Some("c2"));
        // Already expired: not stored.
        c.insert(9, "z", t0, t0 + s(2));
        assert_eq!(c.get(&9, t0), None);
        for i in 0..10_000 {
            c.insert(100 + i, "x", t0 + s(60), t0 + s(2));
        }
        assert_eq!(c.len(), 3);
    }
}
