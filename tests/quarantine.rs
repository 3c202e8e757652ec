//! The quarantine through the binary: a real Postfix in front of the milter (a rejected
//! message kept with its envelope, released through Postfix to the sink byte-identical in
//! body, a second release refused, a relay that refuses, learn-as-ham changing the verdict of
//! the same message), `kill -9` during a flood of writes (no torn entry served, `max_bytes`
//! held), a 50 MB message, 1,000 recipients, encryption at rest, the admin-only API, the
//! per-recipient links, and `shrike quarantine` with the daemon stopped.
//!
//! The Postfix test needs root (Postfix's master) and the packages scripts/test.sh installs.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

#[allow(dead_code)]
#[path = "common/postfix.rs"]
mod postfix;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use daemon::{free_port, http, wait_until, Daemon, Options};
use postfix::{eod, harness_dir, Postfix};

/// Rules of these tests alone: a subject with QTEST scores 20 (reject), a message whose exact
/// body a user rescued (learned as ham) loses 30.
fn rules(dir: &Path) -> PathBuf {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("q.lua"),
        "rule { name = \"QT_SPAM\", score = 20, description = \"test\",\n\
         check = function(msg) return msg:subject():find(\"QTEST\", 1, true) ~= nil end }\n\
         rule { name = \"QT_RESCUED\", score = -30, description = \"test\",\n\
         check = function(msg) local _, _, _, _, rescues = msg:stat(\"body_exact\", \"14d\")\n\
         return rescues > 0 end }\n",
    )
    .unwrap();
    rules
}

fn options(dir: &Path, extra: &str) -> Options {
    Options {
        config: Some(format!("[quarantine]\nenabled = true\n{extra}")),
        rules: Some(rules(dir)),
        ..Options::default()
    }
}

fn message(tag: &str, subject: &str, body: &str) -> String {
    format!(
        "From: Sender <sender@example.net>\r\nTo: bob@example.com\r\nSubject: {subject}\r\n\
         Message-ID: <{tag}@shrike.test>\r\nDate: Sun, 29 Nov 2026 10:00:00 +0000\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}"
    )
}

