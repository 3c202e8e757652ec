//! A lookup loop for profilers (perf, callgrind): fills a store with `KEYS` keys (one `Seen`
//! each, calls of 40, max_keys twice the keys so the shards hold as many keys as in the store
//! bench), then runs `lookup_many` (or `record_many`) calls of 40 random present keys on one
//! thread and prints the time per key; or, with `sweep`, runs `calls` sweep passes over every
//! shard (nothing expires) and prints the time per key visited.
//!
//!     cargo run --release --example lookup_profile -- [lookup|record|sweep] [keys] [calls]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use shrike::store::{Counter, Increment, ManualClock, Store, StoreConfig};

#[allow(dead_code)]
#[path = "../tests/common/store_keys.rs"]
mod store_keys;
use store_keys::{key, splitmix64, T0};

const BATCH: usize = 40;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("lookup", String::as_str).to_string();
    let keys: u64 = args
        .get(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let calls: u64 = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let config = StoreConfig {
        max_keys: (keys as usize * 2).max(1_000),
        shards: std::env::var("SHRIKE_BENCH_SHARDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        ..Default::default()
    };
    let store = Arc::new(Store::new(&config, Arc::new(ManualClock::new(T0))).expect("config"));
    let mut batch = Vec::with_capacity(BATCH);
    for i in 0..keys {
        batch.push(Increment::one(key(i), Counter::Seen));
        if batch.len() == BATCH {
            store.record_many(&batch);
            batch.clear();
        }
    }
    store.record_many(&batch);
    eprintln!(
        "{} keys, {} shards",
        store.stats().keys,
        store.shard_count()
    );
    let mut n = 0u64;
    let start = Instant::now();
    if mode == "sweep" {
        // `calls` passes of `sweep_step` over every shard; the clock stands still, so every key
        // is visited and kept.
        for _ in 0..calls {
            for _ in 0..store.shard_count() {
                n += black_box(store.sweep_step()).visited as u64;
            }
        }
    }
    let mut lookup = Vec::with_capacity(BATCH);
    for _ in 0..if mode == "sweep" { 0 } else { calls } {
        lookup.clear();
        batch.clear();
        for _ in 0..BATCH {
            n += 1;
            let k = key(splitmix64(n ^ 0x5EED) % keys);
            lookup.push(k);
            batch.push(Increment::one(k, Counter::Seen));
        }
        if mode == "record" {
            store.record_many(&batch);
        } else {
            black_box(store.lookup_many(&lookup));
        }
    }
    let t = start.elapsed();
    eprintln!(
        "{mode}: {:.1} ns per key, {:.2} M keys/s on one thread",
        t.as_nanos() as f64 / n as f64,
        n as f64 / t.as_secs_f64() / 1e6
    );
}
