//! The reputation store on real Redis servers (Debian's redis-server 7.x, started here): one
//! node, and a cluster of three masters with three replicas shared by two daemons. Through
//! the binary and HTTP as an MTA would use it: counts shared across daemons, exact unique
//! counts under races, rate limits across daemons, a master killed, every node stopped and
//! restarted, and counters moved in from a memory data directory.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/redis.rs"]
mod redis;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use daemon::{wait_until, Daemon, Options};
use redis::{Cluster, Node};

const RULES: &str = r#"
rule { name = "COMPLAINED", score = 20.0, description = "its subject drew a complaint",
  check = function(msg)
    local _, _, _, complaints = msg:stat("subject", "24h")
    return complaints > 0
  end }
rule { name = "RATE10", score = 0.5, description = "its sender went over 10 a minute",
  check = function(msg)
    local from = msg:from()
    if not from then return end
    local _, over = ratelimit("rl", from, 10, 60)
    return over
  end }
rule { name = "SUBJECT_SEEN", score = 0.01, description = "its subject's count (options)",
  check = function(msg)
    local seen = msg:stat("subject", "10m")
    return true, tostring(seen)
  end }
rule { name = "MAILER_SEEN", score = 0.1, description = "asked only of subjects with 'ask'",
  check = function(msg)
    local subject = msg:subject() or ""
    if not subject:find("ask", 1, true) then return end
    local seen = msg:stat("mailer", "24h")
    return seen >= 2
  end }
"#;

fn rules(dir: &Path) -> std::path::PathBuf {
    let r = dir.join("rules");
    std::fs::create_dir_all(&r).unwrap();
    std::fs::write(r.join("t.lua"), RULES).unwrap();
    r
}

fn message(from: &str, subject: &str, id: &str) -> Vec<u8> {
    format!(
        "From: {from}\r\nTo: someone@example.org\r\nSubject: {subject}\r\nMessage-ID: <{id}@t.example>\r\n\
         Date: Fri, 27 Nov 2026 06:00:00 +0000\r\n\r\nHello, this is the body of {subject}.\r\n"
    )
    .into_bytes()
}

/// A redis store without the near cache: these tests check what each daemon reads from Redis
/// (`near_cache_serves_own_counts_at_once_and_others_within_its_bound` turns it on).
fn redis_config(urls: &str, cluster: bool) -> String {
    format!(
        "[store]\nbackend = \"redis\"\n[store.redis]\nurls = {urls}\ncluster = {cluster}\n\
         prefix = \"in\"\ntimeout_ms = 50\nflush_interval_ms = 20\nnear_cache_ms = 0\n"
    )
}

/// What `SUBJECT_SEEN` says a scan of `msg` counted of its subject in 10 minutes.
fn subject_seen(d: &Daemon, msg: &[u8]) -> u64 {
    let r = d.post("/checkv2", &[], msg);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["symbols"]["SUBJECT_SEEN"]["options"][0]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no SUBJECT_SEEN count in {}", r.text()))
}

