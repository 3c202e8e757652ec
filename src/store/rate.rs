//! Sliding-window rate counters, as Figma's limiter: a window is split into sub-buckets of
//! window/60; the count is the sum of the sub-buckets of the window plus one more (strict: never
//! under-counts the last window); hits keep counting past the limit, so a ban extends while the
//! sender keeps going. Memory per counter is bounded by its sub-bucket count (at most 61).

use hashbrown::HashTable;
use serde::Serialize;

use super::StoreKey;

/// The outcome of one hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateResult {
    /// Hits in the window, this one included.
    pub count: u64,
    /// `count > limit`.
    pub over: bool,
}

/// A window split into sub-buckets of window/60 (at least 1 s), plus one: a rate counter's ring.
#[derive(Debug)]
pub(crate) struct SlidingWindow<T> {
    sub_secs: u64,
    /// Index (time / sub_secs) of the newest sub-bucket.
    head: u64,
    slots: Box<[T]>,
}

impl<T: Copy + Default> SlidingWindow<T> {
    pub fn new(window_secs: u64, now: u64) -> Self {
        let sub_secs = (window_secs / 60).max(1);
        let n = (window_secs / sub_secs + 1) as usize;
        SlidingWindow {
            sub_secs,
            head: now / sub_secs,
            slots: vec![T::default(); n].into_boxed_slice(),
        }
    }

    /// Moves to `now`, clearing the sub-buckets that slid out, and returns the current one. A
    /// time from the past (clock stepped back) lands in the newest sub-bucket.
    pub fn current(&mut self, now: u64) -> &mut T {
        let n = self.slots.len() as u64;
        let current = now / self.sub_secs;
        if current > self.head {
            for step in 1..=(current - self.head).min(n) {
                self.slots[((self.head + step) % n) as usize] = T::default();
            }
            self.head = current;
        }
        &mut self.slots[(self.head % n) as usize]
    }

    pub fn slots(&self) -> &[T] {
        &self.slots
    }

    /// The sub-buckets still in the window at `now` (what `current` would keep), without
    /// moving the ring.
    pub fn live_at(&self, now: u64) -> impl Iterator<Item = &T> {
        let n = self.slots.len() as u64;
        let current = now / self.sub_secs;
        let gone = current.saturating_sub(self.head).min(n);
        // Sub-buckets head+1..=head+gone are cleared by `current`: they are the oldest ones.
        (0..n)
            .filter(move |i| {
                let age = (self.head % n + n - i) % n; // 0 = head
                age + gone < n
            })
            .map(move |i| &self.slots[i as usize])
    }

    /// Nothing in the window any more.
    pub fn expired(&self, now: u64) -> bool {
        now / self.sub_secs >= self.head + self.slots.len() as u64
    }

    pub fn bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<T>()
    }
}

impl SlidingWindow<u32> {
    fn count_at(&self, now: u64) -> u64 {
        self.live_at(now).map(|&c| u64::from(c)).sum()
    }
}

#[derive(Debug)]
struct RateEntry {
    key: StoreKey,
    window_secs: u64,
    ring: SlidingWindow<u32>,
}

#[derive(Debug, Default)]
pub(crate) struct RateTable {
    table: HashTable<RateEntry>,
}

