//! Durability end to end: replay, group commit, snapshots under writes, torn tails,
//! corruption and salvage, incompatible layouts.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Duration;

use super::*;
use crate::store::{Counter, Increment, ManualClock, Resolution, StoreKey, WindowCounts};

const T0: u64 = 1_700_000_000;

fn config() -> StoreConfig {
    StoreConfig {
        max_keys: 100_000,
        shards: 32,
        ..StoreConfig::default()
    }
}

fn persist() -> PersistConfig {
    PersistConfig {
        snapshot_secs: 0,
        ..PersistConfig::default()
    }
}

fn key(h: u64) -> StoreKey {
    StoreKey {
        namespace: (h % 3) as u8,
        kind: 8,
        hash: h.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    }
}

fn open(
    dir: &Path,
    clock: &Arc<ManualClock>,
    salvage: bool,
) -> Result<(Durable, Recovery), PersistError> {
    Durable::open(dir, &config(), &persist(), clock.clone(), salvage)
}

fn load(d: &Durable, n: u64) -> Vec<WindowCounts> {
    d.store().lookup_many(&(0..n).map(key).collect::<Vec<_>>())
}

fn write_some(d: &Durable, clock: &ManualClock, n: u64) {
    for i in 0..n {
        clock.advance(37);
        d.store().record_many(&[
            Increment::one(key(i % 50), Counter::Seen),
            Increment::one(key(i % 7), Counter::Spam),
        ]);
        if i % 10 == 0 {
            d.store()
                .increment_unique(key(1_000 + i % 13), key(2_000), 86_400);
        }
    }
}

#[test]
fn wal_replay_restores_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 500);
    d.sync().unwrap();
    let before = load(&d, 50);
    let unique = d.store().lookup_many(&[key(2_000)]);
    drop(d);
    let (d, recovery) = open(dir.path(), &clock, false).unwrap();
    assert!(recovery.wal_records > 0);
    assert_eq!(load(&d, 50), before);
    assert_eq!(d.store().lookup_many(&[key(2_000)]), unique);
}

/// A durable store whose flusher would write only within the hour: what reaches the file
/// meanwhile is what `commit` wrote.
fn open_commit_only(dir: &Path, clock: &Arc<ManualClock>) -> Durable {
    let slow = PersistConfig {
        flush_ms: 3_600_000,
        ..persist()
    };
    Durable::open(dir, &config(), &slow, clock.clone(), false)
        .unwrap()
        .0
}

/// As a killed process: no flush, no final sync, no snapshot (the flusher thread leaks).
fn kill(d: Durable) {
    std::mem::forget(d);
}

/// Kills `d` without a snapshot or flush and opens its directory again: the counts of the
/// first 50 keys must be what `d` had. The recovery, for the caller's further checks.
fn kill_and_reopen(d: Durable, dir: &Path, clock: &Arc<ManualClock>) -> Recovery {
    let before = load(&d, 50);
    kill(d);
    let (d, recovery) = open(dir, clock, false).unwrap();
    assert_eq!(load(&d, 50), before);
    recovery
}

#[test]
fn committed_increments_are_in_the_file_without_a_flush_or_drop() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let d = open_commit_only(dir.path(), &clock);
    write_some(&d, &clock, 200);
    let before = load(&d, 50);
    d.committer().commit().unwrap();
    kill(d);
    let (d2, recovery) = open(dir.path(), &clock, false).unwrap();
    assert!(recovery.wal_records > 0);
    assert_eq!(load(&d2, 50), before);
}

#[test]
fn commits_waiting_together_share_one_write() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let d = open_commit_only(dir.path(), &clock);
    let callers = 8;
    // Hold the WAL as a write in progress would; the callers queue behind it.
    let held = d.wal.lock();
    let threads: Vec<_> = (0..callers)
        .map(|i| {
            let (store, committer) = (d.store().clone(), d.committer());
            std::thread::spawn(move || {
                store.record_many(&[Increment::one(key(i), Counter::Complaint)]);
                committer.commit().unwrap();
            })
        })
        .collect();
    while d.committer().counts().0 < callers {
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(held);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(d.committer().counts(), (callers, 1), "one write for all");
    kill(d);
    let (d2, _) = open(dir.path(), &clock, false).unwrap();
    for (i, c) in load(&d2, callers).iter().enumerate() {
        let last = c.windows.len() - 1;
        assert_eq!(c.windows[last][Counter::Complaint as usize], 1, "key {i}");
    }
}

