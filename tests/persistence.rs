//! Crash safety with a real process and a real `kill -9`: a child process writes increments to
//! a durable store and prints an acknowledgement after each fsync; the parent kills it with
//! SIGKILL at several points (also mid-snapshot), reopens the store, and checks that every
//! acknowledged increment is there and that recovery is consistent and repeatable.
//!
//! The child is this test binary itself, run as the ignored test `child_writer` with
//! `SHRIKE_KILL9_DIR` set by the parent.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shrike::store::{
    Counter, Durable, Increment, ManualClock, PersistConfig, StoreConfig, StoreKey,
};

const T0: u64 = 1_700_000_000;
const KEYS: u64 = 97;
const MAX_WRITES: u64 = 5_000_000;

fn config() -> StoreConfig {
    StoreConfig {
        max_keys: 1_000_000,
        shards: 64,
        ..StoreConfig::default()
    }
}

fn persist() -> PersistConfig {
    PersistConfig {
        flush_ms: 5,
        snapshot_secs: 0,
        ..PersistConfig::default()
    }
}

fn key(i: u64) -> StoreKey {
    StoreKey {
        namespace: 0,
        kind: 1,
        hash: (i % KEYS).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    }
}

/// The writer: increment i goes to key(i); after every 1,000 writes, fsync and acknowledge
/// "acked <i>" (everything up to i is durable); every 20,000 writes, a snapshot.
#[test]
#[ignore = "run only as the child of kill9_recovers_every_acknowledged_increment"]
fn child_writer() {
    let dir = std::env::var("SHRIKE_KILL9_DIR").expect("SHRIKE_KILL9_DIR (set by the parent test)");
    let clock = Arc::new(ManualClock::new(T0));
    let (d, _) = Durable::open(dir.as_ref(), &config(), &persist(), clock, false).expect("open");
    for i in 0..MAX_WRITES {
        d.store()
            .record_many(&[Increment::one(key(i), Counter::Seen)]);
        if i % 1_000 == 999 {
            d.sync().expect("sync");
            println!("acked {i}");
        }
        if i % 20_000 == 19_999 {
            d.snapshot().expect("snapshot");
        }
    }
}

fn expected_at_least(acked: u64) -> Vec<u64> {
    (0..KEYS)
        .map(|k| if acked < k { 0 } else { (acked - k) / KEYS + 1 })
        .collect()
}

#[test]
fn kill9_recovers_every_acknowledged_increment() {
    let exe = std::env::current_exe().expect("test binary");
    for (round, kill_after_acks) in [3u64, 17, 29, 64].into_iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "child_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SHRIKE_KILL9_DIR", dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("child stdout");
        let mut acked = None;
        let mut acks = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        for line in BufReader::new(stdout).lines() {
            let line = line.expect("child output");
            if let Some(i) = line.strip_prefix("acked ") {
                acked = Some(i.trim().parse::<u64>().expect("ack number"));
                acks += 1;
                if acks == kill_after_acks {
                    // Let it run on a little, mid-write, before the kill.
                    std::thread::sleep(Duration::from_millis(3 * round as u64));
                    break;
                }
            }
            assert!(Instant::now() < deadline, "child too slow");
        }
        child.kill().expect("kill -9"); // SIGKILL on Unix
        let status = child.wait().expect("reap child");
        assert!(
            !status.success(),
            "round {round}: the child must have been killed"
        );
        let acked = acked.expect("at least one acknowledgement");

        let clock = Arc::new(ManualClock::new(T0));
        let keys: Vec<StoreKey> = (0..KEYS).map(key).collect();
        let (d, recovery) = Durable::open(dir.path(), &config(), &persist(), clock.clone(), false)
            .unwrap_or_else(|e| panic!("round {round}: recovery failed: {e}"));
        let counts: Vec<u64> = d
            .store()
            .lookup_many(&keys)
            .iter()
            .map(|w| w.windows[0][Counter::Seen as usize])
            .collect();
        let want = expected_at_least(acked);
        for k in 0..KEYS as usize {
            assert!(
                counts[k] >= want[k],
                "round {round}: key {k} has {} < {} acknowledged (acked up to {acked}, {recovery:?})",
                counts[k],
                want[k]
            );
        }
        let total: u64 = counts.iter().sum();
        assert!(
            total <= MAX_WRITES && total > acked,
            "round {round}: total {total}"
        );
        drop(d);
        // Recovery is repeatable: a second start sees the same state.
        let (d, _) = Durable::open(dir.path(), &config(), &persist(), clock, false)
            .expect("second recovery");
        let again: Vec<u64> = d
            .store()
            .lookup_many(&keys)
            .iter()
            .map(|w| w.windows[0][Counter::Seen as usize])
            .collect();
        assert_eq!(again, counts, "round {round}");
    }
}

