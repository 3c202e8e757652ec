//! Secrets and files, through the binary (docs/security.md, "Secrets and files"): Redis
//! passwords never reach the log, an error, `/health`, `/stat`, `/metrics` or `shrike config
//! check` (against a real redis-server that requires one, with the right password, a wrong one,
//! an unreachable cluster and a restart), while the user and host still do; the data directory
//! is 0700 and the history's key 0600 under `umask 000`, an existing directory is left as it
//! is (with a warning when every user may enter it) and a loose key is tightened; an empty
//! `http.password` is refused, and an empty `Password` header is no password.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/redis.rs"]
mod redis;

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use daemon::{free_port, wait_until, Daemon, Options};
use redis::Node;

/// The ACL user's password the daemon is given.
const REDIS_PW: &str = "Rpw-7f3a9c1e5d";
/// The default user's (`requirepass`): only the test's redis-cli uses it.
const ADMIN_PW: &str = "Apw-0b9e2c7d41";
/// A wrong password for the same user.
const WRONG_PW: &str = "Wpw-5c2e8a0f63";
/// `[store.redis] password`, given apart from the URLs.
const STORE_PW: &str = "Spw-91d4b7e2a8";
/// `[http] password`.
const HTTP_PW: &str = "Hpw-3e6a1f9c07";
const SECRETS: [&str; 5] = [REDIS_PW, ADMIN_PW, WRONG_PW, STORE_PW, HTTP_PW];

const MESSAGE: &[u8] = b"From: alice@example.com\r\nTo: bob@example.org\r\nSubject: hello\r\n\
    Message-ID: <s1@example.com>\r\n\r\nHello Bob, see you at noon.\r\n";

fn shrike(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(args)
        .output()
        .expect("run shrike")
}

fn config_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn assert_no_secret(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{what} holds a password ({s}):\n{text}");
    }
}

fn health(d: &Daemon) -> serde_json::Value {
    d.get("/health").json()
}

/// What a daemon shows of itself: `/health`, `/stat`, `/metrics`.
fn endpoints(d: &Daemon) -> String {
    ["/health", "/stat", "/metrics"]
        .iter()
        .map(|p| format!("{p}: {}\n", d.get(p).text()))
        .collect()
}

fn start(dir: &Path, name: &str, config: String) -> Daemon {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    Daemon::start(
        &d,
        Options {
            config: Some(config),
            workers: Some(1),
            ..Options::default()
        },
    )
}

fn acl_user(node: &Node) {
    let out = node.cli(&[
        "ACL",
        "SETUSER",
        "shrike",
        "on",
        &format!(">{REDIS_PW}"),
        "~*",
        "&*",
        "+@all",
    ]);
    assert_eq!(out.trim(), "OK", "ACL SETUSER: {out}");
}

