//! The decision history through the binary: verdicts and learns sent with the real `rspamc`,
//! found with `GET /history` and with `shrike history` (daemon running and stopped); records a
//! flush wrote survive `kill -9`; history off writes nothing; `privacy = "hash"`. The milter's
//! records are checked behind a real Postfix in tests/postfix.rs.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use daemon::{wait_until, Daemon, Options};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn rspamc(d: &Daemon, args: &[&str], fixture: &str) -> String {
    let out = Command::new("rspamc")
        .args(["-h", &format!("127.0.0.1:{}", d.http)])
        .args(args)
        .arg(data(fixture))
        .output()
        .expect("rspamc is installed (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "rspamc {args:?} failed: {text}");
    text
}

/// `shrike history --data DIR ARGS`: stdout, stderr.
fn cli(data: &Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("history")
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .expect("run shrike history");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "shrike history {args:?}: {stderr}");
    (stdout, stderr)
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn records(d: &Daemon, query: &str) -> serde_json::Value {
    let r = d.get(&format!("/history?{query}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn count(d: &Daemon, query: &str) -> usize {
    records(d, query)["records"].as_array().unwrap().len()
}

#[test]
fn rspamc_verdicts_and_learns_are_found_over_http_and_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[history]\nflush_ms = 200\n".into()),
            ..Options::default()
        },
    );
    rspamc(
        &d,
        &[
            "-i",
            "192.0.2.9",
            "-F",
            "s@example.net",
            "-r",
            "a@example.com",
            "--helo",
            "mx.example.net",
            "--hostname",
            "mx.example.net",
            "-u",
            "alice",
        ],
        "gtube.eml",
    );
    rspamc(
        &d,
        &["-i", "2001:db8::7", "-F", "h@example.org"],
        "daemon/ham.eml",
    );
    rspamc(&d, &["learn_ham"], "daemon/ham.eml");
    wait_until("three records", 30, || count(&d, "") == 3);

    let page = records(&d, "");
    let all = page["records"].as_array().unwrap();
    assert!(page["cursor"].is_null(), "one page holds them all");
    // Newest first: the learn, the ham, GTUBE.
    assert_eq!(all[0]["action"], "learn ham");
    assert_eq!(all[1]["action"], "no action");
    let gtube = &all[2];
    assert_eq!(gtube["action"], "reject", "{gtube}");
    assert_eq!(gtube["listener"], "http");
    assert_eq!(gtube["ip"], "192.0.2.9");
    assert_eq!(gtube["sender"], "s@example.net");
    assert_eq!(gtube["rcpt"], serde_json::json!(["a@example.com"]));
    assert_eq!(gtube["helo"], "mx.example.net");
    assert_eq!(gtube["rdns"], "mx.example.net");
    assert_eq!(gtube["user"], "alice");
    assert_eq!(gtube["subject"], "Test spam mail (GTUBE)");
    assert!(
        gtube["message_id"].as_str().unwrap().contains('@'),
        "{gtube}"
    );
    assert!(gtube["size"].as_u64().unwrap() > 100);
    // GTUBE forces the action; its own score is 0.
    assert!(gtube["score"].as_f64().is_some(), "{gtube}");
    assert_eq!(gtube["required_score"], 15.0, "{gtube}");
    assert!(gtube["generation"].as_u64().unwrap() >= 1);
    let symbols = gtube["symbols"].as_array().unwrap();
    assert!(symbols.iter().any(|s| s["name"] == "GTUBE"), "{gtube}");
    assert!(
        all[0]["message_id"].is_string(),
        "the learn names its message"
    );

    // Each filter over HTTP.
    assert_eq!(count(&d, "action=reject"), 1);
    assert_eq!(count(&d, "action=learn"), 1);
    assert_eq!(count(&d, "action=no_action,reject"), 2);
    assert_eq!(count(&d, "symbol=GTUBE"), 1);
    assert_eq!(count(&d, "sender=S%40Example.net"), 1);
    assert_eq!(count(&d, "sender=%40example.org"), 1);
    assert_eq!(count(&d, "rcpt=a%40example.com"), 1);
    assert_eq!(count(&d, "ip=192.0.2.0%2F24"), 1);
    assert_eq!(count(&d, "ip=2001:db8::7"), 1);
    let score = gtube["score"].as_f64().unwrap();
    assert_eq!(
        count(
            &d,
            &format!("min_score={score}&max_score={score}&action=reject")
        ),
        1
    );
    assert_eq!(
        count(&d, &format!("min_score={}&action=reject", score + 0.01)),
        0
    );
    assert_eq!(count(&d, "max_score=-1000"), 0);
    assert_eq!(count(&d, "from=1h"), 3);
    assert_eq!(count(&d, "to=0"), 0, "nothing before 1970");
    let mid = gtube["message_id"]
        .as_str()
        .unwrap()
        .trim_matches(['<', '>']);
    assert_eq!(count(&d, &format!("message_id=%3C{mid}%3E")), 1);
    // Paging: one record a page, each cursor continues where the last page ended.
    let mut seen = Vec::new();
    let mut q = "limit=1".to_string();
    loop {
        let p = records(&d, &q);
        seen.extend(
            p["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["action"].clone()),
        );
        match p["cursor"].as_str() {
            Some(c) => q = format!("limit=1&cursor={c}"),
            None => break,
        }
    }
    assert_eq!(seen, vec!["learn ham", "no action", "reject"]);
    // Bad parameters are refused with the reason.
    let bad = d.get("/history?action=nuke");
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("action"), "{}", bad.text());
    assert_eq!(d.get("/history?frm=1").status, 400);
    assert_eq!(d.post("/history", &[], b"").status, 405);

    let health = d.get("/health").json();
    assert_eq!(health["history"]["enabled"], true);
    assert_eq!(health["history"]["written"], 3);
    assert_eq!(health["history"]["dropped"], 0);
    let metrics = d.get("/metrics").text();
    assert!(
        metrics.contains("shrike_history_records_total 3"),
        "{metrics}"
    );
    assert!(metrics.contains("shrike_history_dropped_total 0"));

    // The CLI reads the directory while the daemon runs, and after it stopped.
    let (out, _) = cli(&d.data, &["--json", "--action", "reject"]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["sender"], "s@example.net");
    d.stop();
    let (out, _) = cli(&d.data, &["--json"]);
    assert_eq!(json_lines(&out).len(), 3);
    let (out, _) = cli(
        &d.data,
        &["--json", "--symbol", "gtube", "--ip", "192.0.2.9"],
    );
    assert_eq!(json_lines(&out).len(), 1);
    let (out, _) = cli(&d.data, &["--json", "--sender", "nobody@example.net"]);
    assert!(out.is_empty(), "{out}");
    let (out, _) = cli(
        &d.data,
        &["--json", "--since", "1h", "--until", "2099-01-01"],
    );
    assert_eq!(json_lines(&out).len(), 3);
    let (out, _) = cli(&d.data, &["--json", "--until", "2020-01-01"]);
    assert!(out.is_empty());
    let (table, _) = cli(&d.data, &[]);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(rows[0].starts_with("TIME (UTC)"), "{table}");
    assert!(
        rows[3].contains("reject") && rows[3].contains("GTUBE("),
        "{table}"
    );
    assert!(
        rows[3].contains("192.0.2.9") && rows[3].contains("s@example.net"),
        "{table}"
    );
    // --limit and the cursor it prints.
    let (out, err) = cli(&d.data, &["--json", "--limit", "2"]);
    assert_eq!(json_lines(&out).len(), 2);
    let cursor = err
        .lines()
        .find_map(|l| l.strip_prefix("shrike: more records: --cursor "))
        .unwrap_or_else(|| panic!("no cursor: {err}"));
    let (out, err) = cli(&d.data, &["--json", "--limit", "2", "--cursor", cursor]);
    let rest = json_lines(&out);
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0]["action"], "reject");
    assert!(!err.contains("more records"), "{err}");
    // A bad flag value is an error, not an empty answer.
    let bad = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(["history", "--data"])
        .arg(&d.data)
        .args(["--since", "last tuesday"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    // It names the flag given, not the /history parameter it becomes.
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(said.contains("--since: not a time"), "{said}");
    assert!(!said.contains("from"), "{said}");
}

/// Records a flush wrote survive `kill -9`; the restarted daemon writes a new segment beside
/// the old ones and the queries read both.
#[test]
fn flushed_records_survive_kill9() {
    let dir = tempfile::tempdir().unwrap();
    let gtube = std::fs::read(data("gtube.eml")).unwrap();
    let mut d = Daemon::start(dir.path(), Options::default());
    let ports = (d.http, d.milter);
    for i in 0..5 {
        let ip = format!("192.0.2.{i}");
        let r = d.post("/checkv2", &[("IP", &ip)], &gtube);
        assert_eq!(r.status, 200);
    }
    // Acknowledged: the writer counted them written (the default flush_ms is 1000).
    wait_until("five records written", 30, || {
        d.get("/health").json()["history"]["written"] == 5
    });
    std::thread::sleep(Duration::from_millis(1100));
    d.kill9();
    let (out, _) = cli(&d.data, &["--json"]);
    assert_eq!(
        json_lines(&out).len(),
        5,
        "read with the daemon dead: {out}"
    );

    let mut d = Daemon::start(
        dir.path(),
        Options {
            ports: Some(ports),
            ..Options::default()
        },
    );
    assert_eq!(count(&d, ""), 5);
    assert_eq!(count(&d, "ip=192.0.2.3"), 1);
    // Three more, flushed; two more and a kill before their flush: at most those two are
    // lost, the eight stay, and the segment the kill cut short is read.
    for i in 5..8 {
        let ip = format!("192.0.2.{i}");
        assert_eq!(d.post("/checkv2", &[("IP", &ip)], &gtube).status, 200);
    }
    wait_until("three records written", 30, || {
        d.get("/health").json()["history"]["written"] == 3
    });
    for i in 8..10 {
        let ip = format!("192.0.2.{i}");
        assert_eq!(d.post("/checkv2", &[("IP", &ip)], &gtube).status, 200);
    }
    d.kill9();
    let (out, err) = cli(&d.data, &["--json"]);
    let n = json_lines(&out).len();
    assert!((8..=10).contains(&n), "{n}: {err}");
    let segments = std::fs::read_dir(d.data.join("history"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "hseg")
        })
        .count();
    assert_eq!(segments, 2, "a restart starts a new segment");
}

