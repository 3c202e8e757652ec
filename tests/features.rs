//! Windowed features (`feature { … }`, `msg:feature(name)`): every kind over a simulated clock
//! (the window sliding, expiry, `max_distinct` saturation), values from the state before the
//! message, failures that stay `RULE_ERROR`s, declarations refused with a reason; and through
//! the binary the same values in `shrike scan`, `shrike serve` and `shrike replay`, and
//! features that survive a daemon restart.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use daemon::{Daemon, Options};
use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::{prepare, Envelope};
use shrike::scan::Scanner;
use shrike::store::{ManualClock, ReputationStore, Store};
use shrike::verdict::Verdict;

/// On a bucket boundary (10 minutes), so the window's edges fall where the test says.
const T0: u64 = 1_800_000_000;

const FEATURES: &str = r#"
local function sender(msg) return (msg:from()) end
feature { name = "per_from", key = sender, kind = "count", window = "1h" }
feature { name = "n_sum", key = sender, kind = "sum", window = "1h",
  value = function(msg) return tonumber(msg:header("X-N")) end }
feature { name = "subjects", key = sender, kind = "distinct", window = "1h", max_distinct = 3,
  value = function(msg) return msg:subject() end }
feature { name = "prio_ratio", key = sender, kind = "ratio", window = "1h",
  value = function(msg) return msg:header("X-Priority") ~= nil end }
rule { name = "FEAT", score = 0, check = function(msg)
  local d, saturated = msg:feature("subjects")
  return true, { tostring(msg:feature("per_from")), tostring(msg:feature("n_sum")),
    tostring(d), tostring(saturated), tostring(msg:feature("prio_ratio")) }
end }
"#;

fn message(from: &str, n: u32, subject: &str, prio: bool) -> Vec<u8> {
    let prio = if prio { "X-Priority: 1\r\n" } else { "" };
    format!(
        "From: {from}\r\nTo: x@example.net\r\nSubject: {subject}\r\nX-N: {n}\r\n{prio}\
         Message-ID: <{n}.{subject}@example.org>\r\n\r\nbody {n}\r\n"
    )
    .into_bytes()
}

struct Engine {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    scanner: Arc<Scanner>,
}

fn engine(rules: &str) -> Engine {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.lua"), rules).unwrap();
    let config = Config::default();
    let clock = Arc::new(ManualClock::new(T0));
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, clock.clone()).unwrap());
    let scanner = Scanner::new(
        &config.scan_settings(),
        RuleLocation::Dir(dir.path().to_path_buf()),
        store,
    )
    .expect("rules load");
    Engine {
        _dir: dir,
        clock,
        scanner,
    }
}

impl Engine {
    /// Scans at `at` (seconds after T0) and applies the updates, as the daemon does.
    fn scan_at(&self, at: u64, raw: &[u8]) -> Verdict {
        self.clock.set(T0 + at);
        let mut w = self.scanner.worker();
        let input = prepare(raw, self.scanner.limits());
        let scanned = w.scan(&input, &Envelope::default());
        self.scanner.apply(&scanned.updates);
        scanned.verdict
    }

    fn feat(&self, at: u64, raw: &[u8]) -> Vec<String> {
        let v = self.scan_at(at, raw);
        assert!(!v.symbols.contains_key("RULE_ERROR"), "{:?}", v.symbols);
        v.symbols["FEAT"].options.clone()
    }
}

fn opts(s: &[&str]) -> Vec<String> {
    s.iter().map(|x| x.to_string()).collect()
}