#[test]
fn redis_passwords_reach_no_log_error_endpoint_or_printed_config() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut node = Node::start_with_password(dir.path(), port, ADMIN_PW);
    acl_user(&node);
    let store = |urls: &str, extra: &str| {
        format!(
            "[http]\npassword = \"{HTTP_PW}\"\n[store]\nbackend = \"redis\"\n[store.redis]\n\
             urls = {urls}\ntimeout_ms = 50\nflush_interval_ms = 20\n{extra}"
        )
    };
    let shown = format!("redis://shrike:***@127.0.0.1:{port}");

    // The right password: connected, used, then the node killed and restarted (its ACL user
    // gone until it is set again: refused logins meanwhile), and connected again.
    let good = store(
        &format!("[\"redis://shrike:{REDIS_PW}@127.0.0.1:{port}\"]"),
        "",
    );
    let mut d = start(dir.path(), "good", good.clone());
    wait_until("the store connected", 10, || health(&d)["store"] == "ok");
    assert_eq!(d.post("/checkv2", &[], MESSAGE).status, 200);
    assert_eq!(d.post("/learnspam", &[], MESSAGE).status, 200);
    let mut seen = endpoints(&d);
    node.kill9();
    wait_until("the outage seen", 15, || {
        d.log_text().contains("redis store: cannot connect") && health(&d)["store"] == "degraded"
    });
    let down = health(&d);
    assert!(down["store_error"].is_string(), "{down}");
    let other = String::from_utf8_lossy(MESSAGE)
        .replace("s1@", "s2@")
        .replace("noon", "one");
    assert_eq!(d.post("/learnspam", &[], other.as_bytes()).status, 503);
    seen.push_str(&endpoints(&d));
    node.restart();
    wait_until("a refused login", 15, || {
        health(&d)["store_error"]
            .as_str()
            .is_some_and(|e| e.contains("authentication failed"))
    });
    seen.push_str(&endpoints(&d));
    acl_user(&node);
    wait_until("connected again", 15, || health(&d)["store"] == "ok");
    seen.push_str(&endpoints(&d));
    // A configuration that no longer parses, on the password's line: the reload's error is on
    // /health without the line.
    std::fs::write(
        d.data.parent().unwrap().join("shrike.toml"),
        format!("[http]\npassword = \"{HTTP_PW}\n"),
    )
    .unwrap();
    assert_eq!(d.post("/reload", &[], b"").status, 422);
    let reload_error = health(&d)["last_reload_error"].to_string();
    assert!(reload_error.contains("line 2"), "{reload_error}");
    seen.push_str(&endpoints(&d));
    let log = d.stop();
    assert_no_secret("the log", &log);
    assert_no_secret("/health, /stat, /metrics", &seen);
    // What an operator needs is still there: the user, host and port, the reason.
    assert_eq!(
        log.matches("redis store connected").count(),
        2,
        "connected, then again after the restart:\n{log}"
    );
    let connected = log
        .lines()
        .find(|l| l.contains("redis store connected"))
        .unwrap();
    assert!(connected.contains(&shown), "{connected}");
    let failed = log
        .lines()
        .find(|l| l.contains("redis store: cannot connect"))
        .unwrap();
    assert!(failed.contains(&shown), "{failed}");

    // A wrong password: refused logins, logged and on /health.
    let wrong = store(
        &format!("[\"redis://shrike:{WRONG_PW}@127.0.0.1:{port}\"]"),
        "",
    );
    let mut d = start(dir.path(), "wrong", wrong);
    wait_until("the refusal logged", 15, || {
        d.log_text().contains("redis store: cannot connect")
    });
    let h = health(&d);
    assert_eq!(h["store"], "degraded", "{h}");
    let seen = endpoints(&d);
    let log = d.stop();
    assert_no_secret("the log", &log);
    assert_no_secret("/health, /stat, /metrics", &seen);
    assert!(log.contains(&shown), "{log}");

    // A cluster whose seed nodes cannot be reached, the password given apart as well.
    let (a, b) = (free_port(), free_port());
    let cluster = store(
        &format!(
            "[\"redis://shrike:{REDIS_PW}@127.0.0.1:{a}\", \"redis://shrike:{REDIS_PW}@127.0.0.1:{b}\"]"
        ),
        &format!("cluster = true\nusername = \"shrike\"\npassword = \"{STORE_PW}\"\n"),
    );
    let mut d = start(dir.path(), "cluster", cluster.clone());
    wait_until("the failure logged", 15, || {
        d.log_text().contains("redis store: cannot connect")
    });
    assert_eq!(d.post("/checkv2", &[], MESSAGE).status, 200);
    let seen = endpoints(&d);
    let log = d.stop();
    assert_no_secret("the log", &log);
    assert_no_secret("/health, /stat, /metrics", &seen);
    for p in [a, b] {
        let node = format!("redis://shrike:***@127.0.0.1:{p}");
        assert!(log.contains(&node), "{node} not in:\n{log}");
    }

    // `config check` prints the configuration with every password masked.
    for (name, text) in [("good.toml", &good), ("cluster.toml", &cluster)] {
        let path = config_file(dir.path(), name, text);
        let out = shrike(&["--config", &path, "config", "check"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        assert_no_secret("config check", &stdout);
        assert_no_secret(
            "config check's stderr",
            &String::from_utf8_lossy(&out.stderr),
        );
        assert!(stdout.contains("redis://shrike:***@127.0.0.1:"), "{stdout}");
        assert!(stdout.contains("password = \"***\""), "{stdout}");
    }
    // Configurations refused: the error quotes the URL masked, or names the place only.
    for (text, kept) in [
        (
            format!("[store.redis]\nurls = [\"rediss://shrike:{REDIS_PW}@10.0.0.5:6380\"]\n"),
            "rediss://shrike:***@10.0.0.5:6380",
        ),
        (
            format!("[store.redis]\nurls = [\"http://shrike:{REDIS_PW}@10.0.0.5\"]\n"),
            "http://shrike:***@10.0.0.5",
        ),
        (
            format!("[store.redis]\nurls = \"redis://shrike:{REDIS_PW}@10.0.0.5:6379\"\n"),
            "redis://shrike:***@10.0.0.5:6379",
        ),
        (
            format!("[http]\npassword = \"{HTTP_PW}\n"),
            "line 4, column",
        ),
    ] {
        let text = format!("[store]\nbackend = \"redis\"\n{text}");
        let path = config_file(dir.path(), "bad.toml", &text);
        let out = shrike(&["--config", &path, "config", "check"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}");
        assert!(stderr.contains(kept), "{kept} not in: {stderr}");
        assert_no_secret("a config error", &stderr);
        assert_no_secret(
            "a config error's stdout",
            &String::from_utf8_lossy(&out.stdout),
        );
    }
    // `store import` that cannot reach the cluster names it, masked.
    let path = config_file(dir.path(), "cluster.toml", &cluster);
    let out = shrike(&["--config", &path, "store", "import", "--in", "/dev/null"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot reach redis"), "{stderr}");
    assert!(
        stderr.contains(&format!("redis://shrike:***@127.0.0.1:{a}")),
        "{stderr}"
    );
    assert_no_secret("store import", &stderr);
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

const OPEN_WARNING: &str = "the data directory is open to every user";

#[test]
fn the_data_directory_is_private_and_the_history_key_the_owners_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        config: Some("[history]\nprivacy = \"hash\"\nflush_ms = 100\n".into()),
        umask: Some(0o000),
        ports: Some((free_port(), free_port())),
        ..Options::default()
    };
    let mut d = Daemon::start(dir.path(), options.clone());
    assert_eq!(d.post("/checkv2", &[], MESSAGE).status, 200);
    let (data, history, key) = (
        d.data.clone(),
        d.data.join("history"),
        d.data.join("history/key"),
    );
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&history), 0o700);
    assert_eq!(mode(&key), 0o600);
    let log = d.stop();
    assert!(!log.contains(OPEN_WARNING), "{log}");
    assert!(!log.contains("made 0600"), "{log}");

    // As an older shrike left them: a directory every user may enter is kept as it is, and
    // said to be open; the key is ours, and tightened.
    chmod(&data, 0o755);
    chmod(&key, 0o644);
    let mut d = Daemon::start(dir.path(), options.clone());
    assert_eq!(mode(&data), 0o755, "an existing directory is left as it is");
    assert_eq!(mode(&key), 0o600);
    let log = d.stop();
    let warning = log
        .lines()
        .find(|l| l.contains(OPEN_WARNING))
        .unwrap_or_else(|| panic!("no warning:\n{log}"));
    assert!(
        warning.contains("0755") && warning.contains(&data.display().to_string()),
        "{warning}"
    );
    assert!(log.contains("made 0600"), "{log}");

    // A group allowed in is the operator's choice: no warning, nothing changed.
    chmod(&data, 0o750);
    let mut d = Daemon::start(dir.path(), options);
    let log = d.stop();
    assert_eq!(mode(&data), 0o750);
    assert!(!log.contains(OPEN_WARNING), "{log}");

    // An offline learn makes its data directory the same way.
    let learned = dir.path().join("learned");
    let spam = dir.path().join("spam.eml");
    std::fs::write(&spam, MESSAGE).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg("umask 000 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_shrike"))
        .args(["learn", "--spam"])
        .arg(&spam)
        .arg("--data")
        .arg(&learned)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(mode(&learned), 0o700);
}

