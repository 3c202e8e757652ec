//! Crash safety with a real process and a real `kill -9`: a child process writes increments to
//! a durable store and prints an acknowledgement after each fsync; the parent kills it with
//! SIGKILL at several points (also mid-snapshot), reopens the store, and checks that every
//! acknowledged increment is there and that recovery is consistent and repeatable.
//!
//! The child is this test binary itself, run as the ignored test `child_writer` with
//! `SHRIKE_KILL9_DIR` set by the parent.
//!
//! Faults in the data directory, on a real small tmpfs (a full disk) and a real read-only mount:
//! the daemon acknowledges no learn it could not write, loses none it acknowledged across a
//! `kill -9`, says `degraded` meanwhile and takes snapshots again once the fault clears.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/tmpfs.rs"]
mod tmpfs;

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

// ---- faults in the data directory ------------------------------------------------------------

/// Key `i` of the fault tests (as many as they like, unlike `key`).
fn fault_key(i: u64) -> StoreKey {
    StoreKey {
        namespace: 0,
        kind: 1,
        hash: (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    }
}

/// Increments `count` times key `k`, one `record_many` each (one WAL record each).
fn increment(d: &Durable, k: u64, count: u64) {
    for _ in 0..count {
        d.store()
            .record_many(&[Increment::one(fault_key(k), Counter::Seen)]);
    }
}

fn seen(d: &Durable, keys: u64) -> Vec<u64> {
    let keys: Vec<StoreKey> = (0..keys).map(fault_key).collect();
    d.store()
        .lookup_many(&keys)
        .iter()
        .map(|w| w.windows[0][Counter::Seen as usize])
        .collect()
}

/// A durable store on `dir` whose WAL is written only by commits (the flusher waits an hour),
/// so the test decides when writes happen.
fn open_commit_only(dir: &std::path::Path) -> Durable {
    let persist = PersistConfig {
        flush_ms: 3_600_000,
        ..persist()
    };
    Durable::open(
        dir,
        &config(),
        &persist,
        Arc::new(ManualClock::new(T0)),
        false,
    )
    .expect("open")
    .0
}

/// On a full disk a commit fails and keeps what it could not write; records made meanwhile
/// (more than a megabyte of them) are written after the space comes back, so the commit that
/// then succeeds has every one of them in the file: after a kill (the process forgets the
/// store without a flush) they are all there.
#[test]
fn a_wal_write_that_fails_keeps_its_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = tmpfs::mount_or_skip(
        "a_wal_write_that_fails_keeps_its_records",
        &dir.path().join("data"),
        "8m",
    ) else {
        return;
    };
    let d = open_commit_only(&fs.path);
    increment(&d, 0, 10);
    d.committer().commit().expect("commit with room");
    fs.fill("filler");
    // The WAL's last page still has room: commits go on until it is full.
    let mut on_full_disk = 0;
    loop {
        increment(&d, 1, 10);
        on_full_disk += 10;
        if d.committer().commit().is_err() {
            break;
        }
        assert!(on_full_disk < 100_000, "no commit failed on a full disk");
    }
    // Well past the old 1 MiB write buffer.
    for round in 0..4 {
        increment(&d, 2, 20_000);
        assert!(
            d.committer().commit().is_err(),
            "round {round} on a full disk"
        );
    }
    fs.free("filler");
    increment(&d, 3, 10);
    d.committer().commit().expect("a commit with room again");
    std::mem::forget(d);
    let d = open_commit_only(&fs.path);
    assert_eq!(seen(&d, 4), [10, on_full_disk, 80_000, 10]);
}