fn rate_hash(key: &StoreKey, window_secs: u64) -> u64 {
    let mut k = key.hash
        ^ (u64::from(key.kind) << 48 | u64::from(key.namespace) << 40)
        ^ window_secs.rotate_left(17);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

impl RateTable {
    pub fn hit(&mut self, key: StoreKey, limit: u64, window_secs: u64, now: u64) -> RateResult {
        let window_secs = window_secs.max(1);
        let hash = rate_hash(&key, window_secs);
        let entry = match self
            .table
            .find_mut(hash, |e| e.key == key && e.window_secs == window_secs)
        {
            Some(e) => e,
            None => self
                .table
                .insert_unique(
                    hash,
                    RateEntry {
                        key,
                        window_secs,
                        ring: SlidingWindow::new(window_secs, now),
                    },
                    |e| rate_hash(&e.key, e.window_secs),
                )
                .into_mut(),
        };
        let slot = entry.ring.current(now);
        *slot = slot.saturating_add(1);
        let count: u64 = entry.ring.slots().iter().map(|&c| u64::from(c)).sum();
        RateResult {
            count,
            over: count > limit,
        }
    }

    /// What `hit` would answer, without counting anything (nothing is created either).
    pub fn peek(&self, key: StoreKey, limit: u64, window_secs: u64, now: u64) -> RateResult {
        let window_secs = window_secs.max(1);
        let hash = rate_hash(&key, window_secs);
        let stored = self
            .table
            .find(hash, |e| e.key == key && e.window_secs == window_secs)
            .map_or(0, |e| e.ring.count_at(now));
        let count = stored + 1;
        RateResult {
            count,
            over: count > limit,
        }
    }

    /// Drops counters whose whole window has slid past.
    pub fn sweep(&mut self, now: u64) {
        self.table.retain(|e| !e.ring.expired(now));
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn bytes(&self) -> usize {
        self.table.capacity() * (std::mem::size_of::<RateEntry>() + 1)
            + self.table.iter().map(|e| e.ring.bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: StoreKey = StoreKey {
        namespace: 0,
        kind: 15,
        hash: 42,
    };

    #[test]
    fn counts_within_the_window_and_keeps_counting_past_the_limit() {
        let mut t = RateTable::default();
        let start = 1_000_000;
        for i in 0..10 {
            let r = t.hit(KEY, 5, 3_600, start + i * 60);
            assert_eq!(r.count, i + 1);
            assert_eq!(r.over, i + 1 > 5);
        }
        // An hour and a sub-bucket later, only later hits remain.
        let r = t.hit(KEY, 5, 3_600, start + 3_600 + 60 + 9 * 60);
        assert!(r.count <= 2, "{r:?}");
    }

    #[test]
    fn peek_answers_as_the_next_hit_would_and_counts_nothing() {
        let mut x = 7u64;
        let mut below = |n: u64| crate::testing::xorshift(&mut x) % n;
        let mut t = RateTable::default();
        let mut now = 1_000_000;
        for _ in 0..5_000 {
            now += below(90);
            let window = [60, 600, 3_600][below(3) as usize];
            let (peeked, len) = (t.peek(KEY, 20, window, now), t.len());
            assert_eq!(
                t.peek(KEY, 20, window, now),
                peeked,
                "peeking twice changes nothing"
            );
            assert_eq!(t.len(), len, "peeking creates no counter");
            if below(4) > 0 {
                assert_eq!(
                    t.hit(KEY, 20, window, now),
                    peeked,
                    "at {now}, window {window}"
                );
            }
        }
    }

    #[test]
    fn strict_window_counts_one_extra_sub_bucket() {
        let mut t = RateTable::default();
        t.hit(KEY, 100, 60, 1_000); // sub-bucket of 1 s, 61 slots
        let r = t.hit(KEY, 100, 60, 1_060);
        assert_eq!(r.count, 2, "exactly one window later still counts");
        let r = t.hit(KEY, 100, 60, 1_062);
        assert_eq!(r.count, 2, "the first hit has slid out, the second remains");
    }

    #[test]
    fn windows_are_separate_counters_and_sweep_frees_them() {
        let mut t = RateTable::default();
        t.hit(KEY, 1, 60, 1_000);
        t.hit(KEY, 1, 3_600, 1_000);
        assert_eq!(t.len(), 2);
        t.sweep(1_000 + 120);
        assert_eq!(
            t.len(),
            1,
            "the minute counter expired, the hour one did not"
        );
        t.sweep(1_000 + 7_300);
        assert_eq!(t.len(), 0);
    }
}
