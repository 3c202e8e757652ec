//! Antivirus over ClamAV's `clamd` (rspamd's `antivirus` module): the whole message, as
//! received, streamed with `INSTREAM` over TCP or a unix socket; clamd unpacks the MIME parts
//! and archives itself, so attachments are scanned with the message. No signature matching
//! here.
//!
//! Owns: `[antivirus]` ([`AntivirusConfig`], [`AntivirusConfigError`]), the clamd client with
//! its deadline, the reply's reading, the servers' health. Never touches: the verdict (`scan`
//! adds `CLAM_VIRUS` / `CLAM_VIRUS_FAIL` and the forced action), sockets other than clamd's.
//!
//! A scan worker asks clamd itself, blocking for at most `timeout_ms` for the whole exchange
//! (connect, send, answer): the number of workers bounds the connections to clamd, and the
//! timeout sits inside the scan's own budget (`server.scan_timeout_ms`, checked at start). A
//! reply is read up to [`MAX_REPLY_BYTES`]; anything but `stream: OK` or `stream: NAME FOUND`
//! is a failure, as is a clamd that does not answer in time.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::verdict::Action;

/// A virus found (score 0, the name as option; the action is forced).
pub const CLAM_VIRUS: &str = "CLAM_VIRUS";
/// clamd could not be asked (score 0, the reason as option): the scan goes on.
pub const CLAM_VIRUS_FAIL: &str = "CLAM_VIRUS_FAIL";

/// The longest reply read from clamd.
pub const MAX_REPLY_BYTES: usize = 4096;

/// A virus name is kept to this many characters of its printable ASCII.
const MAX_NAME_CHARS: usize = 128;

/// Bytes sent per INSTREAM chunk.
const CHUNK_BYTES: usize = 64 * 1024;

/// `[antivirus]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AntivirusConfig {
    /// clamd's sockets: `unix:/run/clamav/clamd.ctl` or `HOST:PORT`; none: off. Several are
    /// taken in turn, the next one tried when one fails.
    pub servers: Vec<String>,
    /// The whole exchange with clamd, per message.
    pub timeout_ms: u64,
    /// Messages larger are not scanned (clamd's own `StreamMaxLength` is 25 MiB by default).
    pub max_size: usize,
    /// The action a virus forces (rspamd's names).
    pub action: String,
}

impl Default for AntivirusConfig {
    fn default() -> Self {
        AntivirusConfig {
            servers: Vec::new(),
            timeout_ms: 2_000,
            max_size: 25 * 1024 * 1024,
            action: "reject".into(),
        }
    }
}

/// Why `[antivirus]` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AntivirusConfigError {
    #[error("antivirus.servers: {0:?} is neither unix:PATH nor HOST:PORT")]
    Server(String),
    #[error("antivirus.timeout_ms must be greater than 0 and below server.scan_timeout_ms ({0})")]
    Timeout(u64),
    #[error("antivirus.max_size must be greater than 0")]
    MaxSize,
    #[error("antivirus.action {0:?} is not an action (reject, soft reject, quarantine, discard, add header, ...)")]
    Action(String),
}

impl AntivirusConfig {
    /// Checks the options; `scan_timeout_ms` is the scan's budget the exchange must fit in
    /// (only with servers: off, the timeout bounds nothing).
    pub fn validate(&self, scan_timeout_ms: u64) -> Result<(), AntivirusConfigError> {
        if self.timeout_ms == 0 || (!self.servers.is_empty() && self.timeout_ms >= scan_timeout_ms)
        {
            return Err(AntivirusConfigError::Timeout(scan_timeout_ms));
        }
        if self.max_size == 0 {
            return Err(AntivirusConfigError::MaxSize);
        }
        if Action::parse(&self.action).is_none() {
            return Err(AntivirusConfigError::Action(self.action.clone()));
        }
        for s in &self.servers {
            Endpoint::parse(s)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

impl Endpoint {
    fn parse(s: &str) -> Result<Endpoint, AntivirusConfigError> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(AntivirusConfigError::Server(s.into()));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Endpoint::Tcp(s.to_string()))
            }
            _ => Err(AntivirusConfigError::Server(s.into())),
        }
    }
}

/// What clamd said of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Clean,
    /// The virus's name (printable ASCII, bounded).
    Virus(String),
    /// Why clamd could not say (every server tried).
    Failed(String),
    /// Larger than `max_size`: not sent.
    TooLarge,
}

/// The clamd client the scan workers share.
#[derive(Debug)]
pub struct Antivirus {
    config: AntivirusConfig,
    action: Action,
    servers: Vec<Endpoint>,
    next: AtomicUsize,
    /// The last failure, until a scan succeeds (`/health`).
    last_error: Mutex<Option<String>>,
    pub scans: AtomicU64,
    pub viruses: AtomicU64,
    pub failures: AtomicU64,
}