/// Snapshots on a disk that fills up: one that fails leaves no temporary file and no WAL
/// behind that would stop the next rotation, and the first one after the space comes back
/// succeeds and holds everything.
#[test]
fn snapshots_fail_cleanly_on_a_full_disk_and_resume_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = tmpfs::mount_or_skip(
        "snapshots_fail_cleanly_on_a_full_disk_and_resume_after",
        &dir.path().join("data"),
        "2m",
    ) else {
        return;
    };
    let d = open_commit_only(&fs.path);
    let keys = 2_000;
    for k in 0..keys {
        increment(&d, k, 3);
    }
    d.sync().expect("sync");
    d.snapshot().expect("a snapshot with room");
    let temporary = |fs: &tmpfs::Tmpfs| files_ending(&fs.path, ".tmp");
    fs.fill("filler");
    // Room for a new WAL but not for the snapshot: the snapshot's write fails.
    fs.give_back("filler", 8192);
    assert!(d.snapshot().is_err(), "a snapshot on a nearly full disk");
    assert_eq!(
        temporary(&fs),
        Vec::<String>::new(),
        "a failed snapshot's file removed"
    );
    // No room even for a new WAL: the rotation fails.
    fs.fill("filler2");
    assert!(d.snapshot().is_err(), "a snapshot on a full disk");
    assert!(d.snapshot().is_err(), "again");
    assert_eq!(temporary(&fs), Vec::<String>::new());
    fs.free("filler2");
    fs.free("filler");
    increment(&d, 0, 1);
    let snapshot = d.snapshot().expect("a snapshot once there is room again");
    assert_eq!(
        files_ending(&fs.path, ".bin"),
        [snapshot.file_name().unwrap().to_string_lossy()]
    );
    assert_eq!(
        files_ending(&fs.path, ".log").len(),
        1,
        "one WAL, started by the rotation"
    );
    let before = seen(&d, keys);
    std::mem::forget(d);
    let d = open_commit_only(&fs.path);
    assert_eq!(seen(&d, keys), before);
    assert_eq!(before[0], 4);
}

/// A spam message of one stream (one sender, so its complaints add up on one key), each copy
/// with its own Message-ID and words, so every learn trains the classifier.
fn spam(i: usize) -> Vec<u8> {
    format!(
        "From: Prize Desk <desk@winners-club.example>\r\nTo: bob@example.org\r\n\
         Subject: claim your cash prize {i}\r\nMessage-ID: <{i}.fault@winners-club.example>\r\n\
         Date: Mon, 2 Nov 2026 10:00:00 +0000\r\n\r\n\
         Congratulations winner {i}! Claim your cash prize now, send your bank details to \
         http://winners-club.example/claim/{i} before midnight. Ref w{i}x q{i}z.\r\n"
    )
    .into_bytes()
}

fn complaints(d: &daemon::Daemon) -> u64 {
    let r = d.get("/reputation?type=from&value=desk%40winners-club.example");
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["keys"][0]["windows"]["24h"]["complaint"]
        .as_u64()
        .unwrap_or(0)
}

fn classifier_spam(d: &daemon::Daemon) -> u64 {
    d.get("/stat").json()["classifier"]["learned_spam"]
        .as_u64()
        .expect("classifier learned_spam")
}

fn persistence_word(d: &daemon::Daemon) -> String {
    d.get("/health").json()["persistence"]
        .as_str()
        .unwrap_or("missing")
        .to_string()
}

/// The data directory's files whose names end with `suffix`.
fn files_ending(dir: &std::path::Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the data directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    names.sort();
    names
}

/// A daemon with a small classifier and store (their snapshots, 1.1 MB and 0.1 MB, fit a
/// tmpfs of a few MB) and `extra` config.
fn fault_options(extra: &str, ports: Option<(u16, u16)>) -> daemon::Options {
    daemon::Options {
        config: Some(format!(
            "[classifier]\ntable_bits = 16\n\n[store]\nmax_keys = 100000\n\n{extra}"
        )),
        workers: Some(1),
        ports,
        ..daemon::Options::default()
    }
}

