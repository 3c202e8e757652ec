//! `shrike learn` through the binary: offline into a data directory that a daemon then starts
//! on, duplicates on a second learn, unreadable files reported without stopping, a data
//! directory in use refused and left alone, and learning through a running daemon.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/dns_server.rs"]
mod dns_server;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use daemon::{free_port, Daemon, Options};

const SPAM: [&str; 4] = [
    "gtube.eml",
    "html_only.eml",
    "homoglyph_subject_latin.eml",
    "phishing_anchor.eml",
];
const HAM: [&str; 4] = [
    "base64_body.eml",
    "inline_html_alternative.eml",
    "received_ipv6.eml",
    "nested_multipart.eml",
];

fn data(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The spam as a maildir (two in new/, two in cur/, and an empty tmp/ that is not mail).
fn spam_maildir(dir: &Path) -> PathBuf {
    let maildir = dir.join("Spam");
    for sub in ["new", "cur", "tmp"] {
        std::fs::create_dir_all(maildir.join(sub)).unwrap();
    }
    for (i, name) in SPAM.iter().enumerate() {
        let sub = if i % 2 == 0 { "new" } else { "cur" };
        let file = format!("1700000000.{i}.host:2,S");
        std::fs::write(maildir.join(sub).join(file), data(name)).unwrap();
    }
    maildir
}

/// The ham as one mbox file.
fn ham_mbox(dir: &Path) -> PathBuf {
    let path = dir.join("ham.mbox");
    let mut mbox = Vec::new();
    for name in HAM {
        mbox.extend_from_slice(b"From someone@example.com Thu Nov 26 10:00:00 2026\n");
        let raw = String::from_utf8_lossy(&data(name)).replace("\r\n", "\n");
        mbox.extend_from_slice(raw.as_bytes());
        if !raw.ends_with('\n') {
            mbox.push(b'\n');
        }
        mbox.push(b'\n');
    }
    std::fs::write(&path, mbox).unwrap();
    path
}

fn shrike(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(args)
        .output()
        .expect("run shrike")
}

fn learn(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (bool, String, String) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["learn".as_ref()];
    all.extend(args.iter().map(|a| a.as_ref()));
    let out = shrike(&all);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A count of the summary: the number after `label: `.
fn count(stdout: &str, label: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(label)?.strip_prefix(": "))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {label:?} in:\n{stdout}"))
}

fn classifier_learned(d: &Daemon) -> (u64, u64) {
    let stat = d.get("/stat").json();
    let c = &stat["classifier"];
    (
        c["learned_spam"].as_u64().expect("learned_spam"),
        c["learned_ham"].as_u64().expect("learned_ham"),
    )
}

/// The 24-hour count of `counter` on the subject key `subject`.
fn subject_count(d: &Daemon, subject: &str, counter: &str) -> u64 {
    let value: String = subject
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let r = d.get(&format!("/reputation?type=subject&value={value}"));
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["keys"][0]["windows"]["24h"][counter]
        .as_u64()
        .unwrap_or_else(|| panic!("{counter} of {subject:?}: {}", r.text()))
}

/// Every file of a directory tree with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

#[test]
fn offline_learns_are_what_the_daemon_starts_with_and_a_second_learn_counts_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let spam = spam_maildir(dir.path());
    let ham = ham_mbox(dir.path());
    let data_dir = dir.path().join("data");

    let (ok, out, err) = learn(&[&"--spam", &spam, &"--ham", &ham, &"--data", &data_dir]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 4, "{out}");
    assert_eq!(count(&out, "learned ham"), 4, "{out}");
    assert_eq!(count(&out, "duplicates"), 0, "{out}");
    assert_eq!(count(&out, "unreadable"), 0, "{out}");
    assert!(err.is_empty(), "nothing on stderr off a terminal: {err}");

    let mut d = Daemon::start(dir.path(), Options::default());
    assert_eq!(classifier_learned(&d), (4, 4));
    assert_eq!(subject_count(&d, "Test spam mail (GTUBE)", "complaint"), 1);
    assert_eq!(subject_count(&d, "Test spam mail (GTUBE)", "rescue"), 0);
    assert_eq!(subject_count(&d, "Quarterly report", "rescue"), 1);
    assert_eq!(subject_count(&d, "Quarterly report", "complaint"), 0);
    d.stop();

    // The same mail again: the classifier refuses every message as already learned.
    let (ok, out, err) = learn(&[&"--spam", &spam, &"--ham", &ham, &"--data", &data_dir]);
    assert!(ok, "all duplicates is not a failure: {out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 0, "{out}");
    assert_eq!(count(&out, "learned ham"), 0, "{out}");
    assert_eq!(count(&out, "duplicates"), 8, "{out}");
    assert!(out.contains("(4 spam, 4 ham"), "{out}");

    let d = Daemon::start(dir.path(), Options::default());
    assert_eq!(classifier_learned(&d), (4, 4), "duplicates not trained");
    // Nor counted: relearning a folder must not multiply its keys' complaints and rescues.
    assert_eq!(subject_count(&d, "Test spam mail (GTUBE)", "complaint"), 1);
    assert_eq!(subject_count(&d, "Quarterly report", "rescue"), 1);
}

#[test]
fn unreadable_files_are_reported_and_the_rest_is_learned() {
    let dir = tempfile::tempdir().unwrap();
    let spam = spam_maildir(dir.path());
    let broken = spam.join("cur").join("1700000009.x.host:2,S");
    std::os::unix::fs::symlink(dir.path().join("gone"), &broken).unwrap();
    let empty = spam.join("new").join("1700000010.y.host");
    std::fs::write(&empty, b"\n\n").unwrap();
    let missing = dir.path().join("no-such-folder");
    let data_dir = dir.path().join("data");

    let (ok, out, err) = learn(&[
        &"--spam",
        &spam,
        &missing,
        &"--ham",
        &ham_mbox(dir.path()),
        &"--data",
        &data_dir,
    ]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 4, "{out}");
    assert_eq!(count(&out, "learned ham"), 4, "{out}");
    assert_eq!(count(&out, "unreadable"), 3, "{out}");
    for path in [&broken, &empty, &missing] {
        let line = err
            .lines()
            .find(|l| l.contains(&*path.to_string_lossy()))
            .unwrap_or_else(|| panic!("no error line for {}:\n{err}", path.display()));
        assert!(line.starts_with("shrike: cannot read"), "{line}");
    }
    assert_eq!(err.lines().count(), 3, "one line each: {err}");

    // Nothing readable at all: a failure, and no data directory written.
    let other = dir.path().join("data2");
    let (ok, out, err) = learn(&[&"--spam", &missing, &"--data", &other]);
    assert!(!ok, "nothing learned must fail: {out}");
    assert!(err.contains("no readable message"), "{err}");
    assert!(!other.exists(), "nothing to learn opens no data directory");
}

#[test]
fn a_data_directory_in_use_by_a_daemon_is_refused_and_left_intact() {
    let dir = tempfile::tempdir().unwrap();
    let spam = spam_maildir(dir.path());
    let d = Daemon::start(dir.path(), Options::default());
    let r = d.post("/learnspam", &[], &data("gtube.eml"));
    assert_eq!(r.status, 200, "{}", r.text());
    let before = tree(&d.data);

    let (ok, out, err) = learn(&[&"--spam", &spam, &"--data", &d.data]);
    assert!(!ok, "must refuse: {out}");
    assert!(err.contains("in use by a running shrike"), "{err}");
    assert!(err.contains("--server"), "says what to do instead: {err}");
    assert!(!out.contains("learned spam"), "no summary: {out}");
    assert_eq!(tree(&d.data), before, "the data directory is untouched");
    assert_eq!(classifier_learned(&d), (1, 0));
    assert_eq!(subject_count(&d, "Test spam mail (GTUBE)", "complaint"), 1);
}

#[test]
fn learning_through_a_running_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let spam = spam_maildir(dir.path());
    let ham = ham_mbox(dir.path());
    // One message over the daemon's body limit: refused, the rest learned.
    let big = dir.path().join("big.eml");
    let mut raw = b"From: a@example.com\nSubject: big\nMessage-ID: <big@example.com>\n\n".to_vec();
    raw.extend(std::iter::repeat_n(b"all work and no play\n".as_slice(), 5_000).flatten());
    std::fs::write(&big, raw).unwrap();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some("[http]\nmax_body_bytes = 50000\n".into()),
            ..Options::default()
        },
    );
    let url = format!("http://127.0.0.1:{}", d.http);

    let (ok, out, err) = learn(&[&"--server", &url, &"--spam", &spam, &"--ham", &ham, &big]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 4, "{out}");
    assert_eq!(count(&out, "learned ham"), 4, "{out}");
    assert_eq!(count(&out, "duplicates"), 0, "{out}");
    assert_eq!(count(&out, "refused"), 1, "{out}");
    let line = err
        .lines()
        .find(|l| l.contains("big.eml"))
        .unwrap_or_else(|| panic!("no line for the refused file:\n{err}"));
    assert!(line.contains("413"), "{line}");
    assert_eq!(classifier_learned(&d), (4, 4));
    assert_eq!(subject_count(&d, "Test spam mail (GTUBE)", "complaint"), 1);
    assert_eq!(subject_count(&d, "Quarterly report", "rescue"), 1);

    // Again: the daemon says each is a duplicate; the classifier does not train again.
    let (ok, out, err) = learn(&[&"--server", &url, &"--spam", &spam, &"--ham", &ham]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 0, "{out}");
    assert_eq!(count(&out, "duplicates"), 8, "{out}");
    assert_eq!(classifier_learned(&d), (4, 4));

    // The reply of /learnspam says so too.
    let r = d.post("/learnspam", &[], &data("gtube.eml"));
    assert_eq!(r.json()["duplicate"], true, "{}", r.text());
    // The duplicates added no complaint or rescue to the message's keys.
    assert_eq!(subject_count(&d, "Test spam mail (GTUBE)", "complaint"), 1);
    assert_eq!(subject_count(&d, "Quarterly report", "rescue"), 1);

    // No daemon there: one clear error, a failure, no per-file noise.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let (ok, out, err) = learn(&[&"--server", &nowhere, &"--spam", &spam]);
    assert!(!ok, "{out}");
    assert!(err.contains("cannot be used"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// A local address that is not loopback (the route to a documentation address; no packet is
/// sent): a client there needs the daemon's password.
fn non_loopback_ip() -> std::net::IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.123:9").expect("a route off loopback");
    let ip = s.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "{ip}");
    ip
}

