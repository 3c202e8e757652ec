//! Greylisting (`[greylist]`, docs/greylist.md) through real parts: a real Postfix in front of
//! the milter defers a new (network, sender, recipient) triple with 451 4.7.1 and accepts the
//! retry after the delay (a short one here), later mail of the triple at once, and a recipient
//! whose settings switch GREYLIST off at once; two daemons on one Redis Cluster share the
//! triples over HTTP (rspamd's `greylist` action), an authenticated sender is not greylisted.
//!
//! The Postfix test needs root (Postfix's master); both need the packages scripts/test.sh
//! installs (postfix, redis-server).

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

#[allow(dead_code)]
#[path = "common/postfix.rs"]
mod postfix;

#[allow(dead_code)]
#[path = "common/redis.rs"]
mod redis;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use daemon::{Daemon, Options};
use postfix::{eod, harness_dir, Postfix};
use redis::Cluster;

/// A rule set whose one rule scores every message 5: between the greylist (4) and add header
/// (6) thresholds.
fn rules(dir: &Path) -> PathBuf {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("10_five.lua"),
        "rule { name = 'FIVE', score = 5, check = function() return true end }\n",
    )
    .unwrap();
    rules
}

/// Greylisting on with a 2-second delay, and an entry that switches it off for one domain.
const GREYLIST: &str = "[greylist]\nenabled = true\ndelay_secs = 2\nexpire_secs = 3600\n\
     [[settings]]\nname = \"no-greylist\"\nrcpt_domains = [\"nogrey.example\"]\n\
     disabled = [\"GREYLIST\"]\n";

/// Past the delay, with the store's one-second sub-buckets.
const PAST_DELAY: Duration = Duration::from_millis(3_500);

fn message(dir: &Path, tag: &str) -> (PathBuf, String) {
    let id = format!("{tag}-{}@greylist.test", std::process::id());
    let path = dir.join(format!("{tag}.eml"));
    std::fs::write(
        &path,
        format!(
            "From: Sender <s@sender.example>\r\nTo: bob@example.com\r\nSubject: hello {tag}\r\n\
             Message-ID: <{id}>\r\nDate: Sun, 29 Nov 2026 09:00:00 +0000\r\n\r\nHello.\r\n"
        ),
    )
    .unwrap();
    (path, id)
}

#[test]
fn postfix_defers_a_new_triple_and_accepts_the_retry() {
    let tmp = tempfile::tempdir().unwrap();
    let harness = harness_dir(tmp.path());
    let shrike = Daemon::start(
        tmp.path(),
        Options {
            config: Some(GREYLIST.to_string()),
            rules: Some(rules(tmp.path())),
            ..Options::default()
        },
    );
    let postfix = Postfix::up(&harness, shrike.milter);
    let (first, id) = message(tmp.path(), "first");

    // A new triple: 451 4.7.1 at end of data, twice when retried at once.
    for _ in 0..2 {
        let line = postfix.send_to(&first, &["bob@example.com"]);
        assert_eq!(eod(&line), "451", "{line}\n{}", postfix.maillog());
        assert!(line.contains("4.7.1"), "{line}");
    }
    assert!(!postfix.sink_holds(&id));
    // Retried after the delay: accepted, marked as passed.
    std::thread::sleep(PAST_DELAY);
    let line = postfix.send_to(&first, &["bob@example.com"]);
    assert_eq!(eod(&line), "250", "{line}\n{}", postfix.maillog());
    let got = postfix
        .delivered(&id)
        .unwrap_or_else(|| panic!("not delivered\n{}", postfix.maillog()));
    assert!(got.contains("GREYLIST_PASS"), "{got}");
    assert!(got.contains("action=no action"), "{got}");
    // Later mail of the triple: at once.
    let (second, second_id) = message(tmp.path(), "second");
    let line = postfix.send_to(&second, &["bob@example.com"]);
    assert_eq!(eod(&line), "250", "{line}");
    assert!(postfix.delivered(&second_id).is_some());
    // Another recipient: another triple.
    let line = postfix.send_to(&second, &["carol@example.com"]);
    assert_eq!(eod(&line), "451", "{line}");
    // A recipient whose settings switch greylisting off: at once, no symbol.
    let (third, third_id) = message(tmp.path(), "third");
    let line = postfix.send_to(&third, &["dave@nogrey.example"]);
    assert_eq!(eod(&line), "250", "{line}");
    let got = postfix.delivered(&third_id).expect("delivered");
    assert!(!got.contains("GREYLIST"), "{got}");
    assert!(got.contains("action=no action"), "{got}");
}

