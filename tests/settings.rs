//! Per-recipient settings (`[[settings]]`, docs/settings.md) through real parts: one message to
//! two recipient domains through a real Postfix and the milter gets each domain's action (and
//! the strictest for both at once); a reload (POST /reload, SIGHUP) swaps them without a
//! restart, a broken file keeps the previous ones (422); the real `rspamc` chooses an entry by
//! `Settings-ID`; `shrike rules list --settings` prints an entry's effective set.
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
use std::time::{Duration, Instant};

use daemon::{Daemon, Options};
use postfix::{eod, harness_dir, Postfix};

/// A message the shipped rules score between add header (6) and reject (15).
const TAGGED: &str = "tests/data/daemon/add_header.eml";

fn root(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Two entries: `strict` (reject at 4.5: the message is rejected) and `lenient` (nothing
/// below 400: the message passes untagged), for the given recipient domains.
fn config(strict: &str, lenient: &str) -> String {
    format!(
        "[dns]\nenabled = false\n\
         [[settings]]\nname = \"strict\"\nrcpt_domains = [\"{strict}\"]\n\
         actions = {{ reject = 4.5, add_header = 4.0, greylist = 3.0 }}\n\
         [[settings]]\nname = \"lenient\"\nrcpt_domains = [\"{lenient}\"]\n\
         actions = {{ reject = 1000.0, add_header = 500.0, greylist = 400.0 }}\n"
    )
}

/// A copy of `TAGGED` with a unique Message-ID, to find it in the sink.
fn copy(dir: &Path, tag: &str) -> (PathBuf, String) {
    let text = std::fs::read_to_string(root(TAGGED)).unwrap();
    let id = format!("{tag}-{}@settings.test", std::process::id());
    let start = text.find("Message-ID:").expect("a Message-ID");
    let end = start + text[start..].find('\n').unwrap();
    let out = format!("{}Message-ID: <{id}>{}", &text[..start], &text[end..]);
    let path = dir.join(format!("{tag}.eml"));
    std::fs::write(&path, out).unwrap();
    (path, id)
}

fn wait_until(what: &str, secs: u64, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn postfix_gives_each_recipient_domain_its_action_and_a_reload_swaps_them() {
    let tmp = tempfile::tempdir().unwrap();
    let harness = harness_dir(tmp.path());
    let mut shrike = Daemon::start(
        tmp.path(),
        Options {
            config: Some(config("a.example", "b.example")),
            ..Options::default()
        },
    );
    let pid = shrike.pid();
    let postfix = Postfix::up(&harness, shrike.milter);
    let n = std::cell::Cell::new(0);
    // Sends a fresh copy to `rcpts`; the EOD code and, when delivered, the sink's copy.
    let send = |rcpts: &[&str]| -> (String, Option<String>) {
        n.set(n.get() + 1);
        let (file, id) = copy(tmp.path(), &format!("m{}", n.get()));
        let line = postfix.send_to(&file, rcpts);
        let code = eod(&line).to_string();
        let got = (code == "250").then(|| {
            postfix
                .delivered(&id)
                .unwrap_or_else(|| panic!("{line}: not delivered\n{}", postfix.maillog()))
        });
        (code, got)
    };
    let status = |got: &Option<String>| -> String {
        let got = got.as_deref().expect("delivered");
        got.lines()
            .find(|l| l.starts_with("X-Spam-Status:"))
            .unwrap_or_else(|| panic!("no X-Spam-Status in\n{got}"))
            .to_string()
    };

    // The same message: rejected for a.example, passed untagged for b.example, tagged for a
    // domain no entry names.
    let (code, _) = send(&["bob@a.example"]);
    assert_eq!(code, "550", "{}", postfix.maillog());
    let (code, got) = send(&["bob@b.example"]);
    assert_eq!(code, "250");
    let s = status(&got);
    assert!(
        s.contains("X-Spam-Status: No,") && s.contains("action=no action"),
        "{s}"
    );
    let (code, got) = send(&["bob@c.example"]);
    assert_eq!(code, "250");
    assert!(
        status(&got).contains("action=add header"),
        "{}",
        status(&got)
    );
    // Both domains in one transaction: scanned once, the strictest action.
    let (code, _) = send(&["bob@b.example", "carol@a.example"]);
    assert_eq!(code, "550", "{}", postfix.maillog());

    // POST /reload with the domains swapped: no restart, the other answers.
    let cfg = tmp.path().join("shrike.toml");
    std::fs::write(&cfg, config("b.example", "a.example")).unwrap();
    let r = shrike.post("/reload", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let (code, got) = send(&["bob@a.example"]);
    assert_eq!(code, "250");
    assert!(
        status(&got).contains("action=no action"),
        "{}",
        status(&got)
    );
    let (code, _) = send(&["bob@b.example"]);
    assert_eq!(code, "550");

    // A broken entry (a symbol no rule declares): 422 naming it, the previous entries serve.
    std::fs::write(
        &cfg,
        format!(
            "{}scores = {{ NO_SUCH_SYMBOL = 1.0, GTUBE = 0.5 }}\n",
            config("a.example", "b.example")
        ),
    )
    .unwrap();
    let r = shrike.post("/reload", &[], b"");
    assert_eq!(r.status, 422, "{}", r.text());
    let error = r.json()["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("settings \"lenient\"") && error.contains("NO_SUCH_SYMBOL"),
        "{error}"
    );
    assert!(!error.contains("GTUBE"), "{error}");
    let (code, _) = send(&["bob@b.example"]);
    assert_eq!(code, "550", "the previous entries keep serving");

    // SIGHUP with the first file again.
    let generation = shrike.get("/health").json()["generation"].as_u64().unwrap();
    std::fs::write(&cfg, config("a.example", "b.example")).unwrap();
    shrike.signal("HUP");
    wait_until("SIGHUP reload", 30, || {
        shrike.get("/health").json()["generation"].as_u64() == Some(generation + 1)
    });
    let (code, _) = send(&["bob@a.example"]);
    assert_eq!(code, "550");
    let (code, _) = send(&["bob@b.example"]);
    assert_eq!(code, "250");
    assert_eq!(shrike.pid(), pid, "no restart");
    shrike.stop();
}

/// The real `rspamc` with `args` on `TAGGED`: its output.
fn rspamc(d: &Daemon, args: &[&str]) -> String {
    let out = Command::new("rspamc")
        .args(["-h", &format!("127.0.0.1:{}", d.http)])
        .args(args)
        .arg(root(TAGGED))
        .output()
        .expect("rspamc is installed (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "rspamc {args:?}: {text}");
    text
}

#[test]
fn rspamc_chooses_an_entry_by_settings_id() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config("a.example", "b.example")),
            ..Options::default()
        },
    );
    // By recipient.
    let text = rspamc(&d, &["-r", "bob@a.example"]);
    assert!(text.contains("Action: reject"), "{text}");
    let text = rspamc(&d, &["-r", "bob@b.example"]);
    assert!(text.contains("Action: no action"), "{text}");
    // Debian's rspamc 3.4 has no --settings-id; `--header` sends the same Settings-ID header
    // newer ones do. It wins over the recipient's entry.
    let text = rspamc(
        &d,
        &["-r", "bob@b.example", "--header", "Settings-ID=strict"],
    );
    assert!(text.contains("Action: reject"), "{text}");
    let text = rspamc(&d, &["--json", "--header", "Settings-ID=lenient"]);
    let v: serde_json::Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    assert_eq!(v["action"], "no action", "{v}");
    assert_eq!(v["settings"], "lenient", "{v}");
    assert_eq!(v["required_score"], 1000.0, "{v}");
    assert_eq!(v["thresholds"]["add header"], 500.0, "{v}");
    // An unknown name: the recipients' entries (here none: the global thresholds).
    let text = rspamc(&d, &["--header", "Settings-ID=nobody"]);
    assert!(text.contains("Action: add header"), "{text}");
    // The web UI's Rules page lists the entries with their thresholds.
    let ui = d.get("/ui/api/rules").json();
    let settings = ui["settings"]
        .as_array()
        .expect("settings in /ui/api/rules");
    assert_eq!(settings.len(), 2, "{ui}");
    assert_eq!(settings[0]["name"], "strict");
    assert_eq!(
        settings[0]["rcpt_domains"],
        serde_json::json!(["a.example"])
    );
    assert_eq!(settings[0]["thresholds"]["reject"], 4.5);
}

