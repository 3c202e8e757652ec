//! The access model through the binary (docs/security.md, "Who may do what"): every row of
//! its table (endpoint × client kind → allowed / 401 / 403) with `curl` bound to addresses in
//! and outside the configured networks; a real nginx in front, with and without
//! `trusted_proxies`; a remote host in its own network namespace with `curl`, `rspamc` and
//! `spamc`; Unix sockets and their peers' users; a thousand wrong passwords while scanning
//! goes on; `shrike passwd` and the configuration's checks.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/deploy.rs"]
mod deploy;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use daemon::{free_port, wait_until, Daemon, Options};

const ADMIN_PW: &str = "adm-7c1e93a2";
const READ_PW: &str = "rd-40f2b6d1";

const MESSAGE: &str = "From: alice@example.com\r\nTo: bob@example.org\r\nSubject: hello\r\n\
    Message-ID: <a1@example.com>\r\n\r\nHello Bob, see you at noon.\r\n";

fn shrike(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shrike"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run shrike");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `shrike passwd`'s hash of `password`, as an operator makes one.
fn passwd(password: &str) -> String {
    let o = shrike(&["passwd"], &format!("{password}\n"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hash = String::from_utf8(o.stdout).unwrap().trim().to_string();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains(password));
    hash
}

/// One request with curl from source address `from`: the status (0: no connection).
fn curl(from: &str, url: &str, method: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "30"])
        .args(["--interface", from, "-X", method]);
    for (n, v) in headers {
        cmd.arg("-H").arg(format!("{n}: {v}"));
    }
    if method == "POST" {
        cmd.arg("--data-binary").arg(body);
    }
    let o = cmd.arg(url).output().expect("curl is installed");
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The endpoints of the table: (name, method, path, body, extra headers).
fn endpoints() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    vec![
        ("ping", "GET", "/ping", ""),
        ("health", "GET", "/health", ""),
        ("checkv2", "POST", "/checkv2", MESSAGE),
        ("metrics", "GET", "/metrics", ""),
        ("stat", "GET", "/stat", ""),
        ("counters", "GET", "/counters", ""),
        ("history", "GET", "/history", ""),
        (
            "reputation",
            "GET",
            "/reputation?type=subject&value=hello",
            "",
        ),
        ("ui", "GET", "/ui/api/status", ""),
        ("learnspam", "POST", "/learnspam", MESSAGE),
        ("reload", "POST", "/reload", ""),
        ("statreset", "POST", "/statreset", ""),
        // Other people's mail: admin only, reading included.
        ("quarantine", "GET", "/quarantine", ""),
    ]
}

/// Runs every endpoint for one client kind and compares with the expected statuses, in
/// `endpoints()` order; returns the rows that differ.
fn row(from: &str, port: u16, headers: &[(&str, &str)], expected: [u16; 13]) -> Vec<String> {
    let mut wrong = Vec::new();
    for ((name, method, path, body), want) in endpoints().into_iter().zip(expected) {
        let mut h = vec![("Content-Type", "message/rfc822")];
        h.extend_from_slice(headers);
        let got = curl(
            from,
            &format!("http://127.0.0.1:{port}{path}"),
            method,
            &h,
            body,
        );
        if got != want {
            wrong.push(format!("{from} {headers:?} {name}: {got}, expected {want}"));
        }
    }
    wrong
}

