//! A scripted store load (BENCHMARKS.md, "Store"). Targets (DESIGN.md §4): ≤ 64 bytes of memory
//! per key touched once; with the cleanup running over 10 M keys, the p99 latency of concurrent
//! reads and increments rises ≤ 10%.
//!
//! 1. Memory: 10 M distinct keys, one increment each (calls of 40), into an empty store; the
//!    growth of the process's resident set (VmRSS), and the store's own estimate, per key. Then
//!    15 days pass and one sweep pass (`sweep_step` over every shard, timed step by step)
//!    removes them all: the time a step holds its shard's lock, and the memory left.
//! 2. Latency: a new store with 10 M keys, the first 5 M of them inserted 15 days before the rest
//!    (so they have expired and the sweeper has work). One thread then alternates `lookup_many`
//!    (40 live keys) and `record_many` (32 live keys, 8 new ones), timing each call, in rounds
//!    with no cleanup, with a `Sweeper::spawn(store, Duration::ZERO)`, and with a thread calling
//!    `sweep_step` in a loop (no yield), in turn, so that load from elsewhere on the machine falls
//!    on all three. Prints p50/p99/p999 per round and their change against no cleanup, with the
//!    share of the time the measuring thread was on a CPU or waiting for one, and the CPU time of
//!    the cleanup thread (/proc/thread-self/schedstat). Ends with a timed sweep pass over the
//!    live keys.
//!
//!     cargo run --release --example store_load
//!
//! Runs about a minute and a half and needs about 1 GB.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shrike::store::{Counter, Increment, ManualClock, Store, StoreConfig, StoreKey, Sweeper};

const KEYS: u64 = 10_000_000;
const BATCH: usize = 40;
/// Calls per latency round (half lookups, half increments): a second or two.
const ROUND_CALLS: usize = 50_000;
/// Rounds: no cleanup, `Sweeper`, `sweep_step` loop, in turn, 12 times. Short rounds in turn,
/// so that slow drifts of the machine's speed fall on all three alike.
const ROUNDS: usize = 36;
/// Calls before the first round, not recorded.
const WARMUP_CALLS: usize = 100_000;
/// Of the 40 increments of a `record_many` call, this many are new keys.
const NEW_PER_RECORD: usize = 8;
const DAY: u64 = 86_400;
#[allow(dead_code)]
#[path = "../tests/common/store_keys.rs"]
mod store_keys;
use store_keys::{key, splitmix64, T0};

fn new_store(clock: Arc<ManualClock>) -> Arc<Store> {
    let config = StoreConfig {
        max_keys: 20_000_000,
        ..Default::default()
    };
    Arc::new(Store::new(&config, clock).expect("store config"))
}

/// Resident set size of this process, in bytes.
fn vm_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS line")
        * 1024
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

/// One sweep pass on this thread (`sweep_step` once per shard); prints the time per step.
fn sweep_pass(store: &Store) {
    let mut steps = Vec::with_capacity(store.shard_count());
    let (mut visited, mut removed) = (0, 0);
    let start = Instant::now();
    for _ in 0..store.shard_count() {
        let t = Instant::now();
        let report = store.sweep_step();
        steps.push(t.elapsed().as_nanos() as u64);
        visited += report.visited;
        removed += report.removed;
    }
    let took = start.elapsed();
    steps.sort_unstable();
    println!(
        "sweep pass: {} steps in {:.2} s, {visited} keys visited, {removed} removed; per step (one shard locked): {}",
        steps.len(),
        took.as_secs_f64(),
        line("", &steps).trim_start()
    );
}

/// Inserts keys `range`, one `Seen` each, `BATCH` to a call, on this thread; returns the time.
fn insert(store: &Store, range: std::ops::Range<u64>) -> Duration {
    let start = Instant::now();
    let mut batch = Vec::with_capacity(BATCH);
    for i in range {
        batch.push(Increment::one(key(i), Counter::Seen));
        if batch.len() == BATCH {
            store.record_many(&batch);
            batch.clear();
        }
    }
    store.record_many(&batch);
    start.elapsed()
}

