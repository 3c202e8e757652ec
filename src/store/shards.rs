//! The shards: the shard array's element (a lock around an entry table, one cache line), how
//! batch calls lock shards in groups so that their cache misses overlap (`for_each_shard`),
//! applying an increment under a shard's lock, eviction, and the hooks persistence uses: the
//! store's one WAL buffer (append, drain) and encoding and restoring shards.

use std::sync::atomic::Ordering;

use parking_lot::{Mutex, MutexGuard};

use super::keys::{key_hash, matches, table_hash};
use super::table::EntryTable;
use super::timeline::{Arena, Entry};
use super::{persist, rate, Bucket, Counts, Increment, Store, StoreKey};

/// Shards `record_many` and `lookup_many` hold at once: enough keys for their cache misses to
/// overlap, few enough that a hot shard is not held for a whole call.
const LOCK_GROUP: usize = 16;

/// Keys compared when one must be evicted.
const EVICTION_SAMPLE: usize = 32;

/// One shard: its lock and everything a lookup or an increment reads before reaching the
/// entry (the table's header) in one 64-byte cache line (`Slot`), so that touching the line of
/// each shard a call needs, before taking the first lock, brings them all in together. The
/// rest is boxed and allocated on first use.
#[derive(Default)]
pub(super) struct Shard {
    pub(super) table: EntryTable,
    pub(super) arena: Arena,
    /// Rate counters, allocated on first use: most shards never have any, and the shard array
    /// stays small.
    pub(super) extras: Option<Box<Extras>>,
    /// Sequence number of the shard's last logged change (persistence): WAL records carry it,
    /// so recovery skips what a snapshot already holds, shard by shard.
    seq: u64,
}

/// What a shard holds besides its timelines and log.
#[derive(Default)]
pub(super) struct Extras {
    pub(super) rates: rate::RateTable,
}

impl Shard {
    pub(super) fn extras(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }

    /// The sequence number of a change about to be logged.
    pub(super) fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
}

/// A shard on a cache line of its own.
#[repr(align(64))]
pub(super) struct Slot(pub(super) Mutex<Shard>);

impl std::ops::Deref for Slot {
    type Target = Mutex<Shard>;

    fn deref(&self) -> &Mutex<Shard> {
        &self.0
    }
}

impl Store {
    pub(super) fn shard_of(&self, hash: u64) -> usize {
        // High bits pick the shard; the table hash mixes all bits for the slot.
        ((hash >> 40) & self.shard_mask) as usize
    }

    /// Loads the cache line of every shard in `indices` (reading its lock state), so that
    /// their misses overlap before any is locked.
    pub(super) fn touch_shards(&self, indices: impl Iterator<Item = usize>) {
        let mut busy = false;
        for index in indices {
            if let Some(slot) = self.shards.get(index) {
                busy |= slot.is_locked();
            }
        }
        std::hint::black_box(busy);
    }