#[test]
fn an_empty_http_password_is_refused_at_check_and_start() {
    let dir = tempfile::tempdir().unwrap();
    let empty = config_file(dir.path(), "empty.toml", "[http]\npassword = \"\"\n");
    let out = shrike(&["--config", &empty, "config", "check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("http.password is empty"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing printed as if it were usable"
    );
    let data = dir.path().join("data");
    let out = shrike(&[
        "--config",
        &empty,
        "serve",
        "--http",
        &format!("127.0.0.1:{}", free_port()),
        "--milter",
        "off",
        "--data",
        data.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("http.password is empty"), "{stderr}");
    // A password is accepted, and printed masked.
    let set = config_file(
        dir.path(),
        "set.toml",
        &format!("[http]\npassword = \"{HTTP_PW}\"\n"),
    );
    let out = shrike(&["--config", &set, "config", "check"]);
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("password = \"***\""), "{stdout}");
    assert_no_secret("config check", &stdout);
}

/// A local address that is not loopback (the route to a documentation address; no packet is
/// sent).
fn non_loopback_ip() -> IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.123:9").expect("a route off loopback");
    let ip = s.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "{ip}");
    ip
}

/// One request from `ip`'s side: the status and the head.
fn request(
    ip: IpAddr,
    port: u16,
    line: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    let host = format!("{ip}:{port}");
    let r = daemon::http_to(ip, port, &host, line, headers, body).unwrap();
    let head = r
        .headers
        .iter()
        .map(|(n, v)| format!("{n}: {v}"))
        .collect::<Vec<_>>()
        .join("\r\n");
    (r.status, head)
}