/// `shrike learn` with `env` set (and SHRIKE_PASSWORD unset unless `env` sets it).
fn learn_env(
    env: &[(&str, &str)],
    args: &[&dyn AsRef<std::ffi::OsStr>],
) -> (Output, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shrike"));
    cmd.env_remove("SHRIKE_PASSWORD").arg("learn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    for a in args {
        cmd.arg(a);
    }
    let out = cmd.output().expect("run shrike");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    (out, stdout, stderr)
}

/// The password comes from --password-file or SHRIKE_PASSWORD (not only --password, which
/// `ps` shows); a client off loopback without it learns nothing.
#[test]
fn learning_through_a_daemon_with_a_password_from_a_file_or_the_environment() {
    const PW: &str = "learn-pw-5e1d";
    let dir = tempfile::tempdir().unwrap();
    let spam = spam_maildir(dir.path());
    let ham = ham_mbox(dir.path());
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!("[http]\npassword = \"{PW}\"\n")),
            http_host: Some("0.0.0.0".into()),
            ..Options::default()
        },
    );
    let url = format!("http://{}:{}", non_loopback_ip(), d.http);
    let file = |name: &str, text: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    };
    let right = file("pw", &format!("{PW}\n"), 0o600);
    let wrong = file("wrong", "learn-pw-5e1\n", 0o600);
    let empty = file("empty", "\n", 0o600);
    let loose = file("loose", &format!("{PW}\n"), 0o644);
    let never_shown = |out: &str, err: &str| {
        assert!(!out.contains(PW) && !err.contains(PW), "{out}\n{err}");
    };

    // No password, a wrong one from the file, or a wrong one from the environment: every
    // message refused, nothing learned.
    for (env, args) in [
        (vec![], vec![]),
        (vec![], vec!["--password-file".as_ref(), wrong.as_os_str()]),
        (vec![("SHRIKE_PASSWORD", "learn-pw-5e1")], vec![]),
        (vec![("SHRIKE_PASSWORD", "")], vec![]),
    ] {
        let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"--server", &url, &"--spam", &spam];
        all.extend(args.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        let (o, out, err) = learn_env(&env, &all);
        assert!(!o.status.success(), "{env:?} {args:?}: {out}");
        assert_eq!(count(&out, "refused"), 4, "{out}");
        assert!(err.contains("401") || err.contains("429"), "{err}");
        never_shown(&out, &err);
    }
    assert_eq!(classifier_learned(&d), (0, 0));

    // From the file (its line end not part of it): learned, without a warning.
    let (o, out, err) = learn_env(
        &[],
        &[
            &"--server",
            &url,
            &"--password-file",
            &right,
            &"--spam",
            &spam,
        ],
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 4, "{out}");
    assert!(!err.contains("warning"), "{err}");
    never_shown(&out, &err);
    // From the environment.
    let (o, out, err) = learn_env(
        &[("SHRIKE_PASSWORD", PW)],
        &[&"--server", &url, &"--ham", &ham],
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(count(&out, "learned ham"), 4, "{out}");
    never_shown(&out, &err);
    assert_eq!(classifier_learned(&d), (4, 4));
    // The file wins over the environment, and the command line over both (duplicates now:
    // accepted, not refused).
    for (env, args) in [
        (PW, vec!["--password-file".as_ref(), wrong.as_os_str()]),
        (
            "learn-pw-5e1",
            vec!["--password-file".as_ref(), right.as_os_str()],
        ),
        ("learn-pw-5e1", vec!["--password".as_ref(), PW.as_ref()]),
    ] {
        let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"--server", &url, &"--spam", &spam];
        all.extend(args.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        let (o, out, _) = learn_env(&[("SHRIKE_PASSWORD", env)], &all);
        let wins = args[1] != wrong.as_os_str();
        assert_eq!(o.status.success(), wins, "{args:?}: {out}");
        assert_eq!(
            count(&out, "refused"),
            if wins { 0 } else { 4 },
            "{args:?}: {out}"
        );
    }
    // A file others may read works, with a warning.
    let (o, out, err) = learn_env(
        &[],
        &[
            &"--server",
            &url,
            &"--password-file",
            &loose,
            &"--spam",
            &spam,
        ],
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("can be read by other users"), "{err}");
    // An empty or missing file: an error before anything is sent.
    for path in [empty.clone(), dir.path().join("missing")] {
        let (o, out, err) = learn_env(
            &[],
            &[
                &"--server",
                &url,
                &"--password-file",
                &path,
                &"--spam",
                &spam,
            ],
        );
        assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
        assert!(err.contains("--password-file"), "{err}");
        assert!(out.is_empty(), "{out}");
    }
    // Both flags at once is a usage error.
    let (o, _, err) = learn_env(
        &[],
        &[
            &"--server",
            &url,
            &"--password",
            &PW,
            &"--password-file",
            &right,
            &"--spam",
            &spam,
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(classifier_learned(&d), (4, 4));
    // An offline learn in a shell that exports SHRIKE_PASSWORD is not refused for it.
    let data = dir.path().join("offline");
    let (o, out, err) = learn_env(
        &[("SHRIKE_PASSWORD", PW)],
        &[&"--spam", &spam, &"--data", &data],
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 4, "{out}");
}

#[test]
fn a_progress_bar_with_rate_and_eta_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let spam = spam_maildir(dir.path());
    let data_dir = dir.path().join("data");
    // `script` (util-linux) runs the learn on a pseudo-terminal; what it drew comes back on
    // script's stdout with the summary.
    let command = format!(
        "'{}' learn --spam '{}' --data '{}'",
        env!("CARGO_BIN_EXE_shrike"),
        spam.display(),
        data_dir.display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("run script (util-linux)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("4/4 messages, "), "the bar: {text}");
    assert!(text.contains(" msg/s, ETA "), "rate and ETA: {text}");
    // The bar is cleared before the summary (its escape sequence ends the line before it).
    assert!(text.contains("learned spam: 4\r\n"), "{text}");
}

/// A shop's or a newsletter's mail from `from`, linking the From address's own domain.
fn own_domain_mail(from: &str, subject: &str, text: &str) -> String {
    let domain = from.rsplit('@').next().unwrap();
    format!(
        "Received: from mail.{domain} (mail.{domain} [198.51.100.40])\n\
         \tby mx.example.com (Postfix) with ESMTP id 5B6C7D8E9F\n\
         \tfor <alice@example.com>; Tue, 3 Sep 2002 08:00:12 +0000 (UTC)\n\
         From: {from}\nTo: alice@example.com\nSubject: {subject}\n\
         Date: Tue, 3 Sep 2002 08:00:00 +0000\n\
         Message-ID: <{n}.{len}@{domain}>\nMIME-Version: 1.0\n\
         Content-Type: text/plain; charset=us-ascii\n\n\
         Hello,\n\n{text}\n\nSee https://www.{domain}/{n} for more.\n",
        n = subject.len() * 7 + text.len(),
        len = text.len(),
    )
}

/// A DNS server on loopback where the senders of `own_domain_mail` publish SPF for the address
/// they send from, and the `[dns]` section that asks it: the good signs that credit a From
/// domain need it authenticated (docs/rules.md, "No free ham points").
fn senders_dns(domains: &[&str]) -> (dns_server::DnsServer, String) {
    let dns = dns_server::DnsServer::start();
    for d in domains {
        dns.txt(d, "v=spf1 ip4:198.51.100.40 -all");
    }
    let section = dns.dns_section(2000);
    (dns, section)
}

/// The symbols of a scan from the sending address, the From address as the envelope sender.
fn checkv2_symbols(d: &Daemon, raw: &str) -> Vec<String> {
    let from = raw
        .lines()
        .find_map(|l| l.strip_prefix("From: "))
        .unwrap_or_default()
        .to_string();
    let r = d.post(
        "/checkv2",
        &[("IP", "198.51.100.40"), ("From", from.as_str())],
        raw.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let mut names: Vec<String> = r.json()["symbols"]
        .as_object()
        .expect("symbols")
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

/// One learned spam from a sender with no good history is enough to mark its next message
/// (REP_FROM_REPORTED) and to take away the good sign of its links to its own domain; a sender
/// with learned ham behind it, or only ham, keeps them.
#[test]
fn a_sender_reported_once_loses_its_own_domain_credit() {
    let dir = tempfile::tempdir().unwrap();
    let spam = dir.path().join("spam");
    let ham = dir.path().join("ham");
    std::fs::create_dir_all(&spam).unwrap();
    std::fs::create_dir_all(&ham).unwrap();
    let write = |path: PathBuf, raw: String| std::fs::write(path, raw).unwrap();
    write(
        spam.join("1.eml"),
        own_domain_mail(
            "deals@promo.example.net",
            "Spring catalogue",
            "Our spring catalogue is out, with garden furniture at half price.",
        ),
    );
    write(
        ham.join("1.eml"),
        own_domain_mail(
            "news@letters.example.org",
            "Issue 41",
            "This week: the river clean-up and the new library hours.",
        ),
    );
    // A correspondent with ham behind him, once complained about.
    write(
        ham.join("2.eml"),
        own_domain_mail(
            "bob@shop.example.com",
            "Your order",
            "Your order of two chairs has left the warehouse.",
        ),
    );
    write(
        spam.join("2.eml"),
        own_domain_mail(
            "bob@shop.example.com",
            "Cheap chairs",
            "Chairs at prices you will not believe, this week only.",
        ),
    );
    let data_dir = dir.path().join("data");
    let (ok, out, err) = learn(&[&"--spam", &spam, &"--ham", &ham, &"--data", &data_dir]);
    assert!(ok, "{out}\n{err}");
    assert_eq!(count(&out, "learned spam"), 2, "{out}");
    assert_eq!(count(&out, "learned ham"), 2, "{out}");

    let (_dns, section) = senders_dns(&[
        "promo.example.net",
        "letters.example.org",
        "shop.example.com",
    ]);
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(section),
            ..Options::default()
        },
    );
    let reported = checkv2_symbols(
        &d,
        &own_domain_mail(
            "deals@promo.example.net",
            "Summer sale",
            "The summer sale starts on Monday with tents and barbecues.",
        ),
    );
    assert!(
        reported.iter().any(|s| s == "REP_FROM_REPORTED"),
        "{reported:?}"
    );
    assert!(
        !reported.iter().any(|s| s == "LINKS_OWN_DOMAIN"),
        "{reported:?}"
    );

    let newsletter = checkv2_symbols(
        &d,
        &own_domain_mail(
            "news@letters.example.org",
            "Issue 42",
            "This week: the school fair and the road works on the high street.",
        ),
    );
    assert!(
        newsletter.iter().any(|s| s == "LINKS_OWN_DOMAIN"),
        "{newsletter:?}"
    );
    assert!(
        !newsletter
            .iter()
            .any(|s| s.starts_with("REP_FROM_") && s != "REP_FROM_RESCUED"),
        "{newsletter:?}"
    );

    let known = checkv2_symbols(
        &d,
        &own_domain_mail(
            "bob@shop.example.com",
            "Your invoice",
            "The invoice for your two chairs is attached to your account page.",
        ),
    );
    assert!(known.iter().any(|s| s == "LINKS_OWN_DOMAIN"), "{known:?}");
    assert!(!known.iter().any(|s| s == "REP_FROM_REPORTED"), "{known:?}");
}

/// A newsletter writing from a new address each issue: after three issues seen without a
/// complaint its domain is known (REP_FROM_DOMAIN_KNOWN); one issue learned as spam (a user's
/// complaint) takes that away for the issues after it.
#[test]
fn a_newsletter_domain_is_known_until_a_user_reports_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_dns, section) = senders_dns(&["letters.example.org"]);
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(section),
            ..Options::default()
        },
    );
    let issue = |n: u32| {
        own_domain_mail(
            &format!("issue-{n}.alice.x{}@letters.example.org", n * 37),
            &format!("Town Letter, issue {n}"),
            &format!("This is issue {n}: the river clean-up and the new library hours."),
        )
    };
    for n in 1..=3 {
        let symbols = checkv2_symbols(&d, &issue(n));
        assert!(
            !symbols.iter().any(|s| s == "REP_FROM_DOMAIN_KNOWN"),
            "issue {n}, seen {} times before: {symbols:?}",
            n - 1
        );
    }
    // The store takes a scan's counts after its reply: wait for the third to be counted.
    let known = (0..50)
        .map(|_| {
            let symbols = checkv2_symbols(&d, &issue(4));
            std::thread::sleep(std::time::Duration::from_millis(20));
            symbols
        })
        .find(|s| s.iter().any(|s| s == "REP_FROM_DOMAIN_KNOWN"));
    assert!(known.is_some(), "the fourth issue is from a known domain");
    // The same issue from an address its SPF does not list: a forged From borrows nothing.
    let forged = d.post(
        "/checkv2",
        &[
            ("IP", "203.0.113.9"),
            ("From", "issue-4.alice.x148@letters.example.org"),
        ],
        issue(4).as_bytes(),
    );
    let symbols = forged.json()["symbols"].clone();
    assert!(symbols.get("R_SPF_FAIL").is_some(), "{symbols}");
    assert!(symbols.get("REP_FROM_DOMAIN_KNOWN").is_none(), "{symbols}");

    let r = d.post("/learnspam", &[], issue(5).as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let reported = (0..50)
        .map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(20));
            checkv2_symbols(&d, &issue(6))
        })
        .find(|s| !s.iter().any(|s| s == "REP_FROM_DOMAIN_KNOWN"));
    assert!(
        reported.is_some(),
        "a complaint about the domain takes the credit away"
    );
}