/// The disk-full probe of issue 55: fill a small tmpfs under a running daemon, learn until the
/// daemon refuses, free the space, send again what it refused and learn 100 more, `kill -9`:
/// every acknowledged learn is back after the restart, no refused one was answered 200 while
/// the disk was full, and `/health` said `degraded` while it was. Nothing else writes to the
/// directory meanwhile (no periodic snapshots, no history), so the disk stays full until the
/// test frees it.
#[test]
fn a_full_disk_loses_no_acknowledged_learn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = tmpfs::mount_or_skip(
        "a_full_disk_loses_no_acknowledged_learn",
        &dir.path().join("data"),
        "3m",
    ) else {
        return;
    };
    let extra = "[persist]\nsnapshot_secs = 0\n\n[history]\nenabled = false\n";
    let mut d = daemon::Daemon::start(dir.path(), fault_options(extra, None));
    let ports = Some((d.http, d.milter));
    assert_eq!(persistence_word(&d), "ok");
    // Learns before the disk fills: the journal's and the WAL's last pages are partly used,
    // so the appends that fill them are cut short.
    let mut acked = Vec::new();
    for i in 0..5 {
        assert_eq!(d.post("/learnspam", &[], &spam(i)).status, 200);
        acked.push(i);
    }
    fs.fill("filler");

    let mut refused = Vec::new();
    let mut next = 5;
    while refused.len() < 3 {
        assert!(
            next < 5_000,
            "5,000 learns on a full 3 MB disk and no refusal"
        );
        let r = d.post("/learnspam", &[], &spam(next));
        match r.status {
            200 if refused.is_empty() => acked.push(next),
            500 | 503 => refused.push(next),
            s => panic!(
                "learn {next}: status {s} once the disk was full: {}",
                r.text()
            ),
        }
        next += 1;
    }
    for &i in &refused {
        let r = d.post("/learnspam", &[], &spam(i));
        assert!(
            r.status >= 500,
            "learn {i} sent again on the full disk: {} {}",
            r.status,
            r.text()
        );
    }
    assert_eq!(
        persistence_word(&d),
        "degraded",
        "{}",
        d.get("/health").text()
    );
    assert!(d.metric("shrike_persist_errors_total") > 0);

    fs.free("filler");
    // What was refused, sent again, and 100 new ones: all acknowledged now.
    for i in refused.iter().copied().chain(next..next + 100) {
        let r = d.post("/learnspam", &[], &spam(i));
        assert_eq!(
            r.status,
            200,
            "learn {i} after the space came back: {}",
            r.text()
        );
        acked.push(i);
    }
    assert_eq!(persistence_word(&d), "ok", "{}", d.get("/health").text());
    let (learned, counted) = (classifier_spam(&d), complaints(&d));
    assert_eq!(
        learned,
        acked.len() as u64,
        "the classifier trained each once"
    );
    assert_eq!(counted, acked.len() as u64, "each learn counted once");
    d.kill9();

    let d = daemon::Daemon::start(dir.path(), fault_options(extra, ports));
    assert_eq!(
        (classifier_spam(&d), complaints(&d)),
        (learned, counted),
        "every acknowledged learn is back after kill -9"
    );
    assert_eq!(persistence_word(&d), "ok");
}

/// Periodic snapshots (store and classifier, every second) on a disk that fills up: they fail
/// while it is full, leave no temporary file behind, and go on once there is room; learns
/// made meanwhile are acknowledged or refused, and every acknowledged one survives `kill -9`.
#[test]
fn snapshots_resume_once_a_full_disk_has_room_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = tmpfs::mount_or_skip(
        "snapshots_resume_once_a_full_disk_has_room_again",
        &dir.path().join("data"),
        "4m",
    ) else {
        return;
    };
    let extra = "[persist]\nsnapshot_secs = 1\n";
    let mut d = daemon::Daemon::start(dir.path(), fault_options(extra, None));
    let ports = Some((d.http, d.milter));
    let mut acked = 0u64;
    for i in 0..20 {
        assert_eq!(d.post("/learnspam", &[], &spam(i)).status, 200);
        acked += 1;
    }
    daemon::wait_until("the first classifier snapshot", 60, || {
        fs.path.join("classifier.bin").exists()
    });
    fs.fill("filler");
    let mut i = 20;
    daemon::wait_until("persistence degraded on the full disk", 60, || {
        // Learns keep the classifier's snapshots due; some may find room a failed snapshot
        // gave back, and are acknowledged.
        if d.post("/learnspam", &[], &spam(i)).status == 200 {
            acked += 1;
        }
        i += 1;
        persistence_word(&d) == "degraded"
    });
    let snapshots_while_full = files_ending(&fs.path, ".bin");

    fs.free("filler");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while persistence_word(&d) != "ok" {
        assert!(
            std::time::Instant::now() < deadline,
            "persistence not ok 60 s after the space came back: {}\n{}",
            d.get("/health").text(),
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon::wait_until("store and classifier snapshots after the fault", 60, || {
        let now = files_ending(&fs.path, ".bin");
        now.iter()
            .any(|n| n.starts_with("snapshot-") && !snapshots_while_full.contains(n))
            && files_ending(&fs.path, ".journal")
                .iter()
                .all(|j| std::fs::metadata(fs.path.join(j)).map_or(0, |m| m.len()) == 0)
    });
    assert_eq!(files_ending(&fs.path, ".tmp"), Vec::<String>::new());
    let (learned, counted) = (classifier_spam(&d), complaints(&d));
    assert!(learned >= acked, "{learned} trained, {acked} acknowledged");
    d.kill9();

    let d = daemon::Daemon::start(dir.path(), fault_options(extra, ports));
    assert_eq!((classifier_spam(&d), complaints(&d)), (learned, counted));
}

/// A data directory that went read-only (as ext4 does after an I/O error) while the daemon was
/// down: it refuses to start, naming the directory, without touching anything; once writable
/// again it starts with every acknowledged learn and removes the temporary files a killed
/// snapshot left.
#[test]
fn a_read_only_data_directory_is_refused_and_then_used_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some(fs) = tmpfs::mount_or_skip(
        "a_read_only_data_directory_is_refused_and_then_used_as_it_was",
        &dir.path().join("data"),
        "8m",
    ) else {
        return;
    };
    let mut d = daemon::Daemon::start(dir.path(), fault_options("", None));
    let ports = Some((d.http, d.milter));
    for i in 0..10 {
        assert_eq!(d.post("/learnspam", &[], &spam(i)).status, 200);
    }
    d.kill9();
    // What a kill in the middle of snapshots leaves.
    for tmp in ["snapshot-0000000000000001.tmp", "classifier.tmp"] {
        std::fs::write(fs.path.join(tmp), b"half a snapshot").expect("plant a temporary file");
    }
    let before = files_ending(&fs.path, "");
    fs.remount(true);

    let config = dir.path().join("shrike.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("--config")
        .arg(&config)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--milter",
            "off",
            "--data",
        ])
        .arg(&fs.path)
        .output()
        .expect("run shrike serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "started on a read-only directory: {stderr}"
    );
    assert!(stderr.contains(&fs.path.display().to_string()), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    fs.remount(false);
    assert_eq!(files_ending(&fs.path, ""), before, "nothing changed");

    let d = daemon::Daemon::start(dir.path(), fault_options("", ports));
    assert_eq!((classifier_spam(&d), complaints(&d)), (10, 10));
    assert_eq!(files_ending(&fs.path, ".tmp"), Vec::<String>::new());
}