fn check(d: &Daemon, raw: &[u8], rcpts: &[&str]) -> serde_json::Value {
    let mut h = vec![("From", "sender@example.net"), ("IP", "192.0.2.7")];
    for r in rcpts {
        h.push(("Rcpt", r));
    }
    let r = d.post("/checkv2", &h, raw);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The quarantine's entries (admin API), newest first, waiting until `n` are there.
fn entries(d: &Daemon, query: &str, n: usize) -> Vec<serde_json::Value> {
    let mut got = Vec::new();
    wait_until("quarantined entries", 15, || {
        let r = d.get(&format!("/quarantine?{query}"));
        assert_eq!(r.status, 200, "{}", r.text());
        got = r.json()["entries"].as_array().unwrap().clone();
        got.len() >= n
    });
    got
}

const JSON: (&str, &str) = ("Content-Type", "application/json");

#[test]
fn postfix_rejects_keeps_releases_and_learns() {
    let tmp = tempfile::tempdir().unwrap();
    let harness = harness_dir(tmp.path());
    let relay = free_port();
    let mut shrike = Daemon::start(
        tmp.path(),
        options(
            tmp.path(),
            &format!("release_relay = \"127.0.0.1:{relay}\"\n"),
        ),
    );
    let postfix = Postfix::up(&harness, shrike.milter);
    // The release relay: a second smtpd of the same Postfix that does not call the milter, as
    // an operator sets up for re-injection.
    let master = harness.join("postfix/etc/master.cf");
    let mut cf = std::fs::read_to_string(&master).unwrap();
    cf.push_str(&format!(
        "127.0.0.1:{relay} inet n - n - - smtpd -o smtpd_milters=\n"
    ));
    std::fs::write(&master, cf).unwrap();
    let out = Command::new("postfix")
        .arg("-c")
        .arg(harness.join("postfix/etc"))
        .arg("reload")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    wait_until("the relay port", 20, || {
        std::net::TcpStream::connect(("127.0.0.1", relay)).is_ok()
    });

    let body = "Hello Bob,\r\n\r\nthe figures you asked for: 12.5, 13.75.\r\n.leading dot line\r\n-- \r\nSender\r\n";
    let raw = message("qtest-1", "QTEST quarterly figures", body);
    let file = tmp.path().join("q.eml");
    std::fs::write(&file, &raw).unwrap();
    let line = postfix.send_to(&file, &["bob@example.com", "carol@example.com"]);
    assert_eq!(eod(&line), "550", "{line}\n{}", postfix.maillog());

    // Kept, with its envelope and the verdict.
    let got = entries(&shrike, "rcpt=carol@example.com", 1);
    assert_eq!(got.len(), 1, "{got:?}");
    let e = &got[0];
    assert_eq!(e["action"], "reject", "{e}");
    assert_eq!(e["listener"], "milter", "{e}");
    assert_eq!(e["message_id"], "qtest-1@shrike.test", "{e}");
    assert_eq!(
        e["rcpt"],
        serde_json::json!(["bob@example.com", "carol@example.com"]),
        "{e}"
    );
    assert!(e["sender"].as_str().is_some_and(|s| !s.is_empty()), "{e}");
    assert!(e["queue_id"].as_str().is_some_and(|s| !s.is_empty()), "{e}");
    assert!(
        e["symbols"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "QT_SPAM"),
        "{e}"
    );
    let id = e["id"].as_str().unwrap().to_string();
    // The original bytes, as Postfix gave them to the milter.
    let stored = shrike.get(&format!("/quarantine/{id}/raw"));
    assert_eq!(stored.status, 200);
    let stored_body = split_body(&stored.body);
    assert_eq!(stored_body, body.as_bytes(), "kept body differs");
    // The view: header fields and text.
    let view = shrike.get(&format!("/quarantine/{id}")).json();
    assert_eq!(view["subject"], "QTEST quarterly figures", "{view}");
    assert!(
        view["text"].as_str().unwrap().contains("12.5, 13.75"),
        "{view}"
    );

    // A filter on another recipient, sender or symbol finds it or not.
    assert_eq!(entries(&shrike, "symbol=QT_SPAM", 1).len(), 1);
    assert!(
        shrike.get("/quarantine?rcpt=dave@example.com").json()["entries"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Release: through Postfix's relay port to the sink, body byte-identical.
    let r = shrike.post(&format!("/quarantine/{id}/release"), &[JSON], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let delivered = postfix
        .delivered("qtest-1@shrike.test")
        .unwrap_or_else(|| panic!("released message not in the sink\n{}", postfix.maillog()));
    // (smtp-sink writes the message with LF line ends and blank lines after it)
    let delivered_body = split_body(delivered.as_bytes());
    assert_eq!(
        String::from_utf8_lossy(delivered_body).trim_end_matches('\n'),
        body.replace("\r\n", "\n").trim_end_matches('\n'),
        "delivered body differs:\n{delivered}"
    );
    assert!(delivered.contains("bob@example.com") && delivered.contains("carol@example.com"));
    // Recorded in the history and in the entry.
    wait_until("the release in the history", 15, || {
        shrike.get("/history?action=release").json()["records"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    });
    let after = shrike.get(&format!("/quarantine/{id}")).json();
    assert_eq!(after["entry"]["released"].as_array().unwrap().len(), 1);
    // A second release is refused unless forced.
    let again = shrike.post(&format!("/quarantine/{id}/release"), &[JSON], b"");
    assert_eq!(again.status, 409, "{}", again.text());
    let forced = shrike.post(&format!("/quarantine/{id}/release?force=1"), &[JSON], b"");
    assert_eq!(forced.status, 200, "{}", forced.text());

    // Learn as ham from the quarantine: the same message is no longer rejected.
    let learned = shrike.post(&format!("/quarantine/{id}/learn?class=ham"), &[JSON], b"");
    assert_eq!(learned.status, 200, "{}", learned.text());
    assert_eq!(learned.json()["class"], "ham");
    let line = postfix.send_to(&file, &["bob@example.com"]);
    assert_eq!(eod(&line), "250", "{line}\n{}", postfix.maillog());
    // Two releases and this delivery through the milter: the same body in each, to the byte.
    let mut bodies = Vec::new();
    wait_until("three deliveries", 20, || {
        bodies = std::fs::read_dir(harness.join("sink"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read(e.path()).unwrap())
            .filter(|t| t.windows(19).any(|w| w == b"qtest-1@shrike.test"))
            .map(|t| split_body(&t).to_vec())
            .collect::<Vec<_>>();
        bodies.len() == 3
    });
    assert!(
        bodies.iter().all(|b| *b == bodies[0]),
        "bodies differ: {:?}",
        bodies
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect::<Vec<_>>()
    );

    // A relay that refuses: the milter port of Postfix itself, where shrike rejects it.
    shrike.stop();
    let mut shrike = Daemon::start(
        tmp.path(),
        Options {
            ports: Some((shrike.http, shrike.milter)),
            ..options(
                tmp.path(),
                &format!("release_relay = \"127.0.0.1:{}\"\n", postfix.smtp),
            )
        },
    );
    let raw2 = message("qtest-2", "QTEST again", "another body\r\n");
    let file2 = tmp.path().join("q2.eml");
    std::fs::write(&file2, &raw2).unwrap();
    let line = postfix.send_to(&file2, &["bob@example.com"]);
    assert_eq!(eod(&line), "550", "{line}");
    let got = entries(&shrike, "rcpt=bob@example.com", 2);
    let id2 = got[0]["id"].as_str().unwrap();
    assert_eq!(got[0]["message_id"], "qtest-2@shrike.test");
    let refused = shrike.post(&format!("/quarantine/{id2}/release"), &[JSON], b"");
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(refused.text().contains("550"), "{}", refused.text());
    let view = shrike.get(&format!("/quarantine/{id2}")).json();
    assert!(
        view["entry"]["released"].as_array().unwrap().is_empty(),
        "a refused release is not recorded as one"
    );
    shrike.stop();
}

fn split_body(raw: &[u8]) -> &[u8] {
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .or_else(|| raw.windows(2).position(|w| w == b"\n\n").map(|p| p + 2))
        .unwrap_or(raw.len());
    &raw[at..]
}

/// Text that zstd cannot shrink much: hex of a simple generator.
fn noise(seed: u64, bytes: usize) -> String {
    let mut x = seed | 1;
    let mut s = String::with_capacity(bytes + 80);
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push_str(&format!("{x:016x}"));
        if s.len() % 78 < 16 {
            s.push_str("\r\n");
        }
    }
    s.push_str("\r\n");
    s
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn kill_9_during_a_flood_serves_no_torn_entry_and_bounds_hold() {
    let tmp = tempfile::tempdir().unwrap();
    let max = 1u64 << 20;
    let opts = options(tmp.path(), &format!("max_bytes = {max}\n"));
    let mut d = Daemon::start(tmp.path(), opts.clone());
    let port = d.http;
    // Four clients send rejected messages of 20 KB of noise each; the daemon is killed while
    // they do.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let senders: Vec<_> = (0..4u64)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut sent = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let n = t * 1_000_000 + sent;
                    let raw = message(
                        &format!("flood-{n}"),
                        &format!("QTEST {n}"),
                        &noise(n, 20_000),
                    );
                    match http(
                        port,
                        "POST",
                        "/checkv2",
                        &[
                            ("Rcpt", "bob@example.com"),
                            ("Content-Type", "message/rfc822"),
                        ],
                        raw.as_bytes(),
                    ) {
                        Ok(r) if r.status == 200 => sent += 1,
                        _ => break,
                    }
                }
                sent
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    d.kill9();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent: u64 = senders.into_iter().map(|s| s.join().unwrap()).sum();
    assert!(
        sent > 60,
        "only {sent} messages sent: the flood must pass max_bytes"
    );

    let qdir = d.data.join("quarantine");
    // Every entry a reader sees (the CLI, the daemon not running) opens whole and is the
    // message it names.
    let list = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["quarantine", "list", "--json", "--limit", "1000", "--data"])
        .arg(&d.data)
        .output()
        .unwrap();
    assert!(list.status.success(), "{list:?}");
    let listed: Vec<serde_json::Value> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(listed.len() > 10, "{} entries", listed.len());
    for e in listed.iter().take(40) {
        let id = e["id"].as_str().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(["quarantine", "show", "--raw", id, "--data"])
            .arg(&d.data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mid = e["message_id"].as_str().unwrap();
        let n: u64 = mid
            .trim_start_matches("flood-")
            .split('@')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            out.stdout,
            message(
                &format!("flood-{n}"),
                &format!("QTEST {n}"),
                &noise(n, 20_000)
            )
            .as_bytes(),
            "{id} is not the message it names"
        );
    }
    // Oldest first went: the bound holds (the events file aside, which is empty here).
    assert!(
        dir_bytes(&qdir) <= max + (max / 4),
        "{} bytes",
        dir_bytes(&qdir)
    );

    // A restart cuts a torn tail, keeps serving, and the bound holds after more writes.
    let mut d = Daemon::start(
        tmp.path(),
        Options {
            ports: Some((d.http, d.milter)),
            ..opts
        },
    );
    for n in 0..80u64 {
        let raw = message(
            &format!("after-{n}"),
            "QTEST after",
            &noise(9_000_000 + n, 20_000),
        );
        check(&d, raw.as_bytes(), &["bob@example.com"]);
    }
    wait_until("the last message kept, newest first", 15, || {
        entries(&d, "limit=1000", 1)[0]["message_id"] == "after-79@shrike.test"
    });
    let health = d.get("/health").json();
    assert!(
        health["quarantine"]["bytes"].as_u64().unwrap() <= max,
        "{health}"
    );
    d.stop();
    assert!(dir_bytes(&qdir) <= max, "{} bytes", dir_bytes(&qdir));
}

#[test]
fn big_message_many_recipients_encryption_and_access() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("q.key");
    std::fs::write(&key, "11".repeat(32)).unwrap();
    let opts = Options {
        config: Some(format!(
            "[quarantine]\nenabled = true\nkey_file = \"{}\"\n\n\
             [http]\nmax_body_bytes = 60000000\nmax_headers = 1100\nmax_header_bytes = 65536\n\n[limits]\nmax_message_bytes = 60000000\n\n\
             [access]\nadmin_networks = []\nread_networks = [\"127.0.0.1/32\"]\n\
             password_hash = \"{}\"\n",
            key.display(),
            argon2_hash("sekrit")
        )),
        rules: Some(rules(tmp.path())),
        ..Options::default()
    };
    let mut d = Daemon::start(tmp.path(), opts);
    let admin = [("Password", "sekrit"), JSON];

    // A 50 MB message: kept and given back whole.
    let line = "The quick brown fox jumps over the lazy dog SECRETMARK 0123456789\r\n";
    let big = message("big", "QTEST big", &line.repeat(50_000_000 / line.len()));
    assert!(big.len() > 50_000_000);
    let r = d.post("/checkv2", &[("Rcpt", "bob@example.com")], big.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());

    // 1,000 recipients.
    let rcpts: Vec<String> = (0..1000).map(|i| format!("user{i}@example.org")).collect();
    let refs: Vec<&str> = rcpts.iter().map(String::as_str).collect();
    let many = message("many", "QTEST many", "to a thousand\r\n");
    check(&d, many.as_bytes(), &refs);

    // The read role may not see other people's mail: admin only.
    let r = d.get("/quarantine");
    assert_eq!(r.status, 401, "{}", r.text());
    let list = |q: &str| {
        let r = http(d.http, "GET", &format!("/quarantine?{q}"), &admin, b"").unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["entries"].as_array().unwrap().clone()
    };
    wait_until("both kept", 60, || list("").len() == 2);
    let e = &list("rcpt=user999@example.org")[0];
    assert_eq!(e["rcpt"].as_array().unwrap().len(), 1000);
    assert_eq!(e["encrypted"], true);
    let big_e = list("rcpt=bob@example.com")[0].clone();
    let id = big_e["id"].as_str().unwrap();
    let raw = http(d.http, "GET", &format!("/quarantine/{id}/raw"), &admin, b"").unwrap();
    assert_eq!(raw.status, 200);
    assert!(
        raw.body == big.as_bytes(),
        "the 50 MB message came back changed"
    );
    assert_eq!(
        raw.header("content-disposition"),
        Some(format!("attachment; filename=\"{id}.eml\"").as_str())
    );
    // Encrypted at rest: the text is nowhere in the files.
    d.stop();
    for f in std::fs::read_dir(d.data.join("quarantine"))
        .unwrap()
        .flatten()
    {
        let bytes = std::fs::read(f.path()).unwrap();
        assert!(
            !bytes
                .windows(10)
                .any(|w| w == b"SECRETMARK" || w == b"to a thous"),
            "{} holds plain text",
            f.path().display()
        );
    }
    // Without the key the CLI cannot open it; with it, it can.
    let show = |config: Option<&Path>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_shrike"));
        if let Some(cfg) = config {
            c.arg("--config").arg(cfg);
        }
        c.args(["quarantine", "show", "--raw", id, "--data"])
            .arg(&d.data)
            .output()
            .unwrap()
    };
    let no_key = show(None);
    assert!(!no_key.status.success());
    assert!(
        String::from_utf8_lossy(&no_key.stderr).contains("encrypted"),
        "{no_key:?}"
    );
    let cfg = tmp.path().join("cli.toml");
    std::fs::write(
        &cfg,
        format!(
            "[quarantine]\nenabled = true\nkey_file = \"{}\"\n",
            key.display()
        ),
    )
    .unwrap();
    assert_eq!(show(Some(&cfg)).stdout, big.as_bytes());
}

fn argon2_hash(password: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("passwd")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .unwrap()
                .write_all(format!("{password}\n").as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn per_recipient_links_and_the_cli_with_the_daemon_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(tmp.path(), options(tmp.path(), ""));
    for (tag, rcpt) in [
        ("a1", "alice@example.com"),
        ("b1", "bob@example.com"),
        ("a2", "alice@example.com"),
    ] {
        let raw = message(tag, &format!("QTEST for {rcpt} {tag}"), "hello\r\n");
        check(&d, raw.as_bytes(), &[rcpt]);
    }
    // Not kept: a message that passes.
    check(
        &d,
        message("ok", "fine", "hi\r\n").as_bytes(),
        &["alice@example.com"],
    );
    assert_eq!(entries(&d, "", 3).len(), 3);
    d.stop();

    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args(["quarantine"])
            .args(args)
            .arg("--data")
            .arg(&d.data)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, list, err) = cli(&["list", "--rcpt", "alice@example.com", "--json"]);
    assert!(ok, "{err}");
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(!list.contains("ok@shrike.test"));
    let (ok, digest, err) = cli(&["digest", "--since", "1h", "--json"]);
    assert!(ok, "{err}");
    let digests: Vec<serde_json::Value> = digest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(digests.len(), 2, "{digest}");
    let alice = digests
        .iter()
        .find(|v| v["rcpt"] == "alice@example.com")
        .unwrap();
    assert_eq!(alice["messages"].as_array().unwrap().len(), 2);
    let link = alice["link"].as_str().unwrap();
    let path = &link[link.find("/quarantine/r/").unwrap()..];

    let d = Daemon::start(
        tmp.path(),
        Options {
            ports: Some((d.http, d.milter)),
            ..options(tmp.path(), "")
        },
    );
    // No credentials but the link: alice's two, not bob's.
    let page = http(d.http, "GET", path, &[], b"").unwrap();
    assert_eq!(page.status, 200, "{}", page.text());
    let html = page.text();
    assert!(
        html.contains("QTEST for alice@example.com a1") && html.contains("a2"),
        "{html}"
    );
    assert!(!html.contains("bob@example.com"), "{html}");
    let csp = page.header("content-security-policy").unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    // One character of the signature changed: refused.
    let mut bad = path.to_string().into_bytes();
    let last = bad.len() - 1;
    bad[last] = if bad[last] == b'0' { b'1' } else { b'0' };
    let r = http(d.http, "GET", std::str::from_utf8(&bad).unwrap(), &[], b"").unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    // A link to bob cannot view alice's message.
    let bob = digests
        .iter()
        .find(|v| v["rcpt"] == "bob@example.com")
        .unwrap();
    let bob_path = {
        let l = bob["link"].as_str().unwrap();
        l[l.find("/quarantine/r/").unwrap()..].to_string()
    };
    let alice_id = alice["messages"][0]["id"].as_str().unwrap();
    let r = http(
        d.http,
        "GET",
        &format!("{bob_path}/view/{alice_id}"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 404, "{}", r.text());
    let r = http(d.http, "GET", &format!("{path}/view/{alice_id}"), &[], b"").unwrap();
    assert_eq!(r.status, 200, "{}", r.text());

    // A link made to last one second: refused once it has expired.
    let (ok, short, err) = cli(&["digest", "--since", "1h", "--json", "--valid", "1s"]);
    assert!(ok, "{err}");
    let short: serde_json::Value = serde_json::from_str(short.lines().next().unwrap()).unwrap();
    let short = short["link"].as_str().unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    let r = http(
        d.http,
        "GET",
        &short[short.find("/quarantine/r/").unwrap()..],
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 410, "{}", r.text());
    drop(d);

    // Delete with the daemon stopped: gone from the list, body zeroed.
    let (ok, _, err) = cli(&["delete", alice_id]);
    assert!(ok, "{err}");
    let (ok, list, _) = cli(&["list", "--json"]);
    assert!(ok);
    assert_eq!(list.lines().count(), 2, "{list}");
    let (ok, _, err) = cli(&["show", alice_id]);
    assert!(!ok && err.contains("no quarantined message"), "{err}");
}
