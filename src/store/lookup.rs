//! Lookups: window sums of many keys in one call (`lookup_many`), the per-call plan that places
//! finest-resolution buckets by id alone (`sum_plan`), and a key's whole timeline.

use parking_lot::MutexGuard;

use super::keys::{key_hash, matches, table_hash};
use super::shards::Shard;
use super::timeline::{Arena, BucketsRef, Entry};
use super::{Bucket, Counts, Store, StoreKey, Timeline, WindowCounts, WindowSums, INLINE_WINDOWS};

/// Keys `lookup_many` takes together: one message's worth, so that a call's cache misses
/// overlap in one round.
const LOOKUP_GROUP: usize = 64;

/// A lookup call's time, and what places its finest-resolution buckets quickly.
struct SumPlan {
    now: u64,
    fine: Option<FinePlan>,
}

/// A resolution-0 bucket `id` is still at resolution 0 when `id >= live`, and then in window
/// `i` when `id >= first[i]` (`Store::sum_plan`).
struct FinePlan {
    live: u64,
    first: [u64; INLINE_WINDOWS],
}

impl Store {
    /// Window sums for each key, in order. Unknown keys give zeros.
    ///
    /// Like `for_each_shard`, but without sorting the keys by shard: the lines of all the
    /// keys' shards are touched first, then the keys are taken `LOOKUP_GROUP` at a time in
    /// call order and their shards tried (a shard this group already holds serves every key
    /// of it; a shard held elsewhere is locked alone afterwards). Then, in a short pass over
    /// the group so that many keys' misses are in flight at once, the slot where each key's
    /// probe starts (its entry's, as a rule: `table.rs`); and only then are the keys read.
    pub fn lookup_many(&self, keys: &[StoreKey]) -> Vec<WindowCounts> {
        let plan = self.sum_plan(self.now());
        let windows = self.windows_secs.len();
        // (`vec!` clones one zero value: much faster here than building each element anew.)
        let mut out = vec![
            WindowCounts {
                windows: WindowSums::zeros(windows),
            };
            keys.len()
        ];
        // (shard, table hash) of each key.
        let places: Vec<(usize, u64)> = keys
            .iter()
            .map(|key| (self.shard_of(key.hash), key_hash(key)))
            .collect();
        self.touch_shards(places.iter().map(|p| p.0));
        let mut deferred: Vec<usize> = Vec::new();
        let mut held: [Option<(usize, MutexGuard<'_, Shard>)>; LOOKUP_GROUP] =
            std::array::from_fn(|_| None);
        // For each key of the group, the entry of `held` that serves it (`NOT_HELD`: none).
        const NOT_HELD: u8 = u8::MAX;
        let mut served = [NOT_HELD; LOOKUP_GROUP];
        for (g, group) in places.chunks(LOOKUP_GROUP).enumerate() {
            let first = g * LOOKUP_GROUP;
            let mut n = 0;
            for (j, &(index, _)) in group.iter().enumerate() {
                let Some(slot) = self.shards.get(index) else {
                    continue;
                };
                if let Some(guard) = slot.try_lock() {
                    if let (Some(h), Some(s)) = (held.get_mut(n), served.get_mut(j)) {
                        *h = Some((index, guard));
                        *s = n as u8;
                        n += 1;
                    }
                    continue;
                }
                // Held by this group (an earlier key of the same shard), or elsewhere.
                match held[..n]
                    .iter()
                    .position(|h| h.as_ref().is_some_and(|(i, _)| *i == index))
                {
                    Some(h) => served[j] = h as u8,
                    None => {
                        served[j] = NOT_HELD;
                        deferred.push(first + j);
                    }
                }
            }
            {
                // Each key's shard (table and arena), if this group holds it.
                let mut shards: [Option<&Shard>; LOOKUP_GROUP] = [None; LOOKUP_GROUP];
                for (shard, &s) in shards.iter_mut().zip(&served).take(group.len()) {
                    *shard = held
                        .get(usize::from(s))
                        .and_then(|h| h.as_ref())
                        .map(|h| &*h.1);
                }
                // The loop that loads what misses is kept short, so that the processor holds
                // the loads of many keys in flight at once.
                let mut touched = 0u64;
                for (shard, &(_, hash)) in shards.iter().zip(group) {
                    if let Some(shard) = shard {
                        touched ^= shard.table.touch(hash);
                    }
                }
                std::hint::black_box(touched);
                for (j, (shard, &(_, hash))) in shards.iter().zip(group).enumerate() {
                    if let (Some(shard), Some(key), Some(sums)) =
                        (shard, keys.get(first + j), out.get_mut(first + j))
                    {
                        self.read_sums(shard, key, hash, &plan, &mut sums.windows);
                    }
                }
            }
            for h in held.iter_mut().take(n) {
                *h = None;
            }
        }
        for i in deferred {
            if let (Some(&(index, hash)), Some(key), Some(sums)) =
                (places.get(i), keys.get(i), out.get_mut(i))
            {
                if let Some(slot) = self.shards.get(index) {
                    self.read_sums(&slot.lock(), key, hash, &plan, &mut sums.windows);
                }
            }
        }
        out
    }

    /// Adds a key's window sums to `windows` (all zeros), if the shard has the key.
    fn read_sums(
        &self,
        shard: &Shard,
        key: &StoreKey,
        hash: u64,
        plan: &SumPlan,
        windows: &mut [Counts],
    ) {
        if let Some(e) = shard.table.find(hash, matches(key)) {
            self.entry_sums(e, &shard.arena, plan, windows);
        }
    }

    /// Adds an entry's window sums to `windows` (all zeros).
    fn entry_sums(&self, e: &Entry, arena: &Arena, plan: &SumPlan, windows: &mut [Counts]) {
        match e.buckets(arena) {
            BucketsRef::Inline(b) => self.set_window_sums(&b, plan, windows),
            BucketsRef::Arena(buckets) => self.add_window_sums(buckets, plan.now, windows),
        }
    }

    /// What a lookup call at `now` needs to place finest-resolution buckets in windows by
    /// comparing bucket ids alone (`SumPlan`).
    fn sum_plan(&self, now: u64) -> SumPlan {
        let mut plan = SumPlan { now, fine: None };
        let Some(r) = self.layout.resolutions().first() else {
            return plan;
        };
        // Wider buckets could make `(id + 1) * width` overflow, where `settle` saturates.
        if self.windows_secs.len() > INLINE_WINDOWS || r.bucket_secs > u64::from(u32::MAX) {
            return plan;
        }
        // `settle` keeps bucket `id` at resolution 0 while `(id + 1) * width + keep > now`,
        // and a window `w` includes it when `(id + 1) * width > now - w`: for integers, `id`
        // at least `(now - keep) / width` and `(now - w) / width`.
        let mut first = [u64::MAX; INLINE_WINDOWS];
        for (f, w) in first.iter_mut().zip(&self.windows_secs) {
            *f = now.saturating_sub(*w) / r.bucket_secs;
        }
        plan.fine = Some(FinePlan {
            live: now.saturating_sub(r.keep_secs) / r.bucket_secs,
            first,
        });
        plan
    }

    /// Sets `windows`, all zeros, to the sums of a key whose only bucket is `b`: its counts in
    /// the windows it overlaps.
    fn set_window_sums(&self, b: &Bucket, plan: &SumPlan, windows: &mut [Counts]) {
        let id = u64::from(b.id);
        match &plan.fine {
            Some(fine) if b.resolution == 0 && id >= fine.live => {
                for (first, sums) in fine.first.iter().zip(windows.iter_mut()) {
                    if id >= *first {
                        *sums = b.counts;
                    }
                }
            }
            _ => self.set_window_sums_settled(b, plan.now, windows),
        }
    }

    /// `set_window_sums` for any bucket: settled first, then compared with each window.
    fn set_window_sums_settled(&self, b: &Bucket, now: u64, windows: &mut [Counts]) {
        if let Some(at) = self.layout.settled(b, now) {
            for (w, sums) in self.windows_secs.iter().zip(windows.iter_mut()) {
                if at.in_window(*w, now) {
                    *sums = b.counts;
                }
            }
        }
    }

    /// Sums buckets that overlap each window `[now - w, now]`, after settling each bucket where
    /// it belongs now (an unswept bucket counts as the sweeper would leave it).
    fn window_sums(&self, buckets: &[Bucket], now: u64) -> WindowSums {
        let mut windows = WindowSums::zeros(self.windows_secs.len());
        self.add_window_sums(buckets, now, &mut windows);
        windows
    }

    /// Adds to `windows` (one per configured window) the buckets in each window
    /// (`Settled::in_window`).
    fn add_window_sums(&self, buckets: &[Bucket], now: u64, windows: &mut [Counts]) {
        for b in buckets {
            let Some(at) = self.layout.settled(b, now) else {
                continue;
            };
            for (w, sums) in self.windows_secs.iter().zip(windows.iter_mut()) {
                if at.in_window(*w, now) {
                    for (s, c) in sums.iter_mut().zip(&b.counts) {
                        *s = s.saturating_add(*c);
                    }
                }
            }
        }
    }

    /// The keys of one shard (`shard_count` shards): `shrike store export` walks them.
    pub fn keys_in_shard(&self, index: usize) -> Vec<StoreKey> {
        let shard = self.shards[index].lock();
        shard
            .table
            .iter()
            .map(|e| StoreKey {
                namespace: e.namespace,
                kind: e.kind,
                hash: e.hash,
            })
            .collect()
    }

    /// A key's buckets and window sums, or `None` for an unknown key.
    pub fn timeline(&self, key: &StoreKey) -> Option<Timeline> {
        let now = self.now();
        let shard = self.shards[self.shard_of(key.hash)].lock();
        let hash = table_hash(key.hash, key.kind, key.namespace);
        let entry = shard.table.find(hash, matches(key))?;
        let buckets = entry.buckets(&shard.arena);
        let mut settled: Vec<(usize, u64, Counts)> = Vec::new();
        for b in buckets.as_slice() {
            if let Some((resolution, id)) = self.layout.settle(b.resolution as usize, b.id, now) {
                let start = self.layout.start(resolution, id);
                match settled
                    .iter_mut()
                    .find(|(r, s, _)| *r == resolution && *s == start)
                {
                    Some((_, _, counts)) => {
                        for (a, c) in counts.iter_mut().zip(&b.counts) {
                            *a = a.saturating_add(*c);
                        }
                    }
                    None => settled.push((resolution, start, b.counts)),
                }
            }
        }
        settled.sort_unstable_by_key(|(r, s, _)| (*r, *s));
        Some(Timeline {
            windows: WindowCounts {
                windows: self.window_sums(buckets.as_slice(), now),
            },
            buckets: settled,
        })
    }
}
