//! Reputation store throughput on two threads: increments with random keys (keys present, and new
//! keys), increments where half hit one key, and lookups. Targets (DESIGN.md §4): ≥ 5 M
//! increments/s with random keys, ≥ 2 M/s when half the increments hit one key; ≥ 10 M lookups/s
//! (BENCHMARKS.md). Run:
//!
//!     cargo bench --bench store
//!
//! Throughput is reported per increment or per key looked up ("elem/s"). One criterion iteration
//! is one `record_many` / `lookup_many` call; the iterations of a sample are split between two
//! threads and the sample's time is the wall time from spawning them to joining them. The clock is
//! a `ManualClock` that never moves, so every increment lands in the same bucket.
//!
//! The machine may be shared: after each benchmark a line on stderr gives how much of the two
//! cores the benchmark threads had (from /proc/thread-self/schedstat) and the throughput per
//! second on a CPU. `SHRIKE_BENCH_SHARDS=n` sets the shard count (default: sized by the store).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shrike::store::{Counter, Increment, ManualClock, Store, StoreConfig, StoreKey};

const THREADS: usize = 2;
/// Keys per call: about one message's shingles.
const BATCH: usize = 40;
/// Keys in the store before the measurements (indices `0..POOL`).
const POOL: u64 = 10_000_000;
/// Precomputed keys per thread, cycled through (2 M increments, 112 MB, per thread).
const SEQ: usize = 2_000_000;
/// A new-keys store is replaced (outside the timing) before it would pass this many keys, so
/// eviction (at `max_keys`) never runs during the measurement.
const FRESH_LIMIT: u64 = 10_000_000;
#[allow(dead_code)]
#[path = "../tests/common/store_keys.rs"]
mod store_keys;
use store_keys::{key, splitmix64, T0};

/// The one hot key (not in the pool).
fn hot_key() -> StoreKey {
    key(u64::MAX)
}

/// Splitmix64 as a stream.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix64(self.0 ^ 0x5EED_0000_0000_0000)
    }

    fn pool_key(&mut self) -> StoreKey {
        key(self.next() % POOL)
    }
}

fn new_store() -> Arc<Store> {
    let config = StoreConfig {
        max_keys: 20_000_000,
        shards: std::env::var("SHRIKE_BENCH_SHARDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        ..Default::default()
    };
    Arc::new(Store::new(&config, Arc::new(ManualClock::new(T0))).expect("store config"))
}

/// (time on a CPU, time runnable but waiting for a CPU) of the calling thread so far, in ns;
/// zeros where /proc/thread-self/schedstat is missing.
fn thread_sched() -> (u64, u64) {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| {
            let mut fields = s.split_whitespace().map(|v| v.parse::<u64>().ok());
            Some((fields.next()??, fields.next()??))
        })
        .unwrap_or((0, 0))
}

/// CPU use of the benchmark threads since the last `cpu_report`.
static ON_CPU_NS: AtomicU64 = AtomicU64::new(0);
static WAITED_NS: AtomicU64 = AtomicU64::new(0);
static WALL_NS: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Prints (to stderr) the share of two cores the threads had and the throughput per CPU-second,
/// then starts over.
fn cpu_report(name: &str, per_call: usize) {
    let on_cpu = ON_CPU_NS.swap(0, Ordering::Relaxed) as f64;
    let waited = WAITED_NS.swap(0, Ordering::Relaxed) as f64;
    let wall = WALL_NS.swap(0, Ordering::Relaxed) as f64 * THREADS as f64;
    let elements = (CALLS.swap(0, Ordering::Relaxed) * per_call as u64) as f64;
    if on_cpu > 0.0 {
        eprintln!(
            "{name}: threads on a CPU {:.0}% of the time (waiting for one {:.0}%); {:.2} M elem/s \
             per CPU-second, {:.2} M elem/s for {THREADS} whole cores",
            on_cpu / wall * 100.0,
            waited / wall * 100.0,
            elements / on_cpu * 1e3,
            elements / on_cpu * 1e3 * THREADS as f64
        );
    }
}

/// Runs `work(thread, calls)` on `THREADS` threads sharing `iters` calls; returns the wall time.
fn parallel(iters: u64, work: impl Fn(usize, u64) + Sync) -> Duration {
    let work = &work;
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let calls = iters / THREADS as u64 + u64::from((t as u64) < iters % THREADS as u64);
            s.spawn(move || {
                let (cpu0, wait0) = thread_sched();
                work(t, calls);
                let (cpu1, wait1) = thread_sched();
                ON_CPU_NS.fetch_add(cpu1 - cpu0, Ordering::Relaxed);
                WAITED_NS.fetch_add(wait1 - wait0, Ordering::Relaxed);
            });
        }
    });
    let wall = start.elapsed();
    WALL_NS.fetch_add(wall.as_nanos() as u64, Ordering::Relaxed);
    CALLS.fetch_add(iters, Ordering::Relaxed);
    wall
}

