//! The milter behind a real Postfix 3.7 (the harness in ../shared/tools/mta, or
//! `$SHRIKE_MTA_TOOLS`): ham reaches the sink with X-Spam-* headers, GTUBE gets 550 at end of
//! data, an add-header message carries the verdict headers, and with shrike stopped Postfix
//! applies milter_default_action. Also Debian's `miltertest` against the milter directly.
//!
//! Needs root (Postfix's master) and the packages scripts/test.sh installs.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

#[allow(dead_code)]
#[path = "common/postfix.rs"]
mod postfix;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use daemon::{Daemon, Options};
use postfix::{eod, harness_dir, Postfix};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// A copy of a test message with a unique Message-ID, to find it in the sink.
fn unique_copy(dir: &Path, name: &str, tag: &str) -> (PathBuf, String) {
    let text = std::fs::read_to_string(data(name)).expect("test message");
    let id = format!("{tag}-{}@shrike.test", std::process::id());
    let mut out = String::new();
    let mut replaced = false;
    for line in text.lines() {
        if !replaced && line.to_ascii_lowercase().starts_with("message-id:") {
            out.push_str(&format!("Message-ID: <{id}>\n"));
            replaced = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(replaced, "{name} has a Message-ID");
    let path = dir.join(format!("{tag}.eml"));
    std::fs::write(&path, out).unwrap();
    (path, id)
}

#[test]
fn postfix_with_shrike_milter() {
    let tmp = tempfile::tempdir().unwrap();
    // Postfix's processes run as user postfix and must reach the harness directory.
    let harness = harness_dir(tmp.path());
    let mut shrike = Daemon::start(tmp.path(), Options::default());
    let postfix = Postfix::up(&harness, shrike.milter);

    // Ham: delivered, with our headers.
    let (ham, ham_id) = unique_copy(tmp.path(), "daemon/ham.eml", "ham");
    let line = postfix.send(&ham);
    assert_eq!(eod(&line), "250", "{line}\n{}", postfix.maillog());
    let got = postfix
        .delivered(&ham_id)
        .unwrap_or_else(|| panic!("ham not in the sink\n{}", postfix.maillog()));
    assert!(got.contains("\nX-Spam-Status: No, score="), "{got}");
    assert!(got.contains("\nX-Spam-Score: "), "{got}");
    assert!(got.contains("\nX-Spam-Symbols: "), "{got}");

    // GTUBE: 550 at end of data, never delivered.
    let (gtube, gtube_id) = unique_copy(tmp.path(), "gtube.eml", "gtube");
    let line = postfix.send(&gtube);
    assert_eq!(eod(&line), "550", "{line}");
    assert!(line.contains("5.7.1"), "{line}");

    // An add-header message: delivered, marked as spam, forged X-Spam-* gone.
    let (tagged, tagged_id) = unique_copy(tmp.path(), "daemon/add_header.eml", "tagged");
    let line = postfix.send(&tagged);
    assert_eq!(eod(&line), "250", "{line}");
    let got = postfix
        .delivered(&tagged_id)
        .unwrap_or_else(|| panic!("add-header message not in the sink\n{}", postfix.maillog()));
    assert!(
        got.contains("\nX-Spam-Status: Yes, score=") && got.contains("action=add header"),
        "{got}"
    );
    assert!(
        !got.contains("X-Spam-Flag: NO (forged)"),
        "forged header kept:\n{got}"
    );
    assert_eq!(got.matches("\nX-Spam-Status:").count(), 1, "{got}");
    // The GTUBE message was sent before this one was delivered; it is not in the sink.
    assert!(!postfix.sink_holds(&gtube_id), "rejected message delivered");
    assert!(postfix.maillog().contains("milter-reject: END-OF-MESSAGE"));

    // The decision history holds each verdict with Postfix's queue id and envelope: the
    // rejected message is found by the queue id from Postfix's log line, the ham by its
    // Message-ID, over HTTP and with `shrike history`.
    let maillog = postfix.maillog();
    let reject_line = maillog
        .lines()
        .find(|l| l.contains("milter-reject: END-OF-MESSAGE"))
        .expect("reject line");
    let queue_id = reject_line
        .split(": ")
        .nth(1)
        .expect("queue id in the reject line")
        .trim();
    let history = |query: &str| -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = shrike.get(&format!("/history?{query}"));
            assert_eq!(r.status, 200, "{}", r.text());
            let records = r.json()["records"].as_array().unwrap().clone();
            if !records.is_empty() || Instant::now() > deadline {
                return records;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let rejected = history(&format!("queue_id={queue_id}"));
    assert_eq!(rejected.len(), 1, "{queue_id}: {rejected:?}\n{reject_line}");
    let r = &rejected[0];
    assert_eq!(r["listener"], "milter", "{r}");
    assert_eq!(r["action"], "reject", "{r}");
    assert_eq!(r["message_id"], gtube_id, "{r}");
    assert_eq!(r["rcpt"], serde_json::json!(["bob@example.com"]), "{r}");
    assert_eq!(r["ip"], "127.0.0.1", "{r}");
    assert!(
        r["symbols"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "GTUBE"),
        "{r}"
    );
    let ham_records = history(&format!("message_id={ham_id}&action=no_action"));
    assert_eq!(ham_records.len(), 1, "{ham_records:?}");
    assert!(ham_records[0]["queue_id"]
        .as_str()
        .is_some_and(|q| !q.is_empty()));
    let cli = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["history", "--json", "--queue-id", queue_id, "--data"])
        .arg(&shrike.data)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&cli.stdout);
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("\"listener\":\"milter\""), "{out}");

    // Shrike stopped: Postfix applies milter_default_action = tempfail (at MAIL FROM).
    shrike.stop();
    let (late, _) = unique_copy(tmp.path(), "daemon/ham.eml", "late");
    let line = postfix.send(&late);
    assert!(line.contains("MAIL=451"), "{line}");
}

#[test]
fn miltertest_script_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let shrike = Daemon::start(tmp.path(), Options::default());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/milter/shrike-basic.lua");
    let out = Command::new("miltertest")
        .arg("-D")
        .arg(format!("MILTER=inet:{}@127.0.0.1", shrike.milter))
        .arg("-s")
        .arg(&script)
        .output()
        .expect("miltertest is installed (scripts/test.sh installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "miltertest failed:\n{text}");
    assert!(
        text.contains("ALL SHRIKE MILTERTEST CHECKS PASSED"),
        "{text}"
    );
}
