//! The daemon over HTTP, as a real process: rspamd's protocol (also through the real `rspamc`),
//! shrike's endpoints, limits, busy answers, reloads by SIGHUP and `POST /reload`, and state
//! that survives SIGTERM and `kill -9`. (The spamd protocol is tests/spamd.rs's.)

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use daemon::{wait_until, Daemon, Options};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).expect("test message")
}

const HAM: &str = "daemon/ham.eml";

fn subject_complaints(d: &Daemon, subject: &str) -> u64 {
    let q = format!("/reputation?type=subject&value={}", url_encode(subject));
    let r = d.get(&q);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["keys"][0]["windows"]["24h"]["complaint"]
        .as_u64()
        .expect("complaint count")
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn checkv2_and_shrike_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());

    let r = d.get("/ping");
    assert_eq!((r.status, r.text().trim()), (200, "pong"));

    let r = d.post(
        "/checkv2",
        &[("IP", "192.0.2.1"), ("Rcpt", "a@example.com")],
        &read("gtube.eml"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["action"], "reject");
    assert_eq!(v["is_skipped"], false);
    assert!(v["score"].is_number(), "{v}");
    assert_eq!(v["required_score"], 15.0);
    assert_eq!(v["symbols"]["GTUBE"]["name"], "GTUBE");
    assert_eq!(v["message-id"], "GTUBE1.1010101@example.net");
    assert_eq!(
        v["milter"]["add_headers"]["X-Spam-Status"]["value"]
            .as_str()
            .unwrap()
            .split(',')
            .next(),
        Some("Yes")
    );
    assert!(v["time_real"].as_f64().unwrap() > 0.0);
    assert_eq!(v["generation"], 1);

    let r = d.post("/checkv2", &[], &read(HAM));
    assert_eq!(r.status, 200);
    let ham = r.json();
    assert_eq!(ham["action"], "no action", "{ham}");
    assert!(ham["symbols"].get("GTUBE").is_none());

    // rspamd's /stat and shrike's /metrics count both.
    let stat = d.get("/stat").json();
    assert_eq!(stat["scanned"], 2, "{stat}");
    assert_eq!(stat["actions"]["reject"], 1);
    assert_eq!(stat["actions"]["no action"], 1);
    let m = d.get("/metrics");
    assert_eq!(m.status, 200);
    let m = m.text();
    assert!(
        m.contains("shrike_scans_total{action=\"reject\"} 1\n"),
        "{m}"
    );
    assert!(
        m.contains("shrike_stage_seconds_count{stage=\"rules\"} 2\n"),
        "{m}"
    );
    assert!(m.contains("shrike_rule_runs_total{rule=\"GTUBE\"}"), "{m}");
    assert!(m.contains("shrike_store_keys "), "{m}");
    assert!(
        m.contains("shrike_last_reload_error{error=\"\"} 0\n"),
        "{m}"
    );

    let h = d.get("/health");
    assert_eq!(h.status, 200);
    let h = h.json();
    assert_eq!(h["ready"], true);
    assert_eq!(h["generation"], 1);
    assert!(h["last_reload_error"].is_null());

    // Learning the same message again succeeds but counts once: a duplicate adds no
    // complaint.
    for _ in 0..3 {
        let r = d.post("/learnspam", &[], &read("gtube.eml"));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["success"], true);
    }
    assert_eq!(subject_complaints(&d, "Test spam mail (GTUBE)"), 1);
    let r = d.post("/learnham", &[], &read("gtube.eml"));
    assert_eq!(r.json()["class"], "ham");
    let rep = d
        .get("/reputation?type=8&value=Test%20spam%20mail%20(GTUBE)")
        .json();
    assert_eq!(rep["type"], "subject");
    assert_eq!(rep["keys"][0]["windows"]["24h"]["rescue"], 1, "{rep}");
    assert_eq!(rep["keys"][0]["windows"]["24h"]["seen"], 1, "{rep}");
    assert!(!rep["keys"][0]["buckets"].as_array().unwrap().is_empty());

    assert_eq!(d.get("/reputation?type=nonsense&value=x").status, 400);
    assert_eq!(d.get("/reputation?type=subject").status, 400);
    assert_eq!(d.get("/nowhere").status, 404);
    assert_eq!(d.get("/checkv2").status, 405);
    // One learn of each class; the two repeats are counted apart.
    let stat = d.get("/stat").json();
    assert_eq!(stat["learned"], 2, "{stat}");
    assert_eq!(stat["duplicate_learns"]["spam"], 2, "{stat}");
}

/// Runs the real `rspamc` against the daemon with `args` on a fixture; its output, once it has
/// succeeded.
fn rspamc(d: &Daemon, args: &[&str], fixture: &str) -> String {
    run_rspamc(d, args, Some(data(fixture)))
}

