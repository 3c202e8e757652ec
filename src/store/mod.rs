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
//! buffer; a shard is one 64-byte cache line. The shard count is a power of two sized so a shard
//! holds a few hundred keys at the configured maximum: a sweeper batch is one shard, locked once,
//! and there is no iteration to resume inside it. Batch calls lock their shards in small groups and
//! touch every line they will need before using any (`Store::for_each_shard`), so that the
//! cache misses of a call's keys overlap.
//!
//! This file is the facade: the `Store` type, its configuration, the `ReputationStore` trait
//! and the write path. The parts, by concern:
//! - `keys.rs`: the key type and its table hash;
//! - `layout.rs`: resolutions, where a bucket settles as it ages, which windows it counts in;
//! - `shards.rs`: the shard type, group locking (`for_each_shard`), applying an increment,
//!   eviction, and the hooks persistence uses (the WAL buffer, encoding and restoring shards);
//! - `lookup.rs`: `lookup_many`, its sum plan, window sums and timelines;
//! - `table.rs`, `timeline.rs`, `sums.rs`: a shard's entry table, a key's buckets, window sums
//!   without allocation; `rate.rs`: rate counters; `sweeper.rs`: the sweeping thread;
//!   `persist/`: the WAL, snapshots and recovery; `clock.rs`: the injected clock.

pub mod clock;
mod combine;
mod keys;
mod layout;
mod lookup;
pub mod persist;
mod rate;
pub mod redis;
mod shards;
mod sums;
pub mod sweeper;
mod table;
pub mod timeline;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

pub use clock::{Clock, ManualClock, SystemClock};
pub use combine::{combine, spam_ratio, Combine};
pub use keys::StoreKey;
use keys::{key_hash, matches, table_hash};
pub use layout::{Layout, Resolution};
pub use persist::{
    Committer, Durable, FsyncPolicy, PersistConfig, PersistError, PersistHealth, Recovery,
};
pub use rate::RateResult;
use shards::{Shard, Slot};
pub use sums::{WindowSums, INLINE_WINDOWS};
pub use sweeper::Sweeper;
pub use timeline::Bucket;

/// Counters per bucket.
pub const COUNTERS: usize = 5;

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
    /// Where the reputation lives: "memory" (this process, default) or "redis" (shared).
    pub backend: redis::Backend,
    /// The redis backend's nodes and options (`[store.redis]`).
    pub redis: redis::RedisConfig,
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
            backend: redis::Backend::Memory,
            redis: redis::RedisConfig::default(),
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