fn wait_until(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/checkv2` of a small message from `ip` with `headers`: (action, GREYLIST's or
/// GREYLIST_PASS's options).
fn check(d: &Daemon, ip: &str, rcpt: &str, extra: &[(&str, &str)]) -> (String, serde_json::Value) {
    let mut headers = vec![("IP", ip), ("From", "s@sender.example"), ("Rcpt", rcpt)];
    headers.extend_from_slice(extra);
    let r = d.post(
        "/checkv2",
        &headers,
        b"From: s@sender.example\r\nSubject: hi\r\n\r\nHello.\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let symbols = &v["symbols"];
    let grey = if symbols.get("GREYLIST").is_some() {
        serde_json::json!({"GREYLIST": symbols["GREYLIST"]["options"]})
    } else if symbols.get("GREYLIST_PASS").is_some() {
        serde_json::json!({"GREYLIST_PASS": symbols["GREYLIST_PASS"]["options"]})
    } else {
        serde_json::Value::Null
    };
    (v["action"].as_str().unwrap().to_string(), grey)
}

#[test]
fn two_daemons_on_one_redis_share_the_triples() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(dir.path());
    let config = format!(
        "[store]\nbackend = \"redis\"\n[store.redis]\nurls = {}\ncluster = true\n\
         prefix = \"in\"\ntimeout_ms = 200\n{GREYLIST}",
        cluster.urls()
    );
    let start = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        Daemon::start(
            &d,
            Options {
                config: Some(config.clone()),
                rules: Some(rules(&d)),
                workers: Some(2),
                ..Options::default()
            },
        )
    };
    let (a, b) = (start("a"), start("b"));
    for d in [&a, &b] {
        wait_until("the store connected", 15, || {
            d.get("/health").json()["store"] == "ok"
        });
    }
    let new = serde_json::json!({"GREYLIST": ["new"]});
    let passed = serde_json::json!({"GREYLIST_PASS": ["passed"]});

    // Deferred through A; B knows the triple: too early.
    assert_eq!(
        check(&a, "192.0.2.5", "r@example.com", &[]),
        ("greylist".into(), new.clone())
    );
    assert_eq!(
        check(&b, "192.0.2.5", "r@example.com", &[]),
        (
            "greylist".into(),
            serde_json::json!({"GREYLIST": ["retried within 2 s"]})
        )
    );
    // After the delay B lets the retry through, from another host of the /24; A then too.
    std::thread::sleep(PAST_DELAY);
    assert_eq!(
        check(&b, "192.0.2.77", "r@example.com", &[]),
        ("no action".into(), passed.clone())
    );
    assert_eq!(
        check(&a, "192.0.2.5", "R@Example.com", &[]),
        ("no action".into(), passed)
    );
    // A new recipient is a new triple on both.
    assert_eq!(
        check(&b, "192.0.2.5", "other@example.com", &[]),
        ("greylist".into(), new)
    );
    // An authenticated sender is not greylisted: no action, no symbol.
    assert_eq!(
        check(&a, "198.51.100.1", "r@example.com", &[("User", "alice")]),
        ("no action".into(), serde_json::Value::Null)
    );
    drop(cluster);
}