#[test]
fn near_cache_serves_own_counts_at_once_and_others_within_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), daemon::free_port(), false);
    let urls = format!("[\"redis://127.0.0.1:{}\"]", node.port);
    // Flushes every 10 s: what a daemon sees of its own scans before that, only the near
    // cache can show.
    let slow = |near: u64| {
        redis_config(&urls, false)
            .replace("flush_interval_ms = 20", "flush_interval_ms = 10000")
            .replace("near_cache_ms = 0", &format!("near_cache_ms = {near}"))
    };
    let a = start(dir.path(), "a", &slow(1_000));
    let off = start(dir.path(), "off", &slow(0));
    for d in [&a, &off] {
        wait_until("the store connected", 10, || health_store(d) == "ok");
    }
    for (d, subject) in [(&a, "Burst with cache"), (&off, "Burst without cache")] {
        let counts: Vec<u64> = (0..5)
            .map(|i| {
                subject_seen(
                    d,
                    &message("b@burst.example", subject, &format!("{subject}{i}")),
                )
            })
            .collect();
        if std::ptr::eq(d, &a) {
            // Each scan counts the ones before it (a scan's increments are recorded just
            // after its reply, so one may still be on its way): the near cache adds this
            // daemon's own increments at once.
            assert!(
                counts.windows(2).all(|w| w[0] <= w[1]) && counts[4] >= 3,
                "with the near cache: {counts:?}"
            );
        } else {
            // Without it the count waits for the flush.
            assert_eq!(counts, [0, 0, 0, 0, 0], "without the near cache");
        }
    }
    assert!(a.metric("shrike_redis_near_cache_hits_total") >= 4);
    assert_eq!(off.metric("shrike_redis_near_cache_hits_total"), 0);

    // Another daemon's counts arrive once flushed and once the entry is older than
    // near_cache_ms: a second daemon (flushing every 20 ms) scans the subject, A had it cached.
    let b = start(
        dir.path(),
        "b",
        &redis_config(&urls, false).replace("near_cache_ms = 0", "near_cache_ms = 1000"),
    );
    wait_until("the store connected", 10, || health_store(&b) == "ok");
    for i in 0..3 {
        b.post(
            "/checkv2",
            &[],
            &message("c@burst.example", "Burst with cache", &format!("b{i}")),
        );
    }
    // Once A's entry is older than near_cache_ms, A reads Redis again: B's 3 are there (A's
    // own 5 wait for A's 10 s flush).
    let probe = message("b@burst.example", "Burst with cache", "probe");
    wait_until("A counts B's scans", 10, || subject_seen(&a, &probe) >= 3);
}

fn start(dir: &Path, name: &str, config: &str) -> Daemon {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    Daemon::start(
        &d,
        Options {
            config: Some(config.to_string()),
            rules: Some(rules(&d)),
            workers: Some(2),
            ..Options::default()
        },
    )
}

