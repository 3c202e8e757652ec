//! Windowed features (count and sum, distinct values) for rules, NOT REACHABLE YET: no `Store`
//! method, rule or sweeper uses this module; the rule-authoring work (issue 43) will give each
//! shard a `FeatureTable` beside its rate counters and expose it to rules. Until then it is kept,
//! with its tests, self-contained and outside the shards and the sweep.
//!
//! General windowed features (the Yandex anti-fraud kind): count and sum of values in a sliding
//! window, and the exact number of distinct values in a window with a cap on how many values are
//! stored.
//!
//! Count and sum use the same sub-bucket ring as the rate counters (window/60, plus one). The
//! distinct set keeps each value's last-seen time; values older than the window are pruned on
//! access and by `FeatureTable::sweep`; at `cap` stored values a new value is not stored and the
//! result says `capped` (the true count is at least `distinct`). Memory per feature is bounded by
//! its ring (≤ 61 slots) or by `cap`.

// Nothing outside the tests calls into this module yet (see above).
#![allow(dead_code)]

use hashbrown::HashTable;
use rustc_hash::FxHashMap;
use serde::Serialize;

use super::rate::SlidingWindow;
use super::StoreKey;

/// Count and sum in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SumResult {
    pub count: u64,
    pub sum: u64,
}

/// Distinct values in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DistinctResult {
    pub distinct: u64,
    /// The cap was reached: more distinct values were seen than stored.
    pub capped: bool,
}

#[derive(Debug)]
struct SumEntry {
    key: StoreKey,
    window_secs: u64,
    /// (count, sum) per sub-bucket.
    ring: SlidingWindow<(u64, u64)>,
}

#[derive(Debug)]
struct DistinctEntry {
    key: StoreKey,
    window_secs: u64,
    last_seen: FxHashMap<u64, u64>,
    capped: bool,
}

#[derive(Debug, Default)]
pub(crate) struct FeatureTable {
    sums: HashTable<SumEntry>,
    distinct: HashTable<DistinctEntry>,
}

fn feature_hash(key: &StoreKey, window_secs: u64, salt: u64) -> u64 {
    let mut k = key.hash
        ^ (u64::from(key.kind) << 48 | u64::from(key.namespace) << 40)
        ^ window_secs.rotate_left(23)
        ^ salt;
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^ (k >> 33)
}

const SUM_SALT: u64 = 0x5355_4d00;
const DISTINCT_SALT: u64 = 0x4449_5354;

impl FeatureTable {
    pub fn add(&mut self, key: StoreKey, amount: u64, window_secs: u64, now: u64) -> SumResult {
        let window_secs = window_secs.max(1);
        let hash = feature_hash(&key, window_secs, SUM_SALT);
        let entry = match self
            .sums
            .find_mut(hash, |e| e.key == key && e.window_secs == window_secs)
        {
            Some(e) => e,
            None => self
                .sums
                .insert_unique(
                    hash,
                    SumEntry {
                        key,
                        window_secs,
                        ring: SlidingWindow::new(window_secs, now),
                    },
                    |e| feature_hash(&e.key, e.window_secs, SUM_SALT),
                )
                .into_mut(),
        };
        let slot = entry.ring.current(now);
        slot.0 = slot.0.saturating_add(1);
        slot.1 = slot.1.saturating_add(amount);
        let (count, sum) = entry
            .ring
            .slots()
            .iter()
            .fold((0u64, 0u64), |(c, s), (sc, ss)| {
                (c.saturating_add(*sc), s.saturating_add(*ss))
            });
        SumResult { count, sum }
    }

    pub fn distinct(
        &mut self,
        key: StoreKey,
        value: u64,
        window_secs: u64,
        cap: usize,
        now: u64,
    ) -> DistinctResult {
        let window_secs = window_secs.max(1);
        let hash = feature_hash(&key, window_secs, DISTINCT_SALT);
        let entry = match self
            .distinct
            .find_mut(hash, |e| e.key == key && e.window_secs == window_secs)
        {
            Some(e) => e,
            None => self
                .distinct
                .insert_unique(
                    hash,
                    DistinctEntry {
                        key,
                        window_secs,
                        last_seen: FxHashMap::default(),
                        capped: false,
                    },
                    |e| feature_hash(&e.key, e.window_secs, DISTINCT_SALT),
                )
                .into_mut(),
        };
        let horizon = now.saturating_sub(window_secs);
        entry.last_seen.retain(|_, seen| *seen > horizon);
        if entry.last_seen.is_empty() {
            entry.capped = false;
        }
        let stored = entry.last_seen.len();
        match entry.last_seen.entry(value) {
            std::collections::hash_map::Entry::Occupied(mut seen) => {
                seen.insert(now);
            }
            std::collections::hash_map::Entry::Vacant(slot) if stored < cap => {
                slot.insert(now);
            }
            std::collections::hash_map::Entry::Vacant(_) => entry.capped = true,
        }
        DistinctResult {
            distinct: entry.last_seen.len() as u64,
            capped: entry.capped,
        }
    }

    /// Drops features whose window has passed entirely.
    pub fn sweep(&mut self, now: u64) {
        self.sums.retain(|e| !e.ring.expired(now));
        self.distinct.retain(|e| {
            let horizon = now.saturating_sub(e.window_secs);
            e.last_seen.retain(|_, seen| *seen > horizon);
            !e.last_seen.is_empty()
        });
    }

    pub fn len(&self) -> usize {
        self.sums.len() + self.distinct.len()
    }

    pub fn bytes(&self) -> usize {
        self.sums.capacity() * (std::mem::size_of::<SumEntry>() + 1)
            + self.sums.iter().map(|e| e.ring.bytes()).sum::<usize>()
            + self.distinct.capacity() * (std::mem::size_of::<DistinctEntry>() + 1)
            + self
                .distinct
                .iter()
                .map(|e| e.last_seen.capacity() * 17)
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: StoreKey = StoreKey {
        namespace: 0,
        kind: 14,
        hash: 7,
    };

    #[test]
    fn count_and_sum_slide() {
        let mut t = FeatureTable::default();
        assert_eq!(
            t.add(KEY, 10, 3_600, 1_000),
            SumResult { count: 1, sum: 10 }
        );
        assert_eq!(t.add(KEY, 5, 3_600, 2_000), SumResult { count: 2, sum: 15 });
        assert_eq!(
            t.add(KEY, 1, 3_600, 1_000 + 3_600 + 120),
            SumResult { count: 2, sum: 6 }
        );
    }

    #[test]
    fn distinct_is_exact_within_the_window_and_capped() {
        let mut t = FeatureTable::default();
        for (v, now) in [(1, 100), (2, 110), (1, 120), (3, 130)] {
            t.distinct(KEY, v, 60, 10, now);
        }
        assert_eq!(t.distinct(KEY, 2, 60, 10, 140).distinct, 3);
        // 60 s later only 2 (seen at 140) remains, plus the new 4.
        let r = t.distinct(KEY, 4, 60, 10, 195);
        assert_eq!(
            r,
            DistinctResult {
                distinct: 2,
                capped: false
            }
        );
        let mut t = FeatureTable::default();
        for v in 0..20 {
            t.distinct(KEY, v, 600, 5, 1_000);
        }
        assert_eq!(
            t.distinct(KEY, 99, 600, 5, 1_001),
            DistinctResult {
                distinct: 5,
                capped: true
            }
        );
        t.sweep(2_000);
        assert_eq!(t.len(), 0);
    }
}