/// A data directory whose entries cannot change while the daemon runs (`chattr +i` on ext4:
/// no file can be created, renamed or removed in it, as on a filesystem gone read-only for
/// new files, while the files already open still take appends): learns go on, snapshots fail
/// and say so in `/health`, and resume once the directory is writable again; nothing
/// acknowledged is lost across a `kill -9`.
#[test]
fn snapshots_wait_while_the_directory_cannot_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = "[persist]\nsnapshot_secs = 1\n\n[history]\nenabled = false\n";
    let mut d = daemon::Daemon::start(dir.path(), fault_options(extra, None));
    let ports = Some((d.http, d.milter));
    for i in 0..10 {
        assert_eq!(d.post("/learnspam", &[], &spam(i)).status, 200);
    }
    let chattr = |flag: &str| {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(&d.data)
            .output()
    };
    /// Makes the directory changeable again however the test ends (its removal needs it).
    struct Mutable(std::path::PathBuf);
    impl Drop for Mutable {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        }
    }
    let _mutable = Mutable(d.data.clone());
    match chattr("+i") {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            eprintln!(
                "SKIPPED snapshots_wait_while_the_directory_cannot_change: chattr +i: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("SKIPPED snapshots_wait_while_the_directory_cannot_change: chattr: {e}");
            return;
        }
    }
    let mut i = 10;
    daemon::wait_until("persistence degraded", 60, || {
        let r = d.post("/learnspam", &[], &spam(i));
        assert_eq!(
            r.status,
            200,
            "the open WAL and journal take learns: {}",
            r.text()
        );
        i += 1;
        persistence_word(&d) == "degraded"
    });
    let health = d.get("/health").json();
    assert!(
        health["persistence_error"]
            .as_str()
            .is_some_and(|e| e.contains("snapshot")),
        "{health}"
    );
    let snapshots_meanwhile = files_ending(&d.data, ".bin");
    assert!(chattr("-i").expect("chattr -i").status.success());
    daemon::wait_until("persistence ok again", 60, || persistence_word(&d) == "ok");
    daemon::wait_until("a store snapshot after the fault", 60, || {
        files_ending(&d.data, ".bin")
            .iter()
            .any(|n| n.starts_with("snapshot-") && !snapshots_meanwhile.contains(n))
    });
    let learned = classifier_spam(&d);
    assert_eq!(learned, i as u64);
    assert_eq!(complaints(&d), i as u64);
    d.kill9();
    let d = daemon::Daemon::start(dir.path(), fault_options(extra, ports));
    assert_eq!((classifier_spam(&d), complaints(&d)), (learned, learned));
    assert_eq!(files_ending(&d.data, ".tmp"), Vec::<String>::new());
}
