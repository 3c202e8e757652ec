//! The background sweeper: walks the shards one at a time, forever, at a set pace.
//!
//! Each step locks one shard (a few hundred keys), settles and prunes it, and releases it before
//! the next; between steps it sleeps, so a full pass over the store takes about `cycle`. The
//! cursor is the shard index, so nothing is skipped whatever is deleted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Store;

/// The sweeper's pacing interval.
const WAKE: Duration = Duration::from_millis(100);

/// A running sweeper; stops (and joins) when dropped.
pub struct Sweeper {
    stop: Arc<AtomicBool>,
    removed: Arc<AtomicU64>,
    handle: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// Starts sweeping `store`, one full pass per `cycle`, paced by deadline so sleep overshoot
    /// does not stretch the pass. A zero `cycle` sweeps continuously (tests, benchmarks): it
    /// does not `yield_now`, which on Linux can starve the sweeper behind busy threads.
    pub fn spawn(store: Arc<Store>, cycle: Duration) -> std::io::Result<Sweeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let removed = Arc::new(AtomicU64::new(0));
        let shards = u32::try_from(store.shard_count()).unwrap_or(u32::MAX);
        let handle = {
            let (stop, removed) = (stop.clone(), removed.clone());
            std::thread::Builder::new()
                .name("shrike-sweeper".into())
                .spawn(move || {
                    let mut pass_start = Instant::now();
                    let mut step: u32 = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let report = store.sweep_step();
                        removed.fetch_add(report.removed as u64, Ordering::Relaxed);
                        step += 1;
                        if step >= shards {
                            step = 0;
                            // A pass that ran late starts the next one now, not in a hurry.
                            pass_start = (pass_start + cycle).max(Instant::now());
                        }
                        if !cycle.is_zero() {
                            // The steps due in the next `WAKE` run now, one after another, so
                            // the thread wakes ~10 times a second rather than once per shard
                            // (tens of thousands of shards in a 20M-key store).
                            let due = pass_start + cycle * step / shards;
                            let now = Instant::now();
                            if due > now + WAKE {
                                std::thread::sleep((due - now).min(WAKE));
                            }
                        }
                    }
                })?
        };
        Ok(Sweeper {
            stop,
            removed,
            handle: Some(handle),
        })
    }

    /// Keys removed so far.
    pub fn removed(&self) -> u64 {
        self.removed.load(Ordering::Relaxed)
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Counter, Increment, ManualClock, StoreConfig, StoreKey};

    #[test]
    fn a_paced_pass_takes_about_its_cycle() {
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let config = StoreConfig {
            max_keys: 100_000,
            shards: 256,
            ..StoreConfig::default()
        };
        let store = Arc::new(Store::new(&config, clock).unwrap());
        let start = std::time::Instant::now();
        let sweeper = Sweeper::spawn(store.clone(), Duration::from_millis(400)).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        drop(sweeper);
        // Half a cycle sweeps about half the shards: paced, neither all at once nor starved.
        let steps = store.sweep_step().shard;
        assert!(
            steps > 32 && steps < 224,
            "{steps} shards in {:?}",
            start.elapsed()
        );
    }

    #[test]
    fn sweeper_cleans_in_the_background_and_stops() {
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let config = StoreConfig {
            max_keys: 100_000,
            shards: 64,
            ..StoreConfig::default()
        };
        let store = Arc::new(Store::new(&config, clock.clone()).unwrap());
        for h in 0..5_000u64 {
            let key = StoreKey {
                namespace: 0,
                kind: 1,
                hash: h.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            };
            store.record_many(&[Increment::one(key, Counter::Seen)]);
        }
        clock.advance(30 * 86_400);
        let sweeper = Sweeper::spawn(store.clone(), Duration::ZERO).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while store.stats().keys > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(store.stats().keys, 0);
        assert_eq!(sweeper.removed(), 5_000);
        drop(sweeper); // joins
    }
}