/// Inserts keys `0..POOL`, one `Seen` each, in batches of `BATCH`, on two threads.
fn fill(store: &Store) {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS as u64 {
            s.spawn(move || {
                let mut batch = Vec::with_capacity(BATCH);
                let mut i = t;
                while i < POOL {
                    batch.push(Increment::one(key(i), Counter::Seen));
                    if batch.len() == BATCH {
                        store.record_many(&batch);
                        batch.clear();
                    }
                    i += THREADS as u64;
                }
                store.record_many(&batch);
            });
        }
    });
    let stats = store.stats();
    eprintln!(
        "store: {} keys in {:.1} s, {} shards, approx {} MB",
        stats.keys,
        start.elapsed().as_secs_f64(),
        store.shard_count(),
        stats.approx_bytes >> 20
    );
}

/// Per thread, `SEQ` increments of keys from `pick` (precomputed, cycled through).
fn sequences(pick: impl Fn(&mut Rng, usize) -> StoreKey) -> Vec<Vec<Increment>> {
    (0..THREADS)
        .map(|t| {
            let mut rng = Rng(t as u64 * 1_000_000_007);
            (0..SEQ)
                .map(|i| Increment::one(pick(&mut rng, i), Counter::Seen))
                .collect()
        })
        .collect()
}

/// Benchmarks `record_many` over `seqs`, `batch` increments a call. Each sample continues where
/// the previous one stopped, so the keys are not replayed from the start.
fn bench_increments(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    store: &Store,
    seqs: &[Vec<Increment>],
    batch: usize,
) {
    let calls_per_cycle = (SEQ / batch) as u64;
    let mut offset = 0u64;
    group.throughput(Throughput::Elements(batch as u64));
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let from = offset;
            offset = (offset + iters) % calls_per_cycle;
            parallel(iters, |t, calls| {
                let seq = &seqs[t];
                for call in from..from + calls {
                    let at = (call % calls_per_cycle) as usize * batch;
                    store.record_many(&seq[at..at + batch]);
                }
            })
        })
    });
    cpu_report(name, batch);
}

fn store_benches(c: &mut Criterion) {
    let store = new_store();
    fill(&store);

    let mut group = c.benchmark_group("store");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(8));

    // Lookups of keys present, uniformly random.
    {
        let keys: Vec<Vec<StoreKey>> = sequences(|rng, _| rng.pool_key())
            .into_iter()
            .map(|seq| seq.iter().map(|inc| inc.key).collect())
            .collect();
        let calls_per_cycle = (SEQ / BATCH) as u64;
        let mut offset = 0u64;
        group.throughput(Throughput::Elements(BATCH as u64));
        group.bench_function("lookup/present", |b| {
            b.iter_custom(|iters| {
                let from = offset;
                offset = (offset + iters) % calls_per_cycle;
                parallel(iters, |t, calls| {
                    let seq = &keys[t];
                    for call in from..from + calls {
                        let at = (call % calls_per_cycle) as usize * BATCH;
                        black_box(store.lookup_many(&seq[at..at + BATCH]));
                    }
                })
            })
        });
        cpu_report("lookup/present", BATCH);
    }

    // Increments of keys present, uniformly random.
    {
        let seqs = sequences(|rng, _| rng.pool_key());
        bench_increments(&mut group, "increment/random", &store, &seqs, BATCH);
    }

    // Half the increments on one key: every other increment of each batch of 40. `record_many`
    // adds a batch's increments of one key together first, so the hot key costs one update (one
    // lock of its shard) per call.
    {
        let hot = hot_key();
        let seqs = sequences(|rng, i| if i % 2 == 0 { hot } else { rng.pool_key() });
        bench_increments(&mut group, "increment/hot_key", &store, &seqs, BATCH);
        // The same keys in calls of 2 (one hot, one random): one update of the hot key per two
        // increments, the worst case for its shard's lock.
        bench_increments(&mut group, "increment/hot_key_batch2", &store, &seqs, 2);
    }

    // Increments of keys never seen (inserts), uniformly random, into a store that starts empty
    // and is replaced before it reaches `FRESH_LIMIT` keys. The keys are made during the
    // measurement (two splitmix64 rounds each, about 1% of the time of an insert).
    {
        let mut fresh = new_store();
        let mut inserted = 0u64;
        let mut next = 1u64 << 40;
        group.throughput(Throughput::Elements(BATCH as u64));
        group.bench_function("increment/new_keys", |b| {
            b.iter_custom(|iters| {
                if inserted + iters * BATCH as u64 > FRESH_LIMIT {
                    fresh = new_store();
                    inserted = 0;
                }
                let from = next;
                next += iters * BATCH as u64;
                inserted += iters * BATCH as u64;
                let store = &fresh;
                parallel(iters, |t, calls| {
                    let mut batch = Vec::with_capacity(BATCH);
                    // Thread t takes every THREADS-th call's keys.
                    let mut call = t as u64;
                    for _ in 0..calls {
                        batch.clear();
                        let base = from + call * BATCH as u64;
                        batch.extend(
                            (base..base + BATCH as u64)
                                .map(|i| Increment::one(key(i), Counter::Seen)),
                        );
                        store.record_many(&batch);
                        call += THREADS as u64;
                    }
                })
            })
        });
        cpu_report("increment/new_keys", BATCH);
    }
    group.finish();
}

criterion_group!(benches, store_benches);
criterion_main!(benches);