/// The real `rspamc` with `args`, and `file` or nothing on its standard input.
fn run_rspamc(d: &Daemon, args: &[&str], file: Option<PathBuf>) -> String {
    let mut cmd = Command::new("rspamc");
    cmd.args(["-h", &format!("127.0.0.1:{}", d.http)])
        .args(args);
    match file {
        Some(f) => cmd.arg(f),
        None => cmd.stdin(std::process::Stdio::null()),
    };
    let out = cmd
        .output()
        .expect("rspamc is installed (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rspamc {args:?} failed: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn real_rspamc_scans_and_learns() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    let text = rspamc(
        &d,
        &[
            "-i",
            "192.0.2.9",
            "-F",
            "s@example.net",
            "-r",
            "a@example.com",
        ],
        "gtube.eml",
    );
    assert!(text.contains("Action: reject"), "{text}");
    assert!(text.contains("Spam: true"), "{text}");
    assert!(text.contains("Symbol: GTUBE"), "{text}");
    assert!(text.contains("Score: "), "{text}");

    let text = rspamc(&d, &["--json"], HAM);
    assert!(
        text.contains("\"action\": \"no action\"") || text.contains("\"action\":\"no action\""),
        "{text}"
    );

    let text = rspamc(&d, &["learn_spam"], "gtube.eml");
    assert!(text.contains("success = true"), "{text}");
    assert_eq!(subject_complaints(&d, "Test spam mail (GTUBE)"), 1);
    let stat = d.get("/stat").json();
    assert_eq!(stat["scanned"], 2);
    assert_eq!(stat["learned_spam"], 1);
}

/// `rspamc -z` sends the message zstd-compressed (`Compression: zstd`): it is read like the raw
/// one. A body that expands past `max_body_bytes` is refused with 413 however small it travels,
/// a damaged one with 400, and other codings with 415.
#[test]
fn zstd_bodies_from_rspamc_z_and_bombs() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[http]\nmax_body_bytes = 1000000\n".into()),
            ..Options::default()
        },
    );
    let text = rspamc(&d, &["-z"], "gtube.eml");
    assert!(text.contains("Action: reject"), "{text}");
    assert!(text.contains("Symbol: GTUBE"), "{text}");

    let ham = std::fs::read(data(HAM)).unwrap();
    let packed = zstd::encode_all(&ham[..], 3).unwrap();
    let r = d.post("/checkv2", &[("Compression", "zstd")], &packed);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["action"], "no action");

    // 50 MiB of one byte, a few kB compressed.
    let bomb = zstd::encode_all(std::io::Read::take(std::io::repeat(b'a'), 50 << 20), 19).unwrap();
    assert!(bomb.len() < 64 << 10, "{}", bomb.len());
    let r = d.post("/checkv2", &[("Compression", "zstd")], &bomb);
    assert_eq!(r.status, 413, "{}", r.text());
    let r = d.post(
        "/checkv2",
        &[("Compression", "zstd")],
        &packed[..packed.len() / 2],
    );
    assert_eq!(r.status, 400, "{}", r.text());
    let r = d.post("/checkv2", &[("Content-Encoding", "gzip")], &packed);
    assert_eq!(r.status, 415, "{}", r.text());
    // The daemon still answers, and scanned only the two whole messages.
    let stat = d.get("/stat").json();
    assert_eq!(stat["scanned"], 2);
}

#[test]
fn limits_busy_queue_and_timeouts() {
    // One worker, a queue of one, and a rule that spins for a while: the third concurrent
    // request finds the queue full and gets 503 with Retry-After, at once.
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        daemon::slow_setup(dir.path(), "[http]\nmax_body_bytes = 4000\n"),
    );
    let big = vec![b'a'; 5000];
    let r = d.post("/checkv2", &[], &big);
    assert_eq!(r.status, 413, "{}", r.text());

    let port = d.http;
    let msg = read(HAM);
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let msg = msg.clone();
            std::thread::spawn(move || daemon::http(port, "POST", "/checkv2", &[], &msg).unwrap())
        })
        .collect();
    let replies: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = replies.iter().filter(|r| r.status == 200).count();
    let busy: Vec<_> = replies.iter().filter(|r| r.status == 503).collect();
    assert!(ok >= 1, "{replies:?}");
    assert!(!busy.is_empty(), "no 503 with a queue of one: {replies:?}");
    assert_eq!(ok + busy.len(), 6);
    assert_eq!(busy[0].header("retry-after"), Some("1"));
    let m = d.get("/metrics").text();
    let line = m
        .lines()
        .find(|l| l.starts_with("shrike_busy_total "))
        .unwrap();
    assert_eq!(line, format!("shrike_busy_total {}", busy.len()));
}

