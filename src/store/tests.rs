//! The store's unit tests: windows, timelines, unique counts, eviction, sweeping, lookups
//! of any shape against single lookups, concurrency.

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
