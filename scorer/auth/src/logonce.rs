//! Logs each (peer, reason) refusal once per window, not per message or per retry: a
//! misconfigured agent retrying every second, or an attacker, cannot flood the log. Bounded:
//! past its capacity the oldest keys are forgotten (and may be logged again).
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::cache::DeadlineCache;

/// The gate.
#[derive(Debug)]
pub struct LogOnce<K> {
    seen: DeadlineCache<K, ()>,
    window: Duration,
}

impl<K: Eq + Hash + Clone> LogOnce<K> {
    /// Remembers up to `capacity` keys for `window` each.
    pub fn new(capacity: usize, window: Duration) -> Self {
        LogOnce {
            seen: DeadlineCache::new(capacity),
            window,
        }
    }

    /// `true` the first time `key` is seen in the window (log it), `false` after.
    pub fn first(&self, key: K, now: Instant) -> bool {
        if self.seen.get(&key, now).is_some() {
            return false;
        }
        self.seen.insert(key, (), now + self.window, now);
        true
    }
}

impl<K: Eq + Hash + Clone> Default for LogOnce<K> {
    /// 4 096 keys, 10 minutes.
    fn default() -> Self {
        LogOnce::new(4096, Duration::from_secs(600))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_per_key_per_window() {
        let l = LogOnce::new(10, Duration::from_secs(60));
        let t = Instant::now();
        assert!(l.first(("10.0.0.1", "invalid_token"), t));
        assert!(!l.first(("10.0.0.1", "invalid_token"), t + Duration::from_secs(1)));
        assert!(l.first(("10.0.0.1", "wrong_node"), t));
        assert!(l.first(("10.0.0.2", "invalid_token"), t));
        assert!(l.first(("10.0.0.1", "invalid_token"), t + Duration::from_secs(61)));
    }
}
