//! The reputation store: per-key timelines of counters in time buckets, window sums, unique
//! counts with paired keys, sliding-window rate counters, and cooperative cleanup.
//!
//! Owns: keys, buckets, counters, windows, rate counters, sweeping, eviction, the injected
//! clock. Never touches: email, Lua, sockets. A key is (namespace, type, 64-bit hash); the store
//! knows nothing of what was hashed.
//!
//! Layout (ARCHITECTURE.md has the details): many small shards, each a mutex around a table
//! whose slots are the 24-byte entries (`table.rs`, `timeline.rs`) plus, boxed on first use,
//! an arena for timelines that outgrew one inline bucket, a table of rate counters and the WAL
//! buffer; a shard is one 64-byte cache line. The shard count is a power of two sized so a shard holds
//! a few hundred keys at the configured maximum: a sweeper batch is one shard, locked once, and
//! there is no iteration to resume inside it. Batch calls lock their shards in small groups and
//! touch every line they will need before using any (`Store::for_each_shard`), so that the
//! cache misses of a call's keys overlap.

pub mod clock;
mod features;
pub mod persist;
mod rate;
mod sums;
pub mod sweeper;
mod table;
pub mod timeline;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use serde::{Deserialize, Serialize};

pub use clock::{Clock, ManualClock, SystemClock};
pub use features::{DistinctResult, SumResult};
pub use persist::{Committer, Durable, FsyncPolicy, PersistConfig, PersistError, Recovery};
pub use rate::RateResult;
pub use sums::{WindowSums, INLINE_WINDOWS};
pub use sweeper::Sweeper;
use table::EntryTable;
pub use timeline::Bucket;
use timeline::{Arena, BucketsRef, Entry};

/// Counters per bucket.
pub const COUNTERS: usize = 5;

/// Shards `record_many` and `lookup_many` hold at once: enough keys for their cache misses to
/// overlap, few enough that a hot shard is not held for a whole call.
const LOCK_GROUP: usize = 16;

/// Keys `lookup_many` takes together: one message's worth, so that a call's cache misses
/// overlap in one round.
const LOOKUP_GROUP: usize = 64;

/// Keys compared when one must be evicted.
const EVICTION_SAMPLE: usize = 32;

/// The counters of one bucket or window, indexed by `Counter`.
pub type Counts = [u64; COUNTERS];

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(usize)]
pub enum Counter {
    /// Messages seen.
    Seen = 0,
    /// Messages judged spam.
    Spam = 1,
    /// Messages judged ham.
    Ham = 2,
    /// User complaints (marked as spam).
    Complaint = 3,
    /// User rescues (moved out of spam).
    Rescue = 4,
}

impl Counter {
    pub const ALL: [Counter; COUNTERS] = [
        Counter::Seen,
        Counter::Spam,
        Counter::Ham,
        Counter::Complaint,
        Counter::Rescue,
    ];

    pub fn name(self) -> &'static str {
        ["seen", "spam", "ham", "complaint", "rescue"][self as usize]
    }
}

/// A store key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoreKey {
    /// A configured traffic prefix (inbound, outbound, ...).
    pub namespace: u8,
    /// The shingle type number.
    pub kind: u16,
    pub hash: u64,
}

/// Add `counts` to `key` in the current bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Increment {
    pub key: StoreKey,
    pub counts: Counts,
}

impl Increment {
    /// One of `counter`.
    pub fn one(key: StoreKey, counter: Counter) -> Self {
        let mut counts = [0; COUNTERS];
        counts[counter as usize] = 1;
        Increment { key, counts }
    }
}

/// One resolution of the timelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// Width of a bucket.
    pub bucket_secs: u64,
    /// How long buckets of this width are kept before folding into the next resolution (or
    /// being dropped, for the last).
    pub keep_secs: u64,
}

/// Store options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Finest first; each width divides the next. Default: 10-minute buckets for a day, daily
    /// buckets for 14 days (the seed system's).
    pub resolutions: Vec<Resolution>,
    /// Windows that lookups sum, in seconds. Default: 10 min, 1 h, 24 h, 7 d, 14 d.
    pub windows_secs: Vec<u64>,
    /// Most keys kept; beyond, the least valuable keys are evicted.
    pub max_keys: usize,
    /// Shards (a power of two); 0 sizes them from `max_keys` (about 512 keys per shard).
    pub shards: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            resolutions: vec![
                Resolution {
                    bucket_secs: 600,
                    keep_secs: 86_400,
                },
                Resolution {
                    bucket_secs: 86_400,
                    keep_secs: 14 * 86_400,
                },
            ],
            windows_secs: vec![600, 3_600, 86_400, 7 * 86_400, 14 * 86_400],
            max_keys: 20_000_000,
            shards: 0,
        }
    }
}

/// Why a store configuration is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("store needs 1 to 8 resolutions, got {0}")]
    Resolutions(usize),
    #[error("resolution {0}: bucket width and keep must be > 0 and keep a multiple of the width")]
    BadResolution(usize),
    #[error("resolution {0}: its width must divide the next resolution's width")]
    NotNested(usize),
    #[error("shards must be a power of two, got {0}")]
    Shards(usize),
    #[error("max_keys must be > 0")]
    MaxKeys,
}