#[test]
fn rules_list_prints_an_entrys_effective_set() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("shrike.toml");
    std::fs::write(
        &cfg,
        "[[settings]]\nname = \"school\"\nrcpt_domains = [\"school.example\"]\n\
         actions = { reject = 10.0, add_header = 5.0 }\n\
         scores = { GTUBE = 2.5 }\ndisabled = [\"MISSING_DATE\"]\n\
         deny_senders = [\"*@spam.example\"]\n",
    )
    .unwrap();
    let list = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("--config")
            .arg(&cfg)
            .args(["rules", "list"])
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text, err) = list(&["--settings", "school"]);
    assert_eq!(code, Some(0), "{err}");
    let line = |symbol: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{symbol} ")))
            .unwrap_or_else(|| panic!("{symbol} not in\n{text}"))
            .to_string()
    };
    let gtube = line("GTUBE");
    assert!(
        gtube.contains("2.5") && gtube.contains("by settings \"school\""),
        "{gtube}"
    );
    let missing = line("MISSING_DATE");
    assert!(
        missing.contains("off") && missing.contains("disabled by settings \"school\""),
        "{missing}"
    );
    assert!(
        text.contains("settings \"school\": add header at 5, greylist at 4, reject at 10"),
        "{text}"
    );
    assert!(text.contains("deny_senders @spam.example"), "{text}");
    // Without --settings: the global set.
    let (_, global, _) = list(&[]);
    assert!(!global.contains("settings \"school\""), "{global}");
    // An unknown name: an error naming the entries there are.
    let (code, _, err) = list(&["--settings", "nope"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("\"nope\"") && err.contains("school"), "{err}");
    // JSON: one object a symbol, with the entry's score.
    let (_, json, _) = list(&["--settings", "school", "--json"]);
    assert!(
        json.lines()
            .any(|l| l.contains("\"symbol\":\"GTUBE\"") && l.contains("\"score\":2.5")),
        "{json}"
    );
}