fn memory() {
    println!("== memory: {KEYS} keys touched once");
    let rss0 = vm_rss();
    let clock = Arc::new(ManualClock::new(T0));
    let store = new_store(clock.clone());
    let rss1 = vm_rss();
    // In tenths, to show how the bytes per key move as the shards' tables double.
    let mut took = Duration::ZERO;
    let mut on_the_way = Vec::new();
    for tenth in 0..10 {
        took += insert(&store, KEYS / 10 * tenth..KEYS / 10 * (tenth + 1));
        let keys = KEYS / 10 * (tenth + 1);
        on_the_way.push(format!(
            "{}M {:.1}",
            keys / 1_000_000,
            (vm_rss() - rss0) as f64 / keys as f64
        ));
    }
    let rss2 = vm_rss();
    let stats = store.stats();
    assert_eq!(stats.keys as u64, KEYS);
    println!(
        "inserted in {:.2} s ({:.2} M keys/s, one thread)",
        took.as_secs_f64(),
        KEYS as f64 / took.as_secs_f64() / 1e6
    );
    println!(
        "VmRSS: {:.1} MB before, {:.1} MB with the empty store ({} shards), {:.1} MB after",
        rss0 as f64 / 1e6,
        rss1 as f64 / 1e6,
        store.shard_count(),
        rss2 as f64 / 1e6
    );
    println!(
        "RSS per key: {:.1} bytes (empty store included), {:.1} bytes (keys only)",
        (rss2 - rss0) as f64 / KEYS as f64,
        (rss2 - rss1) as f64 / KEYS as f64
    );
    println!(
        "RSS per key on the way (keys, bytes): {}",
        on_the_way.join(", ")
    );
    println!(
        "store.stats().approx_bytes per key: {:.1} bytes ({} bytes in all)",
        stats.approx_bytes as f64 / stats.keys as f64,
        stats.approx_bytes
    );
    clock.advance(15 * DAY);
    sweep_pass(&store);
    let stats = store.stats();
    println!(
        "after the pass: {} keys, approx_bytes {:.1} MB, VmRSS {:.1} MB",
        stats.keys,
        stats.approx_bytes as f64 / 1e6,
        vm_rss() as f64 / 1e6
    );
}

/// The latency workload: alternating lookups of live keys and increments of live and new keys.
struct Load {
    store: Arc<Store>,
    live: std::ops::Range<u64>,
    rng: u64,
    next_new: u64,
    keys: Vec<StoreKey>,
    increments: Vec<Increment>,
}

impl Load {
    fn live_key(&mut self) -> StoreKey {
        self.rng = self.rng.wrapping_add(1);
        let span = self.live.end - self.live.start;
        key(self.live.start + splitmix64(self.rng ^ 0x5EED) % span)
    }

    /// Runs `calls` calls; returns each call's time in ns, lookups then increments.
    fn run(&mut self, calls: usize) -> (Vec<u64>, Vec<u64>) {
        let mut lookups = Vec::with_capacity(calls / 2 + 1);
        let mut records = Vec::with_capacity(calls / 2 + 1);
        for call in 0..calls {
            if call % 2 == 0 {
                self.keys.clear();
                for _ in 0..BATCH {
                    let k = self.live_key();
                    self.keys.push(k);
                }
                let start = Instant::now();
                let found = self.store.lookup_many(&self.keys);
                lookups.push(start.elapsed().as_nanos() as u64);
                debug_assert!(found.iter().all(|w| w.windows[4][0] > 0));
                drop(found);
            } else {
                self.increments.clear();
                for i in 0..BATCH {
                    let k = if i < NEW_PER_RECORD {
                        self.next_new += 1;
                        key(self.next_new)
                    } else {
                        self.live_key()
                    };
                    self.increments.push(Increment::one(k, Counter::Seen));
                }
                let start = Instant::now();
                self.store.record_many(&self.increments);
                records.push(start.elapsed().as_nanos() as u64);
            }
        }
        (lookups, records)
    }
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[u64], q: f64) -> u64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn line(label: &str, v: &[u64]) -> String {
    format!(
        "{label:<8} p50 {:>6.2} µs  p99 {:>7.2} µs  p999 {:>7.2} µs  max {:>8.1} µs",
        pct(v, 0.5) as f64 / 1e3,
        pct(v, 0.99) as f64 / 1e3,
        pct(v, 0.999) as f64 / 1e3,
        v[v.len() - 1] as f64 / 1e3
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// What cleans the store during a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cleanup {
    /// Nothing.
    Off,
    /// `Sweeper::spawn(store, Duration::ZERO)`: one shard a step, `yield_now` between steps.
    Sweeper,
    /// A thread calling `sweep_step` in a loop without yielding: sweeping that really is
    /// continuous (the `Sweeper` thread is starved when the CPUs are busy; see BENCHMARKS.md).
    Busy,
}

impl Cleanup {
    fn name(self) -> &'static str {
        match self {
            Cleanup::Off => "no sweeper",
            Cleanup::Sweeper => "Sweeper::spawn(ZERO)",
            Cleanup::Busy => "sweep_step loop",
        }
    }
}