#[test]
fn an_empty_password_header_is_no_password_and_only_the_whole_password_lets_in() {
    let dir = tempfile::tempdir().unwrap();
    let ip = non_loopback_ip();
    let open = |name: &str, config: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        Daemon::start(
            &d,
            Options {
                config: Some(config.into()),
                http_host: Some("0.0.0.0".into()),
                workers: Some(1),
                ..Options::default()
            },
        )
    };
    let admin = [
        ("POST /learnspam", MESSAGE),
        ("POST /reload", b"".as_slice()),
        ("GET /history", b"".as_slice()),
        ("GET /ui/api/status", b"".as_slice()),
    ];

    // No password configured: an empty Password header is no password.
    let d = open("none", "");
    for (line, body) in admin {
        let (status, _) = request(ip, d.http, line, &[("Password", "")], body);
        assert_eq!(status, 403, "{line} with an empty Password header");
    }
    let (status, head) = request(ip, d.http, "POST /ui/login", &[], b"password=");
    assert_eq!(status, 403, "{head}");
    assert!(!head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    // Loopback clients are unchanged.
    assert_eq!(d.post("/reload", &[("Password", "")], b"").status, 200);
    assert_eq!(d.learns("spam"), 0);

    // A password configured: the whole one lets in, on every admin endpoint and the UI's
    // login; an empty, a shorter, a longer or a wrong one is refused (401, then 429 while the
    // client waits out its wrong guesses).
    let d = open("set", &format!("[http]\npassword = \"{HTTP_PW}\"\n"));
    for (line, body) in admin {
        let (status, _) = request(ip, d.http, line, &[("Password", HTTP_PW)], body);
        assert_eq!(status, 200, "{line} with the password");
    }
    let learned = d.learns("spam");
    assert_eq!(learned, 1);
    let (status, head) = request(
        ip,
        d.http,
        "POST /ui/login",
        &[],
        format!("password={HTTP_PW}").as_bytes(),
    );
    assert_eq!(status, 303, "{head}");
    assert!(head.to_ascii_lowercase().contains("set-cookie"), "{head}");
    let short = &HTTP_PW[..HTTP_PW.len() - 1];
    let long = format!("{HTTP_PW}0");
    let (status, _) = request(ip, d.http, "GET /history", &[("Password", short)], b"");
    assert_eq!(status, 401, "the first wrong password");
    for given in [short, long.as_str(), "Hpw-3e6a1f9c08"] {
        for (line, body) in admin {
            let (status, _) = request(ip, d.http, line, &[("Password", given)], body);
            assert!(
                status == 401 || status == 429,
                "{line} with Password {given:?}: {status}"
            );
        }
    }
    // An empty header is no password: refused without counting as a guess.
    let (status, _) = request(ip, d.http, "GET /history", &[("Password", "")], b"");
    assert!(status == 401 || status == 429, "{status}");
    assert_eq!(d.learns("spam"), learned);
    let log = d.log_text();
    assert_no_secret("the log", &log);
}
