//! The near cache: window sums this daemon read from Redis, served again for up to
//! `near_cache_ms` without asking, with this daemon's own increments added to them at once.
//!
//! Why: the keys a burst repeats (its sender, its IP, its subject, its shingles) are read by
//! every one of its messages; without the cache each read is a round trip and a script run on
//! the node, and a daemon does not see its own last increments until the next flush. With it,
//! a burst through one daemon is counted there message by message, and the other daemons see
//! it once this daemon has flushed (`flush_interval_ms`) and their own entries have aged out
//! (`near_cache_ms`): the staleness is bounded by the sum of the two.
//!
//! What stays exact: rate limits and paired unique counts are decided on the server (atomic
//! scripts and transactions), never from this cache; `/reputation` reads Redis.
//!
//! Bounds: at most `near_cache_keys` entries; when full, entries past their age are dropped,
//! and if that frees nothing the cache starts empty (a burst of misses, never unbounded memory).

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::health::Stats;
use crate::store::{Increment, StoreKey, WindowCounts};

struct Entry {
    at: Instant,
    sums: WindowCounts,
}

pub struct NearCache {
    max_age: Duration,
    max_keys: usize,
    map: Mutex<HashMap<StoreKey, Entry>>,
}

impl NearCache {
    /// `None` when `ms` is 0 (off).
    pub fn new(ms: u64, max_keys: usize) -> Option<NearCache> {
        (ms > 0 && max_keys > 0).then(|| NearCache {
            max_age: Duration::from_millis(ms),
            max_keys,
            map: Mutex::new(HashMap::new()),
        })
    }

    /// The cached sums of each key still young enough (`None` for the others, to read).
    pub fn get(&self, keys: &[StoreKey], stats: &Stats) -> Vec<Option<WindowCounts>> {
        let now = Instant::now();
        let map = self.map.lock();
        keys.iter()
            .map(|k| {
                let e = map.get(k)?;
                let age = now.saturating_duration_since(e.at);
                (age < self.max_age).then(|| {
                    stats.near_hits.fetch_add(1, Relaxed);
                    stats.near_age_ms.fetch_add(age.as_millis() as u64, Relaxed);
                    e.sums.clone()
                })
            })
            .inspect(|hit| {
                if hit.is_none() {
                    stats.near_misses.fetch_add(1, Relaxed);
                }
            })
            .collect()
    }

    /// Keeps what was just read from Redis.
    pub fn put(&self, read: impl Iterator<Item = (StoreKey, WindowCounts)>, stats: &Stats) {
        let now = Instant::now();
        let mut map = self.map.lock();
        for (key, sums) in read {
            if map.len() >= self.max_keys && !map.contains_key(&key) {
                let max_age = self.max_age;
                map.retain(|_, e| now.saturating_duration_since(e.at) < max_age);
                if map.len() >= self.max_keys {
                    map.clear();
                }
                stats.near_evictions.fetch_add(1, Relaxed);
            }
            map.insert(key, Entry { at: now, sums });
        }
        stats.near_entries.store(map.len() as u64, Relaxed);
    }

    /// This daemon's increments, added to the entries it holds (in every window: an increment
    /// made now is inside each of them).
    pub fn add(&self, increments: &[Increment]) {
        let mut map = self.map.lock();
        for inc in increments {
            if let Some(e) = map.get_mut(&inc.key) {
                for w in e.sums.windows.iter_mut() {
                    for (c, d) in w.iter_mut().zip(&inc.counts) {
                        *c = c.saturating_add(*d);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Counter, WindowSums};

    fn key(hash: u64) -> StoreKey {
        StoreKey {
            namespace: 0,
            kind: 1,
            hash,
        }
    }

    fn sums(seen: u64) -> WindowCounts {
        let mut windows = WindowSums::zeros(2);
        windows[0] = [seen, 0, 0, 0, 0];
        windows[1] = [seen * 2, 0, 0, 0, 0];
        WindowCounts { windows }
    }

    #[test]
    fn serves_young_entries_with_own_increments_and_stays_bounded() {
        assert!(NearCache::new(0, 10).is_none());
        let stats = Stats::default();
        let c = NearCache::new(200, 3).unwrap();
        assert!(c.get(&[key(1)], &stats)[0].is_none());
        c.put([(key(1), sums(4))].into_iter(), &stats);
        c.add(&[
            Increment::one(key(1), Counter::Seen),
            Increment::one(key(9), Counter::Seen),
        ]);
        let got = c.get(&[key(1), key(9)], &stats);
        assert_eq!(got[0].as_ref().unwrap().windows[0], [5, 0, 0, 0, 0]);
        assert_eq!(got[0].as_ref().unwrap().windows[1], [9, 0, 0, 0, 0]);
        // An increment of a key not held is not invented.
        assert!(got[1].is_none());
        assert_eq!(stats.near_hits.load(Relaxed), 1);
        assert_eq!(stats.near_misses.load(Relaxed), 2);
        // Past its age an entry is read again.
        std::thread::sleep(Duration::from_millis(220));
        assert!(c.get(&[key(1)], &stats)[0].is_none());
        // Full: the aged entries go first, then everything.
        c.put((2..=3).map(|h| (key(h), sums(1))), &stats);
        assert_eq!(stats.near_entries.load(Relaxed), 3);
        c.put([(key(4), sums(1))].into_iter(), &stats);
        assert_eq!(stats.near_entries.load(Relaxed), 3);
        c.put([(key(5), sums(1))].into_iter(), &stats);
        assert_eq!(stats.near_entries.load(Relaxed), 1);
        assert!(stats.near_evictions.load(Relaxed) >= 2);
    }
}