#[test]
fn every_kind_slides_expires_and_saturates() {
    let e = engine(FEATURES);
    let a = "alice@example.org";
    // count, sum, distinct, saturated, ratio: from the state before each message
    assert_eq!(
        e.feat(0, &message(a, 5, "s1", true)),
        opts(&["0", "0", "0", "false", "nil"])
    );
    assert_eq!(
        e.feat(60, &message(a, 3, "s2", false)),
        opts(&["1", "5", "1", "false", "1.0"])
    );
    // s1 again: a value already counted in the window is not counted twice
    assert_eq!(
        e.feat(120, &message(a, 2, "s1", false)),
        opts(&["2", "8", "2", "false", "0.5"])
    );
    assert_eq!(
        e.feat(180, &message(a, 0, "s3", true)),
        opts(&["3", "10", "2", "false", "0.33333333333333"])
    );
    // s3 made three distinct values: max_distinct reached, saturated
    assert_eq!(
        e.feat(240, &message(a, 1, "s4", false)),
        opts(&["4", "10", "3", "true", "0.5"])
    );
    // saturated: s4 was not stored, and the value stays at the cap
    assert_eq!(
        e.feat(300, &message(a, 1, "s5", false)),
        opts(&["5", "11", "3", "true", "0.4"])
    );
    // Another key has its own values.
    assert_eq!(
        e.feat(310, &message("bob@example.org", 1, "s1", true)),
        opts(&["0", "0", "0", "false", "nil"])
    );
    // Sliding: 50 minutes on, everything is still in the hour.
    assert_eq!(
        e.feat(3_000, &message(a, 0, "s6", false)),
        opts(&["6", "12", "3", "true", "0.33333333333333"])
    );
    // 70 minutes after the first six (the window reads back at most one 10-minute bucket
    // more than its length): only the message at 3000 s is left.
    assert_eq!(
        e.feat(300 + 3_600 + 600, &message(a, 0, "s7", false)),
        opts(&["1", "0", "0", "false", "0.0"])
    );
    // Expired entirely (the message at 4500 s too), the saturation with it: values count again.
    assert_eq!(
        e.feat(4_500 + 3_600 + 600, &message(a, 9, "s8", false)),
        opts(&["0", "0", "0", "false", "nil"])
    );
    assert_eq!(
        e.feat(4_500 + 3_600 + 660, &message(a, 9, "s9", false)),
        opts(&["1", "9", "1", "false", "0.0"])
    );
}

#[test]
fn a_learn_reads_the_features_but_adds_nothing() {
    let e = engine(FEATURES);
    let raw = message("alice@example.org", 4, "s1", true);
    assert_eq!(e.feat(0, &raw)[0], "0");
    e.clock.set(T0 + 10);
    let mut w = e.scanner.worker();
    w.learn(&raw, shrike::store::Counter::Complaint);
    w.learn(&raw, shrike::store::Counter::Rescue);
    assert_eq!(e.feat(20, &raw), opts(&["1", "4", "1", "false", "1.0"]));
}

#[test]
fn a_feature_without_a_key_reads_nil_and_adds_nothing() {
    let e = engine(
        "feature { name = 'per_ip', key = function(msg) return msg:ip() end, kind = 'count', window = '1h' }\n\
         rule { name = 'FEAT', score = 0, check = function(msg) return true, tostring(msg:feature('per_ip')) end }\n",
    );
    let raw = message("a@example.org", 1, "x", false);
    assert_eq!(e.feat(0, &raw), opts(&["nil"]));
    assert_eq!(e.feat(10, &raw), opts(&["nil"]));
}

#[test]
fn a_failing_key_is_a_rule_error_never_a_failed_scan() {
    let e = engine(
        "feature { name = 'broken', key = function(msg) error('no key today') end, kind = 'count', window = '1h' }\n\
         feature { name = 'unread', key = function(msg) return {} end, kind = 'count', window = '1h' }\n\
         feature { name = 'fine', key = function(msg) return 'k' end, kind = 'count', window = '1h' }\n\
         rule { name = 'READS_BROKEN', score = 1, check = function(msg) return msg:feature('broken') > 0 end }\n\
         rule { name = 'READS_FINE', score = 1, check = function(msg) return true, tostring(msg:feature('fine')) end }\n",
    );
    let raw = message("a@example.org", 1, "x", false);
    for (at, fine) in [(0, "0"), (60, "1")] {
        let v = e.scan_at(at, &raw);
        let errors = &v.symbols["RULE_ERROR"].options;
        assert!(
            errors.iter().any(|o| o.starts_with("READS_BROKEN: ")
                && o.contains("feature broken: key: ")
                && o.contains("no key today")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|o| o == "feature unread: key must return a string or a number, got table"),
            "{errors:?}"
        );
        assert_eq!(v.symbols["READS_FINE"].options, [fine], "the others work");
        assert!(!v.symbols.contains_key("READS_BROKEN"));
    }
}

