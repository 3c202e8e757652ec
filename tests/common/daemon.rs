// A real `shrike serve` process for integration tests: free ports, a temporary data directory,
// readiness by polling /health, SIGTERM or SIGKILL on demand, and a minimal HTTP/1.1 client
// over std's TcpStream (Connection: close). Users put `#[allow(dead_code)]` on the module.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `config check`, then `serve`, of the configuration file at `path` (data under `data`), each
/// asserted to have failed: what each wrote to stderr, for the caller's checks of the words.
pub fn refused_by_check_and_serve(path: &Path, data: &Path) -> (String, String) {
    let data = data.to_str().expect("a UTF-8 path");
    let serve = [
        "serve",
        "--http",
        "127.0.0.1:1",
        "--milter",
        "off",
        "--data",
        data,
    ];
    let mut said = [&["config", "check"][..], &serve[..]].map(|args| {
        let o = Command::new(env!("CARGO_BIN_EXE_shrike"))
            .arg("--config")
            .arg(path)
            .args(args)
            .output()
            .expect("run shrike");
        assert!(!o.status.success(), "{args:?} accepted {}", path.display());
        String::from_utf8_lossy(&o.stderr).into_owned()
    });
    let serve = std::mem::take(&mut said[1]);
    (std::mem::take(&mut said[0]), serve)
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A running daemon; killed (SIGKILL) when dropped unless stopped before.
pub struct Daemon {
    pub child: Option<Child>,
    pub http: u16,
    pub milter: u16,
    pub data: PathBuf,
    pub log: PathBuf,
}

/// What to start.
#[derive(Default, Clone)]
pub struct Options {
    pub config: Option<String>,
    pub rules: Option<PathBuf>,
    pub workers: Option<usize>,
    /// Ports to reuse (a restart on the same ports); fresh ones when None.
    pub ports: Option<(u16, u16)>,
    /// The HTTP listener's address without its port (default 127.0.0.1; 0.0.0.0 to be reached
    /// from a non-loopback address too).
    pub http_host: Option<String>,
    /// Lay `rules` over the shipped set, as `serve --rules` does by default; when false, the
    /// daemon runs `rules` alone (`--no-default-rules`), the rule set most tests want.
    pub overlay: bool,
    /// Start the daemon under this umask (through `sh`), e.g. 0o000.
    pub umask: Option<u32>,
}

impl Daemon {
    pub fn start(dir: &Path, options: Options) -> Daemon {
        let (http, milter) = options.ports.unwrap_or_else(|| (free_port(), free_port()));
        let data = dir.join("data");
        let log = dir.join(format!(
            "shrike-{}.log",
            std::process::id() ^ u32::from(http)
        ));
        let mut cmd = match options.umask {
            None => Command::new(env!("CARGO_BIN_EXE_shrike")),
            Some(mask) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("umask {mask:03o} && exec \"$0\" \"$@\""))
                    .arg(env!("CARGO_BIN_EXE_shrike"));
                sh
            }
        };
        // `serve` checks DNS by default (the system's resolvers); tests that are not about DNS
        // turn it off so they never depend on the machine's network. Those about it say [dns].
        let mut config = options.config.clone().unwrap_or_default();
        if !config.contains("[dns]") {
            config = format!("[dns]\nenabled = false\n{config}");
        }
        let path = dir.join("shrike.toml");
        std::fs::write(&path, config).expect("write config");
        cmd.arg("--config").arg(path);
        cmd.arg("serve")
            .arg("--http")
            .arg(format!(
                "{}:{http}",
                options.http_host.as_deref().unwrap_or("127.0.0.1")
            ))
            .arg("--milter")
            .arg(format!("127.0.0.1:{milter}"))
            .arg("--data")
            .arg(&data);
        if let Some(rules) = &options.rules {
            cmd.arg("--rules").arg(rules);
            if !options.overlay {
                cmd.arg("--no-default-rules");
            }
        }
        if let Some(w) = options.workers {
            cmd.arg("--workers").arg(w.to_string());
        }
        let logfile = std::fs::File::create(&log).expect("log file");
        cmd.env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(logfile));
        let child = cmd.spawn().expect("spawn shrike serve");
        let mut d = Daemon {
            child: Some(child),
            http,
            milter,
            data,
            log,
        };
        d.wait_ready();
        d
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("shrike serve exited early ({status}):\n{}", self.log_text());
            }
            if let Ok(r) = http(self.http, "GET", "/health", &[], b"") {
                if r.status == 200 {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("shrike serve not ready after 60 s:\n{}", self.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.as_ref().expect("running").id()).expect("pid")
    }

    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// SIGTERM, then waits for a clean exit; returns the log.
    pub fn stop(&mut self) -> String {
        self.signal("TERM");
        self.wait_exit()
    }

    /// Waits for a clean exit (after a signal sent before); returns the log.
    pub fn wait_exit(&mut self) -> String {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                let log = self.log_text();
                assert!(
                    status.success(),
                    "shrike exited with {status} after SIGTERM:\n{log}"
                );
                return log;
            }
            assert!(
                Instant::now() < deadline,
                "shrike did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, no chance to save anything.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("kill -9");
        let _ = child.wait();
    }

    /// The value of one `/metrics` sample, named with its labels (`name{label="v"}`).
    pub fn metric(&self, name: &str) -> u64 {
        let text = self.get("/metrics").text();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in /metrics:\n{text}"))
    }

    /// Learns of `class` (`spam`, `ham`) acknowledged, first and duplicate ones together.
    pub fn learns(&self, class: &str) -> u64 {
        ["false", "true"]
            .iter()
            .map(|dup| {
                self.metric(&format!(
                    "shrike_learns_total{{class=\"{class}\",duplicate=\"{dup}\"}}"
                ))
            })
            .sum()
    }

    pub fn get(&self, path: &str) -> HttpReply {
        http(self.http, "GET", path, &[], b"").expect("GET")
    }

    /// A POST as a mail tool sends it: with `Content-Type: message/rfc822` unless `headers`
    /// names another (the daemon refuses state changes of the types a browser page can send).
    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpReply {
        let mut all = headers.to_vec();
        if !all
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            all.push(("Content-Type", "message/rfc822"));
        }
        http(self.http, "POST", path, &all, body).expect("POST")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpReply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpReply> {
    let lo = std::net::IpAddr::from([127, 0, 0, 1]);
    http_to(
        lo,
        port,
        "127.0.0.1",
        &format!("{method} {path}"),
        headers,
        body,
    )
}

/// One request on a fresh connection to `ip:port`, naming the daemon `host` in its Host
/// header; `line` is the method and the path (`GET /history`).
pub fn http_to(
    ip: std::net::IpAddr,
    port: u16,
    host: &str,
    line: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<HttpReply> {
    let mut s = TcpStream::connect((ip, port))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut req = format!(
        "{line} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    // A server may answer (413) before reading the body; a failed body write is not an error.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_reply(&raw)
}

fn parse_reply(raw: &[u8]) -> std::io::Result<HttpReply> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of head"))?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok(HttpReply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = b.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..line_end]).ok()?.trim(), 16).ok()?;
        b = &b[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// A rule directory whose only rule spins for millions of Lua instructions, and a config
/// (`extra` appended) that allows it and gives the daemon a queue of one: with one worker,
/// concurrent messages find the queue full.
pub fn slow_setup(dir: &Path, extra: &str) -> Options {
    let rules = dir.join("rules");
    std::fs::create_dir_all(&rules).expect("rules dir");
    std::fs::write(
        rules.join("slow.lua"),
        "rule { name = \"SLOW\", score = 0.1, description = \"spins\",\n\
         check = function(msg) local x = 0 for i = 1, 3000000 do x = x + i end return x < 0 end }\n",
    )
    .expect("slow rule");
    Options {
        config: Some(format!(
            "[server]\nqueue = 1\n\n[engine]\nrule_cpu_ms = 100000\n\
             message_cpu_ms = 100000\n\n{extra}"
        )),
        rules: Some(rules),
        workers: Some(1),
        ..Options::default()
    }
}

/// Polls `f` every 50 ms until it holds; panics naming `what` after `secs` seconds.
pub fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if f() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("timed out waiting for {what}");
}