#[test]
fn history_off_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[history]\nenabled = false\n".into()),
            ..Options::default()
        },
    );
    let gtube = std::fs::read(data("gtube.eml")).unwrap();
    assert_eq!(d.post("/checkv2", &[], &gtube).status, 200);
    assert_eq!(d.post("/learnspam", &[], &gtube).status, 200);
    let r = d.get("/history");
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(r.text().contains("history is off"));
    assert_eq!(d.get("/health").json()["history"]["enabled"], false);
    assert!(!d.get("/metrics").text().contains("shrike_history"));
    std::thread::sleep(Duration::from_millis(1200));
    d.stop();
    assert!(!d.data.join("history").exists(), "no history directory");
    let (out, _) = cli(&d.data, &["--json"]);
    assert!(out.is_empty());
}

#[test]
fn hashed_privacy_hides_addresses_and_still_finds_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[history]\nprivacy = \"hash\"\nflush_ms = 100\n".into()),
            ..Options::default()
        },
    );
    rspamc(
        &d,
        &["-F", "Secret@Example.net", "-r", "boss@example.com"],
        "gtube.eml",
    );
    wait_until("a record", 30, || count(&d, "") == 1);
    // A domain is found too: the hashed address keeps its domain's hash.
    assert_eq!(count(&d, "rcpt=@example.com"), 1);
    assert_eq!(count(&d, "sender=@EXAMPLE.net"), 1);
    assert_eq!(count(&d, "rcpt=@example.net"), 0);
    d.stop();
    for (flag, value, found) in [
        ("--rcpt", "@example.com", 1),
        ("--sender", "@example.net", 1),
        ("--rcpt", "@example.net", 0),
    ] {
        let (out, _) = cli(&d.data, &["--json", flag, value]);
        assert_eq!(json_lines(&out).len(), found, "{flag} {value}");
    }
    let (out, _) = cli(&d.data, &["--json", "--sender", "secret@example.net"]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "found by the plain address");
    let r = &lines[0];
    assert!(r["sender"].as_str().unwrap().starts_with("h:"), "{r}");
    assert!(r["subject"].as_str().unwrap().starts_with("h:"), "{r}");
    assert!(r["rcpt"][0].as_str().unwrap().starts_with("h:"), "{r}");
    let lower = out.to_lowercase();
    assert!(
        !lower.contains("secret@") && !lower.contains("boss@"),
        "{out}"
    );
    assert!(!out.contains("Test spam mail"), "{out}");
    assert_eq!(
        json_lines(&cli(&d.data, &["--json", "--rcpt", "boss@example.com"]).0).len(),
        1
    );
    assert!(d.data.join("history/key").exists());
}