    /// Runs `apply(shard index, shard, its ops)` for each shard of `ops`, which are sorted by
    /// shard (`place` gives an op's shard and table hash), under that shard's lock, once per
    /// shard.
    ///
    /// A random key costs two dependent cache misses (the shard, then the slot of the table
    /// where its probe starts), and a lock instruction lets no earlier load pass it, so taking
    /// the shards one after another pays the misses in series. Instead: the lines of all the
    /// shards are touched before the first lock; then up to `LOCK_GROUP` shards are locked
    /// together, the slots of their ops touched, and each shard released as soon as its ops are
    /// applied. The misses overlap. Group locks are only tried: a shard held elsewhere
    /// (a hot key's, or one being swept) is not waited for while others are held, but taken
    /// alone after the groups, so no lock is held while waiting for another (no deadlock) and
    /// a hot shard is not kept waiting on other shards' misses.
    pub(super) fn for_each_shard<T>(
        &self,
        ops: &[T],
        place: impl Fn(&T) -> (usize, u64),
        mut apply: impl FnMut(usize, &mut Shard, &[T]),
    ) {
        self.touch_shards(ops.iter().map(|op| place(op).0));
        let mut group: Vec<(usize, std::ops::Range<usize>, MutexGuard<'_, Shard>)> =
            Vec::with_capacity(LOCK_GROUP.min(ops.len()));
        let mut deferred: Vec<(usize, std::ops::Range<usize>)> = Vec::new();
        let mut start = 0;
        while start < ops.len() {
            let mut end = start;
            while end < ops.len() && group.len() < LOCK_GROUP {
                let (index, _) = place(&ops[end]);
                let first = end;
                while end < ops.len() && place(&ops[end]).0 == index {
                    end += 1;
                }
                match self.shards.get(index).and_then(|slot| slot.try_lock()) {
                    Some(guard) => group.push((index, first..end, guard)),
                    None => deferred.push((index, first..end)),
                }
            }
            let mut touched = 0u64;
            for (_, range, shard) in &group {
                for op in &ops[range.clone()] {
                    touched ^= shard.table.touch(place(op).1);
                }
            }
            std::hint::black_box(touched);
            for (index, range, mut shard) in group.drain(..) {
                apply(index, &mut shard, &ops[range]);
            }
            start = end;
        }
        for (index, range) in deferred {
            if let Some(slot) = self.shards.get(index) {
                apply(index, &mut slot.lock(), &ops[range]);
            }
        }
    }

    /// Adds `delta` to `key` (whose table hash is `hash`) in bucket `id`.
    pub(super) fn add(
        &self,
        shard: &mut Shard,
        key: &StoreKey,
        hash: u64,
        id: u32,
        delta: &Counts,
        now: u64,
    ) {
        let Shard { table, arena, .. } = shard;
        if let Some(entry) = table.find_mut(hash, matches(key)) {
            entry.add(id, delta, arena);
            return;
        }
        if self.keys.load(Ordering::Relaxed) >= self.max_keys {
            self.evict_one(shard, now);
        }
        let Shard { table, arena, .. } = shard;
        let entry = Entry::new(key.hash, key.kind, key.namespace, id, delta, arena);
        table.insert_unique(hash, entry);
        self.keys.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes the least valuable of a sample of a shard's keys (as Redis samples for LRU): the
    /// one whose newest bucket is oldest, fewest messages seen breaking ties. The sample is the
    /// first `EVICTION_SAMPLE` entries in table order, i.e. by hash, so effectively random. A
    /// shard with no keys evicts nothing (the overshoot is at most one key per shard).
    fn evict_one(&self, shard: &mut Shard, now: u64) {
        let Shard { table, arena, .. } = shard;
        let victim = table
            .iter()
            .take(EVICTION_SAMPLE)
            .map(|e| {
                let buckets = e.buckets(arena);
                let newest = buckets
                    .as_slice()
                    .iter()
                    .map(|b| self.layout.start(b.resolution as usize, b.id))
                    .max()
                    .unwrap_or(0);
                let seen: u64 = buckets.as_slice().iter().map(|b| b.counts[0]).sum();
                (newest.min(now), seen, e.hash, e.kind, e.namespace)
            })
            .min();
        if let Some((_, _, hash, kind, namespace)) = victim {
            let key = StoreKey {
                namespace,
                kind,
                hash,
            };
            if let Some(entry) = table.remove(table_hash(hash, kind, namespace), matches(&key)) {
                entry.release(arena);
                self.keys.fetch_sub(1, Ordering::Relaxed);
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    // ---- persistence hooks (see persist/) ----

    pub(crate) fn enable_log(&self) {
        self.logging.store(true, Ordering::Relaxed);
    }

    /// Hands the pending WAL records to `f`, emptying the buffer. The emptied buffer is kept
    /// for the next swap (up to a bound), so writers append into memory already faulted in
    /// rather than growing a fresh buffer after every flush.
    pub(crate) fn drain_logs(&self, f: impl FnOnce(&[u8])) {
        /// Larger buffers (after a burst, or a flush held up by a slow disk) are freed rather
        /// than kept: a flush at 10,000 messages a second takes ~1.2 MiB.
        const MAX_SPARE: usize = 4 << 20;
        let spare = std::mem::take(&mut *self.wal_spare.lock());
        let mut pending = std::mem::replace(&mut *self.wal.lock(), spare);
        f(&pending);
        if pending.capacity() <= MAX_SPARE {
            pending.clear();
            *self.wal_spare.lock() = pending;
        }
    }

    /// Appends a framed record (from `persist::finish_record`) to the WAL buffer.
    pub(super) fn append_log(&self, record: &[u8]) {
        self.wal.lock().extend_from_slice(record);
    }

    /// Encodes one shard for a snapshot (under its lock); returns its key count.
    pub(crate) fn encode_shard(&self, index: usize, out: &mut Vec<u8>) -> u64 {
        let shard = self.shards[index].lock();
        let keys: Vec<(StoreKey, Vec<Bucket>)> = shard
            .table
            .iter()
            .map(|e| {
                let key = StoreKey {
                    namespace: e.namespace,
                    kind: e.kind,
                    hash: e.hash,
                };
                (key, e.buckets(&shard.arena).as_slice().to_vec())
            })
            .collect();
        persist::encode_shard_block(out, index as u32, shard.seq, &keys);
        keys.len() as u64
    }

    /// Restores one shard from a snapshot block.
    pub(crate) fn load_shard(&self, index: usize, seq: u64, entries: Vec<(StoreKey, Vec<Bucket>)>) {
        let mut shard = self.shards[index].lock();
        shard.seq = seq;
        let added = entries.len();
        for (key, buckets) in entries {
            let hash = table_hash(key.hash, key.kind, key.namespace);
            let Shard { table, arena, .. } = &mut *shard;
            if let Some(old) = table.remove(hash, matches(&key)) {
                old.release(arena);
                self.keys.fetch_sub(1, Ordering::Relaxed);
            }
            let entry = Entry::from_buckets(key.hash, key.kind, key.namespace, buckets, arena);
            table.insert_unique(hash, entry);
        }
        self.keys.fetch_add(added, Ordering::Relaxed);
    }

    /// Re-applies a logged change at its original time, into the shard that logged it.
    pub(crate) fn replay(&self, index: usize, seq: u64, time: u64, increments: &[Increment]) {
        let id = self.layout.bucket_id(time);
        let mut shard = self.shards[index].lock();
        for inc in increments {
            self.add(
                &mut shard,
                &inc.key,
                key_hash(&inc.key),
                id,
                &inc.counts,
                time,
            );
        }
        shard.seq = shard.seq.max(seq);
    }

    /// Drops every key (salvage after a damaged snapshot).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            *shard.lock() = Shard::default();
        }
        self.keys.store(0, Ordering::Relaxed);
    }
}