impl Antivirus {
    /// `None` when no server is configured (`validate` has checked the names).
    pub fn new(config: &AntivirusConfig) -> Option<Antivirus> {
        let servers: Vec<Endpoint> = config
            .servers
            .iter()
            .filter_map(|s| Endpoint::parse(s).ok())
            .collect();
        if servers.is_empty() {
            return None;
        }
        Some(Antivirus {
            config: config.clone(),
            action: Action::parse(&config.action).unwrap_or(Action::Reject),
            servers,
            next: AtomicUsize::new(0),
            last_error: Mutex::new(None),
            scans: AtomicU64::new(0),
            viruses: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    /// The action a virus forces.
    pub fn action(&self) -> Action {
        self.action
    }

    /// The last failure while clamd keeps failing (`/health`'s `antivirus: degraded`).
    pub fn degraded(&self) -> Option<String> {
        self.last_error.lock().clone()
    }

    /// Scans `message` within the timeout: each server in turn from the next one, until one
    /// answers or the time is spent.
    pub fn scan(&self, message: &[u8]) -> Finding {
        if message.len() > self.config.max_size {
            return Finding::TooLarge;
        }
        self.scans.fetch_add(1, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_millis(self.config.timeout_ms);
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut errors = Vec::new();
        for i in 0..self.servers.len() {
            let server = &self.servers[(start + i) % self.servers.len()];
            match ask(server, message, deadline) {
                Ok(finding) => {
                    *self.last_error.lock() = None;
                    if matches!(finding, Finding::Virus(_)) {
                        self.viruses.fetch_add(1, Ordering::Relaxed);
                    }
                    return finding;
                }
                Err(e) => errors.push(e),
            }
            if Instant::now() >= deadline {
                break;
            }
        }
        let reason = errors.join("; ");
        self.failures.fetch_add(1, Ordering::Relaxed);
        let first = self.last_error.lock().replace(reason.clone()).is_none();
        if first {
            tracing::warn!(error = %reason, "clamd failed; scans go on without antivirus");
        }
        Finding::Failed(reason)
    }
}

/// One INSTREAM exchange with `server` before `deadline`.
fn ask(server: &Endpoint, message: &[u8], deadline: Instant) -> Result<Finding, String> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| "timed out".to_string())
    };
    match server {
        Endpoint::Unix(path) => {
            let s =
                UnixStream::connect(path).map_err(|e| format!("unix:{}: {e}", path.display()))?;
            exchange(s, message, left).map_err(|e| format!("unix:{}: {e}", path.display()))
        }
        Endpoint::Tcp(addr) => {
            let addrs: Vec<SocketAddr> = addr
                .to_socket_addrs()
                .map_err(|e| format!("{addr}: {e}"))?
                .collect();
            let first = addrs.first().ok_or_else(|| format!("{addr}: no address"))?;
            let s =
                TcpStream::connect_timeout(first, left()?).map_err(|e| format!("{addr}: {e}"))?;
            exchange(s, message, left).map_err(|e| format!("{addr}: {e}"))
        }
    }
}

/// A stream clamd is reached on, with per-call timeouts.
trait Socket: Read + Write {
    fn timeouts(&self, d: Duration) -> std::io::Result<()>;
}

impl Socket for UnixStream {
    fn timeouts(&self, d: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(d))?;
        self.set_write_timeout(Some(d))
    }
}

impl Socket for TcpStream {
    fn timeouts(&self, d: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(d))?;
        self.set_write_timeout(Some(d))
    }
}

fn exchange(
    mut s: impl Socket,
    message: &[u8],
    left: impl Fn() -> Result<Duration, String>,
) -> Result<Finding, String> {
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timed out".to_string(),
        _ => e.to_string(),
    };
    s.timeouts(left()?).map_err(io)?;
    s.write_all(b"zINSTREAM\0").map_err(io)?;
    for chunk in message.chunks(CHUNK_BYTES) {
        s.timeouts(left()?).map_err(io)?;
        let len = u32::try_from(chunk.len()).unwrap_or(u32::MAX);
        s.write_all(&len.to_be_bytes()).map_err(io)?;
        s.write_all(chunk).map_err(io)?;
    }
    s.write_all(&0u32.to_be_bytes()).map_err(io)?;
    let mut reply = Vec::with_capacity(64);
    let mut buf = [0u8; 512];
    loop {
        s.timeouts(left()?).map_err(io)?;
        let n = s.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        if reply.contains(&0) || reply.len() > MAX_REPLY_BYTES {
            break;
        }
    }
    parse_reply(&reply)
}