#[test]
fn a_connection_over_the_limit_gets_an_immediate_503_with_retry_after() {
    // Two connections allowed: two idle clients hold them (hyper would wait 30 s for their
    // request heads), and a third connection is answered 503 at once, not closed unanswered.
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[http]\nmax_connections = 2\n".into()),
            ..Options::default()
        },
    );
    // (the readiness probe's connection has closed, and its permit is back, by now)
    std::thread::sleep(Duration::from_millis(200));
    let held: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", d.http)).unwrap())
        .collect();
    // Connections are accepted in the order they were made: by the time the daemon takes the
    // third, the first two hold the permits.
    let start = Instant::now();
    let r = daemon::http(d.http, "POST", "/checkv2", &[], &read(HAM)).unwrap();
    let took = start.elapsed();
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.text().contains("too many connections"), "{}", r.text());
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert!(d.log_text().contains("connection limit reached"));

    // Once a held connection closes, requests are served again.
    drop(held);
    wait_until("a 200 after the held connections closed", 30, || {
        daemon::http(d.http, "POST", "/checkv2", &[], &read(HAM)).is_ok_and(|r| r.status == 200)
    });
}

/// A rule file declaring `name`, hitting every message.
fn rule(name: &str) -> String {
    format!(
        "rule {{ name = \"{name}\", score = 1.5, description = \"test\",\n\
         check = function(msg) return true end }}\n"
    )
}

#[test]
fn reload_by_sighup_and_post_keeps_old_rules_on_error() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("a.lua"), rule("FIRST_RULE")).unwrap();
    // A long debounce keeps the file watcher out of the way: the reloads here are explicit.
    let config = "[engine]\nreload_debounce_ms = 600000\n";
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config.into()),
            rules: Some(rules.clone()),
            ..Options::default()
        },
    );
    let symbols = |d: &Daemon| -> Vec<String> {
        let v = d.post("/checkv2", &[], &read(HAM)).json();
        v["symbols"].as_object().unwrap().keys().cloned().collect()
    };
    assert_eq!(symbols(&d), ["FIRST_RULE"]);

    std::fs::write(rules.join("b.lua"), rule("SECOND_RULE")).unwrap();
    d.signal("HUP");
    wait_until("SIGHUP reload", 30, || {
        d.get("/health").json()["generation"] == 2
    });
    assert_eq!(symbols(&d), ["FIRST_RULE", "SECOND_RULE"]);

    std::fs::write(
        rules.join("b.lua"),
        "rule { name = \"BROKEN\", check = 42 }\n",
    )
    .unwrap();
    let r = d.post("/reload", &[], b"");
    assert_eq!(r.status, 422, "{}", r.text());
    let v = r.json();
    assert_eq!(v["success"], false);
    assert!(v["error"].as_str().unwrap().contains("b.lua"), "{v}");
    let h = d.get("/health").json();
    assert_eq!(h["generation"], 2);
    assert!(
        h["last_reload_error"].as_str().unwrap().contains("b.lua"),
        "{h}"
    );
    assert!(d
        .get("/metrics")
        .text()
        .contains("shrike_reload_failures_total 1\n"));
    // The old rules still serve.
    assert_eq!(symbols(&d), ["FIRST_RULE", "SECOND_RULE"]);

    std::fs::remove_file(rules.join("b.lua")).unwrap();
    let r = d.post("/reload", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(symbols(&d), ["FIRST_RULE"]);
    // Each reload is logged once (by the engine), not again by the daemon or per worker.
    let log = d.log_text();
    assert_eq!(log.matches("rules reloaded").count(), 2, "{log}");
    assert_eq!(log.matches("rules reload failed").count(), 1, "{log}");
}

#[test]
fn workers_build_their_rule_states_before_serving_and_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            workers: Some(2),
            ..Options::default()
        },
    );
    let built = |d: &Daemon| -> u64 {
        let m = d.get("/metrics").text();
        m.lines()
            .find_map(|l| l.strip_prefix("shrike_rule_states_built_total "))
            .unwrap_or_else(|| panic!("no states metric in {m}"))
            .parse()
            .unwrap()
    };
    // Ready means both workers have their state: no message has been scanned yet.
    assert_eq!(built(&d), 2);
    assert!(d
        .get("/metrics")
        .text()
        .contains("shrike_scans_total{action=\"no action\"} 0\n"));
    // Idle workers build the new generation's state without waiting for a message.
    assert_eq!(d.post("/reload", &[], b"").status, 200);
    wait_until("states of generation 2", 30, || built(&d) == 4);
    // A scan then needs no build.
    assert_eq!(d.post("/checkv2", &[], &read(HAM)).status, 200);
    assert_eq!(built(&d), 4);
}