/// The scan itself, through the library with real rules: an entry's scores (a rule's weight
/// kept), switched-off symbols, thresholds, denied and allowed senders (allowed only when
/// authenticated), the strictest verdict for several recipients, and the store counting what
/// the global settings made of the message.
#[test]
fn entries_judge_the_same_hits_again() {
    use shrike::auth::{MethodResult, Status};
    use shrike::config::Config;
    use shrike::engine::RuleLocation;
    use shrike::message::{prepare, Envelope};
    use shrike::netcheck::NetChecks;
    use shrike::scan::Scanner;
    use shrike::store::StoreConfig;
    use shrike::verdict::Action;

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("10_test.lua"),
        "rule { name = 'HALF', score = 4, check = function() return 0.5 end }\n\
         rule { name = 'MONEY', score = 3, check = function() return true end }\n",
    )
    .unwrap();
    let cfg = dir.path().join("shrike.toml");
    std::fs::write(
        &cfg,
        r#"
[[settings]]
name = "school"
rcpt_domains = ["school.example"]
scores = { HALF = 20.0 }
disabled = ["MONEY"]
actions = { add_header = 4.0, reject = 20.0 }
[[settings]]
name = "deny"
rcpt_domains = ["deny.example"]
deny_senders = ["*@spam.example"]
[[settings]]
name = "allow"
rcpt_domains = ["allow.example"]
allow_senders = ["news@partner.example"]
actions = { greylist = 1.0, add_header = 2.0, reject = 3.0 }
"#,
    )
    .unwrap();
    let config = Config::from_file(&cfg).unwrap();
    let scanner = Scanner::in_memory(
        &config.scan_settings(),
        &StoreConfig::default(),
        RuleLocation::Dir(rules),
    )
    .unwrap();
    let mut worker = scanner.worker();
    let raw =
        b"From: News <news@partner.example>\r\nTo: x@example.com\r\nSubject: hi\r\n\r\nbody\r\n";
    let input = prepare(raw, scanner.limits());
    let envelope = |rcpts: &[&str], from: &str| Envelope {
        client_ip: Some("192.0.2.1".parse().unwrap()),
        mail_from: Some(from.to_string()),
        rcpt_to: rcpts.iter().map(|r| r.to_string()).collect(),
        ..Envelope::default()
    };

    // Global: 2 + 3 = 5, greylist.
    let global = worker.scan(&input, &envelope(&["a@other.example"], "x@sender.example"));
    assert_eq!(global.verdict.score, 5.0);
    assert_eq!(global.verdict.action, Action::Greylist);
    assert_eq!(global.verdict.settings, None);
    // school: HALF at its new score times the rule's weight (20 * 0.5), MONEY off, add header
    // at 4.
    let school = worker.scan(&input, &envelope(&["a@school.example"], "x@sender.example"));
    assert_eq!(school.verdict.score, 10.0);
    assert_eq!(school.verdict.symbols["HALF"].score, 10.0);
    assert!(!school.verdict.symbols.contains_key("MONEY"));
    assert_eq!(school.verdict.action, Action::AddHeader);
    assert_eq!(school.verdict.settings.as_deref(), Some("school"));
    assert_eq!(school.verdict.required_score, Some(20.0));
    // The store counts what the global settings made of it (5: seen, neither spam nor ham),
    // not the entry's 10 (spam from 6 on), whoever the recipient.
    let counts = |s: &shrike::scan::Scanned<'_>| {
        s.updates
            .increments
            .iter()
            .map(|i| i.counts)
            .collect::<Vec<_>>()
    };
    assert_eq!(counts(&school), counts(&global));
    assert!(
        counts(&school).iter().all(|c| c[1] == 0),
        "{:?}",
        counts(&school)
    );

    // deny: the sender's domain is denied whatever the score.
    let denied = worker.scan(&input, &envelope(&["a@deny.example"], "x@spam.example"));
    assert_eq!(denied.verdict.action, Action::Reject);
    assert_eq!(
        denied.verdict.symbols["SETTINGS_DENY"].options,
        ["@spam.example"]
    );
    // Two recipients: scanned once, the strictest verdict.
    let both = worker.scan(
        &input,
        &envelope(&["a@school.example", "b@deny.example"], "x@spam.example"),
    );
    assert_eq!(both.verdict.action, Action::Reject);
    assert_eq!(both.verdict.settings.as_deref(), Some("deny"));
    let two = worker.scan(
        &input,
        &envelope(&["a@school.example", "b@other.example"], "x@sender.example"),
    );
    assert_eq!(two.verdict.action, Action::AddHeader);
    assert_eq!(two.verdict.settings.as_deref(), Some("school"));

    // allow: the From and envelope sender match, but nothing vouches for them: no effect
    // (reject at 3 under this entry), only a note.
    let allow = envelope(&["a@allow.example"], "news@partner.example");
    let unverified = worker.scan(&input, &allow);
    assert_eq!(unverified.verdict.action, Action::Reject);
    assert!(unverified
        .verdict
        .symbols
        .contains_key("SETTINGS_ALLOW_UNVERIFIED"));
    // An SPF pass for a domain that is not the sender's vouches for nothing.
    let mut net = NetChecks {
        ran: true,
        ..NetChecks::default()
    };
    net.auth.spf = Some(MethodResult {
        result: Status::Pass,
        domain: Some("elsewhere.example".into()),
        ..MethodResult::default()
    });
    let other = worker.scan_with(&input, &allow, Some(&net));
    assert_eq!(other.verdict.action, Action::Reject);
    // An SPF pass for the sender's domain: allowed, no action, and no score taken off.
    net.auth.spf.as_mut().unwrap().domain = Some("partner.example".into());
    let verified = worker.scan_with(&input, &allow, Some(&net));
    assert_eq!(verified.verdict.action, Action::NoAction);
    assert_eq!(verified.verdict.score, 5.0);
    assert_eq!(
        verified.verdict.symbols["SETTINGS_ALLOW"].options,
        ["news@partner.example"]
    );
    // A forged envelope sender with an aligned DKIM signature of the From domain: the From
    // address is what is vouched for.
    net.auth.spf = None;
    net.auth.dkim.push(MethodResult {
        result: Status::Pass,
        domain: Some("partner.example".into()),
        aligned: true,
        ..MethodResult::default()
    });
    let dkim = worker.scan_with(
        &input,
        &envelope(&["a@allow.example"], "bounce@mailer.example"),
        Some(&net),
    );
    assert_eq!(dkim.verdict.action, Action::NoAction);
    // Settings-ID wins over the recipients' entries.
    let mut by_id = envelope(&["a@other.example"], "x@sender.example");
    by_id.settings_id = Some("school".into());
    assert_eq!(
        worker.scan(&input, &by_id).verdict.settings.as_deref(),
        Some("school")
    );
}

/// `shrike config check` refuses a file whose entries overlap or name unknown symbols, naming
/// them, as a start or a reload would.
#[test]
fn config_check_names_overlaps_and_unknown_symbols() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("shrike.toml");
    for (text, expected) in [
        (
            "[[settings]]\nname = \"a\"\nrcpt_domains = [\"x.example\"]\n\
             [[settings]]\nname = \"b\"\nrcpt_domains = [\"x.example\"]\n",
            "settings \"a\" and \"b\" both match rcpt_domains x.example",
        ),
        (
            "[[settings]]\nname = \"a\"\nscores = { GTUBE = 1.0, NOT_A_RULE = 2.0, ALSO_NOT = 0.0 }\n",
            "settings \"a\": scores name symbols no rule declares: ALSO_NOT, NOT_A_RULE",
        ),
        (
            "[[settings]]\nname = \"a\"\ndisabled = [\"GREYLIST\", \"TYPO\"]\n",
            "settings \"a\": disabled name symbols no rule declares: TYPO",
        ),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("--config")
            .arg(&cfg)
            .args(["config", "check"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(expected), "{text}\n{err}");
    }
}
