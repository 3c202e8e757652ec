//! The web UI in a real browser: Debian's chromium driven over WebDriver (chromedriver and the
//! `fantoccini` client). A remote operator logs in with the password, every page loads without
//! a console error, a trial scan of GTUBE says reject with its symbols (and counts nothing),
//! a verdict is found in History by its queue id and opened, a message is learned, a
//! reputation chart is opened; screenshots go to `target/ui-screenshots/`. The access rules
//! (login, cookie, CSRF token, Origin, DNS-rebinding Host) are checked over plain HTTP. The
//! Quarantine page lists, views (a message with a script and remote content: nothing runs,
//! nothing is fetched) and releases to a real `smtp-sink`; a per-recipient link shows only its
//! recipient's mail and is refused with one signature character changed or once expired.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daemon::{free_port, Daemon, Options};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const PASSWORD: &str = "ui-test-password";

fn gtube() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gtube.eml"))
        .expect("tests/data/gtube.eml")
}

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
    std::fs::create_dir_all(&dir).expect("create target/ui-screenshots");
    dir
}

/// This machine's first non-loopback IPv4 address: the browser reaches the daemon through it,
/// as a remote operator's would (a loopback client needs no login).
fn outside_ip() -> IpAddr {
    let out = Command::new("hostname").arg("-I").output();
    let listed = out
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    listed
        .split_whitespace()
        .filter_map(|w| w.parse::<IpAddr>().ok())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .expect("the UI test needs a non-loopback IPv4 address on this machine (hostname -I)")
}

/// A raw request to `addr:port` with the given Host header (the shared helper always sends
/// 127.0.0.1): status, headers, body.
fn raw(
    addr: IpAddr,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String, String) {
    let mut s = TcpStream::connect((addr, port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}:{port}\r\n"));
    }
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    s.write_all(body).expect("write body");
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read");
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

fn set_cookie(head: &str) -> Option<String> {
    head.lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("set-cookie")
                .then(|| v.trim().to_string())
        })
        .filter(|c| c.starts_with("shrike_ui=") && !c.starts_with("shrike_ui=;"))
}

/// The shipped rules plus a shadow rule and a test-share rule, for the Rules page's marks.
fn rules_with_shadow_and_share(dir: &Path) -> PathBuf {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).expect("rules dir");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    for entry in std::fs::read_dir(&shipped).expect("rules/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "lua") {
            std::fs::copy(&path, rules.join(path.file_name().expect("name"))).expect("copy");
        }
    }
    std::fs::write(
        rules.join("95_ui_test.lua"),
        "rule { name = 'UI_SHADOWED', score = 100, shadow = true, \
           description = 'always, in shadow', check = function() return true end }\n\
         rule { name = 'UI_TRIAL', score = 0.5, share = 0.25, \
           description = 'always, on a quarter of the mail', check = function() return true end }\n",
    )
    .expect("write the test rules");
    rules
}

fn start_daemon(dir: &Path) -> Daemon {
    Daemon::start(
        dir,
        Options {
            rules: Some(rules_with_shadow_and_share(dir)),
            config: Some(format!(
                "[http]\npassword = \"{PASSWORD}\"\n[history]\nflush_ms = 100\n"
            )),
            http_host: Some("0.0.0.0".into()),
            ..Options::default()
        },
    )
}