#[test]
fn learned_state_survives_sigterm_and_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let subject = "Test spam mail (GTUBE)";
    // Copies of one message under their own Message-IDs: each learn counts (a duplicate would
    // not).
    let copy = |n: u32| {
        String::from_utf8(read("gtube.eml"))
            .unwrap()
            .replace(
                "<GTUBE1.1010101@example.net>",
                &format!("<GTUBE{n}.1010101@example.net>"),
            )
            .into_bytes()
    };
    let mut d = Daemon::start(dir.path(), Options::default());
    for n in 0..3 {
        assert_eq!(d.post("/learnspam", &[], &copy(n)).status, 200);
    }
    assert_eq!(subject_complaints(&d, subject), 3);
    let ports = (d.http, d.milter);
    let log = d.stop();
    assert!(log.contains("state saved"), "{log}");
    let snapshots = std::fs::read_dir(&d.data)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("snapshot-"))
        .count();
    assert_eq!(snapshots, 1, "one snapshot after a graceful stop");

    let restart = || {
        Daemon::start(
            dir.path(),
            Options {
                ports: Some(ports),
                ..Options::default()
            },
        )
    };
    let mut d = restart();
    assert_eq!(
        subject_complaints(&d, subject),
        3,
        "after SIGTERM and restart"
    );
    for n in 3..5 {
        assert_eq!(d.post("/learnspam", &[], &copy(n)).status, 200);
    }
    // The WAL is written every 100 ms and fsynced every second.
    std::thread::sleep(Duration::from_millis(2500));
    d.kill9();
    let d = restart();
    assert_eq!(
        subject_complaints(&d, subject),
        5,
        "after kill -9 and restart"
    );
}

/// A daemon serving one rule file of `text`.
fn daemon_with_rule(dir: &Path, text: &str) -> Daemon {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("rule.lua"), text).unwrap();
    Daemon::start(
        dir,
        Options {
            rules: Some(rules),
            ..Options::default()
        },
    )
}

#[test]
fn request_headers_reach_the_rules_and_the_queue_id_every_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon_with_rule(
        dir.path(),
        "rule { name = 'ENV', score = 0, check = function(msg)\n\
           local e = msg:envelope()\n\
           log.warn('rule sees %s', tostring(e.user))\n\
           return true, e.ip, e.helo, e.hostname, e.user, e.mail_from, e.rcpt[1], e.queue_id,\n\
             e.deliver_to, tostring(msg:envelope() == e), msg:queue_id() end }\n",
    );
    let headers = [
        ("IP", "192.0.2.44"),
        ("Helo", "mail.sender.example"),
        ("Hostname", "rdns.sender.example"),
        ("User", "alice@sender.example"),
        ("From", "<alice@sender.example>"),
        ("Rcpt", "<bob@example.org>"),
        ("Queue-Id", "7QX2KD1"),
        ("Deliver-To", "<bob@example.org>"),
    ];
    let v = d.post("/checkv2", &headers, &read(HAM)).json();
    assert_eq!(
        v["symbols"]["ENV"]["options"],
        serde_json::json!([
            "192.0.2.44",
            "mail.sender.example",
            "rdns.sender.example",
            "alice@sender.example",
            "alice@sender.example",
            "bob@example.org",
            "7QX2KD1",
            "bob@example.org",
            "true",
            "7QX2KD1"
        ])
    );
    // The rule's log line sits in conn > scan (with the queue id) > rule spans.
    let log = d.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("rule sees alice@sender.example"))
        .unwrap_or_else(|| panic!("no rule log line in:\n{log}"));
    assert!(line.contains("conn{"), "{line}");
    assert!(line.contains("scan{queue_id=\"7QX2KD1\"}"), "{line}");
    assert!(line.contains("rule{name=ENV}"), "{line}");
    // Without the headers the fields are nil.
    let v = d.post("/checkv2", &[], &read(HAM)).json();
    assert_eq!(v["symbols"]["ENV"]["options"], serde_json::json!(["true"]));
}

#[test]
fn learning_does_not_count_as_mail_arriving() {
    // A rule's rate limit counts mail; a learn is feedback about mail already counted.
    let dir = tempfile::tempdir().unwrap();
    let d = daemon_with_rule(
        dir.path(),
        "rule { name = 'RATE', score = 0, check = function(msg)\n\
           local n = ratelimit('sender', 'one', 100, 3600)\n\
           return true, tostring(n) end }\n",
    );
    let count = |d: &Daemon| {
        let v = d.post("/checkv2", &[], &read(HAM)).json();
        v["symbols"]["RATE"]["options"][0]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(count(&d), "1");
    assert_eq!(d.post("/learnspam", &[], &read(HAM)).status, 200);
    assert_eq!(d.post("/learnham", &[], &read(HAM)).status, 200);
    assert_eq!(count(&d), "2", "two scans counted, the learns not");
}

#[test]
fn an_acknowledged_learn_survives_an_immediate_kill9() {
    // The learn's 200 goes out only after its reputation increments are in the WAL file and
    // its classifier training in the learn journal: a SIGKILL sent the moment the reply
    // arrives must lose neither, round after round.
    let dir = tempfile::tempdir().unwrap();
    let options = |ports| Options {
        workers: Some(1),
        ports,
        ..Options::default()
    };
    let complaints = |d: &Daemon| -> u64 {
        let r = d.get("/reputation?type=from&value=desk%40winners-club.example");
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["keys"][0]["windows"]["24h"]["complaint"]
            .as_u64()
            .unwrap_or(0)
    };
    let classifier_spam = |d: &Daemon| d.get("/stat").json()["classifier"]["learned_spam"].as_u64();
    let mut d = Daemon::start(dir.path(), options(None));
    let ports = Some((d.http, d.milter));
    let rounds = 100;
    for round in 0..rounds {
        assert_eq!(
            complaints(&d),
            round as u64,
            "complaints after round {round}"
        );
        assert_eq!(
            classifier_spam(&d),
            Some(round as u64),
            "classifier after round {round}"
        );
        let r = d.post("/learnspam", &[], &stream_message(true, round));
        assert_eq!(r.status, 200, "{}", r.text());
        d.kill9();
        d = Daemon::start(dir.path(), options(ports));
    }
    assert_eq!(complaints(&d), rounds as u64);
    assert_eq!(classifier_spam(&d), Some(rounds as u64));
    // A graceful stop saves the classifier and empties its journal; nothing is trained twice.
    d.stop();
    let journal = dir.path().join("data").join("classifier.journal");
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), 0);
    let d = Daemon::start(dir.path(), options(ports));
    assert_eq!(classifier_spam(&d), Some(rounds as u64));
}