/// Validated bucketing.
#[derive(Debug, Clone)]
pub struct Layout {
    resolutions: Vec<Resolution>,
}

impl Layout {
    pub fn new(resolutions: &[Resolution]) -> Result<Layout, StoreError> {
        if resolutions.is_empty() || resolutions.len() > 8 {
            return Err(StoreError::Resolutions(resolutions.len()));
        }
        for (i, r) in resolutions.iter().enumerate() {
            if r.bucket_secs == 0 || r.keep_secs == 0 || r.keep_secs % r.bucket_secs != 0 {
                return Err(StoreError::BadResolution(i));
            }
            if let Some(next) = resolutions.get(i + 1) {
                if next.bucket_secs % r.bucket_secs != 0 || next.bucket_secs == r.bucket_secs {
                    return Err(StoreError::NotNested(i));
                }
            }
        }
        Ok(Layout {
            resolutions: resolutions.to_vec(),
        })
    }

    pub fn resolutions(&self) -> &[Resolution] {
        &self.resolutions
    }

    /// The resolution-0 bucket of time `t`.
    pub fn bucket_id(&self, t: u64) -> u32 {
        u32::try_from(t / self.resolutions[0].bucket_secs).unwrap_or(u32::MAX)
    }

    /// Start time of a bucket.
    pub fn start(&self, resolution: usize, id: u32) -> u64 {
        u64::from(id) * self.resolutions[resolution].bucket_secs
    }

    /// Where bucket (resolution, id) belongs at time `now`: itself while its resolution keeps
    /// it, else the enclosing bucket of the next resolution that does, else nowhere.
    pub fn settle(&self, mut resolution: usize, mut id: u32, now: u64) -> Option<(usize, u32)> {
        loop {
            let r = self.resolutions.get(resolution)?;
            let end = u64::from(id)
                .saturating_add(1)
                .saturating_mul(r.bucket_secs);
            if end.saturating_add(r.keep_secs) > now {
                return Some((resolution, id));
            }
            let next = self.resolutions.get(resolution + 1)?;
            id = u32::try_from(u64::from(id) * r.bucket_secs / next.bucket_secs).ok()?;
            resolution += 1;
        }
    }
}

/// A bucket where it belongs at some time: its end, and the age its counts are older than
/// (increments land in the finest resolution and move to a coarser one only once they are
/// older than the finer one keeps).
#[derive(Debug, Clone, Copy)]
struct Settled {
    end: u64,
    older_than: u64,
}

impl Settled {
    /// Whether the bucket's counts belong to the window of the last `window` seconds: it
    /// overlaps the window, and a coarse bucket only a window longer than its counts' age (else
    /// the 24 h window would read a whole day bucket that ended an hour ago: up to 48 h).
    fn in_window(self, window: u64, now: u64) -> bool {
        window > self.older_than && self.end > now.saturating_sub(window)
    }
}

/// Sums of one key over the configured windows, in `StoreConfig::windows_secs` order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct WindowCounts {
    /// Reads as a `[Counts]`; up to `INLINE_WINDOWS` windows take no heap allocation.
    pub windows: WindowSums,
}

/// A key's full timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// (resolution index, bucket start in seconds, counts), finest and oldest first.
    pub buckets: Vec<(usize, u64, Counts)>,
    pub windows: WindowCounts,
}

/// What one sweeper step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub shard: usize,
    pub visited: usize,
    pub removed: usize,
}

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

/// Store-wide numbers for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    pub keys: usize,
    /// Rate counters and windowed features.
    pub rate_keys: usize,
    pub evictions: u64,
    pub approx_bytes: usize,
}

#[derive(Default)]
struct Extras {
    rates: rate::RateTable,
    features: features::FeatureTable,
}

impl Shard {
    fn extras(&mut self) -> &mut Extras {
        self.extras.get_or_insert_with(Box::default)
    }
}

/// One shard: its lock and everything a lookup or an increment reads before reaching the
/// entry (the table's header) in one 64-byte cache line (`Slot`), so that touching the line of
/// each shard a call needs, before taking the first lock, brings them all in together. The
/// rest is boxed and allocated on first use.
#[derive(Default)]
struct Shard {
    table: EntryTable,
    arena: Arena,
    /// Rate counters and windowed features, allocated on first use: most shards never have
    /// any, and the shard array stays small.
    extras: Option<Box<Extras>>,
    /// The WAL side (persistence), allocated on first use.
    log: Option<Box<ShardLog>>,
}

#[derive(Default)]
struct ShardLog {
    /// Sequence number of the last change logged.
    seq: u64,
    /// Framed WAL records not yet handed to the WAL writer.
    buf: Vec<u8>,
}

impl Shard {
    fn seq(&self) -> u64 {
        self.log.as_ref().map_or(0, |l| l.seq)
    }

    fn log_mut(&mut self) -> &mut ShardLog {
        self.log.get_or_insert_with(Box::default)
    }
}