#[test]
fn snapshot_then_wal_restores_without_double_counting() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 300);
    d.snapshot().unwrap();
    write_some(&d, &clock, 200);
    d.sync().unwrap();
    let before = load(&d, 50);
    drop(d);
    let (d, recovery) = open(dir.path(), &clock, false).unwrap();
    assert!(recovery.snapshot.is_some());
    assert!(recovery.snapshot_keys > 0);
    assert_eq!(load(&d, 50), before);
    // Only the newest snapshot and the WALs after it remain.
    assert_eq!(list(dir.path(), "snapshot-", ".bin").unwrap().len(), 1);
    d.close().unwrap();
    let (d, recovery) = open(dir.path(), &clock, false).unwrap();
    assert_eq!(recovery.wal_records, 0, "close wrote a final snapshot");
    assert_eq!(load(&d, 50), before);
}

#[test]
fn torn_tail_is_cut_off_with_what_was_synced_kept() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 100);
    d.sync().unwrap();
    let before = load(&d, 50);
    drop(d);
    let (_, wal) = list(dir.path(), "wal-", ".log").unwrap().pop().unwrap();
    let mut f = OpenOptions::new().append(true).open(&wal).unwrap();
    f.write_all(&[200, 0, 0, 0, 1, 2, 3, 4, 5]).unwrap(); // a record cut short
    drop(f);
    let (d, recovery) = open(dir.path(), &clock, false).unwrap();
    assert!(recovery.truncated_tail);
    assert_eq!(load(&d, 50), before);
}

#[test]
fn corruption_inside_a_wal_stops_startup_unless_salvaging() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 200);
    d.sync().unwrap();
    drop(d);
    let wals = list(dir.path(), "wal-", ".log").unwrap();
    let (_, wal) = wals
        .iter()
        .find(|(_, p)| fs::metadata(p).unwrap().len() > 1_000)
        .unwrap();
    let mut data = fs::read(wal).unwrap();
    let middle = data.len() / 2;
    data[middle] ^= 0xff;
    fs::write(wal, &data).unwrap();
    let err = open(dir.path(), &clock, false).err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains(&wal.display().to_string()) && msg.contains("at byte"),
        "{msg}"
    );
    let (_, recovery) = open(dir.path(), &clock, true).unwrap();
    assert_eq!(recovery.moved_aside, vec![wal.clone()]);
    assert!(wal.with_extension("corrupt").exists());
}

#[test]
fn damaged_snapshot_is_refused_and_salvage_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 100);
    let snap = d.snapshot().unwrap();
    drop(d);
    let mut data = fs::read(&snap).unwrap();
    let n = data.len();
    data.truncate(n - 10); // incomplete: no valid end marker
    fs::write(&snap, &data).unwrap();
    let err = open(dir.path(), &clock, false).err().expect("refused");
    assert!(matches!(err, PersistError::Corrupt { .. }), "{err}");
    let (_, recovery) = open(dir.path(), &clock, true).unwrap();
    assert_eq!(recovery.moved_aside, vec![snap]);
}

#[test]
fn a_different_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 10);
    d.snapshot().unwrap();
    drop(d);
    let other = StoreConfig {
        resolutions: vec![Resolution {
            bucket_secs: 60,
            keep_secs: 3_600,
        }],
        ..config()
    };
    let err = Durable::open(dir.path(), &other, &persist(), clock.clone(), false)
        .err()
        .expect("refused");
    assert!(matches!(err, PersistError::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("resolutions"), "{err}");
}