/// The schedstat file of this process's thread named `name`.
fn task_schedstat(name: &str) -> Option<std::path::PathBuf> {
    std::fs::read_dir("/proc/self/task").ok()?.find_map(|t| {
        let dir = t.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        (comm.trim() == name).then(|| dir.join("schedstat"))
    })
}

fn on_cpu_ns(schedstat: &std::path::Path) -> u64 {
    std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A running cleanup; `stop` returns (keys removed, ns its thread was on a CPU).
enum Running {
    Off,
    Sweeper(Sweeper, Option<std::path::PathBuf>, u64),
    Busy(Arc<AtomicBool>, std::thread::JoinHandle<(u64, u64)>),
}

impl Running {
    fn start(cleanup: Cleanup, store: &Arc<Store>) -> Running {
        match cleanup {
            Cleanup::Off => Running::Off,
            Cleanup::Sweeper => {
                let sweeper =
                    Sweeper::spawn(store.clone(), Duration::ZERO).expect("sweeper thread");
                // The thread names itself once it runs: wait for that (a few ms at most).
                let deadline = Instant::now() + Duration::from_millis(200);
                let stat = loop {
                    match task_schedstat("shrike-sweeper") {
                        Some(stat) => break Some(stat),
                        None if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_micros(200))
                        }
                        None => break None,
                    }
                };
                let cpu0 = stat.as_deref().map_or(0, on_cpu_ns);
                Running::Sweeper(sweeper, stat, cpu0)
            }
            Cleanup::Busy => {
                let stop = Arc::new(AtomicBool::new(false));
                let handle = {
                    let (stop, store) = (stop.clone(), store.clone());
                    std::thread::spawn(move || {
                        let (cpu0, _) = thread_sched();
                        let mut removed = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            removed += store.sweep_step().removed as u64;
                        }
                        (removed, thread_sched().0 - cpu0)
                    })
                };
                Running::Busy(stop, handle)
            }
        }
    }

    fn stop(self) -> (u64, u64) {
        match self {
            Running::Off => (0, 0),
            Running::Sweeper(sweeper, stat, cpu0) => {
                let cpu = stat.as_deref().map_or(0, on_cpu_ns).saturating_sub(cpu0);
                if stat.is_none() {
                    eprintln!("(the sweeper thread was not found: its CPU time reads 0)");
                }
                (sweeper.removed(), cpu)
            }
            Running::Busy(stop, handle) => {
                stop.store(true, Ordering::Relaxed);
                handle.join().expect("sweep thread")
            }
        }
    }
}

struct Round {
    cleanup: Cleanup,
    all: Vec<u64>,
    lookups: Vec<u64>,
    records: Vec<u64>,
}