#[test]
fn access_needs_loopback_a_login_or_the_password_and_posts_need_the_csrf_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = start_daemon(dir.path());
    let ip = outside_ip();
    let port = d.http;

    // A remote client without a login gets the login form, and no data.
    let (status, _, body) = raw(ip, port, "GET", "/", &[], b"");
    assert_eq!(status, 200);
    assert!(body.contains("action=\"/ui/login\""), "{body}");
    assert!(
        !body.contains("app.js"),
        "the app is not served before a login"
    );
    for path in [
        "/ui/api/status",
        "/ui/api/history",
        "/ui/api/rules",
        "/ui/app.js",
    ] {
        // 401: a password could let this client in.
        assert_eq!(raw(ip, port, "GET", path, &[], b"").0, 401, "{path}");
    }

    // A wrong password: back to the form, no cookie; the right one: an HttpOnly,
    // SameSite=Strict session cookie, and the secret never in a URL.
    let form = "application/x-www-form-urlencoded";
    let (status, head, _) = raw(
        ip,
        port,
        "POST",
        "/ui/login",
        &[("Content-Type", form)],
        b"password=guess",
    );
    assert_eq!(status, 303);
    assert!(head.contains("/ui/login#failed"), "{head}");
    assert_eq!(set_cookie(&head), None);
    let login = format!("password={PASSWORD}");
    // A login posted from another site's page is refused.
    let (status, head, _) = raw(
        ip,
        port,
        "POST",
        "/ui/login",
        &[("Content-Type", form), ("Origin", "http://evil.example")],
        login.as_bytes(),
    );
    assert_eq!(status, 403);
    assert_eq!(set_cookie(&head), None);
    // Right after a wrong guess, this client's next try is not even checked; once it has
    // waited, the right password logs in.
    let post_login = || {
        raw(
            ip,
            port,
            "POST",
            "/ui/login",
            &[("Content-Type", form)],
            login.as_bytes(),
        )
    };
    let (status, head, _) = post_login();
    assert_eq!(status, 303);
    assert!(head.contains("/ui/login#wait"), "{head}");
    assert_eq!(set_cookie(&head), None);
    std::thread::sleep(Duration::from_millis(600));
    let (status, head, _) = post_login();
    assert_eq!(status, 303);
    let cookie = set_cookie(&head).expect("a session cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!head.contains(PASSWORD));
    let session = cookie.split(';').next().expect("name=value").to_string();

    let with_cookie = [("Cookie", session.as_str())];
    let (status, _, body) = raw(ip, port, "GET", "/ui/api/status", &with_cookie, b"");
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = raw(ip, port, "GET", "/ui/api/session", &with_cookie, b"");
    assert_eq!(status, 200);
    let csrf = serde_json::from_str::<Value>(&body).expect("json")["csrf"]
        .as_str()
        .expect("csrf")
        .to_string();
    assert_eq!(csrf.len(), 64);

    // A POST needs the token; another site's Origin is refused even with it.
    let message = gtube();
    let (status, _, _) = raw(ip, port, "POST", "/ui/api/test", &with_cookie, &message);
    assert_eq!(status, 403, "a POST without the CSRF token");
    let wrong = [("Cookie", session.as_str()), ("X-CSRF-Token", "0000")];
    assert_eq!(
        raw(ip, port, "POST", "/ui/api/test", &wrong, &message).0,
        403
    );
    let foreign = [
        ("Cookie", session.as_str()),
        ("X-CSRF-Token", csrf.as_str()),
        ("Origin", "http://evil.example"),
    ];
    assert_eq!(
        raw(ip, port, "POST", "/ui/api/test", &foreign, &message).0,
        403
    );
    let good = [
        ("Cookie", session.as_str()),
        ("X-CSRF-Token", csrf.as_str()),
    ];
    let keys_before = d.get("/stat").json()["store"]["keys"].clone();
    let (status, _, body) = raw(ip, port, "POST", "/ui/api/test", &good, &message);
    assert_eq!(status, 200, "{body}");
    let report: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(report["action"], "reject");
    assert!(report["symbols"]["GTUBE"].is_object(), "{report}");
    assert!(report["shingles"].as_array().is_some_and(|s| !s.is_empty()));
    assert_eq!(
        d.get("/stat").json()["store"]["keys"],
        keys_before,
        "a trial scan adds nothing to the reputation store"
    );
    // An empty message is refused with a reason, not scanned.
    let (status, _, body) = raw(ip, port, "POST", "/ui/api/test", &good, b"");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no message"), "{body}");

    // The rspamd Password header works as for the other admin endpoints.
    let header = [("Password", PASSWORD)];
    assert_eq!(raw(ip, port, "GET", "/ui/api/status", &header, b"").0, 200);
    assert_eq!(
        raw(
            ip,
            port,
            "GET",
            "/ui/api/status",
            &[("Password", "nope")],
            b""
        )
        .0,
        401
    );

    // Logged out: the cookie no longer opens anything.
    let (status, head, _) = raw(ip, port, "POST", "/ui/logout", &good, b"");
    assert_eq!(status, 200);
    assert!(head.contains("Max-Age=0"), "{head}");
    assert_eq!(
        raw(ip, port, "GET", "/ui/api/status", &with_cookie, b"").0,
        401
    );

    // A loopback client needs no login, unless it names another host (DNS rebinding).
    let lo: IpAddr = "127.0.0.1".parse().expect("ip");
    assert_eq!(raw(lo, port, "GET", "/ui/api/status", &[], b"").0, 200);
    let rebound = [("Host", "evil.example:80")];
    assert_eq!(raw(lo, port, "GET", "/ui/api/status", &rebound, b"").0, 403);
    let (status, _, body) = raw(lo, port, "GET", "/", &rebound, b"");
    assert_eq!(status, 403);
    assert!(!body.contains("app.js"), "{body}");

    // The trial scans counted nothing and recorded nothing.
    assert_eq!(d.metric("shrike_scans_total{action=\"reject\"}"), 0);
    std::thread::sleep(Duration::from_millis(400));
    let h = d.get("/history").json();
    assert_eq!(h["records"].as_array().map(Vec::len), Some(0), "{h}");
}