/// A message of one of two made-up streams, each copy with its own Message-ID.
fn stream_message(spam: bool, i: usize) -> Vec<u8> {
    let (from, subject, body) = if spam {
        (
            "Prize Desk <desk@winners-club.example>",
            "claim your cash prize today",
            "Congratulations winner! Claim your cash prize now, send your bank details to \
             http://winners-club.example/claim before midnight.",
        )
    } else {
        (
            "Ann Lee <ann@builders.example.org>",
            "minutes of the build meeting",
            "Hi all, attached are the minutes of Tuesday's build meeting; the release branch \
             is cut on Friday, please review the changelog.",
        )
    };
    format!(
        "From: {from}\r\nTo: bob@example.org\r\nSubject: {subject} {i}\r\n\
         Message-ID: <{i}.{spam}@stream.example>\r\nDate: Mon, 2 Nov 2026 10:00:00 +0000\r\n\r\n\
         {body} Ref {i}.\r\n"
    )
    .into_bytes()
}

fn classifier_learned(d: &Daemon) -> (u64, u64) {
    let stat = d.get("/stat").json();
    let c = &stat["classifier"];
    (
        c["learned_spam"].as_u64().expect("learned_spam"),
        c["learned_ham"].as_u64().expect("learned_ham"),
    )
}

#[test]
fn classifier_learning_survives_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        config: Some("[persist]\nsnapshot_secs = 1\n".into()),
        ..Options::default()
    };
    let mut d = Daemon::start(dir.path(), options.clone());
    for i in 0..25 {
        assert_eq!(
            d.post("/learnspam", &[], &stream_message(true, i)).status,
            200
        );
        assert_eq!(
            d.post("/learnham", &[], &stream_message(false, i)).status,
            200
        );
    }
    assert_eq!(classifier_learned(&d), (25, 25));
    assert_eq!(d.get("/stat").json()["classifier"]["ready"], true);
    let model = d.data.join("classifier.bin");
    wait_until("a periodic classifier snapshot", 30, || model.exists());
    // Let a snapshot taken after the last learn land (one interval), then crash.
    std::thread::sleep(Duration::from_millis(2500));
    d.kill9();
    let d = Daemon::start(
        dir.path(),
        Options {
            ports: Some((d.http, d.milter)),
            ..options
        },
    );
    assert_eq!(
        classifier_learned(&d),
        (25, 25),
        "after kill -9 and restart"
    );
    let r = d.post("/checkv2", &[], &stream_message(true, 99));
    let symbols = r.json()["symbols"].clone();
    assert!(
        symbols.get("CLF_SPAM").is_some() || symbols.get("CLF_SPAM_HIGH").is_some(),
        "the restored model knows the spam stream: {symbols}"
    );
    let r = d.post("/checkv2", &[], &stream_message(false, 99));
    let symbols = r.json()["symbols"].clone();
    assert!(
        symbols.get("CLF_HAM").is_some() || symbols.get("CLF_HAM_HIGH").is_some(),
        "the restored model knows the ham stream: {symbols}"
    );
}