#[test]
fn declarations_are_checked() {
    let load = |text: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.lua"), text).unwrap();
        let config = Config::default();
        let store: Arc<dyn ReputationStore> =
            Arc::new(Store::new(&config.store, Arc::new(ManualClock::new(T0))).unwrap());
        Scanner::new(
            &config.scan_settings(),
            RuleLocation::Dir(dir.path().to_path_buf()),
            store,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    };
    let key = "key = function(msg) return 1 end";
    for (text, error) in [
        (
            format!("feature {{ name = 'f', {key}, kind = 'count', window = '2h' }}"),
            "window \"2h\" is not one of the store's windows (10m, 1h, 24h, 7d, 14d",
        ),
        (
            format!("feature {{ name = 'f', {key}, kind = 'median', window = '1h' }}"),
            "`kind` must be",
        ),
        (
            format!("feature {{ name = 'f', {key}, kind = 'sum', window = '1h' }}"),
            "`value` (a function of msg) is required",
        ),
        (
            "feature { name = 'f', kind = 'count', window = '1h' }".to_string(),
            "`key` (a function of msg) is required",
        ),
        (
            format!(
                "feature {{ name = 'f', {key}, kind = 'distinct', window = '1h', value = tostring, max_distinct = 0 }}"
            ),
            "`max_distinct` must be an integer",
        ),
        (
            format!(
                "feature {{ name = 'f', {key}, kind = 'count', window = '1h' }}\n\
                 feature {{ name = 'f', {key}, kind = 'count', window = '10m' }}"
            ),
            "feature \"f\" is already declared",
        ),
        (
            format!("feature {{ name = 'f', {key}, kind = 'count', window = '1h', colour = 1 }}"),
            "unknown field",
        ),
        (
            "rule { name = 'R', score = 1, check = function(msg) return msg:feature('nope') end }"
                .to_string(),
            "",
        ),
    ] {
        let r = load(&text);
        if error.is_empty() {
            assert!(r.is_ok(), "{text}: {r:?}");
        } else {
            let e = r.expect_err(&text);
            assert!(e.contains(error), "{text}: {e}");
        }
    }
    // An undeclared feature is the reading rule's error.
    let e = engine(
        "rule { name = 'R', score = 1, check = function(msg) return msg:feature('nope') end }",
    );
    let v = e.scan_at(0, &message("a@example.org", 1, "x", false));
    assert!(
        v.symbols["RULE_ERROR"].options[0].contains("no feature nope is declared"),
        "{:?}",
        v.symbols
    );
}

// Through the binary -----------------------------------------------------------------------

const SHARED_RULES: &str = r#"
local function sender(msg) return (msg:from()) end
feature { name = "per_from", key = sender, kind = "count", window = "1h" }
feature { name = "subjects", key = sender, kind = "distinct", window = "1h",
  value = function(msg) return msg:subject() end }
-- weights 1 + value: the symbol's score carries the value (a 0 would be no hit)
rule { name = "FEAT_COUNT", score = 1, check = function(msg) return 1 + msg:feature("per_from") end }
rule { name = "FEAT_DISTINCT", score = 1, check = function(msg) return 1 + msg:feature("subjects") end }
"#;

/// Seven messages from two senders, one minute apart (Date and Received), in file-name order.
fn corpus(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("f.lua"), SHARED_RULES).unwrap();
    let spam = dir.join("corpus/spam");
    std::fs::create_dir_all(&spam).unwrap();
    let mut files = Vec::new();
    for (i, (from, subject)) in [
        ("alice", "one"),
        ("alice", "two"),
        ("bob", "one"),
        ("alice", "one"),
        ("alice", "three"),
        ("bob", "two"),
        ("alice", "four"),
    ]
    .iter()
    .enumerate()
    {
        let time = format!("Thu, 01 Jan 2026 10:{:02}:00 +0000", 10 + i);
        let raw = format!(
            "Received: from mx.example.org ([192.0.2.1]) by mx.example.net; {time}\r\n\
             From: {from}@example.org\r\nTo: x@example.net\r\nSubject: {subject}\r\n\
             Date: {time}\r\nMessage-ID: <{i}@example.org>\r\n\r\nhello {i}\r\n"
        );
        let path = spam.join(format!("m{i}.eml"));
        std::fs::write(&path, raw).unwrap();
        files.push(path);
    }
    (rules, files)
}