/// A local address that is not loopback (the route to a documentation address; no packet is
/// sent).
fn non_loopback_ip() -> std::net::IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.123:9").expect("a route off loopback");
    let ip = s.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "{ip}");
    ip
}

/// `/history` follows the admin rules of `/reload`: a client off loopback needs the password.
#[test]
fn history_needs_loopback_or_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let ip = non_loopback_ip();
    let port = daemon::free_port();
    std::fs::write(
        dir.path().join("shrike.toml"),
        "[http]\npassword = \"s3cret\"\n",
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .arg("--config")
        .arg(dir.path().join("shrike.toml"))
        .args([
            "serve",
            "--milter",
            "off",
            "--http",
            &format!("0.0.0.0:{port}"),
            "--data",
        ])
        .arg(dir.path().join("data"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let request = |headers: &[(&str, &str)]| -> u16 {
        let mut s = std::net::TcpStream::connect((ip, port)).unwrap();
        use std::io::{Read, Write};
        let mut req =
            format!("GET /history HTTP/1.1\r\nHost: {ip}:{port}\r\nConnection: close\r\n");
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out.split(' ').nth(1).unwrap().parse().unwrap()
    };
    wait_until("the daemon", 30, || {
        daemon::http(port, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 200)
    });
    // 401: a password could let this client in.
    assert_eq!(request(&[]), 401);
    assert_eq!(request(&[("Password", "s3cret")]), 200);
    assert_eq!(request(&[("Password", "wrong")]), 401);
    assert_eq!(
        daemon::http(port, "GET", "/history", &[], b"")
            .unwrap()
            .status,
        200
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// The spamd listener records its verdicts too (the real `spamc`).
#[test]
fn spamc_verdicts_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let port = daemon::free_port();
    let mut d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "[spamd]\nlisten = \"127.0.0.1:{port}\"\n[history]\nflush_ms = 100\n"
            )),
            ..Options::default()
        },
    );
    let out = Command::new("spamc")
        .args(["-d", "127.0.0.1", "-p", &port.to_string(), "-c"])
        .stdin(std::fs::File::open(data("gtube.eml")).unwrap())
        .output()
        .expect("spamc is installed (scripts/test.sh installs it)");
    assert!(!out.stdout.is_empty(), "spamc answered");
    wait_until("a record", 30, || count(&d, "") == 1);
    let r = &records(&d, "")["records"][0];
    assert_eq!(r["listener"], "spamd", "{r}");
    assert_eq!(r["action"], "reject", "{r}");
    assert_eq!(r["subject"], "Test spam mail (GTUBE)", "{r}");
    // spamc -L spam: a learn, recorded as the spamd listener's.
    let out = Command::new("spamc")
        .args(["-d", "127.0.0.1", "-p", &port.to_string(), "-L", "spam"])
        .stdin(std::fs::File::open(data("daemon/ham.eml")).unwrap())
        .output()
        .expect("spamc");
    assert!(!out.stdout.is_empty(), "spamc answered");
    wait_until("the learn's record", 30, || count(&d, "action=learn") == 1);
    let r = &records(&d, "action=learn")["records"][0];
    assert_eq!(
        (&r["action"], &r["listener"]),
        (&"learn spam".into(), &"spamd".into()),
        "{r}"
    );
    // Exim's variant=rspamd on the HTTP port: its Queue-Id is the record's queue id.
    use std::io::{Read, Write};
    let gtube = std::fs::read(data("gtube.eml")).unwrap();
    let mut s = std::net::TcpStream::connect(("127.0.0.1", d.http)).unwrap();
    let mut request = format!(
        "CHECK RSPAMC/1.3\r\nContent-length: {}\r\nQueue-Id: 1wExim-000Q1d-7A\r\n\
         From: <sender@example.org>\r\nRcpt: <bob@example.com>\r\nIP: 192.0.2.9\r\n\r\n",
        gtube.len()
    )
    .into_bytes();
    request.extend_from_slice(&gtube);
    s.write_all(&request).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("RSPAMD/1.3 0 EX_OK\r\n"), "{reply}");
    wait_until("the legacy check's record", 30, || {
        count(&d, "queue_id=1wExim-000Q1d-7A") == 1
    });
    let r = &records(&d, "queue_id=1wExim-000Q1d-7A")["records"][0];
    assert_eq!(r["action"], "reject", "{r}");
    d.stop();
}