#[test]
fn child_refuses_to_run_without_its_parent() {
    // The child test must fail loudly when run by hand, never pass by doing nothing.
    let exe = std::env::current_exe().expect("test binary");
    let status = Command::new(exe)
        .args(["--exact", "child_writer", "--ignored", "--test-threads=1"])
        .env_remove("SHRIKE_KILL9_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run child");
    assert!(!status.success());
}

/// A data directory written by the store format's first version loads, with the same counts:
/// the files in `tests/fixtures/store-v1` (2 shards, the default resolutions) hold a snapshot
/// taken at 1,700,000,700 and a WAL of two records written two days later.
#[test]
fn a_data_directory_of_format_1_loads() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v1");
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["snapshot-0000000000000001.bin", "wal-0000000000000002.log"] {
        std::fs::copy(fixture.join(file), dir.path().join(file)).expect("copy fixture");
    }
    let config = StoreConfig {
        max_keys: 1_000,
        shards: 2,
        ..StoreConfig::default()
    };
    let clock = Arc::new(ManualClock::new(1_700_173_600));
    let (d, recovery) =
        Durable::open(dir.path(), &config, &persist(), clock, false).expect("fixture loads");
    assert_eq!(
        (
            recovery.snapshot_keys,
            recovery.wal_files,
            recovery.wal_records,
            recovery.skipped_records,
            recovery.truncated_tail,
        ),
        (4, 1, 2, 0, false),
        "{recovery:?}"
    );
    let key = |namespace, kind, hash| StoreKey {
        namespace,
        kind,
        hash,
    };
    let (day, ten_minutes) = (1_699_920_000, 1_700_173_200);
    // (key, its settled buckets, its window sums: 10 min, 1 h, 24 h, 7 d, 14 d)
    let expected = [
        (
            key(0, 8, 0x0123_4567_89ab_cdef),
            vec![
                (0, ten_minutes, [1, 0, 0, 0, 0]),
                (1, day, [301, 1, 0, 1, 0]),
            ],
            [
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0],
                [302, 1, 0, 1, 0],
                [302, 1, 0, 1, 0],
            ],
        ),
        (
            key(0, 8, 0xfedc_ba98_7654_3210),
            vec![(1, day, [0, 0, 1, 0, 0])],
            [[0; 5], [0; 5], [0; 5], [0, 0, 1, 0, 0], [0, 0, 1, 0, 0]],
        ),
        (
            key(1, 300, 0x0000_0100_0000_0007),
            vec![(0, ten_minutes, [0, 0, 0, 1, 0])],
            [[0, 0, 0, 1, 0]; 5],
        ),
        (
            key(0, 71, 0xdead_beef),
            vec![(0, ten_minutes, [1, 0, 0, 0, 0]), (1, day, [1, 0, 0, 0, 0])],
            [
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0],
                [2, 0, 0, 0, 0],
                [2, 0, 0, 0, 0],
            ],
        ),
        (
            key(0, 72, 0x0000_0200_0000_0042),
            vec![(0, ten_minutes, [1, 0, 0, 0, 0]), (1, day, [1, 0, 0, 0, 0])],
            [
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0],
                [1, 0, 0, 0, 0],
                [2, 0, 0, 0, 0],
                [2, 0, 0, 0, 0],
            ],
        ),
    ];
    for (k, buckets, windows) in &expected {
        let t = d.store().timeline(k).expect("key restored");
        assert_eq!(&t.buckets, buckets, "{k:?}");
        assert_eq!(&*t.windows.windows, &windows[..], "{k:?}");
    }
    assert_eq!(d.store().stats().keys, 5);

    // This build goes on in a WAL of the current version beside the old one; after a kill
    // both replay: the old counts and the new.
    let k1 = key(0, 8, 0x0123_4567_89ab_cdef);
    let fresh = key(0, 9, 0x0000_0001_0000_0009);
    d.store().record_many(&[
        Increment::one(k1, Counter::Seen),
        Increment::one(fresh, Counter::Spam),
    ]);
    d.committer().commit().expect("commit");
    std::mem::forget(d);
    let clock = Arc::new(ManualClock::new(1_700_173_600));
    let (d, recovery) =
        Durable::open(dir.path(), &config, &persist(), clock, false).expect("both versions load");
    assert_eq!(
        (recovery.wal_files, recovery.wal_records),
        (2, 3),
        "{recovery:?}"
    );
    let sums = d.store().lookup_many(&[k1, fresh]);
    assert_eq!(
        sums[0].windows[0],
        [2, 0, 0, 0, 0],
        "k1's 10 minutes: fixture 1 + new 1"
    );
    assert_eq!(sums[0].windows[4], [303, 1, 0, 1, 0], "k1's 14 days");
    assert_eq!(sums[1].windows[0], [0, 1, 0, 0, 0]);
    assert_eq!(d.store().stats().keys, 6);
}