fn latency() {
    println!("\n== latency: {KEYS} keys, the first half expired");
    let clock = Arc::new(ManualClock::new(T0));
    let store = new_store(clock.clone());
    let half = KEYS / 2;
    insert(&store, 0..half);
    clock.advance(15 * DAY);
    insert(&store, half..KEYS);
    let stats = store.stats();
    println!(
        "store: {} keys ({half} expired, not yet swept), {} shards, approx {} MB",
        stats.keys,
        store.shard_count(),
        stats.approx_bytes >> 20
    );

    let mut load = Load {
        store: store.clone(),
        live: half..KEYS,
        rng: 0,
        next_new: 1 << 40,
        keys: Vec::with_capacity(BATCH),
        increments: Vec::with_capacity(BATCH),
    };
    load.run(WARMUP_CALLS);

    let order = [Cleanup::Off, Cleanup::Sweeper, Cleanup::Busy];
    let mut rounds = Vec::new();
    println!("round  cleanup               time  on CPU  waiting    keys  removed  cleanup CPU  p50 / p99 / p999 µs (all calls)");
    for r in 0..ROUNDS {
        let cleanup = order[r % order.len()];
        let running = Running::start(cleanup, &store);
        let start = Instant::now();
        let (cpu0, wait0) = thread_sched();
        let (mut lookups, mut records) = load.run(ROUND_CALLS);
        let (cpu1, wait1) = thread_sched();
        let took = start.elapsed();
        let (removed, sweep_cpu) = running.stop();
        let wall = took.as_nanos() as f64;
        lookups.sort_unstable();
        records.sort_unstable();
        let mut all = [lookups.as_slice(), records.as_slice()].concat();
        all.sort_unstable();
        println!(
            "{r:>5}  {:<20} {:>5.2} s {:>6.0}% {:>7.0}% {:>6.1} M {:>8} {:>11.0}%  {:.1} / {:.1} / {:.1}",
            cleanup.name(),
            took.as_secs_f64(),
            (cpu1 - cpu0) as f64 / wall * 100.0,
            (wait1 - wait0) as f64 / wall * 100.0,
            store.stats().keys as f64 / 1e6,
            removed,
            sweep_cpu as f64 / wall * 100.0,
            pct(&all, 0.5) as f64 / 1e3,
            pct(&all, 0.99) as f64 / 1e3,
            pct(&all, 0.999) as f64 / 1e3,
        );
        rounds.push(Round {
            cleanup,
            all,
            lookups,
            records,
        });
    }

    println!(
        "\n== summary, µs: all rounds of a kind pooled; change against no cleanup: pooled, and the median of each round against its neighbouring no-cleanup rounds"
    );
    type Pick = fn(&Round) -> &[u64];
    let picks: [(&str, Pick); 3] = [
        ("all", |r| &r.all),
        ("lookup", |r| &r.lookups),
        ("record", |r| &r.records),
    ];
    let pooled = |cleanup: Cleanup, pick: Pick, q: f64| {
        let mut values: Vec<u64> = rounds
            .iter()
            .filter(|r| r.cleanup == cleanup)
            .flat_map(|r| pick(r).iter().copied())
            .collect();
        values.sort_unstable();
        pct(&values, q) as f64
    };
    // Round i of a cleanup kind against the mean of the no-cleanup rounds just before and after
    // it (rounds come in turns of `order.len()`, no cleanup first).
    let paired = |cleanup: Cleanup, pick: Pick, q: f64| {
        let ratios: Vec<f64> = rounds
            .iter()
            .enumerate()
            .filter(|(_, r)| r.cleanup == cleanup)
            .map(|(i, r)| {
                let before = i - i % order.len();
                let near: Vec<f64> = [Some(before), Some(before + order.len())]
                    .into_iter()
                    .flatten()
                    .filter_map(|j| rounds.get(j))
                    .map(|o| pct(pick(o), q) as f64)
                    .collect();
                pct(pick(r), q) as f64 / (near.iter().sum::<f64>() / near.len() as f64)
            })
            .collect();
        median(ratios)
    };
    for (name, pick) in picks {
        for q in [0.5, 0.99, 0.999] {
            let off = pooled(Cleanup::Off, pick, q);
            let mut text = format!("{name:<7} p{:<5} no cleanup {:>7.2}", q * 100.0, off / 1e3);
            for cleanup in [Cleanup::Sweeper, Cleanup::Busy] {
                let on = pooled(cleanup, pick, q);
                text += &format!(
                    " | {} {:>7.2} {:>+6.1}%, paired {:>+6.1}%",
                    cleanup.name(),
                    on / 1e3,
                    (on / off - 1.0) * 100.0,
                    (paired(cleanup, pick, q) - 1.0) * 100.0
                );
            }
            println!("{text}");
        }
    }
    println!();
    sweep_pass(&store);
}

fn main() {
    let start = Instant::now();
    memory();
    latency();
    println!("\ntotal {:.0} s", start.elapsed().as_secs_f64());
}