/// `stream: OK`, `stream: NAME FOUND`, else an error (clamd's own `... ERROR`, or garbage).
fn parse_reply(reply: &[u8]) -> Result<Finding, String> {
    let end = reply.iter().position(|&b| b == 0).unwrap_or(reply.len());
    let text = String::from_utf8_lossy(&reply[..end.min(MAX_REPLY_BYTES)]);
    let text = text.trim();
    let Some(body) = text.strip_prefix("stream: ") else {
        return Err(format!("unexpected reply {:?}", printable(text, 64)));
    };
    if body == "OK" {
        return Ok(Finding::Clean);
    }
    if let Some(name) = body.strip_suffix(" FOUND") {
        let name = printable(name, MAX_NAME_CHARS);
        if !name.is_empty() {
            return Ok(Finding::Virus(name));
        }
    }
    Err(format!("clamd: {}", printable(body, 128)))
}

/// Printable ASCII of `s`, at most `max` characters: a name that reaches a log line, a header
/// or an SMTP reply carries no control characters.
fn printable(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(max)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_strictly() {
        assert_eq!(parse_reply(b"stream: OK\0"), Ok(Finding::Clean));
        assert_eq!(
            parse_reply(b"stream: Eicar-Test-Signature FOUND\0"),
            Ok(Finding::Virus("Eicar-Test-Signature".into()))
        );
        assert_eq!(
            parse_reply(b"stream: Bad\x1b[31mName FOUND\0"),
            Ok(Finding::Virus("Bad[31mName".into()))
        );
        for bad in [
            &b"INSTREAM size limit exceeded. ERROR\0"[..],
            b"stream: FOUND\0",
            b"\xff\xfe garbage",
            b"",
            b"stream: something ERROR\0",
        ] {
            assert!(parse_reply(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn options_are_checked() {
        let ok = AntivirusConfig {
            servers: vec!["unix:/run/clamav/clamd.ctl".into(), "127.0.0.1:3310".into()],
            ..AntivirusConfig::default()
        };
        assert!(ok.validate(10_000).is_ok());
        for (config, message) in [
            (
                AntivirusConfig {
                    servers: vec!["clamd".into()],
                    ..AntivirusConfig::default()
                },
                "antivirus.servers: \"clamd\" is neither unix:PATH nor HOST:PORT",
            ),
            (
                AntivirusConfig {
                    timeout_ms: 10_000,
                    ..ok.clone()
                },
                "antivirus.timeout_ms must be greater than 0 and below server.scan_timeout_ms (10000)",
            ),
            (
                AntivirusConfig {
                    action: "explode".into(),
                    ..AntivirusConfig::default()
                },
                "antivirus.action \"explode\" is not an action (reject, soft reject, quarantine, discard, add header, ...)",
            ),
        ] {
            assert_eq!(config.validate(10_000).unwrap_err().to_string(), message);
        }
        assert!(Antivirus::new(&AntivirusConfig::default()).is_none());
    }

    /// A server that accepts and never answers, and one that answers garbage: failures within
    /// the timeout, never a hang; the next scan that works clears the health.
    #[test]
    fn silent_and_garbage_servers_fail_within_the_timeout() {
        use std::net::TcpListener;
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let garbage = TcpListener::bind("127.0.0.1:0").unwrap();
        let garbage_addr = garbage.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in garbage.incoming().flatten() {
                let mut s = s;
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\n");
                let _ = s.shutdown(std::net::Shutdown::Write);
                let _ = s.read_to_end(&mut Vec::new());
            }
        });
        let config = |addr: SocketAddr| AntivirusConfig {
            servers: vec![addr.to_string()],
            timeout_ms: 300,
            ..AntivirusConfig::default()
        };
        let av = Antivirus::new(&config(silent.local_addr().unwrap())).unwrap();
        let t = Instant::now();
        let Finding::Failed(why) = av.scan(&vec![b'x'; 200_000]) else {
            panic!("not a failure");
        };
        assert!(why.contains("timed out"), "{why}");
        assert!(
            t.elapsed() < Duration::from_millis(1_000),
            "{:?}",
            t.elapsed()
        );
        assert!(av.degraded().is_some());
        let av = Antivirus::new(&config(garbage_addr)).unwrap();
        let Finding::Failed(why) = av.scan(b"Subject: x\r\n\r\nhi\r\n") else {
            panic!("not a failure");
        };
        assert!(why.contains("unexpected reply"), "{why}");
        // Nothing listening.
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let av = Antivirus::new(&config(closed)).unwrap();
        assert!(matches!(av.scan(b"x"), Finding::Failed(_)));
        let small = AntivirusConfig {
            max_size: 10,
            ..config(closed)
        };
        assert_eq!(
            Antivirus::new(&small).unwrap().scan(&[0; 11]),
            Finding::TooLarge
        );
    }
}