/// Scans and returns (symbols, elapsed).
fn scan(d: &Daemon, msg: &[u8], headers: &[(&str, &str)]) -> (Vec<String>, Duration) {
    let t = Instant::now();
    let r = d.post("/checkv2", headers, msg);
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let symbols = v["symbols"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    (symbols, took)
}

fn window(d: &Daemon, kind: &str, value: &str, counter: &str) -> u64 {
    let r = d.get(&format!("/reputation?type={kind}&value={}", enc(value)));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["keys"][0]["windows"]["24h"][counter]
        .as_u64()
        .unwrap_or(0)
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn health_store(d: &Daemon) -> String {
    d.get("/health").json()["store"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Five scans with the store out of reach: each says `STORE_UNAVAILABLE` and takes under 1 s.
fn scans_go_on_without_the_store(d: &Daemon, from: &str, subject: &str) {
    for i in 0..5 {
        let id = format!("{}{i}", subject.replace(' ', "-"));
        let (symbols, took) = scan(d, &message(from, subject, &id), &[]);
        assert!(
            symbols.contains(&"STORE_UNAVAILABLE".to_string()),
            "{symbols:?}"
        );
        assert!(took < Duration::from_millis(1000), "scan took {took:?}");
    }
}

#[test]
fn single_node_counts_learns_degrades_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), daemon::free_port(), false);
    let urls = format!("[\"redis://127.0.0.1:{}\"]", node.port);
    let d = start(dir.path(), "a", &redis_config(&urls, false));
    wait_until("the store connected", 10, || health_store(&d) == "ok");

    let m1 = message("alice@one.example", "Quarterly numbers", "m1");
    let (symbols, _) = scan(&d, &m1, &[]);
    assert!(
        !symbols.contains(&"STORE_UNAVAILABLE".to_string()),
        "{symbols:?}"
    );
    assert!(!symbols.contains(&"COMPLAINED".to_string()));
    wait_until("the scan counted in redis", 5, || {
        window(&d, "subject", "Quarterly numbers", "seen") == 1
    });
    // Keys live in redis under the prefix, with a TTL (expiry by redis, no sweeper).
    let keys = node.cli(&["--scan", "--pattern", "in:{*"]);
    assert!(keys.lines().count() >= 3, "{keys}");
    wait_until("every key has its TTL", 5, || {
        keys.lines().all(|k| {
            let ttl: i64 = node.cli(&["TTL", k]).trim().parse().unwrap();
            ttl > 14 * 86_400 && ttl <= 15 * 86_400
        })
    });

    // A kind no rule asked for yet is not read before the rules; the first rule that asks
    // reads it then (one more read for that scan) and sees the same counts, and later scans
    // read it before their rules.
    let mailer = |subject: &str, id: &str| {
        let m = String::from_utf8(message("m@mailer.example", subject, id)).unwrap();
        m.replacen("\r\n\r\n", "\r\nX-Mailer: Bulkmail 9\r\n\r\n", 1)
            .into_bytes()
    };
    for i in 0..2 {
        let (symbols, _) = scan(&d, &mailer("quiet", &format!("q{i}")), &[]);
        assert!(!symbols.contains(&"MAILER_SEEN".to_string()));
    }
    wait_until("the mailer counted twice", 5, || {
        window(&d, "mailer", "Bulkmail 9", "seen") == 2
    });
    let reads = || d.metric("shrike_redis_prefetches_total");
    let before = reads();
    let (symbols, _) = scan(&d, &mailer("ask one", "a1"), &[]);
    assert!(symbols.contains(&"MAILER_SEEN".to_string()), "{symbols:?}");
    assert_eq!(
        reads(),
        before + 2,
        "the read before the rules, then the mailer's"
    );
    let (symbols, _) = scan(&d, &mailer("ask two", "a2"), &[]);
    assert!(symbols.contains(&"MAILER_SEEN".to_string()), "{symbols:?}");
    assert_eq!(reads(), before + 3, "the mailer read before the rules");

    // A learn is written before its 200, and the next scan sees it.
    let r = d.post("/learnspam", &[], &m1);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(window(&d, "subject", "Quarterly numbers", "complaint"), 1);
    let (symbols, _) = scan(&d, &m1, &[]);
    assert!(symbols.contains(&"COMPLAINED".to_string()), "{symbols:?}");

    // Redis down: scans go on at once without reputation, say so, and learns are refused.
    node.kill9();
    scans_go_on_without_the_store(&d, "bob@two.example", "Down");
    // The complained-about message is no longer recognised: no reputation, no false verdict.
    let (symbols, _) = scan(&d, &m1, &[]);
    assert!(!symbols.contains(&"COMPLAINED".to_string()), "{symbols:?}");
    assert_eq!(health_store(&d), "degraded");
    // A message already learned is a duplicate, answered without the store; a new one needs
    // the store and is refused.
    let fresh = message("e@five.example", "Learned while down", "fresh1");
    let r = d.post("/learnspam", &[], &fresh);
    assert_eq!(
        r.status,
        503,
        "a learn redis did not take is not acknowledged: {}",
        r.text()
    );
    assert!(d.metric("shrike_redis_unavailable_scans_total") >= 5);
    assert!(d.metric("shrike_store_degraded") == 1);

    // Back up (empty: it saved nothing): used again without restarting shrike.
    node.restart();
    wait_until("scans use redis again", 15, || {
        !scan(&d, &message("c@three.example", "Up again", "u"), &[])
            .0
            .contains(&"STORE_UNAVAILABLE".to_string())
    });
    wait_until("counting resumed", 5, || {
        window(&d, "subject", "Up again", "seen") >= 1
    });
    assert_eq!(health_store(&d), "ok");
    // What the scans counted while Redis was down was held and is written now, once.
    wait_until("the outage's counts written", 5, || {
        window(&d, "subject", "Down", "seen") >= 5
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(window(&d, "subject", "Down", "seen"), 5);
    assert_eq!(d.metric("shrike_redis_dropped_increments_total"), 0);
    // The refused learn was not trained: sent again, it is learned now.
    let r = d.post("/learnspam", &[], &fresh);
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(!r.text().contains("\"duplicate\":true"), "{}", r.text());
    assert!(d.metric("shrike_redis_round_trips_total") > 0);

    // No [store] backend: the embedded store, as before.
    let m = start(dir.path(), "memory", "");
    assert_eq!(health_store(&m), "memory");
    let (symbols, _) = scan(&m, &m1, &[]);
    assert!(!symbols.contains(&"STORE_UNAVAILABLE".to_string()));
}

#[test]
fn export_from_memory_import_into_redis_keeps_window_sums() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), daemon::free_port(), false);
    let subjects: Vec<String> = (0..12)
        .map(|i| format!("Subject number {}", i % 5))
        .collect();
    let mem_dir = dir.path().join("mem");
    std::fs::create_dir_all(&mem_dir).unwrap();
    let mut mem = Daemon::start(
        &mem_dir,
        Options {
            rules: Some(rules(&mem_dir)),
            ..Options::default()
        },
    );
    for (i, s) in subjects.iter().enumerate() {
        scan(
            &mem,
            &message(&format!("s{}@x.example", i % 3), s, &format!("e{i}")),
            &[],
        );
    }
    assert_eq!(
        mem.post(
            "/learnspam",
            &[],
            &message("s0@x.example", "Subject number 0", "e0")
        )
        .status,
        200
    );
    let reads: Vec<(&str, String)> = (0..5)
        .map(|i| ("subject", format!("Subject number {i}")))
        .chain((0..3).map(|i| ("from", format!("s{i}@x.example"))))
        .collect();
    let sums = |d: &Daemon| -> Vec<serde_json::Value> {
        reads
            .iter()
            .map(|(k, v)| {
                let r = d.get(&format!("/reputation?type={k}&value={}", enc(v)));
                r.json()["keys"][0]["windows"].clone()
            })
            .collect()
    };
    let before = sums(&mem);
    assert_eq!(before[0]["24h"]["seen"], 3, "{:?}", before[0]);
    mem.stop();

    let dump = dir.path().join("dump.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["store", "export", "--data"])
        .arg(&mem.data)
        .arg("--out")
        .arg(&dump)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let urls = format!("[\"redis://127.0.0.1:{}\"]", node.port);
    let cfg = dir.path().join("redis.toml");
    std::fs::write(&cfg, redis_config(&urls, false)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("--config")
        .arg(&cfg)
        .args(["store", "import", "--in"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("imported"));

    let r = start(dir.path(), "r", &redis_config(&urls, false));
    wait_until("the store connected", 10, || health_store(&r) == "ok");
    assert_eq!(
        sums(&r),
        before,
        "window sums in redis differ from the memory store's"
    );
    // Learning offline into a redis-backed config is refused (it would fill the data
    // directory, not Redis).
    let spam = dir.path().join("spam.eml");
    std::fs::write(&spam, message("s0@x.example", "Offline", "o1")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("--config")
        .arg(&cfg)
        .args(["learn", "--data"])
        .arg(dir.path().join("offline"))
        .arg("--spam")
        .arg(&spam)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--server"));
    // A bad dump is refused with its line number, and nothing panics.
    std::fs::write(&dump, "{\"ns\":0}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("--config")
        .arg(&cfg)
        .args(["store", "import", "--in"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 1"));
}

#[test]
fn two_daemons_share_a_cluster_through_failover_and_outage() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path());
    let config = redis_config(&cluster.urls(), true);
    let a = start(dir.path(), "a", &config);
    let b = start(dir.path(), "b", &config);
    for d in [&a, &b] {
        wait_until("the store connected", 15, || health_store(d) == "ok");
    }

    // A complaint through A shows in B's reputation and changes B's verdict.
    let m = message("promo@deals.example", "Unbeatable offer", "c1");
    assert!(!scan(&b, &m, &[]).0.contains(&"COMPLAINED".to_string()));
    assert_eq!(a.post("/learnspam", &[], &m).status, 200);
    assert_eq!(window(&b, "subject", "Unbeatable offer", "complaint"), 1);
    assert!(scan(&b, &m, &[]).0.contains(&"COMPLAINED".to_string()));
    // The classifier too: B applies A's learn from the shared stream, A does not apply it twice.
    let learned = |d: &Daemon| d.get("/stat").json()["classifier"]["learned_spam"].as_u64();
    wait_until("B's classifier learned A's learn", 5, || {
        learned(&b) == Some(1)
    });
    assert_eq!(learned(&a), Some(1));
    assert_eq!(b.metric("shrike_redis_learns_applied_total"), 1);
    // A daemon that joins later replays the stream instead of starting cold; B, restarted,
    // continues from where it stopped and trains nothing twice.
    let c = start(dir.path(), "c", &config);
    wait_until("a new daemon replayed the learns", 10, || {
        learned(&c) == Some(1)
    });
    drop(c);
    let mut b = b;
    b.stop();
    let b = Daemon::start(
        &dir.path().join("b"),
        Options {
            config: Some(config.clone()),
            rules: Some(dir.path().join("b").join("rules")),
            workers: Some(2),
            ports: Some((b.http, b.milter)),
            ..Options::default()
        },
    );
    wait_until("B reconnected", 10, || health_store(&b) == "ok");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(learned(&b), Some(1));
    assert_eq!(b.metric("shrike_redis_learns_applied_total"), 0);

    // The same message through both daemons counts seen twice.
    let s = message("x@same.example", "Seen on both", "s1");
    scan(&a, &s, &[]);
    scan(&b, &s, &[]);
    wait_until("seen twice", 5, || {
        window(&a, "subject", "Seen on both", "seen") == 2
    });

    // 1,000 pairs, each sent through both daemons at once: exactly 1,000 distinct recipients.
    let bulk = message("bulk@sender.example", "Pairs", "p");
    std::thread::scope(|sc| {
        for t in 0..8 {
            let (a, b, bulk) = (&a, &b, &bulk);
            sc.spawn(move || {
                for i in (t..1000).step_by(8) {
                    let rcpt = format!("r{i}@rcpt.example");
                    let (first, second) = if i % 2 == 0 { (a, b) } else { (b, a) };
                    scan(first, bulk, &[("Rcpt", rcpt.as_str())]);
                    scan(second, bulk, &[("Rcpt", rcpt.as_str())]);
                }
            });
        }
    });
    wait_until("1,000 distinct", 10, || {
        window(&a, "unique_sender", "bulk@sender.example", "seen") >= 1000
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        window(&b, "unique_sender", "bulk@sender.example", "seen"),
        1000
    );
    // Under that concurrency the workers' reads left in shared batches: fewer batches than
    // reads, every read in one.
    for d in [&a, &b] {
        let (reads, batches) = (
            d.metric("shrike_redis_reads_total"),
            d.metric("shrike_redis_read_batches_total"),
        );
        assert!(
            batches > 0 && reads > batches,
            "reads {reads}, batches {batches}"
        );
    }

    // A limit of 10 a minute holds across both daemons: the 11th message on is over.
    let over: Vec<bool> = (0..20)
        .map(|i| {
            let d = if i % 2 == 0 { &a } else { &b };
            let msg = message(
                "rl@limited.example",
                &format!("Rate {i}"),
                &format!("rl{i}"),
            );
            scan(d, &msg, &[]).0.contains(&"RATE10".to_string())
        })
        .collect();
    assert_eq!(over, (0..20).map(|i| i >= 10).collect::<Vec<_>>());

    // Kill a master: no scan fails or stalls past the timeout while its replica takes over.
    let victim = cluster.master_of("in:{0.1.0000000000000000}");
    cluster.nodes[victim].kill9();
    let start_kill = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut i = 0;
    while start_kill.elapsed() < Duration::from_secs(6) {
        let (_, took) = scan(
            &a,
            &message("f@fail.example", &format!("Failover {i}"), "f"),
            &[],
        );
        slowest = slowest.max(took);
        i += 1;
    }
    assert!(
        slowest < Duration::from_millis(700),
        "slowest scan during failover {slowest:?}"
    );
    cluster.wait_ok();
    // Counting resumes on every slot (the dead master's included).
    wait_until("scans without STORE_UNAVAILABLE after failover", 20, || {
        !scan(&b, &message("g@after.example", "After failover", "g"), &[])
            .0
            .contains(&"STORE_UNAVAILABLE".to_string())
    });
    let before = window(&a, "subject", "After failover", "seen");
    for _ in 0..3 {
        scan(&b, &message("g@after.example", "After failover", "g"), &[]);
    }
    wait_until("counting resumed after failover", 10, || {
        window(&a, "subject", "After failover", "seen") >= before + 3
    });

    // Every node down: degraded, never stalled; back up: used again, no restart of shrike.
    for n in &mut cluster.nodes {
        n.kill9();
    }
    scans_go_on_without_the_store(&a, "h@down.example", "All down");
    wait_until("health degraded", 5, || health_store(&b) == "degraded");
    let fresh = message("f@down.example", "Learned while all down", "fresh2");
    assert_eq!(a.post("/learnspam", &[], &fresh).status, 503);
    for n in &mut cluster.nodes {
        n.restart();
    }
    cluster.wait_ok();
    for d in [&a, &b] {
        wait_until("reputation used again", 30, || {
            !scan(d, &message("k@back.example", "Back", "k"), &[])
                .0
                .contains(&"STORE_UNAVAILABLE".to_string())
        });
    }
    let seen = window(&a, "subject", "Back", "seen");
    scan(&b, &message("k@back.example", "Back", "k"), &[]);
    wait_until("counting after the restart", 10, || {
        window(&a, "subject", "Back", "seen") > seen
    });
    assert_eq!(a.post("/learnspam", &[], &m).status, 200);
    assert_eq!(health_store(&a), "ok");
}

/// The clients (`ADDR:PORT`) whose script calls ran `command` on a timeline key (`in:{…}`),
/// from the lines `redis-cli MONITOR` printed: a script's commands are printed as the `lua`
/// client's, right after the call that ran them.
fn clients_sending(monitor: &str, command: &str) -> std::collections::BTreeSet<String> {
    let needle = format!("\"{command}\" \"in:{{");
    let mut caller = None;
    let mut out = std::collections::BTreeSet::new();
    for l in monitor.lines() {
        let Some(client) = l
            .split_once('[')
            .and_then(|(_, rest)| rest.split_once(']'))
            .and_then(|(inside, _)| inside.split_whitespace().nth(1))
        else {
            continue;
        };
        if client != "lua" {
            caller = Some(client.to_string());
        } else if l.contains(&needle) {
            out.extend(caller.clone());
        }
    }
    out
}

/// What one daemon sends while it scans `n` messages, as `MONITOR` on the node saw it.
fn monitored_scans(dir: &Path, node: &Node, name: &str, config: &str, n: usize) -> String {
    let path = dir.join(format!("{name}.monitor"));
    let mut monitor = Command::new("redis-cli")
        .args(["-p", &node.port.to_string(), "MONITOR"])
        .stdout(std::fs::File::create(&path).unwrap())
        .spawn()
        .expect("redis-cli MONITOR");
    let d = start(dir, name, config);
    wait_until("the store connected", 10, || health_store(&d) == "ok");
    for i in 0..n {
        let id = format!("{name}-{i}");
        scan(&d, &message(&format!("s{i}@lanes.example"), &id, &id), &[]);
    }
    // The flushes (every 20 ms here) have written what the scans counted.
    wait_until("the scans counted in redis", 5, || {
        window(&d, "subject", &format!("{name}-{}", n - 1), "seen") == 1
    });
    drop(d);
    let _ = monitor.kill();
    let _ = monitor.wait();
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn write_flushes_never_share_a_connection_with_reads() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), daemon::free_port(), false);
    let urls = format!("[\"redis://127.0.0.1:{}\"]", node.port);

    // The default: a node's first connection takes the flushes, the others the reads, so a
    // read never waits behind a flush on one connection's ordered replies.
    let seen = monitored_scans(dir.path(), &node, "lanes", &redis_config(&urls, false), 20);
    let writers = clients_sending(&seen, "HINCRBY");
    let readers = clients_sending(&seen, "HGETALL");
    assert!(!writers.is_empty(), "no flush seen:\n{seen}");
    assert!(!readers.is_empty(), "no read seen:\n{seen}");
    assert!(
        writers.is_disjoint(&readers),
        "flushes and reads shared a connection: writers {writers:?}, readers {readers:?}"
    );

    // With one connection a node, reads and flushes share it (what the test above rules out).
    let one = format!("{}pool_size = 1\n", redis_config(&urls, false));
    let seen = monitored_scans(dir.path(), &node, "shared", &one, 20);
    let writers = clients_sending(&seen, "HINCRBY");
    let readers = clients_sending(&seen, "HGETALL");
    assert_eq!(writers.len(), 1, "{writers:?}");
    assert_eq!(writers, readers);
}

/// `spamc -L spam` (TELL) on the daemon's spamd listener, with `msg` on stdin: (exit code,
/// stdout, stderr).
fn spamc_learn(port: u16, msg: &[u8]) -> (i32, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new("spamc")
        .args(["-d", "127.0.0.1", "-p", &port.to_string(), "-L", "spam"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spamc is installed (scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("spamc's stdin")
        .write_all(msg)
        .expect("write the message to spamc");
    let out = child.wait_with_output().expect("spamc");
    (
        out.status.code().expect("spamc exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A learn as the web UI's page sends it from loopback: the session's CSRF token first, then
/// `POST /ui/api/learn?class=spam` with it, naming the daemon by its address and port.
fn ui_learn(d: &Daemon, msg: &[u8]) -> daemon::HttpReply {
    let lo = std::net::IpAddr::from([127, 0, 0, 1]);
    let host = format!("127.0.0.1:{}", d.http);
    let session = daemon::http_to(lo, d.http, &host, "GET /ui/api/session", &[], b"")
        .expect("GET /ui/api/session");
    assert_eq!(session.status, 200, "{}", session.text());
    let session = session.json();
    assert_eq!(session["role"], "admin", "{session}");
    let csrf = session["csrf"].as_str().expect("a CSRF token").to_string();
    assert_eq!(csrf.len(), 64, "{session}");
    daemon::http_to(
        lo,
        d.http,
        &host,
        "POST /ui/api/learn?class=spam",
        &[
            ("X-CSRF-Token", csrf.as_str()),
            ("Content-Type", "message/rfc822"),
        ],
        msg,
    )
    .expect("POST /ui/api/learn")
}

/// The learn records of the history: (listener, Message-ID) of each, sorted.
fn learn_records(d: &Daemon) -> Vec<(String, String)> {
    let r = d.get("/history?action=learn&limit=100");
    assert_eq!(r.status, 200, "{}", r.text());
    let page = r.json();
    let mut out: Vec<(String, String)> = page["records"]
        .as_array()
        .unwrap_or_else(|| panic!("records: {page}"))
        .iter()
        .map(|r| {
            assert_eq!(r["action"], "learn spam", "{r}");
            (
                r["listener"].as_str().unwrap_or_default().to_string(),
                r["message_id"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// One learn, three protocols: HTTP `/learnspam`, spamd `TELL` (the real `spamc -L spam`) and
/// the web UI's learn, all from loopback (the admin). With Redis up each is taken; with Redis
/// down each is refused as the same `LearnError::StoreUnavailable`, in its protocol's words
/// (503, a spamd error spamc exits non-zero on, 503), counted once as
/// `shrike_learns_refused_total{reason="store"}`, not as learned, and never in the history.
#[test]
fn one_learn_outcome_on_every_protocol_with_the_store_down() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = Node::start(dir.path(), daemon::free_port(), false);
    let urls = format!("[\"redis://127.0.0.1:{}\"]", node.port);
    let spamd = daemon::free_port();
    let config = format!(
        "{}[spamd]\nlisten = \"127.0.0.1:{spamd}\"\n[history]\nflush_ms = 100\n",
        redis_config(&urls, false)
    );
    let d = start(dir.path(), "a", &config);
    wait_until("the store connected", 10, || health_store(&d) == "ok");
    let learned = || d.learns("spam");
    let refused = || d.metric("shrike_learns_refused_total{reason=\"store\"}");
    assert_eq!((learned(), refused()), (0, 0));

    // Redis up: each protocol's learn is taken.
    let up = |id: &str| message("up@one.example", &format!("Learned while up {id}"), id);
    let r = d.post("/learnspam", &[], &up("up-http"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["success"], true, "{}", r.text());
    let (code, out, err) = spamc_learn(spamd, &up("up-spamd"));
    assert_eq!(code, 0, "{out}{err}\n{}", d.log_text());
    assert_eq!(out.trim(), "Message successfully un/learned", "{err}");
    let r = ui_learn(&d, &up("up-ui"));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["success"], true, "{}", r.text());
    assert_eq!(r.json()["trained"], true, "{}", r.text());
    assert_eq!((learned(), refused()), (3, 0));
    // The store has each learn's complaint.
    for id in ["up-http", "up-spamd", "up-ui"] {
        let subject = format!("Learned while up {id}");
        assert_eq!(window(&d, "subject", &subject, "complaint"), 1, "{id}");
    }
    // Sorted by listener, as `learn_records` sorts.
    let taken: Vec<(String, String)> = ["http", "spamd", "ui"]
        .iter()
        .map(|l| (l.to_string(), format!("<up-{l}@t.example>")))
        .collect();
    let bare = |records: Vec<(String, String)>| -> Vec<(String, String)> {
        // The history may keep a Message-ID with or without its angle brackets.
        records
            .into_iter()
            .map(|(l, m)| (l, format!("<{}>", m.trim_matches(['<', '>']))))
            .collect()
    };
    wait_until("the three learns in the history", 30, || {
        learn_records(&d).len() == 3
    });
    assert_eq!(bare(learn_records(&d)), taken);

    // Redis down: fresh messages (one already learned would be a duplicate, answered without
    // the store), each refused.
    node.kill9();
    wait_until("the store seen down", 15, || health_store(&d) == "degraded");
    let down = |id: &str| message("down@two.example", &format!("Learned while down {id}"), id);
    let r = d.post("/learnspam", &[], &down("down-http"));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.text().contains("the reputation store is unavailable"),
        "{}",
        r.text()
    );
    let (code, out, err) = spamc_learn(spamd, &down("down-spamd"));
    // The daemon answers `SPAMD/1.0 75` (EX_TEMPFAIL); libspamc 4.0's TELL does not read the
    // code of the status line and, finding the connection closed where it expects headers,
    // makes spamc exit 74 (EX_IOERR). Either way: a failure, and no "learned" line.
    assert!(
        matches!(code, 74 | 75),
        "spamc -L with the store down exited {code}: {out}{err}"
    );
    assert!(!out.contains("un/learned"), "{out}");
    let r = ui_learn(&d, &down("down-ui"));
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(
        r.text().contains("the reputation store is unavailable"),
        "{}",
        r.text()
    );
    assert_eq!(refused(), 3, "one refusal per protocol, for the store");
    let log = d.log_text();
    for listener in ["http", "spamd", "ui"] {
        assert!(
            log.lines().any(|l| l.contains("learn refused")
                && l.contains(&format!("listener=\"{listener}\""))
                && l.contains("the reputation store is unavailable")),
            "no store refusal logged for {listener}:\n{log}"
        );
    }
    assert_eq!(learned(), 3, "no refused learn counted as learned");
    for reason in ["busy", "timeout", "stopping", "durability"] {
        let name = format!("shrike_learns_refused_total{{reason=\"{reason}\"}}");
        assert_eq!(d.metric(&name), 0, "{reason}");
    }

    // The history: a scan recorded after the refusals is there, and before it only the three
    // learns taken.
    let marker = d.post(
        "/checkv2",
        &[("Queue-Id", "AFTERDOWN1")],
        &message("m@three.example", "After the refusals", "marker"),
    );
    assert_eq!(marker.status, 200, "{}", marker.text());
    wait_until("the scan after the refusals in the history", 30, || {
        let r = d.get("/history?queue_id=AFTERDOWN1");
        r.status == 200 && r.json()["records"].as_array().is_some_and(|a| a.len() == 1)
    });
    assert_eq!(bare(learn_records(&d)), taken);
}