#[test]
fn a_stuck_worker_is_replaced_and_capacity_comes_back() {
    // One worker, and a rule that never ends on one message (its budgets are set out of
    // reach): the worker is held by it. Its client gets 503 at the scan timeout; past
    // `stuck_worker_ms` a fresh worker takes over, so the next message is answered.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("stuck.lua"),
        "rule { name = 'STUCK', score = 1, check = function(msg)\n\
           if msg:subject() == 'hold the worker' then while true do end end end }\n\
         rule { name = 'FINE', score = 0.5, check = function(msg) return true end }\n",
    )
    .unwrap();
    let mut d = Daemon::start(
        dir.path(),
        Options {
            config: Some(
                "[server]\nscan_timeout_ms = 500\nstuck_worker_ms = 1500\n\n\
                 [engine]\nrule_cpu_ms = 3600000\nmessage_cpu_ms = 3600000\n"
                    .into(),
            ),
            rules: Some(rules),
            workers: Some(1),
            ..Options::default()
        },
    );
    let ham = read(HAM);
    // Normal work is not mistaken for a stuck worker.
    assert_eq!(d.post("/checkv2", &[], &ham).status, 200);
    let stuck = String::from_utf8_lossy(&ham)
        .replacen("Subject:", "Subject: hold the worker\r\nX-Old-Subject:", 1)
        .into_bytes();
    let r = d.post("/checkv2", &[], &stuck);
    assert_eq!(r.status, 503, "{}", r.text());
    wait_until("the stuck worker replaced", 30, || {
        d.metric("shrike_workers_replaced_total") == 1
    });
    let r = d.post("/checkv2", &[], &ham);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["symbols"]["FINE"].is_object(), "{}", r.text());
    let health = d.get("/health").json();
    assert_eq!(health["workers"], "degraded", "{health}");
    assert_eq!(health["stuck_workers"], 1, "{health}");
    assert_eq!(d.metric("shrike_workers_stuck"), 1);
    // Replaced once: the fresh worker serving normal mail is not replaced in turn.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(d.post("/checkv2", &[], &ham).status, 200);
    assert_eq!(d.metric("shrike_workers_replaced_total"), 1);
    // Shutdown does not wait for the stuck thread.
    let log = d.stop();
    assert!(log.contains("replaced by a fresh one"), "{log}");
}

/// One request to `ip:port` with `host` as its Host header; the status.
fn status_with_host(
    ip: std::net::IpAddr,
    port: u16,
    line: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> u16 {
    daemon::http_to(ip, port, host, line, headers, body)
        .unwrap()
        .status
}

#[test]
fn admin_requests_a_browser_sends_for_another_site_are_refused() {
    // A page of another site, in a browser on the mail host (or through an admin's ssh -L
    // tunnel), can send a "no-cors" POST of text/plain to 127.0.0.1, and a DNS-rebinding page
    // can read from it under its own name. Loopback trust must not extend to them.
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            http_host: Some("0.0.0.0".into()),
            workers: Some(1),
            ..Options::default()
        },
    );
    let lo: std::net::IpAddr = [127, 0, 0, 1].into();
    let ham = read(HAM);
    let evil = [
        ("Origin", "https://evil.example"),
        ("Content-Type", "text/plain"),
    ];
    let rep = "GET /reputation?type=subject&value=hello";
    for (line, body) in [
        ("POST /learnspam", ham.as_slice()),
        ("POST /learnham", ham.as_slice()),
        ("POST /reload", b"".as_slice()),
    ] {
        assert_eq!(
            status_with_host(lo, d.http, line, "127.0.0.1", &evil, body),
            403,
            "{line} from another site's page"
        );
    }
    for line in ["GET /history", rep] {
        assert_eq!(
            status_with_host(lo, d.http, line, "rebind.evil.example", &[], b""),
            403,
            "{line} under a rebound name"
        );
    }
    // Nothing was learned by the refused requests.
    assert_eq!(d.get("/stat").json()["learned"], 0);
    // The same from a client that is no browser, or from this daemon's own origin: allowed.
    let own = format!("http://127.0.0.1:{}", d.http);
    let host = format!("127.0.0.1:{}", d.http);
    assert_eq!(
        status_with_host(
            lo,
            d.http,
            "POST /learnspam",
            &host,
            &[("Origin", &own), ("Content-Type", "message/rfc822")],
            &ham
        ),
        200
    );
    for line in ["GET /history", rep, "POST /reload"] {
        assert_eq!(
            status_with_host(
                lo,
                d.http,
                line,
                "localhost",
                &[("Content-Type", "application/json")],
                b""
            ),
            200,
            "{line} from loopback"
        );
    }
    // A state change without a type a page of another site cannot send, or a header it cannot
    // add, is refused even without an Origin (browsers that strip it).
    for (line, headers) in [
        ("POST /reload", &[][..]),
        ("POST /reload", &[("Content-Type", "text/plain")][..]),
        (
            "POST /learnspam",
            &[("Content-Type", "application/x-www-form-urlencoded")][..],
        ),
    ] {
        assert_eq!(
            status_with_host(lo, d.http, line, "localhost", headers, &ham),
            403,
            "{line} {headers:?}"
        );
    }
    // Who mailed whom is not for every client that can reach the port.
    let outside = {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        s.connect("192.0.2.123:9").expect("a route off loopback");
        s.local_addr().unwrap().ip()
    };
    assert!(!outside.is_loopback());
    assert_eq!(
        status_with_host(outside, d.http, rep, &outside.to_string(), &[], b""),
        403
    );
    // Scanning stays open to it.
    assert_eq!(
        status_with_host(
            outside,
            d.http,
            "POST /checkv2",
            &outside.to_string(),
            &[],
            &ham
        ),
        200
    );
}

