//! Outbound mail through the binary (docs/outbound.md): the direction from the HTTP `User`
//! header (and the real `rspamc --user`), the milter's `{auth_authen}` and `[outbound]
//! networks`; outbound thresholds; outbound mail feeding no inbound reputation; replies to
//! Message-IDs our users sent (`REPLY`) with the memory store and with two daemons on a real
//! Redis Cluster, and a random `In-Reply-To` earning nothing; `KNOWN_CORRESPONDENT` only for a
//! sender that passes SPF (a DNS server on loopback); spamc's `User` outbound only with
//! `[spamd] user_is_sender`; per-user limits stopping a user who sends 1,000 messages to 1,000
//! recipients while another user goes on.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/dns_server.rs"]
mod dns_server;
#[allow(dead_code)]
#[path = "common/mta.rs"]
mod mta;
#[allow(dead_code)]
#[path = "common/postfix.rs"]
mod postfix;
#[allow(dead_code)]
#[path = "common/redis.rs"]
mod redis;

use std::path::Path;
use std::process::Command;

use daemon::{wait_until, Daemon, Options};

fn message(from: &str, to: &str, subject: &str, id: &str, extra: &str) -> String {
    format!(
        "From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nDate: Sun, 29 Nov 2026 10:00:00 +0000\r\n\
         Message-ID: <{id}>\r\n{extra}MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n\
         Hello,\r\n\r\nhere are the figures for the third quarter we talked about on the phone.\r\n\
         Let me know what you think.\r\n"
    )
}