#[test]
fn every_row_of_the_access_table() {
    let dir = tempfile::tempdir().unwrap();
    // Empty and malformed hashes are refused before anything starts.
    for (text, says) in [
        (
            "[access]\npassword_hash = \"\"\n",
            "access.password_hash is empty",
        ),
        (
            "[access]\nread_password_hash = \"plain\"\n",
            "not an Argon2 PHC string",
        ),
        (
            "[access]\nadmin_networks = [\"10.0.0.300/8\"]\n",
            "not a network",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let o = shrike(&["--config", path.to_str().unwrap(), "config", "check"], "");
        assert!(!o.status.success(), "{text}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{text}: {err}");
    }

    let (admin, read) = (passwd(ADMIN_PW), passwd(READ_PW));
    let config = format!(
        "[access]\nadmin_networks = [\"127.0.0.1/32\"]\nread_networks = [\"127.0.0.3/32\"]\n\
         password_hash = \"{admin}\"\nread_password_hash = \"{read}\"\n\n\
         [quarantine]\nenabled = true\n"
    );
    // `config check` prints the hashes masked.
    let path = dir.path().join("check.toml");
    std::fs::write(&path, &config).unwrap();
    let o = shrike(&["--config", path.to_str().unwrap(), "config", "check"], "");
    assert!(o.status.success());
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(!printed.contains(&admin) && printed.contains("password_hash = \"***\""));

    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(config),
            http_host: Some("0.0.0.0".into()),
            workers: Some(1),
            ..Options::default()
        },
    );
    let p = d.http;
    let (ok, unauth, forbidden) = (200, 401, 403);
    let mut wrong = Vec::new();
    // The admin network: everything.
    wrong.extend(row("127.0.0.1", p, &[], [ok; 13]));
    // The read network: reads, not learns, reloads or resets (a password could make it an
    // admin).
    let reads = [
        ok, ok, ok, ok, ok, ok, ok, ok, ok, unauth, unauth, unauth, unauth,
    ];
    wrong.extend(row("127.0.0.3", p, &[], reads));
    // Any other address: scans only.
    let mut scans = [unauth; 13];
    scans[..3].fill(ok);
    wrong.extend(row("127.0.0.2", p, &[], scans));
    // With the admin password: everything; with the read one: reads, and 403 for a change.
    wrong.extend(row("127.0.0.2", p, &[("Password", ADMIN_PW)], [ok; 13]));
    let read_pw = [
        ok, ok, ok, ok, ok, ok, ok, ok, ok, forbidden, forbidden, forbidden, forbidden,
    ];
    wrong.extend(row("127.0.0.4", p, &[("Password", READ_PW)], read_pw));
    // A browser's page of another site, even on the admin network: refused.
    let evil = [("Origin", "http://evil.example")];
    let mut browsed = [403; 13];
    browsed[..3].fill(ok);
    wrong.extend(row("127.0.0.1", p, &evil, browsed));
    let rebound = [("Host", "rebind.evil.example")];
    wrong.extend(row("127.0.0.1", p, &rebound, browsed));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // A wrong password: 401, then 429 with Retry-After while that client waits; another
    // client with the right one is not held up.
    let url = format!("http://127.0.0.1:{p}/history");
    let bad = [("Password", "adm-7c1e93a")];
    assert_eq!(curl("127.0.0.5", &url, "GET", &bad, ""), 401);
    assert_eq!(curl("127.0.0.5", &url, "GET", &bad, ""), 429);
    assert_eq!(
        curl("127.0.0.5", &url, "GET", &[("Password", ADMIN_PW)], ""),
        429
    );
    assert_eq!(
        curl("127.0.0.6", &url, "GET", &[("Password", ADMIN_PW)], ""),
        200
    );
    assert_eq!(d.metric("shrike_auth_failures_total"), 1);
    // 9 + 3 + 3 + 9 + 9 refusals of the rows, and these 3.
    assert!(d.metric("shrike_access_denied_total") >= 36);
    // State changes that a page could send, from the admin network: refused without the
    // message type or a header no page can add.
    let learn = format!("http://127.0.0.1:{p}/learnspam");
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        assert_eq!(
            curl(
                "127.0.0.1",
                &learn,
                "POST",
                &[("Content-Type", ct)],
                MESSAGE
            ),
            403,
            "{ct}"
        );
    }
    // rspamc sends text/plain with its own headers: learned.
    let o = Command::new("rspamc")
        .args(["-h", &format!("127.0.0.1:{p}"), "learn_spam"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(MESSAGE.as_bytes())?;
            c.wait_with_output()
        })
        .expect("rspamc");
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && said.contains("success = true"),
        "{said}"
    );
    // Learned by the admin (once), the admin password (once) and rspamc: nothing else.
    assert_eq!(d.learns("spam"), 3);
    let log = d.log_text();
    assert!(!log.contains(ADMIN_PW) && !log.contains(READ_PW));
    assert!(log.contains("wrong password"), "{log}");
}

#[test]
fn without_passwords_nothing_can_let_a_client_in_and_wide_networks_are_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let d = Daemon::start(
        &dir.path().join("a"),
        Options {
            config: Some("[access]\npublic_metrics = true\n".into()),
            http_host: Some("0.0.0.0".into()),
            workers: Some(1),
            ..Options::default()
        },
    );
    // 403, not 401: no password is configured; /metrics is public here.
    let mut scans = [403; 13];
    scans[..4].fill(200);
    let wrong = row("127.0.0.2", d.http, &[("Password", "anything")], scans);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(
        !d.log_text().contains("!!!"),
        "loopback admins only: no warning"
    );
    drop(d);
    let d = Daemon::start(
        &dir.path().join("b"),
        Options {
            config: Some("[access]\nadmin_networks = [\"0.0.0.0/0\"]\n".into()),
            http_host: Some("0.0.0.0".into()),
            workers: Some(1),
            ..Options::default()
        },
    );
    let log = d.log_text();
    assert!(
        log.contains("!!! HTTP listens beyond loopback") && log.contains("password_hash"),
        "{log}"
    );
}