/// A rule error found by the directory watcher stays in `/health` and `/metrics` only while
/// the files are broken: once they are back to the serving set (the broken file removed) it is
/// cleared, although no reload runs. Failed reloads take no generation number: the next good
/// one is 2.
#[test]
fn a_fixed_rule_error_clears_and_failed_reloads_take_no_generation_number() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(rules.join("a.lua"), rule("FIRST_RULE")).unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[engine]\nreload_debounce_ms = 50\n".into()),
            rules: Some(rules.clone()),
            ..Options::default()
        },
    );
    let health = |d: &Daemon| d.get("/health").json();
    let error_metric = |d: &Daemon| {
        d.get("/metrics")
            .text()
            .lines()
            .find(|l| l.starts_with("shrike_last_reload_error{"))
            .expect("shrike_last_reload_error")
            .to_string()
    };

    std::fs::write(rules.join("46_b.lua"), "rule { name = \"B\", check = ").unwrap();
    wait_until("the watcher's reload error", 30, || {
        health(&d)["last_reload_error"].is_string()
    });
    assert!(error_metric(&d).ends_with("} 1"), "{}", error_metric(&d));
    for _ in 0..2 {
        let r = d.post("/reload", &[], b"");
        assert_eq!(r.status, 422, "{}", r.text());
        assert_eq!(r.json()["generation"], 1);
    }
    assert_eq!(health(&d)["generation"], 1);

    std::fs::remove_file(rules.join("46_b.lua")).unwrap();
    wait_until("the error cleared once the file is gone", 30, || {
        health(&d)["last_reload_error"].is_null()
    });
    assert_eq!(error_metric(&d), "shrike_last_reload_error{error=\"\"} 0");
    let h = health(&d);
    assert_eq!(
        h["generation"], 1,
        "the same bytes build no generation: {h}"
    );
    assert!(h["reload_failures"].as_u64().unwrap() >= 3, "{h}");

    std::fs::write(rules.join("c.lua"), rule("SECOND_RULE")).unwrap();
    wait_until("the new rule", 30, || health(&d)["rules"] == 2);
    assert_eq!(health(&d)["generation"], 2);
    let r = d.post("/reload", &[], b"");
    assert_eq!(r.json()["generation"], 3, "{}", r.text());
}

/// Runs the real `rspamc` with a controller command (no message); its output once it has
/// succeeded.
fn rspamc_command(d: &Daemon, args: &[&str]) -> String {
    run_rspamc(d, args, None)
}

/// rspamd's controller commands through the real `rspamc`: `counters` (per-symbol hits, score
/// and time), `uptime` (rspamd's `/auth`), `stat_reset` (admin: answers the counts and starts
/// `/stat` again, `/metrics` untouched); the fuzzy storage's commands are answered "not
/// supported" (501) rather than 404.
#[test]
fn rspamc_counters_uptime_stat_reset_and_fuzzy() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    rspamc(&d, &[], "gtube.eml");

    // Idle workers hand their per-rule counters over about once a second.
    wait_until("GTUBE's hit in /counters", 30, || {
        d.get("/counters")
            .json()
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c["symbol"] == "GTUBE" && c["hits"] == 1))
    });
    let counters = d.get("/counters").json();
    let gtube = counters
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["symbol"] == "GTUBE")
        .unwrap();
    for field in ["weight", "frequency", "frequency_stddev", "time"] {
        assert!(gtube[field].is_number(), "{field}: {gtube}");
    }
    let text = rspamc_command(&d, &["counters"]);
    let row = text
        .lines()
        .find(|l| l.contains("| GTUBE "))
        .unwrap_or_else(|| panic!("no GTUBE row:\n{text}"));
    let hits = row.trim().trim_end_matches('|').rsplit('|').next().unwrap();
    assert_eq!(hits.trim(), "1", "{row}");

    // (Debian's rspamc 3.4 prints the version line's format string, not the version.)
    let text = rspamc_command(&d, &["uptime"]);
    assert!(text.contains("Uptime: "), "{text}");
    let text = rspamc_command(&d, &["--json", "uptime"]);
    let auth: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(auth["version"], env!("CARGO_PKG_VERSION"), "{auth}");
    assert_eq!(auth["reject"], 1, "{auth}");
    assert!(auth["uptime"].is_u64(), "{auth}");

    // A page of another site cannot reset them (a GET with nothing a browser cannot send).
    assert_eq!(d.get("/statreset").status, 403);
    let text = rspamc_command(&d, &["stat_reset"]);
    assert!(text.contains("Messages scanned: 1"), "{text}");
    let stat = d.get("/stat").json();
    assert_eq!(stat["scanned"], 0, "{stat}");
    assert_eq!(stat["actions"]["reject"], 0, "{stat}");
    let text = rspamc_command(&d, &["stat"]);
    assert!(text.contains("Messages scanned: 0"), "{text}");
    assert_eq!(d.metric("shrike_scans_total{action=\"reject\"}"), 1);
    rspamc(&d, &[], "gtube.eml");
    assert_eq!(d.get("/stat").json()["scanned"], 1);

    for path in ["/fuzzyadd", "/fuzzydel", "/fuzzydelhash"] {
        let r = d.post(path, &[], &read("gtube.eml"));
        assert_eq!(r.status, 501, "{path}: {}", r.text());
        assert!(r.json()["error"]
            .as_str()
            .unwrap()
            .contains("not supported"));
    }
    let out = Command::new("rspamc")
        .args(["-h", &format!("127.0.0.1:{}", d.http), "fuzzy_add"])
        .arg(data("gtube.eml"))
        .output()
        .expect("rspamc");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success());
    assert!(
        said.contains("501, Fuzzy storage is not supported"),
        "{said}"
    );
}