/// chromedriver on a free port; killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start(log: &Path) -> Driver {
        let port = free_port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is installed (scripts/test.sh installs chromium-driver)");
        // Owned from here on: dropped (killed) on every path, the panic below included.
        let driver = Driver { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = String::new();
        while Instant::now() < deadline {
            // A short read timeout: a request that reaches chromedriver while it is still
            // starting may never be answered.
            match probe(port) {
                Ok(true) => return driver,
                Ok(false) => last = "not ready".into(),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = std::fs::read_to_string(log).unwrap_or_default();
        panic!("chromedriver did not start ({last}):\n{log}");
    }
}

/// One request to chromedriver, its JSON answer. The body is read by its Content-Length:
/// chromedriver says `Connection: close` but keeps the socket open.
fn driver_request(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<Value> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|len| buf.len() >= end + 4 + len) {
                break;
            }
        }
    }
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of head"))?;
    serde_json::from_slice(&buf[end + 4..]).map_err(std::io::Error::other)
}

fn probe(port: u16) -> std::io::Result<bool> {
    Ok(driver_request(port, "GET", "/status", "")?["value"]["ready"] == json!(true))
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The browser's console entries since the last call (chromedriver's log endpoint).
async fn console(c: &Client, driver: u16) -> Vec<Value> {
    let id = c
        .session_id()
        .await
        .expect("session id")
        .expect("a session");
    let r = driver_request(
        driver,
        "POST",
        &format!("/session/{id}/se/log"),
        r#"{"type":"browser"}"#,
    )
    .expect("read the browser log");
    r["value"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| panic!("browser log: {r}"))
}

async fn no_console_errors(c: &Client, driver: u16, page: &str) {
    let entries = console(c, driver).await;
    let bad: Vec<&Value> = entries
        .iter()
        .filter(|e| e["level"] == "SEVERE" || e["level"] == "WARNING")
        .collect();
    assert!(bad.is_empty(), "console errors on {page}: {bad:#?}");
}

/// Clicks the element `css` finds, finding it again when the page re-rendered it between the
/// find and the click (a table redrawn by a refresh leaves a stale reference behind).
async fn click_fresh(c: &Client, what: &str, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let clicked = match c.find(Locator::Css(css)).await {
            Ok(e) => e.click().await,
            Err(e) => Err(e),
        };
        match clicked {
            Ok(()) => return,
            Err(fantoccini::error::CmdError::Standard(e))
                if e.error == fantoccini::error::ErrorStatus::StaleElementReference
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{what}: {e:?}"),
        }
    }
}

