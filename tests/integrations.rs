//! MTAs other than Postfix (tests/postfix.rs), each the real program started by the test on
//! loopback: Sendmail 8.17 with shrike's milter; Exim 4.96's `spam =` ACL condition in both
//! variants (SpamAssassin's spamd protocol, and rspamd's legacy protocol with
//! `variant=rspamd`), both pointed at shrike's HTTP port; and Haraka with its `rspamd` plugin
//! on `/checkv2`. GTUBE is refused at DATA, ham is delivered carrying what the integration
//! adds. docs/integrations.md gives these configurations to users.
//!
//! Needs root (Sendmail and Exim switch users) and what scripts/test.sh installs: Sendmail and
//! Exim unpacked from Debian's `sendmail-bin`/`sendmail-cf` and `exim4-daemon-heavy` under
//! target/ (installing either package would remove Postfix), the `Debian-exim` user, m4, and
//! Haraka from npm under target/haraka.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/deploy.rs"]
mod deploy;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daemon::{free_port, Daemon, Options};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn data(name: &str) -> PathBuf {
    root().join("tests/data").join(name)
}

fn tool(var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(|| root().join(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh, which installs it (or set {var})",
        path.display()
    );
    path
}

/// `mta-send` (../shared/tools/mta) one file to `port`; its result line.
fn send(port: u16, file: &Path) -> String {
    let tools = std::env::var_os("SHRIKE_MTA_TOOLS")
        .map_or_else(|| root().join("../shared/tools/mta"), PathBuf::from);
    let out = Command::new(tools.join("mta-send"))
        .args(["--server", &format!("127.0.0.1:{port}")])
        .args(["-t", "bob@example.com"])
        .arg(file)
        .output()
        .expect("run mta-send");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for_port(port: u16, what: &str, log: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Files under `dir` holding `marker`, waiting up to 30 s for one.
fn delivered(dir: &Path, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            if text.contains(marker) {
                return text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "nothing holding {marker} delivered to {}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of header `name` in a delivered message.
fn header<'a>(message: &'a str, name: &str) -> Option<&'a str> {
    message
        .lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

struct Exim {
    child: Child,
    dir: PathBuf,
}

impl Drop for Exim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The daemon's delivery processes are its children; stop them too.
        let _ = Command::new("pkill")
            .args(["-f", &self.dir.join("exim.conf").display().to_string()])
            .status();
    }
}

impl Exim {
    /// Exim on `smtp`, its `spam =` condition asking shrike at `spamd_address`.
    fn start(dir: &Path, smtp: u16, spamd_address: &str) -> Exim {
        let exim = tool("SHRIKE_EXIM", "target/exim4/usr/sbin/exim4");
        for sub in ["", "spool", "log", "mail"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).unwrap();
            // Exim receives and delivers as Debian-exim.
            std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .unwrap();
        }
        let d = dir.display();
        // The guide's main-section lines and ACL (docs/deploy.md), on this test's address and
        // with an RCPT ACL that accepts every recipient.
        let guide = deploy::snippet("exim", "tests/integrations.rs")
            .replace("127.0.0.1 11333 variant=rspamd", spamd_address)
            .replace("begin acl\n", "begin acl\nacl_rcpt:\n  accept\n");
        assert!(guide.contains(&format!("spamd_address = {spamd_address}\n")));
        let config = format!(
            r#"primary_hostname = shrike.test
exim_path = {exim}
exim_user = Debian-exim
exim_group = nogroup
spool_directory = {d}/spool
log_file_path = {d}/log/%slog
tls_advertise_hosts =
host_lookup =
rfc1413_hosts =
keep_environment =
local_interfaces = 127.0.0.1
acl_smtp_rcpt = acl_rcpt
{guide}
begin routers
everyone:
  driver = accept
  transport = to_file

begin transports
to_file:
  driver = appendfile
  file = {d}/mail/inbox
  user = Debian-exim
  group = nogroup
  mode = 0666
"#,
            exim = exim.display()
        );
        let conf = dir.join("exim.conf");
        std::fs::write(&conf, config).unwrap();
        let child = Command::new(&exim)
            .arg("-C")
            .arg(&conf)
            .args(["-bdf", "-oX", &smtp.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start exim");
        let log = dir.join("log/mainlog");
        wait_for_port(smtp, "exim", || {
            std::fs::read_to_string(&log).unwrap_or_default()
        });
        Exim {
            child,
            dir: dir.to_path_buf(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log/mainlog")).unwrap_or_default()
            + &std::fs::read_to_string(self.dir.join("log/paniclog")).unwrap_or_default()
    }
}

/// Exim's `spam = nobody:true` against shrike's HTTP port, in each variant: GTUBE is rejected
/// at DATA with Exim's message naming the score; ham is delivered with `$spam_score` and
/// `$spam_action` in added headers; shrike counted each request in its protocol.
#[test]
fn exim_spam_acl_in_both_variants_rejects_gtube_and_delivers_ham() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    for (variant, suffix, counter) in [
        ("spamassassin", "", "shrike_spamd_requests_total"),
        (
            "rspamd",
            " variant=rspamd",
            "shrike_spamd_legacy_requests_total",
        ),
    ] {
        let before = d.metric(counter);
        let smtp = free_port();
        let exim = Exim::start(
            &dir.path().join(variant),
            smtp,
            &format!("127.0.0.1 {}{suffix}", d.http),
        );
        let line = send(smtp, &data("gtube.eml"));
        assert!(
            line.contains("EOD=550 Rejected by shrike: spam score 6.0"),
            "{variant}: {line}\n{}\n{}",
            exim.log(),
            d.log_text()
        );
        let line = send(smtp, &data("daemon/ham.eml"));
        assert!(
            line.contains("EOD=250"),
            "{variant}: {line}\n{}",
            exim.log()
        );
        let message = delivered(&exim.dir.join("mail"), "planning meeting");
        let score: f64 = header(&message, "X-Shrike-Score")
            .unwrap_or_else(|| panic!("{variant}: no X-Shrike-Score in\n{message}"))
            .parse()
            .expect("a number");
        assert!(score < 6.0, "{variant}: {message}");
        assert_eq!(
            header(&message, "X-Shrike-Action"),
            Some("no action"),
            "{variant}: {message}"
        );
        assert!(
            !message.contains("GTUBE-STANDARD"),
            "{variant}: GTUBE was not delivered"
        );
        assert_eq!(d.metric(counter), before + 2, "{variant}");
    }
}

struct Haraka(Child);

impl Drop for Haraka {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Haraka with its `rspamd` plugin on shrike's `/checkv2`: GTUBE refused at DATA, ham queued
/// with the plugin's headers and the ones shrike's milter block asks for.
#[test]
fn haraka_rspamd_plugin_rejects_gtube_and_delivers_ham_with_its_headers() {
    let haraka = tool("SHRIKE_HARAKA", "target/haraka/node_modules/.bin/haraka");
    let modules = haraka.parent().unwrap().parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    let (conf, mail) = (dir.path().join("haraka"), dir.path().join("mail"));
    std::fs::create_dir_all(conf.join("config")).unwrap();
    std::fs::create_dir_all(conf.join("plugins/queue")).unwrap();
    std::fs::create_dir_all(&mail).unwrap();
    // Haraka's own defaults, then ours over them.
    for entry in std::fs::read_dir(modules.join("Haraka/config")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), conf.join("config").join(entry.file_name())).unwrap();
        }
    }
    let smtp = free_port();
    let write = |name: &str, text: String| std::fs::write(conf.join(name), text).unwrap();
    write(
        "config/smtp.ini",
        format!("listen=127.0.0.1:{smtp}\nnodes=0\n"),
    );
    write("config/me", "haraka.test\n".into());
    write("config/host_list", "example.com\n".into());
    write(
        "config/plugins",
        "rcpt_to.in_host_list\nrspamd\nqueue/to_dir\n".into(),
    );
    // The guide's file (docs/deploy.md) on this test's port; the test's client is on
    // loopback, which the plugin skips unless told.
    let ini = deploy::snippet("ini", "tests/integrations.rs")
        .replace("port = 11333", &format!("port = {}", d.http));
    write(
        "config/rspamd.ini",
        format!("{ini}[check]\nlocal_ip = true\nprivate_ip = true\n"),
    );
    std::fs::copy(
        root().join("tests/haraka/queue_to_dir.js"),
        conf.join("plugins/queue/to_dir.js"),
    )
    .unwrap();
    let log = dir.path().join("haraka.log");
    let child = Command::new(&haraka)
        .arg("-c")
        .arg(&conf)
        .env("HARAKA_MAIL_DIR", &mail)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start haraka");
    let _haraka = Haraka(child);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for_port(smtp, "haraka", log_text);
    let line = send(smtp, &data("gtube.eml"));
    assert!(
        line.contains("EOD=550"),
        "{line}\n{}\n{}",
        log_text(),
        d.log_text()
    );
    let line = send(smtp, &data("daemon/ham.eml"));
    assert!(line.contains("EOD=250"), "{line}\n{}", log_text());
    let message = delivered(&mail, "planning meeting");
    let score: f64 = header(&message, "X-Rspamd-Score")
        .unwrap_or_else(|| panic!("no X-Rspamd-Score in\n{message}"))
        .parse()
        .expect("a number");
    assert!(score < 6.0, "{message}");
    assert!(header(&message, "X-Rspamd-Bar").is_some(), "{message}");
    assert!(
        header(&message, "X-Spam-Status").is_some_and(|s| s.starts_with("No, score=")),
        "{message}"
    );
    assert!(!message.contains("GTUBE-STANDARD"));
    assert_eq!(
        std::fs::read_dir(&mail).unwrap().count(),
        1,
        "only the ham was queued"
    );
}

struct Sendmail {
    pid_file: PathBuf,
    sink: Child,
}

impl Drop for Sendmail {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(&self.pid_file) {
            if let Some(pid) = text.lines().next() {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        let _ = self.sink.kill();
        let _ = self.sink.wait();
    }
}

/// Sendmail with `INPUT_MAIL_FILTER` on shrike's milter, relaying to a sink: GTUBE gets
/// `550 5.7.1`, ham reaches the sink with the X-Spam-* headers, and with shrike stopped the
/// filter's `F=T` tempfails mail instead of letting it through unchecked.
#[test]
fn sendmail_milter_rejects_gtube_delivers_ham_and_tempfails_without_shrike() {
    let root_dir = tool("SHRIKE_SENDMAIL", "target/sendmail");
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), Options::default());
    let (queue, sink_dir) = (dir.path().join("queue"), dir.path().join("sink"));
    std::fs::create_dir_all(&queue).unwrap();
    std::fs::set_permissions(&queue, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::create_dir_all(&sink_dir).unwrap();
    let (smtp, sink_port) = (free_port(), free_port());
    let tools = std::env::var_os("SHRIKE_MTA_TOOLS")
        .map_or_else(|| root().join("../shared/tools/mta"), PathBuf::from);
    let sink = Command::new("python3")
        .arg(tools.join("pysink.py"))
        .args(["--port", &sink_port.to_string()])
        .arg("--dir")
        .arg(&sink_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the sink");
    wait_for_port(sink_port, "pysink", String::new);
    let t = dir.path().display();
    std::fs::write(
        dir.path().join("service.switch"),
        "hosts files\naliases files\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("statistics"), "").unwrap();
    let mc = format!(
        "divert(0)dnl
include(`{cf}/m4/cf.m4')dnl
OSTYPE(`linux')dnl
define(`confDOMAIN_NAME', `sendmail.shrike.test')dnl
define(`confDONT_PROBE_INTERFACES', `True')dnl
define(`confSERVICE_SWITCH_FILE', `{t}/service.switch')dnl
define(`QUEUE_DIR', `{t}/queue')dnl
define(`confPID_FILE', `{t}/sendmail.pid')dnl
define(`ALIAS_FILE', `')dnl
define(`STATUS_FILE', `{t}/statistics')dnl
define(`confHOST_STATUS_DIRECTORY', `')dnl
define(`SMART_HOST', `esmtp:[127.0.0.1]')dnl
define(`ESMTP_MAILER_ARGS', `TCP $h {sink_port}')dnl
FEATURE(`promiscuous_relay')dnl
FEATURE(`accept_unresolvable_domains')dnl
FEATURE(`nocanonify')dnl
DAEMON_OPTIONS(`Port={smtp}, Addr=127.0.0.1, Name=MTA')dnl
{filter}MAILER(`smtp')dnl
",
        cf = root_dir.join("usr/share/sendmail/cf").display(),
        // The guide's lines (docs/deploy.md), on this test's milter port.
        filter = deploy::snippet("m4", "tests/integrations.rs")
            .replace("inet:11332@", &format!("inet:{}@", d.milter)),
    );
    let out = Command::new("m4")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .and_then(|mut m4| {
            use std::io::Write;
            m4.stdin.take().unwrap().write_all(mc.as_bytes())?;
            m4.wait_with_output()
        })
        .expect("m4 (scripts/test.sh installs it)");
    assert!(out.status.success(), "m4 failed");
    let cf = dir.path().join("sendmail.cf");
    std::fs::write(&cf, out.stdout).unwrap();
    // Sendmail sleeps a minute at start when the host name has no dot; in a UTS namespace of
    // its own it gets a qualified one without touching the machine's.
    let started = Command::new("unshare")
        .arg("--uts")
        .arg("sh")
        .arg("-c")
        .arg(r#"hostname sendmail.shrike.test && exec "$0" -C "$1" -bd -q30m"#)
        .arg(root_dir.join("usr/libexec/sendmail/sendmail"))
        .arg(&cf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("start sendmail");
    assert!(started.success(), "sendmail did not start");
    let _sendmail = Sendmail {
        pid_file: dir.path().join("sendmail.pid"),
        sink,
    };
    wait_for_port(smtp, "sendmail", String::new);
    let line = send(smtp, &data("gtube.eml"));
    assert!(
        line.contains("EOD=550 5.7.1 Spam message rejected"),
        "{line}\n{}",
        d.log_text()
    );
    let line = send(smtp, &data("daemon/ham.eml"));
    assert!(line.contains("EOD=250"), "{line}");
    let message = delivered(&sink_dir, "planning meeting");
    assert!(
        header(&message, "X-Spam-Status").is_some_and(|s| s.starts_with("No, score=")),
        "{message}"
    );
    assert!(!message.contains("GTUBE-STANDARD"));
    // shrike stopped: F=T tempfails (Sendmail finds the filter down at MAIL) rather than
    // accepting unchecked mail.
    d.stop();
    let line = send(smtp, &data("daemon/ham.eml"));
    assert!(line.contains("=451"), "{line}");
    assert_eq!(std::fs::read_dir(&sink_dir).unwrap().count(), 1);
}