/// Why a `[store]` section cannot be used (the messages name the options).
#[derive(Debug, thiserror::Error)]
pub enum StoreConfigError {
    #[error("store: {0}")]
    Layout(StoreError),
    #[error("store.max_keys must be greater than 0")]
    MaxKeys,
    #[error("store.shards must be 0 or a power of two")]
    Shards,
    #[error(transparent)]
    Redis(#[from] redis::RedisConfigError),
}

impl StoreConfig {
    /// Checks values that parse but make no sense (`Store::new` refuses the same).
    pub fn validate(&self) -> Result<(), StoreConfigError> {
        Layout::new(&self.resolutions).map_err(StoreConfigError::Layout)?;
        if self.max_keys == 0 {
            return Err(StoreConfigError::MaxKeys);
        }
        if self.shards != 0 && !self.shards.is_power_of_two() {
            return Err(StoreConfigError::Shards);
        }
        if self.backend == redis::Backend::Redis {
            self.redis.validate()?;
        }
        Ok(())
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

/// Store-wide numbers for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    pub keys: usize,
    /// Rate counters.
    pub rate_keys: usize,
    pub evictions: u64,
    pub approx_bytes: usize,
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
    /// Changes are logged (set by `persist::Durable`).
    logging: std::sync::atomic::AtomicBool,
    /// Framed WAL records not yet handed to the WAL writer: one record a call of
    /// `record_many`, built in the caller's scratch buffer (each shard's group numbered under
    /// its lock) and appended here whole.
    wal: Mutex<Vec<u8>>,
    /// The buffer the writer emptied last, swapped in at its next drain.
    wal_spare: Mutex<Vec<u8>>,
}

thread_local! {
    /// The WAL record being built by this thread's `record_many` (kept between calls, so that
    /// building a record allocates nothing).
    static WAL_SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A WAL record begun at `now` in this thread's scratch buffer (handed back by `log_record`).
fn begin_record(now: u64) -> Vec<u8> {
    let mut record = WAL_SCRATCH.take();
    persist::begin_record(&mut record, now);
    record
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
    /// `lookup_many`, or why the store could not answer in time (a shared store; the scan then
    /// goes on without reputation and says so).
    fn lookup_checked(&self, keys: &[StoreKey]) -> Result<Vec<WindowCounts>, Unavailable> {
        Ok(self.lookup_many(keys))
    }
    /// Whether each key read costs a request (a shared store): a scan then reads before its
    /// rules only the kinds rules have asked for, and others when asked (`scan/late.rs`).
    fn reads_by_kind(&self) -> bool {
        false
    }
    /// `record_many` confirmed by the store before it returns (a user's learn: never a false
    /// acknowledgement).
    fn record_confirmed(&self, increments: &[Increment]) -> Result<(), Unavailable> {
        self.record_many(increments);
        Ok(())
    }
    /// A shared backend's state for `/health` and `/metrics` (`None`: the embedded store).
    fn status(&self) -> Option<BackendStatus> {
        None
    }

    // Windowed features (the rules' `feature{}`). By default they live in the counters above:
    // a feature key's `seen` column counts and its `spam` column sums, and a distinct value is
    // a paired key counted once per window, so they are persisted, swept and expired like the
    // counters and every backend has them. A backend may answer them natively instead.

    /// Sums of feature keys over the store's windows (as `lookup_many`).
    fn feature_read(&self, keys: &[StoreKey]) -> Vec<WindowCounts> {
        self.lookup_many(keys)
    }
    /// One message's contributions to count, sum and ratio features.
    fn feature_add(&self, adds: &[Increment]) {
        self.record_many(adds)
    }
    /// A value of a distinct feature: counts `unique` once per `pair` per `window_secs`;
    /// returns whether it grew.
    fn feature_distinct(&self, pair: StoreKey, unique: StoreKey, window_secs: u64) -> bool {
        self.increment_unique(pair, unique, window_secs)
    }
}

/// A shared store could not answer (down, slow, or failing over).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reputation store unavailable: {0}")]
pub struct Unavailable(pub String);

/// What a shared backend reports.
#[derive(Debug, Clone)]
pub struct BackendStatus {
    /// The backend's name ("redis").
    pub backend: &'static str,
    /// Reads or writes are failing: scans go on without reputation.
    pub degraded: bool,
    /// The last error, when degraded.
    pub detail: String,
    /// `(name, help, value, is a gauge)` for `/metrics`.
    pub metrics: Vec<(&'static str, &'static str, u64, bool)>,
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
            wal: Mutex::new(Vec::new()),
            wal_spare: Mutex::new(Vec::new()),
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
        if ops.is_empty() {
            return;
        }
        let mut record = self
            .logging
            .load(Ordering::Relaxed)
            .then(|| begin_record(now));
        self.for_each_shard(
            &ops,
            |op| (op.0, op.1),
            |shard_index, shard, ops| {
                for (_, hash, key, delta) in ops {
                    self.add(shard, key, *hash, id, delta, now);
                }
                if let Some(record) = record.as_mut() {
                    let seq = shard.next_seq();
                    let changes = ops.iter().map(|(_, _, key, delta)| (key, delta));
                    persist::encode_group(record, shard_index as u32, seq, changes);
                }
            },
        );
        if let Some(record) = record {
            self.log_record(record);
        }
    }

    /// Frames a record begun by `begin_record`, appends it to the WAL buffer, and keeps the
    /// buffer as this thread's scratch for the next one.
    fn log_record(&self, mut record: Vec<u8>) {
        persist::finish_record(&mut record);
        self.append_log(&record);
        // A record of an unusually large batch (a bulk learn) is not kept as scratch.
        if record.capacity() <= 1 << 20 {
            WAL_SCRATCH.set(record);
        }
    }

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
                            .layout
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
            let shard_index = self.shard_of(unique.hash) as u32;
            let mut record = begin_record(now);
            let seq = shard.next_seq();
            let changes = [(pair, one), (unique, one)];
            persist::encode_group(
                &mut record,
                shard_index,
                seq,
                changes.iter().map(|(k, c)| (k, c)),
            );
            drop(shard);
            self.log_record(record);
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
            if x.rates.len() == 0 {
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

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn stats(&self) -> StoreStats {
        let mut approx_bytes = std::mem::size_of_val(&*self.shards);
        let mut rate_keys = 0;
        for shard in self.shards.iter() {
            let shard = shard.lock();
            approx_bytes += shard.table.bytes() + shard.arena.bytes();
            if let Some(x) = &shard.extras {
                approx_bytes += std::mem::size_of::<shards::Extras>() + x.rates.bytes();
                rate_keys += x.rates.len();
            }
        }
        approx_bytes += self.wal.lock().capacity() + self.wal_spare.lock().capacity();
        StoreStats {
            keys: self.keys.load(Ordering::Relaxed),
            rate_keys,
            evictions: self.evictions.load(Ordering::Relaxed),
            approx_bytes,
        }
    }
}

#[cfg(test)]
mod tests;