/// nginx (Debian's nginx-light) on a free loopback port in front of the daemon, setting
/// X-Forwarded-For as its documentation shows; one process (no master: killing a master would
/// leave its workers behind, holding the test's output open), stopped when dropped.
struct Nginx {
    child: Child,
    port: u16,
}

impl Nginx {
    fn start(dir: &Path, upstream: u16) -> Nginx {
        let port = free_port();
        let server = format!(
            "server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
               proxy_pass http://127.0.0.1:{upstream};\n\
               proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n    }}\n  }}\n"
        );
        let n = Nginx::spawn(dir, port, &server);
        wait_until("nginx", 30, || {
            curl(
                "127.0.0.1",
                &format!("http://127.0.0.1:{port}/ping"),
                "GET",
                &[],
                "",
            ) == 200
        });
        n
    }

    /// One nginx process under `dir` serving the `server` block (which listens on `port`).
    fn spawn(dir: &Path, port: u16, server: &str) -> Nginx {
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        // As root, nginx's workers would switch to `nobody`, who cannot write its temp dirs.
        let user = if nix_root() { "user root;" } else { "" };
        let conf = format!(
            "{user}\nmaster_process off;\nerror_log stderr;\npid {dir}/nginx.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {dir}/body;\n\
               proxy_temp_path {dir}/proxy;\n  fastcgi_temp_path {dir}/fcgi;\n\
               uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n{server}}}\n",
            dir = dir.display()
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(nginx_binary())
            .args(["-p", &dir.display().to_string(), "-c"])
            .arg(&path)
            .args(["-g", "daemon off;"])
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("nginx.log")).unwrap(),
            ))
            .spawn()
            .expect("nginx is installed (scripts/test.sh installs nginx-light)");
        Nginx { child, port }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> PathBuf {
    ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("nginx"))
}

fn nix_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

#[test]
fn a_proxy_names_its_clients_only_when_trusted_and_never_counts_as_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let history = |port: u16, from: &str, headers: &[(&str, &str)]| {
        curl(
            from,
            &format!("http://127.0.0.1:{port}/history"),
            "GET",
            headers,
            "",
        )
    };
    for sub in ["plain", "trusted"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    // Not declared: nginx on loopback sends X-Forwarded-For, so its requests are nobody's,
    // whoever the client is (today's loopback trust made every client of a proxy an admin).
    {
        let d = Daemon::start(&dir.path().join("plain"), Options::default());
        let nginx = Nginx::start(&dir.path().join("nginx-plain"), d.http);
        assert_eq!(history(nginx.port, "127.0.0.1", &[]), 403);
        assert_eq!(history(nginx.port, "127.0.0.2", &[]), 403);
        let learn = format!("http://127.0.0.1:{}/learnspam", nginx.port);
        let ct = [("Content-Type", "message/rfc822")];
        assert_eq!(curl("127.0.0.2", &learn, "POST", &ct, MESSAGE), 403);
        assert_eq!(
            curl(
                "127.0.0.2",
                &format!("http://127.0.0.1:{}/checkv2", nginx.port),
                "POST",
                &ct,
                MESSAGE
            ),
            200,
            "scanning through the proxy is open"
        );
        assert_eq!(d.learns("spam"), 0);
        // Direct loopback clients are admins as before.
        assert_eq!(history(d.http, "127.0.0.1", &[]), 200);
    }
    // Declared: the client it names is judged, a forged entry to its left is not.
    let d = Daemon::start(
        &dir.path().join("trusted"),
        Options {
            config: Some("[access]\ntrusted_proxies = [\"127.0.0.1/32\"]\n".into()),
            ..Options::default()
        },
    );
    let nginx = Nginx::start(&dir.path().join("nginx-trusted"), d.http);
    assert_eq!(history(nginx.port, "127.0.0.1", &[]), 200);
    assert_eq!(history(nginx.port, "127.0.0.2", &[]), 403);
    let forged = [("X-Forwarded-For", "127.0.0.1")];
    assert_eq!(history(nginx.port, "127.0.0.2", &forged), 403);
    // The proxy's own address without X-Forwarded-For is no admin, nor a malformed header.
    assert_eq!(history(d.http, "127.0.0.1", &[]), 403);
    for bad in ["", "127.0.0.1 127.0.0.2", "not-an-ip", "127.0.0.1,,"] {
        assert_eq!(
            history(d.http, "127.0.0.1", &[("X-Forwarded-For", bad)]),
            403,
            "{bad:?}"
        );
    }
    // A peer that is no proxy cannot name another client.
    assert_eq!(history(d.http, "127.0.0.2", &forged), 403);
}