/// A learn of a message the classifier already has is counted apart everywhere: `/stat`'s
/// `learned_*` and `rspamc stat`'s "Messages learned" agree with the classifier, `/metrics`
/// has a `duplicate` label, and the history record says so.
#[test]
fn duplicate_learns_are_counted_apart_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[history]\nflush_ms = 100\n".into()),
            ..Options::default()
        },
    );
    for _ in 0..2 {
        let text = rspamc(&d, &["learn_ham"], HAM);
        assert!(text.contains("success = true"), "{text}");
    }
    let stat = d.get("/stat").json();
    assert_eq!(stat["learned_ham"], 1, "{stat}");
    assert_eq!(stat["learned"], 1, "{stat}");
    assert_eq!(stat["duplicate_learns"]["ham"], 1, "{stat}");
    assert_eq!(
        stat["learned_ham"], stat["classifier"]["learned_ham"],
        "{stat}"
    );
    let text = rspamc_command(&d, &["stat"]);
    assert!(text.contains("Messages learned: 1\n"), "{text}");
    assert_eq!(
        d.metric("shrike_learns_total{class=\"ham\",duplicate=\"false\"}"),
        1
    );
    assert_eq!(
        d.metric("shrike_learns_total{class=\"ham\",duplicate=\"true\"}"),
        1
    );
    wait_until("two learn records", 30, || {
        d.get("/history?action=learn").json()["records"]
            .as_array()
            .is_some_and(|r| r.len() == 2)
    });
    let records = d.get("/history?action=learn").json();
    let duplicates: Vec<bool> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["duplicate"].as_bool().expect("duplicate"))
        .collect();
    assert_eq!(duplicates, [true, false], "newest first: {records}");
}

/// A response read from a kept-alive connection: status, headers (lower-cased names), body.
fn read_response(s: &mut std::net::TcpStream) -> std::io::Result<(u16, String, Vec<u8>)> {
    use std::io::Read;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed after {} bytes", head.len()),
            ));
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("content-length");
    let mut body = vec![0; length];
    s.read_exact(&mut body)?;
    Ok((status, head, body))
}

/// From SIGTERM until the requests in flight are answered, the daemon still answers: `/health`
/// 503 (on a new connection and on one kept alive from before), new scans 503, and each reply
/// closes its connection; the request in flight is answered, then the daemon exits.
#[test]
fn health_answers_503_while_stopping() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), Options::default());
    let port = d.http;
    let connect = || {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    };
    let health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut kept = connect();
    kept.write_all(health).unwrap();
    assert_eq!(read_response(&mut kept).unwrap().0, 200);

    // A scan in flight: its body arrives only when the test sends the rest.
    let message = read(HAM);
    let (first, rest) = message.split_at(message.len() / 2);
    let before = d.metric("shrike_http_requests_total");
    let mut held = connect();
    write!(
        held,
        "POST /checkv2 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: message/rfc822\r\n\
         Content-Length: {}\r\n\r\n",
        message.len()
    )
    .unwrap();
    held.write_all(first).unwrap();
    wait_until("the held request reaches the daemon", 30, || {
        d.metric("shrike_http_requests_total") >= before + 2
    });

    d.signal("TERM");
    wait_until("/health 503 on a new connection", 30, || {
        daemon::http(d.http, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 503)
    });
    let r = daemon::http(d.http, "GET", "/health", &[], b"").unwrap();
    assert_eq!(r.json()["ready"], false);
    assert_eq!(r.header("connection"), Some("close"));
    kept.write_all(health).unwrap();
    let (status, head, _) = read_response(&mut kept).expect("an answer on the kept connection");
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("connection: close"), "{head}");
    let r = d.post("/checkv2", &[], &read(HAM));
    assert_eq!(r.status, 503, "{}", r.text());

    held.write_all(rest).unwrap();
    let (status, _, body) = read_response(&mut held).expect("the scan in flight is answered");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    d.wait_exit();
}