/// A shard on a cache line of its own.
#[repr(align(64))]
struct Slot(Mutex<Shard>);

impl std::ops::Deref for Slot {
    type Target = Mutex<Shard>;

    fn deref(&self) -> &Mutex<Shard> {
        &self.0
    }
}

/// The store. Shared between threads (`Arc<Store>`); every method takes `&self`.
pub struct Store {
    layout: Layout,
    windows_secs: Vec<u64>,
    max_keys: usize,
    shards: Box<[Slot]>,
    shard_mask: u64,
    clock: Arc<dyn Clock>,
    keys: AtomicUsize,
    evictions: AtomicU64,
    sweep_cursor: AtomicUsize,
    /// Changes are appended to the shard logs (set by `persist::Durable`).
    logging: std::sync::atomic::AtomicBool,
    /// One bit per shard, set when its log goes from empty to holding records, so the WAL
    /// writer visits only those shards instead of locking every one of tens of thousands on
    /// each flush. The logs themselves stay under the shard locks; a bit is only a hint.
    dirty: Box<[AtomicU64]>,
}

/// What the rules engine and the daemon need of a reputation store. `Store` is the in-memory
/// implementation; a backend on an existing distributed engine (Redis/Valkey Cluster) can
/// implement this trait without touching its users.
pub trait ReputationStore: Send + Sync {
    /// Window sums for each key, in order (zeros for unknown keys).
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<WindowCounts>;
    /// Applies one message's (or batch's) increments.
    fn record_many(&self, increments: &[Increment]);
    /// Counts `unique` once per distinct `pair` per period; returns whether it grew.
    fn increment_unique(&self, pair: StoreKey, unique: StoreKey, period_secs: u64) -> bool;
    /// A sliding-window rate counter hit.
    fn hit(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult;
    /// What `hit` would answer, counting nothing (a learn reads rate limits, as a scan would).
    fn peek_rate(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult;
    /// A key's buckets and window sums.
    fn timeline(&self, key: &StoreKey) -> Option<Timeline>;
    /// The store's clock, Unix seconds (simulated in replays).
    fn now(&self) -> u64;
    /// The windows `lookup_many` sums, in seconds.
    fn windows_secs(&self) -> &[u64];
}

impl ReputationStore for Store {
    fn lookup_many(&self, keys: &[StoreKey]) -> Vec<WindowCounts> {
        Store::lookup_many(self, keys)
    }

    fn record_many(&self, increments: &[Increment]) {
        Store::record_many(self, increments)
    }

    fn increment_unique(&self, pair: StoreKey, unique: StoreKey, period_secs: u64) -> bool {
        Store::increment_unique(self, pair, unique, period_secs)
    }

    fn hit(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult {
        Store::hit(self, key, limit, window_secs)
    }

    fn peek_rate(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult {
        Store::peek_rate(self, key, limit, window_secs)
    }

    fn timeline(&self, key: &StoreKey) -> Option<Timeline> {
        Store::timeline(self, key)
    }

    fn now(&self) -> u64 {
        Store::now(self)
    }

    fn windows_secs(&self) -> &[u64] {
        Store::windows_secs(self)
    }
}

/// Table hash of a key. The key hash is already uniform; type and namespace are mixed in.
fn table_hash(hash: u64, kind: u16, namespace: u8) -> u64 {
    let mut k =
        hash ^ ((u64::from(kind) << 8 | u64::from(namespace)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^ (k >> 33)
}

fn key_hash(key: &StoreKey) -> u64 {
    table_hash(key.hash, key.kind, key.namespace)
}

fn entry_hash(e: &Entry) -> u64 {
    table_hash(e.hash, e.kind, e.namespace)
}

fn matches(key: &StoreKey) -> impl Fn(&Entry) -> bool + '_ {
    move |e| e.hash == key.hash && e.kind == key.kind && e.namespace == key.namespace
}

impl Store {
    pub fn new(config: &StoreConfig, clock: Arc<dyn Clock>) -> Result<Store, StoreError> {
        let layout = Layout::new(&config.resolutions)?;
        if config.max_keys == 0 {
            return Err(StoreError::MaxKeys);
        }
        let shards = if config.shards == 0 {
            (config.max_keys / 512)
                .clamp(16, 1 << 20)
                .next_power_of_two()
        } else if config.shards.is_power_of_two() {
            config.shards
        } else {
            return Err(StoreError::Shards(config.shards));
        };
        Ok(Store {
            layout,
            windows_secs: config.windows_secs.clone(),
            max_keys: config.max_keys,
            shards: (0..shards)
                .map(|_| Slot(Mutex::new(Shard::default())))
                .collect(),
            shard_mask: shards as u64 - 1,
            clock,
            keys: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
            sweep_cursor: AtomicUsize::new(0),
            logging: std::sync::atomic::AtomicBool::new(false),
            dirty: (0..shards.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn windows_secs(&self) -> &[u64] {
        &self.windows_secs
    }

    pub fn now(&self) -> u64 {
        self.clock.now_secs()
    }

    fn shard_of(&self, hash: u64) -> usize {
        // High bits pick the shard; the table hash mixes all bits for the slot.
        ((hash >> 40) & self.shard_mask) as usize
    }

    /// Applies all increments of one message (or one batch) with one lock per shard touched.
    /// Increments to the same key are added together first.
    pub fn record_many(&self, increments: &[Increment]) {
        let now = self.now();
        let id = self.layout.bucket_id(now);
        // (shard, table hash, key, counts), one per distinct key.
        let mut ops: Vec<(usize, u64, StoreKey, Counts)> = increments
            .iter()
            .map(|inc| {
                let key = inc.key;
                (self.shard_of(key.hash), key_hash(&key), key, inc.counts)
            })
            .collect();
        ops.sort_unstable_by_key(|op| (op.0, op.2));
        ops.dedup_by(|later, kept| {
            if later.2 != kept.2 {
                return false;
            }
            for (a, d) in kept.3.iter_mut().zip(&later.3) {
                *a = a.saturating_add(*d);
            }
            true
        });
        let logging = self.logging.load(Ordering::Relaxed);
        let mut logged: Vec<(StoreKey, Counts)> = Vec::new();
        self.for_each_shard(
            &ops,
            |op| (op.0, op.1),
            |shard_index, shard, ops| {
                for (_, hash, key, delta) in ops {
                    self.add(shard, key, *hash, id, delta, now);
                    if logging {
                        logged.push((*key, *delta));
                    }
                }
                if logging {
                    self.log(shard, shard_index, now, &logged);
                    logged.clear();
                }
            },
        );
    }

    /// Loads the cache line of every shard in `indices` (reading its lock state), so that
    /// their misses overlap before any is locked.
    fn touch_shards(&self, indices: impl Iterator<Item = usize>) {
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
    fn for_each_shard<T>(
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

    /// Appends a change to the shard's log, under the shard's lock: a shard's log order is its
    /// apply order, which is what lets snapshots run without stopping writers.
    fn log(&self, shard: &mut Shard, index: usize, now: u64, changes: &[(StoreKey, Counts)]) {
        let log = shard.log_mut();
        let was_empty = log.buf.is_empty();
        log.seq += 1;
        persist::encode_record(&mut log.buf, index as u32, log.seq, now, changes);
        if was_empty {
            self.dirty[index / 64].fetch_or(1 << (index % 64), Ordering::Relaxed);
        }
    }

    /// Adds `delta` to `key` (whose table hash is `hash`) in bucket `id`.
    fn add(&self, shard: &mut Shard, key: &StoreKey, hash: u64, id: u32, delta: &Counts, now: u64) {
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
        let Some(r) = self.layout.resolutions.first() else {
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
        if let Some(at) = self.settled(b, now) {
            for (w, sums) in self.windows_secs.iter().zip(windows.iter_mut()) {
                if at.in_window(*w, now) {
                    *sums = b.counts;
                }
            }
        }
    }

    /// Where bucket `b` belongs at `now`, or `None` if it has expired.
    fn settled(&self, b: &Bucket, now: u64) -> Option<Settled> {
        let resolutions = &self.layout.resolutions;
        let (r, id) = self.layout.settle(b.resolution as usize, b.id, now)?;
        Some(Settled {
            end: self.layout.start(r, id) + resolutions[r].bucket_secs,
            older_than: r.checked_sub(1).map_or(0, |f| resolutions[f].keep_secs),
        })
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
            let Some(at) = self.settled(b, now) else {
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

    /// Counts distinct recipients per sender (Yandex's paired shingles). A pair is counted (both
    /// `pair` and `unique` incremented) when it has not been counted in the last `period_secs`;
    /// otherwise nothing changes. The pair thus remembers when it was last counted, so a window
    /// of `period_secs` over `unique` holds each recipient at most once, wherever it falls
    /// (not two when the writes straddle midnight), and a recipient written to every day counts
    /// once a period. "Last counted" is known to the pair's bucket (the finest resolution's,
    /// 10 minutes by default): a pair is counted again between `period_secs` and
    /// `period_secs` plus one bucket after its last count. Both keys live on the shard of
    /// `unique`, so the check and both increments are atomic with respect to concurrent scans.
    /// Returns whether `unique` grew. Pair keys are only reachable through this method.
    pub fn increment_unique(&self, pair: StoreKey, unique: StoreKey, period_secs: u64) -> bool {
        let now = self.now();
        let id = self.layout.bucket_id(now);
        let period = period_secs.max(1);
        let mut shard = self.shards[self.shard_of(unique.hash)].lock();
        let pair_hash = table_hash(pair.hash, pair.kind, pair.namespace);
        // Counted in the last period: a bucket of the pair in that window, as windows are read.
        let counted_recently = shard
            .table
            .find(pair_hash, matches(&pair))
            .is_some_and(|e| {
                e.buckets(&shard.arena).as_slice().iter().any(|b| {
                    b.counts[Counter::Seen as usize] > 0
                        && self
                            .settled(b, now)
                            .is_some_and(|at| at.in_window(period, now))
                })
            });
        if counted_recently {
            return false;
        }
        let one = Increment::one(pair, Counter::Seen).counts;
        self.add(&mut shard, &pair, pair_hash, id, &one, now);
        self.add(&mut shard, &unique, key_hash(&unique), id, &one, now);
        if self.logging.load(Ordering::Relaxed) {
            let shard_index = self.shard_of(unique.hash);
            self.log(&mut shard, shard_index, now, &[(pair, one), (unique, one)]);
        }
        true
    }

    /// A sliding-window rate counter (Figma's): counts this hit and returns the count in the
    /// window and whether it is over `limit`. See `rate.rs`.
    pub fn hit(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult {
        let now = self.now();
        let mut shard = self.shards[self.shard_of(key.hash)].lock();
        shard.extras().rates.hit(key, limit, window_secs, now)
    }

    /// `hit`'s answer without the hit.
    pub fn peek_rate(&self, key: StoreKey, limit: u64, window_secs: u64) -> RateResult {
        let now = self.now();
        let shard = self.shards[self.shard_of(key.hash)].lock();
        match &shard.extras {
            Some(extras) => extras.rates.peek(key, limit, window_secs, now),
            None => RateResult {
                count: 1,
                over: 1 > limit,
            },
        }
    }

    /// Adds `amount` to a windowed count-and-sum feature; returns the count and sum in the window.
    pub fn feature_add(&self, key: StoreKey, amount: u64, window_secs: u64) -> SumResult {
        let now = self.now();
        self.shards[self.shard_of(key.hash)]
            .lock()
            .extras()
            .features
            .add(key, amount, window_secs, now)
    }

    /// Notes `value` (a hash) in a windowed distinct-count feature storing at most `cap` values;
    /// returns the exact number of distinct values in the window (a lower bound when capped).
    pub fn feature_distinct(
        &self,
        key: StoreKey,
        value: u64,
        window_secs: u64,
        cap: usize,
    ) -> DistinctResult {
        let now = self.now();
        self.shards[self.shard_of(key.hash)]
            .lock()
            .extras()
            .features
            .distinct(key, value, window_secs, cap, now)
    }

    /// One step of cooperative cleanup: settles every key of the next shard (folding aged
    /// buckets, dropping expired ones), removes keys and rate counters with nothing left, and
    /// releases the shard. Call it repeatedly; it cycles over the shards.
    pub fn sweep_step(&self) -> SweepReport {
        let index = self.sweep_cursor.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        let now = self.now();
        let mut shard = self.shards[index].lock();
        let Shard {
            table,
            arena,
            extras,
            ..
        } = &mut *shard;
        let visited = table.len();
        let mut removed = 0;
        table.retain(|entry| {
            let live = entry.age(now, &self.layout, arena);
            if !live {
                removed += 1;
            }
            live
        });
        // Give memory back when most of a table has expired.
        if table.capacity() > 64 && table.len() < table.capacity() / 4 {
            table.shrink_to(table.len() * 2);
        }
        if let Some(x) = extras {
            x.rates.sweep(now);
            x.features.sweep(now);
            if x.rates.len() == 0 && x.features.len() == 0 {
                *extras = None;
            }
        }
        drop(shard);
        self.keys.fetch_sub(removed, Ordering::Relaxed);
        SweepReport {
            shard: index,
            visited,
            removed,
        }
    }

    // ---- persistence hooks (see persist.rs) ----

    pub(crate) fn enable_log(&self) {
        self.logging.store(true, Ordering::Relaxed);
    }

    /// Hands each shard's pending log records to `f`, emptying the shard buffers.
    pub(crate) fn drain_logs(&self, mut f: impl FnMut(&[u8])) {
        for (word_index, word) in self.dirty.iter().enumerate() {
            // A shard whose bit is cleared here and that logs again before it is locked below
            // has its new records taken too; one that logs after the take sets its bit again.
            let mut bits = word.swap(0, Ordering::Relaxed);
            while bits != 0 {
                let index = word_index * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let pending = {
                    let mut shard = self.shards[index].lock();
                    match shard.log.as_mut() {
                        Some(log) if !log.buf.is_empty() => std::mem::take(&mut log.buf),
                        _ => continue,
                    }
                };
                f(&pending);
            }
        }
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
        persist::encode_shard_block(out, index as u32, shard.seq(), &keys);
        keys.len() as u64
    }

    /// Restores one shard from a snapshot block.
    pub(crate) fn load_shard(&self, index: usize, seq: u64, entries: Vec<(StoreKey, Vec<Bucket>)>) {
        let mut shard = self.shards[index].lock();
        if seq != shard.seq() {
            shard.log_mut().seq = seq;
        }
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
        if seq > shard.seq() {
            shard.log_mut().seq = seq;
        }
    }

    /// Drops every key (salvage after a damaged snapshot).
    pub(crate) fn clear(&self) {
        for shard in self.shards.iter() {
            *shard.lock() = Shard::default();
        }
        self.keys.store(0, Ordering::Relaxed);
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn stats(&self) -> StoreStats {
        let mut approx_bytes = std::mem::size_of_val(&*self.shards);
        let mut rate_keys = 0;
        for shard in self.shards.iter() {
            let shard = shard.lock();
            approx_bytes += shard.table.bytes()
                + shard.arena.bytes()
                + shard
                    .log
                    .as_ref()
                    .map_or(0, |l| std::mem::size_of::<ShardLog>() + l.buf.capacity());
            if let Some(x) = &shard.extras {
                approx_bytes +=
                    std::mem::size_of::<Extras>() + x.rates.bytes() + x.features.bytes();
                rate_keys += x.rates.len() + x.features.len();
            }
        }
        StoreStats {
            keys: self.keys.load(Ordering::Relaxed),
            rate_keys,
            evictions: self.evictions.load(Ordering::Relaxed),
            approx_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400;
    const T0: u64 = 1_700_000_000 - 1_700_000_000 % DAY + 3_600; // 01:00 on some day

    fn key(hash: u64) -> StoreKey {
        StoreKey {
            namespace: 0,
            kind: 8,
            hash,
        }
    }

    fn store(max_keys: usize) -> (Store, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(T0));
        let config = StoreConfig {
            max_keys,
            shards: 16,
            ..StoreConfig::default()
        };
        (Store::new(&config, clock.clone()).unwrap(), clock)
    }

    fn seen(w: &WindowCounts, window: usize) -> u64 {
        w.windows[window][Counter::Seen as usize]
    }

    #[test]
    fn a_shard_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    #[test]
    fn config_is_validated() {
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(0));
        let bad = StoreConfig {
            shards: 3,
            ..StoreConfig::default()
        };
        assert_eq!(
            Store::new(&bad, clock.clone()).err(),
            Some(StoreError::Shards(3))
        );
        let bad = StoreConfig {
            resolutions: vec![
                Resolution {
                    bucket_secs: 600,
                    keep_secs: DAY,
                },
                Resolution {
                    bucket_secs: 900,
                    keep_secs: DAY,
                },
            ],
            ..StoreConfig::default()
        };
        assert_eq!(
            Store::new(&bad, clock).err(),
            Some(StoreError::NotNested(0))
        );
    }

    #[test]
    fn windows_sum_what_happened_in_them() {
        let (s, clock) = store(1_000);
        s.record_many(&[
            Increment::one(key(1), Counter::Seen),
            Increment::one(key(1), Counter::Spam),
        ]);
        clock.advance(2 * 3_600);
        s.record_many(&[
            Increment::one(key(1), Counter::Seen),
            Increment::one(key(1), Counter::Seen),
        ]);
        let w = &s.lookup_many(&[key(1), key(2)]);
        // windows: 10 min, 1 h, 24 h, 7 d, 14 d
        assert_eq!(seen(&w[0], 0), 2);
        assert_eq!(seen(&w[0], 1), 2);
        assert_eq!(seen(&w[0], 2), 3);
        assert_eq!(w[0].windows[2][Counter::Spam as usize], 1);
        assert_eq!(seen(&w[1], 4), 0, "unknown keys are zero");
        clock.advance(3 * DAY);
        let w = &s.lookup_many(&[key(1)]);
        assert_eq!(seen(&w[0], 2), 0);
        assert_eq!(
            seen(&w[0], 3),
            3,
            "folded into daily buckets, still in 7 days"
        );
        clock.advance(20 * DAY);
        assert_eq!(
            seen(&s.lookup_many(&[key(1)])[0], 4),
            0,
            "gone after 14 days"
        );
    }

    #[test]
    fn timeline_shows_buckets_and_folds() {
        let (s, clock) = store(1_000);
        s.record_many(&[Increment::one(key(7), Counter::Complaint)]);
        clock.advance(900);
        s.record_many(&[Increment::one(key(7), Counter::Seen)]);
        let t = s.timeline(&key(7)).unwrap();
        assert_eq!(t.buckets.len(), 2);
        assert_eq!(t.buckets[0].0, 0);
        assert_eq!(t.buckets[0].1 % 600, 0);
        clock.advance(2 * DAY);
        let t = s.timeline(&key(7)).unwrap();
        assert_eq!(t.buckets.len(), 1);
        assert_eq!(t.buckets[0].0, 1, "daily resolution");
        assert_eq!(t.buckets[0].2[Counter::Complaint as usize], 1);
        assert!(s.timeline(&key(8)).is_none());
    }

    #[test]
    fn duplicates_in_one_batch_aggregate() {
        let (s, _) = store(1_000);
        let batch = vec![Increment::one(key(3), Counter::Seen); 5000];
        s.record_many(&batch);
        assert_eq!(seen(&s.lookup_many(&[key(3)])[0], 0), 5000);
        assert_eq!(s.stats().keys, 1);
    }

    #[test]
    fn unique_counts_distinct_pairs_per_period() {
        let (s, clock) = store(1_000);
        let sender = StoreKey {
            namespace: 0,
            kind: 72,
            hash: 99,
        };
        let pair = |r: u64| StoreKey {
            namespace: 0,
            kind: 71,
            hash: 1_000 + r,
        };
        for r in [1, 2, 2, 3, 1] {
            s.increment_unique(pair(r), sender, DAY);
        }
        assert_eq!(
            seen(&s.lookup_many(&[sender])[0], 2),
            3,
            "three distinct recipients"
        );
        // Counted again only once a full period (and at most one bucket) has passed.
        clock.advance(DAY - 1);
        assert!(
            !s.increment_unique(pair(1), sender, DAY),
            "within the period"
        );
        clock.advance(601);
        assert!(
            s.increment_unique(pair(1), sender, DAY),
            "a period after its last count, it counts again"
        );
        assert!(!s.increment_unique(pair(1), sender, DAY));
        assert_eq!(
            seen(&s.lookup_many(&[sender])[0], 2),
            1,
            "once in the 24 h window"
        );
    }

    #[test]
    fn unique_counts_do_not_double_across_midnight() {
        let (s, clock) = store(1_000);
        let sender = StoreKey {
            namespace: 0,
            kind: 72,
            hash: 7,
        };
        let pair = StoreKey {
            namespace: 0,
            kind: 71,
            hash: 8,
        };
        // 23:45 and 00:15 UTC: one recipient, in every window.
        let midnight = (T0 / DAY + 1) * DAY;
        clock.set(midnight - 15 * 60);
        assert!(s.increment_unique(pair, sender, DAY));
        clock.set(midnight + 15 * 60);
        assert!(!s.increment_unique(pair, sender, DAY));
        let w = &s.lookup_many(&[sender])[0];
        for window in 0..w.windows.len() {
            assert!(seen(w, window) <= 1, "window {window}: {}", seen(w, window));
        }
        assert_eq!(seen(w, 2), 1);
        // Writing every hour for three days: the 24 h window never holds the recipient twice.
        for _ in 0..72 {
            clock.advance(3_600);
            s.increment_unique(pair, sender, DAY);
            assert_eq!(seen(&s.lookup_many(&[sender])[0], 2), 1);
        }
    }

    #[test]
    fn max_keys_evicts_the_least_valuable() {
        let (s, clock) = store(64);
        for h in 0..64 {
            s.record_many(&[Increment::one(key(h << 40), Counter::Seen)]);
        }
        clock.advance(3_600);
        for h in 100..400 {
            s.record_many(&[Increment::one(key(h << 40), Counter::Seen)]);
        }
        let stats = s.stats();
        assert!(stats.keys <= 64 + s.shard_count(), "{stats:?}");
        assert!(stats.evictions >= 300 - s.shard_count() as u64, "{stats:?}");
        // The old keys went first.
        let old: u64 = s
            .lookup_many(&(0..64).map(|h| key(h << 40)).collect::<Vec<_>>())
            .iter()
            .map(|w| seen(w, 4))
            .sum();
        assert!(old < 16, "{old} old keys survived");
    }

    #[test]
    fn sweeping_removes_expired_keys_only() {
        let (s, clock) = store(10_000);
        for h in 0..1_000 {
            s.record_many(&[Increment::one(key(h * 0x1_0000_0001), Counter::Seen)]);
        }
        clock.advance(10 * DAY);
        for h in 0..100 {
            s.record_many(&[Increment::one(key(h * 0x1_0000_0001), Counter::Seen)]);
        }
        clock.advance(5 * DAY);
        let before = s.lookup_many(&[key(0), key(500 * 0x1_0000_0001)]);
        let bytes_before = s.stats().approx_bytes;
        let mut removed = 0;
        for _ in 0..s.shard_count() {
            removed += s.sweep_step().removed;
        }
        assert_eq!(removed, 900);
        assert_eq!(s.stats().keys, 100);
        assert!(
            s.stats().approx_bytes < bytes_before,
            "tables shrink after expiry"
        );
        assert_eq!(s.lookup_many(&[key(0), key(500 * 0x1_0000_0001)]), before);
    }

    /// A spread of keys: few shards (so a call's keys share them), some keys with one small
    /// bucket (inline), some in the arena (two buckets, or a count past 12 bits).
    fn varied_store() -> (Store, Vec<StoreKey>) {
        let (s, clock) = store(100_000);
        let keys: Vec<StoreKey> = (0..200u64)
            .map(|h| key(h.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            let n = if i % 7 == 0 { 5_000 } else { i + 1 };
            s.record_many(&vec![Increment::one(*k, Counter::ALL[i % COUNTERS]); n]);
        }
        clock.advance(2 * 3_600);
        s.record_many(
            &keys
                .iter()
                .step_by(3)
                .map(|k| Increment::one(*k, Counter::Seen))
                .collect::<Vec<_>>(),
        );
        (s, keys)
    }

    #[test]
    fn lookups_of_any_call_match_single_lookups() {
        let (s, keys) = varied_store();
        // Repeats, unknown keys, keys of one shard far apart, longer than a lock group.
        let mut call: Vec<StoreKey> = Vec::new();
        for i in 0..300u64 {
            let k = match i % 5 {
                0 => key(1_000_000 + i),
                _ => keys[(i * 37 % keys.len() as u64) as usize],
            };
            call.push(k);
        }
        call.extend_from_slice(&call.clone()[..50]);
        let got = s.lookup_many(&call);
        assert_eq!(got.len(), call.len());
        for (k, w) in call.iter().zip(&got) {
            assert_eq!(w, &s.lookup_many(std::slice::from_ref(k))[0], "{k:?}");
            match s.timeline(k) {
                Some(t) => assert_eq!(w, &t.windows),
                None => assert!(w.windows.iter().all(|c| *c == [0; COUNTERS])),
            }
        }
        assert!(s.lookup_many(&[]).is_empty());
    }

    /// Whether a timeline's bucket (resolution `r` from `start`) is in the window of the last
    /// `w` seconds, as the windows are defined: it overlaps the window, and a coarse bucket
    /// (whose counts are older than the finer resolution keeps) only a longer window.
    fn bucket_in_window(s: &Store, r: usize, start: u64, w: u64) -> bool {
        let res = s.layout().resolutions();
        let older_than = r.checked_sub(1).map_or(0, |f| res[f].keep_secs);
        w > older_than && start + res[r].bucket_secs > s.now().saturating_sub(w)
    }

    /// Window sums from a timeline's settled buckets, as the windows are defined.
    fn sums_from_timeline(s: &Store, t: &Timeline) -> Vec<Counts> {
        s.windows_secs()
            .iter()
            .map(|w| {
                let mut sum = [0u64; COUNTERS];
                for (r, start, counts) in &t.buckets {
                    if bucket_in_window(s, *r, *start, *w) {
                        for (a, c) in sum.iter_mut().zip(counts) {
                            *a += c;
                        }
                    }
                }
                sum
            })
            .collect()
    }

    #[test]
    fn a_one_bucket_key_ages_through_every_window_edge() {
        let (s, clock) = store(1_000);
        s.record_many(&[Increment::one(key(5), Counter::Spam)]);
        for step in 0..(16 * DAY / 300) {
            clock.set(T0 + step * 300 + step % 7);
            let got = s.lookup_many(&[key(5)]);
            let expected = s
                .timeline(&key(5))
                .map_or(vec![[0; COUNTERS]; 5], |t| sums_from_timeline(&s, &t));
            assert_eq!(&*got[0].windows, expected.as_slice(), "{step}");
        }
    }

    #[test]
    fn lookups_wait_for_a_shard_held_elsewhere() {
        let (s, keys) = varied_store();
        let s = Arc::new(s);
        let expected = s.lookup_many(&keys);
        let busy = s.shard_of(keys[3].hash);
        let guard = s.shards[busy].lock();
        let reader = {
            let (s, keys) = (s.clone(), keys.clone());
            std::thread::spawn(move || s.lookup_many(&keys))
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !reader.is_finished(),
            "a lookup read a shard held elsewhere"
        );
        drop(guard);
        assert_eq!(reader.join().unwrap(), expected);
    }

    #[test]
    fn concurrent_increments_are_all_counted() {
        let (s, _) = store(100_000);
        let s = Arc::new(s);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        s.record_many(&[
                            Increment::one(key(1), Counter::Seen),
                            Increment::one(key(i * 7 + t), Counter::Ham),
                        ]);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(seen(&s.lookup_many(&[key(1)])[0], 0), 40_000);
    }

    #[test]
    fn rate_limits_through_the_store() {
        let (s, clock) = store(1_000);
        let k = StoreKey {
            namespace: 1,
            kind: 15,
            hash: 5,
        };
        let results: Vec<_> = (0..4).map(|_| s.hit(k, 3, 3_600)).collect();
        assert!(!results[2].over && results[3].over);
        clock.advance(2 * 3_600);
        assert_eq!(s.hit(k, 3, 3_600).count, 1);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

            /// A window's sum equals the sum of the timeline buckets that overlap it, and
            /// sweeping never changes a live window's sum.
            #[test]
            fn windows_are_bucket_sums_and_survive_sweeping(
                events in proptest::collection::vec((0u64..8, 0u64..40 * 3_600, 0usize..5), 1..200),
                probe in 0u64..20 * DAY,
            ) {
                let (s, clock) = store(100_000);
                let mut events = events;
                events.sort_by_key(|e| e.1);
                for (k, t, c) in &events {
                    clock.set(T0 + t);
                    s.record_many(&[Increment::one(key(*k << 40), Counter::ALL[*c])]);
                }
                clock.set(T0 + 40 * 3_600 + probe);
                let keys: Vec<_> = (0..8).map(|k| key(k << 40)).collect();
                let before = s.lookup_many(&keys);
                for (k, w) in keys.iter().zip(&before) {
                    if let Some(t) = s.timeline(k) {
                        for (wi, secs) in s.windows_secs().iter().enumerate() {
                            let mut sum = [0u64; COUNTERS];
                            for (r, start, counts) in &t.buckets {
                                if bucket_in_window(&s, *r, *start, *secs) {
                                    for (a, c) in sum.iter_mut().zip(counts) { *a += c; }
                                }
                            }
                            prop_assert_eq!(sum, w.windows[wi]);
                        }
                    }
                }
                for _ in 0..s.shard_count() {
                    s.sweep_step();
                }
                prop_assert_eq!(s.lookup_many(&keys), before);
            }
        }
    }
}