/// docs/deploy.md's TLS proxy as it stands: its nginx server block (on a test port, with a
/// certificate made here) in front of a daemon with its `[access]` block (the example office
/// network replaced by 127.0.0.2): a client in that network reads through TLS under the guide's
/// host name, another client only scans, and the proxy's own address is nobody.
#[test]
fn the_deploy_guides_tls_proxy_names_its_clients() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("daemon")).unwrap();
    let d = Daemon::start(
        &dir.path().join("daemon"),
        Options {
            config: Some(
                deploy::snippet("toml", "tests/access.rs").replace("192.0.2.0/24", "127.0.0.2/32"),
            ),
            ..Options::default()
        },
    );
    let n = dir.path().join("nginx");
    std::fs::create_dir_all(n.join("logs")).unwrap();
    let (cert, key) = (n.join("cert.pem"), n.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=shrike.example.org"])
        .args(["-addext", "subjectAltName=DNS:shrike.example.org"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is installed (scripts/test.sh installs it)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let port = free_port();
    let server = deploy::snippet("nginx", "tests/access.rs")
        .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{port} ssl;"))
        .replace(
            "/etc/ssl/certs/shrike.example.org.pem",
            &cert.display().to_string(),
        )
        .replace(
            "/etc/ssl/private/shrike.example.org.key",
            &key.display().to_string(),
        )
        .replace(
            "http://127.0.0.1:11333",
            &format!("http://127.0.0.1:{}", d.http),
        );
    assert!(
        server.contains(&format!("127.0.0.1:{port} ssl")),
        "{server}"
    );
    let _nginx = Nginx::spawn(&n, port, &server);
    let https = |from: &str, method: &str, path: &str| -> u16 {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "30"])
            .args(["--interface", from, "-X", method])
            .arg("--resolve")
            .arg(format!("shrike.example.org:{port}:127.0.0.1"))
            .arg("--cacert")
            .arg(&cert);
        if method == "POST" {
            cmd.args([
                "-H",
                "Content-Type: message/rfc822",
                "--data-binary",
                MESSAGE,
            ]);
        }
        let o = cmd
            .arg(format!("https://shrike.example.org:{port}{path}"))
            .output()
            .expect("curl is installed");
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    wait_until("nginx with TLS", 30, || {
        https("127.0.0.2", "GET", "/ping") == 200
    });
    assert_eq!(
        https("127.0.0.2", "GET", "/history"),
        200,
        "the read network reads"
    );
    assert_eq!(https("127.0.0.2", "GET", "/stat"), 200);
    assert_eq!(https("127.0.0.3", "GET", "/history"), 403, "others do not");
    assert_eq!(
        https("127.0.0.3", "POST", "/checkv2"),
        200,
        "scanning is open"
    );
    assert_eq!(
        https("127.0.0.2", "POST", "/learnspam"),
        403,
        "reading is no admin"
    );
    // The proxy's own address, without a client named, is nobody.
    assert_eq!(
        curl(
            "127.0.0.1",
            &format!("http://127.0.0.1:{}/history", d.http),
            "GET",
            &[],
            ""
        ),
        403
    );
}

/// A network namespace with a veth pair: the host side `10.213.N.1`, the namespace's
/// `10.213.N.2`. Removed when dropped.
struct Netns {
    name: String,
    host_ip: String,
}

impl Netns {
    fn create() -> Result<Netns, String> {
        let n = std::process::id() % 200 + 20;
        let name = format!("shk-acc-{n}");
        let (veth_host, veth_ns) = (format!("shka{n}h"), format!("shka{n}n"));
        let host_ip = format!("10.213.{n}.1");
        let ip = |args: &str| -> Result<(), String> {
            let o = Command::new("ip")
                .args(args.split(' '))
                .output()
                .map_err(|e| e.to_string())?;
            match o.status.success() {
                true => Ok(()),
                false => Err(format!(
                    "ip {args}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
            }
        };
        let _ = ip(&format!("netns del {name}"));
        let _ = ip(&format!("link del {veth_host}"));
        ip(&format!("netns add {name}"))?;
        let ns = Netns { name, host_ip };
        ip(&format!(
            "link add {veth_host} type veth peer name {veth_ns}"
        ))?;
        ip(&format!("link set {veth_ns} netns {}", ns.name))?;
        ip(&format!("addr add {}/24 dev {veth_host}", ns.host_ip))?;
        ip(&format!("link set {veth_host} up"))?;
        ip(&format!(
            "netns exec {} ip addr add 10.213.{n}.2/24 dev {veth_ns}",
            ns.name
        ))?;
        ip(&format!("netns exec {} ip link set {veth_ns} up", ns.name))?;
        ip(&format!("netns exec {} ip link set lo up", ns.name))?;
        Ok(ns)
    }

    fn run(&self, program: &str, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ip netns exec");
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        child.wait_with_output().unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

#[test]
fn a_remote_host_scans_and_nothing_else() {
    let ns = match Netns::create() {
        Ok(ns) => ns,
        Err(why) => {
            // Only where namespaces cannot be made (no root): the table's test above covers
            // the same rows from a second loopback address.
            eprintln!("SKIPPED: cannot make a network namespace: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let spamd = free_port();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!("[spamd]\nlisten = \"0.0.0.0:{spamd}\"\n")),
            http_host: Some("0.0.0.0".into()),
            workers: Some(1),
            ..Options::default()
        },
    );
    let base = format!("http://{}:{}", ns.host_ip, d.http);
    let status = |method: &str, path: &str| -> u16 {
        let mut args = vec![
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-m",
            "20",
            "-X",
            method,
        ];
        let url = format!("{base}{path}");
        if method == "POST" {
            args.extend([
                "-H",
                "Content-Type: message/rfc822",
                "--data-binary",
                MESSAGE,
            ]);
        }
        args.push(&url);
        let o = ns.run("curl", &args, "");
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    };
    assert_eq!(status("POST", "/checkv2"), 200, "scanning is open");
    assert_eq!(status("GET", "/ping"), 200);
    for (method, path) in [
        ("GET", "/reputation?type=recipient&value=bob@example.org"),
        ("GET", "/stat"),
        ("GET", "/metrics"),
        ("GET", "/history"),
        ("GET", "/ui/api/status"),
        ("POST", "/learnspam"),
        ("POST", "/learnham"),
        ("POST", "/reload"),
    ] {
        assert_eq!(
            status(method, path),
            403,
            "{method} {path} from a remote host"
        );
    }
    // rspamc from there: scans, cannot learn.
    let host = format!("{}:{}", ns.host_ip, d.http);
    let o = ns.run("rspamc", &["-h", &host, "symbols"], MESSAGE);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = ns.run("rspamc", &["-h", &host, "learn_spam"], MESSAGE);
    let said = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(!said.contains("success = true"), "{said}");
    // spamc from there: checks, cannot TELL.
    let port = spamd.to_string();
    let o = ns.run("spamc", &["-d", &ns.host_ip, "-p", &port, "-c"], MESSAGE);
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "spamc -c: {:?} {}",
        o.status,
        String::from_utf8_lossy(&o.stdout)
    );
    let o = ns.run(
        "spamc",
        &["-d", &ns.host_ip, "-p", &port, "-L", "spam"],
        MESSAGE,
    );
    assert!(!o.status.success(), "TELL from a remote host");
    assert_eq!(d.learns("spam"), 0);
    assert_eq!(d.learns("ham"), 0);
    // The same spamc on loopback is an admin.
    let mut c = Command::new("spamc")
        .args(["-d", "127.0.0.1", "-p", &port, "-L", "spam"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin
        .take()
        .unwrap()
        .write_all(MESSAGE.as_bytes())
        .unwrap();
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(d.learns("spam"), 1);
}

/// A daemon serving HTTP on a Unix socket only; killed when dropped.
struct UnixDaemon {
    child: Child,
    socket: PathBuf,
}

impl UnixDaemon {
    fn start(dir: &Path, access: &str) -> UnixDaemon {
        std::fs::create_dir_all(dir).unwrap();
        // Every user may reach the directory; the socket's own mode decides.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = dir.join("http.sock");
        let config = dir.join("shrike.toml");
        std::fs::write(&config, format!("[dns]\nenabled = false\n{access}")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("--config")
            .arg(&config)
            .args(["serve", "--milter", "off", "--http"])
            .arg(format!("unix:{}", socket.display()))
            .arg("--data")
            .arg(dir.join("data"))
            .stderr(Stdio::from(std::fs::File::create(dir.join("log")).unwrap()))
            .spawn()
            .unwrap();
        let d = UnixDaemon { child, socket };
        wait_until("the daemon on its socket", 60, || {
            d.status(None, "GET", "/health") == 200
        });
        d
    }

    /// curl over the socket, as `user` (through setpriv) or as ourselves.
    fn status(&self, user: Option<u32>, method: &str, path: &str) -> u16 {
        let mut cmd = match user {
            Some(uid) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={uid}"),
                    "--clear-groups",
                    "curl",
                ]);
                c
            }
            None => Command::new("curl"),
        };
        cmd.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-m", "20"])
            .arg("--unix-socket")
            .arg(&self.socket)
            .args(["-X", method]);
        if method == "POST" {
            cmd.args([
                "-H",
                "Content-Type: message/rfc822",
                "--data-binary",
                MESSAGE,
            ]);
        }
        let o = cmd.arg(format!("http://localhost{path}")).output().unwrap();
        String::from_utf8_lossy(&o.stdout)
            .trim()
            .parse()
            .unwrap_or(0)
    }
}

impl Drop for UnixDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn unix_socket_peers_of_another_user_only_scan() {
    if !nix_root() {
        eprintln!("SKIPPED: acting as another user needs root (setpriv)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let nobody = 65534;
    // The default mode: 0660, so another user cannot even connect.
    let d = UnixDaemon::start(&dir.path().join("default"), "");
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    assert_eq!(d.status(Some(nobody), "GET", "/ping"), 0, "no connection");
    // The daemon's own user (root here) is an admin over the socket.
    assert_eq!(d.status(None, "GET", "/history"), 200);
    drop(d);
    // Opened to every user: they scan, and nothing else.
    let d = UnixDaemon::start(
        &dir.path().join("open"),
        "[access]\nunix_socket_mode = \"0666\"\n",
    );
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o666);
    assert_eq!(d.status(Some(nobody), "POST", "/checkv2"), 200);
    for (method, path) in [
        ("GET", "/history"),
        ("GET", "/stat"),
        ("POST", "/learnspam"),
        ("POST", "/reload"),
    ] {
        assert_eq!(d.status(Some(nobody), method, path), 403, "{method} {path}");
    }
    assert_eq!(d.status(None, "POST", "/learnspam"), 200);
}

#[test]
fn a_thousand_wrong_passwords_are_throttled_while_scanning_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let hash = passwd(ADMIN_PW);
    let d = Daemon::start(
        dir.path(),
        Options {
            // Loopback is no admin here: every client needs the password.
            config: Some(format!(
                "[access]\nadmin_networks = []\npublic_metrics = true\npassword_hash = \"{hash}\"\n"
            )),
            workers: Some(1),
            ..Options::default()
        },
    );
    let port = d.http;
    let guesser = std::thread::spawn(move || {
        let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
        for i in 0..1000 {
            let guess = format!("guess-{i}");
            let r = daemon::http(port, "GET", "/history", &[("Password", &guess)], b"")
                .expect("an answer");
            *statuses.entry(r.status).or_default() += 1;
        }
        statuses
    });
    let mut scanned = 0;
    while !guesser.is_finished() || scanned < 50 {
        let r = d.post("/checkv2", &[], MESSAGE.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        scanned += 1;
    }
    let statuses = guesser.join().unwrap();
    let (unauth, throttled) = (statuses[&401], statuses.get(&429).copied().unwrap_or(0));
    assert_eq!(unauth + throttled, 1000, "{statuses:?}");
    // Each wrong guess doubles the wait: only a few were even checked.
    assert!(unauth < 40, "{statuses:?}");
    assert_eq!(d.metric("shrike_auth_failures_total"), unauth as u64);
    // Logged once per interval, not once a guess.
    let lines = d.log_text().matches("wrong password").count();
    assert!(lines >= 1 && lines < unauth.max(2), "{lines} lines");
    // The right password is not even checked while this client waits; another client's is.
    let r = daemon::http(port, "GET", "/history", &[("Password", ADMIN_PW)], b"").unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    let url = format!("http://127.0.0.1:{port}/history");
    assert_eq!(
        curl("127.0.0.2", &url, "GET", &[("Password", ADMIN_PW)], ""),
        200
    );
    assert!(scanned >= 50);
}