/// Offer mail and meeting mail sharing most of their words, each message with a word of its
/// own: what one online pass in the order `shrike learn` takes them (the spam paths first)
/// fits badly.
fn passes_mail(dir: &Path, kind: &str, n: usize) -> PathBuf {
    let out = dir.join(kind);
    std::fs::create_dir_all(&out).unwrap();
    for i in 0..n {
        let (subject, text) = if kind == "spam" {
            (
                format!("Weekly update {i}"),
                format!("Please read the weekly update, the offer ends soon, click now {i}xq"),
            )
        } else {
            (
                format!("Weekly update {i}"),
                format!("Please read the weekly update, the meeting is on Monday {i}zk"),
            )
        };
        let raw = format!(
            "From: team{i}@example.net\nTo: alice@example.com\nSubject: {subject}\n\
             Date: Tue, 3 Sep 2002 08:00:00 +0000\nMessage-ID: <{kind}{i}@example.net>\n\
             MIME-Version: 1.0\nContent-Type: text/plain; charset=us-ascii\n\n{text}\n"
        );
        std::fs::write(out.join(format!("{i:03}.eml")), raw).unwrap();
    }
    out
}

/// `shrike learn` of `spam` and `ham` into `home/data`, with `config` written to
/// `home/shrike.toml`.
fn learn_offline(home: &Path, config: &str, spam: &Path, ham: &Path) -> Output {
    std::fs::create_dir_all(home).unwrap();
    let config_file = home.join("shrike.toml");
    std::fs::write(&config_file, config).unwrap();
    let data = home.join("data");
    shrike(&[
        "--config".as_ref(),
        config_file.as_ref(),
        "learn".as_ref(),
        "--spam".as_ref(),
        spam.as_ref(),
        "--ham".as_ref(),
        ham.as_ref(),
        "--data".as_ref(),
        data.as_ref(),
    ])
}