#[test]
fn snapshots_during_writes_lose_and_double_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    let d = Arc::new(d);
    let writer = {
        let d = d.clone();
        std::thread::spawn(move || {
            for i in 0..40_000u64 {
                d.store().record_many(&[
                    Increment::one(key(i % 200), Counter::Seen),
                    Increment::one(key(i % 11), Counter::Ham),
                ]);
            }
        })
    };
    for _ in 0..5 {
        d.snapshot().unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    writer.join().unwrap();
    d.sync().unwrap();
    let before = load(&d, 200);
    let total: u64 = before.iter().map(|w| w.windows[4][0]).sum();
    assert_eq!(total, 40_000);
    drop(Arc::try_unwrap(d).ok().expect("sole owner"));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    assert_eq!(load(&d, 200), before);
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Replaying the WAL (after any snapshot) gives the same state as the live store,
        /// whatever the interleaving of writes, time steps and snapshots.
        #[test]
        fn replay_equals_live(
            ops in proptest::collection::vec((0u8..4, 0u64..64, 0usize..5, 0u64..20_000), 1..150),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let clock = Arc::new(ManualClock::new(T0));
            let (d, _) = open(dir.path(), &clock, false).unwrap();
            for (op, k, c, dt) in &ops {
                match op {
                    0 | 1 => d.store().record_many(&[Increment::one(key(*k), Counter::ALL[*c])]),
                    2 => clock.advance(*dt),
                    _ => {
                        if *dt % 5 == 0 {
                            d.snapshot().unwrap();
                        } else {
                            d.store().increment_unique(key(100 + k), key(999), 86_400);
                        }
                    }
                }
            }
            d.sync().unwrap();
            let keys: Vec<_> = (0..64).map(key).chain([key(999)]).collect();
            let live = d.store().lookup_many(&keys);
            let timelines: Vec<_> = keys.iter().map(|k| d.store().timeline(k)).collect();
            drop(d);
            let (d, _) = open(dir.path(), &clock, false).unwrap();
            prop_assert_eq!(d.store().lookup_many(&keys), live);
            let replayed: Vec<_> = keys.iter().map(|k| d.store().timeline(k)).collect();
            prop_assert_eq!(replayed, timelines);
        }
    }
}

// ---- faults in the data directory (disk.rs's seam; a full disk on a real tmpfs is in
// tests/persistence.rs) --------------------------------------------------------------------------

use super::disk::{inject, Fault};

/// Waits until `f` holds; panics naming `what` after a minute (a hang, not a slow machine).
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn open_always(dir: &Path, clock: &Arc<ManualClock>) -> Durable {
    let always = PersistConfig {
        fsync: FsyncPolicy::Always,
        flush_ms: 3_600_000,
        ..persist()
    };
    Durable::open(dir, &config(), &always, clock.clone(), false)
        .unwrap()
        .0
}

fn files(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    names.sort();
    names
}

#[test]
fn after_a_failed_fsync_nothing_is_acknowledged_until_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let d = open_always(dir.path(), &clock);
    let health = d.health();
    write_some(&d, &clock, 50);
    d.committer().commit().unwrap();
    let fault = inject(dir.path(), Fault::Fsync);
    write_some(&d, &clock, 50);
    assert!(d.committer().commit().is_err(), "the fsync failed");
    assert!(
        health.degraded().unwrap().starts_with("WAL: "),
        "{health:?}"
    );
    drop(fault);
    // Linux reports a writeback error once: a later fsync that succeeds does not mean the
    // pages written before the failed one reached the disk.
    write_some(&d, &clock, 10);
    let err = d.committer().commit().unwrap_err();
    assert!(matches!(err, PersistError::NotSaved), "{err}");
    assert!(d.sync().is_err(), "sync promises durability too");
    assert!(health.degraded().is_some());
    d.snapshot().unwrap();
    assert_eq!(
        health.degraded(),
        None,
        "the snapshot holds what the WAL may have lost"
    );
    write_some(&d, &clock, 10);
    d.committer().commit().unwrap();
    kill_and_reopen(d, dir.path(), &clock);
}

#[test]
fn a_failed_rename_keeps_the_old_snapshot_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    let health = d.health();
    write_some(&d, &clock, 100);
    let first = d.snapshot().unwrap();
    write_some(&d, &clock, 100);
    let fault = inject(dir.path(), Fault::Rename);
    assert!(d.snapshot().is_err());
    assert!(
        d.snapshot().is_err(),
        "again, without a new WAL for each try"
    );
    assert_eq!(files(dir.path(), ".tmp"), Vec::<String>::new());
    assert_eq!(
        files(dir.path(), ".log").len(),
        2,
        "the first try's rotation only"
    );
    assert!(first.exists());
    assert!(health.degraded().unwrap().starts_with("store snapshot: "));
    // Learns go on meanwhile: the WAL takes them.
    write_some(&d, &clock, 10);
    d.committer().commit().unwrap();
    drop(fault);
    let second = d.snapshot().unwrap();
    assert_eq!(health.degraded(), None);
    assert!(!first.exists(), "the new snapshot replaced it");
    let recovery = kill_and_reopen(d, dir.path(), &clock);
    assert_eq!(recovery.snapshot, Some(second));
}