/// Waits until the script (a function body returning a boolean) is true in the page.
async fn wait_for(c: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let v = c.execute(script, vec![]).await.expect("execute");
        if v == json!(true) {
            return;
        }
        if Instant::now() > deadline {
            let error = c
                .execute(
                    "return document.getElementById('error')?.textContent",
                    vec![],
                )
                .await
                .unwrap_or(Value::Null);
            let url = c
                .current_url()
                .await
                .map(|u| u.to_string())
                .unwrap_or_default();
            let body = c
                .execute("return document.body.innerText", vec![])
                .await
                .unwrap_or(Value::Null);
            shot(c, "failure").await;
            panic!("timed out waiting for {what} at {url} (page error: {error}):\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn text(c: &Client, id: &str) -> String {
    c.find(Locator::Id(id))
        .await
        .unwrap_or_else(|e| panic!("#{id}: {e}"))
        .text()
        .await
        .expect("text")
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(screenshots().join(format!("{name}.png")), png).expect("write screenshot");
}

async fn open(c: &Client, base: &str, page: &str, driver: u16) {
    c.goto(&format!("{base}/#{page}")).await.expect("goto");
    wait_for(
        c,
        page,
        &format!("return document.body.dataset.page === '{page}'"),
    )
    .await;
    no_console_errors(c, driver, page).await;
}

/// A WebDriver session with a headless chromium using `profile`, with `extra` arguments.
async fn browser(driver: &Driver, profile: &Path, extra: &[&str]) -> Client {
    let mut args = vec![
        "--headless=new".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--window-size=1300,1000".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({
        "browserName": "chrome",
        "goog:chromeOptions": { "binary": "/usr/bin/chromium", "args": args },
        "goog:loggingPrefs": { "browser": "ALL" },
    }))
    .expect("capabilities");
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a WebDriver session with chromium")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_works_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = start_daemon(dir.path());
    let driver = Driver::start(&dir.path().join("chromedriver.log"));
    let c = browser(&driver, &dir.path().join("chromium-profile"), &[]).await;

    // A verdict to find later, sent as an MTA would, with its queue id.
    let message = gtube();
    let r = d.post("/checkv2", &[("Queue-Id", "UIQUEUE42")], &message);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["action"], "reject");

    // A remote operator: the login form, then the app.
    let base = format!("http://{}:{}", outside_ip(), d.http);
    c.goto(&format!("{base}/")).await.expect("goto");
    c.wait()
        .for_element(Locator::Id("password"))
        .await
        .expect("the login form");
    shot(&c, "login").await;
    no_console_errors(&c, driver.port, "login").await;
    c.find(Locator::Id("password"))
        .await
        .expect("password field")
        .send_keys(PASSWORD)
        .await
        .expect("type the password");
    c.find(Locator::Id("login"))
        .await
        .expect("login button")
        .click()
        .await
        .expect("log in");
    wait_for(
        &c,
        "the app",
        "return document.body.dataset.page === 'status'",
    )
    .await;
    assert!(
        !c.current_url()
            .await
            .expect("url")
            .as_str()
            .contains(PASSWORD),
        "the password never goes into a URL"
    );
    no_console_errors(&c, driver.port, "status").await;
    // The status chart shows the scan of this minute.
    let bars = c
        .execute(
            "return document.querySelectorAll('#chart-hour rect').length",
            vec![],
        )
        .await
        .expect("count bars");
    assert!(bars.as_u64().unwrap_or(0) >= 1, "the hour chart has a bar");
    assert!(text(&c, "status-cards").await.contains("rule generation"));
    shot(&c, "status").await;

    // Every page loads without a console error.
    for page in ["history", "test", "reputation", "rules", "status"] {
        open(&c, &base, page, driver.port).await;
        shot(&c, page).await;
    }
    // The workers hand over their per-rule counters after a second idle: reload until the
    // scan of the verdict sent above shows.
    let deadline = Instant::now() + Duration::from_secs(20);
    let rules = loop {
        open(&c, &base, "rules", driver.port).await;
        let rules = text(&c, "rules-table").await;
        if rules.contains("would have fired 1×") || Instant::now() > deadline {
            break rules;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(rules.contains("GTUBE"), "{rules}");
    assert!(
        rules.contains("UI_SHADOWED") && rules.contains("shadow: would have fired 1×"),
        "{rules}"
    );
    assert!(rules.contains("test: 25% share"), "{rules}");

    // Test a message: GTUBE is a reject, with its symbol listed; not counted as mail.
    open(&c, &base, "test", driver.port).await;
    let body = String::from_utf8(message.clone()).expect("utf-8 fixture");
    c.execute(
        "document.getElementById('test-message').value = arguments[0]",
        vec![json!(body)],
    )
    .await
    .expect("paste the message");
    c.find(Locator::Id("test-run"))
        .await
        .expect("scan button")
        .click()
        .await
        .expect("scan");
    wait_for(
        &c,
        "the test result",
        "return !document.getElementById('test-result').hidden",
    )
    .await;
    assert_eq!(text(&c, "test-action").await, "reject");
    let symbols = text(&c, "test-symbols").await;
    assert!(symbols.contains("GTUBE"), "{symbols}");
    assert!(
        !text(&c, "test-shingles").await.is_empty(),
        "shingles listed"
    );
    no_console_errors(&c, driver.port, "test result").await;
    shot(&c, "test-result").await;
    assert_eq!(
        d.metric("shrike_scans_total{action=\"reject\"}"),
        1,
        "a trial scan is not arrived mail"
    );

    // Learn it as spam.
    c.find(Locator::Id("learn-spam"))
        .await
        .expect("learn button")
        .click()
        .await
        .expect("learn");
    wait_for(
        &c,
        "the learn",
        "return document.getElementById('learn-result').textContent.startsWith('Learned as spam')",
    )
    .await;
    assert_eq!(d.learns("spam"), 1);
    no_console_errors(&c, driver.port, "learn").await;

    // A reputation chart from a click on an entity of the tested message.
    c.execute("document.querySelector('#test-entities a').click()", vec![])
        .await
        .expect("click an entity");
    wait_for(
        &c,
        "the reputation charts",
        "return document.querySelectorAll('#rep-result .rep-chart svg').length >= 2",
    )
    .await;
    let rep = text(&c, "rep-result").await;
    assert!(
        rep.contains("last 24 hours") && rep.contains("last 14 days"),
        "{rep}"
    );
    assert!(rep.starts_with("from sender@example.net"), "{rep}");
    assert!(
        !rep.contains("never seen"),
        "the From address of a scanned message is known: {rep}"
    );
    no_console_errors(&c, driver.port, "reputation").await;
    shot(&c, "reputation-chart").await;
    // And from a shingle's hash: the learned complaint shows in its counters.
    open(&c, &base, "test", driver.port).await;
    c.execute("document.querySelector('#test-shingles a').click()", vec![])
        .await
        .expect("click a shingle");
    wait_for(
        &c,
        "a shingle's reputation",
        "return document.querySelectorAll('#rep-result .rep-chart svg').length >= 2",
    )
    .await;
    let hash = c
        .execute("return document.getElementById('rep-hash').value", vec![])
        .await
        .expect("the hash field");
    assert_eq!(hash.as_str().map(str::len), Some(16), "{hash}");
    let rep = text(&c, "rep-result").await;
    assert!(
        !rep.contains("never seen"),
        "a scanned and learned shingle is known: {rep}"
    );

    // History: the verdict found by its queue id, and opened.
    open(&c, &base, "history", driver.port).await;
    let field = c
        .find(Locator::Id("history-queue-id"))
        .await
        .expect("queue id field");
    field
        .send_keys("UIQUEUE42")
        .await
        .expect("type the queue id");
    c.find(Locator::Id("history-search"))
        .await
        .expect("search")
        .click()
        .await
        .expect("search");
    wait_for(
        &c,
        "the record's row",
        "return document.querySelectorAll('#history-table tr[data-queue-id=\"UIQUEUE42\"]').length === 1 \
         && document.querySelectorAll('#history-table tr.clickable').length === 1",
    )
    .await;
    click_fresh(&c, "open the record", "#history-table tr.clickable").await;
    wait_for(
        &c,
        "the record",
        "return !document.getElementById('history-record').hidden",
    )
    .await;
    let record = text(&c, "history-record").await;
    assert!(record.contains("UIQUEUE42"), "{record}");
    assert!(record.contains("GTUBE"), "{record}");
    assert!(record.contains("reject"), "{record}");
    no_console_errors(&c, driver.port, "history record").await;
    shot(&c, "history-record").await;

    // The history keeps no message body: its learn buttons lead to the Test page.
    c.find(Locator::Id("record-learn-spam"))
        .await
        .expect("the record's learn button")
        .click()
        .await
        .expect("learn from the record");
    wait_for(
        &c,
        "the Test page with the record's note",
        "return document.body.dataset.page === 'test' && \
         document.getElementById('learn-result').textContent.includes('UIQUEUE42')",
    )
    .await;
    no_console_errors(&c, driver.port, "learn from a record").await;

    c.close().await.expect("close the browser");
}

/// Another site's web server on loopback: `page` for `GET /`, 404 for anything else (the
/// favicon). Serves until the test process ends; its port.
fn serve_page(page: String) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the attacker's server");
    let port = listener.local_addr().expect("local addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let (status, body) = if head.starts_with(b"GET / ") {
                ("200 OK", page.as_str())
            } else {
                ("404 Not Found", "no such page")
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

/// The page of another site (`attacker.evil.example`, mapped to loopback) that tries, from the
/// browser of a user on the daemon's machine (a loopback client, the admin by default), to
/// learn a message and reload the rules with the requests a page can send without a CORS
/// preflight, and to read the history and a reputation; then a DNS-rebinding page's read (its
/// own name resolving to the daemon). Nothing is learned or reloaded, nothing read; every
/// attempt reached the daemon and was refused there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_another_site_cannot_learn_or_read_through_the_browser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = Daemon::start(dir.path(), Options::default());
    let daemon_url = format!("http://127.0.0.1:{}", d.http);
    let message = String::from_utf8(gtube()).expect("utf-8 fixture");
    // Each attempt awaits its answer before the next starts, so when the title says `done`
    // the daemon has answered them all. A no-cors answer is opaque (status 0, no body); a read
    // the browser refuses to show is a TypeError; anything readable is kept.
    let page = format!(
        r#"<!doctype html><html><head><title>attacker</title></head><body><pre id="out"></pre>
<script>
const D = {daemon:?};
const MSG = {message};
const out = {{}};
async function attempt(name, url, init) {{
  try {{
    const r = await fetch(D + url, init);
    let body;
    try {{ body = await r.text(); }} catch (e) {{ body = "unreadable: " + e.name; }}
    out[name] = {{ type: r.type, status: r.status, body: body }};
  }} catch (e) {{
    out[name] = {{ error: e.name + ": " + e.message }};
  }}
}}
(async () => {{
  const post = (body, more) => Object.assign({{ method: "POST", mode: "no-cors", body: body }}, more || {{}});
  await attempt("learn text", "/learnspam", post(MSG));
  await attempt("learn blob", "/learnspam", post(new Blob([MSG])));
  await attempt("learn no referrer", "/learnspam", post(MSG, {{ referrerPolicy: "no-referrer" }}));
  await attempt("reload text", "/reload", post("x"));
  await attempt("reload blob", "/reload", post(new Blob(["x"])));
  await attempt("history", "/history", {{}});
  await attempt("reputation", "/reputation?type=subject&value=x", {{}});
  document.getElementById("out").textContent = JSON.stringify(out);
  document.title = "done";
}})();
</script></body></html>"#,
        daemon = daemon_url,
        message = serde_json::to_string(&message).expect("a JS string"),
    );
    const ATTEMPTS: u64 = 7;
    let attacker = serve_page(page);

    let driver = Driver::start(&dir.path().join("chromedriver.log"));
    // Both of the attacker's names are this machine, as its DNS would say.
    let resolve = ["--host-resolver-rules=MAP *.evil.example 127.0.0.1"];
    let c = browser(&driver, &dir.path().join("chromium-profile"), &resolve).await;

    let metric = |name: &str| d.metric(name);
    let denied_before = metric("shrike_access_denied_total");
    let requests_before = metric("shrike_http_requests_total");
    let reloads_before = metric("shrike_reloads_total");
    let generation_before = d.get("/stat").json()["rules_generation"].clone();
    assert!(generation_before.is_u64(), "{generation_before}");

    // The attacker's page, from another origin.
    c.goto(&format!("http://attacker.evil.example:{attacker}/"))
        .await
        .expect("open the attacker's page");
    wait_for(
        &c,
        "the page's attempts",
        "return document.title === 'done'",
    )
    .await;
    let seen = text(&c, "out").await;
    let observed: Value = serde_json::from_str(&seen).expect("the page's record");
    for name in [
        "learn text",
        "learn blob",
        "learn no referrer",
        "reload text",
        "reload blob",
    ] {
        // Sent, and answered with nothing the page can read.
        assert_eq!(observed[name]["type"], "opaque", "{name}: {seen}");
        assert_eq!(observed[name]["body"], "", "{name}: {seen}");
    }
    for name in ["history", "reputation"] {
        assert!(
            observed[name]["error"].is_string(),
            "{name} was readable by another site: {seen}"
        );
    }
    assert!(
        !seen.contains("records") && !seen.contains("windows"),
        "{seen}"
    );
    // Every attempt reached the daemon and was refused by it (the requests of this test's
    // own /metrics reads are not refusals).
    let denied = metric("shrike_access_denied_total");
    assert!(
        denied >= denied_before + ATTEMPTS,
        "{} of the page's {ATTEMPTS} attempts refused by the daemon:\n{}",
        denied - denied_before,
        d.log_text()
    );
    assert!(metric("shrike_http_requests_total") >= requests_before + ATTEMPTS);

    // DNS rebinding: a name of the attacker's that resolves to the daemon. The browser sends
    // that name as the Host; the daemon refuses to answer it.
    let rebound = format!("http://rebind.evil.example:{}/history", d.http);
    c.goto(&rebound).await.expect("open the rebound name");
    let body = c
        .execute("return document.body.innerText", vec![])
        .await
        .expect("the page's text");
    let body = body.as_str().unwrap_or_default().to_string();
    assert!(
        body.contains("the Host header names the daemon by a name it does not know"),
        "{body}"
    );
    assert!(!body.contains("records"), "{body}");
    shot(&c, "rebinding-refused").await;
    let after_rebinding = metric("shrike_access_denied_total");
    assert!(after_rebinding > denied, "the rebound read was refused");
    // The same browser reads the history when it names the daemon by its address: the refusal
    // above was the name's.
    c.goto(&format!("{daemon_url}/history"))
        .await
        .expect("open the history");
    let body = c
        .execute("return document.body.innerText", vec![])
        .await
        .expect("the page's text");
    let history: Value = serde_json::from_str(body.as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the history as JSON ({e}): {body}"));
    assert!(history["records"].is_array(), "{history}");
    assert_eq!(metric("shrike_access_denied_total"), after_rebinding);
    c.close().await.expect("close the browser");

    // Nothing learned, nothing reloaded, and no learn even reached the operations layer.
    let stat = d.get("/stat").json();
    assert_eq!(stat["learned_spam"], 0, "{stat}");
    assert_eq!(stat["rules_generation"], generation_before, "{stat}");
    assert_eq!(d.learns("spam"), 0);
    assert_eq!(metric("shrike_reloads_total"), reloads_before);
    for reason in ["busy", "timeout", "stopping", "store", "durability"] {
        assert_eq!(
            metric(&format!(
                "shrike_learns_refused_total{{reason=\"{reason}\"}}"
            )),
            0,
            "{reason}"
        );
    }
    // What the page sent would have been learned and reloaded had a mail tool sent it.
    let r = d.post("/learnspam", &[], message.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(d.learns("spam"), 1);
    let r = d.post("/reload", &[], b"x");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(metric("shrike_reloads_total"), reloads_before + 1);
}

/// A message that shows what a viewer must not do: a script that would mark the page and a
/// remote image (on `remote`) that would be fetched, in an HTML-only body.
fn hostile_html(tag: &str, rcpt: &str, remote: &str) -> String {
    format!(
        "From: Mallory <mallory@example.net>\r\nTo: {rcpt}\r\nSubject: QUARANTINE-ME {tag}\r\n\
         Message-ID: <{tag}@shrike.test>\r\nDate: Sun, 29 Nov 2026 10:00:00 +0000\r\n\
         MIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n\
         <html><head><script>window.__pwned = 1; document.title = 'PWNED';</script></head>\
         <body onload=\"window.__pwned = 2\"><p>Visible words of {tag}</p>\
         <img src=\"{remote}/pixel-{tag}.png\"><iframe src=\"{remote}/frame-{tag}\"></iframe>\
         </body></html>\r\n"
    )
}

/// Counts the connections made to a listener on every address (the "remote" server of the
/// hostile message's image).
fn connection_counter() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            if s.is_ok() {
                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    });
    (port, count)
}

/// Postfix's `smtp-sink` as the release relay: one file per message under `dir`.
struct Sink(Child);

impl Sink {
    fn start(dir: &Path, port: u16) -> Sink {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(dir).expect("sink dir");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let child = Command::new("/usr/sbin/smtp-sink")
            .args(["-u", "postfix", "-d"])
            .arg(format!("{}/%M%S.", dir.display()))
            .arg(format!("127.0.0.1:{port}"))
            .arg("16")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("smtp-sink (the postfix package, which scripts/test.sh installs)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "smtp-sink did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Sink(child)
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sink_files(dir: &Path, marker: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .filter(|t| t.contains(marker))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quarantine_page_and_per_recipient_links_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let relay = free_port();
    let sink_dir = dir.path().join("sink");
    let _sink = Sink::start(&sink_dir, relay);
    let rules = rules_with_shadow_and_share(dir.path());
    std::fs::write(
        rules.join("96_quarantine_test.lua"),
        "rule { name = 'UI_QUARANTINE_ME', score = 50, description = 'test', \
           check = function(msg) return msg:subject():find('QUARANTINE-ME', 1, true) ~= nil end }\n",
    )
    .expect("rule");
    let d = Daemon::start(
        dir.path(),
        Options {
            rules: Some(rules),
            config: Some(format!(
                "[http]\npassword = \"{PASSWORD}\"\n\n[quarantine]\nenabled = true\n\
                 release_relay = \"127.0.0.1:{relay}\"\n"
            )),
            http_host: Some("0.0.0.0".into()),
            ..Options::default()
        },
    );
    let (remote_port, fetched) = connection_counter();
    let remote = format!("http://{}:{remote_port}", outside_ip());
    for (tag, rcpt) in [
        ("qui-alice", "alice@example.com"),
        ("qui-bob", "bob@example.com"),
    ] {
        let r = d.post(
            "/checkv2",
            &[("Rcpt", rcpt), ("From", "mallory@example.net")],
            hostile_html(tag, rcpt, &remote).as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["action"], "reject");
    }
    let driver = Driver::start(&dir.path().join("chromedriver.log"));
    let c = browser(&driver, &dir.path().join("chromium-profile"), &[]).await;
    let base = format!("http://{}:{}", outside_ip(), d.http);

    // The operator logs in and opens the Quarantine page: both kept messages are listed.
    c.goto(&format!("{base}/")).await.expect("goto");
    c.wait()
        .for_element(Locator::Id("password"))
        .await
        .expect("the login form");
    c.find(Locator::Id("password"))
        .await
        .expect("password field")
        .send_keys(PASSWORD)
        .await
        .expect("type");
    c.find(Locator::Id("login"))
        .await
        .expect("login")
        .click()
        .await
        .expect("log in");
    wait_for(
        &c,
        "the app",
        "return document.body.dataset.page === 'status'",
    )
    .await;
    open(&c, &base, "quarantine", driver.port).await;
    wait_for(
        &c,
        "two kept messages",
        "return document.querySelectorAll('#quarantine-table tr.q-entry').length === 2",
    )
    .await;
    shot(&c, "quarantine").await;

    // Viewing the hostile message: its words as text; no script ran, nothing was fetched.
    click_fresh(
        &c,
        "open the message",
        "#quarantine-table tr.q-entry[data-id]",
    )
    .await;
    wait_for(
        &c,
        "the message's text",
        "return document.getElementById('q-text').textContent.includes('Visible words of qui-')",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ran = c
        .execute(
            "return [window.__pwned === undefined, document.title, \
             document.querySelectorAll('#quarantine-view img, #quarantine-view iframe, #quarantine-view script').length]",
            vec![],
        )
        .await
        .expect("execute");
    assert_eq!(
        ran,
        json!([true, "shrike", 0]),
        "the message's markup came alive"
    );
    assert_eq!(
        fetched.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the remote image was fetched"
    );
    no_console_errors(&c, driver.port, "quarantine view").await;
    shot(&c, "quarantine-view").await;
    let opened = c
        .execute(
            "return document.getElementById('q-entry').textContent",
            vec![],
        )
        .await
        .expect("entry")
        .as_str()
        .unwrap_or_default()
        .to_string();
    let marker = if opened.contains("qui-alice") {
        "qui-alice@shrike.test"
    } else {
        "qui-bob@shrike.test"
    };

    // Release: the relay gets it; the entry says so.
    c.find(Locator::Id("q-release"))
        .await
        .expect("release button")
        .click()
        .await
        .expect("release");
    wait_for(
        &c,
        "the release",
        "return document.getElementById('q-result').textContent.startsWith('released to')",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sink_files(&sink_dir, marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the released message is not at the relay"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for(
        &c,
        "the list marks it released",
        "return document.getElementById('quarantine-table').textContent.includes('released')",
    )
    .await;
    no_console_errors(&c, driver.port, "quarantine release").await;

    // Per-recipient links from the digest (read beside the running daemon).
    let digest = |valid: &str| -> Vec<Value> {
        let out = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .args([
                "quarantine",
                "digest",
                "--since",
                "1h",
                "--json",
                "--valid",
                valid,
                "--data",
            ])
            .arg(&d.data)
            .output()
            .expect("digest");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    };
    let links = digest("1h");
    let link = |v: &[Value], rcpt: &str| -> String {
        let l = v
            .iter()
            .find(|x| x["rcpt"] == rcpt)
            .unwrap_or_else(|| panic!("no digest for {rcpt}: {v:?}"))["link"]
            .as_str()
            .expect("link")
            .to_string();
        format!("{base}{}", &l[l.find("/quarantine/r/").expect("path")..])
    };
    let alice = link(&links, "alice@example.com");
    let page_text = |c: &Client| {
        let c = c.clone();
        async move {
            c.execute("return document.body.innerText", vec![])
                .await
                .expect("text")
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    // A fresh browser without the operator's login: the link alone opens alice's mail.
    let guest = browser(&driver, &dir.path().join("guest-profile"), &[]).await;
    guest.goto(&alice).await.expect("goto the link");
    let text_now = page_text(&guest).await;
    assert!(text_now.contains("QUARANTINE-ME qui-alice"), "{text_now}");
    assert!(
        !text_now.contains("qui-bob"),
        "another recipient's mail shown: {text_now}"
    );
    shot(&guest, "quarantine-link").await;
    // Its view: text, no script, nothing fetched.
    guest
        .find(Locator::Css("tr.entry a"))
        .await
        .expect("the message's link")
        .click()
        .await
        .expect("open");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !page_text(&guest)
        .await
        .contains("Visible words of qui-alice")
    {
        assert!(Instant::now() < deadline, "the link's view did not open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ran = guest
        .execute(
            "return [window.__pwned === undefined, document.title.includes('PWNED'), \
             document.querySelectorAll('img, iframe, script').length]",
            vec![],
        )
        .await
        .expect("execute");
    assert_eq!(
        ran,
        json!([true, false, 0]),
        "the message's markup came alive"
    );
    assert_eq!(fetched.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Release to alice only, from her page (unless the operator released hers already).
    guest.goto(&alice).await.expect("back");
    if marker != "qui-alice@shrike.test" {
        guest
            .find(Locator::Css("tr.entry button"))
            .await
            .expect("the release button")
            .click()
            .await
            .expect("release");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !page_text(&guest)
            .await
            .contains("sent on to alice@example.com")
        {
            assert!(Instant::now() < deadline, "{}", page_text(&guest).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let files = sink_files(&sink_dir, "qui-alice@shrike.test");
        assert_eq!(files.len(), 1);
        assert!(!files[0].contains("bob@example.com"), "{}", files[0]);
    }
    // One character of the signature changed: refused.
    let mut tampered = alice.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    guest
        .goto(std::str::from_utf8(&tampered).expect("utf-8"))
        .await
        .expect("goto");
    let t = page_text(&guest).await;
    assert!(
        t.contains("signature does not match") && !t.contains("qui-alice"),
        "{t}"
    );
    // An expired link: refused.
    let r = d.post(
        "/checkv2",
        &[("Rcpt", "carol@example.com")],
        hostile_html("qui-carol", "carol@example.com", &remote).as_bytes(),
    );
    assert_eq!(r.json()["action"], "reject");
    let mut carol = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while carol.is_empty() {
        assert!(Instant::now() < deadline, "carol's message not kept");
        carol = digest("1s");
    }
    let short = link(&carol, "carol@example.com");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    guest.goto(&short).await.expect("goto");
    let t = page_text(&guest).await;
    assert!(t.contains("expired") && !t.contains("qui-carol"), "{t}");
    guest.close().await.expect("close the guest");
    c.close().await.expect("close the browser");
}
