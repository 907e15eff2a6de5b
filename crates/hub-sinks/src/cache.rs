//! A bounded cache of per-destination clients (AWS SDK clients, AMQP links).
//!
//! Each destination a tenant points at gets a pooled client; without a bound, a tenant creating
//! destinations would grow the process without limit. Entries idle for longer than the idle time
//! are dropped when the cache is full, and then the least recently used, so a cache never holds
//! more than its capacity.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// The SHA-256 digest of what `value` hashes: the key of a client or connection that carries a
/// login, so that no two logins can ever share one (a 64-bit hash could collide).
pub(crate) fn digest(value: &impl Hash) -> [u8; 32] {
    use sha2::Digest as _;
    struct Feed(sha2::Sha256);
    impl std::hash::Hasher for Feed {
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
        fn finish(&self) -> u64 {
            0
        }
    }
    let mut feed = Feed(sha2::Sha256::new());
    value.hash(&mut feed);
    feed.0.finalize().into()
}

/// Clients kept per sink, at most.
pub const CAPACITY: usize = 1024;
/// A client unused this long is dropped first.
pub const IDLE: Duration = Duration::from_secs(600);

#[derive(Debug)]
pub struct BoundedCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
    idle: Duration,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for BoundedCache<K, V> {
    fn default() -> Self {
        Self::new(CAPACITY, IDLE)
    }
}

impl<K: Eq + Hash + Clone, V: Clone> BoundedCache<K, V> {
    pub fn new(capacity: usize, idle: Duration) -> Self {
        Self { entries: HashMap::new(), capacity: capacity.max(1), idle }
    }

    /// The value for `key`, marked as used now.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        let (value, used) = self.entries.get_mut(key)?;
        *used = now;
        Some(value.clone())
    }

    pub fn remove(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// Inserts, first making room: idle entries go, then the least recently used.
    pub fn insert(&mut self, key: K, value: V, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let idle = self.idle;
            self.entries.retain(|_, (_, used)| now.saturating_duration_since(*used) < idle);
            while self.entries.len() >= self.capacity {
                let Some(oldest) = self.entries.iter().min_by_key(|(_, (_, used))| *used).map(|(k, _)| k.clone())
                else {
                    break;
                };
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (value, now));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_tells_apart_what_its_parts_tell_apart() {
        let key = |servers: &str, login: Option<&str>| digest(&(servers, true, login));
        assert_eq!(key("nats://a:4222", Some("u")), key("nats://a:4222", Some("u")));
        assert_ne!(key("nats://a:4222", Some("u")), key("nats://a:4222", Some("v")));
        assert_ne!(key("nats://a:4222", Some("u")), key("nats://a:4222", None));
        // Where one part ends and the next begins counts.
        assert_ne!(digest(&("ab", "c")), digest(&("a", "bc")));
    }

    #[test]
    fn never_holds_more_than_its_capacity_and_drops_the_idle_first() {
        let start = Instant::now();
        let mut cache = BoundedCache::new(3, Duration::from_secs(10));
        for k in 0..3 {
            cache.insert(k, k, start + Duration::from_secs(k));
        }
        // Key 0 is used recently; key 1 is the least recently used.
        assert_eq!(cache.get(&0, start + Duration::from_secs(5)), Some(0));
        cache.insert(3, 3, start + Duration::from_secs(6));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&1, start + Duration::from_secs(6)), None, "the least recently used went");
        // Much later, everything is idle: inserting clears the idle ones.
        cache.insert(4, 4, start + Duration::from_secs(100));
        assert_eq!(cache.len(), 1);
        for k in 0..10_000u64 {
            cache.insert(k, k, start + Duration::from_secs(200));
        }
        assert!(cache.len() <= 3);
    }
}