fn check(d: &Daemon, raw: &str, headers: &[(&str, &str)]) -> serde_json::Value {
    let r = d.post("/checkv2", headers, raw.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

fn symbols(v: &serde_json::Value) -> Vec<String> {
    v["symbols"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

fn start(dir: &Path, config: &str) -> Daemon {
    Daemon::start(
        dir,
        Options {
            config: Some(config.to_string()),
            workers: Some(2),
            ..Options::default()
        },
    )
}

fn seen_24h(d: &Daemon, kind: &str, value: &str) -> u64 {
    let value = value.replace(' ', "%20").replace('@', "%40");
    let r = d.get(&format!("/reputation?type={kind}&value={value}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["keys"][0]["windows"]["24h"]["seen"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn outbound_mail_is_judged_apart_feeds_no_inbound_reputation_and_replies_count() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(
        dir.path(),
        "[outbound]\nnetworks = [\"192.0.2.0/24\"]\n[outbound.actions]\ngreylist = 2.0\nadd_header = 2.5\n",
    );
    let out = message(
        "Alice <alice@example.com>",
        "Bob <bob@partner.example>",
        "Q3 figures",
        "q3.1@example.com",
        "",
    );
    let user = [
        ("User", "alice@example.com"),
        ("Rcpt", "bob@partner.example"),
    ];

    // The direction: a login, or a trusted network without one; not a stranger.
    let v = check(&d, &out, &user);
    assert!(symbols(&v).contains(&"OUTBOUND".into()), "{v}");
    assert_eq!(v["action"], "no action", "{v}");
    let v = check(&d, &out, &[("IP", "192.0.2.7")]);
    assert!(symbols(&v).contains(&"OUTBOUND".into()), "{v}");
    let v = check(&d, &out, &[("IP", "203.0.113.7")]);
    assert!(!symbols(&v).contains(&"OUTBOUND".into()), "{v}");

    // The real rspamc's --user makes it outbound too.
    let file = dir.path().join("out.eml");
    std::fs::write(&file, &out).unwrap();
    let text = String::from_utf8(
        Command::new("rspamc")
            .args([
                "-h",
                &format!("127.0.0.1:{}", d.http),
                "--user",
                "alice@example.com",
            ])
            .arg(&file)
            .output()
            .expect("rspamc is installed (scripts/test.sh installs it)")
            .stdout,
    )
    .unwrap();
    assert!(text.contains("OUTBOUND"), "{text}");

    // Outbound thresholds: a login sending as another domain scores 3 (OUTBOUND_FROM_FOREIGN),
    // over [outbound.actions] add_header = 2.5; the same message inbound is judged by
    // [verdict] (6) and has no such symbol.
    let foreign = out.replace(
        "Alice <alice@example.com>",
        "Security <security@bank.example>",
    );
    let v = check(&d, &foreign, &user);
    assert!(symbols(&v).contains(&"OUTBOUND_FROM_FOREIGN".into()), "{v}");
    assert_eq!(v["action"], "add header", "{v}");
    let v = check(&d, &foreign, &[]);
    assert!(
        !symbols(&v).contains(&"OUTBOUND_FROM_FOREIGN".into()),
        "{v}"
    );
    assert_eq!(v["action"], "no action", "{v}");

    // None of the outbound scans above (four of alice's From) counted in inbound reputation;
    // the inbound ones did.
    assert_eq!(seen_24h(&d, "from", "alice@example.com"), 1);
    assert_eq!(seen_24h(&d, "from", "security@bank.example"), 1);
    assert_eq!(seen_24h(&d, "subject", "Q3 figures"), 2);

    // Bob's reply names alice's Message-ID: REPLY, a negative score.
    let reply = message(
        "Bob <bob@partner.example>",
        "Alice <alice@example.com>",
        "Re: Q3 figures",
        "r1@partner.example",
        "In-Reply-To: <q3.1@example.com>\r\nReferences: <q3.1@example.com>\r\n",
    );
    let inbound = [("IP", "203.0.113.9"), ("Rcpt", "alice@example.com")];
    let v = check(&d, &reply, &inbound);
    assert!(
        v["symbols"]["REPLY"]["score"].as_f64().unwrap() < 0.0,
        "{v}"
    );
    assert!(!symbols(&v).contains(&"OUTBOUND".into()), "{v}");
    // A random id, or one made like ours but never sent: nothing.
    for id in [
        "<7f3a9c1e@example.com>",
        "<q3.2@example.com>",
        "<Q3.1@example.com>",
    ] {
        let forged = reply.replace("<q3.1@example.com>", id);
        let v = check(&d, &forged, &inbound);
        assert!(!symbols(&v).contains(&"REPLY".into()), "{id}: {v}");
    }
    // Without DNS nobody authenticated: bob, whom alice wrote to, is no known correspondent.
    assert!(!symbols(&check(&d, &reply, &inbound)).contains(&"KNOWN_CORRESPONDENT".into()));
    // Mail refused on the way out is not sent: its Message-ID earns no REPLY.
    let gtube = message(
        "Alice <alice@example.com>",
        "Bob <bob@partner.example>",
        "test",
        "gtube.1@example.com",
        "",
    )
    .replace(
        "Let me know",
        "XJS*C4JDBQADN1.NSBN3*2IDNEN*GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL*C.34X\r\nLet me know",
    );
    assert_eq!(check(&d, &gtube, &user)["action"], "reject");
    let v = check(
        &d,
        &reply.replace("<q3.1@example.com>", "<gtube.1@example.com>"),
        &inbound,
    );
    assert!(!symbols(&v).contains(&"REPLY".into()), "{v}");
    assert_eq!(d.metric("shrike_outbound_scans_total"), 5);
}

/// Over the milter the login is `{auth_authen}` (Postfix's macro of an authenticated session).
#[test]
fn the_milter_takes_the_direction_from_auth_authen() {
    use shrike::proto::milter::{Command as Milter, Reply};
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path(), "[milter]\nadd_headers = true\n");
    let raw = message(
        "Alice <alice@example.com>",
        "Bob <bob@partner.example>",
        "milter",
        "m1@example.com",
        "",
    );
    let session = |login: Option<&str>| -> Vec<Reply> {
        let mut m = mta::Mta::connect(d.milter);
        m.send(&[Milter::OptNeg(mta::POSTFIX)]);
        m.until_final();
        let mut cmds =
            mta::transaction("192.0.2.10", "mail.example.com", "alice@example.com", &raw);
        if let Some(login) = login {
            cmds.insert(
                2,
                Milter::Macro {
                    stage: b'M',
                    pairs: vec![(b"{auth_authen}".to_vec(), login.as_bytes().to_vec())],
                },
            );
        }
        m.send(&cmds);
        m.until_final()
    };
    let outbound = |replies: &[Reply]| {
        replies.iter().any(|r| {
            format!("{r:?}").contains("X-Spam-Symbols") && format!("{r:?}").contains("OUTBOUND")
        })
    };
    let with = session(Some("alice@example.com"));
    assert!(outbound(&with), "{with:?}");
    let without = session(None);
    assert!(!outbound(&without), "{without:?}");
    // The milter's outbound message is what a reply is checked against.
    let reply = message(
        "Bob <bob@partner.example>",
        "Alice <alice@example.com>",
        "Re: milter",
        "r2@partner.example",
        "In-Reply-To: <m1@example.com>\r\n",
    );
    let v = check(&d, &reply, &[("IP", "203.0.113.9")]);
    assert!(symbols(&v).contains(&"REPLY".into()), "{v}");
}

/// A stolen password: one user sends 1,000 messages, each to a new recipient, within a minute.
/// The recipients limit (100 an hour) stops it at the 101st with a soft reject; another user
/// goes on; one log line, the metric, and the Status page's list name the user.
#[test]
fn a_user_over_the_limits_is_stopped_and_another_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let d = start(
        dir.path(),
        "[outbound.limits]\nmessages = 5000\nrecipients = 100\nburst = 0\nspam = 0\n",
    );
    let started = std::time::Instant::now();
    let mut actions = Vec::new();
    for i in 0..1000 {
        let rcpt = format!("victim{i}@targets.example");
        let raw = message(
            "Mallory <mallory@example.com>",
            &rcpt,
            "invoice",
            &format!("m{i}@example.com"),
            "",
        );
        let v = check(
            &d,
            &raw,
            &[("User", "mallory@example.com"), ("Rcpt", &rcpt)],
        );
        if i == 100 {
            let limit = &v["symbols"]["OUTBOUND_LIMIT"]["options"];
            assert!(limit.to_string().contains("recipients 101 > 100"), "{v}");
        }
        actions.push(v["action"].as_str().unwrap().to_string());
    }
    assert!(
        started.elapsed().as_secs() < 60,
        "the 1,000 took over a minute"
    );
    assert!(
        actions[..100].iter().all(|a| a == "no action"),
        "{actions:?}"
    );
    assert!(
        actions[100..].iter().all(|a| a == "soft reject"),
        "{actions:?}"
    );
    // Another user, a message to one of the same recipients: unaffected.
    let v = check(
        &d,
        &message(
            "Alice <alice@example.com>",
            "victim5@targets.example",
            "hi",
            "a1@example.com",
            "",
        ),
        &[
            ("User", "alice@example.com"),
            ("Rcpt", "victim5@targets.example"),
        ],
    );
    assert_eq!(v["action"], "no action", "{v}");
    assert!(!symbols(&v).contains(&"OUTBOUND_LIMIT".into()), "{v}");
    assert_eq!(d.metric("shrike_outbound_limited_total"), 900);
    let log = d.log_text();
    assert_eq!(
        log.matches("outbound user over a limit").count(),
        1,
        "one line per user per interval:\n{log}"
    );
    let status = d.get("/ui/api/status").json();
    let limited = status["outbound_limited"].as_array().unwrap();
    assert_eq!(limited.len(), 1, "{status}");
    assert_eq!(limited[0]["user"], "mallory@example.com");
    assert_eq!(limited[0]["messages"], 900);
}

/// Two daemons on one real Redis Cluster: the submission daemon's outbound Message-ID is what
/// the MX daemon's reply check finds.
#[test]
fn replies_are_shared_through_a_redis_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = redis::Cluster::start(dir.path());
    let config = format!(
        "[store]\nbackend = \"redis\"\n[store.redis]\nurls = {}\ncluster = true\nprefix = \"o\"\n\
         timeout_ms = 200\nflush_interval_ms = 20\n",
        cluster.urls()
    );
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let submission = start(&a_dir, &config);
    let mx = start(&b_dir, &config);
    let health = |d: &Daemon| {
        d.get("/health").json()["store"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    for d in [&submission, &mx] {
        wait_until("the store connected", 15, || health(d) == "ok");
    }
    let out = message(
        "Alice <alice@example.com>",
        "Bob <bob@partner.example>",
        "Q3 figures",
        "redis.1@example.com",
        "",
    );
    let v = check(
        &submission,
        &out,
        &[
            ("User", "alice@example.com"),
            ("Rcpt", "bob@partner.example"),
        ],
    );
    assert!(symbols(&v).contains(&"OUTBOUND".into()), "{v}");
    let reply = message(
        "Bob <bob@partner.example>",
        "Alice <alice@example.com>",
        "Re: Q3 figures",
        "r1@partner.example",
        "In-Reply-To: <redis.1@example.com>\r\n",
    );
    let inbound = [("IP", "203.0.113.9"), ("Rcpt", "alice@example.com")];
    wait_until("the MX daemon sees the reply", 10, || {
        symbols(&check(&mx, &reply, &inbound)).contains(&"REPLY".into())
    });
    let forged = reply.replace("<redis.1@example.com>", "<redis.2@example.com>");
    assert!(!symbols(&check(&mx, &forged, &inbound)).contains(&"REPLY".into()));
    // The outbound scan put nothing in inbound reputation, on Redis either (its Message-ID,
    // written in the same flush, is there by now).
    assert_eq!(seen_24h(&mx, "from", "alice@example.com"), 0);
    wait_until("the MX daemon's own scans counted", 5, || {
        seen_24h(&mx, "from", "bob@partner.example") >= 2
    });
}

/// spamc's `User` (`spamc -u`) is the local account a delivery is for: not a login unless the
/// operator says so (`[spamd] user_is_sender`).
#[test]
fn spamc_user_is_a_sender_only_when_configured() {
    let raw = message(
        "Alice <alice@example.com>",
        "Bob <bob@partner.example>",
        "spamc",
        "s1@example.com",
        "",
    );
    for (configured, outbound) in [(false, false), (true, true)] {
        let dir = tempfile::tempdir().unwrap();
        let port = daemon::free_port();
        let d = start(
            dir.path(),
            &format!("[spamd]\nlisten = \"127.0.0.1:{port}\"\nuser_is_sender = {configured}\n"),
        );
        let mut child = Command::new("spamc")
            .args([
                "-d",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-u",
                "alice@example.com",
            ])
            .arg("-y")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spamc is installed (scripts/test.sh installs it)");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(raw.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(said.contains("OUTBOUND"), outbound, "{configured}: {said}");
        assert_eq!(
            d.metric("shrike_outbound_scans_total"),
            u64::from(outbound),
            "{}",
            d.log_text()
        );
    }
}

/// KNOWN_CORRESPONDENT through the daemon with its network checks against a DNS server on
/// loopback: bob, whom alice wrote to, passes SPF from his own network; the same From from
/// another address fails SPF and earns nothing.
#[test]
fn a_known_correspondent_needs_the_sender_authenticated() {
    let dns = dns_server::DnsServer::start();
    dns.txt("partner.example", "v=spf1 ip4:198.51.100.20 -all");
    let dir = tempfile::tempdir().unwrap();
    let d = start(dir.path(), &dns.dns_section(3000));
    let out = message(
        "Alice <alice@example.com>",
        "Bob <bob@partner.example>",
        "contract",
        "c1@example.com",
        "",
    );
    let v = check(
        &d,
        &out,
        &[
            ("User", "alice@example.com"),
            ("Rcpt", "bob@partner.example"),
        ],
    );
    assert!(symbols(&v).contains(&"OUTBOUND".into()), "{v}");
    // A new message from bob, not a reply.
    let from_bob = message(
        "Bob <bob@partner.example>",
        "Alice <alice@example.com>",
        "signed copy",
        "b7@partner.example",
        "",
    );
    let inbound = |ip: &'static str| {
        [
            ("IP", ip),
            ("Helo", "mail.partner.example"),
            ("From", "bob@partner.example"),
            ("Rcpt", "alice@example.com"),
        ]
    };
    let v = check(&d, &from_bob, &inbound("198.51.100.20"));
    assert!(symbols(&v).contains(&"R_SPF_ALLOW".into()), "{v}");
    assert!(
        v["symbols"]["KNOWN_CORRESPONDENT"]["score"]
            .as_f64()
            .unwrap()
            < 0.0,
        "{v}"
    );
    let v = check(&d, &from_bob, &inbound("203.0.113.66"));
    assert!(symbols(&v).contains(&"R_SPF_FAIL".into()), "{v}");
    assert!(!symbols(&v).contains(&"KNOWN_CORRESPONDENT".into()), "{v}");
    // Nor for a recipient who never wrote to bob.
    let carol = [
        ("IP", "198.51.100.20"),
        ("Helo", "mail.partner.example"),
        ("From", "bob@partner.example"),
        ("Rcpt", "carol@example.com"),
    ];
    let v = check(
        &d,
        &from_bob.replace("alice@example.com", "carol@example.com"),
        &carol,
    );
    assert!(!symbols(&v).contains(&"KNOWN_CORRESPONDENT".into()), "{v}");
}

/// Behind a real Postfix (the harness in ../shared/tools/mta), mail from a host in `[outbound]
/// networks` (here the loopback client of Postfix's submission) is outbound: it reaches the
/// sink marked `OUTBOUND`, and a reply to it later earns `REPLY`. (The harness's Postfix has no
/// SASL, so `{auth_authen}` is sent by the milter client of the test above.)
#[test]
fn postfix_mail_from_a_trusted_network_is_outbound() {
    let tmp = tempfile::tempdir().unwrap();
    let harness = postfix::harness_dir(tmp.path());
    let d = start(
        tmp.path(),
        "[outbound]\nnetworks = [\"127.0.0.1/32\"]\n[milter]\nadd_headers = true\n",
    );
    let pf = postfix::Postfix::up(&harness, d.milter);
    let id = format!("pf-{}@example.com", std::process::id());
    let file = tmp.path().join("out.eml");
    std::fs::write(
        &file,
        message(
            "Alice <alice@example.com>",
            "Bob <bob@example.com>",
            "Q4 plan",
            &id,
            "",
        ),
    )
    .unwrap();
    let line = pf.send(&file);
    assert_eq!(postfix::eod(&line), "250", "{line}\n{}", pf.maillog());
    let got = pf
        .delivered(&id)
        .unwrap_or_else(|| panic!("not in the sink\n{}", pf.maillog()));
    let symbols_line = got
        .lines()
        .find(|l| l.starts_with("X-Spam-Symbols:"))
        .unwrap_or_else(|| panic!("{got}"));
    assert!(got.contains("OUTBOUND"), "{symbols_line}\n{got}");
    let reply = message(
        "Bob <bob@example.com>",
        "Alice <alice@example.com>",
        "Re: Q4 plan",
        "r9@example.net",
        &format!("In-Reply-To: <{id}>\r\n"),
    );
    let v = check(&d, &reply, &[("IP", "203.0.113.9")]);
    assert!(symbols(&v).contains(&"REPLY".into()), "{v}");
}