#[test]
fn a_read_only_directory_refuses_commits_and_loses_nothing_once_writable() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let d = open_commit_only(dir.path(), &clock);
    let health = d.health();
    write_some(&d, &clock, 100);
    d.committer().commit().unwrap();
    let fault = inject(dir.path(), Fault::ReadOnly);
    write_some(&d, &clock, 100);
    for _ in 0..3 {
        assert!(d.committer().commit().is_err());
        assert!(d.snapshot().is_err());
    }
    let degraded = health.degraded().unwrap();
    assert!(
        degraded.contains("WAL: ") && degraded.contains("store snapshot: "),
        "{degraded}"
    );
    assert!(health.errors() >= 6);
    drop(fault);
    d.committer().commit().unwrap();
    assert!(health.degraded().unwrap().starts_with("store snapshot: "));
    d.snapshot().unwrap();
    assert_eq!(health.degraded(), None);
    write_some(&d, &clock, 10);
    d.committer().commit().unwrap();
    kill_and_reopen(d, dir.path(), &clock);
}

#[test]
fn a_write_cut_short_is_completed_before_the_records_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let d = open_commit_only(dir.path(), &clock);
    write_some(&d, &clock, 20);
    d.committer().commit().unwrap();
    // 5 bytes of the next record reach the file, then the disk is full.
    let fault = inject(dir.path(), Fault::DiskFull { room: 5 });
    write_some(&d, &clock, 20);
    assert!(d.committer().commit().is_err());
    write_some(&d, &clock, 20);
    assert!(d.committer().commit().is_err());
    drop(fault);
    write_some(&d, &clock, 20);
    d.committer().commit().unwrap();
    let recovery = kill_and_reopen(d, dir.path(), &clock);
    assert!(!recovery.truncated_tail, "no torn record: {recovery:?}");
}

#[test]
fn records_given_up_past_the_bound_are_made_up_for_by_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let d = open_commit_only(dir.path(), &clock);
    d.wal.lock().max_pending = 4096;
    write_some(&d, &clock, 20);
    d.committer().commit().unwrap();
    let fault = inject(dir.path(), Fault::DiskFull { room: 100 });
    write_some(&d, &clock, 500);
    assert!(d.committer().commit().is_err(), "the disk is full");
    assert!(
        d.wal.lock().unsaved.is_some(),
        "past 4 KiB the records were given up"
    );
    drop(fault);
    // The WAL is cut back to its last whole record and takes records again, but it lacks
    // those given up: no commit succeeds before a snapshot.
    write_some(&d, &clock, 5);
    assert!(matches!(
        d.committer().commit().unwrap_err(),
        PersistError::NotSaved
    ));
    assert!(d.health().degraded().unwrap().starts_with("WAL: "));
    d.snapshot().unwrap();
    d.committer().commit().unwrap();
    assert_eq!(d.health().degraded(), None);
    write_some(&d, &clock, 5);
    d.committer().commit().unwrap();
    let recovery = kill_and_reopen(d, dir.path(), &clock);
    assert!(!recovery.truncated_tail, "{recovery:?}");
}

#[test]
fn the_flusher_takes_snapshots_again_once_a_fault_clears() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let every_second = PersistConfig {
        flush_ms: 20,
        snapshot_secs: 1,
        ..persist()
    };
    let (d, _) = Durable::open(dir.path(), &config(), &every_second, clock.clone(), false).unwrap();
    let health = d.health();
    write_some(&d, &clock, 50);
    let fault = inject(dir.path(), Fault::Rename);
    wait_for("a failed periodic snapshot", || health.degraded().is_some());
    assert!(health.degraded().unwrap().starts_with("store snapshot: "));
    drop(fault);
    // The next try (a second after the failure) goes through.
    wait_for("a periodic snapshot after the fault", || {
        health.degraded().is_none() && !files(dir.path(), ".bin").is_empty()
    });
    assert_eq!(files(dir.path(), ".tmp"), Vec::<String>::new());
    drop(d);
    let (_, recovery) = open(dir.path(), &clock, false).unwrap();
    assert!(recovery.snapshot.is_some());
}

#[test]
fn startup_removes_unfinished_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = open(dir.path(), &clock, false).unwrap();
    write_some(&d, &clock, 50);
    d.snapshot().unwrap();
    let before = load(&d, 50);
    drop(d);
    fs::write(dir.path().join("snapshot-0000000000000007.tmp"), b"cut").unwrap();
    let (d, recovery) = open(dir.path(), &clock, false).unwrap();
    assert_eq!(files(dir.path(), ".tmp"), Vec::<String>::new());
    assert!(recovery.snapshot.is_some());
    assert_eq!(load(&d, 50), before);
}