/// The classifier's probability of `raw` (the CLF_* symbol's option), if it gave one.
fn clf_probability(d: &Daemon, raw: &str) -> Option<f64> {
    let r = d.post("/checkv2", &[("IP", "198.51.100.40")], raw.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let json = r.json();
    let symbols = json["symbols"].as_object().expect("symbols");
    symbols
        .iter()
        .filter(|(name, _)| name.starts_with("CLF_"))
        .find_map(|(_, s)| s["options"][0].as_str()?.parse().ok())
}

/// `classifier.learn_passes`: an offline learn trains again over what it learned, so the mail
/// it learned is fitted closer, without counting any message twice; 1 is one pass, and an
/// out-of-range value is refused before anything is learned.
#[test]
fn an_offline_learn_makes_further_passes_without_counting_them() {
    let dir = tempfile::tempdir().unwrap();
    let spam = passes_mail(dir.path(), "spam", 30);
    let ham = passes_mail(dir.path(), "ham", 30);
    let mut spam_p = Vec::new();
    for passes in [1, 2] {
        let home = dir.path().join(format!("passes{passes}"));
        let config = format!("[dns]\nenabled = false\n[classifier]\nlearn_passes = {passes}\n");
        let out = learn_offline(&home, &config, &spam, &ham);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert_eq!(count(&stdout, "learned spam"), 30, "{stdout}");
        assert_eq!(count(&stdout, "learned ham"), 30, "{stdout}");
        let mut d = Daemon::start(
            &home,
            Options {
                config: Some(config),
                ..Options::default()
            },
        );
        assert_eq!(
            classifier_learned(&d),
            (30, 30),
            "a further pass counts nothing"
        );
        let mut ps = Vec::new();
        for i in 0..30 {
            let raw = std::fs::read_to_string(spam.join(format!("{i:03}.eml"))).unwrap();
            ps.push(clf_probability(&d, &raw).unwrap_or(0.4));
        }
        spam_p.push(ps.iter().sum::<f64>() / ps.len() as f64);
        d.stop();
    }
    // (The learn interleaves the classes, so one pass already leans the right way.)
    assert!(
        spam_p[0] > 0.5 && spam_p[1] > spam_p[0] + 0.01,
        "the second pass fits the learned spam closer: mean p {spam_p:?}"
    );

    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[classifier]\nlearn_passes = 0\n").unwrap();
    let data = dir.path().join("bad-data");
    let out = shrike(&[
        "--config".as_ref(),
        bad.as_ref(),
        "learn".as_ref(),
        "--spam".as_ref(),
        spam.as_ref(),
        "--data".as_ref(),
        data.as_ref(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("classifier.learn_passes must be 1..=10, got 0"),
        "{stderr}"
    );
    assert!(!data.join("classifier.bin").exists(), "nothing learned");
}

/// The classifier's symbols on `raw`: (name, probability option, score).
fn learned_verdict(d: &Daemon, raw: &str) -> Vec<(String, f64, f64)> {
    let r = d.post("/checkv2", &[("IP", "198.51.100.40")], raw.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    let json = r.json();
    let symbols = json["symbols"].as_object().expect("symbols");
    symbols
        .iter()
        .filter(|(name, _)| name.starts_with("CLF_") || name.starts_with("BAYES_"))
        .map(|(name, s)| {
            let p = s["options"][0]
                .as_str()
                .expect("p")
                .parse()
                .expect("a probability");
            (name.clone(), p, s["score"].as_f64().unwrap())
        })
        .collect()
}

/// The stack's state in /stat: (weights, learned spam, learned ham).
fn stack_stat(d: &Daemon) -> (Vec<f64>, u64, u64) {
    let stat = d.get("/stat").json();
    let s = &stat["classifier"]["stack"];
    let weights = s["weights"].as_array().expect("weights");
    (
        weights.iter().map(|w| w.as_f64().unwrap()).collect(),
        s["learned_spam"].as_u64().unwrap(),
        s["learned_ham"].as_u64().unwrap(),
    )
}

/// One learned verdict: taught offline, then over HTTP, the FTRL model and naive Bayes answer
/// as one probability and one symbol (never a Bayes symbol beside the classifier's); the stack
/// that combines them learns from the HTTP learns and outlives a `kill -9` right after the
/// last answer, and mail with both classes' words is not pushed to spam by the two agreeing.
#[test]
fn one_learned_verdict_from_both_models_survives_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let spam = passes_mail(dir.path(), "spam", 30);
    let ham = passes_mail(dir.path(), "ham", 30);
    let home = dir.path().join("home");
    let config = "[dns]\nenabled = false\n[classifier]\nmin_learned = 5\n".to_string();
    let out = learn_offline(&home, &config, &spam, &ham);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let options = || Options {
        config: Some(config.clone()),
        ..Options::default()
    };
    let mut d = Daemon::start(&home, options());
    let mail = |text: &str, n: u32| {
        format!(
            "From: someone{n}@example.org\nTo: alice@example.com\nSubject: Weekly update {n}\n\
             Date: Tue, 3 Sep 2002 09:00:00 +0000\nMessage-ID: <probe{n}@example.org>\n\
             MIME-Version: 1.0\nContent-Type: text/plain; charset=us-ascii\n\n{text}\n"
        )
    };
    let spammy = mail(
        "Please read the weekly update, the offer ends soon, click now",
        1,
    );
    let hammy = mail("Please read the weekly update, the meeting is on Monday", 2);
    // Interleaved learns over HTTP: each is a held-out example for the stack.
    for i in 0..8u32 {
        let (path, text) = if i % 2 == 0 {
            (
                "/learnspam",
                format!("the offer ends soon, click now, order {i}xq"),
            )
        } else {
            (
                "/learnham",
                format!("the meeting is on Monday, agenda {i}zk"),
            )
        };
        let r = d.post(path, &[], mail(&text, 100 + i).as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let (weights, stack_spam, stack_ham) = stack_stat(&d);
    assert!(
        stack_spam >= 4 && stack_ham >= 4,
        "{stack_spam} {stack_ham}"
    );
    assert_ne!(
        weights,
        vec![1.0, 0.0, 0.0],
        "the stack moved from FTRL alone"
    );

    let got = learned_verdict(&d, &spammy);
    assert_eq!(got.len(), 1, "one symbol: {got:?}");
    assert!(
        got[0].0.starts_with("CLF_SPAM") && got[0].1 > 0.5,
        "{got:?}"
    );
    assert!(got[0].2 <= 8.0, "{got:?}");
    let ham_side = learned_verdict(&d, &hammy);
    assert!(
        ham_side
            .iter()
            .all(|(n, _, score)| n.starts_with("CLF_HAM") && *score >= -2.0),
        "{ham_side:?}"
    );

    let before = (stack_stat(&d), learned_verdict(&d, &spammy));
    let r = d.post(
        "/learnham",
        &[],
        mail("the offer ends soon, said the minutes", 200).as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let after = (stack_stat(&d), learned_verdict(&d, &spammy));
    assert_ne!(before.0, after.0, "the learn taught the stack");
    d.kill9();
    let d = Daemon::start(&home, options());
    assert_eq!(
        stack_stat(&d),
        after.0,
        "the stack came back as acknowledged"
    );
    assert_eq!(learned_verdict(&d, &spammy), after.1);
    assert_eq!(classifier_learned(&d), (34, 35));
    let bayes = &d.get("/stat").json()["classifier"]["bayes"];
    assert_eq!(bayes["ready"], true);
    assert_eq!(
        (
            bayes["learned_spam"].as_u64(),
            bayes["learned_ham"].as_u64()
        ),
        (Some(34), Some(35))
    );
}