/// The expected (FEAT_COUNT, FEAT_DISTINCT) scores: 1 + the values before each message.
const EXPECTED: [(f64, f64); 7] = [
    (1.0, 1.0),
    (2.0, 2.0),
    (1.0, 1.0),
    (3.0, 3.0),
    (4.0, 3.0),
    (2.0, 2.0),
    (5.0, 4.0),
];

fn scores(symbols: &serde_json::Value) -> (f64, f64) {
    (
        symbols["FEAT_COUNT"]["score"].as_f64().unwrap(),
        symbols["FEAT_DISTINCT"]["score"].as_f64().unwrap(),
    )
}

#[test]
fn scan_serve_and_replay_give_the_same_values() {
    let dir = tempfile::tempdir().unwrap();
    let (rules, files) = corpus(dir.path());
    // shrike scan, the files in order
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["scan", "--no-default-rules", "--rules"])
        .arg(&rules)
        .args(&files)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let scanned: Vec<(f64, f64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| scores(&serde_json::from_str::<serde_json::Value>(l).unwrap()["symbols"]))
        .collect();
    assert_eq!(scanned, EXPECTED);

    // shrike serve, one worker (each message's updates are applied before the next scan)
    let daemon_dir = dir.path().join("daemon");
    std::fs::create_dir_all(&daemon_dir).unwrap();
    let d = Daemon::start(
        &daemon_dir,
        Options {
            rules: Some(rules.clone()),
            workers: Some(1),
            ..Options::default()
        },
    );
    let served: Vec<(f64, f64)> = files
        .iter()
        .map(|f| scores(&d.post("/checkv2", &[], &std::fs::read(f).unwrap()).json()["symbols"]))
        .collect();
    assert_eq!(served, EXPECTED);
    drop(d);

    // shrike replay on the messages' own times
    let csv = dir.path().join("replay.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["replay", "--no-default-rules", "--rules"])
        .arg(&rules)
        .arg("--csv")
        .arg(&csv)
        .arg(dir.path().join("corpus"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut reader = csv::Reader::from_path(&csv).unwrap();
    let mut replayed: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for row in reader.deserialize::<BTreeMap<String, String>>() {
        let row = row.unwrap();
        let symbol = |name: &str| -> f64 {
            let s = &row["symbols"];
            let at = s
                .find(&format!("{name}("))
                .unwrap_or_else(|| panic!("{name} in {s}"));
            let rest = &s[at + name.len() + 1..];
            rest[..rest.find(')').unwrap()].parse().unwrap()
        };
        let file = Path::new(&row["file"])
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        replayed.insert(file, (symbol("FEAT_COUNT"), symbol("FEAT_DISTINCT")));
    }
    let replayed: Vec<(f64, f64)> = (0..7).map(|i| replayed[&format!("m{i}.eml")]).collect();
    assert_eq!(replayed, EXPECTED);
}

#[test]
fn features_survive_a_daemon_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (rules, files) = corpus(dir.path());
    let options = Options {
        rules: Some(rules),
        workers: Some(1),
        ..Options::default()
    };
    let mut d = Daemon::start(dir.path(), options.clone());
    for f in &files[..2] {
        d.post("/checkv2", &[], &std::fs::read(f).unwrap());
    }
    d.stop();
    let d = Daemon::start(
        dir.path(),
        Options {
            ports: Some((d.http, d.milter)),
            ..options
        },
    );
    // alice's third message: two before it with two subjects, read from the restored store
    let v = d
        .post("/checkv2", &[], &std::fs::read(&files[3]).unwrap())
        .json();
    assert_eq!(scores(&v["symbols"]), (3.0, 3.0), "{v}");
}
